"""The sparse loop nest a recipe transforms: CSR SpMM written once in TIR (Venkat 2016 Listing 5.1).

:func:`csr_loop_nest` is a ``@T.prim_func(s_tir=True)`` whose inner loop has
data-dependent bounds, the dissertation's uninterpreted functions::

    for i in range(M):
        for j in range(indptr[i], indptr[i + 1]):
            for n in range(N):
                C[i, n] = C[i, n] + data[j] * B[indices[j], n]

:func:`nest_from_primfunc` reads such a PrimFunc into a :class:`SparseNest`:
the loop levels (TIR variables with TIR bounds, which may load index arrays),
the guards, and the three expressions of the update
``C[row, n] += value * B[col, n]``.  Every transformation in
:mod:`.steps` rewrites those TIR expressions; :mod:`.lower` turns a nest back
into a PrimFunc.

>>> nest = nest_from_primfunc(csr_loop_nest("float32"))
>>> [lv.name for lv in nest.levels], str(nest.col)
(['i', 'j'], 'indices[j]')
"""
from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from tvm_ext.errors import ScheduleError

__all__ = ["Level", "Role", "BufferRole", "SparseNest", "csr_loop_nest", "nest_from_primfunc", "free_vars", "uses",
           "subst", "format_buffer", "loads", "with_index_dtypes", "narrow_explicit_indices"]


@dataclass(frozen=True)
class Level:
    """One loop level ``for var in range(lo, hi)``.

    ``existential``: the level only searches for the entry its guard names
    (make-dense's ``j`` after ``k == col[j]``); compaction removes it.
    """

    var: object
    lo: object
    hi: object
    existential: bool = False

    @property
    def name(self) -> str:
        return self.var.name


class Role(enum.Enum):
    """What a format array of the nest holds (how the inspector fills it)."""

    #: an array of the CSR matrix the nest starts from (``of``: indptr, indices or data)
    SOURCE = "source"
    #: compact's ``offset_index``: where each iteration of the loops outside starts its entries
    OFFSET = "offset"
    #: compact's ``explicit_index`` of one compacted loop (``of``: the loop's name)
    EXPLICIT = "explicit"
    #: compact-and-pad's ``A'``: a copied array in padded blocks (``of``: data, col or row)
    COPY = "copy"
    #: an inspector's renumbering of a loop, ``perm[new] = old`` (``of``: the loop's name)
    PERMUTATION = "permutation"


@dataclass(frozen=True)
class BufferRole:
    """The role of one format array: ``Role`` plus what it is of (see :class:`Role`).

    >>> BufferRole(Role.EXPLICIT, "k")
    BufferRole(role=<Role.EXPLICIT: 'explicit'>, of='k', part=0)
    """

    role: Role
    of: str = ""
    #: which part of a split format (HYB: 0 the ELL part, 1 the COO part)
    part: int = 0


@dataclass(frozen=True)
class SparseNest:
    """``for levels: if guards: C[row, n] += value * B[col, n]`` (``n`` over the N columns).

    ``buffers`` are the format's arrays in kernel-argument order (index arrays
    first, values last), ``roles`` what each holds (by buffer name, a
    :class:`BufferRole`: the inspector binds arrays by role); ``sizes`` the symbolic
    ``int32`` sizes (``M``, ``K`` and those the transformations add, e.g. the
    ELL width ``W``); ``history`` the steps applied so far.
    """

    levels: tuple[Level, ...]
    guards: tuple
    row: object
    col: object
    value: object
    buffers: Mapping[str, object]
    sizes: Mapping[str, object]
    dtype: str
    kind: str = "spmm"
    history: tuple[str, ...] = ()
    meta: Mapping[str, object] = field(default_factory=dict)
    roles: Mapping[str, BufferRole] = field(default_factory=dict)

    def buffer_of(self, role: Role, of: str = ""):
        """The format buffer with role ``role`` (of ``of``), or None."""
        for name, r in self.roles.items():
            if r.role is role and r.of == of:
                return self.buffers[name]
        return None

    def level(self, name: str, step: str) -> Level:
        """The level called ``name`` (:class:`ScheduleError` naming ``step`` if none)."""
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise ScheduleError(f"{step}: no loop {name!r} in the nest (loops: "
                            f"{', '.join(lv.name for lv in self.levels)})")

    def index(self, name: str, step: str) -> int:
        self.level(name, step)
        return [lv.name for lv in self.levels].index(name)

    def replace(self, note: str, **changes) -> "SparseNest":
        return dataclasses.replace(self, history=self.history + (note,), **changes)

    def substitute(self, vmap: Mapping) -> dict:
        """``row``/``col``/``value``/``guards`` and level bounds with ``vmap`` applied."""
        return dict(row=subst(self.row, vmap), col=subst(self.col, vmap),
                    value=subst(self.value, vmap), guards=tuple(subst(g, vmap) for g in self.guards),
                    levels=tuple(dataclasses.replace(lv, lo=subst(lv.lo, vmap), hi=subst(lv.hi, vmap))
                                 for lv in self.levels))

    def __str__(self) -> str:
        lines, pad = [], ""
        for lv in self.levels:
            tag = "  # existential" if lv.existential else ""
            lines.append(f"{pad}for {lv.name} in range({lv.lo}, {lv.hi}):{tag}")
            pad += "    "
        if self.guards:
            lines.append(f"{pad}if {' and '.join(str(g) for g in self.guards)}:")
            pad += "    "
        n = ", n" if self.kind == "spmm" else ""
        lines.append(f"{pad}C[{self.row}{n}] += {self.value} * B[{self.col}{n}]")
        return "\n".join(lines)


