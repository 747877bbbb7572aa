"""The format selector's features of a matrix: shape, row lengths, bandwidth, diagonals, block fill.

:func:`sparse_features` returns :func:`~tvm_ext.workloads.matrix_stats`'s keys
plus the row lengths.  On a large matrix its passes run on the host's
threads at once (:func:`~schedules.sparse.host_threads.on_threads`): the
compiled passes of ``csrc/tvmext_inspect.c`` (the occupied diagonals with the
rows' extremes and length sums, one range of rows each; the sampled block
counts, one block height each) release the GIL, and the numpy part (the
row-length histogram, each block height's population bounds) runs beside
them.  Without a C compiler the numpy passes of the stats module run alone.

>>> from tvm_ext.workloads import lap2d
>>> f = sparse_features(lap2d(10))
>>> f["diagonals"], f["bandwidth"], f["block_fill"]["1x1"]
(5, 10, 1.0)
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from tvm_ext.workloads import canonical_csr, matrix_stats, row_lengths
from tvm_ext.workloads.stats import (EXACT_FILL_NNZ, SELECTOR_BLOCK_SIZES, BlockFillEstimate, block_row_bounds,
                                     estimate_block_fill, fill_from_counts, sample_block_rows)
from tvm_ext.workloads.stats import _histogram as row_length_histogram

__all__ = ["sparse_features", "FILL_SAMPLE_FRACTION", "FILL_MIN_BLOCK_ROWS", "DIAGONAL_COUNT_LIMIT"]

#: Share of block rows the selector's block-fill estimate reads (OSKI samples 1-2%; half a percent
#: of a million-row matrix is still thousands of block rows), and the
#: fewest block rows per R; the estimate's bound (``block_fill_bound``) widens as the sample shrinks.
FILL_SAMPLE_FRACTION = 0.005
FILL_MIN_BLOCK_ROWS = 256

#: The occupied-diagonal count stops past this many (``diagonals_exact`` is then False and
#: ``diagonals`` the count found so far): DIA is a candidate only with at most
#: ``max_dia_streams`` diagonals (:class:`~schedules.sparse.selection.AnalyticCostModel`'s
#: default, 16), and counting further costs a full pass over the non-zeros (HPCG's 27
#: diagonals, a Q1 elasticity matrix's 17) where the pass otherwise stops within the first
#: rows.  A selector that allows more streams takes features counted with
#: ``sparse_features(A, diagonal_limit=...)``.
DIAGONAL_COUNT_LIMIT = 16

#: Entries of the rows' summary the compiled diagonal pass writes per range of rows
#: (``tvmext_mark_diagonals``: extreme offsets, then the row lengths' min, max, sum, sum of
#: squares and empty rows).
_SUMMARY = 7


def sparse_features(A: Any, *, seed: int = 0, diagonal_limit: int = DIAGONAL_COUNT_LIMIT) -> dict[str, Any]:
    """Selector features of a matrix: :func:`matrix_stats`'s keys plus row lengths.

    The R x C block fill (R, C in :data:`SELECTOR_BLOCK_SIZES`) is estimated
    from a sample of block rows on large matrices, with its error bound in
    ``block_fill_bound`` (:func:`~tvm_ext.workloads.estimate_block_fill`).  The occupied
    diagonals come from one compiled pass over the non-zeros
    (:func:`~schedules.sparse.native.inspect_helpers`) that stops once it has
    found more than ``diagonal_limit`` (``diagonals_exact`` says
    whether it finished; :func:`matrix_stats` without a C compiler); the
    bandwidth and the row-length statistics come from each row's pointers and
    first and last column.  The sampled block rows are counted by the compiled
    helper too (the numpy count without it).  ``_row_lengths`` (an array) rides
    along for exact SELL/HYB padding counts; ``dtype`` names the value dtype
    the cost model prices.

    >>> from tvm_ext.workloads import block_fem
    >>> f = sparse_features(block_fem(100, 3, 3, seed=0))
    >>> f["block_fill"]["3x3"], f["row_length"]["min"] % 3
    (1.0, 0)
    """
    from schedules.sparse.host_threads import on_threads

    A = canonical_csr(A, allow_nan=True)
    passes = _Passes.of(A, diagonal_limit)
    if passes is None:  # no compiled helper: the stats module's numpy passes
        feats = matrix_stats(A, block_sizes=(1,), sample=True, symmetry=False, seed=seed,
                             sample_fraction=FILL_SAMPLE_FRACTION)
        feats["diagonals_exact"] = True
        est = _block_fill(A, seed, None)
    elif A.nnz < EXACT_FILL_NNZ:  # every block counted: the exact count, after the structure
        on_threads(passes.structure_calls())
        feats, est = passes.structure(), _block_fill(A, seed, None)
    else:
        est_parts = _SampledFill(A, passes.lib, seed)
        on_threads([est_parts.bounds_part, *passes.structure_calls(), *est_parts.count_calls()])
        feats, est = passes.structure(), est_parts.estimate()
    feats["block_fill"] = est.fill
    feats["block_fill_bound"] = est.bound
    feats["block_fill_sampled"] = min(est.fraction.values(), default=1.0)
    feats["_row_lengths"] = passes.lengths if passes is not None else row_lengths(A)
    feats["dtype"] = A.dtype.name
    return feats


def _block_fill(A: Any, seed: int, count: Callable[..., np.ndarray] | None) -> BlockFillEstimate:
    return estimate_block_fill(A, SELECTOR_BLOCK_SIZES, fraction=FILL_SAMPLE_FRACTION,
                               min_block_rows=FILL_MIN_BLOCK_ROWS, seed=seed,
                               count_blocks=count or _compiled_block_counter(A))


class _Passes:
    """The structure features' passes over one matrix: the compiled diagonal pass per range of
    rows (:meth:`structure_calls`), the numpy row lengths and their histogram
    (:meth:`numpy_part`), and :meth:`structure`, which assembles them once all have run."""

    def __init__(self, A: Any, lib: Any, limit: int) -> None:
        from schedules.sparse.host_threads import row_ranges

        self.A, self.lib, self.limit = A, lib, int(limit)
        m, n = A.shape
        self.ranges = row_ranges(A)
        # not zeroed here: each pass zeroes (and pages in) only its rows' window of diagonals
        self.marks = [np.empty(max(m + n - 1, 1), dtype=np.uint8) for _ in self.ranges]
        self.found = np.zeros(len(self.ranges), dtype=np.int64)
        self.summary = np.zeros((len(self.ranges), _SUMMARY), dtype=np.int64)
        self.lengths: np.ndarray | None = None
        self.histogram: dict[str, list] | None = None

    @classmethod
    def of(cls, A: Any, limit: int) -> "_Passes | None":
        """The passes of ``A``, or None without the compiled helper (or with 64-bit indices)."""
        from schedules.sparse.native import inspect_helpers

        lib = inspect_helpers()
        if lib is None or A.indptr.dtype != np.int32 or A.indices.dtype != np.int32:
            return None
        return cls(A, lib, limit)

    def structure_calls(self) -> list[Callable[[], None]]:
        """The numpy part, then one compiled diagonal pass per range of rows."""
        A = self.A

        def mark(t: int, a: int, b: int) -> None:
            self.found[t] = self.lib.tvmext_mark_diagonals(A.shape[0], A.indptr.ctypes.data, A.indices.ctypes.data,
                                                           a, b, self.marks[t].ctypes.data, self.limit,
                                                           self.summary[t].ctypes.data)

        return [self.numpy_part, *(lambda t=t, a=a, b=b: mark(t, a, b) for t, (a, b) in enumerate(self.ranges))]

    def numpy_part(self) -> None:
        """The row lengths and their histogram (numpy)."""
        self.lengths = row_lengths(self.A)
        self.histogram = row_length_histogram(self.lengths)

    def structure(self) -> dict[str, Any]:
        """:func:`matrix_stats`'s shape, row-length and diagonal keys, the occupied diagonals
        marked up to the limit (``diagonals_exact``), the bandwidth from the rows' extremes."""
        A, s = self.A, self.summary
        m, n = A.shape
        exact = bool(self.found.max(initial=0) <= self.limit)
        # the extremes of empty ranges are 0: only ranges with non-zeros count
        live = [t for t, (a, b) in enumerate(self.ranges) if A.indptr[b] > A.indptr[a]]
        lo_off = int(s[live, 0].min()) if live else 0
        hi_off = int(s[live, 1].max()) if live else 0
        # each range marked within its window of diagonals [lo + M - 1, hi + M - 1] (the rest of
        # its array is not written): the union of the windows, marks or-ed there
        occupied = np.zeros(hi_off - lo_off + 1, dtype=np.uint8)
        for t in live:
            a, b = int(s[t, 0]), int(s[t, 1])
            occupied[a - lo_off:b - lo_off + 1] |= self.marks[t][a + m - 1:b + m]
        n_diag = int(np.count_nonzero(occupied)) if A.nnz else 0
        total, squares = int(s[:, 4].sum()), int(s[:, 5].sum())
        max_len = int(s[:, 3].max()) if m else 0
        return {
            "rows": int(m), "cols": int(n), "nnz": int(A.nnz),
            "density": float(A.nnz / (m * n)) if m and n else 0.0,
            "row_length": {
                "min": int(s[:, 2].min()) if m else 0, "max": max_len,
                "mean": total / m if m else 0.0,
                # the population variance from the integer sums, exactly, then rounded once
                "std": math.sqrt((m * squares - total * total) / (m * m)) if m else 0.0,
                "empty_rows": int(s[:, 6].sum()), "histogram": self.histogram,
            },
            "bandwidth": max(-lo_off, hi_off, 0), "lower_bandwidth": max(0, -lo_off),
            "upper_bandwidth": max(0, hi_off), "diagonals": n_diag, "diagonals_exact": exact,
            "dia_fill": float(A.nnz / (n_diag * m)) if n_diag and m else 0.0,
            "ell_fill": float(A.nnz / (max_len * m)) if max_len and m else 0.0,
        }


