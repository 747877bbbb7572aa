"""GOGETA Alg. 1: Block Conjugate Gradient on the fused (or unfused) TVM kernels of :mod:`.kernels`.

One iteration is Alg. 1's chain of einsums, run as the steps of
:func:`~schedules.fusion.steps.schedule_steps` on the DAG
``block_cg_dag(2, M, N, nnz, setup=False)`` (iteration 1 is the steady state):

* ``fused=True``: the plan's groups, ``{S = A·P, Δ = PᵀS}`` (the CSR/BCSR
  SpMM executor with Δ fused into its row tiles), ``{Λ = Δ⁻¹Γ}`` (host),
  ``{X += PΛ, R -= SΛ, Γ = RᵀR}`` (one row pass), ``{Φ = Γ_prev⁻¹Γ}``
  (host), ``{P = R + PΦ}``; the host steps run in the prologue of the
  kernel after them (``inline_solves``, below), so an iteration is three
  kernels with no host step between them;
* ``fused=False``: one kernel per op (the plain executor, then single-op
  row kernels): the SEQ baseline GOGETA compares against;
* ``fused="auto"`` (the default): the rule of
  :mod:`schedules.fusion.fusion_choice`: a DRAM-resident working set is
  fused (the traffic model decides, nothing else is built); on a
  cache-resident one the saved traffic is worth little against the
  launches, so both are built and a few real iterations of each are timed
  in interleaved rounds (kernels, launches, host steps), and the median
  per-round ratio picks.

Set-up (``R = B - A·X0``, ``Γ = RᵀR``, ``P = R``) runs the same generators
on the set-up ops of ``block_cg_dag(1, ..., setup=True)``.  The ``N x N``
inverses (``N <= 64`` in practice) are solved by a Cholesky in the serial
prologue of the row kernel that applies them
(:mod:`schedules.fusion.inline_solve`); when a pivot fails (dependent
columns, an indefinite ``A``) that kernel skips its loop and the iteration
falls back to the host's eigen-solve, which deflates or reports.

Columns are scaled to unit ``||b_j||``; breakdowns (linearly dependent
columns of ``P``, a stalled block, an indefinite or singular ``A``) are
handled or reported by the loop of :mod:`schedules.fusion.block_cg_iteration`.

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
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedules.fusion.analysis import GraphAnalysis, analyze
from schedules.fusion.block_cg_iteration import (Alg1Backend, BlockCGResult, IterationState, check_solve_inputs,
                                                 column_norms, column_scales, finish_solve, solve_block)
from schedules.fusion.builders import block_cg_dag
from schedules.fusion.fusion_choice import FusionSelection, modelled_selection, working_set_bytes
from schedules.fusion.groups import FusionPlan, plan_fusion
from schedules.fusion.kernels import build_inline_solve_kernels, build_step_kernels
from schedules.fusion.row_forms import family, row_form, streamed_rank
from schedules.fusion.steps import iteration_ops, schedule_steps
from schedules.sparse.solvers import _deprecated_tol, resolve_tolerance, spd_precheck
from tvm_ext.errors import ConfigError, InputError, ScheduleError, ShapeError
from tvm_ext.zero_copy import empty_aligned

__all__ = ["BlockCG", "block_cg", "block_cg_numpy", "FORMATS", "FusionSelection"]

#: Sparse formats whose executor takes a fused consumer (``auto``: the inspector's
#: choice when it is one of these, else CSR).
FORMATS = ("csr", "bcsr", "auto")


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


# --------------------------------------------------------------------------- TVM solver
class _TVMBackend(Alg1Backend):
    """Buffers of one solve on a :class:`BlockCG`'s compiled kernels."""

    def __init__(self, solver: "BlockCG", B: np.ndarray, X0: np.ndarray):
        import tvm

        self.solver = solver
        self.steps, self.storage, self.kernels = solver.steps, solver.storage, solver.kernels
        self.host_forms = solver.host_forms
        self.inline_kernels = solver.inline_kernels
        self.inline_solves = {i: k.ops[:len(k.ops) - len(self.steps[i])] for i, k in self.inline_kernels.items()}
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

    def run_inline(self, i: int) -> bool:
        kernel = self.inline_kernels[i]
        kernel(self.env)
        return not kernel.status[0]

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


