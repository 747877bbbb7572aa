"""Venkat 2016 ch. 7 (§7.3.3): PCG on TVM kernels with level-scheduled SGS or ILU(0) preconditioners.

Every vector operation of the iteration runs on compiled TVM kernels; no
scipy or numpy touches a vector inside the loop:

* the matrix-vector product is the project's CSR SpMV executor
  (:func:`schedules.sparse.executors.build_executor`, built once per solver);
* dot products and the ``x``/``r``/``z`` updates are the parallel TIR kernels
  of :mod:`schedules.sparse.vector_kernels` (one fused pass for
  ``x += a p; r -= a q; ||r||^2`` plus the preconditioner's ``z`` set-up);
* the preconditioner is one of

  - ``"sgs"``: symmetric Gauss-Seidel ``M = (D + L) D^-1 (D + U)``, applied
    as one forward + one backward wavefront sweep from ``z = 0``
    (:mod:`schedules.sparse.triangular`);
  - ``"ilu0"``: ILU(0) (:mod:`schedules.sparse.ilu0`), factored once on the
    level schedule and applied as a forward (``L``) and a backward (``U``)
    wavefront triangular solve: the dissertation's PCG benchmark (Park et al.);
  - ``"jacobi"`` (``z = r / diag(A)``, fused into the update pass) or ``"none"``.

Vectors live in pre-allocated TVM tensors for the whole solve, in the level
order of the preconditioner's schedule (``P A P^T``), so nothing is permuted
inside the loop; only scalars (dot products) come back to Python.  The level
schedule is computed **once**, in the constructor (the inspector), and reused
by every iteration and every right-hand side.

As in the dissertation's Table 7.2, the inspector's cost is reported in PCG
iterations: ``inspector_seconds / seconds_per_iteration`` (one iteration = one
SpMV, the preconditioner, two dot products and the fused updates).  Kernel
compilation is not inspector work (it happens once per dtype and is cached on
disk) and is excluded.

Failures are reported, not hidden: a non-symmetric matrix, a non-positive
diagonal, ``p'Ap <= 0`` (not positive definite), a non-positive ``r'z``, NaN,
or ``maxiter`` without reaching ``tol`` give ``converged=False`` and
``info > 0`` with the reason (or :class:`tvm_ext.errors.ConvergenceError`
with ``raise_on_failure=True``); :meth:`PCGResult.summary` is JSON-able with
no NaN (undefined numbers are ``None``).  A reported convergence is
re-checked against the true residual ``||b - A x|| / ||b||``.  ILU(0) with a
zero pivot raises :class:`tvm_ext.errors.InputError` naming the row.

>>> import numpy as np
>>> from tvm_ext.workloads import lap2d
>>> A = lap2d(16)
>>> x, info = pcg(A, np.ones(256), rtol=1e-10)          # scipy.sparse.linalg.cg's contract
>>> info, bool(np.linalg.norm(A @ x - 1) <= 1e-9 * 16)
(0, True)
>>> res = pcg(A, np.ones(256), rtol=1e-10, return_result=True)  # the full PCGResult
>>> res.converged, res.reason
(True, 'converged')
>>> pcg(A, np.ones(256), M=None, return_result=True).iterations > res.iterations
True
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from schedules.sparse.row_sweep import _check_dtype
from schedules.sparse.triangular import SYMMETRIC, GaussSeidel, check_vector, sweep_kernel
from tvm_ext.errors import ConvergenceError, InputError
from tvm_ext.workloads import canonical_csr

__all__ = ["PCG", "PCGResult", "IterativeResult", "pcg", "spd_precheck", "PRECONDITIONERS", "resolve_tolerance"]

PRECONDITIONERS = ("sgs", "ilu0", "jacobi", "none")

# how the fused update pass prepares z (see schedules.sparse.vector_kernels)
_Z_KEEP, _Z_ZERO, _Z_JACOBI = 0, 1, 2


def _finite_or_none(v: Any) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


class IterativeResult:
    """``info`` and ``seconds_per_iteration`` of a solver result with ``converged``,
    ``iterations`` and ``solve_seconds`` fields (scipy ``cg``'s ``info`` convention).

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class R(IterativeResult):
    ...     converged: bool
    ...     iterations: int
    ...     solve_seconds: float
    >>> R(False, 4, 2.0).info, R(True, 4, 2.0).seconds_per_iteration
    (4, 0.5)
    """

    @property
    def info(self) -> int:
        """0 when converged, else the iterations done (>= 1), as scipy's ``cg``."""
        return 0 if self.converged else max(int(self.iterations), 1)

    @property
    def seconds_per_iteration(self) -> float:
        """Mean wall time of one iteration (nan before the first)."""
        return self.solve_seconds / self.iterations if self.iterations else float("nan")


@dataclass
class PCGResult(IterativeResult):
    """Outcome of a PCG solve.

    ``residuals[k]`` is ``||r_k|| / ||b||`` (recursive residual, ``k = 0`` the
    initial one); ``true_residual`` is ``||b - A x|| / ||b||`` for the returned
    ``x``.  Times are in seconds.  ``info`` follows scipy's ``cg``: 0 when
    converged, otherwise the number of iterations done (at least 1).
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
    dtype: str = "float64"

    @property
    def inspector_overhead_iterations(self) -> float:
        """Inspector time in PCG iterations (the dissertation's Table 7.2 measure)."""
        spi = self.seconds_per_iteration
        return self.inspector_seconds / spi if spi and math.isfinite(spi) else float("nan")

    def summary(self) -> dict[str, Any]:
        """JSON-able summary (no solution vector); undefined numbers are ``None``, never NaN."""
        return {
            "converged": self.converged, "info": self.info, "iterations": self.iterations,
            "reason": self.reason, "preconditioner": self.preconditioner, "tol": self.tol,
            "dtype": self.dtype,
            "final_residual": _finite_or_none(self.residuals[-1]) if self.residuals else None,
            "true_residual": _finite_or_none(self.true_residual), "levels": self.levels,
            "inspector_seconds": self.inspector_seconds,
            "solve_seconds": self.solve_seconds,
            "seconds_per_iteration": _finite_or_none(self.seconds_per_iteration),
            "inspector_overhead_iterations": _finite_or_none(self.inspector_overhead_iterations),
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

    ``A``: a sparse or dense matrix, or a :class:`scipy.sparse.linalg.LinearOperator`
    (anything with ``aslinearoperator``, e.g. an :class:`~schedules.sparse.executors.Executor`,
    is taken as its operator).  An operator has no entries to inspect: its
    product runs through its ``matvec`` (host numpy) and it takes no
    ``"sgs"``/``"ilu0"``/``"jacobi"`` preconditioner.
    ``preconditioner``: ``"sgs"`` (symmetric Gauss-Seidel on the level-set
    executor, or the serial TVM executor with ``parallel=False``), ``"ilu0"``
    (ILU(0) on the same schedule), ``"jacobi"``, ``"none"``, or an operator
    applying ``M^-1`` (a ``LinearOperator``, a matrix, or an object with
    ``aslinearoperator``), as scipy's ``M``; ``sync``:
    ``"barrier"`` (level by level) or ``"p2p"`` (point-to-point,
    :mod:`schedules.sparse.p2p`) wavefront executors.

    >>> import numpy as np
    >>> from tvm_ext.workloads import lap3d
    >>> solver = PCG(lap3d(6))
    >>> solver.levels                      # 3n - 2 level sets
    16
    >>> r = solver.solve(np.ones(216), rtol=1e-8)
    >>> r.converged and r.true_residual < 1e-7
    True
    >>> PCG(lap3d(6), preconditioner="ilu0").solve(np.ones(216), rtol=1e-8).iterations < r.iterations + 3
    True
    """

    def __init__(self, A: Any, *, preconditioner: str = "sgs", parallel: bool = True,
                 min_parallel_rows: int | None = None, dtype: Any = None, target: Any = None,
                 sync: str = "barrier"):
        from schedules.sparse.triangular import _check_sync

        self.sync = _check_sync(sync)
        self.operator = _as_operator(A, "pcg matrix A", matrices=False)
        self.m_operator = None
        if isinstance(preconditioner, str):
            if preconditioner not in PRECONDITIONERS:
                raise InputError(f"pcg: preconditioner must be one of {PRECONDITIONERS} or an "
                                 f"operator, got {preconditioner!r}")
        else:
            self.m_operator = _as_operator(preconditioner, "pcg preconditioner M", matrices=True)
            preconditioner = "operator"
        if dtype is not None:
            _check_dtype(dtype, "pcg matrix")
        if self.operator is not None:
            self._init_operator(preconditioner, dtype, target)
            return
        A = canonical_csr(A, square=True, dtype=dtype, what="pcg matrix")
        self.dtype = _check_dtype(A.dtype, "pcg matrix")
        self.n = A.shape[0]
        self.preconditioner = preconditioner
        self._check_m_shape()
        self.problem = spd_precheck(A) if self.n else None
        self.gs: GaussSeidel | None = None
        self.ilu = None
        self.inspector_breakdown: dict[str, float] = {}
        active = self.problem is None and self.n > 0
        if active and preconditioner == "sgs":
            sweep_kernel(self.dtype, parallel, target)  # compile/load outside the timed inspector
        if active and preconditioner == "ilu0":
            from schedules.sparse.ilu0 import _kernel as ilu0_kernel

            ilu0_kernel(self.dtype, parallel, target)
            sweep_kernel(self.dtype, parallel, target)
        if active and parallel and self.sync == "p2p" and preconditioner in ("sgs", "ilu0"):
            from schedules.sparse.p2p import p2p_kernel

            p2p_kernel(self.dtype, target)
            p2p_kernel(self.dtype, target, replay=True)
        t0 = time.perf_counter()
        self._setup(A, parallel, min_parallel_rows, target)
        self.inspector_seconds = time.perf_counter() - t0
        if active:
            self._build_kernels(target)

    def _init_operator(self, preconditioner: str, dtype: Any, target: Any) -> None:
        """Set-up for a ``LinearOperator`` ``A``: no inspector, the product is its ``matvec``."""
        op = self.operator
        if preconditioner in ("sgs", "ilu0", "jacobi"):
            raise InputError(f"pcg: preconditioner {preconditioner!r} needs A's entries, and A is a "
                             "LinearOperator; pass M=None or an operator for M")
        if len(op.shape) != 2 or op.shape[0] != op.shape[1]:
            raise InputError(f"pcg: A must be square, got a LinearOperator of shape {op.shape}")
        self.dtype = _check_dtype(dtype if dtype is not None else op.dtype, "pcg operator A")
        self.n = int(op.shape[0])
        self.preconditioner = preconditioner
        self._check_m_shape()
        self.problem = None
        self.gs = self.ilu = None
        self.inspector_breakdown = {}
        self.perm, self.matrix, self._inv_diag = None, None, None
        self.inspector_seconds = 0.0
        if self.n:
            self._build_kernels(target)

    def _check_m_shape(self) -> None:
        if self.m_operator is not None and tuple(self.m_operator.shape) != (self.n, self.n):
            raise InputError(f"pcg: M has shape {tuple(self.m_operator.shape)}, A is "
                             f"{self.n} x {self.n}")

    def _setup(self, A: sp.csr_array, parallel: bool, min_parallel_rows: int | None,
               target: Any) -> None:
        self.perm = None
        self.matrix = A  # in iteration order
        self._inv_diag = None
        if self.problem is not None or self.n == 0:
            return
        if self.preconditioner == "sgs":
            self.gs = GaussSeidel(A, parallel=parallel, min_parallel_rows=min_parallel_rows,
                                  target=target, sync=self.sync)
            self.matrix = self.gs.matrix
            self.perm = self.gs.executor.perm
            if self.gs.schedule is not None:
                self.inspector_breakdown = dict(self.gs.schedule.seconds)
        elif self.preconditioner == "ilu0":
            from schedules.sparse.ilu0 import ILU0

            self.ilu = ILU0(A, parallel=parallel, min_parallel_rows=min_parallel_rows,
                            target=target, sync=self.sync)
            self.matrix = self.ilu.matrix
            self.perm = self.ilu.perm
            self.inspector_breakdown = dict(self.ilu.seconds)
        elif self.preconditioner == "jacobi":
            self._inv_diag = (1.0 / A.diagonal()).astype(self.dtype)

    def _build_kernels(self, target: Any) -> None:
        """SpMV executor, vector kernels and the solve's TVM tensors (once per solver)."""
        import tvm

        from schedules.sparse.executors import build_executor
        from schedules.sparse.formats import CSR
        from schedules.sparse.vector_kernels import VectorKernels

        if self.operator is not None:
            self.spmv = _OperatorProduct(self.operator, self.dtype)
        else:
            self.spmv = build_executor(CSR.from_scipy(self.matrix), kind="spmv", target=target)
        self.vec = VectorKernels(self.dtype, target)
        cpu = tvm.cpu(0)
        self._t = {k: tvm.runtime.empty((self.n,), self.dtype, cpu)
                   for k in ("x", "b", "r", "p", "q", "z")}
        self._t["d"] = (tvm.runtime.tensor(self._inv_diag, cpu) if self._inv_diag is not None
                        else self._t["q"])

    @property
    def levels(self) -> int | None:
        """Level sets of the preconditioner's schedule (``None`` without one)."""
        if self.gs is not None:
            return self.gs.levels
        if self.ilu is not None:
            return self.ilu.levels
        return None

    # ------------------------------------------------------------------ solve
    def solve(self, b: Any, *, x0: Any = None, rtol: float = 1e-5, atol: float = 0.0,
              maxiter: int | None = None, callback: Any = None, raise_on_failure: bool = False,
              tol: float | None = None) -> PCGResult:
        """Solve ``A x = b`` to ``||b - A x|| <= max(rtol * ||b||, atol)`` (scipy's ``cg`` test).

        ``callback(xk)`` is called after every iteration with a copy of the
        current iterate (original row order), as in scipy.  ``tol`` is the
        deprecated name of ``rtol``.
        """
        b = check_vector(b, self.n, self.dtype, "b")
        x0 = np.zeros(self.n, self.dtype) if x0 is None else check_vector(x0, self.n, self.dtype, "x0")
        rtol = _deprecated_tol(tol, rtol, "pcg")
        if callback is not None and not callable(callback):
            raise InputError(f"pcg: callback must be callable, got {type(callback).__name__}")
        maxiter = 10 * self.n if maxiter is None else int(maxiter)
        if maxiter < 0:
            raise InputError(f"pcg: maxiter must be >= 0, got {maxiter}")
        tol = resolve_tolerance(rtol, atol, _norm(b), "pcg")
        self._callback = callback
        try:
            result = self._iterate(b, x0, tol, maxiter)
        finally:
            self._callback = None
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
                         inspector_breakdown=dict(self.inspector_breakdown), dtype=self.dtype)

    def _iterate(self, b: np.ndarray, x0: np.ndarray, tol: float, maxiter: int) -> PCGResult:
        bnorm = _norm(b)
        if self.problem is not None:
            res = self._result(x0.copy(), False, 0, [], self.problem, tol, 0.0)
            if bnorm > 0 and self.n:
                res.true_residual = _norm(b - self.matrix @ x0) / bnorm
            return res
        if self.n == 0 or bnorm == 0.0:
            res = self._result(np.zeros(self.n, self.dtype), True, 0, [0.0], "converged", tol, 0.0)
            res.true_residual = 0.0
            return res
        t = self._t
        t["b"].copyfrom(np.ascontiguousarray(b if self.perm is None else b[self.perm]))
        t["x"].copyfrom(np.ascontiguousarray(x0 if self.perm is None else x0[self.perm]))
        t0 = time.perf_counter()
        hist, its, reason = self._cg_loop(bnorm, tol, maxiter)
        seconds = time.perf_counter() - t0
        x_o = t["x"].numpy()
        x = x_o if self.perm is None else _unpermute(x_o, self.perm)
        # true residual b - A x on the same SpMV executor (outside the timed loop)
        self.spmv(t["x"], t["b"], alpha=-1.0, beta=1.0, out=t["q"])
        true_res = math.sqrt(max(self.vec.dot(t["q"], t["q"]), 0.0)) / bnorm
        ok = reason == "converged"
        if ok and not true_res <= 10 * tol:
            ok, reason = False, (f"recursive residual reached tol but the true residual "
                                 f"||b - Ax||/||b|| = {true_res:.3e} > 10*tol")
        res = self._result(x, ok, its, hist, reason, tol, seconds)
        res.true_residual = true_res
        return res

    def original_matvec(self, x: np.ndarray) -> np.ndarray:
        """``A x`` in the original row order (scipy; for checks outside the solve)."""
        if self.operator is not None:
            return np.asarray(self.operator.matvec(x)).reshape(-1)
        if self.perm is None:
            return self.matrix @ x
        return _unpermute(self.matrix @ x[self.perm], self.perm)

    def _cg_loop(self, bnorm: float, tol: float, maxiter: int) -> tuple[list[float], int, str]:
        """The PCG iteration on the solver's TVM tensors (``x``, ``b`` already set)."""
        t, vec, spmv = self._t, self.vec, self.spmv
        x, r, p, q, d = t["x"], t["r"], t["p"], t["q"], t["d"]
        z = r if self.preconditioner == "none" else t["z"]
        zmode = {"sgs": _Z_ZERO, "jacobi": _Z_JACOBI}.get(self.preconditioner, _Z_KEEP)
        apply = self._preconditioner(r, z)
        spmv(x, t["b"], alpha=-1.0, beta=1.0, out=r)            # r = b - A x
        rr = vec.cg_update(x, r, r, r, z, d, 0.0, zmode)         # ||r||^2 and z set-up
        rel = math.sqrt(max(rr, 0.0)) / bnorm if math.isfinite(rr) else rr
        hist = [rel]
        if rel <= tol:
            return hist, 0, "converged"
        apply()
        rz = rr if z is r else vec.dot(r, z)
        p.copyfrom(z)
        for k in range(1, maxiter + 1):
            if not rz > 0 or not math.isfinite(rz):
                return hist, k - 1, _rz_reason(rz, k)
            spmv(p, out=q)
            pq = vec.dot(p, q)
            if not pq > 0 or not math.isfinite(pq):
                return hist, k - 1, _pq_reason(pq, k)
            alpha = rz / pq
            rr = vec.cg_update(x, r, p, q, z, d, alpha, zmode)
            rel = math.sqrt(rr) / bnorm if math.isfinite(rr) and rr >= 0 else float("nan")
            hist.append(rel)
            if not math.isfinite(rel):
                return hist, k, f"numerical breakdown (residual {rr}) at iteration {k}"
            if self._callback is not None:
                self._callback(self._current_x())
            if rel <= tol:
                return hist, k, "converged"
            apply()
            rz_new = rr if z is r else vec.dot(r, z)
            vec.xpay(p, z, rz_new / rz)
            rz = rz_new
        return hist, maxiter, (f"no convergence in {maxiter} iterations: relative residual "
                               f"{rel:.3e} > tol {tol:.1e}")

    _callback = None

    def _current_x(self) -> np.ndarray:
        """A copy of the iterate in the original row order (for ``callback``)."""
        x = self._t["x"].numpy()
        return x if self.perm is None else _unpermute(x, self.perm)

    def _preconditioner(self, r, z):
        """A closure ``apply()`` that writes ``M^-1 r`` into ``z`` (TVM tensors).

        SGS sweeps from the ``z = 0`` that the update pass left; Jacobi and
        "none" are done by the update pass itself.
        """
        if self.gs is not None:
            run = self.gs.executor.run
            return lambda: run(r, z, SYMMETRIC, 1)
        if self.ilu is not None:
            ilu = self.ilu
            return lambda: ilu.apply(r, z)
        if self.m_operator is not None:
            m_op, dtype, n = self.m_operator, self.dtype, self.n

            def apply_operator() -> None:
                out = np.asarray(m_op.matvec(r.numpy()), dtype=dtype).reshape(-1)
                if out.shape != (n,):
                    raise InputError(f"pcg: M.matvec returned shape {out.shape}, expected ({n},)")
                z.copyfrom(np.ascontiguousarray(out))
            return apply_operator
        return lambda: None


def _dot(u: np.ndarray, v: np.ndarray) -> float:
    """Dot product without BLAS (outside the iteration only): OpenBLAS worker
    threads spin after each call and fight TVM's thread pool for the cores."""
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


def resolve_tolerance(rtol: Any, atol: Any, bnorm: float, what: str) -> float:
    """The relative tolerance ``max(rtol, atol / ||b||)`` that scipy's test ``||r|| <= max(rtol ||b||, atol)`` is.

    >>> resolve_tolerance(1e-5, 1e-3, 10.0, "pcg")
    0.0001
    """
    for name, v in (("rtol", rtol), ("atol", atol)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
            raise InputError(f"{what}: {name} must be a finite number >= 0, got {v!r}")
    tol = max(float(rtol), float(atol) / bnorm if bnorm > 0 else 0.0)
    if not tol > 0 and bnorm > 0:
        raise InputError(f"{what}: rtol and atol are both 0: no residual can reach that")
    return tol


def _deprecated_tol(tol: Any, rtol: Any, what: str) -> Any:
    """``rtol``, or the deprecated ``tol`` (with a ``DeprecationWarning``) when that is given."""
    if tol is None:
        return rtol
    warnings.warn(f"{what}: tol= is deprecated, use rtol= (and atol=) as scipy.sparse.linalg.cg",
                  DeprecationWarning, stacklevel=3)
    return tol


def _as_operator(A: Any, what: str, *, matrices: bool):
    """``A`` as a scipy ``LinearOperator``; ``None`` for a matrix when ``matrices`` is False."""
    from scipy.sparse.linalg import LinearOperator, aslinearoperator

    if isinstance(A, LinearOperator):
        return A
    if hasattr(A, "aslinearoperator"):
        return A.aslinearoperator()
    if not matrices:
        return None
    if sp.issparse(A) or isinstance(A, np.ndarray):
        return aslinearoperator(A)
    raise InputError(f"{what}: expected a LinearOperator, a matrix or one of {PRECONDITIONERS}, "
                     f"got {type(A).__name__}")


class _OperatorProduct:
    """The SpMV executor's call ``(x, c, alpha, beta, out)`` on a ``LinearOperator`` (host numpy)."""

    def __init__(self, op: Any, dtype: str):
        self.op, self.dtype = op, dtype

    def __call__(self, x, c=None, *, alpha: float = 1.0, beta: float = 0.0, out) -> None:
        y = np.asarray(self.op.matvec(x.numpy()), dtype=self.dtype).reshape(-1)
        if y.shape != (out.shape[0],):
            raise InputError(f"pcg: A.matvec returned shape {y.shape}, expected ({out.shape[0]},)")
        if alpha != 1.0:
            y = alpha * y
        if c is not None and beta != 0.0:
            y = y + beta * c.numpy()
        out.copyfrom(np.ascontiguousarray(y, dtype=self.dtype))


def pcg(A: Any, b: Any, x0: Any = None, *, rtol: float = 1e-5, atol: float = 0.0,
        maxiter: int | None = None, M: Any = "auto", callback: Any = None,
        return_result: bool = False, parallel: bool = True, min_parallel_rows: int | None = None,
        raise_on_failure: bool = False, dtype: Any = None, target: Any = None,
        sync: str = "barrier", tol: float | None = None, preconditioner: str | None = None):
    """Solve SPD ``A x = b`` with preconditioned CG, with the contract of ``scipy.sparse.linalg.cg``.

    * ``A``: a matrix (sparse or dense) or a ``LinearOperator``;
    * stops at ``||b - A x|| <= max(rtol * ||b||, atol)``; ``maxiter``
      defaults to ``10 * n``;
    * ``M``: ``"sgs"``, ``"ilu0"``, ``"jacobi"`` (ours, on TVM kernels),
      ``None`` or ``"none"`` (no preconditioner, as scipy's ``M=None``), an
      operator applying ``M^-1`` (a ``LinearOperator``, a matrix, or an object
      with ``aslinearoperator``), or ``"auto"``: ``"sgs"`` for a matrix,
      none for a ``LinearOperator`` ``A``;
    * ``callback(xk)`` after every iteration;
    * returns ``(x, info)``: ``info`` is 0 when converged, else the number of
      iterations done (> 0), as scipy.  ``return_result=True`` returns the
      full :class:`PCGResult` instead (residual history, reason, timings);
      ``raise_on_failure=True`` raises :class:`ConvergenceError` instead of a
      non-zero ``info``.

    ``sync``: ``"barrier"`` or ``"p2p"`` (point-to-point) wavefront executors
    for the preconditioner.  ``tol`` and ``preconditioner`` are the deprecated
    names of ``rtol`` and ``M``.  See :class:`PCG`.

    >>> import numpy as np, scipy.sparse as sp
    >>> bad = sp.csr_array(np.array([[1.0, 2.0], [2.0, 1.0]]))   # symmetric, indefinite
    >>> x, info = pcg(bad, np.array([1.0, 0.0]))
    >>> info > 0
    True
    >>> r = pcg(bad, np.array([1.0, 0.0]), return_result=True)
    >>> r.converged, r.reason.startswith("A is not positive definite")
    (False, True)
    """
    rtol = _deprecated_tol(tol, rtol, "pcg")
    if preconditioner is not None:
        warnings.warn("pcg: preconditioner= is deprecated, use M= as scipy.sparse.linalg.cg",
                      DeprecationWarning, stacklevel=2)
        M = preconditioner
    if isinstance(M, str) and M == "auto":
        M = "none" if _as_operator(A, "pcg matrix A", matrices=False) is not None else "sgs"
    elif M is None:
        M = "none"
    solver = PCG(A, preconditioner=M, parallel=parallel, min_parallel_rows=min_parallel_rows,
                 dtype=dtype, target=target, sync=sync)
    result = solver.solve(b, x0=x0, rtol=rtol, atol=atol, maxiter=maxiter, callback=callback,
                          raise_on_failure=raise_on_failure)
    return result if return_result else (result.x, result.info)
