"""Super-rows: runs of consecutive rows scheduled as one task, in their natural order.

A level schedule runs every level's rows side by side.  When a row's
predecessors sit in *many* earlier levels (the 27-point stencil: a row reads
the ``x`` of rows 1 to 7 levels back), the level order scatters those reads
over several levels' worth of ``x`` and one thread runs it about a third
slower than the natural order (measured: 0.65-0.77x on ``lap3d(40, 27)``);
when the predecessors are all one level back (5- and 7-point stencils) the
level order is *faster* than the natural one (1.3-1.6x: consecutive rows of
a level carry no dependence chain).

So, where most dependences skip a level, rows are coarsened into
**super-rows** (Park et al., "Sparsifying synchronization for
high-performance shared-memory sparse triangular solver", ISC 2014: runs of
consecutive rows become one task of a coarser dependence graph): a super-row
is a run of consecutive rows in which each row follows its predecessor's level
(so it is, typically, one grid line), at most ``max_rows`` long.  The coarse
graph links two super-rows when any of their rows are linked; its levels
(computed like the row levels: one serial pass, pulling from earlier and
pushing to later super-rows, see
:func:`schedules.sparse.level_sets._levels_direct_func`) replace the row levels,
and inside a level each super-row's rows run consecutively in their original
order.  No row of a coarse level depends on a row of another super-row of the
same level, so the point-to-point partition needs only that a super-row is
never split between threads; a thread then runs two super-rows of its task
side by side (:func:`pair_super_rows`).

>>> from schedules.sparse.level_sets import level_sets
>>> from tvm_ext.workloads import lap3d
>>> s = level_sets(lap3d(6, 27))
>>> skips_levels(s), skips_levels(level_sets(lap3d(6)))
(True, False)
>>> lev, grp = super_row_levels(s)
>>> int(lev.max()) + 1 < s.levels    # grid lines of 6 rows: 16 coarse levels instead of 42
True
"""
from __future__ import annotations

import numpy as np

from schedules.sparse.level_sets import LevelSchedule

__all__ = ["MAX_ROWS", "SKIP_SHARE", "skips_levels", "super_row_levels", "pair_super_rows"]

_I32 = np.int32
#: longest super-row (rows): long enough for a grid line of a 3-D stencil, short enough
#: that a coarse level still holds many super-rows
MAX_ROWS = 128
#: super-rows are used when more than this share of the dependences skip a level
SKIP_SHARE = 0.5
_SAMPLE_ROWS = 4000


def skips_levels(sched: LevelSchedule) -> bool:
    """True when most dependences (sampled rows) reach back more than one level.

    >>> from schedules.sparse.level_sets import level_sets
    >>> from tvm_ext.workloads import lap2d
    >>> skips_levels(level_sets(lap2d(8)))
    False
    """
    B, n = sched.matrix, sched.n
    if n == 0 or B.nnz <= n:
        return False
    rows = np.unique(np.linspace(0, n - 1, min(n, _SAMPLE_ROWS)).astype(np.int64))
    level = np.repeat(np.arange(sched.levels, dtype=np.int64), np.diff(sched.level_ptr))
    lo, hi = B.indptr[rows].astype(np.int64), B.indptr[rows + 1].astype(np.int64)
    cnt = hi - lo
    r = np.repeat(rows, cnt)
    idx = np.repeat(lo - np.r_[0, np.cumsum(cnt)[:-1]], cnt) + np.arange(int(cnt.sum()))
    gap = np.abs(level[r] - level[B.indices[idx]])
    gap = gap[gap > 0]
    return bool(gap.size) and float((gap > 1).mean()) > SKIP_SHARE


