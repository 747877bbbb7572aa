"""GOGETA (Garg et al., seed 000): its quantitative claims against :mod:`schedules.fusion`'s traffic model.

Every "ours" comes from the model in this run: the Fig. 10 sweep
(:func:`~schedules.fusion.fig10_sweep`), Fig. 11 (:func:`~schedules.fusion.fig11_gcn`),
the §6.2.3 NoC count (:func:`~schedules.fusion.fig12_noc`), Table 1
(:func:`~schedules.fusion.derive_table1`) and Alg. 2's patterns against Fig. 7.

>>> rows = gogeta_claims(fig10_kwargs={"workloads": ["nasa4704"], "n_values": [8]})
>>> rows[0].claim
'Fig. 10: geomean DRAM-traffic reduction, GOGETA-map vs SEQ-Flex'
"""
from __future__ import annotations

import math
import re
from typing import Any

from .claim import ClaimResult, compare, holds

__all__ = ["gogeta_claims", "PAPER"]

P = "GOGETA"

#: The paper's numbers, each with where it is printed.
PAPER = {
    "fig10_geomean": 6.7,            # §6.2.1 and abstract: "geomean of 6.7x reduction"
    "fig10_min": 1.18,               # §6.2.1: "ranging from 1.18x to 23.7x"
    "fig10_max": 23.7,
    "ecology1_small_sram": (0.18, 0.30),  # §6.2.1: "Gogeta performs 18 to 30% better than Sequential baselines"
    "ops45_map_links": 15,           # §6.2.3: 2 x N x N x 15 words for GOGETA-map (16 clusters)
    "ai_limit_without": 0.5,         # §4: arithmetic intensity M/2 without inter-operation reuse ...
    "ai_limit_with": 2.5,            # ... and 5M/2 with it

}


def _fig10(rows: list[dict], geo: dict) -> list[ClaimResult]:
    from schedules.fusion.traffic_model import PAPER_IDEAL_SRAM_MB, PAPER_IDEAL_WORKLOADS, ordering_holds

    over = [r for r in rows if r["reduction"] > PAPER["fig10_max"] * 1.01]
    over_text = ", ".join(f"{r['workload']} N={r['N']} {r['sram_mb']} MB" for r in over)
    named = [r for r in rows if r["workload"] in PAPER_IDEAL_WORKLOADS and r["sram_mb"] in PAPER_IDEAL_SRAM_MB]
    top = max(rows, key=lambda r: r["reduction"])
    low = min(rows, key=lambda r: r["reduction"])
    order = sum(ordering_holds(r) for r in rows)
    out = [
        compare(P, "Fig. 10: geomean DRAM-traffic reduction, GOGETA-map vs SEQ-Flex", "§6.2.1, Fig. 10",
                PAPER["fig10_geomean"], geo["geomean"], tolerance=0.10, unit="x",
                reason="the 10 iterations are a window of the while loop, so the loop state (X, R, P, Γ) ends "
                       "in DRAM; " + (f"{len(over)} fitting Barth5 points ({over_text}) reach Ideal here and "
                                      "lift the geomean" if over else "every point is in the paper's range")),
        compare(P, "Fig. 10: smallest reduction", "§6.2.1", PAPER["fig10_min"], geo["min"], unit="x",
                reason=f"{low['workload']} N={low['N']} {low['sram_mb']} MB: nothing fits, only pipelining saves "
                       "traffic, as in the paper"),
    ]
    if named:
        best = max(named, key=lambda r: r["reduction"])
        out.append(compare(P, "Fig. 10: reduction at the points where the paper says GOGETA reaches Ideal, largest",
                           "§6.2.1 (aft02, nasa4704 at 4/16 MB)", PAPER["fig10_max"], best["reduction"],
                           tolerance=0.01, unit="x",
                           reason=f"{best['workload']} N={best['N']}: SEQ-Flex's 14 M x N transfers per "
                                  "iteration over Ideal = A + B + X0 + X + R + P"))
    out += [
        compare(P, "Fig. 10: largest reduction", "§6.2.1", PAPER["fig10_max"], geo["max"], unit="x",
                reason=f"{top['workload']} N={top['N']} {top['sram_mb']} MB fits this model's SRAM, so GOGETA "
                       "costs Ideal; the paper names only aft02 and nasa4704 as reaching Ideal"),
        holds(P, "Fig. 10: SEQ-Flex ≥ SEQ-Overflow ≥ GOGETA-df ≥ Ideal at every point", "§6.2.1 ('clear "
              "downward trend')", "every point", order == len(rows), f"{order}/{len(rows)} points",
              reason="GOGETA-df spills into other clusters' SRAM slices (one pool, §5.3), so it is never above "
                     "Overflow (within 0.01%: word rounding); Overflow stages transposed copies of P and R"),
    ]
    return out