@dataclass
class _Schedule:
    """One iteration's steps, storage and compiled kernels (fused groups or one op per kernel)."""

    plan: Any
    steps: list
    storage: dict
    kernels: list
    host_forms: dict
    inline_kernels: dict

    @classmethod
    def build(cls, M: int, N: int, nnz: int, fused: bool, fmt, dtype: str, target,
              inline_solves: bool = True) -> "_Schedule":
        plan = _iteration_plan(M, N, nnz, fused)
        steps = schedule_steps(plan, iteration_ops(plan.dag, 1), fused)
        storage, kernels = build_step_kernels(plan, steps, fmt=fmt, dtype=dtype, target=target)
        for t in ("X", "R", "P"):
            if storage[f"{t}0"] != storage[f"{t}1"]:
                raise ScheduleError(f"block_cg: the schedule cannot update {t} in place")
        host_forms = {s[0]: row_form(plan.dag, plan.dag.op(s[0]), None)
                      for s, k in zip(steps, kernels) if k is None}
        inline = build_inline_solve_kernels(plan, steps, dtype=dtype, target=target) if inline_solves else {}
        return cls(plan, steps, storage, kernels, host_forms, inline)

def _select(candidates: dict, *, iters: int = 3, rounds: int = 5, seed: int = 0) -> FusionSelection:
    """Time a few real Alg. 1 iterations (kernels, host steps, launches) of each candidate solver in
    interleaved rounds (one warm-up round first); random right-hand sides, so nothing converges early.
    The selection holds each schedule's median time and the per-round unfused / fused ratios."""
    one = next(iter(candidates.values()))
    B = np.random.default_rng(seed).standard_normal((one.n, one.n_rhs))
    times: dict = {f: [] for f in candidates}
    for r in range(rounds + 1):
        order = list(candidates) if r % 2 else list(candidates)[::-1]
        got = {}
        for f in order:
            res = candidates[f].solve(B, rtol=1e-300, maxiter=iters)
            got[f] = res.seconds_per_iteration if res.iterations else math.nan
        if r and all(math.isfinite(t) and t > 0 for t in got.values()):
            for f, t in got.items():
                times[f].append(t)
    if not times[True]:
        return FusionSelection(math.nan, math.nan, rule="measured")
    return FusionSelection(statistics.median(times[True]), statistics.median(times[False]),
                           tuple(u / f for f, u in zip(times[True], times[False])), rule="measured",
                           working_set_bytes=working_set_bytes(one.n, one.n_rhs, max(int(one.A.nnz), 1),
                                                               one.A.dtype.itemsize))


