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
  :class:`~schedules.sparse.recipes.consumer.RowTileConsumer` (``Δ = PᵀS``
  accumulates per-part partial sums while the row of ``S`` is in registers;
  a GCN's ``X1 = Z·W`` consumes the row of ``Z``, which is never stored);
* a dense group (``X += PΛ, R -= SΛ, Γ = RᵀR``) is one row loop: each op
  computes its row in registers, stores it if a later step reads it, and
  reductions over the streamed rank (``Γ``) add into per-part partials that
  are summed after the parallel loop;
* small inverse ops (``Λ = Δ⁻¹Γ``) are host steps (``N x N``), run by the
  caller, or (:func:`build_inline_solve_kernels`) solved in the serial
  prologue of the row kernel that applies them.

Group membership comes from :func:`~schedules.fusion.steps.schedule_steps`:
the plan's fusion groups (``fused=True``) or one op per step (``fused=False``,
the SEQ baseline, which uses the same generators: the plain executor for the
SpMM and single-op row kernels).  Each op's row form and streamed rank come
from :mod:`schedules.fusion.row_forms`, the storage of its tensors from
:func:`~schedules.fusion.steps.assign_storage`, the dense kernels' text from
:mod:`schedules.fusion.group_codegen`, the SpMM's consumer from :mod:`schedules.fusion.spmm_consumer`.

>>> from schedules.fusion.builders import block_cg_dag
>>> from schedules.fusion.groups import plan_fusion
>>> from schedules.fusion.steps import iteration_ops, schedule_steps
>>> from schedules.sparse.inspectors import to_csr
>>> from tvm_ext.workloads import lap2d
>>> A = lap2d(8)
>>> plan = plan_fusion(block_cg_dag(2, 64, 2, A.nnz, setup=False))
>>> storage, kernels = build_step_kernels(plan, schedule_steps(plan, iteration_ops(plan.dag, 1), True), fmt=to_csr(A))
>>> kernels[:3]
[GroupKernel(S1+Delta1, spmm), None, GroupKernel(X1+R1+Gamma1, rows)]
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from schedules.fusion.analysis import GraphAnalysis
from schedules.fusion.arg_roles import ArgRole
from schedules.fusion.einsum_dag import EinsumDAG
from schedules.fusion.group_codegen import row_group_source
from schedules.fusion.groups import FusionPlan
from schedules.fusion.row_forms import row_form, streamed_rank
from schedules.fusion.spmm_consumer import spmm_consumer
from schedules.fusion.steps import assign_storage, stored_tensors
from schedules.sparse.executors.codegen import dense_alignment, native_lanes, parse_prim_func
from tvm_ext.errors import ConfigError, ScheduleError, ShapeError

__all__ = ["GroupKernel", "build_step_kernels", "build_inline_solve_kernels"]


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
                 scalars: tuple = (), roles: Sequence[ArgRole] | None = None, status: np.ndarray | None = None):
        self.ops, self.kind, self.mod = ops, kind, mod
        #: the host view of the kernel's status flag (kernels with an in-kernel solve), else None
        self.status = status
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
_SPEC_ROLES = {"tensor": ArgRole.TENSOR, "partial": ArgRole.WORKSPACE, "parts": ArgRole.PARTS,
               "status": ArgRole.STATUS}


def _fixed_tensors(spec: list, parts: np.ndarray, dtype: str) -> tuple[list, np.ndarray | None]:
    """The kernel-owned arguments of a row kernel (its part boundaries, partial workspaces and status
    flag) and the host view of the flag (shared memory), or None."""
    import tvm

    from tvm_ext.zero_copy import empty_aligned

    fixed, status = [], None
    for kind, what in spec:
        if kind == "parts":
            fixed.append(tvm.runtime.tensor(parts))
        elif kind == "partial":
            fixed.append(tvm.runtime.tensor(np.zeros((parts.size,) + tuple(what), dtype)))
        elif kind == "status":
            status = empty_aligned((1,), "int32")
            status[0] = 0
            fixed.append(tvm.runtime.from_dlpack(status))
    return fixed, status