def format_buffer(name: str, shape: Iterable, dtype: str):
    """A format array's TIR buffer (default 64-byte alignment: the inspector allocates it)."""
    import tvm

    return tvm.tirx.decl_buffer(tuple(shape), dtype, name)


def csr_loop_nest(dtype: str = "float32", kind: str = "spmm"):
    """The CSR SpMM (``kind="spmm"``) or SpMV PrimFunc every recipe starts from.

    >>> "indptr[i + 1]" in csr_loop_nest("float64", "spmv").script()
    True
    """
    from tvm.script import tirx as T

    if kind == "spmm":
        @T.prim_func(s_tir=True)
        def csr_spmm(a_indptr: T.handle, a_indices: T.handle, a_data: T.handle, b: T.handle,
                     c: T.handle):
            M, K, N, NNZ = T.int32(), T.int32(), T.int32(), T.int32()
            indptr = T.match_buffer(a_indptr, (M + 1,), "int32")
            indices = T.match_buffer(a_indices, (NNZ,), "int32")
            data = T.match_buffer(a_data, (NNZ,), dtype)
            B = T.match_buffer(b, (K, N), dtype)
            C = T.match_buffer(c, (M, N), dtype)
            for i in range(M):
                for j in range(indptr[i], indptr[i + 1]):
                    for n in range(N):
                        C[i, n] = C[i, n] + data[j] * B[indices[j], n]
        return csr_spmm

    @T.prim_func(s_tir=True)
    def csr_spmv(a_indptr: T.handle, a_indices: T.handle, a_data: T.handle, b: T.handle,
                 c: T.handle):
        M, K, NNZ = T.int32(), T.int32(), T.int32()
        indptr = T.match_buffer(a_indptr, (M + 1,), "int32")
        indices = T.match_buffer(a_indices, (NNZ,), "int32")
        data = T.match_buffer(a_data, (NNZ,), dtype)
        B = T.match_buffer(b, (K,), dtype)
        C = T.match_buffer(c, (M,), dtype)
        for i in range(M):
            for j in range(indptr[i], indptr[i + 1]):
                C[i] = C[i] + data[j] * B[indices[j]]
    return csr_spmv


