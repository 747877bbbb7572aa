"""Level-scheduled triangular solve and Gauss-Seidel TIR executors (Venkat 2016 ch. 7)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.sparse.level_sets import level_sets
from schedules.sparse.triangular import (
    GaussSeidel, TriangularSolver, level_segments, sweep_func, sweep_kernel,
)
from tvm_ext.errors import InputError, ShapeError
from tvm_ext.kernel_cache import cache_info
from tvm_ext.workloads import lap2d, lap3d

# (parallel, min_parallel_rows): real per-level launches, default coarsening, serial executor
EXECUTORS = [(True, 1), (True, None), (False, None)]


def random_matrix(n: int, density: float, seed: int, dtype="float64") -> sp.csr_array:
    """Non-symmetric pattern with a dominant diagonal."""
    rng = np.random.default_rng(seed)
    A = sp.random_array((n, n), density=density, rng=rng, format="csr",
                        data_sampler=lambda size: rng.uniform(-1, 1, size))
    return sp.csr_array(A + sp.diags_array(np.full(n, 4.0)), dtype=dtype)


def sequential_gs(A, x, b, order, sweeps=1):
    """Textbook Gauss-Seidel in the given row order (pure numpy reference)."""
    A = sp.csr_array(A)
    x = np.array(x, dtype=float)
    d = A.diagonal()
    for _ in range(sweeps):
        for i in order:
            lo, hi = A.indptr[i], A.indptr[i + 1]
            cols, vals = A.indices[lo:hi], A.data[lo:hi]
            off = cols != i
            x[i] = (b[i] - vals[off] @ x[cols[off]]) / d[i]
    return x


# ----------------------------------------------------------------- triangular solve
@pytest.mark.parametrize("parallel,mpr", EXECUTORS)
@pytest.mark.parametrize("lower", [True, False])
def test_triangular_matches_scipy(lower, parallel, mpr):
    A = random_matrix(200, 0.03, 1)
    T = sp.csr_array(sp.tril(A) if lower else sp.triu(A))
    b = np.random.default_rng(2).standard_normal(200)
    s = TriangularSolver(T, lower=lower, parallel=parallel, min_parallel_rows=mpr)
    ref = spla.spsolve_triangular(T, b, lower=lower)
    np.testing.assert_allclose(s.solve(b), ref, rtol=1e-12, atol=1e-12)
    assert (s.levels < 200) == parallel


@pytest.mark.parametrize("parallel,mpr", EXECUTORS)
def test_triangular_lap3d_lower_and_upper(parallel, mpr):
    A = lap3d(6)
    b = np.arange(216.0)
    for lower in (True, False):
        T = sp.csr_array(sp.tril(A) if lower else sp.triu(A))
        x = TriangularSolver(T, lower=lower, parallel=parallel, min_parallel_rows=mpr).solve(b)
        np.testing.assert_allclose(x, spla.spsolve_triangular(T, b, lower=lower), rtol=1e-12)


def test_triangular_levels_of_lap2d():
    n = 10
    L = sp.csr_array(sp.tril(lap2d(n)))
    assert TriangularSolver(L).levels == 2 * n - 1
    U = sp.csr_array(sp.triu(lap2d(n)))
    assert TriangularSolver(U, lower=False).levels == 2 * n - 1


@pytest.mark.parametrize("parallel", [True, False])
def test_triangular_float32(parallel):
    T = sp.csr_array(sp.tril(random_matrix(150, 0.05, 5)), dtype=np.float32)
    b = np.random.default_rng(0).standard_normal(150).astype(np.float32)
    s = TriangularSolver(T, parallel=parallel)
    x = s.solve(b)
    assert x.dtype == np.float32 and s.dtype == "float32"
    ref = spla.spsolve_triangular(T.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(x, ref, rtol=1e-4, atol=1e-5)


def test_take_triangle_uses_only_that_triangle():
    A = random_matrix(60, 0.1, 4)
    b = np.ones(60)
    with pytest.raises(InputError, match="above the diagonal"):
        TriangularSolver(A)
    with pytest.raises(InputError, match="below the diagonal"):
        TriangularSolver(A, lower=False)
    x = TriangularSolver(A, take_triangle=True).solve(b)
    np.testing.assert_allclose(x, spla.spsolve_triangular(sp.csr_array(sp.tril(A)), b), rtol=1e-12)


@pytest.mark.parametrize("parallel", [True, False])
def test_zero_or_missing_diagonal_names_the_row(parallel):
    L = sp.tril(lap2d(5)).toarray()
    L[7, 7] = 0.0                       # stored zero
    with pytest.raises(InputError, match=r"row 7\b"):
        TriangularSolver(sp.csr_array(L), parallel=parallel)
    M = sp.csr_array(sp.tril(lap2d(5)))
    M = sp.csr_array(M.toarray() * (1 - np.eye(25)) + np.diag(np.r_[np.ones(11), 0, np.ones(13)]))
    M.eliminate_zeros()                 # structurally missing diagonal at row 11
    with pytest.raises(InputError, match=r"row 11\b"):
        TriangularSolver(M, parallel=parallel)


def test_triangular_bad_inputs():
    L = sp.csr_array(sp.tril(lap2d(4)))
    s = TriangularSolver(L)
    with pytest.raises(ShapeError, match="length 15"):
        s.solve(np.ones(15))
    with pytest.raises(ShapeError):
        s.solve(np.ones((15, 2)))
    with pytest.raises(InputError, match="float32"):
        s.solve(np.ones(16, dtype=np.float32))
    with pytest.raises(InputError, match="non-finite"):
        s.solve(np.r_[np.ones(15), np.nan])
    with pytest.raises(InputError, match="real numbers"):
        s.solve(np.ones(16, dtype=complex))
    np.testing.assert_allclose(s.solve(np.ones(16, dtype=np.int64)), s.solve(np.ones(16)))
    np.testing.assert_allclose(s.solve(np.ones((16, 1)))[:, 0], s.solve(np.ones(16)))
    with pytest.raises(ShapeError, match="square"):
        TriangularSolver(sp.csr_array(np.tril(np.ones((3, 4)))))
    with pytest.raises(InputError, match="non-finite"):
        TriangularSolver(sp.csr_array(np.array([[1.0, 0.0], [np.nan, 1.0]])))
    with pytest.raises(InputError, match="float16"):
        TriangularSolver(L, dtype="float16")


def test_empty_and_unsorted_duplicate_input():
    s = TriangularSolver(sp.csr_array((0, 0)))
    assert s.solve(np.zeros(0)).shape == (0,)
    assert GaussSeidel(sp.csr_array((0, 0))).symmetric(None, np.zeros(0)).shape == (0,)
    rows, cols = np.array([1, 0, 1, 1, 2, 2]), np.array([0, 0, 1, 0, 2, 1])
    vals = np.array([1.0, 2.0, 3.0, 1.5, 4.0, -1.0])           # (1,0) twice
    A = sp.coo_array((vals, (rows, cols)), shape=(3, 3))
    b = np.array([2.0, 1.0, 3.0])
    ref = np.linalg.solve(A.toarray(), b)
    for parallel in (True, False):
        np.testing.assert_allclose(TriangularSolver(A, parallel=parallel).solve(b), ref)


# ----------------------------------------------------------------- Gauss-Seidel
@pytest.mark.parametrize("parallel,mpr", EXECUTORS)
def test_gauss_seidel_equals_natural_order_sequential_gs(parallel, mpr):
    A = random_matrix(120, 0.04, 7)     # non-symmetric pattern
    rng = np.random.default_rng(3)
    x0, b = rng.standard_normal(120), rng.standard_normal(120)
    g = GaussSeidel(A, parallel=parallel, min_parallel_rows=mpr)
    nat = np.arange(120)
    np.testing.assert_allclose(g.forward(x0, b, sweeps=2), sequential_gs(A, x0, b, nat, 2),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g.backward(x0, b), sequential_gs(A, x0, b, nat[::-1]),
                               rtol=1e-12, atol=1e-12)
    sym = sequential_gs(A, sequential_gs(A, x0, b, nat), b, nat[::-1])
    np.testing.assert_allclose(g.symmetric(x0, b), sym, rtol=1e-12, atol=1e-12)


def test_gauss_seidel_equals_sequential_gs_in_level_order():
    """GS with a level schedule is plain GS on P A P^T (a valid GS ordering)."""
    A = random_matrix(100, 0.05, 11)
    rng = np.random.default_rng(5)
    x0, b = rng.standard_normal(100), rng.standard_normal(100)
    g = GaussSeidel(A, min_parallel_rows=1)
    s = g.schedule
    Ap = A.toarray()[s.perm][:, s.perm]
    ref_p = sequential_gs(sp.csr_array(Ap), x0[s.perm], b[s.perm], np.arange(100), 3)
    np.testing.assert_allclose(g.forward(x0, b, sweeps=3)[s.perm], ref_p, rtol=1e-12, atol=1e-12)
    # ... and rows inside one level never couple, so any order within a level is the same
    shuffled = np.concatenate([np.random.default_rng(lv).permutation(
        np.arange(s.level_ptr[lv], s.level_ptr[lv + 1])) for lv in range(s.levels)])
    ref_shuffled = sequential_gs(sp.csr_array(Ap), x0[s.perm], b[s.perm], shuffled, 3)
    np.testing.assert_allclose(ref_shuffled, ref_p, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sweep", ["forward", "backward", "symmetric"])
def test_gauss_seidel_matches_pyamg(sweep):
    relaxation = pytest.importorskip("pyamg.relaxation.relaxation")
    A = random_matrix(90, 0.06, 13)
    rng = np.random.default_rng(1)
    x0, b = rng.standard_normal(90), rng.standard_normal(90)
    ref = x0.copy()
    relaxation.gauss_seidel(A, ref, b, iterations=3, sweep=sweep)
    got = getattr(GaussSeidel(A, min_parallel_rows=1), sweep)(x0, b, sweeps=3)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), density=st.floats(0.0, 0.25), seed=st.integers(0, 10_000))
def test_parallel_gs_equals_serial_gs_property(n, density, seed):
    A = random_matrix(n, density, seed)
    rng = np.random.default_rng(seed)
    x0, b = rng.standard_normal(n), rng.standard_normal(n)
    par = GaussSeidel(A, min_parallel_rows=1).symmetric(x0, b, sweeps=2)
    ser = GaussSeidel(A, parallel=False).symmetric(x0, b, sweeps=2)
    np.testing.assert_allclose(par, ser, rtol=1e-11, atol=1e-11)


def test_gauss_seidel_converges_on_lap2d_and_keeps_inputs():
    A = lap2d(8)
    b = np.ones(64)
    x0 = np.zeros(64)
    g = GaussSeidel(A)
    x = g.symmetric(x0, b, sweeps=60)
    assert np.linalg.norm(A @ x - b) < 1e-6 * np.linalg.norm(b)
    assert not x0.any() and (b == 1).all()          # arguments untouched
    assert g.levels == 15
    np.testing.assert_array_equal(g.forward(x0, b, sweeps=0), x0)


def test_gauss_seidel_bad_inputs():
    g = GaussSeidel(lap2d(3))
    with pytest.raises(InputError, match="sweeps"):
        g.forward(None, np.ones(9), sweeps=-1)
    with pytest.raises(InputError, match="sweeps"):
        g.forward(None, np.ones(9), sweeps=1.5)
    with pytest.raises(ShapeError):
        g.forward(np.zeros(8), np.ones(9))
    with pytest.raises(InputError, match="float32"):
        g.forward(np.zeros(9, np.float32), np.ones(9))
    A = lap2d(3).toarray()
    A[4, 4] = 0
    with pytest.raises(InputError, match=r"row 4\b"):
        GaussSeidel(sp.csr_array(A))
    with pytest.raises(ShapeError):
        GaussSeidel(sp.csr_array(np.ones((2, 3))))


# ----------------------------------------------------------------- kernel and segments
def test_level_segments_merge_thin_levels():
    ptr = np.array([0, 1, 3, 103, 203, 204, 205, 305])
    seg_ptr, seg_par = level_segments(ptr, 50)
    assert seg_ptr.tolist() == [0, 3, 103, 203, 205, 305]
    assert seg_par.tolist() == [0, 1, 1, 0, 1, 0]
    seg_ptr, seg_par = level_segments(ptr, 1)         # pure barrier executor
    assert seg_ptr.tolist() == ptr.tolist() and seg_par[:-1].all()
    seg_ptr, seg_par = level_segments(ptr, 10**9)     # everything serial, in level order
    assert seg_ptr.tolist() == [0, 305] and not seg_par.any()
    assert level_segments(np.array([0]), 4)[0].tolist() == [0]


def test_kernel_is_symbolic_and_compiled_once_per_dtype():
    assert "T.parallel" in sweep_func("float64", True).script()
    assert "T.parallel" not in sweep_func("float64", False).script()
    sweep_kernel("float64", True)
    TriangularSolver(sp.csr_array(sp.tril(lap2d(3)))).solve(np.ones(9))   # loads every kernel
    builds = cache_info()["builds"] + cache_info()["disk_hits"]
    for n in (5, 9, 13):                              # different sizes, same kernel
        TriangularSolver(sp.csr_array(sp.tril(lap2d(n)))).solve(np.ones(n * n))
        level_sets(lap2d(n))
    assert cache_info()["builds"] + cache_info()["disk_hits"] == builds


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_split_diagonal_kernel_matches_numpy(dtype):
    from schedules.sparse.row_sweep import _split_diagonal

    A = sp.csr_array(random_matrix(150, 0.05, 4), dtype=dtype)   # every row has its diagonal
    O, diag, present = _split_diagonal(A)
    assert present.all() and O.dtype == A.dtype and diag.dtype == A.dtype
    np.testing.assert_array_equal(diag, A.diagonal())
    np.testing.assert_array_equal((O + sp.diags_array(diag)).toarray(), A.toarray())
    assert not O.diagonal().any() and O.nnz == A.nnz - 150
