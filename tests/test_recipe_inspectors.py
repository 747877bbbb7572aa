"""The compiled TIR inspectors of the recipes (recipes.inspector_tir) and the measured choice."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.sparse.recipes import RECIPES, build_recipe_executor
from schedules.sparse.recipes.inspector_choice import DECISIONS, RecipeInspector
from schedules.sparse.recipes.inspector_tir import compiled_recipe, stable_order
from schedules.sparse.recipes.library import bcsr_recipe, csb_recipe, sdia_recipe, sell_recipe
from schedules.sparse.recipes.recipe import Recipe
from schedules.sparse.recipes.steps import CompactAndPad, MakeDense, Project
from tvm_ext.errors import InputError, ScheduleError
from sparse_helpers import random_csr_with_empty_row as _matrix

#: Recipes with knobs that make tiles not divide the matrix, besides the library defaults.
_VARIANTS = {"bcsr3x2": lambda: bcsr_recipe(3, 2), "csb5": lambda: csb_recipe(5), "sdia3": lambda: sdia_recipe(3),
             "sell4x8": lambda: sell_recipe(4, 8)}
_ALL = {**{n: f for n, f in RECIPES.items()}, **_VARIANTS}


def _same_format(a, b) -> None:
    assert list(a.arrays) == list(b.arrays)
    for name in a.arrays:
        x, y = a.arrays[name], b.arrays[name]
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    assert a.meta.keys() == b.meta.keys()
    for key in ("sizes", "history", "parts"):
        assert str(a.meta.get(key)) == str(b.meta.get(key)), key


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(_ALL)), m=st.integers(0, 50), k=st.integers(0, 40),
       density=st.sampled_from([0.0, 0.05, 0.3, 1.0]), seed=st.integers(0, 1000))
def test_compiled_inspector_gives_the_numpy_arrays(name, m, k, density, seed):
    recipe = _ALL[name]()
    A = _matrix(m, k, density, seed)
    _same_format(recipe.inspect(A), compiled_recipe(recipe).inspect(A))


@pytest.mark.parametrize("factory", [lambda: bcsr_recipe(3, 2), lambda: csb_recipe(64)], ids=["bcsr3x2", "csb64"])
def test_compiled_inspector_on_a_large_matrix(factory):
    """20k rows: BCSR's block rows are in entry order (the segmented kernel, many chunks); CSB's
    (block row, block column) key is not, and spans 29 bits (three radix passes)."""
    rng = np.random.default_rng(7)
    rows, cols = rng.integers(0, 20000, 120_000), rng.integers(0, 20000, 120_000)
    A = sp.csr_array(sp.coo_array((rng.random(120_000), (rows, cols)), shape=(20000, 20000)))
    recipe = factory()
    _same_format(recipe.inspect(A), compiled_recipe(recipe).inspect(A))


@pytest.mark.parametrize("name", ["bcsr", "dia", "csb", "ell_col", "sell"])
def test_executor_on_the_compiled_inspection_equals_scipy(name):
    A = _matrix(37, 29, 0.2, 3)
    fmt = RECIPES[name]().inspector("tir")(A)
    B = np.random.default_rng(0).random((29, 5)).astype(np.float32)
    exe = build_recipe_executor(RECIPES[name](), A, 5, fmt=fmt)
    np.testing.assert_allclose(exe(B), A @ B, rtol=1e-4, atol=1e-4)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(0, 3000), bits=st.integers(1, 40), seed=st.integers(0, 100))
def test_stable_order_is_numpys_stable_argsort(n, bits, seed):
    key = np.random.default_rng(seed).integers(0, 1 << bits, n).astype(np.int64)
    got = stable_order(key, 1 << bits)
    order = np.argsort(key, kind="stable")
    if got is None:
        assert np.array_equal(order, np.arange(n))
    else:
        assert np.array_equal(got[0], order) and np.array_equal(got[1], key[order])


def test_compiled_compact_and_pad_rejects_a_non_injective_map():
    bad = Recipe("bad", (MakeDense(), Project("k"), CompactAndPad(("i",), identity=0, arrays=("data", "col"))))
    A = sp.csr_array(np.array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]], dtype=np.float32))
    with pytest.raises(ScheduleError, match="compact_and_pad.*not injective"):
        bad.inspector("tir")(A)
    good = sp.csr_array(np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 3.0]], dtype=np.float32))
    assert bad.inspector("tir")(good).arrays["a_col"].tolist() == [0, 2]


def test_collision_found_across_parallel_chunks():
    """100k entries (several chunks of the marker kernel): one row of two entries is caught."""
    bad = Recipe("bad", (MakeDense(), Project("k"), CompactAndPad(("i",), identity=0, arrays=("data", "col"))))
    m = 100_000
    rows, cols = np.arange(m), np.arange(m) % 7
    rows, cols = np.append(rows, 77_777), np.append(cols, 9)         # a second entry in row 77777
    A = sp.csr_array(sp.coo_array((np.ones(m + 1, np.float32), (rows, cols)), shape=(m, 10)))
    with pytest.raises(ScheduleError, match="not injective.*A\\[77777"):
        bad.inspector("tir")(A)
    ok = sp.csr_array(sp.coo_array((np.ones(m, np.float32), (rows[:m], cols[:m])), shape=(m, 10)))
    _same_format(bad.inspect(ok), bad.inspector("tir")(ok))


def test_auto_measures_once_per_size_class_then_reuses_the_decision():
    recipe = bcsr_recipe(2, 2)
    DECISIONS.clear()
    insp = recipe.inspector("auto")
    A = _matrix(300, 300, 0.05, 1)
    first = insp(A)
    assert insp.last.measured and set(insp.last.times) == {"numpy", "tir"}
    assert insp.last.chosen == min(insp.last.times, key=insp.last.times.get)
    assert insp.last.chosen in insp.last.explain()
    chosen = insp.last.chosen
    second = insp(_matrix(300, 300, 0.05, 2))        # same size class: no second measurement
    assert not insp.last.measured and insp.last.chosen == chosen and set(insp.last.times) == {chosen}
    _same_format(first, recipe.inspect(A))
    assert second.shape == (300, 300)


def test_bad_inspector_kind_is_an_input_error():
    with pytest.raises(InputError, match="inspector kind"):
        RECIPES["csr"]().inspector("fast")
