"""What emission needs from a mapping, and where its axes are in a TIR block.

An :class:`AxisBinding` says which kernel loop plays each instruction axis
(read from a mapper :class:`~tensorize.mapper.Mapping` by :func:`as_binding`);
:func:`block_iters` and :func:`mapped_iters` find those loops' block iters in a
schedule, which :mod:`tensorize.intrin_spec` and :mod:`tensorize.emit` work from.

Example::

    >>> b = as_binding({"instruction": "matmul", "axis_map": {"i": "i", "j": "j", "k": "k"}})
    >>> b.instruction, b.axis_map["k"], b.isa
    ('matmul', 'k', 'x86')
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from tvm_ext.errors import MappingError, ScheduleError

__all__ = ["AxisBinding", "BlockIter", "as_binding", "binding_from_mapping", "block_iters", "mapped_iters",
           "drop_unit_axes"]


@dataclass
class AxisBinding:
    """What emission needs from a mapping.

    ``axis_map`` sends each instruction axis (e.g. ``"i"``, ``"j"``, ``"k"``) to the
    kernel block iter (or its loop) that plays it; kernel axes not named stay
    outer.  ``sizes`` are the instruction's fixed extents (``None`` or missing:
    free, chosen by the implementation).  ``transforms`` names the IR transforms
    the mapper applied to the kernel first (for display; the PrimFunc handed to
    :func:`apply` must already be the transformed one).

    >>> AxisBinding("matmul", {"i": "w", "j": "co", "k": "rc"}).axis_map["j"]
    'co'
    """

    instruction: str
    axis_map: dict[str, str]
    sizes: dict[str, int | None] = field(default_factory=dict)
    transforms: tuple[str, ...] = ()
    isa: str = "x86"
    origins: dict[str, tuple[str, str]] = field(default_factory=dict)  # kernel axis -> (block, iter var)
    kinds: dict[str, str] = field(default_factory=dict)  # instruction axis -> "S" / "R" (checked when given)


def as_binding(mapping: Any, isa: str | None = None) -> AxisBinding:
    """Turn a mapper ``Mapping`` (or an :class:`AxisBinding`, or a dict) into an AxisBinding.

    A mapper :class:`tensorize.mapper.Mapping` gives the instruction (its
    name and fixed sizes), the axis map (instruction axis -> ISAMIR axis of the
    kernel), the transform sequence, and through its program the origin of
    each ISAMIR axis (the TIR block and iter var it was imported from).
    """
    if isinstance(mapping, AxisBinding):
        return replace(mapping, isa=isa) if isa else mapping
    if isinstance(mapping, dict):
        return AxisBinding(mapping["instruction"], dict(mapping["axis_map"]),
                           dict(mapping.get("sizes", {})), tuple(mapping.get("transforms", ())),
                           isa or mapping.get("isa", "x86"))
    return binding_from_mapping(mapping, isa)


def binding_from_mapping(mapping: Any, isa: str | None = None) -> AxisBinding:
    """Read a mapper ``Mapping``: instruction name and fixed sizes, axis map, transforms, origins
    and the instruction axes' kinds (``R`` for the axes its statements reduce).

    >>> from tvm import te
    >>> from tensorize.search import find_mappings
    >>> A = te.placeholder((16, 16), name="A"); B = te.placeholder((16, 16), name="B")
    >>> k = te.reduce_axis((0, 16), name="k")
    >>> C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> b = binding_from_mapping(find_mappings(C, "x86", instructions=["matmul_16x16x16"])[0])
    >>> b.instruction, b.kinds, b.origins["k"]
    ('matmul_16x16x16', {'i': 'S', 'j': 'S', 'k': 'R'}, ('C', 'k'))
    """
    try:
        ins, amap, prog = mapping.instruction, dict(mapping.axis_map), mapping.program
    except AttributeError:
        raise MappingError(f"cannot read a mapping of type {type(mapping).__name__}") from None
    origins = {}
    for hay in amap.values():
        origin = prog.axis(hay).origin if prog.has_axis(hay) else None
        if origin:
            origins[hay] = (str(origin[0]), str(origin[1]))
    sizes = {a: int(e) for a, e in ins.sizes.items() if e is not None}
    reduced = set()
    for st in ins.needle.statements:
        reduced |= set(st.reduced_axes)
    kinds = {a: ("R" if a in reduced else "S") for a in ins.needle.axis_names}
    return AxisBinding(ins.name, amap, sizes, tuple(str(t) for t in mapping.transforms),
                       isa or getattr(mapping, "isa", None) or "x86", origins, kinds)


# ---------------------------------------------------------------------------
# Block analysis
# ---------------------------------------------------------------------------
@dataclass(frozen=True)
class BlockIter:
    """One block iter var, the loop it is bound to, and whether it reduces."""

    name: str
    loop_name: str
    extent: int
    kind: str  # "S" spatial, "R" reduction
    var: Any


def _realize_of(sch, block):
    from tvm import tirx
    from tvm.s_tir import SBlockRealize

    stmt = sch.get(block)
    loops = sch.get_loops(block)
    if not loops:
        raise ScheduleError(f"block {stmt.name_hint!r} has no loops to tensorize")
    body = sch.get(loops[-1]).body
    children = list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]
    for child in children:
        if isinstance(child, SBlockRealize) and child.block.same_as(stmt):
            return child
    raise ScheduleError(f"block {stmt.name_hint!r} is not directly under its innermost loop")


def block_iters(sch, block) -> list[BlockIter]:
    """The block's iters in loop order, each bound to exactly one loop.

    Raises :class:`ScheduleError` when an iter is bound to an expression (the
    block was already split or fused): emission starts from the kernel as written.

    >>> from tvm import s_tir, te
    >>> A = te.placeholder((8, 4), name="A")
    >>> k = te.reduce_axis((0, 4), name="k")
    >>> B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    >>> sch = s_tir.Schedule(te.create_prim_func([A, B]))
    >>> [(it.name, it.extent, it.kind) for it in block_iters(sch, sch.get_sblock("B"))]
    [('v_i', 8, 'S'), ('v_k', 4, 'R')]
    """
    realize = _realize_of(sch, block)
    stmt = realize.block
    loops = {str(sch.get(lp).loop_var): sch.get(lp) for lp in sch.get_loops(block)}
    order = list(loops)
    found = []
    for iv, value in zip(stmt.iter_vars, realize.iter_values):
        lname = getattr(value, "name", None)
        loop = loops.get(lname) if lname is not None else None
        extent = int(iv.dom.extent)
        if loop is None or int(loop.extent) != extent or int(loop.min) != 0:
            raise ScheduleError(
                f"block {stmt.name_hint!r}: iter {iv.var.name} is bound to {value}; "
                "apply() needs every block iter bound to its own full loop")
        kind = {0: "S", 2: "R"}.get(int(iv.iter_type))
        if kind is None:
            raise ScheduleError(f"block {stmt.name_hint!r}: iter {iv.var.name} is neither spatial nor reduction")
        found.append(BlockIter(str(iv.var.name), lname, extent, kind, iv.var))
    found.sort(key=lambda it: order.index(it.loop_name))
    return found


def _resolve_iter(iters: Sequence[BlockIter], name: str, block_name: str,
                  origins: dict[str, tuple[str, str]] | None = None) -> BlockIter:
    origin = (origins or {}).get(name)
    if origin and origin[0] == block_name:
        for it in iters:
            if it.name == origin[1]:
                return it
    for it in iters:
        if name in (it.name, it.loop_name) or it.name == f"v_{name}":
            return it
    known = ", ".join(it.loop_name for it in iters)
    raise MappingError(f"block {block_name!r}: mapping names axis {name!r}, which is not one of its loops ({known})")


def mapped_iters(sch, block, binding: AxisBinding, iters: Sequence[BlockIter] | None = None
                 ) -> dict[str, BlockIter]:
    """Instruction axis -> the block iter that plays it (:class:`MappingError` when the binding
    names an axis the block does not have).

    >>> from tvm import s_tir, te
    >>> A = te.placeholder((8, 4), name="A")
    >>> k = te.reduce_axis((0, 4), name="k")
    >>> B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    >>> sch = s_tir.Schedule(te.create_prim_func([A, B]))
    >>> mapped_iters(sch, sch.get_sblock("B"), AxisBinding("dot", {"k": "k"}))["k"].loop_name
    'k'
    """
    iters = block_iters(sch, block) if iters is None else iters
    bname = sch.get(block).name_hint
    return {a: _resolve_iter(iters, k, bname, binding.origins) for a, k in binding.axis_map.items()}


def drop_unit_axes(sch, block, binding: AxisBinding, steps: list[str]) -> AxisBinding:
    """The binding without the instruction axes bound to extent-1 loops: they stay at 0 (TVM
    folds such loops away).  Says so in ``steps``; :class:`ScheduleError` when every mapped
    axis has extent 1.

    >>> from tvm import s_tir, te
    >>> A = te.placeholder((1, 32), name="A")
    >>> B = te.compute((1, 32), lambda i, j: A[i, j] + 1.0, name="B")
    >>> sch = s_tir.Schedule(te.create_prim_func([A, B]))
    >>> drop_unit_axes(sch, sch.get_sblock("B"), AxisBinding("axpy", {"i": "i", "j": "j"}), []).axis_map
    {'j': 'j'}
    """
    unit = [a for a, it in mapped_iters(sch, block, binding).items() if it.extent == 1]
    if not unit:
        return binding
    if len(unit) == len(binding.axis_map):
        raise ScheduleError(f"block {sch.get(block).name_hint!r}: every mapped axis has extent 1")
    steps.append(f"instruction axes {unit} map to extent-1 loops: fixed at 0")
    return replace(binding, axis_map={a: k for a, k in binding.axis_map.items() if a not in unit})
