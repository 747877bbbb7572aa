"""Sextans Figs. 7/8, Table 1 and host throughput, from the modelled engine.

Three parts, all measured/modelled in this run:

1. **Fig. 7/8 sweep**: about 200 generated matrices spanning the paper's
   spread of size and density (uniform random, R-MAT power-law graphs, 2-D/3-D
   Laplacians, banded and block-FEM matrices, the bundled SuiteSparse ones),
   each preprocessed once and modelled for N in {8, ..., 512} on Sextans and
   Sextans-P: GFLOP/s against problem size, peak, geomean, bandwidth
   utilisation and FLOP/J against the paper's numbers.  ``--plots DIR``
   draws Fig. 7(a, b) and Fig. 8(a, b) when matplotlib is installed.
   The model includes the host's kernel launch and every stage's pipeline
   fill / drain, so GFLOP/s rises with problem size and saturates:
   :func:`size_curve` bins the SpMMs by FLOP (Fig. 7(a) and 8(a) as a table)
   and :func:`saturation_flops` finds where the Fig. 8(a) peak curve reaches
   95% of its top (paper: about 8e7 FLOP).
2. **Table 1** on the crystm03-like matrix (crystm03's size and nnz, see
   :func:`tvm_ext.workloads.crystm03_like`): baseline (1 PE, 1 PU, in-order
   CSR stream) → out-of-order scheduling → 8 PUs → 64 PEs, incremental and
   accumulated modelled speedups with the reason for each
   (:func:`tvm_ext.spmm_engine.speedup_breakdown`).
3. **Throughput**: host preprocessing and functional simulation, non-zeros/s.

Run: ``python -m bench.sextans_sweep [--quick] [--plots DIR] [--n-table1 64]``.
"""
from __future__ import annotations

import math
import time
from typing import Callable, Sequence

import numpy as np

from bench.harness import BenchRun, bench_args, collect_rows, suite_argv, geomean, time_python
from tvm_ext.spmm_engine import (
    SEXTANS,
    SEXTANS_P,
    EngineConfig,
    model,
    preprocess,
    simulate,
    speedup_breakdown,
)
from tvm_ext.spmm_engine.perf_model import PAPER_IMPLIED_HBM_EFFICIENCY, a_stream_demand
from tvm_ext.workloads import (
    SEXTANS_N_SWEEP,
    banded,
    block_fem,
    canonical_csr,
    crystm03_like,
    lap2d,
    lap3d,
    load_matrix,
    rmat,
    uniform_random,
)

PAPER = {
    "sextans": {"peak": 181.1, "bw_geomean": 0.0385, "bw_max": 0.1492, "fpj_geomean": 6.63e8},
    "sextans-p": {"peak": 343.6, "bw_geomean": 0.0388, "bw_max": 0.1496, "fpj_geomean": 7.10e8},
}
#: Fig. 8(a): Sextans and Sextans-P reach their peak "at a smallest problem size around 8e7 FLOP".
PAPER_SATURATION_FLOPS = 8e7
PLATFORMS = (SEXTANS, SEXTANS_P)


