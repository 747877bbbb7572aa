"""ISA Mapper §2.4 for whole kernels: rank each block's mappings and plan which ones to run.

:func:`plan_mappings` picks, for every compute block of a kernel, the
mappings usable on the kernel as written, or else the structural transform
sequence (e.g. factorization) whose rebuilt program the most blocks map on,
or else several mappings that compute a block together (:attr:`Plan.covers`).
:func:`simulate_plan` runs a plan as instruction calls on numpy inputs and
:func:`plan_cycles` sums its modelled cycles.

>>> from tensorize.kernels.zoo import matmul
>>> from tensorize.search import find_mappings
>>> k = matmul(32, 32, 32)
>>> plan_mappings(k.prim_func(), find_mappings(k.prim_func(), "accel", block=["C"])).blocks["C"].instruction.name
'matmul_32x32x32'
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

__all__ = [
    "SCHEDULE_LEVEL_TRANSFORMS",
    "Plan",
    "plan_mappings",
    "simulate_plan",
    "plan_cycles",
    "mapping_rank",
    "real_calls",
    "compute_blocks",
    "covers",
    "origin_block",
    "transform_names",
    "structural_transforms",
]

#: Transforms that leave the TIR block as written: the emitter re-derives layout
#: (transpose), operand order (commutativity) and padding (pad) from the block itself.
SCHEDULE_LEVEL_TRANSFORMS = frozenset({"commutativity", "pad", "transpose"})
_KIND_RANK = {"matmul": 0, "conv1d": 1, "axpy": 2, "elementwise": 3, "dot": 4}


def transform_names(mapping) -> list[str]:
    """Names of the transforms in a mapping's sequence (``factorization``, ``pad``, ...)."""
    return [t.transform for t in getattr(mapping, "transforms", ())]


