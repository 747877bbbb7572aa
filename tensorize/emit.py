"""ISA Mapper §2.2 + §7 ("ISAM-TVM"): tensorize a TIR block with the instruction of a mapping.

A mapping says which loop axes of a kernel's TIR block play which axes of an
instruction (the axis map, :mod:`tensorize.binding`); every other axis stays
outer.  :func:`apply` runs the rooms in order:

1. derive the :class:`~tensorize.intrin_spec.IntrinSpec`, the block's own update
   restricted to the mapped axes (:mod:`tensorize.intrin_spec`);
2. pick the tile with the implementation of the mapping's ISA, pad and pack
   (:mod:`tensorize.schedule_steps`);
3. register the TensorIntrin: the description from the spec, the implementation from
   the pluggable :class:`~tensorize.tensor_intrin.Implementation`
   (:mod:`tensorize.tensor_intrin`; ``tensorize.x86`` registers the x86 ones);
4. split + reorder so the mapped axes are innermost in the instruction's order, keep
   the accumulator tile in registers, parallelise the outer loops, decompose the
   reduction and ``tensorize``.

Example::

    >>> from tvm import te, s_tir
    >>> from tensorize.binding import AxisBinding
    >>> A = te.placeholder((64, 32), name="A"); B = te.placeholder((32, 64), name="B")
    >>> k = te.reduce_axis((0, 32), name="k")
    >>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    >>> done = apply(sch, sch.get_sblock("C"), AxisBinding("matmul", {"i": "i", "j": "j", "k": "k"}))
    >>> done.intrin.startswith("tvmext.x86.matmul.micro.float32")
    True
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from tvm_ext.errors import MappingError, ScheduleError

from .binding import AxisBinding, BlockIter, as_binding, block_iters, drop_unit_axes, mapped_iters
from .intrin_spec import IntrinSpec, derive_spec, last_nonunit, region_buffer
from .schedule_steps import pack_inputs, pad_to_tiles, schedule_loops
from .tensor_intrin import Implementation, get_implementation, register_intrin

__all__ = ["Emitted", "apply", "LANE", "CALLS"]


@dataclass
class Emitted:
    """What :func:`apply` did: the intrinsic, the tile, and the schedule steps."""

    intrin: str
    spec: IntrinSpec
    tiles: dict[str, int]
    steps: list[str]
    tensorized_loop: Any = None
    packed: list[str] = field(default_factory=list)
    padded: dict[str, int] = field(default_factory=dict)
    #: The outer spatial loops around the instruction, outermost first, with
    #: ``parallel=False``; the parallel loop otherwise (empty when the instruction
    #: covers every spatial axis).
    outer_loops: list = field(default_factory=list)
    #: Element-wise consumers computed in the accumulator tile's write-back (their blocks are gone).
    epilogue: list[str] = field(default_factory=list)


def apply(sch, block, mapping: Any, impl: str = "micro", *, tiles: dict[str, int] | None = None,
          pack: str = "auto", outer: str = "auto", parallel: bool = True,
          vector_calls: bool = True, call_rows: int = 1,
          parallel_loops: Callable[[Any, list], Any] | None = None, epilogue: bool = True,
          pack_at: str = "root") -> Emitted:
    """Tensorize ``block`` of ``sch`` with the instruction of ``mapping``.

    ``impl`` picks the implementation of the mapping's ISA (``"micro"``,
    ``"blas"``, ``"packed"`` on x86).  ``tiles`` overrides the extent of
    instruction axes, by axis name or by role (``rows``, ``vector``,
    ``reduce``).  ``pack`` decides which inputs get a layout transform to
    panels ``[.., d // NR, <other kept dims>, d % NR]`` along the vector axis:
    ``"auto"`` packs those whose vector axis is not unit-stride or spans more
    than one tile, ``"always"`` every input with the vector axis that can be
    packed, ``"never"`` none (a non-unit-stride vector axis then gathers).
    ``outer`` orders the outer loops: ``"kernel"`` (as written), ``"panel"``
    (the vector axis' tiles outermost, so a packed panel stays in cache) or
    ``"auto"`` (panel when something was packed).  ``vector_calls``: when no
    instruction axis indexes the output's unit-stride dim, run one call per
    vector lane along that (outer) axis, so the micro-kernel still vectorises.
    ``call_rows`` > 1 (register-blocked implementations): batch that many calls
    along the next outer spatial axis into one intrinsic, so a short row axis
    (7 pixels of a ResNet stage-5 conv) still fills the register tile.
    ``parallel=False`` leaves the outer spatial loops serial.  ``parallel_loops``
    decides how they become the parallel loop: a function ``(sch, loops) -> loop``
    that may fuse, split or reorder them (outermost first) and returns the loop to
    parallelise; the default fuses them all.  The tuning spaces pass one that samples
    the parallel grain.  :attr:`Emitted.outer_loops` names the result either way.
    ``epilogue`` (register-blocked implementations): element-wise blocks that consume
    the output (bias, batch norm, activation) are computed in the accumulator tile's
    write-back, while the tile is still in registers, instead of in passes over memory
    (:func:`fuse_epilogue`; the fused block names go to :attr:`Emitted.epilogue`).
    ``pack_at``: ``"root"`` packs each input whole before the loops; ``"panel"`` packs one
    panel of it inside the (parallel) loop over the vector axis' tiles, which then runs
    outermost: for an operand computed at run time (an activation) the copy stays in L1 for
    every row tile that reads it, and no separate pass over the whole input is made.
    """
    if isinstance(block, str):
        block = sch.get_sblock(block)
    if pack not in ("auto", "always", "never") or outer not in ("auto", "kernel", "panel") \
            or pack_at not in ("root", "panel"):
        raise ScheduleError(f"apply: pack={pack!r} / outer={outer!r} / pack_at={pack_at!r} not understood")
    binding = as_binding(mapping)
    implementation = get_implementation(binding.isa, impl, binding.instruction)
    steps: list[str] = [f"transform: {t}" for t in binding.transforms]
    binding, spec = _bind(sch, block, binding, implementation, vector_calls, steps)
    fixed = _fixed_tiles(binding, spec, implementation, tiles)
    if call_rows > 1 and implementation.accumulate_local:
        binding, spec, fixed = _batch_rows(sch, block, binding, spec, fixed, call_rows, steps)
    tile = _fit_tiles(implementation, spec, fixed, spec.role_tiles(tiles or {}), steps)
    block, binding, spec, padded = pad_to_tiles(sch, block, binding, spec, tile, implementation, steps)
    binding, spec = _drop_unit_tiles(sch, block, binding, spec, tile, steps)
    spec = spec.with_extents(tile)
    implementation.check(spec)
    block, spec, packed = pack_inputs(sch, block, spec, tile, pack, steps, schedule_copies=pack_at == "root")
    in_panel = pack_at == "panel" and bool(packed)
    if in_panel:
        outer, parallel_loops = "panel", _panel_loop
    elif outer == "auto":
        outer = "panel" if packed else "kernel"
    inner, outer_loops, fused = schedule_loops(sch, block, binding, spec, tile, outer,
                                                parallel and implementation.parallel,
                                                implementation.accumulate_local, steps, parallel_loops, epilogue)
    if in_panel:
        _pack_in_panel(sch, packed, outer_loops, steps)
    implementation.prepare()
    name = register_intrin(spec, implementation)
    sch.tensorize(inner, name)
    steps.append(f"tensorize -> {name}")
    return Emitted(name, spec, tile, steps, inner, packed, padded, outer_loops, fused)


def _panel_loop(sch, loops: list) -> Any:
    """``parallel_loops`` of a panel-packed kernel: the vector axis' tile loop (outermost), alone."""
    return loops[0]


def _pack_in_panel(sch, packed: list[str], outer_loops: list, steps: list[str]) -> None:
    """Compute each packing copy (``<input>_global``) under the outermost loop: one panel per iteration."""
    from .schedule_steps import _vectorize_last

    if not outer_loops:
        raise ScheduleError("apply: pack_at='panel' needs an outer loop over the vector axis' tiles")
    for name in packed:
        copy = sch.get_sblock(f"{name}_global")
        sch.compute_at(copy, outer_loops[0])
        _vectorize_last(sch, copy, True)
        steps.append(f"pack {name} one panel at a time inside the outer loop")


def _bind(sch, block, binding: AxisBinding, implementation: Implementation, vector_calls: bool,
          steps: list[str]) -> tuple[AxisBinding, IntrinSpec]:
    """The binding (unit axes dropped, a lane axis added if useful) and its spec."""
    binding = drop_unit_axes(sch, block, binding, steps)
    spec = derive_spec(sch, block, binding, accumulate_local=implementation.accumulate_local)
    if spec.vector_axis is None and implementation.accumulate_local and vector_calls:
        lane = _lane_axis(sch, block, binding)
        if lane is not None:
            binding = binding.with_outer_axis(LANE, lane, sch.get(block).name_hint)
            spec = derive_spec(sch, block, binding, accumulate_local=True)
            steps.append(f"vectorize across instruction calls along {lane.loop_name} (the output's unit-stride axis)")
    implementation.check(spec)
    return binding, spec


#: Name of the extra intrinsic axis that batches instruction calls along an outer spatial axis.
CALLS = "calls"


def _batch_rows(sch, block, binding: AxisBinding, spec: IntrinSpec, fixed: dict, call_rows: int,
                steps: list[str]):
    """Add the unmapped spatial axis just outside the row axis as intrinsic axis ``calls``."""
    row = spec.row_axis
    if row is None or CALLS in binding.axis_map:
        return binding, spec, fixed
    iters = block_iters(sch, block)
    mapped = mapped_iters(sch, block, binding, iters)
    pos = iters.index(mapped[row])
    outer = [it for it in iters[:pos] if it.kind == "S" and it.extent > 1
             and it.name not in {m.name for m in mapped.values()}]
    if not outer:
        return binding, spec, fixed
    cand = outer[-1]
    try:
        trial = binding.with_outer_axis(CALLS, cand, sch.get(block).name_hint)
        new = derive_spec(sch, block, trial, accumulate_local=True)
    except MappingError:  # the batch axis would index an operand in a way the intrinsic cannot take
        return binding, spec, fixed
    if not new.output.single:
        return binding, spec, fixed
    steps.append(f"batch {call_rows} instruction calls along {cand.loop_name} into one register tile")
    return trial, new, {**fixed, CALLS: min(call_rows, cand.extent)}


def _fixed_tiles(binding: AxisBinding, spec: IntrinSpec, implementation: Implementation,
                 tiles: dict[str, int] | None) -> dict[str, int]:
    """The instruction's own extents (when the implementation honours them) overridden by ``tiles``."""
    fixed = {}
    if implementation.honors_instruction_sizes:
        fixed = {a: n for a, n in binding.sizes.items() if a in spec.axes}
        if any(a not in spec.axes or spec.extent[a] < n for a, n in binding.sizes.items() if n):
            fixed = {}  # the kernel cannot fill the instruction (batch 1 on 8 rows): the implementation sizes the tile
    fixed.update(spec.role_tiles(tiles or {}))
    return fixed


def _fit_tiles(implementation: Implementation, spec: IntrinSpec, fixed: dict[str, int],
               requested: dict[str, int], steps: list[str]) -> dict[str, int]:
    """The implementation's tile; instruction sizes over its register budget are re-picked.

    The instruction's own extents are a preference (the intrinsic is generated
    for whatever tile is chosen); sizes the caller asked for are not dropped.
    """
    try:
        return implementation.tiles(spec, fixed)
    except ScheduleError:
        if fixed == requested:
            raise
    tile = implementation.tiles(spec, requested)
    steps.append(f"instruction sizes {fixed} exceed the {implementation.name} register budget: tile {tile}")
    return tile


#: Name of the extra intrinsic axis that runs instruction calls side by side in vector lanes.
LANE = "lane"


def _lane_axis(sch, block, binding: AxisBinding) -> BlockIter | None:
    """The unmapped spatial iter that alone indexes the output's last dim (or None)."""
    from tvm import tirx

    body = sch.get(block).body
    last = body.indices[last_nonunit(body.buffer)]
    if not isinstance(last, tirx.Var):
        return None
    iters = block_iters(sch, block)
    mapped = {it.name for it in mapped_iters(sch, block, binding, iters).values()}
    for it in iters:
        if it.var.same_as(last) and it.kind == "S" and it.name not in mapped and it.extent > 1:
            return it
    return None


def _drop_unit_tiles(sch, block, binding: AxisBinding, spec: IntrinSpec, tile: dict, steps: list[str]):
    """Instruction axes tiled by 1 become outer loops (a 1-wide loop would not match the intrinsic)."""
    unit = [a for a in binding.axis_map if tile.get(a) == 1]
    if not unit:
        return binding, spec
    if len(unit) == len(binding.axis_map):
        raise ScheduleError(f"block {sch.get(block).name_hint!r}: every instruction axis has a tile of 1")
    steps.append(f"instruction axes {unit} get tile 1: they stay outer")
    for a in unit:
        tile.pop(a, None)
    stmt = sch.get(block)
    last = {b.name: last_nonunit(b) for b in (region_buffer(r) for r in (*stmt.reads, *stmt.writes))}
    return binding.without_axes(unit), spec.without_axes(set(unit), last)
