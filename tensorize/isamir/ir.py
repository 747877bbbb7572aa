"""ISAMIR's data (ISA Mapper §2.1): affine rows, accesses, statements, axes, buffers, programs.

>>> from tensorize.isamir import parse_isamir
>>> p = parse_isamir("forall i:4,k:2 { c[i] += A[i][k]; }")
>>> sorted(p.statements[0].reduced_axes), p.buffer("A").shape
(['k'], (4, 2))
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence, Union

import numpy as np

from tvm_ext.errors import InputError

__all__ = [
    "OPS",
    "REDUCE_OPS",
    "ASSOCIATIVE_OPS",
    "FUNCTIONS",
    "ZERO_PRESERVING",
    "Affine",
    "Access",
    "Const",
    "Operand",
    "Statement",
    "Axis",
    "Buffer",
    "Program",
    "infer_shape",
]

#: The statement operators.  ``:=`` assigns; the others update ``dst`` in place.
OPS = (":=", "+=", "-=", "*=", "/=", "max=", "min=")
#: Operators that may reduce over axes present only in the source.
REDUCE_OPS = frozenset({"+=", "*=", "max=", "min=", "-="})
#: Commutative and associative update operators.
ASSOCIATIVE_OPS = frozenset({"+=", "*=", "max=", "min="})


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


#: Unary functions a ``:=`` statement may apply to its source.
FUNCTIONS = {
    "exp": np.exp,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "sqrt": np.sqrt,
    "log": np.log,
    "abs": np.abs,
    "neg": np.negative,
}
#: Functions with f(0) == 0 (padding with zeros stays zero through them).
ZERO_PRESERVING = frozenset({"tanh", "sqrt", "abs", "neg"})


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Affine:
    """One index expression ``sum(coeff * axis) + const`` (a row of an access matrix).

    ``terms`` is sorted by axis name and never holds a zero coefficient.

    >>> Affine.of({"x": 1, "d": 1}).coeff("d")
    1
    """

    terms: tuple[tuple[str, int], ...] = ()
    const: int = 0

    @staticmethod
    def of(coeffs: Mapping[str, int] | None = None, const: int = 0) -> "Affine":
        """Build from ``{axis: coefficient}`` (zeros dropped)."""
        items = tuple(sorted((a, int(c)) for a, c in (coeffs or {}).items() if int(c) != 0))
        return Affine(items, int(const))

    @staticmethod
    def axis(name: str) -> "Affine":
        """The pure index ``name``."""
        return Affine(((name, 1),), 0)

    @functools.cached_property
    def as_dict(self) -> dict[str, int]:
        return dict(self.terms)

    def coeff(self, axis: str) -> int:
        """Coefficient of ``axis`` (0 when absent)."""
        return self.as_dict.get(axis, 0)

    @functools.cached_property
    def axes(self) -> frozenset[str]:
        return frozenset(a for a, _ in self.terms)

    def is_pure(self, axis: str) -> bool:
        """True when the row is exactly ``1 * axis`` (no other axis, no offset)."""
        return self.terms == ((axis, 1),) and self.const == 0

    def substitute(self, axis: str, by: "Affine") -> "Affine":
        """Replace ``axis`` by the affine expression ``by``."""
        c = self.coeff(axis)
        if c == 0:
            return self
        d = dict(self.as_dict)
        del d[axis]
        for a, k in by.terms:
            d[a] = d.get(a, 0) + c * k
        return Affine.of(d, self.const + c * by.const)

    def rename(self, names: Mapping[str, str]) -> "Affine":
        return Affine.of({names.get(a, a): c for a, c in self.terms}, self.const)

    def evaluate(self, env: Mapping[str, object]):
        """Value for axis values ``env`` (ints or numpy arrays)."""
        out = self.const
        for a, c in self.terms:
            out = out + c * env[a]
        return out

    def format(self, order: Sequence[str] | None = None) -> str:
        """Paper style: ``x+d`` when all coefficients are 1, ``2*i + di`` otherwise."""
        rank = {a: n for n, a in enumerate(order or ())}
        terms = sorted(self.terms, key=lambda t: (rank.get(t[0], len(rank)), t[0]))
        spaced = any(abs(c) != 1 for _, c in terms)
        parts: list[str] = []
        for a, c in terms:
            mag = abs(c)
            text = a if mag == 1 else f"{mag}*{a}"
            parts.append(("-" if c < 0 else "+", text))
        if self.const or not parts:
            parts.append(("-" if self.const < 0 else "+", str(abs(self.const))))
        sep = " " if spaced else ""
        out = ""
        for n, (sign, text) in enumerate(parts):
            if n == 0:
                out = ("-" if sign == "-" else "") + text
            else:
                out += f"{sep}{sign}{sep}{text}"
        return out


@dataclass(frozen=True)
class Access:
    """``buffer[row0][row1]...``: one affine row per buffer dimension."""

    buffer: str
    rows: tuple[Affine, ...] = ()

    @functools.cached_property
    def axes(self) -> frozenset[str]:
        out: set[str] = set()
        for r in self.rows:
            out |= r.axes
        return frozenset(out)

    def matrix(self, axes: Sequence[str]) -> np.ndarray:
        """The access matrix (buffer dims x ``axes``).

        >>> Access("A", (Affine.of({"x": 1, "d": 1}),)).matrix(["x", "d", "k"]).tolist()
        [[1, 1, 0]]
        """
        return np.array([[r.coeff(a) for a in axes] for r in self.rows], dtype=np.int64).reshape(
            len(self.rows), len(axes)
        )

    def rename(self, names: Mapping[str, str]) -> "Access":
        return Access(self.buffer, tuple(r.rename(names) for r in self.rows))

    def format(self, order: Sequence[str] | None = None) -> str:
        return self.buffer + "".join(f"[{r.format(order)}]" for r in self.rows)


@dataclass(frozen=True)
class Const:
    """A scalar constant operand."""

    value: float

    @property
    def axes(self) -> frozenset[str]:
        return frozenset()

    def format(self, order: Sequence[str] | None = None) -> str:
        v = float(self.value)
        if math.isfinite(v) and v == int(v) and abs(v) < 1e15:
            return str(int(v))
        return repr(v)


Operand = Union[Access, Const]


@dataclass(frozen=True)
class Statement:
    """``dst op= fn(src)``: one operation over the statement's whole domain.

    ``fn`` (a key of :data:`FUNCTIONS`) is only allowed with ``:=``.
    ``block`` names the TIR block / TE compute the statement came from.
    """

    op: str
    dst: Access
    src: Operand
    fn: str | None = None
    block: str | None = None

    @functools.cached_property
    def axes(self) -> frozenset[str]:
        return self.dst.axes | self.src.axes

    @functools.cached_property
    def reduced_axes(self) -> frozenset[str]:
        """Axes the statement reduces over (in the source, not the destination)."""
        return self.src.axes - self.dst.axes

    @functools.cached_property
    def reads(self) -> frozenset[str]:
        out = {self.src.buffer} if isinstance(self.src, Access) else set()
        if self.op != ":=":
            out.add(self.dst.buffer)
        return frozenset(out)

    @property
    def writes(self) -> frozenset[str]:
        return frozenset({self.dst.buffer})

    @property
    def accesses(self) -> tuple[Operand, Operand]:
        return (self.dst, self.src)

    def rename_axes(self, names: Mapping[str, str]) -> "Statement":
        src = self.src.rename(names) if isinstance(self.src, Access) else self.src
        return replace(self, dst=self.dst.rename(names), src=src)

    def format(self, order: Sequence[str] | None = None) -> str:
        src = self.src.format(order)
        if self.fn:
            src = f"{self.fn}({src})"
        return f"{self.dst.format(order)} {self.op} {src};"


@dataclass(frozen=True)
class Axis:
    """A loop axis ``0 <= name < extent`` (``extent=None``: any size, for instruction needles)."""

    name: str
    extent: int | None
    origin: tuple[str, str] | None = None  # (block, iter var) it was imported from


@dataclass(frozen=True)
class Buffer:
    """A buffer: ``role`` is ``input`` (read only), ``output`` (written param) or ``temp``.

    ``layout`` lists the view operations that turn the caller's array into this
    buffer (``("transpose", perm)``, ``("reshape", old, new)``, ``("pad", old, new)``),
    recorded by transformations so the kernel keeps its interface.  A transpose
    is stored as ``("transpose", perm, old_shape)``.
    """

    name: str
    shape: tuple[int | None, ...]
    dtype: str = "float32"
    role: str = "input"
    layout: tuple[tuple, ...] = ()

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def interface_shape(self) -> tuple[int | None, ...]:
        """The caller's shape (before the ``layout`` views); each op stores its input shape."""
        if not self.layout:
            return self.shape
        op = self.layout[0]
        return tuple(op[2] if op[0] == "transpose" else op[1])


