"""``tvm_ext.compile``: one compile call over Relax that brings every extension together.

Flow (ARCHITECTURE, data flow 4): the module passes of
:func:`tvm_ext.pipeline.optimization_passes`
(:mod:`tvm_ext.compile_steps.passes`), the same that
``tvm.compile(mod, target, relax_pipeline="tvm_ext")`` runs:

1. ``PrepareForInference`` (BN decomposed, weights transposed once at
   compile time) and ``AnnotateOpIds`` (each op gets an id that travels in
   the IR, so the report follows every op, same-shape ones included);
2. **sparse**: matmuls with a constant, mostly-zero operand become sparse kernels
   (:mod:`tvm_ext.compile_steps.sparse_offload`: the ``schedules/sparse``
   executor, the GOGETA-fused GCN layer, or the Sextans engine);
3. **BYOC**: ``PartitionForAccel`` when ``accel`` is set, then
   ``PartitionForSextans`` when ``spmm_engine`` is set (patterns matched
   before ``LegalizeOps``; each offloaded part becomes a call of a runtime
   function with its serialised program as a constant of the module);
4. convolutions left for llvm to NHWC, ``LegalizeOps`` + ``FuseOps``/``FuseTIR``,
   then the llvm rule chain per PrimFunc: a tuning record from ``tuning_db``
   (``MetaScheduleApplyDatabase``), else the ``tensorize`` mapping onto x86
   instructions when it measures faster, else the default parallel/vector
   schedule; weights the x86 micro-kernels read in panels are packed once at
   compile time when they are constants (``PrepackWeights``);
5. the report is read from the module (:mod:`tvm_ext.compile_steps.placement`)
   and attached to it; ``tvm.compile`` through the kernel cache -> Relax VM.

The result is a :class:`CompiledModel`: call it on numpy inputs; its
:class:`CompileReport` says which op went where, and after
:meth:`CompiledModel.profile` (or ``measure=True``) the simulated cycles and
traffic of the offloaded parts and the measured time of every llvm kernel.

>>> import numpy as np
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType((4, 8), "float32"))
>>> with bb.function("main", [x]):
...     with bb.dataflow():
...         y = bb.emit_output(relax.op.nn.relu(relax.op.matmul(x, relax.const(np.eye(8, dtype="float32")))))
...     _ = bb.emit_func_output(y)
>>> model = compile(bb.get())
>>> xs = np.arange(32, dtype="float32").reshape(4, 8) - 16
>>> bool(np.array_equal(model(xs)[0], np.maximum(xs, 0)))
True
>>> sorted({p.target for p in model.report.ops})
['llvm']
"""
from __future__ import annotations

import functools
import sys
import time
import types
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from tvm_ext.compile_steps.ops import op_calls
from tvm_ext.errors import ConfigError, InputError, ShapeError
from tvm_ext.runtime_functions import RUNTIME_FUNCTIONS
from tvm_ext.markdown import fmt, table

__all__ = ["compile", "load", "report_of", "CompiledModel", "CompileReport", "OpPlacement", "KernelReport", "llvm_only",
           "max_rel_err", "report_from_parts"]

_LLVM = "llvm"


# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------
@dataclass
class OpPlacement:
    """Where one Relax op of the imported model runs."""

    index: int
    op: str
    shapes: str
    target: str  # "llvm" | "llvm/sparse-executor" | "llvm/gcn-fused" | "sextans" | "accel"
    note: str = ""

    @property
    def label(self) -> str:
        return f"{self.op}#{self.index} {self.shapes}"

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.label, "target": self.target, "note": self.note}


@dataclass
class KernelReport:
    """One kernel of the compiled module: its placement, schedule and cost."""

    name: str
    target: str
    schedule: str = ""
    detail: str = ""
    ops: list[str] = field(default_factory=list)
    calls: int = 0
    seconds: float | None = None  # measured, per call (llvm kernels)
    cycles: int | None = None  # simulated, all calls (offloaded kernels)
    simulated_seconds: float | None = None
    traffic: dict[str, int] = field(default_factory=dict)  # bytes per memory level / matrix class

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.target, "schedule": self.schedule, "detail": self.detail,
                "ops": list(self.ops), "calls": self.calls, "seconds": self.seconds, "cycles": self.cycles,
                "simulated_seconds": self.simulated_seconds, "traffic": dict(self.traffic)}


