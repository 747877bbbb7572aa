"""Work-balanced partitions for the parallel loops of the executors.

TVM's ``T.parallel`` hands each thread one contiguous range of iterations, so
the executors parallelise over *parts* whose boundaries are computed once at
build time (an inspector-side array, Venkat 2016 §3 inspector/executor):

* :func:`balanced_parts` cuts items (rows, block rows, slices) into parts of
  about equal work (non-zeros plus a per-item overhead);
* :func:`row_aligned_chunks` cuts a row-sorted COO stream into chunks that
  never split a row, so no two chunks write the same output row (no races).

>>> balanced_parts(np.array([0, 1, 2, 10, 11]), 2).tolist()
[0, 3, 4]
>>> row_aligned_chunks(np.array([0, 0, 0, 1, 2, 2]), 3).tolist()
[0, 4, 6]
"""
from __future__ import annotations

import numpy as np

__all__ = ["balanced_parts", "row_aligned_chunks", "uniform_parts"]


def balanced_parts(work_prefix: np.ndarray, n_parts: int, *, item_cost: float = 0.0) -> np.ndarray:
    """Boundaries (int32, ``<= n_parts + 1`` entries, first 0, last ``n``).

    ``work_prefix`` has ``n + 1`` entries: the work before item ``i``
    (e.g. a CSR ``indptr``).  ``item_cost`` adds a fixed cost per item.
    Empty parts are dropped, so the result may be shorter.
    """
    prefix = np.asarray(work_prefix)
    n = prefix.size - 1
    if n <= 0:
        return np.zeros(2, dtype=np.int32) if n == 0 else np.zeros(1, dtype=np.int32)
    cost = float(item_cost)
    targets = np.linspace(0.0, float(prefix[n]) + cost * n, max(int(n_parts), 1) + 1)
    cuts = _lower_bounds(prefix, cost, targets)
    cuts[0], cuts[-1] = 0, n
    return np.unique(cuts).astype(np.int32)


def _lower_bounds(prefix: np.ndarray, cost: float, targets: np.ndarray) -> np.ndarray:
    """``np.searchsorted(prefix + cost * arange(n + 1), targets, side="left")`` for a
    non-decreasing total without making it: searched on every ``stride``-th entry, then inside
    the one stride each target falls in (a few thousand reads of ``prefix``, where the float64
    total of a 500K-row pointer, two arrays of its size, cost milliseconds on every executor
    build).  The same float64 sums, so the same cuts."""
    n1 = prefix.size
    stride = max(int(np.sqrt(n1 * targets.size)) // max(targets.size, 1), 1)
    at = np.arange(0, n1, stride)
    coarse = np.searchsorted(prefix[::stride].astype(np.float64) + cost * at, targets, side="left")
    # target j's cut lies in [lo, hi): total[lo - 1] < t <= total[hi] (or hi = n1); none when coarse is 0
    lo = np.maximum(coarse - 1, 0) * stride + (coarse > 0)
    hi = np.minimum(coarse * stride, n1)
    idx = lo[:, None] + np.arange(stride)[None, :]
    inside = idx < hi[:, None]
    idx = np.minimum(idx, n1 - 1)
    below = (prefix[idx].astype(np.float64) + cost * idx < targets[:, None]) & inside
    return lo + below.sum(axis=1)


def uniform_parts(n_items: int, n_parts: int) -> np.ndarray:
    """Boundaries of ``n_parts`` (about) equal parts of ``n_items`` items."""
    if n_items <= 0:
        return np.zeros(2, dtype=np.int32)
    cuts = np.linspace(0, n_items, max(int(n_parts), 1) + 1).round().astype(np.int64)
    cuts[0], cuts[-1] = 0, n_items
    return np.unique(cuts).astype(np.int32)


def row_aligned_chunks(rows: np.ndarray, n_chunks: int) -> np.ndarray:
    """Chunk boundaries over a row-sorted entry stream, each on a row start."""
    rows = np.asarray(rows)
    nnz = rows.size
    if nnz == 0:
        return np.zeros(2, dtype=np.int32)
    targets = np.linspace(0, nnz, max(int(n_chunks), 1) + 1).astype(np.int64)
    targets = np.minimum(targets, nnz - 1)
    cuts = np.searchsorted(rows, rows[targets], side="left")
    cuts[0], cuts[-1] = 0, nnz
    return np.unique(cuts).astype(np.int32)
