"""TVMScript of the fused steps' dense row groups.

:func:`row_group_source`: a dense group (``X += PΛ, R -= SΛ, Γ = RᵀR``) as
one row loop, parallel over parts of the rows: each row map computes its
row in registers and stores it if a later step reads it; reductions over
the rows (``Γ``) add into per-part partials summed after the parallel loop.
(The ops an SpMM's row tiles feed are a TIR consumer of the sparse executor:
:mod:`schedules.fusion.spmm_consumer`.)

Kernel parameters are declared through :class:`KernelParams`, which records
what each one is (a storage tensor, a partial-sum workspace, the part bounds);
:mod:`schedules.fusion.kernels` compiles the text.

>>> from schedules.fusion.builders import block_cg_dag
>>> from schedules.fusion.groups import plan_fusion
>>> from schedules.fusion.row_forms import row_form, streamed_rank
>>> plan = plan_fusion(block_cg_dag(2, 4096, 8, 20_000, setup=False))
>>> G = row_form(plan.dag, plan.dag.op("Gamma1"), streamed_rank(plan, "Gamma1"))
>>> src, spec = row_group_source([G], {"R1": "R", "Gamma1": "Gamma"}, {"Gamma1"}, plan.dag, "float64", 8)
>>> spec
[('parts', None), ('tensor', 'R'), ('partial', (8, 8)), ('tensor', 'Gamma')]
"""
from __future__ import annotations

from typing import Any, Sequence

from schedules.fusion.einsum_dag import EinsumDAG
from schedules.fusion.row_forms import RowOp, family
from schedules.sparse.executors.codegen import Buffer, Code, prim_func_source
from tvm_ext.errors import ScheduleError

__all__ = ["KernelParams", "row_group_source"]

#: Vector loops with more whole vectors than this are not unrolled.
_MAX_UNROLL = 8
#: Interleaved accumulators of a row map's long contraction.
_CHAINS = 4


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


def fresh_name(base: str, taken) -> str:
    """``base``, or ``base_1``, ``base_2``, ... : the first not in ``taken``.

    >>> fresh_name("g_P", ["g_P", "g_P_1"])
    'g_P_2'
    """
    local, k = base, 1
    while local in taken:
        local, k = f"{base}_{k}", k + 1
    return local


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


class KernelParams:
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
            local = self._local[name] = fresh_name(f"{self.tensor_prefix}{family(t)}", self._local.values())
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


def row_group_source(forms: Sequence[RowOp], storage: dict, stored: set, dag: EinsumDAG,
                     dtype: str, lanes: int, solves: Sequence[RowOp] = ()) -> tuple[str, list]:
    """TVMScript of a dense row group (row maps and reductions over the rows).

    One block per parallel part: its rows run in a plain loop, each row map
    computes its row into a local vector (kept in registers) and stores it if
    a later step reads it; each reduction accumulates into a local tile for
    the whole part, written to the part's slot of a partial-sum workspace
    and summed over the parts after the parallel loop.

    ``solves``: host ops (``out = G⁻¹·R``, ``N x N``) computed first, in a
    serial prologue (:func:`~schedules.fusion.inline_solve.emit_spd_solve`);
    a failed pivot sets the kernel's status flag (a ``("status", None)``
    parameter) and skips the loop, for the caller to solve on the host.
    """
    from schedules.fusion.inline_solve import emit_spd_solve

    prm = KernelParams(dag, dtype)
    prm.buffers.append(Buffer("a_part", "part", ("NP",), "int32"))
    prm.spec.append(("parts", None))
    prologue = Code()
    if solves:
        prm.buffers.append(Buffer("a_status", "status", ("1",), "int32"))
        prm.spec.append(("status", None))
        prologue("status[0] = 0")
        for k, h in enumerate(solves):
            if h.kind != "host":
                raise ScheduleError(f"op {h.name!r} ({h.kind}) is not a small solve")
            G, R = (prm.tensor(t, storage, False) for t in h.inputs)
            n, cols = dag.tensors[h.inputs[1]].shape
            emit_spd_solve(prologue, G, R, prm.tensor(h.name, storage, False), "status", int(n), int(cols),
                           dtype, prefix=f"sv{k}")
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
    if solves:
        with prologue.block("if status[0] == 0:"):
            prologue.extend(code)
        code = prologue
    name = "fused_rows" if len(forms) > 1 else f"rows_{forms[0].kind}"
    src = prim_func_source(f"solve_{name}" if solves else name, prm.buffers, [], ["M", "NP"], code)
    return src, prm.spec


def _loop(n: int) -> str:
    """A loop over ``n`` small-rank entries: unrolled when short."""
    return f"T.unroll({n})" if n <= 2 * _MAX_UNROLL else f"range({n})"


def _emit_rowmap(code: Code, f: RowOp, name: str, row, prm: KernelParams, storage: dict, stored: set,
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
