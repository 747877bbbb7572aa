"""The GOGETA fusion groups as TVM kernels (schedules.fusion.kernels).

Every kernel result is checked against numpy; sizes are small and each
kernel structure compiles once (kernel sizes are symbolic in the rows).
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import tvm

from schedules.fusion import block_cg_dag, gcn_layer_dag, plan_fusion
from schedules.fusion.einsum_dag import EinsumDAG
from schedules.fusion.gcn import GCNLayer, gcn_layer, gcn_layer_numpy
from schedules.fusion.kernels import build_step_kernels
from schedules.fusion.row_forms import row_form, streamed_rank
from schedules.fusion.steps import assign_storage, iteration_ops, schedule_steps, stored_tensors
from schedules.sparse.inspectors import to_bcsr, to_csr
from tvm_ext.errors import InputError, ScheduleError, ShapeError
from tvm_ext.workloads import lap2d, load_matrix, make_spd, uniform_random

RNG = np.random.default_rng(7)


def _cg_plan(M: int, N: int, nnz: int):
    return plan_fusion(block_cg_dag(2, M, N, nnz, setup=False))


def _forms(plan, steps):
    return {o: row_form(plan.dag, plan.dag.op(o), streamed_rank(plan, o)) for s in steps for o in s}


# --------------------------------------------------------------------------- plan -> schedule
def test_fused_steps_are_the_plans_groups_and_unfused_is_one_op_per_step():
    plan = _cg_plan(5000, 8, 25_000)
    ops = iteration_ops(plan.dag, 1)
    fused = schedule_steps(plan, ops, fused=True)
    assert fused == [tuple(o for o in g.ops) for g in plan.groups if g.ops[0].endswith("1")]
    assert fused[0] == ("S1", "Delta1") and fused[2] == ("X1", "R1", "Gamma1")
    assert schedule_steps(plan, ops, fused=False) == [(o,) for o in ops]


def test_row_forms_follow_the_einsums_and_the_dominant_rank():
    plan = _cg_plan(5000, 8, 25_000)
    dag = plan.dag
    kinds = {o: row_form(dag, dag.op(o), streamed_rank(plan, o)).kind for o in iteration_ops(dag, 1)}
    assert kinds == {"S1": "spmm", "Delta1": "rowred", "Lambda1": "host", "X1": "rowmap", "R1": "rowmap",
                     "Gamma1": "rowred", "Phi1": "host", "P1": "rowmap"}
    assert streamed_rank(plan, "Delta1") == plan.analysis.dominance["Delta1"].index == "k"
    d = row_form(dag, dag.op("Delta1"), "k")
    assert d.inputs == ("P0", "S1") and d.cols == (8, 8)
    r = row_form(dag, dag.op("R1"), "m")
    assert (r.inputs, r.addend, r.sign, r.inner) == (("S1", "Lambda1"), "R0", -1, 8)


def test_small_problems_stream_their_largest_rank():
    plan = _cg_plan(40, 8, 200)  # below GOGETA's dominance threshold
    assert plan.analysis.dominance["S1"].index is None
    assert streamed_rank(plan, "S1") == "m" and streamed_rank(plan, "Gamma1") == "k"


def test_unsupported_ops_raise_schedule_error():
    dag = EinsumDAG()
    dag.add_tensor("A", ("m", "k"), (50, 50))
    dag.add_tensor("B", ("k", "n"), (50, 4))
    dag.add_op("Y", "kn->nk", ["B"])  # a transpose: no row kernel
    with pytest.raises(ScheduleError, match="two-operand"):
        row_form(dag, dag.op("Y"), "k")
    dag.add_op("Z", "mk,kn->mn", ["A", "B"])
    with pytest.raises(ScheduleError, match="not a reduction"):
        row_form(dag, dag.op("Z"), "k")
    with pytest.raises(ScheduleError, match="not a row map"):
        row_form(dag, dag.op("Z"), "n")


def test_storage_updates_in_place_unless_a_later_step_reads_the_old_version():
    plan = _cg_plan(5000, 8, 25_000)
    for fused in (True, False):
        steps = schedule_steps(plan, iteration_ops(plan.dag, 1), fused)
        st = assign_storage(plan.dag, steps, _forms(plan, steps))
        assert st["X0"] == st["X1"] and st["R0"] == st["R1"] and st["P0"] == st["P1"]
        assert st["Gamma0"] != st["Gamma1"]  # Φ1 still reads Γ0 after Γ1 is written
    steps = schedule_steps(plan, iteration_ops(plan.dag, 1), True)
    assert stored_tensors(plan.dag, steps[0]) == {"S1", "Delta1"}
    gcn = plan_fusion(gcn_layer_dag(3000, 16, 4, 9000))
    assert stored_tensors(gcn.dag, ("Z", "X1")) == {"X1"}  # Z is consumed in registers


# --------------------------------------------------------------------------- one CG iteration
def _reference_iteration(A, P0, X0, R0, G0):
    S = A @ P0
    D = P0.T @ S
    L = np.linalg.solve(D, G0)
    X1, R1 = X0 + P0 @ L, R0 - S @ L
    G1 = R1.T @ R1
    F = np.linalg.solve(G0, G1)
    return dict(S1=S, Delta1=D, Lambda1=L, X1=X1, R1=R1, Gamma1=G1, Phi1=F, P1=R1 + P0 @ F)


@pytest.mark.parametrize("fmt_name", ["csr", "bcsr"])
@pytest.mark.parametrize("N", [3, 8])
def test_one_block_cg_iteration_fused_and_unfused_match_numpy(fmt_name, N):
    A = make_spd(uniform_random(300, 300, 0.03, seed=1))
    fmt = to_csr(A) if fmt_name == "csr" else to_bcsr(A, 2, 3)
    plan = _cg_plan(A.shape[0], N, A.nnz)
    P0, X0, R0 = (RNG.standard_normal((300, N)) for _ in range(3))
    G0 = R0.T @ R0 + np.eye(N)
    ref = _reference_iteration(A, P0, X0, R0, G0)
    for fused in ([True, False] if fmt_name == "csr" else [True]):
        steps = schedule_steps(plan, iteration_ops(plan.dag, 1), fused)
        storage, kernels = build_step_kernels(plan, steps, fmt=fmt)
        init = {"P0": P0, "X0": X0, "R0": R0, "Gamma0": G0}
        env = {}
        for t, s in storage.items():
            env.setdefault(s, tvm.runtime.tensor(np.ascontiguousarray(init.get(t, np.zeros(plan.dag.tensors[t].shape)))))
        got = {}
        for step, k in zip(steps, kernels):
            if k is None:  # the host step: Λ = Δ⁻¹Γ0, Φ = Γ0⁻¹Γ1
                f = row_form(plan.dag, plan.dag.op(step[0]), None)
                env[storage[step[0]]].copyfrom(np.linalg.solve(env[storage[f.inputs[0]]].numpy(),
                                                               env[storage[f.inputs[1]]].numpy()))
            else:
                assert k.kind == ("spmm" if "S1" in step else "rows")
                assert set(k.storage) <= set(env)
                k(env)
            for o in step:
                got[o] = env[storage[o]].numpy().copy()
        for name, want in ref.items():
            np.testing.assert_allclose(got[name], want, rtol=1e-9, atol=1e-9 * np.abs(want).max(),
                                       err_msg=f"{name} fused={fused}")


# --------------------------------------------------------------------------- executor hook
def test_group_kernels_expose_their_prim_funcs():
    A = lap2d(10)
    plan = _cg_plan(A.shape[0], 4, A.nnz)
    steps = schedule_steps(plan, iteration_ops(plan.dag, 1), True)
    _, kernels = build_step_kernels(plan, steps, fmt=to_csr(A))
    names = [[str(p.name) for p in k.prim_func.params] for k in kernels if k is not None]
    assert "w_Delta" in names[0] and "g_Delta" in names[0]      # SpMM + its fused Δ
    assert {"g_X", "g_R", "g_Gamma", "w_Gamma"} <= set(names[1])  # X, R updated in place
    assert "Gamma_1" in kernels[2].storage  # ... but Γ1 has its own storage: Φ1 still reads Γ0


# --------------------------------------------------------------------------- GCN layer
@pytest.mark.parametrize("N,O", [(19, 5), (40, 16)])
def test_gcn_layer_fused_and_unfused_match_scipy(N, O):
    A = load_matrix("cora")
    X0 = RNG.standard_normal((A.shape[0], N)).astype("float32")
    W = RNG.standard_normal((N, O)).astype("float32")
    ref = gcn_layer_numpy(A, X0.astype(np.float64), W.astype(np.float64))
    for fused in (True, False):
        layer = GCNLayer(A, N, O, fused=fused)
        assert layer.steps == ([("Z", "X1")] if fused else [("Z",), ("X1",)])
        np.testing.assert_allclose(layer(X0, W), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_gcn_layer_float64_and_bad_input():
    A = sp.csr_array(lap2d(6))
    X0, W = RNG.standard_normal((36, 3)), RNG.standard_normal((3, 2))
    np.testing.assert_allclose(gcn_layer(A, X0, W, dtype="float64"), (A @ X0) @ W, rtol=1e-12)
    with pytest.raises(ShapeError):
        gcn_layer(A, X0[:30], W, dtype="float64")
    with pytest.raises(ShapeError):
        GCNLayer(A, 3, 2, dtype="float64")(X0, W[:, :1])
    bad = X0.copy()
    bad[0, 0] = np.nan
    with pytest.raises(InputError):
        gcn_layer(A, bad, W, dtype="float64")
    with pytest.raises(ShapeError):
        gcn_layer(sp.csr_array(np.ones((3, 4))), X0[:4], W, dtype="float64")


# --------------------------------------------------------------------------- in-kernel N x N solves
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_inline_spd_solve_matches_numpy_and_flags_a_singular_matrix(dtype):
    """The prologue's scaled Cholesky solve against numpy; a dependent column or a NaN sets the flag."""
    from schedules.fusion.inline_solve import emit_spd_solve
    from schedules.sparse.executors.codegen import Buffer, prim_func_source
    from tvm_ext.tvmscript_text import Code, parse_prim_func

    N, C = 5, 3
    code = Code()
    code("st[0] = 0")
    emit_spd_solve(code, "g", "r", "o", "st", N, C, dtype)
    bufs = [Buffer("hg", "g", (str(N), str(N)), dtype), Buffer("hr", "r", (str(N), str(C)), dtype),
            Buffer("ho", "o", (str(N), str(C)), dtype), Buffer("hst", "st", ("1",), "int32")]
    mod = tvm.compile(tvm.IRModule({"main": parse_prim_func(prim_func_source("solve", bufs, [], [], code))}),
                      target="llvm")
    V = RNG.standard_normal((20, N)) * np.array([1e3, 1.0, 1e-2, 5.0, 1.0])   # badly scaled columns
    G, R = (V.T @ V).astype(dtype), RNG.standard_normal((N, C)).astype(dtype)

    def run(G):
        args = [tvm.runtime.tensor(a) for a in (G, R, np.zeros((N, C), dtype), np.zeros(1, np.int32))]
        mod["main"](*args)
        return args[2].numpy(), int(args[3].numpy()[0])

    out, flag = run(G)
    ref = np.linalg.solve(G.astype(np.float64), R.astype(np.float64))
    assert flag == 0 and np.abs(out - ref).max() <= (1e-10 if dtype == "float64" else 1e-3) * np.abs(ref).max()
    dep = G.copy()
    dep[:, 3], dep[3, :] = dep[:, 1], dep[1, :]
    assert run(dep)[1] == 1
    bad = G.copy()
    bad[2, 2] = np.nan
    assert run(bad)[1] == 1
    assert run(-G)[1] == 1                                         # negative diagonal: not SPD


