"""Timing the selector's close candidates on a block of the matrix, and keeping one that clearly wins.

The analytic and learned models score candidates by modelled bytes; when two
are close, :func:`measure_close_candidates` builds each on a contiguous block
from the middle of the matrix and times them taking turns
(:class:`~schedules.sparse.choice.Measurement` records the runs and says
which is kept).  :func:`schedules.sparse.selection.select_format` calls it
with ``measure=True`` (or ``None`` on large matrices).
"""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from schedules.sparse.choice import BASELINE_FORMATS, Candidate, Choice, Measurement
from schedules.sparse.host_threads import BCSR_THREADED_NNZ, host_threads
from tvm_ext.workloads.stats import SELECTOR_BLOCK_SIZES

__all__ = ["MEASURE_MIN_NNZ", "MEASURE_NNZ", "MEASURE_ROW_FRACTION", "MEASURE_OVERRIDE", "BLOCK_ALIGN",
           "EXPECTED_RUNS", "measure_close_candidates"]

#: ``inspect(measure=None)`` times close candidates on matrices with at least this many non-zeros.
#: Below it a whole product costs a fraction of a millisecond, so a measurement (and, on a cold
#: kernel cache, the candidates' compilation) would cost many times what it could save.
MEASURE_MIN_NNZ = 250_000
#: Non-zeros of the row block the candidates are timed on (a contiguous block from the middle) ...
MEASURE_NNZ = 250_000
#: ... and at most this share of the rows (with ``repeat=7`` runs per candidate, timing three
#: candidates costs under one product of the whole matrix, plus their inspectors on the block).
MEASURE_ROW_FRACTION = 0.05


#: Runs of the executor :func:`~schedules.sparse.plan.inspect` expects by default (``expected_runs=``):
#: a candidate timed faster than the model's choice replaces it only when its gain per run over
#: this many runs pays for building it (:meth:`~schedules.sparse.choice.Measurement.pays`).  A
#: Krylov solve or a training loop runs the product hundreds of times; 100 is the low end.
EXPECTED_RUNS = 100


#: The model's choice stays unless a timed candidate beats it by more than this share:
#: a block run of ~100 us carries a few percent of timing noise, and a format the model
#: prefers by its bytes should not lose to a candidate it only ties with.
MEASURE_OVERRIDE = 0.05


def _close_candidates(choice: Choice, margin: float, top_k: int) -> list[Candidate]:
    """Candidates to time: the choice, others scored within ``margin`` of it, and a baseline.

    Up to ``top_k`` in all.  When the choice is not a :data:`BASELINE_FORMATS`
    format, the best-scored baseline takes one of the places, so a model
    that misjudges DIA or a block shape by far is still caught.
    """
    scores = dict(choice.scored)
    best = scores.get(choice.candidate)
    if best is None or best <= 0 or top_k < 2:
        return [choice.candidate]
    others = sorted(((v, c) for c, v in choice.scored if c != choice.candidate), key=lambda vc: vc[0])
    close = [c for v, c in others if v <= best * (1.0 + margin)]
    baseline = next((c for _, c in others if c.format in BASELINE_FORMATS), None)
    picked = close[:top_k - 1]
    if choice.candidate.format in BASELINE_FORMATS or baseline is None or baseline in picked:
        return [choice.candidate] + picked
    return [choice.candidate] + close[:top_k - 2] + [baseline]


#: The timed block starts on a row and a column that are multiples of this (every R and C of
#: the selector's block shapes divides it), so a BCSR candidate's blocks on the block are the
#: matrix's own: a block starting one row into the matrix's 3 x 3 blocks splits every one of
#: them in two, and BCSR 3x3 then timed slower than CSR on a matrix of dense 3 x 3 blocks.
BLOCK_ALIGN = math.lcm(*SELECTOR_BLOCK_SIZES)


