"""Timing primitives shared by the CLI, the demo and ``bench/``.

* :func:`time_tvm` times a compiled TVM function with ``time_evaluator``.
* :func:`time_python` times a Python peer with repeat + min/median.
* :func:`numpy_time` times a numpy (OpenBLAS) peer on its threads and on one;
  :func:`settle` lets spinning worker threads park first.

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

__all__ = ["Timing", "time_tvm", "time_python", "numpy_time", "settle"]


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


def settle(seconds: float = 0.3) -> None:
    """Let the previous runtime's spinning worker threads (TVM's or OpenBLAS's) park before timing."""
    time.sleep(seconds)


def _openblas_threads():
    """(get, set) of numpy's bundled OpenBLAS thread count, or None when not found."""
    import ctypes
    import glob
    import os

    import numpy as np

    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "libscipy_openblas*.so"))
    for path in libs:
        lib = ctypes.CDLL(path)
        for get, put in (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                         ("openblas_get_num_threads", "openblas_set_num_threads")):
            if hasattr(lib, get) and hasattr(lib, put):
                return getattr(lib, get), getattr(lib, put)
    return None


def numpy_time(fn: Callable[[], Any]) -> tuple[float, float]:
    """(seconds of ``fn`` with OpenBLAS on its current threads, best of that and one thread).

    On a loaded 2-core machine OpenBLAS's spinning threads can stall; the second
    number is the conservative peer.

    >>> t, best = numpy_time(lambda: sum(range(10)))
    >>> 0 < best <= t
    True
    """
    threads = _openblas_threads()
    times = []
    counts = [None] if threads is None else list(dict.fromkeys((threads[0](), 1)))
    for n in counts:
        if n is not None:
            threads[1](n)
        settle()
        times.append(time_python(fn, repeat=5, min_repeat_s=0.1).min)
    if threads is not None:
        threads[1](counts[0])
    return times[0], min(times)