def test_inline_solve_kernels_solve_then_apply():
    """The X/R/Γ and P kernels' variants solve Λ and Φ first; the result equals the host solve + kernel."""
    from schedules.fusion.kernels import build_inline_solve_kernels

    A = lap2d(6)
    M, N = A.shape[0], 3
    plan = _cg_plan(M, N, A.nnz)
    steps = schedule_steps(plan, iteration_ops(plan.dag, 1), True)
    storage, kernels = build_step_kernels(plan, steps, fmt=to_csr(A))
    inline = build_inline_solve_kernels(plan, steps)
    assert [(i, k.ops) for i, k in inline.items()] == [(2, ("Lambda1", "X1", "R1", "Gamma1")), (4, ("Phi1", "P1"))]
    shapes = {s: plan.dag.tensors[t].shape for t, s in storage.items()}
    host = {s: RNG.standard_normal(shape) for s, shape in shapes.items()}
    V = RNG.standard_normal((3 * N, N))
    host[storage["Delta1"]] = V.T @ V + np.eye(N)
    host[storage["Gamma0"]] = V.T @ V + 2 * np.eye(N)
    ref = {s: a.copy() for s, a in host.items()}
    env = {s: tvm.runtime.tensor(a) for s, a in host.items()}
    inline[2](env)
    assert inline[2].status[0] == 0
    lam = np.linalg.solve(ref[storage["Delta1"]], ref[storage["Gamma0"]])
    X, R, P, S = (ref[storage[t]] for t in ("X0", "R0", "P0", "S1"))
    assert np.allclose(env[storage["Lambda1"]].numpy(), lam)
    assert np.allclose(env[storage["X1"]].numpy(), X + P @ lam)
    R1 = R - S @ lam
    assert np.allclose(env[storage["R1"]].numpy(), R1) and np.allclose(env[storage["Gamma1"]].numpy(), R1.T @ R1)
    env[storage["Delta1"]] = tvm.runtime.tensor(np.zeros((N, N)))         # PᵀAP vanished: flag, nothing updated
    before = env[storage["X1"]].numpy().copy()
    inline[2](env)
    assert inline[2].status[0] == 1 and np.array_equal(env[storage["X1"]].numpy(), before)
