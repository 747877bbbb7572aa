"""Validation of a format's arrays before an executor reads them unguarded.

The executors index ``B`` and ``C`` through the format's index arrays with no
bounds checks, so a malformed format (wrong dtype, out-of-range index,
non-monotone pointer) must be rejected at build time with an
:class:`~tvm_ext.errors.InputError`, never reach the kernel.

>>> import numpy as np
>>> require_array(np.zeros(3, np.int32), "csr.indptr", "int32", (3,)).shape
(3,)
"""
from __future__ import annotations

import numpy as np

from tvm_ext.errors import InputError, ShapeError

__all__ = ["require_array", "require_range", "require_pointer", "require_value_dtype"]


def require_array(arr, what: str, dtype: str, shape: tuple | None = None) -> np.ndarray:
    """``arr`` must be a numpy array of exactly ``dtype`` (and ``shape``, ``None`` = any)."""
    if not isinstance(arr, np.ndarray):
        raise InputError(f"{what}: expected a numpy array, got {type(arr).__name__}")
    if arr.dtype != np.dtype(dtype):
        raise InputError(f"{what}: expected dtype {dtype}, got {arr.dtype}")
    if shape is not None:
        want = tuple(int(s) for s in shape)
        if arr.shape != want:
            raise ShapeError(f"{what}: expected shape {want}, got {arr.shape}")
    return arr


def require_range(arr: np.ndarray, lo: int, hi: int, what: str) -> None:
    """Every entry of ``arr`` must lie in ``[lo, hi)``."""
    if arr.size == 0:
        return
    if lo == 0 and arr.dtype.kind == "i" and arr.flags.c_contiguous:
        # one pass, not two: viewed unsigned, a negative entry is above every valid index
        if int(arr.view(arr.dtype.str.replace("i", "u")).max()) < hi:
            return
    mn, mx = int(arr.min()), int(arr.max())
    if mn < lo or mx >= hi:
        raise InputError(f"{what}: entries must lie in [{lo}, {hi}), found range [{mn}, {mx}]")


def require_pointer(ptr: np.ndarray, total: int, what: str) -> None:
    """A CSR-style pointer: starts at 0, non-decreasing, ends at ``total``."""
    if ptr.size == 0 or int(ptr[0]) != 0 or int(ptr[-1]) != total:
        first = int(ptr[0]) if ptr.size else None
        last = int(ptr[-1]) if ptr.size else None
        raise InputError(f"{what}: must start at 0 and end at {total}, got {first}..{last}")
    if ptr.size > 1 and bool((ptr[1:] < ptr[:-1]).any()):
        raise InputError(f"{what}: must be non-decreasing")


def require_value_dtype(data: np.ndarray, what: str) -> str:
    """The format's value dtype, which must be float32 or float64."""
    from schedules.sparse.executors.codegen import check_dtype

    return check_dtype(data.dtype, what)
