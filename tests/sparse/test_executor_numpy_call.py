"""The executors' numpy call: zero-copy in and out, ``out=``, aliasing, dtypes, odd layouts.

Every format x kind x dtype is checked against scipy with numpy operands and
with TVM tensors; the numpy path is checked to write the caller's buffer (or
one it allocated itself) and never to copy a C-contiguous ``B``.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.sparse import inspect
from schedules.sparse.executors import PARAMS, build_executor
from tvm_ext.errors import InputError, ShapeError
from tvm_ext.workloads import canonical_csr
from tvm_ext.zero_copy import ALIGNMENT, as_tvm_view

#: format -> inspector arguments that fit any small matrix
FORMATS = {"csr": {}, "coo": {}, "bcsr": {"R": 2, "C": 3}, "ell": {}, "dia": {"max_fill": 1e9},
           "csb": {"beta": 8}, "hyb": {"width": 2}, "sell": {"C": 4, "sigma": 8}}


def random_matrix(m: int, k: int, density: float, dtype: str, seed: int) -> sp.csr_array:
    A = sp.random(m, k, density=density, random_state=seed, format="csr", dtype=np.float64)
    A = canonical_csr(A, dtype=dtype)
    A.data[:] = np.random.default_rng(seed).uniform(-1, 1, A.nnz)
    return A


def executor(A, fmt: str, kind: str):
    """The format's executor with parallel params (tiny matrices would default to serial)."""
    plan = inspect(A, 4, format=fmt, **FORMATS[fmt])
    return build_executor(plan.format, 4, kind=kind, params=PARAMS[fmt](parallel=True))


def tol(dtype: str) -> dict:
    return dict(rtol=2e-4, atol=2e-4) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)


def address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def kernel_address(x) -> int:
    """Address of a kernel argument: a numpy array (viewed by tvm_ffi) or a TVM tensor."""
    return address(x) if isinstance(x, np.ndarray) else x.data_ptr()


def root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ["spmm", "spmv"])
@pytest.mark.parametrize("fmt", sorted(FORMATS))
@settings(max_examples=3, deadline=None)
@given(m=st.integers(1, 30), k=st.integers(1, 30), n=st.integers(1, 20),
       density=st.floats(0.0, 0.5), seed=st.integers(0, 10_000))
def test_numpy_and_tvm_operands_match_scipy(fmt, kind, dtype, m, k, n, density, seed):
    A = random_matrix(m, k, density, dtype, seed)
    exe = executor(A, fmt, kind)
    rng = np.random.default_rng(seed)
    B = rng.uniform(-1, 1, (k,) if kind == "spmv" else (k, n)).astype(dtype)
    C = rng.uniform(-1, 1, (m,) if kind == "spmv" else (m, n)).astype(dtype)
    ref = A @ B
    got = exe(B)
    assert isinstance(got, np.ndarray) and got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got, ref, **tol(dtype))
    out = np.empty_like(C)
    assert exe(B, C, alpha=0.5, beta=-2.0, out=out) is out
    np.testing.assert_allclose(out, 0.5 * ref - 2.0 * C, **tol(dtype))
    res = exe(tvm.runtime.tensor(B))
    assert isinstance(res, tvm.runtime.Tensor)
    np.testing.assert_allclose(res.numpy(), ref, **tol(dtype))
    ct = tvm.runtime.tensor(C)  # in place on a TVM tensor: C = A @ B + C
    assert exe(tvm.runtime.tensor(B), ct, beta=1.0, out=ct) is ct
    np.testing.assert_allclose(ct.numpy(), ref + C, **tol(dtype))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_out_is_written_in_place_and_c_may_be_out(fmt):
    A = random_matrix(23, 17, 0.3, "float64", 1)
    exe = executor(A, fmt, "spmm")
    B = np.random.default_rng(0).standard_normal((17, 5))
    C = np.random.default_rng(1).standard_normal((23, 5))
    C0 = C.copy()
    res = exe(B, C, alpha=2.0, beta=0.5, out=C)  # C = 2 A @ B + 0.5 C, in place
    assert res is C and address(res) == address(C)
    np.testing.assert_allclose(C, 2.0 * (A @ B) + 0.5 * C0, rtol=1e-12, atol=1e-12)


