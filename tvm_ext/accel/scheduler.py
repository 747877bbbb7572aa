"""ISA Mapper §3.1-§3.5: the static dry-run scheduler over a system description graph.

:class:`Scheduler` lowers a :class:`~tvm_ext.accel.workload.Workload` onto the
graph's instructions (§2, :mod:`~tvm_ext.accel.lowering`), unrolls it into
compute tiles (§3.3, :mod:`~tvm_ext.accel.tiles`), and then *dry-runs* the
tiles in the order its :class:`~tvm_ext.accel.approach.Approach` picks,
recording every instruction into an
:class:`~tvm_ext.accel.stream.InstructionStream`:

1. **device allocation** (§3.4): the approach picks a unit among those
   running the tile's instruction;
2. **memory movement** (§3.5): for each operand the unit's node says where
   it may be (its memories, the "one operand per register file" rules); a
   piece already valid there is reused; otherwise the approach picks the
   destination, the source copy and the path, and one copy per hop is
   recorded, each leaving an intermediate copy that later tiles use as a
   cache;
3. **eviction**: a full memory evicts what the approach picks; a dirty piece
   (its home copy is stale) is written back first unless it is dead;
4. **virtual invalidation**: a write makes every other copy of the piece,
   and of any piece overlapping it, unusable (dirty overlapping pieces are
   written back first).

With ``isolate_ops`` every op starts cold and ends with its results written
home behind a barrier: the kernel-library discipline of
:mod:`~tvm_ext.accel.kernel_library`.

>>> from tvm_ext.accel.workload import Workload
>>> wl = Workload(); _ = wl.matmul(wl.input("a", (64, 64)), wl.weight("b", (64, 64)), out="c")
>>> s = schedule(wl, "default")
>>> s.stream.counts()["compute"], s.stats["writebacks"]
(12, 4)
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tvm_ext.errors import ConfigError, ScheduleError

from .approach import Approach, HeuristicApproach
from .lowering import LoweredOp, legalize, lower_workload
from .queries import NEVER, ApproachQueries
from .state import MemoryState
from .stream import HOME, InstructionStream
from .system_graph import SystemGraph, load_system
from .tiles import TileSet, op_order, unroll
from .workload import Workload

__all__ = ["Scheduler", "Schedule", "schedule"]


@dataclass
class Schedule:
    """A recorded dry run: the stream plus what is needed to execute and explain it."""

    workload: Workload
    system: SystemGraph
    approach: str
    tiles: TileSet
    order: np.ndarray
    stream: InstructionStream
    homes: dict[str, list[str]]
    stats: dict[str, int] = field(default_factory=dict)
    kind: str = "isam"

    @property
    def pieces(self):
        return self.tiles.pieces

    def describe(self) -> dict[str, Any]:
        """JSON-able summary (counts, homes, statistics, lowering)."""
        return {"workload": self.workload.name, "system": self.system.name, "approach": self.approach,
                "kind": self.kind, "tiles": self.tiles.n, "pieces": self.pieces.n, "homes": dict(self.homes),
                "stream": self.stream.summary(), "stats": dict(self.stats),
                "instructions": sorted({c.instruction.name for c in self.tiles.calls})}


class Scheduler(ApproachQueries):
    """The dry run of one workload on one system graph (see the module docstring); what the
    approach asks it is in :class:`~tvm_ext.accel.queries.ApproachQueries`."""

    def __init__(self, workload: Workload, system: "SystemGraph | str | dict | None" = None,
                 approach: Approach | None = None, *, isolate_ops: bool = False, home_kind: str | None = None):
        self.system = load_system(system)
        self.workload = workload = legalize(workload, self.system)
        self.approach = approach or HeuristicApproach()
        self.isolate_ops = bool(isolate_ops)
        self.lowered: list[LoweredOp] = lower_workload(workload, self.system)
        self.tiles = unroll(workload, self.lowered)
        self.pieces = self.tiles.pieces
        self.memory_names = [m.name for m in self.system.memories]
        self._setup_calls()
        self._tile_call = self.tiles.call.tolist()
        widths = [len(m) for m in self.call_modes]
        self._tile_pieces = [tuple(row[:widths[c]]) for c, row in zip(self._tile_call,
                                                                      self.tiles.operand_pieces.tolist())]
        self._dev_domain = [self.system.domain(d) for d in range(len(self.system.computes))]
        order = np.asarray(self.approach.tile_order(self.tiles), dtype=np.int64)
        self._check_order(order)
        self.order = op_order(self.tiles, order) if self.isolate_ops else order
        self._setup_next_use()
        self._setup_costs()
        self.state = MemoryState(self.system, self.pieces)
        self.homes = self._place_homes(home_kind)
        self.load = [0.0] * len(self.system.devices)
        self.dom_load = [0.0] * len(self.system.domains)
        self.stats = {"copies": 0, "reuses": 0, "evictions": 0, "writebacks": 0, "dropped_dead": 0,
                      "invalidations": 0, "coherence_flushes": 0}
        self.pinned: set[int] = set()
        self.piece_writer: dict[int, int] = {}
        self._heaps: list[list] = [[] for _ in self.system.memories]
        self._reset_estimates()
        self.chain_lookahead = 1
        self._est_key: tuple[int, int] = (-1, -1)
        self._est_cache: dict[int, float] = {}
        self.slot_last_use: dict[int, int] = {}
        self.wrap = False
        self._cur_tile = -1

    # -- setup -------------------------------------------------------------------
    def _setup_calls(self) -> None:
        sysg = self.system
        self.call_units: list[list[int]] = []
        self.call_cycles: list[dict[int, float]] = []
        self.call_modes = self.tiles.modes
        for c in self.tiles.calls:
            units = sysg.units_for(c.instruction.name)
            if not units:
                raise ConfigError(f"no compute unit of system {sysg.name!r} runs {c.instruction.name}")
            self.call_units.append(units)
            self.call_cycles.append({d: sysg.cycles(d, c.instruction.name) for d in units})
        idx = sysg.memory_index
        self.dev_mems = [frozenset(idx[m] for m in c.memories) for c in sysg.computes]
        self.dev_distinct = [c.distinct_operand_memories for c in sysg.computes]
        self.mem_max_ops = [m.max_operands or 1 << 30 for m in sysg.memories]
        self.edge_issuer = [sysg.device_index[e.issuer] for e in sysg.edges]
        self.edge_dst = [idx[e.dst] for e in sysg.edges]
        self.edge_src = [idx[e.src] for e in sysg.edges]
        roles = [self.workload.tensors[n].role for n in self.pieces.tensor_names]
        self.tensor_role = roles
        self.piece_role = [roles[t] for t in self.pieces.tensor]

    def _check_order(self, order: np.ndarray) -> None:
        n = self.tiles.n
        if order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
            raise ScheduleError(f"approach {self.approach.name}: tile_order is not a permutation of {n} tiles")
        ptr, pred = self.tiles.dependencies()
        pos = np.empty(n, dtype=np.int64)
        pos[order] = np.arange(n)
        dst = np.repeat(np.arange(n), np.diff(ptr))
        bad = np.flatnonzero(pos[pred] >= pos[dst])
        if len(bad):
            k = bad[0]
            raise ScheduleError(f"approach {self.approach.name}: tile_order runs tile {dst[k]} before tile "
                                f"{pred[k]}, which it depends on")

    def _setup_next_use(self) -> None:
        """Per piece, the sorted positions (in tile order) of the tiles using it."""
        n = self.tiles.n
        pos = np.empty(n, dtype=np.int64)
        pos[self.order] = np.arange(n)
        op = self.tiles.operand_pieces
        rows, cols = np.nonzero(op >= 0)
        p = op[rows, cols]
        q = pos[rows]
        o = np.lexsort((q, p))
        p, q = p[o], q[o]
        ptr = np.zeros(self.pieces.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(p, minlength=self.pieces.n), out=ptr[1:])
        self.use_ptr = ptr.tolist()
        self.use_pos = q.tolist()
        self.cursor = ptr[:-1].tolist()

    def _setup_costs(self) -> None:
        """Unloaded transfer cost (latency, cycles/byte) from each memory to the nearest memory of each domain."""
        sysg = self.system
        names = self.memory_names
        doms = sysg.domains
        self.dom_cost: list[list[tuple[float, float]]] = []
        for m in names:
            row = []
            for dom in doms:
                best = (float("inf"), 0.0)
                for d in dom:
                    if d == m:
                        best = (0.0, 0.0)
                        break
                    edges = sysg.path(m, d)
                    lat = sum(e.latency for e in edges)
                    inv = sum(1.0 / e.bandwidth for e in edges)
                    if lat + 4096 * inv < best[0] + 4096 * best[1]:
                        best = (lat, inv)
                row.append(best)
            self.dom_cost.append(row)
        self.dom_size = [0] * len(doms)
        for d in range(len(sysg.computes)):
            self.dom_size[sysg.domain(d)] += 1

    def _place_homes(self, home_kind: str | None) -> dict[str, list[str]]:
        """Home memories of every tensor (the approach may interleave one tensor over several)."""
        sysg = self.system
        cands = [sysg.memory_index[m] for m in sysg.home_memories]
        if home_kind is not None:
            cands = [m for m in cands if sysg.memories[m].kind == home_kind]
            if not cands:
                raise ConfigError(f"system {sysg.name!r} has no memory of kind {home_kind!r} for tensor homes")
        names = self.pieces.tensor_names
        shapes = self.pieces.tensor_shapes
        self.tensor_home: list[list[int]] = [[] for _ in names]
        for t in sorted(range(len(names)), key=lambda t: -int(np.prod(shapes[t]))):
            nbytes = int(np.prod(shapes[t])) * 4
            fits = [m for m in cands if self.state.free_bytes(m) >= nbytes]
            if not fits:
                raise ScheduleError(f"tensor {names[t]} ({nbytes} B) fits in no home memory of {sysg.name!r}")
            got = self.approach.home(self, t, fits)
            mems = [got] if isinstance(got, (int, np.integer)) else list(got)
            if not mems or any(m not in fits for m in mems):
                raise ScheduleError(f"approach {self.approach.name}: home {got} is not among the candidates "
                                    f"for {names[t]}")
            share = -(-nbytes // len(mems))
            for m in mems:
                if not self.state.reserve(m, share):
                    raise ScheduleError(f"tensor {names[t]}: no room for its home share in {self.memory_names[m]}")
            self.tensor_home[t] = [int(m) for m in mems]
        self.piece_home = [self._interleave(p) for p in range(self.pieces.n)]
        return {names[t]: [self.memory_names[m] for m in self.tensor_home[t]] for t in range(len(names))}

    def _interleave(self, p: int) -> int:
        """Home memory of piece ``p``: its tensor's home memories dealt diagonally over the tile grid."""
        mems = self.tensor_home[self.pieces.tensor[p]]
        if len(mems) == 1:
            return mems[0]
        P = self.pieces
        k = sum(s // max(c * st, 1) for s, c, st in zip(P.start[p], P.counts[p], P.steps[p]))
        return mems[k % len(mems)]

    # -- time estimates (a cheap list-scheduling clock the heuristics consult) ------
    def _reset_estimates(self) -> None:
        """Estimated free time of every device channel and ready time of every slot, from 0 each run."""
        sysg = self.system
        self.est_chan = [[0.0] * sysg.channels(d) for d in range(len(sysg.devices))]
        self.est_ready: dict[int, float] = {}
        self.est_read: dict[int, float] = {}
        self.est_home: dict[int, float] = {}
        self._edge_bw = [e.bandwidth for e in sysg.edges]
        self._edge_lat = [e.latency for e in sysg.edges]

    def _emit_copy(self, e: int, p: int, src: int, dst: int) -> None:
        """Record a copy of piece ``p`` over edge ``e`` (slots or HOME) and advance the estimates."""
        q = self.edge_issuer[e]
        nb = self.pieces.valid_bytes[p]
        ch = self.est_chan[q]
        c = ch.index(min(ch)) if len(ch) > 1 else 0
        t = ch[c]
        r = self.est_home.get(p, 0.0) if src == HOME else self.est_ready.get(src, 0.0)
        if r > t:
            t = r
        if dst != HOME:
            w = self.est_read.get(dst, 0.0)
            if w > t:
                t = w
        dur = nb / self._edge_bw[e]
        ch[c] = t + dur
        arrive = t + dur + self._edge_lat[e]
        if src != HOME and self.est_read.get(src, 0.0) < t + dur:
            self.est_read[src] = t + dur
        if dst == HOME:
            self.est_home[p] = arrive
        else:
            self.est_ready[dst] = arrive
        self.stream.copy(q, e, p, src, dst, nb)
        self.load[q] += dur

    def _evict_key(self, slot: int, p: int) -> tuple[int, int, int]:
        return (self.next_use(p), 0 if self.state.dirty[p] else 1, -self.slot_last_use.get(slot, -1))

    def _note(self, p: int, mem: int, slot: int) -> None:
        """(Re)enter a resident copy into its memory's eviction heap with its current key."""
        k = self._evict_key(slot, p)
        heapq.heappush(self._heaps[mem], (-k[0], -k[1], -k[2], slot, p))

    # -- the dry run ----------------------------------------------------------------
    def new_stream(self) -> InstructionStream:
        s = InstructionStream(devices=list(self.system.devices), memories=list(self.memory_names),
                              edges=list(zip(self.edge_src, self.edge_dst)),
                              calls=[(c.instruction.name, self.call_modes[k], tuple(o.needle for o in c.operands))
                                     for k, c in enumerate(self.tiles.calls)],
                              piece_labels=[self.pieces.label(p) for p in range(self.pieces.n)],
                              piece_home=list(self.piece_home), piece_overlaps=list(self.pieces.overlaps))
        st = self.state
        s.slot_mem, s.slot_offset, s.slot_bytes, s.slot_conflicts = (st.slot_mem, st.slot_offset, st.slot_bytes,
                                                                     st.slot_conflicts)
        return s

    def run(self, stream: InstructionStream | None = None, *, wrap: bool = False,
            finish: str = "flush") -> InstructionStream:
        """Dry-run every tile once into ``stream``.

        ``finish``: ``"flush"`` writes live results home at the end;
        ``"keep"`` leaves everything where it is (a recurrent priming or
        recursive iteration).  ``wrap`` makes next uses wrap around to the
        next iteration (weights and state stay attractive to keep).
        """
        stream = self.new_stream() if stream is None else stream
        self.stream = stream
        self.wrap = wrap
        self.cursor = list(self.use_ptr[:-1])
        self.load = [0.0] * len(self.load)  # balance each run (an iteration is replayed as a whole)
        self._reset_estimates()
        self._est_key = (-1, -1)
        self._heaps = [[] for _ in self.system.memories]
        for m, res in enumerate(self.state.resident):
            for slot, p in res.items():
                self._note(p, m, slot)
        self.dom_load = [0.0] * len(self.dom_load)
        order = self.order.tolist()
        ops = self.tiles.op
        current_op = None
        for pos, t in enumerate(order):
            if self.isolate_ops and ops[t] != current_op:
                if current_op is not None:
                    self._op_boundary()
                current_op = ops[t]
            self._cur_tile = pos
            self._tile(pos, t)
        if finish == "flush":
            if self.isolate_ops:
                self._op_boundary()
            else:
                self.flush_live()
        elif finish != "keep":
            raise ConfigError(f"finish must be 'flush' or 'keep', got {finish!r}")
        return stream

    def result(self, stream: InstructionStream, kind: str = "isam") -> Schedule:
        return Schedule(self.workload, self.system, self.approach.name, self.tiles, self.order, stream,
                        dict(self.homes), dict(self.stats), kind)

    # -- one tile -----------------------------------------------------------------
    def _tile(self, pos: int, t: int) -> None:
        """Dry-run tile ``t`` at position ``pos`` of the order: pick its unit, make its operands
        coherent, place them, record the compute, advance the estimate clock, invalidate the
        copies its writes made stale and move every operand's next-use cursor."""
        call = self._tile_call[t]
        modes = self.call_modes[call]
        pieces = self._tile_pieces[t]
        dev, cycles = self._device_for(t, call)
        self._retire_overlaps(pieces, modes)  # coherence before anything moves
        where = self._place_operands(dev, call, pieces, modes)
        self.stream.compute(dev, call, [(where[p][1], p) for p in pieces], cycles, t)
        self._advance_clock(dev, pieces, modes, where, cycles, pos)
        self._invalidate_others(dev, pieces, modes, where)
        self._advance_uses(pieces, pos)
        self.pinned.clear()

    # The steps below run once per tile, the scheduler's hot path: each binds the
    # attributes it reads to locals once and loops over the few operands inline.
    def _device_for(self, t: int, call: int) -> tuple[int, float]:
        """The unit that runs tile ``t`` (the approach picks among several) and its cycles there."""
        units = self.call_units[call]
        dev = units[0] if len(units) == 1 else self.approach.device(self, t, units)
        cycles = self.call_cycles[call].get(dev)
        if cycles is None:
            raise ScheduleError(f"approach {self.approach.name}: device {dev} cannot run tile {t}")
        return dev, cycles

    def _retire_overlaps(self, pieces: tuple, modes: tuple) -> None:
        """Every piece overlapping one the tile writes gives up its copies (written back if dirty)."""
        overlaps = self.pieces.overlaps
        for p, mode in zip(pieces, modes):
            if mode != "r" and overlaps[p]:
                for q in overlaps[p]:
                    self._retire(q)

    def _place_operands(self, dev: int, call: int, pieces: tuple, modes: tuple) -> dict[int, tuple[int, int]]:
        """piece -> (memory, slot) of every operand next to unit ``dev``: copies already there
        first, then the rest brought (or, for outputs, allocated) where the approach says,
        under each memory's operand-count rules.  The chosen slots are pinned."""
        acc = self.dev_mems[dev]
        distinct = self.dev_distinct[dev]
        max_ops = self.mem_max_ops
        count: dict[int, int] = {}
        where: dict[int, tuple[int, int]] = {}
        pinned = self.pinned
        pinned.clear()
        copies = self.state.copies
        for p, mode in zip(pieces, modes):  # operands already next to the unit
            if mode == "w" or p in where:
                continue
            for m, s in copies[p].items():
                if m in acc:
                    c = count.get(m, 0)
                    if c < max_ops[m] and not (distinct and c):
                        where[p] = (m, s)
                        count[m] = c + 1
                        pinned.add(s)
                        self.stats["reuses"] += 1
                        break
        for p, mode in zip(pieces, modes):  # bring the others
            if p in where:
                continue
            allowed = [m for m in acc if count.get(m, 0) < max_ops[m] and not (distinct and count.get(m, 0))]
            if not allowed:
                raise ConfigError(f"unit {self.system.devices[dev]} cannot place the {len(pieces)} operands of "
                                  f"{self.tiles.calls[call].instruction.name} under its memories' rules")
            m, s = self._operand_slot(p, mode, allowed)
            where[p] = (m, s)
            count[m] = count.get(m, 0) + 1
            pinned.add(s)
        return where

    def _operand_slot(self, p: int, mode: str, allowed: list[int]) -> tuple[int, int]:
        """(memory, slot) for operand piece ``p`` among the ``allowed`` memories: an output reuses
        a copy already there or gets a fresh slot; an input is brought to the chosen memory."""
        copies = self.state.copies
        if mode == "w":
            reuse = [m for m in copies[p] if m in allowed]
            if reuse:
                return reuse[0], copies[p][reuse[0]]
        m = allowed[0] if len(allowed) == 1 else self.approach.destination(self, p, allowed)
        if m not in allowed:
            raise ScheduleError(f"approach {self.approach.name}: destination {m} is not allowed")
        if mode != "w":
            return m, self._bring(p, m)
        s = self._alloc(m, self.pieces.nbytes[p])
        self.state.add_copy(p, m, s)
        return m, s

    def _advance_clock(self, dev: int, pieces: tuple, modes: tuple, where: dict, cycles: float, pos: int) -> None:
        """The estimate clock: the compute starts on ``dev``'s channel once its inputs are ready
        and its outputs' slots read; it marks outputs ready and inputs read at its end."""
        ch = self.est_chan[dev]
        start = ch[0]
        ready, read = self.est_ready, self.est_read
        for p, mode in zip(pieces, modes):
            slot = where[p][1]
            r = ready.get(slot, 0.0) if mode != "w" else read.get(slot, 0.0)
            if r > start:
                start = r
        end = start + cycles
        ch[0] = end
        for p, mode in zip(pieces, modes):
            slot = where[p][1]
            if mode != "r":
                ready[slot] = end
            elif read.get(slot, 0.0) < end:
                read[slot] = end
        last = self.slot_last_use
        for p in pieces:
            last[where[p][1]] = pos
        self.load[dev] += cycles
        self.dom_load[self._dev_domain[dev]] += cycles

    def _invalidate_others(self, dev: int, pieces: tuple, modes: tuple, where: dict) -> None:
        """Virtual invalidation: every copy of a written piece but the one just written is dropped;
        the piece is dirty (its home is stale) and ``dev`` is its writer."""
        st = self.state
        copies = st.copies
        for p, mode in zip(pieces, modes):
            if mode != "r":
                m = where[p][0]
                if len(copies[p]) > 1:
                    for other in [x for x in copies[p] if x != m]:
                        st.drop_copy(p, other)
                        self.stats["invalidations"] += 1
                st.dirty[p] = 1
                self.piece_writer[p] = dev

    def _advance_uses(self, pieces: tuple, pos: int) -> None:
        """Move each operand's next-use cursor past ``pos`` and refresh its copies' eviction keys."""
        cur, ptr, upos = self.cursor, self.use_ptr, self.use_pos
        copies = self.state.copies
        note = self._note
        for p in (pieces if len(pieces) == len(set(pieces)) else set(pieces)):
            c = cur[p]
            end = ptr[p + 1]
            while c < end and upos[c] <= pos:
                c += 1
            cur[p] = c
            for m, s in copies[p].items():  # next use and dirtiness changed: refresh the eviction keys
                note(p, m, s)

    # -- movement -------------------------------------------------------------------
    def home_valid(self, p: int) -> bool:
        d = self.state.dirty
        return not d[p] and not any(d[q] for q in self.pieces.overlaps[p])

    def _bring(self, p: int, dst: int) -> int:
        """Make a valid copy of ``p`` in ``dst`` (recording the copies); returns its slot."""
        st = self.state
        copies = st.copies[p]
        if dst in copies:
            return copies[dst]
        if not copies and not self.home_valid(p):
            for q in self.pieces.overlaps[p]:
                if st.dirty[q]:
                    self.stats["coherence_flushes"] += 1
                    self.flush(q)
        srcs = list(copies)
        home = self.piece_home[p]
        if self.home_valid(p) and home not in srcs:
            srcs.append(home)
        if not srcs:
            raise ScheduleError(f"internal: piece {self.pieces.label(p)} has no valid copy")
        src = srcs[0] if len(srcs) == 1 else self.approach.source(self, p, srcs, dst)
        edges = self.approach.path(self, p, src, dst)
        slot = copies[src] if src in copies else HOME
        return self._walk(p, src, slot, edges, dst)

    def _walk(self, p: int, src: int, slot: int, edges: list[int], dst: int) -> int:
        st = self.state
        cur = src
        for e in edges:
            if self.edge_src[e] != cur:
                raise ScheduleError(f"approach {self.approach.name}: path edge {e} does not leave memory {cur}")
            b = self.edge_dst[e]
            if b == self.piece_home[p]:  # passing through home: the copy there is the home copy
                if slot != HOME and st.dirty[p]:
                    self._emit_copy(e, p, slot, HOME)
                    self.stats["writebacks"] += 1
                    st.dirty[p] = 0
                slot, cur = HOME, b
                continue
            have = st.copies[p].get(b)
            if have is not None:
                slot, cur = have, b
                continue
            self.pinned.add(slot)
            new = self._alloc(b, self.pieces.nbytes[p])
            self._emit_copy(e, p, slot, new)
            self.slot_last_use[new] = self.slot_last_use[slot] = self._cur_tile
            self.stats["copies"] += 1
            st.add_copy(p, b, new)
            self._note(p, b, new)
            slot, cur = new, b
        if cur != dst:
            raise ScheduleError(f"approach {self.approach.name}: path ends in memory {cur}, not {dst}")
        return slot

    def _alloc(self, mem: int, nbytes: int) -> int:
        st = self.state
        slot = st.alloc(mem, nbytes)
        while slot is None:
            if not any(s not in self.pinned for s in st.resident[mem]):
                raise ScheduleError(
                    f"memory {self.memory_names[mem]} ({self.system.memories[mem].capacity} B) cannot hold "
                    f"the operands of one instruction ({nbytes} B more needed)")
            victim = self.approach.evict(self, mem, self.pinned)
            if victim in self.pinned or victim not in st.resident[mem]:
                raise ScheduleError(f"approach {self.approach.name}: cannot evict slot {victim}")
            self._evict(mem, victim)
            slot = st.alloc(mem, nbytes)
        return slot

    def dead(self, p: int) -> bool:
        if self.piece_role[p] != "temp" or self.next_use(p) < NEVER:
            return False
        return all(self.next_use(q) >= NEVER for q in self.pieces.overlaps[p])

    def _evict(self, mem: int, slot: int) -> None:
        st = self.state
        p = st.resident[mem][slot]
        self.stats["evictions"] += 1
        if st.dirty[p] and len(st.copies[p]) == 1:
            if self.dead(p):
                self.stats["dropped_dead"] += 1
                st.dirty[p] = 0
            else:
                self.pinned.add(slot)
                self.flush(p)
                self.pinned.discard(slot)
        st.drop_copy(p, mem)

    def flush(self, p: int) -> None:
        """Write dirty piece ``p`` back to its home (§3.5 write-back), keeping its copies valid."""
        st = self.state
        if not st.dirty[p]:
            return
        home = self.piece_home[p]
        srcs = list(st.copies[p])
        if not srcs:
            raise ScheduleError(f"internal: dirty piece {self.pieces.label(p)} has no copy")
        src = srcs[0] if len(srcs) == 1 else self.approach.source(self, p, srcs, home)
        edges = self.approach.path(self, p, src, home)
        slot = st.copies[p][src]
        cur = src
        for k, e in enumerate(edges):
            b = self.edge_dst[e]
            if k == len(edges) - 1:
                self._emit_copy(e, p, slot, HOME)
                break
            slot = self._walk(p, cur, slot, [e], b)
            cur = b
        self.stats["writebacks"] += 1
        st.dirty[p] = 0
        for m, s in st.copies[p].items():
            self._note(p, m, s)

    def _retire(self, q: int) -> None:
        """Before an overlapping write: write ``q`` back if dirty, then invalidate all its copies."""
        st = self.state
        if st.dirty[q]:
            self.stats["coherence_flushes"] += 1
            self.flush(q)
        for m in list(st.copies[q]):
            st.drop_copy(q, m)
            self.stats["invalidations"] += 1

    # -- boundaries ---------------------------------------------------------------
    def flush_live(self) -> None:
        """End of a run: write live dirty pieces home, drop dead ones."""
        st = self.state
        for p in range(self.pieces.n):
            if st.dirty[p]:
                if self.piece_role[p] == "temp":
                    st.dirty[p] = 0
                    self.stats["dropped_dead"] += 1
                else:
                    self.flush(p)

    def _op_boundary(self) -> None:
        """Kernel-library call boundary: every result home, every cache cold, a barrier."""
        st = self.state
        for p in range(self.pieces.n):
            if st.dirty[p]:
                self.flush(p)
        self.drop_all()
        self.stream.barrier()

    def drop_all(self, keep=lambda p: False) -> None:
        """Forget every non-home copy (of pieces ``keep`` rejects); they must be clean."""
        st = self.state
        for p in range(self.pieces.n):
            if st.copies[p] and not keep(p):
                if st.dirty[p]:
                    raise ScheduleError(f"internal: dropping dirty piece {self.pieces.label(p)}")
                for m in list(st.copies[p]):
                    st.drop_copy(p, m)


def schedule(workload: Workload, system: "SystemGraph | str | dict | None" = None,
             approach: Approach | None = None, *, home_kind: str | None = None) -> Schedule:
    """Dry-run ``workload`` on ``system`` with ``approach`` (default heuristics); results end at home.

    >>> from tvm_ext.accel.workload import Workload
    >>> wl = Workload(); _ = wl.relu(wl.input("x", (32, 64)), out="y")
    >>> schedule(wl).stream.counts()
    {'compute': 2, 'copy': 4, 'barrier': 0}
    """
    sched = Scheduler(workload, system, approach, home_kind=home_kind)
    return sched.result(sched.run())
