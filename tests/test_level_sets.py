"""Dependence inspector and level sets (Venkat 2016 ch. 7, Listing 7.3)."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.sparse.level_sets import dependence_graph, level_sets, permute_csr
from tvm_ext.errors import InputError, ShapeError
from tvm_ext.workloads import lap2d, lap3d


def random_square(n: int, density: float, seed: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    A = sp.random_array((n, n), density=density, rng=rng, format="csr")
    return sp.csr_array(A + sp.diags_array(np.full(n, 3.0)))


def reference_edges(A, lower: bool) -> set[tuple[int, int]]:
    """(src, dst) pairs from every off-diagonal entry, lower->higher index (or reversed)."""
    rows, cols = np.nonzero(sp.csr_array(A).toarray())
    edges = set()
    for r, c in zip(rows.tolist(), cols.tolist()):
        if r != c:
            lo, hi = min(r, c), max(r, c)
            edges.add((lo, hi) if lower else (hi, lo))
    return edges


def reference_levels(n: int, edges: set[tuple[int, int]], lower: bool) -> np.ndarray:
    """Longest-path depth by a plain Python topological pass (Kahn layering)."""
    preds = {i: [] for i in range(n)}
    for s, d in edges:
        preds[d].append(s)
    level = np.zeros(n, dtype=np.int64)
    order = range(n) if lower else range(n - 1, -1, -1)
    for i in order:
        level[i] = max((level[j] + 1 for j in preds[i]), default=0)
    return level


# ----------------------------------------------------------------- dissertation checks
@pytest.mark.parametrize("n", [2, 7, 16, 31])
def test_lap2d_5pt_has_2n_minus_1_levels(n):
    s = level_sets(lap2d(n))
    assert s.levels == 2 * n - 1
    assert s.rows_per_level["max"] == n and s.rows_per_level["min"] == 1
    assert s.parallelism == pytest.approx(n * n / (2 * n - 1))


@pytest.mark.parametrize("n", [2, 5, 9])
def test_lap3d_7pt_has_3n_minus_2_levels(n):
    assert level_sets(lap3d(n)).levels == 3 * n - 2


@pytest.mark.parametrize("lower", [True, False])
def test_lap2d_levels_are_anti_diagonals(lower):
    n = 9
    s = level_sets(lap2d(n), lower=lower)
    i, j = np.divmod(np.arange(n * n), n)
    expected = i + j if lower else (n - 1 - i) + (n - 1 - j)
    np.testing.assert_array_equal(s.level_of, expected)


# ----------------------------------------------------------------- graph
@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 25), density=st.floats(0.0, 0.4), seed=st.integers(0, 10_000),
       lower=st.booleans())
def test_dependence_graph_matches_bruteforce(n, density, seed, lower):
    A = random_square(n, density, seed)
    g = dependence_graph(A, lower=lower)
    got = {(int(s), i) for i in range(n) for s in g.predecessors(i)}
    assert got == reference_edges(A, lower)
    assert g.n_edges == len(got)
    for i in range(n):
        p = g.predecessors(i)
        assert np.all(np.diff(p) > 0)  # sorted, no duplicates
        assert np.all(p < i) if lower else np.all(p > i)


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 30), density=st.floats(0.0, 0.4), seed=st.integers(0, 10_000),
       lower=st.booleans())
def test_dependence_graph_of_symmetric_patterns_matches_bruteforce(n, density, seed, lower):
    # structurally symmetric: the row-parallel TIR kernels alone build the graph
    B = random_square(n, density, seed)
    A = sp.csr_array(B + B.T)
    g = dependence_graph(A, lower=lower)
    got = {(int(s), i) for i in range(n) for s in g.predecessors(i)}
    assert got == reference_edges(A, lower) and g.n_edges == len(got)


def test_dependence_graph_is_linear_in_nnz():
    A = lap2d(40)
    g = dependence_graph(A)
    # a symmetric pattern gives each off-diagonal pair once: (nnz - n) / 2 edges
    assert g.n_edges == (A.nnz - A.shape[0]) // 2


# ----------------------------------------------------------------- level sets
@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 30), density=st.floats(0.0, 0.3), seed=st.integers(0, 10_000),
       lower=st.booleans())
def test_level_sets_match_reference_and_respect_dependences(n, density, seed, lower):
    A = random_square(n, density, seed)
    s = level_sets(A, lower=lower)
    edges = reference_edges(A, lower)
    ref = reference_levels(n, edges, lower)
    np.testing.assert_array_equal(s.level_of, ref)
    assert s.levels == int(ref.max()) + 1
    for src, dst in edges:  # a schedule: every edge goes to a strictly later level
        assert s.level_of[src] < s.level_of[dst]
    # rows grouped by level, stable in the original index
    np.testing.assert_array_equal(np.sort(s.perm), np.arange(n))
    np.testing.assert_array_equal(s.perm, np.argsort(ref, kind="stable"))
    np.testing.assert_array_equal(s.iperm[s.perm], np.arange(n))
    np.testing.assert_array_equal(np.diff(s.level_ptr), np.bincount(ref))
    for lv in range(s.levels):
        rows = s.perm[s.level_ptr[lv]:s.level_ptr[lv + 1]]
        assert np.all(s.level_of[rows] == lv)
    # P A P^T with sorted indices
    dense = A.toarray()
    np.testing.assert_array_equal(s.matrix.toarray(), dense[s.perm][:, s.perm])
    assert s.matrix.has_sorted_indices
    assert all(np.all(np.diff(s.matrix.indices[s.matrix.indptr[r]:s.matrix.indptr[r + 1]]) > 0)
               for r in range(n))


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 60), density=st.floats(0.0, 0.3), seed=st.integers(0, 10_000),
       lower=st.booleans(), symmetric=st.booleans())
def test_frontier_levels_equal_the_serial_pass_and_the_reference(n, density, seed, lower,
                                                                 symmetric):
    A = random_square(n, density, seed)
    if symmetric:
        A = sp.csr_array(A + A.T)
    serial = level_sets(A, lower=lower)
    frontier = level_sets(A, lower=lower, method="frontier")
    parallel = level_sets(A, lower=lower, method="parallel")
    ref = reference_levels(n, reference_edges(A, lower), lower)
    for s in (serial, frontier, parallel):
        np.testing.assert_array_equal(s.level_of, ref)
        np.testing.assert_array_equal(s.perm, serial.perm)
        np.testing.assert_array_equal(s.level_ptr, serial.level_ptr)


@pytest.mark.parametrize("A", [lap2d(30), lap3d(8, 27)], ids=["lap2d", "lap3d27"])
def test_frontier_levels_on_stencils(A):
    serial = level_sets(A)
    for method in ("frontier", "parallel"):
        s = level_sets(A, method=method)
        np.testing.assert_array_equal(s.level_of, serial.level_of)
        np.testing.assert_array_equal(s.perm, serial.perm)
    with pytest.raises(InputError, match="method"):
        level_sets(A, method="bfs")


def test_chain_is_fully_serial_and_diagonal_fully_parallel():
    n = 12
    chain = sp.csr_array(np.eye(n) * 2 + np.eye(n, k=-1))
    s = level_sets(chain)
    assert s.levels == n and s.parallelism == 1.0
    d = level_sets(sp.diags_array(np.arange(1.0, n + 1), format="csr"))
    assert d.levels == 1 and d.rows_per_level["max"] == n
    np.testing.assert_array_equal(d.perm, np.arange(n))


def test_vector_order_round_trip():
    s = level_sets(lap2d(5))
    v = np.arange(25.0)
    np.testing.assert_array_equal(s.from_level_order(s.to_level_order(v)), v)
    np.testing.assert_array_equal(s.to_level_order(v), v[s.perm])


def test_inspector_reports_stage_times():
    s = level_sets(lap2d(20))
    assert set(s.seconds) == {"graph", "levels", "reorder"}
    assert s.inspector_seconds == pytest.approx(sum(s.seconds.values()))
    assert all(t >= 0 for t in s.seconds.values())


def test_permute_csr_matches_fancy_indexing():
    A = random_square(40, 0.1, 3)
    perm = np.random.default_rng(1).permutation(40).astype(np.int32)
    B = permute_csr(sp.csr_array(A), perm)
    np.testing.assert_array_equal(B.toarray(), A.toarray()[perm][:, perm])


# ----------------------------------------------------------------- input handling
def test_empty_matrix():
    s = level_sets(sp.csr_array((0, 0)))
    assert s.levels == 0 and s.level_ptr.tolist() == [0] and s.perm.size == 0
    assert s.rows_per_level["max"] == 0


def test_unsorted_and_duplicate_entries_are_canonicalised():
    rows = np.array([2, 0, 1, 2, 2, 1, 0])
    cols = np.array([0, 0, 1, 2, 0, 0, 0])   # (2,0) twice, (0,0) twice
    vals = np.arange(1.0, 8.0)
    A = sp.coo_array((vals, (rows, cols)), shape=(3, 3))
    s = level_sets(A)
    dense = A.toarray()
    np.testing.assert_array_equal(s.matrix.toarray(), dense[s.perm][:, s.perm])
    assert s.levels == 2   # rows 1 and 2 both wait only for row 0


def test_non_square_raises_shape_error():
    with pytest.raises(ShapeError, match="square"):
        level_sets(sp.csr_array(np.ones((3, 4))))


def test_nan_raises_input_error():
    A = sp.csr_array(np.array([[1.0, np.nan], [0.0, 1.0]]))
    with pytest.raises(InputError, match="non-finite"):
        level_sets(A)


def test_dependence_graph_ignores_values_but_not_shape():
    A = sp.csr_array(np.array([[1.0, np.nan], [0.0, 1.0]]))
    assert dependence_graph(A).n_edges == 1   # structure only: NaN is fine here
    with pytest.raises(ShapeError):
        dependence_graph(sp.csr_array(np.ones((2, 3))))


def test_permute_csr_rejects_non_permutations():
    A = sp.csr_array(np.eye(3))
    with pytest.raises(InputError, match="not a permutation"):
        permute_csr(A, np.array([0, 0, 1]))
    with pytest.raises(InputError, match="not a permutation"):
        permute_csr(A, np.array([0, 1, 3]))
    with pytest.raises(InputError, match="3 integers"):
        permute_csr(A, np.array([0, 1]))
    with pytest.raises(InputError, match="3 integers"):
        permute_csr(A, np.array([0.0, 1.0, 2.0]))
