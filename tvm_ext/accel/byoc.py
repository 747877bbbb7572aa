"""The accelerator as a Relax BYOC target: partitioning, the ``relax.ext.accel`` codegen, runtime kernels.

:func:`partition_for_accel` runs ``FuseOpsByPattern`` (the checked patterns
of :mod:`~tvm_ext.accel.patterns`, ``bind_constants=False`` so weights stay
parameters), ``MergeCompositeFunctions`` (neighbouring offloaded ops become
one function, hence one instruction stream with on-chip reuse between them)
and ``RunCodegen``.  The codegen, registered as ``relax.ext.accel``, turns
each offloaded function into a :class:`~tvm_ext.accel.workload.Workload`
(:mod:`~tvm_ext.accel.translate`), schedules it (§3) and registers, under the
function's ``global_symbol``, an :class:`AccelKernel`: a DPS packed function
that runs the simulator (functional, numpy) on the call's tensors.  Since the
schedule is static, its cycles (and the kernel-library baseline's) are known
at compile time: :func:`function_report`.

>>> [p[0] for p in __import__("tvm_ext.accel.patterns", fromlist=["x"]).pattern_table()][-1]
'accel.matmul'
"""
from __future__ import annotations

import hashlib
import threading
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tvm_ext.byoc_common import ReportLog, composite_names, register_kernel, tag_symbols
from tvm_ext.errors import ShapeError

from .approach import ApproachChoice, approach_name
from .patterns import CODEGEN, pattern_table
from .system_graph import SystemGraph, load_system

__all__ = ["FunctionReport", "AccelKernel", "partition_for_accel", "function_report", "function_reports",
           "call_log", "system_tag", "offloaded"]

_lock = threading.Lock()
_REPORTS: dict[str, "FunctionReport"] = {}
_CALLS = ReportLog()
_APPROACHES: dict[str, Any] = {}


@dataclass
class FunctionReport:
    """What one offloaded function costs on the modelled accelerator (known at compile time)."""

    symbol: str
    system: str
    composites: list[str]
    ops: list[str]
    instructions: list[str]
    stream: dict[str, int]
    cycles: float
    seconds: float
    utilisation: dict[str, float]
    bytes_by_level: dict[str, float]
    approach: str = "heuristic"
    cycles_kl: float | None = None
    bytes_by_level_kl: dict[str, float] = field(default_factory=dict)
    calls: int = 0

    @property
    def speedup_vs_kl(self) -> float | None:
        return self.cycles_kl / self.cycles if self.cycles_kl and self.cycles else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["speedup_vs_kl"] = self.speedup_vs_kl
        return d


def function_report(symbol: str) -> FunctionReport:
    with _lock:
        return _REPORTS[symbol]


def function_reports() -> dict[str, FunctionReport]:
    """Every offloaded function compiled in this process, by symbol."""
    with _lock:
        return dict(_REPORTS)


def call_log() -> list[tuple[str, int]]:
    """(symbol, call number) of every offloaded call run so far (oldest first)."""
    return _CALLS.items()


class AccelKernel:
    """The DPS packed function of one offloaded function: ``kernel(*inputs, *outputs)``."""

    def __init__(self, symbol: str, workload, schedule):
        from .simulator import FunctionalSimulator

        self.symbol = symbol
        self.workload = workload
        self.schedule = schedule
        self.sim = FunctionalSimulator(schedule)
        self.n_in = len(workload.inputs)
        self._lock = threading.Lock()
        self.calls = 0

    def __call__(self, *args: Any) -> None:
        wl = self.workload
        if len(args) != self.n_in + len(wl.outputs):
            raise ShapeError(f"{self.symbol}: got {len(args)} tensors, expected {self.n_in} inputs + "
                             f"{len(wl.outputs)} outputs")
        ins = {n: t.numpy() for n, t in zip(wl.inputs, args[:self.n_in])}
        with self._lock:
            self.sim.load(ins)
            self.sim.run(self.schedule.stream)
            outs = self.sim.outputs()
            self.calls += 1
            with _lock:
                if self.symbol in _REPORTS:
                    _REPORTS[self.symbol].calls = self.calls
        for t, n in zip(args[self.n_in:], wl.outputs):
            t.copyfrom(np.ascontiguousarray(outs[n]))
        _CALLS.append((self.symbol, self.calls))