def test_numpy_path_makes_no_copy():
    A = random_matrix(40, 30, 0.2, "float32", 2)
    exe = executor(A, "csr", "spmm")
    B = np.random.default_rng(0).standard_normal((30, 8)).astype(np.float32)
    out = np.zeros((40, 8), np.float32)
    kernel_args = []
    real_main = exe._main
    exe._main = lambda *args: (kernel_args.extend(args), real_main(*args))
    try:
        assert exe(B, out=out) is out
        h = len(exe._head)  # the format's arrays, then B, C_in, C_out
        b_t, c_t = kernel_args[h], kernel_args[h + 2]
        assert kernel_address(b_t) == address(B) and kernel_address(c_t) == address(out)
        kernel_args.clear()
        res = exe(B)  # no out: the result is the aligned buffer the kernel wrote
        assert kernel_address(kernel_args[h + 2]) == address(res) and address(res) % ALIGNMENT == 0
    finally:
        exe._main = real_main
    assert root(res).dtype == np.uint8 and root(res).nbytes == res.nbytes + ALIGNMENT
    np.testing.assert_allclose(res, A @ B, **tol("float32"))
    np.testing.assert_allclose(out, A @ B, **tol("float32"))


def test_vector_shapes_follow_b():
    A = random_matrix(12, 9, 0.4, "float64", 3)
    spmv, spmm = executor(A, "csr", "spmv"), executor(A, "csr", "spmm")
    x = np.arange(9.0)
    assert spmv(x).shape == (12,) and spmv(x[:, None]).shape == (12, 1)
    assert spmm(x).shape == (12,)
    out = np.empty((12, 1))
    assert spmv(x[:, None], out=out) is out
    np.testing.assert_allclose(out[:, 0], A @ x, rtol=1e-12)
    with pytest.raises(ShapeError, match="SpMV takes one"):
        spmv(np.ones((9, 2)))


def test_read_only_b_and_c_are_viewed():
    A = random_matrix(20, 15, 0.3, "float32", 4)
    exe = executor(A, "bcsr", "spmm")
    B = np.random.default_rng(0).standard_normal((15, 6)).astype(np.float32)
    C = np.ones((20, 6), np.float32)
    B.flags.writeable = False
    C.flags.writeable = False
    np.testing.assert_allclose(exe(B, C, beta=1.0), A @ B + 1.0, **tol("float32"))
    assert not B.flags.writeable and not C.flags.writeable
    with pytest.raises(InputError, match="writable"):
        exe(B, out=C)


@pytest.mark.parametrize("layout", ["fortran", "strided", "misaligned"])
def test_non_contiguous_and_misaligned_b(layout):
    A = random_matrix(25, 18, 0.3, "float64", 5)
    exe = executor(A, "dia", "spmm")  # DIA's kernel faulted on misaligned B when it assumed 64 bytes
    base = np.random.default_rng(1).standard_normal((18, 14))
    if layout == "fortran":
        B = np.asfortranarray(base[:, :7])
    elif layout == "strided":
        B = base[:, ::2]
    else:  # C-contiguous, 8 bytes past a 64-byte boundary: viewed, not copied
        raw = np.empty(18 * 7 * 8 + 128, np.uint8)
        start = -address(raw) % 64 + 8
        B = raw[start:start + 18 * 7 * 8].view(np.float64).reshape(18, 7)
        B[:] = base[:, :7]
        assert address(B) % 64 == 8 and as_tvm_view(B, alignment=0).data_ptr() == address(B)
    np.testing.assert_allclose(exe(B), A @ B, rtol=1e-12, atol=1e-12)
    out = np.empty((25, 7))
    np.testing.assert_allclose(exe(B, out=out), A @ B, rtol=1e-12, atol=1e-12)


