"""Sextans §3.4 (Fig. 5(k, l)): per-PE scheduled lists, bubble padding and the HFlex pointer list Q.

After scheduling, each (window, PE) bin is a list of cycles, some holding a
non-zero and some bubbles.  All PEs walk one shared pointer list Q, so within
a window every PE's list is padded with bubbles to the longest one (as the
Sextans host does); window ``j`` then occupies stream rows
``Q[j] .. Q[j+1]-1``, with ``Q[0] = 0`` and ``K/K0 + 1`` entries.  A matrix
taller than one engine invocation holds has one stream (and one Q) per row
pass.

>>> import numpy as np, scipy.sparse as sp
>>> from tvm_ext.spmm_engine import schedule
>>> A = sp.csr_array(np.eye(3))
>>> s = schedule(A, P=1, D=4, K0=2)
>>> s.passes[0].q.tolist(), s.stream_length
([0, 2, 3], 3)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tvm_ext.errors import InputError
from tvm_ext.spmm_engine.config import EngineConfig
from tvm_ext.spmm_engine.partition import Partition

__all__ = ["PassStream", "ScheduledStream", "build_stream"]


@dataclass(frozen=True)
class PassStream:
    """One engine invocation: rows ``row0 .. row0+rows-1`` of A and C.

    ``q`` is the HFlex pointer list; ``pe_len[j, p]`` is PE p's own scheduled
    length in window j (bubbles from the RAW distance included, padding not).
    """

    index: int
    row0: int
    rows: int
    q: np.ndarray
    pe_len: np.ndarray

    @property
    def length(self) -> int:
        """Stream rows (cycles of the PE stage) of this pass: ``Q[-1]``."""
        return int(self.q[-1])

    @property
    def window_lengths(self) -> np.ndarray:
        """Scheduled cycles of each window (the longest PE's list)."""
        return np.diff(self.q)


@dataclass(frozen=True)
class ScheduledStream:
    """The scheduled non-zero stream, before 64-bit encoding.

    Per non-zero, in the CSR order of the canonical A: ``pass_id``,
    ``window``, ``pe``, ``slot`` (cycle within the window), ``position``
    (stream row: ``Q[window] + slot``), compressed ``crow`` / ``ccol`` and
    ``values``.  :meth:`table` lays it out as the PEs see it.
    """

    shape: tuple[int, int]
    config: EngineConfig
    passes: tuple[PassStream, ...]
    pass_id: np.ndarray
    window: np.ndarray
    pe: np.ndarray
    slot: np.ndarray
    position: np.ndarray
    crow: np.ndarray
    ccol: np.ndarray
    values: np.ndarray

    @property
    def nnz(self) -> int:
        """Number of scheduled non-zeros."""
        return int(self.values.size)

    @property
    def stream_length(self) -> int:
        """Scheduled slots of the longest PE, summed over windows and passes."""
        return int(sum(p.length for p in self.passes))

    def table(self, pass_index: int = 0) -> np.ndarray:
        """``(Q[-1], P)`` array: CSR index of the non-zero each PE handles at
        each stream row, ``-1`` for a bubble.

        >>> import numpy as np, scipy.sparse as sp
        >>> from tvm_ext.spmm_engine import schedule
        >>> schedule(sp.csr_array(np.ones((1, 3))), P=1, D=2, K0=4).table()[:, 0].tolist()
        [0, -1, 1, -1, 2]
        """
        if not 0 <= pass_index < len(self.passes):
            raise InputError(f"pass_index {pass_index} out of range (0..{len(self.passes) - 1})")
        ps = self.passes[pass_index]
        out = np.full((ps.length, self.config.pes), -1, dtype=np.int64)
        mine = np.flatnonzero(self.pass_id == pass_index)
        out[self.position[mine], self.pe[mine]] = mine
        return out

    def pe_lengths(self) -> np.ndarray:
        """Each PE's own scheduled length (padding excluded), summed over windows and passes."""
        return np.sum([p.pe_len.sum(axis=0) for p in self.passes], axis=0)

    def stats(self) -> dict[str, Any]:
        """Bubble and length statistics of the stream.

        ``bubbles`` counts every empty slot the engine streams
        (``P * stream_length - nnz``); it splits into ``raw_bubbles`` (inside
        a PE's own schedule, from the RAW distance) and ``padding`` (aligning
        PEs to the longest list of each window).  ``pe_lengths`` and ``pe_nnz`` are each
        PE's own scheduled length and its non-zeros (their difference is its
        RAW bubbles).
        """
        P = self.config.pes
        own = self.pe_lengths()
        slots = P * self.stream_length
        return {
            "passes": len(self.passes),
            "windows": int(self.passes[0].q.size - 1),
            "nnz": self.nnz,
            "stream_length": self.stream_length,
            "bubbles": int(slots - self.nnz),
            "raw_bubbles": int(own.sum() - self.nnz),
            "padding": int(slots - own.sum()),
            "slot_utilization": self.nnz / slots if slots else 1.0,
            "pe_length": {"min": int(own.min()), "mean": float(own.mean()), "max": int(own.max())},
            "pe_lengths": [int(x) for x in own],
            "pe_nnz": [int(x) for x in np.bincount(self.pe, minlength=P)],
        }


def build_stream(part: Partition, slot: np.ndarray) -> ScheduledStream:
    """Pad the scheduled bins per window, build Q and place every non-zero.

    ``slot`` is the scheduler's output (scheduling order, see
    :func:`~tvm_ext.spmm_engine.scheduler.list_schedule`).
    """
    cfg = part.config
    P, W = cfg.pes, part.n_windows
    bin_len = np.zeros(part.n_bins, dtype=np.int64)
    sizes = np.diff(part.bin_ptr)
    nonempty = np.flatnonzero(sizes)
    if nonempty.size:
        bin_len[nonempty] = np.maximum.reduceat(slot, part.bin_ptr[nonempty]) + 1
    pe_len = bin_len.reshape(part.n_passes, W, P)
    q = np.zeros((part.n_passes, W + 1), dtype=np.int64)
    np.cumsum(pe_len.max(axis=2), axis=1, out=q[:, 1:])
    slot_csr = np.empty(part.nnz, dtype=np.int64)
    slot_csr[part.order] = slot
    position = q[part.pass_id, part.window] + slot_csr
    passes = tuple(
        PassStream(index=i, row0=part.pass_rows(i)[0], rows=part.pass_rows(i)[1], q=q[i],
                   pe_len=pe_len[i])
        for i in range(part.n_passes)
    )
    return ScheduledStream(
        shape=part.shape, config=cfg, passes=passes, pass_id=part.pass_id, window=part.window,
        pe=part.pe, slot=slot_csr, position=position, crow=part.crow, ccol=part.ccol,
        values=part.values,
    )
