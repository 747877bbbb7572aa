"""The accelerator as a Relax BYOC target: partitioning, code generation, the runtime kernel.

:func:`partition_for_accel` runs ``FuseOpsByPattern`` (the checked patterns
of :mod:`~tvm_ext.accel.patterns`, registered in TVM's pattern registry;
``bind_constants=False`` so weights stay parameters),
``MergeCompositeFunctions`` (neighbouring offloaded ops become one function,
hence one instruction stream with on-chip reuse between them) and
:func:`lower_accel`, the code generator: each offloaded function becomes a
:class:`~tvm_ext.accel.workload.Workload` (:mod:`~tvm_ext.accel.translate`),
is scheduled (§3), and its call sites become
``R.call_dps_packed("tvm_ext.accel.run", program, *args)``, where ``program``
(a ``uint8`` constant of the module) holds the function, the system graph
and the instruction stream.  The runtime function (registered when
``tvm_ext`` is imported, :mod:`tvm_ext.runtime_functions`) decodes a program
once per process into an :class:`AccelKernel` that runs the functional
simulator on the call's tensors, so a compiled module exports and loads
like any TVM module.  Since the schedule is static, its cycles (and the
kernel-library baseline's) are known at compile time and travel in the
program: :func:`function_report`, :func:`program_report`.

>>> [p[0] for p in __import__("tvm_ext.accel.patterns", fromlist=["x"]).pattern_table()][-1]
'accel.matmul'
"""
from __future__ import annotations

import hashlib
import json
import threading
import zlib
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from tvm_ext.byoc_common import (KernelCounters, ProgramKernels, composite_names, lower_codegen_calls, pack_program,
                                 tag_symbols)
from tvm_ext.errors import ShapeError

from .approach import ApproachChoice, approach_name
from .patterns import CODEGEN, pattern_table
from .system_graph import SystemGraph, load_system

__all__ = ["FunctionReport", "AccelKernel", "partition_for_accel", "lower_accel", "function_report",
           "function_reports", "program_report", "run_program", "system_tag", "offloaded", "RUNTIME_FUNCTION"]

#: The runtime function every offloaded call goes through (:mod:`tvm_ext.runtime_functions`).
RUNTIME_FUNCTION = "tvm_ext.accel.run"

_lock = threading.Lock()
_REPORTS: dict[str, "FunctionReport"] = {}  # symbol -> report of the functions compiled or loaded here


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
    """The report of an offloaded function compiled (or loaded from a module) in this process."""
    with _lock:
        return _REPORTS[symbol]


def function_reports() -> dict[str, FunctionReport]:
    """Every offloaded function compiled or loaded in this process, by symbol."""
    with _lock:
        return dict(_REPORTS)


def _report_from(d: dict[str, Any]) -> FunctionReport:
    names = {f.name for f in fields(FunctionReport)}
    return FunctionReport(**{k: v for k, v in d.items() if k in names})


def program_report(program: Any) -> FunctionReport:
    """The compile-time report carried in an accelerator program (``uint8`` constant or tensor)."""
    from tvm_ext.byoc_common import read_program

    header, _ = read_program(program)
    return _report_from(header["report"])


class AccelKernel:
    """The simulator of one offloaded function: ``kernel(*inputs, *outputs)`` (DPS)."""

    def __init__(self, symbol: str, workload, schedule, report: FunctionReport):
        from .simulator import FunctionalSimulator

        self.symbol = symbol
        self.workload = workload
        self.schedule = schedule
        self.report = report
        self.sim = FunctionalSimulator(schedule)
        self.n_in = len(workload.inputs)
        self._lock = threading.Lock()
        self.counters = KernelCounters()

    @property
    def calls(self) -> int:
        return self.counters.calls

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
            c = self.counters
            c.calls += 1
            c.cycles += int(round(self.report.cycles))
            c.seconds += float(self.report.seconds)
            for level, nbytes in self.report.bytes_by_level.items():
                c.traffic[level] = c.traffic.get(level, 0) + int(nbytes)
            self.report.calls = c.calls
        for t, n in zip(args[self.n_in:], wl.outputs):
            t.copyfrom(np.ascontiguousarray(outs[n]))


