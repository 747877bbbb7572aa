"""Venkat 2016 §5.1-5.2: make-dense, compact and compact-and-pad over an explicit iteration space.

The dissertation derives sparse formats from CSR SpMV by composing loop
transformations (CHiLL scripts).  Here the loop nest is represented by the set
of iterations that satisfy its guard, one per stored non-zero: an
:class:`IterationSpace` holds, for each named loop level, the coordinate of
every inspected non-zero, the level's dense bounds ``[lo, hi)``, and the
originating CSR position ``j`` of each non-zero (``col_inv`` of Listing 5.11).

* :func:`csr_space` is Listing 5.1's ``(i, j)`` space; :func:`make_dense`
  (§5.1.1) replaces ``col[j]`` by a dense level ``k`` under the guard
  ``k == col[j]`` (no inspector).
* Enabling maps: :func:`tile`, :func:`skew`, :func:`shift`, :func:`permute`,
  :func:`normalize` (ELL's ``j - index(i)``), :func:`known` (a ``known()``
  bound), :func:`reorder` (``reorder_by_inspector``), :func:`project`
  (existential elimination of a level), :func:`select`/:func:`split` (an extra
  guard).  Every coordinate is computed in closed form from the guard
  (§5.2.2: ``v*c + m = e, 0 <= m < c`` gives ``v = e // c, m = e - c*v``), so
  no inspector ever scans a dense range; ``IterationSpace.exprs`` records the
  closed form of each level.
* :func:`compact` (§5.1.2) and :func:`compact_and_pad` (§5.1.3) gather the
  iterations of one logical level (one or several consecutive levels) into
  ``offset_index``/``explicit_index``; compact-and-pad also scatters the values
  into a dense ``A_prime[count, inner extents...]`` filled with the update's
  identity, and aborts with :class:`~tvm_ext.errors.ScheduleError` when two
  entries land in the same slot (the injectivity test).
* :class:`Recipe` chains steps, e.g. BCSR =
  ``make_dense -> tile(i,R) -> tile(k,C) -> permute -> compact_and_pad(kk)``.

All of it is vectorised numpy: sorting by the compacted key replaces the
dissertation's linked lists (§5.2.1), which keeps CSR order inside each
compacted iteration just as its list-to-array copy does.

>>> import scipy.sparse as sp
>>> A = sp.csr_array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
>>> res = compact_and_pad(make_dense(A), "k", identity=0.0)   # Listing 5.3
>>> res.offset_index.tolist(), res.explicit_index["k"].tolist(), res.a_prime["data"].tolist()
([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0])
>>> tile(make_dense(A), "k", 2).exprs["kk"]
'col[j] // 2'
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from tvm_ext.errors import ScheduleError

__all__ = [
    "IterationSpace", "Compaction", "PaddedCompaction", "Step", "Recipe", "step",
    "csr_space", "make_dense", "tile", "skew", "shift", "permute", "normalize", "known",
    "reorder", "project", "select", "split", "compact", "compact_and_pad",
]

#: Largest dense offset_index / A_prime the transformations will allocate.
_MAX_SLOTS = 1 << 34
#: Products of level extents below this fit a single int64 sort key.
_KEY_LIMIT = 1 << 62


@dataclass(frozen=True)
class _Source:
    """The CSR the space was inspected from (read-only, never permuted)."""

    shape: tuple[int, int]
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    def gather(self, name: str, pos: np.ndarray) -> np.ndarray:
        """Per-entry values of source array ``name`` ("data", "col" or "row")."""
        if name == "data":
            return self.data[pos]
        if name == "col":
            return self.indices[pos]
        if name == "row":
            return (np.searchsorted(self.indptr, pos, side="right") - 1).astype(self.indices.dtype)
        raise ScheduleError(f"unknown source array {name!r}: expected 'data', 'col' or 'row'")


@dataclass(frozen=True)
class IterationSpace:
    """The guard-satisfying iterations of a loop nest, one per inspected non-zero.

    ``levels`` are the loop levels outer to inner; ``coords[level][e]`` is the
    coordinate of entry ``e`` at that level and lies in ``bounds[level]``
    (``[lo, hi)``, the dense loop's range); ``pos[e]`` is its position ``j`` in
    the source CSR; ``exprs[level]`` the closed form of the level in terms of
    ``j`` and outer levels; ``history`` the transformations applied so far.

    >>> import scipy.sparse as sp
    >>> s = make_dense(sp.csr_array([[0.0, 5.0]]))
    >>> s.levels, s.bounds["k"], s.coords["k"].tolist()
    (('i', 'k'), (0, 2), [1])
    """

    levels: tuple[str, ...]
    coords: Mapping[str, np.ndarray]
    bounds: Mapping[str, tuple[int, int]]
    exprs: Mapping[str, str]
    pos: np.ndarray
    source: _Source = field(repr=False)
    history: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        """Number of inspected entries."""
        return int(self.pos.size)

    @property
    def shape(self) -> tuple[int, int]:
        """Shape of the source matrix."""
        return self.source.shape

    def extent(self, level: str) -> int:
        """Trip count of the dense loop at ``level``."""
        lo, hi = self.bounds[level]
        return max(hi - lo, 0)

    def values(self, name: str = "data") -> np.ndarray:
        """Per-entry source array ("data", "col" or "row"), in entry order."""
        return self.source.gather(name, self.pos)

    def check(self) -> None:
        """Raise :class:`ScheduleError` unless every coordinate is in bounds."""
        for lv in self.levels:
            c, (lo, hi) = self.coords[lv], self.bounds[lv]
            if c.size and (c.min() < lo or c.max() >= hi):
                raise ScheduleError(f"level {lv!r}: coordinates outside [{lo}, {hi})")

    def describe(self) -> str:
        """The loop nest as text, e.g. ``for i in [0, 4): for k in [0, 4): if k == col[j]``."""
        loops = [f"for {lv} in [{self.bounds[lv][0]}, {self.bounds[lv][1]})" for lv in self.levels]
        guard = " && ".join(f"{lv} == {self.exprs[lv]}" for lv in self.levels if self.exprs[lv] != lv)
        return ": ".join(loops) + (f": if {guard}" if guard else "")

    def entry_name(self, e: int) -> str:
        """Human name of entry ``e``: its matrix position, CSR position and coordinates."""
        j = int(self.pos[e])
        row = int(self.source.gather("row", np.array([j]))[0])
        col = int(self.source.indices[j])
        where = ", ".join(f"{lv}={int(self.coords[lv][e])}" for lv in self.levels)
        return f"A[{row}, {col}] (j={j}; {where})"

    def _level_index(self, level: str) -> int:
        if level not in self.levels:
            raise ScheduleError(f"no loop level {level!r}; levels are {self.levels}")
        return self.levels.index(level)

    def _take(self, idx: np.ndarray) -> "IterationSpace":
        return dataclasses.replace(
            self, coords={lv: c[idx] for lv, c in self.coords.items()}, pos=self.pos[idx])

    def _with(self, note: str, **changes: Any) -> "IterationSpace":
        return dataclasses.replace(self, history=self.history + (note,), **changes)


# ----------------------------------------------------------------------------- sources

def _source_of(csr: Any) -> _Source:
    try:
        indptr, indices, data, shape = csr.indptr, csr.indices, csr.data, tuple(csr.shape)
    except AttributeError:
        raise ScheduleError(
            f"expected a CSR matrix (indptr/indices/data/shape), got {type(csr).__name__}") from None
    if indptr.size != shape[0] + 1 or indices.size != data.size or int(indptr[-1]) != indices.size:
        raise ScheduleError(f"inconsistent CSR arrays for shape {shape}")
    return _Source((int(shape[0]), int(shape[1])), indptr, indices, data)


def _rows_of(src: _Source) -> np.ndarray:
    return np.repeat(np.arange(src.shape[0], dtype=np.int64), np.diff(src.indptr))


def csr_space(csr: Any) -> IterationSpace:
    """Listing 5.1's CSR SpMV iteration space ``(i, j)``: ``j`` is the CSR position.

    ``csr`` is a canonical scipy CSR (see ``canonical_csr``) or a ``CSR`` container.

    >>> import scipy.sparse as sp
    >>> csr_space(sp.csr_array([[1.0, 2.0], [0.0, 3.0]])).coords["j"].tolist()
    [0, 1, 2]
    """
    src = _source_of(csr)
    nnz = src.indices.size
    pos = np.arange(nnz, dtype=np.int64)
    return IterationSpace(
        levels=("i", "j"), coords={"i": _rows_of(src), "j": pos},
        bounds={"i": (0, src.shape[0]), "j": (0, nnz)},
        exprs={"i": "i", "j": "j"}, pos=pos, source=src, history=("csr",))


def make_dense(space_or_csr: Any, level: str = "j", name: str = "k") -> IterationSpace:
    """§5.1.1 make-dense: replace ``col[j]`` by a dense level ``name`` in ``[0, K)``.

    The guard ``name == col[j]`` is exposed as the closed form of the new level;
    the ``j`` loop is eliminated (each ``(i, k)`` determines ``j``).  Accepts a
    CSR (starting from :func:`csr_space`) or an ``(.., j)`` space.

    >>> import scipy.sparse as sp
    >>> make_dense(sp.csr_array([[0.0, 2.0], [3.0, 0.0]])).coords["k"].tolist()
    [1, 0]
    """
    space = space_or_csr if isinstance(space_or_csr, IterationSpace) else csr_space(space_or_csr)
    at = space._level_index(level)
    if name in space.levels and name != level:
        raise ScheduleError(f"make_dense: level name {name!r} already used in {space.levels}")
    col = space.source.indices[space.pos].astype(np.int64)
    levels = space.levels[:at] + (name,) + space.levels[at + 1:]
    coords = {lv: c for lv, c in space.coords.items() if lv != level}
    bounds = {lv: b for lv, b in space.bounds.items() if lv != level}
    exprs = {lv: e for lv, e in space.exprs.items() if lv != level}
    coords[name], bounds[name], exprs[name] = col, (0, space.shape[1]), "col[j]"
    return space._with(f"make_dense({name} == col[{level}])", levels=levels, coords=coords,
                       bounds=bounds, exprs=exprs)


# ----------------------------------------------------------------------------- enabling maps

def _paren(expr: str) -> str:
    return f"({expr})" if " " in expr else expr


def _check_size(what: str, value: Any) -> int:
    if isinstance(value, bool) or int(value) != value or value < 1:
        raise ScheduleError(f"{what} must be a positive integer, got {value!r}")
    return int(value)


def _fresh(space: IterationSpace, names: Iterable[str], replacing: str) -> None:
    for nm in names:
        if nm in space.levels and nm != replacing:
            raise ScheduleError(f"level name {nm!r} already used in {space.levels}")


def _replace_level(space: IterationSpace, level: str, new: Sequence[tuple[str, np.ndarray, tuple[int, int], str]],
                   note: str) -> IterationSpace:
    at = space._level_index(level)
    levels = space.levels[:at] + tuple(n for n, *_ in new) + space.levels[at + 1:]
    coords = {lv: c for lv, c in space.coords.items() if lv != level}
    bounds = {lv: b for lv, b in space.bounds.items() if lv != level}
    exprs = {lv: e for lv, e in space.exprs.items() if lv != level}
    for nm, c, b, e in new:
        coords[nm], bounds[nm], exprs[nm] = c, b, e
    return space._with(note, levels=levels, coords=coords, bounds=bounds, exprs=exprs)


def tile(space: IterationSpace, level: str, size: int, outer: str | None = None,
         inner: str | None = None) -> IterationSpace:
    """Tile ``level`` by ``size`` into ``(outer, inner)`` (defaults ``kk``, ``k`` for ``k``).

    Closed form (§5.2.2): ``outer = e // size``, ``inner = e - size*outer``;
    ``inner`` has the full tile range ``[0, size)``.

    >>> import scipy.sparse as sp
    >>> s = tile(make_dense(sp.csr_array([[0.0, 0.0, 0.0, 7.0]])), "k", 2)
    >>> s.levels, s.coords["kk"].tolist(), s.coords["k"].tolist(), s.exprs["k"]
    (('i', 'kk', 'k'), [1], [1], 'col[j] - 2*kk')
    """
    size = _check_size("tile size", size)
    outer, inner = outer or level * 2, inner or level
    if outer == inner:
        raise ScheduleError(f"tile: outer and inner level names must differ, got {outer!r}")
    _fresh(space, (outer, inner), level)
    space._level_index(level)
    e, (lo, hi) = space.coords[level], space.bounds[level]
    o = e // size
    r = e - size * o
    o_lo = lo // size
    o_hi = (hi - 1) // size + 1 if hi > lo else o_lo
    expr = space.exprs[level]
    return _replace_level(space, level, [
        (outer, o, (o_lo, o_hi), f"{_paren(expr)} // {size}"),
        (inner, r, (0, size), f"{_paren(expr)} - {size}*{outer}"),
    ], f"tile({level}, {size}) -> ({outer}, {inner})")


def skew(space: IterationSpace, level: str, by: str, factor: int, name: str | None = None) -> IterationSpace:
    """Skew: ``level += factor * by`` (e.g. DIA's ``[i, k] -> [i, k - i]``), optionally renamed.

    >>> import scipy.sparse as sp
    >>> s = skew(make_dense(sp.csr_array([[1.0, 2.0], [3.0, 0.0]])), "k", "i", -1, name="d")
    >>> s.coords["d"].tolist(), s.bounds["d"]
    ([0, 1, -1], (-1, 2))
    """
    if isinstance(factor, bool) or int(factor) != factor:
        raise ScheduleError(f"skew factor must be an integer, got {factor!r}")
    factor, name = int(factor), name or level
    space._level_index(by)
    if by == level:
        raise ScheduleError("skew: a level cannot be skewed by itself")
    _fresh(space, (name,), level)
    (lo, hi), (blo, bhi) = space.bounds[level], space.bounds[by]
    if hi > lo and bhi > blo:
        ends = (factor * blo, factor * (bhi - 1))
        bounds = (lo + min(ends), hi - 1 + max(ends) + 1)
    else:
        bounds = (lo, lo)
    coords = space.coords[level] + factor * space.coords[by]
    sign = "+" if factor >= 0 else "-"
    expr = f"{space.exprs[level]} {sign} {abs(factor)}*{by}" if abs(factor) != 1 else \
        f"{space.exprs[level]} {sign} {by}"
    return _replace_level(space, level, [(name, coords, bounds, expr)],
                          f"skew({level}, {by}, {factor}) -> {name}")


def shift(space: IterationSpace, level: str, amount: int) -> IterationSpace:
    """Shift: ``level += amount`` (DIA numbers diagonals from 0 with ``amount = M - 1``).

    >>> import scipy.sparse as sp
    >>> shift(make_dense(sp.csr_array([[1.0]])), "k", 3).bounds["k"]
    (3, 4)
    """
    amount = int(amount)
    space._level_index(level)
    lo, hi = space.bounds[level]
    expr = f"{space.exprs[level]} {'+' if amount >= 0 else '-'} {abs(amount)}"
    return _replace_level(space, level, [(level, space.coords[level] + amount, (lo + amount, hi + amount),
                                          expr)], f"shift({level}, {amount})")


def permute(space: IterationSpace, order: Sequence[str]) -> IterationSpace:
    """Reorder the loop levels (``order`` lists every level once, outer to inner).

    >>> import scipy.sparse as sp
    >>> permute(make_dense(sp.csr_array([[1.0]])), ("k", "i")).levels
    ('k', 'i')
    """
    order = tuple(order)
    if sorted(order) != sorted(space.levels):
        raise ScheduleError(f"permute: {order} is not a permutation of the levels {space.levels}")
    return space._with(f"permute({', '.join(order)})", levels=order)


def normalize(space: IterationSpace, level: str = "j", outer: str = "i") -> IterationSpace:
    """Nonaffine shift ``level -= index(outer)`` (ELL's row-relative position, Eq. 5.5).

    The new extent is found by inspection (the longest row, plus nothing);
    :func:`known` can replace it by a known bound.

    >>> import scipy.sparse as sp
    >>> s = normalize(csr_space(sp.csr_array([[1.0, 2.0, 0.0], [0.0, 0.0, 3.0]])))
    >>> s.coords["j"].tolist(), s.bounds["j"]
    ([0, 1, 0], (0, 2))
    """
    space._level_index(level)
    space._level_index(outer)
    base = np.asarray(space.source.indptr, dtype=np.int64)
    c = space.coords[level] - base[space.coords[outer]]
    if c.size and c.min() < 0:
        raise ScheduleError(f"normalize({level}): {level} - index({outer}) is negative")
    bounds = (0, int(c.max()) + 1 if c.size else 0)
    return _replace_level(space, level, [(level, c, bounds, f"{_paren(space.exprs[level])} - index({outer})")],
                          f"normalize({level})")


def known(space: IterationSpace, level: str, hi: int, lo: int = 0) -> IterationSpace:
    """CHiLL's ``known``: assert ``lo <= level < hi`` (ELL's maximum row length, Eq. 5.7).

    The bound becomes the level's range; every entry is checked against it.
    """
    space._level_index(level)
    c = space.coords[level]
    bad = np.flatnonzero((c < lo) | (c >= hi))
    if bad.size:
        raise ScheduleError(f"known constraint {lo} <= {level} < {hi} fails at {space.entry_name(int(bad[0]))}")
    bounds = dict(space.bounds)
    bounds[level] = (int(lo), int(hi))
    return space._with(f"known({lo} <= {level} < {hi})", bounds=bounds)


def reorder(space: IterationSpace, level: str, new_of_old: np.ndarray) -> IterationSpace:
    """Renumber ``level`` through a permutation (``reorder_by_inspector``, Ch. 7).

    ``new_of_old[old] = new``; the level's range becomes ``[0, len(new_of_old))``.

    >>> import scipy.sparse as sp
    >>> reorder(make_dense(sp.csr_array([[1.0], [2.0]])), "i", np.array([1, 0])).coords["i"].tolist()
    [1, 0]
    """
    perm = np.asarray(new_of_old)
    space._level_index(level)
    lo, hi = space.bounds[level]
    if perm.ndim != 1 or lo != 0 or perm.size != hi:
        raise ScheduleError(f"reorder({level}): need a permutation of [0, {hi}) starting at 0")
    if perm.size and not np.array_equal(np.sort(perm), np.arange(perm.size)):
        raise ScheduleError(f"reorder({level}): new_of_old is not a permutation")
    c = perm[space.coords[level]].astype(np.int64)
    return _replace_level(space, level, [(level, c, (0, perm.size), f"perm_inv[{space.exprs[level]}]")],
                          f"reorder({level})")


def project(space: IterationSpace, level: str) -> IterationSpace:
    """Eliminate ``level`` existentially (Fourier-Motzkin projection).

    Loses information: a later compact-and-pad may then find two entries in
    one slot, which its injectivity test rejects.

    >>> import scipy.sparse as sp
    >>> project(make_dense(sp.csr_array([[1.0]])), "k").levels
    ('i',)
    """
    space._level_index(level)
    return space._with(f"project({level})", levels=tuple(lv for lv in space.levels if lv != level),
                       coords={lv: c for lv, c in space.coords.items() if lv != level},
                       bounds={lv: b for lv, b in space.bounds.items() if lv != level},
                       exprs={lv: e for lv, e in space.exprs.items() if lv != level})


def _mask(space: IterationSpace, predicate: Callable[[IterationSpace], np.ndarray] | np.ndarray) -> np.ndarray:
    mask = predicate(space) if callable(predicate) else predicate
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape != (space.n,):
        raise ScheduleError(f"a guard must give one bool per entry ({space.n}), got {mask.dtype} {mask.shape}")
    return mask


def select(space: IterationSpace, predicate: Callable[[IterationSpace], np.ndarray] | np.ndarray,
           label: str = "guard") -> IterationSpace:
    """Keep the entries satisfying an extra guard (e.g. the lower triangle ``i >= k``).

    >>> import scipy.sparse as sp
    >>> s = make_dense(sp.csr_array([[1.0, 2.0], [3.0, 4.0]]))
    >>> select(s, lambda t: t.coords["i"] >= t.coords["k"]).n
    3
    """
    return space._take(np.flatnonzero(_mask(space, predicate)))._with(f"select({label})")


def split(space: IterationSpace, predicate: Callable[[IterationSpace], np.ndarray] | np.ndarray,
          label: str = "guard") -> tuple[IterationSpace, IterationSpace]:
    """Split into (entries satisfying the guard, the rest): HYB's ``j < W`` split.

    >>> import scipy.sparse as sp
    >>> s = normalize(csr_space(sp.csr_array([[1.0, 2.0, 3.0]])))
    >>> [part.n for part in split(s, s.coords["j"] < 2)]
    [2, 1]
    """
    mask = _mask(space, predicate)
    return (space._take(np.flatnonzero(mask))._with(f"select({label})"),
            space._take(np.flatnonzero(~mask))._with(f"select(not {label})"))


# ----------------------------------------------------------------------------- compaction

@dataclass(frozen=True)
class Compaction:
    """Result of :func:`compact`: the compacted loop's inspector arrays.

    ``space`` holds the entries in executor order (sorted by the outer and
    compacted levels, CSR order within); ``owner[e]`` is the compacted
    iteration of entry ``e``; ``offset_index`` (prefix-sum form, flattened
    row-major over the outer levels' dense ranges) and ``explicit_index``
    (the compacted coordinates) drive Fig. 5.3's executor.  ``col_inv`` is
    Listing 5.11's map from executor entry to CSR position.
    """

    space: IterationSpace
    levels: tuple[str, ...]
    outer: tuple[str, ...]
    inner: tuple[str, ...]
    offset_index: np.ndarray
    explicit_index: dict[str, np.ndarray]
    owner: np.ndarray

    @property
    def count(self) -> int:
        """Number of compacted iterations kept."""
        return int(self.offset_index[-1])

    @property
    def col_inv(self) -> np.ndarray:
        """CSR position of each entry in executor order (Listing 5.11)."""
        return self.space.pos

    @property
    def outer_shape(self) -> tuple[int, ...]:
        """Dense extents of the outer levels (``offset_index`` is over their product)."""
        return tuple(self.space.extent(lv) for lv in self.outer)


@dataclass(frozen=True)
class PaddedCompaction(Compaction):
    """Result of :func:`compact_and_pad`: adds ``A_prime`` per transformed array.

    ``a_prime[name]`` has shape ``(count, *inner extents)`` (flat when a level
    is ``ragged``), padded with ``identity[name]``; ``slot[e]`` is the flat
    ``A_prime`` index of entry ``e``.  With ``ragged``, compacted iteration
    ``g`` owns ``a_prime[segment_ptr[g]:segment_ptr[g+1]]`` and its ragged
    level has extent ``segment_extent[g]``.
    """

    a_prime: dict[str, np.ndarray] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)
    slot: np.ndarray | None = None
    inner_shape: tuple[int, ...] = ()
    segment_ptr: np.ndarray | None = None
    segment_extent: np.ndarray | None = None


def _as_levels(levels: str | Sequence[str]) -> tuple[str, ...]:
    return (levels,) if isinstance(levels, str) else tuple(levels)


def _linear(space: IterationSpace, levels: Sequence[str], idx: np.ndarray | None = None) -> np.ndarray | None:
    """Row-major linear index over the dense ranges of ``levels`` (None on int64 overflow)."""
    total = math.prod(space.extent(lv) for lv in levels)
    if total >= _KEY_LIMIT:
        return None
    if not levels:
        return np.zeros(space.n if idx is None else idx.size, dtype=np.int64)
    key = None
    for lv in levels:
        c = space.coords[lv] if idx is None else space.coords[lv][idx]
        if key is None:
            key = c.astype(np.int64, copy=idx is None)   # never write into the space's arrays
        else:
            key *= space.extent(lv)
            key += c
        if space.bounds[lv][0]:
            key -= space.bounds[lv][0]
    return key


def _executor_order(space: IterationSpace, levels: Sequence[str]
                    ) -> tuple[IterationSpace, np.ndarray, np.ndarray | None]:
    """Entries stably sorted by ``levels``: the sorted space, a group-start mask, the sort key."""
    n = space.n
    key = _linear(space, levels)
    if key is not None:
        if n > 1 and not bool(np.all(key[1:] >= key[:-1])):
            order = np.argsort(key, kind="stable")
            space, key = space._take(order), key[order]
        new = np.ones(n, dtype=bool)
        if n > 1:
            np.not_equal(key[1:], key[:-1], out=new[1:])
        return space, new, key
    order = np.lexsort(tuple(space.coords[lv] for lv in reversed(levels)))
    space = space._take(order)
    new = np.ones(n, dtype=bool)
    if n > 1:
        new[1:] = False
        for lv in levels:
            c = space.coords[lv]
            new[1:] |= c[1:] != c[:-1]
    return space, new, None


def _split_levels(space: IterationSpace, levels: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if not levels:
        raise ScheduleError("compact: name at least one level")
    at = space._level_index(levels[0])
    if space.levels[at:at + len(levels)] != levels:
        raise ScheduleError(f"compact: levels {levels} must be consecutive in {space.levels}")
    return space.levels[:at], space.levels[at + len(levels):]


def _compact(space: IterationSpace, levels: str | Sequence[str], note: str) -> Compaction:
    levels = _as_levels(levels)
    outer, inner = _split_levels(space, levels)
    n_outer = math.prod(space.extent(lv) for lv in outer)
    if n_outer > _MAX_SLOTS:
        raise ScheduleError(f"{note}: offset_index over {outer} would have {n_outer} entries")
    space, new, key = _executor_order(space, outer + levels)
    owner = np.cumsum(new, dtype=np.int64) - 1
    starts = np.flatnonzero(new)
    every = starts.size == space.n  # each entry is its own compacted iteration
    explicit = {lv: space.coords[lv] if every else space.coords[lv][starts] for lv in levels}
    if outer:
        if key is not None:  # the outer part of the sort key, no second pass over the levels
            outer_key = (key if every else key[starts]) // max(math.prod(space.extent(lv) for lv in levels), 1)
        else:
            outer_key = _linear(space, outer, starts)
        counts = np.bincount(outer_key, minlength=n_outer)
    else:
        counts = np.array([starts.size], dtype=np.int64)
    offset = np.zeros(n_outer + 1, dtype=np.int64)
    np.cumsum(counts, out=offset[1:])
    return Compaction(space._with(note), levels, outer, inner, offset, explicit, owner)


def compact(space: IterationSpace, levels: str | Sequence[str]) -> Compaction:
    """§5.1.2 compact: keep only the iterations of ``levels`` that satisfy the guard.

    Several consecutive levels are compacted jointly as one logical level
    (CSB's ``(i, l)``).  Always legal; the executor keeps the guard (or reads
    values through ``col_inv``).

    >>> import scipy.sparse as sp
    >>> c = compact(make_dense(sp.csr_array([[1.0, 0.0], [2.0, 3.0]])), ("i", "k"))   # COO
    >>> c.explicit_index["i"].tolist(), c.explicit_index["k"].tolist(), c.col_inv.tolist()
    ([0, 1, 1], [0, 0, 1], [0, 1, 2])
    """
    return _compact(space, levels, f"compact({', '.join(_as_levels(levels))})")


def _identities(identity: Any, arrays: Sequence[str], note: str) -> dict[str, Any]:
    if identity is None:
        raise ScheduleError(f"{note}: padding needs the identity of the update operator "
                            "(0 for +=); pass identity=")
    if isinstance(identity, Mapping):
        missing = [a for a in arrays if identity.get(a) is None]
        if missing:
            raise ScheduleError(f"{note}: no identity given for array(s) {missing}")
        return {a: identity[a] for a in arrays}
    return {a: identity for a in arrays}


def _slots(comp: Compaction, ragged: str | None, note: str):
    """Flat A_prime slot of each entry, the inner shape, and ragged segments."""
    space, inner = comp.space, comp.inner
    shape = tuple(space.extent(lv) for lv in inner)
    starts = np.flatnonzero(np.diff(comp.owner, prepend=-1)) if space.n else np.zeros(0, np.int64)
    if ragged is None:
        size = math.prod(shape)
        inner_key = _linear(space, inner) if inner else np.zeros(space.n, np.int64)
        if inner_key is None:
            raise ScheduleError(f"{note}: inner extents {shape} overflow")
        return comp.owner * size + inner_key, comp.count * size, shape, None, None
    if not inner or inner[0] != ragged:
        raise ScheduleError(f"{note}: the ragged level must be the first inner level, got {ragged!r} "
                            f"with inner levels {inner}")
    rest = inner[1:]
    rest_size = math.prod(shape[1:])
    rel = space.coords[ragged] - space.bounds[ragged][0]
    seg_ext = np.maximum.reduceat(rel, starts) + 1 if starts.size else np.zeros(0, np.int64)
    seg_ptr = np.zeros(seg_ext.size + 1, dtype=np.int64)
    np.cumsum(seg_ext * rest_size, out=seg_ptr[1:])
    rest_key = _linear(space, rest) if rest else np.zeros(space.n, np.int64)
    slot = seg_ptr[comp.owner] + rel * rest_size + rest_key
    return slot, int(seg_ptr[-1]), shape, seg_ptr, seg_ext


def _check_injective(space: IterationSpace, slot: np.ndarray, total: int, note: str, shape) -> None:
    """Abort if two entries map to one A_prime slot (§5.1.3's injectivity test)."""
    n = slot.size
    if n < 2 or bool(np.all(slot[1:] > slot[:-1])):
        return  # strictly increasing: injective
    marker = np.full(total, -1, dtype=np.int64)
    ids = np.arange(n, dtype=np.int64)
    marker[slot] = ids
    lost = np.flatnonzero(marker[slot] != ids)
    if lost.size:
        e = int(lost[0])
        other = int(marker[slot[e]])
        a, b = sorted((e, other))
        where = np.unravel_index(int(slot[e]), (total // max(math.prod(shape), 1),) + shape) \
            if shape is not None else (int(slot[e]),)
        raise ScheduleError(
            f"{note} is not injective: {space.entry_name(a)} and {space.entry_name(b)} both map to "
            f"A_prime[{', '.join(str(int(w)) for w in where)}]; an earlier transformation lost information")


def compact_and_pad(space: IterationSpace, levels: str | Sequence[str], identity: Any = None,
                    arrays: Sequence[str] = ("data",), ragged: str | None = None,
                    max_slots: int | None = None) -> PaddedCompaction:
    """§5.1.3 compact-and-pad: compact ``levels`` and copy ``arrays`` into padded ``A_prime``.

    ``A_prime[name]`` has shape ``(count, *inner extents)`` (the dense ranges of
    the levels inside ``levels``) filled with ``identity`` (a scalar, or a dict
    per array; required: the executor's guard is dropped, so padded slots must
    be harmless).  ``arrays`` names source arrays: "data", "col", "row".
    ``ragged`` (beyond the dissertation, for SELL) sizes the first inner level
    per compacted iteration instead of globally.  ``max_slots`` caps the
    allocation.  Raises :class:`ScheduleError` if two entries share a slot.

    >>> import scipy.sparse as sp
    >>> s = tile(tile(make_dense(sp.csr_array([[1.0, 2.0], [0.0, 3.0]])), "i", 2), "k", 2)
    >>> p = compact_and_pad(permute(s, ("ii", "kk", "i", "k")), "kk", identity=0.0)   # BCSR 2x2
    >>> p.offset_index.tolist(), p.a_prime["data"].tolist()
    ([0, 1], [[[1.0, 2.0], [0.0, 3.0]]])
    """
    note = f"compact_and_pad({', '.join(_as_levels(levels))})"
    idents = _identities(identity, arrays, note)
    comp = _compact(space, levels, note)
    slot, total, shape, seg_ptr, seg_ext = _slots(comp, ragged, note)
    limit = _MAX_SLOTS if max_slots is None else min(int(max_slots), _MAX_SLOTS)
    if total > limit:
        raise ScheduleError(f"{note}: A_prime would have {total} slots for {space.n} entries "
                            f"(limit {limit})")
    _check_injective(comp.space, slot, total, note, None if ragged else shape)
    out_shape = (comp.count,) + shape if ragged is None else (total,)
    a_prime = {}
    for name, ident in idents.items():
        vals = comp.space.values(name)
        buf = np.full(total, ident, dtype=vals.dtype)
        buf[slot] = vals
        a_prime[name] = buf.reshape(out_shape)
    fields_ = {f.name: getattr(comp, f.name) for f in dataclasses.fields(Compaction)}
    return PaddedCompaction(**fields_, a_prime=a_prime, identity=idents, slot=slot, inner_shape=shape,
                            segment_ptr=seg_ptr, segment_extent=seg_ext)


# ----------------------------------------------------------------------------- recipes

@dataclass(frozen=True)
class Step:
    """One named transformation of a :class:`Recipe`."""

    label: str
    apply: Callable[[Any], Any]

    def __call__(self, x: Any) -> Any:
        return self.apply(x)


def _fmt(v: Any) -> str:
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(map(_fmt, v)) + "]"
    if isinstance(v, np.ndarray):
        return f"<{v.size}>"
    if callable(v):
        return getattr(v, "__name__", "fn")
    return str(v)


def step(fn: Callable[..., Any], *args: Any, label: str | None = None, **kwargs: Any) -> Step:
    """Bind a transformation's arguments: ``step(tile, "i", 4)`` is ``tile(space, "i", 4)``.

    >>> step(tile, "i", 4).label
    'tile(i, 4)'
    """
    if label is None:
        parts = [_fmt(a) for a in args] + [f"{k}={_fmt(v)}" for k, v in kwargs.items()]
        label = f"{fn.__name__}({', '.join(parts)})"
    return Step(label, lambda x: fn(x, *args, **kwargs))


@dataclass(frozen=True)
class Recipe:
    """A transformation script: steps applied in order to a CSR (CHiLL's recipes, §5.1.6).

    >>> import scipy.sparse as sp
    >>> r = Recipe("csr", (step(make_dense), step(compact_and_pad, "k", identity=0.0)))
    >>> str(r)
    'csr: make_dense() -> compact_and_pad(k, identity=0.0)'
    >>> r.run(sp.csr_array([[0.0, 4.0]])).explicit_index["k"].tolist()
    [1]
    """

    name: str
    steps: tuple[Step, ...]

    def run(self, source: Any) -> Any:
        """Apply every step to ``source`` (a canonical CSR) and return the last result."""
        out = source
        for s in self.steps:
            out = s(out)
        return out

    def __str__(self) -> str:
        return f"{self.name}: " + " -> ".join(s.label for s in self.steps)
