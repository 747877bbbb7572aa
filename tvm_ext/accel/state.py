"""ISA Mapper §3.2/§3.5: the dry run's memory state (what is where, what is stale, what is free).

Memory nodes "contain a compile-time list of memory buffers that the system
will allocate on them": :class:`MemoryState` keeps, per memory, a first-fit
address allocator (:class:`Allocator`) and the resident copies (slot ->
piece); per piece, its valid copies outside its home (memory -> slot) and a
``dirty`` flag (the home copy is stale).  Slots are numbered allocations
(memory, offset, bytes) shared by every stream recorded from this state;
slots that reuse each other's addresses are recorded as conflicts so the
timed model orders them.

>>> a = Allocator(100)
>>> a.alloc(60), a.alloc(60), a.alloc(40)
(0, None, 60)
>>> a.free(0, 60); a.alloc(50)
0
"""
from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from tvm_ext.errors import ScheduleError

if TYPE_CHECKING:  # pragma: no cover
    from .system_graph import SystemGraph
    from .tiles import PieceTable

__all__ = ["Allocator", "MemoryState"]


class Allocator:
    """First-fit allocation of byte ranges in ``[0, capacity)`` with coalescing frees."""

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.starts = [0]
        self.sizes = [self.capacity]
        self.used = 0

    def alloc(self, nbytes: int) -> int | None:
        """Offset of a free range of ``nbytes`` (first fit), or None."""
        for k, size in enumerate(self.sizes):
            if size >= nbytes:
                off = self.starts[k]
                if size == nbytes:
                    del self.starts[k], self.sizes[k]
                else:
                    self.starts[k] += nbytes
                    self.sizes[k] -= nbytes
                self.used += nbytes
                return off
        return None

    def alloc_at(self, offset: int, nbytes: int) -> bool:
        """Take ``[offset, offset + nbytes)`` if it is free."""
        k = bisect.bisect_right(self.starts, offset) - 1
        if k < 0 or self.starts[k] + self.sizes[k] < offset + nbytes:
            return False
        s, z = self.starts[k], self.sizes[k]
        del self.starts[k], self.sizes[k]
        if offset + nbytes < s + z:
            self.starts.insert(k, offset + nbytes)
            self.sizes.insert(k, s + z - offset - nbytes)
        if offset > s:
            self.starts.insert(k, s)
            self.sizes.insert(k, offset - s)
        self.used += nbytes
        return True

    def free(self, offset: int, nbytes: int) -> None:
        k = bisect.bisect_left(self.starts, offset)
        self.starts.insert(k, offset)
        self.sizes.insert(k, nbytes)
        self.used -= nbytes
        if k + 1 < len(self.starts) and offset + nbytes == self.starts[k + 1]:
            self.sizes[k] += self.sizes[k + 1]
            del self.starts[k + 1], self.sizes[k + 1]
        if k > 0 and self.starts[k - 1] + self.sizes[k - 1] == offset:
            self.sizes[k - 1] += self.sizes[k]
            del self.starts[k], self.sizes[k]

    @property
    def free_bytes(self) -> int:
        return self.capacity - self.used


class MemoryState:
    """Where every piece is during the dry run (see the module docstring)."""

    def __init__(self, system: "SystemGraph", pieces: "PieceTable"):
        self.system = system
        n_mem = len(system.memories)
        self.alloc_ = [Allocator(m.capacity) for m in system.memories]
        self.resident: list[dict[int, int]] = [{} for _ in range(n_mem)]
        self.copies: list[dict[int, int]] = [{} for _ in range(pieces.n)]
        self.dirty = bytearray(pieces.n)
        self.slot_mem: list[int] = []
        self.slot_offset: list[int] = []
        self.slot_bytes: list[int] = []
        self.slot_conflicts: dict[int, list[int]] = {}
        self._slot_ids: dict[tuple[int, int, int], int] = {}
        self._ranges: list[list[tuple[int, int, int]]] = [[] for _ in range(n_mem)]  # sorted (off, end, slot)

    # -- allocation ------------------------------------------------------------
    def free_bytes(self, mem: int) -> int:
        return self.alloc_[mem].free_bytes

    def reserve(self, mem: int, nbytes: int) -> bool:
        """Take ``nbytes`` of ``mem`` for a home copy (never freed)."""
        return self.alloc_[mem].alloc(nbytes) is not None

    def alloc(self, mem: int, nbytes: int, offset: int | None = None) -> int | None:
        """A slot of ``nbytes`` in ``mem`` (at ``offset`` if given), or None when it does not fit."""
        a = self.alloc_[mem]
        if offset is None:
            offset = a.alloc(nbytes)
            if offset is None:
                return None
        elif not a.alloc_at(offset, nbytes):
            return None
        key = (mem, offset, nbytes)
        slot = self._slot_ids.get(key)
        if slot is None:
            slot = len(self.slot_mem)
            self._slot_ids[key] = slot
            self.slot_mem.append(mem)
            self.slot_offset.append(offset)
            self.slot_bytes.append(nbytes)
            self._note_conflicts(mem, offset, offset + nbytes, slot)
        return slot

    def _note_conflicts(self, mem: int, lo: int, hi: int, slot: int) -> None:
        ranges = self._ranges[mem]
        k = bisect.bisect_left(ranges, (lo, -1, -1))
        j = k - 1
        while j >= 0 and ranges[j][1] > lo:  # ranges starting before lo and reaching into it
            self._conflict(slot, ranges[j][2])
            j -= 1
        while k < len(ranges) and ranges[k][0] < hi:
            self._conflict(slot, ranges[k][2])
            k += 1
        bisect.insort(ranges, (lo, hi, slot))

    def _conflict(self, a: int, b: int) -> None:
        self.slot_conflicts.setdefault(a, []).append(b)
        self.slot_conflicts.setdefault(b, []).append(a)

    def release(self, slot: int) -> None:
        self.alloc_[self.slot_mem[slot]].free(self.slot_offset[slot], self.slot_bytes[slot])

    # -- copies ----------------------------------------------------------------
    def add_copy(self, piece: int, mem: int, slot: int) -> None:
        self.copies[piece][mem] = slot
        self.resident[mem][slot] = piece

    def drop_copy(self, piece: int, mem: int) -> int:
        """Forget ``piece``'s copy in ``mem`` and free its slot; returns the slot."""
        slot = self.copies[piece].pop(mem)
        if self.resident[mem].pop(slot) != piece:
            raise ScheduleError(f"internal: slot {slot} did not hold piece {piece}")
        self.release(slot)
        return slot

    def placement(self) -> dict[int, tuple[tuple[tuple[int, int], ...], int]]:
        """piece -> (sorted (memory, slot) copies, dirty) for every piece with a copy or a stale home."""
        return {p: (tuple(sorted(c.items())), self.dirty[p]) for p, c in enumerate(self.copies)
                if c or self.dirty[p]}
