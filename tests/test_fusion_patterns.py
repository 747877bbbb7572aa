"""schedules.fusion: GOGETA Alg. 2 markings (Fig. 7), Alg. 3 loop orders (Fig. 8) and fusion groups."""
from __future__ import annotations

import re

import pytest

from schedules.fusion import (
    PARALLEL_MULTICAST,
    PIPELINE_WITH_HOLD,
    PIPELINE_WITH_WRITEBACK,
    PIPELINEABLE,
    SEQUENTIAL,
    EinsumDAG,
    assign_loop_orders,
    block_cg_dag,
    fusion_groups,
    gcn_layer_dag,
    hpc_like_chain,
    is_swizzled,
    mark_patterns,
    plan_fusion,
)
from schedules.fusion.einsum_dag import Edge
from schedules.fusion.loop_order import pipeline_failures
from schedules.fusion.patterns import PAPER_FIG7
from tvm_ext.workloads import GOGETA_TABLE2


def _family(name):
    return re.sub(r"\d+$", "", name)


def _by_lines(dag, marking, iteration):
    out = {}
    for (s, d), m in marking.items():
        if dag.op(s).iteration == iteration and dag.op(d).iteration == iteration:
            out[(dag.op(s).label, dag.op(d).label, _family(s))] = m.pattern
    return out


@pytest.fixture(scope="module")
def cg1():
    w = GOGETA_TABLE2["aft02"]
    return block_cg_dag(1, w.M, 8, w.nnz, setup=False)


@pytest.fixture(scope="module")
def cg3_plan():
    w = GOGETA_TABLE2["nasa4704"]
    return plan_fusion(block_cg_dag(3, w.M, 16, w.nnz))


# ----------------------------------------------------------------------------- Alg. 2


def test_alg2_marks_one_cg_iteration_like_fig7(cg1):
    pm = mark_patterns(cg1)
    assert _by_lines(cg1, pm, 1) == PAPER_FIG7
    assert pm.counts() == {SEQUENTIAL: 3, PIPELINEABLE: 2, PIPELINE_WITH_WRITEBACK: 2,
                           PIPELINE_WITH_HOLD: 0, PARALLEL_MULTICAST: 2}
    assert pm.multicast_nodes() == ["Lambda1"]
    # multicast is an attribute: the Λ edges are sequential underneath (Λ comes from an inverse)
    assert pm[("Lambda1", "X1")].inter_dataflow == SEQUENTIAL and pm[("Lambda1", "X1")].multicast
    assert "contracted-dominant" in pm[("Delta1", "Lambda1")].reason
    assert pm[("S1", "R1")].path == ("S1", "Delta1", "Lambda1", "R1")


@pytest.mark.parametrize("n", [1, 8, 16])
def test_alg2_fig7_holds_in_every_iteration_of_the_unrolled_dag(n):
    for name in ("aft02", "Barth5", "nasa4704", "ecology1"):
        w = GOGETA_TABLE2[name]
        dag = block_cg_dag(3, w.M, n, w.nnz)
        pm = mark_patterns(dag)
        for it in (1, 2, 3):
            assert _by_lines(dag, pm, it) == PAPER_FIG7, (name, n, it)


def test_alg2_cross_iteration_edges(cg3_plan):
    pm = cg3_plan.marking
    assert pm[("P1", "S2")].pattern == SEQUENTIAL            # the SpMM gathers P: dest dominance m ∉ P[k,n]
    assert "does not index" in pm[("P1", "S2")].reason
    for edge in [("P1", "Delta2"), ("P1", "X2"), ("P1", "P2"), ("R1", "R2")]:
        assert pm[edge].pattern == PIPELINE_WITH_WRITEBACK, edge
    assert pm[("Gamma1", "Lambda2")].pattern == SEQUENTIAL
    assert pm[("R0", "Gamma0")].pattern == PARALLEL_MULTICAST and pm[("R0", "Gamma0")].inter_dataflow == PIPELINEABLE
    assert pm[("X1", "X2")].pattern == PIPELINEABLE           # not transitive: nothing else joins them


