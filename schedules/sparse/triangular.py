"""Venkat 2016 ch. 7 (Listing 7.3 executor): level-scheduled triangular solve and Gauss-Seidel in TIR.

One TIR kernel does every sweep.  Row ``r`` of a sweep is Listing 7.1::

    x[r] = (b[r] - sum_{j != r} A[r, j] * x[j]) / A[r, r]

run over the off-diagonal part of the matrix with the inverse diagonal kept
apart.  The rows come level by level from :func:`schedules.sparse.level_sets`
(the matrix is already permuted to ``P A P^T``, so there is no permutation
indirection): the **barrier executor** of the dissertation,
``for l in levels: parallel for rows in level``, where each ``T.parallel`` loop
is one TVM thread-pool launch and its join is the barrier.  Runs of thin
levels (fewer than ``min_parallel_rows`` rows) are merged into one serial
segment, processed in level order by the calling thread, because a launch
costs microseconds and a thin level holds less work than that
(``min_parallel_rows=1`` gives the pure one-launch-per-level executor).

The same kernel compiled with ``parallel=False`` and given the matrix in its
natural order as one serial segment is the **serial TVM executor**, the
benchmark peer.  ``sync="p2p"`` selects the **point-to-point executor** of
:mod:`schedules.sparse.p2p` instead of the barrier one (same schedule, same
row update, each row waiting only for the rows it reads).  Kernels take symbolic sizes, so one compiled kernel per
(dtype, parallel) serves every matrix (through ``tvm_ext.kernel_cache``).

Semantics.

* :class:`TriangularSolver` solves ``L x = b`` (``lower=True``) or
  ``U x = b``; it equals ``scipy.sparse.linalg.spsolve_triangular`` up to
  rounding.
* :class:`GaussSeidel` uses the current ``x`` for rows already updated.  Its
  schedule comes from the dependence graph of *all* off-diagonal entries
  (Listing 7.3 links ``i`` and ``ip`` for entries on both sides of the
  diagonal), so rows of one level never touch each other.  Hence a parallel
  forward sweep equals sequential Gauss-Seidel *in the level-set order*, i.e.
  plain Gauss-Seidel on ``P A P^T`` (a valid Gauss-Seidel ordering), and,
  because every edge points from a lower to a higher original index, it also
  equals sequential forward Gauss-Seidel in the **natural** order: a row reads
  new values exactly from its lower-index neighbours in both.  The backward
  sweep runs the levels in reverse and equals natural-order backward
  Gauss-Seidel the same way; the symmetric sweep is forward then backward.
  (Results agree to rounding: the sum inside a row runs over its entries in
  the new column order.)

>>> import numpy as np, scipy.sparse as sp
>>> from tvm_ext.workloads import lap2d
>>> A = lap2d(6)
>>> L = sp.tril(A, format="csr")
>>> b = np.ones(36)
>>> x = TriangularSolver(L).solve(b)
>>> bool(np.allclose(L @ x, b))
True
>>> gs = GaussSeidel(A)
>>> y = gs.symmetric(np.zeros(36), b, sweeps=20)
>>> bool(np.linalg.norm(A @ y - b) < 1e-3 * np.linalg.norm(b))
True
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from schedules.sparse.level_sets import LevelSchedule, schedule_of_canonical
from schedules.sparse.p2p import P2PExecutor, p2p_schedule, pool_threads
from schedules.sparse.row_sweep import (SUPPORTED_DTYPES, _check_dtype, _row_code, _run_in_original_order,
                                        _sweep_operands, wrap)
from tvm_ext.errors import InputError, ShapeError
from tvm_ext.workloads import canonical_csr

__all__ = [
    "FORWARD", "BACKWARD", "SYMMETRIC", "SUPPORTED_DTYPES",
    "sweep_func", "sweep_kernel", "level_segments", "executor_segments", "default_min_parallel_rows",
    "SweepExecutor", "TriangularSolver", "GaussSeidel",
    "check_vector", "wrap", "SYNCS",
]

FORWARD, BACKWARD, SYMMETRIC = 0, 1, 2
_I32 = np.int32


# --------------------------------------------------------------------------- TIR kernel
def _sweep_source(dtype: str, parallel: bool) -> str:
    # Loops written with min 0 on purpose: TVM 0.27's CanonicalizeLoop does not
    # rewrite nested data-dependent bounds when it shifts a loop with a non-zero
    # min (``for r in range(ptr[l], ptr[l+1])`` gave wrong results).
    ploop = "T.parallel" if parallel else "range"
    src = f'''
@T.prim_func
def sweep(indptr_h: T.handle, indices_h: T.handle, data_h: T.handle, idiag_h: T.handle,
          seg_ptr_h: T.handle, seg_par_h: T.handle, b_h: T.handle, x_h: T.handle,
          mode: T.int32, sweeps: T.int32):
    n = T.int32()
    np1 = T.int32()
    nnz = T.int32()
    S = T.int32()
    indptr = T.match_buffer(indptr_h, (np1,), "int32")
    indices = T.match_buffer(indices_h, (nnz,), "int32")
    data = T.match_buffer(data_h, (nnz,), DT)
    idiag = T.match_buffer(idiag_h, (n,), DT)
    seg_ptr = T.match_buffer(seg_ptr_h, (S,), "int32")
    seg_par = T.match_buffer(seg_par_h, (S,), "int32")
    b = T.match_buffer(b_h, (n,), DT)
    x = T.match_buffer(x_h, (n,), DT)
    for it in range(sweeps):
        if mode != 1:
            for s in range(S - 1):
                lo = T.bind(seg_ptr[s])
                size = T.bind(seg_ptr[s + 1] - lo)
                if seg_par[s] != 0:
                    for k in {ploop}(size):
{_row_code("lo + k", 24)}
                else:
                    for k in range(size):
{_row_code("lo + k", 24)}
        if mode != 0:
            for s2 in range(S - 1):
                hi = T.bind(seg_ptr[S - 1 - s2])
                size = T.bind(hi - seg_ptr[S - 2 - s2])
                if seg_par[S - 2 - s2] != 0:
                    for k in {ploop}(size):
{_row_code("hi - 1 - k", 24)}
                else:
                    for k in range(size):
{_row_code("hi - 1 - k", 24)}
'''
    return src.replace("DT", repr(dtype))


def sweep_func(dtype: str = "float64", parallel: bool = True):
    """The sweep PrimFunc (symbolic sizes) for ``dtype``.

    Arguments: off-diagonal CSR (``indptr``, ``indices``, ``data``), ``idiag``
    (1 / diagonal), segments (``seg_ptr`` row boundaries, ``seg_par`` 1 = run
    the segment's rows in parallel), ``b``, ``x`` (updated in place), ``mode``
    (0 forward, 1 backward, 2 symmetric) and ``sweeps``.  A backward pass runs
    the segments in reverse and the rows of a serial segment in reverse.

    >>> "T.parallel" in sweep_func("float32").script()
    True
    >>> "T.parallel" in sweep_func("float32", parallel=False).script()
    False
    """
    import tvm
    from tvm.script import tirx as T

    name = _check_dtype(dtype, "sweep_func")
    return tvm.script.from_source(_sweep_source(name, parallel), extra_vars={"T": T})


_DEFAULT_TARGET_KERNELS: dict[tuple[str, bool], Any] = {}


def sweep_kernel(dtype: str = "float64", parallel: bool = True, target: Any = None):
    """Compiled :func:`sweep_func` (one per dtype/parallel/target, cached)."""
    from tvm_ext.kernel_cache import get_or_build

    name = _check_dtype(dtype, "sweep_kernel")
    key = (name, bool(parallel))
    if target is None and key in _DEFAULT_TARGET_KERNELS:  # skip re-resolving the target
        return _DEFAULT_TARGET_KERNELS[key]
    mod = get_or_build(("schedules.sparse.triangular.sweep", name, bool(parallel), 1),
                       lambda: sweep_func(name, parallel), target)
    if target is None:
        _DEFAULT_TARGET_KERNELS[key] = mod
    return mod


# --------------------------------------------------------------------------- helpers
def default_min_parallel_rows() -> int:
    """Smallest level that gets its own parallel launch (all serial on 1 thread).

    A TVM thread-pool launch plus its join costs a few microseconds; a row of
    a stencil costs a few nanoseconds, so thinner levels run faster serially.
    """
    from tvm_ext.target import num_threads

    return 1024 if num_threads() > 1 else np.iinfo(_I32).max


def level_segments(level_ptr: np.ndarray, min_parallel_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Group levels into executor segments: each level with at least
    ``min_parallel_rows`` rows is a parallel segment; each run of thinner
    levels is one serial segment (its rows are already in level order).

    Returns ``seg_ptr`` (row boundaries) and ``seg_par`` (1 = parallel; one
    trailing 0 so both arrays have the same length).

    >>> seg_ptr, seg_par = level_segments(np.array([0, 1, 3, 103, 104, 105]), 50)
    >>> seg_ptr.tolist(), seg_par.tolist()
    ([0, 3, 103, 105], [0, 1, 0, 0])
    """
    level_ptr = np.asarray(level_ptr, dtype=np.int64)
    n_levels = level_ptr.size - 1
    if n_levels <= 0:
        return np.zeros(1, _I32), np.zeros(1, _I32)
    is_par = np.diff(level_ptr) >= max(int(min_parallel_rows), 1)
    inner = np.arange(1, n_levels)
    keep = inner[is_par[inner - 1] | is_par[inner]]
    starts = np.concatenate([[0], keep])
    seg_ptr = np.concatenate([level_ptr[starts], level_ptr[-1:]]).astype(_I32)
    seg_par = np.concatenate([is_par[starts], [False]]).astype(_I32)
    return seg_ptr, seg_par


def executor_segments(schedule: LevelSchedule | None, n: int,
                      min_parallel_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``seg_ptr``, ``seg_par`` of a sweep executor: the schedule's levels grouped by
    :func:`level_segments` (``min_parallel_rows`` defaults to
    :func:`default_min_parallel_rows`), or, with no schedule, one serial segment of ``n`` rows.

    >>> [a.tolist() for a in executor_segments(None, 5)]
    [[0, 5], [0, 0]]
    """
    if schedule is None:
        return np.array([0, n], _I32), np.zeros(2, _I32)
    mpr = default_min_parallel_rows() if min_parallel_rows is None else int(min_parallel_rows)
    return level_segments(schedule.level_ptr, mpr)


def check_vector(v: Any, n: int, dtype: str, what: str) -> np.ndarray:
    """``v`` as a contiguous 1-D ``dtype`` vector of length ``n`` (or a clear error).

    Integer vectors are cast; a float vector of another precision is refused
    (cast it yourself, or build the solver with that dtype).
    """
    arr = np.asarray(v)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr[:, 0]
    if arr.ndim != 1:
        raise ShapeError(f"{what}: expected a vector of length {n}, got shape {arr.shape}")
    if arr.shape[0] != n:
        raise ShapeError(f"{what}: has length {arr.shape[0]}, the matrix has {n} rows")
    kind = arr.dtype.kind
    if kind == "f":
        if arr.dtype != np.dtype(dtype):
            raise InputError(f"{what}: dtype {arr.dtype} does not match the solver's {dtype}; "
                             f"cast it (or build the solver with dtype={str(arr.dtype)!r})")
    elif kind not in "iu":
        raise InputError(f"{what}: expected real numbers, got dtype {arr.dtype}")
    out = np.ascontiguousarray(arr, dtype=dtype)
    if not np.isfinite(out).all():
        bad = int(np.flatnonzero(~np.isfinite(out))[0])
        raise InputError(f"{what}: non-finite value {out[bad]} at index {bad}")
    return out


# --------------------------------------------------------------------------- executor
class SweepExecutor:
    """Off-diagonal CSR + inverse diagonal + segments on the device, and the kernel.

    Works in the executor's row order (``perm`` is ``None`` for natural
    order).  ``run(b, x, mode, sweeps)`` takes TVM tensors in that order and
    updates ``x`` in place; the public classes wrap it with permutations.
    """

    def __init__(self, B: sp.csr_array, *, seg_ptr: np.ndarray, seg_par: np.ndarray,
                 parallel: bool, perm: np.ndarray | None, what: str, target: Any = None):
        import tvm

        self.n = B.shape[0]
        self.dtype = str(B.dtype)
        self.perm = perm
        off, diag = _sweep_operands(B, perm, what)
        cpu = tvm.cpu(0)
        dummy = lambda a, dt: a if a.size else np.zeros(1, dt)  # noqa: E731 - no 0-size buffers
        from schedules.sparse.level_sets import _tensor

        self._args = [_tensor(a) for a in (
            off.indptr.astype(_I32, copy=False), dummy(off.indices.astype(_I32, copy=False), _I32),
            dummy(off.data, self.dtype), (1.0 / diag).astype(self.dtype), seg_ptr, seg_par)]
        self.offdiag_nnz = int(off.nnz)
        self.segments = int(seg_ptr.size - 1)
        self.parallel_segments = int(seg_par.sum())
        self.kernel = sweep_kernel(self.dtype, parallel, target)
        self._main = self.kernel["main"]

    @property
    def args(self) -> list:
        """The executor's device arrays, in kernel argument order (before ``b, x``)."""
        return list(self._args)

    def run(self, b, x, mode: int, sweeps: int = 1) -> None:
        """Run ``sweeps`` sweeps of ``mode`` on TVM tensors ``b`` and ``x`` (in place)."""
        if self.n and sweeps > 0:
            self._main(*self._args, b, x, int(mode), int(sweeps))

    def run_numpy(self, b: np.ndarray, x: np.ndarray, mode: int, sweeps: int) -> np.ndarray:
        """``run`` on numpy vectors given in original row order; returns the new x."""
        return _run_in_original_order(self, b, x, mode, sweeps)


def _canonical(A: Any, dtype: Any, what: str) -> sp.csr_array:
    if dtype is not None:
        _check_dtype(dtype, what)
    A = canonical_csr(A, square=True, dtype=dtype, what=what)
    _check_dtype(A.dtype, what)
    return A


def _sweeps(sweeps: Any) -> int:
    if isinstance(sweeps, bool) or int(sweeps) != sweeps or sweeps < 0:
        raise InputError(f"sweeps must be a non-negative integer, got {sweeps!r}")
    return int(sweeps)


SYNCS = ("barrier", "p2p")


def _check_sync(sync: Any) -> str:
    if sync not in SYNCS:
        raise InputError(f"sync must be one of {SYNCS}, got {sync!r}")
    return str(sync)


def _build(A: sp.csr_array, *, lower: bool, parallel: bool, min_parallel_rows: int | None,
           what: str, target: Any, sync: str = "barrier",
           interleave: bool = True) -> tuple[Any, LevelSchedule | None]:
    """Inspector + executor setup: level schedule (parallel) or natural order (serial).

    ``sync="p2p"`` gives the point-to-point executor (:mod:`schedules.sparse.p2p`)
    on the same level schedule, partitioned over the TVM thread count;
    ``interleave`` is :func:`p2p_schedule`'s (super-rows run two by two).
    """
    n = A.shape[0]
    if parallel and sync == "p2p" and n:
        sched = schedule_of_canonical(A, lower)
        ps = p2p_schedule(sched, pool_threads(), interleave=interleave)
        return P2PExecutor(ps, what=what, target=target), sched
    if not parallel:
        seg_ptr, seg_par = executor_segments(None, n)
        ex = SweepExecutor(A, seg_ptr=seg_ptr, seg_par=seg_par, parallel=False, perm=None,
                           what=what, target=target)
        return ex, None
    sched = schedule_of_canonical(A, lower)
    seg_ptr, seg_par = executor_segments(sched, n, min_parallel_rows)
    ex = SweepExecutor(sched.matrix, seg_ptr=seg_ptr, seg_par=seg_par, parallel=True,
                       perm=sched.perm, what=what, target=target)
    return ex, sched


class TriangularSolver:
    """Sparse triangular solve ``L x = b`` / ``U x = b`` with a level-set schedule.

    * ``parallel=True``: inspector (:func:`level_sets`) once, then the barrier
      executor on ``P T P^T``; ``parallel=False``: the serial TVM executor in
      natural order (rows ``0..n-1`` for lower, ``n-1..0`` for upper).
    * Entries on the other side of the diagonal are an error unless
      ``take_triangle=True``, which solves with the triangle of ``A`` only
      (as one does for Gauss-Seidel splittings).
    * A zero or missing diagonal entry raises :class:`InputError` naming the row.
    * ``unit_diagonal=True`` takes the diagonal as all ones (stored diagonal
      entries are ignored, as in ``scipy``'s ``spsolve_triangular``).
    * ``sync="p2p"``: the point-to-point executor (:mod:`schedules.sparse.p2p`)
      instead of the barrier executor.

    >>> import numpy as np, scipy.sparse as sp
    >>> U = sp.csr_array(np.array([[2.0, 1.0], [0.0, 4.0]]))
    >>> TriangularSolver(U, lower=False).solve(np.array([4.0, 8.0])).tolist()
    [1.0, 2.0]
    """

    def __init__(self, A: Any, lower: bool = True, parallel: bool = True, *,
                 min_parallel_rows: int | None = None, take_triangle: bool = False,
                 dtype: Any = None, target: Any = None, sync: str = "barrier",
                 unit_diagonal: bool = False):
        what = f"TriangularSolver({'lower' if lower else 'upper'}) matrix"
        sync = _check_sync(sync)
        A = _canonical(A, dtype, what)
        T = _triangle(A, lower, take_triangle, what)
        if unit_diagonal:
            T = _with_unit_diagonal(T)
        self.lower, self.parallel = bool(lower), bool(parallel)
        self.n, self.dtype = T.shape[0], str(T.dtype)
        # an upper schedule already orders levels bottom-up, so both run "forward";
        # the natural-order serial upper solve runs the rows backwards
        self._mode = BACKWARD if (not lower and not parallel) else FORWARD
        # super-rows run one after another: interleaving them slows the solve (p2p_schedule)
        self.executor, self.schedule = _build(T, lower=lower, parallel=parallel,
                                              min_parallel_rows=min_parallel_rows,
                                              what=what, target=target, sync=sync,
                                              interleave=False)

    @property
    def levels(self) -> int:
        """Number of level sets (``n`` for the serial executor)."""
        return self.schedule.levels if self.schedule is not None else self.n

    def solve(self, b: Any) -> np.ndarray:
        """Return ``x`` with ``T x = b``, as ``scipy.sparse.linalg.spsolve_triangular``.

        ``b``: a length-``n`` vector or an ``(n, k)`` matrix of right-hand
        sides (the solver's dtype; integers are cast); ``x`` has ``b``'s shape.
        Each column is one wavefront solve on the same schedule.

        >>> import numpy as np, scipy.sparse as sp
        >>> L = sp.csr_array(np.array([[2.0, 0.0], [1.0, 4.0]]))
        >>> TriangularSolver(L).solve(np.array([[2.0, 4.0], [5.0, 10.0]])).tolist()
        [[1.0, 2.0], [1.0, 2.0]]
        """
        arr = np.asarray(b)
        if arr.ndim == 2:
            if arr.shape[0] != self.n:
                raise ShapeError(f"b: has {arr.shape[0]} rows, the matrix has {self.n}")
            x = np.empty(arr.shape, self.dtype)
            for j in range(arr.shape[1]):
                x[:, j] = self.solve(arr[:, j])
            return x
        b = check_vector(arr, self.n, self.dtype, "b")
        return self.executor.run_numpy(b, np.zeros(self.n, self.dtype), self._mode, 1)

    def aslinearoperator(self):
        """``b -> T^-1 b`` as a ``scipy.sparse.linalg.LinearOperator`` (e.g. a preconditioner ``M``)."""
        from scipy.sparse.linalg import LinearOperator

        return LinearOperator((self.n, self.n), matvec=self.solve, matmat=self.solve, dtype=self.dtype)


def _with_unit_diagonal(T: sp.csr_array) -> sp.csr_array:
    """``T`` with its diagonal replaced by ones (canonical CSR)."""
    n = T.shape[0]
    off = sp.csr_array(T - sp.diags_array(T.diagonal(), format="csr"))
    off.eliminate_zeros()
    U = canonical_csr(off + sp.eye_array(n, dtype=T.dtype, format="csr"), square=True)
    return U


def _triangle(A: sp.csr_array, lower: bool, take: bool, what: str) -> sp.csr_array:
    n = A.shape[0]
    rows = np.repeat(np.arange(n, dtype=_I32), np.diff(A.indptr))
    wrong = A.indices > rows if lower else A.indices < rows
    if not wrong.any():
        return A
    if not take:
        k = int(np.flatnonzero(wrong)[0])
        raise InputError(f"{what}: {int(wrong.sum())} entries lie "
                         f"{'above' if lower else 'below'} the diagonal (first at "
                         f"({int(rows[k])}, {int(A.indices[k])})); pass a triangular matrix "
                         "or take_triangle=True")
    keep = ~wrong
    indptr = np.zeros(n + 1, dtype=_I32)
    np.cumsum(np.bincount(rows[keep], minlength=n), out=indptr[1:])
    return sp.csr_array((A.data[keep], A.indices[keep], indptr), shape=A.shape)


class GaussSeidel:
    """Forward, backward and symmetric Gauss-Seidel sweeps with a level schedule.

    ``parallel=True`` inspects once (dependence graph of every off-diagonal
    entry -> level sets -> ``P A P^T``) and reuses the schedule on every call;
    ``parallel=False`` is the serial TVM executor in natural order.  Both give
    sequential natural-order Gauss-Seidel (see the module docstring for why).

    **Not in place** (unlike ``pyamg.relaxation.gauss_seidel``, which
    overwrites ``x``): each method returns the new ``x`` as a fresh array and
    leaves its arguments untouched; write ``x = gs.forward(x, b)`` (or
    ``x[:] = ...``) to update an iterate.

    >>> import numpy as np, scipy.sparse as sp
    >>> A = sp.csr_array(np.array([[4.0, -1.0], [-1.0, 4.0]]))
    >>> GaussSeidel(A).forward(np.zeros(2), np.array([4.0, 3.0])).tolist()
    [1.0, 1.0]
    """

    def __init__(self, A: Any, parallel: bool = True, *, min_parallel_rows: int | None = None,
                 dtype: Any = None, target: Any = None, sync: str = "barrier"):
        what = "GaussSeidel matrix"
        sync = _check_sync(sync)
        A = _canonical(A, dtype, what)
        self.n, self.dtype, self.parallel = A.shape[0], str(A.dtype), bool(parallel)
        self.executor, self.schedule = _build(A, lower=True, parallel=parallel,
                                              min_parallel_rows=min_parallel_rows,
                                              what=what, target=target, sync=sync)
        #: the matrix in the executor's row order (``P A P^T``, its p2p partition, or ``A``)
        if not isinstance(self.executor, SweepExecutor):   # p2p: its own thread-partitioned order
            self.matrix = self.executor.schedule.matrix
        else:
            self.matrix = self.schedule.matrix if self.schedule is not None else A

    @property
    def levels(self) -> int:
        """Number of level sets (``n`` for the serial executor)."""
        return self.schedule.levels if self.schedule is not None else self.n

    def _sweep(self, x: Any, b: Any, sweeps: Any, mode: int) -> np.ndarray:
        b = check_vector(b, self.n, self.dtype, "b")
        x = np.zeros(self.n, self.dtype) if x is None else check_vector(x, self.n, self.dtype, "x")
        return self.executor.run_numpy(b, x, mode, _sweeps(sweeps))

    def forward(self, x: Any, b: Any, sweeps: int = 1) -> np.ndarray:
        """``sweeps`` forward sweeps (rows in increasing order) from ``x`` (``None`` = 0)."""
        return self._sweep(x, b, sweeps, FORWARD)

    def backward(self, x: Any, b: Any, sweeps: int = 1) -> np.ndarray:
        """``sweeps`` backward sweeps (rows in decreasing order)."""
        return self._sweep(x, b, sweeps, BACKWARD)

    def symmetric(self, x: Any, b: Any, sweeps: int = 1) -> np.ndarray:
        """``sweeps`` symmetric sweeps (forward then backward each)."""
        return self._sweep(x, b, sweeps, SYMMETRIC)

    def aslinearoperator(self):
        """The SGS preconditioner ``r -> M^-1 r`` (one symmetric sweep from 0) as a ``LinearOperator``.

        It is what ``pcg(A, b, M="sgs")`` applies, so ``pcg(A, b, M=GaussSeidel(A))``
        (or scipy's ``cg(A, b, M=GaussSeidel(A).aslinearoperator())``) takes the same iterations.
        """
        from scipy.sparse.linalg import LinearOperator

        return LinearOperator((self.n, self.n), matvec=lambda r: self.symmetric(None, r),
                              dtype=self.dtype)
