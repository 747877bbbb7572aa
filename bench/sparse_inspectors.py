"""Inspector cost (Venkat 2016 §5.4) and format selection on large matrices, in executor runs.

Part 1, per format: times each ``schedules.sparse.inspectors`` function on
lap2d(1000) (1e6 rows, 5e6 nnz; ``--quick``: lap2d(200)) and the bundled
nasa4704, next to scipy's own converters where one exists (``tocoo``,
``tobsr``, ``todia``, a canonical CSR copy) measured in the same run;
``insp_in_spmv`` is the inspector's cost in scipy CSR SpMVs.  Our times
include ``canonical_csr``'s validation; scipy's converters skip it.

Part 2, selection (``schedules.sparse.inspect``) on six matrices of 1.8M to 6M
non-zeros (``--quick``: three of about 0.3M) -- HPCG's 27-point stencil,
lap2d, R-MAT, a 3x3 block FEM and pyamg's Q1 elasticity at two sizes -- for
N in {1, 8, 32, 128}, float32:

* ``inspect`` (features, selection, the timing of close candidates and a
  baseline, the inspector) and ``build`` (the executor, kernel cache warm),
  each the fastest of 3 calls; their sum in non-zeros per second and in
  *executor runs*: over ``run_s``, the median of 10 back-to-back single runs
  of the chosen executor's kernel (``exe.time``) at the same N.  The goal is
  <= 20 runs at N = 8.  ``runs_fastest`` divides by the fastest of those 10
  runs instead (what a quiet machine would give; higher on a busy one);
* ``regret``: the chosen executor's kernel time over the fastest of a fixed
  set of formats built and timed in the same run (CSR, ELL, SELL-8-256, DIA,
  HYB, BCSR 2x1/3x1/4x1/1x2/2x2/3x3/4x4/6x1, those the model deems feasible),
  the "oracle"; geomean printed at the end.

Oracle times are the fastest of 10 single runs of ``time_evaluator``, the
kernel least disturbed by other load, as the selection's own timing does.

Part 3, recipes: every recipe's inspector as vectorised numpy and as compiled
TIR kernels (``recipe.inspector("numpy")`` / ``("tir")``, arrays checked
identical) on HPCG's 27-point stencil, the 3x3 block FEM and Q1 elasticity
(``--quick``: the three small ones), each the fastest of 3 calls, in non-zeros
per second and in runs of the recipe's generated executor at N = 8 (median of
10); ``auto`` is what ``recipe.inspector("auto")`` picks after timing both.

    python -m bench.sparse_inspectors [--quick] [--part formats|selection|recipes|all] [--n 8 ...]
"""
from __future__ import annotations

import time
import warnings
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from bench.harness import BenchRun, bench_args, geomean, time_python

#: Column counts of the selection part (N = 1 runs the SpMV kernels).
N_VALUES = (1, 8, 32, 128)
#: The oracle's formats, by candidate label (kept when the analytic model deems them feasible).
ORACLE_LABELS = ("csr", "sell(C=8,sigma=256)", "dia") + tuple(
    f"bcsr(R={r},C={c})" for r, c in ((2, 1), (3, 1), (4, 1), (1, 2), (2, 2), (3, 3), (4, 4), (6, 1)))
ORACLE_FORMATS = ("ell", "hyb")  # their arguments depend on the matrix


#: format label -> (our inspector, scipy peer or None, peer name)
def _cases() -> dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any] | None, str]]:
    from schedules.sparse.inspectors import to_bcsr, to_coo, to_csb, to_csr, to_dia, to_ell, to_hyb, to_sell

    def scipy_csr(A):
        B = sp.csr_array(A, copy=True)
        B.sum_duplicates()
        return B

    return {
        "csr": (to_csr, scipy_csr, "csr copy+sum_duplicates"),
        "coo": (to_coo, lambda A: A.tocoo(), "tocoo"),
        "bcsr 2x2": (lambda A: to_bcsr(A, 2, 2), lambda A: A.tobsr(blocksize=(2, 2)), "tobsr(2,2)"),
        "bcsr 4x4": (lambda A: to_bcsr(A, 4, 4), lambda A: A.tobsr(blocksize=(4, 4)), "tobsr(4,4)"),
        "dia": (lambda A: to_dia(A, max_fill=np.inf), lambda A: A.todia(), "todia"),
        "ell row": (to_ell, None, ""),
        "ell col": (lambda A: to_ell(A, layout="col"), None, ""),
        "csb 4096": (lambda A: to_csb(A, 4096), None, ""),
        "hyb": (to_hyb, None, ""),
        "sell 8/256": (lambda A: to_sell(A, C=8, sigma=256), None, ""),
    }


