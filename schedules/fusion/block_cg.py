"""GOGETA Alg. 1: Block Conjugate Gradient on the fused (or unfused) TVM kernels of :mod:`.kernels`.

One iteration is Alg. 1's chain of einsums, run as the steps of
:func:`~schedules.fusion.kernels.schedule_steps` on the DAG
``block_cg_dag(2, M, N, nnz, setup=False)`` (iteration 1 is the steady state):

* ``fused=True``: the plan's groups, ``{S = A·P, Δ = PᵀS}`` (the CSR/BCSR
  SpMM executor with Δ fused into its row tiles), ``{Λ = Δ⁻¹Γ}`` (host),
  ``{X += PΛ, R -= SΛ, Γ = RᵀR}`` (one row pass), ``{Φ = Γ_prev⁻¹Γ}``
  (host), ``{P = R + PΦ}``;
* ``fused=False``: one kernel per op (the plain executor, then single-op
  row kernels): the SEQ baseline GOGETA compares against;
* ``fused="auto"`` (the default): both are built and a few real iterations
  of each are timed (kernels, launches, host steps); the faster is kept.
  On a cache-resident matrix the fused groups' saved traffic is worth less
  than their parallel launches, and there the op-by-op schedule can win.

Set-up (``R = B - A·X0``, ``Γ = RᵀR``, ``P = R``) runs the same generators
on the set-up ops of ``block_cg_dag(1, ..., setup=True)``.  The ``N x N``
inverses are host steps (numpy, ``N <= 64`` in practice).

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
>>> from tvm_ext.workloads import lap2d
>>> A = lap2d(40)
>>> B = np.random.default_rng(0).standard_normal((A.shape[0], 4))
>>> X, info = block_cg(A, B, rtol=1e-10)           # scipy.sparse.linalg.cg's contract, per column
>>> info, bool(np.abs(A @ X - B).max() < 1e-8)
(0, True)
>>> res = block_cg(A, B, rtol=1e-10, return_result=True)   # the full BlockCGResult
>>> res.converged, res.reason, bool(res.residual.max() < 1e-9)
(True, 'converged', True)
"""
from __future__ import annotations

import functools
import math
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from schedules.fusion.analysis import GraphAnalysis, analyze
from schedules.fusion.builders import block_cg_dag
from schedules.fusion.groups import FusionPlan, plan_fusion
from schedules.fusion.kernels import build_step_kernels
from schedules.fusion.row_forms import family, row_form, streamed_rank
from schedules.fusion.steps import iteration_ops, schedule_steps
from schedules.sparse.solvers import _deprecated_tol, resolve_tolerance, spd_precheck
from tvm_ext.errors import ConfigError, ConvergenceError, InputError, ScheduleError, ShapeError
from tvm_ext.zero_copy import empty_aligned

__all__ = ["BlockCG", "BlockCGResult", "block_cg", "block_cg_numpy", "spd_pinv_solve",
           "SolveInfo", "FORMATS", "FusionSelection"]

#: Sparse formats whose executor takes a fused consumer (``auto``: the inspector's
#: choice when it is one of these, else CSR).
FORMATS = ("csr", "bcsr", "auto")


@dataclass
class BlockCGResult:
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

    @property
    def info(self) -> int:
        """0 when every column converged, else the iterations done (>= 1), as scipy's ``cg``."""
        return 0 if self.converged else max(int(self.iterations), 1)

    @property
    def seconds_per_iteration(self) -> float:
        return self.solve_seconds / self.iterations if self.iterations else float("nan")

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


@functools.lru_cache(maxsize=16)
def _iteration_plan(M: int, N: int, nnz: int, fused: bool) -> FusionPlan | GraphAnalysis:
    """Alg. 1's steady-state iteration DAG: its fusion plan (fused), else its analysis (one op per step)."""
    dag = block_cg_dag(2, M, N, nnz, setup=False)
    return plan_fusion(dag) if fused else analyze(dag)


def _aligned(shape: tuple, dtype: str) -> np.ndarray:
    """A zeroed, 64-byte aligned C-contiguous array (TVM wraps it without a copy)."""
    out = empty_aligned(shape, dtype)
    out.fill(0)
    return out


class _Iteration:
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


class _Backend(ABC):
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
    def single(self, j: int) -> "_Backend":
        """See the class docstring."""

    def x(self) -> np.ndarray:
        return self.host[self.storage["X0"]]