def nest_from_primfunc(func) -> SparseNest:
    """Read a PrimFunc of the form of :func:`csr_loop_nest` into a :class:`SparseNest`.

    The last two parameters are the dense ``B`` and ``C``; the others are the
    format's arrays.  The body must be loops (optionally ``if`` guards) around
    one update ``C[row(, n)] = C[row(, n)] + value * B[col(, n)]``.
    """
    from tvm import tirx
    from tvm.ir.expr import TensorLoad

    bufs = list(func.params)
    if len(bufs) < 3:
        raise ScheduleError("nest_from_primfunc: expected format arrays, B and C parameters")
    B, C = bufs[-2], bufs[-1]
    kind = "spmm" if len(C.shape) == 2 else "spmv"
    levels, guards = [], []
    stmt = func.body
    while True:
        if isinstance(stmt, tirx.For):
            levels.append(Level(stmt.loop_var, stmt.min, subst(stmt.min + stmt.extent, {})))
            stmt = stmt.body
        elif isinstance(stmt, tirx.IfThenElse) and stmt.else_case is None:
            guards.append(stmt.condition)
            stmt = stmt.then_case
        else:
            break
    if not isinstance(stmt, tirx.BufferStore) or not stmt.buffer.same_as(C):
        raise ScheduleError(f"nest_from_primfunc: the innermost statement must store to "
                            f"{C.name}, got {type(stmt).__name__}")
    n_var = levels.pop().var if kind == "spmm" else None
    rhs = stmt.value
    ok = (isinstance(rhs, tirx.Add) and isinstance(rhs.a, TensorLoad) and rhs.a.source.same_as(C)
          and isinstance(rhs.b, tirx.Mul) and isinstance(rhs.b.b, TensorLoad)
          and rhs.b.b.source.same_as(B))
    if not ok:
        raise ScheduleError(f"nest_from_primfunc: expected {C.name}[..] = {C.name}[..] + value * "
                            f"{B.name}[col, ..], got {rhs}")
    if kind == "spmm" and not (stmt.indices[-1].same_as(n_var) and rhs.b.b.indices[-1].same_as(n_var)):
        raise ScheduleError("nest_from_primfunc: the innermost loop must run over the columns of B and C")
    sizes = {}
    for b in bufs:
        for e in b.shape:
            for v in free_vars(e):
                sizes.setdefault(v.name, v)
    value, col = rhs.b.a, rhs.b.b.indices[0]
    roles = {}
    for what, exprs in (("data", [value]), ("indices", [col]),
                        ("indptr", [e for lv in levels for e in (lv.lo, lv.hi)])):
        for e in exprs:
            for b in loads(e):
                roles.setdefault(b.name, BufferRole(Role.SOURCE, what))
    return SparseNest(roles=roles, levels=tuple(levels), guards=tuple(guards), row=stmt.indices[0],
                      col=col, value=value,
                      buffers={b.name: b for b in bufs[:-2]}, sizes=sizes,
                      dtype=str(C.dtype), kind=kind, history=(str(func.attrs["global_symbol"])
                                                               if func.attrs and "global_symbol" in func.attrs
                                                               else "csr",))


_BINARY = ("Add", "Sub", "Mul", "Div", "Mod", "FloorDiv", "FloorMod", "Min", "Max", "EQ", "NE", "LT",
           "LE", "GT", "GE", "And", "Or")


def _rebuild(expr, on_var, on_binary=None):
    """``expr`` rebuilt bottom-up with each scalar :class:`Var` ``v`` replaced by ``on_var(v)``
    (and each rebuilt binary operation ``e`` by ``on_binary(e)`` when given)."""
    from tvm import tirx
    from tvm.ir.expr import TensorLoad

    def rec(e):
        return _rebuild(e, on_var, on_binary)
    if isinstance(expr, tirx.Var):
        return on_var(expr)
    if isinstance(expr, (tirx.IntImm, tirx.FloatImm)):
        return expr
    name = type(expr).__name__
    if name in _BINARY:
        out = getattr(tirx, name)(rec(expr.a), rec(expr.b))
        return out if on_binary is None else on_binary(out)
    if isinstance(expr, tirx.Not):
        return tirx.Not(rec(expr.a))
    if isinstance(expr, tirx.Cast):
        return tirx.Cast(str(expr.ty), rec(expr.value))
    if isinstance(expr, tirx.Select):
        return tirx.Select(*(rec(e) for e in (expr.condition, expr.true_value, expr.false_value)))
    if isinstance(expr, TensorLoad):
        return tirx.BufferLoad(expr.source, [rec(i) for i in expr.indices])
    raise ScheduleError(f"sparse loop nest: unsupported TIR expression {name}: {expr}")


def loads(expr) -> list:
    """The buffers ``expr`` reads (index arrays included), with repeats."""
    from tvm import tirx
    from tvm.ir.expr import TensorLoad

    out: list = []

    def walk(e):
        if isinstance(e, TensorLoad):
            out.append(e.source)
            for i in e.indices:
                walk(i)
        elif type(e).__name__ in _BINARY:
            walk(e.a)
            walk(e.b)
        elif isinstance(e, (tirx.Not, tirx.Cast)):
            walk(e.a if isinstance(e, tirx.Not) else e.value)
        elif isinstance(e, tirx.Select):
            for x in (e.condition, e.true_value, e.false_value):
                walk(x)
    if expr is not None:
        walk(expr)
    return out


def free_vars(expr) -> list:
    """The scalar TIR variables ``expr`` reads (loop variables and sizes), first use first."""
    found: dict = {}

    def seen(v):
        found.setdefault(v, None)
        return v
    if expr is not None:
        _rebuild(expr, seen)
    return list(found)


def uses(expr, var) -> bool:
    """Whether ``expr`` reads ``var``."""
    return any(v.same_as(var) for v in free_vars(expr))


def subst(expr, vmap: Mapping):
    """``expr`` with variables replaced (``vmap``: Var -> PrimExpr), simplified."""
    import tvm

    if expr is None:
        return None
    out = _rebuild(expr, lambda v: vmap.get(v, v))
    return tvm.sym.Analyzer().simplify(out)