@dataclass
class CompileReport:
    """Which ops went where, and (after profiling) what each part cost."""

    target: str
    accel: str | None
    spmm_engine: str | None
    tuning_db: str | None
    ops: list[OpPlacement]
    kernels: list[KernelReport]
    compile_seconds: float
    phases: dict[str, float] = field(default_factory=dict)  # compile seconds per step
    measured: bool = False
    llvm_seconds: float | None = None
    run_wall_seconds: float | None = None
    engine_tuning: list[Any] = field(default_factory=list)  # compile_steps.engine_records.EngineTuning

    # -- summaries ---------------------------------------------------------
    @property
    def offloaded(self) -> list[dict[str, str]]:
        """Every op -> its target (``llvm`` when no extension took it)."""
        return [{"op": p.label, "target": p.target} for p in self.ops]

    def targets(self) -> dict[str, int]:
        """How many ops went to each target."""
        return dict(Counter(p.target for p in self.ops))

    @property
    def cycles(self) -> int:
        """Simulated cycles of every offloaded kernel (0 when nothing was simulated)."""
        return int(sum(k.cycles or 0 for k in self.kernels))

    def cycles_by_target(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for k in self.kernels:
            if k.cycles is not None:
                out[k.target] = out.get(k.target, 0) + int(k.cycles)
        return out

    @property
    def simulated_seconds(self) -> float:
        return float(sum(k.simulated_seconds or 0.0 for k in self.kernels))

    @property
    def total_seconds(self) -> float | None:
        """Measured llvm time plus simulated time of the offloaded parts (None before profiling)."""
        if self.llvm_seconds is None:
            return None
        return self.llvm_seconds + self.simulated_seconds

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target, "accel": self.accel, "spmm_engine": self.spmm_engine,
            "tuning_db": self.tuning_db, "compile_seconds": self.compile_seconds, "phases": dict(self.phases),
            "offloaded": self.offloaded, "targets": self.targets(),
            "ops": [p.to_dict() | {"note": p.note} for p in self.ops],
            "kernels": [k.to_dict() for k in self.kernels], "measured": self.measured,
            "cycles": self.cycles, "cycles_by_target": self.cycles_by_target(),
            "simulated_seconds": self.simulated_seconds, "llvm_seconds": self.llvm_seconds,
            "total_seconds": self.total_seconds, "run_wall_seconds": self.run_wall_seconds,
            "engine_tuning": [t.to_dict() for t in self.engine_tuning],
        }

    def markdown(self, max_kernels: int = 25) -> str:
        """Op placement by kind, then the kernels (costliest first)."""
        groups: dict[tuple[str, str, str], int] = {}
        for p in self.ops:
            key = (p.op, p.target, p.note)
            groups[key] = groups.get(key, 0) + 1
        op_rows = [[op, n, tgt, note] for (op, tgt, note), n in groups.items()]
        steps = ", ".join(f"{k} {v:.1f}" for k, v in self.phases.items())
        lines = [f"target {self.target}; accel {self.accel or '-'}; spmm engine {self.spmm_engine or '-'}; "
                 f"tuning db {self.tuning_db or '-'}; compiled in {self.compile_seconds:.1f} s"
                 + (f" ({steps})" if steps else ""),
                 "", table(["op", "count", "runs on", "note"], op_rows), ""]
        for t in self.engine_tuning:
            cyc = (f"; {t.cycles:,.0f} modelled cycles vs {t.default_cycles:,.0f} default"
                   if t.cycles is not None and t.default_cycles is not None else "")
            lines.append(f"{t.engine} knobs {t.knobs} from {t.source} ({t.candidates} tuning record(s)){cyc}")
        if self.engine_tuning:
            lines.append("")
        ks = sorted(self.kernels, key=lambda k: -((k.seconds or 0) * k.calls + (k.simulated_seconds or 0)))
        rows = []
        for k in ks[:max_kernels]:
            cost = (f"{k.seconds * 1e6:.1f} us x {k.calls}" if k.seconds is not None else
                    f"{k.cycles:,} cycles ({k.simulated_seconds * 1e6:.1f} us simulated)" if k.cycles is not None
                    else "-")
            traffic = fmt(sum(k.traffic.values())) + " B" if k.traffic else "-"
            rows.append([k.name[:60], k.target, k.schedule, cost, traffic, k.detail[:90]])
        lines.append(table(["kernel", "runs on", "schedule", "cost", "traffic", "detail"], rows))
        if len(ks) > max_kernels:
            lines.append(f"... {len(ks) - max_kernels} more kernels")
        if self.measured:
            lines += ["", f"measured llvm time {self.llvm_seconds * 1e3:.3f} ms + simulated offload "
                          f"{self.simulated_seconds * 1e3:.3f} ms ({self.cycles:,} cycles) = "
                          f"{self.total_seconds * 1e3:.3f} ms per inference"]
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# Inputs and checks
# ---------------------------------------------------------------------------
def _relax_module(mod: Any):
    import tvm
    from tvm import relax

    if isinstance(mod, relax.Function):
        mod = tvm.IRModule({"main": mod})
    if not isinstance(mod, tvm.IRModule):
        raise InputError(f"compile: expected a Relax IRModule (or relax.Function), got {type(mod).__name__}")
    names = [gv.name_hint for gv in mod.get_global_vars()]
    if "main" not in names or not isinstance(mod["main"], relax.Function):
        raise InputError(f"compile: the module has no Relax function 'main' (functions: {names})")
    return mod


