"""GOGETA §6 report: the Fig. 10/11/12 tables, the geomean against the paper,
Table 1, the model's assumptions, and plots when matplotlib is installed.

>>> data, text = fusion_report(sram_mb=(16,), n_values=(8,), workloads=("nasa4704",), gcn=False, noc=False)
>>> sorted(k for k in data if k in ("geomean_reduction", "table1"))
['geomean_reduction', 'table1']
>>> "Table 1" in text
True
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from schedules.fusion.table1 import derive_table1
from schedules.fusion.traffic_model import (
    ASSUMPTIONS,
    CG_WORKLOADS,
    CONFIGS,
    GCN_WORKLOADS,
    PAPER_GEOMEAN,
    PAPER_IDEAL_SRAM_MB,
    PAPER_IDEAL_WORKLOADS,
    PAPER_RANGE,
    fig10_sweep,
    fig11_gcn,
    fig12_noc,
    geomean_reduction,
)
from tvm_ext.errors import ConfigError
from tvm_ext.markdown import table
from tvm_ext.workloads import GOGETA_TABLE4

__all__ = ["fusion_report", "render_fig10", "render_fig11", "render_fig12", "render_table1",
           "paper_differences", "write_plots"]


def render_fig10(rows: Sequence[dict]) -> str:
    """Markdown table of :func:`~.traffic_model.fig10_sweep` rows (MB)."""
    return table(["workload", "N", "SRAM MB", *[f"{c} MB" for c in CONFIGS], "SEQ-Flex / GOGETA-map"],
                 [[r["workload"], r["N"], r["sram_mb"], *[r[c] for c in CONFIGS], r["reduction"]] for r in rows])


def render_fig11(rows: Sequence[dict]) -> str:
    return table(["workload", "SRAM MB", *[f"{c} MB" for c in CONFIGS], "SEQ-Flex / GOGETA-map"],
                 [[r["workload"], r["sram_mb"], *[r[c] for c in CONFIGS], r["reduction"]] for r in rows])


def render_fig12(rows: Sequence[dict]) -> str:
    return table(["workload", "N", "GOGETA-df KB", "GOGETA-map KB", "df / map", "ops 4-5 df KB",
                  "ops 4-5 map KB"],
                 [[r["workload"], r["N"], r["df_kb"], r["map_kb"], r["df_over_map"], r["ops45_df_kb"],
                   r["ops45_map_kb"]] for r in rows])


def render_table1(t1: dict) -> str:
    rows = []
    for name, row in t1.items():
        p = row["paper"]
        rows.append([name, row["macs"], row["without_reuse"], row["with_reuse"],
                     f"{row['similar_sized_ratio']:.2f}x (paper {p['similar_sized_ratio']}x)",
                     f"{row['dominant_rank_limit']:.1f}x (paper {p['dominant_rank_limit']:.0f}x)",
                     "yes, by the fitted extent rule" if row["matches_paper"] else "NO"])
    for name, row in t1.items():
        own = row.get("own_shape")
        if own:
            rows.append([f"{name}, own shapes", "-", own["without_reuse"], own["with_reuse"],
                         f"{own['similar_sized_ratio']:.2f}x", f"{own['dominant_rank_limit']:.1f}x",
                         "no rule fitted"])
    note = ("Rows without 'own shapes' use an index-extent rule chosen so that the paper's printed formulas "
            "come out (an index takes the extent of the last operand holding it); the HPC-like chain contracts "
            "indices of different extents, so its formulas depend on that rule.  'own shapes' counts every "
            "tensor at the shape it was produced with, as the DRAM-traffic model does.")
    return table(["chain", "MACs", "accesses without inter-op reuse", "accesses with inter-op reuse",
                  "AI gain, similar sizes", "AI gain, N -> inf", "formulas = paper"], rows) + "\n" + note


def paper_differences(fig10: Sequence[dict], geo: dict) -> list[str]:
    """Where the model's numbers differ from the paper's, and why (computed from this run)."""
    out = []
    lo, hi = PAPER_RANGE
    out.append(f"Geomean {geo['geomean']:.2f}x over {geo['points']} points vs the paper's {PAPER_GEOMEAN}x; "
               f"range {geo['min']:.2f}x-{geo['max']:.1f}x vs {lo}x-{hi}x.")
    named = [r for r in fig10 if r["workload"] in PAPER_IDEAL_WORKLOADS and r["sram_mb"] in PAPER_IDEAL_SRAM_MB]
    if named:
        top = max(named, key=lambda r: r["reduction"])
        solution = fig10_sweep([top["workload"]], [top["N"]], [top["sram_mb"]],
                               live_out="solution")[0]["reduction"]
        out.append(f"The high end: at the points the paper says reach Ideal ({', '.join(PAPER_IDEAL_WORKLOADS)} at "
                   f"{'/'.join(map(str, PAPER_IDEAL_SRAM_MB))} MB) the largest reduction is {top['reduction']:.2f}x "
                   f"({top['workload']} N={top['N']}) against the paper's {hi}x, because the 10 iterations are "
                   "a window of the while loop: its state (X, R, P, Gamma) ends in DRAM, so Ideal is "
                   "A + B + X0 + X + R + P.  "
                   f"Counting X alone as the output (live_out='solution') gives {solution:.1f}x there.")
    over = [r for r in fig10 if r["reduction"] > hi * 1.01]
    if over:
        out.append("Above the paper's maximum: " + ", ".join(
            f"{r['workload']} N={r['N']} {r['sram_mb']} MB ({r['reduction']:.1f}x)" for r in over)
            + ": every tensor fits this model's SRAM there, so GOGETA costs Ideal; the paper names only "
              "aft02 and nasa4704 as reaching Ideal, and these points lift the geomean above 6.7x.")
    low = min(fig10, key=lambda r: r["reduction"])
    out.append(f"The low end ({low['workload']} N={low['N']} {low['sram_mb']} MB: {low['reduction']:.2f}x) is "
               "where nothing fits and only fusion saves traffic: S streams into Delta and R into Gamma "
               "(each still written back for its later reader), and P is read once for S = A*P and "
               "Delta = P'S.  The paper reports 18-30% for ecology1 at small SRAM.")
    worst = max(fig10, key=lambda r: r["SEQ-Overflow"] / r["GOGETA-df"])
    out.append("SEQ-Overflow vs GOGETA: SEQ-Overflow stages a transposed copy of P and R in free SRAM for "
               "Delta = P'S and Gamma = R'R; where the copy fits it costs no DRAM words (so the two are equal "
               "where everything fits, where the paper draws GOGETA slightly lower); where it does not, it "
               f"spills, e.g. {worst['workload']} N={worst['N']} {worst['sram_mb']} MB: SEQ-Overflow "
               f"{worst['SEQ-Overflow'] / worst['GOGETA-df']:.1f}x GOGETA-df's traffic.")
    out.append("GOGETA-df and GOGETA-map: the paper separates them by NoC traffic (Fig. 12); in this model df "
               "writes each op's output into its own clusters' SRAM slices first and spills into the others, "
               "so the two differ in NoC traffic and by rounding in DRAM traffic.")
    return out


def write_plots(fig10: Sequence[dict], fig11: Sequence[dict], fig12: Sequence[dict],
                out_dir: str | Path) -> list[str]:
    """Write fig10.png, fig11.png, fig12.png (bar charts); [] without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create plot directory {str(out_dir)!r}: {e}") from e
    paths = []
    if fig10:
        wls = list(dict.fromkeys(r["workload"] for r in fig10))
        srams = list(dict.fromkeys(r["sram_mb"] for r in fig10))
        fig, axes = plt.subplots(len(wls), len(srams), figsize=(4 * len(srams), 3 * len(wls)), squeeze=False)
        for i, w in enumerate(wls):
            for j, s in enumerate(srams):
                ax = axes[i][j]
                rows = [r for r in fig10 if r["workload"] == w and r["sram_mb"] == s]
                ns = [r["N"] for r in rows]
                width = 0.8 / len(CONFIGS)
                for k, c in enumerate(CONFIGS):
                    ax.bar([x + k * width for x in range(len(ns))], [r[c] for r in rows], width, label=c)
                ax.set_xticks([x + 0.4 - width / 2 for x in range(len(ns))], [f"N={n}" for n in ns])
                ax.set_title(f"{w}, {s} MB SRAM", fontsize=9)
                ax.set_ylabel("DRAM MB", fontsize=8)
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        paths.append(str(out_dir / "fig10.png"))
        fig.savefig(paths[-1], dpi=90)
        plt.close(fig)
    for name, rows, cols, ylabel in (("fig11", fig11, CONFIGS, "DRAM MB"),
                                     ("fig12", fig12, ("df_kb", "map_kb"), "inter-cluster link traversals, KB")):
        if not rows:
            continue
        fig, ax = plt.subplots(figsize=(7, 3.5))
        width = 0.8 / len(cols)
        for k, c in enumerate(cols):
            ax.bar([x + k * width for x in range(len(rows))], [r[c] for r in rows], width, label=c)
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(rows))], [r["workload"] for r in rows])
        ax.set_ylabel(ylabel)
        if name == "fig12":
            ax.set_yscale("log")
        ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(str(out_dir / f"{name}.png"))
        fig.savefig(paths[-1], dpi=90)
        plt.close(fig)
    return paths


