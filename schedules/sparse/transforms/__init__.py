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

The rooms: :mod:`.space` (the iteration space and :func:`csr_space`),
:mod:`.level_maps` (make-dense and the enabling maps), :mod:`.compaction`
(compact, compact-and-pad and their results), :mod:`.recipe` (steps chained
into a :class:`Recipe`).  All of it is vectorised numpy: sorting by the
compacted key replaces the dissertation's linked lists (§5.2.1), which keeps
CSR order inside each compacted iteration just as its list-to-array copy does.

>>> import scipy.sparse as sp
>>> A = sp.csr_array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
>>> res = compact_and_pad(make_dense(A), "k", identity=0.0)   # Listing 5.3
>>> res.offset_index.tolist(), res.explicit_index["k"].tolist(), res.a_prime["data"].tolist()
([0, 2, 3], [0, 2, 1], [1.0, 2.0, 3.0])
>>> tile(make_dense(A), "k", 2).exprs["kk"]
'col[j] // 2'
"""
from __future__ import annotations

from schedules.sparse.transforms.compaction import Compaction, PaddedCompaction, compact, compact_and_pad
from schedules.sparse.transforms.level_maps import (known, make_dense, normalize, permute, project, reorder, select,
                                                    shift, skew, split, tile)
from schedules.sparse.transforms.recipe import Recipe, Step, step
from schedules.sparse.transforms.space import IterationSpace, csr_space

__all__ = [
    "IterationSpace", "Compaction", "PaddedCompaction", "Step", "Recipe", "step",
    "csr_space", "make_dense", "tile", "skew", "shift", "permute", "normalize", "known",
    "reorder", "project", "select", "split", "compact", "compact_and_pad",
]
