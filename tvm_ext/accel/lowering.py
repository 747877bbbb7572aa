"""ISA Mapper §2.2-§2.4 on the accelerator: map each op onto the instructions the system graph offers.

For every op the ``tensorize`` mapper searches the instruction library
(restricted to the instructions some compute node of the graph runs, with the
``pad`` transform so ragged extents are rounded up to whole tiles), and
:func:`tensorize.select_instructions` picks a non-overlapping cover with
:class:`SystemCostModel` (calls x the cheapest unit's cycles).  When the graph
cannot transpose tiles in flight, mappings that read an operand's dimensions
out of order are dropped.  Covers whose instructions only bind kernel tensors
are preferred; when there is none (a depthwise convolution needs fill, a
``scale`` writing the kernel's product temporary, and an ``iadd`` reading it),
mappings onto the kernel's temporaries are allowed too, and :func:`legalize`
gives each such temporary a workload tensor (role ``temp``) so the scheduler
places, moves and retires its tiles like any intermediate.  A statement no
instruction covers is a :class:`~tvm_ext.errors.ConfigError` naming the
instructions that would.

The result, :class:`LoweredOp`, lists the selected mappings as
:class:`MappedCall` s whose :class:`OperandSpec` s say, per needle operand,
which tensor region one instruction call touches (for the unrolling of §3.3).

>>> from tvm_ext.accel.workload import Workload
>>> from tvm_ext.accel.system_graph import load_system
>>> wl = Workload(); y = wl.matmul(wl.input("a", (40, 64)), wl.weight("b", (64, 32)), out="y")
>>> low = lower_op(wl, wl.ops[0], load_system("default"))
>>> [(c.instruction.name, c.mapping.calls) for c in low.calls]
[('fill_32x32', 2), ('matmul_32x32x32', 4)]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm_ext.errors import ConfigError, MappingError

from .system_graph import SystemGraph
from .workload import Op, Workload

__all__ = ["SystemCostModel", "OperandSpec", "MappedCall", "LoweredOp", "lower_op", "lower_workload",
           "needle_modes", "legalize",
           "kernel_temporaries"]

_UNCOVERED = 1e18


class SystemCostModel:
    """§2.4 cost hook: a mapping costs calls x the cycles of the cheapest unit running its instruction."""

    def __init__(self, system: SystemGraph):
        self.cycles: dict[str, float] = {}
        for name in system.supported_instructions():
            self.cycles[name] = min(system.cycles(d, name) for d in system.units_for(name))

    def cost(self, instruction, mapping) -> float:
        c = self.cycles.get(instruction.name)
        return _UNCOVERED if c is None else mapping.calls * c

    def fallback_cost(self, program, statement: int) -> float:
        return _UNCOVERED


@dataclass(frozen=True)
class OperandSpec:
    """One needle operand of an instruction call, seen on its tensor.

    ``rows`` are the haystack access rows (ISAMIR coordinates); tensor index =
    row value + ``offset``.  Each tensor dimension covers ``counts[e]``
    elements ``steps[e]`` apart per call; ``order`` lists the tensor
    dimensions in the needle's dimension order (the tile's layout), and
    ``shape`` is the tile (the needle buffer's shape).
    """

    needle: str
    mode: str  # "r", "w" (fully overwritten) or "rw"
    tensor: str
    rows: tuple
    offset: tuple[int, ...]
    counts: tuple[int, ...]
    steps: tuple[int, ...]
    order: tuple[int, ...]
    shape: tuple[int, ...]


@dataclass
class MappedCall:
    """One selected mapping of an op: the instruction, its operands, how calls enumerate."""

    op_index: int
    instruction: Any  # tensorize Instruction
    mapping: Any  # tensorize Mapping
    operands: tuple[OperandSpec, ...]
    constants: dict[str, float]

    @property
    def outer_axes(self) -> tuple[str, ...]:
        return tuple(self.mapping.outer_axes)

    @property
    def calls(self) -> int:
        return int(self.mapping.calls)


@dataclass
class LoweredOp:
    """An op after mapping and selection."""

    op: Op
    index: int
    calls: list[MappedCall]
    transforms: tuple

    def describe(self) -> dict[str, Any]:
        return {"op": self.op.name, "kind": self.op.kind,
                "transforms": [str(t) for t in self.transforms],
                "instructions": [{"instruction": c.instruction.name, "calls": c.calls,
                                  "axis_map": dict(c.mapping.axis_map),
                                  "outer": list(c.outer_axes)} for c in self.calls]}


def needle_modes(needle) -> dict[str, str]:
    """Needle buffer -> ``"r"``, ``"w"`` (first touched by ``:=``) or ``"rw"``."""
    from tensorize.isamir import Access

    modes: dict[str, str] = {}
    for s in needle.statements:
        for acc in (s.src,):
            if isinstance(acc, Access) and acc.buffer not in modes:
                modes[acc.buffer] = "r"
        d = s.dst.buffer
        if d not in modes:
            modes[d] = "w" if s.op == ":=" else "rw"
        elif modes[d] == "r":
            modes[d] = "rw"
    return modes


# --------------------------------------------------------------------------- selection (cached per kernel)

_SELECTIONS: dict[tuple, tuple] = {}


def _system_key(system: SystemGraph) -> tuple:
    model = SystemCostModel(system)
    return (system.isa, tuple(sorted(model.cycles.items())), system.transposing_copies)


def _keeper(system: SystemGraph, temporaries: bool = False):
    """Mapping filter: tensor operands only (or also kernel temporaries), in order unless tiles can transpose."""
    return lambda m: (temporaries or _binds_tensors(m)) and (system.transposing_copies or _in_order(m))


def _binds_tensors(mapping) -> bool:
    """Every needle operand lands on a kernel buffer (a haystack temporary is no tensor to tile)."""
    needle = mapping.instruction.needle
    return all(mapping.program.buffer(hb).role != "temp" for nb, hb in mapping.buffer_map.items()
               if needle.buffer(nb).role != "temp")


def _in_order(mapping) -> bool:
    """Every tensor operand's mapped dimensions appear in the needle's order (no transposed tile)."""
    needle = mapping.instruction.needle
    return all(list(v) == sorted(v) for nb, v in mapping.dim_map.items() if needle.buffer(nb).role != "temp")


def kernel_temporaries(mappings) -> dict[str, tuple[int, ...]]:
    """Haystack temporaries the selected mappings read or write as operands -> their (padded) shapes.

    >>> kernel_temporaries([])
    {}
    """
    out: dict[str, tuple[int, ...]] = {}
    for m in mappings:
        needle = m.instruction.needle
        for nb, hb in m.buffer_map.items():
            if needle.buffer(nb).role == "temp" or nb in m.constants:
                continue
            buf = m.program.buffer(hb)
            if buf.role == "temp":
                old = out.get(hb, (0,) * len(buf.shape))
                out[hb] = tuple(max(a, int(b)) for a, b in zip(old, buf.shape))
    return out


def _select(op: Op, system: SystemGraph):
    """(transforms, [mapping, ...]) for an op's kernel on ``system`` (cached)."""
    key = (op.key, _system_key(system))
    hit = _SELECTIONS.get(key)
    if hit is not None:
        return hit
    from tensorize import parse_isamir, select_instructions

    program = parse_isamir(op.text, extents=dict(op.extents), name=op.kind)
    names = system.supported_instructions()
    model = SystemCostModel(system)
    best = found = None
    # tensor operands only first (existing covers unchanged), then covers through kernel temporaries
    for temporaries in (False, True):
        if temporaries and not any(b.role == "temp" for b in program.buffers):
            break
        found = _candidates(program, system, names, model, _keeper(system, temporaries))
        best = select_instructions(found, model, program=program) if found else None
        if best is not None and not best.uncovered and best.cost < _UNCOVERED:
            break
    if best is None:
        raise ConfigError(_uncovered_message(op, system, program, list(range(len(program.statements)))))
    if best.uncovered or best.cost >= _UNCOVERED:
        raise ConfigError(_uncovered_message(op, system, program,
                                             best.uncovered or list(range(len(program.statements)))))
    chosen = _harmonise(best.mappings, found, model)
    result = (tuple(best.transforms), chosen)
    _SELECTIONS[key] = result
    return result


def _extent_repairs(program, instruction) -> list[dict[str, int]]:
    """Axis paddings after which ``instruction`` maps (``{}``: it maps as is), from the mapper's failures."""
    import math

    from tensorize.feedback import ExtentMisfit
    from tensorize.mapper import map_instruction

    res = map_instruction(program, instruction)
    out = [{}] if res.mappings else []
    for f in res.failures:
        if isinstance(f.detail, ExtentMisfit):
            sizes = {m.hay_axis: int(math.ceil(m.hay_extent / m.needle_extent) * m.needle_extent)
                     for m in f.detail.axes}
            if sizes not in out:
                out.append(sizes)
    return out


def _growth(program, sizes: dict[str, int]) -> float:
    g = 1.0
    for a, e in sizes.items():
        g *= e / program.extent(a)
    return g


def _pad(program, sizes: dict[str, int]):
    import math

    from tensorize import get_transform

    grow = {a: e for a, e in sizes.items() if e > program.extent(a)}
    if not grow:
        return program, ()
    step = get_transform("pad").step(0.0, sizes=tuple(sorted(grow.items())))
    return step.apply(program).validate(), (step,)


def _candidates(program, system: SystemGraph, names: list[str], model, keep, top: int = 4, second: int = 2) -> list:
    """§2.3 with the pad transform only: every instruction mapped on the programs padded just enough.

    The mapper's extent failures say which axes an instruction needs
    rounded up.  The instructions covering the most statements (a matmul)
    anchor: each of their ``top`` smallest repairs gives a padded program; on
    each, the other instructions' own repairs (the ``second`` smallest) give
    programs padded for both.  Every instruction is then mapped, as is, on
    all these programs, and selection picks the cheapest cover among them.
    """
    from tensorize.instructions import get_isa
    from tensorize.mapper import map_instruction
    from tensorize.transforms import TransformError

    isa = get_isa(system.isa)
    instrs = [isa[n] for n in names]
    repairs = {ins.name: _extent_repairs(program, ins) for ins in instrs}
    useful = [ins for ins in instrs if repairs[ins.name]]
    if not useful:
        return []
    most = max(len(ins.needle.statements) for ins in useful)
    programs: dict = {program.key: (program, ())}

    def add(prog, steps):
        programs.setdefault(prog.key, (prog, steps))

    for ins in useful:
        if len(ins.needle.statements) != most:
            continue
        for sizes in sorted(repairs[ins.name], key=lambda r: _growth(program, r))[:top]:
            try:
                base, steps = _pad(program, sizes)
            except (TransformError, ValueError):
                continue
            add(base, steps)
            for other in useful:
                if other is ins:
                    continue
                for more in sorted(_extent_repairs(base, other), key=lambda r: _growth(base, r))[:second]:
                    try:
                        prog, steps2 = _pad(base, more)
                    except (TransformError, ValueError):
                        continue
                    add(prog, steps + steps2)
    out = []
    for prog, steps in programs.values():
        for ins in useful:
            for x in map_instruction(prog, ins).mappings:
                if keep(x):
                    out.append(x.with_transforms(steps, program, system.isa))
    return out


def _orders(m) -> dict[str, tuple]:
    """Haystack buffer -> the dimension order of the tiles ``m`` lays it out in (kernel temporaries included)."""
    needle = m.instruction.needle
    return {m.buffer_map[nb]: tuple(dims) for nb, dims in m.dim_map.items() if needle.buffer(nb).role != "temp"}


def _harmonise(chosen: list, found: list, model: SystemCostModel) -> list:
    """Among equally cheap alternatives, prefer mappings whose tiles lay a buffer out like the others do.

    (A fill that writes ``C`` tiles in one dimension order and a matmul that
    accumulates them in the other would force a write-back and a transposing
    reload between them.)  A kernel temporary laid out alike counts double (it
    would otherwise round-trip through memory just to change layout), and a
    cover through temporaries is harmonised twice, so that a choice made for a
    later mapping can bring an earlier one along.
    """
    out = list(chosen)
    temps = set(kernel_temporaries(chosen))
    for _ in range(2 if temps else 1):
        for n, m in enumerate(chosen):
            others: dict[str, set] = {}
            for k, o in enumerate(out):
                if k != n:
                    for b, dims in _orders(o).items():
                        others.setdefault(b, set()).add(dims)
            if not others:
                continue

            def agree(x) -> int:
                return sum(2 if b in temps else 1 for b, dims in _orders(x).items() if dims in others.get(b, ()))

            cur = out[n]
            cost = model.cost(m.instruction, m)
            alts = [x for x in found if x.instruction is m.instruction and x.statement_map == m.statement_map
                    and x.program.key == m.program.key and model.cost(x.instruction, x) <= cost]
            best = max(alts, key=agree, default=cur)
            if agree(best) > agree(cur):
                out[n] = best
    return out


def _uncovered_message(op: Op, system: SystemGraph, program, stmts: list[int]) -> str:
    """Which statements no unit covers, and which library instructions would (mapped, or after padding).

    Instructions binding tensors only are named first; when none would, those
    that would through the kernel's temporaries (the covers the lowering
    falls back to).
    """
    from tensorize.instructions import get_isa
    from tensorize.mapper import map_instruction
    from tensorize.transforms import TransformError

    text = " ".join(program.statements[k].format(program.axis_names) for k in stmts)
    want = set(stmts)
    supported = set(system.supported_instructions())
    has_temps = any(b.role == "temp" for b in program.buffers)
    missing, transposed = [], []
    for temporaries in ((False, True) if has_temps else (False,)):
        keep = _keeper(system, temporaries)
        for ins in get_isa(system.isa):
            any_cover = ok_cover = False
            for sizes in sorted(_extent_repairs(program, ins), key=lambda r: _growth(program, r))[:4]:
                try:
                    prog, _ = _pad(program, sizes)
                except (TransformError, ValueError):
                    continue
                for m in map_instruction(prog, ins).mappings:
                    if set(m.statement_map) & want and (temporaries or _binds_tensors(m)):
                        any_cover = True
                        ok_cover = ok_cover or keep(m)
            if ok_cover and ins.name not in supported:
                missing.append(ins.name)
            elif any_cover and not ok_cover:
                transposed.append(ins.name)
        if missing or transposed:
            break
    if missing:
        hint = f"the library instruction(s) {missing} would, but no compute unit of system {system.name!r} runs them"
    elif transposed:
        hint = (f"{transposed} would, but only with transposed operand tiles, which the copies of system "
                f"{system.name!r} cannot produce")
    else:
        hint = f"no instruction of the {system.isa!r} library computes it"
    return f"op {op.name} ({op.kind}): statement(s) `{text}` cannot run on the accelerator: {hint}"


# --------------------------------------------------------------------------- binding to tensors


def _hay_access(mapping, nb: str):
    from tensorize.isamir import Access

    for k, h in enumerate(mapping.statement_map):
        ns, hs = mapping.instruction.needle.statements[k], mapping.program.statements[h]
        for na, ha in zip(ns.accesses, hs.accesses):
            if isinstance(na, Access) and na.buffer == nb and isinstance(ha, Access):
                return ha
    raise MappingError(f"mapping of {mapping.instruction.name}: needle buffer {nb} has no haystack access")


def _bind(wl: Workload, op: Op, index: int, mapping) -> MappedCall:
    needle = mapping.instruction.program_for(mapping.tile)
    modes = needle_modes(needle)
    operands = []
    for b in needle.buffers:
        if b.role == "temp" or b.name in mapping.constants:
            continue
        hb = mapping.buffer_map[b.name]
        view = op.view(hb)
        acc = _hay_access(mapping, b.name)
        rank = len(acc.rows)
        counts, steps = [1] * rank, [1] * rank
        for d, e in enumerate(mapping.dim_map[b.name]):
            counts[e] = b.shape[d]
            steps[e] = mapping.dim_strides[b.name][d]
        if len(view.offset) != rank or len(wl.tensors[view.tensor].shape) != rank:
            raise MappingError(f"op {op.name}: buffer {hb} has rank {rank}, tensor {view.tensor} "
                               f"{wl.tensors[view.tensor].shape}")
        operands.append(OperandSpec(b.name, modes[b.name], view.tensor, tuple(acc.rows), tuple(view.offset),
                                    tuple(counts), tuple(steps), tuple(mapping.dim_map[b.name]), tuple(b.shape)))
    return MappedCall(index, mapping.instruction, mapping, tuple(operands), dict(mapping.constants))


def lower_op(wl: Workload, op: Op, system: SystemGraph, index: int = 0) -> LoweredOp:
    """Map and select instructions for one op (raises ConfigError when the system cannot run it)."""
    transforms, chosen = _select(op, system)
    calls = [_bind(wl, op, index, m) for m in sorted(chosen, key=lambda m: min(m.statement_map))]
    return LoweredOp(op, index, calls, transforms)


def legalize(wl: Workload, system: SystemGraph) -> Workload:
    """Rewrite ops the system cannot map as they are (returns ``wl`` itself when nothing changes).

    Without transposing copies, ``A @ B.T`` becomes an explicit ``transpose``
    of ``B`` (the transpose unit's instruction) followed by ``A @ T``.  An op
    whose selected cover passes data through a kernel temporary (see
    :func:`kernel_temporaries`) gets a ``temp`` tensor ``<op>_<buffer>`` per
    temporary, bound by a view, so its instructions' operands are tensors.

    >>> from tvm_ext.accel.system_graph import load_system
    >>> w = Workload(); y = w.depthwise_conv2d(w.input("x", (1, 2, 6, 6)), w.weight("k", (2, 1, 3, 3)), out="y")
    >>> sorted(n for n, t in legalize(w, load_system("default")).tensors.items() if t.role == "temp")
    ['op0_depthwise_conv2d_tmp']
    """
    from dataclasses import replace

    from .workload import Ref, TensorSpec, View

    out = wl
    if not system.transposing_copies and any(op.kind == "matmul_nt" for op in wl.ops):
        out = Workload(wl.name, dict(wl.tensors), [], list(wl.returns))
        for op in wl.ops:
            if op.kind != "matmul_nt":
                out.ops.append(op)
                continue
            ext = dict(op.extents)
            b = op.view("B")
            t = out.transpose(Ref(b.tensor, b.offset, (ext["j"], ext["k"])))
            views = tuple((n, View(t, (0, 0)) if n == "B" else v) for n, v in op.views)
            out.ops.append(replace(op, name=f"op{len(out.ops)}_matmul", kind="matmul",
                                   text=op.text.replace("B[j][k]", "B[k][j]"), views=views))
    ops = []
    for op in out.ops:
        bound = dict(op.views)
        temps = {hb: shape for hb, shape in kernel_temporaries(_select(op, system)[1]).items() if hb not in bound}
        if not temps:
            ops.append(op)
            continue
        if out is wl:
            out = Workload(wl.name, dict(wl.tensors), [], list(wl.returns))
        views = list(op.views)
        for hb, shape in temps.items():
            name = f"{op.name}_{hb}"
            if name in out.tensors:
                raise ConfigError(f"op {op.name}: its temporary {hb} would be tensor {name!r}, which exists")
            out.tensors[name] = TensorSpec(name, shape, "temp")
            views.append((hb, View(name, (0,) * len(shape))))
        ops.append(replace(op, views=tuple(views)))
    if out is not wl or ops != out.ops:
        out.ops = ops
    return out


def lower_workload(wl: Workload, system: SystemGraph) -> list[LoweredOp]:
    """:func:`lower_op` for every op, in program order."""
    if not wl.ops:
        raise ConfigError(f"workload {wl.name}: no ops to schedule")
    return [lower_op(wl, op, system, k) for k, op in enumerate(wl.ops)]
