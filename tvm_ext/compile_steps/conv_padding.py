"""A padded convolution pads its input per thread, inside the tensorized kernel's parallel loop.

Legalized, a 3x3 convolution with padding first copies its whole input into a zero-bordered
``pad_temp`` buffer (its own parallel loop and barrier), then reduces over it.  With the output
rows split into one chunk per thread (:func:`row_chunks`, the parallel loop of the micro-kernel
schedule), :func:`pad_per_thread` moves the padding block under that loop: each thread pads the
input rows its chunk reads (its rows plus the window's halo, two rows shared with the neighbour,
written with the same values) right before using them, while they are still in its own cache,
and the kernel has one parallel region instead of two.

>>> from tvm import te, tirx
>>> x = te.placeholder((1, 4, 4, 8), name="x")
>>> p = te.compute((1, 6, 6, 8), lambda n, i, j, c: tirx.if_then_else(
...     tirx.all(i >= 1, i <= 4, j >= 1, j <= 4), x[n, i - 1, j - 1, c], 0.0), name="pad_temp")
>>> pad_blocks(te.create_prim_func([x, p]))
['pad_temp']
"""
from __future__ import annotations

from typing import Any, Callable

__all__ = ["pad_blocks", "row_chunks", "pad_per_thread", "padded_per_thread"]


def _is_padding(sch, block) -> bool:
    """A spatial block storing ``if_then_else(in bounds, load, constant)`` of one buffer (a pad)."""
    import tvm
    from tvm.tirx.stmt import BufferStore

    blk = sch.get(block)
    body = blk.body
    value = getattr(body, "value", None)
    return (isinstance(body, BufferStore) and all(int(iv.iter_type) == 0 for iv in blk.iter_vars)
            and len(blk.reads) == 1 and len(blk.writes) == 1 and isinstance(value, tvm.ir.expr.Call)
            and isinstance(value.op, tvm.ir.Op) and value.op.name in ("tirx.if_then_else", "prim.if_then_else"))


def pad_blocks(func) -> list[str]:
    """Names of the padding blocks of ``func`` (a PrimFunc)."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    return [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root")) if _is_padding(sch, b)]


def row_chunks(threads: int) -> Callable[[Any, list], Any]:
    """A ``parallel_loops`` hook for :func:`tensorize.emit.apply`: the first outer loop whose extent
    is a multiple of ``threads`` (the output rows) is split into ``threads`` chunks, the chunk loop
    moved outermost and returned (to be the parallel loop).  Raises ``ValueError`` when none divides.
    """

    def hook(sch, loops: list):
        extents = [int(sch.get(lp).extent) for lp in loops]
        k = next((i for i, e in enumerate(extents) if e >= threads and e % threads == 0), None)
        if k is None or threads < 2:
            raise ValueError(f"no outer loop of {extents} splits into {threads} equal chunks")
        chunk, _ = sch.split(loops[k], [threads, None])
        if k:
            sch.reorder(chunk, *loops[:k])
        return chunk

    return hook


def pad_per_thread(func, threads: int) -> tuple[Any, list[str]]:
    """``func`` (scheduled with :func:`row_chunks`) with each padding block computed under its
    consumer's chunk loop, innermost loop vectorised; returns (func, moved block names).

    A padding block whose consumer does not run in ``threads`` chunks stays as it is.
    """
    from tvm import s_tir

    from tensorize.schedule_steps import schedule_refusals

    TvmScheduleError = schedule_refusals()

    sch = s_tir.Schedule(func)
    moved: list[str] = []
    for name in pad_blocks(func):
        block = sch.get_sblock(name)
        try:
            consumer = sch.get(sch.get_consumers(block)[0]).name_hint
            chunk = sch.get_loops(sch.get_sblock(consumer))[0]
            if int(sch.get(chunk).extent) != threads or int(sch.get(chunk).kind) != 1:  # 1: parallel
                continue
            sch.compute_at(block, chunk)
        except (*TvmScheduleError, IndexError):
            continue
        moved.append(name)
        try:
            sch.vectorize(sch.get_loops(sch.get_sblock(name))[-1])
        except TvmScheduleError:
            pass
    return (sch.mod["main"], moved) if moved else (func, [])


def padded_per_thread(sch, threads: int, planned: set[str], emitted: list[str]) -> tuple[Any, list[str], str]:
    """The tensorized ``sch`` with its padding moved into the chunk loop, the other blocks outside it
    given the default schedule (blocks inside it are the micro-kernel's own)."""
    from tvm import s_tir

    from tvm_ext.compile_steps.block_queries import root_blocks as _root_blocks
    from tvm_ext.compile_steps.default_schedule import default_schedule

    func, moved = pad_per_thread(sch.mod["main"], threads)
    if not moved:
        return None, [], "no padding block runs in the chunk loop"
    sch = s_tir.Schedule(func)
    for b in _root_blocks(sch):
        if sch.get(b).name_hint in planned or any(int(sch.get(lp).kind) == 1 for lp in sch.get_loops(b)):
            continue  # the micro-kernel's blocks and what runs inside its parallel chunk loop
        default_schedule(sch, b)
    return sch, emitted + [f"{', '.join(moved)} computed per thread ({threads} row chunks)"], ""
