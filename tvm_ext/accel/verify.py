"""Independent checks of a recorded stream: no stale data is ever read, no memory ever over-filled.

* :func:`check_coherence` replays the stream symbolically, element by
  element: every write of a compute instruction gets a new version number;
  slots and homes carry the versions they hold; every read (a copy's source,
  a compute operand) must see the latest version of every element inside its
  tensor, and live tensors must end with their latest versions at home.  It
  shares no bookkeeping with the scheduler (only the piece geometry), so it
  catches a missed invalidation or write-back.
* :func:`check_capacity` follows slot lifetimes (from a write into a slot to
  its last read before the next write) and checks that slots alive at the
  same time never share addresses and always fit in their memory.

>>> from tvm_ext.accel.workload import Workload
>>> from tvm_ext.accel.scheduler import schedule
>>> wl = Workload(); _ = wl.relu(wl.matmul(wl.input("a", (40, 40)), wl.weight("b", (40, 40))), out="y")
>>> s = schedule(wl, "mini")
>>> check_coherence(s), check_capacity(s)
(True, True)
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from tvm_ext.errors import ScheduleError

from .stream import COMPUTE, COPY, HOME, InstructionStream

__all__ = ["check_coherence", "check_capacity"]


def _streams(schedule: Any, streams: Sequence[InstructionStream] | None) -> list[InstructionStream]:
    return list(streams) if streams is not None else [schedule.stream]


class _Versions:
    def __init__(self, schedule: Any):
        self.P = schedule.tiles.pieces
        wl = schedule.workload
        self.latest = {n: np.zeros(wl.tensors[n].shape, dtype=np.int64) for n in self.P.tensor_names}
        self.home = {n: a.copy() for n, a in self.latest.items()}
        self.slots: dict[int, tuple[int, np.ndarray]] = {}
        self.next_id = 1

    def gather(self, arrays: dict, p: int) -> np.ndarray:
        P = self.P
        tile = np.full(P.shape[p], -1, dtype=np.int64)
        if P.valid_bytes[p]:
            block = arrays[P.tensor_names[P.tensor[p]]][P.home_index[p]].transpose(P.axes[p])
            tile[P.tile_valid[p]] = block.reshape(P.valid_shape[p])
        return tile

    def scatter(self, arrays: dict, p: int, tile: np.ndarray) -> None:
        P = self.P
        if P.valid_bytes[p]:
            block = arrays[P.tensor_names[P.tensor[p]]][P.home_index[p]].transpose(P.axes[p])
            block[...] = tile[P.tile_valid[p]].reshape(block.shape)

    def read(self, slot: int, p: int, what: str) -> np.ndarray:
        P = self.P
        if slot == HOME:
            got = self.gather(self.home, p)
        else:
            if slot not in self.slots:
                raise ScheduleError(f"{what}: slot {slot} read before anything was written to it")
            q, got = self.slots[slot]
            if q != p:
                raise ScheduleError(f"{what}: slot {slot} holds {P.label(q)}, not {P.label(p)}")
        want = self.gather(self.latest, p)
        valid = want >= 0
        if not np.array_equal(got[valid], want[valid]):
            raise ScheduleError(f"{what}: reads a stale copy of {P.label(p)}")
        return got


def check_coherence(schedule: Any, streams: Sequence[InstructionStream] | None = None,
                    live: Iterable[str] | None = None, rewritten: Iterable[str] = ()) -> bool:
    """True, or :class:`ScheduleError` naming the first stale read (see the module docstring).

    ``rewritten`` names tensors a driver overwrites at home between two
    streams (the next step's input of a recurrent run): their old copies
    must not be read afterwards.
    """
    V = _Versions(schedule)
    P = V.P
    calls = schedule.tiles.calls
    rewritten = list(rewritten)
    for n_stream, stream in enumerate(_streams(schedule, streams)):
        if n_stream:
            for n in rewritten:
                V.latest[n][...] = V.next_id
                V.home[n][...] = V.next_id
                V.next_id += 1
        for i, k in enumerate(stream.kind):
            what = f"instruction {i} ({stream.describe(i).strip()})"
            if k == COPY:
                p = stream.piece[i]
                data = V.read(stream.src[i], p, what)
                if stream.dst[i] == HOME:
                    V.scatter(V.home, p, data)
                else:
                    V.slots[stream.dst[i]] = (p, data.copy())
            elif k == COMPUTE:
                c = calls[stream.arg[i]]
                ops = stream.operands(i)
                for spec, (slot, p) in zip(c.operands, ops):
                    if spec.mode != "w":
                        V.read(slot, p, what)
                for spec, (slot, p) in zip(c.operands, ops):
                    if spec.mode != "r":
                        w = V.next_id
                        V.next_id += 1
                        tile = np.full(P.shape[p], w, dtype=np.int64)
                        V.scatter(V.latest, p, tile)
                        V.slots[slot] = (p, tile)
    names = list(live) if live is not None else schedule.workload.outputs
    for n in names:
        if not np.array_equal(V.home[n], V.latest[n]):
            raise ScheduleError(f"tensor {n}: its home copy does not hold the latest values at the end")
    return True


def check_capacity(schedule: Any, streams: Sequence[InstructionStream] | None = None) -> bool:
    """True, or :class:`ScheduleError` when two live slots overlap or a slot leaves its memory."""
    streams = _streams(schedule, streams)
    s0 = streams[0]
    caps = [m.capacity for m in schedule.system.memories]
    for slot, (m, off, nb) in enumerate(zip(s0.slot_mem, s0.slot_offset, s0.slot_bytes)):
        if off < 0 or off + nb > caps[m]:
            raise ScheduleError(f"slot {slot} [{off}, {off + nb}) leaves memory {s0.memories[m]} ({caps[m]} B)")
    # lifetimes: (start, end) event positions, one interval per write
    t = 0
    start: dict[int, int] = {}
    intervals: list[tuple[int, int, int]] = []

    def write(s: int) -> None:
        if s in start:
            intervals.append((start[s], last.get(s, start[s]), s))
        start[s] = t
        last[s] = t

    last: dict[int, int] = {}
    for stream in streams:
        for i, k in enumerate(stream.kind):
            if k == COPY:
                if stream.src[i] != HOME:
                    last[stream.src[i]] = t
                if stream.dst[i] != HOME:
                    write(stream.dst[i])
            elif k == COMPUTE:
                modes = stream.calls[stream.arg[i]][1]
                for (slot, _), m in zip(stream.operands(i), modes):
                    if m != "w":
                        last[slot] = t
                for (slot, _), m in zip(stream.operands(i), modes):
                    if m != "r":
                        write(slot)
            t += 1
    for s, a in start.items():
        intervals.append((a, last.get(s, a), s))
    conflicts = s0.slot_conflicts
    by_slot: dict[int, list[tuple[int, int]]] = {}
    for a, b, s in intervals:
        by_slot.setdefault(s, []).append((a, b))
    for s, others in conflicts.items():
        for x in others:
            for a, b in by_slot.get(s, ()):
                for c, d in by_slot.get(x, ()):
                    if a <= d and c <= b and not (b == c or d == a):
                        raise ScheduleError(f"slots {s} and {x} share addresses in {s0.memories[s0.slot_mem[s]]} "
                                            f"and are alive together (events {a}-{b} and {c}-{d})")
    return True
