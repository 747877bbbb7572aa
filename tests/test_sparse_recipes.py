"""Executors generated from transformation recipes (schedules.sparse.recipes) against scipy."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.sparse.recipes import RECIPES, build_recipe_executor, csr_recipe, dia_recipe
from schedules.sparse.recipes.nest import csr_loop_nest, nest_from_primfunc
from schedules.sparse.recipes.sgd import build_sgd, sgd_blkdiag_recipe, sgd_diag_recipe, sgd_reference
from schedules.sparse.recipes.steps import (Compact, CompactAndPad, MakeDense, Normalize, Permute,
                                            Project, Skew, Tile)
from tvm_ext.errors import ScheduleError, TvmExtError
from sparse_helpers import random_csr_with_empty_row as _matrix


def _check(name: str, A: sp.csr_array, n: int, kind: str, seed: int = 0, parallel=None):
    from schedules.sparse.executors.spec import ExecParams

    rng = np.random.default_rng(seed)
    B = rng.random((A.shape[1], n) if kind == "spmm" else A.shape[1]).astype(A.dtype)
    exe = build_recipe_executor(RECIPES[name](), A, n, kind=kind, params=ExecParams(parallel=parallel))
    ref = A @ B
    np.testing.assert_allclose(exe(B), ref, rtol=1e-4, atol=1e-4)
    C = rng.random(ref.shape).astype(A.dtype)
    np.testing.assert_allclose(exe(B, C, alpha=2.0, beta=-0.5), 2.0 * ref - 0.5 * C, rtol=1e-4, atol=1e-4)


@settings(max_examples=5, deadline=None)
@given(name=st.sampled_from(sorted(RECIPES)), m=st.integers(1, 40), k=st.integers(1, 40),
       n=st.sampled_from([1, 3, 8, 17, 40]), density=st.sampled_from([0.0, 0.05, 0.3]),
       seed=st.integers(0, 99),
       parallel=st.sampled_from([None, True, False]))
def test_generated_executor_equals_scipy(name, m, k, n, density, seed, parallel):
    _check(name, _matrix(m, k, density, seed), n, "spmm", seed, parallel)


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_spmv_float64_and_empty_matrices(name):
    _check(name, _matrix(33, 21, 0.2, 4, np.float64), 1, "spmv")
    for shape in [(0, 5), (5, 0), (4, 4)]:     # same kernel (serial float64 SpMV), edge shapes
        _check(name, sp.csr_array(shape, dtype=np.float64), 1, "spmv")


@pytest.mark.parametrize("beta, shape", [(4, (30, 22)), (5, (7, 13)), (8, (8, 8))])
def test_csb_non_divisible_blocks(beta, shape):
    from schedules.sparse.recipes import csb_recipe

    A = _matrix(*shape, 0.3, beta)
    rng = np.random.default_rng(0)
    B = rng.random((shape[1], 9)).astype(np.float32)
    exe = build_recipe_executor(csb_recipe(beta), A, 9)
    np.testing.assert_allclose(exe(B), A @ B, rtol=1e-4, atol=1e-4)


def test_sdia_stores_diagonals_per_row_tile():
    """S-DIA keeps a diagonal only in the row tiles that use it: fewer slots than DIA on a
    matrix whose bandwidth varies, same product."""
    from schedules.sparse.recipes.library import sdia_recipe

    m = 64
    d = np.ones(m, np.float32)
    A = sp.diags([d, d[:-1], d[:-1]], [0, 1, -1], shape=(m, m), format="lil")
    A[0, 40], A[1, 50], A[2, 60] = 2.0, 3.0, 4.0   # three far diagonals, all in the first row tile
    A = sp.csr_array(A.tocsr())
    sdia, dia = sdia_recipe(8).inspect(A), dia_recipe().inspect(A)
    assert dia.arrays["a_data"].size == 6 * m            # 6 diagonals x 64 rows
    assert sdia.arrays["a_data"].size == 8 * 3 * 8 + 3 * 8   # 3 per tile, plus 3 in tile 0
    B = np.random.default_rng(0).random((m, 5)).astype(np.float32)
    exe = build_recipe_executor(sdia_recipe(8), A, 5, fmt=sdia)
    np.testing.assert_allclose(exe(B), A @ B, rtol=1e-5, atol=1e-5)


def test_listing_5_3_round_trip():
    """make-dense + compact-and-pad(k) of CSR is CSR again (offset = indptr, explicit = indices)."""
    A = _matrix(30, 25, 0.2, 7)
    fmt = csr_recipe().inspect(A)
    np.testing.assert_array_equal(fmt.arrays["offset"], A.indptr)
    np.testing.assert_array_equal(fmt.arrays["explicit_k"], A.indices)
    np.testing.assert_array_equal(fmt.arrays["a_data"], A.data)
    script = csr_recipe().executor().script()
    assert "offset[vi + 1]" in script and "explicit_k" in script


def test_print_recipe_shows_nest_and_script():
    text = str(dia_recipe())
    assert "compact_and_pad(d" in text and "reorder(i, p)" in text and "for i in range(0, M)" in text
    assert "T.prim_func" in dia_recipe().executor().script()


def test_make_dense_without_compact_runs_and_is_correct():
    A = _matrix(9, 7, 0.3, 1)
    rng = np.random.default_rng(0)
    B = rng.random((7, 4)).astype(np.float32)
    for upto in (1, 2, 4):   # make_dense; + skew; + shift + permute (DIA's steps before compaction)
        func = dia_recipe().naive_executor(upto=upto)
        out = _run(func, [A.indptr.astype(np.int32), A.indices.astype(np.int32), A.data], B, A.shape[0])
        np.testing.assert_allclose(out, A @ B, rtol=1e-5, atol=1e-5)


def test_tir_schedule_applies_to_the_nest():
    """Ordinary loop transformations from tvm.s_tir.Schedule on the generated nest: split,
    unroll and parallel on the row loop; the result still equals scipy."""
    A = _matrix(37, 11, 0.3, 5)
    fmt = csr_recipe().inspect(A)
    sch = csr_recipe().tir_schedule()
    (i,) = sch.get_loops(sch.get_sblock("row"))
    io, ii = sch.split(i, factors=[None, 4])
    sch.parallel(io)
    sch.unroll(ii)
    assert "T.parallel" in sch.mod["main"].script()
    B = np.random.default_rng(0).random((11, 6)).astype(np.float32)
    arrays = [fmt.arrays[k] for k in ("offset", "explicit_k", "a_data")]
    np.testing.assert_allclose(_run(sch.mod["main"], arrays, B, 37), A @ B, rtol=1e-5, atol=1e-5)


def _run(func, arrays, B, m):
    import tvm

    ex = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target({"kind": "llvm"}))
    c = np.zeros((m, B.shape[1]), np.float32)
    args = [tvm.runtime.tensor(a) for a in arrays] + [tvm.runtime.tensor(B), tvm.runtime.tensor(c),
                                                      tvm.runtime.tensor(c)]
    ex["main"](*args, 1.0, 0.0)
    return args[-1].numpy()


def test_compact_and_pad_rejects_a_non_injective_map():
    """Projecting k away loses the column: a row's two entries land in one A_prime slot."""
    from schedules.sparse.recipes.recipe import Recipe

    bad = Recipe("bad", (MakeDense(), Project("k"), CompactAndPad(("i",), identity=0, arrays=("data", "col"))))
    bad.nest()                                   # the loop nest itself is still legal
    A = sp.csr_array(np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]], dtype=np.float32))
    with pytest.raises(ScheduleError, match="compact_and_pad.*not injective"):
        bad.inspect(A)
    good = sp.csr_array(np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 3.0]], dtype=np.float32))
    fmt = bad.inspect(good)                      # one entry per row: injective
    assert fmt.arrays["a_col"].tolist() == [0, 2] and fmt.arrays["explicit_i"].tolist() == [0, 1]


