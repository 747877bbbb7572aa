"""Sparse inspector/executor schedules (Venkat 2016 dissertation, carried into TVM).

Formats are plain-array containers (:mod:`.formats`); inspectors build them
from CSR through the dissertation's transformations (:mod:`.transforms`,
:mod:`.inspectors`); :mod:`.selection` picks one from matrix features.
"""
from schedules.sparse.executors import (
    BCSRParams, COOParams, CSBParams, CSRParams, DIAParams, ELLParams, ExecParams, Executor, HYBParams,
    SELLParams, build_executor,
)
from schedules.sparse.formats import BCSR, COO, CSB, CSR, DIA, ELL, FORMATS, HYB, SELL, SparseFormat
from schedules.sparse.inspectors import (
    INSPECTORS, RECIPES, bcsr_recipe, choose_hyb_width, coo_recipe, csb_recipe, csr_recipe, dia_recipe,
    ell_recipe, sell_recipe, to_bcsr, to_coo, to_csb, to_csr, to_dia, to_ell, to_hyb, to_sell,
)
from schedules.sparse.level_sets import (
    DependenceGraph, LevelSchedule, dependence_graph, level_sets, permute_csr,
)
from schedules.sparse.peers import compare_spmm
from schedules.sparse.plan import Plan, inspect, plan_spmm
from schedules.sparse.selection import (
    AnalyticCostModel, Candidate, Choice, Selector, get_default_selector, select_format,
    set_default_selector, sparse_features,
)
from schedules.sparse.solvers import PCG, PCGResult, pcg
from schedules.sparse.transforms import (
    Compaction, IterationSpace, PaddedCompaction, Recipe, Step, compact, compact_and_pad, csr_space,
    known, make_dense, normalize, permute, project, reorder, select, shift, skew, split, step, tile,
)
from schedules.sparse.triangular import GaussSeidel, TriangularSolver, level_segments, sweep_func, sweep_kernel

__all__ = [
    # inspector/executor entry point
    "inspect", "plan_spmm", "Plan", "compare_spmm",
    # executors
    "build_executor", "Executor", "ExecParams", "CSRParams", "COOParams", "BCSRParams", "ELLParams",
    "DIAParams", "CSBParams", "HYBParams", "SELLParams",
    # formats
    "BCSR", "COO", "CSB", "CSR", "DIA", "ELL", "FORMATS", "HYB", "SELL", "SparseFormat",
    # inspectors
    "INSPECTORS", "RECIPES", "to_bcsr", "to_coo", "to_csb", "to_csr", "to_dia", "to_ell", "to_hyb",
    "to_sell", "choose_hyb_width", "bcsr_recipe", "coo_recipe", "csb_recipe", "csr_recipe",
    "dia_recipe", "ell_recipe", "sell_recipe",
    # transformations
    "Compaction", "IterationSpace", "PaddedCompaction", "Recipe", "Step", "compact", "compact_and_pad",
    "csr_space", "known", "make_dense", "normalize", "permute", "project", "reorder", "select", "shift",
    "skew", "split", "step", "tile",
    # level sets, wavefront executors, solvers
    "DependenceGraph", "LevelSchedule", "dependence_graph", "level_sets", "permute_csr",
    "GaussSeidel", "TriangularSolver", "level_segments", "sweep_func", "sweep_kernel",
    "PCG", "PCGResult", "pcg",
    # selection
    "AnalyticCostModel", "Candidate", "Choice", "Selector", "get_default_selector", "select_format",
    "set_default_selector", "sparse_features",
]
