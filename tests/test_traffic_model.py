"""schedules.fusion: SRAM organisation (§5.3), tiling/NoC (§5.2, Fig. 12), the DRAM-traffic model
(Table 3, Figs. 10-11) and the ``tvm-ext fusion report`` CLI."""
from __future__ import annotations

import json
import math

import pytest

from schedules.fusion import (
    CONFIGS,
    TrafficArch,
    block_cg_dag,
    chain_formulas,
    dram_traffic,
    fig10_sweep,
    fig11_gcn,
    geomean_reduction,
    hpc_like_chain,
    nn_like_chain,
    noc_traversals,
    plan_fusion,
    split_dominant_rank,
    traffic_table,
    workload_dag,
)
from schedules.fusion.builders import HPC_LIKE_CHAIN, NN_LIKE_CHAIN
from schedules.fusion.sram import SramModel, split_words
from schedules.fusion.tiling import df_partitions, hops, mesh_shape, tree_links
from schedules.fusion.traffic_model import (
    ASSUMPTIONS,
    PAPER_GEOMEAN,
    PAPER_RANGE,
    cg_traffic_dag,
    fit_ratio_floor,
    op_extra_words,
    seq_loop_orders,
    seq_steps,
    simulate_steps,
    transposed_operands,
)
from tvm_ext.cli.main import main
from tvm_ext.errors import ConfigError, InputError
from tvm_ext.workloads import GOGETA_TABLE2

# ----------------------------------------------------------------------------- SRAM (§5.3)


def test_fifo_write_spills_the_tail_and_never_replaces():
    s = SramModel(100, "fifo")
    s.key_of = {"X": (9, -1), "R": (2, -3)}.get
    assert s.write("X", 80) == 0 and s.write("R", 50) == 30  # no room: R's tail goes to DRAM
    assert (s.resident("X"), s.resident("R"), s.dram_writes) == (80, 20, 30)
    assert s.read("R", 50, install=False) == 30 and s.dram_reads == 30


def test_reuse_policy_evicts_the_later_reused_tail_and_pays_for_dirty_words():
    s = SramModel(100, "reuse")
    s.key_of = {"X": (9, -1), "R": (2, -3), "A": (5, -4)}.get
    s.write("X", 80)
    s.write("R", 50)  # Fig. 9 right: the tail of X makes room for R
    assert (s.resident("X"), s.resident("R"), s.dram_writes) == (50, 50, 30)
    s.free("R")
    s.read("A", 70, install=True)  # clean install: evicts X (later reuse) again
    assert s.resident("A") == 70 and s.resident("X") == 30 and s.dram_writes == 50 and s.dram_reads == 70
    s.key_of = {"X": (9, -1), "R": (1, -1), "A": (20, -1)}.get
    s.write("R", 60)  # now A is the farthest: its words are clean, so evicting them is free
    assert s.resident("R") == 60 and s.resident("A") == 10 and s.dram_writes == 50
    s.free("X", flush=True)
    assert s.dram_writes == 80


def test_sram_model_validates_and_splits():
    assert split_words(10, [1, 1, 1]) == [4, 3, 3] and sum(split_words(7, [3, 0, 1])) == 7
    for bad in (lambda: SramModel(10, "lru"), lambda: SramModel(-1), lambda: SramModel(10, slices=0),
                lambda: split_words(5, [0, 0])):
        with pytest.raises(ConfigError):
            bad()


# ----------------------------------------------------------------------------- tiling / NoC (§5.2)


def test_mesh_helpers():
    assert mesh_shape(16) == (4, 4) and mesh_shape(8) == (2, 4) and mesh_shape(7) == (1, 7)
    assert tree_links(0, range(16), (4, 4)) == 15 and tree_links(5, [5], (4, 4)) == 0
    assert hops(0, 15, (4, 4)) == 3 and hops(0, 3, (4, 4)) == 3  # snake order: 15 is at (row 3, col 0)
    assert split_dominant_rank(10, 4) == [3, 3, 2, 2] and sum(split_dominant_rank(8184, 16)) == 8184
    with pytest.raises(ConfigError):
        split_dominant_rank(0, 4)


