"""GOGETA (Garg et al., "Exploiting Inter-Operation Data Reuse in Scientific
Applications"): the einsum-DAG IR, its graph analyses, Alg. 2 reuse patterns,
Alg. 3 loop orders, fusion groups, tiling and NoC model, SRAM organisation and
the analytical DRAM-traffic model, plus Table 1.

Data flow (each arrow is one module)::

    EinsumDAG (builders / parse_einsum) -> analyze -> mark_patterns (Alg. 2)
      -> assign_loop_orders (Alg. 3) -> plan_fusion / fusion_groups
      -> dram_traffic (traffic_model + sram) and noc_traversals (tiling)

>>> from schedules.fusion import block_cg_dag, fusion_groups
>>> [g.ops for g in fusion_groups(block_cg_dag(1, 10_000, 8, 50_000, setup=False))][2]
('X1', 'R1', 'Gamma1')
"""
from schedules.fusion.analysis import (
    BALANCED_MIN_SIZE,
    DOMINANT_MIN_SIZE,
    DOMINANT_SKEW,
    Dominance,
    GraphAnalysis,
    analyze,
    node_dominance,
)
from schedules.fusion.builders import (
    HPC_LIKE_CHAIN,
    NN_LIKE_CHAIN,
    EinsumChain,
    block_cg_dag,
    chain_dag,
    gcn_layer_dag,
    hpc_like_chain,
    nn_like_chain,
    workload_dag,
)
from schedules.fusion.einsum_dag import EinsumDAG, EinsumSpec, Edge, Op, Operand, TensorSpec, parse_einsum
from schedules.fusion.block_cg import BlockCG, block_cg, block_cg_numpy
from schedules.fusion.block_cg_iteration import BlockCGResult, SolveInfo, spd_pinv_solve
from schedules.fusion.cg_compare import compare_block_cg, modelled_traffic, scipy_cg_columns
from schedules.fusion.gcn import GCNLayer, gcn_layer, gcn_layer_numpy
from schedules.fusion.groups import FusionGroup, FusionPlan, fusion_groups, plan_fusion
from schedules.fusion.kernels import GroupKernel, build_step_kernels
from schedules.fusion.loop_order import LoopOrders, assign_loop_orders, fig8_notation, gemm_notation, is_swizzled
from schedules.fusion.patterns import (
    PARALLEL_MULTICAST,
    PATTERNS,
    PIPELINE_WITH_HOLD,
    PIPELINE_WITH_WRITEBACK,
    PIPELINEABLE,
    SEQUENTIAL,
    EdgeMarking,
    PatternMarking,
    mark_patterns,
)
from schedules.fusion.reference import evaluate
from schedules.fusion.report import fusion_report
from schedules.fusion.row_forms import RowOp, row_form, streamed_rank
from schedules.fusion.sram import SramModel
from schedules.fusion.steps import assign_storage, iteration_ops, schedule_steps, stored_tensors
from schedules.fusion.table1 import (
    PAPER_TABLE1,
    ai_best_gemm,
    ai_best_spmm,
    chain_formulas,
    dag_ai_best,
    derive_table1,
)
from schedules.fusion.tiling import NocReport, noc_traversals, split_dominant_rank
from schedules.fusion.traffic_model import (
    ASSUMPTIONS,
    CONFIGS,
    PAPER_GEOMEAN,
    TrafficArch,
    TrafficResult,
    dram_traffic,
    fig10_sweep,
    fig11_gcn,
    fig12_noc,
    geomean_reduction,
    traffic_table,
)

__all__ = [
    # IR
    "EinsumDAG", "EinsumSpec", "Edge", "Op", "Operand", "TensorSpec", "parse_einsum", "evaluate",
    # builders
    "block_cg_dag", "gcn_layer_dag", "nn_like_chain", "hpc_like_chain", "chain_dag", "workload_dag",
    "EinsumChain", "NN_LIKE_CHAIN", "HPC_LIKE_CHAIN",
    # analyses, Alg. 2, Alg. 3, groups
    "analyze", "GraphAnalysis", "Dominance", "node_dominance",
    "DOMINANT_MIN_SIZE", "DOMINANT_SKEW", "BALANCED_MIN_SIZE",
    "mark_patterns", "PatternMarking", "EdgeMarking", "PATTERNS", "SEQUENTIAL", "PIPELINEABLE",
    "PIPELINE_WITH_WRITEBACK", "PIPELINE_WITH_HOLD", "PARALLEL_MULTICAST",
    "assign_loop_orders", "LoopOrders", "is_swizzled", "gemm_notation", "fig8_notation",
    "plan_fusion", "fusion_groups", "FusionPlan", "FusionGroup",
    # tiling, SRAM, traffic model, Table 1, report
    "noc_traversals", "NocReport", "split_dominant_rank", "SramModel",
    "TrafficArch", "TrafficResult", "dram_traffic", "traffic_table", "fig10_sweep", "fig11_gcn", "fig12_noc",
    "geomean_reduction", "CONFIGS", "ASSUMPTIONS", "PAPER_GEOMEAN",
    "derive_table1", "chain_formulas", "PAPER_TABLE1", "ai_best_gemm", "ai_best_spmm", "dag_ai_best",
    "fusion_report",
    # fused TVM kernels, block CG and the GCN layer on them
    "GroupKernel", "RowOp", "assign_storage", "build_step_kernels", "iteration_ops", "row_form",
    "schedule_steps", "stored_tensors", "streamed_rank",
    "BlockCG", "BlockCGResult", "SolveInfo", "block_cg", "block_cg_numpy", "spd_pinv_solve",
    "GCNLayer", "gcn_layer", "gcn_layer_numpy",
    "compare_block_cg", "modelled_traffic", "scipy_cg_columns",
]