class BlockCG:
    """Block CG on one matrix with ``n_rhs`` right-hand sides: compile once, solve many.

    ``fused``: the plan's fusion groups (True), one kernel per op (False), or
    ``"auto"`` (the default): fused when the working set is DRAM-resident
    (by the traffic model), else build both, run a few Alg. 1 iterations of
    each (kernels, launches and host steps) in interleaved rounds and keep
    the faster (:attr:`selection`, a
    :class:`~schedules.fusion.fusion_choice.FusionSelection`), so the solver
    is never slower than the op-by-op schedule on this machine, up to timing noise.
    ``format``: ``"csr"``, ``"bcsr"`` or ``"auto"`` (see :data:`FORMATS`).
    ``steps`` / ``kernels`` expose the schedule (``kernels[i]`` is ``None``
    for a host step).  ``inline_solves`` (default True): the ``N x N`` solves
    ``Λ = Δ⁻¹Γ`` and ``Φ = Γ_prev⁻¹Γ`` run in a serial prologue of the kernel
    that applies them (:attr:`inline_kernels`; a Cholesky, see
    :mod:`schedules.fusion.inline_solve`), with no host step between the
    kernels; a failed pivot falls back to the host's eigen-solve for that
    iteration.  False: always on the host.

    >>> from tvm_ext.workloads import lap2d
    >>> solver = BlockCG(lap2d(40), 2, fused=True)
    >>> solver.steps
    [('S1', 'Delta1'), ('Lambda1',), ('X1', 'R1', 'Gamma1'), ('Phi1',), ('P1',)]
    """

    #: Iteration-1 inputs: the state Alg. 1 carries from one iteration to the next.
    inputs = ("X0", "R0", "P0", "Gamma0")

    def __init__(self, A: Any, n_rhs: int, *, fused: bool | str = "auto", dtype: Any = "float64",
                 format: str = "csr", target: Any = None, max_restarts: int = 3, inline_solves: bool = True):
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
        self.inline_solves = bool(inline_solves)
        self.problem = spd_precheck(self.A) if self.n else None
        self.format_name = None
        self._column: BlockCG | None = None
        if self.n == 0 or self.problem is not None:  # nothing to iterate on: solve() reports it
            return
        t0 = time.perf_counter()
        if fused == "auto":
            def build(f: bool) -> "BlockCG":
                return BlockCG(self.A, self.n_rhs, fused=f, dtype=self.dtype, format=format, target=target,
                               max_restarts=max_restarts, inline_solves=inline_solves)

            selection = modelled_selection(self.n, self.n_rhs, max(int(self.A.nnz), 1),
                                           itemsize=self.A.dtype.itemsize, target=target)
            if selection is None:  # cache-resident: launches decide, measure both
                candidates = {f: build(f) for f in (True, False)}
                selection = _select(candidates)
                chosen = candidates[selection.fused]
            else:                  # DRAM-resident: the traffic model decides
                chosen = build(selection.fused)
            self.__dict__.update(chosen.__dict__)
            self.selection = selection
            self.build_seconds = time.perf_counter() - t0
            return
        fmt = self._format(format)
        nnz = max(int(self.A.nnz), 1)
        sched = _Schedule.build(self.n, self.n_rhs, nnz, self.fused, fmt, self.dtype, target, self.inline_solves)
        self.plan, self.steps, self.storage, self.kernels = sched.plan, sched.steps, sched.storage, sched.kernels
        self.host_forms = sched.host_forms
        #: step index -> the kernel variant that first solves the host steps before it (Λ, Φ) in a prologue
        self.inline_kernels = sched.inline_kernels
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
                                   target=self.target, max_restarts=self.max_restarts,
                                   inline_solves=self.inline_solves)
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
        A, B, X0, rtol, maxiter, vector = check_solve_inputs(self.A, B, X0, rtol, maxiter, self.dtype)
        if B.shape[1] != self.n_rhs:
            raise ShapeError(f"block_cg: B has {B.shape[1]} columns, the solver was built for {self.n_rhs}")
        if callback is not None and not callable(callback):
            raise InputError(f"block_cg: callback must be callable, got {type(callback).__name__}")
        norms = column_norms(B)
        scales = column_scales(B, norms)
        bmax = float(norms.max()) if B.size else 0.0
        tol = resolve_tolerance(rtol, atol, bmax, "block_cg")
        on_iter = None if callback is None else (lambda Xs: callback(Xs.astype(np.float64) * scales[None, :]))
        it = IterationState(tol, self.n_rhs, on_iter)
        if self.problem is not None or self.n == 0:
            return finish_solve(X0 / scales, scales, A, B, it, 0, self.problem or "converged", self.fused,
                                self.name, 0.0, 0.0, vector, raise_on_failure, [])
        t0 = time.perf_counter()
        backend = _TVMBackend(self, B / scales, X0 / scales)
        setup = time.perf_counter() - t0
        t0 = time.perf_counter()
        k, reason, fallback, built = solve_block(backend, it, maxiter, self.max_restarts)
        seconds = time.perf_counter() - t0 - built
        return finish_solve(backend.x(), scales, A, B, it, k, reason, self.fused, self.name, seconds,
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
    or (``"auto"``, the default) fused on a DRAM-resident problem, else whichever
    of the two ran faster in a short measurement when the kernels were built.  ``tol`` is
    the deprecated name of ``rtol``.  See :class:`BlockCGResult` and
    :mod:`schedules.fusion.block_cg_iteration` for breakdowns.

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
class _NumpyBackend(Alg1Backend):
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
    A, B, X0, tol, maxiter, vector = check_solve_inputs(A, B, X0, tol, maxiter, dtype)
    it = IterationState(tol, B.shape[1])
    scales = column_scales(B)
    problem = spd_precheck(A) if A.shape[0] else None
    if problem is not None or A.shape[0] == 0:
        return finish_solve(X0 / scales, scales, A, B, it, 0, problem or "converged", False, "numpy/scipy",
                            0.0, 0.0, vector, raise_on_failure, [])
    t0 = time.perf_counter()
    backend = _NumpyBackend(A, B / scales, X0 / scales, dtype)
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    k, reason, fallback, built = solve_block(backend, it, maxiter, max_restarts)
    seconds = time.perf_counter() - t0 - built
    return finish_solve(backend.x(), scales, A, B, it, k, reason, False, backend.name, seconds, setup,
                        vector, raise_on_failure, fallback)
