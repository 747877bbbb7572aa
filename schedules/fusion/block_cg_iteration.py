"""GOGETA Alg. 1's loop over an implementation's steps: restarts, deflation, single-column fallback.

:func:`solve_block` runs Block CG on whatever :class:`Alg1Backend` provides
(the TVM kernels of :class:`~schedules.fusion.block_cg.BlockCG`, or numpy /
scipy for the peer); the backend runs the steps, this module decides what
happens between them.

**Breakdown handling.**  Columns are scaled to unit ``||b_j||`` (the system
is column-separable, so this is exact), which makes every test relative.
``Λ = Δ⁻¹Γ`` and ``Φ = Γ_prev⁻¹Γ`` are solved by a diagonally scaled
eigen-decomposition (:func:`spd_pinv_solve`): eigenvalues below ``rcond``
(``eps**0.75``) of the largest are dropped, a pseudo-inverse, so ``X`` and
``R`` still get the Galerkin update on the directions that remain when the
columns of ``P`` become linearly dependent (columns converging at different
rates, dependent right-hand sides, a Krylov space exhausted when ``N`` is
large against ``M``).  Alg. 1's ``Φ`` recurrence is not valid across such a
cut, so the iteration then **restarts** from the true residual
``R = B - A·X`` (``Γ = RᵀR``, ``P = R``), and columns already within
``tol`` leave the block (their residual column is zeroed, an exact
deflation).  A claimed convergence (``diag(Γ) <= tol²``, Alg. 1's test) is
also confirmed by such a restart.  After ``max_restarts`` restarts without
convergence the block has **stalled**, and each unconverged column is
finished alone (``N = 1``: plain CG on the same kernel generators); those
columns are listed in ``fallback_columns``.  ``rank_deficient`` counts the
cut solves, ``restarts`` the restarts.

What cannot be repaired is reported, not hidden (``converged=False`` with a
``reason``, or :class:`~tvm_ext.errors.ConvergenceError` with
``raise_on_failure=True``): an asymmetric matrix or a non-positive diagonal
(checked up front), ``PᵀAP`` with a negative eigenvalue (``A`` not positive
definite), ``PᵀAP`` vanishing while residuals remain (``A`` singular on the
search space), NaN/Inf, and ``maxiter`` without reaching ``tol`` (e.g. a
singular ``A`` with ``B`` outside its range).  The returned ``residual`` is
the true ``||b_j - A x_j|| / ||b_j||``, and a convergence is only reported
when it is within ``10 * tol``.

>>> import numpy as np
>>> G = np.array([[2.0, 0.0], [0.0, 0.0]])                  # one direction vanished
>>> out = np.empty((2, 1))
>>> info = spd_pinv_solve(G, np.array([[4.0], [1.0]]), out)
>>> info.rank, out.ravel().tolist()
(1, [2.0, 0.0])
"""
from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from schedules.fusion.row_forms import family
from schedules.sparse.solvers import IterativeResult
from tvm_ext.errors import ConvergenceError, InputError, ShapeError

__all__ = ["BlockCGResult", "SolveInfo", "spd_pinv_solve", "IterationState", "Alg1Backend", "solve_block",
           "check_solve_inputs", "finish_solve", "column_norms", "column_scales"]


@dataclass
class BlockCGResult(IterativeResult):
    """Outcome of a Block CG solve.

    ``residual[j]`` is the true ``||b_j - A x_j|| / ||b_j||`` of the returned
    ``x`` (``||A x_j||`` for a zero column); ``history[k][j]`` the recursive
    relative residual ``sqrt(Γ_jj)`` after iteration ``k`` (``k = 0`` the
    initial one).  Times are seconds; ``seconds_per_iteration`` is the wall
    time of the iteration loop (kernels and host steps) per iteration.
    """

    x: np.ndarray
    converged: bool
    iterations: int
    residual: np.ndarray
    reason: str
    tol: float
    fused: bool
    solver: str
    history: list = field(default_factory=list, repr=False)
    rank_deficient: int = 0
    restarts: int = 0
    fallback_columns: list = field(default_factory=list)
    solve_seconds: float = 0.0
    setup_seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        """JSON-able summary (no solution)."""
        return {"converged": self.converged, "iterations": self.iterations,
                "residual": [float(r) for r in np.atleast_1d(self.residual)], "reason": self.reason,
                "tol": self.tol, "fused": self.fused, "solver": self.solver,
                "rank_deficient": self.rank_deficient, "restarts": self.restarts,
                "fallback_columns": list(self.fallback_columns),
                "seconds_per_iteration": self.seconds_per_iteration, "solve_seconds": self.solve_seconds}