def _llvm_target(target: Any):
    from tvm_ext.target import resolve_target

    tgt = resolve_target(target)
    if tgt.kind.name != "llvm":
        raise ConfigError(f"compile: target kind {tgt.kind.name!r} is not supported; the plugin builds for llvm "
                          "(offloaded parts run on simulators hosted by the CPU)")
    return tgt


def input_specs(mod: Any) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, static shape, dtype) of every parameter of ``main``."""
    specs = []
    for p in mod["main"].params:
        sinfo = p.ty
        try:
            shape = tuple(int(d) for d in sinfo.shape.values)
        except (AttributeError, TypeError, ValueError):
            raise ShapeError(f"input {p.name!r}: needs a static tensor shape, got {sinfo}") from None
        specs.append((p.name, shape, str(sinfo.dtype)))
    return specs


def max_rel_err(outputs: Sequence[np.ndarray], references: Sequence[np.ndarray]) -> float:
    """``max |out - ref| / max |ref|`` over all outputs (``max |ref|`` floored at 1e-30)."""
    if len(outputs) != len(references):
        raise ShapeError(f"{len(outputs)} outputs vs {len(references)} references")
    worst = 0.0
    for o, r in zip(outputs, references):
        o, r = np.asarray(o, np.float64), np.asarray(r, np.float64)
        if o.shape != r.shape:
            raise ShapeError(f"output shape {o.shape} vs reference {r.shape}")
        if o.size:
            worst = max(worst, float(np.max(np.abs(o - r)) / max(float(np.max(np.abs(r))), 1e-30)))
    return worst


# ---------------------------------------------------------------------------
# The compiled model
# ---------------------------------------------------------------------------
class CompiledModel:
    """A Relax VM over the compiled module plus its :class:`CompileReport`.

    ``model(*inputs)`` (or ``model(name=array)``) returns the outputs as a list of numpy
    arrays, with no copy either way (:mod:`tvm_ext.model_call`): the kernels read the
    caller's arrays in place, and each output is a view of the buffer the VM wrote.
    ``module, report = model`` unpacks it into the model and its report.
    """

    def __init__(self, built: Any, specs, report: CompileReport, *,
                 simulated: dict[str, str] | None = None, reporters: dict | None = None,
                 element_aligned: bool = False):
        import tvm
        from tvm import relax

        from tvm_ext.runtime_functions import register_runtime_functions

        register_runtime_functions()  # idempotent; the VM resolves the offloaded calls when it loads
        self.built = built
        self.specs = specs
        self.report = report
        self._simulated = simulated or {}
        self._reporters = reporters or {}
        self.last_outputs: list[np.ndarray] | None = None
        self._source: tuple[Any, Any] | None = None  # (IRModule, target) it was built from, for export
        #: bytes of alignment the kernels assume of an input's address (0: one element, any array is read in place)
        self.input_alignment = 0 if element_aligned else 64
        # pooled: an output's buffer returns to the pool when its last view dies, so calls reuse mapped pages
        self.vm = relax.VirtualMachine(built, tvm.cpu(0), memory_cfg="pooled")

    def offload_counters(self) -> dict[str, Any]:
        """Calls, simulated cycles, time and traffic of each offloaded kernel of this model since it was
        loaded in this process (``KernelCounters`` by kernel name; exact however many calls ran)."""
        out: dict[str, Any] = {}
        for rep in self._reporters.values():
            out.update(rep.totals())
        return out

    def export_library(self, path: Any) -> None:
        """Write the compiled module (offloaded programs and report included) as a shared library;
        :func:`load` opens it in any process that imports ``tvm_ext``."""
        try:
            self.built.export_library(str(path))
        except Exception:  # noqa: BLE001 - a library loaded from the kernel cache cannot be saved again
            if self._source is None:
                raise
            import tvm

            ir, target = self._source
            tvm.compile(ir, target=target).export_library(str(path))

    def __iter__(self):
        return iter((self, self.report))

    @property
    def input_names(self) -> list[str]:
        return [s[0] for s in self.specs]

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Seeded inputs of the right shapes and dtypes, 64-byte aligned (so calls never copy them)."""
        from tvm_ext.zero_copy import empty_aligned

        rng = np.random.default_rng(seed)
        out = []
        for _, shape, dtype in self.specs:
            a = empty_aligned(shape, dtype)
            a[...] = rng.uniform(-1, 1, shape) if np.dtype(dtype).kind == "f" else rng.integers(0, 4, shape)
            out.append(a)
        return out

    @functools.cached_property
    def _call(self):
        from tvm_ext.model_call import NumpyCall

        return NumpyCall(self.vm, self.specs, alignment=self.input_alignment)

    def _tensors(self, inputs: Sequence[Any], named: dict[str, Any] | None = None) -> list:
        """The inputs as TVM tensors over the caller's arrays (checked; see :mod:`tvm_ext.model_call`)."""
        return self._call.tensors(inputs, named)

    @property
    def __call__(self) -> Callable[..., list[np.ndarray]]:
        """Run ``main`` on numpy arrays (positional or by name); outputs are views of the VM's buffers.

        ``model(x)`` resolves to the checked hot path of :mod:`tvm_ext.model_call` itself
        (a property, so no Python frame of this class sits between the caller and it).
        """
        return self._call.call

    def time(self, *inputs: Any, repeat: int = 3, min_repeat_ms: int = 50) -> float:
        """Wall seconds per call of the whole module (simulated kernels run their simulators)."""
        import tvm

        args = self._tensors(inputs)
        res = self.vm.time_evaluator("main", tvm.cpu(0), number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)(*args)
        return float(min(res.results))

    def profile(self, *inputs: Any) -> CompileReport:
        """Run once, time every llvm kernel, collect the simulators' cycles; fills the report."""
        from tvm_ext.compile_steps.profiling import profile

        args = self._tensors(inputs or self.random_inputs())
        marks = {name: rep.mark() for name, rep in self._reporters.items()}
        prof = profile(self.built, args, simulated=set(self._simulated) | set(RUNTIME_FUNCTIONS))
        by_name = {k.name: k for k in self.report.kernels}
        for k in self.report.kernels:
            k.calls, k.seconds, k.cycles, k.simulated_seconds, k.traffic = 0, None, None, None, {}
        for st in prof.stats:
            if st.symbol in RUNTIME_FUNCTIONS:  # offloaded programs: counted by their kernels below
                continue
            k = by_name.get(st.symbol)
            if k is None:
                k = KernelReport(st.symbol, self._simulated.get(st.symbol, _LLVM),
                                 "runtime builtin" if st.kind == "other" else "")
                self.report.kernels.append(k)
                by_name[st.symbol] = k
            k.calls += st.calls
            if st.seconds is not None:  # several shapes of one kernel: the call-weighted mean
                prev = (k.seconds or 0.0) * (k.calls - st.calls)
                k.seconds = (prev + st.seconds * st.calls) / k.calls
        for name, rep in self._reporters.items():
            for symbol, calls, cycles, seconds, traffic in rep.since(marks[name]):
                k = by_name.get(symbol)
                if k is None:
                    continue
                k.calls += int(calls)
                k.cycles = (k.cycles or 0) + int(cycles)
                k.simulated_seconds = (k.simulated_seconds or 0.0) + float(seconds)
                for level, nbytes in traffic.items():
                    k.traffic[level] = k.traffic.get(level, 0) + int(nbytes)
        self.report.measured = True
        self.report.llvm_seconds = prof.seconds_of("tir")
        self.report.run_wall_seconds = prof.wall_seconds
        self.last_outputs = prof.outputs
        return self.report


