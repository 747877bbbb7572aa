"""numpy <-> TVM without copies: DLPack views, aligned outputs, overlap checks.

Every public call that takes numpy operands into a TVM kernel uses these
helpers instead of ``tvm.runtime.tensor(arr)`` / ``tensor.numpy()``, which copy:

* :func:`as_tvm_view` views a C-contiguous numpy array as a TVM tensor
  (``tvm_ffi.from_dlpack``), read-only arrays included; an array off the
  alignment the kernel assumes is copied to an aligned one (or refused);
* :func:`as_numpy_view` is the way back (``np.from_dlpack``);
* :func:`empty_aligned` allocates a numpy output whose buffer starts at a
  64-byte boundary, so the kernel writes straight into the array returned;
* :func:`byte_span` / :func:`overlaps` tell whether two operands (numpy arrays
  or TVM tensors) share memory, for refusing an output that aliases an input.

A view keeps its array alive (the DLPack capsule holds a reference), so the
array may be dropped while the tensor is in use, and the other way round.

Alignment: TVM declares a PrimFunc's buffers 64-byte aligned unless told
otherwise, and LLVM may then emit aligned vector moves, which fault on an
array numpy placed on a 16-byte boundary.  Pass ``alignment=`` the alignment
the kernel's buffers were declared with (the sparse executors declare one
element, so they pass ``alignment=0``: no copy, ever).

>>> import numpy as np
>>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
>>> t = as_tvm_view(a, alignment=0)
>>> t.data_ptr() == a.ctypes.data, tuple(t.shape)
(True, (2, 3))
>>> out = empty_aligned((2, 3), "float32")
>>> out.ctypes.data % 64, overlaps(a, out), overlaps(a, a[1:])
(0, False, True)
"""
from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from tvm_ext.errors import InputError

__all__ = ["as_tvm_view", "as_numpy_view", "empty_aligned", "aligned_copy", "is_aligned",
           "writable_alias", "byte_span", "overlaps", "ALIGNMENT"]

#: Byte alignment of the buffers :func:`empty_aligned` returns (TVM's own default).
ALIGNMENT = 64


class _WritableInterface:
    """An ``__array_interface__`` over a read-only array's memory, flagged writable.

    numpy refuses to export a read-only array through (unversioned) DLPack,
    which is the only form ``tvm_ffi.from_dlpack`` consumes.  The kernels
    never write their inputs, so the same memory is re-exported writable; the
    original array is kept alive as ``base``.
    """

    __slots__ = ("__array_interface__", "base")

    def __init__(self, arr: np.ndarray):
        self.base = arr
        iface = dict(arr.__array_interface__)
        iface["data"] = (iface["data"][0], False)
        self.__array_interface__ = iface


def writable_alias(arr: np.ndarray) -> np.ndarray:
    """``arr`` itself if writable, else a writable numpy array over the same memory.

    For handing read-only inputs to DLPack consumers that never write them.

    >>> import numpy as np
    >>> a = np.zeros(3); a.flags.writeable = False
    >>> b = writable_alias(a); b.flags.writeable, np.shares_memory(a, b)
    (True, True)
    """
    return arr if arr.flags.writeable else np.asarray(_WritableInterface(arr))


def is_aligned(arr: np.ndarray, alignment: int = ALIGNMENT) -> bool:
    """Whether ``arr``'s data starts at an ``alignment``-byte boundary."""
    return arr.__array_interface__["data"][0] % alignment == 0


