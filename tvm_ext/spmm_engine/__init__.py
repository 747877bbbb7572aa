"""Sextans (FPGA '22) as a BYOC target: the HBM SpMM engine ``C = alpha*A@B + beta*C``.

The host side prepares the non-zero stream as Sextans does, a functional
simulator executes it, and a cycle/HBM model times it:

* :func:`schedule` / :func:`preprocess`: partition (§3.1.2), PE-aware
  out-of-order scheduling (§3.3), Q pointers (§3.4), 64-bit words (§3.2);
* :func:`simulate`: the PEs' fp32 arithmetic on the encoded program (Alg. 1);
* :func:`model`: Eqs. 6-10 with real stream lengths, per-stage
  ``max(compute, HBM)``, GFLOP/s, bandwidth utilisation, FLOP/J (§4);
* :func:`evaluate`: all of it plus a check against scipy;
* :func:`speedup_breakdown`: Table 1 (baseline, OoO, 8 PUs, 64 PEs) on any matrix;
* Relax: :func:`emit_sparse_matmul` (a CSR sparse-matmul op with an llvm
  fallback), :func:`partition_for_sextans` (offload to the engine),
  :func:`build_gcn` / :func:`run_gcn` (a 2-layer GCN on cora).

The Relax names load lazily (they import TVM).

>>> from tvm_ext.workloads import lap2d
>>> s = schedule(lap2d(6), P=4, D=4, K0=16)
>>> s.stats()["stream_length"] == s.passes[0].length
True
"""
from __future__ import annotations

from tvm_ext.lazy_exports import lazy_getattr


from tvm_ext.spmm_engine.config import (
    PLATFORMS,
    SEXTANS,
    SEXTANS_P,
    EngineConfig,
    Platform,
    get_platform,
)
from tvm_ext.spmm_engine.encoding import (
    EncodedPass,
    SextansProgram,
    bubble_word,
    decode_words,
    encode_words,
)
from tvm_ext.spmm_engine.breakdown import BreakdownStep, speedup_breakdown
from tvm_ext.spmm_engine.engine import evaluate, functional_check
from tvm_ext.spmm_engine.perf_model import PerfReport, StageTime, model, problem_flops
from tvm_ext.spmm_engine.preprocess import paper_knobs, preprocess, resolve_config, schedule
from tvm_ext.spmm_engine.simulator import simulate
from tvm_ext.spmm_engine.stream import PassStream, ScheduledStream

# Relax integration: name -> module (imported on first access, PEP 562).
_LAZY = {
    "SparseOperand": "tvm_ext.spmm_engine.relax_op",
    "sparse_operand": "tvm_ext.spmm_engine.relax_op",
    "emit_sparse_matmul": "tvm_ext.spmm_engine.relax_op",
    "partition_for_sextans": "tvm_ext.spmm_engine.byoc",
    "offload_reports": "tvm_ext.spmm_engine.byoc",
    "clear_offload_reports": "tvm_ext.spmm_engine.byoc",
    "OffloadReport": "tvm_ext.spmm_engine.byoc",
    "compile_relax": "tvm_ext.spmm_engine.byoc",
    "build_gcn": "tvm_ext.spmm_engine.gcn",
    "run_gcn": "tvm_ext.spmm_engine.gcn",
    "gcn_reference": "tvm_ext.spmm_engine.gcn",
    "normalize_adjacency": "tvm_ext.spmm_engine.gcn",
}

__all__ = [
    "EngineConfig", "Platform", "SEXTANS", "SEXTANS_P", "PLATFORMS", "get_platform",
    "schedule", "preprocess", "resolve_config", "paper_knobs", "ScheduledStream", "PassStream",
    "SextansProgram", "EncodedPass", "encode_words", "decode_words", "bubble_word",
    "simulate", "model", "PerfReport", "StageTime", "problem_flops",
    "evaluate", "functional_check", "speedup_breakdown", "BreakdownStep",
    *_LAZY,
]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