class _ProgramReporter:
    """Reads the counters the runtime kernels of this model's offloaded programs keep themselves
    (calls, simulated cycles, time and traffic: exact totals, however many calls ran)."""

    def __init__(self, kernels: dict[str, tuple[str, bytes]]):
        self.kernels = dict(kernels)  # symbol -> (runtime function, program digest)

    def _counters(self) -> dict[str, Any]:
        import importlib

        from tvm_ext.byoc_common import KernelCounters

        out = {}
        for symbol, (runtime, digest) in self.kernels.items():
            module = importlib.import_module(RUNTIME_FUNCTIONS[runtime][0])
            out[symbol] = module.kernel_counters(digest) or KernelCounters()
        return out

    def mark(self) -> dict[str, Any]:
        return self._counters()

    def since(self, mark: dict[str, Any]):
        """(symbol, calls, cycles, seconds, traffic) of each kernel that ran since ``mark``."""
        for symbol, now in self._counters().items():
            d = now.minus(mark[symbol])
            if d.calls:
                yield symbol, d.calls, d.cycles, d.seconds, d.traffic

    def totals(self) -> dict[str, Any]:
        """Every kernel's counters since it was loaded in this process."""
        return self._counters()


# ---------------------------------------------------------------------------
# compile
# ---------------------------------------------------------------------------
#: Report phase of each pass of the pipeline.
_PHASES = {"tvm_ext.PrepareForInference": "prepare", "tvm_ext.AnnotateOpIds": "prepare",
           "tvm_ext.OffloadSparseMatmuls": "sparse", "tvm_ext.PartitionForAccel": "byoc",
           "tvm_ext.PartitionForSextans": "byoc", "tvm_ext.FuseGRUCells": "legalize",
           "tvm_ext.ConvertConvLayout": "legalize", "tvm_ext.LegalizeAndFuse": "legalize",
           "tvm_ext.ApplyTuningRecords": "schedule", "tvm_ext.TensorizeOrDefault": "schedule",
           "tvm_ext.PrepackWeights": "prepack", "tvm_ext.ElementAlignedParams": "prepack"}