def _row_kernel(step: tuple, forms: dict, storage: dict, stored: set, dag: EinsumDAG, n_rows: int,
                dtype: str, lanes: int, target, solves: Sequence = ()) -> GroupKernel:
    from schedules.sparse.executors.partition import uniform_parts
    from schedules.sparse.executors.spec import ExecParams
    from tvm_ext.kernel_cache import get_or_build
    from tvm_ext.target import num_threads

    fl = [forms[o] for o in step]
    src, spec = row_group_source(fl, storage, stored, dag, dtype, lanes, solves)

    def make():
        return parse_prim_func(src)

    mod = get_or_build(("fusion.rows", src), make, target)
    parts = uniform_parts(n_rows, ExecParams(parallel=True).n_parts(num_threads()))
    fixed, status = _fixed_tensors(spec, parts, dtype)
    return GroupKernel(tuple(h.name for h in solves) + tuple(step), "rows", mod, make, spec, fixed,
                       status=status)


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
    consumer, cspec = (spmm_consumer(spmm, rest, storage, stored, dag, dtype, lanes) if rest
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


def _step_context(plan, steps: Sequence[tuple[str, ...]], dtype: str, target: Any):
    """What every kernel of ``steps`` is built from: the resolved target, the DAG, each op's row
    form, the tensors' storage, the vector lanes and the row count."""
    from tvm_ext.target import resolve_target

    target = resolve_target(target)
    dag = plan.dag
    forms = {o: row_form(dag, dag.op(o), streamed_rank(plan, o)) for s in steps for o in s}
    return target, dag, forms, assign_storage(dag, steps, forms), native_lanes(dtype, target), \
        _check_rows(plan, steps, forms)


def build_step_kernels(plan: FusionPlan | GraphAnalysis, steps: Sequence[tuple[str, ...]], *, fmt=None,
                       dtype: str = "float64", target: Any = None) -> tuple[dict, list]:
    """Compile the kernels of ``steps`` (host steps get ``None``).

    Returns ``(storage, kernels)``: the storage name of every tensor (see
    :func:`assign_storage`) and, per step, a :class:`GroupKernel` or ``None``.
    ``fmt``: the sparse format instance (CSR or BCSR) of the DAG's sparse
    tensor, needed when a step holds an SpMM.
    """
    target, dag, forms, storage, lanes, n_rows = _step_context(plan, steps, dtype, target)
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


def build_inline_solve_kernels(plan: FusionPlan | GraphAnalysis, steps: Sequence[tuple[str, ...]], *,
                               dtype: str = "float64", target: Any = None) -> dict[int, GroupKernel]:
    """Row kernels that compute the host steps just before them in a prologue, by step index.

    A dense row step ``i`` preceded by host steps (``Λ = Δ⁻¹Γ``) whose results
    it reads gets a variant whose serial prologue solves them
    (:mod:`schedules.fusion.inline_solve`) before its row loop; its ``ops``
    start with those host ops, and its ``status`` flag (host view) is 1
    when a pivot failed and the loop was skipped.  The storage is
    :func:`build_step_kernels`' for the same steps.

    >>> from schedules.fusion.builders import block_cg_dag
    >>> from schedules.fusion.groups import plan_fusion
    >>> from schedules.fusion.steps import iteration_ops, schedule_steps
    >>> plan = plan_fusion(block_cg_dag(2, 64, 2, 300, setup=False))
    >>> build_inline_solve_kernels(plan, schedule_steps(plan, iteration_ops(plan.dag, 1), True))
    {2: GroupKernel(Lambda1+X1+R1+Gamma1, rows), 4: GroupKernel(Phi1+P1, rows)}
    """
    target, dag, forms, storage, lanes, n_rows = _step_context(plan, steps, dtype, target)
    out: dict[int, GroupKernel] = {}
    for i, step in enumerate(steps):
        if {forms[o].kind for o in step} & {"host", "spmm"}:
            continue
        reads = {t for o in step for t in forms[o].inputs} | {forms[o].addend for o in step}
        solves, j = [], i - 1
        while j >= 0 and all(forms[o].kind == "host" for o in steps[j]):
            solves[:0] = [forms[o] for o in steps[j]]
            j -= 1
        solves = [h for h in solves if h.name in reads]
        if solves:
            out[i] = _row_kernel(step, forms, storage, stored_tensors(dag, step), dag, n_rows, dtype, lanes,
                                 target, solves)
    return out


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
