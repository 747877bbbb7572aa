"""Schedule steps around a tensorized block: pad, pack, tile, keep the accumulator in registers.

The steps :func:`tensorize.emit.apply` runs between deriving an
:class:`~tensorize.intrin_spec.IntrinSpec` and ``sch.tensorize``:

* :func:`pad_to_tiles` pads axes a tile does not divide (``pad_einsum``), or shrinks
  the tile where TVM cannot pad the block (a conv window);
* :func:`pack_inputs` layout-transforms inputs whose vector axis is not unit-stride
  into panels;
* :func:`schedule_loops` splits and reorders so the mapped axes are innermost in the
  instruction's order, keeps the accumulator tile in registers
  (``cache_write(..., "local")``, element-wise consumers fused into its write-back by
  :func:`fuse_epilogue`), parallelises the outer loops and decomposes the reduction;
* :func:`schedule_elementwise` vectorises and parallelises the plain copy blocks the
  steps leave (pads, packs).

Every step appends a readable line to the caller's ``steps`` list.

Example (a 30 x 64 x 16 matmul on an 8 x 32 x 16 tile: pad, pack ``B``, loops)::

    >>> from tvm import s_tir
    >>> from tensorize.binding import AxisBinding
    >>> from tensorize.kernels.zoo import matmul
    >>> from tensorize.tensor_intrin import get_implementation
    >>> sch, tile = s_tir.Schedule(matmul(30, 64, 16).prim_func()), {"i": 8, "j": 32, "k": 16}
    >>> blk, bind, steps = sch.get_sblock("C"), AxisBinding("matmul", {"i": "i", "j": "j", "k": "k"}), []
    >>> micro = get_implementation("x86", "micro")
    >>> blk, bind, spec, padded = pad_to_tiles(sch, blk, bind, derive_spec(sch, blk, bind), tile, micro, steps)
    >>> blk, spec, packed = pack_inputs(sch, blk, spec.with_extents(tile), tile, "always", steps)
    >>> inner, outer, fused = schedule_loops(sch, blk, bind, spec, tile, "panel", True, True, steps)
    >>> padded, packed, steps[-1]
    ({'i': 32}, ['B'], 'decompose_reduction (init split off)')
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from tvm_ext.errors import ScheduleError

from .binding import AxisBinding, block_iters, mapped_iters
from .intrin_spec import IntrinSpec, OperandSpec, derive_spec, region_buffer  # noqa: F401 - derive_spec: module example
from .tensor_intrin import Implementation

__all__ = ["schedule_refusals", "fuse_epilogue", "schedule_elementwise", "schedule_loops", "pad_to_tiles",
           "pack_inputs"]


def schedule_refusals() -> tuple[type, ...]:
    """The exception classes a best-effort schedule step treats as "refused": TVM's
    ``ScheduleError`` (what a refused primitive raises; tvm_ext registers its own error classes
    under qualified kinds, :func:`tvm_ext.runtime_functions.register_runtime_functions`, so
    TVM's keeps its class) and tvm_ext's (what the plugin's own scheduling code raises).

    >>> len(schedule_refusals())
    2
    """
    from tvm.s_tir.schedule import ScheduleError as TvmScheduleError

    return (TvmScheduleError, ScheduleError)


def fuse_epilogue(sch, writeback) -> list[str]:
    """Inline the chain of element-wise consumers of ``writeback`` (a block copying a register
    tile to memory) into it, so they run on the tile while it is in registers.

    Stops at the first consumer TVM cannot inline (a reduction, a consumer read at other
    indices, a block with two consumers).  Returns the inlined blocks' names.

    >>> fuse_epilogue.__name__
    'fuse_epilogue'
    """
    TvmScheduleError = schedule_refusals()

    fused: list[str] = []
    while True:
        consumers = sch.get_consumers(writeback)
        if len(consumers) != 1:
            return fused
        blk = sch.get(consumers[0])
        if any(int(iv.iter_type) != 0 for iv in blk.iter_vars):
            return fused
        name = blk.name_hint
        try:
            sch.reverse_compute_inline(consumers[0])
        except TvmScheduleError:
            return fused
        fused.append(name)


def _vectorize_last(sch, block, wanted: bool) -> None:
    if not wanted:
        return
    TvmScheduleError = schedule_refusals()

    try:
        loops = sch.get_loops(block)
        sch.vectorize(loops[-1])
    except (*TvmScheduleError, IndexError):  # best effort: a scalar loop is still correct
        pass


def pad_to_tiles(sch, block, binding: AxisBinding, spec: IntrinSpec, tile: dict[str, int],
                 implementation: Implementation, steps: list[str]
                 ) -> tuple[Any, AxisBinding, IntrinSpec, dict[str, int]]:
    """Pad the block so every tile divides its axis (``pad_einsum``); where the block
    cannot be padded (a conv window), shrink the tile (in place) to the nearest divisor instead.

    Returns the block, the binding and the spec (their buffers renamed to the padded
    copies, the spec's extents padded) and the padded extents by instruction axis
    (empty when nothing was padded); the pad's producer and consumer copy blocks are
    scheduled with :func:`schedule_elementwise`.

    The module docstring's example runs it.
    """
    iters = block_iters(sch, block)
    by_axis = mapped_iters(sch, block, binding, iters)
    need = {a: tile[a] for a in spec.axes if by_axis[a].extent % tile[a]}
    if not need:
        return block, binding, spec, {}
    padded = []
    for it in iters:
        axis = next((a for a, b in by_axis.items() if b.name == it.name), None)
        n = it.extent
        if axis in need:
            n = -(-n // tile[axis]) * tile[axis]
        padded.append(n)
    stmt = sch.get(block)
    before = [region_buffer(r).name for r in (*stmt.reads, *stmt.writes)]
    try:
        sch.pad_einsum(block, padded)
    except Exception:  # noqa: BLE001 - TVM refuses non-einsum blocks (windows, strides)
        for a in need:
            ext = by_axis[a].extent
            new = _nearest_divisor(ext, tile[a])
            steps.append(f"tile {a}: {tile[a]} -> {new} (extent {ext}; block {sch.get(block).name_hint!r} "
                         "cannot be padded)")
            tile[a] = new
        return block, binding, spec, {}
    pads = {a: -(-by_axis[a].extent // tile[a]) * tile[a] for a in need}
    steps.append(f"pad_einsum {pads}")
    for producer in sch.get_producers(block):
        schedule_elementwise(sch, producer)
    for consumer in sch.get_consumers(block):
        schedule_elementwise(sch, consumer)
    stmt = sch.get(block)
    after = [region_buffer(r).name for r in (*stmt.reads, *stmt.writes)]
    if len(after) != len(before):
        raise ScheduleError(f"block {stmt.name_hint!r}: pad_einsum changed the accessed buffers {before} -> {after}")
    renamed = dict(zip(before, after))
    spec = spec.with_buffers(renamed)
    spec = replace(spec, extents=tuple(pads.get(a, n) for a, n in zip(spec.axes, spec.extents)))
    return block, binding.with_buffers(renamed), spec, pads


def _nearest_divisor(extent: int, want: int) -> int:
    """The divisor of ``extent`` to use for a tile of ``want``: the largest one not above it,
    or the smallest one above it when that is closer (at most twice ``want``)."""
    below = max(d for d in range(1, want + 1) if extent % d == 0)
    above = [d for d in range(want + 1, 2 * want + 1) if extent % d == 0]
    if above and (above[0] - want) <= (want - below):
        return above[0]
    return below


def pack_inputs(sch, block, spec: IntrinSpec, tile: dict[str, int], pack: str,
                steps: list[str], schedule_copies: bool = True) -> tuple[Any, IntrinSpec, list[str]]:
    """Layout-transform inputs so the vector axis is their unit-stride last dim.

    ``pack``: ``"auto"`` packs inputs whose vector axis is not unit-stride, or spans more
    than one tile of a panel read more than once; ``"always"`` every packable input;
    ``"never"`` none.  Each packed input becomes a ``cache_read`` copy in panels
    ``[.., d // NR, <other kept dims>, d % NR]``.  Returns the block, the spec with the
    packed operands and the names of the packed buffers.  ``schedule_copies=False`` leaves the
    copies' loops as they are (the caller moves them into its own loops).

    The module docstring's example runs it.
    """
    from tvm.tirx import IndexMap

    vec = spec.vector_axis
    packed = []
    if vec is None or pack == "never":
        return block, spec, packed
    stmt = sch.get(block)
    for op in spec.inputs:
        if vec not in op.axes:
            continue
        last_ok = op.unit_stride and op.last_axis() == vec
        one_panel = spec.extent[vec] >= _kernel_extent(sch, block, op, vec)
        row_tile = tile.get(spec.row_axis, 1) if spec.row_axis else 1
        one_pass = _reuse(stmt, op.buffer) <= row_tile  # each panel read once: packing cannot pay
        if last_ok and pack == "auto" and (one_panel or one_pass):
            continue
        if not op.bare[op.dims.index(op.dim_of(vec))]:  # d // NR must simplify after the split
            continue
        names = [region_buffer(r).name for r in stmt.reads]
        read_idx = names.index(op.buffer)
        ndim = len(region_buffer(stmt.reads[read_idx]).shape)
        dv = op.dim_of(vec)
        nr = tile[vec]
        kept = [d for d in op.dims if d != dv] + [dv]
        rest = [d for d in range(ndim) if d not in op.dims]

        cache = sch.cache_read(block, read_idx, "global")
        imap = IndexMap.from_func(_panel_map(rest, kept, dv, nr), ndim=ndim, index_dtype="int32")
        sch.transform_layout(block, ("read", read_idx), imap)
        if schedule_copies:
            schedule_elementwise(sch, cache)
        new_ndim = len(rest) + 1 + len(kept)
        new_terms = tuple(op.terms[op.dims.index(d)] for d in kept)
        new_bare = tuple(op.bare[op.dims.index(d)] for d in kept)
        cname = region_buffer(sch.get(cache).writes[0]).name
        new_op = replace(op, buffer=cname, rank=new_ndim, dims=tuple(range(new_ndim - len(kept), new_ndim)),
                         terms=new_terms, unit_stride=True, bare=new_bare)
        spec = spec.with_operand(new_op)
        packed.append(op.buffer)
        steps.append(f"layout transform (pack) {op.buffer} -> {cname}: dims {tuple(range(ndim))} -> "
                     f"({', '.join(map(str, rest))}{', ' if rest else ''}{dv}//{nr}, "
                     f"{', '.join(str(d) if d != dv else f'{d}%{nr}' for d in kept)})")
    return block, spec, packed


def _reuse(stmt, buffer: str) -> int:
    """How often the block reads each element of ``buffer``: its spatial iterations over those
    of the spatial iters that index the buffer (``M`` for ``B`` of ``C[i, j] += A[i, k] * B[k, j]``)."""
    from tvm.tirx.analysis import undefined_vars

    used: list = []
    for r in stmt.reads:
        if region_buffer(r).name == buffer:
            for rng in r.region:
                used += list(undefined_vars(rng.min))
    total = indexed = 1
    for iv in stmt.iter_vars:
        if int(iv.iter_type) == 0:
            total *= int(iv.dom.extent)
            if any(iv.var.same_as(v) for v in used):
                indexed *= int(iv.dom.extent)
    return total // indexed


def _kernel_extent(sch, block, op: OperandSpec, axis: str) -> int:
    """Extent of the buffer dim that ``axis`` indexes in operand ``op``."""
    stmt = sch.get(block)
    for r in stmt.reads:
        buf = region_buffer(r)
        if buf.name == op.buffer:
            return int(buf.shape[op.dim_of(axis)])
    return 0


def _panel_map(rest: list[int], kept: list[int], dv: int, nr: int):
    """Index map ``(rest..., d_v // nr, kept..., d_v % nr)`` of a packed operand."""

    def index_map(*idx):
        inner = [idx[d] % nr if d == dv else idx[d] for d in kept]
        return (*[idx[d] for d in rest], idx[dv] // nr, *inner)

    return index_map


def _tile_loops(sch, block, binding, spec: IntrinSpec, tile, outer: str, steps):
    iters = block_iters(sch, block)
    loops = dict(zip((it.loop_name for it in iters), sch.get_loops(block)[-len(iters):]))
    axis_of = {it.name: a for a, it in mapped_iters(sch, block, binding, iters).items()}
    outer_sp, outer_red, inner = [], [], {}
    vec_outer = None
    for it in iters:
        loop = loops[it.loop_name]
        a = axis_of.get(it.name)
        if a is not None:
            o, i = sch.split(loop, [None, tile[a]])
            inner[a] = i
            loop = o
            steps.append(f"split {it.loop_name} by {tile[a]} (instruction axis {a})")
            if a == spec.vector_axis:
                vec_outer = o
        (outer_sp if it.kind == "S" else outer_red).append(loop)
    if outer == "panel" and vec_outer is not None:
        outer_sp = [vec_outer] + [lp for lp in outer_sp if not lp.same_as(vec_outer)]
    order = [*outer_sp, *outer_red, *[inner[a] for a in spec.axes]]
    sch.reorder(*order)
    steps.append(f"reorder: outer {len(outer_sp)} spatial, {len(outer_red)} reduction, "
                 f"then instruction axes {', '.join(spec.axes)} innermost")
    return outer_sp, outer_red, [inner[a] for a in spec.axes]


def _lanes_of(block) -> int:
    """Vector lanes of the block's output dtype on the target in scope (else the host)."""
    from tvm_ext.target import hardware_facts

    dtype = str(region_buffer(block.writes[0]).dtype) if block.writes else "float32"
    try:
        return hardware_facts().lanes(dtype)
    except TypeError:  # a dtype numpy does not know (bfloat16): 32-bit lanes
        return hardware_facts().lanes("float32")


def schedule_elementwise(sch, block) -> None:
    """Vectorise the innermost loop (in pieces of the target's vector lanes when long) and parallelise the fused
    loops around it, of a plain block such as a pad or pack copy (best effort: a block
    that refuses keeps its loops).

    >>> from tvm import s_tir, te, tirx
    >>> A = te.placeholder((64, 256), name="A")
    >>> B = te.compute((64, 256), lambda i, j: A[i, j] * 2.0, name="B")
    >>> sch = s_tir.Schedule(te.create_prim_func([A, B]))
    >>> schedule_elementwise(sch, sch.get_sblock("B"))
    >>> [tirx.ForKind(sch.get(lp).kind).name for lp in sch.get_loops(sch.get_sblock("B"))]
    ['PARALLEL', 'VECTORIZED']
    """
    TvmScheduleError = schedule_refusals()

    try:
        loops = sch.get_loops(block)
    except TvmScheduleError:
        return
    if not loops:
        return
    try:
        inner = loops[-1]
        if int(sch.get(inner).extent) > 64:
            inner = sch.split(inner, [None, _lanes_of(sch.get(block))])[1]
        sch.vectorize(inner)
        outer = sch.get_loops(block)[:-1]
    except TvmScheduleError:
        outer = sch.get_loops(block)
    try:
        if outer:
            sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
    except TvmScheduleError:
        pass


def schedule_loops(sch, block, binding: AxisBinding, spec: IntrinSpec, tile: dict[str, int], outer: str,
                   parallel: bool, accumulate_local: bool, steps: list[str],
                   parallel_loops: Callable[[Any, list], Any] | None = None,
                   epilogue: bool = False) -> tuple[Any, list, list[str]]:
    """Split/reorder, keep the accumulator in registers (its element-wise consumers fused into
    the write-back when ``epilogue``), parallelise, split the init off.

    Returns the loop to tensorize (the first instruction axis' inner loop), the outer
    spatial loops (one fused loop when parallelised) and the fused consumers' names.

    The module docstring's example runs it.
    """
    outer_sp, outer_red, inner = _tile_loops(sch, block, binding, spec, tile, outer, steps)
    epi: list[str] = []
    if accumulate_local:
        cl = sch.cache_write(block, 0, "local")
        steps.append(f"cache_write {spec.output.buffer} -> local (accumulator tile in registers)")
        if outer_sp:
            sch.reverse_compute_at(cl, outer_sp[-1])
            if epilogue:
                epi = fuse_epilogue(sch, cl)
                if epi:
                    steps.append(f"epilogue {', '.join(epi)} computed in the register tile's write-back")
        _vectorize_last(sch, cl, spec.vector_axis is not None)
    if parallel and outer_sp:
        if parallel_loops is not None:
            fused = parallel_loops(sch, list(outer_sp))
            steps.append(f"parallel over the loop chosen from {len(outer_sp)} outer loop(s) by the caller")
        else:
            fused = sch.fuse(*outer_sp) if len(outer_sp) > 1 else outer_sp[0]
            steps.append(f"parallel over {len(outer_sp)} fused outer loop(s)")
        sch.parallel(fused)
        outer_sp = [fused]
    init = sch.decompose_reduction(block, outer_red[0] if outer_red else inner[0])
    _vectorize_last(sch, init, spec.vector_axis is not None)
    steps.append("decompose_reduction (init split off)")
    return inner[0], list(outer_sp), epi