# --------------------------------------------------------------------------- host steps
@dataclass(frozen=True)
class SolveInfo:
    """What the small SPD solve saw: kept rank, smallest scaled eigenvalue, trouble."""

    rank: int
    size: int
    min_eig: float
    indefinite: bool = False
    nonfinite: bool = False


def spd_pinv_solve(G: np.ndarray, R: np.ndarray, out: np.ndarray, *, rcond: float | None = None,
                   neg_tol: float | None = None) -> SolveInfo:
    """``out = G⁺ R`` for a small symmetric positive semi-definite ``G``.

    ``G`` is scaled to unit diagonal (zero-diagonal rows are dropped), then
    eigen-decomposed; eigenvalues below ``rcond`` times the largest are cut
    (deflation).  An eigenvalue below ``-neg_tol`` flags ``G`` as indefinite.

    >>> G = np.array([[4.0, 2.0], [2.0, 1.0]])              # rank 1
    >>> out = np.empty((2, 1))
    >>> info = spd_pinv_solve(G, np.array([[2.0], [1.0]]), out)
    >>> info.rank, bool(np.allclose(G @ out, [[2.0], [1.0]]))
    (1, True)
    """
    eps = np.finfo(out.dtype).eps
    rcond = eps ** 0.75 if rcond is None else rcond
    neg_tol = math.sqrt(eps) if neg_tol is None else neg_tol
    n = G.shape[0]
    out[...] = 0.0
    if not (np.isfinite(G).all() and np.isfinite(R).all()):
        return SolveInfo(0, n, float("nan"), nonfinite=True)
    G, R = np.asarray(G, np.float64), np.asarray(R, np.float64)
    d = G.diagonal()
    if d.min() < 0:
        return SolveInfo(0, n, float(d.min()), indefinite=True)
    if n == 1:  # one column: plain CG's scalar division
        if d[0] > 0:
            out[...] = R / d[0]
        return SolveInfo(int(d[0] > 0), 1, 1.0 if d[0] > 0 else 0.0)
    keep = d > 0
    if keep.all():
        s = 1.0 / np.sqrt(d)
        Gs, rhs = G * np.outer(s, s), R * s[:, None]
    elif keep.any():
        s = 1.0 / np.sqrt(d[keep])
        Gs, rhs = G[np.ix_(keep, keep)] * np.outer(s, s), R[keep] * s[:, None]
    else:
        return SolveInfo(0, n, 0.0)
    w, V = np.linalg.eigh(Gs)
    top = max(float(w[-1]), 0.0)
    ok = w > rcond * top
    Vk = V[:, ok] if not ok.all() else V
    y = s[:, None] * (Vk @ ((Vk.T @ rhs) / w[ok][:, None]))
    if keep.all():
        out[...] = y
    else:
        out[keep] = y
    return SolveInfo(int(ok.sum()), n, float(w[0]), indefinite=bool(w[0] < -neg_tol * max(top, 1.0)))


class IterationState:
    """Convergence tests, counters and failure reasons shared by every backend."""

    def __init__(self, tol: float, n_cols: int, callback: Any = None):
        self.tol = tol
        self.callback = callback  # called with the (unit-scaled) X after every block iteration
        self.history: list[np.ndarray] = []
        self.rank_deficient = 0
        self.restarts = 0
        self.active = n_cols

    def residuals(self, gamma: np.ndarray) -> np.ndarray:
        """Relative residual of each column from ``diag(Γ)`` (columns are unit-scaled)."""
        r = np.sqrt(np.maximum(np.diag(gamma), 0.0))
        self.history.append(r)
        return r

    @staticmethod
    def gamma_reason(gamma: np.ndarray, k: int) -> str | None:
        if not np.isfinite(gamma).all():
            return f"numerical breakdown (residual Gram matrix RᵀR is not finite) at iteration {k}"
        return None

    def lambda_reason(self, info: SolveInfo, k: int) -> str | None:
        """Failure of ``Λ = Δ⁻¹Γ`` (Δ = PᵀAP) at iteration ``k``, or None."""
        if info.nonfinite:
            return f"numerical breakdown (PᵀAP is not finite) at iteration {k}"
        if info.indefinite:
            return (f"A is not positive definite: PᵀAP has eigenvalue {info.min_eig:.3e} < 0 "
                    f"(diagonally scaled) at iteration {k}")
        if info.rank == 0:
            return (f"breakdown: PᵀAP vanished (rank 0 of {info.size}) at iteration {k} while residuals "
                    "remain: A is singular on the search space")
        return None


