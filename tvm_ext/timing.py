"""Timing primitives shared by the CLI, the demo and ``bench/``.

* :func:`time_tvm` times a compiled TVM function with ``time_evaluator``.
* :func:`time_python` times a Python peer with repeat + min/median.

>>> t = time_python(lambda: sum(range(100)), repeat=3, min_repeat_s=0.001)
>>> len(t.results), t.min <= t.median
(3, True)
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["Timing", "time_tvm", "time_python"]


@dataclass(frozen=True)
class Timing:
    """Seconds per call: best, median and every repeat."""

    min: float
    median: float
    results: tuple[float, ...]


def time_tvm(module, func_name: str, *args, number: int = 1, repeat: int = 5,
             min_repeat_ms: int = 50, dev=None) -> Timing:
    """Time ``module[func_name](*args)`` with TVM's ``time_evaluator``.

    ``min_repeat_ms`` makes each repeat run long enough to be measured.
    """
    import tvm

    dev = dev or tvm.cpu(0)
    res = module.time_evaluator(func_name, dev, number=max(number, 1), repeat=repeat,
                                min_repeat_ms=min_repeat_ms)(*args)
    runs = tuple(float(x) for x in res.results)
    return Timing(min(runs), statistics.median(runs), runs)


def time_python(fn: Callable[[], Any], *, repeat: int = 5, min_repeat_s: float = 0.05,
                warmup: int = 1) -> Timing:
    """Time a Python callable: each repeat runs it enough times to last
    ``min_repeat_s``; returns per-call seconds (min and median over repeats)."""
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    number = max(1, int(math.ceil(min_repeat_s / once)))
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - t0) / number)
    return Timing(min(runs), statistics.median(runs), tuple(runs))
