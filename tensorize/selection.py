"""ISA Mapper §2.4: instruction selection over the mappings found.

Mappings found on the same (transformed) program are combined into a cover
of its statements by **non-overlapping** mappings; statements no instruction
covers run as scalar code.  The default heuristic is the paper's: the fewest
instruction calls (a mapping costs its call count, a scalar statement one
call per point of its domain).  Any object with ``cost(instruction, mapping)``
(and optionally ``fallback_cost(program, statement)``) can replace it, e.g.
:class:`CycleCostModel` or a learned model from the tuning package.

>>> from tensorize.isamir import parse_isamir
>>> from tensorize.search import find_mappings
>>> p = parse_isamir('''forall i:32,j:32,k:32 { C[i][j] := 0; tmp[i][j][k] := A[i][k];
...   tmp[i][j][k] *= B[k][j]; C[i][j] += tmp[i][j][k]; }''')
>>> sel = select_instructions(find_mappings(p, "x86"), program=p)
>>> [m.instruction.name for m in sel.mappings], sel.uncovered
(['fill_16', 'matmul_8x32xk'], [])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Protocol, Sequence

from tvm_ext.errors import MappingError

from .isamir import Program
from .mapper import Mapping

__all__ = ["CostModel", "CallCountModel", "CycleCostModel", "Selection", "select_instructions", "rank_selections"]


class CostModel(Protocol):
    """What :func:`select_instructions` asks of a cost model."""

    def cost(self, instruction, mapping: Mapping) -> float:  # pragma: no cover - protocol
        ...


class CallCountModel:
    """§2.4 default: the number of instruction calls (scalar statements: one per point)."""

    def cost(self, instruction, mapping: Mapping) -> float:
        return float(mapping.calls)

    def fallback_cost(self, program: Program, statement: int) -> float:
        return float(program.points(statement))


class CycleCostModel:
    """Modelled cycles: calls x the instruction's per-call cost; scalar code at ``scalar_cycles`` per point."""

    def __init__(self, scalar_cycles: float = 1.0):
        self.scalar_cycles = float(scalar_cycles)

    def cost(self, instruction, mapping: Mapping) -> float:
        return mapping.calls * instruction.call_cost(mapping.tile)

    def fallback_cost(self, program: Program, statement: int) -> float:
        return program.points(statement) * self.scalar_cycles


@dataclass
class Selection:
    """A cover of ``program``'s statements: chosen mappings plus scalar leftovers."""

    program: Program
    transforms: tuple
    mappings: list[Mapping]
    uncovered: list[int]
    cost: float
    source: Program | None = None

    @property
    def calls(self) -> int:
        return sum(m.calls for m in self.mappings)

    def describe(self) -> dict[str, Any]:
        return {
            "cost": self.cost,
            "transforms": [str(t) for t in self.transforms],
            "mappings": [m.describe() for m in self.mappings],
            "uncovered_statements": list(self.uncovered),
        }

    def __str__(self) -> str:
        lines = [f"selection cost {self.cost:g}" + (f" after {' > '.join(map(str, self.transforms))}"
                                                    if self.transforms else "")]
        lines += [f"  {sorted(m.statement_map)}: {m.summary()}" for m in self.mappings]
        order = self.program.axis_names
        lines += [f"  [{k}]: scalar `{self.program.statements[k].format(order)}`" for k in self.uncovered]
        return "\n".join(lines)


def _fallback(model, program: Program, k: int) -> float:
    f = getattr(model, "fallback_cost", None)
    return float(f(program, k)) if f is not None else float(program.points(k))


def _cover(program: Program, mappings: Sequence[Mapping], model) -> tuple[float, list[Mapping], list[int]]:
    """Cheapest exact cover of the statements by non-overlapping mappings or scalar fallback."""
    n = len(program.statements)
    best_per_mask: dict[int, tuple[float, Mapping]] = {}
    for m in mappings:
        mask = 0
        for h in m.statement_map:
            mask |= 1 << h
        c = float(model.cost(m.instruction, m))
        if mask not in best_per_mask or c < best_per_mask[mask][0]:
            best_per_mask[mask] = (c, m)
    by_stmt: dict[int, list[tuple[int, float, Mapping]]] = {k: [] for k in range(n)}
    for mask, (c, m) in best_per_mask.items():
        low = (mask & -mask).bit_length() - 1
        by_stmt[low].append((mask, c, m))
    fallback = [_fallback(model, program, k) for k in range(n)]
    memo: dict[int, tuple[float, tuple]] = {}
    full = (1 << n) - 1

    def solve(covered: int) -> tuple[float, tuple]:
        if covered == full:
            return 0.0, ()
        if covered in memo:
            return memo[covered]
        s = (~covered & (covered + 1)).bit_length() - 1  # lowest uncovered statement
        rest, picks = solve(covered | (1 << s))
        best = (fallback[s] + rest, (("scalar", s),) + picks)
        for mask, c, m in by_stmt[s]:
            if mask & covered:
                continue
            rest, picks = solve(covered | mask)
            if c + rest < best[0]:
                best = (c + rest, (("map", m),) + picks)
        memo[covered] = best
        return best

    cost, picks = solve(0)
    chosen = [m for kind, m in picks if kind == "map"]
    scalar = [s for kind, s in picks if kind == "scalar"]
    return cost, chosen, scalar


def rank_selections(mappings: Iterable[Mapping], cost_model=None, *, program: Program | None = None) -> list[Selection]:
    """One best cover per transformed program, cheapest first.

    ``program`` (the kernel as imported) adds the untransformed program as a
    candidate even when no mapping was found on it.
    """
    model = cost_model or CallCountModel()
    if not hasattr(model, "cost"):
        raise MappingError("select_instructions: the cost model needs a cost(instruction, mapping) method")
    groups: dict[tuple, tuple[Program, tuple, list[Mapping]]] = {}
    if program is not None:
        groups[program.key] = (program, (), [])
    for m in mappings:
        entry = groups.setdefault(m.program.key, (m.program, tuple(m.transforms), []))
        entry[2].append(m)
    out = []
    for prog, steps, ms in groups.values():
        cost, chosen, scalar = _cover(prog, ms, model)
        source = ms[0].source if ms else program
        out.append(Selection(prog, steps, sorted(chosen, key=lambda m: min(m.statement_map)), scalar, cost, source))
    out.sort(key=lambda s: (s.cost, len(s.transforms), len(s.uncovered)))
    return out


def select_instructions(mappings: Iterable[Mapping], cost_model=None, *, program: Program | None = None) -> Selection:
    """§2.4: the cheapest non-overlapping choice of mappings (default: fewest calls).

    Raises :class:`~tvm_ext.errors.MappingError` when given no mappings and no ``program``.
    """
    ranked = rank_selections(mappings, cost_model, program=program)
    if not ranked:
        raise MappingError("select_instructions: no mappings to choose from (and no program given)")
    return ranked[0]
