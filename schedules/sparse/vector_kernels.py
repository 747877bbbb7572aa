"""Parallel TIR vector kernels for Krylov solvers: dot products and fused PCG updates.

Every kernel takes symbolic sizes, so one compiled kernel per dtype serves
every vector length (through :func:`tvm_ext.kernel_cache.get_or_build`).
Reductions accumulate in float64 whatever the vectors' dtype (a float32
dot product of a million terms summed in float32 can lose several of its 7
digits, enough to stall float32 PCG), and are chunked: ``T.parallel`` over
``chunks`` contiguous chunks
(vectors of one chunk use a ``*_serial`` twin, so no thread-pool launch, and
no wake-up of sleeping pool threads, is paid for a short vector),
each accumulating its partial sum in ``part[c]``, then one serial pass adds
the partials into ``part[chunks]`` (the result).  The caller reads that one
scalar back; vectors never leave TVM.

Kernels (``alpha``/``beta`` are scalars of the vectors' dtype):

* ``dot(u, v, part)``: ``part[chunks] = u . v``.
* ``cg_update(x, r, p, q, z, d, alpha, zmode, part)``: ``x += alpha p``,
  ``r -= alpha q``, ``part[chunks] = r . r``, and, fused into the same pass,
  ``z = 0`` (``zmode=1``, before a Gauss-Seidel preconditioner that sweeps
  from zero) or ``z = d * r`` (``zmode=2``, Jacobi); ``zmode=0`` leaves ``z``.
* ``xpay(p, z, beta)``: ``p = z + beta p``.

>>> import numpy as np, tvm
>>> k = VectorKernels("float64")
>>> u = tvm.runtime.tensor(np.arange(5.0), tvm.cpu(0))
>>> k.dot(u, u)
30.0
"""
from __future__ import annotations

import textwrap
from typing import Any

__all__ = ["VectorKernels", "vector_funcs"]

_SOURCE = '''
@T.prim_func
def dot(u_h: T.handle, v_h: T.handle, part_h: T.handle, chunk: T.int32):
    n = T.int32()
    c1 = T.int32()
    u = T.match_buffer(u_h, (n,), DT)
    v = T.match_buffer(v_h, (n,), DT)
    part = T.match_buffer(part_h, (c1,), "float64")
    for c in T.parallel(c1 - 1):
        lo = T.bind(c * chunk)
        part[c] = T.float64(0)
        for k in range(T.min(chunk, n - lo)):
            part[c] = part[c] + T.Cast("float64", u[lo + k]) * T.Cast("float64", v[lo + k])
    part[c1 - 1] = T.float64(0)
    for c in range(c1 - 1):
        part[c1 - 1] = part[c1 - 1] + part[c]


@T.prim_func
def cg_update(x_h: T.handle, r_h: T.handle, p_h: T.handle, q_h: T.handle, z_h: T.handle,
              d_h: T.handle, part_h: T.handle, alpha: DTS, zmode: T.int32, chunk: T.int32):
    n = T.int32()
    c1 = T.int32()
    x = T.match_buffer(x_h, (n,), DT)
    r = T.match_buffer(r_h, (n,), DT)
    p = T.match_buffer(p_h, (n,), DT)
    q = T.match_buffer(q_h, (n,), DT)
    z = T.match_buffer(z_h, (n,), DT)
    d = T.match_buffer(d_h, (n,), DT)
    part = T.match_buffer(part_h, (c1,), "float64")
    for c in T.parallel(c1 - 1):
        lo = T.bind(c * chunk)
        size = T.bind(T.min(chunk, n - lo))
        part[c] = T.float64(0)
        for k in range(size):
            x[lo + k] = x[lo + k] + alpha * p[lo + k]
            r[lo + k] = r[lo + k] - alpha * q[lo + k]
            part[c] = part[c] + T.Cast("float64", r[lo + k]) * T.Cast("float64", r[lo + k])
        if zmode == 1:
            for k in range(size):
                z[lo + k] = T.Cast(DT, 0)
        elif zmode == 2:
            for k in range(size):
                z[lo + k] = d[lo + k] * r[lo + k]
    part[c1 - 1] = T.float64(0)
    for c in range(c1 - 1):
        part[c1 - 1] = part[c1 - 1] + part[c]


@T.prim_func
def xpay(p_h: T.handle, z_h: T.handle, beta: DTS, chunk: T.int32, chunks: T.int32):
    n = T.int32()
    p = T.match_buffer(p_h, (n,), DT)
    z = T.match_buffer(z_h, (n,), DT)
    for c in T.parallel(chunks):
        lo = T.bind(c * chunk)
        for k in range(T.min(chunk, n - lo)):
            p[lo + k] = z[lo + k] + beta * p[lo + k]
'''

