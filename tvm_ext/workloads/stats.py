"""Structural statistics of a sparse matrix (``tvm-ext matrix stats``).

The same numbers are the features the sparse format selector reads: row-length
statistics, bandwidth, occupied diagonals, and the R x C block fill ratio
``nnz / (blocks * R * C)`` for R, C in 1..8 (OSKI's fill, inverted: 1.0 means
every stored block is dense).

>>> from tvm_ext.workloads import lap2d
>>> s = matrix_stats(lap2d(4))
>>> s["rows"], s["nnz"], s["diagonals"], s["bandwidth"]
(16, 64, 5, 4)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tvm_ext.workloads.validation import canonical_csr

__all__ = ["matrix_stats", "block_fill", "row_lengths"]


def row_lengths(A) -> np.ndarray:
    """Non-zeros per row of a CSR matrix."""
    return np.diff(A.indptr).astype(np.int64)


def _coords(A) -> tuple[np.ndarray, np.ndarray]:
    rows = np.repeat(np.arange(A.shape[0], dtype=np.int64), row_lengths(A))
    return rows, A.indices.astype(np.int64)


def block_fill(A, max_r: int = 8, max_c: int = 8) -> dict[str, float]:
    """``{"RxC": nnz / (occupied R x C blocks * R * C)}`` for R, C in 1..max.

    One sort per R: ordering non-zeros by (row // R, col) also orders them by
    (row // R, col // C) for every C, so each C is a linear scan.  The sort
    merges R already-sorted CSR rows per block row, which a stable sort does
    in near-linear time.
    """
    A = canonical_csr(A, allow_nan=True)
    rows, cols = _coords(A)
    out: dict[str, float] = {}
    if A.nnz == 0:
        return {f"{r}x{c}": 0.0 for r in range(1, max_r + 1) for c in range(1, max_c + 1)}
    ncols = max(A.shape[1], 1)
    for r in range(1, max_r + 1):
        if r == 1:
            br_s, col_s = rows, cols  # CSR order is already (row, col)
        else:
            # r sorted runs per block row: a stable (run-merging) sort is near linear
            keys = np.sort((rows // r) * ncols + cols, kind="stable")
            keep = np.empty(keys.size, dtype=bool)
            keep[0] = True
            np.not_equal(keys[1:], keys[:-1], out=keep[1:])
            keys = keys[keep]  # distinct (block row, column) pairs
            br_s, col_s = keys // ncols, keys % ncols
        br_s = br_s.astype(np.int32)
        col_s = col_s.astype(np.int32)
        new_row = np.empty(br_s.size, dtype=bool)
        new_row[0] = True
        np.not_equal(br_s[1:], br_s[:-1], out=new_row[1:])
        for c in range(1, max_c + 1):
            bc = col_s // c if c > 1 else col_s
            new = new_row.copy()
            new[1:] |= bc[1:] != bc[:-1]
            out[f"{r}x{c}"] = A.nnz / (int(np.count_nonzero(new)) * r * c)
    return out


def _histogram(lengths: np.ndarray, bins: int = 10) -> dict[str, list]:
    if lengths.size == 0:
        return {"edges": [], "counts": []}
    hi = int(lengths.max())
    n_bins = max(1, min(bins, hi + 1))
    edges = np.unique(np.linspace(0, hi + 1, n_bins + 1).astype(np.int64))
    counts, _ = np.histogram(lengths, bins=edges)
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def matrix_stats(A: Any, *, max_block: int = 8, bins: int = 10) -> dict[str, Any]:
    """Shape, nnz, row-length histogram, bandwidth, diagonals and block fill."""
    A = canonical_csr(A, allow_nan=True)
    m, n = A.shape
    lengths = row_lengths(A)
    rows, cols = _coords(A)
    offsets = cols - rows
    n_diag = int(np.unique(offsets).size) if A.nnz else 0
    max_len = int(lengths.max()) if m else 0
    stats: dict[str, Any] = {
        "rows": int(m),
        "cols": int(n),
        "nnz": int(A.nnz),
        "density": float(A.nnz / (m * n)) if m and n else 0.0,
        "row_length": {
            "min": int(lengths.min()) if m else 0,
            "max": max_len,
            "mean": float(lengths.mean()) if m else 0.0,
            "std": float(lengths.std()) if m else 0.0,
            "empty_rows": int((lengths == 0).sum()),
            "histogram": _histogram(lengths, bins),
        },
        "bandwidth": int(np.abs(offsets).max()) if A.nnz else 0,
        "lower_bandwidth": int(max(0, -offsets.min())) if A.nnz else 0,
        "upper_bandwidth": int(max(0, offsets.max())) if A.nnz else 0,
        "diagonals": n_diag,
        # share of DIA / ELL slots that hold a real non-zero (1.0 = no padding)
        "dia_fill": float(A.nnz / (n_diag * m)) if n_diag and m else 0.0,
        "ell_fill": float(A.nnz / (max_len * m)) if max_len and m else 0.0,
        "pattern_symmetric": bool(m == n and m and _pattern_symmetric(A)),
        "block_fill": block_fill(A, max_block, max_block),
    }
    return stats


def _pattern_symmetric(A) -> bool:
    P = A.copy()
    P.data = np.ones_like(P.data)
    return (P != P.T).nnz == 0
