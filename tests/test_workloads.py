"""Bundled matrices, generators, validation, statistics and the seeds' tables."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tvm_ext.errors import InputError, ShapeError
from tvm_ext.workloads import (
    DEEPBENCH_GEMM, DEEPBENCH_GRU, GOGETA_TABLE2, GOGETA_TABLE4, MOBILENET_V1_SEPARABLE,
    RESNET50_CONV, SEXTANS_N_SWEEP, banded, block_fem, block_fill, canonical_csr,
    check_dense_operand, lap2d, lap3d, list_matrices, load_matrix, make_spd, matrix_stats,
    resolve_matrix, rmat, uniform_random,
)
from tvm_ext.workloads.stats import SELECTOR_BLOCK_SIZES, estimate_block_fill


def _is_canonical(A) -> bool:
    return (isinstance(A, sp.csr_array) and A.has_sorted_indices
            and A.indices.dtype == np.int32 and A.indptr.dtype == np.int32
            and A.nnz == sp.coo_array(A).tocsr().nnz)


# --- bundled -----------------------------------------------------------------

def test_list_matrices_names_the_bundled_files():
    assert set(list_matrices()) == {"nasa4704", "cora", "LFAT5"}


def test_nasa4704_expands_to_gogeta_table2_nnz():
    A = load_matrix("nasa4704")
    assert A.shape == (4704, 4704)
    assert A.nnz == GOGETA_TABLE2["nasa4704"].nnz == 104_756
    assert (A != A.T).nnz == 0 and _is_canonical(A)


def test_cora_and_lfat5_load_symmetric():
    for name, n in (("cora", 2708), ("LFAT5", 14)):
        A = load_matrix(name, dtype="float32")
        assert A.shape == (n, n) and A.dtype == np.float32
        assert abs(A - A.T).max() == 0


def test_lfat5_is_spd():
    assert np.linalg.eigvalsh(load_matrix("LFAT5").toarray()).min() > 0


def test_unknown_name_is_a_clear_error():
    with pytest.raises(InputError, match="nasa4704"):
        load_matrix("nasa9999")
    with pytest.raises(InputError, match="neither a bundled matrix"):
        resolve_matrix("no/such/file.mtx")


# --- generators ----------------------------------------------------------------

def test_lap2d_1000_has_ecology1_size():
    A = lap2d(1000)
    assert A.shape == (1_000_000, 1_000_000) and A.nnz == GOGETA_TABLE2["ecology1"].nnz


@pytest.mark.parametrize("make, diag, nnz", [
    (lambda: lap2d(5, 5), 4, 5 * 25 - 4 * 5),
    (lambda: lap2d(5, 9), 8, 9 * 25 - 2 * 3 * 5 * 2 + 4 - 0),
    (lambda: lap3d(4, 7), 6, 7 * 64 - 6 * 16),
    (lambda: lap3d(4, 27), 26, 10 ** 3),
])
def test_stencils_match_their_dense_definition(make, diag, nnz):
    A = make()
    D = A.toarray()
    assert np.all(np.diag(D) == diag)
    off = D - np.diag(np.diag(D))
    assert set(np.unique(off)) <= {-1.0, 0.0}
    assert A.nnz == nnz
    assert np.linalg.eigvalsh(D).min() > 0  # SPD M-matrix
    assert _is_canonical(A)


def test_27_point_neighbours_are_the_full_cube():
    n = 3
    A = lap3d(n, 27)
    centre = 1 * 9 + 1 * 3 + 1
    assert A.indptr[centre + 1] - A.indptr[centre] == 27


def test_generators_are_deterministic_and_seeded():
    for make in (lambda s: banded(40, 2, 3, seed=s), lambda s: block_fem(20, 2, 3, seed=s),
                 lambda s: rmat(8, seed=s), lambda s: uniform_random(30, 20, 0.1, seed=s)):
        a, b, c = make(1), make(1), make(2)
        assert (a != b).nnz == 0
        assert (a != c).nnz > 0


def test_banded_structure():
    A = banded(30, 2, 1)
    rows, cols = A.nonzero()
    assert (cols - rows).min() == -2 and (cols - rows).max() == 1


def test_block_fem_blocks_are_dense():
    A = block_fem(50, 3, 2, blocks_per_row=5)
    assert A.shape == (150, 100)
    assert block_fill(A)["3x2"] == pytest.approx(1.0)
    assert np.all(np.diff(A.indptr).reshape(50, 3).std(axis=1) == 0)


def test_rmat_is_power_law_like():
    A = rmat(12, 8)
    assert A.shape == (4096, 4096)
    deg = np.diff(A.indptr)
    assert deg.max() > 20 * deg.mean()  # heavy tail
    assert set(np.unique(A.data)) == {1.0}


@pytest.mark.parametrize("make", [
    lambda: banded(40, 3, 3, spd=True), lambda: block_fem(15, 3, 3, spd=True),
    lambda: uniform_random(40, 40, 0.1, spd=True), lambda: make_spd(rmat(6)),
])
def test_spd_option_gives_spd(make):
    D = make().toarray()
    np.testing.assert_allclose(D, D.T)
    assert np.linalg.eigvalsh(D).min() > 0


def test_generator_bad_arguments():
    with pytest.raises(InputError):
        lap2d(4, points=7)
    with pytest.raises(InputError):
        lap2d(0)
    with pytest.raises(InputError):
        banded(10, 2, 1, spd=True)
    with pytest.raises(InputError):
        block_fem(5, 2, 3, spd=True)
    with pytest.raises(InputError):
        uniform_random(4, 4, 1.5)
    with pytest.raises(ShapeError, match="square"):
        make_spd(sp.random_array((4, 5), density=0.5, rng=0))


# --- validation -------------------------------------------------------------------

def test_canonical_csr_sorts_sums_and_casts():
    A = sp.coo_array(([1.0, 2.0, 3.0], ([1, 0, 1], [0, 1, 0])), shape=(2, 3),
                     dtype=np.float64)
    A.coords = tuple(c.astype(np.int64) for c in A.coords)
    C = canonical_csr(A, dtype="float32")
    assert _is_canonical(C) and C.dtype == np.float32
    np.testing.assert_array_equal(C.toarray(), [[0, 2, 0], [4, 0, 0]])


def test_canonical_csr_rejects_bad_input():
    with pytest.raises(InputError, match="non-finite"):
        canonical_csr(sp.csr_array(np.array([[np.nan, 1.0]])))
    with pytest.raises(ShapeError, match="square"):
        canonical_csr(sp.csr_array(np.ones((2, 3))), square=True)
    with pytest.raises(InputError, match="complex"):
        canonical_csr(sp.csr_array(np.array([[1j]])))
    with pytest.raises(InputError, match="expected a scipy sparse"):
        canonical_csr([[1, 2]])
    with pytest.raises(InputError, match="floating point"):
        canonical_csr(sp.csr_array(np.eye(2)), dtype="int32")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_canonical_csr_finite_check_survives_overflowing_sums_and_cancelling_infinities(dtype):
    top = np.finfo(dtype).max
    big = sp.csr_array(np.array([[top, top, 0.0, -top]], dtype=dtype))  # finite values whose sum overflows
    assert canonical_csr(big).nnz == 3
    for bad, col in (([np.inf, -np.inf, 1.0], 0), ([1.0, top, np.nan], 2), ([top, -np.inf, 2.0], 1)):
        with pytest.raises(InputError, match=rf"non-finite value \S+ at \(0, {col}\)"):
            canonical_csr(sp.csr_array(np.array([bad], dtype=dtype)))


def test_canonical_csr_rejects_int32_overflow():
    big = sp.csr_array((2**31, 1), dtype=np.float64)
    with pytest.raises(InputError, match="overflows the int32"):
        canonical_csr(big)


def test_canonical_csr_leaves_input_alone():
    A = sp.csr_array(np.array([[0.0, 1.0], [2.0, 0.0]]))
    canonical_csr(A, dtype="float32")
    assert A.dtype == np.float64


def test_empty_matrix_is_valid():
    A = canonical_csr(sp.csr_array((0, 0)))
    assert A.shape == (0, 0) and A.nnz == 0


def test_check_dense_operand():
    B = check_dense_operand(np.arange(3), 3, dtype="float32")
    assert B.shape == (3, 1) and B.dtype == np.float32
    with pytest.raises(ShapeError, match="has 2 rows"):
        check_dense_operand(np.ones((2, 4)), 3, dtype="float32")
    with pytest.raises(InputError, match="NaN"):
        check_dense_operand(np.array([1.0, np.nan]), 2, dtype="float64")


# --- statistics ----------------------------------------------------------------------

def test_stats_of_5_point_laplacian():
    st = matrix_stats(lap2d(6))
    assert (st["rows"], st["cols"], st["nnz"]) == (36, 36, 5 * 36 - 4 * 6)
    assert st["diagonals"] == 5 and st["bandwidth"] == 6
    assert st["row_length"]["min"] == 3 and st["row_length"]["max"] == 5
    assert sum(st["row_length"]["histogram"]["counts"]) == 36
    assert st["pattern_symmetric"]


def test_block_fill_matches_brute_force():
    A = uniform_random(23, 17, 0.2, seed=3)
    fill = block_fill(A, 4, 4)
    rows, cols = A.nonzero()
    for r in range(1, 5):
        for c in range(1, 5):
            blocks = len(set(zip(rows // r, cols // c)))
            assert fill[f"{r}x{c}"] == pytest.approx(A.nnz / (blocks * r * c))


@pytest.mark.parametrize("name, make", [
    ("lap2d", lambda: lap2d(300)),
    ("lap3d27", lambda: lap3d(24, points=27)),
    ("fem3x3", lambda: block_fem(8000, 3, 3, seed=1)),
    ("rmat", lambda: rmat(14, edge_factor=16, seed=2)),
    ("random", lambda: uniform_random(40000, 40000, 2e-4, seed=3)),
    ("band", lambda: banded(60000, 2, 3, seed=4)),
])
def test_sampled_block_fill_is_within_its_bound_of_the_exact_fill(name, make):
    A = canonical_csr(make())
    exact = block_fill(A, 8, 8)
    for seed, fraction in ((0, 0.02), (1, 0.02), (2, 0.01)):  # 0.01: the selector's sample
        est = estimate_block_fill(A, exact_below=0, seed=seed, fraction=fraction)
        assert not est.exact and 0 < max(est.fraction.values()) < 1
        assert set(est.fill) == {f"{r}x{c}" for r in SELECTOR_BLOCK_SIZES for c in SELECTOR_BLOCK_SIZES}
        for key, value in est.fill.items():
            assert abs(value - exact[key]) <= est.bound[key], (name, seed, key, value, exact[key])
            assert 0.0 <= est.bound[key] < 1.0


@pytest.mark.parametrize("make", [lambda: uniform_random(997, 1003, 0.01, seed=5),
                                  lambda: block_fem(301, 3, 3, seed=6), lambda: sp.csr_array((37, 41))])
def test_block_fill_counted_on_every_block_row_equals_the_exact_fill(make):
    # fraction=1 reads every block row through the sampled counting path; row counts not divisible by R
    A = canonical_csr(make())
    exact = block_fill(A, 8, 8)
    est = estimate_block_fill(A, exact_below=0, fraction=1.0)
    assert est.exact and set(est.fraction.values()) == {1.0}
    for key, value in est.fill.items():
        assert value == pytest.approx(exact[key], rel=1e-12), key
        assert est.bound[key] == 0.0


def test_block_fill_estimate_is_exact_below_the_threshold_and_in_matrix_stats():
    A = lap2d(40)
    est = estimate_block_fill(A)
    assert est.exact and set(est.bound.values()) == {0.0}
    exact = block_fill(A, 8, 8)
    assert all(est.fill[k] == pytest.approx(exact[k]) for k in est.fill)
    st = matrix_stats(lap2d(300), block_sizes=(1, 2, 4), sample=True, symmetry=False)
    assert "pattern_symmetric" not in st and set(st["block_fill"]) == set(st["block_fill_bound"])
    assert 0 < st["block_fill_sampled"] < 1
    with pytest.raises(InputError, match="fraction"):
        estimate_block_fill(A, fraction=0.0)


def test_stats_of_empty_and_non_square():
    st = matrix_stats(sp.csr_array((3, 5)))
    assert st["nnz"] == 0 and st["row_length"]["empty_rows"] == 3
    assert st["diagonals"] == 0 and not st["pattern_symmetric"]


# --- tables ----------------------------------------------------------------------------

def test_gogeta_tables():
    assert set(GOGETA_TABLE2) == {"aft02", "ecology1", "Barth5", "nasa4704", "cora", "protein"}
    assert GOGETA_TABLE2["cora"].N == 1433 and GOGETA_TABLE2["protein"].O == 2
    assert GOGETA_TABLE4.clusters * GOGETA_TABLE4.pes_per_cluster == 16 * 1024
    assert GOGETA_TABLE4.sram_sweep_mb == (1, 4, 16) and GOGETA_TABLE4.n_sweep == (1, 8, 16)


def test_sextans_sweep_is_powers_of_two():
    assert SEXTANS_N_SWEEP == tuple(2 ** k for k in range(3, 10))


def test_dnn_shape_tables_are_consistent():
    assert len(DEEPBENCH_GEMM) >= 8 and all(g.flops > 0 for g in DEEPBENCH_GEMM)
    assert all(g.steps == 128 for g in DEEPBENCH_GRU)
    # ResNet-50 spatial sizes chain 56 -> 28 -> 14 -> 7 through the strided layers
    assert {l.out_hw for l in RESNET50_CONV if l.stride == 2 and l.kernel == 3} == {28, 14, 7}
    assert len(MOBILENET_V1_SEPARABLE) == 13
    for dw, pw in MOBILENET_V1_SEPARABLE:
        assert dw.groups == dw.c_in == dw.c_out == pw.c_in and pw.hw == dw.out_hw
    assert MOBILENET_V1_SEPARABLE[-1][1].c_out == 1024


def test_canonical_input_is_reused_without_copy():
    A = lap2d(5)
    assert canonical_csr(A) is A
    assert canonical_csr(A, dtype="float32") is not A


def test_fem_elasticity_is_pyamgs_symmetric_q1_assembly():
    pytest.importorskip("pyamg")
    from pyamg.gallery import linear_elasticity

    from tvm_ext.workloads import fem_elasticity

    A = fem_elasticity(7)
    ref, _ = linear_elasticity((7, 7), format="csr")
    assert _is_canonical(A) and A.shape == (98, 98)
    assert abs(A - ref).max() == 0 and abs(A - A.T).max() < 1e-9 * abs(A).max()
    ref.eliminate_zeros()
    assert A.nnz == ref.nnz and np.diff(A.indptr).max() == 13  # interior: 9 nodes x 2 unknowns, minus exact zeros
    with pytest.raises(InputError, match="at least 2"):
        fem_elasticity(1)


def test_fem_mass_3d_matches_element_by_element_assembly():
    from itertools import product

    from tvm_ext.workloads import fem_mass_3d

    nx, ny, nz, h = 3, 4, 2, 0.5
    m1 = np.array([[2.0, 1.0], [1.0, 2.0]]) * h / 6
    ke = np.kron(np.kron(m1, m1), m1)  # 8 x 8 Q1 element mass, local order (z, y, x)
    ref = np.zeros((nx * ny * nz,) * 2)
    for ex, ey, ez in product(range(nx - 1), range(ny - 1), range(nz - 1)):
        nodes = [(ex + a) + nx * ((ey + b) + ny * (ez + c)) for c, b, a in product((0, 1), repeat=3)]
        ref[np.ix_(nodes, nodes)] += ke
    A = fem_mass_3d(nx, ny, nz, dofs=1, h=h)
    np.testing.assert_allclose(A.toarray(), ref, atol=1e-15)
    A3 = fem_mass_3d(nx, ny, nz, dofs=3, h=h).toarray()
    np.testing.assert_allclose(A3[0::3, 0::3], ref)
    assert np.all(A3[0::3, 1::3] == 0)
    assert np.linalg.eigvalsh(A3).min() > 0
    with pytest.raises(InputError):
        fem_mass_3d(1, 4, 4)


def test_crystm03_like_has_crystm03_size_and_nnz():
    from tvm_ext.workloads import crystm03_like
    from tvm_ext.workloads.generators import CRYSTM03_SHAPE

    A = crystm03_like()
    assert A.shape == (24_696, 24_696) and A.nnz == 583_770 == CRYSTM03_SHAPE[1]
    assert abs(A - A.T).max() == 0
    assert np.diff(A.indptr).max() == 27  # interior nodes couple with the 27-node cube
