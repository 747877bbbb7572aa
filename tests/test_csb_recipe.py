"""CSB's executor generated from its recipe (``executors.csb`` on ``recipes.scatter``): A @ B,
A.T @ B and the symmetric-half product against scipy and against the hand-written template
it replaced (``tests/sparse_oracles/csb_template.py``), and its errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedules.sparse import inspectors as I
from schedules.sparse.executors import CSBKernels, CSBParams, Executor, build_executor
from schedules.sparse.formats import CSB
from tests.sparse_oracles.csb_template import TemplateCSBKernels
from tvm_ext.errors import ConfigError, InputError, ScheduleError, ShapeError

SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tol(dtype):
    return {"rtol": 1e-4, "atol": 1e-4} if dtype == "float32" else {"rtol": 1e-10, "atol": 1e-10}


def _matrix(m, k, density, dtype, seed, empty_rows=()):
    A = sp.random(m, k, density=density, format="csr", dtype=dtype, random_state=seed)
    A = A.tolil()
    for r in empty_rows:
        if r < m:
            A[r, :] = 0
    return sp.csr_array(A.tocsr(), dtype=dtype)


def _symmetric(m, density, dtype, seed):
    A = sp.random(m, m, density=density, format="csr", dtype=dtype, random_state=seed)
    return sp.csr_array(A + A.T + sp.identity(m, dtype=dtype, format="csr"), dtype=dtype)


def _dense(rows, n, dtype, seed):
    x = np.random.default_rng(seed).uniform(-1, 1, (rows, n)).astype(dtype)
    return x[:, 0].copy() if n == 1 else x


def _exe(fmt, n, transpose=False, parallel=None):
    kind = "spmv" if n == 1 else "spmm"
    return build_executor(fmt, n_cols=n, kind=kind, transpose=transpose, params=CSBParams(parallel=parallel))


@SETTINGS
@given(m=st.integers(1, 40), k=st.integers(1, 40), beta=st.sampled_from([1, 3, 4, 8, 16, 64]),
       density=st.sampled_from([0.0, 0.05, 0.3]), dtype=st.sampled_from(["float32", "float64"]),
       n=st.sampled_from([1, 3, 17]), transpose=st.booleans(), parallel=st.sampled_from([None, True, False]),
       seed=st.integers(0, 1000))
def test_generated_csb_matches_scipy(m, k, beta, density, dtype, n, transpose, parallel, seed):
    A = _matrix(m, k, density, dtype, seed, empty_rows=(0, m // 2))
    fmt = I.to_csb(A, beta)
    exe = _exe(fmt, n, transpose, parallel)
    op = A.T if transpose else A
    B = _dense(op.shape[1], n, dtype, seed)
    np.testing.assert_allclose(exe(B), op @ B, **_tol(dtype))
    C = _dense(op.shape[0], n, dtype, seed + 1)
    np.testing.assert_allclose(exe(B, C, alpha=-0.5, beta=2.0), -0.5 * (op @ B) + 2.0 * C, **_tol(dtype))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.integers(1, 40), beta=st.sampled_from([1, 4, 7, 16]), dtype=st.sampled_from(["float32", "float64"]),
       n=st.sampled_from([1, 5, 16]), transpose=st.booleans(), parallel=st.sampled_from([None, True]),
       seed=st.integers(0, 1000))
def test_generated_csb_symmetric_half_matches_scipy(m, beta, dtype, n, transpose, parallel, seed):
    S = _symmetric(m, 0.2, dtype, seed)
    fmt = I.to_csb(S, beta, symmetric_half=True)
    assert fmt.data.size <= S.nnz
    exe = _exe(fmt, n, transpose, parallel)   # A.T is A: the same two passes
    B = _dense(m, n, dtype, seed)
    np.testing.assert_allclose(exe(B), S @ B, **_tol(dtype))
    C = _dense(m, n, dtype, seed + 1)
    np.testing.assert_allclose(exe(B, C, alpha=2.0, beta=-1.0), 2.0 * (S @ B) - C, **_tol(dtype))


@pytest.mark.parametrize("case", ["A", "A.T", "sym"])
@pytest.mark.parametrize("n", [1, 8, 19])
def test_generated_csb_equals_the_template_oracle(case, n):
    if case == "sym":
        S = _symmetric(300, 0.02, "float32", 3)
        fmt, rows = I.to_csb(S, 64, symmetric_half=True), 300
    else:
        A = _matrix(300, 250, 0.02, "float32", 4, empty_rows=(5, 299))
        fmt = I.to_csb(A, 64)
        rows = 300 if case == "A.T" else 250
    transpose = case == "A.T"
    kind = "spmv" if n == 1 else "spmm"
    gen = _exe(fmt, n, transpose, parallel=True)
    k = TemplateCSBKernels()
    k.check(fmt)
    p = k.resolve(fmt, CSBParams(parallel=True), "float32", kind, n, None)
    hand = Executor(fmt, k, p, kind, transpose, None)
    B = _dense(rows, n, "float32", 9)
    np.testing.assert_allclose(gen(B), hand(B), rtol=1e-5, atol=1e-5)


def test_empty_matrix_and_empty_block_rows():
    A = sp.csr_array((70, 33), dtype=np.float32)
    fmt = I.to_csb(A, 16)
    B = _dense(33, 4, "float32", 0)
    C = _dense(70, 4, "float32", 1)
    np.testing.assert_array_equal(_exe(fmt, 4)(B), np.zeros((70, 4), np.float32))
    np.testing.assert_allclose(_exe(fmt, 4, parallel=True)(B, C, beta=3.0), 3.0 * C, rtol=1e-6)
    Bt = _dense(70, 4, "float32", 2)
    np.testing.assert_array_equal(_exe(fmt, 4, transpose=True, parallel=True)(Bt), np.zeros((33, 4), np.float32))


def test_offsets_bound_as_uint16_and_kernel_keyed_on_block_size():
    A = _matrix(50, 40, 0.1, "float32", 5)
    exes = {beta: _exe(I.to_csb(A, beta), 8, parallel=True) for beta in (8, 16)}
    for beta, exe in exes.items():
        f = exe.prim_func
        assert [str(b.dtype) for b in f.params[1:3]] == ["uint16", "uint16"]
        # beta reaches the kernel as its int32 argument after C_out, not as a constant in the loops
        assert [p.name for p in f.params][-3:] == ["tile_size", "alpha", "beta"]
        assert "* tile_size + T.Cast" in f.script() and f"* {beta} + T.Cast" not in f.script()
        assert CSBKernels().scalars(exe.format, False) == [beta]
        np.testing.assert_allclose(exe(_dense(40, 8, "float32", 0)), A @ _dense(40, 8, "float32", 0),
                                   **_tol("float32"))
    assert exes[8].signature != exes[16].signature
    assert _exe(I.to_csb(A, 8), 8, parallel=True).signature == exes[8].signature


def test_transpose_runs_the_column_tile_loop_in_parallel():
    from schedules.sparse.executors.csb import csb_spmm_primfunc

    text = csb_spmm_primfunc(CSBParams(lanes=8, unroll=1, parallel=True), transpose=True, block_size=32).script()
    outer = text.index("T.parallel")
    assert text.index("for ll in", outer) < text.index("for ii in", outer)


def test_bad_csb_inputs_raise_clear_errors():
    S = _symmetric(12, 0.3, "float32", 1)
    fmt = I.to_csb(S, 4)
    with pytest.raises(ShapeError, match="square"):
        build_executor(CSB((12, 13), 4, np.zeros(13, np.int32), np.zeros(0, np.uint16), np.zeros(0, np.uint16),
                           np.zeros(0, np.float32), symmetric_half=True))
    full_as_half = CSB(fmt.shape, fmt.beta, fmt.blk_ptr, fmt.row_off, fmt.col_off, fmt.data, symmetric_half=True)
    with pytest.raises(InputError, match="lower triangle"):
        build_executor(full_as_half)
    bad_off = fmt.row_off.copy()
    bad_off[0] = 4
    with pytest.raises(InputError, match="row_off"):
        build_executor(CSB(fmt.shape, fmt.beta, fmt.blk_ptr, bad_off, fmt.col_off, fmt.data))
    with pytest.raises(InputError, match="uint16"):
        build_executor(CSB(fmt.shape, fmt.beta, fmt.blk_ptr, fmt.row_off.astype(np.int32), fmt.col_off, fmt.data))
    with pytest.raises(InputError, match="beta"):
        build_executor(CSB(fmt.shape, 0, fmt.blk_ptr, fmt.row_off, fmt.col_off, fmt.data))
    with pytest.raises(ConfigError, match="transpose"):
        build_executor(I.to_coo(S), transpose=True)


def test_transposing_a_nest_without_column_tiles_is_a_schedule_error():
    from schedules.sparse.recipes.library import coo_recipe
    from schedules.sparse.recipes.scatter import scatter_op_primfunc, transposed

    with pytest.raises(ScheduleError, match="column tiles"):
        transposed(coo_recipe().nest())
    from schedules.sparse.recipes.library import csb_recipe
    from schedules.sparse.recipes.schedule import MicroKernel

    with pytest.raises(ScheduleError, match="op must be"):
        scatter_op_primfunc(csb_recipe(8).nest(), MicroKernel(8, 1, True), "A.H")


def test_recipe_stores_in_block_offsets_as_uint16_and_checks_the_loop_range():
    from schedules.sparse.recipes import build_recipe_executor
    from schedules.sparse.recipes.library import csb_recipe
    from schedules.sparse.recipes.recipe import Recipe
    from schedules.sparse.recipes.steps import CompactAndPad, MakeDense

    A = _matrix(30, 20, 0.2, "float32", 2)
    gen = csb_recipe(8).inspect(A)
    assert [str(gen.arrays[n].dtype) for n in ("explicit_i", "explicit_l")] == ["uint16", "uint16"]
    B = _dense(20, 3, "float32", 1)
    np.testing.assert_allclose(build_recipe_executor(csb_recipe(8), A, 3, fmt=gen)(B), A @ B, **_tol("float32"))
    with pytest.raises(ScheduleError, match="constant extent of at most 65536"):
        csb_recipe(70000).nest()
    with pytest.raises(ScheduleError, match="constant extent"):   # the row loop runs over M
        Recipe("x", (MakeDense(), CompactAndPad(("i", "k"), identity=0, index_dtype="uint16"))).nest()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.sampled_from([(4, 8), (8, 4), (3, 3), (1, 5)]), m=st.integers(1, 30), k=st.integers(1, 30),
       n=st.sampled_from([1, 5]), parallel=st.sampled_from([None, True, False]), seed=st.integers(0, 100))
def test_rectangular_block_tiles_each_read_their_size_at_run_time(sizes, m, k, n, parallel, seed):
    """A CSB-like recipe with different row and column tile sizes: each distinct size is one
    int32 argument (ascending), the products equal scipy's."""
    from schedules.sparse.recipes import build_recipe_executor
    from schedules.sparse.recipes.recipe import Recipe
    from schedules.sparse.recipes.schedule import Scatter
    from schedules.sparse.recipes.steps import CompactAndPad, MakeDense, Permute, Tile

    bi, bl = sizes
    recipe = Recipe(f"blocks{bi}x{bl}", (MakeDense(name="l"), Tile("i", bi), Tile("l", bl),
                                         Permute(("ii", "ll", "i", "l")), CompactAndPad(("i", "l"), identity=0)),
                    (Scatter(),))
    assert recipe.scalars() == sorted({bi, bl})
    A = _matrix(m, k, 0.2, "float32", seed, empty_rows=(0,))
    kind = "spmv" if n == 1 else "spmm"
    exe = build_recipe_executor(recipe, A, n, kind=kind, params=CSBParams(parallel=parallel))
    names = [p.name for p in exe.prim_func.params]
    assert names[names.index("C_out") + 1:] == (["tile_size"] if bi == bl else ["tile_size0", "tile_size1"]) \
        + ["alpha", "beta"]
    B = _dense(k, n, "float32", seed)
    np.testing.assert_allclose(exe(B), A @ B, **_tol("float32"))


def test_tile_free_scatter_nests_take_no_size_arguments():
    from schedules.sparse.recipes.library import coo_recipe
    from schedules.sparse.recipes.scatter import runtime_tile_sizes

    nest = coo_recipe().nest()
    assert runtime_tile_sizes(nest) is nest and coo_recipe().scalars() == []
