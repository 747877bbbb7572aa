"""One kernel per depthwise-separable block: each row of the depthwise output feeds the pointwise GEMM from cache.

A MobileNet block is a 3x3 depthwise convolution (+ bias, activation) whose output only feeds a
1x1 pointwise convolution (+ bias, activation).  As two kernels, the depthwise output makes a
round trip through memory, and the two kernels are two parallel launches.
:func:`separable_pairs` finds such pairs among the ``call_tir`` bindings of ``main`` by the
structure of their PrimFuncs (:func:`.depthwise_schedule.depthwise_block`, :func:`pointwise_block`)
and the data flow (the depthwise result has no other user); :func:`merge_pairs` groups each pair
into one primitive function and lets Relax's ``FuseTIR`` merge the two PrimFuncs into one.

:func:`separable_schedule` schedules the merged kernel: output rows run in parallel; for its row a
task computes the depthwise row (channel vectors, window unrolled, a few pixels per weight load,
bias and activation on each finished vector) into a row buffer of ``W x C`` floats that stays in
L1/L2, then runs the pointwise GEMM of that row: a register tile of pixels x output-channel
vectors accumulates over the input channels, and the bias + activation run on the tile before it
is stored.  The pointwise weight is read through a copy in panels of the tile's output channels
(``(O / tile, .., C, tile)``, ``<weight>_global``), which
:func:`.weight_prepack.prepack_weights` packs once at compile time for a constant weight.
The tile comes from the target's vector width and register count (:mod:`tvm_ext.target`).

:func:`FuseSeparableBlocks` keeps a merged kernel only where it measures faster than the two
kernels the chain would otherwise run (each scheduled as :func:`.llvm_schedule.schedule_primfunc`
schedules it, which caches the decision for the later rules).

>>> pixel_tile(28, registers=32, vectors=2), pixel_tile(28, registers=16, vectors=2), pixel_tile(14, 16, 1)
(14, 4, 14)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm_ext.compile_steps.depthwise_schedule import _ints
from tvm_ext.compile_steps.tile_sizes import largest_divisor

__all__ = ["pixel_tile", "pointwise_block", "separable_pairs", "merge_pairs", "separable_schedule",
           "SeparablePair", "FuseSeparableBlocks", "SCHEDULE", "DETAIL"]

#: Schedule name recorded on a merged kernel (``tvm_ext.schedule``) and in the report.
SCHEDULE = "depthwise-pointwise"
DETAIL = ("depthwise + pointwise in one kernel: rows parallel, each depthwise row kept in cache feeds a "
          "register-tiled pointwise GEMM")


def pixel_tile(width: int, registers: int, vectors: int) -> int:
    """Output pixels of one pointwise register tile: the largest divisor of the row ``width`` whose
    ``pixels x vectors`` accumulators fit beside ``vectors`` weight vectors and one broadcast.

    >>> pixel_tile(56, 32, 2), pixel_tile(7, 16, 2)
    (14, 1)
    """
    room = max(1, (registers - vectors - 1) // vectors)
    return largest_divisor(width, room)


def pointwise_block(sch) -> Any | None:
    """The block of ``sch`` that is an NHWC 1x1 convolution (one reduction block whose reduction
    runs over the input's channels only, extent-1 window loops allowed), or None."""
    from tvm_ext.compile_steps.block_queries import extent as _extent
    from tvm_ext.compile_steps.block_queries import iter_kinds as _iter_kinds
    from tvm_ext.compile_steps.block_queries import root_blocks as _root_blocks

    reductions = [b for b in _root_blocks(sch) if "R" in _iter_kinds(sch, b)]
    if len(reductions) != 1:
        return None
    block = reductions[0]
    stmt = sch.get(block)
    out = _ints(stmt.writes[0].source.shape) if len(stmt.writes) == 1 else None
    kinds = _iter_kinds(sch, block)
    if out is None or len(out) != 4 or kinds[:4] != ["S"] * 4 or any(k != "R" for k in kinds[4:]):
        return None
    window = [_extent(sch, lp) for lp in sch.get_loops(block)[4:]]
    if None in window or sorted(window)[:-1] != [1] * (len(window) - 1):
        return None
    channels = max(window)
    operands = [_ints(r.source.shape) for r in stmt.reads]
    if [out[0], out[1], out[2], channels] not in operands:  # the activation: (N, H, W, C) at stride 1
        return None
    weights = [s for s in operands if s is not None and sorted(s) == sorted([out[3], channels, 1, 1])]
    if not weights or not str(stmt.writes[0].source.dtype).startswith("float"):
        return None
    return block


def _is_depthwise(func) -> bool:
    from tvm import s_tir

    from tvm_ext.compile_steps.depthwise_schedule import depthwise_block

    return depthwise_block(s_tir.Schedule(func)) is not None


def _is_pointwise(func) -> bool:
    from tvm import s_tir

    return pointwise_block(s_tir.Schedule(func)) is not None


@dataclass
class SeparablePair:
    """A depthwise ``call_tir`` whose result only feeds a pointwise ``call_tir``."""

    depthwise: Any  # the relax.Call of the depthwise kernel
    pointwise: Any  # the relax.Call of the pointwise kernel
    name: str  # the merged kernel's name

    @property
    def kernels(self) -> tuple[str, str]:
        return self.depthwise.args[0].name_hint, self.pointwise.args[0].name_hint


def separable_pairs(mod) -> list[SeparablePair]:
    """The depthwise -> pointwise pairs of ``main`` (unscheduled PrimFuncs, the depthwise result used once).

    >>> import tvm
    >>> separable_pairs(tvm.IRModule())
    []
    """
    import tvm
    from tvm import relax

    if "main" not in [gv.name_hint for gv in mod.get_global_vars()]:
        return []
    bound: dict = {}
    uses: dict = {}

    def visit(e):
        if isinstance(e, relax.SeqExpr):
            for block in e.blocks:
                for b in block.bindings:
                    if isinstance(b, relax.VarBinding):
                        bound[b.var] = b.value

    relax.analysis.post_order_visit(mod["main"].body, visit)

    def count(e):
        if isinstance(e, relax.Var):
            uses[e] = uses.get(e, 0) + 1

    relax.analysis.post_order_visit(mod["main"].body, count)
    call_tir = tvm.ir.Op.get("relax.call_tir")

    def kernel(call):
        if not (isinstance(call, relax.Call) and call.op.same_as(call_tir)):
            return None
        func = mod[call.args[0]]
        scheduled = func.attrs is not None and func.attrs.get("tirx.is_scheduled", False)
        return None if scheduled else func

    pairs = []
    for var, call in bound.items():
        pw = kernel(call)
        if pw is None or not call.args[1].fields:
            continue
        src = call.args[1].fields[0]
        dw_call = bound.get(src)
        dw = kernel(dw_call)
        if dw is None or uses.get(src, 0) != 1:  # this call is its only use
            continue
        if _is_depthwise(dw) and _is_pointwise(pw):
            a, b = dw_call.args[0].name_hint, call.args[0].name_hint
            pairs.append(SeparablePair(dw_call, call, f"{a}_{b.removeprefix('fused_')}"))
    return pairs


def merge_pairs(mod, pairs: list[SeparablePair]):
    """``mod`` with each pair's two calls replaced by one call of the merged kernel (named ``pair.name``,
    its ``tvm_ext.members`` the two kernels' members).

    >>> import tvm
    >>> m = tvm.IRModule()
    >>> merge_pairs(m, []).same_as(m)
    True
    """
    from tvm import relax

    from tvm_ext.compile_steps.placement import ATTR_MEMBERS

    if not pairs:
        return mod
    members = {}
    for p in pairs:
        names = []
        for call in (p.depthwise, p.pointwise):
            f = mod[call.args[0]]
            names += [str(m) for m in f.attrs[ATTR_MEMBERS]] if f.attrs is not None and ATTR_MEMBERS in f.attrs \
                else [call.args[0].name_hint]
        members[p.name] = names

    @relax.expr_functor.mutator
    class _Merge(relax.PyExprMutator):
        def visit_call_(self, op):  # noqa: N802 - TVM's hook name
            for p in pairs:
                if op.same_as(p.pointwise):
                    dw, pw = p.depthwise, p.pointwise
                    outer = list(dw.args[1].fields) + list(pw.args[1].fields[1:])
                    params = [relax.Var(f"p{i}", a.ty) for i, a in enumerate(outer)]
                    nd = len(dw.args[1].fields)
                    mid = relax.DataflowVar("depthwise", dw.ty)
                    res = relax.Var("pointwise", pw.ty)
                    body = relax.SeqExpr([relax.DataflowBlock([
                        relax.VarBinding(mid, relax.call_tir(dw.args[0], params[:nd], out_ty=dw.ty_args[0])),
                        relax.VarBinding(res, relax.call_tir(pw.args[0], [mid] + params[nd:],
                                                             out_ty=pw.ty_args[0]))])], res)
                    fn = relax.Function(params, body, pw.ty, is_pure=True).with_attr("Primitive", True)
                    gv = self.builder_.add_func(fn, p.name)
                    p.name = gv.name_hint
                    return relax.Call(gv, [self.visit_expr(a) for a in outer])
            return super().visit_call_(op)

    mutator = _Merge(mod)
    new_main = mutator.visit_expr(mod["main"])
    out = mutator.builder_.get()
    out["main"] = new_main
    out = relax.transform.DeadCodeElimination()(relax.transform.FuseTIR()(out))
    for p in pairs:
        gv = out.get_global_var(p.name)
        out[gv] = out[gv].with_attr(ATTR_MEMBERS, members[p.name])
    return out


def _read_index(stmt, buffer) -> int:
    return [i for i, r in enumerate(stmt.reads) if r.source.same_as(buffer)][0]


def separable_schedule(func, lanes: int, registers: int):
    """A ``tvm.s_tir.Schedule`` of a merged depthwise -> pointwise PrimFunc, or None when ``func`` is not one.

    ``lanes``: float elements per vector register; ``registers``: vector registers.

    >>> separable_schedule(None, 16, 32) is None
    True
    """
    from tvm import s_tir

    from tvm_ext.compile_steps.block_queries import iter_kinds as _iter_kinds
    from tvm_ext.compile_steps.block_queries import root_blocks as _root_blocks

    if func is None:
        return None
    sch = s_tir.Schedule(func)
    blocks = _root_blocks(sch)
    reductions = [i for i, b in enumerate(blocks) if "R" in _iter_kinds(sch, b)]
    if len(reductions) != 2:
        return None
    names = [sch.get(b).name_hint for b in blocks]
    i_dw, i_pw = reductions
    out_shape = _ints(sch.get(blocks[i_pw]).writes[0].source.shape)
    mid_shape = _ints(sch.get(blocks[i_dw]).writes[0].source.shape)
    if out_shape is None or mid_shape is None or len(out_shape) != 4:
        return None
    channels, out_channels = mid_shape[3], out_shape[3]
    if out_channels % lanes or channels % lanes or mid_shape[:3] != out_shape[:3]:
        return None
    try:
        row_name = _inline_around_the_pair(sch, names, i_dw, i_pw)
        if row_name is None:
            return None
        tile = (2 if out_channels % (2 * lanes) == 0 else 1) * lanes
        rows = _schedule_pointwise(sch, names[i_pw], row_name, names[i_pw + 1:], out_shape[2], tile, lanes,
                                   registers)
        if rows is None or not _schedule_depthwise_row(sch, names[i_dw], row_name, rows, mid_shape, lanes,
                                                        registers):
            return None
    except Exception:  # noqa: BLE001 - a step TVM refuses on this func: it is not the pattern scheduled here
        return None
    return sch


def _inline_around_the_pair(sch, names: list[str], i_dw: int, i_pw: int) -> str | None:
    """Inline the padding, the copies and the epilogue around the pair; the depthwise row's block name."""
    from tvm_ext.compile_steps.block_queries import is_copy as _is_copy

    for n in names[:i_dw]:  # the padding
        sch.compute_inline(sch.get_sblock(n))
    mid = list(names[i_dw + 1:i_pw])
    for n in [n for n in mid if _is_copy(sch, sch.get_sblock(n))]:  # the pointwise's padding copy
        sch.compute_inline(sch.get_sblock(n))
        mid.remove(n)
    if not mid:
        return None
    for n in mid[:-1]:  # bias and activation inlined into the depthwise row
        sch.compute_inline(sch.get_sblock(n))
    for n in names[i_pw + 1:-1]:
        sch.compute_inline(sch.get_sblock(n))
    return mid[-1]


def _schedule_pointwise(sch, pw_name: str, row_name: str, tail: list[str], width: int, tile: int, lanes: int,
                        registers: int):
    """Rows parallel, a register tile of pixels x ``tile`` output channels, the weight read in panels.

    Returns the parallel row loop, or None when the pointwise block is not the expected shape.
    """
    pw = sch.get_sblock(pw_name)
    # the pointwise weight through a panel copy (O / tile, .., C, tile): a register tile's weight
    # vectors are one contiguous stream over the input channels
    stmt = sch.get(pw)
    o_var = stmt.iter_vars[3].var
    row_buffer = sch.get(sch.get_sblock(row_name)).writes[0].source
    weight = [r for r in stmt.reads if not r.source.same_as(row_buffer)]
    if len(weight) != 1:
        return None
    axes = [i for i, rg in enumerate(weight[0].region) if rg.min.same_as(o_var)]
    if len(axes) != 1:
        return None
    o_axis = axes[0]
    wg = sch.cache_read(pw, _read_index(stmt, weight[0].source), "global")
    others = [i for i in range(len(weight[0].region)) if i != o_axis]
    sch.transform_layout(wg, ("write", 0),
                         lambda *ax: (ax[o_axis] // tile, *(ax[i] for i in others), ax[o_axis] % tile))
    loops = sch.get_loops(pw)
    n, h, w, o = loops[:4]
    red = loops[4:]
    wo, wi = sch.split(w, [None, pixel_tile(width, registers, tile // lanes)])
    oo, oi = sch.split(o, [None, tile])
    sch.reorder(oo, wo, *red, wi, oi)
    rows = sch.fuse(n, h)
    sch.parallel(rows)
    acc = sch.cache_write(pw, 0, "local")
    sch.reverse_compute_at(acc, wo)
    if tail:
        sch.reverse_compute_inline(sch.get_sblock(tail[-1]))
    sch.unroll(wi)
    sch.vectorize(oi)
    init = sch.decompose_reduction(pw, red[0])
    il = sch.get_loops(init)
    sch.unroll(il[-2])
    sch.vectorize(il[-1])
    sch.vectorize(sch.get_loops(sch.get_sblock(sch.get(acc).name_hint))[-1])
    sch.vectorize(sch.get_loops(wg)[-1])
    return rows


def _schedule_depthwise_row(sch, dw_name: str, row_name: str, rows, mid_shape: list[int], lanes: int,
                            registers: int) -> bool:
    """The depthwise row of each task's output row, computed under the parallel row loop; False if it does not fit."""
    from tvm_ext.compile_steps.depthwise_schedule import pixels_per_step

    row = sch.get_sblock(row_name)
    sch.compute_at(row, rows)
    dw = sch.get_sblock(dw_name)
    sch.compute_at(dw, rows)
    dl = sch.get_loops(dw)
    row_loop = sch.get(rows)
    after = dl[[i for i, lp in enumerate(dl) if sch.get(lp).same_as(row_loop)][0] + 1:]
    # under the row loop: the row's pixels, its channels, then the window (unit loops are gone)
    if [int(sch.get(lp).extent) for lp in after[:2]] != [mid_shape[2], mid_shape[3]]:
        return False
    (dw_w, dw_c), window = after[:2], after[2:]
    taps = 1
    for lp in window:
        taps *= int(sch.get(lp).extent)
    dwo, dwi = sch.split(dw_w, [None, pixels_per_step(int(sch.get(dw_w).extent), taps, registers)])
    dco, dci = sch.split(dw_c, [None, lanes])
    sch.reorder(dwo, dco, *window, dwi, dci)
    sch.reverse_compute_at(sch.get_sblock(row_name), dco)
    for lp in window:
        sch.unroll(lp)
    sch.unroll(dwi)
    sch.vectorize(dci)
    init = sch.decompose_reduction(dw, window[0])
    sch.vectorize(sch.get_loops(init)[-1])
    sch.vectorize(sch.get_loops(sch.get_sblock(row_name))[-1])
    return True


def _time_fused_and_separate(fused, depthwise, pointwise, target) -> dict[str, float]:
    """Seconds per call of the merged kernel and of the two kernels run one after the other, taken in
    alternating rounds of single runs (:func:`.candidate_timing.alternating_best`, nothing dropped)."""
    from tvm_ext.compile_steps.candidate_timing import alternating_best, kernel_timer

    fused_run, dw_run, pw_run = (kernel_timer(tag, func, target) for tag, func in
                                 (("fused", fused), ("depthwise", depthwise), ("pointwise", pointwise)))
    return alternating_best({"fused": fused_run, "separate": lambda: dw_run() + pw_run()},
                            drop_factor=float("inf"))


def FuseSeparableBlocks(tensorize: str = "measure", target: Any = None, *, measure: bool = True):  # noqa: N802
    """Module pass: each depthwise -> pointwise pair of ``main`` (:func:`separable_pairs`) becomes one kernel
    scheduled by :func:`separable_schedule`, where that measures faster than the two kernels scheduled as
    the later rules would (``tensorize``: their mode, see :class:`.passes.MeasuredTensorize`).
    ``measure=False`` merges every pair the schedule accepts; ``tensorize="always"`` (every kernel that
    maps onto the x86 micro-kernels is tensorized) merges none.  The merged kernel is recorded as
    ``depthwise-pointwise`` with both kernels' members.

    >>> FuseSeparableBlocks("never").info.name
    'tvm_ext.FuseSeparableBlocks'
    """
    import tvm

    from tvm_ext.compile_steps.llvm_schedule import schedule_primfunc
    from tvm_ext.compile_steps.placement import ATTR_MEMBERS, ATTR_SCHEDULE
    from tvm_ext.target import hardware_facts, resolve_target

    @tvm.transform.module_pass(opt_level=0, name="tvm_ext.FuseSeparableBlocks")
    def run(mod, ctx):
        pairs = separable_pairs(mod) if tensorize != "always" else []
        if not pairs:
            return mod
        tgt = resolve_target(target)
        facts = hardware_facts(tgt)
        lanes, registers = facts.lanes("float32"), facts.vector_registers
        trial = merge_pairs(mod, pairs)
        keep: dict[tuple[str, str], str] = {}  # (depthwise, pointwise) kernel -> why merged
        for p in pairs:
            sch = separable_schedule(trial[p.name], lanes, registers)
            if sch is None:
                continue
            if not measure:
                keep[p.kernels] = "merged without measuring"
                continue
            (dw_name, pw_name) = p.kernels
            dw, _ = schedule_primfunc(mod[p.depthwise.args[0]], dw_name, target=tgt, tensorize=tensorize)
            pw, _ = schedule_primfunc(mod[p.pointwise.args[0]], pw_name, target=tgt, tensorize=tensorize)
            try:
                times = _time_fused_and_separate(sch.mod["main"], dw, pw, tgt)
            except Exception:  # noqa: BLE001 - cannot measure here: keep the two kernels
                continue
            if times["fused"] < times["separate"]:
                keep[p.kernels] = (f"{times['separate'] / times['fused']:.2f}x faster than the two kernels "
                                f"({times['fused'] * 1e6:.1f} us vs {times['separate'] * 1e6:.1f} us)")
        chosen = [p for p in separable_pairs(mod) if p.kernels in keep]
        if not chosen:
            return mod
        out = merge_pairs(mod, chosen)
        for p in chosen:
            gv = out.get_global_var(p.name)
            merged = out[gv]
            sch = separable_schedule(merged, lanes, registers)
            out[gv] = sch.mod["main"].with_attr("tirx.is_scheduled", True) \
                .with_attr(ATTR_MEMBERS, merged.attrs[ATTR_MEMBERS]) \
                .with_attr(ATTR_SCHEDULE, [SCHEDULE, DETAIL, keep[p.kernels]])
        return out

    return run
