"""Sextans BYOC, Relax side: a CSR sparse-matmul op with an llvm fallback.

Relax has no sparse tensors and no sparse ops, so the op is built from what
Relax has:

* **The sparse operand** (a pruned weight or a graph adjacency, constant for
  the model) is carried as three ordinary tensor parameters of the Relax
  function: ``indptr`` (int32, M+1), ``indices`` (int32, nnz) and ``data``
  (float32, nnz).  :class:`SparseOperand` creates those ``relax.Var``s and
  holds the arrays to pass at run time, like any other weight.
* **The op** is ``R.call_tir`` of one of two TIR PrimFuncs, recognisable by
  their global names: ``sextans_spmm`` computes ``A @ B``;
  ``sextans_spmm_axpby`` computes ``alpha * A @ B + beta * C`` with
  ``alpha, beta`` in a float32 tensor of shape (2,).  Shapes are symbolic,
  so one PrimFunc serves every call.
* **The llvm fallback** is that PrimFunc itself: when nothing offloads the
  call, Relax compiles it for the host CPU (rows in parallel, fp32
  accumulation in CSR order).
* **Offload**: :mod:`~tvm_ext.spmm_engine.byoc` matches
  ``is_call_tir("sextans_spmm")`` / ``is_call_tir("sextans_spmm_axpby")``
  (:func:`sextans_patterns`, also in TVM's pattern registry), and its code
  generator swaps the call for the Sextans runtime function.

>>> import scipy.sparse as sp
>>> from tvm import relax
>>> A = sparse_operand("adj", sp.eye(4, format="csr"))
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType((4, 2), "float32"))
>>> with bb.function("main", [*A.params, x]):
...     y = emit_sparse_matmul(bb, A, x)
...     _ = bb.emit_func_output(y)
>>> "sextans_spmm" in [gv.name_hint for gv in bb.get().get_global_vars()]
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tvm_ext.errors import InputError, ShapeError
from tvm_ext.workloads import canonical_csr

__all__ = ["SPMM_FUNC", "SPMM_AXPBY_FUNC", "CODEGEN", "SparseOperand", "sparse_operand", "emit_sparse_matmul",
           "spmm_primfunc", "spmm_axpby_primfunc", "sextans_patterns", "register_patterns"]

SPMM_FUNC = "sextans_spmm"
SPMM_AXPBY_FUNC = "sextans_spmm_axpby"
#: The BYOC codegen name (and pattern prefix) of the engine.
CODEGEN = "sextans"


def sextans_patterns() -> list[tuple[str, Any]]:
    """``(name, pattern)`` of the engine's offloadable calls, highest priority first."""
    from tvm.relax.dpl import is_call_tir

    return [(f"{CODEGEN}.spmm_axpby", is_call_tir(SPMM_AXPBY_FUNC)),
            (f"{CODEGEN}.spmm", is_call_tir(SPMM_FUNC))]


def register_patterns() -> None:
    """Put the engine's patterns in TVM's pattern registry (``get_patterns_with_prefix("sextans")``)."""
    from tvm.relax.backend.pattern_registry import register_patterns as register

    register(list(reversed(sextans_patterns())))  # the registry puts later entries first


def spmm_primfunc():
    """TIR CSR SpMM ``C = A @ B`` (symbolic M, N, K, nnz): the llvm fallback."""
    from tvm.script import tirx as T

    @T.prim_func
    def sextans_spmm(a_indptr: T.handle, a_indices: T.handle, a_data: T.handle, b: T.handle,
                     c: T.handle):
        T.func_attr({"tir.noalias": True})
        M = T.int64()
        N = T.int64()
        K = T.int64()
        NNZ = T.int64()
        indptr = T.match_buffer(a_indptr, (M + 1,), "int32")
        indices = T.match_buffer(a_indices, (NNZ,), "int32")
        data = T.match_buffer(a_data, (NNZ,), "float32")
        B = T.match_buffer(b, (K, N), "float32")
        C = T.match_buffer(c, (M, N), "float32")
        for i in T.parallel(M):
            for j in range(N):
                C[i, j] = T.float32(0)
            for p in range(indptr[i], indptr[i + 1]):
                for j in range(N):
                    C[i, j] = C[i, j] + data[p] * B[indices[p], j]

    return sextans_spmm


def spmm_axpby_primfunc():
    """TIR CSR SpMM ``C = alpha * A @ B + beta * C_in``: the llvm fallback."""
    from tvm.script import tirx as T

    @T.prim_func
    def sextans_spmm_axpby(a_indptr: T.handle, a_indices: T.handle, a_data: T.handle,
                           b: T.handle, c_in: T.handle, ab: T.handle, c: T.handle):
        T.func_attr({"tir.noalias": True})
        M = T.int64()
        N = T.int64()
        K = T.int64()
        NNZ = T.int64()
        indptr = T.match_buffer(a_indptr, (M + 1,), "int32")
        indices = T.match_buffer(a_indices, (NNZ,), "int32")
        data = T.match_buffer(a_data, (NNZ,), "float32")
        B = T.match_buffer(b, (K, N), "float32")
        Cin = T.match_buffer(c_in, (M, N), "float32")
        AB = T.match_buffer(ab, (2,), "float32")
        C = T.match_buffer(c, (M, N), "float32")
        for i in T.parallel(M):
            for j in range(N):
                C[i, j] = T.float32(0)
            for p in range(indptr[i], indptr[i + 1]):
                for j in range(N):
                    C[i, j] = C[i, j] + data[p] * B[indices[p], j]
            for j in range(N):
                C[i, j] = AB[0] * C[i, j] + AB[1] * Cin[i, j]

    return sextans_spmm_axpby