@pytest.mark.parametrize("N", [1, 8, 16])
def test_noc_map_matches_section_623_and_df_moves_whole_tensors(N):
    w = GOGETA_TABLE2["aft02"]
    iters = 3
    plan = plan_fusion(block_cg_dag(iters, w.M, N, w.nnz))
    df, mp = noc_traversals(plan, "df"), noc_traversals(plan, "map")
    # §6.2.3: ops 4-5 under GOGETA-map = sizeof(Λ)·15 + sizeof(Γ)·15 = 2·N·N·15
    pair = sum(wd for kind, src, dsts, wd in mp.records
               if (kind == "broadcast" and src == "Lambda2") or (kind == "reduce" and src == "Gamma2"))
    assert pair == 2 * N * N * 15
    # whole DAG under map: Γ0 reduce + per iteration Δ, Γ reduce and Λ, Φ broadcast
    assert mp.total_words == (1 + 4 * iters) * 15 * N * N and mp.by_kind.get("slice_transfer", 0) == 0
    # df ships R from op 4's clusters to op 5's: at least M x N words per iteration
    r_to_gamma = sum(wd for kind, src, dsts, wd in df.records if src == "R2" and "Gamma2" in dsts)
    assert r_to_gamma >= w.M * N
    assert df.total_words > 10 * mp.total_words
    parts = df_partitions(plan, plan.group_of("R2"), 16)
    assert set().union(*parts.values()) == set(range(16))
    assert all(not (set(a) & set(b)) for a in parts.values() for b in parts.values() if a is not b)
    with pytest.raises(ConfigError):
        noc_traversals(plan, "ring")


# ----------------------------------------------------------------------------- DRAM model (Table 3)


def _cg_counts(w, N, iters):
    A, V, s = 2 * w.nnz + w.M, w.M * N, N * N
    seq_flex = (A + 3 * V) + (V + s) + iters * (A + 14 * V + 11 * s) - V
    # GOGETA groups: {R0,G0}, then per iteration {S,D} {Λ} {X,R,Γ} {Φ} {P}; the last P is dead, and in
    # iteration 1 the group {X,R,Γ} reads P0 = R0 once for both X += P0·Λ and R = R0 - S·Λ
    gogeta_zero = (A + 3 * V + s) + iters * (A + 11 * V + 10 * s) - V - V
    ideal = A + 3 * V
    return seq_flex, gogeta_zero, ideal


@pytest.mark.parametrize("name, N", [("aft02", 8), ("nasa4704", 16), ("Barth5", 1)])
def test_cg_traffic_matches_hand_counts(name, N):
    w = GOGETA_TABLE2[name]
    dag = block_cg_dag(4, w.M, N, w.nnz)
    seq_flex, gogeta_zero, ideal = _cg_counts(w, N, 4)
    arch0 = TrafficArch.table4(0)
    assert dram_traffic(dag, "SEQ-Flex", TrafficArch.table4(16)).words == seq_flex
    assert dram_traffic(dag, "SEQ-Overflow", arch0).words == seq_flex  # no SRAM: the same as SEQ-Flex
    assert dram_traffic(dag, "GOGETA-map", arch0).words == gogeta_zero
    assert dram_traffic(dag, "GOGETA-df", arch0).words == gogeta_zero
    assert dram_traffic(dag, "Ideal", arch0).words == ideal
    big = TrafficArch.table4(10_000)  # everything fits: both SRAM policies reach Ideal
    for c in ("SEQ-Overflow", "GOGETA-df", "GOGETA-map"):
        assert dram_traffic(dag, c, big).words == ideal, c


@pytest.fixture(scope="module")
def sweep():
    return fig10_sweep()


