"""ISA Mapper §2.2 + §7 ("ISAM-TVM"): emit a TVM TensorIntrin and schedule from a mapping.

A mapping says which loop axes of a kernel's TIR block play which axes of an
instruction (the axis map); every other axis stays outer.  From it this module

1. derives an :class:`IntrinSpec`: the block's own update restricted to the mapped
   axes.  Each operand keeps the dimensions a mapped axis indexes, in the kernel's
   dimension order, with the axis' coefficient there (2 for a stride-2 conv), so
   transposed and strided operands need no special case;
2. generates the TensorIntrin: the description from the spec, the implementation
   from a pluggable :class:`Implementation` (``tensorize.x86`` registers the
   register-blocked FMA micro-kernel, the BLAS-like extern call and a packed call;
   other ISAs add their own with :func:`register_implementation`), registered under
   a stable name (instruction, implementation, dtype, tile, structure hash);
3. schedules the block: pad axes a tile does not divide, layout-transform (pack)
   operands whose vector axis is not unit-stride, split + reorder so the mapped axes
   are innermost in the instruction's order, keep the accumulator tile in registers
   (``cache_write(..., "local")``), parallelise the outer loops, decompose the
   reduction and ``tensorize``.

Example::

    >>> from tvm import te, s_tir
    >>> A = te.placeholder((64, 32), name="A"); B = te.placeholder((32, 64), name="B")
    >>> k = te.reduce_axis((0, 32), name="k")
    >>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    >>> sch = s_tir.Schedule(te.create_prim_func([A, B, C]))
    >>> done = apply(sch, sch.get_sblock("C"), AxisBinding("matmul", {"i": "i", "j": "j", "k": "k"}))
    >>> done.intrin.startswith("tvmext.x86.matmul.micro.float32")
    True
"""
from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from tvm_ext.errors import MappingError, ScheduleError

__all__ = [
    "AxisBinding",
    "BlockIter",
    "OperandSpec",
    "IntrinSpec",
    "Implementation",
    "Emitted",
    "apply",
    "block_iters",
    "derive_spec",
    "desc_source",
    "register_intrin",
    "register_implementation",
    "get_implementation",
    "implementations",
    "as_binding",
    "binding_from_mapping",
    "mapped_iters",
    "schedule_elementwise",
    "signature",
    "root_block",
    "impl_buffers",
    "LANE",
    "fuse_epilogue",
    "schedule_refusals",
]


# ---------------------------------------------------------------------------
# The interface a mapping has to provide
# ---------------------------------------------------------------------------
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
    """Read a mapper ``Mapping``: instruction name and fixed sizes, axis map, transforms, origins."""
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
    """Instruction axis -> the block iter that plays it."""
    iters = block_iters(sch, block) if iters is None else iters
    bname = sch.get(block).name_hint
    return {a: _resolve_iter(iters, k, bname, binding.origins) for a, k in binding.axis_map.items()}


# ---------------------------------------------------------------------------
# The intrinsic spec
# ---------------------------------------------------------------------------
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


def _region_buffer(r):
    """The buffer of a read/write region (``TensorRegion.source`` in TVM 0.27)."""
    return getattr(r, "buffer", None) or r.source