def _skip_block(middle_contracted: bool):
    """ResNet-like skip: X -> conv1 -> conv2 -> add(X) (Fig. 7's cyan pattern)."""
    dag = EinsumDAG("skip")
    k = 100_000 if middle_contracted else 64
    dag.add_tensor("A", ("m", "k"), (64, 64))
    dag.add_tensor("B", ("k", "n"), (64, 64))
    dag.add_tensor("W1", ("n", "c"), (64, k))
    dag.add_tensor("W2", ("c", "o"), (k, 64))
    dag.einsum("X", "mk,kn->mn", "A", "B")
    dag.einsum("Y1", "mn,nc->mc", "X", "W1")
    dag.einsum("Y2", "mc,co->mo", "Y1", "W2")
    dag.add_op("Z", "mo,mo->mo", ["Y2", "X"], kind="add")
    return dag


def test_alg2_hold_vs_writeback_on_a_skip_connection():
    pm = mark_patterns(_skip_block(False))
    assert pm[("X", "Z")].pattern == PIPELINE_WITH_HOLD and pm[("X", "Z")].transitive
    assert pm[("X", "Y1")].pattern == PIPELINEABLE
    pm = mark_patterns(_skip_block(True))  # Y2 = Y1·W2 contracts a dominant rank
    assert pm.analysis.dominance["Y2"].kind == "C"
    assert pm[("X", "Z")].pattern == PIPELINE_WITH_WRITEBACK


def test_alg2_hpc_like_chain_holds_its_transitive_edges():
    pm = mark_patterns(hpc_like_chain(dict(M=64, K=64, N=64, O=64)))
    assert [e for e, m in pm.items() if m.pattern == PIPELINE_WITH_HOLD] == [("Z", "X"), ("Y", "W"), ("X", "V")]


# ----------------------------------------------------------------------------- Alg. 3


def test_alg3_cg_orders_match_fig8(cg1):
    lo = assign_loop_orders(cg1)
    assert (lo.epsilon, lo.swizzle_penalty, lo.broken, lo.fallback) == (0, 0, [], False)
    assert lo.notation("X1") == lo.notation("R1") == "MKN"     # Λ consumers: P- and S-stationary
    assert lo.notation("P1") == "MKN" and lo["S1"] == ("m", "k", "n")
    assert lo.fig8("Delta1") == lo.fig8("Gamma1") == "KN'N"
    assert lo.fig8("X1") == "MJN" and lo["Lambda1"] is None and lo.notation("Lambda1") == "-"
    assert sorted(lo.pipelined) == [("R1", "Gamma1"), ("S1", "Delta1")]
    for s, d in lo.pipelined:
        assert pipeline_failures(cg1, Edge(s, d, s), lo.orders) == []
    for (s, d) in lo.marking:
        assert not is_swizzled(cg1, Edge(s, d, s), lo.orders)


def test_alg3_unrolled_cg_has_zero_swizzle_and_same_orders_each_iteration(cg3_plan):
    lo = cg3_plan.loop_orders
    assert (lo.epsilon, lo.swizzle_penalty, lo.broken) == (0, 0, [])
    for i in (1, 2, 3):
        assert [lo.notation(f"{t}{i}") for t in ("S", "Delta", "X", "R", "Gamma", "P")] == \
               ["MKN", "KMN", "MKN", "MKN", "KMN", "MKN"]


def _forced_swizzle(producer_contracted: bool):
    dag = EinsumDAG("trace(T T)")
    k = 100_000 if producer_contracted else 64
    dag.add_tensor("A", ("m", "k"), (8 if producer_contracted else 64, k))
    dag.add_tensor("B", ("k", "n"), (k, 8 if producer_contracted else 64))
    dag.einsum("T", "mk,kn->mn", "A", "B")
    dag.einsum("U", "mn,nm->", "T", "T")  # reads T in both layouts: one slot is always swizzled
    return dag


