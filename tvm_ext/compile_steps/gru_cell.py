"""One kernel per GRU step: the hidden-state GEMV and the gates fused, parallel over hidden units.

Frontends unroll a GRU layer into one cell per step (the torch frontend's
decomposition of ``aten.gru``, after the input projection of all steps was
computed as one GEMM)::

    gi            = squeeze(strided_slice(GI, step t))          # (B, 3H), GI = X Wᵢᵀ + bᵢ for all steps
    i_r, i_z, i_n = split(gi, 3)
    gh            = matmul(reshape(h, (B, H)), Wₕᵀ) + bₕ        # (B, 3H): the GEMV of the step
    h_r, h_z, h_n = split(reshape(gh, (1, B, 3H)), 3)
    r = sigmoid(h_r + i_r);  z = sigmoid(h_z + i_z);  n = tanh(i_n + h_n * r)
    h' = (h - n) * z + n

Left to ``FuseOps`` that is two kernels per step: the GEMV, then an
unparallelised gate kernel whose ``split`` of a reshape indexes ``gh`` modulo
``3H`` (no contiguous vector loads), plus an intermediate ``gh`` per step.
:func:`fuse_gru_cells` replaces each such cell by one call of
:func:`gru_cell_primfunc`: each task owns a block of hidden units ``j``, runs
the three gate columns ``j, H + j, 2H + j`` of the GEMV over ``k`` in vector
registers, then applies the gates and writes ``h'`` — one parallel launch per
step, no intermediate.  ``Wₕ`` is packed once at compile time
(:func:`pack_weight`) so that each task streams its columns contiguously.
The step ``t`` is a scalar argument (a ``prim_value``), so every step of a
layer calls the same kernel on the whole ``GI``.

>>> import numpy as np, tvm
>>> f = gru_cell_primfunc(batch=1, hidden=8, steps=2)
>>> [str(p.name) for p in f.params]
['h', 'gi', 'w', 'bias', 't', 'out']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tvm_ext.compile_steps.placement import ATTR_MEMBERS, op_id

__all__ = ["gru_cell_primfunc", "pack_weight", "fuse_gru_cells", "match_cell", "FuseGRUCells", "GRUCell",
           "hidden_block"]

#: Ops of the frontend's cell that the kernel replaces (its ``tvm_ext.members``).
MEMBERS = ["matmul", "add", "reshape", "split", "add", "sigmoid", "add", "sigmoid", "multiply", "add", "tanh",
           "subtract", "multiply", "add"]


def hidden_block(hidden: int) -> int:
    """Hidden units per parallel task: the largest of 32, 16, ..., 1 that divides ``hidden``.

    >>> hidden_block(512), hidden_block(48), hidden_block(7)
    (32, 16, 1)
    """
    for jb in (32, 16, 8, 4, 2, 1):
        if hidden % jb == 0:
            return jb
    return 1


def pack_weight(w: np.ndarray) -> np.ndarray:
    """``Wₕᵀ`` (``H x 3H``) as ``[H / JB, H, 3, JB]``: each task reads its three gate columns as one stream.

    >>> w = np.arange(2 * 6, dtype="float32").reshape(2, 6)
    >>> pack_weight(w)[0, 1].tolist()  # row k = 1: gates r, z, n of hidden units 0..1
    [[6.0, 7.0], [8.0, 9.0], [10.0, 11.0]]
    """
    H = w.shape[0]
    jb = hidden_block(H)
    return np.ascontiguousarray(w.reshape(H, 3, H // jb, jb).transpose(2, 0, 1, 3))


def gru_cell_primfunc(batch: int, hidden: int, steps: int, dtype: str = "float32"):
    """The fused cell: ``out[0, b] = GRU(h[b], gi[t, b], w, bias)`` for a step ``t`` given at the call.

    ``w`` is ``Wₕᵀ`` (gates r, z, n) packed by :func:`pack_weight`, ``bias`` is ``bₕ``, ``gi``
    holds the input projections (``bᵢ`` included) of all ``steps``.
    """
    from tvm.script import tirx as T

    B, H, G, S = int(batch), int(hidden), 3 * int(hidden), int(steps)
    JB = hidden_block(H)
    KU = next(u for u in (4, 2, 1) if H % u == 0)  # rows of W per unrolled step of the k loop

    @T.prim_func(private=True, s_tir=True)
    def gru_cell(h: T.Buffer((B, H), dtype), gi: T.Buffer((S, B, G), dtype), w: T.Buffer((H // JB, H, 3, JB), dtype),
                 bias: T.Buffer((G,), dtype), t: T.int64, out: T.Buffer((1, B, H), dtype)):
        T.func_attr({"tirx.noalias": True})
        for jo in T.parallel(H // JB):
            for b in range(B):
                with T.sblock("cell"):  # opaque: one block of hidden units of one batch row
                    acc = T.sblock_alloc_buffer((3, JB), dtype, scope="local")
                    for g in T.unroll(3):
                        for jj in T.vectorized(JB):
                            acc[g, jj] = bias[g * H + jo * JB + jj]
                    for ko in range(H // KU):
                        for ku in T.unroll(KU):
                            for g in T.unroll(3):
                                for jj in T.vectorized(JB):
                                    acc[g, jj] = acc[g, jj] + h[b, ko * KU + ku] * w[jo, ko * KU + ku, g, jj]
                    for jj in T.vectorized(JB):
                        acc[0, jj] = T.sigmoid(acc[0, jj] + gi[t, b, jo * JB + jj])
                    for jj in T.vectorized(JB):
                        acc[1, jj] = T.sigmoid(acc[1, jj] + gi[t, b, H + jo * JB + jj])
                    for jj in T.vectorized(JB):
                        acc[2, jj] = T.tanh(gi[t, b, 2 * H + jo * JB + jj] + acc[2, jj] * acc[0, jj])
                    for jj in T.vectorized(JB):
                        out[0, b, jo * JB + jj] = (h[b, jo * JB + jj] - acc[2, jj]) * acc[1, jj] + acc[2, jj]

    return gru_cell.with_attr("tirx.is_scheduled", True)


@dataclass
class GRUCell:
    """One matched cell: the Relax values the fused kernel reads, and the ids of the ops it replaces."""

    out: Any  # the Call computing h' (replaced)
    h2d: Any  # (B, H) view of the previous hidden state
    h_prev: Any  # the previous hidden state as the cell reads it in h - n
    gi_all: Any  # (S, B, 3H) input projections of all steps
    step: int
    w: Any  # (H, 3H) constant
    bias: Any  # (3H,) constant
    op_ids: list
    kernel: str = ""  # name of the fused kernel's TIR function, once rewritten


def _call(e: Any, name: str, bindings: dict):
    """``e`` (a Var bound in ``bindings``, or an expression) as a call of op ``relax.<name>``, else None."""
    import tvm
    from tvm import relax

    e = bindings.get(e, e) if isinstance(e, relax.Var) else e
    if isinstance(e, relax.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "relax." + name:
        return e
    return None


def _value(e: Any, bindings: dict):
    from tvm import relax

    return bindings.get(e, e) if isinstance(e, relax.Var) else e


def _split_part(e: Any, bindings: dict):
    """``(source, index)`` when ``e`` is item ``index`` of ``split(source, 3 equal parts)``."""
    from tvm import relax

    item = _value(e, bindings)
    if not isinstance(item, relax.TupleGetItem):
        return None
    sp = _call(item.tuple_value, "split", bindings)
    if sp is None:
        return None
    return sp, int(item.index)


def _ints(values) -> list[int]:
    return [int(v) for v in values]


def _shape(e: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in e.ty.shape.values)
    except (AttributeError, TypeError, ValueError):
        return None


def _gate_sum(e: Any, bindings: dict):
    """``(h part, i part)`` of ``sigmoid(a + b)`` where one operand comes from gh's split and the other from gi's."""
    sg = _call(e, "sigmoid", bindings)
    add = _call(sg.args[0], "add", bindings) if sg is not None else None
    if add is None:
        return None
    a, b = (_split_part(x, bindings) for x in add.args)
    if a is None or b is None:
        return None
    return (a, b, [op_id(sg), op_id(add)])


def match_cell(call: Any, bindings: dict) -> GRUCell | None:
    """The cell whose ``h' = (h - n) * z + n`` is ``call``, or None when the data flow differs."""
    from tvm import relax

    add = _call(call, "add", bindings)
    if add is None:
        return None
    mul, n = add.args
    mul = _call(mul, "multiply", bindings)
    if mul is None:
        return None
    sub, z = mul.args
    sub = _call(sub, "subtract", bindings)
    if sub is None or not (isinstance(n, relax.Var) and sub.args[1].same_as(n)):
        return None
    h_prev = sub.args[0]
    tanh = _call(n, "tanh", bindings)
    n_add = _call(tanh.args[0], "add", bindings) if tanh is not None else None
    if n_add is None:
        return None
    i_n, hn_r = n_add.args
    hn_r = _call(hn_r, "multiply", bindings)
    if hn_r is None:
        return None
    h_n, r = hn_r.args
    rz = [_gate_sum(r, bindings), _gate_sum(z, bindings)]
    pn = [_split_part(h_n, bindings), _split_part(i_n, bindings)]
    if None in rz or None in pn:
        return None
    parts = [rz[0][0], rz[0][1], rz[1][0], rz[1][1], pn[0], pn[1]]
    h_split, i_split = parts[0][0], parts[1][0]
    if [p[0].same_as(h_split) for p in parts[0::2]] != [True] * 3 or \
            [p[0].same_as(i_split) for p in parts[1::2]] != [True] * 3 or [p[1] for p in parts] != [0, 0, 1, 1, 2, 2]:
        return None
    hs = _h_projection(h_split, bindings)
    gi = _step_slice(i_split.args[0], bindings)
    if hs is None or gi is None:
        return None
    h2d, w, bias, gh_ids = hs
    gi_all, step, gi_ids = gi
    h_view = _call(h2d, "reshape", bindings)  # the GEMV must read the same state as h - n
    if h_view is None or not h_view.args[0].same_as(h_prev):
        return None
    B, H = _shape(h2d) or (0, 0)
    if _shape(h_prev) is None or _ints([B, H]) != list(_shape(h_prev)[-2:]) or _shape(gi_all) is None \
            or tuple(_shape(gi_all)[1:]) != (B, 3 * H) or _shape(call) != (1, B, H):
        return None
    ids = [op_id(add), op_id(mul), op_id(sub), op_id(tanh), op_id(n_add), op_id(hn_r), *rz[0][2], *rz[1][2],
           op_id(h_split), op_id(i_split), op_id(h_view), *gh_ids, *gi_ids]
    return GRUCell(call, h2d, h_prev, gi_all, step, w, bias, ids)