def test_fig10_sweep_ordering_ideal_gogeta_seqflex(sweep):
    assert len(sweep) == 4 * 3 * 3
    for r in sweep:
        assert r["Ideal"] <= r["GOGETA-map"] <= r["SEQ-Flex"], r
        assert r["Ideal"] <= r["GOGETA-df"] <= r["SEQ-Flex"], r
        assert r["Ideal"] <= r["SEQ-Overflow"] <= r["SEQ-Flex"], r
        assert r["GOGETA-map"] <= r["SEQ-Overflow"] * (1 + 1e-12), r
        assert r["GOGETA-df"] <= r["SEQ-Overflow"] * (1 + 1e-4), r  # one SRAM pool (§5.3); 16 integer slices
        assert r["SEQ-Flex"] >= r["SEQ-Overflow"] >= r["GOGETA-df"] * (1 - 1e-4) >= r["Ideal"] * (1 - 1e-4), r
        assert r["GOGETA-df"] == pytest.approx(r["GOGETA-map"], rel=0.01), r
        if r["SEQ-Overflow"] > 1.01 * r["Ideal"]:  # §6.2.1's "clear downward trend" where not all fits
            assert r["SEQ-Flex"] > r["SEQ-Overflow"] and r["GOGETA-map"] < r["SEQ-Overflow"], r
    # GOGETA-map hits Ideal when the tensors fit (aft02 / nasa4704 at 4 and 16 MB, §6.2.1)
    for r in sweep:
        if r["workload"] in ("aft02", "nasa4704") and r["sram_mb"] >= 4:
            assert r["GOGETA-map"] == pytest.approx(r["Ideal"])


def test_fig10_ecology1_small_sram_gain_is_pipelining_only(sweep):
    rows = [r for r in sweep if r["workload"] == "ecology1" and r["sram_mb"] == 1]
    for r in rows:  # paper: SEQ-Flex ~ SEQ-Overflow, GOGETA 18-30% better
        assert r["SEQ-Overflow"] / r["SEQ-Flex"] > 0.98
        assert 0.10 < 1 - r["GOGETA-map"] / r["SEQ-Flex"] < 0.35


def test_traffic_never_grows_with_sram():
    sizes = [0, 0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 8, 16, 64]
    for name, N in (("aft02", 8), ("aft02", 16), ("nasa4704", 16), ("Barth5", 16), ("Barth5", 8)):
        dag = workload_dag(name, N, iters=10)
        plan = plan_fusion(dag)
        prev = None
        for mb in sizes:
            cur = {c: r.words for c, r in traffic_table(dag, TrafficArch.table4(mb), plan).items()}
            if prev:
                for c in CONFIGS:
                    assert cur[c] <= prev[c], (name, N, mb, c)
            prev = cur


#: Fig. 10 tolerances.  The paper prints only the geomean (6.7x) and the range (1.18x-23.7x) of its 36 points,
#: so the geomean is held to 10% (ours 7.08x: Barth5's three fitting N=8/16 points, which the paper does not
#: name as reaching Ideal, lift it), the low end to 0.02x, and the high end to 1% at the points the paper says
#: reach Ideal (aft02 and nasa4704 at 4/16 MB); Barth5's fitting points may exceed it by at most 15% (27.0x).
GEOMEAN_TOL, MAX_TOL, BARTH5_MAX = 0.10, 0.01, 1.15


def test_geomean_reduction_against_the_paper(sweep):
    g = geomean_reduction(sweep)
    assert g["points"] == 36 and g["min"] <= g["geomean"] <= g["max"]
    assert g["geomean"] == pytest.approx(PAPER_GEOMEAN, rel=GEOMEAN_TOL)
    assert g["min"] == pytest.approx(PAPER_RANGE[0], abs=0.02)  # ecology1, N=1, 1 MB: the paper's low end
    named = [r for r in sweep if r["workload"] in ("aft02", "nasa4704") and r["sram_mb"] >= 4]
    assert max(r["reduction"] for r in named) == pytest.approx(PAPER_RANGE[1], rel=MAX_TOL)  # aft02 N=16
    over = [r for r in sweep if r["reduction"] > PAPER_RANGE[1] * (1 + MAX_TOL)]
    assert {r["workload"] for r in over} <= {"Barth5"} and g["max"] <= PAPER_RANGE[1] * BARTH5_MAX
    assert all(r["GOGETA-map"] == pytest.approx(r["Ideal"]) for r in over)  # the exception: fits in our SRAM
    with pytest.raises(InputError):
        geomean_reduction([])


