"""The intrinsic spec: what one instruction call computes, as the kernel's TIR block sees it.

:func:`derive_spec` reads the block's update and restricts it to the mapped axes
of an :class:`~tensorize.binding.AxisBinding`.  Each operand keeps the dimensions
a mapped axis indexes, in the kernel's dimension order, with the axis'
coefficient there (2 for a stride-2 conv), so transposed and strided operands
need no special case.  When the binding carries the mapping's operand layouts
(:attr:`~tensorize.binding.AxisBinding.layouts`), the operands' dims and
coefficients are the mapping's and the block is only checked against them; the
update expression is always printed from the block (TVM's ``tensorize`` matches
the description structurally).

Example::

    >>> from tvm import s_tir
    >>> from tensorize.binding import AxisBinding
    >>> from tensorize.kernels.zoo import matmul
    >>> sch = s_tir.Schedule(matmul(64, 64, 32).prim_func())
    >>> spec = derive_spec(sch, sch.get_sblock("C"), AxisBinding("matmul", {"i": "i", "j": "j", "k": "k"}))
    >>> spec.expr, spec.vector_axis
    ('C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]', 'j')
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from tvm_ext.errors import MappingError, ScheduleError

from .binding import AxisBinding, Layout, block_iters, mapped_iters

__all__ = ["OperandSpec", "IntrinSpec", "derive_spec", "region_buffer", "last_nonunit"]


@dataclass(frozen=True)
class OperandSpec:
    """One operand of the intrinsic: a kernel buffer seen through the mapped axes.

    The operand keeps the buffer's full ``rank`` (TVM's tensorize matches
    regions dimension by dimension); ``dims`` are the dimensions mapped axes
    index and ``terms`` the ``(axis, coefficient)`` pairs of each such dim
    (``((x, 1), (d, 1))`` for ``A[x + d]``, ``((w, 2),)`` for a stride-2 conv).
    Other dimensions have extent 1.  ``unit_stride``: the buffer's last dim is
    indexed by one axis with coefficient 1, so implementations may declare
    stride 1 there.
    """

    name: str
    buffer: str
    rank: int
    dims: tuple[int, ...]
    terms: tuple[tuple[tuple[str, int], ...], ...]
    unit_stride: bool
    scope: str = "global"
    bare: tuple[bool, ...] = ()  # per kept dim: indexed by a bare block var (packable along it)

    @property
    def single(self) -> bool:
        """Every kept dim is indexed by exactly one axis."""
        return all(len(t) == 1 for t in self.terms)

    @property
    def axes(self) -> tuple[str, ...]:
        """Axes indexing the kept dims, in dim order (every term of multi-axis dims)."""
        return tuple(a for t in self.terms for a, _ in t)

    def dim_of(self, axis: str) -> int:
        """The buffer dim ``axis`` indexes."""
        for d, t in zip(self.dims, self.terms):
            if any(a == axis for a, _ in t):
                return d
        raise KeyError(axis)

    def coef_of(self, axis: str) -> int:
        for t in self.terms:
            for a, c in t:
                if a == axis:
                    return c
        raise KeyError(axis)

    def last_axis(self) -> str | None:
        """The axis of the last kept dim when it is a single term."""
        return self.terms[-1][0][0] if self.terms and len(self.terms[-1]) == 1 else None

    def without_axes(self, drop, last_dim: int) -> "OperandSpec":
        """The operand with the terms of axes ``drop`` left out (dims left with none go);
        ``last_dim``: the buffer's last non-unit dim (:func:`last_nonunit`), for unit stride.

        >>> a = OperandSpec("A", "A", 2, (0, 1), ((("i", 1),), (("k", 1),)), True, bare=(True, True))
        >>> a.without_axes({"k"}, 1).dims, a.without_axes({"k"}, 1).unit_stride
        ((0,), False)
        """
        bare = self.bare or (False,) * len(self.dims)
        kept = [(d, tuple(t for t in ts if t[0] not in drop), b) for d, ts, b in zip(self.dims, self.terms, bare)]
        kept = [k for k in kept if k[1]]
        dims, terms = tuple(d for d, _, _ in kept), tuple(ts for _, ts, _ in kept)
        unit = bool(dims) and dims[-1] == last_dim and len(terms[-1]) == 1 and terms[-1][0][1] == 1
        return replace(self, dims=dims, terms=terms, unit_stride=unit,
                       bare=tuple(b for _, _, b in kept) if self.bare else ())

    def shape(self, extents: dict[str, int]) -> tuple[int, ...]:
        """Extent of every dim (1 where no mapped axis indexes it)."""
        out = [1] * self.rank
        for d, t in zip(self.dims, self.terms):
            out[d] = sum(c * (extents[a] - 1) for a, c in t) + 1
        return tuple(out) or (1,)

    def index(self) -> str:
        """TVMScript index in terms of the axis vars ``v_<axis>`` (0 in other dims)."""
        parts = ["0"] * max(self.rank, 1)
        for d, t in zip(self.dims, self.terms):
            parts[d] = " + ".join(f"v_{a}" if c == 1 else f"v_{a} * {c}" for a, c in t)
        return ", ".join(parts)

    def ref(self) -> str:
        """``NAME[index]``."""
        return f"{self.name}[{self.index()}]"


@dataclass(frozen=True)
class IntrinSpec:
    """What one instruction call computes, as the kernel's block sees it.

    ``template`` is the update's right-hand side with ``{NAME}`` standing for
    each operand's access; :attr:`expr` renders it in TVMScript
    (``C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]``).
    """

    instruction: str
    isa: str
    dtype: str
    axes: tuple[str, ...]
    kinds: tuple[str, ...]
    extents: tuple[int, ...]
    output: OperandSpec
    inputs: tuple[OperandSpec, ...]
    template: str

    @property
    def expr(self) -> str:
        return self.template.format(**{op.name: op.ref() for op in self.operands})

    @property
    def extent(self) -> dict[str, int]:
        return dict(zip(self.axes, self.extents))

    @property
    def operands(self) -> tuple[OperandSpec, ...]:
        return (self.output, *self.inputs)

    @property
    def vector_axis(self) -> str | None:
        """The spatial axis indexing the output's unit-stride last dim (vectorised), if any."""
        out = self.output
        return out.last_axis() if out.unit_stride else None

    @property
    def row_axis(self) -> str | None:
        """The non-vector spatial axis with the largest extent (the register tile's rows)."""
        rows = [a for a in self.spatial if a != self.vector_axis]
        return max(rows, key=lambda a: self.extent[a]) if rows else None

    def role_tiles(self, tiles: dict[str, int]) -> dict[str, int]:
        """Translate role keys (``rows``, ``vector``, ``reduce``) into instruction axes."""
        out = {}
        roles = {"rows": self.row_axis, "vector": self.vector_axis,
                 "reduce": self.reduction[0] if self.reduction else None}
        for k, v in tiles.items():
            axis = roles.get(k, k) if k in roles else k
            if axis is not None and axis in self.axes:
                out[axis] = int(v)
        return out

    @property
    def spatial(self) -> tuple[str, ...]:
        return tuple(a for a, k in zip(self.axes, self.kinds) if k == "S")

    @property
    def reduction(self) -> tuple[str, ...]:
        return tuple(a for a, k in zip(self.axes, self.kinds) if k == "R")

    def with_extents(self, tiles: dict[str, int]) -> "IntrinSpec":
        return replace(self, extents=tuple(int(tiles[a]) for a in self.axes))

    def without_axes(self, drop, last_dims: dict[str, int]) -> "IntrinSpec":
        """The spec with instruction axes ``drop`` left outer; ``last_dims``: kernel buffer -> its
        last non-unit dim (:func:`last_nonunit`)."""
        keep = [n for n, a in enumerate(self.axes) if a not in drop]
        return replace(self, axes=tuple(self.axes[n] for n in keep), kinds=tuple(self.kinds[n] for n in keep),
                       extents=tuple(self.extents[n] for n in keep),
                       output=self.output.without_axes(drop, last_dims[self.output.buffer]),
                       inputs=tuple(op.without_axes(drop, last_dims[op.buffer]) for op in self.inputs))

    def with_buffers(self, renamed: dict[str, str]) -> "IntrinSpec":
        """The spec with its operands' kernel buffers renamed (``pad_einsum`` copies them)."""
        ops = [replace(op, buffer=renamed.get(op.buffer, op.buffer)) for op in self.operands]
        return replace(self, output=ops[0], inputs=tuple(ops[1:]))

    def with_operand(self, op: OperandSpec) -> "IntrinSpec":
        if op.name == self.output.name:
            return replace(self, output=op)
        return replace(self, inputs=tuple(op if x.name == op.name else x for x in self.inputs))

    def is_product_update(self) -> bool:
        """``C + X * Y * ...``: the output plus the product of every input."""
        prod = " * ".join(f"{{{op.name}}}" for op in self.inputs)
        return self.template == f"{{{self.output.name}}} + {prod}"


