"""The row sweep every sweep executor shares (Venkat 2016 ch. 7, Listing 7.1).

Row ``r`` of a sweep is ``x[r] = (b[r] - sum_{j != r} A[r, j] x[j]) / A[r, r]``:
:func:`_row_code` is its TVMScript, :func:`_sweep_operands` splits a matrix
into the off-diagonal part and the diagonal it divides by, and
:func:`_run_in_original_order` runs an executor's sweeps on vectors in the
matrix's own row order.  The barrier executor
(:class:`~schedules.sparse.triangular.SweepExecutor`) and the point-to-point
one (:class:`~schedules.sparse.p2p.P2PExecutor`) are both built on them.

>>> import numpy as np, scipy.sparse as sp
>>> off, diag = _sweep_operands(sp.csr_array(np.array([[2.0, 1.0], [0.0, 4.0]])), None, "demo")
>>> off.toarray().tolist(), diag.tolist()
([[0.0, 1.0], [0.0, 0.0]], [2.0, 4.0])
"""
from __future__ import annotations

import textwrap
from typing import Any

import numpy as np
import scipy.sparse as sp

from tvm_ext.errors import InputError
from tvm_ext.zero_copy import empty_aligned

__all__ = ["SUPPORTED_DTYPES", "wrap"]

#: Value dtypes of the sweep kernels.
SUPPORTED_DTYPES = ("float32", "float64")
_I32 = np.int32


def _check_dtype(dtype: Any, what: str) -> str:
    name = str(np.dtype(dtype)) if dtype is not None else "float64"
    if name not in SUPPORTED_DTYPES:
        raise InputError(f"{what}: dtype {name} is not supported; use one of {SUPPORTED_DTYPES}")
    return name


def _row_code(row_expr: str, indent: int) -> str:
    """TVMScript of Listing 7.1's row update (off-diagonal sum, times 1/diag).

    The sum accumulates in ``x[r]`` itself: no other row of the level reads
    ``x[r]`` and the off-diagonal part never holds column ``r``.  Scalars are
    ``T.bind`` (let) bindings: in TVM 0.27 a plain assignment or a 1-element
    local buffer becomes a ``TVMBackendAllocWorkspace`` call per row inside a
    ``T.parallel`` body (it made the parallel executor ~10x slower).
    """
    code = f"""\
r = T.bind({row_expr})
start = T.bind(indptr[r])
x[r] = b[r]
for p in range(indptr[r + 1] - start):
    x[r] = x[r] - data[start + p] * x[indices[start + p]]
x[r] = x[r] * idiag[r]
"""
    return textwrap.indent(code, " " * indent)


def _split_func(dtype: str):
    """TIR (row-parallel): off-diagonal part and diagonal of a CSR matrix whose every
    row holds exactly one diagonal entry, so the off-diagonal part of row ``r``
    starts at ``indptr[r] - r``.  ``ndiag[r]`` counts the row's diagonal entries;
    writes are bounds-guarded, and the caller discards the result unless every
    count is 1."""
    import tvm
    from tvm.script import tirx as T

    src = f"""
@T.prim_func
def split(indptr_h: T.handle, indices_h: T.handle, data_h: T.handle, oidx_h: T.handle,
          odata_h: T.handle, diag_h: T.handle, ndiag_h: T.handle):
    n = T.int32()
    np1 = T.int32()
    m = T.int32()
    mo = T.int32()
    indptr = T.match_buffer(indptr_h, (np1,), "int32")
    indices = T.match_buffer(indices_h, (m,), "int32")
    data = T.match_buffer(data_h, (m,), {dtype!r})
    oidx = T.match_buffer(oidx_h, (mo,), "int32")
    odata = T.match_buffer(odata_h, (mo,), {dtype!r})
    diag = T.match_buffer(diag_h, (n,), {dtype!r})
    ndiag = T.match_buffer(ndiag_h, (n,), "int32")
    for r in T.parallel(n):
        start = T.bind(indptr[r])
        ndiag[r] = 0
        diag[r] = T.Cast({dtype!r}, 0)
        for p in range(indptr[r + 1] - start):
            c = T.bind(indices[start + p])
            if c == r:
                diag[r] = data[start + p]
                ndiag[r] = ndiag[r] + 1
            else:
                dst = T.bind(start - r + p - ndiag[r])
                if dst >= 0 and dst < mo:
                    oidx[dst] = c
                    odata[dst] = data[start + p]
"""
    return tvm.script.from_source(src, extra_vars={"T": T})