def test_fig10_live_out_is_the_loop_state():
    """The window's loop state (X, R, P, Γ) ends in DRAM; with X alone the maximum is far above the paper's."""
    dag = cg_traffic_dag("aft02", 16, iters=10)
    assert dag.outputs == ["X10", "R10", "P10", "Gamma10"]
    w = GOGETA_TABLE2["aft02"]
    a, v = 2 * w.nnz + w.M, w.M * 16
    arch = TrafficArch.table4(4)
    assert dram_traffic(dag, "Ideal", arch).words == a + 5 * v + 16 * 16
    assert dram_traffic(dag, "GOGETA-map", arch).words == a + 5 * v + 16 * 16  # everything fits
    solution = fig10_sweep(["aft02"], [16], [4], live_out="solution")[0]
    assert solution["reduction"] > 1.3 * PAPER_RANGE[1]
    w = GOGETA_TABLE2["Barth5"]
    assert fit_ratio_floor(w.M, 16, w.nnz, live_out="solution") > PAPER_RANGE[1] > fit_ratio_floor(w.M, 16, w.nnz)
    with pytest.raises(ConfigError):
        cg_traffic_dag("aft02", 8, live_out="everything")
    with pytest.raises(InputError):
        cg_traffic_dag("cora", 8)


def test_seq_overflow_stages_transposes_gogeta_reads_the_same_tensor():
    """§6.2.1: GOGETA beats SEQ-Overflow "due to the ability to use the same tensor for transpose"."""
    dag = block_cg_dag(1, 1000, 4, 5000)
    assert {op.name: transposed_operands(dag, op) for op in dag.ops if transposed_operands(dag, op)} == {
        "Gamma0": ("R0",), "Delta1": ("R0",), "Gamma1": ("R1",)}
    assert transposed_operands(dag, "S1") == () and transposed_operands(dag, "X1") == ()
    # Barth5, N=16, 4 MB: the resident heads of P and R leave no room for their transposed copies
    r = fig10_sweep(["Barth5"], [16], [4])[0]
    assert r["SEQ-Overflow"] > 3 * r["GOGETA-df"]
    w = GOGETA_TABLE2["Barth5"]
    dag = cg_traffic_dag("Barth5", 16)
    plain = simulate_steps(dag, seq_steps(dag), TrafficArch.table4(4).sram_words, "fifo", seq_loop_orders(dag))
    staged = simulate_steps(dag, seq_steps(dag), TrafficArch.table4(4).sram_words, "fifo", seq_loop_orders(dag),
                            transpose_copies=True)
    assert sum(staged) > sum(plain) and sum(staged) <= dram_traffic(dag, "SEQ-Flex", TrafficArch.table4(4)).words
    assert w.M * 16 <= (sum(staged) - sum(plain)) / 10  # at least one M x N copy spills per iteration


def test_fig11_gcn_like_the_paper():
    rows = {r["workload"]: r for r in fig11_gcn()}
    cora, protein = rows["cora"], rows["protein"]
    assert cora["GOGETA-map"] == pytest.approx(cora["Ideal"])  # pipelining Z hits Ideal
    assert cora["SEQ-Overflow"] > 2 * cora["Ideal"] and cora["SEQ-Overflow"] < cora["SEQ-Flex"]  # marginal
    assert protein["SEQ-Overflow"] == pytest.approx(protein["Ideal"])  # fits in 1 MB
    assert protein["GOGETA-map"] == pytest.approx(protein["Ideal"])


