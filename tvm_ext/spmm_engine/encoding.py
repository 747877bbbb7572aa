"""Sextans §3.2 step 1: the 64-bit non-zero word and the encoded program.

A word is ``col (14 bits) | row (18 bits) | fp32 value (32 bits)``, from the
most significant end, as the released host writes it.  A bubble has the row
field all ones (``0x3FFFF``), column 0 and value 0; the PE skips it.  Field
widths follow :class:`~tvm_ext.spmm_engine.config.EngineConfig`.

Overflow is checked before packing: a column that does not fit the column
field, a compressed row that reaches the bubble marker, a value outside the
fp32 range, or a stream longer than the 32-bit Q pointers, each raise a
clear :class:`~tvm_ext.errors.InputError` naming the field (rows never get
there in practice: :mod:`~tvm_ext.spmm_engine.partition` splits tall A into
row passes first).

>>> import numpy as np
>>> from tvm_ext.spmm_engine.config import EngineConfig
>>> cfg = EngineConfig()
>>> w = encode_words(np.array([5]), np.array([4095]), np.array([1.5]), cfg)
>>> hex(int(w[0]))
'0x3ffc00053fc00000'
>>> [x.tolist() for x in decode_words(w, cfg)]
[[5], [4095], [1.5], [True]]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tvm_ext.errors import InputError
from tvm_ext.spmm_engine.config import EngineConfig
from tvm_ext.spmm_engine.stream import ScheduledStream

__all__ = ["encode_words", "decode_words", "bubble_word", "check_fields", "EncodedPass",
           "SextansProgram", "encode_stream"]

_FP32_MAX = float(np.finfo(np.float32).max)
_Q_MAX = (1 << 32) - 1


def bubble_word(config: EngineConfig) -> np.uint64:
    """The word of an empty slot: row field all ones, column and value 0."""
    return np.uint64(((1 << config.row_bits) - 1) << 32)


def check_fields(crow: np.ndarray, ccol: np.ndarray, values: np.ndarray,
                 config: EngineConfig, *, what: str = "A") -> np.ndarray:
    """Raise :class:`InputError` if any field overflows; return fp32 values."""
    row_limit = (1 << config.row_bits) - 1  # the all-ones value marks a bubble
    col_limit = 1 << config.col_bits
    if crow.size and (int(crow.max()) >= row_limit or int(crow.min()) < 0):
        bad = int(crow.max())
        raise InputError(f"{what}: compressed row index {bad} overflows the {config.row_bits}-bit "
                         f"row field (max {row_limit - 1}); split A by rows")
    if ccol.size and (int(ccol.max()) >= col_limit or int(ccol.min()) < 0):
        raise InputError(f"{what}: compressed column index {int(ccol.max())} overflows the "
                         f"{config.col_bits}-bit column field (max {col_limit - 1})")
    with np.errstate(over="ignore", invalid="ignore"):
        v32 = np.asarray(values).astype(np.float32)
    bad = np.flatnonzero(~np.isfinite(v32)) if v32.size else v32
    if bad.size:
        raise InputError(f"{what}: value {np.asarray(values)[bad[0]]!r} (non-zero #{int(bad[0])}) "
                         f"overflows the fp32 value field")
    return v32


def encode_words(crow: np.ndarray, ccol: np.ndarray, values: np.ndarray,
                 config: EngineConfig) -> np.ndarray:
    """Pack non-zeros into 64-bit words (fields checked first)."""
    v32 = check_fields(np.asarray(crow), np.asarray(ccol), np.asarray(values), config)
    words = np.asarray(ccol).astype(np.uint64)
    words <<= np.uint64(config.row_bits)
    words |= np.asarray(crow).astype(np.uint64)
    words <<= np.uint64(32)
    words |= v32.view(np.uint32)
    return words


def decode_words(words: np.ndarray, config: EngineConfig
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unpack words into ``(row, col, fp32 value, is_non_zero)`` arrays."""
    w = np.asarray(words, dtype=np.uint64)
    row_mask = np.uint64((1 << config.row_bits) - 1)
    col_mask = np.uint64((1 << config.col_bits) - 1)
    row = (w >> np.uint64(32)) & row_mask
    col = (w >> np.uint64(32 + config.row_bits)) & col_mask
    val = (w & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32)
    return row.astype(np.int32), col.astype(np.int32), val, row != row_mask


@dataclass(frozen=True)
class EncodedPass:
    """What one engine invocation reads from HBM: Q (uint32) and the A words.

    ``words`` is ``(Q[-1], P)``: stream row ``i`` holds the word each PE
    consumes at PE-stage cycle ``i``.  PE group ``g`` (PEs ``g*8 .. g*8+7``)
    reads its columns from A channel ``g`` (§3.1.1).
    """

    index: int
    row0: int
    rows: int
    q: np.ndarray
    words: np.ndarray

    @property
    def length(self) -> int:
        """Stream rows of this pass (``Q[-1]``)."""
        return int(self.q[-1])

    def channel(self, peg: int, pes_per_peg: int = 8) -> np.ndarray:
        """The words PE group ``peg`` streams from its A channel."""
        return self.words[:, peg * pes_per_peg:(peg + 1) * pes_per_peg]


@dataclass(frozen=True)
class SextansProgram:
    """A preprocessed sparse matrix, ready for the engine: per-pass Q + words.

    ``stats`` are the schedule statistics of
    :meth:`ScheduledStream.stats`.
    """

    shape: tuple[int, int]
    nnz: int
    config: EngineConfig
    passes: tuple[EncodedPass, ...]
    stats: dict[str, Any]

    @property
    def stream_length(self) -> int:
        """Scheduled slots of the longest PE, summed over windows and passes."""
        return int(sum(p.length for p in self.passes))

    @property
    def nbytes(self) -> int:
        """Bytes of A words plus Q pointers, as stored in HBM."""
        return int(sum(p.words.nbytes + p.q.nbytes for p in self.passes))


def encode_stream(stream: ScheduledStream) -> SextansProgram:
    """Encode every pass of a scheduled stream into its Q and word array."""
    cfg = stream.config
    words = encode_words(stream.crow, stream.ccol, stream.values, cfg)
    bubble = bubble_word(cfg)
    # passes are row ranges, hence contiguous ranges of the CSR-ordered non-zeros
    bounds = np.searchsorted(stream.pass_id, np.arange(len(stream.passes) + 1))
    passes = []
    for ps in stream.passes:
        if ps.length > _Q_MAX:
            raise InputError(f"A: pass {ps.index} streams {ps.length} rows, beyond the 32-bit "
                             f"Q pointers (max {_Q_MAX})")
        lo, hi = bounds[ps.index], bounds[ps.index + 1]
        table = np.full((ps.length, cfg.pes), bubble, dtype=np.uint64)
        flat = stream.position[lo:hi] * cfg.pes + stream.pe[lo:hi]
        table.ravel()[flat] = words[lo:hi]
        passes.append(EncodedPass(index=ps.index, row0=ps.row0, rows=ps.rows,
                                  q=ps.q.astype(np.uint32), words=table))
    return SextansProgram(shape=stream.shape, nnz=stream.nnz, config=cfg, passes=tuple(passes),
                          stats=stream.stats())
