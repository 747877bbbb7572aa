"""make-dense / compact / compact-and-pad and the enabling maps (Venkat 2016 §5.1-5.2)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.sparse.transforms import (
    Recipe, compact, compact_and_pad, csr_space, known, make_dense, normalize, permute, project,
    reorder, select, shift, skew, split, step, tile,
)
from tvm_ext.errors import ScheduleError
from tvm_ext.workloads import canonical_csr, lap2d, load_matrix


def random_csr(m: int, n: int, density: float, seed: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    vals = rng.uniform(0.5, 2.0, (m, n)) * rng.choice([-1.0, 1.0], (m, n))
    return canonical_csr(sp.csr_array(np.where(mask, vals, 0.0)))


matrices = st.builds(random_csr, st.integers(1, 11), st.integers(1, 11),
                     st.floats(0.0, 1.0), st.integers(0, 2**16))


def dense_rows(A):
    return np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))


# ----------------------------------------------------------------------------- Listing 5.3

@pytest.mark.parametrize("A", [random_csr(9, 13, 0.3, 1), load_matrix("nasa4704"), lap2d(6)],
                         ids=["random", "nasa4704", "lap2d"])
def test_make_dense_compact_and_pad_round_trips_csr(A):
    """Listing 5.3: offset_index/explicit_index/A_prime are scipy's indptr/indices/data."""
    res = compact_and_pad(make_dense(A), "k", identity=0.0)
    np.testing.assert_array_equal(res.offset_index, A.indptr)
    np.testing.assert_array_equal(res.explicit_index["k"], A.indices)
    np.testing.assert_array_equal(res.a_prime["data"], A.data)
    assert res.a_prime["data"].shape == (A.nnz,)


def test_compact_without_pad_gives_col_inv():
    """Listing 5.11: compact keeps the data in place and reads it through col_inv."""
    A = random_csr(8, 8, 0.4, 3)
    res = compact(make_dense(A), "k")
    np.testing.assert_array_equal(res.offset_index, A.indptr)
    np.testing.assert_array_equal(res.col_inv, np.arange(A.nnz))
    x = np.arange(1.0, 9.0)
    y = np.zeros(8)
    rows = np.repeat(np.arange(8), np.diff(res.offset_index))
    np.add.at(y, rows, A.data[res.col_inv] * x[res.explicit_index["k"]])
    np.testing.assert_allclose(y, A @ x)


def test_recipe_runs_steps_in_order_and_prints_them():
    r = Recipe("csr", (step(make_dense), step(compact_and_pad, "k", identity=0.0)))
    assert str(r) == "csr: make_dense() -> compact_and_pad(k, identity=0.0)"
    A = random_csr(5, 4, 0.5, 0)
    np.testing.assert_array_equal(r.run(A).explicit_index["k"], A.indices)


# ----------------------------------------------------------------------------- safety

def test_compact_and_pad_rejects_non_injective_mapping():
    """Projecting out k after tiling sends two non-zeros of one row and block to one slot."""
    A = sp.csr_array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
    space = project(tile(make_dense(A), "k", 2), "k")
    with pytest.raises(ScheduleError, match=r"not injective.*A\[0, 0\].*A\[0, 1\].*A_prime\[0\]"):
        compact_and_pad(space, "kk", identity=0.0)
    # the same space compacts fine without padding (compact keeps the guard)
    assert compact(space, "kk").count == 2


def test_non_injective_far_apart_entries_are_named():
    """Entries that are not neighbours in executor order are still caught (rows 0 and 2)."""
    A = sp.csr_array([[0.0, 5.0], [1.0, 0.0], [0.0, 7.0]])
    space = permute(project(make_dense(A), "i"), ("k",))
    with pytest.raises(ScheduleError, match=r"A\[0, 1\].*A\[2, 1\]"):
        compact_and_pad(space, "k", identity=0.0)


def test_compact_and_pad_requires_an_identity():
    space = make_dense(random_csr(3, 3, 0.5, 0))
    with pytest.raises(ScheduleError, match="identity"):
        compact_and_pad(space, "k")
    with pytest.raises(ScheduleError, match="identity"):
        compact_and_pad(space, "k", identity={"col": 0}, arrays=("data", "col"))


def test_compact_and_pad_respects_max_slots():
    space = permute(make_dense(lap2d(4)), ("k", "i"))
    with pytest.raises(ScheduleError, match="slots"):
        compact_and_pad(space, "k", identity=0.0, max_slots=10)