def _restart(b: _Backend, it: _Iteration, k: int) -> str | None:
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


def _alg1(b: _Backend, it: _Iteration, maxiter: int, max_restarts: int) -> tuple[int, str]:
    """GOGETA Alg. 1 over ``b``'s steps, with restarts; returns (iterations, reason).

    The reason is ``"converged"``, ``"stalled"`` (restarts exhausted: the
    caller may fall back to single columns) or a failure report.
    """
    st = b.storage
    k, restart = 0, True
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
            if step[0] not in b.host_forms:
                b.run(i)
                if "Gamma1" in step:
                    G = b.host[st["Gamma1"]]
                    if (reason := it.gamma_reason(G, k)) is not None:
                        return k, reason
                    if (it.residuals(G) <= it.tol).all():  # confirm with the true residual
                        restart = True
                        break
                continue
            op = step[0]
            if family(op) != "Lambda" and deflate:  # Alg. 1's Φ is not valid across a cut: restart
                restart = True
                break
            f = b.host_forms[op]
            info = spd_pinv_solve(b.host[st[f.inputs[0]]], b.host[st[f.inputs[1]]], b.host[st[op]])
            if family(op) == "Lambda" and (reason := it.lambda_reason(info, k)) is not None:
                return k, reason
            if info.rank < it.active:
                it.rank_deficient += 1
                deflate = True
                if family(op) != "Lambda":
                    restart = True
                    break
        if restart:
            it.restarts += 1
        else:
            b.roll()
        if it.callback is not None:
            it.callback(b.x())


def _column_norms(B: np.ndarray) -> np.ndarray:
    return np.sqrt(np.einsum("ij,ij->j", B, B, dtype=np.float64))


def _column_scales(B: np.ndarray, norms: np.ndarray | None = None) -> np.ndarray:
    """Each column's norm (1 for a zero column): the unit scaling of the iteration."""
    norms = _column_norms(B) if norms is None else norms
    return np.where(norms > 0, norms, 1.0)


def _check_inputs(A, B, X0, tol, maxiter, dtype):
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


def _finish(x_scaled: np.ndarray, scales: np.ndarray, A, B: np.ndarray,
            it: _Iteration, k: int, reason: str, fused: bool, solver: str, seconds: float, setup: float,
            vector: bool, raise_on_failure: bool, fallback: list) -> BlockCGResult:
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


def _no_convergence(it: _Iteration, maxiter: int) -> str:
    last = it.history[-1] if it.history else np.array([np.inf])
    return (f"no convergence in {maxiter} iterations: max relative residual {float(last.max()):.3e} "
            f"> tol {it.tol:.1e}")


def _solve(b: _Backend, it: _Iteration, maxiter: int, max_restarts: int) -> tuple[int, str, list, float]:
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
        sub = _Iteration(it.tol, 1)
        kj, rj = _alg1(one, sub, maxiter, max_restarts)
        X[:, j] = one.x()[:, 0]
        k += kj
        it.history.extend(sub.history)
        it.rank_deficient += sub.rank_deficient
        fallback.append(j)
        if rj != "converged":
            return k, f"column {j} alone (after the block stalled): {rj}", fallback, built
    return k, "converged", fallback, built


# --------------------------------------------------------------------------- TVM solver
class _TVMBackend(_Backend):
    """Buffers of one solve on a :class:`BlockCG`'s compiled kernels."""

    def __init__(self, solver: "BlockCG", B: np.ndarray, X0: np.ndarray):
        import tvm

        self.solver = solver
        self.steps, self.storage, self.kernels = solver.steps, solver.storage, solver.kernels
        self.host_forms = solver.host_forms
        self.name = solver.name
        shapes: dict[str, tuple] = {}
        for t, s in self.storage.items():
            shapes.setdefault(s, solver.plan.dag.tensors[t].shape)
        self.host = {s: _aligned(shape, solver.dtype) for s, shape in shapes.items()}
        self.env = {s: tvm.runtime.from_dlpack(a) for s, a in self.host.items()}
        st, sst = self.storage, solver.setup_storage
        self.B = B
        self.host[st["X0"]][...] = X0
        self._setup_env = {sst["B"]: tvm.runtime.tensor(np.ascontiguousarray(B, solver.dtype)),
                           sst["X0"]: self.env[st["X0"]], sst["R0"]: self.env[st["R0"]]}
        self._gamma0 = sst["Gamma0"]
        self._rolls = [(st[t], st[f"{family(t)}1"]) for t in solver.inputs if st[t] != st[f"{family(t)}1"]]

    def run(self, i: int) -> None:
        self.kernels[i](self.env)

    def restart(self) -> None:
        self._setup_env[self._gamma0] = self.env[self.storage["Gamma0"]]
        for k in self.solver.setup_kernels:
            k(self._setup_env)

    def roll(self) -> None:
        for a, b in self._rolls:
            self.env[a], self.env[b] = self.env[b], self.env[a]
            self.host[a], self.host[b] = self.host[b], self.host[a]

    def single(self, j: int) -> "_TVMBackend":
        return _TVMBackend(self.solver.column_solver(), self.B[:, [j]], self.x()[:, [j]])


