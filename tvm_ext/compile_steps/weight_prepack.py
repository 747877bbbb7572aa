"""Pack constant weights once, at compile time, instead of inside every kernel call.

The x86 micro-kernels read one operand in panels (``tensorize.emit``'s
``pack``): a ``cache_read`` block (named ``<param>_global``) copies the
weight into ``[.., d // NR, .., d % NR]`` order at the start of every call,
after a padding block when the weight's extent is not a multiple of NR.  For
a model's constant weights that copy is pure overhead: an MLP layer with
batch 64 spends as long packing its 2048 x 2048 weight as multiplying.

:func:`mark_weight_packing` inlines the padding into the packing block and
annotates it ``meta_schedule.layout_rewrite_preproc``; Relax's
``SplitLayoutRewritePreproc`` then splits it into its own PrimFunc, called on
the weight, and ``FoldConstant`` runs that call at compile time when the
weight is a constant (:func:`prepack_weights`).  A weight passed at run time
is packed by that separate call on each run, as before.

>>> PREPROC_KEY
'meta_schedule.layout_rewrite_preproc'
"""
from __future__ import annotations

from typing import Any

__all__ = ["PREPROC_KEY", "PREPACKED_SUFFIX", "RUN_TIME_PARAMS", "run_time_params", "mark_weight_packing",
           "prepack_weights"]

#: The block annotation ``SplitLayoutRewritePreproc`` looks for.
PREPROC_KEY = "meta_schedule.layout_rewrite_preproc"
#: Name suffix ``SplitLayoutRewritePreproc`` gives the compute function.
PREPACKED_SUFFIX = "_prepacked"
#: Name suffix it gives the packing function split out of it.
PACKING_SUFFIX = "_weight_prepack"
#: PrimFunc attribute: positions of the parameters that are always computed at run time (a rewrite's
#: activation input).  Their packing is never split out as a weight's: it stays in the kernel, and a
#: candidate that packs them whole is timed with that copy.
RUN_TIME_PARAMS = "tvm_ext.run_time_params"


def run_time_params(func) -> set[str]:
    """Names of ``func``'s parameters listed in its :data:`RUN_TIME_PARAMS` attribute (empty without one).

    >>> from tvm import te
    >>> A = te.placeholder((4,), name="A")
    >>> f = te.create_prim_func([A, te.compute((4,), lambda i: A[i] + 1, name="B")])
    >>> run_time_params(f.with_attr(RUN_TIME_PARAMS, [0]))
    {'A'}
    """
    from tvm_ext.compile_steps.block_queries import param_buffers

    positions = func.attrs.get(RUN_TIME_PARAMS) if func.attrs is not None else None
    if not positions:
        return set()
    bufs = param_buffers(func)
    return {bufs[int(i)].name for i in positions if 0 <= int(i) < len(bufs)}


def _buffer(region) -> Any:
    return getattr(region, "buffer", None) or region.source


def _pack_blocks(sch) -> list:
    """Root blocks named ``*_global`` that copy one buffer into another (``cache_read`` packs)."""
    out = []
    for b in sch.get_child_blocks(sch.get_sblock("root")):
        blk = sch.get(b)
        if blk.name_hint.endswith("_global") and len(blk.reads) == 1 and len(blk.writes) == 1 \
                and all(int(iv.iter_type) == 0 for iv in blk.iter_vars):
            out.append(b)
    return out


def mark_weight_packing(func) -> tuple[Any, list[str]]:
    """``func`` with its weight-packing blocks annotated for the split; returns (func, packed params)."""
    from tvm import s_tir
    from tensorize.schedule_steps import schedule_refusals

    TvmScheduleError = schedule_refusals()

    from tvm_ext.compile_steps.block_queries import param_buffers

    params = {b.name for b in param_buffers(func)} - run_time_params(func)
    sch = s_tir.Schedule(func)
    marked = []
    for b in _pack_blocks(sch):
        src = _buffer(sch.get(b).reads[0]).name
        if src not in params:  # a padded weight: fold the padding into the packing copy
            try:
                sch.compute_inline(sch.get_producers(b)[0])
            except (*TvmScheduleError, IndexError):
                continue
            src = _buffer(sch.get(b).reads[0]).name
            if src not in params or len(sch.get(b).reads) != 1:
                continue
        sch.annotate(b, PREPROC_KEY, 1)
        marked.append(src)
    return (sch.mod["main"], marked) if marked else (func, [])


def prepack_weights(mod, target) -> tuple[Any, dict[str, list[str]]]:
    """Split the marked packing out of every kernel and fold it for constant weights.

    Returns the module and ``{kernel name: [parameter names packed at compile time]}`` (a kernel
    whose packed operand is a run-time tensor, such as an activation, keeps a packing call per run
    and is not listed).  A
    module whose split TVM refuses is returned unchanged (the kernels keep
    packing per call).
    """
    import tvm
    from tvm import relax

    marked: dict[str, list[str]] = {}
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if isinstance(func, tvm.tirx.PrimFunc):
            new, names = mark_weight_packing(func)
            if names:
                out[gv] = new
                marked[gv.name_hint] = names
    if not marked:
        return mod, {}
    try:
        with tvm.target.Target(target):
            split = relax.transform.SplitLayoutRewritePreproc()(out)
            folded = relax.transform.DeadCodeElimination()(relax.transform.FoldConstant()(split))
    except Exception:  # noqa: BLE001 - TVM refused the split: keep packing inside the kernels
        return mod, {}
    run_time = _called(folded)  # a packing call left after folding packs a run-time tensor on every call
    return folded, {k: v for k, v in marked.items() if k + PACKING_SUFFIX not in run_time}


def _called(mod) -> set[str]:
    """Names of the functions the module's Relax functions call."""
    from tvm import relax

    names: set[str] = set()

    def visit(e):
        if isinstance(e, relax.GlobalVar):
            names.add(e.name_hint)

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return names