def _split_diagonal(B: sp.csr_array) -> tuple[sp.csr_array, np.ndarray, np.ndarray]:
    """Off-diagonal part of canonical ``B``, its diagonal, and 'has a diagonal entry'.

    One row-parallel TIR pass when every row has its diagonal entry (every
    matrix a sweep accepts); numpy otherwise, to name the rows without one.
    """
    n = B.shape[0]
    if n and B.nnz > n and str(B.dtype) in SUPPORTED_DTYPES:
        import tvm

        from schedules.sparse.level_sets import _kernel, _tensor

        name = str(B.dtype)
        cpu = tvm.cpu(0)
        mo = B.nnz - n
        oidx = tvm.runtime.empty((mo,), "int32", cpu)
        odata = tvm.runtime.empty((mo,), name, cpu)
        diag = tvm.runtime.empty((n,), name, cpu)
        ndiag = tvm.runtime.empty((n,), "int32", cpu)
        _kernel(f"split_diagonal_{name}", lambda: _split_func(name))["main"](
            _tensor(B.indptr.astype(_I32, copy=False)), _tensor(B.indices.astype(_I32, copy=False)),
            _tensor(B.data), oidx, odata, diag, ndiag)
        if (ndiag.numpy() == 1).all():
            indptr = B.indptr.astype(_I32) - np.arange(n + 1, dtype=_I32)
            O = sp.csr_array((np.from_dlpack(odata), np.from_dlpack(oidx), indptr), shape=B.shape)
            return O, np.from_dlpack(diag), np.ones(n, dtype=bool)
    rows = np.repeat(np.arange(n, dtype=_I32), np.diff(B.indptr))
    on = B.indices == rows
    diag = np.zeros(n, dtype=B.dtype)
    diag[rows[on]] = B.data[on]
    off = ~on
    indptr = np.zeros(n + 1, dtype=_I32)
    np.cumsum(np.bincount(rows[off], minlength=n), out=indptr[1:])
    O = sp.csr_array((B.data[off], B.indices[off], indptr), shape=B.shape)
    return O, diag, np.bincount(rows[on], minlength=n) > 0


def wrap(arr: np.ndarray):
    """Zero-copy TVM view of an aligned, contiguous, non-empty numpy array."""
    import tvm

    return tvm.runtime.from_dlpack(arr)


def _sweep_operands(B: sp.csr_array, perm: np.ndarray | None, what: str) -> tuple[sp.csr_array, np.ndarray]:
    """``B``'s off-diagonal part and its diagonal, which every sweep divides by.

    A zero or missing diagonal entry is an :class:`InputError` naming the first
    such row in the original order (``perm`` maps executor rows to it).
    """
    off, diag, present = _split_diagonal(B)
    bad = np.flatnonzero(~present | (diag == 0))
    if bad.size:
        r = int(bad[0]) if perm is None else int(perm[bad[0]])
        raise InputError(f"{what}: zero or missing diagonal at row {r} "
                         f"({bad.size} such row{'s' if bad.size > 1 else ''}); "
                         "the sweep divides by A[r, r]")
    return off, diag


def _run_in_original_order(executor: Any, b: np.ndarray, x: np.ndarray, mode: int,
                          sweeps: int) -> np.ndarray:
    """``executor.run`` on numpy vectors in original row order; returns the new x.

    ``executor`` has ``n``, ``dtype``, ``perm`` (``None`` for natural order)
    and ``run(b, x, mode, sweeps)`` on TVM tensors in its row order
    (:class:`~schedules.sparse.triangular.SweepExecutor`, :class:`~schedules.sparse.p2p.P2PExecutor`).
    """
    if executor.n == 0 or sweeps == 0:
        return x.copy()
    perm = executor.perm
    bo, xo = empty_aligned(executor.n, executor.dtype), empty_aligned(executor.n, executor.dtype)
    if perm is None:
        bo[:], xo[:] = b, x
    else:
        np.take(b, perm, out=bo)
        np.take(x, perm, out=xo)
    executor.run(wrap(bo), wrap(xo), mode, sweeps)
    if perm is None:
        return xo.copy()
    out = np.empty_like(xo)
    out[perm] = xo
    return out
