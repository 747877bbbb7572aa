"""Workload library: matrices, generators and the seeds' tables.

Used by every test, benchmark, the demo and the report.

>>> from tvm_ext.workloads import load_matrix, lap3d, matrix_stats
>>> matrix_stats(load_matrix("nasa4704"))["nnz"]
104756
"""
from tvm_ext.workloads.bundled import bundled_path, list_matrices, load_matrix, resolve_matrix
from tvm_ext.workloads.generators import (
    banded,
    block_fem,
    crystm03_like,
    fem_elasticity,
    fem_mass_3d,
    lap2d,
    lap3d,
    make_spd,
    rmat,
    uniform_random,
)
from tvm_ext.workloads.matrix_market import matrix_market_header, matrix_memory_budget, read_matrix_market
from tvm_ext.workloads.stats import (
    BlockFillEstimate,
    block_fill,
    estimate_block_fill,
    matrix_stats,
    row_lengths,
)
from tvm_ext.workloads.tables import (
    DEEPBENCH_GEMM,
    DEEPBENCH_GRU,
    GOGETA_TABLE2,
    GOGETA_TABLE4,
    MOBILENET_V1_SEPARABLE,
    RESNET50_CONV,
    SEXTANS_N_SWEEP,
    ConvLayer,
    GemmShape,
    GogetaArch,
    GogetaWorkload,
    GruShape,
)
from tvm_ext.workloads.validation import canonical_csr, check_dense_operand

__all__ = [
    "bundled_path", "list_matrices", "load_matrix", "resolve_matrix",
    "banded", "block_fem", "fem_elasticity", "lap2d", "lap3d", "make_spd", "rmat", "uniform_random",
    "crystm03_like", "fem_mass_3d",
    "matrix_market_header", "matrix_memory_budget", "read_matrix_market",
    "block_fill", "matrix_stats", "row_lengths", "estimate_block_fill", "BlockFillEstimate",
    "DEEPBENCH_GEMM", "DEEPBENCH_GRU", "GOGETA_TABLE2", "GOGETA_TABLE4",
    "MOBILENET_V1_SEPARABLE", "RESNET50_CONV", "SEXTANS_N_SWEEP",
    "ConvLayer", "GemmShape", "GogetaArch", "GogetaWorkload", "GruShape",
    "canonical_csr", "check_dense_operand",
]
