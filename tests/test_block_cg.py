"""Block CG (GOGETA Alg. 1) on the fused/unfused TVM kernels: agreement with scipy's cg column by
column, breakdowns, bad input, the numpy peer, and ``tvm-ext cg``."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.fusion.block_cg import BlockCG, block_cg, block_cg_numpy
from schedules.fusion.block_cg_iteration import spd_pinv_solve
from schedules.fusion.cg_compare import compare_block_cg, modelled_traffic
from tvm_ext.errors import ConfigError, ConvergenceError, InputError, ShapeError
from tvm_ext.workloads import lap2d, lap3d, load_matrix, make_spd

TOL = 1e-10
MATRICES = {
    "nasa4704_spd": lambda: make_spd(load_matrix("nasa4704")),
    "LFAT5": lambda: load_matrix("LFAT5"),
    "lap2d(16)": lambda: lap2d(16),
    "lap3d(5)_27pt": lambda: lap3d(5, 27),
}
_SOLVERS: dict = {}


def solver(name: str, n_rhs: int, fused: bool = True) -> BlockCG:
    """One compiled solver per (matrix, N, fused) for the whole file."""
    key = (name, n_rhs, fused)
    if key not in _SOLVERS:
        _SOLVERS[key] = BlockCG(MATRICES[name](), n_rhs, fused=fused)
    return _SOLVERS[key]


def scipy_columns(A, B, tol):
    return np.column_stack([spla.cg(A, B[:, j], rtol=tol, atol=0.0, maxiter=20 * A.shape[0])[0]
                            for j in range(B.shape[1])])


@pytest.mark.parametrize("name", list(MATRICES))
@pytest.mark.parametrize("N", [1, 3, 8])
def test_solutions_agree_with_scipy_cg_column_by_column(name, N):
    s = solver(name, N)
    B = np.random.default_rng(N).standard_normal((s.n, N))
    res = s.solve(B, rtol=TOL)
    assert res.converged, res.reason
    assert res.residual.shape == (N,) and (res.residual <= 10 * TOL).all()
    np.testing.assert_allclose(s.A @ res.x, B, atol=20 * TOL * np.abs(B).max() * np.sqrt(s.n))
    ref = scipy_columns(s.A, B, TOL)
    # both solve to a 1e-10 residual; LFAT5 (condition 1.4e8) amplifies that in x
    bound = 1e-3 if name == "LFAT5" else 1e-6
    for j in range(N):
        assert np.linalg.norm(res.x[:, j] - ref[:, j]) <= bound * np.linalg.norm(ref[:, j])
    if name != "LFAT5":
        assert res.iterations <= 10 * s.n and not res.fallback_columns


def test_unfused_solver_follows_the_same_iterates():
    B = np.random.default_rng(3).standard_normal((256, 3))
    fused, unfused = solver("lap2d(16)", 3).solve(B, rtol=TOL), solver("lap2d(16)", 3, False).solve(B, rtol=TOL)
    assert solver("lap2d(16)", 3, False).steps == [(o,) for s in solver("lap2d(16)", 3).steps for o in s]
    assert fused.converged and unfused.converged
    assert abs(fused.iterations - unfused.iterations) <= 1
    np.testing.assert_allclose(fused.x, unfused.x, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(fused.history[5], unfused.history[5], rtol=1e-8)


def test_numpy_peer_runs_the_same_algorithm():
    A = MATRICES["lap2d(16)"]()
    B = np.random.default_rng(3).standard_normal((256, 3))
    ours, peer = solver("lap2d(16)", 3).solve(B, rtol=TOL), block_cg_numpy(A, B, tol=TOL)
    assert peer.converged and peer.solver == "numpy/scipy"
    assert abs(ours.iterations - peer.iterations) <= 1
    np.testing.assert_allclose(ours.x, peer.x, rtol=1e-7, atol=1e-9)


def test_block_cg_needs_fewer_iterations_than_single_columns():
    B = np.random.default_rng(0).standard_normal((4704, 8))
    res = solver("nasa4704_spd", 8).solve(B, rtol=1e-8)
    single = solver("nasa4704_spd", 1).solve(B[:, 0], rtol=1e-8)
    assert res.converged and single.converged and res.iterations < single.iterations
    assert res.seconds_per_iteration > 0 and len(res.history) >= res.iterations


def test_vector_rhs_initial_guess_and_zero_column():
    s = solver("lap2d(16)", 1)
    b = np.ones(256)
    r = s.solve(b, rtol=TOL)
    assert r.x.shape == (256,) and r.converged
    again = s.solve(b, r.x, rtol=1e-6)  # the solution as initial guess: nothing to do
    assert again.converged and again.iterations == 0
    s3 = solver("lap2d(16)", 3)
    B = np.random.default_rng(1).standard_normal((256, 3))
    B[:, 1] = 0.0
    r3 = s3.solve(B, rtol=TOL)
    assert r3.converged and np.abs(r3.x[:, 1]).max() == 0.0


def test_float32_and_bcsr_executors():
    A = lap2d(16)
    B = np.random.default_rng(5).standard_normal((256, 3))
    r32 = block_cg(A, B, rtol=1e-5, dtype="float32", return_result=True)
    assert r32.converged and r32.x.dtype == np.float64 and (r32.residual <= 1e-4).all()
    solver = BlockCG(A, 3, format="bcsr")
    assert solver.format_name.startswith("bcsr") and solver.kernels[0].kind == "spmm"
    rb = solver.solve(B, rtol=TOL)
    assert rb.converged and np.allclose(rb.x, solver_result_csr(B), rtol=1e-7, atol=1e-9)


def solver_result_csr(B):
    return solver("lap2d(16)", 3).solve(B, rtol=TOL).x


def test_more_right_hand_sides_than_rows_and_empty_systems():
    A = sp.csr_array(np.diag([1.0, 2.0, 4.0]))
    res = block_cg(A, np.ones((3, 5)), rtol=1e-12, return_result=True)  # N > M: the block is rank-deficient at once
    assert res.converged and np.allclose(res.x, [[1.0], [0.5], [0.25]] * np.ones((1, 5)))
    one = block_cg(sp.csr_array(np.array([[2.0]])), np.array([[1.0, 3.0]]), return_result=True)
    assert one.converged and np.allclose(one.x, [[0.5, 1.5]])
    empty = block_cg(sp.csr_array((0, 0)), np.zeros((0, 2)), return_result=True)
    assert empty.converged and empty.x.shape == (0, 2)


def test_dependent_columns_are_deflated_not_fatal():
    s = solver("lap2d(16)", 3)
    b = np.random.default_rng(2).standard_normal(256)
    B = np.column_stack([b, 2.0 * b, -b])  # rank 1: PᵀAP is singular from the first iteration
    res = s.solve(B, rtol=TOL)
    assert res.converged, res.reason
    assert res.rank_deficient >= 1
    np.testing.assert_allclose(res.x[:, 1], 2.0 * res.x[:, 0], rtol=1e-8, atol=1e-10)


def test_exhausted_krylov_space_falls_back_to_single_columns():
    s = solver("LFAT5", 8)  # 14 x 14, condition 1.4e8: the block stalls
    res = s.solve(np.random.default_rng(8).standard_normal((14, 8)), rtol=TOL)
    assert res.converged and res.restarts >= 1
    assert set(res.fallback_columns) <= set(range(8))


# --------------------------------------------------------------------------- breakdowns
def test_indefinite_matrix_reports_not_positive_definite():
    A = sp.csr_array(np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 3.0]]))
    res = block_cg(A, np.array([1.0, 0.0, 1.0]), return_result=True)
    assert not res.converged and "not positive definite" in res.reason
    with pytest.raises(ConvergenceError, match="not positive definite") as info:
        block_cg(A, np.array([1.0, 0.0, 1.0]), raise_on_failure=True, return_result=True)
    assert info.value.result.converged is False


def test_asymmetric_and_zero_diagonal_matrices_are_reported_up_front():
    asym = sp.csr_array(np.array([[2.0, 1.0], [0.0, 2.0]]))
    r = block_cg_numpy(asym, np.ones(2))
    assert not r.converged and "not symmetric" in r.reason and r.iterations == 0
    zero_diag = sp.csr_array(np.array([[0.0, 1.0], [1.0, 2.0]]))
    assert "diagonal" in block_cg(zero_diag, np.ones((2, 2)), return_result=True).reason


def test_singular_matrix_with_inconsistent_rhs_does_not_converge():
    n = 30  # path-graph Laplacian: PSD, singular (constant null space)
    L = sp.diags_array([-np.ones(n - 1), np.r_[1.0, 2.0 * np.ones(n - 2), 1.0], -np.ones(n - 1)],
                       offsets=[-1, 0, 1], format="csr")
    b = np.zeros(n)
    b[0] = 1.0  # not orthogonal to the null space: no solution
    res = block_cg(L, b, maxiter=200, return_result=True)
    assert not res.converged
    assert "no convergence" in res.reason or "breakdown" in res.reason or "stalled" in res.reason
    with pytest.raises(ConvergenceError):
        block_cg_numpy(L, b, maxiter=200, raise_on_failure=True)


def test_no_restart_budget_still_confirms_convergence():
    res = block_cg_numpy(lap2d(8), np.ones((64, 2)), tol=1e-10, max_restarts=0)
    assert res.converged and res.restarts == 1  # the one restart confirms with the true residual


def test_maxiter_zero_reports_no_convergence():
    res = solver("lap2d(16)", 1).solve(np.ones(256), maxiter=0)
    assert not res.converged and res.iterations == 0 and "no convergence in 0 iterations" in res.reason


# --------------------------------------------------------------------------- bad input
def test_bad_input_raises_clear_errors():
    s = solver("lap2d(16)", 3)
    B = np.ones((256, 3))
    with pytest.raises(ShapeError, match="rows"):
        s.solve(np.ones((255, 3)))
    with pytest.raises(ShapeError, match="columns"):
        s.solve(np.ones((256, 2)))
    with pytest.raises(ShapeError, match="X0"):
        s.solve(B, np.ones((256, 2)))
    nan = B.copy()
    nan[3, 1] = np.nan
    with pytest.raises(InputError, match="NaN"):
        s.solve(nan)
    with pytest.raises(InputError, match="tol"):
        s.solve(B, rtol=-1.0)
    with pytest.raises(InputError, match="maxiter"):
        s.solve(B, maxiter=2.5)
    with pytest.raises(ShapeError):
        block_cg(lap2d(4), np.ones((16, 0)), return_result=True)
    with pytest.raises(ShapeError, match="square"):
        block_cg(sp.csr_array(np.ones((3, 4))), np.ones(3), return_result=True)
    bad = lap2d(4).astype(float)
    bad.data[0] = np.inf
    with pytest.raises(InputError):
        block_cg_numpy(bad, np.ones(16))
    with pytest.raises(InputError):
        BlockCG(lap2d(4), 0)


# --------------------------------------------------------------------------- the small solve
def test_spd_pinv_solve_deflates_and_flags():
    out = np.empty((3, 2))
    G = np.diag([4.0, 1e-30, 9.0])
    info = spd_pinv_solve(G, np.ones((3, 2)), out)
    assert info.rank == 3 and not info.indefinite  # tiny but independent: the diagonal scaling keeps it
    v = np.array([[1.0], [1.0]])
    info = spd_pinv_solve(v @ v.T, np.array([[2.0, 0.0], [2.0, 0.0]]), out[:2])
    assert info.rank == 1 and np.allclose((v @ v.T) @ out[:2], [[2.0, 0.0], [2.0, 0.0]])
    assert spd_pinv_solve(np.array([[1.0, 3.0], [3.0, 1.0]]), np.eye(2), np.empty((2, 2))).indefinite
    assert spd_pinv_solve(np.zeros((2, 2)), np.eye(2), np.empty((2, 2))).rank == 0
    assert spd_pinv_solve(np.full((2, 2), np.nan), np.eye(2), np.empty((2, 2))).nonfinite


@settings(max_examples=12, deadline=None)
@given(n=st.integers(5, 60), density=st.floats(0.05, 0.4), seed=st.integers(0, 10_000))
def test_random_spd_systems_converge(n, density, seed):
    A = make_spd(sp.random_array((n, n), density=density, rng=seed))
    B = np.random.default_rng(seed).standard_normal((n, 2))
    # the unfused schedule needs no fusion plan per size; its kernels (symbolic sizes) compile once
    res = block_cg(A, B, rtol=1e-9, fused=False, return_result=True)
    assert res.converged, res.reason
    assert (res.residual <= 1e-8).all()


# --------------------------------------------------------------------------- comparison, CLI, demo
def test_modelled_traffic_reduction_matches_the_group_count():
    t = modelled_traffic(10**6, 8, 5 * 10**6)
    assert t["seq_words"] > t["gogeta_words"] > 0
    assert 1.2 < t["reduction"] < 1.35


def test_compare_block_cg_reports_every_solver():
    res = compare_block_cg(lap2d(16), 3, tol=1e-8, repeat=1)
    for key in ("converged", "iterations", "residual", "t_iter_fused", "t_iter_unfused", "t_iter_numpy",
                "t_iter_scipy_cg", "modelled_traffic_reduction"):
        assert key in res
    assert res["converged"] and res["converged_scipy_cg"] and res["max_diff_vs_scipy_cg"] < 1e-5
    assert all(res[k] > 0 for k in ("t_iter_fused", "t_iter_unfused", "t_iter_numpy", "t_iter_auto"))
    assert res["auto_choice"] in ("fused", "unfused") and res["converged_auto"]
    assert res["speedup_auto_vs_unfused"] == pytest.approx(res["t_iter_unfused"] / res["t_iter_auto"])


def test_cli_cg_json_and_text(capsys):
    from tvm_ext.cli.main import main

    assert main(["cg", "LFAT5", "--n", "2", "--json", "--repeat", "1", "--tol", "1e-8"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("converged", "iterations", "residual", "t_iter_fused", "t_iter_unfused", "t_iter_numpy"):
        assert key in data
    assert data["converged"] and data["made_spd"] is False and len(data["residual"]) == 2
    assert main(["cg", "LFAT5", "--n", "2", "--json", "--repeat", "1", "--rtol", "1e-6"]) == 0   # scipy's name
    assert json.loads(capsys.readouterr().out)["tol"] == 1e-6
    assert main(["cg", "nasa4704", "--n", "1", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "made SPD with make_spd" in out and "modelled DRAM-traffic reduction" in out
    assert main(["cg", "LFAT5", "--n", "0"]) != 0
    assert "--n must be a positive integer" in capsys.readouterr().err


def test_auto_keeps_the_schedule_that_measured_faster():
    """fused="auto" on a cache-resident matrix builds both schedules, times a few real iterations of
    each in interleaved rounds and keeps the one the median per-round ratio favours."""
    from schedules.fusion.block_cg import FusionSelection

    assert FusionSelection(1e-3, 2e-3).fused and not FusionSelection(3e-3, 2e-3).fused
    assert FusionSelection(1e-3, 2e-3).speedup == pytest.approx(2.0)
    # one noisy round does not decide: the median of the per-round ratios does
    assert not FusionSelection(1e-3, 1e-3, ratios=(0.8, 5.0, 0.9)).fused
    assert FusionSelection(1e-3, 1e-3, ratios=(1.2, 0.2, 1.1)).fused
    A = MATRICES["lap2d(16)"]()
    s = BlockCG(A, 3, fused="auto")
    sel = s.selection
    assert sel is not None and sel.rule == "measured" and sel.fused_seconds > 0 and sel.unfused_seconds > 0
    assert len(sel.ratios) == 5 and s.fused == (float(np.median(sel.ratios)) >= 1.0)
    assert s.steps == solver("lap2d(16)", 3, s.fused).steps
    B = np.random.default_rng(3).standard_normal((A.shape[0], 3))
    res = s.solve(B, rtol=TOL)
    assert res.converged and res.fused == s.fused
    assert np.abs(res.x - scipy_columns(A, B, TOL * 1e-2)).max() < 1e-6 * np.abs(res.x).max()
    assert BlockCG(A, 3, fused=True).selection is None
    with pytest.raises(ConfigError):
        BlockCG(A, 3, fused="yes")


def test_auto_rule_on_a_cache_and_a_dram_resident_size():
    """The rule's choice logic on both sizes: nasa4704 (cache-resident here) is measured; a
    1.3M-row, 16.6M-nnz FEM matrix (fem_elasticity(800)) is DRAM-resident, fused by the model."""
    from schedules.fusion.fusion_choice import cache_bytes, modelled_selection, working_set_bytes

    cache = cache_bytes()
    A = MATRICES["nasa4704_spd"]()
    for N in (1, 8):
        assert working_set_bytes(A.shape[0], N, A.nnz) < cache
        assert modelled_selection(A.shape[0], N, A.nnz) is None          # measure both
        sel = modelled_selection(1_280_000, N, 16_608_016)
        assert sel is not None and sel.rule == "modelled" and sel.fused and sel.fused_seconds is None
        assert sel.working_set_bytes > 4 * cache == 4 * sel.cache_bytes
        assert sel.speedup == pytest.approx(modelled_traffic(1_280_000, N, 16_608_016)["reduction"])
        assert sel.speedup > 1.0
    # the comparison is the cache size: the same matrix is DRAM-resident under a smaller cache
    ws = working_set_bytes(A.shape[0], 8, A.nnz)
    assert modelled_selection(A.shape[0], 8, A.nnz, cache_bytes=ws) is None
    assert modelled_selection(A.shape[0], 8, A.nnz, cache_bytes=ws - 1).fused


def test_auto_on_a_dram_resident_problem_builds_only_the_fused_schedule(monkeypatch):
    """Under a cache smaller than the working set, fused="auto" takes the model's pick: no timing."""
    import importlib

    bcg = importlib.import_module("schedules.fusion.block_cg")    # the package exports a function of that name
    fusion_choice = importlib.import_module("schedules.fusion.fusion_choice")

    monkeypatch.setattr(fusion_choice, "_cache_bytes", lambda target=None: 1 << 10)
    monkeypatch.setattr(bcg, "_select", lambda *a, **k: pytest.fail("a DRAM-resident problem was timed"))
    A = MATRICES["lap2d(16)"]()
    s = BlockCG(A, 2, fused="auto")
    assert s.fused and s.selection.rule == "modelled" and s.steps == solver("lap2d(16)", 2, True).steps
    B = np.random.default_rng(5).standard_normal((A.shape[0], 2))
    res = s.solve(B, rtol=TOL)
    assert res.converged and np.abs(res.x - scipy_columns(A, B, TOL * 1e-2)).max() < 1e-6 * np.abs(res.x).max()


