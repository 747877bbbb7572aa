"""A recipe's compaction as compiled TIR kernels: count pass -> prefix sum -> fill pass.

The dissertation's compact and compact-and-pad inspectors (Venkat 2016
§5.1.2-5.1.3: a ``marked`` vector over the compacted range, ``offset_index``
per outer iteration; sized by a first traversal and filled by a second, as
§5.2 describes OSKI's way, with Listing 5.10's per-block-row marker) gather the
iterations of the compacted levels in executor order.  The numpy inspector
(:mod:`schedules.sparse.transforms.compaction`) does it with a stable sort;
here the same result comes from the compiled TIR kernels of
:mod:`.inspector_kernels`, built once per target through the kernel cache:

* :func:`segment_compact_primfunc` -- where the outer levels are already in
  entry order (BCSR's block rows, S-DIA's row tiles, SELL's chunks, or no
  outer level: DIA, column-major ELL), per outer iteration a count pass over
  its entries (the distinct compacted coordinates, by a marker array), the
  caller's prefix sum of the counts into ``offset_index``, and a fill pass
  (rank, count, prefix sum, stable scatter); parallel over chunks of outer
  iterations, which own disjoint entries and offsets;
* otherwise (CSB: its blocks interleave in row order) :func:`radix_pass_primfunc`,
  one digit of a stable LSD radix sort of the compaction key (the row-major
  index over the outer and compacted levels): per chunk of entries a count
  pass, a serial prefix sum over (digit, chunk), and a stable scatter pass,
  both parallel over chunks; then :func:`group_primfunc`, the compacted
  iterations: a serial count pass over the sorted keys (a new iteration where
  the key changes), the owner of every entry, the iteration starts, and the
  per-outer-iteration counts turned into ``offset_index`` by a prefix sum;
* :func:`gather_primfunc` / :func:`pad_fill_primfunc` -- the parallel fill
  passes: coordinates in executor order (gathered when first read), and
  ``A_prime[slot[e]] = src[pos[e]]`` (safe in parallel once the injectivity
  check has passed: slots are distinct).

The coordinates of the levels themselves (tile, skew, shift, normalize...)
stay the recipe's vectorised numpy steps: elementwise closed forms, a small
share of the time.

:func:`compiled_compact` and :func:`compiled_compact_and_pad` return the same
:class:`~schedules.sparse.transforms.Compaction` /
:class:`~schedules.sparse.transforms.PaddedCompaction` objects as
``transforms.compact`` / ``transforms.compact_and_pad``, array for array;
:func:`compiled_recipe` gives a recipe whose final compaction runs them, so
``compiled_recipe(r).inspect(A)`` is ``r.inspect(A)`` with compiled kernels.

>>> import scipy.sparse as sp
>>> from schedules.sparse.transforms import make_dense
>>> res = compiled_compact_and_pad(make_dense(sp.csr_array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])), "k",
...                                identity=0.0)
>>> res.offset_index.tolist(), res.explicit_index["k"].tolist(), res.a_prime["data"].tolist()
([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0])
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from schedules.sparse.recipes.inspector_kernels import (CHUNK_MIN, RADIX_BITS, bucket_pass_primfunc,
                                                       collision_primfunc, gather_primfunc, group_primfunc,
                                                       pad_fill_primfunc, radix_pass_primfunc,
                                                       segment_compact_primfunc)
from schedules.sparse.recipes.inspector_kernels import as_tensor as _t
from schedules.sparse.recipes.inspector_kernels import kernel as _kernel
from schedules.sparse.recipes.inspector_kernels import threads as _threads
from schedules.sparse.transforms import compaction as _cmp
from schedules.sparse.transforms.compaction import Compaction, PaddedCompaction
from schedules.sparse.transforms.space import IterationSpace
from tvm_ext.errors import ScheduleError

__all__ = ["stable_order", "compiled_compact", "compiled_compact_and_pad", "CompiledCompaction",
           "compiled_recipe"]

#: The segmented compaction ranks a segment's d distinct low parts in d * d compares; above
#: this many compares per entry (summed over the segments) the radix sort is used instead.
_RANK_WORK = 16


def stable_order(key: np.ndarray, total: int, *, target: Any = None
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """``(permutation, sorted key)`` of a stable sort of int64 ``key`` (values in ``[0, total)``),
    or None when ``key`` is already sorted.  LSD radix sort, ``RADIX_BITS`` per compiled pass.

    >>> stable_order(np.array([3, 1, 3, 0], dtype=np.int64), 4)[0].tolist()
    [3, 1, 0, 2]
    """
    n = key.size
    if n < 2 or bool(np.all(key[1:] >= key[:-1])):
        return None
    bits = max(int(total - 1).bit_length(), 1)
    passes = -(-bits // RADIX_BITS)
    nchunk = max(1, min(_threads() * 4, n // CHUNK_MIN))
    hist = np.empty((nchunk, 1 << RADIX_BITS), dtype=np.int64)
    k_a, i_a = np.array(key, dtype=np.int64), np.arange(n, dtype=np.int64)   # a copy: the passes write it
    k_b, i_b = np.empty_like(k_a), np.empty_like(i_a)
    run = _kernel("radix_pass", radix_pass_primfunc, target)
    for p in range(passes):
        run(_t(k_a), _t(i_a), _t(k_b), _t(i_b), _t(hist), p * RADIX_BITS)
        k_a, k_b, i_a, i_b = k_b, k_a, i_b, i_a
    return i_a, k_a


def _gather(src: np.ndarray, idx: np.ndarray, target: Any) -> np.ndarray:
    src = np.ascontiguousarray(src)
    out = np.empty(idx.size, dtype=src.dtype)
    if idx.size:
        dt = src.dtype.name
        _kernel(f"gather_{dt}", lambda: gather_primfunc(dt), target)(_t(src), _t(idx), _t(out))
    return out


class _SortedCoords(Mapping):
    """The coordinates of a space in sorted ``order``, each level gathered (compiled) when first read."""

    def __init__(self, coords: Mapping[str, np.ndarray], order: np.ndarray, target: Any):
        self._coords, self._order, self._target, self._done = coords, order, target, {}

    def __getitem__(self, level: str) -> np.ndarray:
        if level not in self._done:
            self._done[level] = _gather(self._coords[level], self._order, self._target)
        return self._done[level]

    def __iter__(self):
        return iter(self._coords)

    def __len__(self) -> int:
        return len(self._coords)


def _sorted_space(space: IterationSpace, order: np.ndarray | None, target: Any) -> IterationSpace:
    if order is None:
        return space
    return dataclasses.replace(space, coords=_SortedCoords(space.coords, order, target),
                               pos=_gather(space.pos, order, target))


def _collides(slot: np.ndarray, total: int, target: Any) -> bool:
    """Whether two entries share an ``A_prime`` slot (:func:`collision_primfunc`)."""
    n = slot.size
    nchunk = max(1, min(_threads() * 4, n // CHUNK_MIN))
    bad = np.empty(nchunk, np.int64)
    _kernel("collision", collision_primfunc, target)(_t(np.ascontiguousarray(slot)),
                                                     _t(np.empty(max(total, 1), np.int64)), _t(bad))
    return bool((bad >= 0).any())


def _by_outer(key: np.ndarray, div: int, n_outer: int, target: Any) -> tuple | None:
    """``(permutation, key)`` stably sorted by the outer part ``key // div`` (one counting-sort
    pass, :func:`bucket_pass_primfunc`), or None where the per-chunk counts would outgrow the entries."""
    n = key.size
    nchunk = max(1, min(_threads() * 4, n // CHUNK_MIN, (8 * n + (1 << 20)) // max(n_outer, 1)))
    if nchunk * n_outer > 8 * n + (1 << 20):
        return None
    k_out, i_out = np.empty(n, np.int64), np.empty(n, np.int64)
    _kernel("bucket_pass", bucket_pass_primfunc, target)(
        _t(key), _t(np.arange(n, dtype=np.int64)), _t(k_out), _t(i_out),
        _t(np.empty((nchunk, n_outer), np.int64)), div)
    return i_out, k_out


def _outer_sorted(key: np.ndarray, div: int) -> bool:
    outer = key // div
    return bool(np.all(outer[1:] >= outer[:-1]))


def _segmented(key: np.ndarray, div: int, n_outer: int, target: Any) -> tuple | None:
    """``(order, sorted key, owner, offset, first)`` by :func:`segment_compact_primfunc` (the outer
    part of ``key`` sorted), or None where the marker arrays would outgrow the entries, or
    the segments hold so many distinct low parts that the insertion sort would cost more than a
    radix sort."""
    n = key.size
    limit = 8 * n + (1 << 20)
    if div > limit:
        return None
    seg_ptr = np.searchsorted(key // div, np.arange(n_outer + 1, dtype=np.int64)).astype(np.int64)
    span = int(min(np.diff(seg_ptr).max(), div))
    nchunk = max(1, min(_threads() * 4, n_outer, limit // div))
    mark, rank = np.empty((nchunk, div), np.int64), np.empty((nchunk, div), np.int64)
    lst, cnt = np.empty((nchunk, span), np.int64), np.empty((nchunk, span), np.int64)
    n_new, offset = np.empty(n_outer, np.int64), np.zeros(n_outer + 1, np.int64)
    order, key_out, owner = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
    run = _kernel("segment_compact", segment_compact_primfunc, target)
    chunk_ptr = (np.arange(nchunk + 1, dtype=np.int64) * n_outer) // nchunk
    args = [_t(key), _t(seg_ptr), _t(chunk_ptr), _t(n_new), _t(offset), _t(mark), _t(rank), _t(lst), _t(cnt),
            _t(np.empty((nchunk, 3), np.int64)), _t(order), _t(key_out), _t(owner)]
    run(*args, _t(np.empty(1, np.int64)), div, 0)                   # count pass
    if float(np.square(n_new, dtype=np.float64).sum()) > _RANK_WORK * n + 1e6:
        return None
    np.cumsum(n_new, out=offset[1:])
    first = np.empty(max(int(offset[-1]), 1), np.int64)
    run(*args, _t(first), div, 1)                                   # fill pass
    return order, key_out, owner, offset, first[:int(offset[-1])]


def _compiled_compact(space: IterationSpace, levels: str | Sequence[str], note: str,
                      target: Any) -> Compaction | None:
    """``transforms.compaction._compact`` with compiled kernels (None where the key overflows int64)."""
    levels = _cmp._as_levels(levels)
    outer, inner = _cmp._split_levels(space, levels)
    n_outer = math.prod(space.extent(lv) for lv in outer)
    if n_outer > _cmp._MAX_SLOTS:
        raise ScheduleError(f"{note}: offset_index over {outer} would have {n_outer} entries")
    total = math.prod(space.extent(lv) for lv in outer + levels)
    key = _cmp._linear(space, outer + levels)
    if key is None:
        return None
    div = max(math.prod(space.extent(lv) for lv in levels), 1)
    n = space.n
    unsorted, order, done = space, None, n < 2 or bool(np.all(key[1:] >= key[:-1]))
    owner = offset = at = None
    if not done:
        pre, cur, ready = None, key, _outer_sorted(key, div)
        if not ready:                      # the outer levels first, by a counting sort (CSB, SELL)
            pre = _by_outer(key, div, n_outer, target)
            if pre is not None:
                cur, ready = pre[1], True
                done = bool(np.all(cur[1:] >= cur[:-1]))
                if done:
                    order, key = pre
        if not done and ready:
            seg = _segmented(cur, div, n_outer, target)
            if seg is not None:
                order2, key, owner, offset, first = seg
                order = order2 if pre is None else _gather(pre[0], order2, target)
                at = first if pre is None else _gather(pre[0], first, target)
                done = True
    if owner is None:
        if not done:
            sorted_ = stable_order(key, total, target=target)
            if sorted_ is not None:
                order, key = sorted_
        owner, starts = np.empty(n, np.int64), np.empty(n, np.int64)
        offset, count = np.empty(n_outer + 1, np.int64), np.zeros(1, np.int64)
        if n:
            _kernel("group", group_primfunc, target)(_t(key), _t(owner), _t(starts), _t(offset), _t(count), div)
        else:
            offset[:] = 0
        starts = starts[:int(count[0])]
        at = starts if order is None else _gather(order, starts, target)   # first entries, unsorted positions
    space = _sorted_space(space, order, target)
    every = at.size == n
    explicit = {lv: space.coords[lv] if every else _gather(unsorted.coords[lv], at, target) for lv in levels}
    return Compaction(space._with(note), levels, outer, inner, offset, explicit, owner)


def compiled_compact(space: IterationSpace, levels: str | Sequence[str], *, target: Any = None) -> Compaction:
    """``transforms.compact`` (§5.1.2) with the compiled count / prefix-sum / fill kernels.

    >>> import scipy.sparse as sp
    >>> from schedules.sparse.transforms import make_dense
    >>> c = compiled_compact(make_dense(sp.csr_array([[1.0, 0.0], [2.0, 3.0]])), ("i", "k"))
    >>> c.explicit_index["i"].tolist(), c.col_inv.tolist()
    ([0, 1, 1], [0, 1, 2])
    """
    note = f"compact({', '.join(_cmp._as_levels(levels))})"
    comp = _compiled_compact(space, levels, note, target)
    return comp if comp is not None else _cmp._compact(space, levels, note)


def compiled_compact_and_pad(space: IterationSpace, levels: str | Sequence[str], identity: Any = None,
                             arrays: Sequence[str] = ("data",), *, target: Any = None) -> PaddedCompaction:
    """``transforms.compact_and_pad`` (§5.1.3) with compiled kernels: same arrays, same checks.

    A strictly increasing slot array passes the injectivity test at once; otherwise
    :func:`collision_primfunc` looks for a shared slot, and the numpy test names the two
    entries of one.  The fill pass runs only once the slots are known to be distinct.

    >>> import scipy.sparse as sp
    >>> from schedules.sparse.transforms import make_dense, permute, tile
    >>> s = tile(tile(make_dense(sp.csr_array([[1.0, 2.0], [0.0, 3.0]])), "i", 2), "k", 2)
    >>> compiled_compact_and_pad(permute(s, ("ii", "kk", "i", "k")), "kk", identity=0.0).a_prime["data"].tolist()
    [[[1.0, 2.0], [0.0, 3.0]]]
    """
    note = f"compact_and_pad({', '.join(_cmp._as_levels(levels))})"
    idents = _cmp._identities(identity, arrays, note)
    comp = _compiled_compact(space, levels, note, target)
    if comp is None:
        return _cmp.compact_and_pad(space, levels, identity=identity, arrays=arrays)
    sp_, inner = comp.space, comp.inner
    shape = tuple(sp_.extent(lv) for lv in inner)
    size = math.prod(shape)
    inner_key = _cmp._linear(sp_, inner) if inner else np.zeros(sp_.n, np.int64)
    if inner_key is None:
        raise ScheduleError(f"{note}: inner extents {shape} overflow")
    total = comp.count * size
    if total > _cmp._MAX_SLOTS:
        raise ScheduleError(f"{note}: A_prime would have {total} slots for {sp_.n} entries "
                            f"(limit {_cmp._MAX_SLOTS})")
    slot = comp.owner * size + inner_key
    if sp_.n > 1 and not bool(np.all(slot[1:] > slot[:-1])) and _collides(slot, total, target):
        _cmp._check_injective(sp_, slot, total, note, shape)      # raises, naming the two entries
    a_prime = {}
    for name, ident in idents.items():
        src = sp_.source.data if name == "data" else sp_.source.indices if name == "col" else None
        if src is None:                      # "row": no source array to read through pos
            vals, pos = sp_.values(name), np.arange(sp_.n, dtype=np.int64)
        else:
            vals, pos = np.ascontiguousarray(src), sp_.pos
        buf = np.full(total, ident, dtype=vals.dtype)
        if sp_.n:
            dt = vals.dtype.name
            _kernel(f"pad_fill_{dt}", lambda: pad_fill_primfunc(dt), target)(
                _t(buf), _t(comp.owner), _t(np.ascontiguousarray(inner_key)), _t(vals), _t(pos), size)
        a_prime[name] = buf.reshape((comp.count,) + shape)
    fields_ = {f.name: getattr(comp, f.name) for f in dataclasses.fields(Compaction)}
    return PaddedCompaction(**fields_, a_prime=a_prime, identity=idents, slot=slot, inner_shape=shape,
                            segment_ptr=None, segment_extent=None)


# ----------------------------------------------------------------------------- recipes

@dataclass(frozen=True)
class CompiledCompaction:
    """A recipe's final ``Compact`` / ``CompactAndPad`` step whose inspector half runs compiled.

    The executor half (``on_nest``, ``label``) is the wrapped step's, so the
    recipe's key, loop nest and executor are unchanged.
    """

    step: Any
    target: Any = None

    @property
    def label(self) -> str:
        return self.step.label

    def on_nest(self, nest):
        return self.step.on_nest(nest)

    def on_space(self, space, csr):
        from schedules.sparse.recipes.steps import Compact, CompactAndPad

        s = self.step
        if isinstance(s, CompactAndPad):
            ident = s.identity
            if isinstance(ident, dict):
                ident = {a: ident.get(a) for a in s.arrays}
            return compiled_compact_and_pad(space, tuple(s.levels), identity=ident, arrays=tuple(s.arrays),
                                            target=self.target)
        if isinstance(s, Compact):
            return compiled_compact(space, tuple(s.levels), target=self.target)
        return s.on_space(space, csr)

    def __str__(self) -> str:
        return self.label


def compiled_recipe(recipe: Any, target: Any = None) -> Any:
    """``recipe`` with its final compaction run by the compiled kernels (a split recipe: each part's).

    >>> import numpy as np, scipy.sparse as sp
    >>> from schedules.sparse.recipes.library import bcsr_recipe
    >>> A = sp.random(40, 30, density=0.2, format="csr", random_state=0)
    >>> a, b = bcsr_recipe(2, 2).inspect(A), compiled_recipe(bcsr_recipe(2, 2)).inspect(A)
    >>> all(np.array_equal(a.arrays[k], b.arrays[k]) for k in a.arrays)
    True
    """
    return recipe.compiled(target)
