"""Sextans §3.1.2 (Eqs. 2-4): partition A into K0-column windows and P row bins.

A (M x K) is cut three ways, all vectorised with numpy:

* **row passes**: one engine invocation holds ``P * rows_per_pe`` rows of C in
  its scratchpads; a taller A is split into passes that run one after the
  other (this is how a row index that would overflow the scratchpad or the
  18-bit row field is handled);
* **windows** (Eq. 3): columns ``[j*K0, (j+1)*K0)`` form window ``j``;
* **PE bins** (Eq. 4): row ``r`` of a pass goes to PE ``r mod P``.

Inside a bin the indices are compressed (Fig. 3): the row becomes
``r_local // P`` and the column ``c - j*K0``.  The non-zeros of every bin are
then listed in the order the scheduler consumes them: column-major, as the
Sextans host does from CSC (or row-major for the CSR baseline of Table 1).

>>> import scipy.sparse as sp
>>> from tvm_ext.spmm_engine.config import EngineConfig
>>> A = sp.csr_array(([1.0, 2.0, 3.0], ([0, 1, 1], [0, 0, 5])), shape=(2, 8))
>>> part = partition(A, EngineConfig(pes=2, window=4))
>>> part.n_windows, part.pe.tolist(), part.ccol.tolist()
(2, [0, 1, 1], [0, 0, 1])
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from tvm_ext.errors import ShapeError
from tvm_ext.spmm_engine.config import EngineConfig

__all__ = ["Partition", "partition", "stable_argsort"]


@dataclass(frozen=True)
class Partition:
    """Where every non-zero of A goes, in CSR order and in scheduling order.

    Per non-zero (CSR order of the canonical input): ``pass_id``, ``window``,
    ``pe``, compressed ``crow`` / ``ccol`` and ``values``.  Bin ``b =
    (pass_id * n_windows + window) * P + pe``; ``order[i]`` is the CSR index
    of the ``i``-th non-zero in scheduling order (bins contiguous, bin ``b``
    at ``bin_ptr[b]:bin_ptr[b+1]``).  ``row_key[i]`` numbers the (row,
    window) pairs densely, so two non-zeros of one bin share a key exactly
    when they update the same C row; ``max_mult[b]`` is the most non-zeros
    one row has in bin b.
    """

    shape: tuple[int, int]
    config: EngineConfig
    n_passes: int
    n_windows: int
    pass_id: np.ndarray
    window: np.ndarray
    pe: np.ndarray
    crow: np.ndarray
    ccol: np.ndarray
    values: np.ndarray
    order: np.ndarray
    bin_ptr: np.ndarray
    row_key: np.ndarray
    max_mult: np.ndarray

    @property
    def nnz(self) -> int:
        """Number of stored non-zeros."""
        return int(self.values.size)

    @property
    def n_bins(self) -> int:
        """``n_passes * n_windows * P`` (empty bins included)."""
        return self.n_passes * self.n_windows * self.config.pes

    def pass_rows(self, index: int) -> tuple[int, int]:
        """``(first row, number of rows)`` of pass ``index``."""
        rpp = self.config.rows_per_pass
        row0 = index * rpp
        return row0, min(rpp, self.shape[0] - row0)


def stable_argsort(keys: np.ndarray, max_key: int) -> np.ndarray:
    """Stable argsort of non-negative integer keys by LSD radix passes.

    numpy's stable sort is a radix sort for 16-bit keys, so wide keys are
    sorted 16 bits at a time (linear time, unlike a comparison sort).

    >>> stable_argsort(np.array([70000, 3, 70000, 1]), 70000).tolist()
    [3, 1, 0, 2]
    """
    n = keys.size
    if max_key < (1 << 16):
        return np.argsort(keys.astype(np.uint16, copy=False), kind="stable")
    wide = keys.astype(np.int64, copy=False)
    order = np.arange(n, dtype=np.int64)
    shift = 0
    while (max_key >> shift) > 0:
        digit = ((wide[order] >> shift) & 0xFFFF).astype(np.uint16)
        order = order[np.argsort(digit, kind="stable")]
        shift += 16
    return order


def _run_keys(indptr: np.ndarray, window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense id of each non-zero's (row, window) run in CSR order, and run starts."""
    n = window.size
    start = np.zeros(n, dtype=bool)
    if n:
        np.not_equal(window[1:], window[:-1], out=start[1:])
        start[indptr[:-1][np.diff(indptr) > 0]] = True
    key = start.astype(np.int32 if n < 2**31 else np.int64)
    np.cumsum(key, out=key)
    key -= 1
    return key, np.flatnonzero(start)