def _h_projection(split: Any, bindings: dict):
    """``(h2d, W, b, op ids)`` of ``split(reshape(add(b, matmul(h2d, W)), (1, B, 3H)), 3, axis=-1)``."""
    import tvm

    if _ints(split.attrs.indices_or_sections) and len(_ints(split.attrs.indices_or_sections)) != 2:
        return None
    rs = _call(split.args[0], "reshape", bindings)
    add = _call(rs.args[0], "add", bindings) if rs is not None else None
    if add is None:
        return None
    for bias, mm in (add.args, add.args[::-1]):
        mm = _call(mm, "matmul", bindings)
        if mm is not None and isinstance(bias, tvm.ir.expr.Constant) and isinstance(mm.args[1], tvm.ir.expr.Constant):
            h2d, w = mm.args
            B, H = _shape(h2d) or (0, 0)
            if _shape(w) != (H, 3 * H) or _shape(bias) != (3 * H,) or str(w.ty.dtype) != "float32" \
                    or str(bias.ty.dtype) != "float32" or str(h2d.ty.dtype) != "float32":
                return None
            third = H
            if _ints(split.attrs.indices_or_sections) != [third, 2 * third] or int(split.attrs.axis) not in (2, -1):
                return None
            return h2d, w, bias, [op_id(rs), op_id(add), op_id(mm)]
    return None


