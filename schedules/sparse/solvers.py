"""Venkat 2016 ch. 7 (§7.3.3): PCG with a level-scheduled symmetric Gauss-Seidel preconditioner.

The SGS preconditioner ``M = (D + L) D^-1 (D + U)`` is applied as one
symmetric Gauss-Seidel sweep from ``z = 0`` with right-hand side ``r``: the
forward sweep gives ``y = (D + L)^-1 r``, the backward sweep then gives
``z = (D + U)^-1 D y = M^-1 r``.  Both sweeps run on the TIR executors of
:mod:`schedules.sparse.triangular`; the level schedule is computed **once**, in
the constructor (the inspector), and reused by every iteration and every
right-hand side.  The whole iteration runs in the level order (``P A P^T``),
so no vector is permuted inside the loop.

As in the dissertation's Table 7.2, the inspector's cost is reported in PCG
iterations: ``inspector_seconds / seconds_per_iteration`` (one iteration = one
SpMV, one forward + one backward sweep, two dot products and three axpys).
Kernel compilation is not inspector work (it happens once per dtype and is
cached on disk) and is excluded.

Failures are reported, not hidden: a non-symmetric matrix, a non-positive
diagonal, ``p'Ap <= 0`` (not positive definite), a non-positive ``r'z``, NaN,
or ``maxiter`` without reaching ``tol`` give ``converged=False`` with the
reason (or :class:`tvm_ext.errors.ConvergenceError` with
``raise_on_failure=True``).  A reported convergence is re-checked against the
true residual ``||b - A x|| / ||b||``.

>>> import numpy as np
>>> from tvm_ext.workloads import lap2d
>>> A = lap2d(16)
>>> res = pcg(A, np.ones(256), tol=1e-10)
>>> res.converged, res.reason
(True, 'converged')
>>> bool(np.linalg.norm(A @ res.x - 1) <= 1e-9 * 16)
True
>>> pcg(A, np.ones(256), preconditioner="none").iterations > res.iterations
True
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from schedules.sparse.triangular import (
    SYMMETRIC, GaussSeidel, _check_dtype, aligned_empty, check_vector, sweep_kernel, wrap,
)
from tvm_ext.errors import ConvergenceError, InputError
from tvm_ext.workloads import canonical_csr

__all__ = ["PCG", "PCGResult", "pcg", "spd_precheck", "PRECONDITIONERS"]

PRECONDITIONERS = ("sgs", "jacobi", "none")


@dataclass
class PCGResult:
    """Outcome of a PCG solve.

    ``residuals[k]`` is ``||r_k|| / ||b||`` (recursive residual, ``k = 0`` the
    initial one); ``true_residual`` is ``||b - A x|| / ||b||`` for the returned
    ``x``.  Times are in seconds.
    """

    x: np.ndarray
    converged: bool
    iterations: int
    residuals: list[float]
    reason: str
    preconditioner: str
    tol: float
    true_residual: float = float("nan")
    levels: int | None = None
    inspector_seconds: float = 0.0
    solve_seconds: float = 0.0
    inspector_breakdown: dict[str, float] = field(default_factory=dict)

    @property
    def seconds_per_iteration(self) -> float:
        """Mean wall time of one PCG iteration (nan before the first)."""
        return self.solve_seconds / self.iterations if self.iterations else float("nan")

    @property
    def inspector_overhead_iterations(self) -> float:
        """Inspector time in PCG iterations (the dissertation's Table 7.2 measure)."""
        spi = self.seconds_per_iteration
        return self.inspector_seconds / spi if spi and math.isfinite(spi) else float("nan")

    def summary(self) -> dict[str, Any]:
        """JSON-able summary (no solution vector)."""
        return {
            "converged": self.converged, "iterations": self.iterations, "reason": self.reason,
            "preconditioner": self.preconditioner, "tol": self.tol,
            "final_residual": self.residuals[-1] if self.residuals else None,
            "true_residual": self.true_residual, "levels": self.levels,
            "inspector_seconds": self.inspector_seconds,
            "seconds_per_iteration": self.seconds_per_iteration,
            "inspector_overhead_iterations": self.inspector_overhead_iterations,
        }


def spd_precheck(A: sp.csr_array) -> str | None:
    """Cheap O(nnz) evidence that ``A`` is not SPD (None if none found)."""
    d = A.diagonal()
    bad = np.flatnonzero(~(d > 0))
    if bad.size:
        i = int(bad[0])
        return (f"A is not symmetric positive definite: diagonal entry A[{i}, {i}] = {d[i]:g} "
                "is not positive")
    scale = float(np.abs(A.data).max()) if A.nnz else 0.0
    diff = (A - A.T).tocsr()
    asym = float(np.abs(diff.data).max()) if diff.nnz else 0.0
    eps = np.finfo(A.dtype).eps
    if asym > 64 * eps * scale:
        return f"A is not symmetric: max |A - A^T| = {asym:.3e} (max |A| = {scale:.3e})"
    return None


class PCG:
    """Preconditioned CG on one SPD matrix; inspect once, solve many right-hand sides.

    ``preconditioner``: ``"sgs"`` (symmetric Gauss-Seidel on the level-set
    executor, or the serial TVM executor with ``parallel=False``),
    ``"jacobi"`` or ``"none"``.

    >>> import numpy as np
    >>> from tvm_ext.workloads import lap3d
    >>> solver = PCG(lap3d(6))
    >>> solver.levels                      # 3n - 2 level sets
    16
    >>> r = solver.solve(np.ones(216))
    >>> r.converged and r.true_residual < 1e-8
    True
    """

    def __init__(self, A: Any, *, preconditioner: str = "sgs", parallel: bool = True,
                 min_parallel_rows: int | None = None, dtype: Any = None, target: Any = None):
        if preconditioner not in PRECONDITIONERS:
            raise InputError(f"pcg: preconditioner must be one of {PRECONDITIONERS}, "
                             f"got {preconditioner!r}")
        if dtype is not None:
            _check_dtype(dtype, "pcg matrix")
        A = canonical_csr(A, square=True, dtype=dtype, what="pcg matrix")
        self.dtype = _check_dtype(A.dtype, "pcg matrix")
        self.n = A.shape[0]
        self.preconditioner = preconditioner
        self.problem = spd_precheck(A) if self.n else None
        self.gs: GaussSeidel | None = None
        self.inspector_breakdown: dict[str, float] = {}
        if preconditioner == "sgs" and self.problem is None and self.n:
            sweep_kernel(self.dtype, parallel, target)  # compile/load outside the timed inspector
        t0 = time.perf_counter()
        self._setup(A, parallel, min_parallel_rows, target)
        self.inspector_seconds = time.perf_counter() - t0

    def _setup(self, A: sp.csr_array, parallel: bool, min_parallel_rows: int | None,
               target: Any) -> None:
        self.perm = None
        self.matrix = A  # in iteration order
        self._inv_diag = None
        if self.problem is not None or self.n == 0:
            return
        if self.preconditioner == "sgs":
            self.gs = GaussSeidel(A, parallel=parallel, min_parallel_rows=min_parallel_rows,
                                  target=target)
            self.matrix = self.gs.matrix
            self.perm = self.gs.executor.perm
            if self.gs.schedule is not None:
                self.inspector_breakdown = dict(self.gs.schedule.seconds)
        elif self.preconditioner == "jacobi":
            self._inv_diag = (1.0 / A.diagonal()).astype(self.dtype)

    @property
    def levels(self) -> int | None:
        """Level sets of the SGS schedule (``None`` without a level-set preconditioner)."""
        return self.gs.levels if self.gs is not None else None

    # ------------------------------------------------------------------ solve
    def solve(self, b: Any, *, x0: Any = None, tol: float = 1e-8, maxiter: int | None = None,
              raise_on_failure: bool = False) -> PCGResult:
        """Solve ``A x = b`` to ``||b - A x|| <= tol * ||b||``."""
        b = check_vector(b, self.n, self.dtype, "b")
        x0 = np.zeros(self.n, self.dtype) if x0 is None else check_vector(x0, self.n, self.dtype, "x0")
        if not (isinstance(tol, (int, float)) and tol > 0):
            raise InputError(f"pcg: tol must be a positive number, got {tol!r}")
        maxiter = 10 * self.n if maxiter is None else int(maxiter)
        if maxiter < 0:
            raise InputError(f"pcg: maxiter must be >= 0, got {maxiter}")
        result = self._iterate(b, x0, float(tol), maxiter)
        if not result.converged and raise_on_failure:
            err = ConvergenceError(f"pcg ({self.preconditioner}): {result.reason}")
            err.result = result  # type: ignore[attr-defined]
            raise err
        return result

    def _result(self, x: np.ndarray, ok: bool, its: int, hist: list[float], reason: str,
                tol: float, seconds: float) -> PCGResult:
        return PCGResult(x=x, converged=ok, iterations=its, residuals=hist, reason=reason,
                         preconditioner=self.preconditioner, tol=tol, levels=self.levels,
                         inspector_seconds=self.inspector_seconds, solve_seconds=seconds,
                         inspector_breakdown=dict(self.inspector_breakdown))

    def _iterate(self, b: np.ndarray, x0: np.ndarray, tol: float, maxiter: int) -> PCGResult:
        bnorm = _norm(b)
        if self.problem is not None:
            return self._result(x0.copy(), False, 0, [], self.problem, tol, 0.0)
        if self.n == 0 or bnorm == 0.0:
            res = self._result(np.zeros(self.n, self.dtype), True, 0, [0.0], "converged", tol, 0.0)
            res.true_residual = 0.0
            return res
        t0 = time.perf_counter()
        x_o, hist, its, reason = self._cg_loop(b, x0, bnorm, tol, maxiter)
        seconds = time.perf_counter() - t0
        x = x_o if self.perm is None else _unpermute(x_o, self.perm)
        true_res = _norm(b - self.original_matvec(x)) / bnorm
        ok = reason == "converged"
        if ok and not true_res <= 10 * tol:
            ok, reason = False, (f"recursive residual reached tol but the true residual "
                                 f"||b - Ax||/||b|| = {true_res:.3e} > 10*tol")
        res = self._result(x, ok, its, hist, reason, tol, seconds)
        res.true_residual = true_res
        return res

    def original_matvec(self, x: np.ndarray) -> np.ndarray:
        """``A x`` in the original row order."""
        if self.perm is None:
            return self.matrix @ x
        return _unpermute(self.matrix @ x[self.perm], self.perm)

    def _cg_loop(self, b: np.ndarray, x0: np.ndarray, bnorm: float, tol: float,
                 maxiter: int) -> tuple[np.ndarray, list[float], int, str]:
        A = self.matrix
        perm = self.perm
        x = (x0 if perm is None else x0[perm]).astype(self.dtype, copy=True)
        r = aligned_empty(self.n, self.dtype)
        r[:] = (b if perm is None else b[perm]) - A @ x
        z = aligned_empty(self.n, self.dtype)
        apply = self._preconditioner(r, z)
        rel = _norm(r) / bnorm
        hist = [rel]
        if rel <= tol:
            return x, hist, 0, "converged"
        apply()
        rz = _dot(r, z)
        p = z.copy()
        for k in range(1, maxiter + 1):
            if not rz > 0 or not math.isfinite(rz):
                return x, hist, k - 1, _rz_reason(rz, k)
            q = A @ p
            pq = _dot(p, q)
            if not pq > 0 or not math.isfinite(pq):
                return x, hist, k - 1, _pq_reason(pq, k)
            alpha = rz / pq
            x += alpha * p
            r -= alpha * q
            rel = _norm(r) / bnorm
            hist.append(rel)
            if not math.isfinite(rel):
                return x, hist, k, f"numerical breakdown (residual {rel}) at iteration {k}"
            if rel <= tol:
                return x, hist, k, "converged"
            apply()
            rz_new = _dot(r, z)
            p *= rz_new / rz
            p += z
            rz = rz_new
        return x, hist, maxiter, (f"no convergence in {maxiter} iterations: relative residual "
                                  f"{rel:.3e} > tol {tol:.1e}")

    def _preconditioner(self, r: np.ndarray, z: np.ndarray):
        """A closure ``apply()`` that writes ``M^-1 r`` into ``z`` (both aligned)."""
        if self.gs is not None:
            r_t, z_t, run = wrap(r), wrap(z), self.gs.executor.run

            def apply_sgs() -> None:
                z[:] = 0.0
                run(r_t, z_t, SYMMETRIC, 1)
            return apply_sgs
        if self._inv_diag is not None:
            inv_d = self._inv_diag
            return lambda: np.multiply(r, inv_d, out=z)
        return lambda: np.copyto(z, r)


def _dot(u: np.ndarray, v: np.ndarray) -> float:
    """Dot product without BLAS: OpenBLAS worker threads spin after each call
    and fight TVM's thread pool for the cores (10x slower PCG on 2 cores)."""
    return float(np.einsum("i,i->", u, v))


def _norm(u: np.ndarray) -> float:
    return math.sqrt(_dot(u, u))


def _unpermute(v: np.ndarray, perm: np.ndarray) -> np.ndarray:
    out = np.empty_like(v)
    out[perm] = v
    return out


def _pq_reason(pq: float, k: int) -> str:
    return (f"A is not positive definite: p'Ap = {pq:.3e} <= 0 at iteration {k}"
            if math.isfinite(pq) else f"numerical breakdown (p'Ap = {pq}) at iteration {k}")


def _rz_reason(rz: float, k: int) -> str:
    return (f"preconditioner is not positive definite: r'z = {rz:.3e} <= 0 at iteration {k}"
            if math.isfinite(rz) else f"numerical breakdown (r'z = {rz}) at iteration {k}")


def pcg(A: Any, b: Any, *, x0: Any = None, tol: float = 1e-8, maxiter: int | None = None,
        preconditioner: str = "sgs", parallel: bool = True, min_parallel_rows: int | None = None,
        raise_on_failure: bool = False, dtype: Any = None, target: Any = None) -> PCGResult:
    """Solve SPD ``A x = b`` with preconditioned CG (inspector + one solve).

    ``maxiter`` defaults to ``10 * n`` (as scipy's ``cg``).  See :class:`PCG`
    and :class:`PCGResult`.

    >>> import numpy as np, scipy.sparse as sp
    >>> bad = sp.csr_array(np.array([[1.0, 2.0], [2.0, 1.0]]))   # symmetric, indefinite
    >>> r = pcg(bad, np.array([1.0, 0.0]))
    >>> r.converged, r.reason.startswith("A is not positive definite")
    (False, True)
    """
    solver = PCG(A, preconditioner=preconditioner, parallel=parallel,
                 min_parallel_rows=min_parallel_rows, dtype=dtype, target=target)
    return solver.solve(b, x0=x0, tol=tol, maxiter=maxiter, raise_on_failure=raise_on_failure)
