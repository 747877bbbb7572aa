"""What emission needs from a mapping, and where its axes are in a TIR block.

An :class:`AxisBinding` says which kernel loop plays each instruction axis
(read from a mapper :class:`~tensorize.mapper.Mapping` by :func:`as_binding`, together
with the mapping's operand layout: which dims of each kernel buffer the instruction's
axes index, with which coefficients);
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

__all__ = ["AxisBinding", "BlockIter", "Layout", "as_binding", "binding_from_mapping", "mapping_layout", "outer_terms",
           "block_iters", "mapped_iters", "drop_unit_axes"]

#: A kernel buffer's dims as an instruction sees them: buffer dim -> the ``(instruction axis,
#: coefficient)`` terms of its index (``{1: (("x", 1), ("d", 1))}`` for ``A[n, x + d]``).
Layout = dict[int, tuple[tuple[str, int], ...]]


@dataclass
class AxisBinding:
    """What emission needs from a mapping.

    ``axis_map`` sends each instruction axis (e.g. ``"i"``, ``"j"``, ``"k"``) to the
    kernel block iter (or its loop) that plays it; kernel axes not named stay
    outer.  ``sizes`` are the instruction's fixed extents (``None`` or missing:
    free, chosen by the implementation).  ``transforms`` names the IR transforms
    the mapper applied to the kernel first (for display; the PrimFunc handed to
    :func:`apply` must already be the transformed one).  ``layouts`` (kernel buffer ->
    :data:`Layout`) is the mapping's decision of which buffer dims the instruction axes
    index; when given, :func:`tensorize.intrin_spec.derive_spec` builds the operands from
    it and only checks it against the block (empty: read from the block).

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
    layouts: dict[str, Layout] = field(default_factory=dict)
    #: kernel axis the mapping leaves outer -> kernel buffer -> {dim: coefficient}: how that axis
    #: indexes the laid-out buffers, for the axes the emitter adds (:meth:`with_outer_axis`).
    outer_terms: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)

    def without_axes(self, axes: Sequence[str]) -> "AxisBinding":
        """The binding with instruction ``axes`` left outer (out of the axis map and the layouts).

        >>> b = AxisBinding("matmul", {"i": "i", "j": "j"}, layouts={"C": {0: (("i", 1),), 1: (("j", 1),)}})
        >>> b.without_axes(["i"]).layouts
        {'C': {1: (('j', 1),)}}
        """
        drop = set(axes)
        layouts = {}
        for buf, lay in self.layouts.items():
            kept = {d: tuple(t for t in terms if t[0] not in drop) for d, terms in lay.items()}
            layouts[buf] = {d: terms for d, terms in kept.items() if terms}
        return replace(self, axis_map={a: k for a, k in self.axis_map.items() if a not in drop}, layouts=layouts)

    def with_buffers(self, renamed: dict[str, str]) -> "AxisBinding":
        """The binding with its layouts' kernel buffers renamed (``pad_einsum`` copies them).

        >>> AxisBinding("dot", {"k": "k"}, layouts={"A": {0: (("k", 1),)}}).with_buffers({"A": "A_pad"}).layouts
        {'A_pad': {0: (('k', 1),)}}
        """
        outer = {x: {renamed.get(b, b): t for b, t in bufs.items()} for x, bufs in self.outer_terms.items()}
        return replace(self, layouts={renamed.get(b, b): lay for b, lay in self.layouts.items()}, outer_terms=outer)

    def with_outer_axis(self, name: str, it: "BlockIter", block: str) -> "AxisBinding":
        """The binding with instruction axis ``name`` played by ``it``, an iter of ``block`` the
        mapping left outer (the emitter's lane or call-batch axis), spatial.

        With layouts (a mapping's), the axis' coefficients in the operands come from the
        mapping (:attr:`outer_terms`); :class:`ScheduleError` when the mapping does not know
        the iter.  Without, :func:`tensorize.intrin_spec.derive_spec` reads them from the block.

        >>> b = AxisBinding("dot", {"k": "k"}, layouts={"C": {}, "A": {1: (("k", 1),)}},
        ...                 outer_terms={"n": {"C": {0: 1}, "A": {0: 1}}})
        >>> b.with_outer_axis("lane", BlockIter("v_n", "n", 8, "S", None), "C").layouts
        {'C': {0: (('lane', 1),)}, 'A': {0: (('lane', 1),), 1: (('k', 1),)}}
        """
        out = replace(self, axis_map={**self.axis_map, name: it.loop_name}, kinds={**self.kinds, name: "S"})
        if not self.layouts:
            return out
        axis = self._outer_axis_of(it, block)
        if axis is None:
            raise ScheduleError(f"block {block!r}: the mapping does not say how loop {it.loop_name} indexes the "
                                f"operands (it left outer {', '.join(sorted(self.outer_terms)) or 'no axis'})")
        layouts = {}
        for buf, lay in self.layouts.items():
            grown = dict(lay)
            for d, c in self.outer_terms[axis].get(buf, {}).items():
                grown[d] = grown.get(d, ()) + ((name, c),)
            layouts[buf] = dict(sorted(grown.items()))
        return replace(out, layouts=layouts)

    def _outer_axis_of(self, it: "BlockIter", block: str) -> str | None:
        """The kernel axis of :attr:`outer_terms` that block iter ``it`` plays (by origin, else by name)."""
        for axis in self.outer_terms:
            if self.origins.get(axis) == (block, it.name):
                return axis
        for axis in self.outer_terms:
            if axis in (it.name, it.loop_name) or it.name == f"v_{axis}":
                return axis
        return None


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
                           isa or mapping.get("isa", "x86"),
                           layouts={b: dict(lay) for b, lay in mapping.get("layouts", {}).items()})
    return binding_from_mapping(mapping, isa)


