"""Venkat 2016 ch. 7 (Fig. 7.2): the point-to-point wavefront executor.

The barrier executor (:mod:`schedules.sparse.triangular`) joins all threads
after every level.  Here each row waits only for the rows it depends on:

* **Partition** (inspector): every level of the :class:`LevelSchedule` is
  split into ``P`` contiguous chunks of about equal work (stored entries),
  chunk ``t`` goes to thread ``t``, and each thread runs its rows in level
  order.  The matrix is permuted once more so each thread's rows are
  contiguous (``reorder_data``).  Since every dependence points to a
  strictly earlier level and each thread runs its rows in level order, the
  waits form no cycle: no deadlock.
* **Super-rows**: where most dependences skip a level (27-point stencils),
  the level order scatters a row's reads over many levels and runs slower
  than the natural order; the tasks are then cut from the levels of
  *super-rows* (runs of consecutive rows, run whole and in order by one
  thread; :mod:`schedules.sparse.super_rows`) instead of single rows.
* **Waits** (SpMP's sparsified post-and-wait): thread ``t`` publishes how
  many of its rows are done; row ``i`` of thread ``t`` needs, from each other
  thread ``u``, the count ``1 + position of its last predecessor owned by
  u``.  Needs that an earlier row of the same thread already covered are
  dropped (counts only grow).  The rows that remain waiting, and the rows
  other threads wait for, cut each thread's run into **segments** (the
  dissertation's tasks, ``taskBoundaries``): a segment waits once before its
  first row, runs its rows as a plain loop (the serial sweep's row code, no
  per-row check) and publishes its end.  The backward sweep has its own
  segments (rows in reverse).
* **Synchronisation**: TIR has no atomics and no wait, so the TIR kernel calls
  a small extern C function (``csrc/tvmext_p2p.c``, C11 acquire loads /
  release stores on one cache line per thread) through ``T.call_extern``:
  ``tvmext_p2p_wait`` before a segment that needs another thread's rows and
  ``tvmext_p2p_notify`` after each segment.  The C library is
  built and loaded by :func:`schedules.sparse.native.load_native` (private
  directory, hash-checked).  A wait spins for a bounded time (50 us), then
  sleeps on a futex on the producer's count, which ``notify`` wakes only
  when a sleeper announced itself.  One ``T.parallel`` launch runs all ``P``
  partitions at once (``P`` = :func:`pool_threads`, the workers TVM's pool
  really runs); a wait that sees no progress for ``timeout_ms`` (a partition
  that never started, e.g. fewer pool threads than ``P``) makes the kernel
  finish early and :meth:`P2PExecutor.run` raise
  :class:`tvm_ext.errors.ConfigError` instead of hanging.
* **Replay**: when other processes hold the cores, a partner thread is often
  descheduled and each wait for it costs a scheduling delay, however the wait
  is done; the parallel sweep then falls far below one thread.  The same
  schedule replayed by the calling thread alone (partitions round robin, a
  segment once its waits are met) needs one core and gives the same result;
  :class:`P2PExecutor`'s default ``policy="auto"`` times both and runs the
  faster.

Results equal the barrier executor's: a row reads exactly the values of its
predecessors' updates, and (the dependence graph links every coupled pair)
no row is updated before the rows that read its old value.

>>> import numpy as np, scipy.sparse as sp
>>> from schedules.sparse.triangular import TriangularSolver
>>> from tvm_ext.workloads import lap2d
>>> L = sp.tril(lap2d(10), format="csr")
>>> x = TriangularSolver(L, sync="p2p").solve(np.ones(100))
>>> bool(np.allclose(L @ x, 1.0))
True
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from schedules.sparse.level_sets import LevelSchedule, _permute_canonical
from schedules.sparse.row_sweep import _check_dtype, _row_code, _run_in_original_order, _sweep_operands
from schedules.sparse.super_rows import pair_super_rows, skips_levels, super_row_levels
from tvm_ext.errors import ConfigError

__all__ = ["P2PSchedule", "P2PExecutor", "p2p_schedule", "p2p_func", "p2p_kernel",
           "DEFAULT_TIMEOUT_MS", "RUN_ORDERS", "pool_threads", "POLICIES", "PROBE_EVERY", "PROBE_MAX"]

_I32 = np.int32
_SLOT = 16  # int32 per progress slot: one cache line per thread (matches csrc/tvmext_p2p.c)
#: a wait that sees no progress for this long gives up (the run then raises)
DEFAULT_TIMEOUT_MS = 20000
#: how :func:`p2p_schedule` orders a thread's rows: ``"level"`` (row levels),
#: ``"super_rows"`` (levels of super-rows, :mod:`schedules.sparse.super_rows`) or
#: ``"auto"`` (super-rows where most dependences skip a level)
RUN_ORDERS = ("auto", "level", "super_rows")
#: ``"auto"`` keeps super-rows only where the coarse levels average this many super-rows per thread
MIN_SUPER_ROWS = 4


def pool_threads() -> int:
    """Threads that one ``T.parallel`` launch of TVM's thread pool runs at once.

    This is ``tvm.runtime.num_threads()``, not ``TVM_NUM_THREADS``: TVM caps the
    workers of a launch at the cores it may use, so ``TVM_NUM_THREADS=4`` on two
    cores still runs two.  The executor needs one partition per running thread
    (a partition queued behind another of the same thread would wait forever).

    >>> pool_threads() >= 1
    True
    """
    import tvm

    return max(int(tvm.runtime.num_threads()), 1)


@dataclass(frozen=True)
class P2PSchedule:
    """Thread partition and waits of the point-to-point executor.

    * ``threads``: partitions ``P``; thread ``t`` owns rows
      ``thread_ptr[t]:thread_ptr[t+1]`` (in the executor's numbering) and runs
      them in that order (forward) or in reverse (backward).
    * ``perm[new] = original row``; ``matrix``: the matrix in that numbering.
    * Each thread's run is cut into **segments** (SpMP's tasks): direction
      ``d`` (0 forward, 1 backward), thread ``t`` has segments
      ``seg_ptr[d*P + t]:seg_ptr[d*P + t + 1]``; segment ``s`` covers run
      positions ``seg_lo[s]:seg_hi[s]`` and, before its first row, waits until
      thread ``wait_thread[w]`` has finished ``wait_count[w]`` rows for each
      ``w`` in ``wait_ptr[s]:wait_ptr[s+1]``; after its last row the thread
      publishes ``seg_hi[s]``.  Segments end exactly where a row that some
      other thread waits for is done, and start exactly at a row that waits,
      so the rows between run as a tight loop with no synchronisation.
    * ``waits``: waits left after sparsification (forward, backward).
    * ``levels``: levels the tasks are cut from; ``super_rows``: whether those are
      levels of super-rows (:mod:`schedules.sparse.super_rows`) rather than of rows.
    """

    threads: int
    thread_ptr: np.ndarray
    perm: np.ndarray
    matrix: sp.csr_array
    seg_ptr: np.ndarray
    seg_lo: np.ndarray
    seg_hi: np.ndarray
    wait_ptr: np.ndarray
    wait_thread: np.ndarray
    wait_count: np.ndarray
    waits: tuple[int, int]
    levels: int
    super_rows: bool = False

    @property
    def segments(self) -> tuple[int, int]:
        """Segments per direction (forward, backward), all threads together."""
        P = self.threads
        return int(self.seg_ptr[P] - self.seg_ptr[0]), int(self.seg_ptr[2 * P] - self.seg_ptr[P])


def _owner_order(level_ptr: np.ndarray, row_nnz: np.ndarray, threads: int,
                 group: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Thread of each level-ordered row and the thread-major order.

    Each level is cut into ``threads`` contiguous chunks of about equal work
    (stored entries + 1 per row), chunk ``t`` to thread ``t``; a row goes to
    the chunk holding the middle of its work.  Contiguous chunks keep a
    thread's rows of consecutive levels next to each other in the original
    numbering, so most dependences stay inside one thread.  ``group``
    (super-rows, contiguous here): every row of a group goes with the middle
    of the group's work, so no group is split between threads.
    """
    n = int(level_ptr[-1])
    sizes = np.diff(level_ptr).astype(np.int64)
    level = np.repeat(np.arange(sizes.size), sizes)
    w = row_nnz.astype(np.float64) + 1.0
    cw = np.cumsum(w)
    before = np.concatenate([[0.0], cw])[level_ptr[:-1].astype(np.int64)]   # work before each level
    total = np.concatenate([[0.0], cw])[level_ptr[1:].astype(np.int64)] - before
    mid = cw - 0.5 * w - before[level]
    if group is not None and n:
        new = np.r_[True, group[1:] != group[:-1]]
        first = np.flatnonzero(new)
        last = np.r_[first[1:], n] - 1
        mid = (0.5 * (cw[first] - w[first] + cw[last]) - before[level[first]])[np.cumsum(new) - 1]
    owner = np.minimum((mid * threads / total[level]).astype(np.int64), threads - 1).astype(_I32)
    order = np.argsort(owner, kind="stable").astype(_I32)  # by thread, level order inside
    if n == 0:
        owner = np.zeros(0, _I32)
    return owner, order


