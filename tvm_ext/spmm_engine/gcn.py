"""A 2-layer GCN (Kipf & Welling) in Relax: A·X on the Sextans engine, dense layers on llvm.

``Z = Â · (relu(Â · (X W1) + b1) W2) + b2`` with ``Â = D^-1/2 (A + I) D^-1/2``.
The two ``Â·`` products are :func:`emit_sparse_matmul` calls, offloaded by
:func:`partition_for_sextans`; the matmuls, bias adds and relu are ordinary
Relax ops legalised to TIR and compiled for the host CPU.

>>> import numpy as np, scipy.sparse as sp
>>> A = sp.csr_array(np.array([[0, 1], [1, 0]], dtype=float))
>>> normalize_adjacency(A).toarray().round(2).tolist()
[[0.5, 0.5], [0.5, 0.5]]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from tvm_ext.errors import ShapeError
from tvm_ext.spmm_engine.relax_op import SparseOperand, emit_sparse_matmul, sparse_operand
from tvm_ext.workloads import canonical_csr, check_dense_operand

__all__ = ["GcnModel", "normalize_adjacency", "build_gcn", "gcn_reference", "run_gcn",
           "random_gcn_inputs"]


def normalize_adjacency(A: Any) -> sp.csr_array:
    """``D^-1/2 (A + I) D^-1/2`` of a square adjacency (existing self-loops kept at 1)."""
    csr = canonical_csr(A, square=True, what="adjacency")
    pattern = csr.copy()
    pattern.data = np.ones_like(pattern.data)
    pattern = pattern.tolil()
    pattern.setdiag(1.0)
    pattern = sp.csr_array(pattern)
    deg = np.asarray(pattern.sum(axis=1)).ravel()
    inv_sqrt = sp.dia_array((1.0 / np.sqrt(deg), 0), shape=pattern.shape)
    return canonical_csr(inv_sqrt @ pattern @ inv_sqrt, what="adjacency")


@dataclass(frozen=True)
class GcnModel:
    """The Relax module of the GCN and the sparse operand it takes as parameters.

    Inputs of ``main``, in order: the adjacency's three CSR tensors, then
    ``x, w1, b1, w2, b2``.
    """

    mod: Any
    adjacency: SparseOperand
    in_features: int
    hidden: int
    classes: int


def build_gcn(adjacency: Any, in_features: int, hidden: int, classes: int) -> GcnModel:
    """Relax module of a 2-layer GCN over a (normalised) adjacency."""
    from tvm import relax

    A = sparse_operand("adj", adjacency)
    n = A.shape[0]
    if A.shape[0] != A.shape[1]:
        raise ShapeError(f"adjacency: must be square, got {A.shape}")
    f32 = "float32"
    x = relax.Var("x", relax.TensorType((n, in_features), f32))
    w1 = relax.Var("w1", relax.TensorType((in_features, hidden), f32))
    b1 = relax.Var("b1", relax.TensorType((hidden,), f32))
    w2 = relax.Var("w2", relax.TensorType((hidden, classes), f32))
    b2 = relax.Var("b2", relax.TensorType((classes,), f32))
    bb = relax.BlockBuilder()
    with bb.function("main", [*A.params, x, w1, b1, w2, b2]):
        with bb.dataflow():
            xw = bb.emit(relax.op.matmul(x, w1))                 # llvm
            ax = emit_sparse_matmul(bb, A, xw)                    # engine
            h = bb.emit(relax.op.nn.relu(relax.op.add(ax, b1)))   # llvm
            hw = bb.emit(relax.op.matmul(h, w2))                  # llvm
            ah = emit_sparse_matmul(bb, A, hw)                    # engine
            out = bb.emit_output(relax.op.add(ah, b2))            # llvm
        bb.emit_func_output(out)
    return GcnModel(bb.get(), A, in_features, hidden, classes)


def gcn_reference(adjacency: Any, x, w1, b1, w2, b2) -> np.ndarray:
    """The same GCN in float64 with scipy/numpy."""
    A = canonical_csr(adjacency, dtype=np.float64, what="adjacency")
    h = np.maximum(A @ (np.asarray(x, np.float64) @ w1) + b1, 0.0)
    return A @ (h @ np.asarray(w2, np.float64)) + b2


def random_gcn_inputs(n: int, in_features: int, hidden: int, classes: int, seed: int = 0
                      ) -> tuple[np.ndarray, ...]:
    """Seeded features and Glorot-scaled weights: ``(x, w1, b1, w2, b2)`` in float32."""
    rng = np.random.default_rng(seed)
    x = (rng.random((n, in_features)) < 0.05).astype(np.float32)  # sparse-ish binary features
    w1 = rng.normal(0, np.sqrt(2.0 / (in_features + hidden)), (in_features, hidden))
    w2 = rng.normal(0, np.sqrt(2.0 / (hidden + classes)), (hidden, classes))
    b1 = rng.normal(0, 0.1, hidden)
    b2 = rng.normal(0, 0.1, classes)
    return tuple(a.astype(np.float32) for a in (x, w1, b1, w2, b2))


def run_gcn(model: GcnModel, x, w1, b1, w2, b2, *, offload: bool = True, config: Any = None,
            platform: Any = None) -> np.ndarray:
    """Compile (cached) and run the GCN; returns the float32 logits.

    With ``offload`` the two SpMMs run on the Sextans simulator (see
    :func:`~tvm_ext.spmm_engine.offload_reports`), otherwise on llvm.
    """
    import tvm

    from tvm_ext.spmm_engine.byoc import compile_relax

    n = model.adjacency.shape[0]
    ins = [check_dense_operand(x, n, dtype=np.float32, what="x"),
           check_dense_operand(w1, model.in_features, dtype=np.float32, what="w1"),
           np.ascontiguousarray(b1, np.float32),
           check_dense_operand(w2, model.hidden, dtype=np.float32, what="w2"),
           np.ascontiguousarray(b2, np.float32)]
    expect = {"x": (n, model.in_features), "w1": (model.in_features, model.hidden),
              "b1": (model.hidden,), "w2": (model.hidden, model.classes), "b2": (model.classes,)}
    for (name, shape), arr in zip(expect.items(), ins):
        if arr.shape != shape:
            raise ShapeError(f"{name}: expected shape {shape}, got {arr.shape}")
    signature = ("gcn", model.adjacency.shape, model.adjacency.nnz, model.in_features,
                 model.hidden, model.classes)
    vm = compile_relax(model.mod, signature, offload=offload, config=config, platform=platform)
    args = model.adjacency.tensors() + [tvm.runtime.tensor(a) for a in ins]
    return vm["main"](*args).numpy()
