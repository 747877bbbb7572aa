"""schedules.fusion: the einsum-DAG IR, the parser, the builders, graph analyses and Table 1."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spl
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.fusion import (
    EinsumDAG,
    analyze,
    block_cg_dag,
    chain_formulas,
    dag_ai_best,
    derive_table1,
    evaluate,
    gcn_layer_dag,
    hpc_like_chain,
    nn_like_chain,
    node_dominance,
    parse_einsum,
    workload_dag,
)
from schedules.fusion.builders import HPC_LIKE_CHAIN, NN_LIKE_CHAIN
from schedules.fusion.table1 import (
    PAPER_TABLE1,
    ai_best_gemm,
    ai_best_gemm_limit,
    ai_best_spmm,
    ai_best_spmm_limit,
    parse_poly,
)
from tvm_ext.errors import InputError, ShapeError
from tvm_ext.workloads import lap2d

# ----------------------------------------------------------------------------- parser


def test_parse_einsum_basic_primes_and_implicit_output():
    s = parse_einsum("mk,kn->mn")
    assert s.inputs == (("m", "k"), ("k", "n")) and s.output == ("m", "n") and s.contracted == ("k",)
    p = parse_einsum(" kn' , kn -> n'n ")
    assert p.inputs == (("k", "n'"), ("k", "n")) and p.output == ("n'", "n")
    assert parse_einsum("ij,jk").output == ("i", "k")  # numpy's implicit mode
    assert parse_einsum("mn,nm->").output == () and parse_einsum("mn,nm->").contracted == ("m", "n")


@pytest.mark.parametrize("bad", ["", "   ", "mk,kn->mn->x", "m.k->m", "...m->m", "mm,mn->n", "mk,kn->mz",
                                 "mk,kn->mm", "mk,,kn->mn", "m1,kn->mn", "m-k->m", 42])
def test_parse_einsum_rejects_malformed(bad):
    with pytest.raises(InputError):
        parse_einsum(bad)


_letters = st.sampled_from(list("abcdefgh"))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(_letters, min_size=1, max_size=3, unique=True), min_size=1, max_size=3),
       st.data())
def test_parse_roundtrip_and_contraction_bookkeeping(operands, data):
    used = sorted({i for o in operands for i in o})
    out = data.draw(st.lists(st.sampled_from(used), unique=True, max_size=len(used)))
    spec = ",".join("".join(o) for o in operands) + "->" + "".join(out)
    parsed = parse_einsum(spec)
    assert str(parsed) == spec
    assert set(parsed.contracted) == set(used) - set(out)
    assert parse_einsum(str(parsed)) == parsed


# ----------------------------------------------------------------------------- IR


def _gemm_dag():
    dag = EinsumDAG("t")
    dag.add_tensor("A", ("m", "k"), (6, 4))
    dag.add_tensor("B", ("k", "n"), (4, 3))
    return dag


def test_dag_infers_shapes_edges_and_work():
    dag = _gemm_dag()
    dag.add_tensor("C", ("n", "o"), (3, 2))
    z = dag.einsum("Z", "mk,kn->mn", "A", "B")
    dag.einsum("Y", "mj,jo->mo", "Z", "C")
    assert dag.tensors["Z"].shape == (6, 3) and dag.tensors["Y"].shape == (6, 2)
    assert [(e.src, e.dst, e.tensor) for e in dag.edges()] == [("Z", "Y", "Z")]
    assert dag.inputs == ["A", "B", "C"] and dag.consumers("Z") == ["Y"] and dag.producer("A") is None
    assert dag.macs(z) == 6 * 4 * 3 and dag.words("Z") == 18
    assert str(z) == "Z[m,n] = A[m,k]·B[k,n]"


def test_sparse_tensor_words_and_effective_sizes():
    dag = EinsumDAG()
    dag.add_tensor("A", ("m", "k"), (100, 100), nnz=700, fmt="csr")
    dag.add_tensor("P", ("k", "n"), (100, 8))
    op = dag.einsum("S", "mk,kn->mn", "A", "P")
    assert dag.words("A") == 2 * 700 + 100  # Eq. 10's 2*nnz + M
    assert dag.macs(op) == 700 * 8
    assert dag.effective_sizes(op) == {"m": 100, "k": 7.0, "n": 8}


@pytest.mark.parametrize("call, err", [
    (lambda d: d.einsum("Z", "mk,kn->mn", "A", "Q"), InputError),          # unknown input
    (lambda d: d.einsum("A", "mk,kn->mn", "A", "B"), InputError),          # single assignment
    (lambda d: d.einsum("Z", "mk,kn->mn", "A", "A"), ShapeError),          # k is 4 in one, 6 in the other
    (lambda d: d.einsum("Z", "mkq,kn->mn", "A", "B"), ShapeError),         # rank count mismatch
    (lambda d: d.einsum("Z", "mk,kn->mn", "A", "B", kind="fft"), InputError),
    (lambda d: d.einsum("Z", "mk,kn->mn", "A", "B", sign=2), InputError),
    (lambda d: d.einsum("Z", "mk,kn->mn", "A", "B", addend="A"), ShapeError),
    (lambda d: d.add_op("Z", "mk,mk->mk", ["A", "B"], kind="add"), ShapeError),
    (lambda d: d.add_op("Z", "mk,kn,nq->mq", ["A", "B", "B"]), InputError),
    (lambda d: d.add_tensor("Q", ("m",), (0,)), InputError),
    (lambda d: d.add_tensor("Q", ("m",), (2.5,)), InputError),
    (lambda d: d.add_tensor("Q", ("m",), (True,)), InputError),
    (lambda d: d.add_tensor("Q", ("m", "m"), (2, 2)), InputError),
    (lambda d: d.add_tensor("Q", ("m", "k"), (2, 2), nnz=5, fmt="csr"), InputError),
    (lambda d: d.add_tensor("Q", ("m", "k"), (2, 2), nnz=3, fmt="bsr"), InputError),
    (lambda d: d.add_tensor("Q", ("m",), (2,), nnz=1, fmt="csr"), ShapeError),
    (lambda d: d.mark_output("nope"), InputError),
    (lambda d: d.op("nope"), InputError),
])
def test_dag_rejects_bad_input(call, err):
    dag = _gemm_dag()
    with pytest.raises(err):
        call(dag)


# ----------------------------------------------------------------------------- builders + reference


def test_block_cg_dag_structure_matches_alg1():
    dag = block_cg_dag(3, 500, 4, 2000)
    assert len(dag.ops) == 2 + 8 * 3 and dag.outputs == ["X3"]
    assert dag.inputs == ["A", "X0", "B"]
    assert [op.label for op in dag.ops if op.iteration == 2] == ["1", "2", "2", "3", "4", "5", "6", "7"]
    assert dag.tensors["Lambda2"].shape == (4, 4) and dag.tensors["P2"].shape == (500, 4)
    # P0 = R0 (alias), Gamma_prev = Gamma_{i-1}
    assert dag.op("S1").inputs[1].tensor == "R0" and dag.op("Phi2").inputs[0].tensor == "Gamma1"
    assert dag.op("R2").addend.tensor == "R1" and dag.op("R2").sign == -1
    assert dag.op("Lambda2").kind == "inv"


@pytest.mark.parametrize("iters", [1, 2, 5])
def test_block_cg_dag_matches_scipy_cg(iters):
    """GOGETA §2.2.1 validates its einsums against scipy.sparse.linalg.cg; so do we (N = 1)."""
    A = lap2d(6).tocsr()
    M = A.shape[0]
    b = np.random.default_rng(1).standard_normal((M, 1))
    x0 = np.zeros((M, 1))
    vals = evaluate(block_cg_dag(iters, M, 1, A.nnz), {"A": A, "B": b, "X0": x0})
    ref, _ = spl.cg(A, b.ravel(), x0=x0.ravel(), maxiter=iters, rtol=1e-30, atol=0)
    np.testing.assert_allclose(vals[f"X{iters}"].ravel(), ref, rtol=1e-9, atol=1e-12)
    # the recurrences hold: R_i = B - A X_i
    np.testing.assert_allclose(vals[f"R{iters}"], b - A @ vals[f"X{iters}"], atol=1e-9)


def test_block_cg_dag_converges_for_several_right_hand_sides():
    A = lap2d(4).tocsr()  # 16 x 16 SPD
    M, N = A.shape[0], 3
    rng = np.random.default_rng(2)
    B, X0 = rng.standard_normal((M, N)), rng.standard_normal((M, N))
    vals = evaluate(block_cg_dag(6, M, N, A.nnz), {"A": A, "B": B, "X0": X0})
    exact = np.linalg.solve(A.toarray(), B)
    # block CG converges in at most ceil(M / N) = 6 iterations in exact arithmetic
    np.testing.assert_allclose(vals["X6"], exact, atol=1e-8)


def test_block_cg_without_setup_takes_r0_p0_gamma0_as_inputs():
    A = lap2d(4).tocsr()
    M = A.shape[0]
    dag = block_cg_dag(2, M, 2, A.nnz, setup=False)
    assert dag.inputs == ["A", "X0", "R0", "P0", "Gamma0"]
    rng = np.random.default_rng(3)
    B, X0 = rng.standard_normal((M, 2)), np.zeros((M, 2))
    R0 = B - A @ X0
    vals = evaluate(dag, {"A": A, "X0": X0, "R0": R0, "P0": R0, "Gamma0": R0.T @ R0})
    full = evaluate(block_cg_dag(2, M, 2, A.nnz), {"A": A, "B": B, "X0": X0})
    np.testing.assert_allclose(vals["X2"], full["X2"], atol=1e-12)


def test_gcn_and_nn_chain_evaluate_like_numpy():
    rng = np.random.default_rng(4)
    A = sp.random(30, 30, density=0.1, random_state=5, format="csr")
    X0, W = rng.standard_normal((30, 6)), rng.standard_normal((6, 2))
    vals = evaluate(gcn_layer_dag(30, 6, 2, A.nnz), {"A": A, "X0": X0, "W": W})
    np.testing.assert_allclose(vals["X1"], (A @ X0) @ W, atol=1e-12)

    sizes = dict(M=5, K=4, N=3, O=6, P=2, Q=7, R=3)
    dag = nn_like_chain(sizes)
    ins = {t: rng.standard_normal(dag.tensors[t].shape) for t in dag.inputs}
    v = evaluate(dag, ins)
    Z = ins["A"] @ ins["B"]
    ref = ins["F"] @ (ins["E"] @ (ins["D"] @ (ins["C"] @ Z)))
    np.testing.assert_allclose(v["V"], ref, atol=1e-10)


def test_evaluate_checks_inputs():
    dag = gcn_layer_dag(10, 4, 2, 20)
    with pytest.raises(InputError, match="missing input"):
        evaluate(dag, {"A": sp.eye(10, format="csr"), "X0": np.zeros((10, 4))})
    with pytest.raises(ShapeError):
        evaluate(dag, {"A": sp.eye(10, format="csr"), "X0": np.zeros((10, 5)), "W": np.zeros((4, 2))})


def test_hpc_chain_needs_equal_ranks_and_workload_dag_checks_names():
    assert hpc_like_chain(dict(M=8, K=5, N=8, O=8)).tensors["V"].shape == (8, 8)
    with pytest.raises(ShapeError, match="M == N == O"):
        hpc_like_chain(dict(M=8, K=5, N=9, O=8))
    with pytest.raises(InputError, match="no size"):
        nn_like_chain(dict(M=8))
    assert workload_dag("protein").tensors["X1"].shape == (3786, 2)
    assert workload_dag("nasa4704", 8, iters=2).tensors["A"].nnz == 104756
    with pytest.raises(InputError, match="give N"):
        workload_dag("aft02")
    with pytest.raises(InputError, match="unknown GOGETA workload"):
        workload_dag("no-such")
    for bad in (0, -1, 2.0, "3"):
        with pytest.raises(InputError):
            block_cg_dag(bad, 100, 4, 300)


# ----------------------------------------------------------------------------- analyses


def _single_op(sizes, spec):
    dag = EinsumDAG()
    (a, b), out = parse_einsum(spec).inputs, parse_einsum(spec).output
    dag.add_tensor("X", a, tuple(sizes[i] for i in a))
    dag.add_tensor("Y", b, tuple(sizes[i] for i in b))
    return dag, dag.einsum("Z", spec, "X", "Y")


@pytest.mark.parametrize("sizes, spec, expected", [
    (dict(m=1001, k=10, n=10), "mk,kn->mn", ("U", "m")),
    (dict(m=1000, k=5, n=5), "mk,kn->mn", ("small", None)),       # not > 1000
    (dict(m=2000, k=20, n=20), "mk,kn->mn", ("small", None)),      # exactly 100:1 is not "more skewed"
    (dict(m=2001, k=20, n=20), "mk,kn->mn", ("U", "m")),
    (dict(m=8, k=100000, n=8), "mk,kn->mn", ("C", "k")),
    (dict(m=60, k=70, n=80), "mk,kn->mn", ("bal", None)),
    (dict(m=60, k=49, n=80), "mk,kn->mn", ("small", None)),
])
def test_node_dominance_thresholds(sizes, spec, expected):
    dag, op = _single_op(sizes, spec)
    d = node_dominance(dag, op)
    assert (d.kind, d.index) == expected


def test_compressed_rank_makes_spmm_uncontracted_dominant():
    dag = block_cg_dag(1, 8184, 16, 127762)
    ga = analyze(dag)
    kinds = {op.name: ga.dominance[op.name].kind for op in dag.ops}
    assert kinds == {"R0": "U", "Gamma0": "C", "S1": "U", "Delta1": "C", "Lambda1": "small", "X1": "U",
                     "R1": "U", "Gamma1": "C", "Phi1": "small", "P1": "U"}


def test_critical_path_transitive_edges_and_numcast_block_cg():
    ga = analyze(block_cg_dag(1, 10_000, 8, 50_000, setup=False))
    assert ga.critical_path == ["S1", "Delta1", "Lambda1", "R1", "Gamma1", "Phi1", "P1"]
    assert ga.transitive == {("S1", "R1"), ("R1", "P1")}  # Fig. 7's two red edges
    assert ga.longest_path("S1", "R1") == ["S1", "Delta1", "Lambda1", "R1"]
    assert ga.longest_path("R1", "P1") == ["R1", "Gamma1", "Phi1", "P1"]
    assert ga.numcast["Lambda1"] == 2 and ga.parallel_multicast("Lambda1")
    assert all(c <= 1 for n, c in ga.numcast.items() if n != "Lambda1")
    assert ga.reaches("S1", "P1") and not ga.reaches("X1", "P1")


def test_unrolled_cg_transitivity_across_iterations():
    ga = analyze(block_cg_dag(3, 10_000, 8, 50_000))
    assert ("P1", "X2") in ga.transitive and ("P1", "Delta2") in ga.transitive
    assert ("P1", "S2") not in ga.transitive and ("R1", "R2") in ga.transitive
    assert ga.critical_path[0] == "R0" and ga.critical_path[-1] == "P3"
    assert ga.numcast["R0"] == 2  # Gamma0 and S1


# ----------------------------------------------------------------------------- Table 1


def test_table1_formulas_are_the_papers():
    for chain in (NN_LIKE_CHAIN, HPC_LIKE_CHAIN):
        f = chain_formulas(chain)
        for key in ("macs", "without_reuse", "with_reuse"):
            assert f[key] == parse_poly(PAPER_TABLE1[chain.name][key]), (chain.name, key)


def test_table1_ratios_and_limits():
    t = derive_table1()
    assert round(t["NN-like"]["similar_sized_ratio"], 2) == 2.14
    assert math.isclose(t["NN-like"]["similar_sized_ratio"], 15 / 7)
    assert t["HPC-like"]["similar_sized_ratio"] == pytest.approx(3.75)
    assert t["NN-like"]["dominant_rank_limit"] == t["HPC-like"]["dominant_rank_limit"] == 5.0
    # AI -> c/2 without reuse and 5c/2 with it (the paper's "M/2" and "5M/2")
    assert t["HPC-like"]["ai_limit_without"] == 0.5 and t["HPC-like"]["ai_limit_with"] == 2.5
    assert all(row["matches_paper"] for row in t.values())


def test_table1_without_the_fitted_extent_rule():
    """Every tensor counted at its produced shape: the HPC-like chain's N -> inf gain is 6.5x, not 5x."""
    t = derive_table1()
    hpc, nn = t["HPC-like"]["own_shape"], t["NN-like"]["own_shape"]
    assert hpc["without_reuse"] == str(parse_poly("MK+KN+7×MN+OM+5×ON"))
    assert hpc["similar_sized_ratio"] == pytest.approx(3.75) and hpc["dominant_rank_limit"] == pytest.approx(6.5)
    assert nn["dominant_rank_limit"] == 5.0 and nn["similar_sized_ratio"] == pytest.approx(15 / 7)
    assert "fitted" in t["HPC-like"]["extent_rule"]
    # own_shape agrees with the traffic model on a concrete (well-formed, M = N = O) HPC-like DAG
    c = 24
    dag = hpc_like_chain(dict(M=c, K=c, N=c, O=c))
    per_op = sum(sum(dag.words(x) for x in op.read_tensors) + dag.words(op.name) for op in dag.ops)
    f = chain_formulas(HPC_LIKE_CHAIN, "own_shape")
    assert f["without_reuse"].evaluate(dict(M=c, K=c, N=c, O=c)) == per_op
    with pytest.raises(InputError):
        chain_formulas(HPC_LIKE_CHAIN, "first_operand")