def derive_spec(sch, block, binding: AxisBinding, *, accumulate_local: bool = True) -> IntrinSpec:
    """Read the block's update and restrict it to the mapped axes.

    Raises :class:`MappingError` when the mapping does not fit the block: an
    axis of the wrong kind, a dimension indexed by two mapped axes, a
    non-affine index, an expression the emitter cannot print.
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
    operands: dict[str, OperandSpec] = {}
    out = _operand(body.buffer, body.indices, axes, var_of, "C", bname,
                   "local" if accumulate_local else "global")
    for a in out.axes:
        if mapped[a].kind != "S":
            raise MappingError(f"block {bname!r}: reduction axis {a!r} indexes the output {body.buffer.name}")
    missing = [a for a in axes if mapped[a].kind == "S" and a not in out.axes]
    if missing:
        raise MappingError(f"block {bname!r}: spatial axes {missing} do not index the output {body.buffer.name}")
    operands[body.buffer.name] = out
    if not out.single:
        raise MappingError(f"block {bname!r}: an output dim of {body.buffer.name} is indexed by several mapped axes")
    printer = _ExprPrinter(operands, axes, var_of, bname)
    template = printer.print(body.value)
    inputs = tuple(op for key, op in operands.items() if key != body.buffer.name)
    if not inputs:
        raise MappingError(f"block {bname!r}: the update reads no input operand")
    return IntrinSpec(
        instruction=binding.instruction, isa=binding.isa, dtype=str(body.buffer.dtype), axes=tuple(axes),
        kinds=tuple(mapped[a].kind for a in axes), extents=tuple(mapped[a].extent for a in axes),
        output=out, inputs=inputs, template=template)


def _operand(buf, indices, axes, var_of, name, bname, scope="global") -> OperandSpec:
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
        bare.append(len(nz) == 1 and isinstance(idx, tirx.Var) and int(nz[0][1]) == 1)
    unit = bool(dims) and dims[-1] == _last_nonunit(buf) and len(terms[-1]) == 1 and terms[-1][0][1] == 1
    return OperandSpec(name, buf.name, len(indices), tuple(dims), tuple(terms), unit, scope, tuple(bare))


def _last_nonunit(buf) -> int:
    """Index of the buffer's last dim with extent > 1 (the unit-stride one of a compact buffer)."""
    shape = [int(n) for n in buf.shape]
    for d in range(len(shape) - 1, -1, -1):
        if shape[d] > 1:
            return d
    return len(shape) - 1


class _ExprPrinter:
    """Prints the update value in TVMScript over the intrinsic's operand names."""

    def __init__(self, operands: dict, axes, var_of, bname):
        self.operands, self.axes, self.var_of, self.bname = operands, axes, var_of, bname
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
            op = _operand(buf, e.indices, self.axes, self.var_of, name, self.bname)
            self.operands[key] = op
        return "{" + op.name + "}"


# ---------------------------------------------------------------------------
# TensorIntrin text
# ---------------------------------------------------------------------------
def _buffer_decl(op: OperandSpec, ext: dict[str, int], dtype: str, strides: str | None) -> str:
    shape = op.shape(ext)
    parts = [f"{op.name}_h", repr(tuple(shape)), f'"{dtype}"', "offset_factor=1"]
    if strides is not None:
        parts.append(f"strides=[{strides}]")
    if op.scope != "global":
        parts.append(f'scope="{op.scope}"')
    return f"    {op.name} = T.match_buffer({', '.join(parts)})"


def _region(op: OperandSpec, ext: dict[str, int]) -> str:
    shape = op.shape(ext)
    return f"{op.name}[{', '.join(f'0:{n}' for n in shape)}]"


def signature(spec: IntrinSpec) -> str:
    """``def f(C_h: T.handle, A_h: T.handle, ...)`` line shared by desc and impl."""
    args = ", ".join(f"{op.name}_h: T.handle" for op in spec.operands)
    return f"def f({args}) -> None:"


def root_block(spec: IntrinSpec) -> list[str]:
    """The ``with T.sblock("root")`` header with the reads/writes regions."""
    ext = spec.extent
    reads = ", ".join(_region(op, ext) for op in spec.operands)
    return ['    with T.sblock("root"):',
            f"        T.reads({reads})",
            f"        T.writes({_region(spec.output, ext)})"]