def _step_slice(gi: Any, bindings: dict):
    """``(GI, t, op ids)`` of ``squeeze(strided_slice(GI, axes=[0], begin=[t], end=[t + 1]), axis=[0])``."""
    sq = _call(gi, "squeeze", bindings)
    ss = _call(sq.args[0], "strided_slice", bindings) if sq is not None else None
    if ss is None or _ints(sq.attrs.axis) != [0] or len(ss.args) < 3:
        return None
    from tvm import relax

    axes, begin, end = ss.args[1:4] if len(ss.args) >= 4 else (None, None, None)
    try:
        axes, begin, end = (_ints(v.values) if isinstance(v, relax.ShapeExpr) else _ints(v)
                            for v in (axes, begin, end))
    except (TypeError, AttributeError, ValueError):
        return None
    strides = ss.args[4] if len(ss.args) > 4 else None
    if strides is not None:
        try:
            if _ints(strides.values if isinstance(strides, relax.ShapeExpr) else strides) != [1]:
                return None
        except (TypeError, AttributeError, ValueError):
            return None
    if axes != [0] or len(begin) != 1 or end != [begin[0] + 1]:
        return None
    return ss.args[0], begin[0], [op_id(sq), op_id(ss)]


def fuse_gru_cells(mod: Any) -> tuple[Any, list[GRUCell]]:
    """``mod`` with every GRU cell of ``main`` replaced by a call of the fused kernel; the cells found."""
    from tvm import relax

    main = mod["main"]
    bindings: dict = {}
    calls = []

    def visit(e):
        if isinstance(e, relax.SeqExpr):
            for block in e.blocks:
                for bnd in block.bindings:
                    if isinstance(bnd, relax.VarBinding):
                        bindings[bnd.var] = bnd.value
                        if isinstance(bnd.value, relax.Call):
                            calls.append(bnd.value)

    relax.analysis.post_order_visit(main.body, visit)
    cells = [c for c in (match_cell(call, bindings) for call in calls) if c is not None]
    if not cells:
        return mod, []
    return _rewrite(mod, cells), cells


