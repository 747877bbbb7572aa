"""Sextans as a Relax BYOC target: the sparse-matmul op, its llvm fallback, offload, GCN on cora."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tvm_ext.errors import InputError, ShapeError
from tvm_ext.spmm_engine import (
    SEXTANS_P,
    clear_offload_reports,
    compile_relax,
    emit_sparse_matmul,
    model,
    offload_reports,
    partition_for_sextans,
    preprocess,
    sparse_operand,
)

M, K, N = 70, 50, 12


def axpby_module(A):
    from tvm import relax

    op = sparse_operand("w", A)
    b = relax.Var("b", relax.TensorType((K, N), "float32"))
    c = relax.Var("c", relax.TensorType((M, N), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [*op.params, b, c]):
        with bb.dataflow():
            y = emit_sparse_matmul(bb, op, b, C=c, alpha=0.85, beta=-2.06)
            z = bb.emit_output(relax.op.nn.relu(y))  # stays on llvm
        bb.emit_func_output(z)
    return bb.get(), op


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(0)
    A = sp.random_array((M, K), density=0.1, rng=rng, format="csr")
    B = rng.uniform(-1, 1, (K, N)).astype(np.float32)
    C = rng.uniform(-1, 1, (M, N)).astype(np.float32)
    ref = np.maximum(0.85 * (A @ B.astype(np.float64)) - 2.06 * C, 0.0)
    return A, B, C, ref


def run(vm, op, B, C):
    import tvm

    return vm["main"](*op.tensors(), tvm.runtime.tensor(B), tvm.runtime.tensor(C)).numpy()


def test_llvm_fallback_matches_scipy(operands):
    A, B, C, ref = operands
    mod, op = axpby_module(A)
    vm = compile_relax(mod, ("test-axpby", M, K, N), offload=False)
    np.testing.assert_allclose(run(vm, op, B, C), ref, rtol=1e-5, atol=1e-5)


def test_offloaded_call_matches_scipy_and_reports_the_model(operands):
    A, B, C, ref = operands
    mod, op = axpby_module(A)
    part = partition_for_sextans(mod, platform="sextans-p", config={"pes": 8, "window": 16})
    text = part.script()
    assert "call_dps_packed" in text and "call_tir" not in text and "prim_func" not in text
    assert "relu" in text  # the rest of the graph is untouched
    clear_offload_reports()
    vm = compile_relax(mod, ("test-axpby", M, K, N), platform="sextans-p",
                       config={"pes": 8, "window": 16})
    np.testing.assert_allclose(run(vm, op, B, C), ref, rtol=1e-5, atol=1e-5)
    (rep,) = offload_reports()
    expect = model(preprocess(A, pes=8, window=16), N, SEXTANS_P)
    assert rep.composite == "sextans.spmm_axpby" and rep.platform == "sextans-p"
    assert (rep.shape, rep.nnz, rep.n) == ((M, K), A.nnz, N)
    assert rep.cycles == expect.cycles and rep.seconds == pytest.approx(expect.seconds)
    assert rep.traffic == expect.traffic and rep.hbm_bytes == sum(expect.traffic.values())
    assert rep.preprocessed


def test_gcn_on_cora_equals_numpy():
    from tvm_ext.spmm_engine.gcn import (build_gcn, gcn_reference, normalize_adjacency,
                                         random_gcn_inputs, run_gcn)
    from tvm_ext.workloads import load_matrix

    adj = normalize_adjacency(load_matrix("cora"))
    gcn = build_gcn(adj, in_features=64, hidden=16, classes=7)
    ins = random_gcn_inputs(adj.shape[0], 64, 16, 7, seed=1)
    clear_offload_reports()
    out = run_gcn(gcn, *ins, offload=True)
    ref = gcn_reference(adj, *ins)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    reps = offload_reports()
    assert [r.n for r in reps] == [16, 7]  # A.(X W1) and A.(H W2), both on the engine
    assert all(r.shape == (2708, 2708) and r.cycles > 0 and r.hbm_bytes > 0 for r in reps)
    assert [r.preprocessed for r in reps] == [True, False]  # one adjacency, prepared once


def test_normalized_adjacency_is_symmetric_with_self_loops():
    from tvm_ext.spmm_engine.gcn import normalize_adjacency

    A = sp.csr_array(np.array([[0, 1, 0], [1, 0, 1], [0, 1, 1]], dtype=float))
    Ah = normalize_adjacency(A).toarray()
    deg = np.array([2, 3, 2])
    want = (np.array([[1, 1, 0], [1, 1, 1], [0, 1, 1]]) / np.sqrt(np.outer(deg, deg)))
    np.testing.assert_allclose(Ah, want)


def test_op_validates_its_operands():
    from tvm import relax

    op = sparse_operand("w", sp.random_array((M, K), density=0.1, rng=0, format="csr"))
    bb = relax.BlockBuilder()
    wrong_k = relax.Var("b", relax.TensorType((K + 1, N), "float32"))
    wrong_dtype = relax.Var("b16", relax.TensorType((K, N), "float16"))
    with bb.function("main", [*op.params, wrong_k, wrong_dtype]):
        with pytest.raises(ShapeError, match="rows"):
            emit_sparse_matmul(bb, op, wrong_k)
        with pytest.raises(InputError, match="float32"):
            emit_sparse_matmul(bb, op, wrong_dtype)
        bb.emit_func_output(wrong_k)
    with pytest.raises(InputError, match="float32"):
        sparse_operand("big", sp.csr_array(np.array([[1e300]])))


def test_gcn_rejects_mis_shaped_weights():
    from tvm_ext.spmm_engine.gcn import build_gcn, random_gcn_inputs, run_gcn

    adj = sp.csr_array(np.eye(6, dtype=np.float32))
    gcn = build_gcn(adj, in_features=4, hidden=3, classes=2)
    x, w1, b1, w2, b2 = random_gcn_inputs(6, 4, 3, 2)
    with pytest.raises(ShapeError, match="b1"):
        run_gcn(gcn, x, w1, np.ones(5, np.float32), w2, b2)
    with pytest.raises(ShapeError, match="w1"):
        run_gcn(gcn, x, np.ones((4, 5), np.float32), b1, w2, b2)