def _check_options(sparse_threshold: float, tensorize: str) -> None:
    if not 0.0 <= float(sparse_threshold) <= 1.0:
        raise ConfigError(f"sparse_threshold={sparse_threshold!r}: must be a density in [0, 1]")
    if tensorize not in ("measure", "always", "never"):
        raise ConfigError(f"tensorize={tensorize!r}: choose 'measure', 'always' or 'never'")


def report_from_parts(parts: dict[str, Any], *, target: str, spmm_engine: str | None = None,
                      tuning_db: str | None = None, compile_seconds: float = 0.0,
                      phases: dict[str, float] | None = None) -> CompileReport:
    """A :class:`CompileReport` from what the compiled module records
    (:func:`tvm_ext.compile_steps.placement.report_parts`)."""
    from tvm_ext.compile_steps.engine_records import EngineTuning

    ops = [OpPlacement(o["index"], o["op"], o["shapes"], o["target"], o["note"]) for o in parts["ops"]]
    _note_unsupported(ops, accel=parts.get("accel") is not None)
    kernels = [KernelReport(k["name"], k["target"], k["schedule"], k["detail"], list(k["ops"]))
               for k in parts["kernels"]]
    return CompileReport(target, parts.get("accel"), spmm_engine, tuning_db, ops, kernels, compile_seconds,
                         dict(phases or {}), engine_tuning=[EngineTuning(**t) for t in parts["engine_tuning"]])


def _model(built: Any, specs, report: CompileReport, parts: dict[str, Any]) -> CompiledModel:
    """The :class:`CompiledModel` of a built module: its kernels' timers and counters wired up."""
    simulated, programs = {}, {}
    for k in parts["kernels"]:
        if "digest" in k:
            simulated[k["name"]] = k["target"]
            programs[k["name"]] = (k["runtime"], bytes.fromhex(k["digest"]))
    reporters = {"programs": _ProgramReporter(programs)} if programs else {}
    return CompiledModel(built, specs, report, simulated=simulated, reporters=reporters,
                         element_aligned=bool(parts.get("element_aligned_params")))


