"""Whether a scatter executor sums each row's run of entries in registers, from the matrix.

A block's entries sorted by row can be added to ``C`` one run at a time (segmented sums,
:func:`~.scatter.emit_scatter` with ``row_runs``): the run's sum stays in vector registers and
``C``'s row is read and written once per run, but every entry tests whether the next one
starts a new row, a branch whose outcome is the matrix's run pattern.  Direct updates
(``C[row] += value * B[col]`` per entry) have no such branch.  Regular patterns (stencils,
FEM blocks) the branch predictor learns, and runs win 1.3-2.3x; a random graph's short runs
of random length (R-MAT, Erdos-Renyi) it cannot, and on a tile of one vector of ``C`` the
mispredicts cost more than the row updates the runs save (R-MAT 2^18, N=8: runs 0.74x the
direct updates).

:func:`run_end_stats` estimates, from a sample of the entries, the share that end a run and
the share of run-end outcomes an ideal predictor that sees the last :data:`HISTORY` outcomes
still gets wrong; :func:`keep_row_runs` keeps the runs unless that mispredict rate exceeds
:data:`MISPREDICT_PER_SAVED_UPDATE` per row update saved (and ``C``'s tile is one vector:
with more vectors a run saves several row updates per branch, and the runs won on every
matrix measured).

>>> ends = np.array([True, False, True] * 1000)          # runs of 1 and 2, alternating
>>> [round(float(x), 3) for x in run_end_stats(ends)]   # predictable: keep the runs
[0.667, 0.0]
>>> keep_row_runs(run_end_stats(ends), n_cols=8, lanes=16)
True
"""
from __future__ import annotations

import numpy as np

__all__ = ["HISTORY", "MISPREDICT_PER_SAVED_UPDATE", "SAMPLE_WINDOWS", "SAMPLE_ENTRIES", "run_ends",
           "run_end_stats", "keep_row_runs", "choose_row_runs", "with_row_runs"]

#: Outcomes of the run-end branch an ideal predictor sees (history length of the estimate).
HISTORY = 8
#: Run-end mispredicts per saved row update of ``C`` above which direct updates are chosen
#: (a mispredict costs ~15-20 cycles and stalls the gathers of ``B`` behind it; a row update
#: of one vector in cache a few).  Measured on one vector of fp32 ``C`` (N=8, AVX-512): cora
#: 0.20 mispredicts per 0.80 saved updates keeps runs 1.5x faster; R-MAT 2^16 (0.25 per 0.75)
#: and 2^18 (0.30 per 0.60) and a uniform random matrix (0.41 per 0.50) run 1.3-2x faster
#: with direct updates.
MISPREDICT_PER_SAVED_UPDATE = 0.3
#: The estimate samples this many windows of consecutive entries, evenly spread ...
SAMPLE_WINDOWS = 8
#: ... of this many entries each (the whole matrix when it has fewer).
SAMPLE_ENTRIES = 8192


