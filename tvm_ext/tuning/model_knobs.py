"""Knob spaces and simulated costs of the two hardware models.

* **Sextans** (:mod:`tvm_ext.spmm_engine`): K0 (window), N0 (PUs per PE),
  D (RAW distance) and P (PEs).  The cost is the modelled cycle count of the
  *real* scheduled non-zero stream (``preprocess`` + ``model``, Eqs. 6-10),
  so a knob changes the schedule's bubbles, windows and passes, not a
  formula.  P x N0 is capped at the prototype's 64 x 8 = 512 PUs (the FPGA's
  arithmetic budget) and D starts at 7, the fastest float adder the paper
  gives ("7 to 10 cycles"), so the tuner trades resources instead of adding
  them.
* **The matrix accelerator** (:mod:`tvm_ext.accel`): an
  :class:`~tvm_ext.accel.approach.Approach` whose choices are knobs
  (:class:`KnobApproach`): the tile order (``fused`` demand-driven
  unrolling, ``op``-major, or ``program`` order) and the device allocation
  (``balanced``: the heuristic's load + transfer score with a tunable
  ``locality_weight``; ``round-robin`` over the candidate units; ``local``:
  the unit already holding most operands).  The cost is the cycle count of
  the recorded instruction stream on the system's timing model.

>>> space = sextans_space(None)
>>> sextans_default() in space.all_points()
True
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tvm_ext.errors import ConfigError, InputError
from tvm_ext.tuning.knob_tuner import Knob, KnobSpace

__all__ = [
    "sextans_space", "sextans_default", "sextans_cycles", "SEXTANS_PU_BUDGET",
    "KnobApproach", "accel_space", "accel_default", "accel_cycles", "accel_workload",
]

#: P x N0 of the U280 prototype (64 PEs x 8 PUs).
SEXTANS_PU_BUDGET = 64 * 8


def sextans_space(A: Any) -> KnobSpace:
    """K0 in powers of two up to the column field's limit (and A's width), N0, D, P."""
    from tvm_ext.spmm_engine import EngineConfig

    max_window = 1 << EngineConfig().col_bits
    cols = int(A.shape[1]) if A is not None else max_window
    windows = [w for w in (256, 512, 1024, 2048, 4096, 8192, 16384) if w <= max_window]
    cover = min([w for w in windows if w >= cols], default=windows[-1])  # wider windows add nothing
    windows = sorted({w for w in windows if w <= cover} | {EngineConfig().window})

    def budget(cfg: dict) -> str | None:
        if cfg["P"] * cfg["N0"] > SEXTANS_PU_BUDGET:
            return f"P x N0 = {cfg['P'] * cfg['N0']} PUs exceeds the {SEXTANS_PU_BUDGET} of the prototype"
        return None

    return KnobSpace([Knob("K0", tuple(windows)), Knob("N0", (4, 8, 16, 32)), Knob("D", (7, 8, 9, 10, 11, 12)),
                      Knob("P", (16, 32, 64, 128))], constraint=budget)


def sextans_default() -> dict:
    """The prototype's parameters (``EngineConfig()``)."""
    from tvm_ext.spmm_engine import EngineConfig, paper_knobs

    return paper_knobs(EngineConfig())


def sextans_cycles(A: Any, n: int, knobs: dict, platform: str = "sextans") -> float:
    """Modelled cycles of ``A @ B`` (``n`` columns) with these engine parameters."""
    from tvm_ext.spmm_engine import model, preprocess, resolve_config

    cfg = resolve_config(None, K0=knobs["K0"], N0=knobs["N0"], D=knobs["D"], P=knobs["P"])
    return float(model(preprocess(A, cfg), int(n), platform).cycles)


# --------------------------------------------------------------------------- accelerator
TILE_ORDERS = ("fused", "op", "program")
DEVICE_POLICIES = ("balanced", "round-robin", "local")
LOCALITY_WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0)


def _approach_base():
    from tvm_ext.accel.approach import HeuristicApproach

    return HeuristicApproach


