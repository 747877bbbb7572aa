"""Timing of schedule candidates: each candidate PrimFunc is built, run on random arguments and
timed in alternating rounds of single runs; a candidate far behind the leader stops early.

>>> alternating_best({"a": lambda: 2.0, "b": lambda: 1.0}, rounds=2)
{'a': 2.0, 'b': 1.0}
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tvm_ext.compile_steps.block_queries import param_buffers

__all__ = ["measure_candidates", "alternating_best", "param_buffers", "prepacked_compute", "tvm_ffi_hash",
           "MEASURE_ROUNDS", "MEASURE_RUNS", "MEASURE_DROP_FACTOR", "MEASURE_DROP_ROUND", "MEASURE_FAR_FACTOR"]


def prepacked_compute(func, target) -> Any:
    """``func`` as a model with constant weights runs it: its weight packing split out, the packed weight
    a parameter (``func`` itself when it packs nothing, or TVM refuses the split).

    A tensorized kernel packs its weight panels in a ``<weight>_global`` block that
    :mod:`.weight_prepack` moves to compile time; timed with the packing inside, candidates whose
    packing costs differ (panel widths, loop orders) are compared on work the model never does.
    The split is Relax's ``SplitLayoutRewritePreproc`` on a one-call module, as in the pipeline.
    For a weight given at run time the packing stays in every call, and this timing understates it.

    >>> from tvm import te
    >>> A = te.placeholder((8, 8), name="A")
    >>> f = te.create_prim_func([A, te.compute((8, 8), lambda i, j: A[i, j] + 1, name="B")])
    >>> prepacked_compute(f, "llvm") is f
    True
    """
    from tvm import relax

    from tvm_ext.compile_steps.weight_prepack import PREPACKED_SUFFIX, mark_weight_packing
    from tvm_ext.target import resolve_target

    marked, names = mark_weight_packing(func)
    bufs = param_buffers(marked)
    if not names or len(bufs) < 2:
        return func
    bb = relax.BlockBuilder()
    gv = bb.add_func(marked, "kernel")
    args = [relax.Var(b.name, relax.TensorType([int(d) for d in b.shape], str(b.dtype))) for b in bufs[:-1]]
    out = bufs[-1]
    with bb.function("main", args):
        bb.emit_func_output(bb.emit(relax.call_tir(gv, args, relax.TensorType([int(d) for d in out.shape],
                                                                                  str(out.dtype)))))
    try:
        with resolve_target(target):
            split = relax.transform.SplitLayoutRewritePreproc()(bb.get())
    except Exception:  # noqa: BLE001 - TVM refused the split: time the kernel with its packing
        return func
    return next((f for g, f in split.functions.items() if g.name_hint == "kernel" + PREPACKED_SUFFIX), func)


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
#: A candidate whose best time is this many times the leader's after ``MEASURE_DROP_ROUND`` rounds is
#: not run again: load noise on a shared machine is tens of percent in a best of several rounds, so it
#: cannot be the one kept.  One round is not enough: a burst of load on a 2-core host can triple a
#: candidate's only run (a 3x3 convolution's 1.08 ms tile measured 2.9 ms in its first round).
MEASURE_DROP_FACTOR = 2.5
MEASURE_DROP_ROUND = 3
#: A candidate this many times the leader's after any round is not run again (an untensorized default
#: schedule, 20-200x behind): no burst of load makes up that much.
MEASURE_FAR_FACTOR = 10.0


def measure_candidates(funcs: dict[str, Any], target) -> dict[str, float]:
    """Seconds per call of each candidate PrimFunc: the fastest of single runs taken in alternating rounds.

    On a shared machine another process can take the core during any run; single runs
    (not ``min_repeat_ms`` averages, which fold such pauses in) interleaved across the
    candidates give each the same chances of a quiet run, and the minimum keeps one.
    """
    return alternating_best({tag: kernel_timer(tag, func, target) for tag, func in funcs.items()})


def kernel_timer(tag: str, func: Any, target: Any) -> Callable[[], float]:
    """A callable timing one run of candidate PrimFunc ``func`` (built through the kernel cache under
    ``tag``) on random arguments: the fastest of ``MEASURE_RUNS`` single runs, in seconds.

    No separate warm-up: a round's time is the fastest of its runs, so first-touch page faults and
    cold caches fall on a run that is not kept.
    """
    import tvm

    from tvm_ext.kernel_cache import get_or_build

    func = func.with_attr("global_symbol", "main")
    mod = get_or_build(("tvm_ext.compile.candidate", tag, str(tvm_ffi_hash(func))), lambda: func, target)
    evaluator = mod.time_evaluator("main", tvm.cpu(0), number=1, repeat=MEASURE_RUNS, min_repeat_ms=0)
    args = _random_args(func)
    return lambda: float(min(evaluator(*args).results))


def alternating_best(runs: dict[str, Callable[[], float]], rounds: int = MEASURE_ROUNDS,
                     drop_factor: float = MEASURE_DROP_FACTOR, drop_round: int = MEASURE_DROP_ROUND,
                     far_factor: float = MEASURE_FAR_FACTOR) -> dict[str, float]:
    """The fastest of each ``runs[tag]()`` (seconds) over ``rounds`` alternating rounds.

    A candidate slower than ``far_factor`` times the leader after any round, or than ``drop_factor``
    times the leader from round ``drop_round`` on, is not run again (its best so far is kept): a
    far-behind default schedule would otherwise cost most of the compile time.

    >>> calls = {"fast": 0, "slow": 0, "far": 0}
    >>> def run(tag, t):
    ...     calls[tag] += 1
    ...     return t
    >>> best = alternating_best({"fast": lambda: run("fast", 1.0), "slow": lambda: run("slow", 5.0),
    ...                          "far": lambda: run("far", 50.0)}, rounds=4, drop_round=2)
    >>> best, calls
    ({'fast': 1.0, 'slow': 5.0, 'far': 50.0}, {'fast': 4, 'slow': 2, 'far': 1})
    """
    best = dict.fromkeys(runs, float("inf"))
    live = list(runs)
    for done in range(1, rounds + 1):
        for tag in live:
            best[tag] = min(best[tag], runs[tag]())
        leader = min(best[t] for t in live)
        factor = drop_factor if done >= drop_round else far_factor
        live = [t for t in live if best[t] <= factor * leader]
    return best


def tvm_ffi_hash(obj) -> int:
    import tvm_ffi

    return tvm_ffi.structural_hash(obj)
