"""The default schedule of a legalized PrimFunc: what every kernel gets when no better rule applies.

Outer spatial loops run in parallel when the block is big enough, the innermost loop of element-wise
blocks is vectorised, element-wise producers are inlined into their consumers, plain copies
into their readers, and transposing blocks are cache-tiled.

>>> from tvm import te
>>> A = te.placeholder((64, 64), name="A")
>>> B = te.compute((64, 64), lambda i, j: A[i, j] * 2, name="B")
>>> sch = default_all(te.create_prim_func([A, B]))
>>> [int(sch.get(lp).kind) for lp in sch.get_loops(sch.get_sblock("B"))]  # serial, vectorized
[0, 2]
"""
from __future__ import annotations

import numpy as np

from tvm_ext.compile_steps.block_queries import (extent, is_copy, iter_kinds, parallel_min_work,
                                                  root_blocks)
from tvm_ext.compile_steps.parallel_chunks import balanced_prefix
from tvm_ext.compile_steps.tile_sizes import largest_divisor

__all__ = ["default_schedule", "default_all", "transpose_tiles", "inline_elementwise", "inline_copies",
           "TRANSPOSE_WRITE_TILE"]


def _spatial_prefix(sch, block, loops) -> list:
    """The leading loops of ``block`` bound to spatial iters (safe to parallelise).

    Legalized kernels bind their loops to the block iters one to one, in order;
    anything else gets no parallel loop unless the block has no reduction."""
    kinds = iter_kinds(sch, block)
    if "R" not in kinds:
        return list(loops)
    if len(loops) != len(kinds):
        return []
    n_spatial = kinds.index("R")
    return list(loops[:n_spatial])

def default_schedule(sch, block, threads: int | None = None) -> list[str]:
    """Parallelise the outer spatial loops (if the block is big enough) and vectorise the
    innermost loop of an element-wise block.  Best effort: a step TVM refuses is skipped.

    The parallel loop fuses as many leading loops as :func:`.parallel_chunks.balanced_prefix`
    asks for ``threads`` (default: the runtime's), so the static split gives every thread the same work.
    """
    from tensorize.schedule_steps import schedule_refusals
    from tvm_ext.target import num_threads

    TvmScheduleError = schedule_refusals()

    threads = threads or num_threads()
    steps: list[str] = []
    try:
        loops = sch.get_loops(block)
    except TvmScheduleError:
        return steps
    if not loops:
        return steps
    extents = [extent(sch, lp) for lp in loops]
    if any(e is None for e in extents):
        return steps
    work = int(np.prod(extents))
    elementwise = "R" not in iter_kinds(sch, block)
    try:
        if elementwise and len(loops) > 1 and 1 < extents[-1] <= 64:
            sch.vectorize(loops[-1])
            steps.append(f"vectorize inner {extents[-1]}")
            loops, extents = loops[:-1], extents[:-1]
        elif elementwise and extents[-1] > 64:
            _, inner = sch.split(loops[-1], [None, 16])
            sch.vectorize(inner)
            steps.append("vectorize inner 16")
            loops = sch.get_loops(block)[:-1]
            extents = [extent(sch, lp) for lp in loops]
    except TvmScheduleError:
        pass
    if work < parallel_min_work(sch, block) or threads <= 1:
        return steps
    prefix = _spatial_prefix(sch, block, loops)
    take = prefix[:balanced_prefix(extents[:len(prefix)], threads)]
    span = int(np.prod(extents[:len(take)])) if take else 1
    if span < 2:
        return steps
    try:
        fused = sch.fuse(*take) if len(take) > 1 else take[0]
        sch.parallel(fused)
        steps.append(f"parallel {span}")
    except TvmScheduleError:
        pass
    return steps


def _transposed_axis(sch, block) -> int | None:
    """The iter whose read is unit-stride when the output's unit-stride iter is not (a transpose).

    Only for element-wise blocks whose loops bind their iters one to one, in order.
    """
    from tvm import tirx

    blk = sch.get(block)
    ivars = [iv.var for iv in blk.iter_vars]
    if len(sch.get_loops(block)) != len(ivars) or "R" in iter_kinds(sch, block):
        return None
    for region in blk.reads:
        last = region.region[-1].min if region.region else None
        if isinstance(last, tirx.Var) and any(last.same_as(v) for v in ivars[:-1]):
            return next(i for i, v in enumerate(ivars) if last.same_as(v))
    return None


def _divisor_at_most(extent: int | None, cap: int) -> int | None:
    """The largest divisor of ``extent`` from 2 to ``cap`` (a tile that needs no bounds test), or None.

    >>> _divisor_at_most(56, 16), _divisor_at_most(28, 16), _divisor_at_most(13, 8)
    (14, 14, None)
    """
    f = largest_divisor(extent or 0, cap)
    return f if f > 1 else None


#: Largest tile of a transpose along the written axis (iterations unrolled per vector of reads).
TRANSPOSE_WRITE_TILE = 32