class _SampledFill:
    """:func:`~tvm_ext.workloads.estimate_block_fill`'s sampled estimate in parts that run on
    threads at once: the compiled count of each block height's sampled block rows
    (:meth:`count_calls`), every height's population bounds (:meth:`bounds_part`, numpy), and
    :meth:`estimate` once both have run -- the same estimate and bound as the serial function."""

    def __init__(self, A: Any, lib: Any, seed: int) -> None:
        self.A, self.lib = A, lib
        self.sample = sample_block_rows(A, SELECTOR_BLOCK_SIZES, fraction=FILL_SAMPLE_FRACTION,
                                        min_block_rows=FILL_MIN_BLOCK_ROWS, seed=seed)
        self.indptr = A.indptr.astype(np.int64)
        self.widths = np.asarray(SELECTOR_BLOCK_SIZES, dtype=np.int32)
        self.counts = {r: np.empty((self.widths.size, picked.size), dtype=np.int64)
                       for r, picked in self.sample.items()}
        self.status = {r: 0 for r in self.sample}
        self.bounds: dict[int, Any] = {}

    def count_calls(self) -> list[Callable[[], None]]:
        """One compiled count per block height, the tallest (most rows per sampled block row) first."""
        A, m, k = self.A, self.A.shape[0], self.A.shape[1]

        def count(r: int, picked: np.ndarray) -> None:
            self.status[r] = self.lib.tvmext_sampled_block_counts(
                r, m, k, self.indptr.ctypes.data, A.indices.ctypes.data, picked.ctypes.data, picked.size,
                self.widths.ctypes.data, self.widths.size, self.counts[r].ctypes.data)

        order = sorted(self.sample.items(), key=lambda rp: -rp[0] * rp[1].size)
        return [lambda r=r, p=np.ascontiguousarray(p, dtype=np.int64): count(r, p) for r, p in order]

    def bounds_part(self) -> None:
        """Every block height's population bounds (numpy)."""
        self.bounds = {r: block_row_bounds(self.A, r, SELECTOR_BLOCK_SIZES) for r in self.sample}

    def estimate(self) -> BlockFillEstimate:
        if any(self.status.values()):
            raise MemoryError("sparse_features: the compiled block count could not allocate its column marks")
        return fill_from_counts(self.sample, self.bounds, self.counts)


