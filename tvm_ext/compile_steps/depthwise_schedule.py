"""A schedule for NHWC depthwise convolutions: vectors over channels, the window unrolled, rows in parallel.

A depthwise convolution (``groups == channels``) has no reduction over channels: each output
``out[n, h, w, c] = sum_{ry, rx} in[n, h*s + ry, w*s + rx, c] * wt[c, ry, rx, 0]`` does
``KH * KW`` multiply-adds.  In NHWC the channels are contiguous in the input, the weight's first
axis and the output, so the channel axis is the vector axis; the window loops are unrolled
around it, a few output pixels share the loaded weight vectors, and output rows run in parallel.
The padding copy is inlined (its bounds test is the same for every lane) and the bias + activation
that the fusion appended run on each finished vector of outputs.

>>> import numpy as np, tvm
>>> from tvm import te
>>> x = te.placeholder((1, 8, 8, 16), name="x")
>>> w = te.placeholder((16, 3, 3, 1), name="w")
>>> ry, rx = te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
>>> y = te.compute((1, 6, 6, 16), lambda n, h, v, c: te.sum(x[n, h + ry, v + rx, c] * w[c, ry, rx, 0],
...                axis=[ry, rx]), name="dw")
>>> sch = depthwise_schedule(te.create_prim_func([x, w, y]), lanes=8)
>>> sch is not None
True
"""
from __future__ import annotations

from typing import Any

__all__ = ["depthwise_block", "depthwise_schedule", "pixels_per_step"]

def pixels_per_step(width: int, window: int, registers: int) -> int:
    """Output pixels along a row that share one load of the weight vectors (register blocking).

    The largest divisor of the row ``width`` whose accumulators fit in the vector ``registers``
    beside the ``window`` weight vectors and one input vector.

    >>> pixels_per_step(28, 9, 32), pixels_per_step(28, 9, 16), pixels_per_step(13, 9, 32)
    (14, 4, 13)
    """
    room = max(1, registers - window - 1)
    return max(p for p in range(1, min(width, room) + 1) if width % p == 0)


def _ints(xs) -> list[int] | None:
    try:
        return [int(v) for v in xs]
    except (TypeError, ValueError):
        return None


def depthwise_block(sch) -> Any | None:
    """The block of ``sch`` that is an NHWC depthwise convolution, or None.

    Structural test: the only reduction block writes a 4-D output ``(N, H, W, C)``, reads a
    weight ``(C, KH, KW, 1)`` indexed by the output channel, and its reduction loops are the
    window (``KH``, ``KW`` and an extent-1 channel loop at most)."""
    from tvm_ext.compile_steps.block_queries import extent as _extent
    from tvm_ext.compile_steps.block_queries import iter_kinds as _iter_kinds
    from tvm_ext.compile_steps.block_queries import root_blocks as _root_blocks

    reductions = [b for b in _root_blocks(sch) if "R" in _iter_kinds(sch, b)]
    if len(reductions) != 1:
        return None
    block = reductions[0]
    stmt = sch.get(block)
    if len(stmt.writes) != 1:
        return None
    out = _ints(stmt.writes[0].source.shape)
    if out is None or len(out) != 4:
        return None
    channels = out[3]
    weights = [r.source for r in stmt.reads if _ints(r.source.shape) is not None
               and len(r.source.shape) == 4 and _ints(r.source.shape)[0] == channels
               and _ints(r.source.shape)[3] == 1]
    if len(weights) != 1 or not str(weights[0].dtype).startswith("float"):
        return None
    kinds = _iter_kinds(sch, block)
    loops = sch.get_loops(block)
    if kinds[:4] != ["S"] * 4 or any(k != "R" for k in kinds[4:]) or len(kinds) not in (6, 7):
        return None
    window = [_extent(sch, lp) for lp in loops[4:]]
    kh, kw = _ints(weights[0].shape)[1:3]
    if window[:2] != [kh, kw] or any(e != 1 for e in window[2:]):
        return None
    return block


def depthwise_schedule(func, lanes: int, registers: int = 16, threads: int | None = None):
    """A ``tvm.s_tir.Schedule`` of ``func`` with the depthwise schedule, or None when ``func`` is not one.

    ``lanes``: float elements per vector register (:meth:`tvm_ext.target.HardwareFacts.lanes`);
    ``registers``: vector registers (:attr:`tvm_ext.target.HardwareFacts.vector_registers`);
    ``threads``: threads the parallel loop is split for (default: the runtime's): the output rows,
    and the row's pixel groups where the rows alone do not split evenly
    (:func:`.parallel_chunks.balanced_prefix`).

    >>> depthwise_schedule(None, 8) is None
    True
    """
    from tvm import s_tir

    from tvm_ext.compile_steps.block_queries import parallel_min_work as _parallel_min_work
    from tvm_ext.compile_steps.block_queries import root_blocks as _root_blocks
    from tvm_ext.compile_steps.parallel_chunks import balanced_prefix
    from tvm_ext.target import num_threads

    if func is None:
        return None
    sch = s_tir.Schedule(func)
    block = depthwise_block(sch)
    if block is None:
        return None
    name = sch.get(block).name_hint
    channels = int(sch.get(block).writes[0].source.shape[3])
    vec = lanes if channels % lanes == 0 else (lanes // 2 if channels % (lanes // 2 or 1) == 0 else 0)
    if vec <= 1:
        return None
    try:
        # producers (padding) into the convolution, the epilogue (bias, activation) chained after it
        for b in _root_blocks(sch):
            if sch.get(b).name_hint == name:
                break
            sch.compute_inline(b)
        tail = [b for b in _root_blocks(sch) if sch.get(b).name_hint != name]
        for b in tail[:-1]:
            sch.compute_inline(b)
        block = sch.get_sblock(name)
        loops = sch.get_loops(block)
        n, h, w, c = loops[:4]
        window = loops[4:]
        width = int(sch.get(w).extent)
        taps = 1
        for lp in window:
            taps *= int(sch.get(lp).extent)
        px = pixels_per_step(width, taps, registers)
        wo, wi = sch.split(w, [None, px])
        co, ci = sch.split(c, [None, vec])
        sch.reorder(n, h, wo, co, *window, wi, ci)
        work = int(sch.get(n).extent) * int(sch.get(h).extent) * width * channels
        outer = [n, h, wo]
        take = max(2, balanced_prefix([int(sch.get(lp).extent) for lp in outer], threads or num_threads()))
        rows = sch.fuse(*outer[:take])
        if tail:
            sch.reverse_compute_at(sch.get_sblock(sch.get(tail[-1]).name_hint), co)
        if work >= _parallel_min_work(sch, block):
            sch.parallel(rows)
        for lp in window:
            sch.unroll(lp)
        sch.unroll(wi)
        sch.vectorize(ci)
        init = sch.decompose_reduction(block, window[0])
        sch.vectorize(sch.get_loops(init)[-1])
        if tail:
            ep = sch.get_loops(sch.get_sblock(sch.get(tail[-1]).name_hint))
            _, ep_c = sch.split(ep[-1], [None, vec])
            sch.vectorize(ep_c)
    except Exception:  # noqa: BLE001 - a step TVM refuses on this func: it is not the pattern scheduled here
        return None
    return sch