@dataclass(frozen=True)
class SparseOperand:
    """A constant sparse matrix carried into Relax as three tensor parameters."""

    name: str
    shape: tuple[int, int]
    nnz: int
    params: tuple[Any, Any, Any]  # relax.Var: indptr, indices, data
    arrays: tuple[np.ndarray, np.ndarray, np.ndarray]

    def tensors(self, device: Any = None) -> list[Any]:
        """The three arrays as ``tvm.runtime.Tensor`` (host CPU by default)."""
        import tvm

        dev = device or tvm.cpu(0)
        return [tvm.runtime.tensor(a, dev) for a in self.arrays]

    def to_scipy(self):
        """The operand as a float32 scipy CSR array."""
        import scipy.sparse as sp

        indptr, indices, data = self.arrays
        return sp.csr_array((data, indices, indptr), shape=self.shape)


def sparse_operand(name: str, A: Any) -> SparseOperand:
    """Validate ``A`` (canonical CSR, fp32-representable) and make its Relax parameters.

    Parameters are named ``{name}_indptr``, ``{name}_indices`` and ``{name}_data``.
    """
    from tvm import relax

    csr = canonical_csr(A, what=name)
    with np.errstate(over="ignore"):
        data = csr.data.astype(np.float32)
    if csr.nnz and not np.isfinite(data).all():
        raise InputError(f"{name}: a value overflows float32")
    M, K = (int(x) for x in csr.shape)
    arrays = (csr.indptr.astype(np.int32), csr.indices.astype(np.int32), data)
    params = (
        relax.Var(f"{name}_indptr", relax.TensorType((M + 1,), "int32")),
        relax.Var(f"{name}_indices", relax.TensorType((csr.nnz,), "int32")),
        relax.Var(f"{name}_data", relax.TensorType((csr.nnz,), "float32")),
    )
    return SparseOperand(name=name, shape=(M, K), nnz=int(csr.nnz), params=params, arrays=arrays)


def _static_shape(expr: Any, what: str) -> tuple[tuple[int, ...], str]:
    sinfo = getattr(expr, "ty", None) or getattr(expr, "struct_info", None)
    shape = getattr(sinfo, "shape", None)
    dtype = str(getattr(sinfo, "dtype", ""))
    try:
        dims = tuple(int(d) for d in shape.values)
    except (AttributeError, TypeError, ValueError):
        raise ShapeError(f"{what}: needs a static 2-D tensor shape, got {sinfo}") from None
    return dims, dtype


def _global_var(bb: Any, name: str, make) -> Any:
    for gv in bb.get().get_global_vars():
        if gv.name_hint == name:
            return gv
    return bb.add_func(make().without_attr("global_symbol"), name)  # private: DCE drops it once offloaded


def emit_sparse_matmul(bb: Any, A: SparseOperand, B: Any, *, C: Any = None, alpha: float = 1.0,
                       beta: float = 0.0) -> Any:
    """Emit ``alpha * A @ B + beta * C`` into the BlockBuilder ``bb``; returns the var.

    ``B`` is a ``(K, N)`` float32 Relax expression; ``C`` an optional
    ``(M, N)`` one.  Plain ``A @ B`` uses ``sextans_spmm``; anything else
    ``sextans_spmm_axpby``.
    """
    from tvm import relax

    M, K = A.shape
    dims, dtype = _static_shape(B, "B")
    if len(dims) != 2:
        raise ShapeError(f"B: expected a 2-D tensor, got shape {dims}")
    kb, n = dims
    if kb != K:
        raise ShapeError(f"B: has {kb} rows, sparse operand {A.name!r} is {M}x{K}")
    if dtype != "float32":
        raise InputError(f"B: the engine computes in float32, got {dtype}")
    out_ty = relax.TensorType((M, n), "float32")
    args = [*A.params, B]
    if C is None and float(alpha) == 1.0 and float(beta) == 0.0:
        gv = _global_var(bb, SPMM_FUNC, spmm_primfunc)
        return bb.emit(relax.call_tir(gv, args, out_ty=out_ty))
    if C is None:
        C = relax.const(np.zeros((M, n), dtype=np.float32))
    cshape, cdtype = _static_shape(C, "C")
    if cshape != (M, n) or cdtype != "float32":
        raise ShapeError(f"C: expected float32 ({M}, {n}), got {cdtype} {cshape}")
    ab = relax.const(np.array([alpha, beta], dtype=np.float32))
    gv = _global_var(bb, SPMM_AXPBY_FUNC, spmm_axpby_primfunc)
    return bb.emit(relax.call_tir(gv, [*args, C, ab], out_ty=out_ty))