def transpose_tiles(sch, block, threads: int | None = None) -> list[str]:
    """Cache-tile a transposing element-wise block: ``[.., p_o, last_o, p_i, last_i]`` or, for a pure
    transpose, ``[.., p_o, last_o, last_i, p_i]``.

    The read is unit-stride along ``p`` and the write along the last axis; a
    ``p_i x last_i`` tile keeps both sets of cache lines in use (a plain loop
    nest gathers one element per cache line).  A block that reads one buffer (a
    pure transpose) loads vectors along ``p`` (half a register, so that several
    rows of the written axis are in flight) and unrolls the written axis; a
    block that reads more (a transpose fused with an add) keeps its vectors
    along the written axis, where its other inputs are unit-stride.  Tiles divide
    the extents (no bounds tests).  Returns the steps, ``[]`` when the block is
    not a transpose or the sizes do not tile.
    """
    from tensorize.schedule_steps import schedule_refusals
    from tvm_ext.target import hardware_facts, num_threads

    TvmScheduleError = schedule_refusals()

    p = _transposed_axis(sch, block)
    if p is None:
        return []
    loops = sch.get_loops(block)
    lanes = hardware_facts().lanes(str(sch.get(block).writes[0].source.dtype))
    pure = len(sch.get(block).reads) == 1
    if pure:
        fp = _divisor_at_most(extent(sch, loops[p]), max(lanes // 2, 2))
        fl = _divisor_at_most(extent(sch, loops[-1]), TRANSPOSE_WRITE_TILE)
    else:
        fp = _divisor_at_most(extent(sch, loops[p]), lanes)
        fl = _divisor_at_most(extent(sch, loops[-1]), lanes)
    if fp is None or fl is None:
        return []
    try:
        p_o, p_i = sch.split(loops[p], [None, fp])
        l_o, l_i = sch.split(loops[-1], [None, fl])
        outer = [lp for i, lp in enumerate(loops[:-1]) if i != p] + [p_o, l_o]
        if pure:
            sch.reorder(*outer, l_i, p_i)
            sch.unroll(l_i)
            sch.vectorize(p_i)
        else:
            sch.reorder(*outer, p_i, l_i)
            sch.vectorize(l_i)
        if (threads or num_threads()) > 1:
            sch.parallel(sch.fuse(*outer))
    except TvmScheduleError:
        return []
    if pure:
        return [f"transpose tiles {fp}x{fl}, parallel outer, vectorize reads {fp}, unroll writes {fl}"]
    return [f"transpose tiles {fp}x{fl}, parallel outer, vectorize {fl}"]


def inline_elementwise(sch, skip: set[str] = frozenset()) -> list[str]:
    """Inline every element-wise producer into its consumers (a fused transpose-add-relu-transpose
    becomes one loop nest instead of four passes over full-size intermediate buffers).

    Blocks TVM refuses to inline (outputs, reductions, blocks read before written) stay.
    Returns the names of the inlined blocks.
    """
    from tensorize.schedule_steps import schedule_refusals

    TvmScheduleError = schedule_refusals()

    done: list[str] = []
    for b in root_blocks(sch)[:-1]:
        name = sch.get(b).name_hint
        if name in skip or "R" in iter_kinds(sch, b):
            continue
        try:
            sch.compute_inline(b)
            done.append(name)
        except TvmScheduleError:
            continue
    return done


def inline_copies(func):
    """``func`` with its plain copy blocks inlined into their consumers.

    Legalization gives a convolution without padding (every 1x1 convolution) a
    ``pad_temp`` block that copies the whole input before the reduction reads it;
    inlining it makes the reduction read the input directly.  Copies TVM refuses
    to inline (outputs, copies read by several blocks in ways it cannot merge) stay.

    >>> from tvm import s_tir, te
    >>> A = te.placeholder((8, 4), name="A")
    >>> B = te.compute((8, 4), lambda i, j: A[i, j], name="B")
    >>> k = te.reduce_axis((0, 4), name="k")
    >>> C = te.compute((8,), lambda i: te.sum(B[i, k], axis=k), name="C")
    >>> sch = s_tir.Schedule(inline_copies(te.create_prim_func([A, C])))
    >>> [sch.get(b).name_hint for b in root_blocks(sch)]
    ['C']
    """
    from tvm import s_tir

    from tensorize.schedule_steps import schedule_refusals

    TvmScheduleError = schedule_refusals()

    sch = s_tir.Schedule(func)
    changed = False
    for b in root_blocks(sch)[:-1]:
        if not is_copy(sch, b):
            continue
        try:
            sch.compute_inline(b)
            changed = True
        except TvmScheduleError:
            continue
    return sch.mod["main"] if changed else func


def default_all(func, skip: set[str] = frozenset()):
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    if not any("R" in iter_kinds(sch, b) for b in root_blocks(sch)):
        inline_elementwise(sch, skip)
    for b in root_blocks(sch):
        if sch.get(b).name_hint not in skip and not transpose_tiles(sch, b):
            default_schedule(sch, b)
    return sch