def compile(mod: Any, target: Any = None, *, accel: Any = None, spmm_engine: Any = None, tuning_db: Any = None,
            tensorize: str = "measure", sparse_threshold: float = 0.1, fuse_gcn: bool = True,
            measure: bool = False, inputs: Sequence[Any] | None = None) -> CompiledModel:  # noqa: A001
    """Compile a Relax module with every extension; returns a :class:`CompiledModel`.

    Runs the passes of :func:`tvm_ext.pipeline.optimization_passes` (the same as
    ``tvm.compile(mod, target, relax_pipeline=tvm_ext.pipeline(...))``), reads the report
    from the compiled module, and builds through the kernel cache.

    * ``target``: the host llvm target (default: :func:`tvm_ext.target.default_target`);
    * ``accel``: ``"default"``, a config name/path/dict or a ``SystemGraph``: offload what the
      matrix accelerator supports (ISA Mapper BYOC);
    * ``spmm_engine``: ``"sextans"`` / ``"sextans-p"`` / ``{"platform": ..., "config": ...}``:
      sparse products on the Sextans engine instead of the llvm sparse executor;
    * ``tuning_db``: a tuning database directory (or database object) whose
      MetaSchedule records schedule the matching llvm kernels;
    * ``tensorize``: ``"measure"`` (keep a tensorized kernel when it measures faster),
      ``"always"`` or ``"never"``;
    * ``sparse_threshold``: density at or below which a constant matmul operand is sparse;
    * ``fuse_gcn``: allow the GOGETA-fused GCN layer for ``A @ (X @ W)``;
    * ``measure`` / ``inputs``: profile once right away (random inputs unless given).
    """
    import tvm_ffi

    from tvm_ext.compile_steps.param_alignment import accepts_element_aligned
    from tvm_ext.compile_steps.placement import report_parts
    from tvm_ext.kernel_cache import get_or_build
    from tvm_ext.pipeline import AttachReport, optimization_passes

    t0 = time.perf_counter()
    mod = _relax_module(mod)
    tgt = _llvm_target(target)
    _check_options(sparse_threshold, tensorize)
    specs = input_specs(mod)
    passes = optimization_passes(accel=accel, spmm_engine=spmm_engine, tuning_db=tuning_db, tensorize=tensorize,
                                 sparse_threshold=sparse_threshold, fuse_gcn=fuse_gcn, target=tgt)
    phases: dict[str, float] = {}
    clock = time.perf_counter()
    with tgt:
        for p in passes:
            mod = p(mod)
            now = time.perf_counter()
            phase = _PHASES.get(str(p.info.name), str(p.info.name))
            phases[phase] = round(phases.get(phase, 0.0) + now - clock, 4)
            clock = now
    parts = report_parts(mod)
    parts["element_aligned_params"] = accepts_element_aligned(mod)
    signature = ("tvm_ext.compile", tvm_ffi.structural_hash(mod), tensorize)  # constants are hashed too
    mod = AttachReport()(mod)
    built = get_or_build(signature, lambda: mod, tgt)
    phases["build"] = round(time.perf_counter() - clock, 4)
    engine = parts_engine_name(spmm_engine)
    report = report_from_parts(parts, target=str(tgt.attrs.get("mcpu", tgt.kind.name)), spmm_engine=engine,
                               tuning_db=str(tuning_db) if tuning_db is not None else None,
                               compile_seconds=time.perf_counter() - t0, phases=phases)
    model = _model(built, specs, report, parts)
    model._source = (mod, tgt)
    if measure or inputs is not None:
        model.profile(*(inputs or model.random_inputs()))
    return model


def parts_engine_name(spmm_engine: Any) -> str | None:
    """The Sextans platform name of an ``spmm_engine`` option (None when off)."""
    if spmm_engine in (None, False):
        return None
    from tvm_ext.compile_steps.passes import resolve_engine

    return resolve_engine(spmm_engine).name


