"""Demo: GOGETA on Block CG - Alg. 2 markings, Alg. 3 loop orders, fusion groups,
and the DRAM-traffic model's geomean next to the paper's 6.7x."""
from __future__ import annotations

import re

from tvm_ext.markdown import table

TITLE = "GOGETA model: Block CG reuse patterns, loop orders and DRAM-traffic geomean"


def _family(name: str) -> str:
    return re.sub(r"\d+$", "", name)


def run():
    from schedules.fusion import (
        PAPER_GEOMEAN,
        block_cg_dag,
        fig10_sweep,
        geomean_reduction,
        plan_fusion,
    )
    from schedules.fusion.patterns import PAPER_FIG7
    from tvm_ext.workloads import GOGETA_TABLE2

    w = GOGETA_TABLE2["aft02"]
    dag = block_cg_dag(1, w.M, 8, w.nnz, setup=False)
    plan = plan_fusion(dag)
    rows, agree = [], 0
    for (s, d), m in plan.marking.items():
        key = (dag.op(s).label, dag.op(d).label, _family(s))
        paper = PAPER_FIG7.get(key, "-")
        agree += paper == m.pattern
        rows.append([f"{s} -> {d}", f"{key[0]} -> {key[1]}", m.pattern, paper])
    lines = [f"Block CG, one iteration, aft02 shapes (M={w.M:,}, nnz={w.nnz:,}, N=8): "
             f"Alg. 2 vs the paper's Fig. 7 agree on {agree} of {len(rows)} edges",
             table(["edge", "Alg. 1 lines", "Alg. 2 (ours)", "Fig. 7 (paper)"], rows), ""]
    lo = plan.loop_orders
    orows = [[op.name, op.label, plan.analysis.dominance[op.name].kind, ",".join(lo[op.name] or ("-",)),
              lo.notation(op.name), lo.fig8(op.name), "MKN" if op.label in ("3", "4") else ""]
             for op in dag.ops]
    lines += [f"Alg. 3 loop orders: epsilon {lo.epsilon}, swizzle penalty {lo.swizzle_penalty} (paper: 0), "
              f"{len(lo.pipelined)} pipelined edges, {len(lo.broken)} broken",
              table(["op", "line", "dominance", "loop order", "GEMM letters", "Fig. 8 letters",
                     "paper (Λ consumers)"], orows), ""]
    lines.append("fusion groups: " + "  ".join("{" + ", ".join(g.ops) + "}" for g in plan.groups))
    rows10 = fig10_sweep()
    geo = geomean_reduction(rows10)
    lines += ["", f"DRAM traffic, Fig. 10 sweep ({geo['points']} points): GOGETA-map vs SEQ-Flex geomean "
              f"{geo['geomean']:.2f}x (range {geo['min']:.2f}x-{geo['max']:.1f}x); paper {PAPER_GEOMEAN}x "
              "(1.18x-23.7x).  `tvm-ext fusion report` explains the difference."]
    data = {"fig7_agreement": [agree, len(rows)], "swizzle_penalty": lo.swizzle_penalty,
            "groups": [list(g.ops) for g in plan.groups], "geomean_reduction": geo["geomean"],
            "paper_geomean": PAPER_GEOMEAN}
    return data, lines
