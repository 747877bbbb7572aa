"""ISA Mapper §2.3 (Figure 1): feedback-driven search over IR transformations.

The loop of Figure 1: the deterministic mapper analyses a program; when it
fails (or to find alternative mappings) each registered transformation reads
its failure reasons and proposes repairs; the repaired programs are mapped in
turn, breadth first, up to ``max_depth`` transformations and ``max_programs``
programs per instruction.  Every mapping found carries its transformation
sequence.  :func:`find_mappings` runs it for every instruction of an ISA.

>>> from tvm import te
>>> A = te.placeholder((32, 32), name="A"); B = te.placeholder((32, 32), name="B")
>>> s = te.placeholder((), name="s"); k = te.reduce_axis((0, 32), name="k")
>>> C = te.compute((32, 32), lambda i, j: te.sum(s[()] * A[i, k] * B[k, j], axis=k), name="C")
>>> ms = find_mappings([s, A, B, C], "x86", instructions=["matmul_16x16x16"])
>>> [str(t) for t in ms[0].transforms]
['factorization(stmt=4, operand=0)']
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from tvm_ext.errors import ConfigError

from .importers import to_isamir
from .instructions import ISA, Instruction, get_isa
from .isamir import Program
from .mapper import Failure, Mapping, NoMappingError, map_instruction
from .transforms import Transform, TransformError, TransformStep, get_transform, available_transforms

__all__ = ["SearchResult", "search_mappings", "find_mappings"]


@dataclass
class SearchResult:
    """Mappings found (each with its transform sequence) and the root's failure reasons."""

    instruction: Instruction
    mappings: list[Mapping]
    failures: list[Failure]
    explored: int
    programs: list[tuple[tuple[TransformStep, ...], Program]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.mappings)


def search_mappings(
    program: Program,
    instruction: Instruction,
    *,
    max_depth: int = 2,
    max_programs: int = 24,
    branching: int = 6,
    strict_layout: bool = False,
    transforms: Sequence[str | Transform] | None = None,
    isa: str | None = None,
) -> SearchResult:
    """Map ``instruction`` into ``program`` and its transformed variants (bounded BFS).

    ``branching`` caps the proposals followed per program (highest feedback
    score first); ``max_programs`` caps the programs mapped in total.
    """
    if max_depth < 0 or max_programs < 1 or branching < 0:
        raise ConfigError("search: max_depth >= 0, max_programs >= 1 and branching >= 0 required")
    passes = [get_transform(t) if isinstance(t, str) else t for t in (transforms or available_transforms())]
    seen = {program.key}
    frontier: list[tuple[tuple[TransformStep, ...], Program]] = [((), program)]
    found: dict[tuple, Mapping] = {}
    root_failures: list[Failure] = []
    explored: list[tuple[tuple[TransformStep, ...], Program]] = []
    for depth in range(max_depth + 1):
        nxt: list[tuple[tuple[TransformStep, ...], Program]] = []
        for steps, prog in frontier:
            if len(explored) >= max_programs:
                break
            explored.append((steps, prog))
            res = map_instruction(prog, instruction, strict_layout=strict_layout)
            if not steps:
                root_failures = res.failures
            for m in res.mappings:
                found.setdefault(m.key(), m.with_transforms(steps, program, isa))
            if depth == max_depth:
                continue
            nxt += _children(prog, steps, res, instruction, passes, branching, seen)
        frontier = nxt
        if not frontier:
            break
    return SearchResult(instruction, list(found.values()), root_failures, len(explored), explored)


def _children(prog, steps, res, instruction, passes, branching, seen) -> list:
    proposals: list[TransformStep] = []
    for t in passes:
        proposals += t.propose(prog, res, instruction)
    proposals = list(dict.fromkeys(proposals))  # de-duplicate, keep order
    proposals.sort(key=lambda st: -st.score)
    out = []
    for st in proposals:
        # follow the feedback of the deepest failures only (one statement's worth of depth)
        if len(out) >= branching or st.score < proposals[0].score - 10:
            break
        try:
            new = st.apply(prog).validate()
        except (TransformError, ValueError):
            continue
        if new.key in seen:
            continue
        seen.add(new.key)
        out.append((steps + (st,), new))
    return out