def matrix_suite(quick: bool) -> list[tuple[str, Callable]]:
    """(name, factory) pairs: about 200 matrices (about 25 with ``quick``)."""
    suite: list[tuple[str, Callable]] = [(f"bundled:{m}", (lambda m=m: load_matrix(m)))
                                         for m in ("LFAT5", "cora", "nasa4704")]
    if quick:
        suite += [(f"rmat({s})", (lambda s=s: rmat(s))) for s in (8, 11)]
        suite += [(f"lap2d({n})", (lambda n=n: lap2d(n))) for n in (8, 100)]
        suite += [(f"lap3d({n})", (lambda n=n: lap3d(n))) for n in (6,)]
        n_uniform, max_rows, max_nnz = 16, 20_000, 300_000
    else:
        suite += [(f"rmat({s},{e})", (lambda s=s, e=e: rmat(s, e, seed=s)))
                  for s in range(6, 19) for e in (4, 16) if not (s == 18 and e == 16)]
        suite += [(f"lap2d({n})", (lambda n=n: lap2d(n))) for n in (3, 10, 32, 100, 316, 700)]
        suite += [(f"lap2d9({n})", (lambda n=n: lap2d(n, 9))) for n in (20, 200, 500)]
        suite += [(f"lap3d({n})", (lambda n=n: lap3d(n))) for n in (4, 10, 22, 46, 64)]
        suite += [(f"lap3d27({n})", (lambda n=n: lap3d(n, 27))) for n in (8, 24, 40)]
        suite += [(f"banded({n},{b})", (lambda n=n, b=b: banded(n, b, b, seed=n)))
                  for n, b in ((50, 2), (400, 10), (3000, 40), (20000, 5), (100000, 20),
                               (200000, 2), (10000, 200), (1000, 300))]
        suite += [(f"block_fem({n},{r})", (lambda n=n, r=r: block_fem(n, r, r, seed=n)))
                  for n, r in ((10, 2), (100, 3), (1000, 3), (5000, 4), (20000, 3), (2000, 6),
                               (40000, 2), (300, 8))]
        n_uniform, max_rows, max_nnz = 200 - len(suite), 500_000, 5_000_000
    rng = np.random.default_rng(2022)
    for i in range(n_uniform):
        m = int(round(10 ** rng.uniform(math.log10(5), math.log10(max_rows))))
        k = max(5, int(round(m * 10 ** rng.uniform(-0.3, 0.3))))
        lo = max(5.97e-6, 10.0 / (m * k))
        hi = min(0.4, max_nnz / (m * k))
        density = 10 ** rng.uniform(math.log10(lo), math.log10(max(lo, hi)))
        suite.append((f"uniform({m}x{k},{density:.2g})",
                      (lambda m=m, k=k, d=density, s=i: uniform_random(m, k, d, seed=s))))
    return suite


def sweep(args) -> tuple[BenchRun, list[dict]]:
    """Model every matrix x N x platform; returns the JSON-lines run and the rows."""
    run = BenchRun("sextans_sweep", out_dir=args.out)
    rows = []
    for name, make in matrix_suite(args.quick):
        for row in model_rows(name, make()):
            run.add(row)
            rows.append(row)
    return run, rows


def model_rows(name: str, A, ns=SEXTANS_N_SWEEP) -> list[dict]:
    """One row per N: problem size (FLOP), then time, GFLOP/s (with and without the
    launch and fill / drain), bandwidth use and FLOP/J on each platform."""
    A = canonical_csr(A, what=name)
    t0 = time.perf_counter()
    prog = preprocess(A)
    pre_s = time.perf_counter() - t0
    M, K = A.shape
    rows = []
    for n in ns:
        row = {"matrix": name, "rows": M, "cols": K, "nnz": A.nnz,
               "density": A.nnz / (M * K), "n": n, "preprocess_s": pre_s,
               "stream_length": prog.stream_length, "bubbles": prog.stats["bubbles"]}
        for plat in PLATFORMS:
            r = model(prog, n, plat)
            key = plat.name.replace("-", "_")
            row.update({"flops": r.flops, f"{key}_s": r.seconds, f"{key}_gflops": r.gflops,
                        f"{key}_steady_gflops": r.flops / r.steady_s / 1e9,
                        f"{key}_kernel_gflops": r.kernel_gflops,
                        f"{key}_bw_util": r.bandwidth_utilization,
                        f"{key}_flop_per_j": r.flop_per_joule})
        rows.append(row)
    return rows


def size_curve(rows: list[dict], key: str = "sextans", per_decade: int = 2) -> list[dict]:
    """GFLOP/s against problem size: SpMMs binned by FLOP (``per_decade`` bins a decade).

    Each bin: its FLOP range, count, geomean and max GFLOP/s (Fig. 7(a)), and
    ``peak_below``: the largest GFLOP/s of any problem up to the bin's top
    (Fig. 8(a)).
    """
    sizes = np.array([r["flops"] for r in rows])
    g = np.array([r[f"{key}_gflops"] for r in rows])
    lo_exp = math.floor(math.log10(sizes.min()) * per_decade)
    hi_exp = math.ceil(math.log10(sizes.max()) * per_decade + 1e-9)
    out, running = [], 0.0
    for e in range(lo_exp, hi_exp):
        lo, hi = 10 ** (e / per_decade), 10 ** ((e + 1) / per_decade)
        sel = (sizes >= lo) & (sizes < hi)
        if not sel.any():
            continue
        running = max(running, float(g[sel].max()))
        out.append({"flop_lo": lo, "flop_hi": hi, "spmms": int(sel.sum()),
                    "geomean_gflops": geomean(g[sel]), "max_gflops": float(g[sel].max()),
                    "peak_below": running})
    return out


