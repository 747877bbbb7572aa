"""The solvers and operators follow scipy.sparse.linalg's conventions; every result is checked against scipy."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from schedules.sparse.solvers import pcg
from tvm_ext.errors import InputError, ShapeError
from tvm_ext.workloads import lap2d


def rhs(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n)


def test_pcg_returns_x_info_like_scipy_cg():
    A, b = lap2d(12), rhs(144)
    x, info = pcg(A, b, rtol=1e-10)
    x_ref, info_ref = spla.cg(A, b, rtol=1e-10, atol=0.0)
    assert info == info_ref == 0
    np.testing.assert_allclose(x, x_ref, rtol=1e-7, atol=1e-9)
    _, info = pcg(A, b, rtol=1e-12, maxiter=2, M=None)
    assert info == 2                     # scipy: the iterations done when not converged
    res = pcg(A, b, rtol=1e-10, return_result=True)
    assert res.converged and res.info == 0 and res.residuals[-1] <= 1e-10


def test_pcg_atol_is_scipys_absolute_floor():
    A, b = lap2d(12), 100.0 * rhs(144)
    res = pcg(A, b, rtol=0.0, atol=1e-6, M=None, return_result=True)
    assert res.converged and np.linalg.norm(b - A @ res.x) <= 10 * 1e-6
    # atol looser than rtol * ||b||: scipy's max() picks it, so fewer iterations
    loose = pcg(A, b, rtol=1e-12, atol=1.0, M=None, return_result=True)
    tight = pcg(A, b, rtol=1e-12, atol=0.0, M=None, return_result=True)
    assert loose.iterations < tight.iterations
    with pytest.raises(InputError, match="atol"):
        pcg(A, b, atol=-1.0)


def test_pcg_linear_operator_A_and_M_match_scipy():
    A, b = lap2d(10), rhs(100, 1)
    op = spla.aslinearoperator(A)
    d = A.diagonal()
    M = spla.LinearOperator(A.shape, matvec=lambda r: r / d, dtype=np.float64)
    x, info = pcg(op, b, rtol=1e-10, M=M)
    x_ref, info_ref = spla.cg(op, b, rtol=1e-10, atol=0.0, M=M)
    assert info == info_ref == 0
    np.testing.assert_allclose(x, x_ref, rtol=1e-7, atol=1e-9)
    # an operator M on a matrix A, and our Jacobi, take the same iterations
    ours = pcg(A, b, rtol=1e-10, M="jacobi", return_result=True)
    theirs = pcg(A, b, rtol=1e-10, M=M, return_result=True)
    assert theirs.preconditioner == "operator" and abs(ours.iterations - theirs.iterations) <= 1
    with pytest.raises(InputError, match="LinearOperator"):
        pcg(op, b, M="sgs")
    with pytest.raises(InputError, match="shape"):
        pcg(A, b, M=sp.eye_array(5))


def test_pcg_callback_sees_every_iterate_as_scipy():
    A, b = lap2d(10), rhs(100, 2)
    ours, theirs = [], []
    res = pcg(A, b, rtol=1e-8, M=None, callback=lambda xk: ours.append(xk.copy()), return_result=True)
    spla.cg(A, b, rtol=1e-8, atol=0.0, callback=lambda xk: theirs.append(xk.copy()))
    assert len(ours) == res.iterations and abs(len(ours) - len(theirs)) <= 1
    for mine, ref in zip(ours[:5], theirs[:5]):
        np.testing.assert_allclose(mine, ref, rtol=1e-8, atol=1e-10)
    # with SGS the iterate comes back in the original order: the last one is x
    seen = []
    res = pcg(A, b, rtol=1e-8, M="sgs", callback=seen.append, return_result=True)
    np.testing.assert_allclose(seen[-1], res.x)


def test_pcg_old_keywords_still_work_with_a_deprecation_warning():
    A, b = lap2d(8), rhs(64)
    with pytest.warns(DeprecationWarning, match="rtol"):
        x_old, _ = pcg(A, b, tol=1e-10)
    with pytest.warns(DeprecationWarning, match="M="):
        x_none, _ = pcg(A, b, rtol=1e-10, preconditioner="none")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x_new, _ = pcg(A, b, rtol=1e-10)
    np.testing.assert_allclose(x_old, x_new)
    np.testing.assert_allclose(x_none, spla.spsolve(sp.csc_array(A), b), rtol=1e-7, atol=1e-9)


def test_block_cg_returns_x_info_and_matches_scipy_per_column():
    from schedules.fusion.block_cg import block_cg

    A = lap2d(10)
    B = np.random.default_rng(3).standard_normal((100, 3))
    X, info = block_cg(A, B, rtol=1e-10)
    assert info == 0
    ref = np.column_stack([spla.cg(A, B[:, j], rtol=1e-10, atol=0.0)[0] for j in range(3)])
    np.testing.assert_allclose(X, ref, rtol=1e-7, atol=1e-9)
    _, info = block_cg(A, B, rtol=1e-14, maxiter=2, max_restarts=0)
    assert info > 0
    res = block_cg(A, B, rtol=0.0, atol=1e-6, return_result=True)
    assert res.converged and res.info == 0
    assert (np.linalg.norm(B - A @ res.x, axis=0) <= 10 * 1e-6).all()


def test_block_cg_callback_rejects_operator_and_M_and_warns_on_tol():
    from schedules.fusion.block_cg import block_cg
    from tvm_ext.errors import ConfigError

    A = lap2d(8)
    B = np.random.default_rng(4).standard_normal((64, 2))
    seen = []
    res = block_cg(A, B, rtol=1e-8, callback=lambda Xk: seen.append(Xk.copy()), return_result=True)
    assert len(seen) >= 1 and seen[0].shape == (64, 2)
    # the iterates approach the solution the solver returns
    assert np.linalg.norm(seen[-1] - res.x) < np.linalg.norm(seen[0] - res.x)
    with pytest.raises(InputError, match="LinearOperator"):
        block_cg(spla.aslinearoperator(A), B)
    with pytest.raises(ConfigError, match="preconditioner"):
        block_cg(A, B, M=spla.aslinearoperator(sp.eye_array(64)))
    with pytest.warns(DeprecationWarning, match="rtol"):
        X_old, _ = block_cg(A, B, tol=1e-10)
    np.testing.assert_allclose(A @ X_old, B, atol=1e-8)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit_diagonal", [False, True])
def test_triangular_solve_matches_spsolve_triangular_with_k_columns(lower, unit_diagonal):
    from schedules.sparse.triangular import TriangularSolver

    A = lap2d(6)
    T = sp.csr_array(sp.tril(A) if lower else sp.triu(A))
    B = np.random.default_rng(5).standard_normal((36, 3))
    x = TriangularSolver(T, lower=lower, unit_diagonal=unit_diagonal).solve(B)
    ref = spla.spsolve_triangular(T, B, lower=lower, unit_diagonal=unit_diagonal)
    assert x.shape == ref.shape == (36, 3)
    np.testing.assert_allclose(x, ref, rtol=1e-10, atol=1e-12)
    one = TriangularSolver(T, lower=lower, unit_diagonal=unit_diagonal).solve(B[:, :1])
    assert one.shape == (36, 1)
    np.testing.assert_allclose(one[:, 0], ref[:, 0], rtol=1e-10, atol=1e-12)


def test_gauss_seidel_is_not_in_place_unlike_pyamg():
    from pyamg.relaxation.relaxation import gauss_seidel

    from schedules.sparse.triangular import GaussSeidel

    A, b = lap2d(6), rhs(36, 6)
    x0 = np.zeros(36)
    ours = GaussSeidel(A).forward(x0, b)
    assert ours.any() and np.all(x0 == 0.0)      # a new x; our x0 is untouched
    x_pyamg = x0.copy()
    gauss_seidel(sp.csr_matrix(A), x_pyamg, b, iterations=1, sweep="forward")   # pyamg: in place
    np.testing.assert_allclose(ours, x_pyamg, rtol=1e-12, atol=1e-14)


def test_executor_is_a_linear_operator_with_matvec_matmat_and_matmul():
    from schedules.sparse import CSR, build_executor, plan_spmm

    A = sp.random_array((30, 20), density=0.2, format="csr", random_state=7)
    x = rhs(20, 7)
    X = np.random.default_rng(8).standard_normal((20, 3))
    for kind in ("spmv", "spmm"):
        exe = build_executor(CSR.from_scipy(A), kind=kind)
        np.testing.assert_allclose(exe.matvec(x), A @ x, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(exe.matmat(X), A @ X, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(exe @ x, A @ x, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(exe @ X, A @ X, rtol=1e-12, atol=1e-12)
        op = exe.aslinearoperator()
        assert op.shape == (30, 20) and op.dtype == np.float64
        np.testing.assert_allclose(op @ X, A @ X, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(op.matvec(x), A @ x, rtol=1e-12, atol=1e-12)
    # plan_spmm is inspect under a name that does not shadow the standard library's
    S = lap2d(8)
    exe = plan_spmm(S, 1).build(kind="spmv")
    x_ours, info = pcg(exe.aslinearoperator(), np.ones(64), rtol=1e-10)    # an operator A: no inspector
    x_ref, info_ref = spla.cg(exe.aslinearoperator(), np.ones(64), rtol=1e-10, atol=0.0)
    assert info == info_ref == 0
    np.testing.assert_allclose(x_ours, x_ref, rtol=1e-7, atol=1e-9)
    x_direct, _ = pcg(exe, np.ones(64), rtol=1e-10)                        # an executor is taken as its operator
    np.testing.assert_allclose(x_direct, x_ours, rtol=1e-12)
    with pytest.raises(ShapeError):
        exe.matvec(np.ones((64, 2, 1)))


def test_our_gauss_seidel_and_triangular_solver_are_operators_for_M():
    from schedules.sparse.triangular import GaussSeidel, TriangularSolver

    A, b = lap2d(12), rhs(144, 9)
    ours = pcg(A, b, rtol=1e-10, M="sgs", return_result=True)
    as_object = pcg(A, b, rtol=1e-10, M=GaussSeidel(A), return_result=True)
    assert as_object.preconditioner == "operator" and abs(as_object.iterations - ours.iterations) <= 1
    np.testing.assert_allclose(as_object.x, ours.x, rtol=1e-7, atol=1e-9)
    count = [0]
    x_sc, info = spla.cg(A, b, rtol=1e-10, atol=0.0, M=GaussSeidel(A).aslinearoperator(),
                         callback=lambda _: count.__setitem__(0, count[0] + 1))
    assert info == 0 and abs(count[0] - ours.iterations) <= 1
    np.testing.assert_allclose(x_sc, ours.x, rtol=1e-7, atol=1e-9)
    L = sp.csr_array(sp.tril(A))
    op = TriangularSolver(L).aslinearoperator()
    np.testing.assert_allclose(op.matvec(b), spla.spsolve_triangular(L, b), rtol=1e-10, atol=1e-12)