@pytest.mark.parametrize("steps, match", [
    ((MakeDense(), CompactAndPad(("k",))), r"compact_and_pad\(k.*identity"),
    ((MakeDense(), MakeDense()), r"make_dense\(j -> k\)"),
    ((Tile("j", 4),), r"tile\(j, 4\).*data-dependent"),
    ((MakeDense(), Permute(("k",))), r"permute\(k\).*not a permutation"),
    ((Normalize("i"),), r"normalize\(i\)"),
    ((MakeDense(), Compact(("k",)), ), None),
    ((MakeDense(), Skew("k", "k", 1)), r"skew\(k, k, 1\).*itself"),
    ((Normalize("j"), CompactAndPad(("i",), identity=0)), r"compact_and_pad\(i.*data-dependent"),
    ((MakeDense(), Tile("i", 2), CompactAndPad(("i",), identity=0, arrays=("data",))), None),
])
def test_bad_steps_raise_schedule_error_naming_the_step(steps, match):
    from schedules.sparse.recipes.recipe import Recipe

    recipe = Recipe("t", steps)
    if match is None:                      # legal: the nest builds
        recipe.nest()
        return
    with pytest.raises(ScheduleError, match=match):
        recipe.nest()


def test_compact_without_carrying_col_is_refused():
    """ELL's positions do not determine the column: compact-and-pad must carry 'col'."""
    from schedules.sparse.recipes.recipe import Recipe
    from schedules.sparse.recipes.steps import Known

    r = Recipe("t", (Normalize("j"), Known("j", "W", 2), CompactAndPad(("i",), identity=0, keep_empty=True)))
    with pytest.raises(ScheduleError, match=r"indices.*arrays=\(\.\.\., 'col'\)"):
        r.nest()
    assert issubclass(ScheduleError, TvmExtError)


