"""Scatter executors (CSB) with and without segmented row sums, and the matrix-driven choice
between them (``recipes.run_ends``): both kernels match scipy, the choice follows the run
pattern, and a choice the caller makes is kept."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedules.sparse import inspectors as I
from schedules.sparse.executors import CSBParams, build_executor
from schedules.sparse.executors.spec import ExecParams
from schedules.sparse.recipes import build_recipe_executor
from schedules.sparse.recipes.library import csb_recipe
from schedules.sparse.recipes.run_ends import run_end_stats, run_ends
from tvm_ext.workloads import lap2d

SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _random(m, density, seed, dtype="float32"):
    return sp.csr_array(sp.random(m, m, density=density, format="csr", dtype=dtype, random_state=seed))


def _has_run_sums(prim_func) -> bool:
    return "acc" in prim_func.script()


@SETTINGS
@given(m=st.integers(1, 60), beta=st.sampled_from([1, 4, 16, 64]), density=st.sampled_from([0.02, 0.2, 0.6]),
       n=st.sampled_from([2, 8, 19]), runs=st.booleans(), dtype=st.sampled_from(["float32", "float64"]),
       sym=st.booleans(), parallel=st.sampled_from([True, False]), seed=st.integers(0, 1000))
def test_run_sums_and_direct_updates_match_scipy(m, beta, density, n, runs, dtype, sym, parallel, seed):
    A = _random(m, density, seed, dtype)
    if sym:
        A = sp.csr_array(A + A.T, dtype=dtype)
    fmt = I.to_csb(A, beta, symmetric_half=sym)
    exe = build_executor(fmt, n_cols=n, params=CSBParams(parallel=parallel, row_runs=runs))
    assert exe.params.row_runs is runs
    assert _has_run_sums(exe.prim_func) is (runs and parallel)  # the serial kernel adds directly
    B = np.random.default_rng(seed).uniform(-1, 1, (m, n)).astype(dtype)
    C = np.random.default_rng(seed + 1).uniform(-1, 1, (m, n)).astype(dtype)
    tol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(exe(B, C, alpha=0.5, beta=2.0), 0.5 * (A @ B) + 2.0 * C, rtol=tol, atol=tol)


def test_random_short_runs_get_direct_updates_and_stencil_runs_keep_register_sums():
    rand = _random(3000, 3 / 3000, 0)
    exe = build_executor(I.to_csb(rand, 1024), n_cols=8, params=CSBParams(parallel=True))
    assert exe.params.row_runs is False and not _has_run_sums(exe.prim_func)
    B = np.random.default_rng(0).uniform(-1, 1, (3000, 8)).astype(np.float32)
    np.testing.assert_allclose(exe(B), rand @ B, rtol=1e-4, atol=1e-4)
    lap = sp.csr_array(lap2d(60), dtype=np.float32)
    exe = build_recipe_executor(csb_recipe(1024), lap, 8, params=ExecParams(parallel=True))
    assert exe.params.row_runs is None and _has_run_sums(exe.prim_func)
    # a tile wider than one vector keeps the runs whatever the pattern (they save a row
    # update of every vector per branch)
    wide = build_executor(I.to_csb(rand, 1024), n_cols=64, params=CSBParams(lanes=8, parallel=True))
    assert wide.params.row_runs is None and _has_run_sums(wide.prim_func)


def test_a_row_runs_choice_the_caller_makes_is_kept():
    rand = _random(2000, 3 / 2000, 1)
    exe = build_recipe_executor(csb_recipe(512), rand, 8, params=ExecParams(row_runs=True, parallel=True))
    assert exe.params.row_runs is True and _has_run_sums(exe.prim_func)


@pytest.mark.parametrize("lo, hi", [(0, 9), (2, 7), (8, 9)])
def test_run_ends_marks_row_changes_and_block_ends(lo, hi):
    offset = np.array([0, 4, 4, 9])
    row = np.array([0, 0, 1, 1, 1, 2, 2, 3, 3])
    want = np.array([False, True, False, True, True, False, True, False, True])
    assert run_ends(offset, row, lo, hi).tolist() == want[lo:hi].tolist()


def test_run_end_stats_sees_periodic_patterns_as_predictable():
    periodic = np.tile([True, False, False, True], 500)
    flush, mispredict = run_end_stats(periodic)
    assert flush == pytest.approx(0.5) and mispredict == 0.0
    flush, mispredict = run_end_stats(np.random.default_rng(2).random(40000) < 0.3)
    assert flush == pytest.approx(0.3, abs=0.02) and mispredict == pytest.approx(0.3, abs=0.02)