def test_out_aliasing_b_is_refused():
    A = random_matrix(16, 16, 0.3, "float32", 6)
    exe = executor(A, "csr", "spmm")
    B = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    with pytest.raises(InputError, match="out shares memory with B"):
        exe(B, out=B)
    big = np.zeros((32, 4), np.float32)
    with pytest.raises(InputError, match="out shares memory with B"):
        exe(big[:16], out=big[8:24])  # partial overlap
    bt = tvm.runtime.tensor(B)
    with pytest.raises(InputError, match="out shares memory with B"):
        exe(bt, out=bt)  # exe(tb, out=tb) once returned a wrong product
    v = as_tvm_view(B, alignment=0)
    with pytest.raises(InputError, match="out shares memory with B"):
        exe(v, out=B)  # a TVM view and the numpy array under it
    C = np.zeros((40, 4), np.float32)
    with pytest.raises(InputError, match="partially overlaps C"):
        exe(B, C[:16], beta=1.0, out=C[4:20])
    np.testing.assert_allclose(exe(B, out=big[16:]), A @ B, **tol("float32"))  # disjoint: fine


def test_bad_out_is_one_clear_error():
    A = random_matrix(10, 8, 0.3, "float32", 7)
    exe = executor(A, "csr", "spmm")
    B = np.ones((8, 3), np.float32)
    with pytest.raises(InputError, match="dtype"):
        exe(B, out=np.empty((10, 3), np.float64))
    with pytest.raises(ShapeError, match="shape"):
        exe(B, out=np.empty((10, 4), np.float32))
    with pytest.raises(InputError, match="C-contiguous"):
        exe(B, out=np.empty((3, 10), np.float32).T)
    with pytest.raises(InputError, match="out must be"):
        exe(B, out=[[0.0] * 3] * 10)
    with pytest.raises(InputError, match="B has dtype float64, the matrix is float32"):
        exe(np.ones((8, 3)))


def test_nan_in_b_propagates_like_scipy():
    A = random_matrix(10, 8, 0.5, "float64", 8)
    B = np.ones((8, 2))
    B[3, 0] = np.nan
    got = executor(A, "csr", "spmm")(B)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(A @ B))


@pytest.mark.parametrize("fmt", ["csr", "bcsr", "sell"])
def test_inspect_keeps_float64_end_to_end(fmt):
    A = random_matrix(30, 30, 0.2, "float64", 9)
    A.data *= 1e-9  # float32 would lose these digits
    plan = inspect(A, 4, format=fmt, **FORMATS[fmt])
    assert plan.matrix.dtype == np.float64 and plan.format.dtype == np.float64
    exe = plan.build()
    B = np.random.default_rng(0).standard_normal((30, 4)) + 1.0
    C = exe(B)
    assert exe.dtype == "float64" and C.dtype == np.float64
    np.testing.assert_allclose(C, A @ B, rtol=1e-13, atol=0)


def test_inspect_dtypes():
    A64 = random_matrix(12, 12, 0.3, "float64", 10)
    assert inspect(A64, 2, format="csr", dtype="float32").build().dtype == "float32"
    assert inspect(A64.astype(np.float32), 2, format="csr").build().dtype == "float32"
    ints = sp.csr_array(np.eye(5, dtype=np.int64) * 3)
    assert inspect(ints, 2, format="csr").matrix.dtype == np.float64  # documented conversion
    with pytest.raises(InputError, match="float32 or float64"):
        inspect(A64.astype(np.longdouble), 2, format="csr")
    with pytest.raises(InputError, match="float32, float64"):
        inspect(A64, 2, format="csr", dtype="float16")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_out_with_wrong_rows_is_refused_before_the_kernel(fmt):
    """Some kernels bind M only from C (COO, BCSR, CSB, SELL): a short out must never reach them."""
    A = random_matrix(21, 13, 0.3, "float32", 11)
    exe = executor(A, fmt, "spmm")
    B = np.ones((13, 4), np.float32)
    for rows in (20, 22):
        with pytest.raises(ShapeError, match="out has shape"):
            exe(B, out=np.zeros((rows, 4), np.float32))
    with pytest.raises(ShapeError):
        exe(np.ones((12, 4), np.float32))  # and a B with too few rows
