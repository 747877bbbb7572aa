"""ISA Mapper §2.3: IR transformations on ISAMIR, each a pass behind one interface.

A :class:`Transform` has ``apply(program, **params) -> Program`` (raising
:class:`TransformError` when the rewrite would not preserve the program's
meaning) and ``propose(program, result, instruction)``, which reads the
deterministic mapper's feedback (:class:`~tensorize.mapper.MapResult`) and
returns the concrete :class:`TransformStep` s likely to repair it.  New passes
subclass :class:`Transform` and call :func:`register_transform`.

Shipped passes:

* ``factorization``: move a factor out of a sum (distributivity), e.g.
  Listing 3's separable convolution becomes a depthwise sum and a matmul;
* ``commutativity``: swap two operands of a ``*=``/``+=``/``max=`` chain;
* ``associativity``: regroup a chain's tail into its own temporary;
* ``transpose``: permute a buffer's dimensions (layout change);
* ``split`` / ``fuse`` / ``pad``: make an axis fit an instruction size;
* ``insert_unit_dim``: add a size-1 axis and dimension to some buffers.

Every pass keeps the kernel's interface: buffers whose layout changes record
it in ``Buffer.layout`` (see :func:`tensorize.isamir.evaluate`).

>>> from tensorize.isamir import parse_isamir, evaluate
>>> p = parse_isamir('''forall i:2,j:2,k:3 { C[i][j] := 0; tmp[i][j][k] := s; tmp[i][j][k] *= A[i][k];
...   tmp[i][j][k] *= B[k][j]; C[i][j] += tmp[i][j][k]; }''')
>>> q = apply_steps(p, [TransformStep("factorization", (("stmt", 4), ("operand", 0)))])
>>> print(q)
forall i,j,k {
C[i][j] := 0;
tmp2[i][j] := 0;
tmp1[i][j][k] := A[i][k];
tmp1[i][j][k] *= B[k][j];
tmp2[i][j] += tmp1[i][j][k];
tmp3[i][j] := tmp2[i][j];
tmp3[i][j] *= s;
C[i][j] += tmp3[i][j];
}
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Iterable, Sequence

from tvm_ext.errors import ScheduleError

from .feedback import CompetingAxes, ExtentMisfit, FailureKind, LayoutMismatch, MissingAxisRole, OpMismatch
from .isamir import (
    ASSOCIATIVE_OPS,
    ZERO_PRESERVING,
    Access,
    Affine,
    Axis,
    Buffer,
    Const,
    Operand,
    Program,
    Statement,
    infer_shape,
)

__all__ = [
    "TransformError",
    "TransformStep",
    "Transform",
    "Chain",
    "find_chains",
    "register_transform",
    "get_transform",
    "available_transforms",
    "apply_steps",
    "Factorization",
    "Commutativity",
    "Associativity",
    "Transpose",
    "Split",
    "Fuse",
    "Pad",
    "InsertUnitDim",
]


class TransformError(ScheduleError):
    """A transformation does not apply here (it would change the program's meaning)."""


@dataclass(frozen=True)
class TransformStep:
    """One concrete application: the pass name and its parameters."""

    transform: str
    params: tuple[tuple[str, Any], ...] = ()
    score: float = field(default=0.0, compare=False, hash=False)

    def apply(self, program: Program) -> Program:
        return get_transform(self.transform).apply(program, **dict(self.params))

    def __str__(self) -> str:
        args = ", ".join(f"{k}={_short(v)}" for k, v in self.params)
        return f"{self.transform}({args})"


def _short(v) -> str:
    if isinstance(v, (tuple, list)) and v and all(isinstance(x, (tuple, list)) and len(x) == 2 for x in v):
        return "(" + ",".join(f"{a}:{b}" for a, b in v) + ")"
    if isinstance(v, (tuple, list)):
        return "(" + ",".join(str(x) for x in v) + ")"
    return str(v)


class Transform:
    """Base class of the IR transformation passes (the interface others extend)."""

    name: ClassVar[str] = ""

    def apply(self, program: Program, **params) -> Program:
        raise NotImplementedError

    def propose(self, program: Program, result, instruction) -> list[TransformStep]:
        """Steps worth trying given the mapper's feedback (default: none)."""
        return []

    def step(self, score: float = 0.0, **params) -> TransformStep:
        return TransformStep(self.name, tuple(params.items()), score)


_REGISTRY: dict[str, Transform] = {}


def register_transform(transform: Transform, *, replace_existing: bool = False) -> Transform:
    """Make ``transform`` available to :func:`get_transform` and the search."""
    if not transform.name:
        raise TransformError("register_transform: the pass has no name")
    if transform.name in _REGISTRY and not replace_existing:
        raise TransformError(f"register_transform: {transform.name!r} is already registered")
    _REGISTRY[transform.name] = transform
    return transform


def get_transform(name: str) -> Transform:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise TransformError(f"unknown transformation {name!r} (have {sorted(_REGISTRY)})") from None


def available_transforms() -> list[str]:
    return list(_REGISTRY)


def apply_steps(program: Program, steps: Iterable[TransformStep]) -> Program:
    """Apply ``steps`` in order (each result is validated)."""
    for st in steps:
        program = st.apply(program).validate()
    return program


# --------------------------------------------------------------------------- helpers


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
        if s.op != ":=" or s.fn is not None or s.reduced_axes or _reads_buffer(s.src, s.dst.buffer):
            continue
        members, ops = [k], [s.src]
        op = stmts[k + 1].op if k + 1 < len(stmts) else None
        m = k + 1
        while m < len(stmts):
            t = stmts[m]
            if t.dst != s.dst or t.op != op or t.fn or t.reduced_axes or _reads_buffer(t.src, s.dst.buffer):
                break
            members.append(m)
            ops.append(t.src)
            m += 1
        if len(members) > 1 and op in ASSOCIATIVE_OPS:
            out.append(Chain(s.dst, members, op, ops))
    return out


def _reads_buffer(op: Operand, buffer: str) -> bool:
    return isinstance(op, Access) and op.buffer == buffer


def _chain_at(program: Program, start: int) -> Chain:
    for c in find_chains(program):
        if c.start == start:
            return c
    raise TransformError(f"no operand chain starts at statement {start}")


def _pure(axes: Sequence[str]) -> tuple[Affine, ...]:
    return tuple(Affine.axis(a) for a in axes)


def _new_temp(program: Program, axes: Sequence[str], dtype: str, taken: set[str]) -> tuple[Buffer, Access]:
    name = program.fresh_name("tmp", taken)
    taken.add(name)
    buf = Buffer(name, tuple(program.extent(a) for a in axes), dtype, "temp")
    return buf, Access(name, _pure(axes))


def _replace_statements(program: Program, lo: int, hi: int, new: Sequence[Statement],
                        extra_buffers: Sequence[Buffer] = ()) -> Program:
    stmts = list(program.statements[:lo]) + list(new) + list(program.statements[hi + 1:])
    return program.with_statements(stmts, buffers=program.buffers + tuple(extra_buffers))


_ORDER_KINDS = frozenset({FailureKind.OP, FailureKind.OPERAND, FailureKind.BUFFER, FailureKind.DATAFLOW,
                          FailureKind.ACCESS})


def _referenced(result, with_mappings: bool = True, kinds=_ORDER_KINDS) -> list[tuple[int, float]]:
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


def _rewrite_accesses(program: Program, fn) -> tuple[Statement, ...]:
    """Apply ``fn(access) -> access`` to every buffer access."""
    out = []
    for s in program.statements:
        src = fn(s.src) if isinstance(s.src, Access) else s.src
        out.append(replace(s, dst=fn(s.dst), src=src))
    return tuple(out)


def _with_layout(buf: Buffer, op: tuple, new_shape: Sequence[int]) -> Buffer:
    if buf.role == "temp":
        return replace(buf, shape=tuple(new_shape))
    layout = buf.layout
    if op[0] == "pad" and layout and layout[-1][0] == "pad":  # merge consecutive pads
        op = ("pad", layout[-1][1], op[2])
        layout = layout[:-1]
    return replace(buf, shape=tuple(new_shape), layout=layout + (op,))


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
            b, acc = _new_temp(program, program.ordered(other_axes), dtype, taken)
            bufs.append(b)
            inner.append(Statement(":=", acc, others[0], block=red.block))
            inner += [Statement("*=", acc, o, block=red.block) for o in others[1:]]
            inner_src: Operand = acc
        else:
            inner_src = others[0]
        v_axes = program.ordered(other_axes - moved)
        b, partial = _new_temp(program, v_axes, dtype, taken)
        bufs.append(b)
        # the partial sum's init comes first so the inner product chain stays contiguous
        new = [Statement(":=", partial, Const(0.0), block=red.block)] + inner
        new.append(Statement("+=", partial, inner_src, block=red.block))
        w_axes = program.ordered(set(red.dst.axes) | set(v_axes) | set(factor.axes))
        b, prod = _new_temp(program, w_axes, dtype, taken)
        bufs.append(b)
        new += [Statement(":=", prod, partial, block=red.block), Statement("*=", prod, factor, block=red.block),
                Statement(red.op, red.dst, prod, block=red.block)]
        return _replace_statements(program, chain.start, stmt, new, bufs)

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
        chain = _chain_at(program, stmt)
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
        refs = _referenced(result, with_mappings=not _symmetric(instruction))
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
        from .mapper import map_instruction

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
        chain = _chain_at(program, stmt)
        m = len(chain.operands)
        if not 1 <= split <= m - 2:
            raise TransformError(f"associativity: split {split} must leave two operands in the tail")
        tail = chain.operands[split:]
        dtype = program.buffer(chain.access.buffer).dtype
        buf, acc = _new_temp(program, program.ordered(set().union(*(o.axes for o in tail))), dtype, set())
        blk = program.statements[stmt].block
        new = [Statement(":=", acc, tail[0], block=blk)]
        new += [Statement(chain.op, acc, o, block=blk) for o in tail[1:]]
        new.append(Statement(":=", chain.access, chain.operands[0], block=blk))
        new += [Statement(chain.op, chain.access, o, block=blk) for o in chain.operands[1:split]]
        new.append(Statement(chain.op, chain.access, acc, block=blk))
        return _replace_statements(program, chain.start, chain.end, new, [buf])

    def propose(self, program: Program, result, instruction) -> list[TransformStep]:
        refs = [(f.hay_stmt, f.depth) for f in result.failures
                if f.kind in (FailureKind.OP, FailureKind.DATAFLOW) and f.hay_stmt is not None]
        out = []
        for c in find_chains(program):
            score = max((d for h, d in refs if c.start <= h <= c.end + 1), default=None)
            if score is not None and len(c.operands) >= 3:
                out += [self.step(score, stmt=c.start, split=p) for p in range(1, len(c.operands) - 1)]
        return out


# --------------------------------------------------------------------------- layout: transpose


class Transpose(Transform):
    """Permute the dimensions of ``buffer``: new dim d is old dim ``perm[d]``."""

    name = "transpose"

    def apply(self, program: Program, buffer: str, perm: Sequence[int]) -> Program:
        buf = program.buffer(buffer)
        perm = tuple(int(p) for p in perm)
        if sorted(perm) != list(range(buf.rank)):
            raise TransformError(f"transpose: {perm} is not a permutation of {buf.rank} dims of {buffer}")
        if perm == tuple(range(buf.rank)):
            raise TransformError("transpose: identity permutation")

        def fix(acc: Access) -> Access:
            return Access(acc.buffer, tuple(acc.rows[p] for p in perm)) if acc.buffer == buffer else acc

        new_buf = _with_layout(buf, ("transpose", perm, buf.shape), [buf.shape[p] for p in perm])
        bufs = tuple(new_buf if b.name == buffer else b for b in program.buffers)
        return replace(program, statements=_rewrite_accesses(program, fix), buffers=bufs)

    def propose(self, program: Program, result, instruction) -> list[TransformStep]:
        return [self.step(f.depth, buffer=f.detail.buffer, perm=f.detail.perm)
                for f in result.failures if isinstance(f.detail, LayoutMismatch)]


# --------------------------------------------------------------------------- split / fuse


class Split(Transform):
    """Split ``axis`` into ``axis_o * factor + axis_i``; pure dims of size = extent are reshaped too."""

    name = "split"

    def apply(self, program: Program, axis: str, factor: int) -> Program:
        ext = program.extent(axis)
        factor = int(factor)
        if ext is None or factor <= 1 or factor >= ext or ext % factor:
            raise TransformError(f"split: factor {factor} does not divide {axis}={ext} into two axes")
        outer = program.fresh_name(f"{axis}o")
        inner = program.fresh_name(f"{axis}i", {outer})
        by = Affine.of({outer: factor, inner: 1})
        reshape = _split_dims(program, axis, ext)
        axes = []
        for a in program.axes:
            axes += [Axis(outer, ext // factor, a.origin), Axis(inner, factor, a.origin)] if a.name == axis else [a]

        def fix(acc: Access) -> Access:
            rows: list[Affine] = []
            for d, r in enumerate(acc.rows):
                if reshape.get(acc.buffer) == d:
                    rows += [Affine.axis(outer), Affine.axis(inner)]
                else:
                    rows.append(r.substitute(axis, by))
            return Access(acc.buffer, tuple(rows))

        bufs = []
        for b in program.buffers:
            d = reshape.get(b.name)
            if d is None:
                bufs.append(b)
                continue
            shape = b.shape[:d] + (ext // factor, factor) + b.shape[d + 1:]
            bufs.append(_with_layout(b, ("reshape", b.shape, shape), shape))
        return replace(program, axes=tuple(axes), buffers=tuple(bufs), statements=_rewrite_accesses(program, fix))

    def propose(self, program: Program, result, instruction) -> list[TransformStep]:
        out = []
        sizes = sorted({e for e in instruction.sizes.values() if e})
        for f in result.failures:
            if not isinstance(f.detail, CompetingAxes):
                continue
            for y in sorted({y for ys in f.detail.candidates.values() for y in ys}):
                ext = program.extent(y) or 0
                out += [self.step(f.depth, axis=y, factor=n) for n in sizes if 1 < n < ext and ext % n == 0]
        return out


def _split_dims(program: Program, axis: str, ext: int) -> dict[str, int]:
    """Buffers indexed by exactly ``axis`` in the same dim of size ``ext`` in every access."""
    out = {}
    for b in program.buffers:
        accs = [a for _, _, a in program.accesses_of(b.name)]
        dims = set()
        for acc in accs:
            pure = [d for d, r in enumerate(acc.rows) if r.is_pure(axis)]
            dims.add(pure[0] if len(pure) == 1 else None)
        if accs and len(dims) == 1 and None not in dims:
            d = dims.pop()
            if b.shape[d] == ext:
                out[b.name] = d
    return out


class Fuse(Transform):
    """Fuse axes ``outer`` and ``inner`` into one of extent ``E_o * E_i`` (index ``o * E_i + i``).

    Legal when every access uses both or neither, either in one row with
    ``coeff(outer) == coeff(inner) * E_i`` or as adjacent pure dims
    ``[outer][inner]`` with ``shape[inner dim] == E_i`` (a reshape).
    """

    name = "fuse"

    def apply(self, program: Program, outer: str, inner: str) -> Program:
        eo, ei = program.extent(outer), program.extent(inner)
        if outer == inner or eo is None or ei is None:
            raise TransformError("fuse: need two distinct axes with known extents")
        fused = program.fresh_name(f"{outer}{inner}")
        reshape: dict[str, int] = {}
        for b in program.buffers:
            for _, _, acc in program.accesses_of(b.name):
                d = self._check(acc, outer, inner, ei, b)
                if d is not None:
                    if reshape.get(b.name, d) != d:
                        raise TransformError(f"fuse: {b.name} uses {outer},{inner} in different dims")
                    reshape[b.name] = d

        def fix(acc: Access) -> Access:
            rows: list[Affine] = []
            skip = False
            for d, r in enumerate(acc.rows):
                if skip:
                    skip = False
                    continue
                if reshape.get(acc.buffer) == d:
                    rows.append(Affine.axis(fused))
                    skip = True
                elif r.coeff(outer):
                    c = r.coeff(inner)
                    rest = Affine.of({a: v for a, v in r.terms if a not in (outer, inner)}, r.const)
                    rows.append(Affine.of({**rest.as_dict, fused: c}, r.const))
                else:
                    rows.append(r)
            return Access(acc.buffer, tuple(rows))

        axes = []
        for a in program.axes:
            if a.name == outer:
                axes.append(Axis(fused, eo * ei, a.origin))
            elif a.name != inner:
                axes.append(a)
        bufs = []
        for b in program.buffers:
            d = reshape.get(b.name)
            if d is None:
                bufs.append(b)
                continue
            shape = b.shape[:d] + (b.shape[d] * b.shape[d + 1],) + b.shape[d + 2:]
            bufs.append(_with_layout(b, ("reshape", b.shape, shape), shape))
        return replace(program, axes=tuple(axes), buffers=tuple(bufs), statements=_rewrite_accesses(program, fix))

    @staticmethod
    def _check(acc: Access, outer: str, inner: str, ei: int, buf: Buffer) -> int | None:
        """Dim to reshape (adjacent pure dims), None for the one-row form; raise when illegal."""
        ro = [d for d, r in enumerate(acc.rows) if r.coeff(outer)]
        ri = [d for d, r in enumerate(acc.rows) if r.coeff(inner)]
        if not ro and not ri:
            return None
        if len(ro) == 1 and ro == ri:
            r = acc.rows[ro[0]]
            if r.coeff(outer) == r.coeff(inner) * ei:
                return None
        if (len(ro) == 1 and len(ri) == 1 and ri[0] == ro[0] + 1 and acc.rows[ro[0]].is_pure(outer)
                and acc.rows[ri[0]].is_pure(inner) and buf.shape[ri[0]] == ei):
            return ro[0]
        raise TransformError(f"fuse: access {acc.format()} does not use {outer},{inner} as one index")

    def propose(self, program: Program, result, instruction) -> list[TransformStep]:
        out = []
        for f in result.failures:
            if not isinstance(f.detail, ExtentMisfit):
                continue
            axes = program.ordered(set().union(*(program.statements[h].axes for h in f.statements)))
            for bad in f.detail.axes:
                y, n, e = bad.hay_axis, bad.needle_extent, bad.hay_extent
                for z in axes:
                    if z == y or (e * (program.extent(z) or 0)) % n:
                        continue
                    out += [self.step(f.depth, outer=z, inner=y), self.step(f.depth, outer=y, inner=z)]
        return out


# --------------------------------------------------------------------------- pad


class Pad(Transform):
    """Extend axes (``sizes``: ``((axis, new_extent), ...)``): inputs read zeros there, outputs are cropped.

    Legal when an axis is spatial in every statement, or, where it is
    reduced, the reduction is a sum of values that are provably zero in the
    padding (an operand read through a zero-padded dimension).
    """

    name = "pad"

    def apply(self, program: Program, sizes: Sequence[tuple[str, int]]) -> Program:
        sizes = tuple((str(a), int(e)) for a, e in sizes)
        if not sizes:
            raise TransformError("pad: no axes given")
        order = {a: n for n, a in enumerate(program.axis_names)}
        sizes = tuple(sorted(sizes, key=lambda t: order.get(t[0], -1)))  # canonical order
        for axis, extent in sizes:
            program = self._pad_one(program, axis, extent)
        return program

    def _pad_one(self, program: Program, axis: str, extent: int) -> Program:
        old = program.extent(axis)
        if old is None or extent <= old:
            raise TransformError(f"pad: {axis}={old} cannot grow to {extent}")
        self._check(program, axis, old)
        axes = tuple(replace(a, extent=extent) if a.name == axis else a for a in program.axes)
        grown = replace(program, axes=axes)
        bufs = []
        for b in program.buffers:
            shape = infer_shape(grown, b.name, b.shape)
            bufs.append(b if shape == b.shape else _with_layout(b, ("pad", b.shape, shape), shape))
        return replace(grown, buffers=tuple(bufs))

    def _check(self, program: Program, axis: str, old: int) -> None:
        zero: dict[str, bool] = {}
        for k, s in enumerate(program.statements):
            if axis not in s.axes:
                continue
            for acc in s.accesses:
                if not isinstance(acc, Access):
                    continue
                mixed = [r for r in acc.rows if r.coeff(axis) and not r.is_pure(axis)]
                if mixed and (program.buffer(acc.buffer).role != "input" or axis in s.reduced_axes):
                    raise TransformError(f"pad: {acc.format()} in statement {k} mixes {axis} with other axes")
            src_zero = self._zero(program, s.src, axis, old, zero)
            if axis in s.reduced_axes:
                if s.op != "+=" or not src_zero:
                    raise TransformError(f"pad: statement {k} reduces over {axis} with values that are "
                                         "not zero in the padding")
                continue
            if axis not in s.dst.axes:
                continue
            prev = zero.get(s.dst.buffer, False)
            if s.op == ":=":
                now = src_zero and (s.fn is None or s.fn in ZERO_PRESERVING)
            elif s.op == "*=":
                now = prev or src_zero
            elif s.op in ("+=", "-=", "max=", "min="):
                now = prev and src_zero
            else:
                now = False
            zero[s.dst.buffer] = now

    @staticmethod
    def _zero(program: Program, op: Operand, axis: str, old: int, zero: dict) -> bool:
        if isinstance(op, Const):
            return op.value == 0
        buf = program.buffer(op.buffer)
        for d, r in enumerate(op.rows):
            if r.is_pure(axis):
                if buf.role == "input":
                    return buf.shape[d] == old
                return zero.get(op.buffer, False)
        return False

    def propose(self, program: Program, result, instruction) -> list[TransformStep]:
        out = []
        cheapest: dict[tuple, tuple[float, object]] = {}  # statements -> least padded misfit
        for f in result.failures:
            if not isinstance(f.detail, ExtentMisfit):
                continue
            misfits = f.detail.axes
            out.append(self.step(f.depth, sizes=tuple((b.hay_axis, _round_up(b.hay_extent, b.needle_extent))
                                                      for b in misfits)))
            growth = math.prod(_round_up(b.hay_extent, b.needle_extent) / b.hay_extent for b in misfits)
            key = f.statements
            if key not in cheapest or growth < cheapest[key][0]:
                cheapest[key] = (growth, f)
        if len(cheapest) > 1:  # one step that fits the cheapest misfit of every statement group
            need: dict[str, int] = {}
            for _, f in cheapest.values():
                for b in f.detail.axes:
                    need[b.hay_axis] = math.lcm(need.get(b.hay_axis, 1), b.needle_extent)
            sizes = tuple((y, int(math.ceil(program.extent(y) / m) * m)) for y, m in need.items())
            top = max(f.depth for _, f in cheapest.values())
            out.insert(0, self.step(top + 0.5, sizes=sizes))
        return out


def _round_up(extent: int, multiple: int) -> int:
    return int(math.ceil(extent / multiple) * multiple)


# --------------------------------------------------------------------------- insert unit dim


class InsertUnitDim(Transform):
    """Add a new size-1 axis and a trailing size-1 dimension (indexed by it) to ``buffers``."""

    name = "insert_unit_dim"

    def apply(self, program: Program, buffers: Sequence[str]) -> Program:
        buffers = tuple(buffers)
        if not buffers:
            raise TransformError("insert_unit_dim: no buffers given")
        for b in buffers:
            program.buffer(b)
        u = program.fresh_name("u")

        def fix(acc: Access) -> Access:
            return Access(acc.buffer, acc.rows + (Affine.axis(u),)) if acc.buffer in buffers else acc

        bufs = tuple(_with_layout(b, ("reshape", b.shape, b.shape + (1,)), b.shape + (1,)) if b.name in buffers
                     else b for b in program.buffers)
        return replace(program, axes=program.axes + (Axis(u, 1),), buffers=bufs,
                       statements=_rewrite_accesses(program, fix))

    def propose(self, program: Program, result, instruction) -> list[TransformStep]:
        out = []
        for f in result.failures:
            if isinstance(f.detail, MissingAxisRole) and f.detail.hay_buffers:
                out.append(self.step(f.depth, buffers=f.detail.hay_buffers))
        return out


for _t in (Factorization(), Commutativity(), Associativity(), Transpose(), Split(), Fuse(), Pad(), InsertUnitDim()):
    register_transform(_t)
