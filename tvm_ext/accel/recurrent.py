"""ISA Mapper §3.6: scheduling a recurrent cell once as priming, recursive and finish iterations.

A naive single schedule of the cell cannot be replayed: after it the buffers
are not where they were before.  :func:`schedule_recurrent` dry-runs the cell
three times on one continuing memory state:

* **priming**: from a cold machine; leaves everything (weights, the state
  ``h``) as close to the units as it ended up;
* **recursive**: starts from the priming's end state ``S`` (temporaries are
  dead, per-step inputs are invalid: the driver writes the next ``x_t``);
  the state is updated in place (outputs overwrite inputs); at its end
  every piece of ``S`` is put back into its ``S`` slot (usually nothing
  moves; pieces evicted under pressure are re-fetched), so the stream can
  run any number of times;
* **finish**: from ``S``, then writes the state (and outputs) home.

Next uses wrap around the iteration, so the default eviction keeps the
weights that the next iteration needs: weights stay resident in the
register files as far as they fit.  The driver (:meth:`RecurrentSchedule.run`
and :meth:`RecurrentSchedule.time`) runs priming once, recursive ``T - 2``
times and finish once; ``T = 1`` runs one plain schedule.

>>> from tvm_ext.accel.gru import gru_cell
>>> rs = schedule_recurrent(gru_cell(batch=2, hidden=32))
>>> [name for name, _ in rs.streams()]
['priming', 'recursive', 'finish']
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from tvm_ext.errors import InputError, ScheduleError

from .approach import Approach
from .scheduler import Schedule, Scheduler, schedule
from .simulator import FunctionalSimulator
from .stream import InstructionStream
from .system_graph import SystemGraph
from .timing import Timeline, TimingReport
from .workload import Workload

__all__ = ["RecurrentSchedule", "schedule_recurrent", "replay_kl"]


@dataclass
class RecurrentSchedule:
    """The three streams of a recurrent cell plus the scheduler state they share."""

    workload: Workload
    system: SystemGraph
    tiles: Any
    priming: InstructionStream
    recursive: InstructionStream
    finish: InstructionStream
    start_state: dict
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    _single: Schedule | None = None
    approach: Approach | None = None
    executed: int = 0  # instructions the last functional run executed

    @property
    def stream(self) -> InstructionStream:  # the slot tables (shared by the three streams)
        return self.recursive

    def streams(self) -> list[tuple[str, InstructionStream]]:
        return [("priming", self.priming), ("recursive", self.recursive), ("finish", self.finish)]

    @property
    def per_step_inputs(self) -> list[str]:
        return [n for n, t in self.workload.tensors.items() if t.role == "input"]

    def single(self) -> Schedule:
        """The plain schedule used when T == 1."""
        if self._single is None:
            self._single = schedule(self.workload, self.system, self.approach)
        return self._single

    def _check(self, sequence: Mapping[str, np.ndarray]) -> int:
        names = self.per_step_inputs
        missing = [n for n in names if n not in sequence]
        if missing:
            raise InputError(f"recurrent run: missing per-step sequence for {missing}")
        lens = {np.shape(sequence[n])[0] for n in names}
        if len(lens) != 1:
            raise InputError(f"recurrent run: per-step sequences have different lengths {sorted(lens)}")
        steps = lens.pop()
        if steps < 1:
            raise InputError("recurrent run: need at least one step")
        return int(steps)

    def run(self, constants: Mapping[str, np.ndarray], sequence: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Functional run over ``sequence`` (name -> array with a leading step axis).

        ``constants`` gives the weights and the initial state.  Returns the
        final state (and the last step's outputs).
        """
        steps = self._check(sequence)
        first = {**constants, **{n: np.asarray(sequence[n])[0] for n in self.per_step_inputs}}
        if steps == 1:
            sim = FunctionalSimulator(self.single())
            sim.load(first)
            sim.run(self.single().stream)
            self.executed = sim.executed
            return sim.outputs()
        sim = FunctionalSimulator(self)
        sim.load(first)
        sim.run(self.priming)
        for t in range(1, steps):
            for n in self.per_step_inputs:
                sim.set_tensor(n, np.asarray(sequence[n][t], dtype=np.float32))
            sim.run(self.recursive if t < steps - 1 else self.finish)
        self.executed = sim.executed
        return sim.outputs()

    def time(self, steps: int) -> TimingReport:
        """Cycles of ``steps`` iterations (priming, recursive x (steps - 2), finish) on one timeline."""
        if steps < 1:
            raise InputError("recurrent timing: need at least one step")
        tl = Timeline(self.system)
        if steps == 1:
            tl.run(self.single().stream)
            return tl.report()
        tl.run(self.priming)
        simulated = tl.repeat(self.recursive, steps - 2)
        tl.run(self.finish)
        return tl.report(iterations=steps, simulated=simulated + 2)