def test_alg3_retries_under_a_rising_epsilon():
    dag = _forced_swizzle(True)
    assert mark_patterns(dag)[("T", "U")].pattern == SEQUENTIAL
    lo = assign_loop_orders(dag)
    assert (lo.epsilon, lo.swizzle_penalty, lo.attempts, lo.fallback) == (1, 1, 2, False)
    assert lo.swizzled == [("T", "U")]
    capped = assign_loop_orders(dag, max_epsilon=0)
    assert capped.fallback and capped.swizzle_penalty == 1


def test_alg3_gives_up_a_pipeline_it_cannot_honour():
    dag = _forced_swizzle(False)
    lo = assign_loop_orders(dag)
    assert mark_patterns(dag)[("T", "U")].pattern == PIPELINEABLE
    assert [b[:2] for b in lo.broken] == [("T", "U")] and "swizzled" in lo.broken[0][2]
    assert [g.ops for g in fusion_groups(dag)] == [("T",), ("U",)]


def test_alg3_respects_csr_order_and_pipelines_gcn():
    dag = gcn_layer_dag(2708, 1433, 7, 9464)
    lo = assign_loop_orders(dag)
    assert lo["Z"].index("m") < lo["Z"].index("k")  # CSR: row before column
    assert lo.pipelined == [("Z", "X1")] and lo["X1"][0] == "m"


# ----------------------------------------------------------------------------- fusion groups


def test_block_cg_fusion_groups_are_the_expected_ones(cg1):
    groups = fusion_groups(cg1)
    assert [g.ops for g in groups] == [("S1", "Delta1"), ("Lambda1",), ("X1", "R1", "Gamma1"), ("Phi1",), ("P1",)]
    g_sd, _, g_xrg, _, g_p = groups
    assert g_sd.pipelined == (("S1", "Delta1"),) and g_sd.shared_reads == ("P0",)
    assert g_sd.dominant == {"S1": "m", "Delta1": "k"} and g_sd.dominant_extent == GOGETA_TABLE2["aft02"].M
    assert set(g_xrg.reads) == {"P0", "Lambda1", "X0", "S1", "R0"} and "Lambda1" in g_xrg.shared_reads
    assert g_xrg.writes == ("X1", "R1", "Gamma1") and g_xrg.pipelined == (("R1", "Gamma1"),)
    assert g_xrg.loop_orders == {"X1": ("m", "j", "n"), "R1": ("m", "j", "n"), "Gamma1": ("k", "n'", "n")}
    assert g_p.writes == () and not g_p.fused  # P1 is dead after the last iteration


def test_unrolled_groups_repeat_and_never_fuse_across_iterations(cg3_plan):
    ops = [g.ops for g in cg3_plan.groups]
    assert ops[0] == ("R0", "Gamma0")
    for i in (1, 2, 3):
        assert (f"S{i}", f"Delta{i}") in ops and (f"X{i}", f"R{i}", f"Gamma{i}") in ops and (f"P{i}",) in ops
    # X_i -> X_{i+1} is pipelineable by Alg. 2 but fusing it would make the group graph cyclic
    assert cg3_plan.group_of("X1") is not cg3_plan.group_of("X2")
    assert len(ops) == 1 + 5 * 3
    pos = {n: i for i, g in enumerate(cg3_plan.groups) for n in g.ops}
    for e in cg3_plan.dag.edges():  # groups come in a topological order
        assert pos[e.src] <= pos[e.dst]


def test_gcn_layer_is_one_pipelined_group():
    (g,) = fusion_groups(gcn_layer_dag(3786, 29, 2, 14456))
    assert g.ops == ("Z", "X1") and g.reads == ("A", "X0", "W") and g.writes == ("X1",)
    assert g.dominant_extent == 3786
