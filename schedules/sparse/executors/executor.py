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

from typing import Any

import numpy as np

from schedules.sparse.executors.codegen import check_dtype
from schedules.sparse.executors.spec import KINDS, ExecParams, FormatKernels
from tvm_ext.errors import ConfigError, InputError, ShapeError
from tvm_ext.timing import Timing, time_tvm

__all__ = ["Executor", "Timing", "build_executor", "register_kernels", "kernels_for",
           "registered_formats"]

_INT32_MAX = np.iinfo(np.int32).max
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


class Executor:
    """A compiled executor for one format instance.

    * ``exe(B)`` -> ``A @ B`` (numpy in, numpy out; a TVM tensor in, a TVM tensor out);
    * ``exe(B, C, alpha=a, beta=b)`` -> ``a * A @ B + b * C`` (``C`` is not modified;
      pass ``out=`` a TVM tensor to write in place, which may be ``C`` itself);
    * ``exe.prim_func`` is the PrimFunc (schedulable with ``s_tir.Schedule``);
    * ``exe.time(B)`` times the kernel with TVM's ``time_evaluator``.
    """

    def __init__(self, fmt, kernels: FormatKernels, params: ExecParams, kind: str,
                 transpose: bool, target: Any):
        import tvm

        from tvm_ext.kernel_cache import get_or_build
        from tvm_ext.target import num_threads, resolve_target

        self.format = fmt
        self.kind = kind
        self.transpose = bool(transpose)
        self.params = params
        self.target = resolve_target(target)
        self.dtype = check_dtype(fmt.dtype, f"{fmt.name}.data")
        self._kernels = kernels
        self.signature = kernels.signature(fmt, params, kind, self.transpose)
        key = (self.signature, str(self.target))
        if key not in _PRIMFUNCS:
            _PRIMFUNCS[key] = kernels.primfunc(fmt, params, kind, self.transpose)
        self.prim_func = _PRIMFUNCS[key]
        self.mod = get_or_build(self.signature, lambda: self.prim_func, self.target)
        dev = tvm.cpu(0)
        self._dev = dev
        self._arrays = [tvm.runtime.tensor(np.ascontiguousarray(a), dev)
                        for a in kernels.arrays(fmt, params, kind, self.transpose, num_threads())]
        self._scalars = [int(s) for s in kernels.scalars(fmt, self.transpose)]
        m, k = fmt.shape
        self.shape = (k, m) if self.transpose else (m, k)
        self.nnz = kernels.nnz(fmt)

    # ------------------------------------------------------------------ calls
    def __call__(self, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, out=None):
        """``alpha * op(A) @ B + beta * C``; see the class docstring."""
        import tvm

        is_tvm = isinstance(B, tvm.runtime.Tensor)
        b, squeeze = self._dense_b(B, is_tvm)
        n = 1 if self.kind == "spmv" else int(b.shape[1])
        out_shape = (self.shape[0],) if self.kind == "spmv" else (self.shape[0], n)
        alpha, beta = self._scalar(alpha, "alpha"), self._scalar(beta, "beta")
        c_in = None
        if beta != 0.0:
            if C is None:
                raise InputError(f"{self._what()}: beta={beta} needs C")
            c_in = self._dense_c(C, out_shape, "C")
        if out is not None:
            if not isinstance(out, tvm.runtime.Tensor):
                raise InputError(f"{self._what()}: out must be a TVM tensor, got {type(out).__name__}")
            c_out = self._dense_c(out, out_shape, "out")
        else:
            c_out = tvm.runtime.empty(out_shape, self.dtype, self._dev)
        if c_in is None:
            c_in = c_out
        self._run(b, c_in, c_out, n, alpha, beta)
        if is_tvm:
            return c_out
        res = c_out.numpy()
        if squeeze:
            return res.reshape(res.shape[0])
        return res[:, None] if res.ndim == 1 else res

    def time(self, B, C=None, *, alpha: float = 1.0, beta: float = 0.0, repeat: int = 5,
             number: int = 1, min_repeat_ms: int = 50) -> Timing:
        """Time one call with ``time_evaluator`` (operands converted once, outside)."""
        import tvm

        b, _ = self._dense_b(B, isinstance(B, tvm.runtime.Tensor))
        n = 1 if self.kind == "spmv" else int(b.shape[1])
        out_shape = (self.shape[0],) if self.kind == "spmv" else (self.shape[0], n)
        c_out = tvm.runtime.empty(out_shape, self.dtype, self._dev)
        c_in = self._dense_c(C, out_shape, "C") if C is not None else c_out
        self._check_int32(n)
        return time_tvm(self.mod, "main", *self._arrays, b, c_in, c_out, *self._scalars,
                        self._scalar(alpha, "alpha"), self._scalar(beta, "beta"),
                        number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, dev=self._dev)

    def flops(self, n_cols: int = 1) -> int:
        """Useful flops of one call: ``2 * nnz * N``."""
        return 2 * self.nnz * int(n_cols)

    def __repr__(self) -> str:
        t = ".T" if self.transpose else ""
        return (f"Executor({self.format.name}{t} {self.kind} {self.shape[0]}x{self.shape[1]} "
                f"nnz={self.nnz} {self.dtype} {self.params})")

    # --------------------------------------------------------------- helpers
    def _what(self) -> str:
        return f"{self.format.name} {self.kind} executor"

    def _run(self, b, c_in, c_out, n: int, alpha: float, beta: float) -> None:
        if self.shape[0] == 0 or n == 0:
            return
        if self.shape[1] == 0:  # no columns in A: the product is zero
            res = np.zeros(tuple(c_out.shape), self.dtype)
            if beta != 0.0:
                res += beta * c_in.numpy()
            c_out.copyfrom(res)
            return
        self._check_int32(n)
        self.mod["main"](*self._arrays, b, c_in, c_out, *self._scalars, alpha, beta)

    def _check_int32(self, n: int) -> None:
        if max(self.shape) * max(n, 1) > _INT32_MAX:
            raise InputError(f"{self._what()}: {max(self.shape)} rows x {n} columns overflows "
                             "the int32 indexing of the kernels; split B into column blocks")

    def _scalar(self, v, what: str) -> float:
        try:
            f = float(v)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{self._what()}: {what} must be a real number, got {v!r}") from exc
        if not np.isfinite(f):
            raise InputError(f"{self._what()}: {what} must be finite, got {f}")
        return f

    def _dense_b(self, B, is_tvm: bool):
        """B as a TVM tensor of the right shape; also whether to squeeze the result."""
        import tvm

        rows = self.shape[1]
        if is_tvm:
            self._check_tensor(B, "B")
            shp = tuple(B.shape)
            if self.kind == "spmv":
                if shp != (rows,):
                    raise ShapeError(f"{self._what()}: B has shape {shp}, expected ({rows},)")
            elif len(shp) != 2 or shp[0] != rows:
                raise ShapeError(f"{self._what()}: B has shape {shp}, expected ({rows}, N)")
            return B, False
        if not hasattr(B, "dtype") or not hasattr(B, "shape"):
            raise InputError(f"{self._what()}: B must be a numpy array or TVM tensor, "
                             f"got {type(B).__name__}")
        if np.dtype(B.dtype) != np.dtype(self.dtype):
            raise InputError(f"{self._what()}: B has dtype {np.dtype(B.dtype)}, the matrix is "
                             f"{self.dtype}; convert one of them")
        from tvm_ext.workloads import check_dense_operand

        squeeze = np.ndim(B) == 1
        arr = check_dense_operand(B, rows, dtype=self.dtype, what=f"{self._what()}: B")
        if self.kind == "spmv":
            if arr.shape[1] != 1:
                raise ShapeError(f"{self._what()}: B has {arr.shape[1]} columns; SpMV takes one "
                                 "(build with kind='spmm' for several)")
            arr = arr[:, 0]
            return tvm.runtime.tensor(np.ascontiguousarray(arr), self._dev), squeeze
        return tvm.runtime.tensor(arr, self._dev), squeeze

    def _dense_c(self, C, shape: tuple, what: str):
        import tvm

        if isinstance(C, tvm.runtime.Tensor):
            self._check_tensor(C, what)
            if tuple(C.shape) != shape:
                raise ShapeError(f"{self._what()}: {what} has shape {tuple(C.shape)}, expected {shape}")
            return C
        arr = np.asarray(C)
        if arr.dtype != np.dtype(self.dtype):
            raise InputError(f"{self._what()}: {what} has dtype {arr.dtype}, expected {self.dtype}")
        if arr.shape != shape:
            if self.kind == "spmv" and arr.shape == (shape[0], 1):
                arr = arr[:, 0]
            else:
                raise ShapeError(f"{self._what()}: {what} has shape {arr.shape}, expected {shape}")
        if not np.isfinite(arr).all():
            raise InputError(f"{self._what()}: {what} contains NaN or Inf")
        return tvm.runtime.tensor(np.ascontiguousarray(arr), self._dev)

    def _check_tensor(self, t, what: str) -> None:
        if str(t.dtype) != self.dtype:
            raise InputError(f"{self._what()}: {what} has dtype {t.dtype}, the matrix is {self.dtype}")
        if t.device.dlpack_device_type() != 1:  # kDLCPU
            raise InputError(f"{self._what()}: {what} must live on the CPU, got {t.device}")


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
