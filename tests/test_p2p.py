"""Point-to-point wavefront executor (Venkat 2016 Fig. 7.2)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.sparse.level_sets import level_sets
from schedules.sparse.p2p import PROBE_EVERY, P2PExecutor, p2p_schedule, pool_threads
from schedules.sparse.triangular import FORWARD, GaussSeidel, TriangularSolver, wrap
from tvm_ext.zero_copy import empty_aligned
from tvm_ext.errors import ConfigError
from tvm_ext.workloads import lap2d, lap3d


def random_matrix(n: int, density: float, seed: int, dtype="float64") -> sp.csr_array:
    rng = np.random.default_rng(seed)
    A = sp.random_array((n, n), density=density, rng=rng, format="csr",
                        data_sampler=lambda size: rng.uniform(-1, 1, size))
    return sp.csr_array(A + sp.diags_array(np.full(n, 4.0)), dtype=dtype)


@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-12), ("float32", 2e-4)])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_p2p_triangular_matches_scipy(lower, unit, dtype, rtol):
    for A in (random_matrix(300, 0.02, 1, dtype), sp.csr_array(lap3d(6, 27), dtype=dtype)):
        n = A.shape[0]
        T = sp.csr_array(sp.tril(A) if lower else sp.triu(A))
        b = np.random.default_rng(3).standard_normal(n).astype(dtype)
        s = TriangularSolver(T, lower=lower, sync="p2p", unit_diagonal=unit)
        ref = spla.spsolve_triangular(T.astype(np.float64), b.astype(np.float64), lower=lower,
                                      unit_diagonal=unit)
        x = s.solve(b)
        assert x.dtype == np.dtype(dtype) and isinstance(s.executor, P2PExecutor)
        np.testing.assert_allclose(x, ref, rtol=rtol, atol=rtol)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 120), density=st.floats(0.0, 0.15), seed=st.integers(0, 10_000),
       lower=st.booleans())
def test_p2p_triangular_random_patterns(n, density, seed, lower):
    A = random_matrix(n, density, seed)
    T = sp.csr_array(sp.tril(A) if lower else sp.triu(A))
    b = np.random.default_rng(seed).standard_normal(n)
    x = TriangularSolver(T, lower=lower, sync="p2p").solve(b)
    np.testing.assert_allclose(x, spla.spsolve_triangular(T, b, lower=lower), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("A", [lap2d(15), random_matrix(250, 0.02, 7)], ids=["lap2d", "random"])
def test_p2p_gauss_seidel_equals_natural_order_sweeps(A):
    b = np.random.default_rng(1).standard_normal(A.shape[0])
    x0 = np.random.default_rng(2).standard_normal(A.shape[0])
    p2p, serial = GaussSeidel(A, sync="p2p"), GaussSeidel(A, parallel=False)
    for method in ("forward", "backward", "symmetric"):
        np.testing.assert_allclose(getattr(p2p, method)(x0, b, sweeps=2),
                                   getattr(serial, method)(x0, b, sweeps=2), rtol=1e-12, atol=1e-12)


def test_schedule_partitions_levels_and_keeps_waits_sparse():
    s = level_sets(lap2d(20))
    ps = p2p_schedule(s, 2)
    assert ps.thread_ptr[0] == 0 and ps.thread_ptr[-1] == 400 and ps.levels == 39
    assert sorted(ps.perm.tolist()) == list(range(400))
    P = ps.threads
    for d in range(2):
        for t in range(P):
            segs = range(ps.seg_ptr[d * P + t], ps.seg_ptr[d * P + t + 1])
            lo, hi = ps.seg_lo[list(segs)], ps.seg_hi[list(segs)]
            # the segments tile the thread's run exactly
            assert lo[0] == 0 and hi[-1] == ps.thread_ptr[t + 1] - ps.thread_ptr[t]
            assert (lo[1:] == hi[:-1]).all() and (hi > lo).all()
            for sg in segs:  # every wait refers to a count another thread publishes
                for w in range(ps.wait_ptr[sg], ps.wait_ptr[sg + 1]):
                    u, c = ps.wait_thread[w], ps.wait_count[w]
                    assert u != t
                    published = ps.seg_hi[ps.seg_ptr[d * P + u]:ps.seg_ptr[d * P + u + 1]]
                    assert c in published
    # far fewer waits than rows, and far fewer segments than rows
    assert 0 < ps.waits[0] < 400 and ps.waits[1] > 0
    assert ps.segments[0] < 200
    one = p2p_schedule(s, 1)
    assert one.waits == (0, 0) and one.segments == (1, 1)


def test_too_few_pool_threads_raise_instead_of_hanging():
    # 8 partitions on a 2-thread pool: partitions of one task run one after the
    # other, so a wait may never be satisfied; the run must end (timeout) with an error
    A = sp.csr_array(sp.tril(lap2d(30)))
    ps = p2p_schedule(level_sets(A), 8)
    ex = P2PExecutor(ps, what="test", timeout_ms=300)
    b = empty_aligned(900, "float64")
    b[:] = 1.0
    x = empty_aligned(900, "float64")
    try:
        ex.run(wrap(b), wrap(x), FORWARD, 1)
    except ConfigError as err:
        assert "no progress" in str(err)
    else:  # the pool really ran all partitions at once: then the answer must be right
        ref = spla.spsolve_triangular(ps.matrix, b)
        np.testing.assert_allclose(x, ref, rtol=1e-12)



@pytest.mark.parametrize("sweep", ["forward", "backward", "symmetric"])
def test_p2p_gauss_seidel_matches_pyamg(sweep):
    relaxation = pytest.importorskip("pyamg.relaxation.relaxation")
    # an unsymmetric pattern (edges stored in one row only) and HPCG's 27-point stencil
    for A in (random_matrix(200, 0.03, 5), sp.csr_array(lap3d(7, 27))):
        rng = np.random.default_rng(2)
        x0, b = rng.standard_normal(A.shape[0]), rng.standard_normal(A.shape[0])
        ref = x0.copy()
        relaxation.gauss_seidel(A, ref, b, iterations=2, sweep=sweep)
        got = getattr(GaussSeidel(A, sync="p2p"), sweep)(x0, b, sweeps=2)
        np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-11)


def _spin_budget(ns: int) -> int:
    import ctypes

    from schedules.sparse.native import load_native

    fn = load_native("tvmext_p2p.c").tvmext_p2p_set_spin_ns
    fn.argtypes, fn.restype = [ctypes.c_int64], ctypes.c_int64
    return int(fn(ns))


@pytest.mark.parametrize("spin_ns", [0, 10**12], ids=["block-at-once", "spin-only"])
def test_p2p_blocking_and_spinning_waits_give_the_same_sweeps(spin_ns):
    # spin budget 0: every unsatisfied wait sleeps on the futex and must be woken by notify
    A = lap3d(9, 27)
    b = np.random.default_rng(4).standard_normal(A.shape[0])
    ref = GaussSeidel(A, parallel=False).symmetric(None, b, sweeps=3)
    old = _spin_budget(spin_ns)
    try:
        assert _spin_budget(-1) == spin_ns
        got = GaussSeidel(A, sync="p2p").symmetric(None, b, sweeps=3)
    finally:
        _spin_budget(old)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


def test_partitions_follow_the_pool_not_the_env_var(monkeypatch):
    # TVM caps a launch's workers at the usable cores, so TVM_NUM_THREADS above the core
    # count runs no more threads; partitions beyond them deadlocked into the wait timeout
    import tvm

    from tvm_ext.target import default_target, num_threads

    default_target()                 # this process's target (and kernels) stay as they are
    running = tvm.runtime.num_threads()
    monkeypatch.setenv("TVM_NUM_THREADS", str(4 * running))
    assert num_threads() == 4 * running
    L = sp.csr_array(sp.tril(lap2d(40)))
    s = TriangularSolver(L, sync="p2p")
    assert s.executor.schedule.threads == pool_threads() == running
    b = np.arange(1600.0)
    np.testing.assert_allclose(s.solve(b), spla.spsolve_triangular(L, b), rtol=1e-12)


@pytest.mark.parametrize("policy", ["replay", "auto"])
def test_replayed_schedule_equals_the_parallel_sweep(policy):
    # the calling thread replays the partitions round robin: same rows, same order inside
    # each row, so the result is bit for bit the parallel one
    for A in (lap3d(8, 27), random_matrix(300, 0.02, 9)):
        n = A.shape[0]
        # replay runs any partition count on one thread; auto also runs the parallel kernel
        ps = p2p_schedule(level_sets(A), 3 if policy == "replay" else pool_threads())
        par = P2PExecutor(ps, what="test", policy="parallel")
        other = P2PExecutor(ps, what="test", policy=policy)
        rng = np.random.default_rng(5)
        b = empty_aligned(n, "float64")
        b[:] = rng.standard_normal(n)
        x0 = rng.standard_normal(n)
        for mode in (0, 1, 2):
            x1, x2 = empty_aligned(n, "float64"), empty_aligned(n, "float64")
            x1[:], x2[:] = x0, x0
            for _ in range(PROBE_EVERY + 2 if policy == "auto" else 1):  # auto tries both ways
                x2[:] = x0
                other.run(wrap(b), wrap(x2), mode, 2)
            if ps.threads <= pool_threads():
                par.run(wrap(b), wrap(x1), mode, 2)
                np.testing.assert_array_equal(x1, x2)
            back = np.argsort(ps.perm)          # executor order -> original order
            method = ("forward", "backward", "symmetric")[mode]
            want = getattr(GaussSeidel(A, parallel=False), method)(x0[back], b[back], sweeps=2)
            np.testing.assert_allclose(x2[back], want, rtol=1e-12, atol=1e-12)
        if policy == "replay":
            assert other.replayed == other.calls == 3
        else:
            assert 0 < other.replayed < other.calls


def test_unknown_policy_is_refused():
    ps = p2p_schedule(level_sets(lap2d(4)), 2)
    with pytest.raises(ConfigError, match="policy"):
        P2PExecutor(ps, what="test", policy="fast")


def test_super_rows_are_chosen_where_dependences_skip_levels():
    from schedules.sparse.super_rows import skips_levels

    wide27 = level_sets(sp.csr_array(sp.tril(lap3d(30, 27))))
    assert skips_levels(wide27) and not skips_levels(level_sets(lap3d(30)))
    ps = p2p_schedule(wide27, 2)
    # grid lines of 30 rows become tasks: far fewer (coarse) levels and waits than row levels
    rows = p2p_schedule(wide27, 2, run_order="level")
    assert ps.super_rows and not rows.super_rows
    assert ps.levels < rows.levels and ps.waits[0] < rows.waits[0]
    # too few super-rows per coarse level to keep 2 threads busy: "auto" keeps the row levels
    assert not p2p_schedule(level_sets(lap3d(6, 27)), 2).super_rows
    assert not p2p_schedule(level_sets(lap2d(30)), 2).super_rows
    with pytest.raises(ConfigError, match="run_order"):
        p2p_schedule(wide27, 2, run_order="natural")


def _check_super_row_runs(ps, sched, at_once=2):
    """Each super-row runs on one thread, its rows in sweep order, at most ``at_once`` at a time."""
    from schedules.sparse.super_rows import super_row_levels

    _, grp = super_row_levels(sched)
    grp_of_orig = np.empty_like(grp)
    grp_of_orig[sched.perm] = grp
    g = grp_of_orig[ps.perm].astype(np.int64)
    owner = np.repeat(np.arange(ps.threads), np.diff(ps.thread_ptr))
    o = np.argsort(g, kind="stable")                     # each super-row's rows, in run order
    same = g[o][1:] == g[o][:-1]
    assert (owner[o][1:][same] == owner[o][:-1][same]).all()
    step = np.diff(ps.perm[o].astype(np.int64))[same]
    assert (step == (1 if sched.lower else -1)).all()    # consecutive rows, sweep order
    first, last = np.full(g.max() + 1, g.size), np.full(g.max() + 1, -1)
    np.minimum.at(first, g, np.arange(g.size))
    np.maximum.at(last, g, np.arange(g.size))
    live = np.zeros(g.size + 1, np.int64)                # super-rows begun and not yet done
    np.add.at(live, first[first < g.size], 1)
    np.add.at(live, last[last >= 0] + 1, -1)
    assert np.cumsum(live).max() <= at_once


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 150), density=st.floats(0.0, 0.12), seed=st.integers(0, 10_000),
       lower=st.booleans(), threads=st.integers(1, 3), interleave=st.booleans())
def test_super_row_schedule_solves_triangular_systems(n, density, seed, lower, threads, interleave):
    A = random_matrix(n, density, seed)
    T = sp.csr_array(sp.tril(A) if lower else sp.triu(A))
    s = level_sets(T, lower=lower)
    ps = p2p_schedule(s, threads, run_order="super_rows", interleave=interleave)
    _check_super_row_runs(ps, s, 2 if interleave else 1)
    b = np.random.default_rng(seed).standard_normal(n)
    ex = P2PExecutor(ps, what="test", policy="replay" if threads > pool_threads() else "auto")
    x = ex.run_numpy(b, np.zeros(n), FORWARD, 1)
    np.testing.assert_allclose(x, spla.spsolve_triangular(T, b, lower=lower), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("A", [lap3d(8, 27), random_matrix(250, 0.03, 11)], ids=["27pt", "unsym"])
def test_super_row_gauss_seidel_equals_natural_order_sweeps(A):
    # the unsymmetric pattern stores some dependences in the earlier row only (pushed levels)
    s = level_sets(A)
    ps = p2p_schedule(s, pool_threads(), run_order="super_rows")
    _check_super_row_runs(ps, s)
    serial = GaussSeidel(A, parallel=False)
    par = P2PExecutor(ps, what="test", policy="parallel")
    rep = P2PExecutor(ps, what="test", policy="replay")
    rng = np.random.default_rng(6)
    b, x0 = rng.standard_normal(A.shape[0]), rng.standard_normal(A.shape[0])
    for mode, method in enumerate(("forward", "backward", "symmetric")):
        want = getattr(serial, method)(x0, b, sweeps=2)
        got = par.run_numpy(b, x0, mode, 2)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(rep.run_numpy(b, x0, mode, 2), got)


def test_triangular_solver_runs_super_rows_one_at_a_time():
    L = sp.csr_array(sp.tril(lap3d(24, 27)))
    solver = TriangularSolver(L, sync="p2p")
    ps = solver.executor.schedule
    assert ps.super_rows          # 576 grid lines over about 70 coarse levels
    _check_super_row_runs(ps, level_sets(L), at_once=1)
    b = np.random.default_rng(3).standard_normal(L.shape[0])
    np.testing.assert_allclose(solver.solve(b), spla.spsolve_triangular(L, b, lower=True),
                               rtol=1e-10, atol=1e-10)
