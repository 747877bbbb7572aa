"""Venkat 2016 §5.1-5.2 transformations acting on the TIR loop nest *and* the inspector.

Each step is a small object with two halves that share its parameters:

* ``on_nest(nest)`` rewrites the :class:`~.nest.SparseNest` (TIR expressions,
  symbolic sizes): the executor side;
* ``on_space(space, csr)`` applies the same transformation to the inspected
  iteration space through :mod:`schedules.sparse.transforms` (vectorised
  numpy): the inspector side.

Sizes that depend on the matrix (DIA's shift by ``M - 1``, the ELL width)
are callables of ``(M, K)`` or of the CSR: with ints for the inspector and
with the kernel's symbolic sizes for the executor, so one compiled executor
serves every matrix.

Safety checks raise :class:`~tvm_ext.errors.ScheduleError` naming the step:
make-dense on a loop whose body does not index ``B`` through an index array,
a permutation that moves a loop outside a loop its bounds read, padding
without an identity, a non-injective compact-and-pad (inspector side).

>>> from schedules.sparse.recipes.nest import csr_loop_nest, nest_from_primfunc
>>> nest = MakeDense().on_nest(nest_from_primfunc(csr_loop_nest()))
>>> print(nest)
for i in range(0, M):
    for k in range(0, K):
        for j in range(indptr[i], indptr[i + 1]):  # existential
            if indices[j] == k:
                C[i, n] += data[j] * B[k, n]
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from schedules.sparse import transforms as tf
from schedules.sparse.recipes.nest import (BufferRole, Level, Role, SparseNest, format_buffer, free_vars,
                                           loads, narrow_explicit_indices)
from tvm_ext.errors import ScheduleError

__all__ = ["Step", "MakeDense", "Tile", "SortRows", "SplitAt", "Skew", "Shift", "Permute", "Normalize", "Known", "Project", "Compact",
           "CompactAndPad", "resolve_size"]

def resolve_size(value, m, k):
    """``value`` itself, or ``value(m, k)`` when it is a callable of the matrix shape."""
    return value(m, k) if callable(value) else value


def _var(name: str):
    from tvm import tirx

    return tirx.Var(name, "int32")


def _simplify(e):
    import tvm

    return tvm.sym.Analyzer().simplify(e)


def _range_guards(expr, lo, hi) -> list:
    """``lo <= expr`` and ``expr < hi``, each dropped when provably true."""
    import tvm

    ana = tvm.sym.Analyzer()
    out = []
    for g in (lo <= expr, expr < hi):
        g = ana.simplify(g)
        if not (hasattr(g, "value") and int(g.value) == 1):
            out.append(g)
    return out


class Step:
    """One transformation; subclasses define both halves."""

    label: str

    def on_nest(self, nest: SparseNest) -> SparseNest:
        raise NotImplementedError

    def on_space(self, space, csr):
        raise NotImplementedError

    def __str__(self) -> str:
        return self.label


def _replace_level(nest: SparseNest, name: str, new_levels: Sequence[Level], old_value, note: str,
                   guards: Sequence = ()) -> SparseNest:
    """Replace level ``name`` by ``new_levels``; its variable becomes ``old_value`` everywhere."""
    at = nest.index(name, note)
    old = nest.levels[at].var
    parts = nest.substitute({old: old_value})
    levels = list(parts.pop("levels"))
    levels[at:at + 1] = list(new_levels)
    parts["guards"] = tuple(parts["guards"]) + tuple(guards)
    return nest.replace(note, levels=tuple(levels), **parts)


def _fresh(nest: SparseNest, names: Sequence[str], replacing: str, note: str) -> None:
    for nm in names:
        if nm != replacing and any(lv.name == nm for lv in nest.levels):
            raise ScheduleError(f"{note}: loop name {nm!r} is already used")


# ----------------------------------------------------------------------------- make-dense

@dataclass(frozen=True)
class MakeDense(Step):
    """§5.1.1 make-dense: ``B[col[j]]`` becomes ``B[k]`` over a dense loop ``k`` in ``[0, K)``
    under the guard ``k == col[j]``; ``j`` stays as an existential search loop."""

    level: str = "j"
    name: str = "k"

    @property
    def label(self) -> str:
        return f"make_dense({self.level} -> {self.name})"

    def on_nest(self, nest: SparseNest) -> SparseNest:
        from tvm import tirx
        from tvm.ir.expr import TensorLoad

        note = self.label
        at = nest.index(self.level, note)
        j = nest.levels[at]
        _fresh(nest, (self.name,), self.level, note)
        col = nest.col
        if not (isinstance(col, TensorLoad) and len(col.indices) == 1 and col.indices[0].same_as(j.var)):
            raise ScheduleError(f"{note}: B's row must be an index array read at {self.level} "
                                f"(an uninterpreted col({self.level})), got {col}")
        if at != len(nest.levels) - 1:
            raise ScheduleError(f"{note}: loop {self.level} must be the innermost loop")
        k = _var(self.name)
        levels = nest.levels[:at] + (Level(k, _simplify(k * 0), nest.sizes["K"]),
                                     dataclasses.replace(j, existential=True))
        return nest.replace(note, levels=levels, col=k, guards=nest.guards + (tirx.EQ(col, k),))

    def on_space(self, space, csr):
        return tf.make_dense(space, self.level, self.name)


# ----------------------------------------------------------------------------- enabling maps

@dataclass(frozen=True)
class Tile(Step):
    """Tile ``level`` by ``size`` into ``(outer, inner)``: ``v = size*outer + inner``.

    A tile that does not divide the range keeps the guard ``v < hi``."""

    level: str
    size: int
    outer: str | None = None
    inner: str | None = None

    @property
    def label(self) -> str:
        return f"tile({self.level}, {self.size})"

    def _names(self):
        return self.outer or self.level * 2, self.inner or self.level

    def on_nest(self, nest: SparseNest) -> SparseNest:
        note = self.label
        if isinstance(self.size, bool) or int(self.size) != self.size or self.size < 1:
            raise ScheduleError(f"{note}: the tile size must be a positive integer")
        outer, inner = self._names()
        _fresh(nest, (outer, inner), self.level, note)
        lv = nest.level(self.level, note)
        if lv.existential or _reads_arrays(lv.hi) or _reads_arrays(lv.lo):
            raise ScheduleError(f"{note}: loop {self.level} has data-dependent bounds "
                                f"[{lv.lo}, {lv.hi}); make it dense first (make_dense/normalize+known)")
        o, r = _var(outer), _var(inner)
        s = int(self.size)
        value = o * s + r
        from tvm import tirx
        new = [Level(o, _simplify(tirx.FloorDiv(lv.lo, s)), _simplify(tirx.FloorDiv(lv.hi - 1, s) + 1)),
               Level(r, _simplify(r * 0), _simplify(r * 0 + s))]
        out = _replace_level(nest, self.level, new, value, note, _range_guards(value, lv.lo, lv.hi))
        if nest.row.same_as(lv.var) or _permuted(nest, nest.row, lv.var):
            # the outer tile owns disjoint output rows
            out = dataclasses.replace(out, meta=dict(out.meta, row_blocks=outer))
        elif nest.col.same_as(lv.var):  # the outer tile owns disjoint rows of B (A.T @ B's output rows)
            out = dataclasses.replace(out, meta=dict(out.meta, col_blocks=outer))
        out = dataclasses.replace(out, meta={**out.meta, "block_sizes": {  # each tile's size and range
            **out.meta.get("block_sizes", {}), outer: (s, lv.lo, lv.hi)}})
        return out

    def on_space(self, space, csr):
        outer, inner = self._names()
        return tf.tile(space, self.level, int(self.size), outer, inner)


def _permuted(nest: SparseNest, expr, var) -> bool:
    """Whether ``expr`` is ``perm[var]`` for a row permutation ``perm`` of the nest."""
    from tvm.ir.expr import TensorLoad

    if not (isinstance(expr, TensorLoad) and len(expr.indices) == 1 and expr.indices[0].same_as(var)):
        return False
    role = nest.roles.get(expr.source.name)
    return role is not None and role.role is Role.PERMUTATION


@dataclass(frozen=True)
class SortRows(Step):
    """Renumber the row loop ``level`` by decreasing row length inside windows of ``window``
    rows (SELL-C-sigma's sigma-sort, Kreutzer et al. 2014): the inspector computes
    ``perm[new] = old`` (a format array), the executor reads the row as ``perm[level]``."""

    window: int
    level: str = "i"

    @property
    def label(self) -> str:
        return f"sort_rows({self.level}, window={self.window})"

    def on_nest(self, nest: SparseNest) -> SparseNest:
        import tvm

        note = self.label
        if isinstance(self.window, bool) or int(self.window) != self.window or self.window < 1:
            raise ScheduleError(f"{note}: the window must be a positive integer")
        lv = nest.level(self.level, note)
        ana = tvm.sym.Analyzer()
        if not (nest.row.same_as(lv.var) and ana.can_prove_equal(lv.lo, 0)
                and ana.can_prove_equal(lv.hi, nest.sizes["M"])):
            raise ScheduleError(f"{note}: loop {self.level} must be the output row over [0, M) "
                                f"(row is {nest.row}, range [{lv.lo}, {lv.hi}))")
        name = f"perm_{self.level}"
        if name in nest.buffers:
            raise ScheduleError(f"{note}: loop {self.level} is already renumbered")
        perm = format_buffer(name, (nest.sizes["M"],), "int32")
        v = _var(self.level)
        out = _replace_level(nest, self.level, [Level(v, lv.lo, lv.hi)], perm[v], note)
        return dataclasses.replace(out, buffers=dict(nest.buffers, **{name: perm}),
                                   roles=dict(nest.roles, **{name: BufferRole(Role.PERMUTATION, self.level)}))

    def permutation(self, space) -> "np.ndarray":
        """``perm[new] = old``: rows by decreasing length, stable, inside each window."""
        import numpy as np

        m = space.extent(self.level)
        counts = np.bincount(space.coords[self.level], minlength=m)[:m]
        new = np.arange(m)
        return np.lexsort((new, -counts, new // int(self.window))).astype(np.int64)

    def on_space(self, space, csr):
        import numpy as np

        perm = self.permutation(space)
        new_of_old = np.empty_like(perm)
        new_of_old[perm] = np.arange(perm.size)
        return tf.reorder(space, self.level, new_of_old)

    def inspected(self, space) -> dict:
        """The arrays this step gives the format, by role."""
        return {BufferRole(Role.PERMUTATION, self.level): self.permutation(space)}


@dataclass(frozen=True)
class Skew(Step):
    """Skew ``level += factor * by`` (DIA's ``[i, k] -> [i, k - i]``), renamed ``name``."""

    level: str
    by: str
    factor: int
    name: str | None = None

    @property
    def label(self) -> str:
        return f"skew({self.level}, {self.by}, {self.factor})" + (f" -> {self.name}" if self.name else "")

    def on_nest(self, nest: SparseNest) -> SparseNest:
        from tvm import tirx

        note = self.label
        name = self.name or self.level
        if self.by == self.level:
            raise ScheduleError(f"{note}: a loop cannot be skewed by itself")
        _fresh(nest, (name,), self.level, note)
        lv, by = nest.level(self.level, note), nest.level(self.by, note)
        f = int(self.factor)
        ends = (f * by.lo, f * (by.hi - 1))
        lo = _simplify(lv.lo + tirx.Min(*ends))
        hi = _simplify(lv.hi + tirx.Max(*ends))
        d = _var(name)
        value = d - f * by.var
        return _replace_level(nest, self.level, [Level(d, lo, hi)], value, note,
                              _range_guards(value, lv.lo, lv.hi))

    def on_space(self, space, csr):
        return tf.skew(space, self.level, self.by, int(self.factor), name=self.name)


@dataclass(frozen=True)
class Shift(Step):
    """Shift ``level += amount`` (``amount``: an int or a callable of ``(M, K)``)."""

    level: str
    amount: Any

    @property
    def label(self) -> str:
        amt = resolve_size(self.amount, _var("M"), _var("K")) if callable(self.amount) else self.amount
        return f"shift({self.level}, {amt})"

    def on_nest(self, nest: SparseNest) -> SparseNest:
        note = self.label
        lv = nest.level(self.level, note)
        a = resolve_size(self.amount, nest.sizes["M"], nest.sizes["K"])
        v = _var(self.level)
        return _replace_level(nest, self.level, [Level(v, _simplify(lv.lo + a), _simplify(lv.hi + a))],
                              v - a, note)

    def on_space(self, space, csr):
        m, k = space.shape
        return tf.shift(space, self.level, int(resolve_size(self.amount, m, k)))


@dataclass(frozen=True)
class Permute(Step):
    """Reorder the (non-existential) loops; a loop may not move outside a loop its bounds read."""

    order: tuple

    @property
    def label(self) -> str:
        return f"permute({', '.join(self.order)})"

    def on_nest(self, nest: SparseNest) -> SparseNest:
        return permute_levels(nest, self.order, self.label)

    def on_space(self, space, csr):
        return tf.permute(space, self.order)


def permute_levels(nest: SparseNest, order: Sequence[str], note: str) -> SparseNest:
    """``nest`` with its dense loops in ``order`` (existential loops stay innermost)."""
    dense = [lv for lv in nest.levels if not lv.existential]
    if sorted(order) != sorted(lv.name for lv in dense):
        raise ScheduleError(f"{note}: {tuple(order)} is not a permutation of the loops "
                            f"{tuple(lv.name for lv in dense)}")
    by_name = {lv.name: lv for lv in dense}
    new = [by_name[n] for n in order]
    for at, lv in enumerate(new):
        inner = {x.var for x in new[at + 1:]}
        for v in free_vars(lv.lo) + free_vars(lv.hi):
            if v in inner:
                raise ScheduleError(f"{note}: the bounds of loop {lv.name} read loop {v.name}, "
                                    f"which would be inside it")
    return nest.replace(note, levels=tuple(new) + tuple(lv for lv in nest.levels if lv.existential))


@dataclass(frozen=True)
class Normalize(Step):
    """Nonaffine shift ``j -= index(i)`` (ELL's row-relative position, Eq. 5.5)."""

    level: str = "j"
    outer: str = "i"

    @property
    def label(self) -> str:
        return f"normalize({self.level})"

    def on_nest(self, nest: SparseNest) -> SparseNest:
        note = self.label
        lv = nest.level(self.level, note)
        nest.level(self.outer, note)
        if lv.existential or not free_vars(lv.lo):
            raise ScheduleError(f"{note}: loop {self.level} must start at an index-array read "
                                f"(like indptr[i]), got range({lv.lo}, {lv.hi})")
        w = _var(self.level)
        return _replace_level(nest, self.level, [Level(w, _simplify(w * 0), _simplify(lv.hi - lv.lo))],
                              w + lv.lo, note)

    def on_space(self, space, csr):
        return tf.normalize(space, self.level, self.outer)


@dataclass(frozen=True)
class Known(Step):
    """A ``known()`` bound: loop ``level`` runs to a symbolic size ``size`` (e.g. ``W``) whose
    value ``value(csr)`` (or an int) the inspector computes; the old bound becomes a guard."""

    level: str
    size: str
    value: Any

    @property
    def label(self) -> str:
        return f"known({self.level} < {self.size})"

    def on_nest(self, nest: SparseNest) -> SparseNest:
        note = self.label
        lv = nest.level(self.level, note)
        if self.size in nest.sizes:
            if nest.meta.get("size_values", {}).get(self.size) is not self.value:
                raise ScheduleError(f"{note}: size {self.size!r} is already defined")
            w = nest.sizes[self.size]          # the same size a split bounded (HYB's W)
            v = _var(self.level)
            return _replace_level(nest, self.level, [Level(v, lv.lo, w)], v, note, [v < lv.hi])
        w = _var(self.size)
        v = _var(self.level)
        sizes = dict(nest.sizes, **{self.size: w})
        out = _replace_level(nest, self.level, [Level(v, lv.lo, w)], v, note, [v < lv.hi])
        return dataclasses.replace(out, sizes=sizes)

    def bound(self, csr) -> int:
        return int(self.value(csr) if callable(self.value) else self.value)

    def on_space(self, space, csr):
        return tf.known(space, self.level, hi=self.bound(csr))


@dataclass(frozen=True)
class Project(Step):
    """Eliminate loop ``level`` existentially: it becomes an inner search loop of the nest
    (still executable) and disappears from the inspected space (information is lost, so a
    later compact-and-pad may find two entries in one slot)."""

    level: str

    @property
    def label(self) -> str:
        return f"project({self.level})"

    def on_nest(self, nest: SparseNest) -> SparseNest:
        at = nest.index(self.level, self.label)
        lv = nest.levels[at]
        if lv.existential:
            raise ScheduleError(f"{self.label}: loop {self.level} is already existential")
        rest = nest.levels[:at] + nest.levels[at + 1:]
        dense = tuple(x for x in rest if not x.existential)
        exist = tuple(x for x in rest if x.existential)
        return nest.replace(self.label, levels=dense + (dataclasses.replace(lv, existential=True),) + exist)

    def on_space(self, space, csr):
        return tf.project(space, self.level)


# ----------------------------------------------------------------------------- compaction

def _reads_arrays(expr) -> bool:
    return bool(loads(expr))


def _reads_source(expr, sources) -> list[str]:
    return [b.name for b in loads(expr) if any(b.same_as(s) for s in sources)]


_ARRAY_OF = {"data": "value", "col": "col", "row": "row"}


@dataclass(frozen=True)
class Compact(Step):
    """§5.1.2 compact: keep only the iterations of ``levels`` with an entry.

    The executor loop ``p`` runs over ``offset_index`` of the outer loops (or
    over all kept iterations when there are none); the compacted loops read
    ``explicit_<level>[p]``; values are gathered into ``a_data[p]`` (the
    ``col_inv`` data copy).  Compacted loops must be innermost (use
    :class:`CompactAndPad` to keep dense loops inside).
    """

    levels: tuple

    @property
    def label(self) -> str:
        return f"compact({', '.join(self.levels)})"

    def on_nest(self, nest: SparseNest) -> SparseNest:
        return _compact_nest(nest, tuple(self.levels), self.label, pad=False, arrays=("data",),
                             identity=None, keep_empty=False)

    def on_space(self, space, csr):
        return tf.compact(space, tuple(self.levels))


@dataclass(frozen=True)
class CompactAndPad(Step):
    """§5.1.3 compact-and-pad: compact ``levels`` and copy ``arrays`` into dense ``a_<array>``
    blocks over the loops inside, padded with ``identity`` (required).

    ``keep_empty`` keeps every iteration of the compacted loop (an all-padding
    block where it has no entry), so the loop stays dense and needs no
    ``explicit_index`` (ELL's rows).  The inspector aborts when the map is not
    injective.
    ``index_dtype``: the explicit indices' type (:func:`~.nest.narrow_explicit_indices`).
    """

    levels: tuple
    identity: Any = None
    arrays: tuple = ("data",)
    keep_empty: bool = False
    index_dtype: str = "int32"

    @property
    def label(self) -> str:
        extra = ", keep_empty" if self.keep_empty else ""
        extra += f", index_dtype={self.index_dtype}" if self.index_dtype != "int32" else ""
        return f"compact_and_pad({', '.join(self.levels)}, identity={self.identity}{extra})"

    def on_nest(self, nest: SparseNest) -> SparseNest:
        if self.identity is None:
            raise ScheduleError(f"{self.label}: padding needs the identity of the update "
                                "operator (0 for +=); pass identity=")
        return narrow_explicit_indices(nest, _compact_nest(
            nest, tuple(self.levels), self.label, pad=True, arrays=tuple(self.arrays), identity=self.identity,
            keep_empty=self.keep_empty), self.levels, self.index_dtype, self.label)

    def on_space(self, space, csr):
        ident = self.identity
        if isinstance(ident, dict):
            ident = {a: ident.get(a) for a in self.arrays}
        return tf.compact_and_pad(space, tuple(self.levels), identity=ident, arrays=tuple(self.arrays))


def _compacted_loops(outer, comp, keep_empty: bool, sizes: dict, buffers: dict, roles: dict,
                     prefix: str = "", part: int = 0):
    """The loops replacing ``outer + comp``, the leading ``A_prime`` indices and extents, and
    the map from each compacted loop variable to its ``explicit_<level>[p]`` read (adds the
    ``offset``/``explicit_*`` buffers with their roles and the ``NC`` size; ``prefix`` starts
    every new buffer and size name, so the parts of a split nest do not collide)."""
    p = _var("p")
    vmap: dict = {}
    new_levels: list[Level] = list(outer)
    if keep_empty:
        return (new_levels + list(comp), [lv.var - lv.lo for lv in comp],
                [_simplify(lv.hi - lv.lo) for lv in comp], vmap)
    nc = _var(prefix.upper() + "NC")
    sizes[nc.name] = nc
    if outer:
        extents = [_simplify(lv.hi - lv.lo) for lv in outer]
        lin, shape = None, None
        for lv, ext in zip(outer, extents):
            lin = (lv.var - lv.lo) if lin is None else lin * ext + (lv.var - lv.lo)
            shape = ext if shape is None else shape * ext
        offset = format_buffer(prefix + "offset", (_simplify(shape + 1),), "int32")
        buffers[offset.name] = offset
        roles[offset.name] = BufferRole(Role.OFFSET, "", part)
        new_levels.append(Level(p, _simplify(offset[lin]), _simplify(offset[lin + 1])))
    else:
        new_levels.append(Level(p, _simplify(p * 0), nc))
    for lv in comp:
        ex = format_buffer(f"{prefix}explicit_{lv.name}", (nc,), "int32")
        buffers[ex.name] = ex
        roles[ex.name] = BufferRole(Role.EXPLICIT, lv.name, part)
        vmap[lv.var] = ex[p]
    return new_levels, [p], [nc], vmap


def _compact_nest(nest: SparseNest, levels: tuple, note: str, *, pad: bool, arrays: tuple,
                  identity, keep_empty: bool) -> SparseNest:
    if not levels:
        raise ScheduleError(f"{note}: name at least one loop")
    dense = [lv for lv in nest.levels if not lv.existential]
    names = [lv.name for lv in dense]
    for nm in levels:
        nest.level(nm, note)
        if nm not in names:
            raise ScheduleError(f"{note}: loop {nm} is an existential search loop")
    at = names.index(levels[0])
    if tuple(names[at:at + len(levels)]) != levels:
        raise ScheduleError(f"{note}: loops {levels} must be consecutive in {tuple(names)}")
    outer, comp, inner = dense[:at], dense[at:at + len(levels)], dense[at + len(levels):]
    if not pad and inner:
        raise ScheduleError(f"{note}: loops {tuple(lv.name for lv in inner)} are inside the compacted "
                            "loops; compact_and_pad keeps dense loops inside, compact does not")
    if keep_empty and outer:
        raise ScheduleError(f"{note}: keep_empty needs the compacted loops outermost")
    for a in arrays:
        if a not in _ARRAY_OF:
            raise ScheduleError(f"{note}: unknown array {a!r}: expected 'data', 'col' or 'row'")
    # the CSR's arrays are what compaction replaces; arrays an earlier step made (a row
    # permutation) stay parameters of the executor
    kept = {n: b for n, b in nest.buffers.items()
            if n in nest.roles and nest.roles[n].role is not Role.SOURCE}
    sources = [b for n, b in nest.buffers.items() if n not in kept]
    for lv in outer + comp + inner:
        if _reads_source(lv.lo, sources) + _reads_source(lv.hi, sources):
            if lv in inner or lv in comp:
                raise ScheduleError(f"{note}: loop {lv.name} has data-dependent bounds "
                                    f"[{lv.lo}, {lv.hi}); bound it first (known) or compact it")
    for lv in inner:
        if any(v in {x.var for x in outer + comp} for v in free_vars(lv.lo) + free_vars(lv.hi)):
            raise ScheduleError(f"{note}: the range of inner loop {lv.name} depends on an outer loop")
    dtype = nest.dtype
    sizes = dict(nest.sizes)
    buffers: dict = dict(kept)
    roles: dict = {n: nest.roles[n] for n in kept}
    prefix = str(nest.meta.get("part_prefix", ""))
    part = int(nest.meta.get("part", 0))
    new_levels, lead, lead_shape, vmap = _compacted_loops(outer, comp, keep_empty, sizes, buffers, roles,
                                                          prefix, part)
    new_levels += inner
    inner_idx = [lv.var - lv.lo for lv in inner]
    inner_shape = [_simplify(lv.hi - lv.lo) for lv in inner]
    from schedules.sparse.recipes.lower import simplify_guards

    # guards the loop ranges already imply go before the ranges become array reads
    nest = dataclasses.replace(nest, guards=tuple(simplify_guards(nest, nest.guards)))
    parts = nest.substitute(vmap)
    drop = {lv.var for lv in nest.levels if lv.existential}
    guards = [g for g in parts["guards"]
              if not _reads_source(g, sources) and not any(v in drop for v in free_vars(g))]
    if not inner and not keep_empty:
        guards = []      # every kept iteration is a stored entry, which satisfies every guard
    new = {"row": parts["row"], "col": parts["col"], "value": parts["value"]}
    for a in arrays:
        buf_dtype = dtype if a == "data" else "int32"
        buf = format_buffer(f"{prefix}a_{a}", tuple(lead_shape + inner_shape), buf_dtype)
        buffers[buf.name] = buf
        roles[buf.name] = BufferRole(Role.COPY, a, part)
        new[_ARRAY_OF[a]] = buf[tuple(_simplify(x) for x in lead + inner_idx)]
    for what in ("row", "col", "value"):
        bad = _reads_source(new[what], sources) or [v.name for v in free_vars(new[what]) if v in drop]
        if bad:
            array = {"value": "data", "col": "col", "row": "row"}[what]
            raise ScheduleError(f"{note}: the executor would still read {', '.join(sorted(set(bad)))} "
                                f"for {what} {new[what]}; carry it with arrays=(..., {array!r})")
    meta = dict(nest.meta, compaction={"levels": levels, "outer": tuple(lv.name for lv in outer),
                                       "inner": tuple(lv.name for lv in inner), "pad": pad,
                                       "arrays": arrays, "identity": identity,
                                       "keep_empty": keep_empty,
                                       # each compacted loop's range: its explicit index's values
                                       "bounds": {lv.name: (lv.lo, lv.hi) for lv in comp}})
    return nest.replace(note, levels=tuple(_simplify_level(lv) for lv in new_levels), guards=tuple(guards),
                        buffers=buffers, roles=roles, sizes=sizes, meta=meta, **new)


def _simplify_level(lv: Level) -> Level:
    return dataclasses.replace(lv, lo=_simplify(lv.lo), hi=_simplify(lv.hi))


# ----------------------------------------------------------------------------- split

@dataclass(frozen=True)
class SplitAt:
    """Index-set split of loop ``level`` at its ``size``-th iteration (HYB's ``j < W``, §9.6):
    part 0 runs the first ``size`` iterations of each row's range, part 1 the rest.

    ``value(csr)`` (or an int) is the inspector's ``size``; a later :class:`Known` with the
    same ``size`` and ``value`` bounds part 0's loop by it.  Each part's arrays are named
    with its ``prefixes`` entry.
    """

    level: str
    size: str
    value: Any
    prefixes: tuple = ("ell_", "coo_")

    @property
    def label(self) -> str:
        return f"split({self.level} < {self.level}.lo + {self.size})"

    def bound(self, csr) -> int:
        return int(self.value(csr) if callable(self.value) else self.value)

    def on_nest(self, nest: SparseNest, part: int) -> SparseNest:
        """Part ``part`` (0: below the split, 1: the rest) of ``nest``."""
        from tvm import tirx

        note = f"{self.label}[{part}]"
        lv = nest.level(self.level, note)
        if lv.existential:
            raise ScheduleError(f"{note}: loop {self.level} is an existential search loop")
        w = nest.sizes.get(self.size)
        if w is None:
            w = _var(self.size)
        cut = _simplify(lv.lo + w)
        new = Level(lv.var, lv.lo, _simplify(tirx.Min(lv.hi, cut))) if part == 0 else Level(lv.var, cut, lv.hi)
        at = nest.index(self.level, note)
        levels = nest.levels[:at] + (new,) + nest.levels[at + 1:]
        meta = dict(nest.meta, part_prefix=self.prefixes[part], part=part,
                    size_values=dict(nest.meta.get("size_values", {}), **{self.size: self.value}))
        return nest.replace(note, levels=levels, sizes=dict(nest.sizes, **{self.size: w}), meta=meta)

    def row_loop(self, nest: SparseNest) -> str:
        """The loop whose iteration owns the split loop's range: the one outer loop its lower
        bound reads (CSR's ``j in [indptr[i], indptr[i + 1])``: ``i``)."""
        note = self.label
        at = nest.index(self.level, note)
        lo_vars = free_vars(nest.levels[at].lo)
        owners = [lv.name for lv in nest.levels[:at] if any(v.same_as(lv.var) for v in lo_vars)]
        if len(owners) != 1:
            raise ScheduleError(f"{note}: the range of loop {self.level} must start at a bound read "
                                f"through one outer loop (CSR's indptr[i]); it starts at "
                                f"{nest.levels[at].lo}")
        return owners[0]

    def on_space(self, space, csr, nest: SparseNest) -> tuple:
        """The inspected space's two parts (entries at position ``< size`` in the range of the
        split loop, ``nest``'s unsplit loop nest naming the loop that owns that range, and the rest)."""
        import numpy as np

        w = self.bound(csr)
        base = np.asarray(space.source.indptr, dtype=np.int64)
        rel = space.coords[self.level] - base[space.coords[self.row_loop(nest)]]
        return tf.split(space, rel < w, label=f"{self.level} < {w}")