def saturation_flops(rows: list[dict], key: str = "sextans", frac: float = 0.95) -> float:
    """Smallest problem size (FLOP) whose Fig. 8(a) running peak is ``frac`` of the overall peak."""
    order = sorted(rows, key=lambda r: r["flops"])
    top = max(r[f"{key}_gflops"] for r in order)
    best = 0.0
    for r in order:
        best = max(best, r[f"{key}_gflops"])
        if best >= frac * top:
            return r["flops"]
    return order[-1]["flops"]


def summarize(rows: list[dict]) -> list[str]:
    """Peak / geomean against the paper, per platform, plus a per-N table."""
    out = []
    per_n = BenchRun("sextans_sweep_by_n", out_dir=None)
    for n in SEXTANS_N_SWEEP:
        sel = [r for r in rows if r["n"] == n]
        per_n.add({"N": n, "sextans_geomean": geomean(r["sextans_gflops"] for r in sel),
                   "sextans_peak": max(r["sextans_gflops"] for r in sel),
                   "sextans_p_geomean": geomean(r["sextans_p_gflops"] for r in sel),
                   "sextans_p_peak": max(r["sextans_p_gflops"] for r in sel)})
    out.append(per_n.markdown(["N", "sextans_geomean", "sextans_peak", "sextans_p_geomean",
                               "sextans_p_peak"],
                              ratios={"P/U280 geomean": ("sextans_p_geomean", "sextans_geomean")}))
    out.append("")
    summary = BenchRun("sextans_sweep_summary", out_dir=None)
    for plat in PLATFORMS:
        key = plat.name.replace("-", "_")
        g = [r[f"{key}_gflops"] for r in rows]
        best = max(rows, key=lambda r: r[f"{key}_gflops"])
        theory = 2 * EngineConfig().pes * EngineConfig().n0 * plat.freq_hz / 1e9
        summary.add({"platform": plat.name, "model_peak": max(g), "paper_peak": PAPER[plat.name]["peak"],
                     "all_PUs_busy": theory, "model_geomean": geomean(g),
                     "bw_util_geomean": geomean(r[f"{key}_bw_util"] for r in rows),
                     "paper_bw_geomean": PAPER[plat.name]["bw_geomean"],
                     "bw_util_max": max(r[f"{key}_bw_util"] for r in rows),
                     "paper_bw_max": PAPER[plat.name]["bw_max"],
                     "flop_per_j_geomean": f"{geomean(r[f'{key}_flop_per_j'] for r in rows):.3g}",
                     "paper_fpj_geomean": f"{PAPER[plat.name]['fpj_geomean']:.3g}",
                     "paper_geomean_implied": PAPER[plat.name]["fpj_geomean"] * plat.power_w / 1e9,
                     "peak_at": f"{best['matrix']} N={best['n']}",
                     "a_stream_demand": a_stream_demand(plat)})
    out.append(summary.markdown(
        ["platform", "model_peak", "paper_peak", "all_PUs_busy", "model_geomean",
         "paper_geomean_implied", "bw_util_geomean",
         "paper_bw_geomean", "bw_util_max", "paper_bw_max", "flop_per_j_geomean",
         "paper_fpj_geomean", "peak_at", "a_stream_demand"],
        ratios={"peak/paper": ("model_peak", "paper_peak")}))
    out.append("a_stream_demand: the fraction of an A channel's nominal HBM bandwidth the 8 PEs of a PEG take "
               "at one non-zero per cycle; the model streams at nominal bandwidth, so A never paces the PEs. "
               "Below that HBM efficiency it would (model(..., hbm_efficiency=e)); "
               f"{PAPER_IMPLIED_HBM_EFFICIENCY} would turn Sextans's steady-state peak into the paper's 181.1.")
    for plat in PLATFORMS:
        key = plat.name.replace("-", "_")
        out.append("")
        out.append(f"GFLOP/s against problem size, {plat.name} (Fig. 7(a) / 8(a); launch "
                   f"{plat.launch_us:g} us, HBM latency {plat.hbm_latency_cycles} cycles, PE depth "
                   f"{plat.pe_latency_cycles} cycles):")
        curve = BenchRun(f"sextans_size_curve_{key}", out_dir=None)
        engine = size_curve(rows, f"{key}_kernel")
        for b, e in zip(size_curve(rows, key), engine):
            curve.add({"FLOP": f"[{b['flop_lo']:.1e}, {b['flop_hi']:.1e})", **b,
                       "engine_geomean": e["geomean_gflops"], "engine_peak_below": e["peak_below"]})
        out.append(curve.markdown(["FLOP", "spmms", "geomean_gflops", "max_gflops", "peak_below",
                                   "engine_geomean", "engine_peak_below"]))
        out.append(f"Fig. 8(a) peak curve reaches 95% of its top at {saturation_flops(rows, key):.2e} FLOP "
                   f"with the host launch, at {saturation_flops(rows, f'{key}_kernel'):.2e} FLOP on the "
                   f"engine alone (fill / drain, no launch); paper: around {PAPER_SATURATION_FLOPS:.0e}")
        out.append(f"geomean GFLOP/s: {geomean(r[f'{key}_gflops'] for r in rows):.1f} with launch, "
                   f"{geomean(r[f'{key}_kernel_gflops'] for r in rows):.1f} engine alone, "
                   f"{geomean(r[f'{key}_steady_gflops'] for r in rows):.1f} steady state (Eqs. 6-10 only)")
    return out