@dataclass(frozen=True)
class FusionSelection:
    """``fused="auto"``: seconds per Alg. 1 iteration of each schedule (kernels, launches and host
    steps), measured on a few iterations at build time, and the pick."""

    fused_seconds: float
    unfused_seconds: float

    @property
    def fused(self) -> bool:
        return self.fused_seconds <= self.unfused_seconds

    @property
    def speedup(self) -> float:
        """Unfused over fused kernel time (> 1: fusion pays)."""
        return self.unfused_seconds / self.fused_seconds


@dataclass
class _Schedule:
    """One iteration's steps, storage and compiled kernels (fused groups or one op per kernel)."""

    plan: Any
    steps: list
    storage: dict
    kernels: list
    host_forms: dict

    @classmethod
    def build(cls, M: int, N: int, nnz: int, fused: bool, fmt, dtype: str, target) -> "_Schedule":
        plan = _iteration_plan(M, N, nnz, fused)
        steps = schedule_steps(plan, iteration_ops(plan.dag, 1), fused)
        storage, kernels = build_step_kernels(plan, steps, fmt=fmt, dtype=dtype, target=target)
        for t in ("X", "R", "P"):
            if storage[f"{t}0"] != storage[f"{t}1"]:
                raise ScheduleError(f"block_cg: the schedule cannot update {t} in place")
        host_forms = {s[0]: row_form(plan.dag, plan.dag.op(s[0]), None)
                      for s, k in zip(steps, kernels) if k is None}
        return cls(plan, steps, storage, kernels, host_forms)

def _select(candidates: dict, *, iters: int = 3, rounds: int = 5, seed: int = 0) -> "FusionSelection":
    """Time a few real Alg. 1 iterations (kernels, host steps, launches) of each candidate solver,
    interleaved, best of ``rounds``; random right-hand sides, so nothing converges early."""
    one = next(iter(candidates.values()))
    B = np.random.default_rng(seed).standard_normal((one.n, one.n_rhs))
    best = dict.fromkeys(candidates, math.inf)
    for _ in range(rounds):
        for f, solver in candidates.items():
            r = solver.solve(B, rtol=1e-300, maxiter=iters)
            if r.iterations:
                best[f] = min(best[f], r.seconds_per_iteration)
    return FusionSelection(best[True], best[False])


