"""A schedule for small-M matmuls (batch-1 dense layers, short GEMMs): the weight streamed once per row tile.

With one to a few dozen rows of input, ``out[i, j] = sum_k x[i, k] * W[k, j]`` is bound by
reading ``W`` (``K x N`` floats, each used ``M`` times) more than by multiply-adds.  A GEMM
micro-kernel built for 8-row tiles wastes most of its registers on rows that do not exist, and
one that reads ``W`` in place walks it at a stride of ``N``.  This schedule

* splits the output columns into blocks of ``U`` vectors (``U * lanes`` columns) and runs the
  blocks in parallel, so each task streams its own columns of ``W``;
* packs ``W`` as ``[N / (U * lanes), K, U * lanes]`` (one contiguous stream per block) in a
  ``<weight>_global`` block that :mod:`.weight_prepack` moves to compile time;
* takes the rows in tiles of up to :data:`MAX_TILE_ROWS` and keeps a tile's ``rows x U`` partial
  sums in vector registers (a ``local`` accumulator, fully unrolled) while ``k`` runs, ``k``
  unrolled by ``KU`` so several independent loads are in flight; each loaded weight vector
  serves every row of the tile;
* applies the fused epilogue (bias, activation) on each finished tile.

``U`` is the number of accumulators per row that the target's vector registers hold beside a
broadcast input per row, capped so that every thread gets blocks (:func:`column_block`).

>>> from tvm import te
>>> x = te.placeholder((1, 256), name="x")
>>> w = te.placeholder((256, 128), name="w")
>>> k = te.reduce_axis((0, 256), "k")
>>> y = te.compute((1, 128), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="matmul")
>>> gemv_schedule(te.create_prim_func([x, w, y]), lanes=16) is not None
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm_ext.compile_steps.tile_sizes import largest_divisor

__all__ = ["MAX_ROWS", "MAX_TILE_ROWS", "row_tile", "GEMV_DETAIL", "GemvShape", "gemv_shape", "gemv_schedule", "gemv_candidate", "column_block"]

#: What the kernel report says of a kernel given this schedule.
GEMV_DETAIL = "small-M matmul: column blocks in parallel, weight packed per block at compile time, row tiles' sums " \
              "in registers"

#: Largest number of output rows (product of the spatial extents before the column axis) scheduled here.
MAX_ROWS = 32
#: Rows whose sums share each loaded weight vector (a row tile; the largest divisor of M up to this).
MAX_TILE_ROWS = 4


@dataclass(frozen=True)
class GemvShape:
    """What :func:`gemv_shape` read off a matmul block: rows ``M``, columns ``N``, reduction ``K``, and
    whether the weight is stored ``[N, K]`` (``x @ Wᵀ``) rather than ``[K, N]``."""

    rows: int
    columns: int
    depth: int
    weight: str  # the weight buffer's name
    transposed: bool


def _ints(xs) -> list[int] | None:
    try:
        return [int(v) for v in xs]
    except (TypeError, ValueError):
        return None


def _var_names(indices) -> list[str] | None:
    """Names of the block iteration variables an access uses, one per index (None: not plain variables)."""
    from tvm.tirx import Var

    out = []
    for e in indices:
        if not isinstance(e, Var):
            return None
        out.append(e.name)
    return out


def _loads(expr) -> list:
    """The ``BufferLoad`` nodes of a TIR expression (TVM 0.27 has no Python expression visitor)."""
    out, stack = [], [expr]
    while stack:
        n = stack.pop()
        if type(n).__name__ in ("BufferLoad", "TensorLoad"):  # tirx.BufferLoad is a constructor, not the class
            out.append(n)
            continue
        for f in ("a", "b", "value", "args", "condition", "true_value", "false_value"):
            child = getattr(n, f, None)
            if child is None or isinstance(child, (int, float, str)):
                continue
            stack.extend(child if isinstance(child, (list, tuple)) or type(child).__name__ == "Array" else [child])
    return out


def _source(load) -> Any:
    """The buffer a load reads (``.source`` in TVM 0.27, ``.buffer`` before)."""
    return getattr(load, "buffer", None) or load.source


def gemv_shape(sch, block) -> GemvShape | None:
    """The small-M matmul ``block`` computes, or None when it is not one.

    Structural test: spatial loops then one reduction loop; the output's last axis is the last
    spatial iterator; the product of the other spatial extents is at most :data:`MAX_ROWS`;
    it reads a 2-D float weight indexed by exactly (reduction, column) or (column, reduction)
    and an input indexed by the reduction variable on its last axis."""
    from tvm.tirx.stmt import BufferStore

    from tvm_ext.compile_steps.block_queries import extent as _extent
    from tvm_ext.compile_steps.block_queries import iter_kinds as _iter_kinds

    kinds = _iter_kinds(sch, block)
    if len(kinds) < 2 or kinds[-1] != "R" or any(k != "S" for k in kinds[:-1]):
        return None
    stmt = sch.get(block)
    extents = [_extent(sch, lp) for lp in sch.get_loops(block)]
    if None in extents or len(extents) != len(kinds):
        return None
    rows = 1
    for e in extents[:-2]:
        rows *= e
    columns, depth = extents[-2], extents[-1]
    if rows > MAX_ROWS or len(stmt.writes) != 1 or len(stmt.reads) < 2:
        return None
    body = stmt.body
    if not isinstance(body, BufferStore) or not str(body.buffer.dtype).startswith("float"):
        return None
    names = [iv.var.name for iv in stmt.iter_vars]
    col, red = names[-2], names[-1]
    if _var_names(body.indices) is None or _var_names(body.indices)[-1] != col:
        return None
    loads = _loads(body.value)
    weight = None
    for ld in loads:
        idx = _var_names(ld.indices)
        if idx is None or _source(ld).same_as(body.buffer):
            continue
        if idx == [red, col] or idx == [col, red]:
            if weight is not None:
                return None
            weight = GemvShape(rows, columns, depth, _source(ld).name, idx == [col, red])
    if weight is None:
        return None
    inputs = [ld for ld in loads if not _source(ld).same_as(body.buffer) and _source(ld).name != weight.weight]
    if len(inputs) != 1 or (_var_names(inputs[0].indices) or [None])[-1] != red:
        return None
    return weight


def row_tile(rows: int) -> int:
    """Rows per tile: the largest divisor of ``rows`` up to :data:`MAX_TILE_ROWS`.

    >>> row_tile(1), row_tile(3), row_tile(32), row_tile(6), row_tile(7)
    (1, 3, 4, 3, 1)
    """
    return largest_divisor(rows, MAX_TILE_ROWS)


def column_block(columns: int, rows: int, lanes: int, registers: int, threads: int) -> int:
    """Vectors of columns per parallel block: accumulators (``rows x U``) plus one weight vector and
    one broadcast input per row fit in ``registers``; at least two blocks per thread when possible;
    ``U * lanes`` divides ``columns`` (0 when no vector width does).

    >>> column_block(512, 1, 16, 32, 2), column_block(10, 1, 16, 32, 2), column_block(512, 1, 8, 16, 2)
    (8, 0, 8)
    """
    if columns % lanes:
        return 0
    vectors = columns // lanes
    room = max(1, (registers - 2 * rows) // max(rows, 1))
    best = 1
    for u in range(1, min(room, 8) + 1):
        if vectors % u == 0 and vectors // u >= 2 * max(threads, 1):
            best = u
    return best


def _pack_weight(sch, block, shape: GemvShape, jb: int, pack: str) -> None:
    """``W`` as ``[N / jb, K, jb]``: copied there (``pack="copy"``) or taken so (``"param"``)."""
    w_index = [i for i, r in enumerate(sch.get(block).reads)
               if (getattr(r, "buffer", None) or r.source).name == shape.weight][0]
    if pack != "param":
        sch.cache_read(block, w_index, "global")  # <weight>_global: moved to compile time
    if shape.transposed:
        sch.transform_layout(block, ("read", w_index), lambda c, r: (c // jb, r, c % jb))
    else:
        sch.transform_layout(block, ("read", w_index), lambda r, c: (c // jb, r, c % jb))


def gemv_schedule(func, lanes: int, registers: int = 16, threads: int = 2, unroll: int = 4, pack: str = "copy"):
    """A ``tvm.s_tir.Schedule`` of ``func`` with the GEMV schedule, or None when ``func`` is not a small-M
    matmul (plus element-wise epilogue) this schedule handles.

    ``lanes``: floats per vector register; ``registers``: vector registers
    (:class:`tvm_ext.target.HardwareFacts`); ``threads``: the threads the blocks are spread over;
    ``unroll``: rows of ``W`` per unrolled step of the ``k`` loop; ``pack``: how ``W`` reaches the
    ``[N / (U * lanes), K, U * lanes]`` layout: ``"copy"`` (a ``<weight>_global`` block, which
    :mod:`.weight_prepack` moves to compile time for a constant weight), ``"param"`` (the function
    takes ``W`` already packed: the kernel's time without that copy) or ``"none"`` (``W`` read in
    place; a ``[N, K]`` weight is then still copied).

    >>> gemv_schedule(None, 16) is None
    True
    """
    from tvm import s_tir

    from tvm_ext.compile_steps.block_queries import iter_kinds as _iter_kinds
    from tvm_ext.compile_steps.block_queries import root_blocks as _root_blocks

    if func is None:
        return None
    sch = s_tir.Schedule(func)
    reductions = [b for b in _root_blocks(sch) if "R" in _iter_kinds(sch, b)]
    if len(reductions) != 1:
        return None
    block = reductions[0]
    shape = gemv_shape(sch, block)
    if shape is None:
        return None
    tile = row_tile(shape.rows)
    u = column_block(shape.columns, tile, lanes, registers, threads)
    if u == 0:
        return None
    jb = u * lanes
    ku = next(f for f in (unroll, 4, 2, 1) if f >= 1 and shape.depth % f == 0)
    name = sch.get(block).name_hint
    try:
        blocks = _root_blocks(sch)
        if sch.get(blocks[0]).name_hint != name:  # producers (a padding or copy) are not handled here
            return None
        tail = blocks[1:]
        for b in tail[:-1]:
            sch.compute_inline(b)
        block = sch.get_sblock(name)
        loops = sch.get_loops(block)
        *spatial, j, k = loops
        jo, ja, jl = sch.split(j, [None, u, lanes])
        ko, ki = sch.split(k, [None, ku])
        row = sch.fuse(*spatial) if len(spatial) > 1 else (spatial[0] if spatial else None)
        io, ir = sch.split(row, [None, tile]) if row is not None else (None, None)
        # a tile's rows innermost: each loaded weight vector serves all of them
        sch.reorder(*[lp for lp in (jo, io, ko, ki, ir, ja, jl) if lp is not None])
        at = io if io is not None else jo  # one tile of rows x one block of columns
        acc = sch.cache_write(block, 0, "local")  # the partial sums, in registers once unrolled
        sch.reverse_compute_at(acc, at)
        if shape.transposed or pack != "none":
            _pack_weight(sch, block, shape, jb, pack)
        if tail:  # the epilogue reads the partial sums straight from the accumulator
            sch.compute_inline(acc)
            sch.reverse_compute_at(sch.get_sblock(sch.get(tail[-1]).name_hint), at)
        if shape.columns // jb > 1:
            sch.parallel(jo)
        sch.unroll(ki)
        sch.unroll(ja)
        sch.vectorize(jl)
        if ir is not None:
            sch.unroll(ir)
        init = sch.decompose_reduction(block, ko)
        iloops = sch.get_loops(init)
        sch.vectorize(sch.split(iloops[-1], [None, lanes])[-1])
        if not tail:
            sch.vectorize(sch.split(sch.get_loops(acc)[-1], [None, lanes])[-1])
        else:
            ep = sch.get_loops(sch.get_sblock(sch.get(tail[-1]).name_hint))
            sch.vectorize(sch.split(ep[-1], [None, lanes])[-1])
    except Exception:  # noqa: BLE001 - a step TVM refuses on this func: it is not the pattern scheduled here
        return None
    return sch


def gemv_candidate(func, target: Any = None) -> tuple[Any, Any] | None:
    """``(scheduled PrimFunc, PrimFunc to time)`` for a small-M matmul ``func``, else None.

    The scheduled function packs ``W`` in a ``<weight>_global`` block that :mod:`.weight_prepack`
    moves to compile time for a constant weight; the one to time takes ``W`` already packed, so
    a measurement compares the kernel a model runs (for a weight given at run time the packing
    stays in every call, and this timing understates it).  The tiles follow the target's vector
    width, vector registers and threads (:func:`tvm_ext.target.hardware_facts`).

    >>> gemv_candidate(None) is None
    True
    """
    from tvm_ext.target import hardware_facts

    if func is None:
        return None
    facts = hardware_facts(target)
    knobs = {"lanes": facts.lanes("float32"), "registers": facts.vector_registers, "threads": facts.cores}
    shipped = gemv_schedule(func, pack="copy", **knobs)
    timed = gemv_schedule(func, pack="param", **knobs)
    if shipped is None or timed is None:
        return None
    return shipped.mod["main"], timed.mod["main"]
