"""ISA Mapper §5-§6 baseline: a "kernel library" (KL) for the accelerator, run on the same simulator.

The paper compares its scheduler with the machine's hand-written kernel
library, whose kernels are called one op at a time.  This baseline models
that discipline with the same mechanics as the scheduler, so both are
measured on equal terms (same graph, same instructions, same copy costs,
same timed model):

* **isolation**: every op starts with cold register files, loads its
  operands from their homes in HBM and writes its results back behind a
  barrier (no fusion, no data left on chip between ops or time steps);
* **a fixed work distribution, blocked per op** (:class:`KernelLibraryApproach`):
  like a hand-tuned library, each kernel cuts its output into a grid of
  blocks, as many as there are units for it (when the output has that many
  tiles), shaped to load the least operand data per unit (square-ish for a
  big GEMM, column blocks for a small-batch GRU gate), and deals them
  over the clusters, then over the units of a cluster.  Within a call it
  keeps the scheduler's caching and eviction;
* **a tuned issue order** (:meth:`KernelLibraryApproach.tile_order`): each
  kernel is output-stationary, reduction step by reduction step (a step's
  operand tiles are loaded once for every output of the unit's block, the
  accumulators stay in the register files), and issues one output of every
  unit's block in turn, so every unit computes from the first cycles.  On a
  GEMM whose tiles divide evenly over the units this keeps the matrix units
  over 90% busy, the "nearly-theoretical maximum utilization" the paper
  credits its library with (§5).

What the library cannot do is keep data on chip across calls: a GRU step
reloads its weights from HBM for every gate, every step.

>>> from tvm_ext.accel.workload import Workload
>>> wl = Workload(); y = wl.relu(wl.matmul(wl.input("a", (64, 64)), wl.weight("b", (64, 64))), out="y")
>>> s = schedule_kl(wl)
>>> s.kind, s.stream.counts()["barrier"]
('kl', 2)
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .approach import HeuristicApproach
from .scheduler import Schedule, Scheduler
from .system_graph import SystemGraph, load_system
from .tiles import TileSet, op_order
from .workload import Workload

__all__ = ["KernelLibraryApproach", "schedule_kl", "kl_scheduler"]


class KernelLibraryApproach(HeuristicApproach):
    """Each op's output cut into a grid of blocks, one block per compute unit, dealt over
    clusters then over a cluster's units (a hand-tuned library's 2-D blocking), issued so
    that every unit starts at once.

    ``system``: the system graph the library is tuned for (its unit count sets the
    grid); without it the grid is found from the scheduler's system at the first
    placement and tiles keep the scheduler's order.
    """

    name = "kernel-library"

    def __init__(self, system: "SystemGraph | None" = None, **kwargs):
        super().__init__(**kwargs)
        self.system = system

    @staticmethod
    def _output_piece(tiles: TileSet, tile: int) -> int:
        modes = tiles.modes[int(tiles.call[tile])]
        k = next((i for i, m in enumerate(modes) if m != "r"), 0)
        return int(tiles.operand_pieces[tile, k])

    def _grid(self, tiles: TileSet, system: SystemGraph, op: int) -> tuple[dict, dict, int, int]:
        """Row / column band positions of ``op``'s output tiles and the ``gr x gc`` unit grid.

        The grid uses as many units as the output has tiles for (``gr * gc <=
        units``) and, among those, loads the least operand data per unit: a
        unit gets every ``gr``-th row band and every ``gc``-th column band
        (block-cyclic, which balances ragged edges), ``R/gr`` and ``C/gc`` bands
        of the inputs, so ``R/gr + C/gc`` is minimised.
        """
        grids = tiles.__dict__.setdefault("_kl_grids", {})   # per unrolled workload and system
        if (id(system), op) not in grids:
            rows, cols = set(), set()
            op_tiles = np.flatnonzero(tiles.op == op)
            for t in op_tiles:
                start = tiles.pieces.start[self._output_piece(tiles, int(t))]
                rows.add(tuple(start[:-1]))
                cols.add(tuple(start[-1:]))
            # the units of the op's main instruction (the one most of its tiles call)
            calls, counts = np.unique(tiles.call[op_tiles], return_counts=True)
            main = tiles.calls[int(calls[np.argmax(counts)])].instruction.name
            units = len(system.units_for(main))
            R, C = len(rows), len(cols)
            best = None
            for gr in range(1, min(R, units) + 1):
                gc = min(C, units // gr)
                key = (-(gr * gc), -(-R // gr) + -(-C // gc))
                if best is None or key < best[0]:
                    best = (key, gr, gc)
            _, gr, gc = best
            grids[id(system), op] = ({r: i for i, r in enumerate(sorted(rows))},
                                     {c: i for i, c in enumerate(sorted(cols))}, gr, gc)
        return grids[id(system), op]

    def block(self, tiles: TileSet, system: SystemGraph, tile: int) -> tuple[int, int]:
        """The unit block (row, column in the op's grid) that computes ``tile`` (block-cyclic)."""
        start = tiles.pieces.start[self._output_piece(tiles, tile)]
        row_pos, col_pos, gr, gc = self._grid(tiles, system, int(tiles.op[tile]))
        return row_pos[tuple(start[:-1])] % gr, col_pos[tuple(start[-1:])] % gc

    def tile_order(self, tiles: TileSet) -> np.ndarray:
        """Op by op, reduction step by step: within an op, step ``k`` of every output tile before step
        ``k + 1`` (an output-stationary kernel: the accumulators stay on chip while each step's operand
        tiles are loaded once and used by every output that needs them), and within a step one output of
        every unit's block in turn, so every unit has work from the start.  Each output keeps its chain
        order, so the order respects the tile dependencies."""
        base = op_order(tiles, np.asarray(super().tile_order(tiles), dtype=np.int64))
        if self.system is None:
            return base
        step = np.empty(base.size, dtype=np.int64)
        slot = np.empty(base.size, dtype=np.int64)
        block_id = np.empty(base.size, dtype=np.int64)
        chain: dict[int, int] = {}
        outputs: dict[tuple, dict[int, int]] = {}
        blocks: dict[tuple, int] = {}
        for i, t in enumerate(base.tolist()):
            out = self._output_piece(tiles, t)
            key = (int(tiles.op[t]), self.block(tiles, self.system, t))
            step[i] = chain.get(out, 0)
            chain[out] = step[i] + 1
            per_block = outputs.setdefault(key, {})
            slot[i] = per_block.setdefault(out, len(per_block))
            block_id[i] = blocks.setdefault(key, len(blocks))
        priority = np.empty(base.size, dtype=np.int64)
        priority[base[np.lexsort((block_id, slot, step, tiles.op[base]))]] = np.arange(base.size)
        return _ready_first(tiles, priority)

    def device(self, sched: Scheduler, tile: int, candidates: Sequence[int]) -> int:
        op = int(sched.tiles.op[tile])
        blk = self.block(sched.tiles, sched.system, tile)
        band = (op, sched.pieces.tensor[self._output_piece(sched.tiles, tile)], blk)
        ranks = sched.__dict__.setdefault("_kl_ranks", {})   # per scheduler: an approach may be reused
        rank = ranks.setdefault(band, len([b for b in ranks if b[0] == op]))
        doms = sorted({sched.system.domain(d) for d in candidates})
        g = doms[rank % len(doms)]
        units = [d for d in candidates if sched.system.domain(d) == g]
        return units[(rank // len(doms)) % len(units)]


def _ready_first(tiles: TileSet, priority: np.ndarray) -> np.ndarray:
    """Topological order of the tile DAG taking, each time, the ready tile of least ``priority``
    (the wanted order wherever the dependencies allow it)."""
    import heapq

    ptr, pred = tiles.dependencies()
    n = tiles.n
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
    by_src = np.argsort(pred, kind="stable")
    sptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(pred, minlength=n), out=sptr[1:])
    succ, sptr_l, prio = dst[by_src].tolist(), sptr.tolist(), priority.tolist()
    indeg = np.diff(ptr).tolist()
    heap = [(prio[t], t) for t in range(n) if indeg[t] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, t = heapq.heappop(heap)
        out.append(t)
        for v in succ[sptr_l[t]:sptr_l[t + 1]]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (prio[v], v))
    return np.asarray(out, dtype=np.int64)


def kl_scheduler(workload: Workload, system: "SystemGraph | str | dict | None" = None) -> Scheduler:
    """A scheduler set up as the kernel library (isolated ops, fixed distribution, all units issued at once)."""
    sysg = load_system(system)
    return Scheduler(workload, sysg, KernelLibraryApproach(sysg), isolate_ops=True)


def schedule_kl(workload: Workload, system: "SystemGraph | str | dict | None" = None) -> Schedule:
    """The kernel-library stream: one isolated call per op, results home after each."""
    sched = kl_scheduler(workload, system)
    return sched.result(sched.run(), kind="kl")