def _needs_func():
    """TIR (row-parallel, each row writes only its own needs): for row ``r`` and
    each other thread ``u``, the largest task end (``fend``/``bend``) among
    ``r``'s neighbours owned by ``u`` in earlier (forward) / later (backward)
    levels; 0 where there is none."""
    from tvm.script import tirx as T

    @T.prim_func
    def needs(indptr_h: T.handle, indices_h: T.handle, owner_h: T.handle, level_h: T.handle,
              fend_h: T.handle, bend_h: T.handle, fneed_h: T.handle, bneed_h: T.handle,
              P: T.int32):
        n = T.int32()
        np1 = T.int32()
        m = T.int32()
        nP = T.int32()
        indptr = T.match_buffer(indptr_h, (np1,), "int32")
        indices = T.match_buffer(indices_h, (m,), "int32")
        owner = T.match_buffer(owner_h, (n,), "int32")
        level = T.match_buffer(level_h, (n,), "int32")
        fend = T.match_buffer(fend_h, (n,), "int32")
        bend = T.match_buffer(bend_h, (n,), "int32")
        fneed = T.match_buffer(fneed_h, (nP,), "int32")
        bneed = T.match_buffer(bneed_h, (nP,), "int32")
        for r in T.parallel(n):
            for u in range(P):
                fneed[r * P + u] = 0
                bneed[r * P + u] = 0
            start = T.bind(indptr[r])
            for p in range(indptr[r + 1] - start):
                c = T.bind(indices[start + p])
                o = T.bind(owner[c])
                if o != owner[r]:
                    if level[c] < level[r]:
                        fneed[r * P + o] = T.max(fneed[r * P + o], fend[c])
                    if level[c] > level[r]:
                        bneed[r * P + o] = T.max(bneed[r * P + o], bend[c])

    return needs


