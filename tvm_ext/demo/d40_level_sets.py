"""Demo: level sets and PCG with a level-scheduled SGS preconditioner (Venkat 2016 ch. 7)."""
from __future__ import annotations

import time

import numpy as np
import scipy.sparse.linalg as spla

from tvm_ext.markdown import table

TITLE = "Level sets: wavefront Gauss-Seidel and PCG (dissertation ch. 7)"


def _scipy_cg(A, b, tol, M=None):
    count = [0]

    def cb(_):
        count[0] += 1

    t0 = time.perf_counter()
    x, info = spla.cg(A, b, rtol=tol, atol=0.0, M=M, callback=cb)
    seconds = time.perf_counter() - t0
    res = float(np.linalg.norm(b - A @ x) / np.linalg.norm(b))
    return {"iterations": count[0], "true_residual": res, "converged": info == 0, "seconds": seconds}


def _level_count_rows():
    from schedules.sparse.level_sets import level_sets
    from tvm_ext.workloads import lap2d, lap3d

    rows = []
    for label, A, formula in (("lap2d(30) 5pt", lap2d(30), 2 * 30 - 1),
                              ("lap3d(12) 7pt", lap3d(12), 3 * 12 - 2)):
        s = level_sets(A)
        rows.append([label, s.levels, formula, round(s.parallelism, 2), s.rows_per_level["max"]])
    return rows


def run():
    from schedules.sparse.solvers import PCG
    from schedules.sparse.triangular import GaussSeidel
    from tvm_ext.workloads import load_matrix, make_spd

    A = make_spd(load_matrix("nasa4704"))
    n = A.shape[0]
    b = np.random.default_rng(0).standard_normal(n)
    tol = 1e-8
    PCG(A)  # load the compiled kernels once, so the timed inspector is steady-state
    solver = PCG(A)
    ours = solver.solve(b, rtol=tol)
    serial = PCG(A, parallel=False).solve(b, rtol=tol)
    gs = GaussSeidel(A, parallel=False)
    M = spla.LinearOperator((n, n), matvec=lambda r: gs.symmetric(None, r))
    peer_sgs = _scipy_cg(A, b, tol, M=M)
    peer_plain = _scipy_cg(A, b, tol)

    rows = [
        ["ours: PCG + SGS (level sets, TIR)", ours.iterations, ours.true_residual, ours.levels,
         ours.converged, ours.solve_seconds],
        ["ours: PCG + SGS (serial TIR, natural order)", serial.iterations, serial.true_residual,
         serial.levels, serial.converged, serial.solve_seconds],
        ["scipy cg, M = the same SGS", peer_sgs["iterations"], peer_sgs["true_residual"], None,
         peer_sgs["converged"], peer_sgs["seconds"]],
        ["scipy cg, no preconditioner", peer_plain["iterations"], peer_plain["true_residual"], None,
         peer_plain["converged"], peer_plain["seconds"]],
    ]
    lines = [f"nasa4704 made SPD: {n} rows, {A.nnz} non-zeros; tol {tol:g} (relative residual)",
             table(["solver", "iterations", "||b-Ax||/||b||", "level sets", "converged", "seconds"],
                   rows),
             f"level schedule: {ours.levels} levels, {n / ours.levels:.1f} rows per level on average; "
             f"inspector {ours.inspector_seconds * 1e3:.2f} ms = "
             f"{ours.inspector_overhead_iterations:.1f} PCG iterations of "
             f"{ours.seconds_per_iteration * 1e3:.3f} ms (dissertation Table 7.2: 2.9-25.2)",
             "",
             "level sets in natural order vs the dissertation's formula (2n-1 in 2-D, 3n-2 in 3-D):",
             table(["matrix", "levels (measured)", "formula", "rows per level", "widest level"],
                   _level_count_rows())]
    data = {
        "rows": n, "nnz": int(A.nnz), "levels": ours.levels,
        "pcg_sgs": ours.summary(), "pcg_sgs_serial_iterations": serial.iterations,
        "scipy_cg_sgs_iterations": peer_sgs["iterations"],
        "scipy_cg_iterations": peer_plain["iterations"],
        "scipy_cg_true_residual": peer_plain["true_residual"],
    }
    return data, lines