def test_nest_from_primfunc_reads_the_uninterpreted_functions():
    nest = nest_from_primfunc(csr_loop_nest("float64", "spmv"))
    assert [lv.name for lv in nest.levels] == ["i", "j"]
    assert str(nest.levels[1].hi) == "indptr[i + 1]" and str(nest.col) == "indices[j]"


def test_sgd_diagonal_counts():
    """|M| + |U| - 1 diagonals for Diag, ceil(|M|/R) + ceil(|U|/C) - 1 for BlkDiag (§6.2)."""
    A = sp.csr_array(np.ones((4, 6), dtype=np.float32))
    assert build_sgd(sgd_diag_recipe(), A, 2).diagonals == 4 + 6 - 1
    assert build_sgd(sgd_blkdiag_recipe(2, 2), A, 2).diagonals == 4 // 2 + 6 // 2 - 1
    B = sp.csr_array(np.ones((5, 7), dtype=np.float32))
    assert build_sgd(sgd_blkdiag_recipe(2, 3), B, 2).diagonals == 3 + 3 - 1


@pytest.mark.parametrize("tiles", [None, (3, 4)])
def test_sgd_sweep_matches_numpy(tiles):
    A = _matrix(23, 31, 0.2, 3)
    recipe = sgd_diag_recipe() if tiles is None else sgd_blkdiag_recipe(*tiles)
    exe = build_sgd(recipe, A, 8)
    rng = np.random.default_rng(1)
    fm, fu = rng.random((23, 8), dtype=np.float32), rng.random((31, 8), dtype=np.float32)
    fm2, fu2 = fm.copy(), fu.copy()
    exe(fm, fu, 0.05, 0.1)
    kw = {} if tiles is None else {"R": tiles[0], "C": tiles[1]}
    sgd_reference(A, fm2, fu2, 0.05, 0.1, **kw)
    np.testing.assert_allclose(fm, fm2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fu, fu2, rtol=1e-5, atol=1e-5)


def test_format_arrays_are_bound_by_role_not_name():
    from schedules.sparse.recipes.nest import BufferRole, Role

    nest = csr_recipe().nest()
    assert nest.roles == {"offset": BufferRole(Role.OFFSET), "explicit_k": BufferRole(Role.EXPLICIT, "k"),
                          "a_data": BufferRole(Role.COPY, "data")}
    src = nest_from_primfunc(csr_loop_nest())
    assert src.roles == {"indptr": BufferRole(Role.SOURCE, "indptr"),
                         "indices": BufferRole(Role.SOURCE, "indices"), "data": BufferRole(Role.SOURCE, "data")}
    A = _matrix(9, 7, 0.3, 1)
    fmt = csr_recipe().inspect(A)
    np.testing.assert_array_equal(fmt.arrays_with(Role.EXPLICIT, "k")[0], A.indices)
    assert fmt.slots == A.nnz and fmt.dtype == np.float32