@pytest.mark.parametrize("bad", [
    lambda s: tile(s, "i", 0),
    lambda s: tile(s, "q", 2),
    lambda s: tile(s, "i", 2, outer="k"),
    lambda s: permute(s, ("i",)),
    lambda s: skew(s, "k", "k", 1),
    lambda s: compact(s, ("k", "i")),
    lambda s: reorder(s, "i", np.array([0, 0, 1])),
    lambda s: select(s, np.ones(2, dtype=bool)),
])
def test_illegal_transformations_raise_schedule_error(bad):
    with pytest.raises(ScheduleError):
        bad(make_dense(random_csr(3, 3, 0.6, 5)))


def test_known_rejects_a_violated_bound():
    A = sp.csr_array([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    space = normalize(csr_space(A))
    with pytest.raises(ScheduleError, match=r"j < 2.*A\[0, 2\]"):
        known(space, "j", hi=2)
    assert known(space, "j", hi=5).bounds["j"] == (0, 5)


# ----------------------------------------------------------------------------- closed forms

@settings(max_examples=25, deadline=None)
@given(A=matrices, R=st.integers(1, 5), C=st.integers(1, 5))
def test_tile_gives_closed_form_bcsr_coordinates(A, R, C):
    """§5.2.2: kk = col // C and k = col - C*kk, with no dense loop scanned."""
    s = tile(tile(make_dense(A), "i", R), "k", C)
    col, row = A.indices, dense_rows(A)
    np.testing.assert_array_equal(s.coords["kk"], col // C)
    np.testing.assert_array_equal(s.coords["k"], col % C)
    np.testing.assert_array_equal(s.coords["ii"], row // R)
    np.testing.assert_array_equal(s.coords["i"], row % R)
    assert s.exprs["kk"] == f"col[j] // {C}" and s.exprs["k"] == f"col[j] - {C}*kk"
    assert s.bounds["kk"] == (0, -(-A.shape[1] // C)) and s.bounds["k"] == (0, C)
    s.check()


@settings(max_examples=25, deadline=None)
@given(A=matrices, R=st.integers(1, 4), C=st.integers(1, 4))
def test_bcsr_compaction_computes_spmv(A, R, C):
    """The padded blocks of the BCSR recipe compute y = A x (executor of Listing 5.9)."""
    s = permute(tile(tile(make_dense(A), "i", R), "k", C), ("ii", "kk", "i", "k"))
    res = compact_and_pad(s, "kk", identity=0.0)
    m, n = A.shape
    x = np.random.default_rng(0).standard_normal(res.space.bounds["kk"][1] * C)
    x[n:] = 0.0
    brow = np.repeat(np.arange(res.offset_index.size - 1), np.diff(res.offset_index))
    xb = x.reshape(-1, C)[res.explicit_index["kk"]]               # (nb, C)
    yb = np.einsum("brc,bc->br", res.a_prime["data"], xb)         # (nb, R)
    y = np.zeros(res.space.bounds["ii"][1] * R)
    np.add.at(y.reshape(-1, R), brow, yb)
    np.testing.assert_allclose(y[:m], A @ x[:n], atol=1e-12)


def test_dia_coordinates_from_skew_shift_permute():
    A = random_csr(6, 9, 0.4, 7)
    m, n = A.shape
    s = permute(shift(skew(make_dense(A), "k", "i", -1, name="d"), "d", m - 1), ("d", "i"))
    np.testing.assert_array_equal(s.coords["d"], A.indices - dense_rows(A) + m - 1)
    assert s.bounds["d"] == (0, m + n - 1)
    res = compact_and_pad(s, "d", identity=0.0)
    offsets = res.explicit_index["d"] - (m - 1)
    assert np.all(np.diff(offsets) > 0)
    dense = A.toarray()
    for d, off in enumerate(offsets):
        for i in range(m):
            want = dense[i, i + off] if 0 <= i + off < n else 0.0
            assert res.a_prime["data"][d, i] == want


def test_normalize_gives_row_relative_positions():
    A = random_csr(7, 10, 0.5, 11)
    s = normalize(csr_space(A))
    np.testing.assert_array_equal(s.coords["j"], np.arange(A.nnz) - A.indptr[dense_rows(A)])
    assert s.bounds["j"] == (0, int(np.diff(A.indptr).max()))
    assert s.exprs["j"] == "j - index(i)"


def test_joint_compaction_of_two_levels_counts_entries_per_block():
    """CSB: compacting (i, l) jointly gives per-block prefix sums over (ii, ll)."""
    A = random_csr(11, 9, 0.35, 4)
    beta = 4
    s = permute(tile(tile(make_dense(A, name="l"), "i", beta), "l", beta), ("ii", "ll", "i", "l"))
    res = compact_and_pad(s, ("i", "l"), identity=0.0)
    mb, kb = -(-11 // beta), -(-9 // beta)
    counts = np.zeros((mb, kb), dtype=int)
    np.add.at(counts, (dense_rows(A) // beta, A.indices // beta), 1)
    np.testing.assert_array_equal(np.diff(res.offset_index), counts.ravel())
    blk = np.repeat(np.arange(mb * kb), np.diff(res.offset_index))
    rows = (blk // kb) * beta + res.explicit_index["i"]
    cols = (blk % kb) * beta + res.explicit_index["l"]
    back = sp.csr_array((res.a_prime["data"], (rows, cols)), shape=A.shape)
    assert (back != A).nnz == 0


def test_ragged_compaction_sizes_each_segment():
    A = sp.csr_array([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [0.0, 0.0, 0.0], [5.0, 6.0, 0.0]])
    s = permute(tile(normalize(csr_space(A)), "i", 2, outer="s", inner="r"), ("s", "j", "r"))
    res = compact_and_pad(s, "s", identity=0.0, ragged="j")
    assert res.segment_extent.tolist() == [3, 2]
    assert res.segment_ptr.tolist() == [0, 6, 10]
    # slice 0 column-major: (j0: 1, 4), (j1: 2, 0), (j2: 3, 0)
    assert res.a_prime["data"][:6].tolist() == [1.0, 4.0, 2.0, 0.0, 3.0, 0.0]
    with pytest.raises(ScheduleError, match="ragged"):
        compact_and_pad(s, "s", identity=0.0, ragged="r")


def test_split_and_select_partition_entries():
    A = random_csr(8, 8, 0.5, 2)
    s = make_dense(A)
    lower, upper = split(s, s.coords["i"] >= s.coords["k"])
    assert lower.n + upper.n == A.nnz
    assert np.all(lower.coords["i"] >= lower.coords["k"]) and np.all(upper.coords["i"] < upper.coords["k"])
    assert sorted(np.concatenate([lower.pos, upper.pos]).tolist()) == list(range(A.nnz))
    assert select(s, lambda t: t.coords["i"] >= t.coords["k"]).n == lower.n


def test_reorder_renumbers_rows():
    A = random_csr(5, 4, 0.6, 9)
    new_of_old = np.array([4, 2, 0, 1, 3])
    s = reorder(make_dense(A), "i", new_of_old)
    np.testing.assert_array_equal(s.coords["i"], new_of_old[dense_rows(A)])
    res = compact_and_pad(s, "k", identity=0.0)      # CSR of the permuted matrix
    P = A[np.argsort(new_of_old)]
    np.testing.assert_array_equal(res.offset_index, P.indptr)
    np.testing.assert_array_equal(res.a_prime["data"], P.data)


def test_describe_and_history_record_the_script():
    s = tile(make_dense(random_csr(4, 4, 0.5, 1)), "k", 2)
    assert s.history == ("csr", "make_dense(k == col[j])", "tile(k, 2) -> (kk, k)")
    assert s.describe().startswith("for i in [0, 4): for kk in [0, 2): for k in [0, 2): if kk == col[j] // 2")


def test_big_stencil_compacts_quickly():
    """lap2d(300) (90k rows): the vectorised inspectors handle it in the test budget."""
    A = lap2d(300)
    s = permute(tile(tile(make_dense(A), "i", 4), "k", 4), ("ii", "kk", "i", "k"))
    res = compact_and_pad(s, "kk", identity=0.0)
    assert res.a_prime["data"].sum() == pytest.approx(A.data.sum())
    assert int(np.count_nonzero(res.a_prime["data"])) == A.nnz


def test_huge_dense_ranges_fall_back_to_lexsort():
    """Levels whose dense ranges overflow an int64 key still compact correctly."""
    A = random_csr(9, 7, 0.4, 17)
    huge = known(known(make_dense(A), "i", hi=2**40), "k", hi=2**40)
    res = compact(permute(huge, ("k", "i")), ("k", "i"))          # CSC order
    ref = A.tocsc()
    ref.sort_indices()
    np.testing.assert_array_equal(res.explicit_index["k"], np.repeat(np.arange(7), np.diff(ref.indptr)))
    np.testing.assert_array_equal(res.explicit_index["i"], ref.indices)
    np.testing.assert_array_equal(A.data[res.col_inv], ref.data)
