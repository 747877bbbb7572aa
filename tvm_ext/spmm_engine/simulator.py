"""Sextans Alg. 1 / Eq. 1: functional simulator of the engine on an encoded program.

The simulator reads only what the hardware reads: Q, the 64-bit A words, B,
C_in, alpha, beta and M/K/N.  For every row pass and every N0-column block
of B (Alg. 1 line 1) it

1. zeroes each PE's C scratchpad (line 2),
2. walks the windows in order, taking B's window rows (line 4) and
   consuming the stream rows ``Q[j] .. Q[j+1]-1`` (line 6): each PE decodes
   its word, skips a bubble, and does ``c[row][q] += a * b[col][q]`` for its
   N0 PUs in fp32 (product rounded, then the sum rounded, as the PU does),
3. scales by alpha, then adds ``beta * C_in`` in fp32 (Eq. 1, line 13).

Accumulation happens in exactly the PEs' order: contributions to one
scratchpad entry are applied in stream order (``numpy.add.at`` is
unbuffered and in order), so the result is bit-identical to a sequential run.

>>> import numpy as np, scipy.sparse as sp
>>> from tvm_ext.spmm_engine import preprocess
>>> A = sp.random_array((40, 30), density=0.2, rng=0, format="csr")
>>> B = np.ones((30, 3), np.float32)
>>> C = simulate(preprocess(A, pes=4, window=8), B)
>>> bool(np.allclose(C, A @ B, rtol=1e-5, atol=1e-6))
True
"""
from __future__ import annotations

from typing import Any

import numpy as np

from tvm_ext.errors import InputError, ShapeError
from tvm_ext.spmm_engine.encoding import EncodedPass, SextansProgram, decode_words
from tvm_ext.workloads import check_dense_operand

__all__ = ["simulate"]

# Bound on (non-zeros x columns) materialised at once, to keep memory modest.
_CHUNK_ELEMENTS = 1 << 23


def _scalar(value: Any, name: str) -> np.float32:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected a real number, got {value!r}") from None
    if not np.isfinite(v) or abs(v) > np.finfo(np.float32).max:
        raise InputError(f"{name}: {v!r} is not a finite fp32 scalar")
    return np.float32(v)


def _decode_pass(ps: EncodedPass, program: SextansProgram):
    """Decoded non-zeros of a pass in stream order: scratchpad slot, global column, value."""
    cfg = program.config
    P, K = cfg.pes, program.shape[1]
    crow, ccol, val, valid = decode_words(ps.words, cfg)
    window_of_row = np.repeat(np.arange(ps.q.size - 1), np.diff(ps.q.astype(np.int64)))
    sel = np.flatnonzero(valid.ravel())  # row-major: stream row, then PE
    pe = sel % P
    row = crow.ravel()[sel].astype(np.int64)
    col = window_of_row[sel // P] * cfg.window + ccol.ravel()[sel]
    depth = -(-ps.rows // P)
    if sel.size and (int(col.max()) >= K or int(row.max()) >= depth):
        raise InputError(f"program pass {ps.index}: a word addresses column {int(col.max())} or "
                         f"scratchpad row {int(row.max())} outside B ({K} rows) or C "
                         f"({depth} rows per PE)")
    return pe * depth + row, col, val.ravel()[sel], depth


def _run_pass(ps: EncodedPass, program: SextansProgram, B: np.ndarray) -> np.ndarray:
    """C_AB of one pass, ``(rows, Npad)`` fp32, accumulated in stream order."""
    P, N0 = program.config.pes, program.config.n0
    spad, col, val, depth = _decode_pass(ps, program)
    npad = B.shape[1]
    step = max(N0, (_CHUNK_ELEMENTS // max(val.size, 1)) // N0 * N0)
    local = np.arange(ps.rows)
    home = (local % P) * depth + local // P  # scratchpad slot of each C row
    out = np.empty((ps.rows, npad), dtype=np.float32)
    for c0 in range(0, npad, step):
        nc = min(step, npad - c0)
        scratch = np.zeros(P * depth * nc, dtype=np.float32)  # Alg. 1 line 2
        prod = val[:, None] * B[col, c0:c0 + nc]  # fp32 multiply per PU
        flat = (spad[:, None] * nc + np.arange(nc)).ravel()
        np.add.at(scratch, flat, prod.ravel())  # in-order fp32 accumulation
        out[:, c0:c0 + nc] = scratch.reshape(P * depth, nc)[home]
    return out


def simulate(program: SextansProgram, B: Any, C: Any = None, *, alpha: float = 1.0,
             beta: float = 0.0) -> np.ndarray:
    """Run the engine functionally: ``alpha * A @ B + beta * C`` in fp32.

    ``B`` is ``K x N``; ``C`` (``M x N``) may be omitted (C_in = 0).  N need
    not be a multiple of N0: B is padded with zero columns, as the host does.
    """
    if not isinstance(program, SextansProgram):
        raise InputError(f"program: expected a SextansProgram (see preprocess), "
                         f"got {type(program).__name__}")
    M, K = program.shape
    Bv = check_dense_operand(B, K, dtype=np.float32, what="B")
    N = Bv.shape[1]
    a32, b32 = _scalar(alpha, "alpha"), _scalar(beta, "beta")
    Cin = None
    if C is not None:
        Cin = check_dense_operand(C, M, dtype=np.float32, what="C")
        if Cin.shape[1] != N:
            raise ShapeError(f"C: has {Cin.shape[1]} columns, B has {N}")
    N0 = program.config.n0
    npad = -(-N // N0) * N0
    Bp = np.zeros((K, npad), dtype=np.float32)
    Bp[:, :N] = Bv
    out = np.empty((M, N), dtype=np.float32)
    for ps in program.passes:
        cab = _run_pass(ps, program, Bp)[:, :N]
        res = a32 * cab  # C_alphaAB
        if Cin is not None:
            res = res + b32 * Cin[ps.row0:ps.row0 + ps.rows]  # Comp C
        out[ps.row0:ps.row0 + ps.rows] = res
    return out
