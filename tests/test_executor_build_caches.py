"""The per-process caches of an executor build (the host Target, a recipe's accumulator rows):
executors built again from warm caches compute scipy's product, for each dtype and params."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from schedules.sparse.executors import BCSRParams, build_executor
from schedules.sparse.executors.bcsr import BCSRKernels
from schedules.sparse.inspectors import INSPECTORS
from tvm_ext.target import resolve_target
from tvm_ext.workloads import block_fem, canonical_csr


def _fem(dtype: str):
    return canonical_csr(block_fem(40, 3, 3, seed=1), dtype=dtype)


def test_rebuilt_executors_match_scipy_per_dtype():
    for dtype, rtol in (("float32", 1e-4), ("float64", 1e-10)):
        A = _fem(dtype)
        B = np.random.default_rng(0).uniform(-1, 1, (A.shape[1], 8)).astype(dtype)
        fmt = INSPECTORS["bcsr"](A, R=3, C=3)
        first, again = build_executor(fmt, 8), build_executor(fmt, 8)
        assert again.dtype == first.dtype == dtype
        assert np.allclose(again(B), A @ B, rtol=rtol, atol=rtol)
        # another matrix of the same format reuses the kernel, not the first one's arrays
        A2 = canonical_csr(sp.csr_array(A * 2.0), dtype=dtype)
        assert np.allclose(build_executor(INSPECTORS["bcsr"](A2, R=3, C=3), 8)(B), A2 @ B, rtol=rtol, atol=rtol)


def test_cached_host_target_is_the_resolved_default():
    A = _fem("float32")
    exe = build_executor(INSPECTORS["csr"](A), 8)
    assert str(exe.target) == str(resolve_target(None))
    assert build_executor(INSPECTORS["csr"](A), 8).target is exe.target
    # an explicit target is still honoured (an AVX2 machine model: 8 fp32 lanes)
    avx2 = build_executor(INSPECTORS["csr"](A), 8, target={"kind": "llvm", "mcpu": "haswell"})
    assert str(avx2.target.attrs["mcpu"]) == "haswell" and avx2.params.lanes == 8


def test_accumulator_rows_per_recipe_and_params_in_the_signature():
    A = _fem("float32")
    B = np.ones((A.shape[1], 8), np.float32)
    k = BCSRKernels()
    f33, f21 = INSPECTORS["bcsr"](A, R=3, C=3), INSPECTORS["bcsr"](A, R=2, C=1)
    # the cached accumulator rows follow the block shape (R), for each dtype
    assert k.recipe_for(f33).acc_rows("float32") == 3 == k.recipe_for(f33).acc_rows("float64")
    assert k.recipe_for(f21).acc_rows("float32") == 2
    e1 = build_executor(f33, 8, params=BCSRParams(unroll=2))
    e2 = build_executor(f33, 8)
    assert e1.signature != e2.signature and e1.params.unroll == 2 != e2.params.unroll
    for exe in (e1, e2, build_executor(f21, 8)):
        assert np.allclose(exe(B), A @ B, rtol=1e-4)


def test_balanced_parts_cuts_as_the_searched_total():
    """The parts' cuts equal a search of the materialized float64 total (prefix + cost per item)."""
    from schedules.sparse.executors.partition import balanced_parts

    rng = np.random.default_rng(3)
    for _ in range(300):
        m = int(rng.integers(1, 3000))
        lens = rng.integers(0, int(rng.choice([2, 9, 60])), m) * (rng.random(m) < rng.random())
        prefix = np.cumsum(np.r_[0, lens]).astype(rng.choice([np.int32, np.int64]))
        n_parts, cost = int(rng.integers(1, 70)), float(rng.choice([0.0, 1.0, 0.25, 3.7]))
        total = prefix.astype(np.float64) + cost * np.arange(m + 1)
        cuts = np.searchsorted(total, np.linspace(0.0, total[-1], n_parts + 1), side="left")
        cuts[0], cuts[-1] = 0, m
        got = balanced_parts(prefix, n_parts, item_cost=cost)
        assert got.dtype == np.int32 and got.tolist() == np.unique(cuts).tolist()


def test_malformed_index_arrays_are_rejected():
    """The build's one-pass index check still rejects negative and too-large indices and a
    decreasing pointer (the kernels read them unguarded)."""
    import pytest

    from schedules.sparse.formats import CSR
    from tvm_ext.errors import InputError

    A = _fem("float32")
    for bad in (-1, A.shape[1]):
        fmt = INSPECTORS["csr"](A)
        fmt.indices[5] = bad
        with pytest.raises(InputError, match="csr.indices"):
            build_executor(fmt, 8)
    fmt = INSPECTORS["bcsr"](A, R=3, C=3)
    fmt.bcol[0] = -3
    with pytest.raises(InputError, match="bcsr.bcol"):
        build_executor(fmt, 8)
    fmt = INSPECTORS["csr"](A)
    fmt.indptr[2], fmt.indptr[3] = fmt.indptr[3], fmt.indptr[2]
    with pytest.raises(InputError, match="non-decreasing"):
        build_executor(fmt, 8)
    assert isinstance(INSPECTORS["csr"](A), CSR)
