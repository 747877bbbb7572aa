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
  keeps the scheduler's caching and eviction.

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
from .system_graph import SystemGraph
from .workload import Workload

__all__ = ["KernelLibraryApproach", "schedule_kl", "kl_scheduler"]


class KernelLibraryApproach(HeuristicApproach):
    """Each op's output cut into a grid of blocks, one block per compute unit, dealt over
    clusters then over a cluster's units (a hand-tuned library's 2-D blocking)."""

    name = "kernel-library"

    @staticmethod
    def _output_piece(sched: Scheduler, tile: int) -> int:
        modes = sched.call_modes[int(sched.tiles.call[tile])]
        k = next((i for i, m in enumerate(modes) if m != "r"), 0)
        return int(sched.tiles.operand_pieces[tile, k])

    def _grid(self, sched: Scheduler, op: int) -> tuple[dict, dict, int, int]:
        """Row / column band positions of ``op``'s output tiles and the ``gr x gc`` unit grid.

        The grid uses as many units as the output has tiles for (``gr * gc <=
        units``) and, among those, loads the least operand data per unit: a
        unit gets every ``gr``-th row band and every ``gc``-th column band
        (block-cyclic, which balances ragged edges), ``R/gr`` and ``C/gc`` bands
        of the inputs, so ``R/gr + C/gc`` is minimised.
        """
        grids = sched.__dict__.setdefault("_kl_grid", {})
        if op not in grids:
            rows, cols = set(), set()
            tiles = np.flatnonzero(sched.tiles.op == op)
            for t in tiles:
                start = sched.pieces.start[self._output_piece(sched, int(t))]
                rows.add(tuple(start[:-1]))
                cols.add(tuple(start[-1:]))
            # the units of the op's main instruction (the one most of its tiles call)
            calls, counts = np.unique(sched.tiles.call[tiles], return_counts=True)
            main = sched.tiles.calls[int(calls[np.argmax(counts)])].instruction.name
            units = len(sched.system.units_for(main))
            R, C = len(rows), len(cols)
            best = None
            for gr in range(1, min(R, units) + 1):
                gc = min(C, units // gr)
                key = (-(gr * gc), -(-R // gr) + -(-C // gc))
                if best is None or key < best[0]:
                    best = (key, gr, gc)
            _, gr, gc = best
            grids[op] = ({r: i for i, r in enumerate(sorted(rows))},
                         {c: i for i, c in enumerate(sorted(cols))}, gr, gc)
        return grids[op]

    def device(self, sched: Scheduler, tile: int, candidates: Sequence[int]) -> int:
        ranks = sched.__dict__.setdefault("_kl_ranks", {})
        p = self._output_piece(sched, tile)
        op = int(sched.tiles.op[tile])
        start = sched.pieces.start[p]
        row_pos, col_pos, gr, gc = self._grid(sched, op)
        block = (row_pos[tuple(start[:-1])] % gr, col_pos[tuple(start[-1:])] % gc)  # block-cyclic
        band = (op, sched.pieces.tensor[p], block)
        rank = ranks.setdefault(band, len([b for b in ranks if b[0] == op]))
        doms = sorted({sched.system.domain(d) for d in candidates})
        g = doms[rank % len(doms)]
        units = [d for d in candidates if sched.system.domain(d) == g]
        return units[(rank // len(doms)) % len(units)]


def kl_scheduler(workload: Workload, system: "SystemGraph | str | dict | None" = None) -> Scheduler:
    """A scheduler set up as the kernel library (isolated ops, fixed distribution)."""
    return Scheduler(workload, system, KernelLibraryApproach(), isolate_ops=True)


def schedule_kl(workload: Workload, system: "SystemGraph | str | dict | None" = None) -> Schedule:
    """The kernel-library stream: one isolated call per op, results home after each."""
    sched = kl_scheduler(workload, system)
    return sched.result(sched.run(), kind="kl")