def _compile_function(func, system: SystemGraph, approach, baseline: bool) -> None:
    from .kernel_library import schedule_kl
    from .timing import time_stream
    from .translate import translate_function

    symbol = str(func.attrs["global_symbol"])
    wl = translate_function(func, name=symbol)
    used, sched, rep = _best_schedule(wl, system, approach)
    report = FunctionReport(
        symbol=symbol, system=system.name, composites=composite_names(func), ops=[op.kind for op in wl.ops],
        instructions=sorted({c.instruction.name for c in sched.tiles.calls}), stream=sched.stream.counts(),
        cycles=rep.cycles, seconds=rep.seconds, utilisation=rep.utilisation_by_kind(),
        bytes_by_level=dict(rep.bytes_by_level), approach=approach_name(used))
    if baseline:
        kl = time_stream(schedule_kl(wl, system).stream, system)
        report.cycles_kl = kl.cycles
        report.bytes_by_level_kl = dict(kl.bytes_by_level)
    register_kernel(symbol, AccelKernel(symbol, wl, sched))
    with _lock:
        _REPORTS[symbol] = report


def _best_schedule(wl, system: SystemGraph, approach):
    """(approach used, schedule, timing): an :class:`ApproachChoice` keeps its fewest-cycles candidate."""
    from .scheduler import schedule
    from .timing import time_stream

    best = None
    for cand in approach.candidates if isinstance(approach, ApproachChoice) else [approach]:
        sched = schedule(wl, system, cand)
        rep = time_stream(sched.stream, system)
        if best is None or rep.cycles < best[2].cycles:  # ties keep the earlier (default first)
            best = (cand, sched, rep)
    return best


def _codegen(funcs, options, constant_names):
    """``relax.ext.accel``: schedule every offloaded function and register its simulator kernel."""
    opts = dict(options) if options is not None else {}
    system = SystemGraph.from_json(str(opts["system"])) if "system" in opts else load_system()
    approach = _APPROACHES.get(str(opts.get("approach", "")))
    baseline = bool(int(opts.get("baseline", 1)))
    for f in funcs:
        _compile_function(f, system, approach, baseline)
    return []


def _register_codegen() -> None:
    import tvm_ffi

    tvm_ffi.register_global_func(f"relax.ext.{CODEGEN}", _codegen, override=True)


_register_codegen()


def system_tag(system: SystemGraph, approach: Any = None) -> str:
    """Short hash of a system graph (and approach): the suffix of this configuration's kernel symbols."""
    text = system.to_json() + (getattr(approach, "name", "") if approach is not None else "")
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def partition_for_accel(mod: Any, config: "SystemGraph | str | dict | None" = None, *, approach: Any = None,
                        baseline: bool = True) -> Any:
    """Offload every supported subgraph of ``mod`` to the accelerator ``config`` (default graph).

    Returns the module after ``RunCodegen``: offloaded functions are
    ``R.call_dps_packed`` calls to kernels registered in this process;
    everything else is left for llvm.  ``baseline`` also schedules the
    kernel-library version of each function for its report.
    """
    from tvm import relax

    system = load_system(config)
    tag = system_tag(system, approach)
    if approach is not None:
        _APPROACHES[tag] = approach
    mod = relax.transform.FuseOpsByPattern(pattern_table(system), bind_constants=False)(mod)
    mod = relax.transform.MergeCompositeFunctions()(mod)
    mod = tag_symbols(mod, CODEGEN, tag)
    options = {CODEGEN: {"system": system.to_json(), "approach": tag if approach is not None else "",
                         "baseline": "1" if baseline else "0"}}
    mod = relax.transform.RunCodegen(options)(mod)
    return relax.transform.DeadCodeElimination()(mod)


def offloaded(mod: Any) -> list[str]:
    """Symbols of the accelerator kernels a partitioned module calls."""
    from tvm import relax

    syms = []

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_dps_packed":
            f = e.args[0]
            if isinstance(f, relax.ExternFunc) and str(f.global_symbol) in _REPORTS:
                syms.append(str(f.global_symbol))

    for _, f in mod.functions.items():
        if isinstance(f, relax.Function):
            relax.analysis.post_order_visit(f, visit)
    return list(dict.fromkeys(syms))
