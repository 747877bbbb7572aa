"""Row-streaming forms of einsum ops: what one pass over the streamed rank computes per op.

A fused step's kernel (:mod:`schedules.fusion.kernels`) is one pass over the
*streamed* rank of its ops, parallel over parts of it and vectorised over the
small ranks.  :func:`streamed_rank` picks that rank (the plan's dominant rank;
an op without one, GOGETA's 'bal'/'small', streams the index bound to the
sparse matrix's row rank, or its largest rank in a DAG without a sparse
tensor); :func:`row_form` classifies an op as one of :data:`ROW_KINDS` with
that rank as the rows, or refuses it with a :class:`ScheduleError`.

>>> from schedules.fusion.builders import block_cg_dag
>>> from schedules.fusion.groups import plan_fusion
>>> plan = plan_fusion(block_cg_dag(2, 4096, 8, 20_000, setup=False))
>>> row_form(plan.dag, plan.dag.op("R1"), streamed_rank(plan, "R1"))
RowOp(name='R1', kind='rowmap', inputs=('S1', 'Lambda1'), addend='R0', sign=-1, cols=(8,), inner=8)
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from schedules.fusion.analysis import GraphAnalysis
from schedules.fusion.einsum_dag import EinsumDAG, Op
from schedules.fusion.groups import FusionPlan
from tvm_ext.errors import ScheduleError

__all__ = ["ROW_KINDS", "RowOp", "family", "streamed_rank", "row_form"]

#: Row forms: sparse x dense product, row map (``out[m,:] = [add ±] row[m,:]·small``),
#: reduction over the streamed rank (``out = xᵀy``), host op (small inverse).
ROW_KINDS = ("spmm", "rowmap", "rowred", "host")


@dataclass(frozen=True)
class RowOp:
    """One op in row-streaming form (rows = the streamed rank).

    * ``spmm``: ``inputs = (A, B)``, output ``[m, c]``; optional ``addend``/``sign``;
    * ``rowmap``: ``inputs = (row, small)``: ``out[m, c] = [addend ±] Σ_j row[m, j]·small[j, c]``;
    * ``rowred``: ``inputs = (x, y)``: ``out[a, b] = Σ_m x[m, a]·y[m, b]``;
    * ``host``: ``inputs = (first, second)``: ``out = first⁻¹·second``, run by the caller.

    ``cols`` are the output's non-streamed extents, ``inner`` the contracted
    extent of a row map.
    """

    name: str
    kind: str
    inputs: tuple[str, ...]
    addend: str | None = None
    sign: int = 1
    cols: tuple[int, ...] = ()
    inner: int = 0


def family(tensor: str) -> str:
    """The tensor's name without its iteration number (``Gamma12`` -> ``Gamma``)."""
    return re.sub(r"\d+$", "", tensor) or tensor


def streamed_rank(plan: FusionPlan | GraphAnalysis, op: Op | str) -> str | None:
    """The rank an op's kernel streams: the plan's dominant rank, else the largest.

    ``plan`` may also be a bare :class:`~schedules.fusion.analysis.GraphAnalysis`
    (enough for one-op steps).  Host (inverse) ops stream nothing (``None``).
    """
    dag = plan.dag
    op = dag.op(op) if isinstance(op, str) else op
    if op.kind == "inv":
        return None
    dom = getattr(plan, "analysis", plan).dominance[op.name].index
    if dom is not None:
        return dom
    # no dominant rank: the op index bound to the sparse matrix's row rank (by rank name, so
    # that M <= N still streams the rows), else the largest
    rows = next((t.ranks[0] for t in dag.tensors.values() if t.is_sparse), None)
    for o in (*op.reads, op.output):
        for idx, rank in zip(o.indices, dag.tensors[o.tensor].ranks):
            if rank == rows:
                return idx
    sizes = op.index_sizes(dag)
    return max(op.indices, key=lambda i: sizes[i])


def _fail(op: Op, why: str) -> ScheduleError:
    return ScheduleError(f"op {op.name!r} ({op}): {why}; no row kernel for it")


def row_form(dag: EinsumDAG, op: Op, streamed: str | None) -> RowOp:
    """Classify ``op`` as one of :data:`ROW_KINDS` with ``streamed`` as the rows.

    Raises :class:`ScheduleError` for an op that no row kernel computes.
    """
    ins = op.inputs
    if op.kind == "inv":
        return RowOp(op.name, "host", tuple(o.tensor for o in ins))
    if op.kind != "mac" or len(ins) != 2:
        raise _fail(op, "only two-operand tensor MACs and small inverses are supported")
    sizes = op.index_sizes(dag)
    addend = op.addend.tensor if op.addend is not None else None
    a, b = ins
    out = op.output.indices
    if any(dag.tensors[o.tensor].is_sparse for o in ins):
        ta = dag.tensors[a.tensor]
        if not ta.is_sparse or ta.fmt != "csr" or dag.tensors[b.tensor].is_sparse:
            raise _fail(op, "the sparse operand must be the first one, in CSR")
        if len(a.indices) != 2 or len(b.indices) != 2 or a.indices[1] != b.indices[0] \
                or out != (a.indices[0], b.indices[1]) or a.indices[0] != streamed:
            raise _fail(op, f"not an SpMM out[{streamed},n] = A[{streamed},k]·B[k,n]")
        return RowOp(op.name, "spmm", (a.tensor, b.tensor), addend, op.sign, (sizes[out[1]],))
    if any(len(o.indices) != 2 for o in (a, b, op.output)):
        raise _fail(op, "operands must be matrices")
    if streamed in out:
        rows = [o for o in ins if streamed in o.indices]
        small = [o for o in ins if streamed not in o.indices]
        if len(rows) != 1 or len(small) != 1:
            raise _fail(op, f"exactly one operand must carry the streamed rank {streamed!r}")
        r, s = rows[0], small[0]
        j = r.indices[1] if r.indices[0] == streamed else None
        if j is None or out != (streamed, s.indices[1]) or s.indices[0] != j:
            raise _fail(op, f"not a row map out[{streamed},c] = row[{streamed},j]·small[j,c]")
        return RowOp(op.name, "rowmap", (r.tensor, s.tensor), addend, op.sign, (sizes[out[1]],),
                     sizes[j])
    if addend is not None:
        raise _fail(op, "a reduction over the streamed rank cannot take an addend")
    if a.indices[0] != streamed or b.indices[0] != streamed or a.indices[1] == b.indices[1] \
            or set(out) != {a.indices[1], b.indices[1]}:
        raise _fail(op, f"not a reduction out[a,b] = x[{streamed},a]·y[{streamed},b]")
    x, y = (a, b) if out == (a.indices[1], b.indices[1]) else (b, a)
    if op.sign != 1:
        raise _fail(op, "a negated reduction is not supported")
    return RowOp(op.name, "rowred", (x.tensor, y.tensor), None, 1, (sizes[out[0]], sizes[out[1]]))
