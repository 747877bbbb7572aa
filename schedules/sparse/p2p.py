"""Venkat 2016 ch. 7 (Fig. 7.2): the point-to-point wavefront executor.

The barrier executor (:mod:`schedules.sparse.triangular`) joins all threads
after every level.  Here each row waits only for the rows it depends on:

* **Partition** (inspector): every level of the :class:`LevelSchedule` is
  split into ``P`` contiguous chunks, chunk ``t`` goes to thread ``t``, and
  each thread runs its rows in level order.  The matrix is permuted once more
  so each thread's rows are contiguous (``reorder_data``).  Since every
  dependence points to a strictly earlier level and each thread runs its rows
  in level order, the waits form no cycle: no deadlock.
* **Waits**: thread ``t`` publishes how many of its rows are done; row ``i``
  of thread ``t`` needs, from each other thread ``u``, the count
  ``1 + position of its last predecessor owned by u``.  Needs that an earlier
  row of the same thread already covered are dropped (counts only grow), and
  only rows that some wait refers to publish their count (SpMP's sparsified
  post-and-wait).  The backward sweep has its own needs (rows in reverse).
* **Synchronisation**: TIR has no atomics and no wait, so the TIR kernel calls
  a small extern C function (``csrc/tvmext_p2p.c``, C11 acquire loads /
  release stores on one cache line per thread) through ``T.call_extern``:
  ``tvmext_p2p_wait`` before a row that needs another thread's rows and
  ``tvmext_p2p_notify`` after a row that others wait for.  The C library is
  built and loaded by :func:`schedules.sparse.native.load_native` (private
  directory, hash-checked).  One ``T.parallel`` launch runs all ``P``
  partitions at once (``P`` = the TVM thread count); a wait that sees no
  progress for ``timeout_ms`` (a partition that never started, e.g. fewer
  pool threads than ``P``) makes the kernel finish early and
  :meth:`P2PExecutor.run` raise :class:`tvm_ext.errors.ConfigError` instead
  of hanging.

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
from tvm_ext.errors import ConfigError

__all__ = ["P2PSchedule", "P2PExecutor", "p2p_schedule", "p2p_func", "p2p_kernel",
           "DEFAULT_TIMEOUT_MS"]

_I32 = np.int32
_SLOT = 16  # int32 per progress slot: one cache line per thread (matches csrc/tvmext_p2p.c)
#: a wait that sees no progress for this long gives up (the run then raises)
DEFAULT_TIMEOUT_MS = 20000


@dataclass(frozen=True)
class P2PSchedule:
    """Thread partition and waits of the point-to-point executor.

    * ``threads``: partitions ``P``; thread ``t`` owns rows
      ``thread_ptr[t]:thread_ptr[t+1]`` (in the executor's numbering).
    * ``perm[new] = original row``; ``matrix``: the matrix in that numbering.
    * ``need_fwd``/``need_bwd`` (``n * P``): before row ``i`` (forward) or
      during the backward pass, wait until thread ``u`` has finished
      ``need[i * P + u]`` rows (0: no wait).
    * ``notify_fwd``/``notify_bwd`` (``n``): 1 where a row's completion is
      waited for.
    * ``waits``: waits left after sparsification (forward, backward).
    """

    threads: int
    thread_ptr: np.ndarray
    perm: np.ndarray
    matrix: sp.csr_array
    need_fwd: np.ndarray
    need_bwd: np.ndarray
    notify_fwd: np.ndarray
    notify_bwd: np.ndarray
    waits: tuple[int, int]
    levels: int


def _owner_order(level_ptr: np.ndarray, threads: int) -> tuple[np.ndarray, np.ndarray]:
    """Thread of each level-ordered row (each level cut into ``threads`` chunks)."""
    n = int(level_ptr[-1])
    sizes = np.diff(level_ptr).astype(np.int64)
    level = np.repeat(np.arange(sizes.size), sizes)
    offset = np.arange(n, dtype=np.int64) - level_ptr[:-1].astype(np.int64)[level]
    chunk = np.maximum(-(-sizes // threads), 1)[level]
    owner = np.minimum(offset // chunk, threads - 1).astype(_I32)
    order = np.argsort(owner, kind="stable").astype(_I32)  # by thread, level order inside
    return owner, order


def _needs(src: np.ndarray, dst: np.ndarray, owner: np.ndarray, pos: np.ndarray,
           thread_ptr: np.ndarray, threads: int, reverse: bool) -> tuple[np.ndarray, np.ndarray]:
    """Sparsified per-(row, thread) needs for edges ``src -> dst`` and the notify flags."""
    n = owner.size
    cross = owner[src] != owner[dst]
    src, dst = src[cross], dst[cross]
    need = np.zeros(n * threads, dtype=np.int64)
    np.maximum.at(need, dst.astype(np.int64) * threads + owner[src], pos[src].astype(np.int64) + 1)
    need = need.reshape(n, threads)
    for t in range(threads):  # drop needs an earlier row (in run order) of the thread covered
        lo, hi = int(thread_ptr[t]), int(thread_ptr[t + 1])
        seg = need[lo:hi]
        run = seg[::-1] if reverse else seg
        prev = np.maximum.accumulate(np.vstack([np.zeros((1, threads), np.int64), run[:-1]]), axis=0)
        run[run <= prev] = 0
    notify = np.zeros(n, dtype=_I32)
    for u in range(threads):
        c = need[:, u]
        c = c[c > 0]
        lo, hi = int(thread_ptr[u]), int(thread_ptr[u + 1])
        rows = hi - c if reverse else lo + c - 1
        notify[rows] = 1
    return need.reshape(-1).astype(_I32), notify


def p2p_schedule(sched: LevelSchedule, threads: int) -> P2PSchedule:
    """Partition a level schedule over ``threads`` and derive the point-to-point waits.

    >>> from schedules.sparse.level_sets import level_sets
    >>> from tvm_ext.workloads import lap2d
    >>> s = p2p_schedule(level_sets(lap2d(6)), 2)
    >>> s.thread_ptr.tolist(), s.matrix.shape
    ([0, 21, 36], (36, 36))
    """
    threads = max(int(threads), 1)
    B = sched.matrix
    n = B.shape[0]
    owner_lvl, order = _owner_order(sched.level_ptr, threads)
    iorder = np.empty_like(order)
    iorder[order] = np.arange(n, dtype=_I32)
    C = _permute_canonical(B, order, iorder) if n else B
    owner = owner_lvl[order]
    thread_ptr = np.zeros(threads + 1, dtype=_I32)
    np.cumsum(np.bincount(owner, minlength=threads), out=thread_ptr[1:])
    idx = np.arange(n, dtype=_I32)
    fpos = idx - thread_ptr[owner]              # forward run position inside the thread
    bpos = thread_ptr[owner + 1] - 1 - idx      # backward run position
    rows = np.repeat(idx, np.diff(C.indptr))
    cols = C.indices
    off = rows != cols
    a, c = rows[off], cols[off]
    early = order[a] < order[c]                 # level order is a topological order
    src = np.where(early, a, c)
    dst = np.where(early, c, a)
    need_f, notify_f = _needs(src, dst, owner, fpos, thread_ptr, threads, reverse=False)
    need_b, notify_b = _needs(dst, src, owner, bpos, thread_ptr, threads, reverse=True)
    return P2PSchedule(threads=threads, thread_ptr=thread_ptr, perm=sched.perm[order].astype(_I32),
                       matrix=C, need_fwd=need_f, need_bwd=need_b, notify_fwd=notify_f,
                       notify_bwd=notify_b,
                       waits=(int(np.count_nonzero(need_f)), int(np.count_nonzero(need_b))),
                       levels=sched.levels)


def _pass_code(backward: bool) -> str:
    from schedules.sparse.triangular import _row_code

    need, notify = ("need_b", "notify_b") if backward else ("need_f", "notify_f")
    row = "hi - 1 - k" if backward else "lo + k"
    head = f"""\
for u in range(P):
    progress[u * {_SLOT}] = 0
for t in T.parallel(P):
    lo = T.bind(tptr[t])
    hi = T.bind(tptr[t + 1])
    for k in range(hi - lo):
        row = T.bind({row})
        for u in range(P):
            if {need}[row * P + u] > 0:
                T.evaluate(T.call_extern("int32", "tvmext_p2p_wait", T.address_of(progress[0]), u,
                                         {need}[row * P + u], T.address_of(failed[0]), timeout_ms,
                                         T.address_of(x[0])))
{_row_code("row", 8)}
        if {notify}[row] != 0:
            T.evaluate(T.call_extern("int32", "tvmext_p2p_notify", T.address_of(progress[0]), t,
                                     k + 1, T.address_of(x[0])))
"""
    return textwrap.indent(head, " " * 12)


def p2p_func(dtype: str = "float64"):
    """The point-to-point sweep PrimFunc (symbolic sizes), same row update as the barrier sweep.

    Arguments: off-diagonal CSR, ``idiag``, ``tptr`` (``P + 1`` thread
    boundaries), ``need_f``, ``notify_f``, ``need_b``, ``notify_b``,
    ``progress`` (``16 P`` int32 scratch), ``failed`` (1 int32, set when a
    wait timed out), ``b``, ``x`` (in place), ``mode`` (0 forward, 1
    backward, 2 symmetric), ``sweeps``, ``timeout_ms``.

    >>> "tvmext_p2p_wait" in p2p_func("float32").script()
    True
    """
    import tvm
    from tvm.script import tirx as T

    from schedules.sparse.triangular import _check_dtype

    name = _check_dtype(dtype, "p2p_func")
    src = f'''
@T.prim_func
def p2p(indptr_h: T.handle, indices_h: T.handle, data_h: T.handle, idiag_h: T.handle,
        tptr_h: T.handle, need_f_h: T.handle, notify_f_h: T.handle, need_b_h: T.handle,
        notify_b_h: T.handle, progress_h: T.handle, failed_h: T.handle, b_h: T.handle,
        x_h: T.handle, mode: T.int32, sweeps: T.int32, timeout_ms: T.int32):
    n = T.int32()
    np1 = T.int32()
    nnz = T.int32()
    P1 = T.int32()
    NP = T.int32()
    SP = T.int32()
    indptr = T.match_buffer(indptr_h, (np1,), "int32")
    indices = T.match_buffer(indices_h, (nnz,), "int32")
    data = T.match_buffer(data_h, (nnz,), {name!r})
    idiag = T.match_buffer(idiag_h, (n,), {name!r})
    tptr = T.match_buffer(tptr_h, (P1,), "int32")
    need_f = T.match_buffer(need_f_h, (NP,), "int32")
    notify_f = T.match_buffer(notify_f_h, (n,), "int32")
    need_b = T.match_buffer(need_b_h, (NP,), "int32")
    notify_b = T.match_buffer(notify_b_h, (n,), "int32")
    progress = T.match_buffer(progress_h, (SP,), "int32")
    failed = T.match_buffer(failed_h, (1,), "int32")
    b = T.match_buffer(b_h, (n,), {name!r})
    x = T.match_buffer(x_h, (n,), {name!r})
    P = T.bind(P1 - 1)
    failed[0] = 0
    for it in range(sweeps):
        if mode != 1:
{_pass_code(False)}
        if mode != 0:
{_pass_code(True)}
'''
    return tvm.script.from_source(src, extra_vars={"T": T})


def p2p_kernel(dtype: str = "float64", target: Any = None):
    """Compiled :func:`p2p_func` (the C helper is loaded first so its symbols resolve)."""
    from schedules.sparse.native import load_native
    from schedules.sparse.triangular import _check_dtype
    from tvm_ext.kernel_cache import get_or_build

    load_native("tvmext_p2p.c")
    name = _check_dtype(dtype, "p2p_kernel")
    return get_or_build(("schedules.sparse.p2p", name, 1), lambda: p2p_func(name), target)


class P2PExecutor:
    """The point-to-point executor for one matrix: same interface as ``SweepExecutor``.

    ``run(b, x, mode, sweeps)`` takes TVM tensors in the executor's row order
    (``perm``) and updates ``x`` in place.
    """

    def __init__(self, sched: P2PSchedule, *, what: str, target: Any = None,
                 timeout_ms: int = DEFAULT_TIMEOUT_MS):
        import tvm

        from schedules.sparse.triangular import _sweep_operands

        B = sched.matrix
        self.n = B.shape[0]
        self.dtype = str(B.dtype)
        self.perm = sched.perm
        self.schedule = sched
        self.timeout_ms = int(timeout_ms)
        off, diag = _sweep_operands(B, sched.perm, what)
        cpu = tvm.cpu(0)
        nz = lambda a, dt: a if a.size else np.zeros(1, dt)  # noqa: E731 - no 0-size buffers
        self.kernel = p2p_kernel(self.dtype, target)
        self._main = self.kernel["main"]
        self._failed = tvm.runtime.tensor(np.zeros(1, _I32), cpu)
        self._args = [tvm.runtime.tensor(np.ascontiguousarray(a), cpu) for a in (
            off.indptr.astype(_I32), nz(off.indices.astype(_I32), _I32), nz(off.data, self.dtype),
            (1.0 / diag).astype(self.dtype), sched.thread_ptr, nz(sched.need_fwd, _I32),
            nz(sched.notify_fwd, _I32), nz(sched.need_bwd, _I32), nz(sched.notify_bwd, _I32),
            np.zeros(_SLOT * sched.threads, _I32))] + [self._failed]
        self.offdiag_nnz = int(off.nnz)

    @property
    def args(self) -> list:
        """Device arrays in kernel argument order (before ``b, x, mode, sweeps, timeout_ms``)."""
        return list(self._args)

    def run(self, b, x, mode: int, sweeps: int = 1) -> None:
        """Run ``sweeps`` sweeps of ``mode`` on TVM tensors ``b`` and ``x`` (in place)."""
        if self.n and sweeps > 0:
            self._main(*self._args, b, x, int(mode), int(sweeps), self.timeout_ms)
            if self._failed.numpy()[0]:
                raise ConfigError(
                    f"point-to-point executor: a wait saw no progress for {self.timeout_ms} ms "
                    f"({self.schedule.threads} partitions; TVM must run them all at once: set "
                    "TVM_NUM_THREADS >= the partitions and do not call it from a parallel "
                    "region); the result is invalid")

    def run_numpy(self, b: np.ndarray, x: np.ndarray, mode: int, sweeps: int) -> np.ndarray:
        """``run`` on numpy vectors in original row order; returns the new x."""
        from schedules.sparse.triangular import _run_in_original_order

        return _run_in_original_order(self, b, x, mode, sweeps)
