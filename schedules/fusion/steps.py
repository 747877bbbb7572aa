"""A fused schedule's steps (which ops run together, in order) and the storage of their tensors.

:func:`schedule_steps` takes the plan's fusion groups (``fused=True``,
GOGETA-map's schedule) or one op per step (``fused=False``, the SEQ
baseline); :func:`assign_storage` lets a tensor family (``X0``, ``X1``) share
one buffer when the schedule allows an in-place update.

>>> from schedules.fusion.builders import block_cg_dag
>>> from schedules.fusion.groups import plan_fusion
>>> plan = plan_fusion(block_cg_dag(2, 4096, 8, 20_000, setup=False))
>>> schedule_steps(plan, iteration_ops(plan.dag, 1), fused=True)
[('S1', 'Delta1'), ('Lambda1',), ('X1', 'R1', 'Gamma1'), ('Phi1',), ('P1',)]
"""
from __future__ import annotations

from typing import Iterable, Sequence

from schedules.fusion.analysis import GraphAnalysis
from schedules.fusion.einsum_dag import EinsumDAG
from schedules.fusion.groups import FusionPlan
from schedules.fusion.row_forms import RowOp, family
from tvm_ext.errors import ConfigError, ScheduleError

__all__ = ["iteration_ops", "schedule_steps", "stored_tensors", "assign_storage"]


def iteration_ops(dag: EinsumDAG, iteration: int) -> list[str]:
    """Names of the ops of one unrolled iteration, in program order."""
    return [op.name for op in dag.ops if op.iteration == iteration]


def schedule_steps(plan: FusionPlan | GraphAnalysis, ops: Iterable[str], fused: bool) -> list[tuple[str, ...]]:
    """Steps (tuples of op names, in execution order) covering ``ops``.

    ``fused``: the plan's fusion groups (GOGETA-map's schedule; needs a
    :class:`FusionPlan`); otherwise one op per step (the SEQ baseline).  A
    group that mixes host (inverse) ops with streamed ops is refused.
    """
    wanted = set(ops)
    if fused and not isinstance(plan, FusionPlan):
        raise ConfigError("schedule_steps: the fused schedule needs a FusionPlan (plan_fusion)")
    if not fused:
        return [(op.name,) for op in plan.dag.ops if op.name in wanted]
    steps = []
    for g in plan.groups:
        step = tuple(o for o in g.ops if o in wanted)
        if not step:
            continue
        kinds = {plan.dag.op(o).kind == "inv" for o in step}
        if len(kinds) > 1:
            raise ScheduleError(f"group {step} mixes inverse ops with streamed ops")
        steps.append(step)
    return steps


def stored_tensors(dag: EinsumDAG, step: Sequence[str]) -> set[str]:
    """Results of ``step`` that must reach memory: read outside it, or graph outputs."""
    inside = set(step)
    return {n for n in step if n in dag.outputs or any(c not in inside for c in dag.consumers(n))}


def _row_local(form: RowOp, tensor: str) -> bool:
    """Whether ``form`` reads ``tensor`` only at the row it writes (not gathered)."""
    if form.kind == "spmm":
        return tensor == form.addend
    return form.kind in ("rowmap", "rowred") and (tensor == form.addend or tensor == form.inputs[0]
                                                 or (form.kind == "rowred" and tensor in form.inputs))


def assign_storage(dag: EinsumDAG, steps: Sequence[Sequence[str]],
                   forms: dict[str, RowOp]) -> dict[str, str]:
    """Storage name of every tensor the steps touch (inputs and results).

    A result takes the storage of the previous version of its family (same
    shape) when that version is not read after this step and, within this
    step, only by this result's own op at the row being written: ``X1 = X0 +
    P0·Λ1`` updates ``X`` in place, while ``Γ1`` gets its own buffer because
    ``Φ1`` still reads ``Γ0``.

    >>> from schedules.fusion.builders import block_cg_dag
    >>> from schedules.fusion.groups import plan_fusion
    >>> from schedules.fusion.row_forms import row_form, streamed_rank
    >>> plan = plan_fusion(block_cg_dag(2, 4096, 8, 20_000, setup=False))
    >>> steps = schedule_steps(plan, iteration_ops(plan.dag, 1), fused=True)
    >>> forms = {o: row_form(plan.dag, plan.dag.op(o), streamed_rank(plan, o)) for s in steps for o in s}
    >>> st = assign_storage(plan.dag, steps, forms)
    >>> st["X1"], st["P1"], st["Gamma0"], st["Gamma1"]
    ('X', 'P', 'Gamma', 'Gamma_1')
    """
    step_of = {op: s for s, ops in enumerate(steps) for op in ops}
    readers: dict[str, list[str]] = {}
    for op in step_of:
        for t in dag.op(op).read_tensors:
            readers.setdefault(t, []).append(op)
    storage: dict[str, str] = {}
    latest: dict[str, str] = {}  # family -> most recent tensor

    def fresh(t: str) -> str:
        base, k, used = family(t), 1, set(storage.values())
        name = base
        while name in used:
            name, k = f"{base}_{k}", k + 1
        return name

    touched = [t for op in step_of for t in dag.op(op).read_tensors if dag.producer(t) not in step_of]
    for t in dict.fromkeys(touched):
        if not dag.tensors[t].is_sparse:
            storage[t] = fresh(t)
            latest[family(t)] = t
    for op in (o for s in steps for o in s):
        prev = latest.get(family(op))
        s = step_of[op]
        if prev is not None and dag.tensors[prev].shape == dag.tensors[op].shape and all(
                step_of[r] < s or (r == op and _row_local(forms[op], prev))
                for r in readers.get(prev, [])):
            storage[op] = storage[prev]
        else:
            storage[op] = fresh(op)
        latest[family(op)] = op
    return storage