def table1(args) -> list[str]:
    """Table 1 on the crystm03-like matrix (modelled on the Sextans platform)."""
    A = crystm03_like()
    n = args.n_table1
    run = BenchRun("sextans_table1", out_dir=args.out)
    steps = speedup_breakdown(A, n, SEXTANS)
    for s in steps:
        d = s.to_dict()
        d["time_us"] = s.report.seconds * 1e6
        run.add(d)
    return [f"Table 1 breakdown, crystm03-like ({A.shape[0]:,}x{A.shape[1]:,}, nnz {A.nnz:,}: "
            f"crystm03's size and nnz), N={n}, Sextans platform",
            run.markdown(["step", "stream_length", "cycles", "time_us", "gflops", "incremental",
                          "paper_incremental", "accumulated", "paper_accumulated"]),
            *(f"- {s.label}: {s.why}" for s in steps)]


def throughput(args) -> list[str]:
    """Preprocessing and simulation non-zeros per second (best of repeats)."""
    run = BenchRun("sextans_throughput", out_dir=args.out)
    cases = ([("lap2d(300)", lambda: lap2d(300)), ("rmat(14)", lambda: rmat(14))] if args.quick
             else [("lap2d(1000)", lambda: lap2d(1000)), ("rmat(18)", lambda: rmat(18))])
    for name, make in cases:
        A = canonical_csr(make())
        t = time_python(lambda: preprocess(A), repeat=3, min_repeat_s=0.0, warmup=1)
        prog = preprocess(A)
        n = 8
        B = np.random.default_rng(0).uniform(-1, 1, (A.shape[1], n)).astype(np.float32)
        ts = time_python(lambda: simulate(prog, B), repeat=2, min_repeat_s=0.0, warmup=0)
        Af = A.astype(np.float32)
        tp = time_python(lambda: Af @ B, repeat=3, min_repeat_s=0.0)
        run.add({"matrix": name, "nnz": A.nnz, "preprocess_s": t.min, "preprocess_ms": t.min * 1e3,
                 "preprocess_Mnnz_s": A.nnz / t.min / 1e6, "simulate_s": ts.min,
                 "simulate_ms": ts.min * 1e3, "simulate_Mnnz_s": A.nnz / ts.min / 1e6, "N": n,
                 "scipy_spmm_s": tp.min, "scipy_spmm_ms": tp.min * 1e3})
    return ["Host throughput (best of repeats; goal: >= 5 M nnz/s for preprocessing)",
            run.markdown(["matrix", "nnz", "preprocess_ms", "preprocess_Mnnz_s", "simulate_ms",
                          "simulate_Mnnz_s", "N", "scipy_spmm_ms"],
                         ratios={"simulate/scipy": ("simulate_s", "scipy_spmm_s")})]


