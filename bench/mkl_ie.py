"""MKL's own inspector-executor SpMM/SpMV ("MKL I/E", the dissertation's peer) through ctypes.

``sparse_dot_mkl`` builds a fresh MKL handle on every call and never runs
``mkl_sparse_optimize``; this peer does what an MKL user who keeps the matrix
would do: create the CSR handle once, give it the ``mm``/``mv`` hint with the
expected call count, run ``mkl_sparse_optimize`` (MKL's inspector), then call
``mkl_sparse_{s,d}_mm`` (row-major ``B``) or ``mkl_sparse_{s,d}_mv``.  It loads
``libmkl_rt`` from ``$MKL_RT`` or the ``mkl`` wheel's ``<prefix>/lib``.

>>> import numpy as np, scipy.sparse as sp
>>> A = sp.random(50, 40, 0.1, format="csr", dtype=np.float64, random_state=0)
>>> B = np.ones((40, 3))
>>> bool(np.allclose(MklCsr(A, 3).matmul(B), A @ B))
True
"""
from __future__ import annotations

import ctypes
import glob
import os
import sys
from typing import Any

import numpy as np

__all__ = ["MklCsr", "available", "set_threads", "mkl_rt_path"]

_OP_N, _INDEX_ZERO, _LAYOUT_ROW, _MATRIX_GENERAL = 10, 0, 101, 20
_LIB: Any = None


class _Descr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("mode", ctypes.c_int), ("diag", ctypes.c_int)]


def mkl_rt_path() -> str | None:
    """``$MKL_RT``, else the newest ``libmkl_rt.so*`` under ``sys.prefix/lib``."""
    env = os.environ.get("MKL_RT", "")
    if env and os.path.exists(env):
        return env
    found = sorted(glob.glob(os.path.join(sys.prefix, "lib", "libmkl_rt.so*")))
    return found[-1] if found else None


def _lib():
    global _LIB
    if _LIB is None:
        path = mkl_rt_path()
        if path is None:
            raise ImportError("libmkl_rt not found: pip install mkl, or set MKL_RT")
        _LIB = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    return _LIB


def available() -> bool:
    """Whether libmkl_rt can be loaded."""
    try:
        _lib()
    except (ImportError, OSError):
        return False
    return True


def set_threads(n: int) -> None:
    """MKL's thread count (``MKL_Set_Num_Threads``)."""
    _lib().MKL_Set_Num_Threads(ctypes.c_int(int(n)))


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"MKL {what} failed with status {status}")


def _ptr(a: np.ndarray) -> ctypes.c_void_p:
    return a.ctypes.data_as(ctypes.c_void_p)


class MklCsr:
    """An optimised MKL handle of a float32/float64 scipy CSR matrix for ``n_cols``-column products."""

    def __init__(self, A, n_cols: int, expected_calls: int = 1000):
        mkl = _lib()
        A = A.tocsr()
        self.dtype = np.dtype(A.dtype)
        if self.dtype not in (np.float32, np.float64):
            raise TypeError(f"MklCsr: float32 or float64 values, got {self.dtype}")
        self._p = "s" if self.dtype == np.float32 else "d"
        self._scalar = ctypes.c_float if self._p == "s" else ctypes.c_double
        self.shape = A.shape
        self.indptr = np.ascontiguousarray(A.indptr, dtype=np.int32)
        self.indices = np.ascontiguousarray(A.indices, dtype=np.int32)
        self.data = np.ascontiguousarray(A.data)
        self.handle = ctypes.c_void_p()
        create = getattr(mkl, f"mkl_sparse_{self._p}_create_csr")
        _check(create(ctypes.byref(self.handle), _INDEX_ZERO, ctypes.c_int(A.shape[0]),
                      ctypes.c_int(A.shape[1]), _ptr(self.indptr), _ptr(self.indptr[1:]),
                      _ptr(self.indices), _ptr(self.data)), "create_csr")
        self.descr = _Descr(_MATRIX_GENERAL, 0, 0)
        if n_cols == 1:
            _check(mkl.mkl_sparse_set_mv_hint(self.handle, _OP_N, self.descr,
                                              ctypes.c_int(expected_calls)), "set_mv_hint")
        else:
            _check(mkl.mkl_sparse_set_mm_hint(self.handle, _OP_N, self.descr, _LAYOUT_ROW,
                                              ctypes.c_int(n_cols), ctypes.c_int(expected_calls)),
                   "set_mm_hint")
        _check(mkl.mkl_sparse_optimize(self.handle), "optimize")
        self._mv = getattr(mkl, f"mkl_sparse_{self._p}_mv")
        self._mm = getattr(mkl, f"mkl_sparse_{self._p}_mm")

    def matmul(self, B: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``A @ B`` for a vector or a row-major ``K x N`` ``B`` (numpy in, numpy out)."""
        M, _ = self.shape
        B = np.ascontiguousarray(B, dtype=self.dtype)
        one, zero = self._scalar(1.0), self._scalar(0.0)
        if B.ndim == 1:
            out = np.empty(M, self.dtype) if out is None else out
            _check(self._mv(_OP_N, one, self.handle, self.descr, _ptr(B), zero, _ptr(out)), "mv")
            return out
        N = B.shape[1]
        out = np.empty((M, N), self.dtype) if out is None else out
        _check(self._mm(_OP_N, one, self.handle, self.descr, _LAYOUT_ROW, _ptr(B), ctypes.c_int(N),
                        ctypes.c_int(N), zero, _ptr(out), ctypes.c_int(N)), "mm")
        return out

    def __del__(self):
        if getattr(self, "handle", None) and _LIB is not None:
            _LIB.mkl_sparse_destroy(self.handle)