def _ecology1(rows: list[dict]) -> ClaimResult:
    small = min(r["sram_mb"] for r in rows if r["workload"] == "ecology1")
    gains = [min(r["SEQ-Flex"], r["SEQ-Overflow"]) / r["GOGETA-map"] - 1
             for r in rows if r["workload"] == "ecology1" and r["sram_mb"] == small]
    return compare(P, f"ecology1 at {small} MB: GOGETA less traffic than the better sequential baseline",
                   "§6.2.1", tuple(100 * g for g in PAPER["ecology1_small_sram"]), 100 * min(gains), unit="%",
                   ours_text=f"{100 * min(gains):.0f}%-{100 * max(gains):.0f}%",
                   reason="pipelining_with_writeback saves one DRAM read of S and R per iteration; "
                          "the paper's N values are not given (ours: N in the Table 4 sweep)")


def _fits(rows: list[dict]) -> ClaimResult:
    sel = [r for r in rows if r["workload"] in ("aft02", "nasa4704") and r["sram_mb"] in (4, 16)]
    hit = sum(math.isclose(r["GOGETA-map"], r["Ideal"], rel_tol=1e-9) for r in sel)
    return holds(P, "aft02 and nasa4704 at 4/16 MB: GOGETA reaches Ideal", "§6.2.1", "all such points",
                 bool(sel) and hit == len(sel), f"{hit}/{len(sel)} points",
                 reason="every tensor fits the SRAM, so each is read from DRAM once")


def _fig11() -> list[ClaimResult]:
    from schedules.fusion import fig11_gcn

    rows = {r["workload"]: r for r in fig11_gcn()}
    cora, protein = rows["cora"], rows["protein"]
    ideal = lambda r, c: math.isclose(r[c], r["Ideal"], rel_tol=1e-9)  # noqa: E731
    return [
        holds(P, "Fig. 11 cora (1 MB): GOGETA-map reaches Ideal, SEQ-Overflow barely improves", "§6.2.2",
              "yes", ideal(cora, "GOGETA-map") and cora["SEQ-Overflow"] > 0.9 * cora["SEQ-Flex"],
              f"map/Ideal {cora['GOGETA-map'] / cora['Ideal']:.2f}, Overflow/Flex "
              f"{cora['SEQ-Overflow'] / cora['SEQ-Flex']:.2f}",
              reason="pipelining A·X into the weight product keeps the M x N feature tile on chip"),
        holds(P, "Fig. 11 protein (1 MB): SEQ-Overflow and GOGETA-map both reach Ideal", "§6.2.2", "yes",
              ideal(protein, "GOGETA-map") and ideal(protein, "SEQ-Overflow"),
              f"Overflow/Ideal {protein['SEQ-Overflow'] / protein['Ideal']:.2f}",
              reason="protein's tensors fit 1 MB"),
    ]


def _noc(n: int = 8) -> list[ClaimResult]:
    from schedules.fusion import fig12_noc
    from tvm_ext.workloads import GOGETA_TABLE2, GOGETA_TABLE4

    row = fig12_noc(["aft02"], N=n)[0]
    word = GOGETA_TABLE4.bytes_per_word / 1024
    m = GOGETA_TABLE2["aft02"].M
    return [
        compare(P, f"§6.2.3 ops 4-5, GOGETA-map inter-cluster words (aft02, N={n})", "§6.2.3 (2·N·N·15)",
                2 * n * n * PAPER["ops45_map_links"], row["ops45_map_kb"] / word, tolerance=0.01,
                reason="Λ broadcast and Γ reduction over at most 15 links of 16 clusters, as the paper counts"),
        holds(P, f"§6.2.3 ops 4-5, GOGETA-df inter-cluster words (aft02, N={n}) at least sizeof(R)",
              "§6.2.3 (M·N 'even if 1 hop apart')", f"≥ {m * n:,}", row["ops45_df_kb"] / word >= m * n,
              f"{row['ops45_df_kb'] / word:,.0f} ({row['ops45_df_kb'] / word / (m * n):.1f}·M·N)",
              reason=f"the model counts every link R's slices cross between op 4's and op 5's clusters "
                     f"({row['ops45_df_kb'] / word / (m * n):.1f} per word in its placement); the paper's bound is "
                     "for 1 hop"),
    ]


