"""Tuning records of the modelled engines, applied at compile time: Sextans K0/N0/D/P, accelerator approaches.

``tvm-ext tune sextans`` and ``tvm-ext tune accel`` write *knob records*
(``knob_records.json`` of a :mod:`tvm_ext.tuning` database): engine
parameters or ``Approach`` choices with their simulated cycles.  A model's
offloaded parts are rarely the exact workload a record was tuned on, so a
record's best knobs are treated as a **candidate**, checked by the same
simulator the record came from:

* **Sextans**: one engine configuration serves every offloaded product of a
  model (the BYOC codegen takes one config).  Candidates are the default
  configuration plus the best knobs of every Sextans task on the same
  platform; the one with the fewest modelled cycles summed over the model's
  sparse matrices wins (ties keep the default).
* **Accelerator**: candidates are the default heuristics plus the best
  knobs of every accelerator task on the same system graph, wrapped in an
  :class:`~tvm_ext.accel.approach.ApproachChoice`; the codegen schedules
  each offloaded function with every candidate and keeps the fewest cycles.

Either way a record never makes a compiled model slower (in the model)
than the default, and the report names the record that was applied.

>>> import tempfile
>>> best_records(knob_report(tempfile.mkdtemp()), "sextans")
[]
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

__all__ = ["KnobRecord", "best_records", "knob_report", "tuned_sextans_config", "tuned_accel_approach",
           "EngineTuning"]


@dataclass
class KnobRecord:
    """The best record of one knob task in a tuning database."""

    task: str
    spec: dict
    knobs: dict
    cycles: float
    default_cycles: float | None = None


@dataclass
class EngineTuning:
    """What the tuning records did to one engine of a compiled model (for the report)."""

    engine: str
    knobs: dict
    source: str  # "default", "explicit config" or the task key of the record applied
    cycles: float | None = None  # modelled cycles of the model's offloaded parts with ``knobs``
    default_cycles: float | None = None
    candidates: int = 0
    detail: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "knobs": dict(self.knobs), "source": self.source, "cycles": self.cycles,
                "default_cycles": self.default_cycles, "candidates": self.candidates, "detail": list(self.detail)}


def knob_report(tuning_db: Any):
    """The checked contents (``DatabaseReport``) of a ``tuning_db`` directory or ``TuningDatabase``; else None.

    Read once per compile; every engine takes its records from it.
    """
    from tvm_ext.tuning.database import check_database

    root = getattr(tuning_db, "root", tuning_db)
    if isinstance(root, (str, os.PathLike)) and os.path.isdir(root):
        return check_database(root)
    return None


def best_records(rep: Any, kind: str, where: Callable[[dict], bool] | None = None) -> list[KnobRecord]:
    """The best (fewest-cycles) record of each ``kind`` task in a :func:`knob_report` whose spec passes ``where``."""
    if rep is None:
        return []
    specs = {t["task"]: t for t in rep.tasks if t.get("spec", {}).get("kind") == kind}
    best: dict[str, KnobRecord] = {}
    for r in rep.knob_records:
        entry = specs.get(r["task"])
        cost = r.get("cost")
        if entry is None or cost is None or not math.isfinite(float(cost)):
            continue
        if where is not None and not where(entry["spec"]):
            continue
        if r["task"] not in best or float(cost) < best[r["task"]].cycles:
            default = (entry.get("default") or {}).get("cost")
            best[r["task"]] = KnobRecord(r["task"], entry["spec"], dict(r["knobs"]), float(cost),
                                         float(default) if default is not None else None)
    return sorted(best.values(), key=lambda k: k.task)


def tuned_sextans_config(rep: Any, matrices: Sequence[tuple[Any, int]], config: Any,
                         platform: str) -> tuple[Any, EngineTuning]:
    """The engine configuration for a model's sparse products ``[(A, n), ...]`` on ``platform``.

    ``config`` is the base :class:`~tvm_ext.spmm_engine.EngineConfig`; a
    record's K0/N0/D/P replace its fields (``rep``: a :func:`knob_report`).
    Returns ``(config, EngineTuning)``.
    """
    from tvm_ext.spmm_engine import model, paper_knobs, preprocess, resolve_config

    records = best_records(rep, "sextans", lambda s: s.get("platform") == platform)
    base = paper_knobs(config)
    if not records or not matrices:
        return config, EngineTuning("sextans", base, "default", candidates=len(records))

    def total(cfg) -> float:  # Sextans Eqs. 6-10 over every offloaded product
        return float(sum(model(preprocess(A, cfg), int(n), platform).cycles for A, n in matrices))

    default_cycles = total(config)
    best = (default_cycles, config, "default")
    seen = {tuple(sorted(base.items()))}
    for rec in records:
        knobs = {k: rec.knobs[k] for k in base if k in rec.knobs}
        if tuple(sorted(knobs.items())) in seen:
            continue
        seen.add(tuple(sorted(knobs.items())))
        cfg = resolve_config(config, **knobs)
        cycles = total(cfg)
        if cycles < best[0]:
            best = (cycles, cfg, rec.task)
    cycles, cfg, source = best
    return cfg, EngineTuning("sextans", paper_knobs(cfg), source, cycles, default_cycles, len(records),
                             [f"{r.task}: {r.spec.get('matrix')} n={r.spec.get('n')} best {r.knobs}"
                              for r in records])


def _same_system(name: Any, system: Any) -> bool:
    """Whether a record's system (a config name or path) is the graph ``system``."""
    from tvm_ext.accel.system_graph import load_system
    from tvm_ext.errors import TvmExtError

    try:
        return load_system(name).to_json() == system.to_json()
    except (TvmExtError, OSError, ValueError):
        return False


def tuned_accel_approach(rep: Any, system: Any) -> tuple[Any, EngineTuning]:
    """An :class:`~tvm_ext.accel.approach.ApproachChoice` of the default and the records' approaches.

    ``rep`` is a :func:`knob_report`; ``system`` the
    :class:`~tvm_ext.accel.system_graph.SystemGraph` compiled for (records
    tuned on another graph are ignored).  Returns ``(None, ...)``
    when the database holds no accelerator record for it.
    """
    from tvm_ext.accel.approach import ApproachChoice
    from tvm_ext.tuning.model_knobs import KnobApproach, accel_default

    records = best_records(rep, "accel", lambda s: _same_system(s.get("system"), system))
    default = accel_default()
    distinct = []
    for rec in records:
        if rec.knobs != default and rec.knobs not in [r.knobs for r in distinct]:
            distinct.append(rec)
    if not distinct:
        return None, EngineTuning("accel", default, "default", candidates=len(records))
    choice = ApproachChoice([None] + [KnobApproach(**r.knobs) for r in distinct])
    return choice, EngineTuning("accel", default, "per function: fewest cycles of default and records",
                                candidates=len(distinct) + 1,
                                detail=[f"{r.task}: {r.spec.get('workload')} {r.spec.get('shape')} best {r.knobs}"
                                        for r in distinct])