def desc_source(spec: IntrinSpec) -> str:
    """TVMScript of the intrinsic's description: the spec's loop nest, one block."""
    ext = spec.extent
    lines = ["# from tvm.script import tirx as T", "@T.prim_func(s_tir=True)", signature(spec)]
    lines += [_buffer_decl(op, ext, spec.dtype, None) for op in spec.operands]
    lines += root_block(spec)
    loops = ", ".join(f"l_{a}" for a in spec.axes)
    lines.append(f"        for {loops} in T.grid({', '.join(str(ext[a]) for a in spec.axes)}):")
    lines.append('            with T.sblock("update"):')
    lines.append(f"                {', '.join(f'v_{a}' for a in spec.axes)} = "
                 f'T.axis.remap("{"".join(spec.kinds)}", [{loops}])')
    lines.append(f"                {spec.output.ref()} = {spec.expr}")
    return "\n".join(lines) + "\n"


def impl_buffers(spec: IntrinSpec) -> list[str]:
    """Strided ``match_buffer`` declarations for an implementation.

    Every kept dim gets a symbolic stride ``s_<name>_<d>``, except a unit-stride
    last dim, which is declared ``1`` so LLVM sees contiguous vectors.
    """
    ext = spec.extent
    lines = []
    for op in spec.operands:
        n = max(op.rank, 1)
        strides = [f"s_{op.name}_{d}" for d in range(n)]
        if op.unit_stride:
            strides[op.dims[-1]] = "1"
        for s in strides:
            if s != "1":
                lines.append(f"    {s} = T.int32()")
        lines.append(_buffer_decl(op, ext, spec.dtype, ", ".join(strides)))
    return lines


def _parse(src: str):
    from tvm.script import from_source

    try:
        return from_source(src)
    except Exception as e:  # a bug in emission, not in user input
        raise ScheduleError(f"generated TVMScript did not parse: {e}\n{src}") from e


def register_intrin(spec: IntrinSpec, impl: "Implementation") -> str:
    """Register the TensorIntrin (desc from the spec, impl from ``impl``); return its name.

    The name is stable: ``tvmext.<isa>.<instruction>.<impl>.<dtype>.<tile>.<hash>``
    where the hash covers the generated desc and impl text, so equal structures
    share one registration and different ones never collide.
    """
    from tvm import s_tir

    d_src, i_src = desc_source(spec), impl.impl_source(spec)
    digest = hashlib.sha1((d_src + i_src).encode()).hexdigest()[:10]
    tile = "x".join(str(n) for n in spec.extents)
    name = f"tvmext.{spec.isa}.{spec.instruction}.{impl.name}.{spec.dtype}.{tile}.{digest}"
    if s_tir.TensorIntrin.get(name, allow_missing=True) is None:
        s_tir.TensorIntrin.register(name, _parse(d_src), _parse(i_src), override=True)
    return name


# ---------------------------------------------------------------------------
# Implementations (pluggable per ISA / backend)
# ---------------------------------------------------------------------------
class Implementation(ABC):
    """How one ISA/backend executes an intrinsic.  Subclass and register.

    * ``accumulate_local``: the output tile lives in a ``local`` buffer (registers)
      across all reduction loops; otherwise the intrinsic updates global memory.
    * :meth:`check` raises :class:`ScheduleError` when the spec is out of reach.
    * :meth:`impl_source` returns the TVMScript implementation.
    * :meth:`tiles` picks the tile (instruction extents) for a kernel's full extents.
    * :meth:`prepare` builds/loads whatever the code calls (e.g. a C library).
    * ``honors_instruction_sizes``: a fixed-size instruction's extents are the tile
      (a BLAS-like call instead takes whatever tile :meth:`tiles` picks).
    """

    name = "base"
    isa = "x86"
    accumulate_local = False
    parallel = True
    honors_instruction_sizes = True  # fixed instruction extents become the tile (else: implementation's choice)

    def check(self, spec: IntrinSpec) -> None:  # pragma: no cover - interface
        return None

    @abstractmethod
    def impl_source(self, spec: IntrinSpec) -> str:
        """The TVMScript implementation of the intrinsic for ``spec``."""

    def tiles(self, spec: IntrinSpec, fixed: dict[str, int | None]) -> dict[str, int]:
        return {a: int(fixed.get(a) or n) for a, n in zip(spec.axes, spec.extents)}

    def prepare(self) -> None:
        return None

    def schedule_hints(self) -> dict[str, Any]:
        return {}