def test_table1_formulas_agree_with_the_numeric_dag():
    sizes = dict(M=64, K=32, N=16, O=48, P=24, Q=40, R=8)
    dag = nn_like_chain(sizes)
    f = chain_formulas(NN_LIKE_CHAIN)
    assert sum(dag.macs(op) for op in dag.ops) == f["macs"].evaluate(sizes)
    per_op = sum(sum(dag.words(t) for t in op.read_tensors) + dag.words(op.name) for op in dag.ops)
    assert per_op == f["without_reuse"].evaluate(sizes)
    assert dag_ai_best(dag) == pytest.approx(f["macs"].evaluate(sizes) / f["with_reuse"].evaluate(sizes))
    assert dag_ai_best(dag, reuse=False) == pytest.approx(f["macs"].evaluate(sizes) / per_op)


def test_parse_poly_rejects_garbage():
    with pytest.raises(InputError):
        parse_poly("MK+2×")
    assert str(parse_poly("MK+KM+3×N")) == "2×MK+3×N"


def test_ai_best_single_op_formulas():
    assert ai_best_gemm(10, 20, 30) == pytest.approx(6000 / (200 + 600 + 300))
    assert ai_best_gemm(10**9, 8, 8) == pytest.approx(ai_best_gemm_limit(8), rel=1e-6)  # Eq. 9: N/2
    M, nz = 10**8, 5
    assert ai_best_spmm(M, M, 16, nz * M) == pytest.approx(ai_best_spmm_limit(nz, 16), rel=1e-6)  # Eq. 11
    assert ai_best_spmm_limit(nz, 16) < 16 / 2