@settings(max_examples=12, deadline=None)
@given(which=st.sampled_from(["sell", "hyb", "ell_col"]), m=st.integers(0, 45), k=st.integers(0, 30),
       n=st.sampled_from([1, 5, 17]), density=st.sampled_from([0.0, 0.1, 0.4]), seed=st.integers(0, 99),
       C=st.sampled_from([1, 3, 8]), sigma=st.sampled_from([1, 4, 64]), width=st.sampled_from([None, 0, 1, 3]),
       parallel=st.sampled_from([None, True, False]))
def test_sell_hyb_and_column_major_ell_equal_scipy(which, m, k, n, density, seed, C, sigma, width, parallel):
    """Empty rows, empty matrices, chunks that do not divide M, every HYB split width."""
    from schedules.sparse.executors.spec import ExecParams
    from schedules.sparse.recipes.library import ell_col_recipe, hyb_recipe, sell_recipe

    recipe = {"sell": lambda: sell_recipe(C, sigma), "hyb": lambda: hyb_recipe(width),
              "ell_col": ell_col_recipe}[which]()
    A = _matrix(m, k, density, seed) if m and k else sp.csr_array((m, k), dtype=np.float32)
    rng = np.random.default_rng(seed)
    kind = "spmv" if n == 1 else "spmm"
    B = rng.random((k, n) if kind == "spmm" else k).astype(np.float32)
    exe = build_recipe_executor(recipe, A, n, kind=kind, params=ExecParams(parallel=parallel))
    ref = A @ B
    np.testing.assert_allclose(exe(B), ref, rtol=1e-4, atol=1e-4)
    C_in = rng.random(ref.shape).astype(np.float32)
    np.testing.assert_allclose(exe(B, C_in, alpha=2.0, beta=-0.5), 2.0 * ref - 0.5 * C_in, rtol=1e-4, atol=1e-4)


def test_sell_recipe_stores_what_to_sell_stores():
    """Chunks padded to their own longest row, rows sorted inside sigma-windows (as inspectors.to_sell)."""
    from schedules.sparse.inspectors import to_sell
    from schedules.sparse.recipes.library import sell_recipe
    from schedules.sparse.recipes.nest import Role

    A = _matrix(45, 30, 0.15, 3)
    fmt = sell_recipe(4, 8).inspect(A)
    hand = to_sell(A, C=4, sigma=8)
    perm = fmt.arrays_with(Role.PERMUTATION, "i")[0]
    assert sorted(perm.tolist()) == list(range(45))
    lens = np.diff(A.indptr)[perm]
    for w in range(0, 45, 8):          # decreasing length inside each window
        assert (np.diff(lens[w:w + 8]) <= 0).all()
    np.testing.assert_array_equal(np.diff(fmt.arrays_with(Role.OFFSET)[0]), hand.slice_width)
    assert fmt.slots == hand.data.size