def test_table1_chains_through_the_traffic_model():
    sizes = dict(M=64, K=32, N=16, O=48, P=24, Q=40, R=8)
    dag = nn_like_chain(sizes)
    f = chain_formulas(NN_LIKE_CHAIN)
    arch = TrafficArch.table4(1)
    assert dram_traffic(dag, "SEQ-Flex", arch).words == f["without_reuse"].evaluate(sizes)
    assert dram_traffic(dag, "Ideal", arch).words == f["with_reuse"].evaluate(sizes)
    c = 48
    hpc = hpc_like_chain(dict(M=c, K=c, N=c, O=c))
    fh = chain_formulas(HPC_LIKE_CHAIN)
    ones = {s: c for s in "MKNO"}
    assert dram_traffic(hpc, "SEQ-Flex", arch).words == fh["without_reuse"].evaluate(ones) == 15 * c * c
    assert dram_traffic(hpc, "Ideal", arch).words == 4 * c * c
    assert dram_traffic(hpc, "GOGETA-map", TrafficArch.table4(16)).words == 4 * c * c


def test_ops_that_do_not_fit_pay_tiled_rereads():
    dag = nn_like_chain(dict(M=64, K=64, N=64, O=64, P=64, Q=64, R=64))
    tiny = TrafficArch(sram_bytes=0, rf_bytes_per_pe=0)
    assert op_extra_words(dag, "Z", 0) > 0 and op_extra_words(dag, "Z", 64 * 64) == 0
    flex = dram_traffic(dag, "SEQ-Flex", tiny)
    assert flex.intra_op_words > 0
    assert flex.words > dram_traffic(dag, "SEQ-Flex", TrafficArch.table4(1)).words
    assert dram_traffic(dag, "Ideal", tiny).intra_op_words == 0


def test_traffic_arch_and_config_validation():
    assert TrafficArch.table4(4).sram_words == 4 * 2**20 / 4 and TrafficArch.table4(4).rf_words == 2 * 2**20
    for bad in (-1, math.nan, math.inf, "4", True):
        with pytest.raises(ConfigError):
            TrafficArch.table4(bad)
    with pytest.raises(ConfigError):
        TrafficArch(sram_bytes=1, clusters=0)
    with pytest.raises(ConfigError):
        dram_traffic(block_cg_dag(1, 100, 2, 300), "SEQ-Magic", TrafficArch.table4(1))
    with pytest.raises(InputError):
        fig10_sweep(workloads=["cora"])
    assert len(ASSUMPTIONS) >= 10 and all(isinstance(a, str) and a for a in ASSUMPTIONS)


# ----------------------------------------------------------------------------- CLI


def test_cli_fusion_report_json(capsys):
    code = main(["fusion", "report", "--json", "--sram", "4"])
    out, _ = capsys.readouterr()
    assert code == 0
    data = json.loads(out)
    assert {"geomean_reduction", "table1", "fig10", "fig11", "fig12", "assumptions"} <= set(data)
    rows = data["fig10"]
    assert {r["sram_mb"] for r in rows} == {4.0} and len(rows) == 12
    expect = math.exp(sum(math.log(r["SEQ-Flex"] / r["GOGETA-map"]) for r in rows) / len(rows))
    assert data["geomean_reduction"] == pytest.approx(expect)
    assert data["table1"]["HPC-like"]["similar_sized_ratio"] == pytest.approx(3.75)
    assert data["paper_geomean"] == 6.7


def test_cli_fusion_report_text_and_errors(capsys, tmp_path):
    code = main(["fusion", "report", "--sram", "1", "--plots", str(tmp_path)])
    out, _ = capsys.readouterr()
    assert code == 0 and "Fig. 10" in out and "Table 1" in out and "Modelling assumptions" in out
    assert "paper: 6.7x" in out
    pytest.importorskip("matplotlib")
    assert (tmp_path / "fig10.png").stat().st_size > 0 and (tmp_path / "fig12.png").exists()
    code = main(["fusion", "report", "--sram", "-2", "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and "SRAM size" in json.loads(out)["error"]