def binding_from_mapping(mapping: Any, isa: str | None = None) -> AxisBinding:
    """Read a mapper ``Mapping``: instruction name and fixed sizes, axis map, transforms, origins,
    the instruction axes' kinds (``R`` for the axes its statements reduce) and the operand
    layouts (:func:`mapping_layout`).

    >>> from tvm import te
    >>> from tensorize.search import find_mappings
    >>> A = te.placeholder((16, 16), name="A"); B = te.placeholder((16, 16), name="B")
    >>> k = te.reduce_axis((0, 16), name="k")
    >>> C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> b = binding_from_mapping(find_mappings(C, "x86", instructions=["matmul_16x16x16"])[0])
    >>> b.instruction, b.kinds, b.origins["k"], b.layouts["A"]
    ('matmul_16x16x16', {'i': 'S', 'j': 'S', 'k': 'R'}, ('C', 'k'), {0: (('i', 1),), 1: (('k', 1),)})
    """
    try:
        ins, amap, prog = mapping.instruction, dict(mapping.axis_map), mapping.program
    except AttributeError:
        raise MappingError(f"cannot read a mapping of type {type(mapping).__name__}") from None
    outer = outer_terms(mapping)
    origins = {}
    for hay in (*amap.values(), *outer):
        origin = prog.axis(hay).origin if prog.has_axis(hay) else None
        if origin:
            origins[hay] = (str(origin[0]), str(origin[1]))
    sizes = {a: int(e) for a, e in ins.sizes.items() if e is not None}
    reduced = set()
    for st in ins.needle.statements:
        reduced |= set(st.reduced_axes)
    kinds = {a: ("R" if a in reduced else "S") for a in ins.needle.axis_names}
    return AxisBinding(ins.name, amap, sizes, tuple(str(t) for t in mapping.transforms),
                       isa or getattr(mapping, "isa", None) or "x86", origins, kinds, mapping_layout(mapping), outer)