_INPUT_NAMES = "ABDEFGHIJKLMNPQRSTUVWXYZ"


def _is_load(e) -> bool:
    """A buffer load (``tvm.ir.TensorLoad`` in TVM 0.27, ``BufferLoad`` before)."""
    return type(e).__name__ in ("TensorLoad", "BufferLoad")


def _load_buffer(e):
    return getattr(e, "buffer", None) or e.source


def region_buffer(r: Any) -> Any:
    """The buffer of a block's read/write region (``TensorRegion.source`` in TVM 0.27).

    >>> from tvm import s_tir, te
    >>> A = te.placeholder((4,), name="A")
    >>> B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    >>> sch = s_tir.Schedule(te.create_prim_func([A, B]))
    >>> region_buffer(sch.get(sch.get_sblock("B")).reads[0]).name
    'A'
    """
    return getattr(r, "buffer", None) or r.source


def derive_spec(sch, block, binding: AxisBinding, *, accumulate_local: bool = True) -> IntrinSpec:
    """Read the block's update and restrict it to the mapped axes.

    Raises :class:`MappingError` when the mapping does not fit the block: an
    axis of the wrong kind, a dimension indexed by two mapped axes, a
    non-affine index, an expression the emitter cannot print; and
    :class:`ScheduleError` when the binding's layouts (the mapping's) name a buffer
    the update does not access or disagree with how the block indexes it.
    """
    from tvm import tirx

    stmt = sch.get(block)
    bname = stmt.name_hint
    iters = block_iters(sch, block)
    mapped = mapped_iters(sch, block, binding, iters)
    for a, it in mapped.items():
        want = binding.kinds.get(a)
        if want and want != it.kind:
            raise MappingError(f"block {bname!r}: instruction axis {a!r} is "
                               f"{'a reduction' if want == 'R' else 'spatial'} but kernel axis "
                               f"{it.loop_name!r} is {'a reduction' if it.kind == 'R' else 'spatial'}")
    if len({it.name for it in mapped.values()}) != len(mapped):
        raise MappingError(f"block {bname!r}: two instruction axes map to the same kernel axis: {binding.axis_map}")
    # instruction axes in kernel loop order: spatial first, reductions last
    axes = sorted(mapped, key=lambda a: (mapped[a].kind == "R", iters.index(mapped[a])))
    body = stmt.body
    if not isinstance(body, tirx.BufferStore):
        raise MappingError(f"block {bname!r}: body is not a single buffer store ({type(body).__name__})")
    var_of = {a: mapped[a].var for a in axes}
    layouts = _current_layouts(binding, axes)
    operands: dict[str, OperandSpec] = {}
    out = _operand(body.buffer, body.indices, axes, var_of, "C", bname,
                   "local" if accumulate_local else "global", layouts)
    for a in out.axes:
        if mapped[a].kind != "S":
            raise MappingError(f"block {bname!r}: reduction axis {a!r} indexes the output {body.buffer.name}")
    missing = [a for a in axes if mapped[a].kind == "S" and a not in out.axes]
    if missing:
        raise MappingError(f"block {bname!r}: spatial axes {missing} do not index the output {body.buffer.name}")
    operands[body.buffer.name] = out
    if not out.single:
        raise MappingError(f"block {bname!r}: an output dim of {body.buffer.name} is indexed by several mapped axes")
    printer = _ExprPrinter(operands, axes, var_of, bname, layouts)
    template = printer.print(body.value)
    unread = sorted(set(layouts) - set(operands))
    if unread:
        raise ScheduleError(f"block {bname!r}: the mapping lays out buffer(s) {', '.join(unread)}, which the "
                            f"update does not access (it accesses {', '.join(operands)})")
    inputs = tuple(op for key, op in operands.items() if key != body.buffer.name)
    if not inputs:
        raise MappingError(f"block {bname!r}: the update reads no input operand")
    return IntrinSpec(
        instruction=binding.instruction, isa=binding.isa, dtype=str(body.buffer.dtype), axes=tuple(axes),
        kinds=tuple(mapped[a].kind for a in axes), extents=tuple(mapped[a].extent for a in axes),
        output=out, inputs=inputs, template=template)