def plots(rows: list[dict], out_dir: str) -> list[str]:
    """Fig. 7(a, b) and Fig. 8(a, b) as PNG files; returns their paths."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["matplotlib not installed: no plots"]
    from pathlib import Path

    Path(out_dir).mkdir(parents=True, exist_ok=True)
    sizes = np.array([r["flops"] for r in rows])
    order = np.argsort(sizes)
    paths = []
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for plat, colour in zip(PLATFORMS, ("tab:blue", "tab:red")):
        key = plat.name.replace("-", "_")
        g = np.array([r[f"{key}_gflops"] for r in rows])
        t = np.array([r[f"{key}_s"] for r in rows])
        ax[0].scatter(sizes, g, s=4, c=colour, label=f"{plat.name} (model)")
        ax[0].axhline(PAPER[plat.name]["peak"], c=colour, ls="--", lw=0.8)
        ax[1].scatter(sizes, t, s=4, c=colour, label=plat.name)
    for a, yl in zip(ax, ("GFLOP/s", "time (s)")):
        a.set_xscale("log"), a.set_xlabel("problem size (FLOP)"), a.set_ylabel(yl), a.legend()
    ax[1].set_yscale("log")
    fig.suptitle("Fig. 7: modelled throughput and time (dashed: paper peaks)")
    paths.append(str(Path(out_dir) / "sextans_fig7.png"))
    fig.savefig(paths[-1], dpi=120, bbox_inches="tight")
    plt.close(fig)
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    for plat, colour in zip(PLATFORMS, ("tab:blue", "tab:red")):
        key = plat.name.replace("-", "_")
        g = np.array([r[f"{key}_gflops"] for r in rows])
        ax[0].plot(sizes[order], np.maximum.accumulate(g[order]), c=colour, label=plat.name)
        gs = np.sort(g)
        ax[1].plot(gs, np.arange(1, gs.size + 1) / gs.size, c=colour, label=plat.name)
    ax[0].set_xscale("log"), ax[0].set_xlabel("problem size (FLOP)"), ax[0].set_ylabel("peak GFLOP/s")
    ax[1].set_xscale("log"), ax[1].set_xlabel("GFLOP/s"), ax[1].set_ylabel("CDF")
    for a in ax:
        a.legend()
    fig.suptitle("Fig. 8: peak throughput below a problem size, and throughput CDF (model)")
    paths.append(str(Path(out_dir) / "sextans_fig8.png"))
    fig.savefig(paths[-1], dpi=120, bbox_inches="tight")
    plt.close(fig)
    return [f"plots: {', '.join(paths)}"]


def run(quick: bool, *, out: str | None = None, argv: Sequence[str] = ()) -> list[dict]:
    """Run this suite as its command line does; its rows, each with its ``bench`` name.

    ``out``: directory for the JSON lines (None: none written); ``argv``: more options of ``main``.
    """
    return collect_rows(main, suite_argv(quick, out, argv))


def main(argv: Sequence[str] | None = None) -> None:
    args = bench_args(__doc__.splitlines()[0], argv,
                      plots=dict(default=None, metavar="DIR", help="write Fig. 7/8 PNGs here"),
                      n_table1=dict(type=int, default=64, help="N for the Table 1 breakdown"))
    t0 = time.perf_counter()
    run, rows = sweep(args)
    print(run.header())
    print(f"\n## Fig. 7/8 sweep: {len(rows) // len(SEXTANS_N_SWEEP)} matrices x N in "
          f"{list(SEXTANS_N_SWEEP)} = {len(rows)} SpMMs per platform ({time.perf_counter() - t0:.0f} s)\n")
    print("\n".join(summarize(rows)))
    if args.plots:
        print("\n".join(plots(rows, args.plots)))
    print("\n## Table 1\n")
    print("\n".join(table1(args)))
    print("\n## Throughput\n")
    print("\n".join(throughput(args)))
    if run.out_path is not None:
        print(f"\nJSON lines: {run.out_path}")


if __name__ == "__main__":
    main()
