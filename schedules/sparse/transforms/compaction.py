"""Compact (Venkat 2016 §5.1.2) and compact-and-pad (§5.1.3): an iteration space's inspector arrays.

Both gather the iterations of one logical level (one or several consecutive
levels) into ``offset_index``/``explicit_index``; compact-and-pad also
scatters the values into a dense ``A_prime[count, inner extents...]`` filled
with the update's identity, and aborts with
:class:`~tvm_ext.errors.ScheduleError` when two entries land in the same slot
(the injectivity test).  Sorting by the compacted key replaces the
dissertation's linked lists (§5.2.1), which keeps CSR order inside each
compacted iteration just as its list-to-array copy does.

>>> import scipy.sparse as sp
>>> from schedules.sparse.transforms import make_dense
>>> res = compact_and_pad(make_dense(sp.csr_array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])), "k", identity=0.0)
>>> res.offset_index.tolist(), res.explicit_index["k"].tolist(), res.a_prime["data"].tolist()
([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0])
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from schedules.sparse.transforms.space import IterationSpace
from tvm_ext.errors import ScheduleError

__all__ = ["Compaction", "PaddedCompaction", "compact", "compact_and_pad"]

#: Largest dense offset_index / A_prime the transformations will allocate.
_MAX_SLOTS = 1 << 34
#: Products of level extents below this fit a single int64 sort key.
_KEY_LIMIT = 1 << 62


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
    >>> from schedules.sparse.transforms import make_dense
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
    >>> from schedules.sparse.transforms import make_dense, permute, tile
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