def _current_layouts(binding: AxisBinding, axes) -> dict[str, Layout]:
    """The binding's layouts restricted to the current instruction axes (the emitter's lane and
    call-batch axes included: :meth:`~tensorize.binding.AxisBinding.with_outer_axis` adds them)."""
    current = set(axes)
    layouts = {}
    for buf, lay in binding.layouts.items():
        kept = {d: tuple(t for t in terms if t[0] in current) for d, terms in lay.items()}
        layouts[buf] = {d: terms for d, terms in kept.items() if terms}
    return layouts


def _layout_text(lay: Layout) -> str:
    dims = (f"dim {d}: " + " + ".join(a if c == 1 else f"{c}*{a}" for a, c in terms) for d, terms in lay.items())
    return "{" + ", ".join(dims) + "}"


def _from_layout(buf, lay: Layout, axes, dims, terms, bname):
    """The operand's dims and terms: the mapping's layout ``lay``, checked against the block's
    (``dims``, ``terms``)."""
    order = {a: n for n, a in enumerate(axes)}
    block = dict(zip(dims, terms))
    if {d: sorted(ts) for d, ts in block.items()} != {d: sorted(ts) for d, ts in lay.items()}:
        raise ScheduleError(f"block {bname!r}: the mapping lays out {buf.name} as {_layout_text(lay)} but the block "
                            f"indexes it as {_layout_text(block)}")
    new_dims = tuple(sorted(lay))
    return new_dims, tuple(tuple(sorted(lay[d], key=lambda t: order[t[0]])) for d in new_dims)