def mapping_layout(mapping: Any) -> dict[str, Layout]:
    """Kernel buffer -> :data:`Layout`, from a mapper ``Mapping``'s buffer, dimension and stride maps.

    Needle dim ``d`` of needle buffer ``nb`` is kernel dim ``dim_map[nb][d]`` of
    ``buffer_map[nb]``; the kernel coefficient of instruction axis ``x`` there is
    ``dim_strides[nb][d]`` times the needle's.  Dims no instruction axis indexes are left
    out, and so are temporaries and constants (no kernel buffer plays them), and kernel buffers
    two needle buffers read differently (the block's own reading then decides).

    >>> from tvm import te
    >>> from tensorize.search import find_mappings
    >>> X = te.placeholder((2, 10), name="X"); W = te.placeholder((3,), name="W")
    >>> r = te.reduce_axis((0, 3), name="r")
    >>> Y = te.compute((2, 8), lambda n, w: te.sum(X[n, w + r] * W[r], axis=r), name="Y")
    >>> m = find_mappings(Y, "x86", instructions=["conv1d_16xk"])[0]
    >>> mapping_layout(m)["X"]
    {1: (('x', 1), ('d', 1))}
    """
    needle = mapping.instruction.needle
    out: dict[str, Layout] = {}
    differ: set[str] = set()
    for na, _, hb in _operand_accesses(mapping):
        lay: Layout = {}
        for d, (e, s) in enumerate(zip(mapping.dim_map[na.buffer], mapping.dim_strides[na.buffer])):
            terms = tuple((x, s * na.rows[d].coeff(x)) for x in needle.axis_names if na.rows[d].coeff(x))
            if terms:
                lay[e] = terms
        lay = dict(sorted(lay.items()))
        if out.setdefault(hb, lay) != lay:
            differ.add(hb)
    return {b: lay for b, lay in out.items() if b not in differ}


def outer_terms(mapping: Any) -> dict[str, dict[str, dict[int, int]]]:
    """Kernel axis the mapping leaves outer -> kernel buffer -> ``{dim: coefficient}``, for the
    buffers :func:`mapping_layout` lays out: how the mapped statements index them along that axis.

    >>> from tensorize.kernels.zoo import batch_matmul
    >>> from tensorize.search import find_mappings
    >>> m = find_mappings(batch_matmul(2, 16, 16, 16).output, "x86", instructions=["matmul_16x16x16"])[0]
    >>> outer_terms(m)   # the batch axis indexes dim 0 of A, B and C
    {'b': {'A': {0: 1}, 'B': {0: 1}, 'C': {0: 1}}}
    """
    laid = mapping_layout(mapping)
    out: dict[str, dict[str, dict[int, int]]] = {x: {} for x in mapping.outer_axes}
    differ: set[tuple[str, str]] = set()  # (axis, buffer) read two ways: the block decides (and refuses)
    for _, ha, hb in _operand_accesses(mapping):
        if hb not in laid:
            continue
        for x, bufs in out.items():
            terms = {e: row.coeff(x) for e, row in enumerate(ha.rows) if row.coeff(x)}
            if bufs.setdefault(hb, terms) != terms:
                differ.add((x, hb))
    return {x: {b: t for b, t in bufs.items() if t and (x, b) not in differ} for x, bufs in out.items()}


def _operand_accesses(mapping: Any):
    """(needle access, kernel access, kernel buffer) of every non-temporary operand the mapped
    statements access, once per (needle buffer, kernel buffer) pair."""
    from .isamir import Access

    needle = mapping.instruction.needle
    seen: set[tuple[str, str]] = set()
    for k, h in enumerate(mapping.statement_map):
        pairs = zip(needle.statements[k].accesses, mapping.program.statements[h].accesses)
        for na, ha in pairs:
            if not isinstance(na, Access) or not isinstance(ha, Access) or na.buffer not in mapping.dim_map:
                continue
            hb = mapping.buffer_map.get(na.buffer)
            if hb is None or (na.buffer, hb) in seen or mapping.program.buffer(hb).role == "temp":
                continue
            seen.add((na.buffer, hb))
            yield na, ha, hb


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
    return binding.without_axes(unit)
