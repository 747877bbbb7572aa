"""Tests of the sparse TIR executors (schedules.sparse.executors) against scipy.

The format builders below are small local stand-ins for the inspectors (they
build the documented array layouts from a canonical scipy CSR with plain
numpy), so most tests do not depend on ``schedules.sparse.inspectors``; one
test also runs every executor on the real inspectors' output.  Kernels have
symbolic sizes, so each (format, kind, dtype, params) compiles once for the
whole file.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.sparse.executors import (PARAMS, BCSRParams, CSRParams, ELLParams, build_executor,
                                        csr_spmm_primfunc)
from schedules.sparse.formats import BCSR, COO, CSB, CSR, DIA, ELL, HYB, SELL
from tvm_ext.errors import ConfigError, InputError, ShapeError
from tvm_ext.workloads import canonical_csr

# --------------------------------------------------------------------------- builders


def _row_last_col(A: sp.csr_array) -> np.ndarray:
    lens = np.diff(A.indptr)
    last = np.zeros(A.shape[0], np.int32)
    nz = lens > 0
    last[nz] = A.indices[A.indptr[1:][nz] - 1]
    return last


def make_csr(A):
    return CSR.from_scipy(A)


def make_coo(A):
    rows = np.repeat(np.arange(A.shape[0], dtype=np.int32), np.diff(A.indptr))
    return COO(A.shape, rows, A.indices.copy(), A.data.copy())


def make_bcsr(A, R, C):
    m, k = A.shape
    mb, kb = -(-m // R), -(-k // C)
    P = sp.csr_array((A.data, A.indices, A.indptr), shape=(m, k)).tocoo()
    big = sp.coo_array((P.data, (P.row, P.col)), shape=(mb * R, kb * C)).tobsr(blocksize=(R, C))
    big.sort_indices()
    return BCSR((m, k), R, C, big.indptr.astype(np.int32), big.indices.astype(np.int32),
                np.ascontiguousarray(big.data))


def _ell_arrays(A, width):
    m = A.shape[0]
    lens = np.minimum(np.diff(A.indptr), width)
    col = np.repeat(_row_last_col(A)[:, None], max(width, 0), axis=1).astype(np.int32)
    data = np.zeros((m, width), A.dtype)
    for i in range(m):
        s = A.indptr[i]
        col[i, :lens[i]] = A.indices[s:s + lens[i]]
        data[i, :lens[i]] = A.data[s:s + lens[i]]
    return col, data


def make_ell(A, layout="row"):
    width = int(np.diff(A.indptr).max()) if A.shape[0] else 0
    col, data = _ell_arrays(A, width)
    if layout == "col":
        col, data = np.ascontiguousarray(col.T), np.ascontiguousarray(data.T)
    return ELL(A.shape, width, layout, col, data)


def make_dia(A):
    m, k = A.shape
    P = A.tocoo()
    offs = np.unique(P.col.astype(np.int64) - P.row).astype(np.int32)
    data = np.zeros((offs.size, m), A.dtype)
    d = np.searchsorted(offs, P.col.astype(np.int64) - P.row)
    data[d, P.row] = P.data
    return DIA((m, k), offs, data)


def make_csb(A, beta, symmetric_half=False):
    P = (sp.tril(A) if symmetric_half else A).tocoo()
    m, k = A.shape
    mb, kb = -(-m // beta), -(-k // beta)
    blk = (P.row // beta).astype(np.int64) * kb + P.col // beta
    order = np.lexsort((P.col, P.row, blk))
    blk, r, c, v = blk[order], P.row[order], P.col[order], P.data[order]
    ptr = np.concatenate([[0], np.cumsum(np.bincount(blk, minlength=mb * kb))]).astype(np.int32)
    return CSB((m, k), beta, ptr, (r % beta).astype(np.uint16), (c % beta).astype(np.uint16),
               v.astype(A.dtype), symmetric_half)


def make_hyb(A, width, layout="col"):
    col, data = _ell_arrays(A, width)
    if layout == "col":
        col, data = np.ascontiguousarray(col.T), np.ascontiguousarray(data.T)
    ell = ELL(A.shape, width, layout, col, data)
    rows, cols, vals = [], [], []
    for i in range(A.shape[0]):
        s, e = A.indptr[i] + width, A.indptr[i + 1]
        if e > s:
            rows.append(np.full(e - s, i, np.int32))
            cols.append(A.indices[s:e])
            vals.append(A.data[s:e])
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    return HYB(A.shape, ell, COO(A.shape, cat(rows, np.int32), cat(cols, np.int32), cat(vals, A.dtype)))


def make_sell(A, C, sigma):
    m = A.shape[0]
    lens = np.diff(A.indptr)
    perm = np.arange(m)
    for w in range(0, m, sigma):
        seg = perm[w:w + sigma]
        perm[w:w + sigma] = seg[np.argsort(-lens[seg], kind="stable")]
    ns = -(-m // C)
    perm = np.concatenate([perm, np.full(ns * C - m, m)]).astype(np.int32)
    last = _row_last_col(A)
    widths = np.array([max([lens[r] for r in perm[s * C:(s + 1) * C] if r < m] + [0])
                       for s in range(ns)], np.int32)
    ptr = np.concatenate([[0], np.cumsum(widths.astype(np.int64) * C)]).astype(np.int32)
    col = np.zeros(ptr[-1], np.int32)
    data = np.zeros(ptr[-1], A.dtype)
    for s in range(ns):
        for r in range(C):
            row = perm[s * C + r]
            if row >= m:
                continue
            a, b = A.indptr[row], A.indptr[row + 1]
            idx = ptr[s] + np.arange(widths[s]) * C + r
            col[idx] = last[row]
            col[idx[:b - a]] = A.indices[a:b]
            data[idx[:b - a]] = A.data[a:b]
    return SELL(A.shape, C, sigma, perm, ptr, widths, col, data)


def par(fmt, **kw):
    """Parallel params for ``fmt`` (the tiny test matrices would default to serial)."""
    return PARAMS[fmt.name](parallel=True, **kw)


def build(fmt, n_cols=16, **kw):
    return build_executor(fmt, n_cols=n_cols, params=kw.pop("params", None) or par(fmt), **kw)


BUILDERS = {
    "csr": make_csr,
    "coo": make_coo,
    "bcsr": lambda A: make_bcsr(A, 2, 3),
    "ell_row": lambda A: make_ell(A, "row"),
    "ell_col": lambda A: make_ell(A, "col"),
    "dia": make_dia,
    "csb": lambda A: make_csb(A, 8),
    "hyb": lambda A: make_hyb(A, 2),
    "sell": lambda A: make_sell(A, 4, 8),
}

# --------------------------------------------------------------------------- matrices


def random_matrix(m, k, density, dtype, seed, empty_rows=()):
    A = sp.random(m, k, density=density, random_state=seed, format="lil", dtype=np.float64)
    for r in empty_rows:
        A[r, :] = 0
    rng = np.random.default_rng(seed)
    A = canonical_csr(A, dtype=dtype)
    A.data[:] = rng.uniform(-1, 1, A.nnz).astype(dtype)
    return A


def tol(dtype):
    return dict(rtol=2e-4, atol=2e-4) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)


# Rows 3 and 30 empty, row count not a multiple of any block/slice size.
A32 = random_matrix(37, 29, 0.15, "float32", 0, empty_rows=(3, 30))
A64 = random_matrix(37, 29, 0.15, "float64", 1, empty_rows=(3, 30))
RNG = np.random.default_rng(42)


def dense(rows, n, dtype):
    return RNG.uniform(-1, 1, (rows, n)).astype(dtype)


# --------------------------------------------------------------------------- correctness


@pytest.mark.parametrize("name", sorted(BUILDERS))
@pytest.mark.parametrize("n", [1, 3, 16, 17])
def test_spmm_float32_matches_scipy(name, n):
    fmt = BUILDERS[name](A32)
    exe = build(fmt)
    B = dense(29, n, "float32")
    np.testing.assert_allclose(exe(B), A32 @ B, **tol("float32"))


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_spmv_float32_matches_scipy(name):
    fmt = BUILDERS[name](A32)
    exe = build(fmt, kind="spmv")
    x = dense(29, 1, "float32")[:, 0]
    y = exe(x)
    assert y.shape == (37,)
    np.testing.assert_allclose(y, A32 @ x, **tol("float32"))


@pytest.mark.parametrize("name", ["csr", "bcsr", "ell_col", "dia", "csb", "sell"])
@pytest.mark.parametrize("kind", ["spmm", "spmv"])
def test_float64_matches_scipy(name, kind):
    fmt = BUILDERS[name](A64)
    exe = build(fmt, kind=kind)
    B = dense(29, 17, "float64") if kind == "spmm" else dense(29, 1, "float64")[:, 0]
    np.testing.assert_allclose(exe(B), A64 @ B, **tol("float64"))


@pytest.mark.parametrize("name", ["csr", "coo", "bcsr", "csb", "hyb", "ell_col", "dia", "sell"])
def test_alpha_beta(name):
    fmt = BUILDERS[name](A32)
    exe = build(fmt)
    B, C = dense(29, 17, "float32"), dense(37, 17, "float32")
    got = exe(B, C, alpha=1.5, beta=-0.25)
    np.testing.assert_allclose(got, 1.5 * (A32 @ B) - 0.25 * C, **tol("float32"))
    # beta = 0 ignores C entirely (BLAS convention), alpha still scales
    np.testing.assert_allclose(exe(B, C, alpha=2.0, beta=0.0), 2.0 * (A32 @ B), **tol("float32"))


@pytest.mark.parametrize("name", ["csr", "dia", "sell", "coo"])
def test_spmv_alpha_beta(name):
    exe = build(BUILDERS[name](A32), kind="spmv")
    x, y = dense(29, 1, "float32")[:, 0], dense(37, 1, "float32")[:, 0]
    np.testing.assert_allclose(exe(x, y, alpha=-2.0, beta=3.0), -2.0 * (A32 @ x) + 3.0 * y,
                               **tol("float32"))


@pytest.mark.parametrize("R,C", [(1, 1), (3, 2), (4, 4)])
def test_bcsr_block_shapes(R, C):
    fmt = make_bcsr(A32, R, C)
    exe = build(fmt, 17)
    B = dense(29, 17, "float32")
    np.testing.assert_allclose(exe(B), A32 @ B, **tol("float32"))


def test_bcsr_microkernel_is_unrolled_register_blocked():
    exe = build(make_bcsr(A32, 3, 2))
    text = exe.prim_func.script()
    assert "T.unroll(2)" in text and "T.unroll(3)" in text  # over c and r
    assert 'scope="local"' in text and "T.vectorized(16)" in text


@pytest.mark.parametrize("name", ["csr", "coo", "bcsr", "ell_col", "dia", "csb", "hyb", "sell"])
def test_serial_variant_and_auto_choice(name):
    fmt = BUILDERS[name](A32)
    exe = build_executor(fmt, n_cols=16)  # tiny matrix: the default is the serial kernel
    assert exe.params.parallel is False
    B = dense(29, 17, "float32")
    np.testing.assert_allclose(exe(B), A32 @ B, **tol("float32"))
    x = B[:, 0].copy()
    np.testing.assert_allclose(build_executor(fmt, kind="spmv")(x), A32 @ x, **tol("float32"))


# --------------------------------------------------------------------------- CSB


def test_csb_transpose_from_same_store():
    fmt = make_csb(A32, 8)
    B = dense(29, 17, "float32")
    Bt = dense(37, 17, "float32")
    np.testing.assert_allclose(build(fmt, 17)(B), A32 @ B, **tol("float32"))
    exe_t = build(fmt, 17, transpose=True)
    assert exe_t.shape == (29, 37)
    np.testing.assert_allclose(exe_t(Bt), A32.T @ Bt, **tol("float32"))
    C = dense(29, 17, "float32")
    np.testing.assert_allclose(exe_t(Bt, C, alpha=0.5, beta=2.0), 0.5 * (A32.T @ Bt) + 2.0 * C,
                               **tol("float32"))
    xt = dense(37, 1, "float32")[:, 0]
    np.testing.assert_allclose(build(fmt, kind="spmv", transpose=True)(xt), A32.T @ xt,
                               **tol("float32"))


def test_csb_symmetric_half():
    S = random_matrix(41, 41, 0.1, "float32", 7)
    S = canonical_csr(S + S.T + sp.identity(41, dtype=np.float32, format="csr"), dtype="float32")
    fmt = make_csb(S, 8, symmetric_half=True)
    assert fmt.data.size < S.nnz  # only the lower half is stored
    B = dense(41, 17, "float32")
    C = dense(41, 17, "float32")
    exe = build(fmt, 17)
    np.testing.assert_allclose(exe(B), S @ B, **tol("float32"))
    np.testing.assert_allclose(exe(B, C, alpha=2.0, beta=-1.0), 2.0 * (S @ B) - C, **tol("float32"))
    np.testing.assert_allclose(build(fmt, 17, transpose=True)(B), S.T @ B, **tol("float32"))
    x = B[:, 0].copy()
    np.testing.assert_allclose(build(fmt, kind="spmv")(x), S @ x, **tol("float32"))


# --------------------------------------------------------------------------- edge cases


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_empty_matrix(name):
    Z = canonical_csr(sp.csr_array((9, 7), dtype=np.float32), dtype="float32")
    fmt = BUILDERS[name](Z)
    exe = build(fmt)
    B, C = dense(7, 17, "float32"), dense(9, 17, "float32")
    np.testing.assert_array_equal(exe(B), np.zeros((9, 17), np.float32))
    np.testing.assert_allclose(exe(B, C, alpha=1.0, beta=0.5), 0.5 * C, rtol=1e-6)


def test_tvm_tensor_in_tensor_out_and_in_place():
    import tvm

    exe = build(make_csr(A32))
    B, C = dense(29, 17, "float32"), dense(37, 17, "float32")
    bt, ct = tvm.runtime.tensor(B), tvm.runtime.tensor(C)
    out = exe(bt)
    assert isinstance(out, tvm.runtime.Tensor)
    np.testing.assert_allclose(out.numpy(), A32 @ B, **tol("float32"))
    res = exe(bt, ct, alpha=1.0, beta=1.0, out=ct)  # in place: C += A @ B
    assert res is ct
    np.testing.assert_allclose(ct.numpy(), C + A32 @ B, **tol("float32"))


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(BUILDERS)), m=st.integers(1, 40), k=st.integers(1, 40),
       n=st.integers(1, 40), density=st.floats(0.0, 0.5), seed=st.integers(0, 10_000))
def test_random_shapes_every_format(name, m, k, n, density, seed):
    A = random_matrix(m, k, density, "float32", seed)
    exe = build(BUILDERS[name](A))  # same compiled kernel as above: sizes are symbolic
    B = np.random.default_rng(seed).uniform(-1, 1, (k, n)).astype(np.float32)
    np.testing.assert_allclose(exe(B), A @ B, **tol("float32"))


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (1, 1)])
def test_degenerate_shapes(shape):
    A = canonical_csr(sp.csr_array(shape, dtype=np.float32), dtype="float32")
    for mk in BUILDERS.values():
        exe = build(mk(A))
        out = exe(np.ones((shape[1], 3), np.float32), np.ones((shape[0], 3), np.float32), beta=2.0)
        assert out.shape == (shape[0], 3)
        np.testing.assert_array_equal(out, np.full((shape[0], 3), 2.0, np.float32))


def _inspected(name, A):
    I = pytest.importorskip("schedules.sparse.inspectors")
    return {"csr": lambda: I.to_csr(A), "coo": lambda: I.to_coo(A), "bcsr": lambda: I.to_bcsr(A, 3, 2),
            "ell_row": lambda: I.to_ell(A), "ell_col": lambda: I.to_ell(A, layout="col"),
            "dia": lambda: I.to_dia(A, max_fill=1e9), "csb": lambda: I.to_csb(A, 16),
            "hyb": lambda: I.to_hyb(A, width=2), "sell": lambda: I.to_sell(A, C=4, sigma=8)}[name]()


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_executors_run_the_inspectors_formats(name):
    """The layouts the real inspectors produce are the ones the executors read."""
    fmt = _inspected(name, A32)
    B = dense(29, 17, "float32")
    np.testing.assert_allclose(build(fmt)(B), A32 @ B, **tol("float32"))
    x = B[:, 1].copy()
    np.testing.assert_allclose(build(fmt, kind="spmv")(x), A32 @ x, **tol("float32"))


# --------------------------------------------------------------------------- user scheduling


def test_user_schedules_primfunc_and_builds_it():
    import tvm
    from tvm import s_tir

    from tvm_ext.target import default_target

    func = csr_spmm_primfunc(CSRParams(lanes=16, unroll=1, parallel=False), "float32")
    sch = s_tir.Schedule(func)
    i, jo = sch.get_loops(sch.get_sblock("row"))
    io, ii = sch.split(i, factors=[None, 4])
    sch.parallel(io)
    lib = tvm.compile(sch.mod, target=default_target())
    assert "T.parallel" in sch.mod.script()
    B = dense(29, 17, "float32")
    args = [tvm.runtime.tensor(a) for a in (A32.indptr, A32.indices, A32.data, B)]
    out = tvm.runtime.empty((37, 17), "float32")
    lib["main"](*args, out, out, 1.0, 0.0)
    np.testing.assert_allclose(out.numpy(), A32 @ B, **tol("float32"))


# --------------------------------------------------------------------------- errors


def test_dtype_mismatch_is_input_error():
    exe = build_executor(make_csr(A32), n_cols=16)
    with pytest.raises(InputError, match="dtype"):
        exe(dense(29, 4, "float64"))
    with pytest.raises(InputError, match="dtype"):
        exe(dense(29, 4, "float32"), dense(37, 4, "float64"), beta=1.0)


def test_shape_mismatch_is_shape_error():
    exe = build_executor(make_csr(A32), n_cols=16)
    with pytest.raises(ShapeError):
        exe(dense(30, 4, "float32"))
    with pytest.raises(ShapeError):
        exe(dense(29, 4, "float32"), dense(37, 5, "float32"), beta=1.0)
    spmv = build_executor(make_csr(A32), kind="spmv")
    with pytest.raises(ShapeError):
        spmv(dense(29, 3, "float32"))


def test_bad_format_and_options_are_rejected():
    bad = CSR(A32.shape, A32.indptr, A32.indices.copy(), A32.data)
    bad.indices[0] = 99  # column out of range
    with pytest.raises(InputError, match="indices"):
        build_executor(bad)
    with pytest.raises(InputError, match="int32"):
        build_executor(CSR(A32.shape, A32.indptr.astype(np.int64), A32.indices, A32.data))
    with pytest.raises(InputError, match="float"):
        build_executor(CSR(A32.shape, A32.indptr, A32.indices, A32.data.astype(np.float16)))
    with pytest.raises(ConfigError):
        build_executor(make_csr(A32), transpose=True)
    with pytest.raises(ConfigError):
        build_executor(make_csr(A32), kind="spgemm")
    with pytest.raises(ConfigError):
        build_executor(make_csr(A32), params=ELLParams())
    with pytest.raises(ConfigError):
        build_executor(make_csr(A32), params=CSRParams(lanes=0))
    with pytest.raises(InputError):
        build_executor(A32)  # a scipy matrix, not a format: run an inspector first
    with pytest.raises(InputError, match="beta"):
        build_executor(make_csr(A32), 16)(dense(29, 4, "float32"), beta=1.0)


def test_sell_layout_the_generated_executor_cannot_bind_is_rejected():
    """The SELL recipe's nest reads the row permutation's first M entries and one slice per C
    rows: a padding row among the real ones, or an extra slice, is one clear InputError."""
    good = make_sell(A32, 4, 8)                     # 37 rows: slices of 4, 3 padding rows last
    perm = good.perm.copy()
    perm[0], perm[-1] = perm[-1], perm[0]           # a padding row in slice 0
    moved = SELL(good.shape, 4, 8, perm, good.slice_ptr, good.slice_width, good.col, good.data)
    with pytest.raises(InputError, match="padding rows"):
        build_executor(moved)
    extra = SELL(good.shape, 4, 8, np.concatenate([good.perm, np.full(4, 37, np.int32)]),
                 np.append(good.slice_ptr, good.slice_ptr[-1]).astype(np.int32),
                 np.append(good.slice_width, 0).astype(np.int32), good.col, good.data)
    with pytest.raises(InputError, match="slices"):
        build_executor(extra)
    B = dense(29, 17, "float32")
    np.testing.assert_allclose(build_executor(good, 17)(B), A32 @ B, **tol("float32"))


def test_one_kernel_serves_every_size():
    from tvm_ext.kernel_cache import cache_info

    build(make_bcsr(A32, 2, 3))
    before = cache_info()["builds"] + cache_info()["disk_hits"]
    other = random_matrix(120, 75, 0.05, "float32", 3)
    exe = build(make_bcsr(other, 2, 3), params=BCSRParams(parallel=True))
    B = dense(75, 17, "float32")
    np.testing.assert_allclose(exe(B), other @ B, **tol("float32"))
    assert cache_info()["builds"] + cache_info()["disk_hits"] == before


@pytest.mark.parametrize("R,C", [(3, 3), (1, 4), (4, 4), (6, 6)])
@pytest.mark.parametrize("parallel", [False, True])
def test_bcsr_spmv_block_shapes_with_alpha_beta(R, C, parallel):
    # 37 x 29: ragged block rows and block columns; 6 x 6 (36 slots) accumulates per row
    exe = build(make_bcsr(A32, R, C), kind="spmv", params=BCSRParams(parallel=parallel))
    x, y = dense(29, 1, "float32")[:, 0], dense(37, 1, "float32")[:, 0]
    np.testing.assert_allclose(exe(x), A32 @ x, **tol("float32"))
    np.testing.assert_allclose(exe(x, y, alpha=-2.0, beta=3.0), -2.0 * (A32 @ x) + 3.0 * y, **tol("float32"))


def test_bcsr_spmv_keeps_one_partial_sum_per_block_slot():
    """The generated BCSR SpMV gives each slot of a 3 x 3 block its own partial sum (no add
    waits on the block's previous column) and tests the block column's edge at most once per block."""
    text = build(make_bcsr(A32, 3, 3), kind="spmv").prim_func.script()
    assert "acc[k * 3 + i_1, 0] = acc[k * 3 + i_1, 0] + a_data[p, i_1, k]" in text  # slot (i, k): sum k*3+i
    # C dividing K (a size test per row tile): no test per block; else the edge test of the whole
    # block column, once per block, before its slots
    assert "if 0 < K and (K - 1) // 3 * 3 + 2 < K:" in text
    edge = text.index("if explicit_kk[p] * 3 + 2 < K:")
    assert edge < text.index("for k in T.unroll(3):", edge)


@pytest.mark.parametrize("name", ["csr", "bcsr"])
@pytest.mark.parametrize("kind", ["spmm", "spmv"])
@pytest.mark.parametrize("side", ["generated", "template"])
def test_dynamic_schedule_claims_parts_and_matches_the_fixed_shares(name, kind, side):
    """Run-time part claiming in the library's (generated) executors and in the hand-written
    templates kept as oracles (tests/sparse_oracles), against the fixed shares and scipy."""
    from schedules.sparse.executors import Executor
    from schedules.sparse.executors.codegen import DYNAMIC_PART_WORK
    from tests.sparse_oracles.bcsr_template import TemplateBCSRKernels
    from tests.sparse_oracles.csr_template import TemplateCSRKernels

    A = canonical_csr(sp.random(300, 280, density=0.3, random_state=7, format="csr", dtype="float32"))
    fmt = BUILDERS[name](A)
    P = CSRParams if name == "csr" else BCSRParams
    n = 8 if kind == "spmm" else 1
    B = dense(280, n, "float32") if n > 1 else dense(280, 1, "float32")[:, 0]
    exes = {}
    for d in (True, False):
        params = P(parallel=True, dynamic=d, parts_per_thread=16)
        if side == "generated":
            exes[d] = build_executor(fmt, n_cols=n, kind=kind, params=params)
        else:
            kernels = TemplateCSRKernels() if name == "csr" else TemplateBCSRKernels()
            exes[d] = Executor(fmt, kernels, kernels.resolve(fmt, params, "float32", kind, n, None), kind,
                               False, None)
    for dyn, exe in exes.items():
        assert exe.params.dynamic is dyn
        assert ("tvmext_atomic_add" in exe.prim_func.script()) is dyn
        np.testing.assert_allclose(exe(B), A @ B, **tol("float32"))
    parts = exes[True]._arrays[-1]  # the part boundaries: one per DYNAMIC_PART_WORK stored entries at least
    stored = A.nnz if name == "csr" else fmt.bcol.size * fmt.R * fmt.C
    assert 2 <= parts.shape[0] - 1 <= max(2, stored // DYNAMIC_PART_WORK)
