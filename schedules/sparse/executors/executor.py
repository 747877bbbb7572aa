"""The executor object: a compiled TIR kernel bound to one sparse format instance.

:func:`build_executor` validates the format, picks/resolves the params,
generates the format's PrimFunc, compiles it once per signature through
:func:`tvm_ext.kernel_cache.get_or_build` (sizes are symbolic, so one kernel
serves every matrix of that format/params/dtype), and converts the format's
arrays (plus the partition arrays) to TVM tensors once.  Calling the
:class:`Executor` computes ``C = alpha * op(A) @ B + beta * C``.

>>> import numpy as np, scipy.sparse as sp
>>> from schedules.sparse.formats import CSR
>>> A = sp.csr_array(np.array([[1.0, 0.0], [2.0, 3.0]], dtype=np.float32))
>>> A.indptr, A.indices = A.indptr.astype(np.int32), A.indices.astype(np.int32)
>>> exe = build_executor(CSR.from_scipy(A), n_cols=2)
>>> exe(np.ones((2, 2), np.float32)).tolist()
[[1.0, 1.0], [5.0, 5.0]]
"""
from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from schedules.sparse.executors.codegen import check_dtype
from schedules.sparse.executors.spec import KINDS, ExecParams, FormatKernels
from tvm_ext.errors import ConfigError, InputError, ShapeError
from tvm_ext.timing import Timing, time_tvm
from tvm_ext.zero_copy import empty_aligned, is_aligned

__all__ = ["Executor", "Timing", "build_executor", "register_kernels", "kernels_for",
           "registered_formats"]

_INT32_MAX = np.iinfo(np.int32).max
_INF = float("inf")
_REGISTRY: dict[str, FormatKernels] = {}
_PRIMFUNCS: dict[tuple, Any] = {}


def register_kernels(kernels: FormatKernels) -> FormatKernels:
    """Register a format's kernel generator under its format name."""
    _REGISTRY[kernels.format_name] = kernels
    return kernels


def registered_formats() -> list[str]:
    """Names of the formats that have an executor."""
    return sorted(_REGISTRY)


