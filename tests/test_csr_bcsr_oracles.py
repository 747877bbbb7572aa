"""The library's CSR and BCSR executors (generated from their recipes) against the hand-written
templates they replaced (tests/sparse_oracles) and scipy: generated == template == scipy.

Random shapes with empty rows, row and column counts that no block or column tile divides,
empty matrices, float32 and float64, SpMM and SpMV, alpha/beta.  Sizes are symbolic, so each
(format, block shape, kind, dtype) compiles once for the file.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.sparse import inspectors as I
from schedules.sparse.executors import BCSRParams, CSRParams, Executor, build_executor
from tests.sparse_oracles.bcsr_template import TemplateBCSRKernels
from tests.sparse_oracles.csr_template import TemplateCSRKernels
from tvm_ext.workloads import canonical_csr

TOL = {"float32": dict(rtol=2e-4, atol=2e-4), "float64": dict(rtol=1e-10, atol=1e-10)}
FORMATS = {"csr": lambda A: I.to_csr(A), "bcsr2x2": lambda A: I.to_bcsr(A, 2, 2),
           "bcsr3x2": lambda A: I.to_bcsr(A, 3, 2)}


def _matrix(m: int, k: int, density: float, dtype: str, seed: int, empty_rows: int) -> sp.csr_array:
    rng = np.random.default_rng(seed)
    A = sp.random(m, k, density=density, random_state=seed, format="lil", dtype=np.float64)
    for r in rng.choice(m, size=min(empty_rows, m), replace=False):
        A[int(r), :] = 0
    A = canonical_csr(A, dtype=dtype)
    A.data[:] = rng.uniform(-1, 1, A.nnz).astype(dtype)
    return A


def _template(fmt, kind: str, n: int, parallel: bool):
    kernels = TemplateCSRKernels() if fmt.name == "csr" else TemplateBCSRKernels()
    p = kernels.resolve(fmt, kernels.params_cls(parallel=parallel), fmt.dtype.name, kind, n, None)
    return Executor(fmt, kernels, p, kind, False, None)


def _check(A, name: str, kind: str, n: int, parallel: bool, seed: int) -> None:
    fmt = FORMATS[name](A)
    dtype = A.dtype.name
    params = (CSRParams if fmt.name == "csr" else BCSRParams)(parallel=parallel)
    gen = build_executor(fmt, n_cols=n, kind=kind, params=params)
    assert gen.prim_func.params[0].name == "offset"           # the recipe's nest, bound by role
    hand = _template(fmt, kind, n, parallel)
    rng = np.random.default_rng(seed)
    shape_b = (A.shape[1], n) if kind == "spmm" else (A.shape[1],)
    shape_c = (A.shape[0], n) if kind == "spmm" else (A.shape[0],)
    B, C = rng.uniform(-1, 1, shape_b).astype(dtype), rng.uniform(-1, 1, shape_c).astype(dtype)
    ref = A @ B
    got, want = gen(B), hand(B)
    np.testing.assert_allclose(want, ref, **TOL[dtype])
    np.testing.assert_allclose(got, want, **TOL[dtype])
    np.testing.assert_allclose(gen(B, C, alpha=-1.5, beta=0.5), -1.5 * ref + 0.5 * C, **TOL[dtype])


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(sorted(FORMATS)), dtype=st.sampled_from(["float32", "float64"]),
       kind=st.sampled_from(["spmm", "spmv"]), m=st.integers(1, 45), k=st.integers(1, 45),
       n=st.integers(1, 37), density=st.floats(0.0, 0.5), empty_rows=st.integers(0, 5),
       parallel=st.booleans(), seed=st.integers(0, 10_000))
def test_generated_equals_template_equals_scipy(name, dtype, kind, m, k, n, density, empty_rows, parallel,
                                                seed):
    A = _matrix(m, k, density, dtype, seed, empty_rows)
    _check(A, name, kind, n if kind == "spmm" else 1, parallel, seed)


@pytest.mark.parametrize("name", sorted(FORMATS))
@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (7, 9)])
@pytest.mark.parametrize("kind", ["spmm", "spmv"])
def test_empty_matrices(name, shape, kind):
    A = canonical_csr(sp.csr_array(shape, dtype=np.float32), dtype="float32")
    _check(A, name, kind, 5 if kind == "spmm" else 1, False, 0)
