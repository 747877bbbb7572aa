"""Sextans Alg. 1: the functional simulator against scipy and a sequential PE oracle."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tvm_ext.errors import InputError, ShapeError
from tvm_ext.spmm_engine import decode_words, preprocess, simulate


def reference(A, B, C=None, alpha=1.0, beta=0.0):
    out = alpha * (sp.csr_array(A).astype(np.float64) @ np.asarray(B, np.float64))
    return out if C is None else out + beta * np.asarray(C, np.float64)


def assert_close(got, want, tol=2e-5):
    scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    assert got.dtype == np.float32
    assert np.abs(got - want).max() <= tol * scale


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 60), k=st.integers(1, 60), n=st.integers(1, 20),
       density=st.floats(0.0, 0.5), P=st.sampled_from([1, 4, 8]),
       K0=st.sampled_from([4, 16, 64]), N0=st.sampled_from([1, 4, 8]),
       alpha=st.floats(-2, 2), beta=st.floats(-2, 2), seed=st.integers(0, 1000))
def test_random_matrices_match_scipy(m, k, n, density, P, K0, N0, alpha, beta, seed):
    rng = np.random.default_rng(seed)
    A = sp.random_array((m, k), density=density, rng=rng, format="csr")
    B = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    C = rng.uniform(-1, 1, (m, n)).astype(np.float32)
    prog = preprocess(A, pes=P, window=K0, n0=N0, raw_distance=3)
    assert_close(simulate(prog, B, C, alpha=alpha, beta=beta), reference(A, B, C, alpha, beta))


def sequential_engine(prog, B, C, alpha, beta):
    """Word-by-word oracle: every PE, every stream row, in order, fp32 throughout."""
    cfg = prog.config
    M, K = prog.shape
    out = np.zeros((M, B.shape[1]), np.float32)
    for ps in prog.passes:
        depth = -(-ps.rows // cfg.pes)
        spad = np.zeros((cfg.pes, depth, B.shape[1]), np.float32)
        for j in range(ps.q.size - 1):
            for i in range(int(ps.q[j]), int(ps.q[j + 1])):
                r, c, v, ok = decode_words(ps.words[i], cfg)
                for p in np.flatnonzero(ok):
                    b = B[j * cfg.window + c[p]]
                    spad[p, r[p]] = spad[p, r[p]] + v[p] * b
        for local in range(ps.rows):
            row = spad[local % cfg.pes, local // cfg.pes]
            out[ps.row0 + local] = np.float32(alpha) * row + np.float32(beta) * C[ps.row0 + local]
    return out


def test_bit_identical_to_a_sequential_pe_run():
    rng = np.random.default_rng(7)
    A = sp.random_array((45, 37), density=0.3, rng=rng, format="csr")
    A.data *= 1e3 * rng.standard_normal(A.nnz)  # spread magnitudes: order matters in fp32
    B = rng.standard_normal((37, 6)).astype(np.float32)
    C = rng.standard_normal((45, 6)).astype(np.float32)
    prog = preprocess(A, pes=4, window=8, n0=4, raw_distance=3, scratchpad_depth=5)
    assert len(prog.passes) == 3
    got = simulate(prog, B, C, alpha=0.85, beta=-2.06)
    want = sequential_engine(prog, B, C, 0.85, -2.06)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("case", ["n_not_multiple_of_n0", "k_not_multiple_of_k0", "empty_window",
                                  "row_longer_than_window", "many_passes", "empty_matrix"])
def test_edge_cases_match_scipy(case):
    rng = np.random.default_rng(1)
    kw = dict(pes=4, window=8, n0=8, raw_distance=4)
    if case == "n_not_multiple_of_n0":
        A, n = sp.random_array((30, 30), density=0.2, rng=rng, format="csr"), 13
    elif case == "k_not_multiple_of_k0":
        A, n = sp.random_array((30, 29), density=0.2, rng=rng, format="csr"), 8
    elif case == "empty_window":
        dense = rng.uniform(-1, 1, (20, 32))
        dense[:, 8:24] = 0.0  # windows 1 and 2 hold nothing
        A, n = sp.csr_array(dense), 5
    elif case == "row_longer_than_window":
        dense = np.zeros((9, 40))
        dense[3] = rng.uniform(-1, 1, 40)  # 40 non-zeros in one row, windows of 8
        A, n = sp.csr_array(dense), 16
    elif case == "many_passes":
        A, n = sp.random_array((70, 20), density=0.3, rng=rng, format="csr"), 9
        kw["scratchpad_depth"] = 2  # 8 rows per pass -> 9 passes
    else:
        A, n = sp.csr_array((12, 10)), 3
    B = rng.uniform(-1, 1, (A.shape[1], n)).astype(np.float32)
    C = rng.uniform(-1, 1, (A.shape[0], n)).astype(np.float32)
    prog = preprocess(A, **kw)
    if case == "empty_window":
        assert np.diff(prog.passes[0].q.astype(int)).tolist()[1:3] == [0, 0]
    if case == "many_passes":
        assert len(prog.passes) == 9
    assert_close(simulate(prog, B, C, alpha=1.5, beta=0.5), reference(A, B, C, 1.5, 0.5))
    assert_close(simulate(prog, B), reference(A, B))


def test_bundled_matrix_at_paper_defaults():
    from tvm_ext.workloads import load_matrix

    A = load_matrix("nasa4704")
    rng = np.random.default_rng(0)
    B = rng.uniform(-1, 1, (A.shape[1], 16)).astype(np.float32)
    assert_close(simulate(preprocess(A), B), reference(A, B))


def test_bad_operands_raise_clear_errors():
    A = sp.random_array((10, 8), density=0.3, rng=0, format="csr")
    prog = preprocess(A, pes=2, window=4)
    with pytest.raises(ShapeError, match="B"):
        simulate(prog, np.ones((9, 3), np.float32))
    with pytest.raises(ShapeError, match="C"):
        simulate(prog, np.ones((8, 3), np.float32), np.ones((10, 4), np.float32))
    with pytest.raises(InputError, match="NaN"):
        simulate(prog, np.full((8, 3), np.nan, np.float32))
    with pytest.raises(InputError, match="alpha"):
        simulate(prog, np.ones((8, 3), np.float32), alpha=float("inf"))
    with pytest.raises(InputError, match="SextansProgram"):
        simulate(A, np.ones((8, 3), np.float32))
    with pytest.raises(ShapeError):
        preprocess(sp.csr_array((0, 5)))
