"""Timing of schedule candidates: each candidate PrimFunc is built, run on random arguments and
timed in alternating rounds of single runs; a candidate far behind the leader stops early.

>>> alternating_best({"a": lambda: 2.0, "b": lambda: 1.0}, rounds=2)
{'a': 2.0, 'b': 1.0}
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["measure_candidates", "alternating_best", "param_buffers", "tvm_ffi_hash", "MEASURE_ROUNDS", "MEASURE_RUNS",
           "MEASURE_DROP_FACTOR"]


def param_buffers(func) -> list:
    """The buffers of a PrimFunc's parameters (TVM 0.27 params are buffers; older TVM maps handles)."""
    bmap = getattr(func, "buffer_map", None)
    return [bmap[p] if bmap else p for p in func.params]


def _random_args(func, seed: int = 0) -> list:
    import tvm

    rng = np.random.default_rng(seed)
    args = []
    for buf in param_buffers(func):
        shape = tuple(int(s) for s in buf.shape)
        args.append(tvm.runtime.tensor(rng.uniform(-1, 1, shape).astype(str(buf.dtype))))
    return args


#: Rounds of :func:`measure_candidates`: every candidate runs ``MEASURE_RUNS`` times per round, candidates alternate.
MEASURE_ROUNDS = 7
MEASURE_RUNS = 3
#: A candidate whose best time is this many times the leader's after a round is not run again: load
#: noise on a shared machine is tens of percent, so it cannot be the one kept.
MEASURE_DROP_FACTOR = 2.5


def measure_candidates(funcs: dict[str, Any], target) -> dict[str, float]:
    """Seconds per call of each candidate PrimFunc: the fastest of single runs taken in alternating rounds.

    On a shared machine another process can take the core during any run; single runs
    (not ``min_repeat_ms`` averages, which fold such pauses in) interleaved across the
    candidates give each the same chances of a quiet run, and the minimum keeps one.
    """
    import tvm

    from tvm_ext.kernel_cache import get_or_build

    timers: dict[str, Any] = {}
    for tag, func in funcs.items():
        func = func.with_attr("global_symbol", "main")
        key = ("tvm_ext.compile.candidate", tag, str(tvm_ffi_hash(func)))
        mod = get_or_build(key, lambda func=func: func, target)
        args = _random_args(func)
        # no separate warm-up: a round's time is the fastest of its runs, so first-touch page faults
        # and cold caches fall on a run that is not kept
        timers[tag] = (mod.time_evaluator("main", tvm.cpu(0), number=1, repeat=MEASURE_RUNS, min_repeat_ms=0), args)
    return alternating_best({tag: (lambda e=evaluator, a=args: float(min(e(*a).results)))
                             for tag, (evaluator, args) in timers.items()})


def alternating_best(runs: dict[str, Callable[[], float]], rounds: int = MEASURE_ROUNDS,
                     drop_factor: float = MEASURE_DROP_FACTOR) -> dict[str, float]:
    """The fastest of each ``runs[tag]()`` (seconds) over ``rounds`` alternating rounds.

    After each round, a candidate slower than ``drop_factor`` times the leader is not run again
    (its best so far is kept): a far-behind default schedule would otherwise cost most of the
    compile time.

    >>> calls = {"fast": 0, "slow": 0}
    >>> def run(tag, t):
    ...     calls[tag] += 1
    ...     return t
    >>> best = alternating_best({"fast": lambda: run("fast", 1.0), "slow": lambda: run("slow", 5.0)}, rounds=4)
    >>> best, calls
    ({'fast': 1.0, 'slow': 5.0}, {'fast': 4, 'slow': 1})
    """
    best = dict.fromkeys(runs, float("inf"))
    live = list(runs)
    for _ in range(rounds):
        for tag in live:
            best[tag] = min(best[tag], runs[tag]())
        leader = min(best[t] for t in live)
        live = [t for t in live if best[t] <= drop_factor * leader]
    return best


def tvm_ffi_hash(obj) -> int:
    import tvm_ffi

    return tvm_ffi.structural_hash(obj)