@dataclass(frozen=True)
class Program:
    """A ``forall`` over ``axes`` running ``statements`` in order.

    ``params`` is the kernel's argument order (inputs and outputs).
    """

    axes: tuple[Axis, ...]
    buffers: tuple[Buffer, ...]
    statements: tuple[Statement, ...]
    params: tuple[str, ...] = ()
    name: str = "main"

    # -- lookups -------------------------------------------------------------
    @functools.cached_property
    def _axis_index(self) -> dict[str, Axis]:
        return {a.name: a for a in self.axes}

    @functools.cached_property
    def _buffer_index(self) -> dict[str, Buffer]:
        return {b.name: b for b in self.buffers}

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    def axis(self, name: str) -> Axis:
        try:
            return self._axis_index[name]
        except KeyError:
            raise InputError(f"ISAMIR program {self.name!r}: unknown axis {name!r}") from None

    def extent(self, name: str) -> int | None:
        return self.axis(name).extent

    def buffer(self, name: str) -> Buffer:
        try:
            return self._buffer_index[name]
        except KeyError:
            raise InputError(f"ISAMIR program {self.name!r}: unknown buffer {name!r}") from None

    def has_buffer(self, name: str) -> bool:
        return name in self._buffer_index

    def has_axis(self, name: str) -> bool:
        return name in self._axis_index

    def ordered(self, axes: Iterable[str]) -> tuple[str, ...]:
        """``axes`` in program order."""
        s = set(axes)
        return tuple(a for a in self.axis_names if a in s)

    def statement_axes(self, k: int) -> tuple[str, ...]:
        return self.ordered(self.statements[k].axes)

    def points(self, k: int) -> int:
        """Number of points in statement ``k``'s domain."""
        n = 1
        for a in self.statement_axes(k):
            n *= self.extent(a) or 1
        return n

    def readers(self, buffer: str) -> list[int]:
        return [k for k, s in enumerate(self.statements) if buffer in s.reads]

    def writers(self, buffer: str) -> list[int]:
        return [k for k, s in enumerate(self.statements) if buffer in s.writes]

    def accesses_of(self, buffer: str) -> list[tuple[int, int, Access]]:
        """Every access to ``buffer`` as (statement, operand position 0=dst 1=src, access)."""
        out = []
        for k, s in enumerate(self.statements):
            for pos, acc in enumerate(s.accesses):
                if isinstance(acc, Access) and acc.buffer == buffer:
                    out.append((k, pos, acc))
        return out

    def fresh_name(self, prefix: str, taken: Iterable[str] = ()) -> str:
        """First of ``prefix``, ``prefix1``, ``prefix2`` ... not used by an axis or buffer."""
        used = set(self._axis_index) | set(self._buffer_index) | set(taken)
        if prefix not in used:
            return prefix
        n = 1
        while f"{prefix}{n}" in used:
            n += 1
        return f"{prefix}{n}"

    # -- text ----------------------------------------------------------------
    def listing(self, extents: bool = False, indent: str = "") -> str:
        """The paper's listing form (``extents=True`` adds ``i:16`` domains)."""
        order = self.axis_names
        if extents:
            head = ", ".join(f"{a.name}:{'?' if a.extent is None else a.extent}" for a in self.axes)
        else:
            head = ",".join(order)
        lines = [f"forall {head} {{"]
        lines += [indent + s.format(order) for s in self.statements]
        lines.append("}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.listing()

    def describe(self) -> str:
        """Listing with extents plus one line per buffer (shape, role, layout)."""
        lines = [self.listing(extents=True, indent="  ")]
        for b in self.buffers:
            extra = f" layout={list(b.layout)}" if b.layout else ""
            lines.append(f"  # {b.name}{list(b.shape)} {b.dtype} {b.role}{extra}")
        return "\n".join(lines)

    @functools.cached_property
    def key(self) -> tuple:
        """Structural identity of the program (for de-duplication; hashable)."""
        return (self.axes, self.buffers, self.statements, self.params)

    # -- checks --------------------------------------------------------------
    def validate(self) -> "Program":
        """Check names, ranks, operator rules and index bounds; return ``self``.

        Raises :class:`tvm_ext.errors.InputError` naming the offending statement.
        """
        names = [a.name for a in self.axes] + [b.name for b in self.buffers]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise InputError(f"ISAMIR program {self.name!r}: duplicate names {sorted(dup)}")
        for p in self.params:
            if p not in self._buffer_index:
                raise InputError(f"ISAMIR program {self.name!r}: parameter {p!r} is not a buffer")
        for k, s in enumerate(self.statements):
            self._validate_statement(k, s)
        return self

    def _validate_statement(self, k: int, s: Statement) -> None:
        def fail(why: str) -> None:
            raise InputError(f"ISAMIR program {self.name!r}, statement {k} `{s.format(self.axis_names)}`: {why}")

        if s.op not in OPS:
            fail(f"unknown operator {s.op!r}")
        if s.fn is not None and (s.op != ":=" or s.fn not in FUNCTIONS):
            fail(f"function {s.fn!r} needs ':=' and one of {sorted(FUNCTIONS)}")
        if s.op == ":=" and s.reduced_axes:
            fail(f"':=' cannot reduce over {sorted(s.reduced_axes)}")
        if s.reduced_axes and s.op not in REDUCE_OPS:
            fail(f"operator {s.op!r} cannot reduce")
        for acc in s.accesses:
            if not isinstance(acc, Access):
                continue
            buf = self.buffer(acc.buffer)
            if len(acc.rows) != buf.rank:
                fail(f"{acc.buffer} has {buf.rank} dims, access uses {len(acc.rows)}")
            for a in acc.axes:
                if a not in self._axis_index:
                    fail(f"unknown axis {a!r}")
            why = self._bounds_error(acc, buf)
            if why:
                fail(why)

    def _bounds_error(self, acc: Access, buf: Buffer) -> str | None:
        for d, (row, size) in enumerate(zip(acc.rows, buf.shape)):
            if size is None:
                continue
            lo = hi = row.const
            for a, c in row.terms:
                e = self._axis_index[a].extent
                if e is None:
                    lo = None
                    break
                lo += min(0, c * (e - 1))
                hi += max(0, c * (e - 1))
            if lo is not None and (lo < 0 or hi >= size):
                return (f"index {row.format(self.axis_names)} of {acc.buffer} dim {d} spans [{lo}, {hi}] "
                        f"outside [0, {size - 1}]")
        return None

    def with_statements(self, statements: Sequence[Statement], **changes) -> "Program":
        """Copy with new statements, dropping buffers and axes no longer used."""
        statements = tuple(statements)
        used_bufs = {acc.buffer for s in statements for acc in s.accesses if isinstance(acc, Access)}
        used_axes: set[str] = set()
        for s in statements:
            used_axes |= s.axes
        buffers = changes.pop("buffers", self.buffers)
        axes = changes.pop("axes", self.axes)
        buffers = tuple(b for b in buffers if b.name in used_bufs or b.name in self.params)
        axes = tuple(a for a in axes if a.name in used_axes)
        return replace(self, statements=statements, buffers=buffers, axes=axes, **changes)

    def instantiate(self, sizes: Mapping[str, int]) -> "Program":
        """Give flexible (``None``) axes concrete extents and recompute buffer shapes."""
        axes = tuple(replace(a, extent=sizes.get(a.name, a.extent)) for a in self.axes)
        prog = replace(self, axes=axes)
        buffers = tuple(
            replace(b, shape=infer_shape(prog, b.name, tuple(0 if n is None else n for n in b.shape)))
            for b in self.buffers
        )
        return replace(prog, buffers=buffers)


def infer_shape(program: Program, buffer: str, shape: Sequence[int | None] | None = None) -> tuple:
    """Smallest shape covering every access to ``buffer`` (never smaller than ``shape``)."""
    accs = [a for _, _, a in program.accesses_of(buffer)]
    rank = len(accs[0].rows) if accs else len(shape or ())
    out = list(shape) if shape is not None else [0] * rank
    for acc in accs:
        for d, row in enumerate(acc.rows):
            if any(program.extent(a) is None for a in row.axes):
                out[d] = None
                continue
            hi = row.const + sum(max(0, c * (program.extent(a) - 1)) for a, c in row.terms)
            if out[d] is not None:
                out[d] = max(out[d] or 0, hi + 1)
    return tuple(out)