def _matrices(quick: bool) -> dict[str, sp.csr_array]:
    from tvm_ext.workloads import lap2d, load_matrix

    n = 200 if quick else 1000
    return {f"lap2d({n})": lap2d(n), "nasa4704": load_matrix("nasa4704")}


def _large_matrices(quick: bool) -> dict[str, Callable[[], sp.csr_array]]:
    from tvm_ext.workloads import block_fem, fem_elasticity, lap2d, lap3d, rmat

    if quick:
        return {"lap3d27(24)": lambda: lap3d(24, points=27), "fem3x3(4000)": lambda: block_fem(4000, 3, 3, seed=1),
                "elasticity(120)": lambda: fem_elasticity(120)}
    return {
        "lap3d27(48)": lambda: lap3d(48, points=27),           # HPCG, 2.9M nnz
        "lap2d(1000)": lambda: lap2d(1000),                    # 5.0M nnz
        "rmat17": lambda: rmat(17, edge_factor=16, seed=1),    # 1.9M nnz
        "fem3x3(40000)": lambda: block_fem(40000, 3, 3, seed=1),  # 3.2M nnz
        "elasticity(300)": lambda: fem_elasticity(300),        # 2.3M nnz
        "elasticity(480)": lambda: fem_elasticity(480),        # 6.0M nnz
    }


def _formats_part(run: BenchRun, quick: bool) -> None:
    warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)  # scipy's todia on nasa4704
    repeat = 2 if quick else 3
    for mname, A in _matrices(quick).items():
        x = np.ones(A.shape[1])
        spmv = time_python(lambda: A @ x, repeat=repeat).min
        for fmt, (ours, peer, peer_name) in _cases().items():
            t_ours = time_python(lambda: ours(A), repeat=repeat, min_repeat_s=0.0).min
            t_peer = time_python(lambda: peer(A), repeat=repeat, min_repeat_s=0.0).min if peer else None
            run.add({"part": "formats", "matrix": mname, "rows": A.shape[0], "nnz": A.nnz, "format": fmt,
                     "ours_s": t_ours, "nnz_per_s": A.nnz / t_ours, "peer": peer_name or "-",
                     "peer_s": t_peer, "spmv_s": spmv, "insp_in_spmv": t_ours / spmv})


def _fastest_run(exe, B) -> float:
    """The fastest of 10 single runs."""
    return float(exe.time(B, repeat=10, number=1, min_repeat_ms=0).min)


def _best_of(f: Callable[[], Any], calls: int = 3) -> tuple[float, Any]:
    """The fastest of ``calls`` calls of ``f`` (seconds) and the last result."""
    best, out = float("inf"), None
    for _ in range(calls):
        t0 = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _oracle_candidates(A, n: int, chosen) -> list:
    from schedules.sparse.selection import AnalyticCostModel, sparse_features

    scores, _ = AnalyticCostModel().scores(sparse_features(A), n)
    keep = [c for c in scores if c.label in ORACLE_LABELS or c.format in ORACLE_FORMATS]
    return keep if chosen in keep else keep + [chosen]