class Alg1Backend(ABC):
    """What the Alg. 1 loop needs from an implementation (TVM kernels or numpy).

    ``steps``: the schedule (tuples of op names); ``storage``: tensor ->
    storage name; ``host``: storage -> numpy array (read/written by the
    loop's host steps; re-read after every step).  ``run(i)`` runs
    non-host step ``i``; ``restart()`` computes the true residual
    ``R = B - A·X`` and ``Γ = RᵀR`` into the storage of ``R0``/``Gamma0``;
    ``roll()`` makes iteration ``k``'s results iteration ``k + 1``'s inputs;
    ``single(j)`` is a one-column backend for column ``j`` (fallback).
    """

    steps: list
    storage: dict
    host: dict
    host_forms: dict
    name: str
    #: kernel step index -> the host ops its kernel variant solves in a prologue (see :meth:`run_inline`)
    inline_solves: Mapping[int, tuple] = MappingProxyType({})  # none unless a backend sets its own

    def run_inline(self, i: int) -> bool:
        """Run step ``i``'s variant that first solves ``inline_solves[i]`` in the kernel; False when a
        pivot failed and nothing was updated (the loop then solves on the host and calls ``run(i)``)."""
        raise NotImplementedError(f"{type(self).__name__} has no in-kernel solves")

    @abstractmethod
    def run(self, i: int) -> None:
        """See the class docstring."""

    @abstractmethod
    def restart(self) -> None:
        """See the class docstring."""

    @abstractmethod
    def roll(self) -> None:
        """See the class docstring."""

    @abstractmethod
    def single(self, j: int) -> "Alg1Backend":
        """See the class docstring."""

    def x(self) -> np.ndarray:
        return self.host[self.storage["X0"]]


def _restart(b: Alg1Backend, it: IterationState, k: int) -> str | None:
    """Restart from the true residual; columns already within ``tol`` leave the block.

    Returns ``"converged"``, a failure reason, or None (iterate on).
    """
    st = b.storage
    b.restart()
    G = b.host[st["Gamma0"]]
    if (reason := it.gamma_reason(G, k)) is not None:
        return reason
    done = it.residuals(G) <= it.tol
    if done.all():
        return "converged"
    R = b.host[st["R0"]]
    if done.any():  # exact deflation: a zero column stays zero and drops out of every solve
        R[:, done] = 0.0
        G[done, :] = 0.0
        G[:, done] = 0.0
    b.host[st["P0"]][...] = R
    it.active = int((~done).sum())
    return None


#: a step's outcome: restart Alg. 1 from the true residual
_RESTART = "restart"


def _host_solve(b: Alg1Backend, it: IterationState, op: str, k: int, deflate: bool) -> tuple[str | None, bool]:
    """Host op ``op`` (``Λ = Δ⁻¹Γ`` or ``Φ = Γ_prev⁻¹Γ``) by :func:`spd_pinv_solve`.

    Returns ``(action, deflate)``: ``action`` None (go on), :data:`_RESTART`
    or a failure reason; ``deflate`` says a solve so far this iteration was cut.
    """
    if family(op) != "Lambda" and deflate:  # Alg. 1's Φ is not valid across a cut: restart
        return _RESTART, deflate
    st, f = b.storage, b.host_forms[op]
    info = spd_pinv_solve(b.host[st[f.inputs[0]]], b.host[st[f.inputs[1]]], b.host[st[op]])
    if family(op) == "Lambda" and (reason := it.lambda_reason(info, k)) is not None:
        return reason, deflate
    if info.rank < it.active:
        it.rank_deficient += 1
        if family(op) != "Lambda":
            return _RESTART, True
        return None, True
    return None, deflate