def _direction(need: np.ndarray, owner: np.ndarray, pos: np.ndarray, run_len: np.ndarray,
               threads: int) -> tuple[list, list, list, list, list, int]:
    """Segments and sparsified waits of one sweep direction.

    ``need[r * P + u]``: the count of thread ``u``'s rows that row ``r`` must
    see finished (0: none); ``pos``: each row's run position inside its
    thread.  A need that an earlier row (in run order) of the same thread
    already waited for is dropped (counts only grow).  Returns per thread:
    segment bounds, wait pointers, wait threads and counts, and the number of
    waits.
    """
    flat = np.flatnonzero(need)
    row, u_of = flat // threads, flat % threads
    t_of, k_of, c_of = owner[row].astype(np.int64), pos[row].astype(np.int64), need[flat]
    pair = t_of * threads + u_of
    o = np.lexsort((k_of, pair))                 # by thread pair, run order inside
    pair, k_of, c_of = pair[o], k_of[o], c_of[o].astype(np.int64)
    keep = np.ones(pair.size, dtype=bool)
    if pair.size:
        starts = np.flatnonzero(np.r_[True, pair[1:] != pair[:-1]])
        bounds = np.r_[starts, pair.size]
        for a, b in zip(bounds[:-1], bounds[1:]):  # one vectorised prefix max per thread pair
            c = c_of[a:b]
            keep[a:b] = c > np.maximum.accumulate(np.r_[0, c[:-1]])
    pair, k_of, c_of = pair[keep], k_of[keep], c_of[keep]
    t_w, u_w = pair // threads, pair % threads
    seg_lo, seg_hi, wptr, wth, wcnt = [], [], [], [], []
    for t in range(threads):
        mine = t_w == t
        bounds = np.unique(np.concatenate([[0, run_len[t]], k_of[mine], c_of[u_w == t]]))
        lo, hi = bounds[:-1], bounds[1:]
        seg = np.searchsorted(lo, k_of[mine])          # each wait precedes the row at a bound
        o = np.argsort(seg, kind="stable")
        seg_lo.append(lo)
        seg_hi.append(hi)
        wptr.append(np.bincount(seg, minlength=lo.size))
        wth.append(u_w[mine][o])
        wcnt.append(c_of[mine][o])
    return seg_lo, seg_hi, wptr, wth, wcnt, int(keep.sum())