def _selection_part(run: BenchRun, quick: bool, n_values: tuple[int, ...] = N_VALUES) -> None:
    from schedules.sparse import inspect
    from schedules.sparse.executors import build_executor
    from schedules.sparse.inspectors import INSPECTORS
    from tvm_ext.workloads import canonical_csr

    rng = np.random.default_rng(0)
    for mname, make in _large_matrices(quick).items():
        A = canonical_csr(make(), dtype="float32")
        built: dict[Any, Any] = {}  # candidate -> format (inspection does not depend on N)
        for n in n_values:
            B = rng.uniform(-1, 1, (A.shape[1], n) if n > 1 else A.shape[1]).astype(np.float32)
            kind = "spmv" if n == 1 else "spmm"
            inspect(A, n).build()  # warm the kernel cache (the chosen and the timed candidates)
            t_inspect, plan = _best_of(lambda: inspect(A, n))
            t_build, exe = _best_of(plan.build)
            t_ib = t_inspect + t_build
            runs = exe.time(B, repeat=10, number=1, min_repeat_ms=0)  # 10 back-to-back single runs
            t_run, t_fastest = float(np.median(runs.results)), float(runs.min)
            want = A @ B  # float32 sums of values up to 1e5 (elasticity): compare to the result's scale
            assert np.abs(exe(B) - want).max() <= 1e-4 * max(np.abs(want).max(), 1.0), (mname, n, plan.label)
            oracle: dict[str, float] = {}
            for cand in _oracle_candidates(A, n, plan.choice.candidate):
                if cand not in built:
                    built[cand] = INSPECTORS[cand.format](A, **cand.args)
                oracle[cand.label] = _fastest_run(build_executor(built[cand], n, kind=kind), B)
            best = min(oracle, key=oracle.get)
            meas = plan.choice.measurement
            run.add({"part": "selection", "matrix": mname, "rows": A.shape[0], "nnz": A.nnz, "n": n,
                     "chosen": plan.label, "measured": sorted(meas.seconds) if meas else [],
                     "measure_s": meas.spent_seconds if meas else 0.0,
                     "inspect_s": t_inspect, "build_s": t_build, "select_s": plan.select_seconds,
                     "inspector_s": plan.inspect_seconds, "nnz_per_s": A.nnz / t_ib,
                     "run_s": t_run, "runs": t_ib / t_run, "run_fastest_s": t_fastest,
                     "runs_fastest": t_ib / t_fastest, "oracle": best,
                     "oracle_s": oracle[best], "regret": oracle[plan.label] / oracle[best],
                     "oracle_times": oracle})
            print(f"  {mname} N={n}: {plan.label} {t_ib * 1e3:.0f} ms = {t_ib / t_run:.1f} runs, "
                  f"oracle {best} regret {oracle[plan.label] / oracle[best]:.2f}", flush=True)
        del built


def _recipe_cases() -> dict[str, Callable[[], Any]]:
    """Recipes of the recipe-inspector part, by label (the library's default knobs, and BCSR 2x2)."""
    from schedules.sparse.recipes import RECIPES
    from schedules.sparse.recipes.library import bcsr_recipe

    cases = {name: factory for name, factory in RECIPES.items()}
    cases["bcsr2x2"] = lambda: bcsr_recipe(2, 2)
    return cases


def _same_arrays(a, b) -> bool:
    return list(a.arrays) == list(b.arrays) and all(
        a.arrays[k].dtype == b.arrays[k].dtype and np.array_equal(a.arrays[k], b.arrays[k]) for k in a.arrays)


def _recipes_part(run: BenchRun, quick: bool, n: int = 8) -> None:
    """Each recipe's numpy inspector against its compiled TIR one (``recipe.inspector("numpy"|"tir")``)
    on the large matrices, in non-zeros per second and in runs of the recipe's executor at ``n``
    columns; ``auto`` is what ``recipe.inspector("auto")`` picks after timing both once."""
    from schedules.sparse.recipes import build_recipe_executor
    from schedules.sparse.recipes.inspector_choice import DECISIONS, RecipeInspector
    from tvm_ext.workloads import canonical_csr

    mats = _large_matrices(quick)
    names = list(mats) if quick else ["lap3d27(48)", "fem3x3(40000)", "elasticity(300)"]
    repeat = 2 if quick else 3
    rng = np.random.default_rng(0)
    for mname in names:
        A = canonical_csr(mats[mname](), dtype="float32")
        B = rng.uniform(-1, 1, (A.shape[1], n)).astype(np.float32)
        for label, factory in _recipe_cases().items():
            recipe = factory()
            numpy_insp, tir_insp = RecipeInspector(recipe, "numpy"), RecipeInspector(recipe, "tir")
            tir_insp(A)                                    # builds / loads the compiled kernels
            t_np, f_np = _best_of(lambda: numpy_insp(A), repeat)
            t_tir, f_tir = _best_of(lambda: tir_insp(A), repeat)
            if not _same_arrays(f_np, f_tir):
                raise AssertionError(f"{mname} {label}: the compiled inspector's arrays differ from numpy's")
            DECISIONS.clear()
            auto = RecipeInspector(recipe, "auto")
            auto(A)
            exe = build_recipe_executor(recipe, A, n, fmt=f_tir)
            want = A @ B
            assert np.abs(exe(B) - want).max() <= 1e-4 * max(np.abs(want).max(), 1.0), (mname, label)
            t_run = float(np.median(exe.time(B, repeat=10, number=1, min_repeat_ms=0).results))
            run.add({"part": "recipes", "matrix": mname, "nnz": A.nnz, "recipe": label,
                     "numpy_s": t_np, "tir_s": t_tir, "numpy_nnz_per_s": A.nnz / t_np,
                     "tir_nnz_per_s": A.nnz / t_tir, "auto": auto.last.chosen,
                     "auto_times": dict(auto.last.times), "run_s": t_run,
                     "numpy_runs": t_np / t_run, "tir_runs": t_tir / t_run,
                     "best_runs": min(t_np, t_tir) / t_run})
            print(f"  {mname} {label}: numpy {t_np * 1e3:.1f} ms, tir {t_tir * 1e3:.1f} ms, "
                  f"auto {auto.last.chosen}", flush=True)