def _coarse_levels_func():
    """TIR: levels of the super-row graph, one serial pass over the super-rows in sweep
    order; each first pulls ``1 + level`` from the super-rows of its rows' entries on
    the earlier side, then pushes its level + 1 to those on the later side (entries
    that only the earlier row stores)."""
    from tvm.script import tirx as T

    @T.prim_func
    def coarse_levels(indptr_h: T.handle, indices_h: T.handle, rows_h: T.handle, gptr_h: T.handle,
                      grp_h: T.handle, level_h: T.handle, descending: T.int32):
        n = T.int32()
        np1 = T.int32()
        m = T.int32()
        G = T.int32()
        G1 = T.int32()
        indptr = T.match_buffer(indptr_h, (np1,), "int32")
        indices = T.match_buffer(indices_h, (m,), "int32")
        rows = T.match_buffer(rows_h, (n,), "int32")
        gptr = T.match_buffer(gptr_h, (G1,), "int32")
        grp = T.match_buffer(grp_h, (n,), "int32")
        level = T.match_buffer(level_h, (G,), "int32")
        for g in range(G):
            level[g] = 0
        for gg in range(G):
            g = T.bind(T.if_then_else(descending != 0, G - 1 - gg, gg))
            q0 = T.bind(gptr[g])
            for q in range(gptr[g + 1] - q0):
                i = T.bind(rows[q0 + q])
                start = T.bind(indptr[i])
                for p in range(indptr[i + 1] - start):
                    h = T.bind(grp[indices[start + p]])
                    if (descending == 0 and h < g) or (descending != 0 and h > g):
                        level[g] = T.max(level[g], level[h] + 1)
            for q in range(gptr[g + 1] - q0):
                i = T.bind(rows[q0 + q])
                start = T.bind(indptr[i])
                for p in range(indptr[i + 1] - start):
                    h = T.bind(grp[indices[start + p]])
                    if (descending == 0 and h > g) or (descending != 0 and h < g):
                        level[h] = T.max(level[h], level[g] + 1)

    return coarse_levels


def super_row_levels(sched: LevelSchedule, max_rows: int = MAX_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """Coarse level and super-row of every row of ``sched`` (in its level-ordered numbering).

    Super-rows are runs of consecutive original rows, each row in a later level
    than the one before it in sweep order (``sched.lower``: ascending rows,
    else descending), cut every ``max_rows`` rows.  Super-row ids follow the
    original order.  Rows of one coarse level never depend on each other unless
    they share a super-row.
    """
    import tvm

    from schedules.sparse.level_sets import _kernel, _tensor, _view

    n = sched.n
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    lv = sched.level_of.astype(np.int64)
    chained = lv[1:] > lv[:-1] if sched.lower else lv[:-1] > lv[1:]
    brk = np.r_[True, ~chained]
    run = np.cumsum(brk) - 1
    starts = np.flatnonzero(brk)
    brk |= (np.arange(n) - starts[run]) % max(int(max_rows), 1) == 0
    grp_orig = (np.cumsum(brk) - 1).astype(_I32)
    G = int(grp_orig[-1]) + 1
    gptr = np.r_[np.flatnonzero(brk), n].astype(_I32)
    grp = grp_orig[sched.perm]                   # super-row of each level-ordered row
    B = sched.matrix
    level = tvm.runtime.empty((G,), "int32", tvm.cpu(0))
    indices = B.indices.astype(_I32, copy=False) if B.nnz else np.zeros(1, _I32)
    _kernel("super_row_levels", _coarse_levels_func)["main"](
        _tensor(B.indptr.astype(_I32, copy=False)), _tensor(indices),
        _tensor(sched.iperm.astype(_I32, copy=False)), _tensor(gptr), _tensor(grp), level,
        0 if sched.lower else 1)
    return _view(level)[grp].astype(np.int64), grp.astype(np.int64)


def pair_super_rows(group: np.ndarray, level: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """Positions (into the thread-major rows) that interleave, row by row, each two
    consecutive super-rows of a task (a thread's share of a coarse level).  They do
    not depend on each other, so two dependence chains (each row of a super-row
    reads the one before) run side by side; measured on one thread, the symmetric
    Gauss-Seidel sweep of ``lap3d(40|64, 27)`` gains 10-15%.  Each super-row keeps
    its own order; ``group`` must hold each super-row's rows contiguously.

    >>> pair_super_rows(np.array([0, 0, 1, 1, 2]), np.zeros(5, int), np.zeros(5, int)).tolist()
    [0, 2, 1, 3, 4]
    """
    n = group.size
    if n == 0:
        return np.zeros(0, np.int64)
    new_g = np.r_[True, group[1:] != group[:-1]]
    gid = np.cumsum(new_g) - 1
    gfirst = np.flatnonzero(new_g)
    pos = np.arange(n) - gfirst[gid]
    task = owner[gfirst].astype(np.int64) * (int(level.max()) + 1) + level[gfirst]
    new_task = np.r_[True, task[1:] != task[:-1]]
    task_first = np.maximum.accumulate(np.where(new_task, np.arange(task.size), 0))
    rank = np.arange(task.size) - task_first           # super-row's place in its task
    pair = np.cumsum(rank % 2 == 0) - 1                 # global index of its pair
    key = (pair[gid] * (int(pos.max()) + 1) + pos) * 2 + rank[gid] % 2
    return np.argsort(key, kind="stable")
