"""ILU(0) on the level schedule: inspector, a level-parallel TIR factorization, wavefront apply.

ILU(0) keeps the sparsity pattern of ``A``: ``A ~ L U`` with ``L`` unit lower
and ``U`` upper triangular, both on ``A``'s pattern.  It is the preconditioner
of the PCG benchmark the dissertation runs (Park et al. SC'14, Venkat 2016
§7.3.3: "ILU0 is computed once, and its inspector and executor are included in
the timed total").

* **Inspector** (once per pattern): the level sets of ``A``'s dependence graph
  (:func:`schedules.sparse.level_sets.schedule_of_canonical`, every
  off-diagonal entry links its row and column) and ``B = P A P^T``.
* **Factorization**: one TIR kernel, IKJ Gaussian elimination restricted to
  the pattern, level by level; the rows of a level are split into one chunk
  per thread (``T.parallel``, joined before the next level: the barrier
  executor of :mod:`schedules.sparse.triangular`).  Row ``i`` scatters the
  positions of its entries into its thread's marker array, then for each
  ``(i, k)``, ``k < i`` in increasing ``k``: divides by the pivot ``U[k, k]``
  (final: ``k`` lies in an earlier level) and, for every ``(k, j)``, ``j > k``
  whose ``(i, j)`` is marked, subtracts ``L[i, k] U[k, j]``; then clears its
  marks.  Rows of one level share no entry, so the result is exactly
  sequential ILU(0) on ``B``.
* **Apply** ``z = U^-1 L^-1 r``: a forward wavefront solve with ``L`` and a
  backward one with ``U`` on the *same* level schedule
  (:class:`schedules.sparse.triangular.SweepExecutor`), so nothing is
  permuted inside a solver loop.

Ordering: the level order keeps the relative order of every pair of coupled
rows (each edge runs from the lower original index to the higher), and every
update of IKJ elimination involves only coupled pairs, so ILU(0) of ``P A P^T``
is ``P (ILU(0) of A) P^T``: the factors equal natural-order ILU(0).

A zero (or missing) pivot raises :class:`tvm_ext.errors.InputError` naming the
row in the caller's numbering.

>>> import numpy as np, scipy.sparse as sp
>>> from tvm_ext.workloads import lap2d
>>> A = lap2d(8)
>>> M = ILU0(A)
>>> L, U = M.factors()
>>> bool(np.allclose((L @ U)[A.nonzero()], A.toarray()[A.nonzero()]))   # exact on the pattern
True
>>> z = M.solve(np.ones(64))
>>> bool(np.allclose(L @ (U @ z), 1.0))
True
"""
from __future__ import annotations

import textwrap
import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from schedules.sparse.level_sets import LevelSchedule, schedule_of_canonical
from schedules.sparse.row_sweep import _check_dtype, wrap
from schedules.sparse.triangular import BACKWARD, FORWARD, SweepExecutor, check_vector, executor_segments
from tvm_ext.errors import InputError
from tvm_ext.workloads import canonical_csr
from tvm_ext.zero_copy import empty_aligned

__all__ = ["ILU0", "ilu0_func"]

_I32 = np.int32


def _row_code(row_expr: str, base_expr: str, indent: int) -> str:
    code = f"""\
i = T.bind({row_expr})
base = T.bind({base_expr})
start = T.bind(indptr[i])
width = T.bind(indptr[i + 1] - start)
for p in range(width):
    marker[base + indices[start + p]] = start + p
for a in range(dpos[i] - start):
    e = T.bind(start + a)
    kd = T.bind(dpos[indices[e]])
    data[e] = data[e] / data[kd]
    for q in range(indptr[indices[e] + 1] - kd - 1):
        f = T.bind(kd + 1 + q)
        m = T.bind(marker[base + indices[f]])
        if m >= 0:
            data[m] = data[m] - data[e] * data[f]
for p in range(width):
    marker[base + indices[start + p]] = -1
"""
    return textwrap.indent(code, " " * indent)