def _joint_padding(program: Program, mappings: list[Mapping], instructions, strict_layout: bool,
                   isa: str) -> list[Mapping]:
    """Map every instruction on one program padded for all pad-only repairs found.

    Padding requests of different instructions (e.g. a matmul's batch axis and
    an element-wise op's row axis) usually touch different axes; merged (least
    common multiple of the tile sizes per axis) they give one program on which
    selection can combine all those instructions.
    """
    best: dict[tuple, Mapping] = {}  # cheapest pad-only repair per (instruction, statements)
    for m in mappings:
        if m.transforms and all(st.transform == "pad" for st in m.transforms):
            key = (m.instruction.name, m.statement_map)
            if key not in best or m.calls < best[key].calls:
                best[key] = m
    if len({m.transforms for m in best.values()}) < 2:
        return []
    need: dict[str, int] = {}
    for m in best.values():
        for st in m.transforms:
            for axis, _ in dict(st.params)["sizes"]:
                for x, h in m.axis_map.items():
                    if h == axis:
                        need[axis] = math.lcm(need.get(axis, 1), m.tile[x])
    sizes = tuple((a, int(math.ceil(program.extent(a) / n) * n)) for a, n in need.items()
                  if program.has_axis(a) and program.extent(a) % n)
    if not sizes:
        return []
    step = get_transform("pad").step(0.0, sizes=sizes)
    try:
        joint = step.apply(program).validate()
    except (TransformError, ValueError):
        return []
    out = []
    for ins in instructions:
        for m in map_instruction(joint, ins, strict_layout=strict_layout).mappings:
            out.append(m.with_transforms((step,), program, isa))
    return out


def find_mappings(
    kernel,
    isa: str | ISA = "x86",
    *,
    instructions: Iterable[str] | None = None,
    kinds: Iterable[str] | None = None,
    block: str | Iterable[str] | None = None,
    max_depth: int = 2,
    max_programs: int = 24,
    strict_layout: bool = False,
    transforms: Sequence[str | Transform] | None = None,
) -> list[Mapping]:
    """Every way the ISA's instructions compute parts of ``kernel`` (§2.2 + §2.3).

    ``kernel`` is a PrimFunc, IRModule, te.Tensor (or list of them) or an
    ISAMIR :class:`~tensorize.isamir.Program`; ``block`` picks TIR blocks.
    Mappings come per instruction (ISA order) in discovery order, followed by
    those on one jointly padded program (see :func:`_joint_padding`); each
    records its transformation sequence and the program it refers to.  Raises
    :class:`~tensorize.mapper.NoMappingError` (a ``MappingError``) carrying
    the mapper's reasons when no instruction maps at all.
    """
    program = to_isamir(kernel, block=block)
    target = get_isa(isa)
    chosen = target.select(names=instructions, kinds=kinds)
    if not chosen:
        raise ConfigError(f"find_mappings: no instruction of ISA {target.name} matches the filter")
    out: list[Mapping] = []
    reasons: list[Failure] = []
    for ins in chosen:
        res = search_mappings(program, ins, max_depth=max_depth, max_programs=max_programs,
                              strict_layout=strict_layout, transforms=transforms, isa=target.name)
        out += res.mappings
        reasons += sorted(res.failures, key=lambda f: -f.depth)[:3]
    if max_depth > 0:
        out += _joint_padding(program, out, chosen, strict_layout, target.name)
    if not out:
        names = ", ".join(i.name for i in chosen[:6]) + (" ..." if len(chosen) > 6 else "")
        top = sorted(reasons, key=lambda f: -f.depth)[:6]
        detail = "; ".join(f.message for f in top) or "no statement pairs to compare"
        raise NoMappingError(
            f"no mapping: no instruction of ISA {target.name!r} ({names}) computes any part of kernel "
            f"{program.name!r} (searched up to {max_depth} transformations). Mapper reasons: {detail}",
            reasons,
        )
    return out