@pytest.mark.parametrize("C", [4, 8])
def test_sell_spmm_parts_balance_the_slices_entries_like_the_template(C):
    """SpMM runs every row of a slice over the slice's positions (the position loop is inside the
    row loop): the parallel parts are balanced by the slices' entries, as the template's, so a
    slice holding a long row gets a part of its own; the product stays scipy's."""
    from schedules.sparse.executors.spec import ExecParams
    from schedules.sparse.inspectors import to_sell
    from schedules.sparse.recipes.library import sell_recipe
    from schedules.sparse.recipes.recipe import RecipeKernels
    from tests.sparse_oracles.sell_template import TemplateSELLKernels

    A = _matrix(203, 90, 0.03, 7)
    A = sp.csr_array(A + sp.csr_array((np.ones(80, np.float32), ([5] * 80, range(80))), shape=A.shape))
    recipe = sell_recipe(C, 4 * C)
    fmt, hand = recipe.inspect(A), to_sell(A, C=C, sigma=4 * C)
    kernels, p = RecipeKernels(recipe), ExecParams(parallel=True)
    p = kernels.resolve(fmt, p, "float32", "spmm", 19, None)
    part = kernels.arrays(fmt, p, "spmm", False, 2)[-1]
    tmpl = TemplateSELLKernels()
    tp = tmpl.resolve(hand, tmpl.params_cls(parallel=True), "float32", "spmm", 19, None)
    np.testing.assert_array_equal(part, tmpl.arrays(hand, tp, "spmm", False, 2)[-1])
    assert part[1] == 1                 # the long row's slice alone
    B = np.random.default_rng(2).random((90, 19)).astype(np.float32)
    exe = build_recipe_executor(recipe, A, 19, params=ExecParams(parallel=True), fmt=fmt)
    np.testing.assert_allclose(exe(B), A @ B, rtol=1e-4, atol=1e-4)

def test_hyb_recipe_splits_like_to_hyb():
    from schedules.sparse.inspectors import to_hyb
    from schedules.sparse.recipes.library import hyb_recipe
    from schedules.sparse.recipes.nest import BufferRole, Role

    A = _matrix(40, 40, 0.1, 5)
    A = sp.csr_array(A + sp.csr_array(np.triu(np.ones((40, 40), np.float32))[:3].tolist() + [[0] * 40] * 37))
    for width in (None, 2):
        fmt, hand = hyb_recipe(width).inspect(A), to_hyb(A, width)
        ell, coo = fmt.values
        np.testing.assert_array_equal(ell, hand.ell.data)          # column-major (W, M), same slots
        assert coo.size == hand.coo.data.size > 0
        assert fmt.roles["coo_a_data"] == BufferRole(Role.COPY, "data", part=1)
    row = hyb_recipe(2, layout="row")
    exe = build_recipe_executor(row, A, 9)
    B = np.random.default_rng(1).random((40, 9)).astype(A.dtype)
    np.testing.assert_allclose(exe(B), A @ B, rtol=1e-4, atol=1e-4)
    assert row.inspect(A).values[0].shape == (40, 2)              # row-major ELL part


def test_column_major_ell_has_rows_innermost():
    from schedules.sparse.recipes.library import ell_col_recipe, ell_recipe

    A = _matrix(20, 12, 0.3, 2)
    row, col = ell_recipe().inspect(A), ell_col_recipe().inspect(A)
    np.testing.assert_array_equal(col.values[0], row.values[0].T)
    assert col.values[0].shape == (int(np.diff(A.indptr).max()), 20)