class BlockCG:
    """Block CG on one matrix with ``n_rhs`` right-hand sides: compile once, solve many.

    ``fused``: the plan's fusion groups (True), one kernel per op (False), or
    ``"auto"`` (the default): build both, run a few Alg. 1 iterations of each
    (kernels, launches and host steps) and keep the faster
    (:attr:`selection`), so the solver is never slower than the op-by-op
    schedule on this machine, up to timing noise.
    ``format``: ``"csr"``, ``"bcsr"`` or ``"auto"`` (see :data:`FORMATS`).
    ``steps`` / ``kernels`` expose the schedule (``kernels[i]`` is ``None``
    for a host step).

    >>> from tvm_ext.workloads import lap2d
    >>> solver = BlockCG(lap2d(40), 2, fused=True)
    >>> solver.steps
    [('S1', 'Delta1'), ('Lambda1',), ('X1', 'R1', 'Gamma1'), ('Phi1',), ('P1',)]
    """

    #: Iteration-1 inputs: the state Alg. 1 carries from one iteration to the next.
    inputs = ("X0", "R0", "P0", "Gamma0")

    def __init__(self, A: Any, n_rhs: int, *, fused: bool | str = "auto", dtype: Any = "float64",
                 format: str = "csr", target: Any = None, max_restarts: int = 3):
        from schedules.sparse.executors.codegen import check_dtype
        from tvm_ext.workloads import canonical_csr

        self.dtype = check_dtype(dtype, "block_cg dtype")
        if isinstance(n_rhs, bool) or int(n_rhs) != n_rhs or n_rhs < 1:
            raise InputError(f"block_cg: the number of right-hand sides must be >= 1, got {n_rhs!r}")
        if format not in FORMATS:
            raise ConfigError(f"block_cg: format must be one of {FORMATS}, got {format!r}")
        if isinstance(max_restarts, bool) or int(max_restarts) != max_restarts or max_restarts < 0:
            raise InputError(f"block_cg: max_restarts must be an integer >= 0, got {max_restarts!r}")
        if fused not in (True, False, "auto"):
            raise ConfigError(f"block_cg: fused must be True, False or 'auto', got {fused!r}")
        self.A = canonical_csr(A, square=True, dtype=self.dtype, what="block_cg matrix A")
        self.n, self.n_rhs = self.A.shape[0], int(n_rhs)
        self.fused = True if fused == "auto" else bool(fused)
        #: ``fused="auto"``: the measured time per iteration of both schedules and the choice
        self.selection: FusionSelection | None = None
        self.max_restarts, self.target, self.format = int(max_restarts), target, format
        self.problem = spd_precheck(self.A) if self.n else None
        self.format_name = None
        self._column: BlockCG | None = None
        if self.n == 0 or self.problem is not None:  # nothing to iterate on: solve() reports it
            return
        t0 = time.perf_counter()
        if fused == "auto":
            candidates = {f: BlockCG(self.A, self.n_rhs, fused=f, dtype=self.dtype, format=format, target=target,
                                     max_restarts=max_restarts) for f in (True, False)}
            selection = _select(candidates)
            self.__dict__.update(candidates[selection.fused].__dict__)
            self.selection = selection
            self.build_seconds = time.perf_counter() - t0
            return
        fmt = self._format(format)
        nnz = max(int(self.A.nnz), 1)
        sched = _Schedule.build(self.n, self.n_rhs, nnz, self.fused, fmt, self.dtype, target)
        self.plan, self.steps, self.storage, self.kernels = sched.plan, sched.steps, sched.storage, sched.kernels
        self.host_forms = sched.host_forms
        setup_plan = analyze(block_cg_dag(1, self.n, self.n_rhs, nnz, setup=True))  # one op per step
        self.setup_storage, self.setup_kernels = build_step_kernels(
            setup_plan, [("R0",), ("Gamma0",)], fmt=fmt, dtype=self.dtype, target=target)
        self.build_seconds = time.perf_counter() - t0

    @property
    def name(self) -> str:
        return f"tvm {'fused' if self.fused else 'unfused'} ({self.format_name})"

    def _format(self, format: str):
        from schedules.sparse import inspect

        if format == "auto":
            plan = inspect(self.A, self.n_rhs, dtype=self.dtype)
            if plan.format_name in ("csr", "bcsr"):
                self.format_name = plan.label
                return plan.format
            format = "csr"
        plan = inspect(self.A, self.n_rhs, dtype=self.dtype, format=format,
                       **({"R": 3, "C": 3} if format == "bcsr" else {}))
        self.format_name = plan.label
        return plan.format

    def column_solver(self) -> "BlockCG":
        """The one-column solver the stalled-block fallback uses (built on first use)."""
        if self.n_rhs == 1:
            return self
        if self._column is None:
            self._column = BlockCG(self.A, 1, fused=self.fused, dtype=self.dtype, format=self.format,
                                   target=self.target, max_restarts=self.max_restarts)
        return self._column

    def solve(self, B: Any, X0: Any = None, *, rtol: float = 1e-5, atol: float = 0.0,
              maxiter: int | None = None, callback: Any = None, raise_on_failure: bool = False,
              tol: float | None = None) -> BlockCGResult:
        """Solve ``A X = B`` to ``||b_j - A x_j|| <= max(rtol * ||b_j||, atol)`` for every column.

        ``atol`` is applied through the largest column norm (each column meets
        scipy's test, some with margin); ``callback(Xk)`` is called after every
        block iteration with a copy of the current ``X`` (``M x N``); ``tol``
        is the deprecated name of ``rtol``.
        """
        rtol = _deprecated_tol(tol, rtol, "block_cg")
        A, B, X0, rtol, maxiter, vector = _check_inputs(self.A, B, X0, rtol, maxiter, self.dtype)
        if B.shape[1] != self.n_rhs:
            raise ShapeError(f"block_cg: B has {B.shape[1]} columns, the solver was built for {self.n_rhs}")
        if callback is not None and not callable(callback):
            raise InputError(f"block_cg: callback must be callable, got {type(callback).__name__}")
        norms = _column_norms(B)
        scales = _column_scales(B, norms)
        bmax = float(norms.max()) if B.size else 0.0
        tol = resolve_tolerance(rtol, atol, bmax, "block_cg")
        on_iter = None if callback is None else (lambda Xs: callback(Xs.astype(np.float64) * scales[None, :]))
        it = _Iteration(tol, self.n_rhs, on_iter)
        if self.problem is not None or self.n == 0:
            return _finish(X0 / scales, scales, A, B, it, 0, self.problem or "converged", self.fused,
                           self.name, 0.0, 0.0, vector, raise_on_failure, [])
        t0 = time.perf_counter()
        backend = _TVMBackend(self, B / scales, X0 / scales)
        setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        k, reason, fallback, built = _solve(backend, it, maxiter, self.max_restarts)
        seconds = time.perf_counter() - t0 - built
        return _finish(backend.x(), scales, A, B, it, k, reason, self.fused, self.name, seconds,
                       setup, vector, raise_on_failure, fallback)