def _alg1(b: Alg1Backend, it: IterationState, maxiter: int, max_restarts: int) -> tuple[int, str]:
    """GOGETA Alg. 1 over ``b``'s steps, with restarts; returns (iterations, reason).

    The reason is ``"converged"``, ``"stalled"`` (restarts exhausted: the
    caller may fall back to single columns) or a failure report.
    """
    st = b.storage
    k, restart = 0, True
    inlined = {op for ops in b.inline_solves.values() for op in ops}
    while True:
        if restart:
            if (status := _restart(b, it, k)) is not None:
                return k, status
            if it.restarts > max_restarts:
                return k, "stalled"
            restart = False
        if k >= maxiter:
            return k, _no_convergence(it, maxiter)
        k += 1
        deflate = False
        for i, step in enumerate(b.steps):
            if step[0] in b.host_forms:
                if step[0] in inlined:
                    continue  # the next kernel solves it
                action, deflate = _host_solve(b, it, step[0], k, deflate)
            else:
                action, ops = None, b.inline_solves.get(i, ())
                if ops and deflate and any(family(op) != "Lambda" for op in ops):
                    action = _RESTART                # Alg. 1's Φ is not valid across a cut
                elif not (ops and b.run_inline(i)):  # no prologue, or a pivot failed: the host solves
                    for op in ops:
                        action, deflate = _host_solve(b, it, op, k, deflate)
                        if action is not None:
                            break
                    if action is None:
                        b.run(i)
                if action is None and "Gamma1" in step:
                    G = b.host[st["Gamma1"]]
                    if (reason := it.gamma_reason(G, k)) is not None:
                        return k, reason
                    if (it.residuals(G) <= it.tol).all():  # confirm with the true residual
                        action = _RESTART
            if action == _RESTART:
                restart = True
                break
            if action is not None:
                return k, action
        if restart:
            it.restarts += 1
        else:
            b.roll()
        if it.callback is not None:
            it.callback(b.x())


def column_norms(B: np.ndarray) -> np.ndarray:
    """Each column's 2-norm, accumulated in float64."""
    return np.sqrt(np.einsum("ij,ij->j", B, B, dtype=np.float64))


def column_scales(B: np.ndarray, norms: np.ndarray | None = None) -> np.ndarray:
    """Each column's norm (1 for a zero column): the unit scaling of the iteration.

    >>> column_scales(np.array([[3.0, 0.0], [4.0, 0.0]])).tolist()
    [5.0, 1.0]
    """
    norms = column_norms(B) if norms is None else norms
    return np.where(norms > 0, norms, 1.0)


def check_solve_inputs(A: Any, B: Any, X0: Any, tol: float, maxiter: int | None,
                       dtype: str) -> tuple[Any, np.ndarray, np.ndarray, float, int, bool]:
    """Checked solve inputs: ``(A, B, X0, tol, maxiter, vector)``, the dense ones as ``M x N`` float64.

    ``A`` becomes a canonical square CSR of ``dtype``; ``X0`` defaults to zeros,
    ``maxiter`` to ``10 * M``; ``vector`` says ``B`` was a vector.  Bad input
    raises :class:`ShapeError` / :class:`InputError` naming it.

    >>> from tvm_ext.workloads import lap2d
    >>> A, B, X0, tol, maxiter, vector = check_solve_inputs(lap2d(3), np.ones(9), None, 1e-8, None, "float64")
    >>> B.shape, X0.shape, maxiter, vector
    ((9, 1), (9, 1), 90, True)
    """
    from tvm_ext.workloads import canonical_csr, check_dense_operand

    A = canonical_csr(A, square=True, dtype=dtype, what="block_cg matrix A")
    m = A.shape[0]
    vector = np.ndim(B) == 1
    Bm = check_dense_operand(B, m, dtype=np.float64, what="block_cg right-hand sides B")
    if Bm.shape[1] < 1:
        raise ShapeError("block_cg: B has no columns")
    if X0 is None:
        X0m = np.zeros_like(Bm)
    else:
        X0m = check_dense_operand(X0, m, dtype=np.float64, what="block_cg initial guess X0")
        if X0m.shape != Bm.shape:
            raise ShapeError(f"block_cg: X0 has shape {np.shape(X0)}, B has {np.shape(B)}")
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 <= tol < math.inf:
        raise InputError(f"block_cg: tol must be a finite number >= 0, got {tol!r}")
    maxiter = 10 * m if maxiter is None else maxiter
    if isinstance(maxiter, bool) or int(maxiter) != maxiter or maxiter < 0:
        raise InputError(f"block_cg: maxiter must be an integer >= 0, got {maxiter!r}")
    return A, Bm, X0m, float(tol), int(maxiter), vector


