"""Canonical, validated CSR: the one entry point for user sparse matrices.

Every sparse consumer in the plugin (inspectors, executors, solvers, the SpMM
engine's preprocessor) calls :func:`canonical_csr` first, so bad input is
caught once, with a message that names the matrix and the problem.

>>> import scipy.sparse as sp
>>> A = canonical_csr(sp.coo_array(([1.0, 2.0], ([0, 0], [1, 1])), shape=(2, 2)))
>>> A.nnz, A.data.tolist()          # duplicates summed
(1, [3.0])
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from tvm_ext.errors import InputError, ShapeError

__all__ = ["canonical_csr", "check_dense_operand", "INDEX_DTYPE"]

#: Index dtype the TIR executors use.  Larger matrices are rejected, not wrapped.
INDEX_DTYPE = np.dtype(np.int32)
_INT32_MAX = np.iinfo(np.int32).max


def _as_sparse(A: Any, what: str):
    if sp.issparse(A):
        return A
    if isinstance(A, np.ndarray) and A.ndim == 2:
        return sp.csr_array(A)
    raise InputError(f"{what}: expected a scipy sparse matrix or 2-D numpy array, got {type(A).__name__}")


def canonical_csr(
    A: Any,
    *,
    dtype: Any = None,
    square: bool = False,
    allow_nan: bool = False,
    what: str = "matrix",
) -> sp.csr_array:
    """Return ``A`` as a CSR array with sorted indices and no duplicates.

    * ``dtype``: cast values (default: keep a float dtype, else float64).
    * ``square``: require ``rows == cols`` (:class:`ShapeError` otherwise).
    * ``allow_nan``: NaN/Inf in the values raise :class:`InputError` unless set.
    * Indices become int32; a matrix whose sizes or nnz overflow int32 is
      rejected with a message instead of silently wrapping.
    * The input is never modified; an input that is already canonical is
      returned as is (no copy).
    """
    A = _as_sparse(A, what)
    if A.ndim != 2:
        raise ShapeError(f"{what}: expected 2-D, got {A.ndim}-D")
    m, n = A.shape
    if square and m != n:
        raise ShapeError(f"{what}: a square matrix is required, got {m}x{n}")
    if max(m, n, A.nnz) > _INT32_MAX:
        raise InputError(
            f"{what}: shape {m}x{n} with nnz={A.nnz} overflows the int32 indices the executors use"
        )
    if np.iscomplexobj(A.data):
        raise InputError(f"{what}: complex values are not supported")
    out_dtype = np.dtype(dtype) if dtype is not None else (
        A.dtype if np.issubdtype(A.dtype, np.floating) else np.dtype(np.float64)
    )
    if not np.issubdtype(out_dtype, np.floating):
        raise InputError(f"{what}: value dtype must be floating point, got {out_dtype}")
    if _already_canonical(A, out_dtype):
        C = A  # nothing to fix: reuse without copying (callers never mutate it)
    else:
        C = sp.csr_array(A, copy=True)
        C.sum_duplicates()  # also sorts indices
        if not C.has_sorted_indices:
            C.sort_indices()
        C.indptr = C.indptr.astype(INDEX_DTYPE, copy=False)
        C.indices = C.indices.astype(INDEX_DTYPE, copy=False)
        C.data = C.data.astype(out_dtype, copy=False)
    if not allow_nan and C.nnz and not _all_finite(C.data):
        bad = int(np.flatnonzero(~np.isfinite(C.data))[0])
        row = int(np.searchsorted(C.indptr, bad, side="right") - 1)
        raise InputError(f"{what}: non-finite value {C.data[bad]} at ({row}, {int(C.indices[bad])})")
    return C


def _all_finite(values: np.ndarray) -> bool:
    """Whether every value is finite: one sum (NaN and +-Inf survive it), and the
    element-wise test only when that sum is not finite (overflow or a bad value)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(values.sum()):
            return True
    return bool(np.isfinite(values).all())


def _already_canonical(A, dtype: np.dtype) -> bool:
    """CSR array with int32 indices, the wanted dtype, sorted and duplicate-free."""
    return (
        isinstance(A, sp.csr_array)
        and A.indptr.dtype == INDEX_DTYPE
        and A.indices.dtype == INDEX_DTYPE
        and A.data.dtype == dtype
        and A.has_canonical_format
    )


def check_dense_operand(B: Any, rows: int, *, dtype: Any, what: str = "B",
                        allow_nan: bool = False) -> np.ndarray:
    """Validate a dense operand of an SpMM/SpMV: ``rows`` rows, real, cast, C-contiguous.

    1-D inputs are accepted as single-column vectors and returned 2-D.  An
    operand that is already C-contiguous with the wanted ``dtype`` is returned
    without a copy (a view); others are copied.

    ``allow_nan``: NaN/Inf raise :class:`InputError` unless set.  The sparse
    executors set it: a product propagates NaN exactly as scipy and MKL do, so
    a full scan of ``B`` on every call would cost a pass over memory for no
    correctness gain.  Solvers keep the scan (a NaN right-hand side makes an
    iteration meaningless).

    >>> check_dense_operand(np.arange(3.0), 3, dtype="float64").shape
    (3, 1)
    """
    arr = np.asarray(B)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ShapeError(f"{what}: expected a vector or 2-D array, got {arr.ndim}-D")
    if arr.shape[0] != rows:
        raise ShapeError(f"{what}: has {arr.shape[0]} rows, the sparse matrix needs {rows}")
    if not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr):
        raise InputError(f"{what}: expected real numbers, got dtype {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=dtype)
    if not allow_nan and not np.isfinite(arr).all():
        raise InputError(f"{what}: contains NaN or Inf")
    return arr