def block_cg(A: Any, B: Any, X0: Any = None, *, rtol: float = 1e-5, atol: float = 0.0,
             maxiter: int | None = None, M: Any = None, callback: Any = None, fused: bool | str = "auto",
             return_result: bool = False, dtype: Any = "float64", format: str = "csr",
             max_restarts: int = 3, raise_on_failure: bool = False, target: Any = None,
             tol: float | None = None):
    """Solve SPD ``A X = B`` (``B``: ``M x N`` or a vector) with Block CG (GOGETA Alg. 1).

    The contract of ``scipy.sparse.linalg.cg``, column by column:

    * every column stops at ``||b_j - A x_j|| <= max(rtol * ||b_j||, atol)``;
      ``maxiter`` bounds the block iterations (and each fallback column's) and
      defaults to ``10 * M``;
    * returns ``(X, info)``: ``info`` is 0 when every column converged, else
      the iterations done (> 0); ``return_result=True`` returns the full
      :class:`BlockCGResult` instead;
    * ``callback(Xk)`` after every block iteration;
    * ``A`` must be a sparse (or dense) matrix, not a ``LinearOperator``: the
      fused kernels read its entries.  ``M`` must be ``None``: GOGETA's
      iteration has no preconditioner (use :func:`schedules.sparse.pcg` for one).

    ``fused`` picks the GOGETA fusion groups (True), one kernel per op (False),
    or (``"auto"``, the default) whichever of the two ran faster in a short
    measurement when the kernels were built.  ``tol`` is
    the deprecated name of ``rtol``.  See :class:`BlockCGResult` and the
    module docstring for breakdowns.

    >>> import scipy.sparse as sp
    >>> bad = sp.csr_array(np.array([[1.0, 2.0], [2.0, 1.0]]))    # symmetric, indefinite
    >>> r = block_cg(bad, np.array([1.0, 0.0]), return_result=True)
    >>> r.converged, r.reason.startswith("A is not positive definite")
    (False, True)
    """
    from scipy.sparse.linalg import LinearOperator

    rtol = _deprecated_tol(tol, rtol, "block_cg")
    if M is not None:
        raise ConfigError("block_cg: M must be None: GOGETA's block iteration has no preconditioner "
                          "(schedules.sparse.pcg takes one)")
    if isinstance(A, LinearOperator) or hasattr(A, "aslinearoperator"):
        raise InputError("block_cg: A must be a sparse or dense matrix, not a LinearOperator: the fused "
                         "kernels read its entries (schedules.sparse.pcg takes an operator)")
    if np.ndim(B) not in (1, 2) or (np.ndim(B) == 2 and np.shape(B)[1] < 1):
        raise ShapeError(f"block_cg: B must be a vector or an M x N matrix with N >= 1, got shape {np.shape(B)}")
    n_rhs = 1 if np.ndim(B) == 1 else np.shape(B)[1]
    solver = BlockCG(A, n_rhs, fused=fused, dtype=dtype, format=format, target=target,
                     max_restarts=max_restarts)
    result = solver.solve(B, X0, rtol=rtol, atol=atol, maxiter=maxiter, callback=callback,
                          raise_on_failure=raise_on_failure)
    if return_result:
        return result
    return result.x, result.info