def ilu0_func(dtype: str = "float64", parallel: bool = True):
    """The ILU(0) factorization PrimFunc (symbolic sizes) for ``dtype``.

    Arguments: CSR ``indptr``, ``indices``, ``data`` (factored in place),
    ``dpos`` (position of each row's diagonal), the segments
    ``seg_ptr``/``seg_par`` of :func:`schedules.sparse.triangular.level_segments`,
    ``marker`` (``threads * n`` int32, all -1; -1 again on return) and
    ``threads``.

    >>> "T.parallel" in ilu0_func("float32").script()
    True
    """
    import tvm
    from tvm.script import tirx as T

    name = _check_dtype(dtype, "ilu0_func")
    ploop = "T.parallel" if parallel else "range"
    src = f'''
@T.prim_func
def ilu0(indptr_h: T.handle, indices_h: T.handle, data_h: T.handle, dpos_h: T.handle,
         seg_ptr_h: T.handle, seg_par_h: T.handle, marker_h: T.handle, threads: T.int32):
    n = T.int32()
    np1 = T.int32()
    nnz = T.int32()
    S = T.int32()
    nm = T.int32()
    indptr = T.match_buffer(indptr_h, (np1,), "int32")
    indices = T.match_buffer(indices_h, (nnz,), "int32")
    data = T.match_buffer(data_h, (nnz,), {name!r})
    dpos = T.match_buffer(dpos_h, (n,), "int32")
    seg_ptr = T.match_buffer(seg_ptr_h, (S,), "int32")
    seg_par = T.match_buffer(seg_par_h, (S,), "int32")
    marker = T.match_buffer(marker_h, (nm,), "int32")
    for s in range(S - 1):
        lo = T.bind(seg_ptr[s])
        size = T.bind(seg_ptr[s + 1] - lo)
        if seg_par[s] != 0:
            chunk = T.bind((size + threads - 1) // threads)
            for c in {ploop}(threads):
                for kk in range(T.max(T.min(chunk, size - c * chunk), 0)):
{_row_code("lo + c * chunk + kk", "c * n", 20)}
        else:
            for kk in range(size):
{_row_code("lo + kk", "0", 16)}
'''
    return tvm.script.from_source(src, extra_vars={"T": T})


def _kernel(dtype: str, parallel: bool, target: Any):
    from tvm_ext.kernel_cache import get_or_build

    return get_or_build(("schedules.sparse.ilu0", dtype, bool(parallel), 2),
                        lambda: ilu0_func(dtype, parallel), target)


def _diagonal_positions(B: sp.csr_array, perm: np.ndarray | None, what: str) -> np.ndarray:
    n = B.shape[0]
    rows = np.repeat(np.arange(n, dtype=_I32), np.diff(B.indptr))
    on = np.flatnonzero(B.indices == rows)
    dpos = np.full(n, -1, dtype=np.int64)
    dpos[rows[on]] = on
    missing = np.flatnonzero(dpos < 0)
    if missing.size:
        r = int(missing[0]) if perm is None else int(perm[missing[0]])
        raise InputError(f"{what}: row {r} has no diagonal entry ({missing.size} such "
                         f"row{'s' if missing.size > 1 else ''}); ILU(0) needs every pivot "
                         "in the pattern")
    return dpos.astype(_I32)


