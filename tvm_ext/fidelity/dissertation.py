"""Venkat's dissertation (2016, seed 003): its checkable claims against :mod:`schedules.sparse`.

Ours comes from the SGD recipes' inspectors (diagonal counts), the format
selector (where BCSR pays) and level-scheduled PCG + SGS solves timed in this
run against the same solver without level sets (inspector overhead in PCG
iterations, speed-up over the serial solver).  The dissertation's other
numbers need its GPUs, OSKI, CUSP or matrices that are not public (see
:data:`NOT_CHECKED` in :mod:`tvm_ext.fidelity`).

>>> diag_counts(__import__("scipy.sparse").sparse.random(4, 6, 0.5, format="csr", random_state=0))
(9, 4)
"""
from __future__ import annotations

import math
import os
import statistics
from typing import Any, Callable, Mapping

import numpy as np

from .claim import ClaimResult, compare, holds

__all__ = ["dissertation_claims", "diag_counts", "pcg_runs", "PAPER"]

P = "Venkat (dissertation)"

#: The dissertation's numbers (section / table as the digest beside the seed gives them).
PAPER = {
    "sgd_example": (9, 4),                     # §6.2, Fig. 6.5: 4 movies x 6 users, Diag and 2x2 BlkDiag
    "gs_overhead_iterations": (2.92, 25.20),   # Table 7.2: inspector time in PCG iterations, all 17 matrices
    "gs_overhead_stencil_like": (2.92, 3.60),  # Table 7.2: ecology2, G3_circuit, thermal2, apache2 (5-7 nnz/row)
    "pcg_speedup_p2p": 2.97,                   # §7.4: median full-PCG speed-up over sequential, point-to-point
    "cores": 12,                               # §7.4: one Edison socket
}


def diag_counts(A: Any, R: int = 2, C: int = 2) -> tuple[int, int]:
    """Diagonals of ``A``'s SGD schedule: Diag and ``R x C`` BlkDiag, from the recipes' inspectors."""
    from schedules.sparse.recipes.nest import Role
    from schedules.sparse.recipes.sgd import sgd_blkdiag_recipe, sgd_diag_recipe

    return tuple(int(r.inspect(A).arrays_with(Role.OFFSET)[0].size - 1)
                 for r in (sgd_diag_recipe(), sgd_blkdiag_recipe(R, C)))


def _sgd() -> list[ClaimResult]:
    import scipy.sparse as sp

    A = sp.random(4, 6, 0.5, format="csr", random_state=0)
    diag, blk = diag_counts(A)
    return [compare(P, "SGD Diag: diagonals of the 4 x 6 example (movies + users - 1)", "§6.2, Fig. 6.5",
                    float(PAPER["sgd_example"][0]), float(diag), tolerance=0.0,
                    reason="make-dense, skew, shift and compact reorder the ratings by diagonal"),
            compare(P, "SGD BlkDiag 2x2: block diagonals of the example (movies/R + users/C - 1)", "§6.2", float(PAPER["sgd_example"][1]),
                    float(blk), tolerance=0.0, reason="tiling before the skew gives block diagonals")]


