"""PCG with a level-scheduled symmetric Gauss-Seidel preconditioner (Venkat 2016 §7.3.3)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from schedules.sparse.solvers import PCG, pcg
from schedules.sparse.triangular import GaussSeidel
from tvm_ext.errors import ConvergenceError, InputError, ShapeError
from tvm_ext.workloads import lap2d, lap3d, load_matrix, make_spd


def rhs(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n)


def scipy_cg_iterations(A, b, tol, M=None) -> tuple[np.ndarray, int]:
    count = [0]

    def cb(_):
        count[0] += 1

    x, info = spla.cg(A, b, rtol=tol, atol=0.0, M=M, callback=cb, maxiter=10 * A.shape[0])
    assert info == 0
    return x, count[0]


@pytest.mark.parametrize("preconditioner", ["sgs", "jacobi", "none"])
def test_pcg_matches_direct_solve(preconditioner):
    A = lap2d(20)
    b = rhs(400)
    res = pcg(A, b, rtol=1e-10, M=preconditioner, return_result=True)
    assert res.converged and res.reason == "converged"
    np.testing.assert_allclose(res.x, spla.spsolve(sp.csc_array(A), b), rtol=1e-7, atol=1e-9)
    assert res.true_residual <= 1e-9
    assert res.residuals[0] == pytest.approx(1.0) and res.residuals[-1] <= 1e-10
    assert len(res.residuals) == res.iterations + 1


def test_sgs_iterations_match_scipy_cg_with_same_preconditioner():
    A = make_spd(load_matrix("nasa4704"))
    n = A.shape[0]
    b = rhs(n, 1)
    ours = pcg(A, b, rtol=1e-8, return_result=True)
    gs = GaussSeidel(A, parallel=False)
    M = spla.LinearOperator((n, n), matvec=lambda r: gs.symmetric(None, r))
    x_ref, its_ref = scipy_cg_iterations(A, b, 1e-8, M=M)
    assert ours.converged and abs(ours.iterations - its_ref) <= 1
    np.testing.assert_allclose(ours.x, x_ref, rtol=1e-5, atol=1e-8)
    plain = pcg(A, b, rtol=1e-8, M="none", return_result=True)
    _, its_plain = scipy_cg_iterations(A, b, 1e-8)
    assert abs(plain.iterations - its_plain) <= 1
    assert ours.iterations < plain.iterations       # SGS actually preconditions


def test_parallel_and_serial_sgs_agree_and_schedule_is_reused():
    A = lap3d(7)
    solver = PCG(A)
    assert solver.levels == 3 * 7 - 2
    r1, r2 = solver.solve(rhs(343, 2), rtol=1e-8), solver.solve(rhs(343, 3), rtol=1e-8)
    assert r1.converged and r2.converged
    assert r1.inspector_seconds == r2.inspector_seconds   # inspected once, in the constructor
    serial = PCG(A, parallel=False).solve(rhs(343, 2), rtol=1e-8)
    assert serial.levels == 343 and serial.iterations == r1.iterations
    np.testing.assert_allclose(serial.x, r1.x, rtol=1e-9, atol=1e-12)


def test_inspector_overhead_is_reported_in_iterations():
    res = pcg(lap2d(24), rhs(576), rtol=1e-8, return_result=True)
    assert res.levels == 47
    assert res.inspector_seconds > 0 and res.seconds_per_iteration > 0
    assert res.inspector_overhead_iterations == pytest.approx(
        res.inspector_seconds / res.seconds_per_iteration)
    assert set(res.inspector_breakdown) == {"graph", "levels", "reorder"}
    s = res.summary()
    assert s["converged"] and s["levels"] == 47 and "x" not in s


def test_float32_pcg():
    A = sp.csr_array(lap2d(12), dtype=np.float32)
    b = rhs(144).astype(np.float32)
    res = pcg(A, b, rtol=1e-5, return_result=True)
    assert res.converged and res.x.dtype == np.float32
    assert np.linalg.norm(A.astype(np.float64) @ res.x - b) <= 1e-4 * np.linalg.norm(b)


def test_zero_rhs_and_exact_start():
    A = lap2d(6)
    res = pcg(A, np.zeros(36), return_result=True)
    assert res.converged and res.iterations == 0 and not res.x.any()
    x = spla.spsolve(sp.csc_array(A), np.ones(36))
    res = pcg(A, np.ones(36), x0=x, rtol=1e-8, return_result=True)
    assert res.converged and res.iterations == 0


# ----------------------------------------------------------------- failures are reported
def test_indefinite_matrix_reports_not_positive_definite():
    A = sp.csr_array(np.diag([2.0, 1.0, 3.0, 1.0]) + np.diag([1.9, 0, 1.9], 1) + np.diag([1.9, 0, 1.9], -1))
    assert np.linalg.eigvalsh(A.toarray()).min() < 0
    res = pcg(A, np.array([1.0, -1.0, 1.0, -1.0]), M="none", return_result=True)
    assert not res.converged and "not positive definite" in res.reason
    with pytest.raises(ConvergenceError, match="not positive definite") as err:
        pcg(A, np.array([1.0, -1.0, 1.0, -1.0]), M="none", raise_on_failure=True, return_result=True)
    assert err.value.result.converged is False


@pytest.mark.parametrize("preconditioner", ["sgs", "jacobi", "none"])
def test_non_positive_diagonal_and_asymmetry_are_reported(preconditioner):
    A = lap2d(4).toarray()
    A[5, 5] = -1.0
    res = pcg(sp.csr_array(A), np.ones(16), M=preconditioner, return_result=True)
    assert not res.converged and res.iterations == 0 and "A[5, 5]" in res.reason
    B = lap2d(4).toarray()
    B[0, 1] = -0.5
    res = pcg(sp.csr_array(B), np.ones(16), M=preconditioner, return_result=True)
    assert not res.converged and "not symmetric" in res.reason
    with pytest.raises(ConvergenceError, match="not symmetric"):
        pcg(sp.csr_array(B), np.ones(16), M=preconditioner, raise_on_failure=True, return_result=True)


@pytest.mark.parametrize("preconditioner", ["sgs", "none"])
def test_singular_matrix_never_claims_convergence(preconditioner):
    # Neumann graph Laplacian of a path: SPSD, singular; b is not in its range
    n = 30
    L = sp.diags_array([-np.ones(n - 1), np.r_[1, 2 * np.ones(n - 2), 1], -np.ones(n - 1)],
                       offsets=[-1, 0, 1], format="csr")
    b = np.ones(n)
    res = pcg(L, b, rtol=1e-10, maxiter=300, M=preconditioner, return_result=True)
    assert not res.converged and res.reason
    assert res.true_residual > 1e-3 or math.isnan(res.true_residual)
    with pytest.raises(ConvergenceError):
        pcg(L, b, rtol=1e-10, maxiter=300, M=preconditioner, raise_on_failure=True, return_result=True)


def test_maxiter_reached_is_reported():
    res = pcg(lap2d(20), rhs(400), rtol=1e-12, maxiter=3, return_result=True)
    assert not res.converged and res.iterations == 3 and "no convergence in 3 iterations" in res.reason


def test_bad_arguments():
    A = lap2d(4)
    with pytest.raises(ShapeError):
        pcg(A, np.ones(15), return_result=True)
    with pytest.raises(ShapeError):
        pcg(A, np.ones(16), x0=np.ones(3), return_result=True)
    with pytest.raises(InputError, match="preconditioner"):
        pcg(A, np.ones(16), M="ilu7", return_result=True)
    with pytest.raises(InputError, match="tol"):
        pcg(A, np.ones(16), rtol=0, return_result=True)
    with pytest.raises(InputError, match="float32"):
        pcg(A, np.ones(16, dtype=np.float32), return_result=True)
    with pytest.raises(ShapeError, match="square"):
        pcg(sp.csr_array(np.ones((3, 4))), np.ones(3), return_result=True)
    with pytest.raises(InputError, match="non-finite"):
        pcg(A, np.r_[np.ones(15), np.inf], return_result=True)
    empty = pcg(sp.csr_array((0, 0)), np.zeros(0), return_result=True)
    assert empty.converged and empty.x.shape == (0,)


# ----------------------------------------------------------------- TVM vector kernels
@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-12), ("float32", 1e-4)])
@pytest.mark.parametrize("n", [1, 3000, 40_000])   # one chunk (serial twin) and several (parallel)
def test_vector_kernels_match_numpy(dtype, rtol, n):
    import tvm

    from schedules.sparse.vector_kernels import VectorKernels

    k = VectorKernels(dtype)
    rng = np.random.default_rng(n)
    x, r, p, q, z, d = (rng.standard_normal(n).astype(dtype) for _ in range(6))
    t = {name: tvm.runtime.tensor(a, tvm.cpu(0))
         for name, a in zip("xrpqzd", (x, r, p, q, z, d))}
    assert k.dot(t["p"], t["q"]) == pytest.approx(float(p.astype(np.float64) @ q), rel=rtol, abs=rtol)
    a = 0.37
    x2, r2 = x + dtype_scalar(a, dtype) * p, r - dtype_scalar(a, dtype) * q
    rr = k.cg_update(t["x"], t["r"], t["p"], t["q"], t["z"], t["d"], a, 2)   # z = d * r
    assert rr == pytest.approx(float(r2.astype(np.float64) @ r2), rel=rtol)
    np.testing.assert_allclose(t["x"].numpy(), x2, rtol=rtol, atol=rtol)   # TVM may fuse into FMA
    np.testing.assert_allclose(t["z"].numpy(), d * r2, rtol=rtol, atol=rtol)
    k.cg_update(t["x"], t["r"], t["p"], t["q"], t["z"], t["d"], 0.0, 1)      # z = 0
    assert not t["z"].numpy().any()
    k.xpay(t["p"], t["r"], -1.5)
    np.testing.assert_allclose(t["p"].numpy(), r2 - dtype_scalar(1.5, dtype) * p, rtol=rtol,
                               atol=rtol)


def dtype_scalar(v: float, dtype: str):
    return np.dtype(dtype).type(v)


def test_float32_reductions_accumulate_in_float64():
    import tvm

    from schedules.sparse.vector_kernels import VectorKernels

    n = 1_000_000   # a float32 running sum of a million positive terms is off by ~1e-4
    u = np.random.default_rng(5).uniform(0.5, 1.5, n).astype(np.float32)
    t = tvm.runtime.tensor(u, tvm.cpu(0))
    exact = float(u.astype(np.float64) @ u.astype(np.float64))
    assert VectorKernels("float32").dot(t, t) == pytest.approx(exact, rel=1e-12)


def test_float32_pcg_converges_like_scipy():
    A = lap2d(48).astype(np.float32)
    b = np.random.default_rng(4).standard_normal(A.shape[0]).astype(np.float32)
    count = [0]
    x_ref, info = spla.cg(A, b, rtol=1e-5, atol=0.0, maxiter=2000,
                          callback=lambda _: count.__setitem__(0, count[0] + 1))
    assert info == 0
    for M in (None, "sgs"):
        res = pcg(A, b, M=M, rtol=1e-5, maxiter=2000, return_result=True)
        assert res.converged and res.x.dtype == np.float32
        assert np.linalg.norm(b - A @ res.x) <= 2e-5 * np.linalg.norm(b)
        if M is None:   # same method, same precision: the same iteration count, give or take
            assert abs(res.iterations - count[0]) <= max(3, count[0] // 10)