_IMPLS: dict[tuple[str, str], Implementation] = {}


def register_implementation(impl: Implementation, *, override: bool = False) -> Implementation:
    """Add an implementation under ``(impl.isa, impl.name)``."""
    key = (impl.isa, impl.name)
    if key in _IMPLS and not override:
        raise ScheduleError(f"implementation {impl.name!r} for ISA {impl.isa!r} is already registered")
    _IMPLS[key] = impl
    return impl


def _load_builtin(isa: str) -> None:
    if isa == "x86":
        import tensorize.x86  # noqa: F401  (registers the x86 implementations)


def get_implementation(isa: str, name: str, instruction: str | None = None) -> Implementation:
    """The implementation ``name`` of ``isa`` (ScheduleError if none).

    With ``instruction``, an implementation attached to that instruction in the
    ISA registry (``get_isa(isa).implement(instruction, impl, backend="tvm.<name>")``)
    takes precedence over the ISA-wide one.
    """
    _load_builtin(isa)
    if instruction is not None:
        attached = _attached(isa, instruction, name)
        if attached is not None:
            return attached
    impl = _IMPLS.get((isa, name))
    if impl is None:
        have = sorted(n for i, n in _IMPLS if i == isa)
        raise ScheduleError(f"no implementation {name!r} for ISA {isa!r} (registered: {have or 'none'})")
    return impl


def _attached(isa: str, instruction: str, name: str) -> Implementation | None:
    from tensorize.instructions import get_isa

    from tvm_ext.errors import ConfigError

    try:
        target = get_isa(isa)
        impl = target.implementation(instruction, backend=f"tvm.{name}") if instruction in target else None
    except ConfigError:
        return None
    return impl if isinstance(impl, Implementation) else None


def implementations(isa: str) -> list[str]:
    """Names of the implementations registered for ``isa``."""
    _load_builtin(isa)
    return sorted(n for i, n in _IMPLS if i == isa)