def _task_levels(sched: LevelSchedule, run_order: str,
                 threads: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """The levels the partition cuts into tasks: per row of ``sched`` its (row or
    super-row) level, the rows sorted by that level (``seq``; a super-row's rows
    consecutive, in sweep order), the level pointers of ``seq`` and the super-row of
    each row of ``seq`` (``None`` with row levels)."""
    if run_order not in RUN_ORDERS:
        raise ConfigError(f"p2p_schedule: run_order must be one of {RUN_ORDERS}, got {run_order!r}")
    n = sched.n
    if run_order != "level" and n and (run_order == "super_rows" or skips_levels(sched)):
        lev, grp = super_row_levels(sched)
        # "auto" keeps them only where a coarse level still holds several super-rows per thread
        if run_order == "super_rows" or grp.max() + 1 >= MIN_SUPER_ROWS * threads * (lev.max() + 1):
            by_level = np.argsort(lev[sched.iperm][::1 if sched.lower else -1], kind="stable")
            seq = sched.iperm[by_level if sched.lower else n - 1 - by_level]  # sweep order inside
            level_ptr = np.zeros(int(lev.max()) + 2, dtype=_I32)
            np.cumsum(np.bincount(lev, minlength=level_ptr.size - 1), out=level_ptr[1:])
            return lev, seq, level_ptr, grp[seq]
    lev = np.repeat(np.arange(sched.levels, dtype=np.int64), np.diff(sched.level_ptr))
    return lev, np.arange(n, dtype=np.int64), sched.level_ptr, None


def _partition(sched: LevelSchedule, run_order: str, threads: int,
               interleave: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, bool]:
    """Thread of each row in the thread-major order, that order (rows of ``sched``),
    each row's task level (indexed by ``sched``'s rows), the number of task levels
    and whether they are super-row levels.  ``interleave``: a task's super-rows
    run two by two, row by row (:func:`pair_super_rows`), else one after another."""
    lev, seq, level_ptr, group = _task_levels(sched, run_order, threads)
    owner_seq, by_thread = _owner_order(level_ptr, np.diff(sched.matrix.indptr)[seq], threads, group)
    owner, order = owner_seq[by_thread], seq[by_thread].astype(_I32)
    if group is not None and interleave:
        inside = pair_super_rows(group[by_thread], lev[order], owner)
        owner, order = owner[inside], order[inside]
    return owner, order, lev, level_ptr.size - 1, group is not None


def _task_ends(owner: np.ndarray, level: np.ndarray, thread_ptr: np.ndarray,
               n_levels: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row (thread-major numbering), the forward and backward run positions just
    past its task.  A task is a thread's chunk of one level: rows with equal
    (owner, level), contiguous in this numbering."""
    n = owner.size
    gkey = owner.astype(np.int64) * (n_levels + 1) + level
    new_task = np.r_[True, gkey[1:] != gkey[:-1]] if n else np.zeros(0, bool)
    task_id = np.cumsum(new_task) - 1
    first = np.flatnonzero(new_task)
    last = np.r_[first[1:], n] - 1
    fend = ((last - thread_ptr[owner[first]]) + 1)[task_id].astype(_I32)
    bend = (thread_ptr[owner[first] + 1] - first)[task_id].astype(_I32)
    return fend, bend


def p2p_schedule(sched: LevelSchedule, threads: int, run_order: str = "auto",
                 interleave: bool = True) -> P2PSchedule:
    """Partition a level schedule over ``threads`` and derive the point-to-point waits.

    A wait is for a whole **task** (a thread's chunk of one level, SpMP's
    granularity): row ``r`` of thread ``t`` waits, for each other thread
    ``u``, until ``u`` has finished the task of ``r``'s last neighbour that
    ``u`` owns in an earlier level (forward; later level, backward).  So each
    thread publishes its count once per task, not at every row another thread
    reads.  The neighbour scan is one row-parallel TIR kernel; numpy handles
    only the rows that have a wait.

    ``run_order``: ``"level"`` cuts the row levels into tasks, ``"super_rows"``
    the levels of super-rows (:mod:`schedules.sparse.super_rows`), which keep the
    natural order's locality where a row's predecessors span many levels;
    ``"auto"`` (default) takes super-rows where most dependences skip a level and
    the coarse levels still hold :data:`MIN_SUPER_ROWS` super-rows per thread.
    ``interleave``: run each two super-rows of a task side by side (``pair_super_rows``);
    on ``lap3d(40|64, 27)`` that makes Gauss-Seidel 10-17% faster but the lower solve
    4-10% slower, so ``TriangularSolver`` turns it off.

    >>> from schedules.sparse.level_sets import level_sets
    >>> from tvm_ext.workloads import lap2d
    >>> s = p2p_schedule(level_sets(lap2d(6)), 2)
    >>> s.thread_ptr.tolist(), s.matrix.shape
    ([0, 15, 36], (36, 36))
    """
    import tvm

    from schedules.sparse.level_sets import _kernel, _tensor

    threads = max(int(threads), 1)
    B = sched.matrix
    n = B.shape[0]
    owner, order, lev, n_levels, super_rows = _partition(sched, run_order, threads, interleave)
    iorder = np.empty_like(order)
    iorder[order] = np.arange(n, dtype=_I32)
    C = _permute_canonical(B, order, iorder) if n else B
    thread_ptr = np.zeros(threads + 1, dtype=_I32)
    np.cumsum(np.bincount(owner, minlength=threads), out=thread_ptr[1:])
    run_len = np.diff(thread_ptr).astype(np.int64)
    idx = np.arange(n, dtype=_I32)
    fpos = idx - thread_ptr[owner]              # forward run position inside the thread
    bpos = thread_ptr[owner + 1] - 1 - idx      # backward run position
    level = lev[order].astype(_I32)
    fend, bend = _task_ends(owner, level, thread_ptr, n_levels)
    scan = C
    if not sched.edges_in_rows and n:   # an entry may be stored in one of its two rows only
        pat = sp.csr_array((np.ones(C.nnz, np.int8), C.indices, C.indptr), shape=C.shape)
        pt = pat.T.tocsr()              # a counting sort: its rows come out sorted
        if not (np.array_equal(pt.indptr, C.indptr) and np.array_equal(pt.indices, C.indices)):
            scan = (pat + pt).tocsr()   # unsymmetric pattern: scan the symmetrised one
    cpu = tvm.cpu(0)
    fneed = tvm.runtime.empty((max(n * threads, 1),), "int32", cpu)
    bneed = tvm.runtime.empty((max(n * threads, 1),), "int32", cpu)
    if n and scan.nnz:
        _kernel("p2p_needs", _needs_func)["main"](
            _tensor(scan.indptr.astype(_I32)), _tensor(scan.indices.astype(_I32)), _tensor(owner),
            _tensor(level), _tensor(fend), _tensor(bend), fneed, bneed, threads)
        fn, bn = fneed.numpy()[:n * threads], bneed.numpy()[:n * threads]
    else:
        fn = bn = np.zeros(n * threads, _I32)
    parts = [_direction(fn, owner, fpos, run_len, threads),
             _direction(bn, owner, bpos, run_len, threads)]
    lo = [x for p in parts for x in p[0]]
    hi = [x for p in parts for x in p[1]]
    counts = [x.size for x in lo]
    seg_ptr = np.zeros(2 * threads + 1, dtype=_I32)
    np.cumsum(counts, out=seg_ptr[1:])
    wper = np.concatenate([x for p in parts for x in p[2]] + [np.zeros(0, np.int64)])
    wait_ptr = np.zeros(wper.size + 1, dtype=_I32)
    np.cumsum(wper, out=wait_ptr[1:])
    cat = lambda k: np.concatenate([x for p in parts for x in p[k]]  # noqa: E731
                                   + [np.zeros(0, np.int64)]).astype(_I32)
    return P2PSchedule(threads=threads, thread_ptr=thread_ptr,
                       perm=sched.perm[order].astype(_I32), matrix=C, seg_ptr=seg_ptr,
                       seg_lo=cat(0), seg_hi=cat(1), wait_ptr=wait_ptr, wait_thread=cat(3),
                       wait_count=cat(4), waits=(parts[0][5], parts[1][5]), levels=n_levels,
                       super_rows=super_rows)


def _pass_code(backward: bool) -> str:
    d = 1 if backward else 0
    row = "top - 1 - lo - k" if backward else "base + lo + k"
    head = f"""\
for u in range(P):
    progress[u * {_SLOT}] = 0
for t in T.parallel(P):
    base = T.bind(tptr[t])
    top = T.bind(tptr[t + 1])
    s0 = T.bind(sptr[{d} * P + t])
    for s in range(sptr[{d} * P + t + 1] - s0):
        sg = T.bind(s0 + s)
        w0 = T.bind(wptr[sg])
        for w in range(wptr[sg + 1] - w0):
            T.evaluate(T.call_extern("int32", "tvmext_p2p_wait", T.address_of(progress[0]),
                                     wth[w0 + w], wcnt[w0 + w], T.address_of(failed[0]),
                                     timeout_ms, T.address_of(x[0])))
        lo = T.bind(seg_lo[sg])
        for k in range(seg_hi[sg] - lo):
{_row_code(row, 12)}
        T.evaluate(T.call_extern("int32", "tvmext_p2p_notify", T.address_of(progress[0]), t,
                                 seg_hi[sg], T.address_of(x[0])))
"""
    return textwrap.indent(head, " " * 12)


def _replay_code(backward: bool) -> str:
    """One pass of the schedule replayed by the calling thread alone: round robin over
    the partitions, each running its next segment once that segment's waits are met
    (checked against the counts, no atomics).  The segment of the lowest level left is
    always ready, so every round moves on; a round that does not (a broken schedule)
    sets ``failed`` and stops."""
    d = 1 if backward else 0
    row = "top - 1 - lo - k" if backward else "base + lo + k"
    head = f"""\
for u in range(P):
    progress[u * {_SLOT}] = 0
    progress[u * {_SLOT} + 2] = sptr[{d} * P + u]
left[0] = sptr[{d} * P + P] - sptr[{d} * P]
while left[0] > 0:
    moved[0] = 0
    for t in range(P):
        sg = T.bind(progress[t * {_SLOT} + 2])
        if sg < sptr[{d} * P + t + 1]:
            ready[0] = 1
            w0 = T.bind(wptr[sg])
            for w in range(wptr[sg + 1] - w0):
                if progress[wth[w0 + w] * {_SLOT}] < wcnt[w0 + w]:
                    ready[0] = 0
            if ready[0] == 1:
                base = T.bind(tptr[t])
                top = T.bind(tptr[t + 1])
                lo = T.bind(seg_lo[sg])
                for k in range(seg_hi[sg] - lo):
{_row_code(row, 20)}
                progress[t * {_SLOT}] = seg_hi[sg]
                progress[t * {_SLOT} + 2] = sg + 1
                left[0] = left[0] - 1
                moved[0] = 1
    if moved[0] == 0:
        failed[0] = 1
        left[0] = 0
"""
    return textwrap.indent(head, " " * 12)


def p2p_func(dtype: str = "float64", replay: bool = False):
    """The point-to-point sweep PrimFunc (symbolic sizes), same row update as the barrier sweep.

    Arguments: off-diagonal CSR, ``idiag``, ``tptr`` (``P + 1`` thread
    boundaries), the segments (``sptr``: ``2P + 1`` per direction and thread,
    ``seg_lo``, ``seg_hi``, ``wptr``, ``wth``, ``wcnt``; see
    :class:`P2PSchedule`), ``progress`` (``16 P`` int32 scratch), ``failed``
    (1 int32, set when a wait timed out), ``b``, ``x`` (in place), ``mode``
    (0 forward, 1 backward, 2 symmetric), ``sweeps``, ``timeout_ms``.

    ``replay=True``: the same arguments and result, the schedule replayed by
    the calling thread alone (no thread pool, no waits; see
    :func:`_replay_code`), which :class:`P2PExecutor` runs when the parallel
    sweep is the slower one (cores taken by other processes).

    >>> "tvmext_p2p_wait" in p2p_func("float32").script()
    True
    >>> "T.parallel" in p2p_func("float32", replay=True).script()
    False
    """
    import tvm
    from tvm.script import tirx as T

    name = _check_dtype(dtype, "p2p_func")
    code = _replay_code if replay else _pass_code
    src = f'''
@T.prim_func
def p2p(indptr_h: T.handle, indices_h: T.handle, data_h: T.handle, idiag_h: T.handle,
        tptr_h: T.handle, sptr_h: T.handle, seg_lo_h: T.handle, seg_hi_h: T.handle,
        wptr_h: T.handle, wth_h: T.handle, wcnt_h: T.handle, progress_h: T.handle,
        failed_h: T.handle, b_h: T.handle, x_h: T.handle, mode: T.int32, sweeps: T.int32,
        timeout_ms: T.int32):
    n = T.int32()
    np1 = T.int32()
    nnz = T.int32()
    P1 = T.int32()
    S2 = T.int32()
    NS = T.int32()
    NS1 = T.int32()
    NW = T.int32()
    SP = T.int32()
    indptr = T.match_buffer(indptr_h, (np1,), "int32")
    indices = T.match_buffer(indices_h, (nnz,), "int32")
    data = T.match_buffer(data_h, (nnz,), {name!r})
    idiag = T.match_buffer(idiag_h, (n,), {name!r})
    tptr = T.match_buffer(tptr_h, (P1,), "int32")
    sptr = T.match_buffer(sptr_h, (S2,), "int32")
    seg_lo = T.match_buffer(seg_lo_h, (NS,), "int32")
    seg_hi = T.match_buffer(seg_hi_h, (NS,), "int32")
    wptr = T.match_buffer(wptr_h, (NS1,), "int32")
    wth = T.match_buffer(wth_h, (NW,), "int32")
    wcnt = T.match_buffer(wcnt_h, (NW,), "int32")
    progress = T.match_buffer(progress_h, (SP,), "int32")
    failed = T.match_buffer(failed_h, (1,), "int32")
    b = T.match_buffer(b_h, (n,), {name!r})
    x = T.match_buffer(x_h, (n,), {name!r})
    P = T.bind(P1 - 1)
    failed[0] = 0
SCRATCH
    for it in range(sweeps):
        if mode != 1:
{code(False)}
        if mode != 0:
{code(True)}
'''
    scratch = ("    left = T.alloc_buffer((1,), \"int32\", scope=\"local\")\n"
               "    moved = T.alloc_buffer((1,), \"int32\", scope=\"local\")\n"
               "    ready = T.alloc_buffer((1,), \"int32\", scope=\"local\")")
    src = src.replace("SCRATCH", scratch if replay else "")
    return tvm.script.from_source(src, extra_vars={"T": T})


def p2p_kernel(dtype: str = "float64", target: Any = None, replay: bool = False):
    """Compiled :func:`p2p_func` (the C helper is loaded first so its symbols resolve)."""
    from schedules.sparse.native import load_native
    from tvm_ext.kernel_cache import get_or_build

    name = _check_dtype(dtype, "p2p_kernel")
    if replay:
        return get_or_build(("schedules.sparse.p2p.replay", name, 1),
                            lambda: p2p_func(name, replay=True), target)
    load_native("tvmext_p2p.c")
    return get_or_build(("schedules.sparse.p2p", name, 2), lambda: p2p_func(name), target)


#: policies of :class:`P2PExecutor`
POLICIES = ("auto", "parallel", "replay")
#: under ``policy="auto"``, the slower way is timed again after this many calls at first;
#: each probe it loses doubles the interval (up to :data:`PROBE_MAX`)
PROBE_EVERY = 16
PROBE_MAX = 1024
#: calls whose mean time per row pass stands for a way under ``policy="auto"``
_WINDOW = 4


class P2PExecutor:
    """The point-to-point executor for one matrix: same interface as ``SweepExecutor``.

    ``run(b, x, mode, sweeps)`` takes TVM tensors in the executor's row order
    (``perm``) and updates ``x`` in place.

    ``policy``: ``"parallel"`` always runs the ``P`` partitions on the thread
    pool; ``"replay"`` always replays the schedule on the calling thread
    (``p2p_func(replay=True)``; same result bit for bit); ``"auto"`` (default)
    times every call and runs the way whose last calls took less time per row
    pass on average (the mean: on a loaded machine the parallel sweep is
    sometimes fast and sometimes ten times slower, and the mean is what a run
    of calls pays).  The other way is timed again after :data:`PROBE_EVERY`
    calls, and each probe it loses doubles that interval (up to
    :data:`PROBE_MAX`), so a losing way costs little.  A parallel wavefront
    needs all ``P`` threads running at once: when other processes hold the
    cores, every wait for a descheduled partner costs a scheduling delay and
    the parallel sweep falls far below one thread (0.1-0.3x measured), while
    the replay needs one core.  ``last_policy`` and ``replayed`` (calls that
    replayed) say what ran.
    """

    def __init__(self, sched: P2PSchedule, *, what: str, target: Any = None,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS, policy: str = "auto"):
        import tvm

        B = sched.matrix
        self.n = B.shape[0]
        self.dtype = str(B.dtype)
        self.perm = sched.perm
        self.schedule = sched
        self.timeout_ms = int(timeout_ms)
        off, diag = _sweep_operands(B, sched.perm, what)
        cpu = tvm.cpu(0)
        nz = lambda a, dt: a if a.size else np.zeros(1, dt)  # noqa: E731 - no 0-size buffers
        if policy not in POLICIES:
            raise ConfigError(f"P2PExecutor: policy must be one of {POLICIES}, got {policy!r}")
        self.policy = policy
        self.kernel = p2p_kernel(self.dtype, target)
        self._main = self.kernel["main"]
        self._replay = (p2p_kernel(self.dtype, target, replay=True)["main"]
                        if policy != "parallel" else None)
        from collections import deque

        # seconds per row pass of each way's last calls
        self._cost = {"parallel": deque(maxlen=_WINDOW), "replay": deque(maxlen=_WINDOW)}
        self._best, self._interval, self._next_probe = "parallel", PROBE_EVERY, 2
        self.calls = self.replayed = 0
        self.last_policy = None
        self._failed = tvm.runtime.tensor(np.zeros(1, _I32), cpu)
        # a view of the flag (DLPack, no copy): reading it after a call costs no tensor copy
        self._failed_flag = np.from_dlpack(self._failed)
        self._args = [tvm.runtime.tensor(np.ascontiguousarray(a), cpu) for a in (
            off.indptr.astype(_I32), nz(off.indices.astype(_I32), _I32), nz(off.data, self.dtype),
            (1.0 / diag).astype(self.dtype), sched.thread_ptr, sched.seg_ptr,
            nz(sched.seg_lo, _I32), nz(sched.seg_hi, _I32), sched.wait_ptr,
            nz(sched.wait_thread, _I32), nz(sched.wait_count, _I32),
            np.zeros(_SLOT * sched.threads, _I32))] + [self._failed]
        self.offdiag_nnz = int(off.nnz)

    @property
    def args(self) -> list:
        """Device arrays in kernel argument order (before ``b, x, mode, sweeps, timeout_ms``)."""
        return list(self._args)

    def _choose(self) -> str:
        if self.policy != "auto":
            return self.policy
        if not self._cost["parallel"]:
            return "parallel"
        if not self._cost["replay"]:
            return "replay"
        if self.calls >= self._next_probe:
            return "replay" if self._best == "parallel" else "parallel"
        return self._best

    def _learn(self, way: str, per_pass: float) -> None:
        """Record a call's time; after a probe of the other way, keep or switch."""
        self._cost[way].append(per_pass)
        if self.policy != "auto" or not (self._cost["parallel"] and self._cost["replay"]):
            return
        mean = {k: sum(v) / len(v) for k, v in self._cost.items()}
        best = min(mean, key=mean.get)
        if way != self._best:           # a probe (or the first call of a way)
            self._interval = PROBE_EVERY if best == way else min(2 * self._interval, PROBE_MAX)
            self._next_probe = self.calls + self._interval
        self._best = best

    def run(self, b, x, mode: int, sweeps: int = 1) -> None:
        """Run ``sweeps`` sweeps of ``mode`` on TVM tensors ``b`` and ``x`` (in place)."""
        import time

        if self.n and sweeps > 0:
            way = self._choose()
            fn = self._main if way == "parallel" else self._replay
            t0 = time.perf_counter()
            fn(*self._args, b, x, int(mode), int(sweeps), self.timeout_ms)
            per_pass = (time.perf_counter() - t0) / (int(sweeps) * (2 if mode == 2 else 1))
            self.calls += 1
            self._learn(way, per_pass)
            self.replayed += way == "replay"
            self.last_policy = way
            if self._failed_flag[0]:
                if way == "replay":
                    raise ConfigError("point-to-point replay: a round found no segment ready "
                                      "(the schedule's waits form a cycle); the result is invalid")
                raise ConfigError(
                    f"point-to-point executor: a wait saw no progress for {self.timeout_ms} ms "
                    f"({self.schedule.threads} partitions; TVM must run them all at once: set "
                    "TVM_NUM_THREADS >= the partitions and do not call it from a parallel "
                    "region); the result is invalid")

    def run_numpy(self, b: np.ndarray, x: np.ndarray, mode: int, sweeps: int) -> np.ndarray:
        """``run`` on numpy vectors in original row order; returns the new x."""
        return _run_in_original_order(self, b, x, mode, sweeps)