def _print_recipes(run: BenchRun) -> None:
    rows = [r for r in run.rows if r["part"] == "recipes"]
    print(run.markdown(["matrix", "recipe", "numpy_s", "tir_s", "numpy_nnz_per_s", "tir_nnz_per_s", "auto",
                        "run_s", "numpy_runs", "tir_runs"], ratios={"numpy/tir": ("numpy_s", "tir_s")}, rows=rows))
    ratios = [r["numpy_s"] / r["tir_s"] for r in rows]
    if ratios:
        print(f"\ngeomean numpy/tir inspector time over {len(rows)} rows: {geomean(ratios):.3f} "
              f"(tir faster on {sum(x > 1 for x in ratios)}/{len(rows)}; auto picked tir on "
              f"{sum(r['auto'] == 'tir' for r in rows)}/{len(rows)})")
        for label in dict.fromkeys(r["recipe"] for r in rows):
            sub = [r["numpy_s"] / r["tir_s"] for r in rows if r["recipe"] == label]
            print(f"  {label}: geomean numpy/tir {geomean(sub):.2f}")


def main() -> None:
    args = bench_args(__doc__.splitlines()[0], part={"default": "all",
                                                     "choices": ("formats", "selection", "recipes", "all"),
                                                     "help": "which part to run (default all)"},
                      n={"type": int, "nargs": "+", "default": list(N_VALUES),
                         "help": "column counts of the selection part (default 1 8 32 128)"})
    run = BenchRun("sparse_inspectors", out_dir=args.out)
    print(run.header())
    if args.part in ("formats", "all"):
        _formats_part(run, args.quick)
        fmt_rows = [r for r in run.rows if r["part"] == "formats"]
        print(run.markdown(["matrix", "format", "ours_s", "nnz_per_s", "peer", "peer_s", "insp_in_spmv"],
                           ratios={"peer/ours": ("peer_s", "ours_s")}, rows=fmt_rows))
        with_peer = [r["peer_s"] / r["ours_s"] for r in fmt_rows if r["peer_s"]]
        print(f"\ngeomean peer/ours over {len(with_peer)} rows with a scipy peer: {geomean(with_peer):.3f}\n")
    if args.part in ("selection", "all"):
        _selection_part(run, args.quick, tuple(args.n))
        sel = [r for r in run.rows if r["part"] == "selection"]
        print(run.markdown(["matrix", "nnz", "n", "chosen", "inspect_s", "build_s", "select_s", "measure_s",
                            "inspector_s", "nnz_per_s", "run_s", "runs", "runs_fastest", "oracle", "regret"], rows=sel))
        at8 = [r for r in sel if r["n"] == 8]
        worst = max(at8, key=lambda r: r["runs"]) if at8 else None
        if worst:
            print(f"\ninspect + build at N=8: worst {worst['runs']:.1f} executor runs ({worst['matrix']}); "
                  f"<= 20 runs on {sum(r['runs'] <= 20 for r in at8)}/{len(at8)} matrices "
                  f"({sum(r['runs_fastest'] <= 20 for r in at8)}/{len(at8)} against the fastest run)")
        print(f"geomean oracle regret over {len(sel)} cases: {geomean(r['regret'] for r in sel):.3f} "
              f"(worst {max(r['regret'] for r in sel):.2f})")
        for n in args.n:
            rows = [r for r in sel if r["n"] == n]
            if rows:
                print(f"  N={n}: geomean regret {geomean(r['regret'] for r in rows):.3f}, "
                      f"median runs {np.median([r['runs'] for r in rows]):.1f}")
    if args.part in ("recipes", "all"):
        _recipes_part(run, args.quick)
        _print_recipes(run)


if __name__ == "__main__":
    main()