@pytest.mark.parametrize("fused", [True, False])
def test_inline_solves_leave_no_host_step_and_match_numpy_and_scipy(fused, monkeypatch):
    """Λ and Φ are solved in the kernels that apply them: a well-conditioned solve calls no host solve,
    and agrees with the host-solve schedule, the numpy Block CG and scipy's cg."""
    import importlib

    it_mod = importlib.import_module("schedules.fusion.block_cg_iteration")
    s = solver("nasa4704_spd", 4, fused)
    assert all(s.kernels[i] is not None and s.steps[i - 1][0] in s.host_forms for i in s.inline_kernels)
    assert {o for k in s.inline_kernels.values() for o in k.ops if o in s.host_forms} == set(s.host_forms)
    A = MATRICES["nasa4704_spd"]()
    B = np.random.default_rng(11).standard_normal((A.shape[0], 4))
    calls = []
    real = it_mod.spd_pinv_solve
    monkeypatch.setattr(it_mod, "spd_pinv_solve", lambda *a, **k: calls.append(1) or real(*a, **k))
    res = s.solve(B, rtol=1e-15, maxiter=30)
    assert res.iterations == 30 and not calls                      # 30 iterations, no host solve
    monkeypatch.setattr(it_mod, "spd_pinv_solve", real)
    host = BlockCG(A, 4, fused=fused, inline_solves=False)
    assert host.inline_kernels == {}
    ref = host.solve(B, rtol=1e-15, maxiter=30)
    peer = block_cg_numpy(A, B, tol=1e-15, maxiter=30)
    scale = np.abs(ref.x).max()
    assert np.abs(res.x - ref.x).max() < 1e-7 * scale and np.abs(res.x - peer.x).max() < 1e-7 * scale
    full = s.solve(B, rtol=1e-9)
    assert full.converged and np.abs(full.x - scipy_columns(A, B, 1e-11)).max() < 1e-6 * np.abs(full.x).max()
