"""DIA's row loop split into edge rows (column guards tested) and interior rows (no guard):
results match scipy for any offsets (interior empty, rows fewer than the band, M != K), and
the interior loop of the generated IR tests no column guard."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schedules.sparse.executors import build_executor
from schedules.sparse.executors.csr import CSRParams
from schedules.sparse.executors.dia import DIAParams, dia_spmm_primfunc, dia_spmv_primfunc
from schedules.sparse.formats import DIA
from schedules.sparse.recipes.interior_split import interior_bounds
from schedules.sparse.recipes.library import csr_recipe, dia_recipe
from schedules.sparse.recipes.lower import simplify_guards
from schedules.sparse.recipes.recipe import build_recipe_executor


def _dia(m: int, k: int, offsets, dtype, rng) -> tuple[DIA, sp.csr_array]:
    offs = np.unique(np.asarray(offsets, np.int32))
    data = rng.standard_normal((offs.size, m)).astype(dtype)
    rows = np.arange(m)
    for d, o in enumerate(offs):            # slots outside the matrix hold zeros, as stored
        data[d, (rows + o < 0) | (rows + o >= k)] = 0
    dense = np.zeros((m, k), dtype)
    for d, o in enumerate(offs):
        for i in range(m):
            if 0 <= i + o < k:
                dense[i, i + o] = data[d, i]
    return DIA((m, k), offs, data), sp.csr_array(dense)


@st.composite
def _cases(draw):
    m = draw(st.integers(1, 40))
    k = draw(st.integers(1, 40))
    offsets = draw(st.lists(st.integers(-(m - 1), k - 1), min_size=1, max_size=6))   # the container's range
    return m, k, offsets, draw(st.sampled_from(["float32", "float64"])), draw(st.booleans()), \
        draw(st.sampled_from([1, 3, 8])), draw(st.integers(0, 2**16))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cases())
def test_dia_matches_scipy_for_any_offsets(case):
    """Offsets beyond the matrix (empty interior), bands wider than the rows, M != K: the edge
    and interior rows together give scipy's product, serial and parallel, SpMM and SpMV."""
    m, k, offsets, dtype, parallel, n, seed = case
    rng = np.random.default_rng(seed)
    fmt, A = _dia(m, k, offsets, dtype, rng)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    B = rng.standard_normal((k, n)).astype(dtype)
    exe = build_executor(fmt, n, params=DIAParams(parallel=parallel))
    np.testing.assert_allclose(exe(B), A @ B, **tol)
    x = B[:, 0].copy()
    spmv = build_executor(fmt, kind="spmv", params=DIAParams(parallel=parallel))
    np.testing.assert_allclose(spmv(x), A @ x, **tol)


@pytest.mark.parametrize("m,k,offsets", [(50, 50, [-7, -1, 0, 1, 7]), (30, 45, [-29, 0, 44]),
                                         (9, 9, [-8, 8])])
def test_dia_claimed_parts_match_scipy(m, k, offsets):
    """Parts claimed at run time (dynamic) split each claimed part's rows the same way."""
    rng = np.random.default_rng(0)
    fmt, A = _dia(m, k, offsets, "float32", rng)
    exe = build_recipe_executor(dia_recipe(), A, 8, params=CSRParams(parallel=True, dynamic=True))
    B = rng.standard_normal((k, 8)).astype("float32")
    np.testing.assert_allclose(exe(B), A @ B, rtol=1e-4, atol=1e-4)


_CHILDREN = ("body", "seq", "then_case", "else_case", "block", "init", "condition", "a", "b",
             "indices", "value", "args", "true_value", "false_value", "min", "extent")


def _walk(node, visit):
    """``visit`` every TIR statement and expression under ``node`` (pre-order)."""
    visit(node)
    for name in _CHILDREN:
        child = getattr(node, name, None) if not isinstance(node, (list, tuple)) else None
        if child is None or isinstance(child, (int, float, str)):
            continue
        for c in (child if hasattr(child, "__len__") and not hasattr(child, "dtype") else [child]):
            if c is not None and not isinstance(c, (int, float, str)):
                _walk(c, visit)


def _row_loops(func):
    """``(loop, guarded)`` for each loop over rows ``i``: guarded when an ``if`` inside it
    tests a column against ``K`` (B's rows, the size variable of that name)."""
    from tvm import tirx

    found = []

    def visit(node):
        if isinstance(node, tirx.For) and node.loop_var.name == "i":
            hits = []

            def inner(n):
                if isinstance(n, tirx.IfThenElse):
                    _walk(n.condition, lambda e: hits.append(e) if isinstance(e, tirx.Var) and e.name == "K" else None)
            _walk(node.body, inner)
            found.append((node.min, bool(hits)))
    _walk(func.body, visit)
    return found


@pytest.mark.parametrize("kind", ["spmm", "spmv"])
def test_interior_rows_run_unguarded(kind):
    """The generated DIA kernel has edge-row loops with the column guard and one interior-row
    loop without it."""
    func = (dia_spmm_primfunc(DIAParams(parallel=True), "float32", n_cols=8) if kind == "spmm"
            else dia_spmv_primfunc(DIAParams(parallel=True), "float32"))
    loops = _row_loops(func)
    assert [g for _, g in loops].count(False) == 1, loops
    assert any(g for _, g in loops)


def test_only_index_guards_on_the_row_split():
    """DIA's two column guards bound the row through one offset read; CSR has none."""
    nest = dia_recipe().nest("float32", "spmm")
    _, split, rest, _ = interior_bounds(nest, nest.levels[0], simplify_guards(nest, nest.guards))
    assert sorted(upper for _, upper, _, _ in split) == [False, True] and rest == []
    csr = csr_recipe().nest()
    assert interior_bounds(csr, csr.levels[0], simplify_guards(csr, csr.guards)) is None