# --------------------------------------------------------------------------- numpy/scipy peer
class _NumpyBackend(_Backend):
    """Alg. 1's ops one by one with scipy's SpMM and numpy/BLAS dense products."""

    name = "numpy/scipy"

    def __init__(self, A, B: np.ndarray, X0: np.ndarray, dtype: str):
        self.A, self.B, self.dtype = A, B.astype(dtype), dtype
        n, N = B.shape
        plan = _iteration_plan(max(n, 1), N, max(int(A.nnz), 1), False)
        self.steps = schedule_steps(plan, iteration_ops(plan.dag, 1), fused=False)
        forms = {s[0]: row_form(plan.dag, plan.dag.op(s[0]), streamed_rank(plan, s[0])) for s in self.steps}
        self.storage = {t: family(t) for s in self.steps
                        for t in (s[0], *forms[s[0]].inputs, forms[s[0]].addend)
                        if t is not None and not plan.dag.tensors[t].is_sparse}
        self.storage.update(Gamma0="Gamma_prev", Gamma1="Gamma")
        self.forms = forms
        self.host_forms = {o: f for o, f in forms.items() if f.kind == "host"}
        self.host = {"X": X0.astype(dtype), "R": np.empty_like(self.B), "P": np.empty_like(self.B)}
        for t in ("Gamma_prev", "Gamma", "Delta", "Lambda", "Phi"):
            self.host[t] = np.zeros((N, N), dtype)

    def run(self, i: int) -> None:
        f, h, st = self.forms[self.steps[i][0]], self.host, self.storage
        out = st[f.name]
        if f.kind == "spmm":
            h[out] = self.A @ h[st[f.inputs[1]]]
        elif f.kind == "rowred":
            h[out][...] = h[st[f.inputs[0]]].T @ h[st[f.inputs[1]]]
        else:
            prod = h[st[f.inputs[0]]] @ h[st[f.inputs[1]]]
            if st.get(f.addend) == out:      # X += P Λ, R -= S Λ
                h[out] += f.sign * prod
            else:                            # P = R + P Φ
                h[out] = h[st[f.addend]] + f.sign * prod

    def restart(self) -> None:
        h = self.host
        h["R"] = self.B - self.A @ h["X"]
        h["Gamma_prev"][...] = h["R"].T @ h["R"]

    def roll(self) -> None:
        self.host["Gamma_prev"], self.host["Gamma"] = self.host["Gamma"], self.host["Gamma_prev"]

    def single(self, j: int) -> "_NumpyBackend":
        return _NumpyBackend(self.A, self.B[:, [j]], self.host["X"][:, [j]], self.dtype)


def block_cg_numpy(A: Any, B: Any, X0: Any = None, tol: float = 1e-8, maxiter: int | None = None, *,
                   dtype: Any = "float64", max_restarts: int = 3,
                   raise_on_failure: bool = False) -> BlockCGResult:
    """The same Alg. 1 (same restarts and fallback) with scipy's SpMM and numpy/BLAS dense ops: the peer.

    >>> from tvm_ext.workloads import lap2d
    >>> A = lap2d(20)
    >>> r = block_cg_numpy(A, np.ones((400, 2)), tol=1e-10)
    >>> r.converged, bool(np.allclose(A @ r.x, 1.0, atol=1e-8))
    (True, True)
    """
    from schedules.sparse.executors.codegen import check_dtype

    dtype = check_dtype(dtype, "block_cg dtype")
    A, B, X0, tol, maxiter, vector = _check_inputs(A, B, X0, tol, maxiter, dtype)
    it = _Iteration(tol, B.shape[1])
    scales = _column_scales(B)
    problem = spd_precheck(A) if A.shape[0] else None
    if problem is not None or A.shape[0] == 0:
        return _finish(X0 / scales, scales, A, B, it, 0, problem or "converged", False, "numpy/scipy",
                       0.0, 0.0, vector, raise_on_failure, [])
    t0 = time.perf_counter()
    backend = _NumpyBackend(A, B / scales, X0 / scales, dtype)
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    k, reason, fallback, built = _solve(backend, it, maxiter, max_restarts)
    seconds = time.perf_counter() - t0 - built
    return _finish(backend.x(), scales, A, B, it, k, reason, False, backend.name, seconds, setup,
                   vector, raise_on_failure, fallback)
