"""Schedule the legalized PrimFuncs of a Relax module for the host CPU.

Each PrimFunc left for llvm (after offloading) gets, in order of preference:

1. **tuned**: the best MetaSchedule record for it in ``tuning_db`` (a JSON
   database, e.g. from :mod:`tvm_ext.tuning`);
2. **tensorized**: its matmul/conv blocks mapped onto x86 instructions with
   ``tensorize`` (``find_mappings`` -> ``plan_mappings`` -> ``emit.apply``,
   the micro-kernel implementation), other blocks given the default schedule.
   With ``tensorize="measure"`` (the default) the tensorized kernel is kept only
   when it measures faster than the other candidates on random inputs (all
   built through the kernel cache, timed by
   :mod:`~tvm_ext.compile_steps.candidate_timing` with their weight packing
   split out, as a model with constant weights runs them); ``"always"`` keeps it
   whenever it maps.  Its variants (:func:`target_variants`,
   :func:`loop_order_variants`) differ in tile, loop order (kernel order where
   the whole weight fits in L2) and, for a padded convolution, padding per
   thread (:mod:`~tvm_ext.compile_steps.conv_padding`).
   Measured beside it where their shapes fit:
   **depthwise** (:mod:`~tvm_ext.compile_steps.depthwise_schedule`, NHWC
   depthwise convolutions) and **gemv** (:mod:`~tvm_ext.compile_steps.gemv_schedule`,
   matmuls of at most 32 rows with a prepacked weight);
3. **default**: outer spatial loops in parallel when the block is big enough,
   the innermost loop of element-wise blocks vectorised.

Decisions are cached per (structural hash, target), so one kernel shape is
mapped and measured once per process.

>>> from tvm import te
>>> A = te.placeholder((64, 64), name="A")
>>> B = te.compute((64, 64), lambda i, j: A[i, j] * 2, name="B")
>>> f, how = schedule_primfunc(te.create_prim_func([A, B]), "default_kernel")
>>> how.how, bool(f.attrs["tirx.is_scheduled"])
('default', True)
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np

from tvm_ext.compile_steps.block_queries import PARALLEL_MIN_WORK, param_buffers
from tvm_ext.compile_steps.block_queries import extent as _extent
from tvm_ext.compile_steps.block_queries import root_blocks as _root_blocks
from tvm_ext.compile_steps.candidate_timing import measure_candidates, prepacked_compute, tvm_ffi_hash
from tvm_ext.compile_steps.default_schedule import default_all as _default_all
from tvm_ext.compile_steps.default_schedule import (default_schedule, inline_copies,  # noqa: F401
                                                    inline_elementwise, transpose_tiles)
from tvm_ext.compile_steps.kernel_variants import (KERNEL_ORDER, PAD_PER_THREAD, VARIANTS,  # noqa: F401
                                                  loop_order_variants, register_file_rows, target_variants)

__all__ = ["KernelSchedule", "schedule_primfunc", "schedule_module", "default_schedule", "tuning_database",
           "inline_copies", "PARALLEL_MIN_WORK"]


@dataclass
class KernelSchedule:
    """How one llvm PrimFunc was scheduled, and why."""

    name: str
    how: str  # "tuned" | "tensorized" | "depthwise" | "default"
    detail: str = ""
    reason: str = ""
    candidates: dict[str, float] = field(default_factory=dict)  # measured seconds per candidate

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "how": self.how, "detail": self.detail, "reason": self.reason,
                "candidates": dict(self.candidates)}


# ---------------------------------------------------------------------------
# Tensorize
# ---------------------------------------------------------------------------
def _float_params(func) -> bool:
    return all(str(b.dtype).startswith("float") for b in param_buffers(func))


def _reduction_work(sch, name: str) -> int:
    try:
        return int(np.prod([_extent(sch, lp) for lp in sch.get_loops(sch.get_sblock(name))]))
    except (TypeError, ValueError):
        return 0


def tensorize_primfunc(func, **knobs: Any) -> tuple[Any, list[str], str]:
    """(schedule or None, emitted intrinsic per block, reason when nothing was tensorized).

    ``knobs`` go to :func:`tensorize.emit.apply` (``pack``, ``tiles``, ``outer``), except
    ``pad=PAD_PER_THREAD``: the output rows run in one chunk per thread and each padding block is
    computed inside its chunk (:mod:`.conv_padding`); None when that does not apply."""
    from tvm import s_tir

    from tensorize.emit import apply
    from tensorize.kernels import compute_blocks, plan_mappings
    from tensorize.search import find_mappings
    from tvm_ext.errors import TvmExtError

    pad = knobs.pop("pad", None)
    if pad is not None:
        from tvm_ext.compile_steps.conv_padding import row_chunks
        from tvm_ext.target import num_threads

        if pad != PAD_PER_THREAD:
            from tvm_ext.errors import ConfigError

            raise ConfigError(f"pad={pad!r}: the only padding schedule is {PAD_PER_THREAD!r}")
        threads = num_threads()
        knobs["parallel_loops"] = row_chunks(threads)
    try:
        blocks = compute_blocks(func)
    except Exception as e:  # noqa: BLE001 - a func TVM cannot schedule: leave it
        return None, [], f"not schedulable ({type(e).__name__})"
    if not blocks:
        return None, [], "no reduction block"
    if not _float_params(func):
        return None, [], "non-float operands"
    try:
        plan = plan_mappings(func, find_mappings(func, "x86", block=blocks))
    except TvmExtError as e:
        return None, [], f"no x86 mapping ({str(e).splitlines()[0][:100]})"
    except Exception as e:  # noqa: BLE001 - the mapper cannot import this kernel
        return None, [], f"mapper cannot read it ({type(e).__name__}: {str(e).splitlines()[0][:80]})"
    if plan.program is not None:
        return None, [], f"needs structural transforms {plan.structural} (kept as written)"
    sch = s_tir.Schedule(func)
    done: list[str] = []
    emitted: list[str] = []
    for name, cands in plan.candidates.items():
        par = _reduction_work(sch, name) >= PARALLEL_MIN_WORK
        for m in cands[:6]:
            trial = s_tir.Schedule(sch.mod)  # Schedule.copy() fails on some multi-block funcs
            try:
                e = apply(trial, trial.get_sblock(name), m, "micro", parallel=par, **knobs)
            except TvmExtError:
                continue
            except Exception:  # noqa: BLE001 - a TVM schedule error on this candidate: try the next
                continue
            sch = trial
            done.append(name)
            emitted.append(f"{name}: {m.instruction.name} -> {e.intrin}"
                           + (f" (packs {', '.join(e.packed)})" if e.packed else ""))
            break
    if not done:
        return None, [], "no mapping fits the micro-kernel"
    if pad is not None:
        from tvm_ext.compile_steps.conv_padding import padded_per_thread

        return padded_per_thread(sch, threads, set(done) | set(plan.candidates), emitted)
    for b in _root_blocks(sch):
        if sch.get(b).name_hint not in done and sch.get(b).name_hint not in plan.candidates:
            default_schedule(sch, b)
    return sch, emitted, ""


# ---------------------------------------------------------------------------
# Tuning records
# ---------------------------------------------------------------------------
def tuning_database(db: Any):
    """A MetaSchedule database from a directory, a ``TuningDatabase`` or a MetaSchedule database.

    A directory is checked first (a corrupt file is a :class:`TuningError`, nothing is
    written); one without MetaSchedule files holds no records for llvm kernels (None).
    """
    from pathlib import Path

    from tvm.s_tir import meta_schedule as ms

    from tvm_ext.errors import TuningError

    if db is None or isinstance(db, ms.database.Database):
        return db
    root = getattr(db, "root", db)  # a tvm_ext.tuning TuningDatabase: read its directory
    if not isinstance(root, (str, Path)):
        raise TuningError(f"tuning_db: expected a directory, a TuningDatabase or a MetaSchedule database, "
                          f"got {type(db).__name__}")
    root = Path(root)
    if not root.is_dir():
        raise TuningError(f"tuning database {str(root)!r}: no such directory")
    try:
        from tvm_ext.tuning.database import check_database
    except ImportError:  # the tuning package is optional here
        check_database = None
    if check_database is not None:
        check_database(root)
    names = ("database_workload.json", "database_tuning_record.json")
    if not all((root / n).is_file() for n in names):
        return None
    try:
        return ms.database.JSONDatabase(work_dir=str(root), allow_missing=False)
    except Exception as e:  # noqa: BLE001 - MetaSchedule's own parse error
        raise TuningError(f"tuning database {str(root)!r}: MetaSchedule cannot read it ({e})") from None


def _normalized(func):
    """The IRModule MetaSchedule keys a PrimFunc by (as its relax integration does)."""
    import tvm

    f = func
    if not (f.attrs and "global_symbol" in f.attrs):
        f = f.with_attr("global_symbol", "main")
    return tvm.IRModule({"main": f.with_attr("tirx.noalias", True)})


def _tuned(func, db, target):
    if db is None:
        return None
    try:
        sch = db.query_schedule(_normalized(func), target, "main")
    except Exception:  # noqa: BLE001 - a record that does not replay on this func
        return None
    return sch


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------
_lock = threading.Lock()
_decisions: dict[tuple, tuple[Any, KernelSchedule]] = {}


def schedule_primfunc(func, name: str, *, target: Any = None, db: Any = None,
                      tensorize: str = "measure") -> tuple[Any, KernelSchedule]:
    """The scheduled PrimFunc (``tirx.is_scheduled`` set) and how it was scheduled."""
    from tvm_ext.errors import ConfigError
    from tvm_ext.target import resolve_target

    if tensorize not in ("measure", "always", "never"):
        raise ConfigError(f"tensorize={tensorize!r}: choose 'measure', 'always' or 'never'")
    tgt = resolve_target(target)
    key = (tvm_ffi_hash(func), str(tgt), tensorize, id(db) if db is not None else None)
    with _lock:
        hit = _decisions.get(key)
    if hit is not None:
        return hit[0], replace(hit[1], name=name)
    result = _decide(func, name, tgt, db, tensorize)
    with _lock:
        _decisions[key] = result
    return result


DEPTHWISE_DETAIL = "depthwise NHWC: channel vectors, window unrolled, rows parallel"


def _depthwise_candidate(func, tgt):
    """The :mod:`.depthwise_schedule` of ``func`` (a PrimFunc) or None when it is not a depthwise convolution."""
    from tvm_ext.compile_steps.depthwise_schedule import depthwise_schedule
    from tvm_ext.target import hardware_facts

    facts = hardware_facts(tgt)
    sch = depthwise_schedule(func, facts.lanes("float32"), facts.vector_registers, facts.cores)
    return None if sch is None else sch.mod["main"]


def _decide(func, name: str, tgt, db, tensorize: str) -> tuple[Any, KernelSchedule]:
    def done(sch_func, how: KernelSchedule):
        return sch_func.with_attr("tirx.is_scheduled", True), how

    tuned = _tuned(func, db, tgt)
    if tuned is not None:
        f = tuned.mod["main"]
        symbol = func.attrs.get("global_symbol") if func.attrs is not None else None
        f = f.with_attr("global_symbol", symbol) if symbol is not None else f.without_attr("global_symbol")
        return done(f, KernelSchedule(name, "tuned", "MetaSchedule record from tuning_db"))
    func = inline_copies(func)
    default = _default_all(func).mod["main"]
    if tensorize == "never":
        return done(default, KernelSchedule(name, "default", reason="tensorize='never'"))
    try:
        with tgt:  # the micro-kernel's tile follows this target's hardware facts
            sch, emitted, why = tensorize_primfunc(func)
    except Exception as e:  # noqa: BLE001 - a TVM failure while mapping: keep the default schedule
        sch, emitted, why = None, [], f"tensorize failed ({type(e).__name__}: {str(e).splitlines()[0][:80]})"
    depthwise = _depthwise_candidate(func, tgt)
    if sch is None and depthwise is None:
        return done(default, KernelSchedule(name, "default", reason=why))
    if sch is None:  # only the depthwise rule: keep it if it beats the default schedule
        try:
            times = measure_candidates({"depthwise": depthwise, "default": default}, tgt)
        except Exception:  # noqa: BLE001 - cannot measure here: keep the default schedule
            return done(default, KernelSchedule(name, "default", reason=why))
        if times["depthwise"] < times["default"]:
            return done(depthwise, KernelSchedule(
                name, "depthwise", DEPTHWISE_DETAIL,
                f"{times['default'] / times['depthwise']:.2f}x faster than the default schedule", times))
        return done(default, KernelSchedule(name, "default", reason=why, candidates=times))
    variants = {"tensorized": (sch.mod["main"], "; ".join(emitted))}
    if tensorize == "always":
        return done(variants["tensorized"][0], KernelSchedule(name, "tensorized", variants["tensorized"][1]))
    for knobs in target_variants(tgt) + loop_order_variants(func, tgt):
        try:
            with tgt:
                alt, alt_emitted, _ = tensorize_primfunc(func, **knobs)
        except Exception:  # noqa: BLE001 - a variant is optional
            continue
        seen = {tvm_ffi_hash(f) for f, _ in variants.values()}
        if alt is not None and tvm_ffi_hash(alt.mod["main"]) not in seen:
            label = "tensorized " + ", ".join(f"{k}={v}" for k, v in knobs.items())
            variants[label] = (alt.mod["main"], "; ".join(alt_emitted))
    if depthwise is not None:
        variants["depthwise"] = (depthwise, DEPTHWISE_DETAIL)
    from tvm_ext.compile_steps.gemv_schedule import GEMV_DETAIL, gemv_candidate

    gemv = gemv_candidate(func, tgt)  # (kernel, the same kernel on a prepacked weight: what is timed)
    if gemv is not None:
        variants["gemv"] = (gemv[0], GEMV_DETAIL)
    try:
        timed = {k: prepacked_compute(f, tgt) for k, (f, _) in variants.items()}
        timed.update({"gemv": gemv[1]} if gemv else {})
        times = measure_candidates({**timed, "default": default}, tgt)
    except Exception as e:  # noqa: BLE001 - cannot measure here: trust the mapping
        why = f"not measured ({type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''})"
        return done(variants["tensorized"][0], KernelSchedule(name, "tensorized", variants["tensorized"][1], why))
    best = min(times, key=times.get)
    if best == "default":
        first = min((k for k in times if k != "default"), key=times.get)
        return done(default, KernelSchedule(
            name, "default", variants[first][1],
            f"tensorized was slower ({times[first] * 1e6:.1f} us vs {times['default'] * 1e6:.1f} us)", times))
    return done(variants[best][0], KernelSchedule(
        name, best if best in ("depthwise", "gemv") else "tensorized", variants[best][1],
        f"{best}: {times['default'] / times[best]:.2f}x faster than the default schedule", times))


def schedule_module(mod, *, target: Any = None, db: Any = None, tensorize: str = "measure"
                    ) -> tuple[Any, dict[str, KernelSchedule]]:
    """Schedule every unscheduled PrimFunc of ``mod``; returns the module and the decisions by name."""
    import tvm

    out: dict[str, KernelSchedule] = {}
    for gv, func in list(mod.functions.items()):
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        if func.attrs is not None and func.attrs.get("tirx.is_scheduled", False):
            continue
        new, how = schedule_primfunc(func, gv.name_hint, target=target, db=db, tensorize=tensorize)
        mod[gv] = new
        out[gv.name_hint] = how
    return mod, out