def with_index_dtypes(nest: SparseNest, dtypes: Mapping[str, str]) -> SparseNest:
    """``nest`` with index buffers stored in narrower integer types (``dtypes``: buffer name ->
    dtype, e.g. CSB's ``uint16`` in-block offsets); every load is widened back to the type the
    nest computed in, so the executor binds the arrays as stored (no copies).

    >>> from schedules.sparse.recipes.library import coo_recipe
    >>> n = with_index_dtypes(coo_recipe().nest(), {"explicit_i": "uint16"})
    >>> str(n.buffers["explicit_i"].dtype), str(n.row)
    ('uint16', 'T.Cast("int32", explicit_i[p])')
    """
    import tvm

    new = {}
    for name, dtype in dtypes.items():
        old = nest.buffers.get(name)
        if old is None:
            raise ScheduleError(f"with_index_dtypes: the nest has no buffer {name!r} "
                                f"(buffers: {', '.join(nest.buffers)})")
        if not str(old.dtype).startswith("int") or not str(dtype).startswith(("int", "uint")):
            raise ScheduleError(f"with_index_dtypes: {name} is {old.dtype}; only integer index "
                                f"buffers take another integer type, got {dtype!r}")
        if str(dtype) != str(old.dtype):
            new[name] = tvm.tirx.decl_buffer(old.shape, dtype, name)
    if not new:
        return nest

    def retype(e):
        return None if e is None else _retyped(e, new)
    levels = tuple(dataclasses.replace(lv, lo=retype(lv.lo), hi=retype(lv.hi)) for lv in nest.levels)
    buffers = {n: new.get(n, b) for n, b in nest.buffers.items()}
    return nest.replace(f"index_dtypes({', '.join(f'{n}: {new[n].dtype}' for n in new)})",
                        levels=levels, guards=tuple(retype(g) for g in nest.guards),
                        row=retype(nest.row), col=retype(nest.col), value=retype(nest.value), buffers=buffers)


def _retyped(expr, new: Mapping):
    """``expr`` with loads of the buffers named in ``new`` read from the new buffer and cast back."""
    from tvm import tirx
    from tvm.ir.expr import TensorLoad

    def rec(e):
        if isinstance(e, (tirx.Var, tirx.IntImm, tirx.FloatImm)):
            return e
        name = type(e).__name__
        if name in _BINARY:
            return getattr(tirx, name)(rec(e.a), rec(e.b))
        if isinstance(e, tirx.Not):
            return tirx.Not(rec(e.a))
        if isinstance(e, tirx.Cast):
            return tirx.Cast(str(e.ty), rec(e.value))
        if isinstance(e, tirx.Select):
            return tirx.Select(rec(e.condition), rec(e.true_value), rec(e.false_value))
        if isinstance(e, TensorLoad):
            idx = [rec(i) for i in e.indices]
            buf = new.get(e.source.name)
            if buf is None:
                return tirx.BufferLoad(e.source, idx)
            return tirx.Cast(e.source.dtype, tirx.BufferLoad(buf, idx))
        raise ScheduleError(f"sparse loop nest: unsupported TIR expression {name}: {e}")
    return rec(expr)


def narrow_explicit_indices(before: SparseNest, after: SparseNest, levels, dtype: str, note: str) -> SparseNest:
    """``after`` (a compaction of ``levels`` of ``before``) with the compacted loops' explicit
    indices stored as ``dtype`` (CSB's ``uint16`` in-block offsets); each loop must run from 0
    over a constant extent ``dtype`` holds.  ``int32``: ``after`` unchanged.

    >>> from schedules.sparse.recipes.library import csb_recipe
    >>> str(csb_recipe(8).nest().buffers["explicit_l"].dtype)
    'uint16'
    """
    import numpy as np
    import tvm

    if str(dtype) == "int32":
        return after
    try:
        top = int(np.iinfo(np.dtype(dtype)).max)
    except (TypeError, ValueError):
        raise ScheduleError(f"{note}: index_dtype must be an integer type, got {dtype!r}") from None
    ana, names = tvm.sym.Analyzer(), {}
    for nm in levels:
        lv = before.level(nm, note)
        ext = ana.simplify(lv.hi - lv.lo)
        if not ana.can_prove_equal(lv.lo, 0) or not hasattr(ext, "value") or int(ext.value) - 1 > top:
            raise ScheduleError(f"{note}: loop {nm} runs over [{lv.lo}, {lv.hi}); a {dtype} index needs "
                                f"a loop from 0 over a constant extent of at most {top + 1}")
        buf = after.buffer_of(Role.EXPLICIT, nm)
        if buf is not None:
            names[buf.name] = dtype
    return with_index_dtypes(after, names)