class ILU0:
    """ILU(0) preconditioner with a level-set schedule: inspect and factor once, apply many times.

    * ``parallel=True``: level-scheduled factorization and wavefront solves on
      ``P A P^T`` (:attr:`perm`); ``parallel=False``: the same kernels, serial,
      in natural order.
    * :meth:`apply` works on TVM tensors in the executor's row order (what a
      solver loop uses); :meth:`solve` takes and returns numpy vectors in the
      original order; :meth:`factors` gives ``L`` (unit lower) and ``U`` in the
      original order.
    * ``seconds``: inspector (``levels``, ``pivots``) and ``factor`` time.

    >>> import numpy as np
    >>> from tvm_ext.workloads import lap3d
    >>> M = ILU0(lap3d(5))
    >>> M.levels
    13
    """

    def __init__(self, A: Any, parallel: bool = True, *, min_parallel_rows: int | None = None,
                 dtype: Any = None, target: Any = None, sync: str = "barrier"):
        from schedules.sparse.triangular import _check_sync

        what = "ILU0 matrix"
        sync = _check_sync(sync)
        if dtype is not None:
            _check_dtype(dtype, what)
        A = canonical_csr(A, square=True, dtype=dtype, what=what)
        self.dtype = _check_dtype(A.dtype, what)
        self.n = A.shape[0]
        self.parallel = bool(parallel)
        kernel = _kernel(self.dtype, parallel, target)  # compiled/loaded outside the timings
        t0 = time.perf_counter()
        self.schedule: LevelSchedule | None = None
        if parallel and self.n:
            self.schedule = schedule_of_canonical(A, lower=True)
            B, self.perm = self.schedule.matrix, self.schedule.perm
        else:
            B, self.perm = A, None
        seg_ptr, seg_par = executor_segments(self.schedule, self.n, min_parallel_rows)
        t1 = time.perf_counter()
        dpos = _diagonal_positions(B, self.perm, what) if self.n else np.zeros(0, _I32)
        t2 = time.perf_counter()
        data = self._factor(kernel, B, dpos, seg_ptr, seg_par)
        self._check_pivots(data, dpos, what)
        F = sp.csr_array((data, B.indices, B.indptr), shape=B.shape)
        F.has_sorted_indices = True
        self._F = F
        L, U = _split_factors(F, dpos)
        self._level_perm = self.perm
        if sync == "p2p" and self.schedule is not None:
            L, U, B = self._p2p_executors(L, U, target)
        else:
            self._L = SweepExecutor(L, seg_ptr=seg_ptr, seg_par=seg_par, parallel=parallel,
                                    perm=self.perm, what="ILU0 factor L", target=target)
            self._U = SweepExecutor(U, seg_ptr=seg_ptr, seg_par=seg_par, parallel=parallel,
                                    perm=self.perm, what="ILU0 factor U", target=target)
        import tvm

        self._tmp = tvm.runtime.empty((max(self.n, 1),), self.dtype, tvm.cpu(0))
        t3 = time.perf_counter()
        self.seconds = {"levels": t1 - t0, "pivots": t2 - t1, "factor": t3 - t2}
        if self.schedule is not None:
            self.seconds.update({f"levels.{k}": v for k, v in self.schedule.seconds.items()})
        #: the matrix in the executor's row order (``P A P^T`` or ``A``)
        self.matrix = B

    def _p2p_executors(self, L: sp.csr_array, U: sp.csr_array, target: Any):
        """Point-to-point executors for ``L`` and ``U`` on one thread partition.

        The factors were computed in level order (which keeps ILU(0) equal to
        natural-order ILU(0)); they are then permuted into the partition's
        order, whose waits come from the pattern of ``A`` (a superset of
        each factor's dependences).
        """
        from dataclasses import replace

        from schedules.sparse.level_sets import _permute_canonical
        from schedules.sparse.p2p import P2PExecutor, p2p_schedule, pool_threads

        ps = p2p_schedule(self.schedule, pool_threads())
        order = self.schedule.iperm[ps.perm]          # level-order index of each partition row
        iorder = np.empty_like(order)
        iorder[order] = np.arange(order.size, dtype=order.dtype)
        L2, U2 = _permute_canonical(L, order, iorder), _permute_canonical(U, order, iorder)
        self._L = P2PExecutor(replace(ps, matrix=L2), what="ILU0 factor L", target=target)
        self._U = P2PExecutor(replace(ps, matrix=U2), what="ILU0 factor U", target=target)
        self.perm = ps.perm
        return L2, U2, ps.matrix

    @property
    def levels(self) -> int:
        """Number of level sets (``n`` for the serial executor)."""
        return self.schedule.levels if self.schedule is not None else self.n

    @property
    def inspector_seconds(self) -> float:
        """Level sets and pivot positions (not the numeric factorization)."""
        return self.seconds["levels"] + self.seconds["pivots"]

    def _factor(self, kernel, B, dpos, seg_ptr, seg_par) -> np.ndarray:
        import tvm

        from tvm_ext.target import num_threads

        if self.n == 0 or B.nnz == 0:
            return B.data.copy()
        threads = max(1, num_threads()) if self.parallel else 1
        cpu = tvm.cpu(0)
        data = tvm.runtime.tensor(np.ascontiguousarray(B.data), cpu)
        args = [tvm.runtime.tensor(np.ascontiguousarray(a), cpu) for a in (
            B.indptr.astype(_I32), B.indices.astype(_I32))]
        args.append(data)
        args += [tvm.runtime.tensor(np.ascontiguousarray(a), cpu) for a in (
            dpos, seg_ptr, seg_par, np.full(threads * self.n, -1, _I32))]
        kernel["main"](*args, threads)
        return data.numpy()

    def _check_pivots(self, data: np.ndarray, dpos: np.ndarray, what: str) -> None:
        if self.n == 0:
            return
        piv = data[dpos]
        bad = np.flatnonzero(~((piv != 0) & np.isfinite(piv)))
        if bad.size:
            new = int(bad[0])
            r = new if self.perm is None else int(self.perm[new])
            raise InputError(f"{what}: zero pivot U[{r}, {r}] = {piv[new]:g} in ILU(0) at row {r}; "
                             "the incomplete factorization does not exist for this matrix "
                             "(reorder it, or use the 'sgs' or 'jacobi' preconditioner)")

    def apply(self, r, z) -> None:
        """``z = U^-1 L^-1 r`` on TVM tensors in the executor's row order (``r`` kept)."""
        if self.n:
            self._L.run(r, self._tmp, FORWARD, 1)
            self._U.run(self._tmp, z, BACKWARD, 1)

    def solve(self, b: Any) -> np.ndarray:
        """``(L U)^-1 b`` for a numpy vector in the original order."""
        b = check_vector(b, self.n, self.dtype, "b")
        if self.n == 0:
            return b.copy()
        r, z = empty_aligned(self.n, self.dtype), empty_aligned(self.n, self.dtype)
        r[:] = b if self.perm is None else b[self.perm]
        self.apply(wrap(r), wrap(z))
        if self.perm is None:
            return z.copy()
        out = np.empty_like(z)
        out[self.perm] = z
        return out

    def factors(self) -> tuple[sp.csr_array, sp.csr_array]:
        """``(L, U)`` in the original numbering; ``L`` has a unit diagonal."""
        n = self.n
        rows = np.repeat(np.arange(n), np.diff(self._F.indptr))
        cols = self._F.indices
        if self._level_perm is not None:
            rows, cols = self._level_perm[rows], self._level_perm[cols]
        vals = self._F.data
        low = cols < rows
        up = ~low
        L = sp.csr_array((np.concatenate([vals[low], np.ones(n, self.dtype)]),
                          (np.concatenate([rows[low], np.arange(n)]),
                           np.concatenate([cols[low], np.arange(n)]))), shape=(n, n))
        U = sp.csr_array((vals[up], (rows[up], cols[up])), shape=(n, n))
        return L, U


def _split_factors(F: sp.csr_array, dpos: np.ndarray) -> tuple[sp.csr_array, sp.csr_array]:
    """Unit-lower ``L`` and upper ``U`` (canonical CSR) of the factored ``F``."""
    n = F.shape[0]
    rows = np.repeat(np.arange(n, dtype=_I32), np.diff(F.indptr))
    low = F.indices < rows
    # L: strict lower entries plus a unit diagonal; sorted because the diagonal
    # follows every strictly lower column of its row
    Ld = np.where(low | (F.indices == rows))[0]
    Lvals = F.data[Ld].copy()
    Lvals[F.indices[Ld] == rows[Ld]] = 1.0
    Lptr = np.zeros(n + 1, dtype=_I32)
    np.cumsum(np.bincount(rows[Ld], minlength=n), out=Lptr[1:])
    L = sp.csr_array((Lvals, F.indices[Ld], Lptr), shape=F.shape)
    Ui = np.flatnonzero(~low)
    Uptr = np.zeros(n + 1, dtype=_I32)
    np.cumsum(np.bincount(rows[Ui], minlength=n), out=Uptr[1:])
    U = sp.csr_array((F.data[Ui], F.indices[Ui], Uptr), shape=F.shape)
    return L, U
