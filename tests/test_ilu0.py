"""ILU(0) on the level schedule and ILU(0)-preconditioned CG (Venkat 2016 §7.3.3, Park et al.)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from schedules.sparse.ilu0 import ILU0
from schedules.sparse.level_sets import level_sets
from schedules.sparse.solvers import PCG, pcg
from tvm_ext.errors import InputError
from tvm_ext.workloads import lap2d, lap3d, load_matrix, make_spd


def ilu0_reference(A) -> tuple[np.ndarray, np.ndarray]:
    """Textbook IKJ ILU(0) on a dense copy (small matrices only)."""
    A = sp.csr_array(A)
    D = A.toarray().astype(np.float64)
    P = D != 0
    n = D.shape[0]
    for i in range(1, n):
        for k in range(i):
            if P[i, k]:
                D[i, k] /= D[k, k]
                js = np.flatnonzero(P[i, k + 1:] & P[k, k + 1:]) + k + 1
                D[i, js] -= D[i, k] * D[k, js]
    return np.tril(D, -1) + np.eye(n), np.triu(D)


def nonsymmetric(n: int, seed: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    A = sp.random_array((n, n), density=0.05, rng=rng, format="csr",
                        data_sampler=lambda size: rng.uniform(-1, 1, size))
    return sp.csr_array(A + sp.diags_array(np.full(n, 5.0)))


CASES = {"lap2d": lap2d(9), "lap3d27": lap3d(4, 27), "nonsymmetric": nonsymmetric(80, 3)}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("mode", [dict(), dict(min_parallel_rows=1), dict(sync="p2p"),
                                  dict(parallel=False)], ids=["levels", "barrier", "p2p", "serial"])
def test_factors_match_reference(name, mode):
    A = CASES[name]
    M = ILU0(A, **mode)
    L, U = M.factors()
    Lr, Ur = ilu0_reference(A)
    np.testing.assert_allclose(L.toarray(), Lr, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(U.toarray(), Ur, rtol=1e-12, atol=1e-14)
    rows, cols = A.nonzero()   # ILU(0) reproduces A exactly on its pattern
    np.testing.assert_allclose((L @ U).toarray()[rows, cols], A.toarray()[rows, cols], rtol=1e-12)
    b = np.random.default_rng(0).standard_normal(A.shape[0])
    np.testing.assert_allclose(M.solve(b), np.linalg.solve(Lr @ Ur, b), rtol=1e-10, atol=1e-12)
    assert (M.levels < A.shape[0]) == mode.get("parallel", True)


def test_float32_factorization():
    A = sp.csr_array(lap2d(10), dtype=np.float32)
    M = ILU0(A)
    L, U = M.factors()
    assert M.dtype == "float32" and L.dtype == np.float32
    Lr, Ur = ilu0_reference(A)
    np.testing.assert_allclose(U.toarray(), Ur, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sync", ["barrier", "p2p"])
def test_ilu0_pcg_matches_spsolve(sync):
    A = make_spd(load_matrix("nasa4704"))
    n = A.shape[0]
    b = np.random.default_rng(1).standard_normal(n)
    res = pcg(A, b, rtol=1e-10, M="ilu0", sync=sync, return_result=True)
    assert res.converged and res.info == 0 and res.preconditioner == "ilu0"
    assert np.linalg.norm(b - A @ res.x) <= 1e-9 * np.linalg.norm(b)
    np.testing.assert_allclose(res.x, spla.spsolve(sp.csc_array(A), b), rtol=1e-6, atol=1e-9)
    sgs = pcg(A, b, rtol=1e-10, return_result=True)
    plain = pcg(A, b, rtol=1e-10, M="none", return_result=True)
    assert res.iterations < plain.iterations and sgs.iterations < plain.iterations


def test_ilu0_pcg_iterations_match_scipy_cg_with_our_factors():
    A = lap3d(8)
    n = A.shape[0]
    b = np.random.default_rng(2).standard_normal(n)
    L, U = ILU0(A).factors()
    M = spla.LinearOperator((n, n), matvec=lambda r: spla.spsolve_triangular(
        U, spla.spsolve_triangular(L, r, lower=True), lower=False))
    count = [0]
    spla.cg(A, b, rtol=1e-8, atol=0.0, M=M, callback=lambda _: count.__setitem__(0, count[0] + 1))
    res = PCG(A, preconditioner="ilu0").solve(b, rtol=1e-8)
    assert res.converged and abs(res.iterations - count[0]) <= 1
    assert set(res.inspector_breakdown) >= {"levels", "pivots", "factor"}


def test_zero_pivot_names_the_row():
    # eliminating row 0 from row 1 leaves U[1, 1] = 1 - 1 * 1 = 0
    A = sp.csr_array(np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 2.0]]))
    for mode in (dict(), dict(parallel=False), dict(sync="p2p")):
        with pytest.raises(InputError, match=r"zero pivot U\[1, 1\].*row 1\b"):
            ILU0(A, **mode)
    # the row is named in the caller's numbering although the level order moves it
    # (rows 25 and 26 land in levels 0 and 1, near the front of the level order)
    B = sp.csr_array(sp.block_diag([lap2d(5), np.ones((2, 2))], format="csr"))
    assert level_sets(B).iperm[26] != 26
    for mode in (dict(), dict(sync="p2p")):
        with pytest.raises(InputError, match=r"zero pivot U\[26, 26\].*row 26\b"):
            ILU0(B, **mode)


def test_missing_diagonal_is_refused():
    A = sp.csr_array(np.array([[2.0, 1.0], [1.0, 0.0]]))
    A.eliminate_zeros()
    with pytest.raises(InputError, match=r"row 1 has no diagonal"):
        ILU0(A)


def test_non_spd_matrix_gives_a_json_clean_report():
    A = lap2d(6).toarray()
    A[3, 4] = 0.7          # not symmetric
    res = pcg(sp.csr_array(A), np.ones(36), M="ilu0", return_result=True)
    assert not res.converged and res.info > 0 and "not symmetric" in res.reason
    text = json.dumps(res.summary(), allow_nan=False)   # raises on NaN/Infinity
    assert json.loads(text)["converged"] is False
    indefinite = sp.csr_array(np.array([[1.0, 2.0], [2.0, 1.0]]))
    for pc in ("ilu0", "sgs", "none"):
        r = pcg(indefinite, np.array([1.0, 0.0]), M=pc, return_result=True)
        assert not r.converged and r.info > 0
        json.dumps(r.summary(), allow_nan=False)