def _operand(buf, indices, axes, var_of, name, bname, scope="global", layouts: dict[str, Layout] | None = None
             ) -> OperandSpec:
    from tvm.sym import detect_linear_equation
    from tvm import tirx

    vars_ = [var_of[a] for a in axes]
    dims, terms, used, bare = [], [], set(), []
    for d, idx in enumerate(indices):
        lin = detect_linear_equation(idx, vars_)
        if len(lin) == 0:
            raise MappingError(f"block {bname!r}: access {buf.name}[{', '.join(map(str, indices))}] is not "
                               f"affine in the mapped axes (dim {d}: {idx})")
        nz = [(a, c) for a, c in zip(axes, lin[:-1]) if not (isinstance(c, tirx.IntImm) and int(c) == 0)]
        if not nz:
            continue
        for a, c in nz:
            if not isinstance(c, tirx.IntImm) or int(c) <= 0:
                raise MappingError(f"block {bname!r}: axis {a!r} has coefficient {c} in {buf.name} dim {d}")
            if a in used:
                raise MappingError(f"block {bname!r}: axis {a!r} indexes two dims of {buf.name}")
            used.add(a)
        dims.append(d)
        terms.append(tuple((a, int(c)) for a, c in nz))
    if layouts and buf.name in layouts:
        dims, terms = _from_layout(buf, layouts[buf.name], axes, dims, terms, bname)
    for d, t in zip(dims, terms):
        bare.append(len(t) == 1 and isinstance(indices[d], tirx.Var) and t[0][1] == 1)
    unit = bool(dims) and dims[-1] == last_nonunit(buf) and len(terms[-1]) == 1 and terms[-1][0][1] == 1
    return OperandSpec(name, buf.name, len(indices), tuple(dims), tuple(terms), unit, scope, tuple(bare))


def last_nonunit(buf: Any) -> int:
    """Index of the buffer's last dim with extent > 1 (the unit-stride one of a compact buffer).

    >>> from tvm import tirx
    >>> last_nonunit(tirx.decl_buffer((8, 16, 1), "float32"))
    1
    """
    shape = [int(n) for n in buf.shape]
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] > 1:
            return d
    return len(shape) - 1


class _ExprPrinter:
    """Prints the update value in TVMScript over the intrinsic's operand names."""

    def __init__(self, operands: dict, axes, var_of, bname, layouts: dict[str, Layout] | None = None):
        self.operands, self.axes, self.var_of, self.bname = operands, axes, var_of, bname
        self.layouts = layouts
        self.loads: dict[str, tuple] = {}

    def print(self, e) -> str:
        from tvm import tirx

        binops = {tirx.Add: "+", tirx.Sub: "-", tirx.Mul: "*"}
        for cls, sym in binops.items():
            if isinstance(e, cls):
                return f"{self._wrap(e.a)} {sym} {self._wrap(e.b)}"
        if isinstance(e, (tirx.Max, tirx.Min)):
            fn = "T.max" if isinstance(e, tirx.Max) else "T.min"
            return f"{fn}({self.print(e.a)}, {self.print(e.b)})"
        if _is_load(e):
            return self._load(e)
        if isinstance(e, tirx.FloatImm):
            return f"T.{e.dtype}({float(e.value)!r})".replace("{", "{{").replace("}", "}}")
        if isinstance(e, tirx.IntImm):
            return f"T.{e.dtype}({int(e.value)})"
        if isinstance(e, tirx.Cast):
            return f'T.Cast("{e.dtype}", {self.print(e.value)})'
        raise MappingError(f"block {self.bname!r}: cannot emit an instruction for {type(e).__name__} ({e})")

    def _wrap(self, e) -> str:
        from tvm import tirx

        s = self.print(e)
        return f"({s})" if isinstance(e, (tirx.Add, tirx.Sub)) else s

    def _load(self, e) -> str:
        buf = _load_buffer(e)
        key = buf.name
        prev = self.loads.get(key)
        if prev is not None and [str(x) for x in prev] != [str(x) for x in e.indices]:
            raise MappingError(f"block {self.bname!r}: buffer {key} is read at two different places")
        self.loads[key] = tuple(e.indices)
        op = self.operands.get(key)
        if op is None:
            name = _INPUT_NAMES[len(self.operands) - 1]
            op = _operand(buf, e.indices, self.axes, self.var_of, name, self.bname, layouts=self.layouts)
            self.operands[key] = op
        return "{" + op.name + "}"
