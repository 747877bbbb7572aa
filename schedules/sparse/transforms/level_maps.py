"""Level maps of an iteration space: make-dense (Venkat 2016 §5.1.1) and the enabling maps (§5.2).

:func:`make_dense` replaces ``col[j]`` by a dense level ``k`` under the guard
``k == col[j]`` (no inspector).  The enabling maps :func:`tile`,
:func:`skew`, :func:`shift`, :func:`permute`, :func:`normalize` (ELL's
``j - index(i)``), :func:`known` (a ``known()`` bound), :func:`reorder`
(``reorder_by_inspector``), :func:`project` (existential elimination of a
level) and :func:`select`/:func:`split` (an extra guard) compute every
coordinate in closed form from the guard (§5.2.2: ``v*c + m = e, 0 <= m < c``
gives ``v = e // c, m = e - c*v``), so no inspector ever scans a dense range;
``IterationSpace.exprs`` records the closed form of each level.

>>> import scipy.sparse as sp
>>> tile(make_dense(sp.csr_array([[1.0, 0.0, 2.0]])), "k", 2).exprs["kk"]
'col[j] // 2'
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import numpy as np

from schedules.sparse.transforms.space import IterationSpace, csr_space
from tvm_ext.errors import ScheduleError

__all__ = ["make_dense", "tile", "skew", "shift", "permute", "normalize", "known", "reorder", "project",
           "select", "split"]


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
