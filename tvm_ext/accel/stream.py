"""ISA Mapper §3.1: the recorded instruction stream of a dry run (serialisable and inspectable).

Three kinds of instruction, stored column-wise:

* ``COMPUTE``: device ``dev`` runs call ``arg`` (an instruction of the
  library, see :attr:`InstructionStream.calls`) on the operand slots
  ``opnd_slot[opnd_ptr[i]:opnd_ptr[i + 1]]`` (needle order, with their pieces
  and read/write modes), taking ``cycles[i]``;
* ``COPY``: ``dev`` issues a copy of piece ``piece[i]`` over edge ``arg``
  from slot ``src[i]`` to slot ``dst[i]`` (``-1``: the piece's place in its
  tensor's home memory), moving ``nbytes[i]`` bytes;
* ``BARRIER``: everything before finishes before anything after starts (a
  kernel-library call boundary).

A **slot** is an allocation in a memory: ``slot_mem``, ``slot_offset`` and
``slot_bytes`` say where; ``slot_conflicts`` lists other slots sharing
addresses (reused space).  The stream plus these tables is all the timed
model needs; :meth:`to_dict` / :meth:`from_dict` round-trip it through JSON.

>>> s = InstructionStream(devices=["u0", "dma"], memories=["hbm", "rf"], edges=[(0, 1)])
>>> s.calls.append(("fill_32x32", ("w",), ("C",)))
>>> s.piece_labels.append("C[0:32,0:32]")
>>> s.add_slot(1, 0, 4096)
0
>>> s.compute(0, 0, [(0, 0)], 6.0, tile=0)
>>> print(s.listing())
     0  u0      fill_32x32  C=rf#0:C[0:32,0:32]  (6 cycles)
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

__all__ = ["COMPUTE", "COPY", "BARRIER", "HOME", "InstructionStream"]

COMPUTE, COPY, BARRIER = 0, 1, 2
HOME = -1  # slot number standing for "the piece's place in its home memory"
_KIND = {COMPUTE: "compute", COPY: "copy", BARRIER: "barrier"}


@dataclass
class InstructionStream:
    """Instructions in issue order plus the tables that give them meaning."""

    devices: list[str]
    memories: list[str]
    edges: list[tuple[int, int]]  # (src memory, dst memory) per edge index
    calls: list[tuple] = field(default_factory=list)  # (instruction, operand modes[, needle operand names])
    piece_labels: list[str] = field(default_factory=list)
    piece_home: list[int] = field(default_factory=list)  # home memory of each piece
    piece_overlaps: list[tuple[int, ...]] = field(default_factory=list)
    slot_mem: list[int] = field(default_factory=list)
    slot_offset: list[int] = field(default_factory=list)
    slot_bytes: list[int] = field(default_factory=list)
    slot_conflicts: dict[int, list[int]] = field(default_factory=dict)
    kind: list[int] = field(default_factory=list)
    dev: list[int] = field(default_factory=list)
    arg: list[int] = field(default_factory=list)
    piece: list[int] = field(default_factory=list)
    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    nbytes: list[int] = field(default_factory=list)
    cycles: list[float] = field(default_factory=list)
    tile: list[int] = field(default_factory=list)
    opnd_ptr: list[int] = field(default_factory=lambda: [0])
    opnd_slot: list[int] = field(default_factory=list)
    opnd_piece: list[int] = field(default_factory=list)

    # -- building --------------------------------------------------------------
    def add_slot(self, mem: int, offset: int, nbytes: int) -> int:
        self.slot_mem.append(mem)
        self.slot_offset.append(offset)
        self.slot_bytes.append(nbytes)
        return len(self.slot_mem) - 1

    def _row(self, kind, dev, arg, piece, src, dst, nbytes, cycles, tile) -> None:
        self.kind.append(kind)
        self.dev.append(dev)
        self.arg.append(arg)
        self.piece.append(piece)
        self.src.append(src)
        self.dst.append(dst)
        self.nbytes.append(nbytes)
        self.cycles.append(cycles)
        self.tile.append(tile)
        self.opnd_ptr.append(len(self.opnd_slot))

    def compute(self, dev: int, call: int, operands: Iterable[tuple[int, int]], cycles: float, tile: int = -1) -> None:
        """Record ``dev`` running ``call`` on ``(slot, piece)`` operands (needle order)."""
        for slot, piece in operands:
            self.opnd_slot.append(slot)
            self.opnd_piece.append(piece)
        self._row(COMPUTE, dev, call, -1, -1, -1, 0, float(cycles), tile)

    def copy(self, dev: int, edge: int, piece: int, src: int, dst: int, nbytes: int) -> None:
        """Record ``dev`` copying ``piece`` over ``edge`` from slot ``src`` to slot ``dst`` (HOME = -1)."""
        self._row(COPY, dev, edge, piece, src, dst, int(nbytes), 0.0, -1)

    def barrier(self) -> None:
        self._row(BARRIER, -1, -1, -1, -1, -1, 0, 0.0, -1)

    # -- inspection ------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.kind)

    @property
    def n_slots(self) -> int:
        return len(self.slot_mem)

    def counts(self) -> dict[str, int]:
        k = np.asarray(self.kind, dtype=np.int8)
        return {"compute": int((k == COMPUTE).sum()), "copy": int((k == COPY).sum()),
                "barrier": int((k == BARRIER).sum())}

    def operands(self, i: int) -> list[tuple[int, int]]:
        a, b = self.opnd_ptr[i], self.opnd_ptr[i + 1]
        return list(zip(self.opnd_slot[a:b], self.opnd_piece[a:b]))

    def _slot_text(self, slot: int, piece: int) -> str:
        if slot == HOME:
            return f"{self.memories[self.piece_home[piece]]}(home)"
        return f"{self.memories[self.slot_mem[slot]]}#{slot}"

    def describe(self, i: int) -> str:
        """One instruction as text."""
        k = self.kind[i]
        if k == BARRIER:
            return f"{i:6d}  {'-':<6}  barrier"
        dev = self.devices[self.dev[i]]
        if k == COMPUTE:
            call = self.calls[self.arg[i]]
            name = call[0]
            needles = call[2] if len(call) > 2 else [chr(65 + n) for n in range(len(call[1]))]
            ops = "  ".join(f"{nd}={self._slot_text(s, p)}:{self.piece_labels[p]}"
                            for nd, (s, p) in zip(needles, self.operands(i)))
            return f"{i:6d}  {dev:<6}  {name}  {ops}  ({self.cycles[i]:g} cycles)"
        p = self.piece[i]
        return (f"{i:6d}  {dev:<6}  copy  {self._slot_text(self.src[i], p)} -> {self._slot_text(self.dst[i], p)}"
                f"  {self.piece_labels[p]}  {self.nbytes[i]} B")

    def listing(self, start: int = 0, count: int | None = 40) -> str:
        """Text of instructions ``start .. start + count``."""
        stop = len(self) if count is None else min(len(self), start + count)
        return "\n".join(self.describe(i) for i in range(start, stop))

    def device_program(self, device: str) -> list[int]:
        """Indices of the instructions ``device`` executes (its own queue, in order)."""
        d = self.devices.index(device)
        return [i for i, x in enumerate(self.dev) if x == d]

    # -- serialisation ---------------------------------------------------------
    _COLUMNS = ("kind", "dev", "arg", "piece", "src", "dst", "nbytes", "cycles", "tile", "opnd_ptr", "opnd_slot",
                "opnd_piece", "slot_mem", "slot_offset", "slot_bytes", "piece_home")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (columns as lists)."""
        d = {c: list(getattr(self, c)) for c in self._COLUMNS}
        d.update(devices=list(self.devices), memories=list(self.memories), edges=[list(e) for e in self.edges],
                 calls=[[c[0], *[list(x) for x in c[1:]]] for c in self.calls], piece_labels=list(self.piece_labels),
                 piece_overlaps=[list(o) for o in self.piece_overlaps],
                 slot_conflicts={str(k): list(v) for k, v in self.slot_conflicts.items()})
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "InstructionStream":
        s = cls(devices=list(d["devices"]), memories=list(d["memories"]), edges=[tuple(e) for e in d["edges"]],
                calls=[(c[0], *[tuple(x) for x in c[1:]]) for c in d["calls"]], piece_labels=list(d["piece_labels"]),
                piece_overlaps=[tuple(o) for o in d["piece_overlaps"]],
                slot_conflicts={int(k): list(v) for k, v in d["slot_conflicts"].items()})
        for c in cls._COLUMNS:
            setattr(s, c, list(d[c]))
        return s

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> "InstructionStream":
        return cls.from_dict(json.loads(text))

    def summary(self) -> dict[str, Any]:
        """Instruction counts, bytes copied and compute cycles issued per device."""
        c = self.counts()
        k = np.asarray(self.kind)
        return {**c, "instructions": len(self), "bytes_copied": int(np.asarray(self.nbytes)[k == COPY].sum()),
                "compute_cycles": float(np.asarray(self.cycles)[k == COMPUTE].sum()), "slots": self.n_slots}