@pytest.mark.parametrize("fmt_name", ["csr", "bcsr", "bcsr33", "coo", "dia", "ell", "ell_col", "hyb", "sell"])
def test_library_executor_is_generated_and_matches_the_template_oracle(fmt_name):
    """The library's executor for a switched format is the recipe's; the hand-written template it
    replaced (tests/sparse_oracles) gives the same result."""
    from schedules.sparse import inspectors as I
    from schedules.sparse.executors import Executor, build_executor

    A = sp.csr_array(sp.diags([1.0, -2.0, 3.0], [-2, 0, 5], shape=(41, 37), dtype=np.float32))
    A = sp.csr_array(A + sp.csr_array((np.ones(9, np.float32), ([3] * 9, range(0, 36, 4))), shape=A.shape))  # a long row
    fmt = {"csr": lambda: I.to_csr(A), "bcsr": lambda: I.to_bcsr(A, 2, 2), "bcsr33": lambda: I.to_bcsr(A, 3, 3),
           "coo": lambda: I.to_coo(A), "dia": lambda: I.to_dia(A, max_fill=1e9),
           "ell": lambda: I.to_ell(A, layout="row"), "ell_col": lambda: I.to_ell(A, layout="col"),
           "hyb": lambda: I.to_hyb(A), "sell": lambda: I.to_sell(A, C=4, sigma=8)}[fmt_name]()
    from bench.sparse_recipes import templates

    oracle = templates()[fmt.name]
    first = {"csr": "offset", "bcsr": "offset", "bcsr33": "offset", "coo": "explicit_i", "dia": "explicit_d", "ell": "a_data", "ell_col": "a_data",
             "hyb": "ell_a_data", "sell": "perm_i"}[fmt_name]
    rng = np.random.default_rng(0)
    for kind, n in (("spmv", 1), ("spmm", 19)):
        B = rng.random((37, n) if kind == "spmm" else 37).astype(np.float32)
        exe = build_executor(fmt, n, kind=kind)
        assert exe.prim_func.params[0].name == first      # the recipe's nest, bound by role
        tmpl = oracle()
        p = tmpl.resolve(fmt, tmpl.params_cls(), "float32", kind, n, None)
        ref = Executor(fmt, tmpl, p, kind, False, None)(B)
        np.testing.assert_allclose(exe(B), ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(exe(B), A @ B, rtol=1e-5, atol=1e-5)


def test_split_takes_the_row_loop_from_the_nest():
    """SplitAt's inspector half finds the loop owning the split range from the nest's bounds
    (whatever it is called); a loop whose range no outer loop owns is a ScheduleError naming the step."""
    import dataclasses

    from tvm import tirx

    from schedules.sparse import transforms as tf
    from schedules.sparse.recipes.nest import Level, subst
    from schedules.sparse.recipes.steps import SplitAt

    A = _matrix(30, 20, 0.3, 4)
    base = nest_from_primfunc(csr_loop_nest("float32", "spmm"))
    split = SplitAt("j", "W", 2)
    assert split.row_loop(base) == "i"
    i, j = base.levels
    r = tirx.Var("r", "int32")                               # the row loop renamed
    renamed = dataclasses.replace(base, levels=(Level(r, i.lo, i.hi),
                                                Level(j.var, subst(j.lo, {i.var: r}), subst(j.hi, {i.var: r}))))
    assert split.row_loop(renamed) == "r"
    space = tf.csr_space(A)
    space_r = dataclasses.replace(space, levels=("r", "j"), coords={"r": space.coords["i"], "j": space.coords["j"]},
                                  bounds={"r": space.bounds["i"], "j": space.bounds["j"]},
                                  exprs={"r": "r", "j": "j"})
    want, got = split.on_space(space, A, base), split.on_space(space_r, A, renamed)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a.pos, b.pos)
    lens = np.diff(A.indptr)
    assert want[0].n == int(np.minimum(lens, 2).sum()) and want[1].n == A.nnz - want[0].n
    with pytest.raises(ScheduleError, match=r"split\(i"):
        SplitAt("i", "W", 2).row_loop(base)


def test_bcsr_spmv_keeps_a_partial_sum_per_block_slot_and_tests_the_edge_once():
    """The generated BCSR 3x3 SpMV on dense 3x3 blocks (K not a multiple of 3, M neither):
    one partial sum per block slot, the block column's range tested once per block (the edge
    block keeps its per-column guard), no row guard inside the block; equals scipy."""
    from schedules.sparse.recipes.library import bcsr_recipe

    rng = np.random.default_rng(3)
    mask = sp.random(9, 7, density=0.4, random_state=4, format="csr")
    A = sp.csr_array(sp.kron(mask, np.ones((3, 3)), format="csr")[:26, :20].astype(np.float32))
    A.data[:] = rng.random(A.nnz).astype(np.float32) + 0.5
    exe = build_recipe_executor(bcsr_recipe(3, 3), A, kind="spmv")
    x = rng.random(20).astype(np.float32)
    np.testing.assert_allclose(exe(x), A @ x, rtol=1e-5, atol=1e-5)
    text = exe.prim_func.script()
    assert "acc[k * 3 + i_1, 0]" in text                       # a partial sum per slot
    assert "explicit_kk[p] * 3 + 2 < K" in text                 # the whole block in range, once
    assert "vi * 3 + i_1 < M" not in text                       # padded rows add 0, never written