def kernels_for(fmt) -> FormatKernels:
    """The kernel generator for a format instance (``InputError`` if none)."""
    name = getattr(type(fmt), "name", None)
    if name not in _REGISTRY:
        raise InputError(f"build_executor: no executor for {type(fmt).__name__}; "
                         f"formats with executors: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


_refcount = sys.getrefcount


class Executor:
    """A compiled executor for one format instance.

    * ``exe(B)`` -> ``A @ B``: numpy in, numpy out; a TVM tensor in, a TVM tensor out;
    * ``exe(B, C, alpha=a, beta=b)`` -> ``a * A @ B + b * C`` (``C`` is not modified);
    * ``exe(B, out=X)`` writes the product into ``X`` (a numpy array or a TVM
      tensor: C-contiguous, the matrix's dtype, the result's shape) and returns
      ``X``; ``out`` may be ``C`` itself (``C = a * A @ B + b * C`` in place) but
      must not share memory with ``B`` (:class:`InputError`);
    * ``exe.prim_func`` is the PrimFunc (schedulable with ``s_tir.Schedule``);
    * ``exe.time(B)`` times the kernel with TVM's ``time_evaluator``.

    numpy operands go to the kernel without copies, through DLPack
    (:mod:`tvm_ext.zero_copy`): ``B`` and ``C`` are viewed, read-only arrays
    included, and the result is a numpy array the executor allocates 64-byte
    aligned, the very buffer the kernel wrote.  The kernels declare their
    dense buffers element-aligned (see
    :func:`~schedules.sparse.executors.codegen.dense_buffers`), so no array is
    copied for its alignment.  A ``B`` or ``C`` that is not C-contiguous (a
    Fortran-order array, a strided slice) is copied into a contiguous one
    first; its dtype must be the matrix's (float32 or float64, no casting).
    Values are not scanned for NaN/Inf: they propagate into the product as in
    scipy and MKL.

    **Result memory** (``exe(B)`` on numpy, no ``out``): the executor keeps
    its last result and writes the next one into it when nothing outside the
    executor refers to that array or its memory any more (the caller dropped
    it, and every view of it); otherwise it allocates a new one.  Like ONNX
    Runtime's arena, steady-state calls then touch pages that are already
    mapped: a fresh 100 MB result costs the kernel's time again in page
    faults.  At most one result's memory is held per executor.
    """

    def __init__(self, fmt, kernels: FormatKernels, params: ExecParams, kind: str,
                 transpose: bool, target: Any):
        import tvm
        import tvm_ffi

        from tvm_ext.kernel_cache import get_or_build
        from tvm_ext.target import num_threads, resolve_target

        self.format = fmt
        self.kind = kind
        self.transpose = bool(transpose)
        self.params = params
        self.target = resolve_target(target)
        self.dtype = check_dtype(fmt.dtype, f"{fmt.name}.data")
        self._np_dtype = np.dtype(self.dtype)
        self._kernels = kernels
        self.signature = kernels.signature(fmt, params, kind, self.transpose)
        key = (self.signature, str(self.target))
        if key not in _PRIMFUNCS:
            _PRIMFUNCS[key] = kernels.primfunc(fmt, params, kind, self.transpose)
        self.prim_func = _PRIMFUNCS[key]
        self.mod = get_or_build(self.signature, lambda: self.prim_func, self.target)
        dev = tvm.cpu(0)
        self._dev = dev
        self._arrays = [_format_tensor(a, dev)
                        for a in kernels.arrays(fmt, params, kind, self.transpose, num_threads())]
        self._scalars = [int(s) for s in kernels.scalars(fmt, self.transpose)]
        m, k = fmt.shape
        self.shape = (k, m) if self.transpose else (m, k)
        self.nnz = kernels.nnz(fmt)
        # Per-call constants: the packed function (looked up once) and its fixed arguments.
        self._main = self.mod["main"]
        self._head = tuple(self._arrays)
        self._tail = tuple(self._scalars)
        self._tensor_cls = tvm.runtime.Tensor
        self._from_dlpack = tvm_ffi.from_dlpack
        self._spmv = kind == "spmv"
        self._b_rank = 1 if self._spmv else 2
        self._itemsize = self._np_dtype.itemsize
        self._m, self._k = self.shape
        self._kshape_spmv = (self._m,)
        self._max_n = _INT32_MAX // max(self.shape + (1,))
        self._spare: np.ndarray | None = None  # the last numpy result, reused once it is dropped

    # ------------------------------------------------------------------ calls
    def __call__(self, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, out=None):
        """``alpha * op(A) @ B + beta * C``; see the class docstring."""
        if (type(B) is np.ndarray and type(beta) is float and beta == 0.0 and type(alpha) is float
                and -_INF < alpha < _INF):
            # The common call with the fewest Python steps (each costs ~0.1 us): numpy B and
            # out go to the kernel as they are, tvm_ffi views them through DLPack, and the
            # kernel's own argument checks refuse a wrong dtype, non-contiguous strides or
            # a read-only array before it runs; then the general path below says why (or
            # copies B).  Sizes the kernel cannot check (B's rows, out's shape) and
            # aliasing are checked here.
            shp = B.shape
            if len(shp) == self._b_rank and shp[0] == self._k and self._m and self._k:
                n = 1 if self._spmv else shp[1]
                if 0 < n <= self._max_n:
                    kshape = self._kshape_spmv if self._spmv else (self._m, n)
                    if out is None:
                        res = self._result_buffer(kshape)
                    elif (type(out) is np.ndarray and out.shape == kshape
                          and not np.may_share_memory(B, out)):
                        res = out
                    else:
                        res = None
                    if res is not None:
                        try:
                            self._main(*self._head, B, res, res, *self._tail, alpha, 0.0)
                            return res
                        except (TypeError, ValueError, BufferError):
                            pass
        return self._call(B, C, alpha, beta, out)

    def _result_buffer(self, kshape: tuple[int, ...]) -> np.ndarray:
        """The last result when only the executor still refers to it and its memory, else a new array.

        The reference counts are exact in CPython: the spare is held by
        ``self._spare``, the local name and ``getrefcount``'s argument (3); its
        base (the over-allocation :func:`empty_aligned` slices) by the spare
        and the argument (2).  A view of the result refers to that base too.
        """
        spare = self._spare
        if (spare is not None and spare.shape == kshape and _refcount(spare) == 3
                and _refcount(spare.base) == 2):
            return spare
        res = self._spare = empty_aligned(kshape, self._np_dtype)
        return res

    def _call(self, B, C, alpha, beta, out):
        """The general path of :meth:`__call__`: every operand kind, validated."""
        alpha = _finite(alpha, "alpha", self)
        beta = _finite(beta, "beta", self)
        b, res_shape, n = self._operand_b(B)
        kshape = self._kshape_spmv if self._spmv else (self._m, n)
        c_in = None
        if beta != 0.0:
            if C is None:
                raise InputError(f"{self._what()}: beta={beta} needs C")
            c_in = self._operand_c(C, kshape, res_shape, "C")
        if out is None:
            if type(B) is np.ndarray or not isinstance(B, self._tensor_cls):
                arr = empty_aligned(kshape, self._np_dtype)
                c_out = self._from_dlpack(arr, require_alignment=0)
                result = arr if res_shape == kshape else arr.reshape(res_shape)
            else:
                import tvm

                c_out = result = tvm.runtime.empty(kshape, self.dtype, self._dev)
        else:
            c_out = self._operand_c(out, kshape, res_shape, "out", writable=True)
            result = out
            self._check_aliasing(b, c_in, c_out)
        if n > self._max_n:
            self._check_int32(n)
        if self._m == 0 or n == 0:
            return result
        if self._k == 0:
            self._zero_columns(c_in, c_out, beta)
            return result
        self._main(*self._head, b, c_out if c_in is None else c_in, c_out, *self._tail, alpha, beta)
        return result

    def time(self, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, repeat: int = 5,
             number: int = 1, min_repeat_ms: int = 50) -> Timing:
        """Time one call with ``time_evaluator`` (operands viewed once, outside)."""
        import tvm

        b, res_shape, n = self._operand_b(B)
        kshape = (self.shape[0],) if self.kind == "spmv" else (self.shape[0], n)
        c_out = tvm.runtime.empty(kshape, self.dtype, self._dev)
        c_in = self._operand_c(C, kshape, res_shape, "C") if C is not None else c_out
        self._check_int32(n)
        return time_tvm(self.mod, "main", *self._arrays, b, c_in, c_out, *self._scalars,
                        _finite(alpha, "alpha", self), _finite(beta, "beta", self),
                        number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, dev=self._dev)

    def flops(self, n_cols: int = 1) -> int:
        """Useful flops of one call: ``2 * nnz * N``."""
        return 2 * self.nnz * int(n_cols)

    # ------------------------------------------------------ scipy LinearOperator
    def matvec(self, x) -> np.ndarray:
        """``op(A) @ x`` for a vector ``x`` (or an ``(k, 1)`` column), either executor kind.

        >>> import numpy as np, scipy.sparse as sp
        >>> from schedules.sparse import CSR, build_executor
        >>> A = sp.random_array((5, 4), density=0.5, format="csr", random_state=0)
        >>> exe = build_executor(CSR.from_scipy(A), kind="spmv")
        >>> bool(np.allclose(exe.matvec(np.ones(4)), A @ np.ones(4)))
        True
        """
        x = np.asarray(x)
        if x.ndim == 2 and x.shape[1] == 1:
            return self.matvec(x[:, 0]).reshape(-1, 1)
        if x.ndim != 1:
            raise ShapeError(f"{self._what()}.matvec: expected a vector, got shape {x.shape}")
        if self._spmv:
            return self(x)
        return self(x.reshape(-1, 1))[:, 0]

    def matmat(self, X) -> np.ndarray:
        """``op(A) @ X`` for a ``(k, n)`` matrix ``X``, either executor kind.

        >>> import numpy as np, scipy.sparse as sp
        >>> from schedules.sparse import CSR, build_executor
        >>> A = sp.random_array((5, 4), density=0.5, format="csr", random_state=0)
        >>> X = np.arange(8.0).reshape(4, 2)
        >>> bool(np.allclose(build_executor(CSR.from_scipy(A)).matmat(X), A @ X))
        True
        """
        X = np.asarray(X)
        if X.ndim != 2:
            raise ShapeError(f"{self._what()}.matmat: expected a matrix, got shape {X.shape}")
        if not self._spmv:
            return self(X)
        out = np.empty((self.shape[0], X.shape[1]), self._np_dtype)
        for j in range(X.shape[1]):
            out[:, j] = self(np.ascontiguousarray(X[:, j]))
        return out

    def __matmul__(self, B):
        """``exe @ B``: :meth:`matvec` for a vector, :meth:`matmat` for a matrix."""
        if isinstance(B, np.ndarray) or isinstance(B, (list, tuple)):
            B = np.asarray(B)
            return self.matvec(B) if B.ndim == 1 else self.matmat(B)
        return self(B)

    def aslinearoperator(self):
        """This executor as a ``scipy.sparse.linalg.LinearOperator`` (for ``cg``, ``pcg``, ``eigsh``, ...).

        >>> import numpy as np, scipy.sparse.linalg as spla
        >>> from schedules.sparse import CSR, build_executor
        >>> from tvm_ext.workloads import lap2d
        >>> A = lap2d(8)
        >>> op = build_executor(CSR.from_scipy(A), kind="spmv").aslinearoperator()
        >>> x, info = spla.cg(op, np.ones(64), rtol=1e-10)
        >>> info, bool(np.allclose(A @ x, 1.0))
        (0, True)
        """
        from scipy.sparse.linalg import LinearOperator

        return LinearOperator(self.shape, matvec=self.matvec, matmat=self.matmat,
                              dtype=self._np_dtype)

    def __repr__(self) -> str:
        t = ".T" if self.transpose else ""
        return (f"Executor({self.format.name}{t} {self.kind} {self.shape[0]}x{self.shape[1]} "
                f"nnz={self.nnz} {self.dtype} {self.params})")

    # --------------------------------------------------------------- helpers
    def _what(self) -> str:
        return f"{self.format.name} {self.kind} executor"

    def _zero_columns(self, c_in, c_out, beta: float) -> None:
        """A has no columns: the product is zero, the result ``beta * C``."""
        res = np.from_dlpack(c_out)
        if beta != 0.0:
            np.multiply(np.from_dlpack(c_in), beta, out=res)
        else:
            res[...] = 0

    def _check_int32(self, n: int) -> None:
        if max(self.shape) * max(n, 1) > _INT32_MAX:
            raise InputError(f"{self._what()}: {max(self.shape)} rows x {n} columns overflows "
                             "the int32 indexing of the kernels; split B into column blocks")

    def _view(self, arr: np.ndarray):
        """A TVM view of a C-contiguous numpy array of the right dtype (no copy)."""
        if arr.flags.writeable:
            return self._from_dlpack(arr, require_alignment=0)
        from tvm_ext.zero_copy import as_tvm_view

        return as_tvm_view(arr, alignment=0, name=self._what())

    def _operand_b(self, B):
        """``B`` as a TVM tensor the kernel reads, the shape of the result the
        caller gets, and N.  numpy arrays are viewed, not copied, when they are
        C-contiguous; others are copied contiguous."""
        rows = self._k
        if type(B) is np.ndarray and B.dtype == self._np_dtype and B.flags.c_contiguous:
            shp = B.shape  # the fast path: a C-contiguous numpy array of the right dtype
            if len(shp) == 2 and shp[0] == rows and not self._spmv:
                return self._view(B), (self._m, shp[1]), shp[1]
            if len(shp) == 1 and shp[0] == rows:
                return self._view(B if self._spmv else B.reshape(rows, 1)), (self._m,), 1
        if isinstance(B, self._tensor_cls):
            self._check_tensor(B, "B")
            shp = tuple(B.shape)
            if self._spmv:
                if shp != (rows,):
                    raise ShapeError(f"{self._what()}: B has shape {shp}, expected ({rows},)")
                return B, (self._m,), 1
            if len(shp) != 2 or shp[0] != rows:
                raise ShapeError(f"{self._what()}: B has shape {shp}, expected ({rows}, N)")
            return B, (self._m, shp[1]), shp[1]
        dt = getattr(B, "dtype", None)
        if dt is None or not hasattr(B, "shape"):
            raise InputError(f"{self._what()}: B must be a numpy array or TVM tensor, "
                             f"got {type(B).__name__}")
        if dt != self._np_dtype:
            raise InputError(f"{self._what()}: B has dtype {np.dtype(dt)}, the matrix is "
                             f"{self.dtype}; convert one of them")
        from tvm_ext.workloads import check_dense_operand

        # validation, errors and the contiguous copy of a strided B in one place
        shp = tuple(B.shape)
        arr = check_dense_operand(B, rows, dtype=self._np_dtype, what=f"{self._what()}: B",
                                  allow_nan=True)
        n = arr.shape[1]
        if self._spmv:
            if n != 1:
                raise ShapeError(f"{self._what()}: B has {n} columns; SpMV takes one "
                                 "(build with kind='spmm' for several)")
            return self._view(arr.reshape(rows)), (self._m,) if len(shp) == 1 else (self._m, 1), 1
        return self._view(arr), (self._m,) if len(shp) == 1 else (self._m, n), n

    def _operand_c(self, X, kshape: tuple, res_shape: tuple, what: str, writable: bool = False):
        """``C`` or ``out`` as a TVM tensor of the kernel's shape ``kshape``.

        numpy arrays may also have the result's shape ``res_shape`` (a column
        ``(M, 1)`` for a vector result); ``out`` must be writable and C-contiguous
        (it is written in place), ``C`` is viewed or copied like ``B``."""
        if type(X) is np.ndarray and X.shape == kshape and X.dtype == self._np_dtype:
            flags = X.flags  # the fast path: exactly the kernel's shape and dtype
            if flags.c_contiguous and flags.aligned and (flags.writeable or not writable):
                return self._view(X)
        if isinstance(X, self._tensor_cls):
            self._check_tensor(X, what)
            if tuple(X.shape) != kshape:
                raise ShapeError(f"{self._what()}: {what} has shape {tuple(X.shape)}, "
                                 f"expected {kshape}")
            return X
        if not isinstance(X, np.ndarray):
            if writable:
                raise InputError(f"{self._what()}: out must be a numpy array or TVM tensor, "
                                 f"got {type(X).__name__}")
            X = np.asarray(X)
        if X.dtype != self._np_dtype:
            raise InputError(f"{self._what()}: {what} has dtype {X.dtype}, expected {self.dtype}")
        if X.shape != kshape and X.shape != res_shape and not (
                len(kshape) == 1 and X.shape == (kshape[0], 1)):
            raise ShapeError(f"{self._what()}: {what} has shape {X.shape}, expected {res_shape}")
        if writable:
            flags = X.flags
            if not (flags.c_contiguous and flags.writeable and flags.aligned):
                raise InputError(f"{self._what()}: out must be a writable, C-contiguous, aligned "
                                 f"array (got strides {X.strides}, writeable={flags.writeable}); "
                                 "it is written in place")
        elif not X.flags.c_contiguous:
            X = np.ascontiguousarray(X)
        return self._view(X if X.shape == kshape else X.reshape(kshape))

    def _check_aliasing(self, b, c_in, c_out) -> None:
        """``out`` must not share memory with the ``B`` the kernel reads (it would
        overwrite what it still reads), and may overlap ``C`` only by being
        exactly ``C`` (the in-place update).  Checked on the tensors the kernel
        gets: a strided ``B`` was copied, so an ``out`` over it is harmless."""
        if b.is_contiguous() and c_out.is_contiguous():  # inline spans: the common case
            lo_b, lo_o = b.data_ptr(), c_out.data_ptr()
            o_span = (lo_o, lo_o + c_out.numel() * self._itemsize)
            overlap = _spans_overlap((lo_b, lo_b + b.numel() * self._itemsize), o_span)
        else:
            o_span = self._span(c_out)
            overlap = _spans_overlap(self._span(b), o_span)
        if overlap:
            raise InputError(f"{self._what()}: out shares memory with B; the kernel would "
                             "overwrite B while reading it (pass a separate out)")
        if c_in is not None:
            c_span = self._span(c_in)
            if c_span != o_span and _spans_overlap(c_span, o_span):
                raise InputError(f"{self._what()}: out partially overlaps C; pass out=C for an "
                                 "in-place update, or a separate out")

    def _span(self, t) -> tuple[int, int]:
        """Byte range ``[lo, hi)`` of a TVM tensor."""
        if t.is_contiguous():
            lo = t.data_ptr()
            return lo, lo + t.numel() * self._itemsize
        from tvm_ext.zero_copy import byte_span

        return byte_span(t)

    def _check_tensor(self, t, what: str) -> None:
        if str(t.dtype) != self.dtype:
            raise InputError(f"{self._what()}: {what} has dtype {t.dtype}, the matrix is {self.dtype}")
        if t.device.dlpack_device_type() != 1:  # kDLCPU
            raise InputError(f"{self._what()}: {what} must live on the CPU, got {t.device}")


def _spans_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[0] < a[1] and b[0] < b[1]


def _finite(v, what: str, exe: Executor) -> float:
    """``v`` as a finite float (:class:`InputError` otherwise)."""
    try:
        f = float(v)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{exe._what()}: {what} must be a real number, got {v!r}") from exc
    if not math.isfinite(f):
        raise InputError(f"{exe._what()}: {what} must be finite, got {f}")
    return f


def _format_tensor(a, dev):
    """A format array as the kernel's argument: a zero-copy DLPack view when it is
    C-contiguous and 64-byte aligned (the alignment the kernels declare for format
    buffers; the inspectors allocate so), else a copy.  A view shares the format's
    memory: writing into a format's arrays after the build changes the product."""
    import tvm
    import tvm_ffi

    if (isinstance(a, np.ndarray) and a.flags.c_contiguous and a.flags.writeable and a.size
            and is_aligned(a)):
        return tvm_ffi.from_dlpack(a)
    return tvm.runtime.tensor(np.ascontiguousarray(a), dev)


def build_executor(fmt, n_cols: int | None = None, *, kind: str = "spmm",
                   params: ExecParams | None = None, target: Any = None,
                   transpose: bool = False) -> Executor:
    """Compile (or fetch from the kernel cache) the executor for ``fmt``.

    * ``n_cols``: expected N (chooses the default row-tile width); any N works.
    * ``kind``: ``"spmm"`` (B is K x N) or ``"spmv"`` (B is a vector).
    * ``params``: the format's params dataclass (``None`` = defaults).
    * ``transpose``: compute ``A.T @ B`` (CSB only).
    """
    from schedules.sparse.formats import SparseFormat

    if not isinstance(fmt, SparseFormat):
        raise InputError(f"build_executor: expected a schedules.sparse.formats format, "
                         f"got {type(fmt).__name__} (run an inspector first)")
    if kind not in KINDS:
        raise ConfigError(f"build_executor: kind must be one of {KINDS}, got {kind!r}")
    if n_cols is not None and (int(n_cols) != n_cols or n_cols < 1):
        raise ConfigError(f"build_executor: n_cols must be a positive integer, got {n_cols!r}")
    kernels = kernels_for(fmt)
    if transpose and not kernels.transposable:
        raise ConfigError(f"build_executor: transpose=True is supported by CSB only, not {fmt.name}")
    kernels.check(fmt)
    dtype = check_dtype(fmt.dtype, f"{fmt.name}.data")
    p = kernels.params_cls() if params is None else params
    if not isinstance(p, kernels.params_cls):
        raise ConfigError(f"build_executor: {fmt.name} takes {kernels.params_cls.__name__}, "
                          f"got {type(p).__name__}")
    p = kernels.resolve(fmt, p, dtype, kind, 1 if kind == "spmv" else n_cols, target)
    return Executor(fmt, kernels, p, kind, transpose, target)
