"""GOGETA §5 groups as real TVM kernels (beyond the paper, which only models them).

:func:`~schedules.fusion.groups.plan_fusion` marks which ops of an einsum DAG
run together (pipelined / multicast groups) and which rank each op streams
(its dominant rank).  This module turns a *schedule* of such groups into
compiled ``tvm.compile`` kernels for llvm, each one pass over the streamed
rank, parallel over work-balanced parts of it and vectorised over the small
ranks:

* a group holding an SpMM (``S = A·P``, ``A`` sparse CSR/BCSR) is the sparse
  executor of :mod:`schedules.sparse.executors` with the rest of the group
  fused into its row tiles through a
  :class:`~schedules.sparse.executors.codegen.RowConsumer` (``Δ = PᵀS``
  accumulates per-part partial sums while the row of ``S`` is in registers;
  a GCN's ``X1 = Z·W`` consumes the row of ``Z``, which is never stored);
* a dense group (``X += PΛ, R -= SΛ, Γ = RᵀR``) is one row loop: each op
  computes its row in registers, stores it if a later step reads it, and
  reductions over the streamed rank (``Γ``) add into per-part partials that
  are summed after the parallel loop;
* small inverse ops (``Λ = Δ⁻¹Γ``) are host steps (``N x N``), run by the caller.

Group membership comes from :func:`fusion_groups` (``fused=True``) or one op
per step (``fused=False``, the SEQ baseline, which uses the same generators:
the plain executor for the SpMM and single-op row kernels).  The streamed rank
of each op is the plan's dominant rank; an op without one (GOGETA calls it
'bal'/'small': every rank below 1000 or not 100:1 skewed) streams the index
bound to the sparse matrix's row rank (the same rank the dominant one would
be), or its largest rank in a DAG without a sparse tensor.  Tensors of one family (``X0``, ``X1``) share storage when the
schedule allows an in-place update (:func:`assign_storage`).

>>> from schedules.fusion.builders import block_cg_dag
>>> from schedules.fusion.groups import plan_fusion
>>> plan = plan_fusion(block_cg_dag(2, 4096, 8, 20_000, setup=False))
>>> schedule_steps(plan, iteration_ops(plan.dag, 1), fused=True)
[('S1', 'Delta1'), ('Lambda1',), ('X1', 'R1', 'Gamma1'), ('Phi1',), ('P1',)]
>>> row_form(plan.dag, plan.dag.op("R1"), "m")
RowOp(name='R1', kind='rowmap', inputs=('S1', 'Lambda1'), addend='R0', sign=-1, cols=(8,), inner=8)
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from schedules.fusion.analysis import GraphAnalysis
from schedules.fusion.arg_roles import ArgRole
from schedules.fusion.einsum_dag import EinsumDAG, Op
from schedules.fusion.groups import FusionPlan
from schedules.sparse.executors.codegen import (Buffer, Code, RowConsumer, dense_alignment,
                                                native_lanes, parse_prim_func, prim_func_source)
from tvm_ext.errors import ConfigError, ScheduleError, ShapeError

__all__ = [
    "ROW_KINDS", "RowOp", "row_form", "streamed_rank", "iteration_ops", "schedule_steps",
    "assign_storage", "stored_tensors", "GroupKernel", "build_step_kernels", "family",
]

#: Row forms: sparse x dense product, row map (``out[m,:] = [add ±] row[m,:]·small``),
#: reduction over the streamed rank (``out = xᵀy``), host op (small inverse).
ROW_KINDS = ("spmm", "rowmap", "rowred", "host")

#: Vector loops with more whole vectors than this are not unrolled.
_MAX_UNROLL = 8
#: Interleaved accumulators of a fused row map's sum over an SpMM row tile.
_CHAINS = 4


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


# --------------------------------------------------------------------------- schedule
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


# --------------------------------------------------------------------------- text emitters
def _vec(code: Code, cols: int, lanes: int, stmt) -> None:
    """Emit ``stmt(col)`` over ``cols`` columns: whole ``lanes``-wide vectors, then the rest."""
    full, rest = divmod(int(cols), lanes)
    if full == 1:
        with code.block(f"for jj in T.vectorized({lanes}):"):
            code(stmt("jj"))
    elif full > 1:
        loop = "T.unroll" if full <= _MAX_UNROLL else "range"
        with code.block(f"for jv in {loop}({full}):"):
            with code.block(f"for jj in T.vectorized({lanes}):"):
                code(stmt(f"jv * {lanes} + jj"))
    if rest:
        with code.block(f"for jj in T.vectorized({rest}):"):
            code(stmt(f"{full * lanes} + jj" if full else "jj"))


def _reduce_partials(code: Code, reds: Sequence[RowOp], outs: dict, parts: dict, dtype: str) -> None:
    """After the parallel loop: ``out = Σ_parts partial`` (parts are few)."""
    for f in reds:
        out = outs[f.name]
        with code.block(f"for a0, a1 in T.grid({f.cols[0]}, {f.cols[1]}):"):
            code(f"{out}[a0, a1] = T.{dtype}(0)")
            with code.block("for tt in range(NP - 1):"):
                code(f"{out}[a0, a1] = {out}[a0, a1] + {parts[f.name]}[tt, a0, a1]")


def _local_names(forms: Sequence[RowOp]) -> dict[str, str]:
    """Kernel-local names of the ops (family, numbered on a clash): ``Gamma1`` -> ``Gamma``."""
    names: dict[str, str] = {}
    for f in forms:
        base, k = family(f.name), 1
        name = base
        while name in names.values():
            name, k = f"{base}_{k}", k + 1
        names[f.name] = name
    return names


class _Params:
    """Kernel parameters of a group, in order: storage tensors and partial workspaces.

    Buffers are named after the tensor family, numbered within the kernel
    (``g_Gamma``, ``g_Gamma_1``), so two steps of the same structure produce
    the same kernel text and share one compiled kernel.  The names are for
    readers of the kernel text only: the roles travel in ``GroupKernel.arg_roles``.
    """

    tensor_prefix, workspace_prefix = "g_", "w_"

    def __init__(self, dag: EinsumDAG, dtype: str):
        self.dag, self.dtype = dag, dtype
        self.buffers: list[Buffer] = []
        self.spec: list[tuple[str, Any]] = []  # ("tensor", storage) | ("partial", shape) | ("parts", None)
        self._local: dict[str, str] = {}  # storage -> buffer name

    def tensor(self, t: str, storage: dict, streamed: bool) -> str:
        """The buffer of tensor ``t`` (rows symbolic when ``streamed``), added on first use."""
        name = storage[t]
        if name not in self._local:
            base, k = f"{self.tensor_prefix}{family(t)}", 1
            local = base
            while local in self._local.values():
                local, k = f"{base}_{k}", k + 1
            self._local[name] = local
            shape = self.dag.tensors[t].shape
            dims = (("M",) + tuple(str(d) for d in shape[1:])) if streamed else tuple(str(d) for d in shape)
            self.buffers.append(Buffer(f"h{local[1:]}", local, dims, self.dtype))
            self.spec.append(("tensor", name))
        return self._local[name]

    def partial(self, f: RowOp, local: str) -> str:
        """The per-part partial-sum workspace of reduction ``f``."""
        name = f"{self.workspace_prefix}{local}"
        self.buffers.append(Buffer(f"h_{name}", name, ("NP", str(f.cols[0]), str(f.cols[1])), self.dtype))
        self.spec.append(("partial", f.cols))
        return name


def _row_group_source(forms: Sequence[RowOp], storage: dict, stored: set, dag: EinsumDAG,
                      dtype: str, lanes: int) -> tuple[str, list]:
    """TVMScript of a dense row group (row maps and reductions over the rows).

    One block per parallel part: its rows run in a plain loop, each row map
    computes its row into a local vector (kept in registers) and stores it if
    a later step reads it; each reduction accumulates into a local tile for
    the whole part, written to the part's slot of a partial-sum workspace
    and summed over the parts after the parallel loop.
    """
    prm = _Params(dag, dtype)
    prm.buffers.append(Buffer("a_part", "part", ("NP",), "int32"))
    prm.spec.append(("parts", None))
    names = _local_names(forms)
    local = {f.name for f in forms if f.kind == "rowmap"}
    for f in forms:
        if f.kind not in ("rowmap", "rowred"):
            raise ScheduleError(f"op {f.name!r} ({f.kind}) cannot run in a dense row kernel")

    def row(t: str, col: str) -> str:
        return f"v_{names[t]}[{col}]" if t in local else f"{prm.tensor(t, storage, True)}[vi, {col}]"

    reds = [f for f in forms if f.kind == "rowred"]
    code = Code()
    with code.block("for t in T.parallel(NP - 1):"):
        with code.block('with T.sblock("part"):'):
            code("vt = T.axis.spatial(NP - 1, t)")
            for f in forms:
                n = names[f.name]
                if f.kind == "rowmap":
                    code(f'v_{n} = T.sblock_alloc_buffer(({f.cols[0]},), "{dtype}", scope="local")')
                    if f.inner >= 4 * _CHAINS:
                        code(f'x_{n} = T.sblock_alloc_buffer(({_CHAINS}, {f.cols[0]}), "{dtype}", scope="local")')
                else:
                    code(f'acc_{n} = T.sblock_alloc_buffer(({f.cols[0]}, {f.cols[1]}), "{dtype}", scope="local")')
                    with code.block(f"for a in {_loop(f.cols[0])}:"):
                        _vec(code, f.cols[1], lanes, lambda c, n=n: f"acc_{n}[a, {c}] = T.{dtype}(0)")
            with code.block("for vi in range(part[vt], part[vt + 1]):"):
                for f in forms:
                    n = names[f.name]
                    if f.kind == "rowmap":
                        _emit_rowmap(code, f, n, row, prm, storage, stored, dtype, lanes)
                        continue
                    x, y = f.inputs
                    with code.block(f"for a in {_loop(f.cols[0])}:"):
                        _vec(code, f.cols[1], lanes, lambda c, n=n, x=x, y=y: (
                            f"acc_{n}[a, {c}] = acc_{n}[a, {c}] + {row(x, 'a')} * {row(y, c)}"))
            parts = {f.name: prm.partial(f, names[f.name]) for f in reds}
            for f in reds:
                n, part = names[f.name], parts[f.name]
                with code.block(f"for a in {_loop(f.cols[0])}:"):
                    _vec(code, f.cols[1], lanes, lambda c, n=n, part=part: f"{part}[vt, a, {c}] = acc_{n}[a, {c}]")
    outs = {f.name: prm.tensor(f.name, storage, False) for f in reds}
    _reduce_partials(code, reds, outs, parts, dtype)
    src = prim_func_source("fused_rows" if len(forms) > 1 else f"rows_{forms[0].kind}", prm.buffers, [],
                           ["M", "NP"], code)
    return src, prm.spec


def _loop(n: int) -> str:
    """A loop over ``n`` small-rank entries: unrolled when short."""
    return f"T.unroll({n})" if n <= 2 * _MAX_UNROLL else f"range({n})"


def _emit_rowmap(code: Code, f: RowOp, name: str, row, prm: _Params, storage: dict, stored: set,
                 dtype: str, lanes: int) -> None:
    """``v = addend ± Σ_j row[j]·small[j, :]`` into the local row ``v``; store it if needed."""
    v = f"v_{name}"
    small = prm.tensor(f.inputs[1], storage, False)
    op = "+" if f.sign > 0 else "-"
    if f.addend is not None:
        _vec(code, f.cols[0], lanes, lambda c: f"{v}[{c}] = {row(f.addend, c)}")
    else:
        _vec(code, f.cols[0], lanes, lambda c: f"{v}[{c}] = T.{dtype}(0)")
    if f.inner < 4 * _CHAINS:
        with code.block(f"for j in range({f.inner}):"):
            _vec(code, f.cols[0], lanes, lambda c: f"{v}[{c}] = {v}[{c}] {op} {row(f.inputs[0], 'j')} * {small}[j, {c}]")
    else:  # a long contraction: interleave _CHAINS accumulators (the sum is a dependency chain)
        x = f"x_{name}"
        with code.block(f"for u in T.unroll({_CHAINS}):"):
            _vec(code, f.cols[0], lanes, lambda c: f"{x}[u, {c}] = T.{dtype}(0)")
        full = f.inner // _CHAINS
        with code.block(f"for q in range({full}):"):
            with code.block(f"for u in T.unroll({_CHAINS}):"):
                j = f"q * {_CHAINS} + u"
                _vec(code, f.cols[0], lanes, lambda c: f"{x}[u, {c}] = {x}[u, {c}] + {row(f.inputs[0], j)} * "
                                                       f"{small}[{j}, {c}]")
        with code.block(f"for j in range({full * _CHAINS}, {f.inner}):"):
            _vec(code, f.cols[0], lanes, lambda c: f"{x}[0, {c}] = {x}[0, {c}] + {row(f.inputs[0], 'j')} * {small}[j, {c}]")
        total = " + ".join(f"{x}[{u}, {{c}}]" for u in range(_CHAINS))
        _vec(code, f.cols[0], lanes, lambda c: f"{v}[{c}] = {v}[{c}] {op} ({total.format(c=c)})")
    if f.name in stored:
        out = prm.tensor(f.name, storage, True)
        _vec(code, f.cols[0], lanes, lambda c: f"{out}[vi, {c}] = {v}[{c}]")


def _spmm_consumer(spmm: RowOp, consumers: Sequence[RowOp], storage: dict, stored: set,
                   dag: EinsumDAG, dtype: str, lanes: int) -> tuple[RowConsumer, list]:
    """The rest of an SpMM's group as a :class:`RowConsumer` of its finished row tiles.

    Reductions ``xᵀS`` / ``Sᵀy`` add the tile into per-part partials (the
    other operand is read at the row: the SpMM's own ``B`` when ``A`` is
    square, or a stored tensor); row maps ``out = [add ±] S·W`` add the
    tile's contribution to the output row, which a row prologue initialises.
    """
    prm = _Params(dag, dtype)
    S, B = spmm.name, spmm.inputs[1]
    square = dag.tensors[spmm.inputs[0]].shape[0] == dag.tensors[spmm.inputs[0]].shape[1]
    names = _local_names(consumers)

    def other(t: str, col: str, row: str) -> str:
        if t == S:
            raise ScheduleError(f"an op reads {S!r} at columns outside the row tile being finished; "
                                "no fused kernel")
        if t == B:
            if not square:
                raise ScheduleError(f"{t!r} is read by row, but the SpMM's A is not square")
            return f"B[{row}, {col}]"
        return f"{prm.tensor(t, storage, True)}[{row}, {col}]"

    reds = [f for f in consumers if f.kind == "rowred"]
    maps = [f for f in consumers if f.kind == "rowmap"]
    for f in consumers:
        if f.kind not in ("rowred", "rowmap"):
            raise ScheduleError(f"op {f.name!r} ({f.kind}) cannot be fused into the SpMM {S!r}")
        if f.kind == "rowmap" and (f.inputs[0] != S or f.name not in stored or f.addend == S):
            raise ScheduleError(f"row map {f.name!r} must read {S!r} as its row operand and be stored")
        if f.kind == "rowred" and S not in f.inputs:
            raise ScheduleError(f"reduction {f.name!r} does not read {S!r}")
    parts = {f.name: prm.partial(f, names[f.name]) for f in reds}
    red_outs = {f.name: prm.tensor(f.name, storage, False) for f in reds}
    smalls = {f.name: prm.tensor(f.inputs[1], storage, False) for f in maps}
    outs = {f.name: prm.tensor(f.name, storage, True) for f in maps}

    def row_prologue(code: Code, row: str) -> None:
        for f in maps:
            out = outs[f.name]
            if f.addend is not None:
                _vec(code, f.cols[0], lanes, lambda c, f=f, out=out: f"{out}[{row}, {c}] = {other(f.addend, c, row)}")
            else:
                _vec(code, f.cols[0], lanes, lambda c, out=out: f"{out}[{row}, {c}] = T.{dtype}(0)")

    def part_prologue(code: Code) -> None:  # per-part accumulators, kept in registers when small
        for f in maps:  # the row map's partial sums, and the finished row of S it reads back
            code(f'x_{names[f.name]} = T.decl_buffer(({_CHAINS}, {f.cols[0]}), "{dtype}", scope="local")')
            code(f'z_{names[f.name]} = T.decl_buffer(({f.inner},), "{dtype}", scope="local")')
        for f in reds:
            r = f"r_{names[f.name]}"
            code(f'{r} = T.decl_buffer(({f.cols[0]}, {f.cols[1]}), "{dtype}", scope="local")')
            with code.block(f"for a in {_loop(f.cols[0])}:"):
                _vec(code, f.cols[1], lanes, lambda c, r=r: f"{r}[a, {c}] = T.{dtype}(0)")

    def part_epilogue(code: Code) -> None:
        for f in reds:
            r, part = f"r_{names[f.name]}", parts[f.name]
            with code.block(f"for a in {_loop(f.cols[0])}:"):
                _vec(code, f.cols[1], lanes, lambda c, r=r, part=part: f"{part}[t, a, {c}] = {r}[a, {c}]")

    def row_tile(code: Code, tier, row: str, value) -> None:
        for f in reds:
            r = f"r_{names[f.name]}"
            x, y = f.inputs
            if y == S:
                with code.block(f"for a in {_loop(f.cols[0])}:"):
                    tier.emit(code, f"{r}[a, {tier.col()}] = {r}[a, {tier.col()}] + "
                                    f"{other(x, 'a', row)} * {value(tier.lane())}")
            else:
                with code.block(f"for b in {_loop(f.cols[1])}:"):
                    tier.emit(code, f"{r}[{tier.col()}, b] = {r}[{tier.col()}, b] + "
                                    f"{value(tier.lane())} * {other(y, 'b', row)}")
        for f in maps:
            _rowmap_tile(code, f, names[f.name], tier, row, value, outs[f.name], smalls[f.name], dtype, lanes)

    consumer = RowConsumer(
        key=("fusion", tuple((f.kind, tuple("S" if t == S else "B" if t == B else "t" for t in f.inputs),
                              f.addend is not None, f.sign, f.cols, f.inner) for f in consumers),
             spmm.name in stored, lanes, dtype),
        row_tile=row_tile, buffers=tuple(prm.buffers), size_vars=("M", "NP"),
        part_prologue=part_prologue, part_epilogue=part_epilogue if reds else None,
        row_prologue=row_prologue if maps else None,
        epilogue=(lambda code: _reduce_partials(code, reds, red_outs, parts, dtype)) if reds else None,
        writes_c=spmm.name in stored)
    return consumer, prm.spec


def _rowmap_tile(code: Code, f: RowOp, name: str, tier, row: str, value, out: str, small: str,
                 dtype: str, lanes: int) -> None:
    """``out[row, :] ±= Σ_{n in tile} S[row, n]·small[n, :]``.

    The finished tile is first copied to a local row (vector stores; the
    SpMM's accumulators stay in registers), then read back one scalar at a
    time as broadcasts, over :data:`_CHAINS` interleaved accumulators (the sum
    over the tile is a dependency chain).
    """
    x, z, c0 = f"x_{name}", f"z_{name}", f.cols[0]
    op = "+" if f.sign > 0 else "-"
    tier.emit(code, f"{z}[{tier.col()}] = {value(tier.lane())}")
    with code.block(f"for u in T.unroll({_CHAINS}):"):
        _vec(code, c0, lanes, lambda c: f"{x}[u, {c}] = T.{dtype}(0)")
    if tier.mask:
        with code.block(f"for nn in range({tier.mask}):"):
            _vec(code, c0, lanes, lambda c: f"{x}[0, {c}] = {x}[0, {c}] + {z}[{tier.base} + nn] * {small}[{tier.base} + nn, {c}]")
    else:
        full, rest = divmod(tier.width, _CHAINS)
        with code.block(f"for q in range({full}):"):
            with code.block(f"for u in T.unroll({_CHAINS}):"):
                _vec(code, c0, lanes, lambda c: f"{x}[u, {c}] = {x}[u, {c}] + {z}[{tier.base} + q * {_CHAINS} + u] * "
                                                f"{small}[{tier.base} + q * {_CHAINS} + u, {c}]")
        for nn in range(full * _CHAINS, full * _CHAINS + rest):
            _vec(code, c0, lanes, lambda c, nn=nn: f"{x}[0, {c}] = {x}[0, {c}] + {z}[{tier.base} + {nn}] * "
                                                   f"{small}[{tier.base} + {nn}, {c}]")
    total = " + ".join(f"{x}[{u}, {{c}}]" for u in range(_CHAINS))
    _vec(code, c0, lanes, lambda c: f"{out}[{row}, {c}] = {out}[{row}, {c}] {op} ({total.format(c=c)})")


# --------------------------------------------------------------------------- compiled groups
def _specialize(func, name: str, shape: tuple, dtype: str):
    """Bind buffer parameter ``name``'s trailing dims to constants (keeps the row count symbolic)."""
    import tvm

    for p in func.params:
        if p.name == name:
            dims = (p.shape[0],) + tuple(int(d) for d in shape[1:])
            # the binding keeps the alignment codegen declared for dense operands
            return func.specialize({p: tvm.tirx.decl_buffer(dims, dtype, name=name,
                                                             data_alignment=dense_alignment(dtype))})
    raise ScheduleError(f"kernel has no parameter {name!r}")  # pragma: no cover - generator bug


class GroupKernel:
    """One compiled step: ``kernel(env)`` runs it on the tensors in ``env`` (storage name -> TVM tensor).

    ``ops`` the DAG ops it computes, ``kind`` ``"spmm"`` (the sparse executor,
    fused or plain) or ``"rows"`` (a dense row group), ``storage`` the
    storage names of its tensor arguments in order, ``prim_func`` its
    PrimFunc (schedulable with ``s_tir.Schedule``), ``arg_roles`` one
    :class:`~schedules.fusion.arg_roles.ArgRole` per PrimFunc parameter.
    """

    def __init__(self, ops: tuple[str, ...], kind: str, mod, make_func, spec: list, fixed: list,
                 scalars: tuple = (), roles: Sequence[ArgRole] | None = None):
        self.ops, self.kind, self.mod = ops, kind, mod
        self.arg_roles: tuple[ArgRole, ...] = tuple(roles) if roles is not None else \
            tuple(_SPEC_ROLES[k] for k, _ in spec) + (ArgRole.SCALAR,) * len(scalars)
        self._make_func, self._func = make_func, None
        self._spec, self._fixed, self._scalars = spec, fixed, scalars
        self._fn = mod["main"]

    @property
    def prim_func(self):
        if self._func is None:
            self._func = self._make_func()
        return self._func

    @property
    def storage(self) -> tuple[str, ...]:
        return tuple(what for kind, what in self._spec if kind == "tensor")

    def args(self, env: dict) -> list:
        out, fixed = [], iter(self._fixed)
        for kind, what in self._spec:
            out.append(env[what] if kind == "tensor" else next(fixed))
        return out + list(self._scalars)

    def __call__(self, env: dict) -> None:
        self._fn(*self.args(env))

    def time(self, env: dict, *, repeat: int = 5, min_repeat_ms: int = 20):
        """Seconds per call of this step's kernel (``tvm_ext.timing.Timing``)."""
        from tvm_ext.timing import time_tvm

        return time_tvm(self.mod, "main", *self.args(env), repeat=repeat, min_repeat_ms=min_repeat_ms)

    def __repr__(self) -> str:
        return f"GroupKernel({'+'.join(self.ops)}, {self.kind})"


#: role of each row-kernel spec entry kind
_SPEC_ROLES = {"tensor": ArgRole.TENSOR, "partial": ArgRole.WORKSPACE, "parts": ArgRole.PARTS}


def _fixed_tensors(spec: list, parts: np.ndarray, dtype: str) -> list:
    """The kernel-owned arguments of a row kernel: its part boundaries and partial workspaces."""
    import tvm

    fixed = []
    for kind, what in spec:
        if kind == "parts":
            fixed.append(tvm.runtime.tensor(parts))
        elif kind == "partial":
            fixed.append(tvm.runtime.tensor(np.zeros((parts.size,) + tuple(what), dtype)))
    return fixed


def _row_kernel(step: tuple, forms: dict, storage: dict, stored: set, dag: EinsumDAG, n_rows: int,
                dtype: str, lanes: int, target) -> GroupKernel:
    from schedules.sparse.executors.partition import uniform_parts
    from schedules.sparse.executors.spec import ExecParams
    from tvm_ext.kernel_cache import get_or_build
    from tvm_ext.target import num_threads

    fl = [forms[o] for o in step]
    src, spec = _row_group_source(fl, storage, stored, dag, dtype, lanes)

    def make():
        return parse_prim_func(src)

    mod = get_or_build(("fusion.rows", src), make, target)
    parts = uniform_parts(n_rows, ExecParams(parallel=True).n_parts(num_threads()))
    return GroupKernel(step, "rows", mod, make, spec, _fixed_tensors(spec, parts, dtype))


#: formats whose executor arrays end with the row-part boundaries when parallel
_ROW_PART_FORMATS = ("csr", "bcsr")


def _spmm_kernel(step: tuple, forms: dict, storage: dict, stored: set, dag: EinsumDAG, fmt,
                 dtype: str, lanes: int, target) -> GroupKernel:
    """The sparse executor for the step's SpMM, the rest of the step fused into its row tiles."""
    import tvm

    from schedules.sparse.executors import kernels_for
    from tvm_ext.kernel_cache import get_or_build
    from tvm_ext.target import num_threads

    spmm = forms[step[0]]
    if spmm.kind != "spmm":
        raise ScheduleError(f"step {step}: the SpMM must come first")
    n = spmm.cols[0]
    kernels = kernels_for(fmt)
    kernels.check(fmt)
    if tuple(fmt.shape) != dag.tensors[spmm.inputs[0]].shape:
        raise ShapeError(f"the sparse format is {fmt.shape[0]}x{fmt.shape[1]}, the DAG's "
                         f"{spmm.inputs[0]!r} is {dag.tensors[spmm.inputs[0]].shape}")
    if np.dtype(fmt.dtype).name != dtype:
        raise ConfigError(f"the sparse format holds {np.dtype(fmt.dtype).name}, the kernels are {dtype}")
    params = kernels.resolve(fmt, kernels.params_cls(parallel=len(step) > 1 or None), dtype, "spmm", n, target)
    arrays = [tvm.runtime.tensor(np.ascontiguousarray(a))
              for a in kernels.arrays(fmt, params, "spmm", False, num_threads())]
    rest = [forms[o] for o in step[1:]]
    consumer, cspec = (_spmm_consumer(spmm, rest, storage, stored, dag, dtype, lanes) if rest
                       else (None, []))
    if consumer is not None and not consumer.writes_c and spmm.addend is not None:
        raise ScheduleError(f"the SpMM {spmm.name!r} adds {spmm.addend!r} but is not stored; no fused kernel")
    sig = ("fusion.spmm", kernels.signature(fmt, params, "spmm", False), n,
           consumer.key if consumer else None)

    def make():
        f = kernels.fused_primfunc(fmt, params, consumer) if consumer else \
            kernels.primfunc(fmt, params, "spmm", False)
        return _specialize(f, "B", (None, n), dtype)

    mod = get_or_build(sig, make, target)
    A, B = spmm.inputs
    writes_c = consumer is None or consumer.writes_c
    spec: list = [("fixed", None)] * len(arrays) + [("tensor", storage[B])]
    roles = [ArgRole.FORMAT] * len(arrays) + [ArgRole.TENSOR]
    if params.parallel and kernels.format_name in _ROW_PART_FORMATS:
        roles[len(arrays) - 1] = ArgRole.PARTS
    if writes_c:
        c_in = storage[spmm.addend] if spmm.addend is not None else storage[spmm.name]
        spec += [("tensor", c_in), ("tensor", storage[spmm.name])]
        roles += [ArgRole.TENSOR, ArgRole.TENSOR]
    fixed = list(arrays)
    n_parts = int(arrays[-1].shape[0]) if params.parallel else 1
    for kind, what in cspec:
        roles.append(_SPEC_ROLES[kind])
        if kind == "partial":
            fixed.append(tvm.runtime.tensor(np.zeros((n_parts,) + tuple(what), dtype)))
            spec.append(("fixed", None))
        else:
            spec.append((kind, what))
    scalars = tuple(int(v) for v in kernels.scalars(fmt, False))
    alpha, beta = float(spmm.sign), (1.0 if spmm.addend is not None else 0.0)
    roles += [ArgRole.SCALAR] * (len(scalars) + 2)
    return GroupKernel(step, "spmm", mod, make, spec, fixed, scalars + (alpha, beta), roles)


def build_step_kernels(plan: FusionPlan | GraphAnalysis, steps: Sequence[tuple[str, ...]], *, fmt=None,
                       dtype: str = "float64", target: Any = None) -> tuple[dict, list]:
    """Compile the kernels of ``steps`` (host steps get ``None``).

    Returns ``(storage, kernels)``: the storage name of every tensor (see
    :func:`assign_storage`) and, per step, a :class:`GroupKernel` or ``None``.
    ``fmt``: the sparse format instance (CSR or BCSR) of the DAG's sparse
    tensor, needed when a step holds an SpMM.
    """
    from tvm_ext.target import resolve_target

    target = resolve_target(target)
    dag = plan.dag
    forms = {o: row_form(dag, dag.op(o), streamed_rank(plan, o)) for s in steps for o in s}
    storage = assign_storage(dag, steps, forms)
    lanes = native_lanes(dtype, target)
    n_rows = _check_rows(plan, steps, forms)
    kernels: list = []
    for step in steps:
        kinds = {forms[o].kind for o in step}
        if kinds == {"host"}:
            kernels.append(None)
        elif "spmm" in kinds:
            if fmt is None:
                raise ConfigError(f"step {step} holds an SpMM: pass the sparse format (fmt=)")
            kernels.append(_spmm_kernel(step, forms, storage, stored_tensors(dag, step), dag, fmt, dtype,
                                        lanes, target))
        else:
            kernels.append(_row_kernel(step, forms, storage, stored_tensors(dag, step), dag, n_rows, dtype,
                                       lanes, target))
    return storage, kernels


def _check_rows(plan, steps, forms: dict) -> int:
    """Every streamed op of the schedule must stream the same extent (the rows)."""
    extents = set()
    for s in steps:
        for o in s:
            if forms[o].kind != "host":
                extents.add(plan.dag.op(o).index_sizes(plan.dag)[streamed_rank(plan, o)])
    if len(extents) > 1:
        raise ScheduleError(f"the schedule streams ranks of different extents {sorted(extents)}; "
                            "a row kernel needs one")
    return extents.pop() if extents else 0
