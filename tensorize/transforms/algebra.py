"""Algebraic passes (ISA Mapper §2.3): factorization (distributivity), commutativity, associativity."""
from __future__ import annotations

from dataclasses import replace

from ..feedback import FailureKind, OpMismatch
from ..isamir import Access, Buffer, Const, Operand, Program, Statement
from .base import Transform, TransformError, TransformStep
from .common import Chain, chain_at, find_chains, new_temp, referenced_statements, replace_statements

__all__ = ["Factorization", "Commutativity", "Associativity"]


# --------------------------------------------------------------------------- factorization


class Factorization(Transform):
    """``C += sum_R (X0 * ... * Xf * ...)`` -> ``C += sum_{R-R'} Xf * (sum_R' prod others)``.

    ``stmt`` is the reduction ``C += T`` fed by the product chain of ``T``;
    ``operand`` picks the factor ``Xf``, which must not depend on some reduced
    axes ``R'`` (the ones it is moved out of).  Distributivity of ``*`` over
    ``+`` (ISA Mapper §2.3, separable depthwise convolution, Listing 3).
    """

    name = "factorization"

    def apply(self, program: Program, stmt: int, operand: int) -> Program:
        red = program.statements[stmt]
        chain = self._feeding_chain(program, stmt)
        if not 0 <= operand < len(chain.operands):
            raise TransformError(f"factorization: operand {operand} out of range")
        factor = chain.operands[operand]
        others = [o for n, o in enumerate(chain.operands) if n != operand]
        reduced = set(red.reduced_axes)
        moved = reduced - set(factor.axes)
        other_axes = set().union(*(o.axes for o in others))
        if not moved:
            raise TransformError("factorization: the factor depends on every reduced axis")
        if not moved <= other_axes:
            raise TransformError("factorization: a reduced axis appears in no remaining operand")
        dtype = program.buffer(chain.access.buffer).dtype
        taken: set[str] = {chain.access.buffer}
        bufs: list[Buffer] = []
        inner: list[Statement] = []
        if len(others) > 1:
            b, acc = new_temp(program, program.ordered(other_axes), dtype, taken)
            bufs.append(b)
            inner.append(Statement(":=", acc, others[0], block=red.block))
            inner += [Statement("*=", acc, o, block=red.block) for o in others[1:]]
            inner_src: Operand = acc
        else:
            inner_src = others[0]
        v_axes = program.ordered(other_axes - moved)
        b, partial = new_temp(program, v_axes, dtype, taken)
        bufs.append(b)
        # the partial sum's init comes first so the inner product chain stays contiguous
        new = [Statement(":=", partial, Const(0.0), block=red.block)] + inner
        new.append(Statement("+=", partial, inner_src, block=red.block))
        w_axes = program.ordered(set(red.dst.axes) | set(v_axes) | set(factor.axes))
        b, prod = new_temp(program, w_axes, dtype, taken)
        bufs.append(b)
        new += [Statement(":=", prod, partial, block=red.block), Statement("*=", prod, factor, block=red.block),
                Statement(red.op, red.dst, prod, block=red.block)]
        return replace_statements(program, chain.start, stmt, new, bufs)

    def _feeding_chain(self, program: Program, stmt: int) -> Chain:
        if not 0 <= stmt < len(program.statements):
            raise TransformError(f"factorization: no statement {stmt}")
        red = program.statements[stmt]
        if red.op != "+=" or not red.reduced_axes or not isinstance(red.src, Access):
            raise TransformError(f"factorization: statement {stmt} is not a sum reduction of a temporary")
        t = red.src.buffer
        if program.buffer(t).role != "temp":
            raise TransformError(f"factorization: {t} is not a temporary")
        for c in find_chains(program):
            if c.access == red.src and c.end == stmt - 1 and c.op == "*=":
                outside = [r for r in program.readers(t) if r not in c.statements]
                if outside == [stmt] and program.writers(t) == c.statements:
                    return c
        raise TransformError(f"factorization: no product chain feeds statement {stmt}")

    def sites(self, program: Program) -> list[tuple[int, int]]:
        """Every legal (stmt, operand)."""
        out = []
        for k in range(len(program.statements)):
            try:
                chain = self._feeding_chain(program, k)
            except TransformError:
                continue
            red = program.statements[k]
            for n, o in enumerate(chain.operands):
                others = set().union(*(x.axes for m, x in enumerate(chain.operands) if m != n))
                moved = set(red.reduced_axes) - set(o.axes)
                if moved and moved <= others:
                    out.append((k, n))
        return out

    def propose(self, program: Program, result, instruction) -> list[TransformStep]:
        # feedback: the needle's reduction met a '*=' (op mismatch), or a chain statement
        # blocked the match (dataflow): an extra factor sits in the product.
        hot: dict[int, float] = {}
        for f in result.failures:
            if isinstance(f.detail, OpMismatch) and f.detail == OpMismatch("+=", "*="):
                hot[f.hay_stmt] = max(hot.get(f.hay_stmt, 0), f.depth)
            elif f.kind is FailureKind.DATAFLOW and f.hay_stmt is not None:
                hot[f.hay_stmt] = max(hot.get(f.hay_stmt, 0), f.depth)
        out = []
        for k, n in self.sites(program):
            chain = self._feeding_chain(program, k)
            score = max((hot.get(s, -1) for s in chain.statements), default=-1)
            if score >= 0:
                out.append(self.step(score + 1, stmt=k, operand=n))
        return out


