"""The compiled passes that keep inspect() cheap give the same answers as the numpy/scipy ones."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.sparse.inspectors import _bcsr_scipy, _ell_rows, to_bcsr, to_ell
from schedules.sparse.native import inspect_helpers
from schedules.sparse.features import _compiled_block_counter, _structure_stats
from schedules.sparse.timed_choice import _interleaved_runs
from tvm_ext.workloads import block_fem, canonical_csr, matrix_stats
from tvm_ext.workloads.stats import SELECTOR_BLOCK_SIZES, _sampled_block_counts, estimate_block_fill

needs_cc = pytest.mark.skipif(inspect_helpers() is None, reason="no C compiler: the numpy paths run")


def _node_blocks(nodes: int, dof: int, seed: int, mixed: bool) -> sp.csr_array:
    """A FEM-like matrix whose ``dof`` rows per node share one pattern; ``mixed`` drops a few
    entries so that some block rows do not."""
    A = canonical_csr(block_fem(nodes, dof, dof, seed=seed))
    if mixed:
        A = A.tolil()
        rng = np.random.default_rng(seed)
        for i in rng.choice(A.shape[0], max(A.shape[0] // 7, 1), replace=False):
            if A.rows[i]:
                A[i, A.rows[i][-1]] = 0.0
        A = sp.csr_array(A)
        A.eliminate_zeros()
    return canonical_csr(A)


@needs_cc
@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 41), k=st.integers(1, 50), density=st.floats(0.0, 0.7), C=st.integers(1, 9),
       seed=st.integers(0, 10_000), f64=st.booleans())
def test_two_row_blocks_of_unrelated_rows_equal_scipys(m, k, density, C, seed, f64):
    # R = 2 block rows whose rows differ (the two-pointer merge), with empty rows, rows that end
    # early or late, and an odd row count (a last block row of one row)
    A = sp.random(m, k, density=density, format="csr", random_state=seed)
    A = canonical_csr(A, dtype="float64" if f64 else "float32")
    got, want = to_bcsr(A, 2, C), _bcsr_scipy(A, 2, C)
    for name in ("indptr", "bcol", "data"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


@needs_cc
@settings(max_examples=20, deadline=None)
@given(nodes=st.integers(2, 60), dof=st.integers(1, 4), seed=st.integers(0, 50), mixed=st.booleans(),
       R=st.integers(1, 8), C=st.integers(1, 8), f64=st.booleans())
def test_bcsr_of_rows_sharing_a_pattern_equals_scipys(nodes, dof, seed, mixed, R, C, f64):
    A = canonical_csr(_node_blocks(nodes, dof, seed, mixed), dtype="float64" if f64 else "float32")
    got, want = to_bcsr(A, R, C), _bcsr_scipy(A, R, C)
    for name in ("indptr", "bcol", "data"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


@needs_cc
@pytest.mark.parametrize("dof", [2, 3, 4])
@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("f64", [False, True])
def test_bcsr_of_dense_node_blocks_equals_scipys(dof, mixed, f64):
    # R x C = the node's dof x dof blocks: the fill copies dense blocks whole; one row short of a
    # whole block row at the end (a ragged last block row copies run by run)
    A = _node_blocks(40, dof, 5, mixed)
    A = canonical_csr(A[: A.shape[0] - 1], dtype="float64" if f64 else "float32")
    for R, C in ((dof, dof), (dof, 1), (1, dof)):
        got, want = to_bcsr(A, R, C), _bcsr_scipy(A, R, C)
        for name in ("indptr", "bcol", "data"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


@needs_cc
@settings(max_examples=20, deadline=None)
@given(nodes=st.integers(2, 80), dof=st.integers(1, 4), seed=st.integers(0, 50), mixed=st.booleans(),
       r=st.sampled_from(SELECTOR_BLOCK_SIZES), share=st.floats(0.05, 1.0))
def test_compiled_sampled_block_counts_equal_numpys(nodes, dof, seed, mixed, r, share):
    A = _node_blocks(nodes, dof, seed, mixed)
    m, k = A.shape
    n_br = -(-m // r)
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(n_br, max(int(share * n_br), 1), replace=False))
    indptr = A.indptr.astype(np.int64)
    want = _sampled_block_counts(indptr, A.indices, picked, r, m, k, SELECTOR_BLOCK_SIZES)
    got = _compiled_block_counter(A)(indptr, A.indices, picked, r, m, k, SELECTOR_BLOCK_SIZES)
    np.testing.assert_array_equal(got, want)


@needs_cc
@pytest.mark.parametrize("r", SELECTOR_BLOCK_SIZES)
def test_compiled_sampled_count_skips_repeated_rows_only(r):
    # runs of repeated rows (skipped by the compiled count), a pattern that comes back after
    # another (not a repeat of the row before it), empty rows, a row one column longer
    a, b, c = [0, 1, 5, 9], [2, 3, 9, 17], [0, 1, 5, 9, 10]
    pattern = [a, a, b, a, b, b, [], [], c, a, a, a, b, c, c, [], a]
    rows = [pattern[i % len(pattern)] for i in range(3 * len(pattern))]
    indptr = np.cumsum([0] + [len(p) for p in rows])
    A = canonical_csr(sp.csr_array((np.ones(indptr[-1]), np.concatenate(rows).astype(np.int32), indptr),
                                   shape=(len(rows), 20)))
    m, k = A.shape
    picked = np.arange(-(-m // r), dtype=np.int64)
    ip = A.indptr.astype(np.int64)
    want = _sampled_block_counts(ip, A.indices, picked, r, m, k, SELECTOR_BLOCK_SIZES)
    np.testing.assert_array_equal(_compiled_block_counter(A)(ip, A.indices, picked, r, m, k, SELECTOR_BLOCK_SIZES),
                                  want)


@needs_cc
def test_the_estimate_is_the_same_with_the_compiled_count():
    A = _node_blocks(3000, 3, 1, True)  # 9000 rows, > EXACT_FILL_NNZ non-zeros: sampled
    kw = dict(fraction=0.01, min_block_rows=64, exact_below=0, seed=3)
    plain = estimate_block_fill(A, **kw)
    fast = estimate_block_fill(A, count_blocks=_compiled_block_counter(A), **kw)
    assert not plain.exact and plain.fill == fast.fill and plain.bound == fast.bound


@needs_cc
@pytest.mark.parametrize("seed", [0, 5])
def test_the_feature_passes_on_threads_give_the_serial_features(seed):
    from schedules.sparse.features import FILL_MIN_BLOCK_ROWS, FILL_SAMPLE_FRACTION, sparse_features

    A = _node_blocks(3000, 3, 1, True)  # > EXACT_FILL_NNZ non-zeros: sampled, its passes on threads
    got = sparse_features(A, seed=seed)
    want = estimate_block_fill(A, SELECTOR_BLOCK_SIZES, fraction=FILL_SAMPLE_FRACTION,
                               min_block_rows=FILL_MIN_BLOCK_ROWS, seed=seed)
    assert not want.exact and list(got["block_fill"]) == list(want.fill)
    for shape in want.fill:
        np.testing.assert_equal((got["block_fill"][shape], got["block_fill_bound"][shape]),
                                (want.fill[shape], want.bound[shape]))
    stats = matrix_stats(A, block_sizes=(1,), symmetry=False)
    assert got["row_length"]["histogram"] == stats["row_length"]["histogram"]
    np.testing.assert_array_equal(got["_row_lengths"], np.diff(A.indptr))


@needs_cc
@pytest.mark.parametrize("R, C, f64", [(2, 2, False), (3, 1, True), (5, 3, False)])
def test_bcsr_on_tvms_thread_pool_equals_scipys(R, C, f64):
    import tvm  # noqa: F401  (TVM loaded: the passes may run on its pool)

    from schedules.sparse.host_threads import host_threads, inspector_threads
    from schedules.sparse.inspectors import _tvm_pool_launch

    rng = np.random.default_rng(3)
    rows = np.repeat(np.arange(20000), 12)  # ~240K non-zeros: several ranges
    A = canonical_csr(sp.csr_array((rng.uniform(-1, 1, rows.size), (rows, rng.integers(0, 30000, rows.size))),
                                   shape=(20000, 30000)), dtype=np.float64 if f64 else np.float32)
    if host_threads() < 2 or _tvm_pool_launch() is None:
        pytest.skip("one thread, or TVM's pool not reachable: the inspectors' own pool runs the passes")
    want = _bcsr_scipy(A, R, C)
    for got in (to_bcsr(A, R, C), _capped_bcsr(A, R, C, inspector_threads)):
        np.testing.assert_array_equal(got.indptr, want.indptr)
        np.testing.assert_array_equal(got.bcol, want.bcol)
        np.testing.assert_array_equal(got.data, want.data)


def _capped_bcsr(A, R, C, inspector_threads):
    """to_bcsr under a one-thread cap (the serial path, not TVM's pool)."""
    from schedules.sparse.inspectors import _tvm_pool_launch

    with inspector_threads(1):
        assert _tvm_pool_launch() is None
        return to_bcsr(A, R, C)


@needs_cc
def test_bandwidth_from_the_rows_extremes_when_the_diagonal_count_stops():
    A = canonical_csr(block_fem(400, 3, 3, seed=4))
    got = _structure_stats(A, limit=4)  # stops within the first rows
    want = matrix_stats(A, block_sizes=(1,), symmetry=False)
    assert not got["diagonals_exact"]
    for key in ("bandwidth", "lower_bandwidth", "upper_bandwidth"):
        assert got[key] == want[key]
    # empty rows first: the extremes come from the rows that have non-zeros only
    empty_top = canonical_csr(sp.vstack([sp.csr_array((5, 60)), sp.random(30, 60, density=0.1, random_state=2)]))
    got = _structure_stats(empty_top, limit=1000)
    want = matrix_stats(empty_top, block_sizes=(1,), symmetry=False)
    assert (got["lower_bandwidth"], got["upper_bandwidth"]) == (want["lower_bandwidth"], want["upper_bandwidth"])


@needs_cc
def test_diagonal_marks_are_written_only_in_each_ranges_window():
    # rows [0, 300) on diagonals +100..+102, rows [300, 600) on -50 and 0: two disjoint windows
    m, n = 600, 800
    rows = np.repeat(np.arange(m), 2)
    offs = np.where(rows < 300, 100 + rows % 3, np.tile([-50, 0], m)[: 2 * m])
    A = canonical_csr(sp.csr_array((np.ones(2 * m), (rows, rows + offs)), shape=(m, n)))
    lib = inspect_helpers()
    marks, found = [], []
    for a, b in ((0, 300), (300, 600)):
        mark = np.full(m + n - 1, 7, dtype=np.uint8)  # not zeroed: the pass zeroes its window itself
        summary = np.zeros(7, dtype=np.int64)
        found.append(lib.tvmext_mark_diagonals(m, A.indptr.ctypes.data, A.indices.ctypes.data, a, b,
                                                mark.ctypes.data, 0, summary.ctypes.data))
        lo, hi = int(summary[0]), int(summary[1])
        window = mark[lo + m - 1:hi + m]
        assert set(np.flatnonzero(window) + lo) == set(np.unique(A.indices[A.indptr[a]:A.indptr[b]]
                                                                  - np.repeat(np.arange(a, b), np.diff(A.indptr[a:b + 1]))))
        assert (mark[:lo + m - 1] == 7).all() and (mark[hi + m:] == 7).all()  # nothing outside the window
        marks.append(mark)
    assert found == [3, 2]
    from schedules.sparse.features import _Passes
    from schedules.sparse.host_threads import inspector_threads

    with inspector_threads(2):
        passes = _Passes.of(A, 1000)
        passes.ranges = [(0, 300), (300, 600)]  # the two windows, whatever the host's threads
        passes.marks = marks
        passes.summary = np.zeros((2, 7), dtype=np.int64)
        passes.found = np.zeros(2, dtype=np.int64)
        for call in passes.structure_calls():
            call()
    got, want = passes.structure(), matrix_stats(A, block_sizes=(1,), symmetry=False)
    assert (got["diagonals"], got["bandwidth"]) == (want["diagonals"], want["bandwidth"]) == (5, 102)


class _Clock:
    """A stand-in executor: writes the product of a fixed matrix, counts its calls (and logs
    its name in ``log`` when given one)."""

    def __init__(self, name="", log=None):
        self.shape, self.calls, self.name, self.log = (3, 3), 0, name, log

    def __call__(self, B, out):
        self.calls += 1
        if self.log is not None:
            self.log.append(self.name)
        np.matmul(np.eye(3, dtype=B.dtype), B, out=out)


def test_timed_rounds_stop_once_settled_but_not_before_the_minimum():
    exes = {"a": _Clock(), "b": _Clock()}
    B = np.ones((3, 2), np.float32)
    runs = _interleaved_runs(exes, B, 5, min_rounds=3, settled=lambda r: True)
    assert [len(t) for t in runs.values()] == [3, 3] and exes["a"].calls == 3 + 1  # and the untimed round
    runs = _interleaved_runs(exes, B, 5, min_rounds=3, settled=lambda r: False)
    assert [len(t) for t in runs.values()] == [5, 5]


def test_timed_rounds_settle_once_a_majority_of_all_rounds_is_on_one_side():
    from schedules.sparse.timed_choice import _settled_rule

    settled = _settled_rule("mine", {"other": 0.9}, rounds=7)
    mine = [1.0] * 6
    # ratios 0.8 (below the bar) and 0.95 (above it): the side of the median of 7 is known once
    # 4 of them fall on one side, whatever the rest give; never with 3-3
    assert not settled({"mine": mine[:4], "other": [0.8, 0.95, 0.8, 0.8]})
    assert settled({"mine": mine[:5], "other": [0.8, 0.95, 0.8, 0.8, 0.8]})
    assert settled({"mine": mine[:5], "other": [0.95, 0.8, 0.95, 0.95, 0.95]})
    assert not settled({"mine": mine, "other": [0.8, 0.95] * 3})
    assert settled({"mine": mine[:3], "other": [0.95] * 3})  # every round on one side
    unbounded = _settled_rule("mine", {"other": 0.9})  # without a round count: every round must agree
    assert not unbounded({"mine": mine[:5], "other": [0.8, 0.95, 0.8, 0.8, 0.8]})


def test_every_candidate_takes_its_turn_first_in_a_round():
    log: list[str] = []
    exes = {k: _Clock(k, log) for k in "abc"}
    _interleaved_runs(exes, np.ones((3, 2), np.float32), 4)
    rounds = [log[i:i + 3] for i in range(0, len(log), 3)]
    assert rounds == [list("abc"), list("abc"), list("bca"), list("cab"), list("abc")]  # untimed round first


@needs_cc
@settings(max_examples=20, deadline=None)
@given(m=st.integers(1, 300), density=st.floats(0.0, 0.2), extra=st.integers(0, 3), seed=st.integers(0, 50),
       f64=st.booleans())
def test_compiled_ell_equals_the_numpy_scatter(m, density, extra, seed, f64):
    """The compiled ELL fill (row copies, pads in the row's last column) gives the numpy scatter's
    arrays, empty rows and float32/float64 included, and the SpMV equals scipy's."""
    A = canonical_csr(sp.random_array((m, m + 3), density=density, random_state=seed, format="csr"),
                      dtype="float64" if f64 else "float32")
    width = int(np.diff(A.indptr).max(initial=0)) + extra + 1
    col, data = _ell_rows(A, width)
    want_col, want_data = _ell_rows(A, width, keep=np.ones(A.nnz, dtype=bool))  # the numpy path
    np.testing.assert_array_equal(col, want_col)
    np.testing.assert_array_equal(data, want_data)
    e = to_ell(A, width)
    x = np.random.default_rng(seed).standard_normal(m + 3)
    np.testing.assert_allclose((e.data * x[e.col]).sum(axis=1), A @ x, rtol=1e-5, atol=1e-6)


@needs_cc
def test_a_thread_cap_splits_fewer_ranges_and_builds_the_same_formats():
    from schedules.sparse.host_threads import host_threads, inspector_threads, row_ranges
    from tvm_ext.workloads import lap3d

    A = canonical_csr(lap3d(24, 27), dtype="float32")  # 370K nnz: past the threaded size
    assert len(row_ranges(A)) == min(host_threads(), A.shape[0])
    with inspector_threads(1):
        assert row_ranges(A) == [(0, A.shape[0])] and host_threads() == 1
        capped_bcsr, capped_ell = to_bcsr(A, 2, 1), to_ell(A)
    assert host_threads() >= 1  # the cap ends with the block
    want = _bcsr_scipy(A, 2, 1)
    for name in ("indptr", "bcol", "data"):
        np.testing.assert_array_equal(getattr(capped_bcsr, name), getattr(want, name))
    np.testing.assert_array_equal(capped_ell.col, to_ell(A).col)
    np.testing.assert_array_equal(capped_ell.data, to_ell(A).data)


def test_on_threads_runs_every_call_once_and_waits_for_no_worker_that_never_started(monkeypatch):
    from concurrent.futures import Future

    import schedules.sparse.host_threads as threads

    done: list[int] = []
    threads.on_threads([lambda i=i: done.append(i) for i in range(11)])  # more calls than threads
    assert sorted(done) == list(range(11))

    class NoWorkers:  # a pool whose workers never get a core: this thread claims every call
        def submit(self, fn):
            return Future()

    monkeypatch.setattr(threads, "_pool", lambda workers: NoWorkers())
    monkeypatch.setattr(threads, "host_threads", lambda: 2)
    done.clear()
    threads.on_threads([lambda i=i: done.append(i) for i in range(5)])
    assert done == [0, 1, 2, 3, 4]


@needs_cc
def test_formats_built_from_claimed_parts_equal_the_one_range_builds(monkeypatch):
    import schedules.sparse.host_threads as threads
    from schedules.sparse.host_threads import inspector_threads

    A = canonical_csr(block_fem(900, 3, 3, seed=2), dtype="float32")  # 2700 rows, ragged for R=4
    with inspector_threads(1):
        want_bcsr, want_ell = _bcsr_scipy(A, 4, 3), to_ell(A)
    monkeypatch.setattr(threads, "BCSR_THREADED_NNZ", 0)
    monkeypatch.setattr(threads, "host_threads", lambda: 3)
    assert len(threads.row_ranges(A, 4, parts_per_thread=4)) == 12
    got_bcsr, got_ell = to_bcsr(A, 4, 3), to_ell(A)
    for name in ("indptr", "bcol", "data"):
        np.testing.assert_array_equal(getattr(got_bcsr, name), getattr(want_bcsr, name))
    np.testing.assert_array_equal(got_ell.col, want_ell.col)
    np.testing.assert_array_equal(got_ell.data, want_ell.data)
