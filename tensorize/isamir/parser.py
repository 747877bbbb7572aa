"""ISAMIR's text form (the paper's Listing 4) parsed into a :class:`~tensorize.isamir.ir.Program`.

>>> print(parse_isamir("forall i:8 { B[i] := A[i]; B[i] *= 2; }"))
forall i {
B[i] := A[i];
B[i] *= 2;
}
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Iterable, Mapping, Sequence

from tvm_ext.errors import InputError

from .ir import FUNCTIONS, Access, Affine, Axis, Buffer, Const, Program, Statement, infer_shape

__all__ = ["parse_isamir"]


def _parse_affine(text: str, axes: set[str], constants: Mapping[str, int], where: str) -> Affine:
    s = text.replace(" ", "")
    if not s:
        raise InputError(f"{where}: empty index")
    coeffs: dict[str, int] = {}
    const = 0
    for term in re.findall(r"[+-]?[^+-]+", s):
        sign = -1 if term.startswith("-") else 1
        term = term.lstrip("+-")
        factors = term.split("*")
        c = sign
        axis = None
        for f in factors:
            if f.isdigit():
                c *= int(f)
            elif f in axes:
                if axis is not None:
                    raise InputError(f"{where}: non-affine index {text!r} (product of axes)")
                axis = f
            elif f in constants:
                c *= int(constants[f])
            else:
                raise InputError(f"{where}: unknown name {f!r} in index {text!r}")
        if axis is None:
            const += c
        else:
            coeffs[axis] = coeffs.get(axis, 0) + c
    return Affine.of(coeffs, const)


def _parse_operand(text: str, axes: set[str], constants: Mapping[str, int], where: str):
    text = text.strip()
    m = re.fullmatch(r"(\w+)\((.*)\)", text)
    if m and m.group(1) in FUNCTIONS:
        inner, _ = _parse_operand(m.group(2), axes, constants, where)
        return inner, m.group(1)
    try:
        return Const(float(text)), None
    except ValueError:
        pass
    m = re.fullmatch(r"([A-Za-z_]\w*)((?:\[[^\]]*\])*)", text)
    if not m:
        raise InputError(f"{where}: cannot parse operand {text!r}")
    rows = tuple(
        _parse_affine(ix, axes, constants, where) for ix in re.findall(r"\[([^\]]*)\]", m.group(2))
    )
    return Access(m.group(1), rows), None


def parse_isamir(
    text: str,
    *,
    extents: Mapping[str, int | None] | None = None,
    constants: Mapping[str, int] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
    temps: Iterable[str] | None = None,
    dtype: str = "float32",
    name: str = "main",
) -> Program:
    """Parse the paper's listing syntax into a :class:`Program`.

    Domains come from ``forall i:16, j`` or ``extents`` (a missing extent means
    *any size*).  Names that are not axes (``s`` in ``s*i``) are looked up in
    ``constants``.  Buffers named ``tmp...`` (or listed in ``temps``) are
    temporaries; other written buffers are outputs, the rest inputs.

    >>> parse_isamir("forall i:8 { C[i] := A[i]; C[i] += B[i]; }").buffer("C").shape
    (8,)
    """
    constants = dict(constants or {})
    body = text.strip()
    m = re.match(r"forall\s+([^{]*)\{(.*)\}\s*$", body, re.S)
    if not m:
        raise InputError("ISAMIR text: expected 'forall axes { statements }'")
    ext = dict(extents or {})
    axes: list[Axis] = []
    for item in filter(None, (x.strip() for x in m.group(1).split(","))):
        nm, _, e = item.partition(":")
        nm = nm.strip()
        e = e.strip()
        if e and e != "?":
            ext.setdefault(nm, int(e))
        axes.append(Axis(nm, ext.get(nm)))
    axis_set = {a.name for a in axes}
    statements = []
    for k, raw in enumerate(x.strip() for x in m.group(2).split(";")):
        if not raw:
            continue
        where = f"ISAMIR text statement {k} `{raw}`"
        sm = re.fullmatch(r"(.+?)\s*(:=|\+=|-=|\*=|/=|max=|min=)\s*(.+)", raw, re.S)
        if not sm:
            raise InputError(f"{where}: expected 'dst op= src'")
        dst, fn0 = _parse_operand(sm.group(1), axis_set, constants, where)
        if not isinstance(dst, Access) or fn0:
            raise InputError(f"{where}: destination must be a buffer access")
        src, fn = _parse_operand(sm.group(3), axis_set, constants, where)
        statements.append(Statement(sm.group(2), dst, src, fn))
    temps = set(temps or ())
    written = {s.dst.buffer for s in statements}
    order: list[str] = []
    for s in statements:
        for acc in (s.src, s.dst):
            if isinstance(acc, Access) and acc.buffer not in order:
                order.append(acc.buffer)
    prog = Program(tuple(axes), (), tuple(statements), name=name)
    buffers = []
    for b in order:
        role = "temp" if (b in temps or b.startswith("tmp")) else ("output" if b in written else "input")
        given = (shapes or {}).get(b)
        shape = tuple(given) if given is not None else infer_shape(prog, b)
        buffers.append(Buffer(b, shape, dtype, role))
    params = tuple(b.name for b in buffers if b.role == "input") + tuple(
        b.name for b in buffers if b.role == "output"
    )
    return replace(prog, buffers=tuple(buffers), params=params).validate()
