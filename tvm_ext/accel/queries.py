"""The questions an :class:`~tvm_ext.accel.approach.Approach` asks the dry-run scheduler (ISA Mapper §4).

:class:`ApproachQueries` is the part of :class:`~tvm_ext.accel.scheduler.Scheduler`
that only reads its state: next uses of a piece, paths, where an accumulator
lives, transfer and finish-time estimates on the scheduler's list-scheduling
clock, Belady's eviction choice and the feature rows of a cost-model approach.
The scheduler's state (``state``, ``cursor``, ``est_*``, ...) is set up by
``Scheduler.__init__``; this class holds no state of its own.

>>> from tvm_ext.accel.scheduler import Scheduler
>>> from tvm_ext.accel.workload import Workload
>>> wl = Workload(); _ = wl.matmul(wl.input("a", (64, 64)), wl.weight("b", (64, 64)), out="c")
>>> isinstance(Scheduler(wl, "default"), ApproachQueries)
True
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Sequence

import numpy as np

from tvm_ext.errors import ConfigError, ScheduleError

if TYPE_CHECKING:  # pragma: no cover
    from .state import MemoryState
    from .system_graph import SystemGraph
    from .tiles import PieceTable

__all__ = ["ApproachQueries"]

#: "never used again" for :meth:`ApproachQueries.next_use`.
NEVER = 1 << 62


class ApproachQueries:
    """Read-only questions about a running dry run (mixed into ``Scheduler``).

    Besides the methods, an approach may read the attributes declared here.
    """

    system: "SystemGraph"  #: the system being scheduled on
    state: "MemoryState"  #: which pieces are resident where, and free bytes
    pieces: "PieceTable"  #: the operand pieces (bytes, tensor) of the tiles
    memory_names: list[str]  #: memory index -> name in ``system``
    load: list[float]  #: busy cycles per device so far

    def next_use(self, p: int) -> int:
        c = self.cursor[p]
        if c < self.use_ptr[p + 1]:
            return self.use_pos[c]
        if self.wrap and self.piece_role[p] in ("weight", "state") and self.use_ptr[p] < self.use_ptr[p + 1]:
            return self.tiles.n + self.use_pos[self.use_ptr[p]]
        return NEVER

    def shortest_path(self, src: int, dst: int, nbytes: int) -> list[int]:
        return self.system.shortest_path(self.memory_names[src], self.memory_names[dst], max(nbytes, 1))

    def accumulator_devices(self, tile: int, candidates: Sequence[int]) -> list[int]:
        """Candidates that can reach a valid copy of the tile's read-write operand (locality).

        The unit that last wrote it comes alone when it is a candidate: an
        accumulation chain stays on one unit, leaving the cluster's other
        units to other chains.
        """
        call = self.tiles.call[tile]
        for k, mode in enumerate(self.call_modes[call]):
            if mode == "rw":
                p = int(self.tiles.operand_pieces[tile, k])
                mems = self.state.copies[p]
                if mems:
                    w = self.piece_writer.get(p)
                    if w in candidates and not self.dev_mems[w].isdisjoint(mems):
                        return [w]
                    return [d for d in candidates if not self.dev_mems[d].isdisjoint(mems)]
        return []

    def domain_pressure(self, d: int) -> float:
        g = self.system.domain(d)
        return self.dom_load[g] / self.dom_size[g]

    def transfer_estimate(self, tile: int, d: int) -> float:
        """Unloaded cycles to bring the tile's read operands next to unit ``d``.

        A tile that only writes (an accumulator's initialisation) is judged
        by the reads of the first ``chain_lookahead`` tiles of the
        accumulation chain that follows it to the same place (looking at the
        whole chain piles entire row bands onto one cluster, which then
        stream the other operand in lock step from one HBM module: slower).
        """
        g = self.system.domain(d)
        key = (tile, g)
        if key[0] == self._est_key[0]:
            hit = self._est_cache.get(g)
            if hit is not None:
                return hit
        else:
            self._est_key = key
            self._est_cache = {}
        call = self.tiles.call[tile]
        if all(m == "w" for m in self.call_modes[call]):
            chain = self._chain(int(self.tiles.operand_pieces[tile, 0]), limit=self.chain_lookahead)
            total = sum(self._reads_cost(t, g) for t in chain)
        else:
            total = self._reads_cost(tile, g)
        self._est_cache[g] = total
        return total

    def _reads_cost(self, tile: int, g: int) -> float:
        mems = self.system.domains[g]
        idx = self.system.memory_index
        local = {idx[m] for m in mems}
        total = 0.0
        call = self.tiles.call[tile]
        for k, mode in enumerate(self.call_modes[call]):
            if mode == "w":
                continue
            p = int(self.tiles.operand_pieces[tile, k])
            copies = self.state.copies[p]
            if not local.isdisjoint(copies):
                continue
            nb = self.pieces.valid_bytes[p]
            srcs = list(copies)
            if not self.state.dirty[p]:
                srcs.append(self.piece_home[p])
            total += min((self.dom_cost[m][g][0] + nb * self.dom_cost[m][g][1] for m in srcs), default=0.0)
        return total

    def _chain(self, p: int, limit: int = 1 << 30) -> list[int]:
        """The tiles that next accumulate into piece ``p`` (its following read-write uses, at most ``limit``)."""
        c = self.cursor[p]
        pos = self._cur_tile
        end = self.use_ptr[p + 1]
        while c < end and self.use_pos[c] <= pos:
            c += 1
        out = []
        ops = self.tiles.operand_pieces
        while c < end and len(out) < limit:
            t = int(self.order[self.use_pos[c]])
            call = self.tiles.call[t]
            modes = self.call_modes[call]
            if not any(m == "rw" and ops[t, k] == p for k, m in enumerate(modes)):
                break
            out.append(t)
            c += 1
        return out

    def _next_user(self, p: int) -> int | None:
        """The tile that uses piece ``p`` after the current one (None: no later use)."""
        c = self.cursor[p]
        pos = self._cur_tile
        while c < self.use_ptr[p + 1] and self.use_pos[c] <= pos:
            c += 1
        return int(self.order[self.use_pos[c]]) if c < self.use_ptr[p + 1] else None

    def _data_ready(self, p: int, g: int, mems: frozenset) -> float:
        """Estimated time piece ``p`` can be in a memory of domain ``g`` (``mems``)."""
        copies = self.state.copies[p]
        best = float("inf")
        for m, slot in copies.items():
            if m in mems:
                r = self.est_ready.get(slot, 0.0)
                if r < best:
                    best = r
        if best < float("inf"):
            return best
        nb = self.pieces.valid_bytes[p]
        for m, slot in copies.items():
            lat, inv = self.dom_cost[m][g]
            best = min(best, self.est_ready.get(slot, 0.0) + lat + nb * inv)
        if not self.state.dirty[p]:
            m = self.piece_home[p]
            lat, inv = self.dom_cost[m][g]
            best = min(best, self.est_home.get(p, 0.0) + lat + nb * inv)
        return 0.0 if best == float("inf") else best

    def estimated_finish(self, tile: int, d: int) -> float:
        """When tile ``tile`` would finish on unit ``d`` by the estimates (data movement included).

        A tile that only writes (an accumulator's initialisation) is judged
        with the first tile of the chain that follows it, on the best unit
        of ``d``'s cluster for that tile.
        """
        call = self._tile_call[tile]
        g = self._dev_domain[d]
        mems = self.dev_mems[d]
        modes = self.call_modes[call]
        pieces = self._tile_pieces[tile]
        start = self.est_chan[d][0]
        for p, mode in zip(pieces, modes):
            if mode != "w":
                r = self._data_ready(p, g, mems)
                if r > start:
                    start = r
        fin = start + self.call_cycles[call][d]
        if all(m == "w" for m in modes):
            chain = self._chain(pieces[0], limit=1)
            if chain:
                nt = chain[0]
                ncall = self._tile_call[nt]
                units = [u for u in self.call_units[ncall] if self._dev_domain[u] == g]
                if not units:
                    return float("inf")
                u = min(units, key=lambda u: self.est_chan[u][0])
                nstart = max(fin, self.est_chan[u][0])
                for p, mode in zip(self._tile_pieces[nt], self.call_modes[ncall]):
                    if mode != "w" and p != pieces[0]:
                        nstart = max(nstart, self._data_ready(p, g, mems))
                fin = nstart + self.call_cycles[ncall][u]
        return fin

    def furthest_next_use(self, mem: int, pinned: set[int], among: int = 1) -> int:
        """Belady's choice: the unpinned resident slot whose piece is needed last.

        Ties (typically pieces never needed again) go to clean pieces, then
        to the slot used longest ago, so the copy that reuses the space
        waits least for that slot's last reader.  With ``among`` > 1 the
        victim is the least recently used of the ``among`` pieces needed
        last (a little Belady traded for slack behind the slot's last reader).
        """
        heap = self._heaps[mem]
        resident = self.state.resident[mem]
        held = []
        best = -1
        picked: list[tuple[int, int]] = []  # (last use, slot)
        while heap and len(picked) < among:
            entry = heapq.heappop(heap)
            nk, slot, p = (-entry[0], -entry[1], -entry[2]), entry[3], entry[4]
            if resident.get(slot) != p:
                continue  # stale: the slot was freed or reused
            key = self._evict_key(slot, p)
            if key != nk:
                heapq.heappush(heap, (-key[0], -key[1], -key[2], slot, p))
                continue
            held.append(entry)  # stays a candidate until it is really evicted
            if slot in pinned:
                continue
            picked.append((self.slot_last_use.get(slot, -1), slot))
        for entry in held:
            heapq.heappush(heap, entry)
        if picked:
            best = min(picked)[1]
        if best < 0:
            raise ScheduleError(f"memory {self.memory_names[mem]}: nothing left to evict")
        return best

    def features(self, kind: str, subject: int, candidates: Sequence[int]) -> np.ndarray:
        """Per-candidate feature rows for a :class:`~tvm_ext.accel.approach.CostModelApproach`."""
        rows = []
        if kind == "device":
            tile = subject
            call = self.tiles.call[tile]
            for d in candidates:
                local = sum(1 for k in range(len(self.call_modes[call]))
                            if not self.dev_mems[d].isdisjoint(self.state.copies[self.tiles.operand_pieces[tile, k]]))
                rows.append([self.load[d], self.domain_pressure(d), self.transfer_estimate(tile, d), local,
                             self.call_cycles[call][d], self.estimated_finish(tile, d)])
        elif kind == "evict":
            now = self._cur_tile
            for s in candidates:
                p = self.state.resident[subject][s]
                rows.append([min(self.next_use(p) - now, 1e12), self.state.dirty[p], self.pieces.nbytes[p],
                             len(self.state.copies[p]) - 1])
        elif kind == "destination":
            t = self.pieces.tensor[subject]
            for m in candidates:
                same = sum(1 for q in self.state.resident[m].values() if self.pieces.tensor[q] == t)
                rows.append([self.state.free_bytes(m), same])
        else:
            raise ConfigError(f"no features for choice {kind!r}")
        return np.asarray(rows, dtype=np.float64)
