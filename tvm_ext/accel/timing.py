"""The simulator's clock: cycle counting of an instruction stream on the system graph.

Every device (compute unit or copy engine) executes its own instructions in
stream order; an instruction starts when its device is free and its data is
ready:

* a compute instruction waits for its operand slots (read-after-write), and
  a slot it writes waits until earlier readers are done (write-after-read);
* a copy occupies a channel of its issuer and its edge for ``bytes /
  bandwidth`` cycles (the slowest of edge and memory ports) and each memory
  port for ``bytes / port bandwidth`` (a port serves several slower channels
  at once, in the order the copies become ready); it lands ``latency``
  cycles after its last byte leaves.  Copy engines run beside compute, so
  transfers overlap compute exactly where the graph gives them their own
  issuer;
* a barrier waits for everything.

Slots that reuse each other's addresses and overlapping home regions are
ordered too.  :class:`Timeline` carries the state between streams (the
recurrent driver runs priming, recursive and finish streams on one
timeline), and :meth:`Timeline.repeat` runs a stream many times, stopping the
simulation once two consecutive iterations start from the same normalised
state: from then on every iteration is an exact translate of the last one.

>>> from tvm_ext.accel.workload import Workload
>>> from tvm_ext.accel.scheduler import schedule
>>> wl = Workload(); _ = wl.relu(wl.input("x", (32, 64)), out="y")
>>> rep = time_stream(schedule(wl).stream, "default")
>>> rep.cycles > 0, round(sum(rep.bytes_by_level.values()))
(True, 16384)
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .stream import BARRIER, COMPUTE, COPY, HOME, InstructionStream
from .system_graph import SystemGraph, load_system

__all__ = ["Timeline", "TimingReport", "time_stream"]


@dataclass
class TimingReport:
    """Cycles, per-device busy time and utilisation, and bytes moved per memory and level."""

    cycles: float
    clock_ghz: float
    device_busy: dict[str, float]  # busy cycles per channel (a 4-channel engine busy on all 4 counts once)
    device_kind: dict[str, str]
    bytes_by_memory: dict[str, dict[str, float]]
    bytes_by_level: dict[str, float]
    instructions: int
    iterations: int = 1
    simulated_iterations: int = 1
    start: np.ndarray | None = field(default=None, repr=False)
    end: np.ndarray | None = field(default=None, repr=False)

    @property
    def seconds(self) -> float:
        return self.cycles / (self.clock_ghz * 1e9)

    @property
    def utilisation(self) -> dict[str, float]:
        """Busy cycles / total cycles per device."""
        c = max(self.cycles, 1e-12)
        return {d: b / c for d, b in self.device_busy.items()}

    def utilisation_by_kind(self) -> dict[str, float]:
        """Mean utilisation of the devices of each kind (matrix, elementwise, ..., dma)."""
        out: dict[str, list[float]] = {}
        for d, u in self.utilisation.items():
            out.setdefault(self.device_kind[d], []).append(u)
        return {k: float(np.mean(v)) for k, v in out.items()}

    def device_timeline(self, stream: InstructionStream, device: str) -> list[tuple[float, float, int]]:
        """``(start, end, instruction)`` of everything ``device`` ran (needs ``record=True``).

        A copy's end is when its data lands (after the edge latency).
        """
        if self.start is None:
            raise ValueError("device_timeline: time the stream with record=True")
        return [(float(self.start[i]), float(self.end[i]), i) for i in stream.device_program(device)]

    def to_dict(self) -> dict[str, Any]:
        return {"cycles": self.cycles, "seconds": self.seconds, "instructions": self.instructions,
                "iterations": self.iterations, "simulated_iterations": self.simulated_iterations,
                "utilisation_by_kind": self.utilisation_by_kind(),
                "utilisation": self.utilisation, "bytes_by_memory": self.bytes_by_memory,
                "bytes_by_level": self.bytes_by_level}


class _Prepared:
    """Per-stream arrays the cycle loop reads (built once per stream)."""

    def __init__(self, stream: InstructionStream, system: SystemGraph):
        self.n = len(stream)
        kind = np.asarray(stream.kind, dtype=np.int64)
        self.kind = stream.kind
        self.dev = stream.dev
        self.src = stream.src
        self.dst = stream.dst
        self.piece = stream.piece
        arg = np.asarray(stream.arg, dtype=np.int64)
        nb = np.asarray(stream.nbytes, dtype=np.float64)
        mem_bw = np.array([m.bandwidth or np.inf for m in system.memories], dtype=np.float64)
        e_bw = np.array([e.bandwidth for e in system.edges], dtype=np.float64)
        e_lat = np.array([e.latency for e in system.edges], dtype=np.float64)
        idx = system.memory_index
        e_src = np.array([idx[e.src] for e in system.edges], dtype=np.int64)
        e_dst = np.array([idx[e.dst] for e in system.edges], dtype=np.int64)
        eff = np.minimum(e_bw, np.minimum(mem_bw[e_src], mem_bw[e_dst]))
        is_copy = kind == COPY
        ea = np.where(is_copy, arg, 0)
        self.dur = np.where(is_copy, nb / eff[ea], np.asarray(stream.cycles, dtype=np.float64)).tolist()
        # a port is shared: it is held for bytes / port bandwidth, not for the whole (slower) transfer
        self.pdur_src = np.where(is_copy, nb / mem_bw[e_src[ea]], 0.0).tolist()
        self.pdur_dst = np.where(is_copy, nb / mem_bw[e_dst[ea]], 0.0).tolist()
        self.lat = np.where(is_copy, e_lat[ea], 0.0).tolist()
        self.edge = np.where(is_copy, arg, -1).tolist()
        self.port_src = np.where(is_copy & np.isfinite(mem_bw[e_src[ea]]), e_src[ea], -1).tolist()
        self.port_dst = np.where(is_copy & np.isfinite(mem_bw[e_dst[ea]]), e_dst[ea], -1).tolist()
        modes = stream.calls
        ptr = stream.opnd_ptr
        o_r, o_w = [], []
        for i in np.flatnonzero(kind == COMPUTE).tolist():
            ms = modes[stream.arg[i]][1]
            for k in range(ptr[i + 1] - ptr[i]):
                o_r.append(ms[k] != "w")
                o_w.append(ms[k] != "r")
        self.o_ptr = ptr
        self.o_slot = stream.opnd_slot
        self.o_piece = stream.opnd_piece
        # flat operand flags, aligned with opnd_slot
        flags_r = [False] * len(stream.opnd_slot)
        flags_w = [False] * len(stream.opnd_slot)
        j = 0
        for i in np.flatnonzero(kind == COMPUTE).tolist():
            for k in range(ptr[i], ptr[i + 1]):
                flags_r[k], flags_w[k] = o_r[j], o_w[j]
                j += 1
        self.o_r, self.o_w = flags_r, flags_w
        self.touched_devs = sorted(set(np.asarray(stream.dev)[kind != BARRIER].tolist()))
        self.touched_edges = sorted(set(arg[is_copy].tolist()))
        slots = set(s for s in stream.opnd_slot if s >= 0)
        slots |= set(np.asarray(stream.src)[is_copy].tolist()) | set(np.asarray(stream.dst)[is_copy].tolist())
        slots.discard(HOME)
        self.touched_slots = sorted(slots)
        self.touched_pieces = sorted(set(np.asarray(stream.piece)[is_copy].tolist()))
        self.touched_ports = sorted((set(self.port_src) | set(self.port_dst)) - {-1})
        # bytes per memory (read = leaves it, written = lands in it)
        n_mem = len(system.memories)
        cp = np.flatnonzero(is_copy)
        srcm = e_src[arg[cp]]
        dstm = e_dst[arg[cp]]
        self.read_bytes = np.bincount(srcm, weights=nb[cp], minlength=n_mem)
        self.write_bytes = np.bincount(dstm, weights=nb[cp], minlength=n_mem)
        kinds = [m.kind for m in system.memories]
        level: dict[str, float] = {}
        for a, b, x in zip(srcm.tolist(), dstm.tolist(), nb[cp].tolist()):
            key = f"{kinds[a]}->{kinds[b]}"
            level[key] = level.get(key, 0.0) + x
        self.level_bytes = level
        self.busy = np.bincount(np.asarray(stream.dev)[kind != BARRIER], weights=np.asarray(self.dur)[kind != BARRIER],
                                minlength=len(system.devices)) if self.n else np.zeros(len(system.devices))


class _Calendar:
    """Busy intervals of a shared port: a request takes the earliest gap at or after its ready time.

    Unlike a device queue, a port is not served in stream order: a copy that
    becomes ready early uses the port before one issued earlier in the
    stream but still waiting for its data.
    """

    __slots__ = ("starts", "ends")

    def __init__(self):
        self.starts: list[float] = []
        self.ends: list[float] = []

    def fit(self, t: float, d: float) -> float:
        starts, ends = self.starts, self.ends
        k = bisect.bisect_right(ends, t)
        while k < len(starts):
            if starts[k] >= t + d:
                return t
            if ends[k] > t:
                t = ends[k]
            k += 1
        return t

    def take(self, t: float, d: float) -> None:
        starts, ends = self.starts, self.ends
        k = bisect.bisect_right(ends, t)
        e = t + d
        if k > 0 and ends[k - 1] == t:
            k -= 1
            t = starts[k]
            del starts[k], ends[k]
        if k < len(starts) and starts[k] == e:
            e = ends[k]
            del starts[k], ends[k]
        starts.insert(k, t)
        ends.insert(k, e)

    def prune(self, floor: float) -> None:
        k = bisect.bisect_right(self.ends, floor)
        if k:
            del self.starts[:k], self.ends[:k]

    def shift(self, by: float) -> None:
        self.starts = [x + by for x in self.starts]
        self.ends = [x + by for x in self.ends]

    def relative(self, floor: float) -> list[float]:
        out = []
        for a, b in zip(self.starts, self.ends):
            if b > floor:
                out += [max(a, floor) - floor, b - floor]
        return out


class Timeline:
    """Resource and data-ready times carried across streams run on one system."""

    def __init__(self, system: "SystemGraph | str | dict | None" = None):
        self.system = load_system(system)
        s = self.system
        self.chan_free = [[0.0] * s.channels(d) for d in range(len(s.devices))]
        self.edge_free = [0.0] * len(s.edges)
        self.ports = [_Calendar() for _ in s.memories]
        self.ready: list[float] = []
        self.lastread: list[float] = []
        self.home_ready: list[float] = []
        self.home_lastread: list[float] = []
        self.horizon = 0.0
        self.busy = np.zeros(len(s.devices))
        self.read_bytes = np.zeros(len(s.memories))
        self.write_bytes = np.zeros(len(s.memories))
        self.level_bytes: dict[str, float] = {}
        self.instructions = 0
        self._prepared: dict[int, tuple[InstructionStream, _Prepared]] = {}

    def _prep(self, stream: InstructionStream) -> _Prepared:
        hit = self._prepared.get(id(stream))
        if hit is not None and hit[0] is stream and hit[1].n == len(stream):
            return hit[1]
        p = _Prepared(stream, self.system)
        self._prepared[id(stream)] = (stream, p)
        return p

    def _grow(self, stream: InstructionStream) -> None:
        need = stream.n_slots
        if len(self.ready) < need:
            self.ready += [0.0] * (need - len(self.ready))
            self.lastread += [0.0] * (need - len(self.lastread))
        np_ = len(stream.piece_labels)
        if len(self.home_ready) < np_:
            self.home_ready += [0.0] * (np_ - len(self.home_ready))
            self.home_lastread += [0.0] * (np_ - len(self.home_lastread))

    def run(self, stream: InstructionStream, record: bool = False):
        """Advance the clock through ``stream``; returns (start, end) arrays when ``record``."""
        P = self._prep(stream)
        self._grow(stream)
        chan_free, edge_free, ports = self.chan_free, self.edge_free, self.ports
        ready, lastread, hready, hlast = self.ready, self.lastread, self.home_ready, self.home_lastread
        conflicts = stream.slot_conflicts
        overlaps = stream.piece_overlaps
        kind, dev, dur, lat = P.kind, P.dev, P.dur, P.lat
        o_ptr, o_slot, o_r, o_w = P.o_ptr, P.o_slot, P.o_r, P.o_w
        edge, psrc, pdst, src, dst, piece = P.edge, P.port_src, P.port_dst, P.src, P.dst, P.piece
        pdur_s, pdur_d = P.pdur_src, P.pdur_dst
        horizon = self.horizon
        starts = [0.0] * P.n if record else None
        ends = [0.0] * P.n if record else None
        since_prune = 0
        for i in range(P.n):
            k = kind[i]
            if k == COMPUTE:
                ch = chan_free[dev[i]]
                t = ch[0]
                a, b = o_ptr[i], o_ptr[i + 1]
                for j in range(a, b):
                    s = o_slot[j]
                    if o_r[j]:
                        if ready[s] > t:
                            t = ready[s]
                    if o_w[j]:
                        if lastread[s] > t:
                            t = lastread[s]
                        if ready[s] > t:
                            t = ready[s]
                        c = conflicts.get(s)
                        if c:
                            for x in c:
                                if lastread[x] > t:
                                    t = lastread[x]
                                if ready[x] > t:
                                    t = ready[x]
                end = t + dur[i]
                ch[0] = end
                for j in range(a, b):
                    s = o_slot[j]
                    if o_w[j]:
                        ready[s] = end
                    if o_r[j] and lastread[s] < end:
                        lastread[s] = end
                if end > horizon:
                    horizon = end
                if record:
                    starts[i], ends[i] = t, end
            elif k == COPY:
                ch = chan_free[dev[i]]
                c_idx = 0
                if len(ch) > 1:
                    c_idx = ch.index(min(ch))
                e = edge[i]
                t = ch[c_idx]
                if edge_free[e] > t:
                    t = edge_free[e]
                s, w, p = src[i], dst[i], piece[i]
                if s == HOME:
                    if hready[p] > t:
                        t = hready[p]
                    for x in overlaps[p]:
                        if hready[x] > t:
                            t = hready[x]
                elif ready[s] > t:
                    t = ready[s]
                if w == HOME:
                    if hlast[p] > t:
                        t = hlast[p]
                    for x in overlaps[p]:
                        if hlast[x] > t:
                            t = hlast[x]
                else:
                    if lastread[w] > t:
                        t = lastread[w]
                    if ready[w] > t:
                        t = ready[w]
                    c = conflicts.get(w)
                    if c:
                        for x in c:
                            if lastread[x] > t:
                                t = lastread[x]
                            if ready[x] > t:
                                t = ready[x]
                ps, pd = psrc[i], pdst[i]
                if ps >= 0 or pd >= 0:
                    while True:
                        t1 = ports[ps].fit(t, pdur_s[i]) if ps >= 0 else t
                        t2 = ports[pd].fit(t1, pdur_d[i]) if pd >= 0 else t1
                        if t2 == t1:
                            t = t1
                            break
                        t = t2
                    if ps >= 0:
                        ports[ps].take(t, pdur_s[i])
                    if pd >= 0:
                        ports[pd].take(t, pdur_d[i])
                    since_prune += 1
                busy_end = t + dur[i]
                arrive = busy_end + lat[i]
                ch[c_idx] = busy_end
                edge_free[e] = busy_end
                if s == HOME:
                    if hlast[p] < busy_end:
                        hlast[p] = busy_end
                elif lastread[s] < busy_end:
                    lastread[s] = busy_end
                if w == HOME:
                    hready[p] = arrive
                else:
                    ready[w] = arrive
                if arrive > horizon:
                    horizon = arrive
                if record:
                    starts[i], ends[i] = t, arrive
                if since_prune > 4096:
                    since_prune = 0
                    floor = min(min(c) for c in chan_free)
                    for cal in ports:
                        cal.prune(floor)
            else:  # barrier
                for ch in chan_free:
                    for c in range(len(ch)):
                        ch[c] = horizon
                for e in range(len(edge_free)):
                    edge_free[e] = horizon
                if record:
                    starts[i] = ends[i] = horizon
        self.horizon = horizon
        self.busy += P.busy
        self.read_bytes += P.read_bytes
        self.write_bytes += P.write_bytes
        for key, x in P.level_bytes.items():
            self.level_bytes[key] = self.level_bytes.get(key, 0.0) + x
        self.instructions += P.n
        if record:
            return np.asarray(starts), np.asarray(ends)
        return None

    def _normalised(self, P: _Prepared) -> tuple[float, np.ndarray]:
        """(floor, state - floor) over what the stream touches; values below the floor cannot matter."""
        # a device's channels are interchangeable (the earliest free one is taken): compare them sorted
        res = [x for d in P.touched_devs for x in sorted(self.chan_free[d])]
        res += [self.edge_free[e] for e in P.touched_edges]
        floor = min(res) if res else self.horizon
        vals = (res + [self.ready[s] for s in P.touched_slots] + [self.lastread[s] for s in P.touched_slots]
                + [self.home_ready[p] for p in P.touched_pieces] + [self.home_lastread[p] for p in P.touched_pieces]
                + [self.horizon])
        out = np.maximum(np.array(vals), floor) - floor
        cal = [x for m in P.touched_ports for x in self.ports[m].relative(floor)]
        return floor, np.concatenate([out, np.array(cal, dtype=np.float64), [float(len(cal))]])

    def repeat(self, stream: InstructionStream, times: int) -> int:
        """Run ``stream`` ``times`` times; returns how many were simulated (the rest are exact translates)."""
        if times <= 0:
            return 0
        P = self._prep(stream)
        self._grow(stream)
        prev = None
        for k in range(times):
            floor, state = self._normalised(P)
            if prev is not None and prev[1].shape == state.shape and np.allclose(prev[1], state, rtol=0, atol=1e-6):
                delta = floor - prev[0]
                left = times - k
                self._translate(P, delta * left)
                self.busy += P.busy * left
                self.read_bytes += P.read_bytes * left
                self.write_bytes += P.write_bytes * left
                for key, x in P.level_bytes.items():
                    self.level_bytes[key] = self.level_bytes.get(key, 0.0) + x * left
                self.instructions += P.n * left
                return k
            prev = (floor, state)
            self.run(stream)
        return times

    def _translate(self, P: _Prepared, shift: float) -> None:
        """Shift everything the periodic stream touches by ``shift`` cycles (the skipped iterations)."""
        for d in P.touched_devs:
            self.chan_free[d] = [x + shift for x in self.chan_free[d]]
        for e in P.touched_edges:
            self.edge_free[e] += shift
        for m in P.touched_ports:
            self.ports[m].shift(shift)
        for s in P.touched_slots:
            self.ready[s] += shift
            self.lastread[s] += shift
        for p in P.touched_pieces:
            self.home_ready[p] += shift
            self.home_lastread[p] += shift
        self.horizon += shift

    def report(self, iterations: int = 1, simulated: int = 1, record=None) -> TimingReport:
        s = self.system
        kinds = {c.name: c.kind for c in s.computes}
        kinds.update({e.name: "dma" for e in s.copy_engines})
        busy = {d: float(b) / s.channels(k) for k, (d, b) in enumerate(zip(s.devices, self.busy))}
        mem = {m.name: {"read": float(r), "written": float(w)}
               for m, r, w in zip(s.memories, self.read_bytes, self.write_bytes) if r or w}
        start, end = record if record is not None else (None, None)
        return TimingReport(float(self.horizon), s.clock_ghz, busy, kinds, mem, dict(self.level_bytes),
                            int(self.instructions), iterations, simulated, start, end)


def time_stream(stream: InstructionStream, system: "SystemGraph | str | dict | None" = None,
                record: bool = False) -> TimingReport:
    """Cycles of one stream from an idle machine."""
    tl = Timeline(system)
    rec = tl.run(stream, record=record)
    return tl.report(record=rec)