def _end_iteration(sched: Scheduler) -> None:
    """Per-step outputs go home; temporaries die; per-step inputs become invalid."""
    st = sched.state
    for p in range(sched.pieces.n):
        role = sched.piece_role[p]
        if role == "output" and st.dirty[p]:
            sched.flush(p)
        if role in ("temp", "input", "output"):
            if role == "temp" and st.dirty[p]:
                st.dirty[p] = 0
                sched.stats["dropped_dead"] += 1
            for m in list(st.copies[p]):
                st.drop_copy(p, m)


def _restore(sched: Scheduler, target: dict) -> int:
    """Put every piece of the start state back into its start slot; returns the copies recorded."""
    st = sched.state
    P = sched.pieces
    want = {p: dict(cs) for p, (cs, _) in target.items()}
    for p in range(P.n):  # pieces clean at the start must be clean now
        if st.dirty[p] and not target.get(p, ((), 0))[1]:
            sched.flush(p)
    for p in range(P.n):  # drop everything off target, keeping the data of dirty pieces
        for m, s in list(st.copies[p].items()):
            if want.get(p, {}).get(m) == s:
                continue
            if st.dirty[p] and len(st.copies[p]) == 1:
                sched.flush(p)
            st.drop_copy(p, m)
    todo = []
    for p, cs in want.items():
        for m, s in cs.items():
            if st.copies[p].get(m) != s:
                got = st.alloc(m, st.slot_bytes[s], offset=st.slot_offset[s])
                if got != s:
                    raise ScheduleError(f"internal: start slot {s} of {P.label(p)} is not free at the iteration end")
                todo.append((p, m, s))
    copies = 0
    sched.pinned.clear()
    sched.pinned.update(s for cs in want.values() for s in cs.values())  # never evict a restored slot
    for p, m, s in todo:
        srcs = list(st.copies[p])
        home = sched.piece_home[p]
        if sched.home_valid(p):
            srcs.append(home)
        src = srcs[0] if len(srcs) == 1 else sched.approach.source(sched, p, srcs, m)
        edges = sched.approach.path(sched, p, src, m)
        slot = st.copies[p].get(src, -1)
        if len(edges) > 1:
            slot = sched._walk(p, src, slot, edges[:-1], sched.edge_dst[edges[-2]])
        sched._emit_copy(edges[-1], p, slot, s)
        st.add_copy(p, m, s)
        copies += 1
    sched.pinned.clear()
    for p in range(P.n):  # intermediate copies made on the way are not part of the start state
        for m, s in list(st.copies[p].items()):
            if want.get(p, {}).get(m) != s:
                st.drop_copy(p, m)
        st.dirty[p] = target[p][1] if p in target else 0
    return copies


def schedule_recurrent(cell: Workload, system: "SystemGraph | str | dict | None" = None,
                       approach: Approach | None = None) -> RecurrentSchedule:
    """§3.6: schedule ``cell`` (a workload with a ``state`` tensor updated in place) for replay."""
    if not any(t.role == "state" for t in cell.tensors.values()):
        raise InputError(f"schedule_recurrent: workload {cell.name} has no state tensor (wl.state(...))")
    sched = Scheduler(cell, system, approach)
    stats = {}
    priming = sched.new_stream()
    sched.run(priming, wrap=True, finish="keep")
    _end_iteration(sched)
    stats["priming"] = dict(sched.stats)
    start = sched.state.placement()
    recursive = sched.new_stream()
    sched.run(recursive, wrap=True, finish="keep")
    _end_iteration(sched)
    restored = _restore(sched, start)
    if sched.state.placement() != start:
        raise ScheduleError("internal: the recursive iteration does not end in its start state")
    stats["recursive"] = {k: v - stats["priming"][k] for k, v in sched.stats.items()}
    stats["recursive"]["restore_copies"] = restored
    finish = sched.new_stream()
    before = dict(sched.stats)
    sched.run(finish, wrap=False, finish="flush")
    stats["finish"] = {k: v - before[k] for k, v in sched.stats.items()}
    return RecurrentSchedule(cell, sched.system, sched.tiles, priming, recursive, finish, start, stats,
                             approach=approach)


def replay_kl(kl: Schedule, constants: Mapping[str, np.ndarray], sequence: Mapping[str, np.ndarray]
              ) -> dict[str, np.ndarray]:
    """Functional run of a kernel-library cell schedule over a sequence (it starts and ends at home)."""
    names = [n for n, t in kl.workload.tensors.items() if t.role == "input"]
    steps = {np.shape(sequence[n])[0] for n in names}
    if len(steps) != 1:
        raise InputError("replay_kl: per-step sequences of different lengths")
    sim = FunctionalSimulator(kl)
    sim.load({**constants, **{n: np.asarray(sequence[n])[0] for n in names}})
    for t in range(steps.pop()):
        for n in names:
            sim.set_tensor(n, np.asarray(sequence[n][t], dtype=np.float32))
        sim.run(kl.stream)
    return sim.outputs()