def fusion_report(sram_mb: Iterable[float] = GOGETA_TABLE4.sram_sweep_mb,
                  n_values: Iterable[int] = GOGETA_TABLE4.n_sweep,
                  workloads: Iterable[str] = CG_WORKLOADS, *, iters: int = GOGETA_TABLE4.cg_iterations,
                  gcn: bool = True, noc: bool = True, plots_dir: str | Path | None = None) -> tuple[dict, str]:
    """Run the model over Table 2 x Table 4 and render everything.

    ``data["geomean_reduction"]`` is GOGETA-map vs SEQ-Flex over the Fig. 10
    sweep; ``data["table1"]`` the derived Table 1.
    """
    sram_mb = list(sram_mb)
    n_values = list(n_values)
    if not sram_mb or not n_values:
        raise ConfigError("fusion report needs at least one SRAM size and one N")
    fig10 = fig10_sweep(workloads, n_values, sram_mb, iters)
    fig11 = fig11_gcn(GCN_WORKLOADS, (1,)) if gcn else []
    fig12 = fig12_noc(workloads, 8, iters) if noc else []
    geo = geomean_reduction(fig10)
    by_config = {c: geomean_reduction(fig10, c)["geomean"] for c in CONFIGS if c != "SEQ-Flex"}
    t1 = derive_table1()
    diffs = paper_differences(fig10, geo)
    plots = write_plots(fig10, fig11, fig12, plots_dir) if plots_dir is not None else []
    data = {
        "geomean_reduction": geo["geomean"],
        "geomean_range": [geo["min"], geo["max"]],
        "geomean_points": geo["points"],
        "geomean_by_config": by_config,
        "paper_geomean": PAPER_GEOMEAN,
        "paper_range": list(PAPER_RANGE),
        "fig10": fig10,
        "fig11": fig11,
        "fig12": fig12,
        "table1": t1,
        "assumptions": list(ASSUMPTIONS),
        "differences_from_paper": diffs,
        "plots": plots,
    }
    lines = [f"== Fig. 10: Block CG DRAM traffic (MB), {iters} iterations, Table 4 architecture ==",
             render_fig10(fig10), "",
             f"geomean reduction GOGETA-map vs SEQ-Flex: {geo['geomean']:.2f}x "
             f"(range {geo['min']:.2f}x-{geo['max']:.1f}x, {geo['points']} points); "
             f"paper: {PAPER_GEOMEAN}x ({PAPER_RANGE[0]}x-{PAPER_RANGE[1]}x)",
             "geomean vs SEQ-Flex per configuration: "
             + ", ".join(f"{c} {g:.2f}x" for c, g in by_config.items()), ""]
    if fig11:
        lines += ["== Fig. 11: GCN layer DRAM traffic (MB), 1 MB SRAM ==", render_fig11(fig11), ""]
    if fig12:
        lines += ["== Fig. 12: inter-cluster NoC link traversals (KB), N=8 ==", render_fig12(fig12), ""]
    lines += ["== Table 1: AI_best with and without inter-operation reuse ==", render_table1(t1), ""]
    lines += ["== Modelling assumptions =="] + [f"{i}. {a}" for i, a in enumerate(ASSUMPTIONS, 1)] + [""]
    lines += ["== Differences from the paper =="] + [f"- {d}" for d in diffs]
    if plots_dir is not None:
        lines += ["", f"plots: {', '.join(plots)}" if plots else "plots: matplotlib is not installed"]
    return data, "\n".join(lines)