def KnobApproach(tile_order: str = "fused", device: str = "balanced", locality_weight: float = 1.0):  # noqa: N802
    """An :class:`~tvm_ext.accel.approach.Approach` whose tile order and device allocation are knobs.

    The other choices (homes, destinations, paths, eviction) stay the heuristics'.
    """
    if tile_order not in TILE_ORDERS:
        raise ConfigError(f"KnobApproach: tile_order must be one of {TILE_ORDERS}, got {tile_order!r}")
    if device not in DEVICE_POLICIES:
        raise ConfigError(f"KnobApproach: device must be one of {DEVICE_POLICIES}, got {device!r}")
    base = _approach_base()
    order_knob, device_knob, weight = tile_order, device, float(locality_weight)

    class _KnobApproach(base):
        name = f"knobs({order_knob},{device_knob},{weight:g})"

        def __init__(self):
            super().__init__(weight)
            self._rr = 0

        def tile_order(self, tiles):
            from tvm_ext.accel.tiles import fused_order, op_order

            fused = fused_order(tiles)
            if order_knob == "fused":
                return fused
            if order_knob == "op":
                return op_order(tiles, fused)
            return np.arange(tiles.n, dtype=np.int64)  # program order (tiles are created in dependence order)

        def device(self, sched, tile, candidates):
            if device_knob == "balanced":
                return super().device(sched, tile, candidates)
            sticky = sched.accumulator_devices(tile, candidates)
            if sticky:  # an accumulator must stay where its partial sums are
                return min(sticky, key=lambda d: sched.load[d])
            if device_knob == "round-robin":
                self._rr += 1
                return candidates[self._rr % len(candidates)]
            feats = sched.features("device", tile, candidates)  # column 3: operands already local
            best = max(range(len(candidates)), key=lambda i: (feats[i][3], -feats[i][0]))
            return candidates[best]

    return _KnobApproach()


def accel_space() -> KnobSpace:
    def weight_only_balanced(cfg: dict) -> str | None:
        if cfg["device"] != "balanced" and cfg["locality_weight"] != 1.0:
            return "locality_weight only affects the balanced device policy"
        return None

    return KnobSpace([Knob("tile_order", TILE_ORDERS), Knob("device", DEVICE_POLICIES),
                      Knob("locality_weight", LOCALITY_WEIGHTS)], constraint=weight_only_balanced)


def accel_default() -> dict:
    """The heuristic approach's choices."""
    return {"tile_order": "fused", "device": "balanced", "locality_weight": 1.0}


def accel_workload(name: str, shape: Sequence[int]):
    """A small accelerator workload: ``matmul`` (M K N, then relu) or ``gru`` (batch hidden)."""
    from tvm_ext.accel.workload import Workload

    if name == "matmul":
        if len(shape) != 3 or min(shape) < 1:
            raise InputError(f"accel matmul: --shape needs three positive sizes M K N, got {list(shape)}")
        M, K, N = (int(s) for s in shape)
        wl = Workload("matmul_relu")
        c = wl.matmul(wl.input("a", (M, K)), wl.weight("b", (K, N)), out="c")
        wl.relu(c, out="y")
        return wl
    if name == "gru":
        from tvm_ext.accel.gru import gru_cell

        if len(shape) != 2 or min(shape) < 1:
            raise InputError(f"accel gru: --shape needs two positive sizes BATCH HIDDEN, got {list(shape)}")
        return gru_cell(int(shape[0]), int(shape[1]))
    raise InputError(f"accel task: unknown workload {name!r}; workloads: matmul, gru")


def accel_cycles(workload, system: str, knobs: dict) -> float:
    """Cycles of the workload's instruction stream scheduled with :func:`KnobApproach` ``(**knobs)``."""
    from tvm_ext.accel.scheduler import schedule
    from tvm_ext.accel.timing import time_stream

    sched = schedule(workload, system, KnobApproach(**knobs))
    return float(time_stream(sched.stream, system).cycles)
