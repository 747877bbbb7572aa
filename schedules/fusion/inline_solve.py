"""A small SPD solve ``out = G⁻¹·R`` (``G``: ``N x N``) as kernel text, run before a row kernel's loop.

Block CG's host steps ``Λ = Δ⁻¹Γ`` and ``Φ = Γ_prev⁻¹Γ`` (GOGETA Alg. 1) feed
the row kernel that applies them to the ``M x N`` blocks.  Emitted as that
kernel's serial prologue, the solve costs no host round trip: ``G`` is scaled
to unit diagonal (as :func:`~schedules.fusion.block_cg_iteration.spd_pinv_solve`
does), Cholesky-factored in float64, and ``R``'s columns are solved by
forward and back substitution.  A pivot of the scaled ``G`` that is not above
``sqrt(eps)`` (a non-positive diagonal, a rank-deficient or indefinite ``G``,
NaN) sets the status flag and the kernel skips its loop: the caller then
runs the host's eigen-solve, which deflates or reports, and the kernel
without the prologue.  ``N³/3`` flops: nothing next to a pass over ``M`` rows.

>>> from tvm_ext.tvmscript_text import Code
>>> code = Code()
>>> emit_spd_solve(code, "g_Delta", "g_Gamma", "g_Lambda", "st", 2, 2, "float64")
>>> code.lines[0]
'sv_s = T.alloc_buffer((2,), "float64")'
"""
from __future__ import annotations

import numpy as np

from tvm_ext.tvmscript_text import Code

__all__ = ["emit_spd_solve", "pivot_threshold"]


def pivot_threshold(dtype: str) -> float:
    """The smallest pivot of the unit-diagonal ``G`` the kernel accepts: ``sqrt(eps)`` of ``dtype``.

    >>> pivot_threshold("float64") < 1e-7 < pivot_threshold("float32")
    True
    """
    return float(np.sqrt(np.finfo(dtype).eps))


def emit_spd_solve(code: Code, G: str, R: str, out: str, status: str, n: int, cols: int, dtype: str,
                   prefix: str = "sv") -> None:
    """Emit ``out = G⁻¹·R`` (``G``: ``n x n`` SPD, ``R`` and ``out``: ``n x cols``) into ``code``.

    ``status[0]`` is set to 1 when a pivot fails (it is never cleared here:
    the caller zeroes it first, so several solves share one flag).  The
    buffers named by ``prefix`` are the solve's float64 scratch.
    """
    f64 = "float64"
    s, L, y, acc = (f"{prefix}_{k}" for k in ("s", "L", "y", "acc"))
    thr = repr(pivot_threshold(dtype))

    def load(buf: str, i: str, j: str) -> str:
        return f"T.Cast(\"{f64}\", {buf}[{i}, {j}])" if dtype != f64 else f"{buf}[{i}, {j}]"

    code(f'{s} = T.alloc_buffer(({n},), "{f64}")')
    code(f'{L} = T.alloc_buffer(({n}, {n}), "{f64}")')
    code(f'{y} = T.alloc_buffer(({n},), "{f64}")')
    code(f'{acc} = T.alloc_buffer((1,), "{f64}")')
    with code.block(f"for i in range({n}):"):            # unit-diagonal scaling
        with code.block(f"if {load(G, 'i', 'i')} > T.float64(0):"):
            code(f"{s}[i] = T.float64(1) / T.sqrt({load(G, 'i', 'i')})")
        with code.block("else:"):
            code(f"{s}[i] = T.float64(0)")
            code(f"{status}[0] = 1")
    with code.block(f"for j in range({n}):"):            # Cholesky of the scaled G, column by column
        code(f"{acc}[0] = {load(G, 'j', 'j')} * {s}[j] * {s}[j]")
        with code.block("for q in range(j):"):
            code(f"{acc}[0] = {acc}[0] - {L}[j, q] * {L}[j, q]")
        with code.block(f"if {acc}[0] > T.float64({thr}):"):
            code(f"{L}[j, j] = T.sqrt({acc}[0])")
        with code.block("else:"):
            code(f"{L}[j, j] = T.float64(1)")
            code(f"{status}[0] = 1")
        with code.block(f"for i in range(j + 1, {n}):"):
            code(f"{acc}[0] = {load(G, 'i', 'j')} * {s}[i] * {s}[j]")
            with code.block("for q in range(j):"):
                code(f"{acc}[0] = {acc}[0] - {L}[i, q] * {L}[j, q]")
            code(f"{L}[i, j] = {acc}[0] / {L}[j, j]")
    with code.block(f"for c in range({cols}):"):         # each column of R: L z = s R[:, c], Lᵀ w = z
        with code.block(f"for i in range({n}):"):
            code(f"{acc}[0] = {load(R, 'i', 'c')} * {s}[i]")
            with code.block("for q in range(i):"):
                code(f"{acc}[0] = {acc}[0] - {L}[i, q] * {y}[q]")
            code(f"{y}[i] = {acc}[0] / {L}[i, i]")
        with code.block(f"for ii in range({n}):"):
            code(f"i = {n - 1} - ii")
            code(f"{acc}[0] = {y}[i]")
            with code.block(f"for q in range(i + 1, {n}):"):
                code(f"{acc}[0] = {acc}[0] - {L}[q, i] * {y}[q]")
            code(f"{y}[i] = {acc}[0] / {L}[i, i]")
            value = f"{y}[i] * {s}[i]"
            code(f"{out}[i, c] = " + (f"T.Cast(\"{dtype}\", {value})" if dtype != f64 else value))
