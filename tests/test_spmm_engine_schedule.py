"""Sextans §3.1.2-3.4: partitioning, out-of-order scheduling (Fig. 5) and Q pointers."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tvm_ext.errors import ConfigError
from tvm_ext.spmm_engine import EngineConfig, schedule
from tvm_ext.spmm_engine.scheduler import list_schedule

# Fig. 5(i): rows 0..3, ten non-zeros (row, col); reconstructed from §3.3's
# walk-through: blue row 0, green row 3, yellow row 2, row 1 has one non-zero.
FIG5 = [(0, 0), (2, 0), (3, 0), (1, 1), (2, 1), (0, 2), (2, 2), (3, 2), (0, 3), (3, 3)]


def fig5_matrix(extra=()) -> sp.csr_array:
    coords = list(FIG5) + list(extra)
    r, c = zip(*coords)
    vals = np.arange(1, len(coords) + 1, dtype=float)
    return sp.csr_array((vals, (r, c)), shape=(4, 4 + 4 * bool(extra)))


def cycle_of(stream, row, col) -> int:
    """Stream row (cycle) where non-zero (row, col) was scheduled."""
    csr = sp.csr_array(fig5_matrix())
    k = int(np.flatnonzero((np.repeat(np.arange(4), np.diff(csr.indptr)) == row)
                           & (csr.indices == col))[0])
    return int(stream.position[k])


def test_fig5_out_of_order_takes_11_cycles():
    s = schedule(fig5_matrix(), D=4, P=1, K0=4)
    assert s.stream_length == 11
    assert s.passes[0].q.tolist() == [0, 11]
    # the walk-through of §3.3: (2,1) -> 5, (0,2) fills bubble 4, (2,2) -> 9,
    # (3,2) -> 6, (0,3) -> 8, (3,3) -> 10, and cycle 7 stays a bubble
    assert [cycle_of(s, r, c) for r, c in [(2, 1), (0, 2), (2, 2), (3, 2), (0, 3), (3, 3)]] \
        == [5, 4, 9, 6, 8, 10]
    table = s.table()[:, 0]
    assert np.flatnonzero(table < 0).tolist() == [7]
    assert s.stats()["bubbles"] == 1


def test_fig5_in_order_baselines_take_15_and_28_cycles():
    col_major = schedule(fig5_matrix(), D=4, P=1, K0=4, policy="in-order")
    row_major = schedule(fig5_matrix(), D=4, P=1, K0=4, policy="in-order", nz_order="row")
    assert col_major.stream_length == 15
    assert row_major.stream_length == 28


def test_fig5_q_pointers_for_two_submatrices():
    # Fig. 5(k, l): the Fig. 5(i) list fills 0..10 and the next submatrix's
    # list 11..16, so Q = [0, 11, 17].  The second submatrix is not spelled
    # out in the text; this one (columns 4, 5) schedules in 6 cycles with D=4.
    second = [(0, 4), (1, 4), (2, 4), (3, 4), (0, 5), (1, 5)]
    s = schedule(fig5_matrix(second), D=4, P=1, K0=4)
    assert s.passes[0].q.tolist() == [0, 11, 17]
    assert s.passes[0].window_lengths.tolist() == [11, 6]


def test_raw_distance_and_slot_uniqueness_on_a_laplacian():
    from tvm_ext.workloads import lap2d

    A = lap2d(20)
    s = schedule(A, D=5, P=8, K0=64)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    # each (pass, stream row, PE) holds at most one non-zero
    keys = (s.position * 8 + s.pe).astype(np.int64)
    assert np.unique(keys).size == A.nnz
    # same C row in the same window: at least D cycles apart
    order = np.lexsort((s.slot, s.window, rows))
    r, w, c = rows[order], s.window[order], s.slot[order]
    same = (r[1:] == r[:-1]) & (w[1:] == w[:-1])
    assert same.any() and np.all(np.diff(c)[same] >= 5)


def sextans_reference(A, P, K0, D):
    """Pure-Python port of the released host's generate_edge_list_for_all_PEs."""
    csc = sp.csc_array(A)
    M, K = A.shape
    lists = [[] for _ in range(P)]
    q = [0]
    for w in range(-(-K // K0)):
        tmp = [[] for _ in range(P)]
        for col in range(w * K0, min((w + 1) * K0, K)):
            for j in range(csc.indptr[col], csc.indptr[col + 1]):
                r = int(csc.indices[j])
                tmp[r % P].append((col - w * K0, r // P))
        for p in range(P):
            sched, last = [], {}
            for ccol, crow in tmp[p]:
                cycle = last.get(crow, -D) + D
                while cycle < len(sched) and sched[cycle] is not None:
                    cycle += 1
                sched.extend([None] * (cycle + 1 - len(sched)))
                sched[cycle] = (ccol, crow)
                last[crow] = cycle
            lists[p].extend(sched)
        longest = max(len(lst) for lst in lists)
        for lst in lists:
            lst.extend([None] * (longest - len(lst)))
        q.append(longest)
    return lists, q


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 40), k=st.integers(1, 40), density=st.floats(0.0, 0.6),
       P=st.sampled_from([1, 2, 3, 4, 8]), K0=st.sampled_from([1, 3, 4, 8, 16]),
       D=st.integers(1, 10), seed=st.integers(0, 2**16))
def test_vectorised_scheduler_matches_the_released_host(m, k, density, P, K0, D, seed):
    A = sp.random_array((m, k), density=density, rng=seed, format="csr")
    s = schedule(A, D=D, P=P, K0=K0)
    lists, q = sextans_reference(A, P, K0, D)
    assert s.passes[0].q.tolist() == q
    table = s.table()
    csr = sp.csr_array(A)
    rows = np.repeat(np.arange(m), np.diff(csr.indptr))
    for p in range(P):
        got = [None if i < 0 else (int(csr.indices[i]) % K0, int(rows[i]) // P)
               for i in table[:, p]]
        assert got == lists[p]


def test_list_schedule_on_raw_arrays_and_policies():
    rows = np.array([0, 2, 3, 1, 2, 0, 2, 3, 0, 3])
    ooo = list_schedule(np.array([0, 10]), rows, 4)
    ino = list_schedule(np.array([0, 10]), rows, 4, policy="in-order")
    assert ooo.max() + 1 == 11 and ino.max() + 1 == 15
    with pytest.raises(ConfigError):
        list_schedule(np.array([0, 10]), rows, 0)
    with pytest.raises(ConfigError):
        list_schedule(np.array([0, 10]), rows, 4, policy="random")


def test_empty_window_has_zero_length_and_equal_pointers():
    A = sp.csr_array(([1.0, 2.0], ([0, 1], [0, 9])), shape=(2, 12))  # window 1 (cols 4..7) empty
    s = schedule(A, P=2, K0=4, D=3)
    assert s.passes[0].q.tolist() == [0, 1, 1, 2]


def test_row_longer_than_window_spans_windows():
    A = sp.csr_array(np.ones((1, 10)))
    s = schedule(A, P=4, K0=4, D=3)
    # 4 + 4 + 2 non-zeros of one row; each window needs (n - 1) * D + 1 cycles
    assert s.passes[0].window_lengths.tolist() == [10, 10, 4]
    assert s.stats()["raw_bubbles"] == s.stream_length - 10


def test_k_not_multiple_of_window_and_tall_matrix_split_into_passes():
    A = sp.random_array((50, 13), density=0.3, rng=1, format="csr")
    cfg = EngineConfig(pes=4, window=4, scratchpad_depth=5)  # 20 rows per pass
    s = schedule(A, config=cfg)
    assert [p.rows for p in s.passes] == [20, 20, 10]
    assert [p.row0 for p in s.passes] == [0, 20, 40]
    assert all(p.q.size == 5 for p in s.passes)  # ceil(13 / 4) + 1 pointers
    assert int(s.crow.max()) < 5
    assert s.stream_length == sum(p.length for p in s.passes)


def test_stats_account_for_every_slot():
    from tvm_ext.workloads import load_matrix

    s = schedule(load_matrix("nasa4704"), P=16, K0=1024, D=6)
    st_ = s.stats()
    assert st_["bubbles"] == st_["raw_bubbles"] + st_["padding"]
    assert 16 * st_["stream_length"] == st_["nnz"] + st_["bubbles"]
    assert st_["pe_length"]["max"] <= st_["stream_length"]
    assert s.pe_lengths().sum() == st_["nnz"] + st_["raw_bubbles"]