def run_ends(offset: np.ndarray, row: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``ends[p - lo]``: whether entry ``p`` in ``[lo, hi)`` ends a run (its block ends at ``p + 1``,
    a value of ``offset``, or the next entry's ``row`` differs).

    >>> run_ends(np.array([0, 3, 5]), np.array([0, 0, 1, 1, 1]), 0, 5).tolist()
    [False, True, True, False, True]
    """
    n = row.size
    ends = np.ones(hi - lo, dtype=bool)
    last = min(hi, n - 1)
    if last > lo:
        ends[:last - lo] = row[lo + 1:last + 1] != row[lo:last]
    cut = np.asarray(offset, dtype=np.int64)
    cut = cut[(cut > lo) & (cut <= hi)]
    ends[cut - 1 - lo] = True
    return ends


def run_end_stats(ends: np.ndarray, history: int = HISTORY) -> tuple[float, float]:
    """``(share of entries that end a run, share of run-end outcomes mispredicted)`` by an ideal
    predictor of each outcome from the ``history`` before it (per history, the rarer outcome is
    the mispredicted one).

    >>> rng = np.random.default_rng(0)
    >>> f, m = run_end_stats(rng.random(20000) < 0.5)   # random: about half mispredicted
    >>> round(f, 1), round(m, 1)
    (0.5, 0.5)
    """
    e = np.asarray(ends, dtype=np.int64).ravel()
    if e.size <= history:
        return (float(e.mean()) if e.size else 0.0), 0.0
    code = np.zeros(e.size - history, dtype=np.int64)
    for j in range(history):
        code = (code << 1) | e[j:e.size - history + j]
    counts = np.bincount(code * 2 + e[history:], minlength=2 << history).reshape(-1, 2)
    return float(e.mean()), float(counts.min(axis=1).sum() / (e.size - history))


def keep_row_runs(stats: tuple[float, float], n_cols: int | None, lanes: int) -> bool:
    """Whether segmented sums beat direct updates for run statistics ``stats``
    (:func:`run_end_stats`) on ``n_cols`` columns of ``lanes``-wide vectors."""
    if n_cols is None or int(n_cols) > int(lanes):
        return True
    flush, mispredict = stats
    return mispredict <= MISPREDICT_PER_SAVED_UPDATE * (1.0 - flush)


def choose_row_runs(offset: np.ndarray, row: np.ndarray, n_cols: int | None, lanes: int) -> bool:
    """:func:`keep_row_runs` for a matrix whose blocks are ``offset``'s ranges of entries, each
    sorted by ``row`` (sampled in :data:`SAMPLE_WINDOWS` windows of :data:`SAMPLE_ENTRIES`).

    >>> choose_row_runs(np.array([0, 6]), np.array([0, 0, 0, 1, 1, 1]), 8, 16)
    True
    """
    if n_cols is None or int(n_cols) > int(lanes):
        return True
    n = int(np.asarray(row).size)
    if n <= SAMPLE_WINDOWS * SAMPLE_ENTRIES:
        windows = [(0, n)]
    else:
        starts = np.linspace(0, n - SAMPLE_ENTRIES, SAMPLE_WINDOWS).astype(np.int64)
        windows = [(int(s), int(s) + SAMPLE_ENTRIES) for s in starts]
    ends = np.concatenate([run_ends(offset, row, lo, hi) for lo, hi in windows])
    return keep_row_runs(run_end_stats(ends), n_cols, lanes)


def with_row_runs(nest, params, arrays, n_cols: int | None):
    """``params`` with ``row_runs=False`` (direct updates) when ``nest``'s scatter executor would
    sum row runs (:func:`~.scatter.row_runs`) and :func:`choose_row_runs` finds direct updates
    faster for the matrix whose arrays (by ``nest`` buffer name) are ``arrays``; else ``params``
    (a ``row_runs`` the caller set is kept).

    >>> from schedules.sparse.recipes.library import csb_recipe
    >>> from schedules.sparse.executors.spec import ExecParams
    >>> rows = np.random.default_rng(0).integers(0, 64, 4000).astype(np.uint16)
    >>> nest = csb_recipe(64).nest()
    >>> arrays = {"offset": np.array([0, 4000]), "explicit_i": np.sort(rows)}
    >>> with_row_runs(nest, ExecParams(lanes=16), arrays, 8).row_runs      # long runs: kept
    >>> arrays["explicit_i"] = rows                                          # random: direct
    >>> with_row_runs(nest, ExecParams(lanes=16), arrays, 8).row_runs
    False
    """
    import dataclasses

    from schedules.sparse.recipes.nest import Role
    from schedules.sparse.recipes.scatter import row_runs

    if nest.kind != "spmm" or getattr(params, "row_runs", None) is not None or not row_runs(nest):
        return params
    offset = nest.buffer_of(Role.OFFSET)
    row = nest.buffer_of(Role.EXPLICIT, nest.meta["compaction"]["levels"][0])
    if offset is None or row is None or offset.name not in arrays or row.name not in arrays:
        return params
    if choose_row_runs(arrays[offset.name], arrays[row.name], n_cols, params.lanes):
        return params
    return dataclasses.replace(params, row_runs=False)
