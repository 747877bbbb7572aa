"""A few x86 emission knobs tried and measured: register tile and loop order (:func:`quick_tune`).

It sits with the kernels rather than in :mod:`tvm_ext.tuning` because it uses
only ``tensorize`` and the base layer (tests/test_architecture.py: ``tensorize``
may not import the tuning layer), and ``tensorize`` exports it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .build import Tensorized, tensorized
from .planning import compute_blocks
from .zoo import Kernel, kernel_from_prim_func

__all__ = ["DEFAULT_KNOBS", "TuneResult", "quick_tune"]

#: The knobs :func:`quick_tune` tries: register tile (rows x vector lanes) and outer loop order.
DEFAULT_KNOBS: tuple[dict, ...] = tuple(
    {"tiles": {"rows": r, "vector": v}, "outer": outer, "pack": pack}
    for (r, v) in ((8, 32), (12, 32), (4, 64), (6, 64), (16, 16), (24, 16))
    for outer, pack in (("panel", "auto"), ("kernel", "auto"), ("kernel", "never"))
)


@dataclass
class TuneResult:
    """The fastest knob setting of :func:`quick_tune`, every trial, and the total search time."""

    best: Tensorized
    knobs: dict
    seconds_per_call: float
    search_seconds: float
    trials: list[dict]


def quick_tune(kernel: Kernel | Any, isa: str = "x86", *, impl: str = "micro", knobs: Sequence[dict] = DEFAULT_KNOBS,
               target: Any = None, repeat: int = 3, min_repeat_ms: int = 20) -> TuneResult:
    """Map ``kernel`` once, build it under each knob setting, time each, keep the fastest.

    Settings that end up with the same tiles (a 16-wide kernel clamps every
    vector width to 16) are measured once.  ``search_seconds`` counts mapping,
    builds and measurements.
    """
    import time

    import tvm

    from tensorize.search import find_mappings

    t0 = time.perf_counter()
    if not isinstance(kernel, Kernel):
        kernel = kernel_from_prim_func(kernel)
    func = kernel.prim_func()
    mappings = find_mappings(func, isa, block=compute_blocks(func))
    dev = tvm.cpu(0)
    args = [tvm.runtime.tensor(a, dev) for a in kernel.random_inputs()]
    _, out_shape, out_dtype = kernel.arg_specs()[-1]
    args.append(tvm.runtime.empty(out_shape, out_dtype, dev))
    from tvm_ext.errors import ScheduleError, TuningError

    trials, seen, best = [], set(), None
    for kn in knobs:
        try:
            t = tensorized(kernel, isa, impl=impl, target=target, mappings=mappings, **kn)
        except ScheduleError as e:  # e.g. a tile over the register budget: skip the setting
            trials.append({"knobs": kn, "error": str(e).splitlines()[0]})
            continue
        key = (tuple((b, tuple(sorted(e.tiles.items())), tuple(e.packed)) for b, e in t.emitted.items()),
               kn.get("outer"))
        if key in seen:
            continue
        seen.add(key)
        res = t.module.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)(*args)
        sec = float(min(res.results))
        trials.append({"knobs": kn, "tiles": {b: e.tiles for b, e in t.emitted.items()}, "seconds": sec})
        if best is None or sec < best[0]:
            best = (sec, t, kn)
    if best is None:
        reasons = "; ".join(t.get("error", "") for t in trials[:3])
        raise TuningError(f"quick_tune {kernel.name}: no knob setting could be built ({reasons})")
    return TuneResult(best[1], best[2], best[0], time.perf_counter() - t0, trials)
