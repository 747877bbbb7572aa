"""Interior/edge split of a row loop whose guards bound a column ``row + index``.

A guard such as DIA's ``0 <= i + offset[d] < K`` reads the row ``i`` and one explicit
index ``x`` (``offset[d]``) linearly: ``ci * i + cx * x + r < 0`` (or ``<= 0``) with
``ci = ±1``, ``cx`` constant and ``r`` free of both.  It then holds on every stored entry
for all rows of an interior range ``[lo, hi)`` computed once per kernel call from the
index's minimum and maximum (DIA: ``lo = max(0, -min offset)``,
``hi = min(M, K - max offset)``).  :func:`interior_split` emits that computation (a
prologue loop over the index array, before any parallel loop) and :func:`emit_rows` runs a
part's rows ``[a, b)`` as its edge rows (every guard tested, as before) and its interior
rows (those guards dropped).  Part boundaries are kept, so the parts balance as before.
This is loop splitting / index-set splitting on a run-time bound (the interior/boundary
split of stencil codes).

>>> from schedules.sparse.recipes.library import dia_recipe, csr_recipe
>>> from schedules.sparse.recipes.lower import simplify_guards
>>> nest = dia_recipe().nest("float32", "spmm")
>>> [str(b) for b in interior_bounds(nest, nest.levels[0], simplify_guards(nest, nest.guards))[0]]
['explicit_d[p]']
>>> interior_bounds(csr_recipe().nest(), csr_recipe().nest().levels[0], []) is None
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from schedules.sparse.recipes.nest import Level, Role, SparseNest, free_vars, subst

__all__ = ["InteriorSplit", "interior_bounds", "interior_split", "emit_rows"]


@dataclass(frozen=True)
class InteriorSplit:
    """The interior rows ``[lo, hi)`` (``hi >= lo``; expressions reading the prologue's
    buffer) and the guards still tested there (``rest``)."""

    lo: object
    hi: object
    rest: list


def _replace_loads(expr, on_load):
    """``expr`` with each buffer read replaced by ``on_load(read)`` (None: not linear-affine)."""
    from tvm import tirx
    from tvm.ir.expr import TensorLoad

    if isinstance(expr, TensorLoad):
        return on_load(expr)
    if isinstance(expr, (tirx.Var, tirx.IntImm)):
        return expr
    if isinstance(expr, tirx.Cast):
        inner = _replace_loads(expr.value, on_load)
        return None if inner is None else tirx.Cast(str(expr.ty), inner)
    if isinstance(expr, (tirx.Add, tirx.Sub, tirx.Mul, tirx.LT, tirx.LE)):
        a, b = _replace_loads(expr.a, on_load), _replace_loads(expr.b, on_load)
        return None if a is None or b is None else type(expr)(a, b)
    return None


def _is_size(nest: SparseNest, v) -> bool:
    return any(v.same_as(s) for s in nest.sizes.values())


def _index_load(nest: SparseNest, row: Level, g):
    """``(load, level)`` when ``g`` reads exactly one explicit index whose position is one
    loop over a range in the sizes only; else None."""
    from schedules.sparse.recipes.nest import loads

    found: list = []
    if _replace_loads(g, lambda ld: found.append(ld) or ld) is None or len(found) != 1:
        return None
    load = found[0]
    role = nest.roles.get(load.source.name)
    if role is None or role.role is not Role.EXPLICIT or any(loads(i) for i in load.indices):
        return None
    vars_ = [v for i in load.indices for v in free_vars(i) if not _is_size(nest, v)]
    levels = [lv for lv in nest.levels if any(lv.var.same_as(v) for v in vars_)]
    if len(levels) != 1 or len(vars_) != 1 or levels[0].var.same_as(row.var) \
            or not all(_is_size(nest, v) for v in free_vars(levels[0].lo) + free_vars(levels[0].hi)):
        return None
    return load, levels[0]


def _row_bound(nest: SparseNest, row: Level, g, x):
    """``(is_upper, bound(xw), worst_is_max)`` for guard ``g`` on row ``row.var`` with its
    index read replaced by ``x``: the rows where it holds for the index value ``xw`` are
    ``i < bound`` (upper) or ``i >= bound`` (lower); None when ``g`` has another form."""
    import tvm
    from tvm import tirx

    if not isinstance(g, (tirx.LT, tirx.LE)):
        return None
    e = _replace_loads(g.a - g.b, lambda ld: x)
    if e is None:
        return None
    i = row.var
    ana = tvm.sym.Analyzer()
    r = ana.simplify(subst(e, {i: 0, x: 0}))
    ci = ana.simplify(subst(e, {i: 1, x: 0}) - r)
    cx = ana.simplify(subst(e, {i: 0, x: 1}) - r)
    if not (hasattr(ci, "value") and hasattr(cx, "value")) or abs(int(ci.value)) != 1 or int(cx.value) == 0:
        return None
    if not ana.can_prove_equal(e, ci * i + cx * x + r) or not all(_is_size(nest, v) for v in free_vars(r)):
        return None
    strict = isinstance(g, tirx.LT)
    ci, cx = int(ci.value), int(cx.value)
    if ci == 1:         # i + cx*x + r < 0  ->  i < -(cx*x + r)
        return True, (lambda xw: -(cx * xw + r) + (0 if strict else 1)), cx > 0
    # -i + cx*x + r < 0  ->  i > cx*x + r
    return False, (lambda xw: cx * xw + r + (1 if strict else 0)), cx > 0


def interior_bounds(nest: SparseNest, row: Level, guards: Sequence):
    """``(index reads, [(read number, is_upper, bound, worst_is_max)], rest, [(read, its
    loop level)])`` for the guards of ``guards`` that bound the row through one explicit index
    (see :func:`_row_bound`; ``rest``: the other guards); None when none does or the row loop
    does not start at 0."""
    import tvm

    if not tvm.sym.Analyzer().can_prove_equal(row.lo, 0):
        return None
    reads: list = []
    split, rest = [], []
    for g in guards:
        found = _index_load(nest, row, g) if any(row.var.same_as(v) for v in free_vars(g)) else None
        x = tvm.tirx.Var("x", "int32")
        b = _row_bound(nest, row, g, x) if found is not None else None
        if b is None:
            rest.append(g)
            continue
        k = next((n for n, (ld, _) in enumerate(reads) if ld.source.same_as(found[0].source) and all(
            tvm.sym.Analyzer().can_prove_equal(p, q) for p, q in zip(ld.indices, found[0].indices))), None)
        if k is None:
            reads.append(found)
            k = len(reads) - 1
        split.append((k,) + b)
    if not split:
        return None
    return [ld for ld, _ in reads], split, rest, reads


def interior_split(f, nest: SparseNest, row: Level, guards: Sequence) -> InteriorSplit | None:
    """Emit into ``f`` (before the row loops) the interior rows' bounds, once per call: each
    index array's minimum and maximum over its loop (0 and 0 when the loop is empty), then
    ``lo`` and ``hi`` clamped to ``[0, M]`` with ``hi >= lo``.  None (nothing emitted) when no
    guard bounds the row through an explicit index (:func:`interior_bounds`)."""
    from tvm import tirx

    found = interior_bounds(nest, row, guards)
    if found is None:
        return None
    _, split, rest, reads = found
    T = f.T
    ext = T.alloc_buffer((2 * len(reads) + 2,), "int32")
    f.IRBuilder.name("interior", ext)
    for k, (load, lv) in enumerate(reads):
        f.store(ext, tirx.const(0, "int32"), [2 * k])
        f.store(ext, tirx.const(0, "int32"), [2 * k + 1])
        with f.loop("serial", subst(lv.lo, {}), subst(lv.hi, {}), "p") as p:
            val = tirx.Cast("int32", subst(load, {lv.var: p}))
            first = p == subst(lv.lo, {})
            f.store(ext, tirx.Select(first, val, tirx.min(ext[2 * k], val)), [2 * k])
            f.store(ext, tirx.Select(first, val, tirx.max(ext[2 * k + 1], val)), [2 * k + 1])
    lo, hi = tirx.const(0, "int32"), row.hi
    for k, upper, bound, worst_max in split:
        b = bound(ext[2 * k + 1] if worst_max else ext[2 * k])
        lo, hi = (lo, tirx.min(hi, b)) if upper else (tirx.max(lo, b), hi)
    n = 2 * len(reads)
    f.store(ext, tirx.min(lo, row.hi), [n])
    f.store(ext, tirx.max(ext[n], hi), [n + 1])
    return InteriorSplit(ext[n], ext[n + 1], rest)


def emit_rows(f, split: InteriorSplit | None, a, b, guards: Sequence,
              body: Callable[[object, Sequence], None]) -> None:
    """``body(i, guards)`` for every row ``i`` of ``[a, b)``: with ``split``, the edge rows
    (before ``lo`` and from ``hi``) keep ``guards`` and the interior rows get ``split.rest``."""
    from tvm import tirx

    if split is None:
        with f.loop("serial", a, b, "i") as i:
            body(i, guards)
        return
    with f.loop("serial", 0, 2, "s") as s:      # the edge rows before lo (s = 0) and from hi
        start = tirx.Select(s == 0, a, tirx.max(a, split.hi))
        stop = tirx.Select(s == 0, tirx.min(b, split.lo), b)
        with f.loop("serial", start, tirx.max(start, stop), "i") as i:
            body(i, guards)
    start = tirx.max(a, split.lo)
    with f.loop("serial", start, tirx.max(start, tirx.min(b, split.hi)), "i") as i:
        body(i, split.rest)
