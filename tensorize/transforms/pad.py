"""The pad pass (ISA Mapper §2.3): grow axes to a multiple of an instruction's size, reading zeros there."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

from ..feedback import ExtentMisfit
from ..isamir import ZERO_PRESERVING, Access, Const, Operand, Program, infer_shape
from .base import Transform, TransformError, TransformStep
from .common import with_layout

__all__ = ["Pad"]


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
            bufs.append(b if shape == b.shape else with_layout(b, ("pad", b.shape, shape), shape))
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