def finish_solve(x_scaled: np.ndarray, scales: np.ndarray, A: Any, B: np.ndarray,
                 it: IterationState, k: int, reason: str, fused: bool, solver: str, seconds: float, setup: float,
                 vector: bool, raise_on_failure: bool, fallback: list) -> BlockCGResult:
    """The :class:`BlockCGResult` of a solve: ``x`` unscaled, its true residuals, and the verdict.

    A convergence the recursive residuals claimed is refused when the true
    residual of a column is above ``10 * tol``; a failure raises
    :class:`ConvergenceError` (with ``.result``) when ``raise_on_failure``.
    """
    x = x_scaled.astype(np.float64) * scales[None, :]
    res = B - A @ x
    bn = np.sqrt(np.einsum("ij,ij->j", B, B))
    rn = np.sqrt(np.einsum("ij,ij->j", res, res))
    residual = np.where(bn > 0, rn / np.where(bn > 0, bn, 1.0), rn)
    ok = reason == "converged"
    if ok and not (residual <= 10 * it.tol + 10 * np.finfo(x_scaled.dtype).eps).all():
        j = int(np.argmax(residual))
        ok, reason = False, (f"recursive residuals reached tol but the true residual of column {j}, "
                             f"||b - Ax||/||b|| = {residual[j]:.3e}, is > 10*tol")
    result = BlockCGResult(x[:, 0] if vector else x, ok, k, residual, reason, it.tol, fused, solver,
                           it.history, it.rank_deficient, it.restarts, fallback, seconds, setup)
    if not ok and raise_on_failure:
        err = ConvergenceError(f"block_cg ({solver}): {reason}")
        err.result = result  # type: ignore[attr-defined]
        raise err
    return result


def _no_convergence(it: IterationState, maxiter: int) -> str:
    last = it.history[-1] if it.history else np.array([np.inf])
    return (f"no convergence in {maxiter} iterations: max relative residual {float(last.max()):.3e} "
            f"> tol {it.tol:.1e}")


def solve_block(b: Alg1Backend, it: IterationState, maxiter: int,
                max_restarts: int) -> tuple[int, str, list, float]:
    """Alg. 1 on the whole block; if it stalls, each unconverged column alone (N = 1 is plain CG).

    Returns (iterations, reason, fallback columns, seconds spent building
    the one-column solver, which the caller leaves out of the iteration time).
    """
    k, reason = _alg1(b, it, maxiter, max_restarts)
    fallback: list[int] = []
    built = 0.0
    if reason != "stalled":
        return k, reason, fallback, built
    b.restart()  # the true residual of every column now
    G = b.host[b.storage["Gamma0"]]
    todo = [j for j in range(G.shape[0]) if not np.sqrt(max(G[j, j], 0.0)) <= it.tol]
    if G.shape[0] == 1:
        return k, (f"stalled: {it.restarts} restarts without reaching tol (relative residual "
                   f"{float(np.sqrt(max(G[0, 0], 0.0))):.3e})"), fallback, built
    X = b.x()
    for j in todo:
        t0 = time.perf_counter()
        one = b.single(j)
        built += time.perf_counter() - t0
        sub = IterationState(it.tol, 1)
        kj, rj = _alg1(one, sub, maxiter, max_restarts)
        X[:, j] = one.x()[:, 0]
        k += kj
        it.history.extend(sub.history)
        it.rank_deficient += sub.rank_deficient
        fallback.append(j)
        if rj != "converged":
            return k, f"column {j} alone (after the block stalled): {rj}", fallback, built
    return k, "converged", fallback, built
