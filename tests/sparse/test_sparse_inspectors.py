"""Format inspectors: exact round trips, layout details and bad input."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.sparse.formats import FORMATS
from schedules.sparse.inspectors import (
    INSPECTORS, RECIPES, _sell_order, bcsr_recipe, choose_hyb_width, coo_recipe, csb_recipe, csr_recipe,
    dia_recipe, ell_recipe, sell_recipe, to_bcsr, to_coo, to_csb, to_csr, to_dia, to_ell, to_hyb, to_sell,
)
from tvm_ext.errors import ConfigError, InputError, ShapeError
from tvm_ext.workloads import block_fem, canonical_csr, lap2d, lap3d, load_matrix, make_spd


def random_csr(m: int, n: int, density: float, seed: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    mask = rng.random((m, n)) < density
    vals = rng.uniform(0.5, 2.0, (m, n)) * rng.choice([-1.0, 1.0], (m, n))
    return sp.csr_array(np.where(mask, vals, 0.0))


def assert_same(A, F) -> None:
    """``F.to_scipy()`` equals ``A`` exactly: pattern and values."""
    want = canonical_csr(A)
    want.eliminate_zeros()
    got = F.to_scipy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.data, want.data)


#: name -> inspector with parameters that fit any small matrix
ALL = {
    "csr": to_csr, "coo": to_coo,
    "bcsr": lambda A: to_bcsr(A, 3, 2),
    "ell_row": lambda A: to_ell(A), "ell_col": lambda A: to_ell(A, layout="col"),
    "dia": lambda A: to_dia(A, max_fill=np.inf),
    "csb": lambda A: to_csb(A, 4),
    "hyb": to_hyb, "hyb_w1": lambda A: to_hyb(A, width=1),
    "sell": lambda A: to_sell(A, C=3, sigma=5),
}


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 13), n=st.integers(1, 13), density=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_every_inspector_round_trips_random_matrices(m, n, density, seed):
    A = random_csr(m, n, density, seed)
    for make in ALL.values():
        assert_same(A, make(A))


@pytest.mark.parametrize("shape", [(0, 0), (1, 1), (3, 0), (0, 4), (6, 5)])
def test_empty_matrices(shape):
    A = sp.csr_array(shape)
    for make in ALL.values():
        F = make(A)
        assert F.to_scipy().shape == shape and F.to_scipy().nnz == 0


@pytest.mark.parametrize("name", ["LFAT5", "nasa4704"])
def test_bundled_matrices_round_trip(name):
    A = load_matrix(name)
    for key, make in ALL.items():
        F = to_csb(A, 256) if key == "csb" and A.shape[0] > 100 else make(A)
        assert_same(A, F)


@pytest.mark.parametrize("A", [lap2d(7), lap2d(6, points=9), lap3d(4, points=27), block_fem(5, 3, 2)],
                         ids=["lap2d5", "lap2d9", "lap3d27", "block_fem3x2"])
def test_stencils_round_trip(A):
    for make in ALL.values():
        assert_same(A, make(A))


def test_big_stencil_runs_every_inspector():
    """lap2d(300): 90k rows, 450k nnz -- vectorised inspectors, no per-row Python loops."""
    A = lap2d(300)
    for key, make in ALL.items():
        F = to_csb(A, 1024) if key == "csb" else make(A)
        assert_same(A, F)


def test_registry_covers_every_format():
    assert set(INSPECTORS) == set(FORMATS)
    A = random_csr(9, 7, 0.3, 1)
    for name, fn in INSPECTORS.items():
        F = fn(A)
        assert isinstance(F, FORMATS[name]) and F.name == name
        assert_same(A, F)
    assert set(RECIPES) <= set(FORMATS)


# ----------------------------------------------------------------------------- closed forms vs recipes

@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 14), n=st.integers(1, 14), density=st.floats(0.0, 1.0), seed=st.integers(0, 2**16),
       R=st.integers(1, 4), C=st.integers(1, 4))
def test_inspectors_give_the_arrays_their_recipes_derive(m, n, density, seed, R, C):
    """The vectorised closed forms equal running each transformation recipe through transforms."""
    A = canonical_csr(random_csr(m, n, density, seed))
    eq = np.testing.assert_array_equal
    res = csr_recipe().run(A)
    c = to_csr(A)
    eq(c.indptr, res.offset_index), eq(c.indices, res.explicit_index["k"]), eq(c.data, res.a_prime["data"])
    res = coo_recipe().run(A)
    o = to_coo(A)
    eq(o.row, res.explicit_index["i"]), eq(o.col, res.explicit_index["k"]), eq(o.data, A.data[res.col_inv])
    res = bcsr_recipe(R, C).run(A)
    b = to_bcsr(A, R, C)
    eq(b.indptr, res.offset_index), eq(b.bcol, res.explicit_index["kk"]), eq(b.data, res.a_prime["data"])
    res = dia_recipe(m).run(A)
    d = to_dia(A, max_fill=np.inf)
    eq(d.offsets, res.explicit_index["d"] - (m - 1)), eq(d.data, res.a_prime["data"])
    width = max(int(np.diff(A.indptr).max()), 1)
    res = ell_recipe(width).run(A)
    e = to_ell(A)
    eq(e.data[res.explicit_index["i"]], res.a_prime["data"])
    res = csb_recipe(R).run(A)
    s = to_csb(A, R)
    eq(s.blk_ptr, res.offset_index), eq(s.row_off, res.explicit_index["i"]), eq(s.col_off, res.explicit_index["l"])
    eq(s.data, res.a_prime["data"])
    perm = _sell_order(np.diff(A.indptr).astype(np.int64), 2 * C)
    new_of_old = np.empty(m, dtype=np.int64)
    new_of_old[perm] = np.arange(m)
    res = sell_recipe(C, new_of_old).run(A)
    sl = to_sell(A, C=C, sigma=2 * C)
    eq(sl.slice_width[res.explicit_index["s"]], res.segment_extent)
    eq(sl.data, res.a_prime["data"])


# ----------------------------------------------------------------------------- layouts

def test_csr_and_coo_match_scipy():
    A = canonical_csr(random_csr(12, 9, 0.3, 3))
    c = to_csr(A)
    for got, want in ((c.indptr, A.indptr), (c.indices, A.indices), (c.data, A.data)):
        np.testing.assert_array_equal(got, want)
    assert c.indptr.dtype == c.indices.dtype == np.int32
    o, ref = to_coo(A), A.tocoo()
    np.testing.assert_array_equal(o.row, ref.row)
    np.testing.assert_array_equal(o.col, ref.col)
    np.testing.assert_array_equal(o.data, ref.data)


@pytest.mark.parametrize("R,C", [(2, 2), (3, 1), (1, 4), (4, 3), (1, 1), (2, 1), (4, 8), (5, 6), (6, 5), (12, 12)])
def test_bcsr_matches_scipy_tobsr(R, C):
    A = canonical_csr(random_csr(R * 6, C * 6, 0.2, R * 10 + C))  # scipy needs whole blocks
    ours, ref = to_bcsr(A, R, C), A.tobsr(blocksize=(R, C))
    ref.sort_indices()
    np.testing.assert_array_equal(ours.indptr, ref.indptr)
    np.testing.assert_array_equal(ours.bcol, ref.indices)
    np.testing.assert_array_equal(ours.data, ref.data)
    assert ours.data.shape[1:] == (R, C)


def test_ell_col_major_is_transpose_and_pads_with_last_column():
    A = sp.csr_array([[0.0, 1.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0], [3.0, 0.0, 0.0, 0.0]])
    row, col = to_ell(A), to_ell(A, layout="col")
    assert row.col.shape == (3, 2) and col.col.shape == (2, 3)
    np.testing.assert_array_equal(col.col, row.col.T)
    np.testing.assert_array_equal(col.data, row.data.T)
    assert row.col.tolist() == [[1, 2], [0, 0], [0, 0]]
    assert row.data.tolist() == [[1.0, 2.0], [0.0, 0.0], [3.0, 0.0]]
    wide = to_ell(A, width=5)
    assert wide.width == 5 and wide.col[0].tolist() == [1, 2, 2, 2, 2]


def test_dia_offsets_sorted_and_layout():
    A = canonical_csr(random_csr(7, 10, 0.3, 8))
    d = to_dia(A, max_fill=np.inf)
    assert np.all(np.diff(d.offsets) > 0) and d.offsets.dtype == np.int32
    ref = A.todia()
    assert sorted(ref.offsets.tolist()) == d.offsets.tolist()
    dense = A.toarray()
    for k, off in enumerate(d.offsets):
        for i in range(7):
            assert d.data[k, i] == (dense[i, i + off] if 0 <= i + off < 10 else 0.0)


def test_dia_refuses_too_many_diagonals():
    A = random_csr(200, 200, 0.01, 0)
    with pytest.raises(InputError, match="max_fill"):
        to_dia(A)
    with pytest.raises(InputError, match="max_diagonals"):
        to_dia(lap2d(5), max_diagonals=3)
    assert to_dia(lap2d(5), max_diagonals=5).offsets.tolist() == [-5, -1, 0, 1, 5]


def test_csb_layout_and_16_bit_offsets():
    A = canonical_csr(random_csr(10, 13, 0.3, 6))
    beta = 4
    c = to_csb(A, beta)
    assert c.row_off.dtype == np.uint16 and c.col_off.dtype == np.uint16
    assert c.blk_ptr.size == 3 * 4 + 1 and c.blk_ptr.dtype == np.int32
    assert int(c.row_off.max()) < beta and int(c.col_off.max()) < beta
    rows = np.repeat(np.arange(10), np.diff(A.indptr))
    counts = np.zeros((3, 4), dtype=int)
    np.add.at(counts, (rows // beta, A.indices // beta), 1)
    np.testing.assert_array_equal(np.diff(c.blk_ptr), counts.ravel())
    big = to_csb(sp.csr_array(np.eye(3)), 65536)
    assert big.beta == 65536 and big.blk_ptr.tolist() == [0, 3]
    with pytest.raises(ConfigError, match="beta"):
        to_csb(A, 65537)
    with pytest.raises(ConfigError, match="beta"):
        to_csb(A, 0)


def test_csb_symmetric_half_stores_lower_triangle():
    A = make_spd(random_csr(11, 11, 0.3, 12))
    c = to_csb(A, 4, symmetric_half=True)
    assert c.symmetric_half
    blk = np.repeat(np.arange(9), np.diff(c.blk_ptr))
    rows = (blk // 3) * 4 + c.row_off
    cols = (blk % 3) * 4 + c.col_off
    assert np.all(rows >= cols)
    low = sp.tril(canonical_csr(A))
    low.eliminate_zeros()
    assert c.data.size == low.nnz
    assert_same(A, c)


def test_sell_sorting_windows_and_slices():
    A = canonical_csr(random_csr(23, 9, 0.3, 13))
    C, sigma = 4, 8
    s = to_sell(A, C=C, sigma=sigma)
    m = 23
    lens = np.diff(A.indptr)
    assert s.perm.size == s.n_slices * C == 24 and s.perm[m:].tolist() == [m]
    for w in range(0, m, sigma):
        window = s.perm[w:min(w + sigma, m)]
        assert sorted(window.tolist()) == list(range(w, min(w + sigma, m)))
        assert np.all(np.diff(lens[window]) <= 0)
    for k in range(s.n_slices):
        rows = s.perm[k * C:(k + 1) * C]
        real = rows[rows < m]
        assert s.slice_width[k] == (lens[real].max() if real.size else 0)
    np.testing.assert_array_equal(np.diff(s.slice_ptr), s.slice_width * C)
    assert s.col.size == s.slice_ptr[-1] and s.col.min() >= 0 and s.col.max() < 9
    assert_same(A, s)


def test_hyb_partition_covers_every_nonzero_once():
    A = canonical_csr(random_csr(30, 20, 0.25, 21))
    W = 3
    h = to_hyb(A, width=W)
    assert h.ell.layout == "col" and h.ell.col.shape == (W, 30)
    lens = np.diff(A.indptr)
    in_ell = int(np.count_nonzero(h.ell.data))
    assert in_ell == np.minimum(lens, W).sum() and h.coo.nnz == np.maximum(lens - W, 0).sum()
    assert in_ell + h.coo.nnz == A.nnz
    rows, slots = np.nonzero(h.ell.data.T)
    ell_pairs = set(zip(rows.tolist(), h.ell.col.T[rows, slots].tolist()))
    coo_pairs = set(zip(h.coo.row.tolist(), h.coo.col.tolist()))
    assert not ell_pairs & coo_pairs and len(coo_pairs) == h.coo.nnz
    order = np.lexsort((h.coo.col, h.coo.row))
    np.testing.assert_array_equal(order, np.arange(h.coo.nnz))
    assert_same(A, h)


@settings(max_examples=25, deadline=None)
@given(lens=st.lists(st.integers(0, 12), min_size=1, max_size=30))
def test_choose_hyb_width_minimises_the_byte_cost(lens):
    m, n = len(lens), 12
    rows = np.repeat(np.arange(m), lens)
    cols = np.concatenate([np.arange(k) for k in lens]).astype(int)
    A = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(m, n))
    w = choose_hyb_width(A)

    def cost(W):
        return W * m * 12 + sum(max(k - W, 0) for k in lens) * 16

    best = min(range(1, max(max(lens), 1) + 1), key=lambda W: (cost(W), W))
    assert w == best
    assert choose_hyb_width(A, max_width=2) <= 2
    assert choose_hyb_width(A, ell_slot_bytes=1, coo_entry_bytes=10**6) == max(max(lens), 1)


# ----------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("key", list(ALL))
def test_nan_values_are_rejected(key):
    A = sp.csr_array(np.array([[1.0, np.nan], [0.0, 2.0]]))
    with pytest.raises(InputError, match="non-finite"):
        ALL[key](A)


@pytest.mark.parametrize("name", sorted(INSPECTORS))
def test_check_finite_false_skips_the_scan_and_keeps_the_values(name):
    A = sp.csr_array(np.array([[1.0, np.nan], [0.0, 2.0]]))
    got = INSPECTORS[name](A, check_finite=False).to_scipy().toarray()
    np.testing.assert_array_equal(got, A.toarray())  # NaN where it was (assert_array_equal matches NaNs)


def test_symmetric_half_needs_square_and_symmetric():
    with pytest.raises(ShapeError):
        to_csb(random_csr(4, 5, 0.5, 0), 2, symmetric_half=True)
    with pytest.raises(InputError, match=r"symmetric.*A\[0, 1\] = 2.0 and A\[1, 0\] = 0"):
        to_csb(sp.csr_array([[1.0, 2.0], [0.0, 1.0]]), 2, symmetric_half=True)


def test_int64_indices_and_unsorted_duplicates_are_canonicalised():
    indptr = np.array([0, 3, 4], dtype=np.int64)
    indices = np.array([2, 0, 2, 1], dtype=np.int64)          # unsorted, (0, 2) twice
    A = sp.csr_array((np.array([1.0, 2.0, 3.0, 4.0]), indices, indptr), shape=(2, 3))
    want = sp.csr_array([[2.0, 0.0, 4.0], [0.0, 4.0, 0.0]])
    for make in ALL.values():
        F = make(A)
        assert (F.to_scipy() != want).nnz == 0
    c = to_csr(A)
    assert c.indices.dtype == np.int32 and c.indices.tolist() == [0, 2, 1] and c.data.tolist() == [2.0, 4.0, 4.0]


@pytest.mark.parametrize("call,err", [
    (lambda A: to_bcsr(A, 0, 2), ConfigError),
    (lambda A: to_bcsr(A, 2, 1.5), ConfigError),
    (lambda A: to_ell(A, layout="diag"), ConfigError),
    (lambda A: to_ell(A, width=1), InputError),
    (lambda A: to_sell(A, C=0), ConfigError),
    (lambda A: to_sell(A, C=4, sigma=0), ConfigError),
    (lambda A: to_hyb(A, width=0), ConfigError),
    (lambda A: to_csr([[1.0, 2.0]]), InputError),
])
def test_bad_parameters_raise(call, err):
    with pytest.raises(err):
        call(sp.csr_array([[1.0, 2.0], [0.0, 3.0]]))


def test_dtype_is_kept_or_cast():
    A = sp.csr_array(np.eye(3, dtype=np.float32))
    assert to_ell(A).data.dtype == np.float32
    assert to_bcsr(A, 2, 2, dtype="float64").data.dtype == np.float64
    assert to_sell(A, dtype="float32").data.dtype == np.float32


# ----------------------------------------------------------------------------- build without copies

@settings(max_examples=20, deadline=None)
@given(lens=st.lists(st.integers(0, 9), min_size=0, max_size=40), sigma=st.integers(1, 50))
def test_sell_window_order_is_a_stable_sort_by_length_in_each_window(lens, sigma):
    lens = np.array(lens, dtype=np.int64)
    longest = int(lens.max()) if lens.size else 0
    key = (np.arange(lens.size) // sigma) * (longest + 1) + (longest - lens)
    np.testing.assert_array_equal(_sell_order(lens, sigma), np.argsort(key, kind="stable"))


def test_inspector_outputs_start_on_64_bytes_and_csr_shares_an_aligned_input():
    from tvm_ext.zero_copy import empty_aligned

    A = canonical_csr(lap2d(30), dtype="float32")
    arrays = {"csr": ("indptr", "indices", "data"), "bcsr": ("indptr", "bcol", "data"),
              "dia": ("data",), "ell_row": ("col", "data"), "ell_col": ("col", "data"),
              "sell": ("col", "data", "slice_ptr")}
    for name, fields in arrays.items():
        F = ALL[name](A)
        for f in fields:
            assert getattr(F, f).ctypes.data % 64 == 0, (name, f)
    for _ in range(8):  # scipy keeps some arrays as given, copies others: both cases, by address
        arrays = [empty_aligned(a.shape, a.dtype) for a in (A.data, A.indices, A.indptr)]
        for dst, src in zip(arrays, (A.data, A.indices, A.indptr)):
            dst[...] = src
        B = sp.csr_array(tuple(arrays), shape=A.shape)
        c = to_csr(B)
        for got, given_ in ((c.data, B.data), (c.indices, B.indices), (c.indptr, B.indptr)):
            np.testing.assert_array_equal(got, given_)
            assert got.ctypes.data % 64 == 0
            assert (got is given_) == (given_.ctypes.data % 64 == 0)


def test_executors_read_the_format_arrays_in_place():
    """Building copies no format array (the kernel reads them through DLPack); unaligned ones are copied."""
    from schedules.sparse.executors import build_executor
    from schedules.sparse.formats import CSR

    A = canonical_csr(block_fem(40, 2, 2, seed=0), dtype="float64")
    X = np.random.default_rng(0).uniform(-1, 1, (A.shape[1], 4))
    want = A @ X
    for F in (to_csr(A.copy()), to_sell(A, C=4, sigma=16), to_bcsr(A, 2, 2)):
        exe = build_executor(F, 4)
        np.testing.assert_allclose(exe(X), want, rtol=1e-12, atol=1e-12)
        np.multiply(F.data, 2.0, out=F.data)  # the executor sees the format's own memory
        np.testing.assert_allclose(exe(X), 2.0 * want, rtol=1e-12, atol=1e-12, err_msg=F.name)
        np.multiply(F.data, 0.5, out=F.data)
    # a format built by hand on unaligned arrays still runs (they are copied once)
    raw = np.empty(A.nnz + 1)[1:]
    raw[...] = A.data
    F = CSR(A.shape, A.indptr.copy(), A.indices.copy(), raw)
    np.testing.assert_allclose(build_executor(F, 4)(X), A @ X, rtol=1e-12, atol=1e-12)


def test_sell_check_refuses_a_row_twice():
    from schedules.sparse.executors import build_executor
    from schedules.sparse.formats import SELL

    F = to_sell(canonical_csr(lap2d(6)), C=4, sigma=8)
    perm = F.perm.copy()
    perm[1] = perm[0]  # row perm[0] twice, row perm[1] never
    bad = SELL(F.shape, F.C, F.sigma, perm, F.slice_ptr, F.slice_width, F.col, F.data)
    with pytest.raises(InputError, match="exactly once"):
        build_executor(bad, 4)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 40), density=st.floats(0.0, 0.6), seed=st.integers(0, 99),
       R=st.integers(1, 9), C=st.integers(1, 9), f64=st.booleans())
def test_compiled_bcsr_merge_gives_scipys_blocks(m, n, density, seed, R, C, f64):
    from schedules.sparse.inspectors import _bcsr_scipy
    from schedules.sparse.native import inspect_helpers

    if inspect_helpers() is None:
        pytest.skip("no C compiler: to_bcsr uses scipy's converter")
    A = canonical_csr(random_csr(m, n, density, seed), dtype="float64" if f64 else "float32")
    got, want = to_bcsr(A, R, C), _bcsr_scipy(A, R, C)
    assert got.data.dtype == A.dtype
    for name in ("indptr", "bcol", "data"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


def test_compiled_bcsr_merge_split_over_threads(monkeypatch):
    import schedules.sparse.host_threads as threads
    import schedules.sparse.inspectors as ins

    A = canonical_csr(block_fem(900, 3, 3, seed=2), dtype="float32")  # ragged: 2700 rows
    want = ins._bcsr_scipy(A, 4, 3)
    monkeypatch.setattr(threads, "BCSR_THREADED_NNZ", 0)
    monkeypatch.setattr(threads, "host_threads", lambda: 3)  # more ranges than this host's cores
    assert len(threads.row_ranges(A, 4)) == 3
    got = to_bcsr(A, 4, 3)
    for name in ("indptr", "bcol", "data"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


def test_on_threads_runs_every_call_and_raises_a_workers_error():
    from schedules.sparse.host_threads import on_threads

    done = []

    def boom():
        done.append("boom")
        raise ValueError("worker failed")

    on_threads([lambda: done.append(0), lambda: done.append(1), lambda: done.append(2)])
    assert sorted(done) == [0, 1, 2]
    done.clear()
    with pytest.raises(ValueError, match="worker failed"):
        on_threads([lambda: done.append(0), boom])
    assert sorted(done, key=str) == [0, "boom"]