def _rewrite(mod: Any, cells: list[GRUCell]):
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class _Cells(relax.PyExprMutator):
        def __init__(self, module):
            super().__init__(module)
            self.kernels: dict = {}
            self.packed: dict = {}

        def visit_call_(self, op):  # noqa: N802 - TVM's hook name
            for cell in cells:
                if op.same_as(cell.out):
                    return self._fused(cell)
            return super().visit_call_(op)

        def _fused(self, cell: GRUCell):
            B, H = _shape(cell.h2d)
            S = _shape(cell.gi_all)[0]
            key = (B, H, S)
            if key not in self.kernels:
                prim = gru_cell_primfunc(B, H, S).with_attr(ATTR_MEMBERS, MEMBERS)
                self.kernels[key] = self.builder_.add_func(prim, "gru_cell")
            cell.kernel = self.kernels[key].name_hint
            key_w = cell.w.value.data_ptr()
            if key_w not in self.packed:  # the steps of a layer share one packed copy
                self.packed[key_w] = relax.const(pack_weight(cell.w.value.numpy()))
            args = [self.visit_expr(cell.h2d), self.visit_expr(cell.gi_all), self.packed[key_w], cell.bias,
                    relax.prim_value(tvm.tirx.IntImm("int64", cell.step))]
            return relax.call_tir(self.kernels[key], args, out_ty=relax.TensorType((1, B, H), "float32"))

    mutator = _Cells(mod)
    out = mod.clone()
    new_main = mutator.visit_expr(mod["main"])
    built = mutator.builder_.get()
    for gv, f in built.functions.items():
        if isinstance(f, tvm.tirx.PrimFunc):
            out[gv] = f
    out["main"] = new_main
    return relax.transform.DeadCodeElimination()(out)


def FuseGRUCells():  # noqa: N802 - TVM's pass naming
    """Module pass: :func:`fuse_gru_cells`; the replaced ops are placed on ``llvm/gru-cell`` and the
    kernel is recorded for the report."""
    import tvm

    from tvm_ext.compile_steps.placement import add_kernels, place

    @tvm.transform.module_pass(opt_level=0, name="tvm_ext.FuseGRUCells")
    def run(mod, ctx):
        if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
            return mod
        new, cells = fuse_gru_cells(mod)
        kernels: dict[str, dict] = {}
        for c in cells:
            detail = f"GRU step: hidden GEMV + gates in one kernel, {hidden_block(_shape(c.h2d)[1])} units per task"
            new = place(new, c.op_ids, "llvm/gru-cell", detail)
            kernels.setdefault(c.kernel, {"name": c.kernel, "target": "llvm/gru-cell", "schedule": "gru-cell",
                                          "detail": detail, "ops": list(MEMBERS)})
        return add_kernels(new, list(kernels.values())) if kernels else new

    return run
