"""ISA Mapper §5-§6 baseline: a "kernel library" (KL) for the accelerator, run on the same simulator.

The paper compares its scheduler with the machine's hand-written kernel
library, whose kernels are called one op at a time.  This baseline models
that discipline with the same mechanics as the scheduler, so both are
measured on equal terms (same graph, same instructions, same copy costs,
same timed model):

* **isolation**: every op starts with cold register files, loads its
  operands from their homes in HBM and writes its results back behind a
  barrier (no fusion, no data left on chip between ops or time steps);
* **a fixed work distribution** (:class:`KernelLibraryApproach`): a
  library kernel deals the row bands of its output round-robin over the
  clusters, then over the units of a cluster, whatever the shape; within a
  call it keeps the scheduler's caching and eviction (a real library
  blocks for reuse too).

>>> from tvm_ext.accel.workload import Workload
>>> wl = Workload(); y = wl.relu(wl.matmul(wl.input("a", (64, 64)), wl.weight("b", (64, 64))), out="y")
>>> s = schedule_kl(wl)
>>> s.kind, s.stream.counts()["barrier"]
('kl', 2)
"""
from __future__ import annotations

from typing import Sequence

from .approach import HeuristicApproach
from .scheduler import Schedule, Scheduler
from .system_graph import SystemGraph
from .workload import Workload

__all__ = ["KernelLibraryApproach", "schedule_kl", "kl_scheduler"]


class KernelLibraryApproach(HeuristicApproach):
    """Row bands of each op's output dealt cyclically over clusters, then over a cluster's units."""

    name = "kernel-library"

    def device(self, sched: Scheduler, tile: int, candidates: Sequence[int]) -> int:
        ranks = sched.__dict__.setdefault("_kl_ranks", {})
        call = int(sched.tiles.call[tile])
        modes = sched.call_modes[call]
        k = next((i for i, m in enumerate(modes) if m != "r"), 0)
        p = int(sched.tiles.operand_pieces[tile, k])
        op = int(sched.tiles.op[tile])
        band = (op, sched.pieces.tensor[p], sched.pieces.start[p][:-1])
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