def compute_blocks(func) -> list[str]:
    """Names of the blocks of ``func`` that reduce (the ones worth an instruction)."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    out = []
    for b in sch.get_child_blocks(sch.get_sblock("root")):
        stmt = sch.get(b)
        if any(int(iv.iter_type) == 2 for iv in stmt.iter_vars):
            out.append(stmt.name_hint)
    return out


def _block_statements(program, block: str, exported: bool) -> list[int]:
    if exported:
        from tensorize.exporters import export_groups

        return next((list(ks) for name, ks in export_groups(program) if name == block), [])
    return [k for k, s in enumerate(program.statements) if s.block == block]


def _is_init(stmt) -> bool:
    from tensorize.isamir import Const

    return stmt.op == ":=" and isinstance(stmt.src, Const) and stmt.fn is None


def covers(mapping, block: str, exported: bool = False) -> bool:
    """True when the mapping computes every statement of ``block`` (its init aside)."""
    prog = mapping.program
    stmts = [k for k in _block_statements(prog, block, exported) if not _is_init(prog.statements[k])]
    return bool(stmts) and set(stmts) <= set(mapping.statement_map)


def origin_block(mapping) -> str | None:
    """The TIR block of the kernel as written that the mapped axes come from (or None)."""
    prog = mapping.program
    blocks = set()
    for hay in mapping.axis_map.values():
        origin = prog.axis(hay).origin if prog.has_axis(hay) else None
        if not origin:
            return None
        blocks.add(origin[0])
    return blocks.pop() if len(blocks) == 1 else None


def _keeps_output_layout(mapping) -> bool:
    """The needle's unit-stride output axis lands on the kernel output's unit-stride axis."""
    needle = mapping.instruction.needle
    n_out = needle.statements[-1].dst
    h_out = mapping.program.statements[max(mapping.statement_map)].dst
    if not n_out.rows or not h_out.rows:
        return False
    n_last, h_last = n_out.rows[-1], h_out.rows[-1]
    if len(n_last.terms) != 1 or len(h_last.terms) != 1:
        return False
    return mapping.axis_map.get(n_last.terms[0][0]) == h_last.terms[0][0]


def mapping_rank(mapping, cost_model: Any = None) -> tuple:
    """Sort key of a mapping for the x86 micro-kernel: matmul first, then mappings that keep
    the output's unit-stride axis in the instruction's vector position, then the cost
    (``cost_model.cost(instruction, mapping)`` when given, else the instruction calls on
    the kernel's own extents, ISA Mapper §2.4), then bigger instructions, then mapped
    axes further inside the kernel's loop nest, then fewer transforms."""
    kind = _KIND_RANK.get(mapping.instruction.kind, 5)
    prog = mapping.program
    depth = sum(prog.axis_names.index(h) for h in mapping.axis_map.values())
    size = 1
    for n in mapping.tile.values():
        size *= int(n)
    cost = float(cost_model.cost(mapping.instruction, mapping)) if cost_model is not None else real_calls(mapping)
    return (kind, 0 if _keeps_output_layout(mapping) else 1, cost, -size, -depth, len(mapping.transforms))


def real_calls(mapping) -> int:
    """Instruction calls on the kernel's own extents (before any pad transform):
    outer trip counts times ``ceil(extent / tile)`` per mapped axis."""
    src = mapping.source if getattr(mapping, "source", None) is not None else mapping.program

    def extent(axis: str) -> int:
        prog = src if src.has_axis(axis) else mapping.program
        return int(prog.extent(axis))

    n = 1
    for a in mapping.outer_axes:
        n *= extent(a)
    for needle_axis, hay in mapping.axis_map.items():
        n *= -(-extent(hay) // int(mapping.tile[needle_axis]))
    return n


@dataclass
class Plan:
    """Candidate mappings per block (best first), and the program to rebuild the kernel from.

    ``program`` is ``None`` when the kernel is tensorized as written.
    ``covers`` holds the blocks no single instruction computes, each with the
    several mappings (one program, disjoint statements) that compute it
    together, e.g. fill + scale + accumulate for a depthwise convolution on
    fixed-size element-wise units.
    """

    candidates: dict[str, list]
    program: Any = None
    covers: dict[str, list] = field(default_factory=dict)

    @property
    def blocks(self) -> dict[str, Any]:
        """The first-choice mapping of each block (for a covered block: the one that reduces)."""
        out = {b: ms[0] for b, ms in self.candidates.items()}
        out.update({b: ms[-1] for b, ms in self.covers.items()})
        return out

    def cover(self, block: str) -> list:
        """The mappings that compute ``block``, in statement order (one unless it is covered)."""
        return list(self.covers[block]) if block in self.covers else [self.candidates[block][0]]

    @property
    def chosen(self) -> list:
        """Every mapping the plan runs: each block's :meth:`cover`, block by block."""
        return [m for b in self.blocks for m in self.cover(b)]

    def on_one_program(self, cost_model: Any = None) -> "Plan":
        """The same plan with first choices that all live on one transformed program (what
        :func:`simulate_plan` runs), the one of least total cost (modelled cycles by default).

        Blocks planned independently may pick candidates padded differently; this
        picks, per program the candidates share, each block's cheapest candidate
        there, and keeps the program with the least sum.  Raises
        :class:`~tvm_ext.errors.MappingError` when no program is common to all blocks.
        """
        from tensorize.selection import CycleCostModel
        from tvm_ext.errors import MappingError

        model = cost_model or CycleCostModel()
        fixed = {m.program.key for ms in self.covers.values() for m in ms}
        keys = None
        for cands in self.candidates.values():
            ks = {m.program.key for m in cands}
            keys = ks if keys is None else keys & ks
        if fixed:  # the covers' program is fixed: the candidates must live on it too
            keys = fixed if keys is None else keys & fixed
        if not keys:
            raise MappingError("no transformed program carries a candidate for every block of the plan")

        def cost(m) -> float:
            return float(model.cost(m.instruction, m))

        best = None
        for key in sorted(keys, key=str):
            picks = {b: min((m for m in ms if m.program.key == key), key=cost) for b, ms in self.candidates.items()}
            total = sum(cost(m) for m in picks.values())
            if best is None or total < best[0]:
                best = (total, picks)
        cands = {b: [best[1][b]] + [m for m in ms if m is not best[1][b]] for b, ms in self.candidates.items()}
        return Plan(cands, self.program, dict(self.covers))

    @property
    def structural(self) -> list[str]:
        """The structural transforms of the rebuilt program (``[]`` when none)."""
        first = next(iter(self.candidates.values()), [None])[0]
        return [str(t) for t in structural_transforms(first)] if (first and self.program is not None) else []


def structural_transforms(mapping) -> tuple:
    """Transforms that change the kernel's blocks (not schedule-level ones)."""
    return tuple(t for t in getattr(mapping, "transforms", ()) if t.transform not in SCHEDULE_LEVEL_TRANSFORMS)


def plan_mappings(func, mappings: Sequence[Any], cost_model: Any = None) -> Plan:
    """Rank the mappings of every compute block (ISA Mapper §2.4 with :func:`mapping_rank`).

    Mappings usable on the kernel as written (only schedule-level transforms:
    commutativity, transpose, pad, which the emitter redoes from the block
    itself) are preferred.  When some compute block has none, the structural
    transform sequence (e.g. factorization) giving the least ISAMIR work and
    covering the most compute blocks is chosen; its program is rebuilt and the
    mappings of every program reached by that sequence plus schedule-level
    transforms are its candidates.  A block that neither way computes with one
    instruction gets the cheapest set of schedule-level mappings that compute
    it together (:attr:`Plan.covers`), as a depthwise convolution on the
    accelerator's fixed 32x32 element-wise units.
    """
    from tvm_ext.errors import MappingError

    wanted = compute_blocks(func)
    direct: dict[str, list] = {}
    for m in mappings:
        b = origin_block(m)
        if b in wanted and not structural_transforms(m) and covers(m, b):
            direct.setdefault(b, []).append(m)
    def rank(m):
        return mapping_rank(m, cost_model)

    if all(b in direct for b in wanted):
        return Plan({b: sorted(direct[b], key=rank) for b in wanted})
    best, best_key = None, None
    for seq, group in _by_structure(mappings).items():
        base = _base_program(group)
        if base is None:
            continue
        chosen, uncovered = _cover_program(base, group, rank)
        if not chosen:
            continue
        work = sum(base.points(k) for k in range(len(base.statements)))
        key = (uncovered, work, sum(rank(ms[0])[0] for ms in chosen.values()), len(seq))
        if best_key is None or key < best_key:
            best, best_key = Plan(chosen, base), key
    if best is not None and (not direct or best_key[0] == 0):
        return best
    multi = _multi_instruction_covers(mappings, [b for b in wanted if b not in direct], cost_model)
    if direct or multi:
        return Plan({b: sorted(ms, key=rank) for b, ms in direct.items()}, covers=multi)
    raise MappingError(f"no mapping covers any compute block of the kernel ({', '.join(wanted)}): "
                       f"{len(mappings)} mappings found, none computes a whole block")


def _multi_instruction_covers(mappings, blocks: Sequence[str], cost_model: Any = None) -> dict[str, list]:
    """For each block no single mapping computes: the cheapest set of schedule-level mappings
    of one program that together compute all its statements (ISA Mapper §2.4 selection,
    :func:`tensorize.selection.rank_selections`, cycle cost by default)."""
    from tensorize.selection import CycleCostModel, rank_selections

    out: dict[str, list] = {}
    for b in blocks:
        pool = [m for m in mappings if origin_block(m) == b and not structural_transforms(m)]
        for sel in rank_selections(pool, cost_model or CycleCostModel()):
            stmts = set(_block_statements(sel.program, b, False))
            if sel.mappings and stmts and not (set(sel.uncovered) & stmts):
                chosen = [m for m in sel.mappings if set(m.statement_map) & stmts]
                out[b] = sorted(chosen, key=lambda m: min(m.statement_map))
                break
    return out


def simulate_plan(plan: Plan, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the planned program on numpy ``inputs`` with every planned block done as instruction calls.

    All the plan's mappings must share one program (the same transform
    sequence); the statements none covers run as scalar ISAMIR.  ``inputs``
    are named as the program's input buffers (before any pad layout).

    >>> from tensorize.kernels.zoo import depthwise_conv2d
    >>> from tensorize.search import find_mappings
    >>> k = depthwise_conv2d(1, 4, 6, 3, pad=1)
    >>> plan = plan_mappings(k.prim_func(), find_mappings(k.prim_func(), "accel", block=["depthwise"]))
    >>> [m.instruction.name for m in plan.cover("depthwise")]
    ['fill_32x32', 'scale_32x32', 'iadd_32x32']
    >>> x, w = k.random_inputs()
    >>> out = simulate_plan(plan, {"pad": np.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)]), "W": w})
    >>> bool(np.allclose(out["depthwise"], k.reference(x, w), atol=1e-5))
    True
    """
    from tensorize.isamir import collect_outputs, prepare_arrays, run_statement
    from tvm_ext.errors import MappingError

    chosen = plan.chosen
    programs = {m.program.key for m in chosen}
    if len(programs) != 1:
        raise MappingError(f"simulate_plan: the plan's mappings live on {len(programs)} different programs; "
                           "pick candidates with one transform sequence")
    program = chosen[0].program
    first = {min(m.statement_map): m for m in chosen}
    covered = set().union(*(set(m.statement_map) for m in chosen))
    arrays = prepare_arrays(program, inputs)
    for k in range(len(program.statements)):
        if k in first:
            first[k]._run_calls(arrays)
        elif k not in covered:
            run_statement(program, k, arrays)
    return collect_outputs(program, arrays)


def plan_cycles(plan: Plan, cost_model: Any = None) -> float:
    """Modelled cycles of the plan's instruction calls: ``calls x per-call cost`` summed
    (:class:`tensorize.selection.CycleCostModel` unless ``cost_model`` is given).

    >>> from tensorize.kernels.zoo import matmul
    >>> from tensorize.search import find_mappings
    >>> k = matmul(64, 64, 64)
    >>> plan = plan_mappings(k.prim_func(), find_mappings(k.prim_func(), "accel", block=["C"]))
    >>> plan_cycles(plan) >= 8 * (16 + 32768 / 1024)    # at least 8 calls of matmul_32x32x32
    True
    """
    from tensorize.selection import CycleCostModel

    model = cost_model or CycleCostModel()
    return float(sum(model.cost(m.instruction, m) for m in plan.chosen))


def _by_structure(mappings) -> dict[tuple, list]:
    """Mappings grouped by their structural transform sequence (a tuple of TransformSteps)."""
    out: dict[tuple, list] = {}
    for m in mappings:
        seq = structural_transforms(m)
        if seq:
            out.setdefault(seq, []).append(m)
    return out


def _base_program(group):
    """The program of the group reached by structural transforms alone (no buffer layouts).

    When every mapping of the group also went through a layout-changing
    schedule-level transform (``pad`` rounding extents up to a fixed-size
    instruction, as on the accelerator), the structural steps are replayed on
    the kernel as imported instead.
    """
    from tensorize.transforms import apply_steps
    from tvm_ext.errors import TvmExtError

    plain = [m.program for m in group if all(b.layout == () for b in m.program.buffers)]
    exact = [m.program for m in group if not (set(transform_names(m)) & SCHEDULE_LEVEL_TRANSFORMS)
             and all(b.layout == () for b in m.program.buffers)]
    if exact or plain:
        return (exact or plain)[0]
    for m in group:
        if getattr(m, "source", None) is None:
            continue
        try:
            base = apply_steps(m.source, structural_transforms(m))
        except TvmExtError:  # a step that only applies after its schedule-level companions
            continue
        if all(b.layout == () for b in base.buffers):
            return base
    return None


def _cover_program(prog, group, rank=mapping_rank) -> tuple[dict, int]:
    """Ranked covering mappings for each reducing exported block of ``prog``, and how many lack one."""
    from tensorize.exporters import export_groups

    chosen, uncovered = {}, 0
    for name, stmts in export_groups(prog):
        if not any(prog.statements[k].reduced_axes for k in stmts):
            continue
        cands = [m for m in group if m.blocks == (name,) and covers(m, name, exported=True)]
        if cands:
            chosen[name] = sorted(cands, key=rank)
        else:
            uncovered += 1
    return chosen, uncovered