def as_tvm_view(arr: np.ndarray, *, alignment: int = ALIGNMENT, copy_misaligned: bool = True,
                name: str = "array"):
    """A TVM tensor on the CPU sharing ``arr``'s memory (no copy).

    * ``arr`` must be a C-contiguous numpy array (:class:`~tvm_ext.errors.InputError`
      otherwise: copy it with :func:`aligned_copy` first);
    * read-only arrays are viewed too; the caller must then only read the tensor;
    * ``alignment``: the bytes the consuming kernel assumes (TVM's default 64;
      ``0`` = one element).  An array off it is copied to an aligned one, or
      refused when ``copy_misaligned=False``.  An array not even aligned to
      its element size is always copied (or refused).

    >>> import numpy as np
    >>> a = np.ones(4, np.float64); a.flags.writeable = False
    >>> as_tvm_view(a, alignment=0).data_ptr() == a.ctypes.data
    True
    """
    import tvm_ffi

    if not isinstance(arr, np.ndarray):
        raise InputError(f"{name}: expected a numpy array, got {type(arr).__name__}")
    flags = arr.flags
    if not flags.c_contiguous:
        raise InputError(f"{name}: not C-contiguous (shape {arr.shape}, strides {arr.strides}); "
                         "copy it with np.ascontiguousarray")
    if not flags.aligned or (alignment and not is_aligned(arr, alignment)):
        if not copy_misaligned:
            raise InputError(f"{name}: not {alignment or arr.dtype.itemsize}-byte aligned; "
                             "allocate it with tvm_ext.zero_copy.empty_aligned")
        arr = aligned_copy(arr)
    elif not flags.writeable:
        arr = np.asarray(_WritableInterface(arr))
    return tvm_ffi.from_dlpack(arr, require_alignment=0)


def as_numpy_view(tensor: Any) -> np.ndarray:
    """A numpy array sharing a CPU TVM tensor's memory (no copy); it keeps the tensor alive."""
    return np.from_dlpack(tensor)


def empty_aligned(shape: int | tuple[int, ...], dtype: Any, align: int = ALIGNMENT) -> np.ndarray:
    """An uninitialised C-contiguous numpy array whose data starts at an ``align``-byte boundary.

    It over-allocates by ``align`` bytes and slices at the boundary, so the
    array's ``.base`` chain ends in that one allocation.

    >>> empty_aligned((3, 5), "float64").ctypes.data % 64
    0
    """
    dt = np.dtype(dtype)
    shp = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    nbytes = math.prod(shp) * dt.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    start = -_address(raw) % align
    return raw[start:start + nbytes].view(dt).reshape(shp)


def _address(arr: np.ndarray) -> int:
    """Data address of a writable numpy array (faster than ``arr.ctypes.data``)."""
    return ctypes.addressof(ctypes.c_char.from_buffer(arr))


def aligned_copy(arr: Any, dtype: Any = None) -> np.ndarray:
    """A C-contiguous, 64-byte aligned copy of ``arr`` (optionally cast to ``dtype``)."""
    src = np.asarray(arr)
    out = empty_aligned(src.shape, dtype if dtype is not None else src.dtype)
    np.copyto(out, src, casting="unsafe")
    return out


def byte_span(x: Any) -> tuple[int, int]:
    """``[lo, hi)`` addresses of the bytes a numpy array or TVM tensor can touch.

    >>> import numpy as np
    >>> a = np.zeros(10, np.float32)
    >>> lo, hi = byte_span(a[2:5]); hi - lo
    12
    """
    if isinstance(x, np.ndarray):
        lo, hi = np.lib.array_utils.byte_bounds(x) if hasattr(np.lib, "array_utils") \
            else np.byte_bounds(x)
        return int(lo), int(hi)
    shape = tuple(int(s) for s in x.shape)
    if any(s == 0 for s in shape):
        return (0, 0)
    itemsize = np.dtype(str(x.dtype)).itemsize
    strides = x.strides
    if strides is None or len(tuple(strides)) == 0:
        span = int(np.prod(shape, dtype=np.int64))
        lo_el, hi_el = 0, span
    else:
        st = [int(s) for s in strides]
        lo_el = sum((n - 1) * s for n, s in zip(shape, st) if s < 0)
        hi_el = 1 + sum((n - 1) * s for n, s in zip(shape, st) if s > 0)
    base = int(x.data_ptr())
    return base + lo_el * itemsize, base + hi_el * itemsize


def overlaps(a: Any, b: Any) -> bool:
    """Whether two operands (numpy arrays or TVM tensors) may share memory.

    Exact for contiguous operands; for strided numpy arrays it is numpy's
    bounds test (``np.may_share_memory``), which may report interleaved
    arrays as overlapping.
    """
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return bool(np.may_share_memory(a, b))
    lo_a, hi_a = byte_span(a)
    lo_b, hi_b = byte_span(b)
    return lo_a < hi_b and lo_b < hi_a and hi_a > lo_a and hi_b > lo_b
