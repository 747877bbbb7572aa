"""Sparse TIR executors vs scipy and torch: SpMV/SpMM per matrix, format and N.

For every matrix and N in {1, 8, 32, 128} (N = 1 is SpMV), each format's
executor (built by ``schedules.sparse.inspectors``, a small built-in sweep of
format knobs: BCSR R x C, SELL C) is checked against scipy once and timed with
``time_evaluator``; ``scipy.sparse`` CSR matmul and ``torch.sparse.mm`` on a
``torch.sparse_csr_tensor`` are timed in the same run.  The format the
selector picks (``schedules.sparse.inspect``) is timed too, with its
inspector + selection cost expressed in executor runs.  The table shows the
best format per row, its ratios to both peers, and the effective bandwidth by
Sextans' formula ``itemsize * (nnz + N * (2M + K)) / t`` as a share of the
measured copy bandwidth.  Formats whose padding would blow up (ELL/DIA fill
below 1/3, BCSR block fill below 1/2) are skipped, as a selector would.

With ``--generated`` the run compares instead, per matrix, N and candidate
format, the executor generated from the format's recipe
(``schedules.sparse.recipes``; its matrix inspected by ``RecipeInspector(recipe, "auto")``)
with the hand-written one (the library's template, or the template a generated
executor replaced, kept in ``tests/sparse_oracles``), timed in interleaved
rounds; the summary gives hand / generated per format and per (format, N),
geomean and worst, against the goal of >= 0.95x.  The label ``csb_t`` (in
``--formats``, or by default) compares CSB's ``A.T @ B``: the template oracle's
block-column kernel against the library's, generated from CSB's recipe.

    python -m bench.sparse_executors [--quick] [--matrices nasa4704,lap2d] [--n 32] [--generated]
        [--formats csr,bcsr2x2] [--rounds 15]
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import numpy as np
import scipy.sparse as sp

from bench.harness import BenchRun, bench_args, collect_rows, suite_argv, copy_bandwidth, geomean, time_python
from schedules.sparse.peers import torch_spmm

#: Column counts of the benchmark (N = 1 runs the SpMV kernels).
N_VALUES = (1, 8, 32, 128)


def _matrices(quick: bool) -> dict[str, Callable[[], sp.csr_array]]:
    from tvm_ext.workloads import block_fem, lap2d, lap3d, load_matrix, rmat

    if quick:
        return {"LFAT5": lambda: load_matrix("LFAT5"), "cora": lambda: load_matrix("cora"),
                "nasa4704": lambda: load_matrix("nasa4704"), "lap2d": lambda: lap2d(100),
                "lap3d27": lambda: lap3d(12, 27), "fem3x3": lambda: block_fem(500, 3, 3),
                "rmat": lambda: rmat(12)}
    return {"LFAT5": lambda: load_matrix("LFAT5"), "cora": lambda: load_matrix("cora"),
            "nasa4704": lambda: load_matrix("nasa4704"), "lap2d": lambda: lap2d(1000),
            "lap3d27": lambda: lap3d(64, 27), "fem3x3": lambda: block_fem(50000, 3, 3),
            "rmat": lambda: rmat(18)}


def _candidates(A: sp.csr_array, kind: str, lanes: int) -> dict[str, Callable[[], Any]]:
    """Format label -> builder, skipping formats whose padding would explode."""
    from schedules.sparse import inspectors as I
    from tvm_ext.workloads import block_fill

    m, k = A.shape
    lens = np.diff(A.indptr)
    nnz = max(A.nnz, 1)
    out: dict[str, Callable[[], Any]] = {"csr": lambda: I.to_csr(A), "coo": lambda: I.to_coo(A)}
    fill = block_fill(A, 4, 4) if A.nnz else {}
    for R, C in ((2, 2), (3, 3), (4, 4)):
        if fill.get(f"{R}x{C}", 0.0) >= 0.5:
            out[f"bcsr{R}x{C}"] = (lambda R=R, C=C: I.to_bcsr(A, R, C))
    if m and nnz / (m * max(int(lens.max()), 1)) >= 1 / 3:
        out["ell"] = lambda: I.to_ell(A, layout="col" if kind == "spmv" else "row")
    coo = A.tocoo()
    n_diag = np.unique(coo.col.astype(np.int64) - coo.row).size if A.nnz else 0
    if m and n_diag and nnz / (n_diag * m) >= 1 / 3:
        out["dia"] = lambda: I.to_dia(A, max_fill=3.0)
    out["hyb"] = lambda: I.to_hyb(A)
    out[f"sell{lanes}"] = lambda: I.to_sell(A, C=lanes)
    out["csb"] = lambda: I.to_csb(A, 4096)
    return out


def _time_formats(A, B, kind: str, n: int, lanes: int, repeat: int) -> dict[str, float]:
    """Seconds per call of every candidate format that builds and is correct."""
    from schedules.sparse.executors import build_executor
    from tvm_ext.errors import TvmExtError

    ref = A @ B
    scale = max(float(np.abs(ref).max()), 1.0)
    times: dict[str, float] = {}
    for label, make in _candidates(A, kind, lanes).items():
        try:
            fmt = make()
            exe = build_executor(fmt, n_cols=n, kind=kind)
        except (TvmExtError, MemoryError):
            continue
        if not np.allclose(exe(B), ref, rtol=1e-3, atol=1e-4 * scale):
            print(f"  WRONG RESULT: {label} {kind} N={n}")
            continue
        times[label] = exe.time(B, repeat=repeat).min
    return times


def _time_chosen(A, B, n: int, kind: str, repeat: int) -> dict[str, Any]:
    """What a user gets: ``inspect(A, n)`` picks the format; its time and inspector cost."""
    import time

    from schedules.sparse import inspect

    t0 = time.perf_counter()
    plan = inspect(A, n_cols=n, dtype=A.dtype)
    t_inspect = time.perf_counter() - t0
    exe = plan.build(kind=kind)
    t = exe.time(B, repeat=repeat).min
    return {"chosen": plan.label, "chosen_ms": t * 1e3, "inspect_ms": t_inspect * 1e3,
            "inspect_runs": t_inspect / t}


def _recipe_for(label: str, kind: str, lanes: int):
    """The recipe generating the executor of candidate ``label`` (as :func:`_candidates` builds it)."""
    import re

    from schedules.sparse.recipes import library as L

    if label == "ell":
        return L.ell_col_recipe() if kind == "spmv" else L.ell_recipe()
    if label.startswith("bcsr"):
        r, c = map(int, re.fullmatch(r"bcsr(\d+)x(\d+)", label).groups())
        return L.bcsr_recipe(r, c)
    if label == f"sell{lanes}":
        return L.sell_recipe(C=lanes)
    if label == "csb":
        return L.csb_recipe(4096)
    return L.RECIPES[label]()


def _generated_rows(run: BenchRun, mname: str, A, B, kind: str, n: int, lanes: int, rounds: int,
                    formats: set | None = None) -> None:
    """Each candidate format's recipe-generated executor against its hand-written one (the library's
    template, or the template it replaced, kept in ``tests/sparse_oracles``), timed in turns."""
    from bench.sparse_recipes import _hand_executor
    from schedules.sparse.recipes import build_recipe_executor
    from schedules.sparse.recipes.inspector_choice import RecipeInspector
    from tvm_ext.errors import TvmExtError

    ref = A @ B
    tol = 1e-3 * max(float(np.abs(ref).max()), 1.0)
    for label, make in _candidates(A, kind, lanes).items():
        if formats is not None and label not in formats:
            continue
        try:
            hand = _hand_executor(make(), n, kind)
        except (TvmExtError, MemoryError):
            continue
        recipe = _recipe_for(label, kind, lanes)
        gen = build_recipe_executor(recipe, A, n, kind=kind, fmt=RecipeInspector(recipe, "auto")(A))
        for exe, who in ((hand, "hand-written"), (gen, "generated")):
            err = float(np.abs(exe(B) - ref).max())
            if err > tol:
                raise AssertionError(f"{who} {label} on {mname} N={n}: error {err}")
        _add_pair(run, mname, A, n, label, hand, gen, B, rounds)
    if formats is None or "csb_t" in formats:
        Bt = np.random.default_rng(n).uniform(-1, 1, (A.shape[0], n) if n > 1 else A.shape[0]).astype(A.dtype)
        hand, gen = _transposed_csb_pair(A, n, kind)
        for exe, who in ((hand, "hand-written"), (gen, "generated")):
            err = float(np.abs(exe(Bt) - A.T @ Bt).max())
            if err > 1e-3 * max(float(np.abs(A.T @ Bt).max()), 1.0):
                raise AssertionError(f"{who} csb_t on {mname} N={n}: error {err}")
        _add_pair(run, mname, A, n, "csb_t", hand, gen, Bt, rounds)


def _add_pair(run: BenchRun, mname: str, A, n: int, label: str, hand, gen, B, rounds: int) -> None:
    from bench.sparse_recipes import _time_pair

    th, tg, ratio = _time_pair(hand, gen, B, rounds)
    run.add({"part": "generated", "matrix": mname, "nnz": int(A.nnz), "N": n, "format": label,
             "hand_ms": th * 1e3, "gen_ms": tg * 1e3, "ratio": ratio})
    print(f"  {mname} N={n} {label}: hand {th * 1e3:.3f} ms, generated {tg * 1e3:.3f} ms, "
          f"hand/generated {ratio:.2f}", flush=True)


def _transposed_csb_pair(A, n: int, kind: str) -> tuple:
    """CSB ``A.T @ B`` executors (beta 4096): the template oracle's and the library's generated one."""
    from schedules.sparse import inspectors as I
    from schedules.sparse.executors import Executor, build_executor
    from tests.sparse_oracles.csb_template import TemplateCSBKernels

    fmt = I.to_csb(A, 4096)
    kernels = TemplateCSBKernels()
    kernels.check(fmt)
    p = kernels.resolve(fmt, kernels.params_cls(), fmt.dtype.name, kind, 1 if kind == "spmv" else n, None)
    return (Executor(fmt, kernels, p, kind, True, None),
            build_executor(fmt, n_cols=n, kind=kind, transpose=True))


def _report_generated(run: BenchRun) -> None:
    rows = [r for r in run.rows if r.get("part") == "generated"]
    print(run.header())
    print(run.markdown(["matrix", "N", "format", "nnz", "hand_ms", "gen_ms", "ratio"], rows=rows))
    print("\nhand-written time / generated time (median of interleaved rounds; >= 1: generated as fast)")
    for fmt in dict.fromkeys(r["format"] for r in rows):
        mine = [r for r in rows if r["format"] == fmt]
        for name, rs in [(fmt, mine)] + [(f"  N={n}", [r for r in mine if r["N"] == n])
                                          for n in sorted({r["N"] for r in mine})]:
            xs = [r["ratio"] for r in rs]
            worst = min(rs, key=lambda r: r["ratio"])
            print(f"  {name:10s} geomean {geomean(xs):.2f}x  worst {min(xs):.2f}x "
                  f"({worst['matrix']}, N={worst['N']})  [{len(xs)} cases]")
    xs = [r["ratio"] for r in rows]
    if xs:
        ok = sum(x >= 0.95 for x in xs)
        print(f"all: geomean {geomean(xs):.2f}x, worst {min(xs):.2f}x; >= 0.95x on {ok}/{len(xs)} cases")


def run(quick: bool, *, out: str | None = None, argv: Sequence[str] = ()) -> list[dict]:
    """Run this suite as its command line does; its rows, each with its ``bench`` name.

    ``out``: directory for the JSON lines (None: none written); ``argv``: more options of ``main``.
    """
    return collect_rows(main, suite_argv(quick, out, argv))


def main(argv: Sequence[str] | None = None) -> None:
    args = bench_args(__doc__.splitlines()[0], argv,
                      matrices={"default": None, "help": "comma list of matrix names"},
                      n={"default": None, "help": "comma list of N (1 = SpMV)"},
                      dtype={"default": "float32", "help": "float32 or float64"},
                      formats={"default": None, "help": "comma list of format labels (with --generated: "
                                                        "csr,bcsr2x2,...)"},
                      rounds={"default": None, "help": "interleaved rounds per case (with --generated)"},
                      generated={"action": "store_true",
                                 "help": "compare the recipe-generated executors with the hand-written ones "
                                         "per format instead (writes sparse_executors_generated JSON)"})
    from schedules.sparse.executors.codegen import native_lanes
    from tvm_ext.workloads import canonical_csr

    warnings.simplefilter("ignore")  # scipy/torch sparse beta warnings
    mats = _matrices(args.quick)
    if args.matrices:
        mats = {k: v for k, v in mats.items() if k in args.matrices.split(",")}
    ns = tuple(int(x) for x in args.n.split(",")) if args.n else N_VALUES
    lanes = native_lanes(args.dtype)
    itemsize = np.dtype(args.dtype).itemsize
    repeat = 3 if args.quick else 5
    copy_bw = copy_bandwidth()
    run = BenchRun("sparse_executors_generated" if args.generated else "sparse_executors", out_dir=args.out)
    rng = np.random.default_rng(0)
    for mname, load in mats.items():
        A = canonical_csr(load(), dtype=args.dtype)
        m, k = A.shape
        for n in ns:
            kind = "spmv" if n == 1 else "spmm"
            B = rng.uniform(-1, 1, (k, n)).astype(args.dtype)
            if n == 1:
                B = B[:, 0].copy()
            if args.generated:
                rounds = int(args.rounds) if args.rounds else (5 if args.quick else 7)
                _generated_rows(run, mname, A, B, kind, n, lanes, rounds,
                                set(args.formats.split(",")) if args.formats else None)
                continue
            times = _time_formats(A, B, kind, n, lanes, repeat)
            t_scipy = time_python(lambda: A @ B, repeat=repeat).min
            torch_fn = torch_spmm(A, B)
            t_torch = time_python(torch_fn, repeat=repeat).min if torch_fn else None
            best = min(times, key=times.get)
            t = times[best]
            chosen = _time_chosen(A, B, n, kind, repeat)
            row = {"matrix": mname, "rows": m, "nnz": A.nnz, "N": n, "best": best,
                   "ours_ms": t * 1e3, "gflops": 2 * A.nnz * n / t / 1e9,
                   "scipy_ms": t_scipy * 1e3, "torch_ms": t_torch * 1e3 if t_torch else None,
                   "bw_share": itemsize * (A.nnz + n * (2 * m + k)) / t / copy_bw,
                   "csr_x_scipy": t_scipy / times["csr"] if "csr" in times else None,
                   **chosen}
            row.update({f"gf_{f}": 2 * A.nnz * n / s / 1e9 for f, s in times.items()})
            run.add(row)
            print(f"  {mname} N={n}: best {best} {t * 1e3:.3f} ms, scipy {t_scipy * 1e3:.3f} ms, "
                  f"torch {t_torch * 1e3 if t_torch else float('nan'):.3f} ms", flush=True)
    if args.generated:
        _report_generated(run)
    else:
        _report(run, copy_bw)


def _report(run: BenchRun, copy_bw: float) -> None:
    print(run.header())
    print(f"copy bandwidth {copy_bw / 1e9:.1f} GB/s; bw_share = Sextans effective bandwidth / copy bandwidth\n")
    print(run.markdown(["matrix", "N", "nnz", "best", "ours_ms", "gflops", "scipy_ms", "torch_ms", "bw_share"],
                       ratios={"x_scipy": ("scipy_ms", "ours_ms"), "x_torch": ("torch_ms", "ours_ms")}))
    print("\nThe selector's choice (inspect(A, N)): time, ratios, and inspector + selection cost "
          "in executor runs\n")
    print(run.markdown(["matrix", "N", "chosen", "chosen_ms", "inspect_ms", "inspect_runs"],
                       ratios={"x_scipy": ("scipy_ms", "chosen_ms"), "x_torch": ("torch_ms", "chosen_ms"),
                               "x_best": ("ours_ms", "chosen_ms")}))
    fmts = sorted({key for r in run.rows for key in r if key.startswith("gf_")})
    print("\nGFLOP/s per format (blank: skipped or wrong)\n")
    print(run.markdown(["matrix", "N"] + fmts))
    xs = [r["scipy_ms"] / r["ours_ms"] for r in run.rows]
    xt = [r["torch_ms"] / r["ours_ms"] for r in run.rows if r["torch_ms"]]
    xc = [r["csr_x_scipy"] for r in run.rows if r["csr_x_scipy"]]
    print(f"\nbest format: geomean x_scipy {geomean(xs):.2f} (min {min(xs):.2f}), "
          f"geomean x_torch {geomean(xt):.2f} over {len(xs)} rows")
    print(f"CSR only:    geomean x_scipy {geomean(xc):.2f} (min {min(xc):.2f})")
    ys = [r["scipy_ms"] / r["chosen_ms"] for r in run.rows]
    yt = [r["torch_ms"] / r["chosen_ms"] for r in run.rows if r["torch_ms"]]
    print(f"chosen:      geomean x_scipy {geomean(ys):.2f} (min {min(ys):.2f}), "
          f"geomean x_torch {geomean(yt):.2f}")
    print("goal: geomean >= 2x scipy and >= 1.5x torch, no row below 1x scipy -> "
          f"{'met' if geomean(xs) >= 2 and geomean(xt) >= 1.5 and min(xs) >= 1 else 'not met'}")


if __name__ == "__main__":
    main()