def _compiled_block_counter(A: Any) -> Callable[..., np.ndarray] | None:
    """The sampled block count of :func:`~tvm_ext.workloads.estimate_block_fill` by the compiled
    helper (``tvmext_sampled_block_counts``: one pass over each picked block row per block width,
    with marks; the same counts as the numpy merge), or None without it or for 64-bit indices."""
    from schedules.sparse.native import inspect_helpers

    lib = inspect_helpers()
    if lib is None or A.indices.dtype != np.int32 or max(A.shape) >= np.iinfo(np.int32).max:
        return None

    def count(indptr: np.ndarray, indices: np.ndarray, picked: np.ndarray, r: int, m: int, n_cols: int,
              widths: Any) -> np.ndarray:
        indptr = np.ascontiguousarray(indptr, dtype=np.int64)
        picked = np.ascontiguousarray(picked, dtype=np.int64)
        w = np.ascontiguousarray(widths, dtype=np.int32)
        out = np.empty((w.size, picked.size), dtype=np.int64)
        if lib.tvmext_sampled_block_counts(int(r), int(m), int(n_cols), indptr.ctypes.data, indices.ctypes.data,
                                           picked.ctypes.data, picked.size, w.ctypes.data, w.size,
                                           out.ctypes.data):
            raise MemoryError("sparse_features: the compiled block count could not allocate its column marks")
        return out

    return count


def _structure_stats(A: Any, limit: int = DIAGONAL_COUNT_LIMIT) -> dict[str, Any] | None:
    """:func:`matrix_stats`'s shape, row-length and diagonal keys by the compiled passes on the
    host's threads (the occupied diagonals up to ``limit``, ``diagonals_exact``); None without
    the helper."""
    from schedules.sparse.host_threads import on_threads

    passes = _Passes.of(A, limit)
    if passes is None:
        return None
    on_threads(passes.structure_calls())
    return passes.structure()