def _kernel_from_program(header: dict[str, Any], body: memoryview) -> AccelKernel:
    """Rebuild the kernel of a program: workload from the function, tiles from the system, the stream as stored."""
    import tvm

    from .lowering import legalize, lower_workload
    from .scheduler import Schedule
    from .stream import InstructionStream
    from .tiles import unroll
    from .translate import translate_function

    data = json.loads(zlib.decompress(bytes(body)))
    symbol = str(header["symbol"])
    system = SystemGraph.from_json(data["system"])
    wl = legalize(translate_function(tvm.ir.load_json(data["function"]), name=symbol), system)
    tiles = unroll(wl, lower_workload(wl, system))
    stream = InstructionStream.from_dict(data["stream"])
    sched = Schedule(wl, system, str(data["approach"]), tiles, np.arange(tiles.n), stream, {}, {})
    report = _report_from(header["report"])
    with _lock:
        _REPORTS.setdefault(symbol, report)
        report = _REPORTS[symbol]
    return AccelKernel(symbol, wl, sched, report)


_KERNELS = ProgramKernels(_kernel_from_program)


def run_program(program: Any, *args: Any) -> None:
    """The runtime function ``tvm_ext.accel.run``: run the program's function on ``args`` (inputs, outputs)."""
    _KERNELS.get(program)(*args)


def kernel_counters(digest: bytes) -> KernelCounters | None:
    """Calls and simulated cost of the kernel of ``digest`` so far (None when it never ran here)."""
    return _KERNELS.counters(digest)


def _compile_function(func, system: SystemGraph, approach, baseline: bool) -> np.ndarray:
    """Schedule one offloaded function; returns its program (and registers its kernel)."""
    import tvm

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
    body = json.dumps({"system": system.to_json(), "function": tvm.ir.save_json(func),
                       "stream": sched.stream.to_dict(), "approach": sched.approach}).encode()
    header = {"codegen": CODEGEN, "symbol": symbol, "report": report.to_dict(), "ops": report.ops,
              "detail": f"matrix accelerator {system.name}, approach {report.approach}"}
    program = pack_program(header, zlib.compress(body, 6))
    with _lock:
        _REPORTS[symbol] = report
    _KERNELS.put(program, AccelKernel(symbol, sched.workload, sched, report))
    return program


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


def _out_types(call: Any) -> Any:
    from tvm import relax

    ty = call.ty
    return list(ty.fields) if isinstance(ty, relax.TupleType) else ty


def lower_accel(mod: Any, system: SystemGraph, approach: Any = None, baseline: bool = True) -> Any:
    """The accelerator's code generator: every ``Codegen="accel"`` function -> a program constant and
    ``R.call_dps_packed("tvm_ext.accel.run", program, *args)`` at each call site."""
    from tvm import relax

    programs: dict[Any, np.ndarray] = {}

    def lower(gv, func, call):
        if gv not in programs:
            programs[gv] = _compile_function(func, system, approach, baseline)
        return relax.call_dps_packed(RUNTIME_FUNCTION, [relax.const(programs[gv]), *call.args],
                                     out_ty=_out_types(call))

    return lower_codegen_calls(mod, CODEGEN, lower)


def system_tag(system: SystemGraph, approach: Any = None) -> str:
    """Short hash of a system graph (and approach): the suffix of this configuration's kernel symbols."""
    text = system.to_json() + (getattr(approach, "name", "") if approach is not None else "")
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def partition_for_accel(mod: Any, config: "SystemGraph | str | dict | None" = None, *, approach: Any = None,
                        baseline: bool = True) -> Any:
    """Offload every supported subgraph of ``mod`` to the accelerator ``config`` (default graph).

    Returns the module after code generation: offloaded functions are
    ``R.call_dps_packed("tvm_ext.accel.run", program, ...)`` calls whose
    program is a constant of the module; everything else is left for llvm.
    ``baseline`` also schedules the kernel-library version of each function
    for its report.
    """
    from tvm import relax

    system = load_system(config)
    mod = relax.transform.FuseOpsByPattern(pattern_table(system), bind_constants=False)(mod)
    mod = relax.transform.MergeCompositeFunctions()(mod)
    mod = tag_symbols(mod, CODEGEN, system_tag(system, approach))
    return lower_accel(mod, system, approach, baseline)


def offloaded(mod: Any) -> list[str]:
    """Symbols of the accelerator kernels a partitioned module calls (program order, no repeats)."""
    from tvm_ext.byoc_common import read_program, runtime_programs

    syms = [str(read_program(prog)[0]["symbol"]) for fn, prog in runtime_programs(mod) if fn == RUNTIME_FUNCTION]
    return list(dict.fromkeys(syms))