def _locate(rows: np.ndarray, config: EngineConfig, n_passes: int):
    """Pass, PE (``r mod P`` within the pass) and compressed row of row indices."""
    P = config.pes
    if n_passes == 1:
        pass_id = np.zeros(rows.size, dtype=rows.dtype)
        local = rows
    else:
        pass_id = rows // config.rows_per_pass
        local = rows - pass_id * config.rows_per_pass
    if P & (P - 1) == 0:  # power of two: shifts and masks (much cheaper than int division)
        return pass_id, local & (P - 1), local >> (P.bit_length() - 1)
    return pass_id, local % P, local // P


def _bins(pass_id, window, pe, n_windows: int, P: int, dtype) -> np.ndarray:
    """Bin id ``(pass * n_windows + window) * P + pe``, computed in place."""
    bins = pass_id.astype(dtype)
    bins *= n_windows
    bins += window
    bins *= P
    bins += pe
    return bins


def partition(A: sp.csr_array, config: EngineConfig) -> Partition:
    """Partition a canonical CSR matrix (see :func:`canonical_csr`) for ``config``."""
    M, K = (int(x) for x in A.shape)
    if M == 0 or K == 0:
        raise ShapeError(f"A: the engine needs at least one row and one column, got {M}x{K}")
    P, K0 = config.pes, config.window
    n_passes = -(-M // config.rows_per_pass)
    n_windows = -(-K // K0)
    n_bins = n_passes * n_windows * P
    bin_t = np.int32 if n_bins < 2**31 else np.int64
    row_len = np.diff(A.indptr)
    pass_id, pe, crow = _locate(np.repeat(np.arange(M, dtype=np.int32), row_len), config, n_passes)
    window = A.indices // np.int32(K0)
    ccol = window * np.int32(-K0)
    ccol += A.indices
    key, runs = _run_keys(A.indptr, window)
    if config.nz_order == "column":  # Sextans host: CSC traversal, window by window (§3.3)
        # one counting-sort transpose carries both the CSR position and the run key
        packed = key.astype(np.int64)
        packed <<= 32
        packed |= np.arange(A.nnz, dtype=np.int64)
        csc = sp.csr_array((packed, A.indices, A.indptr), shape=A.shape).tocsc()
        del packed
        c_pass, c_pe, _ = _locate(csc.indices, config, n_passes)
        w = np.repeat(np.arange(n_windows, dtype=np.int32), _window_counts(csc.indptr, K0))
        bins = _bins(c_pass, w, c_pe, n_windows, P, bin_t)
        del c_pass, c_pe, w
        picked = csc.data[stable_argsort(bins, n_bins - 1)]
        del csc
        row_key = (picked >> 32).astype(np.int32)
        picked &= np.int64(0xFFFFFFFF)
        order = picked.astype(np.int32)
    else:  # CSR order: the row-major baseline of Table 1
        bins = _bins(pass_id, window, pe, n_windows, P, bin_t)
        order = stable_argsort(bins, n_bins - 1)
        row_key = key[order]
    counts = np.bincount(bins, minlength=n_bins) if A.nnz else np.zeros(n_bins, np.int64)
    del bins
    bin_ptr = np.zeros(n_bins + 1, dtype=np.int64)
    np.cumsum(counts, out=bin_ptr[1:])
    run_bin = _bins(pass_id[runs], window[runs], pe[runs], n_windows, P, np.int64)
    max_mult = np.zeros(n_bins, dtype=np.int64)
    np.maximum.at(max_mult, run_bin, np.diff(np.append(runs, A.nnz)))
    return Partition(
        shape=(M, K), config=config, n_passes=n_passes, n_windows=n_windows,
        pass_id=pass_id, window=window, pe=pe, crow=crow, ccol=ccol, values=A.data,
        order=order, bin_ptr=bin_ptr, row_key=row_key, max_mult=max_mult,
    )


def _window_counts(csc_indptr: np.ndarray, K0: int) -> np.ndarray:
    """Non-zeros per window, from the CSC column pointers."""
    edges = np.append(csc_indptr[::K0], csc_indptr[-1])
    return np.diff(edges)[: -(-(csc_indptr.size - 1) // K0)]