def _row_block(csr: Any, max_nnz: int, max_rows: int | None = None) -> tuple[int, int]:
    """Rows ``[a, b)`` from the middle of ``csr``: about ``max_nnz`` non-zeros and at most ``max_rows`` rows.

    All rows when the matrix is within both; ``a`` is a multiple of :data:`BLOCK_ALIGN`.
    """
    m, nnz = csr.shape[0], csr.nnz
    max_rows = m if max_rows is None else max(int(max_rows), 1)
    if nnz <= max_nnz and m <= max_rows:
        return 0, m
    if nnz <= max_nnz:  # only the row cap binds: the middle rows
        first = (m - max_rows) // 2
    else:
        first = max(int(np.searchsorted(csr.indptr, (nnz - max_nnz) // 2, side="right")) - 1, 0)
    first -= first % BLOCK_ALIGN
    last = int(np.searchsorted(csr.indptr, csr.indptr[first] + max_nnz, side="left"))
    return first, min(max(last, first + 1), first + max_rows, m)


def _window(csr: Any, a: int, b: int) -> Any:
    """Rows ``[a, b)`` restricted to the columns they touch (a band for FEM matrices), as a CSR;
    the first column kept is a multiple of :data:`BLOCK_ALIGN`."""
    if (a, b) == (0, csr.shape[0]):
        return csr
    lo, hi = int(csr.indptr[a]), int(csr.indptr[b])
    cols = csr.indices[lo:hi]
    c0, c1 = (int(cols.min()), int(cols.max()) + 1) if cols.size else (0, 1)
    c0 -= c0 % BLOCK_ALIGN
    return sp.csr_array((csr.data[lo:hi], cols - c0, csr.indptr[a:b + 1] - lo), shape=(b - a, c1 - c0))


def measure_close_candidates(csr: Any, n_cols: int, choice: Choice, *, margin: float = 0.15,
                             top_k: int = 3, max_nnz: int = MEASURE_NNZ,
                             max_row_fraction: float = 1.0, repeat: int = 7, min_rounds: int = 3,
                             override: float = MEASURE_OVERRIDE, target: Any = None,
                             expected_runs: float | None = None) -> Choice:
    """Time the choice against close candidates and a baseline; keep one that clearly wins.

    Up to ``top_k`` candidates (:func:`_close_candidates`: the model's choice,
    those scored within ``margin`` of it, CSR when the choice is
    not CSR) are built on a contiguous block of about ``max_nnz`` non-zeros
    (and at most ``max_row_fraction`` of the rows) from the middle of the
    matrix, restricted to the columns it touches (the whole matrix when
    smaller; executors take any size, so the kernels come from the cache),
    and run up to ``repeat`` times at ``n_cols`` columns, taking turns; after
    ``min_rounds`` rounds the runs stop once each candidate's side of the bar it must clear is
    known: all its paired ratios so far on one side, or more than half of ``repeat`` of them
    (the median of all ``repeat`` rounds could then not change side).
    The model's choice stays unless another beats it by more than ``override`` in the
    median of the rounds' paired ratios (:attr:`Measurement.chosen`).
    The whole cost (block inspectors, builds, runs) is in the measurement's
    ``spent_seconds``.  ``expected_runs`` prices construction: a faster
    candidate is kept only when its gain per run over that many runs pays for its inspector
    (:meth:`Measurement.pays`, the inspectors timed on the block on one thread, divided by the
    threads the whole matrix's inspectors split over); ``None`` does not price it.
    Returns ``choice`` unchanged when there is nothing
    to compare, else a :class:`Choice` naming the kept candidate, with the
    :class:`Measurement`.

    >>> from schedules.sparse.selection import select_format
    >>> from tvm_ext.workloads import lap2d
    >>> A = lap2d(30)
    >>> c = measure_close_candidates(A, 8, select_format(A, 8), margin=10.0, top_k=2)
    >>> len(c.measurement.seconds), c.candidate.label == c.measurement.chosen
    (2, True)
    """
    cands = _close_candidates(choice, margin, top_k)
    if len(cands) < 2:
        return choice
    t0 = time.perf_counter()
    a, b = _row_block(csr, max_nnz, int(np.ceil(max_row_fraction * csr.shape[0])))
    block = _window(csr, a, b)
    # the operand's values do not change a kernel's time (a normal constant: no subnormal slow path)
    B = np.full((block.shape[1], n_cols) if n_cols > 1 else block.shape[1], 0.5, dtype=csr.dtype)
    exes, failed, build_seconds = _build_on_block(block, cands, n_cols, target)
    if csr.nnz >= BCSR_THREADED_NNZ:  # the whole matrix's inspector splits over the threads
        build_seconds = {k: v / host_threads() for k, v in build_seconds.items()}
    if not exes:
        return choice
    best = dict(choice.scored).get(choice.candidate)
    far = tuple(c.label for c, v in choice.scored
                if c.label in exes and best and v > best * (1.0 + margin) and c != choice.candidate)
    mine_label = choice.candidate.label
    bars = {label: 1.0 / (1.0 + (max(margin, override) if label in far else override)) for label in exes}
    runs = _interleaved_runs(exes, B, repeat, min_rounds=min_rounds, settled=_settled_rule(mine_label, bars, repeat))
    seconds = {label: min(t) for label, t in runs.items()}
    mine = runs.get(mine_label)
    ratios = {} if mine is None else {
        label: float(np.median(np.asarray(t) / np.asarray(mine))) for label, t in runs.items()}
    meas = Measurement(seconds, int(n_cols), a, b, int(block.nnz), margin, choice.candidate.label, failed,
                       time.perf_counter() - t0, override, ratios, far, build_seconds,
                       None if expected_runs is None else float(expected_runs))
    return _kept_choice(choice, cands, meas)


def _build_on_block(block: Any, cands: list[Candidate], n_cols: int,
                    target: Any) -> tuple[dict[str, Any], dict[str, str], dict[str, float]]:
    """Each candidate's executor on ``block`` (by label), why the others could not be built,
    and each built one's inspector seconds on the block, on this thread alone
    (:func:`~schedules.sparse.host_threads.inspector_threads`): a time per thread, which
    :func:`measure_close_candidates` divides by the threads the whole matrix's inspector
    would split over."""
    from schedules.sparse.executors import build_executor
    from schedules.sparse.host_threads import inspector_threads
    from schedules.sparse.inspectors import INSPECTORS

    kind = "spmv" if n_cols == 1 else "spmm"
    failed: dict[str, str] = {}
    exes = {}
    seconds: dict[str, float] = {}
    for cand in cands:
        try:
            t0 = time.perf_counter()
            with inspector_threads(1):
                fmt = INSPECTORS[cand.format](block, **cand.args, check_finite=False)  # the caller's matrix
            seconds[cand.label] = time.perf_counter() - t0
            exes[cand.label] = build_executor(fmt, n_cols, kind=kind, target=target)
        except Exception as err:  # a candidate that cannot be built on the block is reported, not fatal
            failed[cand.label] = f"{type(err).__name__}: {err}"
            seconds.pop(cand.label, None)
    return exes, failed, seconds


def _settled_rule(mine_label: str, bars: dict[str, float],
                  rounds: int | None = None) -> Callable[[dict[str, list[float]]], bool]:
    """Whether every candidate's side of its bar is known (its time over the model's choice's
    below ``bars[label]`` or not: :attr:`Measurement.chosen`'s rule): every round so far puts it
    on one side, or, out of ``rounds`` in all, more than half of them already do -- the median of
    all ``rounds`` ratios would fall on that side whatever the remaining rounds give, and so
    does the median of the rounds run (more than half of them are on that side)."""
    majority = None if rounds is None else int(rounds) // 2 + 1

    def settled(runs: dict[str, list[float]]) -> bool:
        if mine_label not in runs:
            return False
        mine_t = np.asarray(runs[mine_label])
        for label, t in runs.items():
            if label == mine_label:
                continue
            below = int(np.count_nonzero(np.asarray(t) / mine_t < bars[label]))
            done = len(t)
            if below in (0, done) or (majority is not None and max(below, done - below) >= majority):
                continue
            return False
        return True

    return settled


def _kept_choice(choice: Choice, cands: list[Candidate], meas: Measurement) -> Choice:
    """``choice`` with the candidate the measurement keeps, the reason, and the measurement."""
    picked = next(c for c in cands if c.label == meas.chosen)
    if picked == choice.candidate:
        kept = ("" if meas.fastest == picked.label else " (the faster one's construction does not pay)"
                if meas.fastest in meas.unpaid else f" (within {meas.override:.0%} of the fastest)")
        reason = f"{choice.reason}; confirmed by timing{kept}: {meas.describe()}"
    else:
        reason = (f"{picked.label}: fastest when timed, over the {choice.selector} model's "
                  f"{choice.candidate.label} ({choice.reason}); {meas.describe()}")
    return replace(choice, candidate=picked, reason=reason, measurement=meas)


def _interleaved_runs(exes: dict[str, Any], B: np.ndarray, rounds: int, *, min_rounds: int | None = None,
                      settled: Callable[[dict[str, list[float]]], bool] | None = None) -> dict[str, list[float]]:
    """Seconds of up to ``rounds`` calls per executor, the executors taking turns in every round.

    Taking turns spreads a burst of other load over every candidate alike (timing one
    candidate's runs back to back would hand the burst to one of them); a round's
    times are compared with each other (:attr:`Measurement.ratios`).  An untimed
    round runs first (each executor's first call, its arrays' first reads), and
    each round starts one candidate further along (round ``r`` at candidate
    ``r mod k``): the first run of a round wakes the parked thread pool, a cost
    that would otherwise fall on one candidate every round.  From ``min_rounds``
    rounds on, the runs stop as soon as ``settled(runs)`` holds.
    """
    # written once here, so no round pays the first touch of its output pages
    outs = {label: np.full(exe.shape[:1] + B.shape[1:], 0, B.dtype) for label, exe in exes.items()}
    runs: dict[str, list[float]] = {label: [] for label in exes}
    rounds = max(int(rounds), 1)
    first_check = rounds if settled is None or min_rounds is None else max(int(min_rounds), 1)
    order = list(exes.items())
    for label, exe in order:
        exe(B, out=outs[label])
    for done in range(1, rounds + 1):
        turn = (done - 1) % len(order)
        for label, exe in order[turn:] + order[:turn]:
            t0 = time.perf_counter()
            exe(B, out=outs[label])
            runs[label].append(time.perf_counter() - t0)
        if done >= first_check and done < rounds and settled(runs):
            break
    return runs