# ---------------------------------------------------------------------------
# Scheduling
# ---------------------------------------------------------------------------
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
          parallel_loops: Callable[[Any, list], Any] | None = None, epilogue: bool = True) -> Emitted:
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
    """
    if isinstance(block, str):
        block = sch.get_sblock(block)
    if pack not in ("auto", "always", "never") or outer not in ("auto", "kernel", "panel"):
        raise ScheduleError(f"apply: pack={pack!r} / outer={outer!r} not understood")
    binding = as_binding(mapping)
    implementation = get_implementation(binding.isa, impl, binding.instruction)
    steps: list[str] = [f"transform: {t}" for t in binding.transforms]
    binding, spec = _bind(sch, block, binding, implementation, vector_calls, steps)
    fixed = _fixed_tiles(binding, spec, implementation, tiles)
    if call_rows > 1 and implementation.accumulate_local:
        binding, spec, fixed = _batch_rows(sch, block, binding, spec, fixed, call_rows, steps)
    tile = _fit_tiles(implementation, spec, fixed, spec.role_tiles(tiles or {}), steps)
    block, spec, padded = _pad(sch, block, binding, spec, tile, implementation, steps)
    binding, respec = _drop_unit_tiles(sch, block, binding, tile, steps, implementation.accumulate_local)
    spec = (respec or spec).with_extents(tile)
    implementation.check(spec)
    block, spec, packed = _pack(sch, block, spec, tile, pack, steps)
    if outer == "auto":
        outer = "panel" if packed else "kernel"
    inner, outer_loops, fused = _schedule_loops(sch, block, binding, spec, tile, outer,
                                                parallel and implementation.parallel,
                                                implementation.accumulate_local, steps, parallel_loops, epilogue)
    implementation.prepare()
    name = register_intrin(spec, implementation)
    sch.tensorize(inner, name)
    steps.append(f"tensorize -> {name}")
    return Emitted(name, spec, tile, steps, inner, packed, padded, outer_loops, fused)


def _bind(sch, block, binding: AxisBinding, implementation: Implementation, vector_calls: bool,
          steps: list[str]) -> tuple[AxisBinding, IntrinSpec]:
    """The binding (unit axes dropped, a lane axis added if useful) and its spec."""
    binding = _drop_unit_axes(sch, block, binding, steps)
    spec = derive_spec(sch, block, binding, accumulate_local=implementation.accumulate_local)
    if spec.vector_axis is None and implementation.accumulate_local and vector_calls:
        lane = _lane_axis(sch, block, binding)
        if lane is not None:
            binding = replace(binding, axis_map={**binding.axis_map, LANE: lane})
            spec = derive_spec(sch, block, binding, accumulate_local=True)
            steps.append(f"vectorize across instruction calls along {lane} (the output's unit-stride axis)")
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
    trial = replace(binding, axis_map={**binding.axis_map, CALLS: cand.loop_name})
    try:
        new = derive_spec(sch, block, trial, accumulate_local=True)
    except MappingError:
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


def _schedule_loops(sch, block, binding, spec: IntrinSpec, tile, outer: str, parallel: bool,
                    accumulate_local: bool, steps: list[str], parallel_loops=None, epilogue: bool = False):
    """Split/reorder, keep the accumulator in registers (its element-wise consumers fused into
    the write-back when ``epilogue``), parallelise, split the init off.

    Returns the loop to tensorize (the first instruction axis' inner loop), the outer
    spatial loops (one fused loop when parallelised) and the fused consumers' names.
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


def _drop_unit_axes(sch, block, binding: AxisBinding, steps: list[str]) -> AxisBinding:
    """Instruction axes bound to extent-1 loops stay at 0 (TVM folds such loops away)."""
    unit = [a for a, it in mapped_iters(sch, block, binding).items() if it.extent == 1]
    if not unit:
        return binding
    if len(unit) == len(binding.axis_map):
        raise ScheduleError(f"block {sch.get(block).name_hint!r}: every mapped axis has extent 1")
    steps.append(f"instruction axes {unit} map to extent-1 loops: fixed at 0")
    return replace(binding, axis_map={a: k for a, k in binding.axis_map.items() if a not in unit})


#: Name of the extra intrinsic axis that runs instruction calls side by side in vector lanes.
LANE = "lane"


def _lane_axis(sch, block, binding: AxisBinding) -> str | None:
    """The unmapped spatial iter that alone indexes the output's last dim (or None)."""
    from tvm import tirx

    body = sch.get(block).body
    last = body.indices[_last_nonunit(body.buffer)]
    if not isinstance(last, tirx.Var):
        return None
    iters = block_iters(sch, block)
    mapped = {it.name for it in mapped_iters(sch, block, binding, iters).values()}
    for it in iters:
        if it.var.same_as(last) and it.kind == "S" and it.name not in mapped and it.extent > 1:
            return it.loop_name
    return None


def _vectorize_last(sch, block, wanted: bool) -> None:
    if not wanted:
        return
    TvmScheduleError = schedule_refusals()

    try:
        loops = sch.get_loops(block)
        sch.vectorize(loops[-1])
    except (TvmScheduleError, IndexError):  # best effort: a scalar loop is still correct
        pass


def _pad(sch, block, binding, spec, tile, implementation, steps):
    """Pad the block so every tile divides its axis (``pad_einsum``); where the block
    cannot be padded (a conv window), shrink the tile to the largest divisor instead."""
    iters = block_iters(sch, block)
    by_axis = mapped_iters(sch, block, binding, iters)
    need = {a: tile[a] for a in spec.axes if by_axis[a].extent % tile[a]}
    if not need:
        return block, spec, {}
    padded = []
    for it in iters:
        axis = next((a for a, b in by_axis.items() if b.name == it.name), None)
        n = it.extent
        if axis in need:
            n = -(-n // tile[axis]) * tile[axis]
        padded.append(n)
    try:
        sch.pad_einsum(block, padded)
    except Exception:  # noqa: BLE001 - TVM refuses non-einsum blocks (windows, strides)
        for a in need:
            ext = by_axis[a].extent
            new = _nearest_divisor(ext, tile[a])
            steps.append(f"tile {a}: {tile[a]} -> {new} (extent {ext}; block {sch.get(block).name_hint!r} "
                         "cannot be padded)")
            tile[a] = new
        return block, spec, {}
    pads = {a: -(-by_axis[a].extent // tile[a]) * tile[a] for a in need}
    steps.append(f"pad_einsum {pads}")
    for producer in sch.get_producers(block):
        schedule_elementwise(sch, producer)
    for consumer in sch.get_consumers(block):
        schedule_elementwise(sch, consumer)
    spec = derive_spec(sch, block, binding, accumulate_local=implementation.accumulate_local)
    return block, spec, pads


def _nearest_divisor(extent: int, want: int) -> int:
    """The divisor of ``extent`` to use for a tile of ``want``: the largest one not above it,
    or the smallest one above it when that is closer (at most twice ``want``)."""
    below = max(d for d in range(1, want + 1) if extent % d == 0)
    above = [d for d in range(want + 1, 2 * want + 1) if extent % d == 0]
    if above and (above[0] - want) <= (want - below):
        return above[0]
    return below


def _drop_unit_tiles(sch, block, binding: AxisBinding, tile: dict, steps: list[str], accumulate_local: bool):
    """Instruction axes tiled by 1 become outer loops (a 1-wide loop would not match the intrinsic)."""
    unit = [a for a in binding.axis_map if tile.get(a) == 1]
    if not unit:
        return binding, None
    if len(unit) == len(binding.axis_map):
        raise ScheduleError(f"block {sch.get(block).name_hint!r}: every instruction axis has a tile of 1")
    steps.append(f"instruction axes {unit} get tile 1: they stay outer")
    for a in unit:
        tile.pop(a, None)
    binding = replace(binding, axis_map={a: k for a, k in binding.axis_map.items() if a not in unit})
    return binding, derive_spec(sch, block, binding, accumulate_local=accumulate_local)


def _pack(sch, block, spec: IntrinSpec, tile, pack: str, steps):
    """Layout-transform inputs so the vector axis is their unit-stride last dim."""
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
        names = [_region_buffer(r).name for r in stmt.reads]
        read_idx = names.index(op.buffer)
        ndim = len(_region_buffer(stmt.reads[read_idx]).shape)
        dv = op.dim_of(vec)
        nr = tile[vec]
        kept = [d for d in op.dims if d != dv] + [dv]
        rest = [d for d in range(ndim) if d not in op.dims]

        cache = sch.cache_read(block, read_idx, "global")
        imap = IndexMap.from_func(_panel_map(rest, kept, dv, nr), ndim=ndim, index_dtype="int32")
        sch.transform_layout(block, ("read", read_idx), imap)
        schedule_elementwise(sch, cache)
        new_ndim = len(rest) + 1 + len(kept)
        new_terms = tuple(op.terms[op.dims.index(d)] for d in kept)
        new_bare = tuple(op.bare[op.dims.index(d)] for d in kept)
        cname = _region_buffer(sch.get(cache).writes[0]).name
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
        if _region_buffer(r).name == buffer:
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
        buf = _region_buffer(r)
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

    dtype = str(_region_buffer(block.writes[0]).dtype) if block.writes else "float32"
    try:
        return hardware_facts().lanes(dtype)
    except TypeError:  # a dtype numpy does not know (bfloat16): 32-bit lanes
        return hardware_facts().lanes("float32")


def schedule_elementwise(sch, block) -> None:
    """Vectorise the innermost loop (in pieces of the target's vector lanes when long) and parallelise the fused
    loops around it, of a plain block such as a pad or pack copy (best effort: a block
    that refuses keeps its loops)."""
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
