"""GOGETA Alg. 1 measured: fused vs unfused TVM Block CG vs numpy/scipy peers, next to the traffic model.

:func:`compare_block_cg` solves one system ``A X = B`` (``B`` random,
``N`` columns) with the fused TVM kernels, the unfused ones, the numpy/scipy
Block CG and ``scipy.sparse.linalg.cg`` column by column, and reports time
per iteration of each (the wall time of the iteration loop divided by its
iterations, host steps included) next to the modelled DRAM traffic per
iteration of GOGETA's SEQ-Flex (one op at a time) and GOGETA-map (the fusion
groups) with no on-chip reuse between steps, which is what the CPU kernels
do.  :func:`~schedules.fusion.cg_traffic.modelled_traffic` is that model alone.

>>> from tvm_ext.workloads import lap2d
>>> res = compare_block_cg(lap2d(30), 2, tol=1e-8, repeat=1)
>>> res["converged"], res["iterations"] > 0, res["t_iter_fused"] > 0
(True, True, True)
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from schedules.fusion.block_cg import BlockCG, block_cg_numpy
from schedules.fusion.cg_traffic import modelled_traffic

__all__ = ["compare_block_cg", "modelled_traffic", "scipy_cg_columns"]


def scipy_cg_columns(A, B: np.ndarray, tol: float, maxiter: int | None) -> dict[str, Any]:
    """``scipy.sparse.linalg.cg`` on each column: solution, iterations, seconds per iteration."""
    import scipy.sparse.linalg as spla

    X = np.zeros_like(B)
    its, ok, seconds = 0, True, 0.0
    for j in range(B.shape[1]):
        count = [0]

        def cb(_):
            count[0] += 1

        t0 = time.perf_counter()
        X[:, j], info = spla.cg(A, B[:, j], rtol=tol, atol=0.0, maxiter=maxiter, callback=cb)
        seconds += time.perf_counter() - t0
        its += count[0]
        ok = ok and info == 0
    return {"x": X, "iterations": its, "converged": ok,
            "seconds_per_iteration": seconds / its if its else float("nan")}


def compare_block_cg(A: Any, n_rhs: int = 8, *, tol: float = 1e-8, maxiter: int | None = None,
                     seed: int = 0, dtype: str = "float64", format: str = "csr",
                     repeat: int = 3) -> dict[str, Any]:
    """Run every solver on one random ``B`` and collect the comparison (JSON-able).

    Each solver solves ``repeat`` times; the best time per iteration is kept
    (the solves are identical, so iterations and results do not change).
    """
    from tvm_ext.errors import InputError

    if isinstance(repeat, bool) or int(repeat) != repeat or repeat < 1:
        raise InputError(f"compare_block_cg: repeat must be an integer >= 1, got {repeat!r}")
    from tvm_ext.workloads import canonical_csr

    A = canonical_csr(A, square=True, dtype=dtype, what="cg matrix")
    B = np.random.default_rng(seed).standard_normal((A.shape[0], n_rhs))
    out: dict[str, Any] = {"rows": A.shape[0], "nnz": int(A.nnz), "n_rhs": n_rhs, "tol": tol, "dtype": dtype}
    solvers = {}

    def best(solve):
        runs = [solve() for _ in range(int(repeat))]
        return min(runs, key=lambda r: r.seconds_per_iteration if r.iterations else 0.0)

    # the peers first: TVM's pool threads keep spinning after a kernel and would slow BLAS down
    solvers["numpy"] = best(lambda: block_cg_numpy(A, B, tol=tol, maxiter=maxiter, dtype=dtype))
    sc = min((scipy_cg_columns(A, B, tol, maxiter) for _ in range(int(repeat))),
             key=lambda r: r["seconds_per_iteration"] if r["iterations"] else 0.0)
    for fused in (True, False, "auto"):
        solver = BlockCG(A, n_rhs, fused=fused, dtype=dtype, format=format)
        solver.solve(B, rtol=tol, maxiter=1)  # warm-up: first calls start TVM's thread pool
        key = {True: "fused", False: "unfused", "auto": "auto"}[fused]
        solvers[key] = best(lambda: solver.solve(B, rtol=tol, maxiter=maxiter))
        out["format"] = solver.format_name
        if fused == "auto":
            out["auto_choice"] = "fused" if solver.fused else "unfused"
    main = solvers["fused"]
    out.update(converged=main.converged, iterations=main.iterations, reason=main.reason,
               residual=[float(r) for r in np.atleast_1d(main.residual)], restarts=main.restarts,
               fallback_columns=list(main.fallback_columns),
               history=[[float(v) for v in np.atleast_1d(h)] for h in main.history])
    for name, res in solvers.items():
        out[f"t_iter_{name}"] = res.seconds_per_iteration
        out[f"iterations_{name}"] = res.iterations
        out[f"converged_{name}"] = res.converged
    out["t_iter_scipy_cg"] = sc["seconds_per_iteration"]
    out["iterations_scipy_cg"] = sc["iterations"]
    out["converged_scipy_cg"] = sc["converged"]
    scale = np.abs(sc["x"]).max() or 1.0
    out["max_diff_vs_scipy_cg"] = float(np.abs(main.x - sc["x"]).max() / scale)
    out["speedup_vs_unfused"] = out["t_iter_unfused"] / out["t_iter_fused"]
    out["speedup_auto_vs_unfused"] = out["t_iter_unfused"] / out["t_iter_auto"]
    out["speedup_vs_numpy"] = out["t_iter_numpy"] / out["t_iter_fused"]
    model = modelled_traffic(A.shape[0], n_rhs, A.nnz)
    out["modelled_words_unfused"] = model["seq_words"]
    out["modelled_words_fused"] = model["gogeta_words"]
    out["modelled_traffic_reduction"] = model["reduction"]
    return out
