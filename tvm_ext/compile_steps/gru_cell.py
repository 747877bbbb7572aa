"""One kernel per GRU layer: every step's hidden-state GEMV and gates, a barrier between steps.

Frontends unroll a GRU layer into one cell per step (the torch frontend's
decomposition of ``aten.gru``, after the input projection of all steps was
computed as one GEMM)::

    gi            = squeeze(strided_slice(GI, step t))          # (B, 3H), GI = X Wᵢᵀ + bᵢ for all steps
    i_r, i_z, i_n = split(gi, 3)
    gh            = matmul(reshape(h, (B, H)), Wₕᵀ) + bₕ        # (B, 3H): the GEMV of the step
    h_r, h_z, h_n = split(reshape(gh, (1, B, 3H)), 3)
    r = sigmoid(h_r + i_r);  z = sigmoid(h_z + i_z);  n = tanh(i_n + h_n * r)
    h' = (h - n) * z + n

and then ``concat`` of the step outputs.  Left to ``FuseOps`` that is two
kernels per step: the GEMV, then an unparallelised gate kernel whose ``split``
of a reshape indexes ``gh`` modulo ``3H``, plus the concat's copy.
:func:`fuse_gru_cells` finds the cells (:func:`match_cell`), groups each chain
of consecutive steps whose state flows from one cell to the next, and replaces
the chain by one call of :func:`gru_layer_primfunc`.  That kernel is one
parallel launch for the whole chain: every task runs the steps in order, owns
the same blocks of hidden units ``j`` at every step (their weight columns stay
in its caches), runs the three gate columns ``j, H + j, 2H + j`` of the GEMV
over ``k`` in vector registers, applies the gates, writes ``h'`` straight into
the layer's output sequence, and meets the other tasks at a barrier before the
next step reads ``h'`` (TVM's ``pragma_parallel_launch_point`` /
``pragma_parallel_barrier_when_finish``).  ``Wₕ`` is packed once at compile
time (:func:`pack_weight`) so that each task streams its columns contiguously.
A ``concat`` of the chain's state and outputs becomes the kernel's output.

>>> import numpy as np, tvm
>>> f = gru_layer_primfunc(batch=1, hidden=8, steps=3, cells=2)
>>> [str(p.name) for p in f.params]
['h0', 'gi', 'w', 'bias', 't0', 'out']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tvm_ext.compile_steps.placement import ATTR_MEMBERS, op_id
from tvm_ext.compile_steps.tile_sizes import largest_divisor

__all__ = ["gru_layer_primfunc", "layer_tasks", "pack_weight", "fuse_gru_cells", "match_cell", "chains", "FuseGRUCells", "GRUCell",
           "GRUChain", "hidden_block"]

#: Ops of the frontend's cell that the kernel replaces, per step (its ``tvm_ext.members``).
MEMBERS = ["matmul", "add", "reshape", "split", "add", "sigmoid", "add", "sigmoid", "multiply", "add", "tanh",
           "subtract", "multiply", "add"]
#: Placement of the replaced ops.
TARGET = "llvm/gru-layer"


def hidden_block(hidden: int) -> int:
    """Hidden units per parallel task: the largest of 32, 16, ..., 1 that divides ``hidden`` into at least
    two blocks (the layer kernel's parallel loop must not vanish; ``hidden`` < 2 has no such block).

    >>> hidden_block(512), hidden_block(48), hidden_block(16), hidden_block(7)
    (32, 16, 8, 1)
    """
    for jb in (32, 16, 8, 4, 2, 1):
        if hidden % jb == 0 and hidden // jb >= 2:
            return jb
    return 1


def pack_weight(w: np.ndarray) -> np.ndarray:
    """``Wₕᵀ`` (``H x 3H``) as ``[H / JB, H, 3, JB]``: each task reads its three gate columns as one stream.

    >>> w = np.arange(4 * 12, dtype="float32").reshape(4, 12)
    >>> pack_weight(w)[0, 1].tolist()  # row k = 1: gates r, z, n of hidden units 0..1 (the first block)
    [[12.0, 13.0], [16.0, 17.0], [20.0, 21.0]]
    """
    H = w.shape[0]
    jb = hidden_block(H)
    return np.ascontiguousarray(w.reshape(H, 3, H // jb, jb).transpose(2, 0, 1, 3))


def layer_tasks(blocks: int, threads: int) -> int:
    """Parallel tasks of the layer kernel: the largest divisor of ``blocks`` that is at most ``threads``;
    ``blocks`` (one each) when that is 1, because TVM drops a parallel loop of one iteration.

    >>> layer_tasks(16, 2), layer_tasks(16, 3), layer_tasks(6, 4), layer_tasks(3, 2), layer_tasks(5, 1)
    (2, 2, 3, 3, 5)
    """
    best = largest_divisor(blocks, threads)
    return best if best > 1 else blocks


def gru_layer_primfunc(batch: int, hidden: int, steps: int, cells: int, dtype: str = "float32",
                       tasks: int | None = None):
    """The fused chain of ``cells`` steps: ``out[0] = h0``, ``out[s] = GRU(out[s - 1], gi[t0 + s - 1], w, bias)``.

    ``w`` is ``Wₕᵀ`` (gates r, z, n) packed by :func:`pack_weight`, ``bias`` is ``bₕ``, ``gi``
    holds the input projections (``bᵢ`` included) of all ``steps``; ``t0`` (given at the call)
    is the step of the first cell.  One parallel launch; a barrier after each step.  A layer
    whose step has fewer than ``PARALLEL_MIN_WORK`` multiply-adds runs on the calling thread.

    ``tasks`` (default: the target's threads, :func:`layer_tasks`): each task owns a contiguous
    run of hidden-unit blocks and walks it forward on even steps and backward on odd ones, so a
    step starts on the weight columns the previous step read last, still in the core's L2 (a
    serpentine sweep; a cyclic one over more than L2 would miss on every line).  The order of
    the ``k`` sums is the same at every step.
    """
    from tvm.script import tirx as T

    B, H, G, S, N = int(batch), int(hidden), 3 * int(hidden), int(steps), int(cells)
    JB = hidden_block(H)
    E = H // JB
    if tasks is None:
        from tvm_ext.target import hardware_facts

        tasks = hardware_facts().cores
    from tvm_ext.compile_steps.block_queries import PARALLEL_MIN_WORK

    parallel = B * G * H >= PARALLEL_MIN_WORK  # a step's GEMV worth a thread's wake-up and a barrier
    P = layer_tasks(E, int(tasks)) if parallel else 1
    Q = E // P  # blocks per task
    tasks_loop = T.parallel if parallel else T.serial
    # one launch with a barrier per step, or (too little work per step) plain loops on the calling thread
    launch = "pragma_parallel_launch_point" if parallel else "tvm_ext.one_task"
    barrier = "pragma_parallel_barrier_when_finish" if parallel else "tvm_ext.one_task"
    KU = next(u for u in (4, 2, 1) if H % u == 0)  # rows of W per unrolled step of the k loop

    @T.prim_func(private=True, s_tir=True)
    def gru_layer(h0: T.Buffer((1, B, H), dtype), gi: T.Buffer((S, B, G), dtype),
                  w: T.Buffer((E, H, 3, JB), dtype), bias: T.Buffer((G,), dtype), t0: T.int64,
                  out: T.Buffer((N + 1, B, H), dtype)):
        T.func_attr({"tirx.noalias": True})
        with T.attr(0, launch, 1):  # one launch: every task runs every step
            for s in range(N + 1):
                with T.attr(0, barrier, 1):  # step s is written before s + 1 reads it
                    for p in tasks_loop(P):  # the same blocks of hidden units per task at every step
                        for q in range(Q):
                            for b in range(B):
                                with T.sblock("cell"):  # opaque: one block of hidden units of one batch row
                                    jo = T.bind(p * Q + T.if_then_else(s % 2 == 0, q, Q - 1 - q))
                                    acc = T.sblock_alloc_buffer((3, JB), dtype, scope="local")
                                    if s == 0:
                                        for jj in T.vectorized(JB):
                                            out[0, b, jo * JB + jj] = h0[0, b, jo * JB + jj]
                                    else:
                                        for g in T.unroll(3):
                                            for jj in T.vectorized(JB):
                                                acc[g, jj] = bias[g * H + jo * JB + jj]
                                        for ko in range(H // KU):
                                            for ku in T.unroll(KU):
                                                for g in T.unroll(3):
                                                    for jj in T.vectorized(JB):
                                                        acc[g, jj] = acc[g, jj] + out[s - 1, b, ko * KU + ku] \
                                                            * w[jo, ko * KU + ku, g, jj]
                                        for jj in T.vectorized(JB):
                                            acc[0, jj] = T.sigmoid(acc[0, jj] + gi[t0 + s - 1, b, jo * JB + jj])
                                        for jj in T.vectorized(JB):
                                            acc[1, jj] = T.sigmoid(acc[1, jj] + gi[t0 + s - 1, b, H + jo * JB + jj])
                                        for jj in T.vectorized(JB):
                                            acc[2, jj] = T.tanh(gi[t0 + s - 1, b, 2 * H + jo * JB + jj]
                                                                + acc[2, jj] * acc[0, jj])
                                        for jj in T.vectorized(JB):
                                            out[s, b, jo * JB + jj] = (out[s - 1, b, jo * JB + jj] - acc[2, jj]) \
                                                * acc[1, jj] + acc[2, jj]

    return gru_layer.with_attr("tirx.is_scheduled", True)


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
    var: Any = None  # the Var bound to ``out``


@dataclass
class GRUChain:
    """Cells of consecutive steps, each reading the state the one before wrote; one kernel computes them."""

    cells: list
    concat: Any = None  # ``concat((h_prev of the first cell, out of every cell), axis=0)``, absorbed when found
    concat_id: int | None = None
    kernel: str = ""  # name of the fused kernel's TIR function, once rewritten

    @property
    def op_ids(self) -> list:
        return [i for c in self.cells for i in c.op_ids] + [self.concat_id]


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
    if H < 2 or _shape(h_prev) is None or _ints([B, H]) != list(_shape(h_prev)[-2:]) or _shape(gi_all) is None \
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


def chains(cells: list[GRUCell]) -> list[GRUChain]:
    """``cells`` grouped into chains: the next cell reads ``h`` from the previous one's output, at the next
    step of the same input projections, with the same weight and bias.

    >>> chains([])
    []
    """
    by_prev = {}
    for c in cells:
        by_prev.setdefault(c.h_prev, []).append(c)
    out_vars = {c.var for c in cells}
    result = []
    for first in cells:
        if first.h_prev in out_vars:  # continues some chain
            prev = next(c for c in cells if c.var.same_as(first.h_prev))
            if _continues(prev, first):
                continue
        chain = [first]
        while True:
            nxt = [c for c in by_prev.get(chain[-1].var, []) if _continues(chain[-1], c)]
            if len(nxt) != 1:
                break
            chain.append(nxt[0])
        result.append(GRUChain(chain))
    return result


def _continues(prev: GRUCell, cell: GRUCell) -> bool:
    return cell.h_prev.same_as(prev.var) and cell.step == prev.step + 1 and cell.gi_all.same_as(prev.gi_all) \
        and cell.w.same_as(prev.w) and cell.bias.same_as(prev.bias)


def _absorb_concat(chain: GRUChain, calls: list) -> None:
    """Record the ``concat`` that stacks the chain's first state and every output in order (the kernel's output)."""
    import tvm
    from tvm import relax

    want = [chain.cells[0].h_prev] + [c.var for c in chain.cells]
    for call in calls:
        if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.concat") or int(call.attrs.axis) != 0:
            continue
        parts = call.args[0]
        if isinstance(parts, relax.Tuple) and len(parts.fields) == len(want) \
                and all(a.same_as(b) for a, b in zip(parts.fields, want)) \
                and _shape(chain.cells[0].h_prev) == _shape(chain.cells[0].out):
            chain.concat, chain.concat_id = call, op_id(call)
            return


def fuse_gru_cells(mod: Any) -> tuple[Any, list[GRUChain]]:
    """``mod`` with every chain of GRU cells of ``main`` replaced by one call of the layer kernel; the chains."""
    from tvm import relax

    main = mod["main"]
    bindings: dict = {}
    calls = []
    var_of: dict = {}

    def visit(e):
        if isinstance(e, relax.SeqExpr):
            for block in e.blocks:
                for bnd in block.bindings:
                    if isinstance(bnd, relax.VarBinding):
                        bindings[bnd.var] = bnd.value
                        if isinstance(bnd.value, relax.Call):
                            calls.append(bnd.value)
                            var_of[bnd.value] = bnd.var

    relax.analysis.post_order_visit(main.body, visit)
    cells = [c for c in (match_cell(call, bindings) for call in calls) if c is not None]
    if not cells:
        return mod, []
    for c in cells:
        c.var = var_of[c.out]
    found = chains(cells)
    for chain in found:
        _absorb_concat(chain, calls)
    return _rewrite(mod, found), found


def _rewrite(mod: Any, found: list[GRUChain]):
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class _Chains(relax.PyExprMutator):
        def __init__(self, module):
            super().__init__(module)
            self.kernels: dict = {}
            self.packed: dict = {}
            self.layer: dict = {}  # id(chain) -> the Var holding the kernel's output

        def visit_call_(self, op):  # noqa: N802 - TVM's hook name
            for chain in found:
                if chain.concat is not None and op.same_as(chain.concat):
                    return self._layer(chain)
                for i, cell in enumerate(chain.cells):
                    if op.same_as(cell.out):  # h' of step i + 1 of the chain: a slice of the layer's output
                        return relax.op.strided_slice(self._layer(chain), axes=[0], begin=[i + 1], end=[i + 2])
            return super().visit_call_(op)

        def _layer(self, chain: GRUChain):
            if id(chain) in self.layer:
                return self.layer[id(chain)]
            first = chain.cells[0]
            B, H = _shape(first.h2d)
            S, N = _shape(first.gi_all)[0], len(chain.cells)
            key = (B, H, S, N)
            if key not in self.kernels:
                members = MEMBERS * N + (["concat"] if chain.concat is not None else [])
                prim = gru_layer_primfunc(B, H, S, N).with_attr(ATTR_MEMBERS, members)
                self.kernels[key] = self.builder_.add_func(prim, "gru_layer")
            chain.kernel = self.kernels[key].name_hint
            key_w = first.w.value.data_ptr()
            if key_w not in self.packed:  # layers sharing a weight share one packed copy
                self.packed[key_w] = relax.const(pack_weight(first.w.value.numpy()))
            h0 = self.visit_expr(first.h_prev)
            if _shape(first.h_prev) != (1, B, H):
                h0 = self.builder_.emit(relax.op.reshape(h0, (1, B, H)))
            args = [h0, self.visit_expr(first.gi_all), self.packed[key_w], first.bias,
                    relax.prim_value(tvm.tirx.IntImm("int64", first.step))]
            out = self.builder_.emit(relax.call_tir(self.kernels[key], args,
                                                    out_ty=relax.TensorType((N + 1, B, H), "float32")))
            self.layer[id(chain)] = out
            return out

    mutator = _Chains(mod)
    out = mod.clone()
    new_main = mutator.visit_expr(mod["main"])
    built = mutator.builder_.get()
    for gv, f in built.functions.items():
        if isinstance(f, tvm.tirx.PrimFunc):
            out[gv] = f
    out["main"] = new_main
    return relax.transform.DeadCodeElimination()(out)


def FuseGRUCells():  # noqa: N802 - TVM's pass naming
    """Module pass: :func:`fuse_gru_cells`; the replaced ops (and an absorbed concat) are placed on
    ``llvm/gru-layer`` and each kernel is recorded for the report."""
    import tvm

    from tvm_ext.compile_steps.placement import add_kernels, place

    @tvm.transform.module_pass(opt_level=0, name="tvm_ext.FuseGRUCells")
    def run(mod, ctx):
        if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
            return mod
        new, found = fuse_gru_cells(mod)
        kernels: dict[str, dict] = {}
        for chain in found:
            H = _shape(chain.cells[0].h2d)[1]
            detail = (f"GRU layer: {len(chain.cells)} steps (hidden GEMV + gates) in one parallel launch, "
                      f"a barrier per step, {hidden_block(H)} units per task")
            new = place(new, chain.op_ids, TARGET, detail)
            ops = list(MEMBERS) + (["concat"] if chain.concat is not None else [])
            kernels.setdefault(chain.kernel, {"name": chain.kernel, "target": TARGET, "schedule": "gru-layer",
                                              "detail": detail, "ops": ops})
        return add_kernels(new, list(kernels.values())) if kernels else new

    return run