def _table1() -> list[ClaimResult]:
    from schedules.fusion import PAPER_TABLE1, derive_table1

    t1 = derive_table1()
    nn = t1["NN-like"]
    out = [compare(P, "§4: NN-like chain, arithmetic intensity as one rank → ∞, without / with inter-op reuse",
                   "§4 (M/2 and 5M/2, 'by 5x')", PAPER["ai_limit_with"] / PAPER["ai_limit_without"],
                   nn["ai_limit_with"] / nn["ai_limit_without"], tolerance=0.01, unit="x",
                   ours_text=f"{nn['ai_limit_without']:g}·M and {nn['ai_limit_with']:g}·M "
                             f"({nn['ai_limit_with'] / nn['ai_limit_without']:.2f}x)",
                   reason="MACs over words of the chain's einsums, every small rank equal")]
    for chain, d in t1.items():
        paper = PAPER_TABLE1[chain]
        own = d["own_shape"]
        out.append(compare(P, f"Table 1 {chain}: traffic ratio, similar-sized ranks", "Table 1",
                           paper["similar_sized_ratio"], d["similar_sized_ratio"], tolerance=0.01, unit="x",
                           ours_text=f"{d['similar_sized_ratio']:.2f}x (own shapes {own['similar_sized_ratio']:.2f}x)",
                           reason="derived from the chain's einsums; matches with either extent rule"))
        out.append(compare(P, f"Table 1 {chain}: traffic ratio, one dominant rank → ∞", "Table 1, §4",
                           paper["dominant_rank_limit"], own["dominant_rank_limit"], tolerance=0.01, unit="x",
                           ours_text=f"{own['dominant_rank_limit']:.2f}x (fitted extent rule "
                                     f"{d['dominant_rank_limit']:.2f}x)",
                           reason="with every operand at its produced shape; the paper's printed formulas need "
                                  "the fitted 'last operand sets the extent' rule" if chain == "HPC-like" else
                                  "derived from the chain's einsums; both extent rules agree"))
    return out


def _fig7() -> ClaimResult:
    from schedules.fusion import block_cg_dag, plan_fusion
    from schedules.fusion.patterns import PAPER_FIG7
    from tvm_ext.workloads import GOGETA_TABLE2

    w = GOGETA_TABLE2["aft02"]
    dag = block_cg_dag(1, w.M, 8, w.nnz, setup=False)
    marking = plan_fusion(dag).marking
    keys = [((dag.op(s).label, dag.op(d).label, re.sub(r"\d+$", "", s)), m.pattern) for (s, d), m in marking.items()]
    agree = sum(PAPER_FIG7.get(k) == pat for k, pat in keys)
    return holds(P, "Fig. 7: Alg. 2 reuse pattern of every Block-CG edge", "Fig. 7, Alg. 2", "as drawn",
                 agree == len(keys), f"{agree}/{len(keys)} edges agree",
                 reason="Alg. 2's rules on the einsum DAG's ranks reproduce the figure")


def gogeta_claims(*, fig10_kwargs: dict[str, Any] | None = None) -> list[ClaimResult]:
    """GOGETA's checkable claims; ``fig10_kwargs`` go to :func:`~schedules.fusion.fig10_sweep` (default: the
    paper's 36-point sweep)."""
    from schedules.fusion import fig10_sweep, geomean_reduction

    rows = fig10_sweep(**(fig10_kwargs or {}))
    out = _fig10(rows, geomean_reduction(rows))
    if any(r["workload"] == "ecology1" for r in rows):
        out.append(_ecology1(rows))
    if any(r["workload"] in ("aft02", "nasa4704") and r["sram_mb"] in (4, 16) for r in rows):
        out.append(_fits(rows))
    return out + _fig11() + _noc() + _table1() + [_fig7()]
