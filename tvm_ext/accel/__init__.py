"""ISA Mapper's matrix-instruction accelerator as a BYOC target (system graph, dry-run scheduler, simulator).

The pieces, in the order data flows through them:

* :mod:`~tvm_ext.accel.system_graph` (§3.2): the machine as compute nodes,
  memory nodes and copy edges (:mod:`~tvm_ext.accel.system_nodes`), from a
  dict or JSON (:mod:`~tvm_ext.accel.system_config`; ``configs/``: the
  paper's case study ``default`` and a different ``mini`` machine);
* :mod:`~tvm_ext.accel.workload` / :mod:`~tvm_ext.accel.lowering` (§2): ops
  as ISAMIR kernels, mapped onto the graph's instructions by ``tensorize``;
* :mod:`~tvm_ext.accel.tiles` / :mod:`~tvm_ext.accel.scheduler` (§3.3-3.5):
  unrolling, device allocation, memory movement, eviction, invalidation, all
  recorded as an :class:`InstructionStream`; every choice through an
  :class:`Approach` (§4);
* :mod:`~tvm_ext.accel.recurrent` (§3.6): priming, recursive and finish
  iterations of a recurrent cell (:func:`gru_cell`);
* :mod:`~tvm_ext.accel.simulator` / :mod:`~tvm_ext.accel.timing`: numpy
  execution of the stream and its cycle count;
* :mod:`~tvm_ext.accel.kernel_library`: the per-op kernel-library baseline;
* Relax BYOC (loaded lazily, they import TVM): :func:`partition_for_accel`,
  :func:`compile` -> :class:`AccelModule` with per-function reports.

>>> from tvm_ext import accel
>>> r = accel.run_gemm(64, 64, 64, system="default")
>>> r["cycles"] > 0, r["cycles_kl"] > 0, r["max_rel_err"] < 1e-5
(True, True, True)
"""
from __future__ import annotations

from tvm_ext.lazy_exports import lazy_getattr


from .approach import CHOICES, Approach, ApproachChoice, CostModelApproach, HeuristicApproach
from .cases import gemm_workload, run_gemm, run_gru, run_sepconv, sepconv_workload
from .gru import gru_cell, gru_reference, gru_sequence_inputs, unrolled_gru
from .kernel_library import KernelLibraryApproach, schedule_kl
from .lowering import LoweredOp, SystemCostModel, lower_workload
from .recurrent import RecurrentSchedule, replay_kl, schedule_recurrent
from .scheduler import Schedule, Scheduler, schedule
from .simulator import FunctionalSimulator, SimulationResult, register_sim_implementations, simulate
from .stream import InstructionStream
from .system_graph import (
    ComputeNode,
    CopyEngine,
    MemoryNode,
    MoveEdge,
    SystemGraph,
    available_systems,
    load_system,
)
from .timing import Timeline, TimingReport, time_stream
from .verify import check_capacity, check_coherence
from .workload import Ref, TensorSpec, View, Workload

_LAZY = {
    "partition_for_accel": "tvm_ext.accel.byoc",
    "function_report": "tvm_ext.accel.byoc",
    "function_reports": "tvm_ext.accel.byoc",
    "FunctionReport": "tvm_ext.accel.byoc",
    "AccelKernel": "tvm_ext.accel.byoc",
    "offloaded": "tvm_ext.accel.byoc",
    "compile": "tvm_ext.accel.compiler",
    "compile_llvm": "tvm_ext.accel.compiler",
    "AccelModule": "tvm_ext.accel.compiler",
    "pattern_table": "tvm_ext.accel.patterns",
    "rejections": "tvm_ext.accel.patterns",
    "translate_function": "tvm_ext.accel.translate",
    "UnsupportedRelaxOp": "tvm_ext.accel.translate",
    "linear_module": "tvm_ext.accel.models",
    "mlp_module": "tvm_ext.accel.models",
    "conv_module": "tvm_ext.accel.models",
    "gru_cell_module": "tvm_ext.accel.models",
}

__all__ = [
    "SystemGraph", "MemoryNode", "ComputeNode", "CopyEngine", "MoveEdge", "load_system", "available_systems",
    "Workload", "TensorSpec", "View", "Ref", "lower_workload", "LoweredOp", "SystemCostModel",
    "Approach", "HeuristicApproach", "CostModelApproach", "ApproachChoice", "CHOICES",
    "Scheduler", "Schedule", "schedule", "InstructionStream",
    "RecurrentSchedule", "schedule_recurrent", "replay_kl",
    "simulate", "SimulationResult", "FunctionalSimulator", "register_sim_implementations",
    "Timeline", "TimingReport", "time_stream",
    "KernelLibraryApproach", "schedule_kl",
    "gru_cell", "gru_reference", "gru_sequence_inputs", "unrolled_gru",
    "run_gemm", "run_gru", "run_sepconv", "gemm_workload", "sepconv_workload",
    "check_coherence", "check_capacity",
    *_LAZY,
]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