def _median_by(items: list, key: Callable[[Any], float]) -> Any:
    return sorted(items, key=key)[len(items) // 2]


def pcg_runs(matrices: Mapping[str, Callable[[], Any]], rtol: float = 1e-8, repeat: int = 3) -> list[dict]:
    """PCG + SGS with level sets and without, per matrix: iterations, the speed-up of the whole solve
    (inspector included) and the inspector's cost in PCG iterations, split as Table 7.2 counts it
    (``table72``: dependence graph + levels), the reorder into level order (``reorder``) and the
    executors' set-up (``setup``); ``bfs_table72`` is graph + levels by the dissertation's own algorithm,
    SpMP's parallel BFS on the dependence graph (``method="parallel"``).  Kernels are compiled or
    loaded from the cache before any timing; each inspector time is the median of ``repeat`` runs."""
    from schedules.sparse.level_sets import schedule_of_canonical
    from schedules.sparse.solvers import PCG
    from tvm_ext.workloads import canonical_csr

    rows = []
    for name, make in matrices.items():
        A = make()
        b = np.ones(A.shape[0])
        PCG(A)  # kernels loaded once, so the timed inspector is steady state
        solver = _median_by([PCG(A) for _ in range(repeat)], lambda s: s.inspector_seconds)
        par = solver.solve(b, rtol=rtol)
        ser = PCG(A, parallel=False).solve(b, rtol=rtol)
        spi = par.seconds_per_iteration
        br = par.inspector_breakdown
        C = canonical_csr(A, square=True)
        schedule_of_canonical(C, method="parallel")
        bfs = _median_by([schedule_of_canonical(C, method="parallel").seconds for _ in range(repeat)],
                         lambda t: t["graph"] + t["levels"])
        table72 = br.get("graph", 0.0) + br.get("levels", 0.0)
        rows.append({"matrix": name, "iterations": par.iterations,
                     "overhead_iterations": par.inspector_overhead_iterations,
                     "table72_overhead_iterations": table72 / spi,
                     "reorder_iterations": br.get("reorder", 0.0) / spi,
                     "setup_iterations": (par.inspector_seconds - sum(br.values())) / spi,
                     "bfs_table72_overhead_iterations": (bfs["graph"] + bfs["levels"]) / spi,
                     "speedup": (ser.inspector_seconds + ser.solve_seconds)
                     / (par.inspector_seconds + par.solve_seconds)})
    return rows


def _position(x: float, lo: float, hi: float) -> str:
    return "below" if x < lo else "above" if x > hi else "inside"


def _pcg(rows: list[dict]) -> list[ClaimResult]:
    med = {k: statistics.median(r[k] for r in rows)
           for k in ("overhead_iterations", "table72_overhead_iterations", "reorder_iterations",
                     "setup_iterations", "bfs_table72_overhead_iterations")}
    t72, bfs = med["table72_overhead_iterations"], med["bfs_table72_overhead_iterations"]
    speed = statistics.median(r["speedup"] for r in rows)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    names = ", ".join(r["matrix"] for r in rows)
    lo, hi = PAPER["gs_overhead_stencil_like"]
    return [
        compare(P, f"GS inspector overhead in PCG iterations, graph + levels as Table 7.2 counts it "
                   f"(median of {names})", "Table 7.2 (stencil-like: ecology2, G3_circuit, thermal2, apache2)",
                (lo, hi), t72, tolerance=0.0,
                ours_text=f"{t72:.2f} (SpMP's parallel BFS: {bfs:.2f}; in full {med['overhead_iterations']:.2f}"
                          f" = + reorder {med['reorder_iterations']:.2f} + executor set-up "
                          f"{med['setup_iterations']:.2f})",
                reason="Table 7.2 counts graph construction and the modified BFS only, not the reordering, "
                       "the executors' set-up or compilation (ours loads its kernels from the cache before "
                       "timing); our default level pass reads the levels off the matrix in one compiled serial "
                       f"pass with no graph ({_position(t72, lo, hi)} the range); the dissertation's algorithm "
                       "(graph + parallel "
                       f"BFS, one launch per level) costs {bfs:.2f} here on {cores} shared core(s)"),
        compare(P, f"full PCG speed-up over the serial solver, inspector included (median of {names})",
                f"§7.4 ({PAPER['cores']} cores, point-to-point)", PAPER["pcg_speedup_p2p"], speed, unit="x",
                reason=f"measured here on {cores} core(s) shared with other work, against the paper's "
                       f"{PAPER['cores']}: per core ours is {speed / cores:.2f}x, the paper's "
                       f"{PAPER['pcg_speedup_p2p'] / PAPER['cores']:.2f}x"),
    ]


def _bcsr() -> list[ClaimResult]:
    from schedules.sparse.selection import select_format
    from tvm_ext.workloads import block_fem, lap2d

    low = select_format(lap2d(100), 1).candidate
    dense = select_format(block_fem(3000, 3, 3, seed=1), 1).candidate
    return [
        holds(P, "BCSR gives no benefit at low non-zeros per row (5-point Laplacian, N=1)", "§5.4 (mc2depi, "
              "mac_econ_fwd500)", "no BCSR", low.format != "bcsr", f"selector picks {low.label}",
              reason="register blocks of a 5-point row are mostly fill, so the analytic model charges them"),
        holds(P, "BCSR pays where blocks are dense (3x3 FEM blocks, N=1)", "§5.4 (OSKI's finding)", "BCSR",
              dense.format == "bcsr", f"selector picks {dense.label}",
              reason="3x3 blocks store one column index per 9 values: less traffic than CSR"),
    ]


def dissertation_claims(*, pcg_matrices: Mapping[str, Callable[[], Any]] | None = None) -> list[ClaimResult]:
    """The dissertation's checkable claims; ``pcg_matrices``: the PCG + SGS problems (default two stencils)."""
    from tvm_ext.workloads import lap2d, lap3d

    mats = pcg_matrices if pcg_matrices is not None else {"lap2d(200)": lambda: lap2d(200),
                                                          "lap3d(30)": lambda: lap3d(30)}
    rows = [r for r in pcg_runs(mats) if math.isfinite(r["overhead_iterations"])]
    return _sgd() + (_pcg(rows) if rows else []) + _bcsr()
