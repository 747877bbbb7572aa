"""What the transform passes share: operand chains, fresh temporaries, access rewriting, layouts.

>>> from tensorize.isamir import parse_isamir
>>> p = parse_isamir("forall i:4 { t[i] := A[i]; t[i] *= B[i]; C[i] := t[i]; }")
>>> [(c.statements, c.op) for c in find_chains(p)]
[([0, 1], '*=')]
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from ..feedback import FailureKind
from ..isamir import ASSOCIATIVE_OPS, Access, Affine, Buffer, Operand, Program, Statement
from .base import TransformError

__all__ = ["Chain", "find_chains", "chain_at", "new_temp", "replace_statements", "referenced_statements",
           "rewrite_accesses", "with_layout", "pure_rows"]




@dataclass
class Chain:
    """``X := o0; X op= o1; ...`` on one access, with no reduction inside."""

    access: Access
    statements: list[int]
    op: str
    operands: list[Operand]

    @property
    def start(self) -> int:
        return self.statements[0]

    @property
    def end(self) -> int:
        return self.statements[-1]


def find_chains(program: Program) -> list[Chain]:
    """Every maximal same-operator chain that starts with a plain ``:=``."""
    out = []
    stmts = program.statements
    for k, s in enumerate(stmts):
        if s.op != ":=" or s.fn is not None or s.reduced_axes or reads_buffer(s.src, s.dst.buffer):
            continue
        members, ops = [k], [s.src]
        op = stmts[k + 1].op if k + 1 < len(stmts) else None
        m = k + 1
        while m < len(stmts):
            t = stmts[m]
            if t.dst != s.dst or t.op != op or t.fn or t.reduced_axes or reads_buffer(t.src, s.dst.buffer):
                break
            members.append(m)
            ops.append(t.src)
            m += 1
        if len(members) > 1 and op in ASSOCIATIVE_OPS:
            out.append(Chain(s.dst, members, op, ops))
    return out


def reads_buffer(op: Operand, buffer: str) -> bool:
    return isinstance(op, Access) and op.buffer == buffer


def chain_at(program: Program, start: int) -> Chain:
    for c in find_chains(program):
        if c.start == start:
            return c
    raise TransformError(f"no operand chain starts at statement {start}")


def pure_rows(axes: Sequence[str]) -> tuple[Affine, ...]:
    return tuple(Affine.axis(a) for a in axes)


def new_temp(program: Program, axes: Sequence[str], dtype: str, taken: set[str]) -> tuple[Buffer, Access]:
    name = program.fresh_name("tmp", taken)
    taken.add(name)
    buf = Buffer(name, tuple(program.extent(a) for a in axes), dtype, "temp")
    return buf, Access(name, pure_rows(axes))


def replace_statements(program: Program, lo: int, hi: int, new: Sequence[Statement],
                        extra_buffers: Sequence[Buffer] = ()) -> Program:
    stmts = list(program.statements[:lo]) + list(new) + list(program.statements[hi + 1:])
    return program.with_statements(stmts, buffers=program.buffers + tuple(extra_buffers))


ORDER_KINDS = frozenset({FailureKind.OP, FailureKind.OPERAND, FailureKind.BUFFER, FailureKind.DATAFLOW,
                          FailureKind.ACCESS})


def referenced_statements(result, with_mappings: bool = True, kinds=ORDER_KINDS) -> list[tuple[int, float]]:
    """Haystack statements named by the mapper's failures of ``kinds`` (and mappings), with the depth."""
    out: list[tuple[int, float]] = []
    if result is None:
        return out
    for f in result.failures:
        if f.kind not in kinds:
            continue
        if f.hay_stmt is not None:
            out.append((f.hay_stmt, f.depth))
        out += [(h, f.depth) for h in f.statements]
    if with_mappings:
        for m in result.mappings:
            out += [(h, 100.0) for h in m.statement_map]
    return out


def rewrite_accesses(program: Program, fn) -> tuple[Statement, ...]:
    """Apply ``fn(access) -> access`` to every buffer access."""
    out = []
    for s in program.statements:
        src = fn(s.src) if isinstance(s.src, Access) else s.src
        out.append(replace(s, dst=fn(s.dst), src=src))
    return tuple(out)


def with_layout(buf: Buffer, op: tuple, new_shape: Sequence[int]) -> Buffer:
    if buf.role == "temp":
        return replace(buf, shape=tuple(new_shape))
    layout = buf.layout
    if op[0] == "pad" and layout and layout[-1][0] == "pad":  # merge consecutive pads
        op = ("pad", layout[-1][1], op[2])
        layout = layout[:-1]
    return replace(buf, shape=tuple(new_shape), layout=layout + (op,))