# --------------------------------------------------------------------------- commutativity / associativity


class Commutativity(Transform):
    """Swap operands 0 and ``swap`` of the chain starting at ``stmt`` (``a*b = b*a``)."""

    name = "commutativity"

    def apply(self, program: Program, stmt: int, swap: int) -> Program:
        chain = chain_at(program, stmt)
        if not 1 <= swap < len(chain.operands):
            raise TransformError(f"commutativity: operand {swap} out of range")
        ops = list(chain.operands)
        ops[0], ops[swap] = ops[swap], ops[0]
        stmts = list(program.statements)
        for k, o in zip(chain.statements, ops):
            stmts[k] = replace(stmts[k], src=o)
        return program.with_statements(stmts)

    def propose(self, program: Program, result, instruction) -> list[TransformStep]:
        # failures near a chain suggest reordering it; a found mapping suggests looking for its
        # commuted twin, unless swapping the needle's operands only renames them (a*b on a
        # symmetric instruction gives the same calls).
        refs = referenced_statements(result, with_mappings=not _symmetric(instruction))
        out = []
        for c in find_chains(program):
            score = max((d for h, d in refs if c.start <= h <= c.end + 1), default=None)
            if score is None:
                continue
            out += [self.step(score, stmt=c.start, swap=b) for b in range(1, len(c.operands))]
        return out


_SYMMETRIC: dict[tuple, bool] = {}


def _symmetric(instruction) -> bool:
    """True when commuting the needle's first chain maps back onto it with the identity axis map."""
    key = (instruction.name, instruction.needle.key)
    if key not in _SYMMETRIC:
        from ..mapper import map_instruction

        needle = instruction.needle
        chains = find_chains(needle)
        sym = False
        if chains:
            swapped = Commutativity().apply(needle, stmt=chains[0].start, swap=1)
            res = map_instruction(swapped, instruction)
            sym = any(all(x == y for x, y in m.axis_map.items()) for m in res.mappings)
        _SYMMETRIC[key] = sym
    return _SYMMETRIC[key]


class Associativity(Transform):
    """Regroup ``X := o0 op ... op o_{p-1} op (o_p op ... op o_m)``: the tail gets its own temporary."""

    name = "associativity"

    def apply(self, program: Program, stmt: int, split: int) -> Program:
        chain = chain_at(program, stmt)
        m = len(chain.operands)
        if not 1 <= split <= m - 2:
            raise TransformError(f"associativity: split {split} must leave two operands in the tail")
        tail = chain.operands[split:]
        dtype = program.buffer(chain.access.buffer).dtype
        buf, acc = new_temp(program, program.ordered(set().union(*(o.axes for o in tail))), dtype, set())
        blk = program.statements[stmt].block
        new = [Statement(":=", acc, tail[0], block=blk)]
        new += [Statement(chain.op, acc, o, block=blk) for o in tail[1:]]
        new.append(Statement(":=", chain.access, chain.operands[0], block=blk))
        new += [Statement(chain.op, chain.access, o, block=blk) for o in chain.operands[1:split]]
        new.append(Statement(chain.op, chain.access, acc, block=blk))
        return replace_statements(program, chain.start, chain.end, new, [buf])

    def propose(self, program: Program, result, instruction) -> list[TransformStep]:
        refs = [(f.hay_stmt, f.depth) for f in result.failures
                if f.kind in (FailureKind.OP, FailureKind.DATAFLOW) and f.hay_stmt is not None]
        out = []
        for c in find_chains(program):
            score = max((d for h, d in refs if c.start <= h <= c.end + 1), default=None)
            if score is not None and len(c.operands) >= 3:
                out += [self.step(score, stmt=c.start, split=p) for p in range(1, len(c.operands) - 1)]
        return out