def load(path: Any) -> CompiledModel:
    """Open a model written by :meth:`CompiledModel.export_library` (in any process): the module,
    its offloaded programs (run by the runtime functions ``import tvm_ext`` registers) and its report.

    >>> import os, tempfile
    >>> from tvm import relax
    >>> bb = relax.BlockBuilder()
    >>> x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    >>> with bb.function("main", [x]):
    ...     with bb.dataflow():
    ...         y = bb.emit_output(relax.op.nn.relu(x))
    ...     _ = bb.emit_func_output(y)
    >>> path = os.path.join(tempfile.mkdtemp(), "relu.so")
    >>> compile(bb.get()).export_library(path)
    >>> m = load(path)
    >>> m.input_names, [p.target for p in m.report.ops]
    (['x'], ['llvm'])
    """
    import json
    from pathlib import Path

    import tvm
    from tvm import relax

    from tvm_ext.pipeline import REPORT_FUNCTION
    from tvm_ext.runtime_functions import register_runtime_functions

    if not Path(str(path)).is_file():
        raise InputError(f"load: no such file {str(path)!r}")
    register_runtime_functions()
    try:
        lib = tvm.runtime.load_module(str(path))
        vm = relax.VirtualMachine(lib, tvm.cpu(0))
        raw = vm[REPORT_FUNCTION]()
    except Exception as e:  # noqa: BLE001 - not a library TVM can open, or not one tvm_ext exported
        raise InputError(f"load: {str(path)!r} is not a model exported by tvm_ext "
                         f"({type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''})") from None
    parts = json.loads(np.from_dlpack(raw).tobytes())
    specs = [(n, tuple(s), d) for n, s, d in parts["inputs"]]
    report = report_from_parts(parts, target=str(parts.get("target", "llvm")))
    return _model(lib, specs, report, parts)


def report_of(vm: Any) -> CompileReport:
    """The :class:`CompileReport` a module built by the ``"tvm_ext"`` pipeline carries
    (from its ``tvm_ext_report()`` function; ``vm`` a ``relax.VirtualMachine``).

    >>> import tvm
    >>> from tvm import relax
    >>> bb = relax.BlockBuilder()
    >>> x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    >>> with bb.function("main", [x]):
    ...     with bb.dataflow():
    ...         y = bb.emit_output(relax.op.nn.relu(x))
    ...     _ = bb.emit_func_output(y)
    >>> vm = relax.VirtualMachine(tvm.compile(bb.get(), "llvm", relax_pipeline="tvm_ext"), tvm.cpu())
    >>> [(p.op, p.target) for p in report_of(vm).ops]
    [('nn.relu', 'llvm')]
    """
    import json

    from tvm_ext.pipeline import REPORT_FUNCTION

    try:
        raw = vm[REPORT_FUNCTION]()
    except Exception as e:  # noqa: BLE001 - TVM's lookup error for a module built another way
        raise InputError(f"report_of: the module was not built by the 'tvm_ext' pipeline "
                         f"({type(e).__name__})") from None
    parts = json.loads(np.from_dlpack(raw).tobytes())
    return report_from_parts(parts, target=str(parts.get("target") or "llvm"))


def _note_unsupported(ops: list[OpPlacement], accel: bool = False) -> None:
    """Say, for each op left on llvm, why and how it runs there."""
    for p in ops:
        if p.target != _LLVM or p.note:
            continue
        if p.op in ("matmul", "nn.conv2d"):
            p.note = ("not offloaded: no accelerator pattern accepted it" if accel else
                      "dense: llvm kernel, x86 tensorize where it measures faster (see kernels)")
        else:
            p.note = "no extension takes this op: llvm default schedule"


# ---------------------------------------------------------------------------
# The llvm-only baseline
# ---------------------------------------------------------------------------
def llvm_only(mod: Any, target: Any = None) -> CompiledModel:
    """``tvm.compile(mod, target)`` with TVM's default pipeline and no extension (the baseline)."""
    import tvm_ffi

    from tvm_ext.kernel_cache import get_or_build

    t0 = time.perf_counter()
    mod = _relax_module(mod)
    tgt = _llvm_target(target)
    specs = input_specs(mod)
    ops = [OpPlacement(i, op, shapes, _LLVM, "llvm-only build") for i, (op, shapes) in enumerate(op_calls(mod["main"]))]
    built = get_or_build(("tvm_ext.llvm_only", tvm_ffi.structural_hash(mod)), lambda: mod, tgt)
    report = CompileReport(str(tgt.attrs.get("mcpu", tgt.kind.name)), None, None, None, ops, [],
                           time.perf_counter() - t0)
    return CompiledModel(built, specs, report)


# ``tvm_ext.compile`` is this module; make it callable so that ``tvm_ext.compile(mod)``
# works whether the package attribute resolves to the module or to the function.
class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> CompiledModel:
        return compile(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