# Smallest chunk: below this a thread-pool launch costs more than the work.
_MIN_CHUNK = 8192


def vector_funcs(dtype: str = "float64"):
    """The IRModule with ``dot``, ``cg_update`` and ``xpay`` for ``dtype``, each also
    as a ``*_serial`` variant (no thread-pool launch: for vectors of one chunk).

    >>> sorted(gv.name_hint for gv in vector_funcs("float32").functions)[:3]
    ['cg_update', 'cg_update_serial', 'dot']
    """
    import tvm
    from tvm.script import tirx as T

    from schedules.sparse.row_sweep import _check_dtype

    name = _check_dtype(dtype, "vector_funcs")
    src = _SOURCE.replace("DTS", f"T.{name}").replace("DT", repr(name))
    funcs = {}
    for block in textwrap.dedent(src).split("\n\n\n"):
        for suffix, loop in (("", "T.parallel"), ("_serial", "range")):
            f = tvm.script.from_source(block.replace("T.parallel", loop), extra_vars={"T": T})
            fname = str(f.attrs["global_symbol"]) + suffix
            funcs[fname] = f.with_attr("global_symbol", fname)
    return tvm.IRModule(funcs)


class VectorKernels:
    """The compiled vector kernels of one dtype, with a reusable partial-sum buffer.

    Each method takes TVM tensors (length ``n``, the kernels' dtype) and
    returns Python floats for reductions.
    """

    def __init__(self, dtype: str = "float64", target: Any = None):
        import tvm

        from schedules.sparse.row_sweep import _check_dtype
        from tvm_ext.kernel_cache import get_or_build
        from tvm_ext.target import num_threads

        self.dtype = _check_dtype(dtype, "VectorKernels")
        self.mod = get_or_build(("schedules.sparse.vector_kernels", self.dtype, 3),
                                lambda: vector_funcs(self.dtype), target)
        # [serial, parallel]: one chunk runs without waking the thread pool
        self._dot = [self.mod["dot_serial"], self.mod["dot"]]
        self._update = [self.mod["cg_update_serial"], self.mod["cg_update"]]
        self._xpay = [self.mod["xpay_serial"], self.mod["xpay"]]
        self._threads = max(1, num_threads())
        self._dev = tvm.cpu(0)
        self._parts: dict[int, Any] = {}

    def _split(self, n: int) -> tuple[int, int]:
        """(chunk, chunks): one chunk per thread, none smaller than ``_MIN_CHUNK``."""
        chunks = max(1, min(self._threads, -(-n // _MIN_CHUNK)))
        chunk = max(1, -(-n // chunks))
        return chunk, -(-n // chunk) if n else 1

    def _part(self, chunks: int):
        import tvm

        if chunks not in self._parts:
            self._parts[chunks] = tvm.runtime.empty((chunks + 1,), "float64", self._dev)
        return self._parts[chunks]

    @staticmethod
    def _scalar(part) -> float:
        return float(part.numpy()[-1])

    def dot(self, u, v) -> float:
        """``u . v``."""
        chunk, chunks = self._split(int(u.shape[0]))
        part = self._part(chunks)
        self._dot[chunks > 1](u, v, part, chunk)
        return self._scalar(part)

    def cg_update(self, x, r, p, q, z, d, alpha: float, zmode: int) -> float:
        """``x += alpha p; r -= alpha q``; ``z`` per ``zmode``; returns ``r . r``."""
        chunk, chunks = self._split(int(x.shape[0]))
        part = self._part(chunks)
        self._update[chunks > 1](x, r, p, q, z, d, part, float(alpha), int(zmode), chunk)
        return self._scalar(part)

    def xpay(self, p, z, beta: float) -> None:
        """``p = z + beta p`` in place."""
        chunk, chunks = self._split(int(p.shape[0]))
        self._xpay[chunks > 1](p, z, float(beta), chunk, chunks)

