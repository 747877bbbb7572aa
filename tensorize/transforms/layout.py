"""Shape and layout passes (ISA Mapper §2.3): transpose a buffer, split or fuse axes, add a unit dimension."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ..feedback import CompetingAxes, ExtentMisfit, LayoutMismatch, MissingAxisRole
from ..isamir import Access, Affine, Axis, Buffer, Program
from .base import Transform, TransformError, TransformStep
from .common import rewrite_accesses, with_layout

__all__ = ["Transpose", "Split", "Fuse", "InsertUnitDim"]


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

        new_buf = with_layout(buf, ("transpose", perm, buf.shape), [buf.shape[p] for p in perm])
        bufs = tuple(new_buf if b.name == buffer else b for b in program.buffers)
        return replace(program, statements=rewrite_accesses(program, fix), buffers=bufs)

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
            bufs.append(with_layout(b, ("reshape", b.shape, shape), shape))
        return replace(program, axes=tuple(axes), buffers=tuple(bufs), statements=rewrite_accesses(program, fix))

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
            bufs.append(with_layout(b, ("reshape", b.shape, shape), shape))
        return replace(program, axes=tuple(axes), buffers=tuple(bufs), statements=rewrite_accesses(program, fix))

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

        bufs = tuple(with_layout(b, ("reshape", b.shape, b.shape + (1,)), b.shape + (1,)) if b.name in buffers
                     else b for b in program.buffers)
        return replace(program, axes=program.axes + (Axis(u, 1),), buffers=bufs,
                       statements=rewrite_accesses(program, fix))

    def propose(self, program: Program, result, instruction) -> list[TransformStep]:
        out = []
        for f in result.failures:
            if isinstance(f.detail, MissingAxisRole) and f.detail.hay_buffers:
                out.append(self.step(f.depth, buffers=f.detail.hay_buffers))
        return out
