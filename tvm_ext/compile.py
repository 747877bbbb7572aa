"""``tvm_ext.compile``: one compile call over Relax that brings every extension together.

Flow (ARCHITECTURE, data flow 4), each step a pass over the Relax module:

1. ``DecomposeOpsForInference`` + ``EliminateCommonSubexpr`` + ``FoldConstant``
   (BN decomposed, weights transposed once at compile time);
2. **sparse**: matmuls with a constant, mostly-zero operand become sparse kernels
   (:mod:`tvm_ext.compile_steps.sparse_offload`: the ``schedules/sparse``
   executor, the GOGETA-fused GCN layer, or the Sextans engine);
3. **BYOC**: the accelerator's ``partition_for_accel`` when ``accel`` is set,
   then ``partition_for_sextans`` when ``spmm_engine`` is set (patterns matched
   before ``LegalizeOps``; simulators registered as the runtime functions);
4. convolutions left for llvm to NHWC (``ConvertLayout``), ``LegalizeOps`` +
   ``FuseOps``/``FuseTIR``, then every llvm PrimFunc is
   scheduled (:mod:`tvm_ext.compile_steps.llvm_schedule`: a tuning record from
   ``tuning_db``, else the ``tensorize`` mapping onto x86 instructions when it
   measures faster, else the default parallel/vector schedule); weights the
   x86 micro-kernels read in panels are packed once at compile time when
   they are constants (:mod:`tvm_ext.compile_steps.weight_prepack`);
5. ``tvm.compile`` through the kernel cache -> Relax VM.

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
from typing import Any, NamedTuple, Sequence

import numpy as np

from tvm_ext.compile_steps.ops import op_calls
from tvm_ext.errors import ConfigError, InputError, ShapeError
from tvm_ext.markdown import fmt, table

__all__ = ["compile", "CompiledModel", "CompileReport", "OpPlacement", "KernelReport", "llvm_only",
           "max_rel_err"]

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
# Op bookkeeping: which op of the imported model ended where
# ---------------------------------------------------------------------------
def _claim(snapshot: list[OpPlacement], keys: Sequence[tuple[str, str]], target: str, note: str) -> None:
    """Mark the first still-llvm op of each (op, shapes) key as running on ``target``."""
    for op, shapes in keys:
        for p in snapshot:
            if p.target == _LLVM and p.op == op and p.shapes == shapes and not p.note:
                p.target, p.note = target, note
                break


def _removed(before: list[tuple[str, str]], after: list[tuple[str, str]]) -> list[tuple[str, str]]:
    left = Counter(after)
    gone = []
    for key in before:
        if left[key] > 0:
            left[key] -= 1
        else:
            gone.append(key)
    return gone


# ---------------------------------------------------------------------------
# Offload configuration
# ---------------------------------------------------------------------------
class _Engine(NamedTuple):
    config: Any  # EngineConfig
    platform: Any  # Platform
    name: str
    explicit: bool  # the caller gave the config (tuning records do not replace it)


def _engine(spmm_engine: Any) -> _Engine | None:
    """The Sextans engine from None / a platform name / a dict / a Platform."""
    if spmm_engine is None or spmm_engine is False:
        return None
    from tvm_ext.spmm_engine.config import Platform, get_platform
    from tvm_ext.spmm_engine.preprocess import resolve_config

    config = None
    platform = spmm_engine
    if isinstance(spmm_engine, dict):
        unknown = set(spmm_engine) - {"platform", "config"}
        if unknown:
            raise ConfigError(f"spmm_engine: unknown keys {sorted(unknown)}; use 'platform' and 'config'")
        platform, config = spmm_engine.get("platform"), spmm_engine.get("config")
    elif spmm_engine is True:
        platform = None
    elif not isinstance(spmm_engine, (str, Platform)):
        raise ConfigError(f"spmm_engine: expected a platform name, dict or Platform, got {type(spmm_engine).__name__}")
    try:
        plat = get_platform(platform)
    except (KeyError, ValueError) as e:
        raise ConfigError(f"spmm_engine: {e}") from None
    return _Engine(resolve_config(config), plat, plat.name, config is not None)


def _extern_symbols(mod: Any) -> list[str]:
    """Symbols of every ``call_dps_packed`` in ``main`` (in order, with repeats)."""
    from tvm import relax

    out: list[str] = []

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_dps_packed":
            f = e.args[0]
            if isinstance(f, relax.ExternFunc):
                out.append(str(f.global_symbol))

    relax.analysis.post_order_visit(mod["main"], visit)
    return out


def _accel_partition(mod: Any, accel: Any, knobs: Any = None):
    """Run the accelerator BYOC; returns (module, new kernel symbols, system name, EngineTuning)."""
    try:
        from tvm_ext.accel.byoc import partition_for_accel
        from tvm_ext.accel.system_graph import load_system
    except ImportError as e:
        raise ConfigError(f"accel={accel!r}: the accelerator BYOC is not available ({e})") from None
    from tvm_ext.compile_steps.engine_records import tuned_accel_approach

    system = load_system(None if accel is True else accel)
    approach, tuning = tuned_accel_approach(knobs, system)
    before = set(_extern_symbols(mod))
    mod = partition_for_accel(mod, system, approach=approach, baseline=False)
    return mod, set(_extern_symbols(mod)) - before, system.name, tuning


# ---------------------------------------------------------------------------
# The compiled model
# ---------------------------------------------------------------------------
class CompiledModel:
    """A Relax VM over the compiled module plus its :class:`CompileReport`.

    ``model(*inputs)`` (or ``model(name=array)``) returns the outputs as a list of numpy
    arrays, with no copy either way (:mod:`tvm_ext.model_call`): the kernels read the
    caller's arrays in place, and each output is a view of the buffer the VM wrote.
    ``module, report = model`` unpacks the pair the issue asks for.
    """

    def __init__(self, built: Any, specs, report: CompileReport, *, packed: dict | None = None,
                 simulated: dict[str, str] | None = None, reporters: dict | None = None):
        import tvm
        from tvm import relax

        self.built = built
        self.specs = specs
        self.report = report
        self._packed = packed or {}
        self._simulated = simulated or {}
        self._reporters = reporters or {}
        self.last_outputs: list[np.ndarray] | None = None
        self.vm = relax.VirtualMachine(built, tvm.cpu(0))

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

        return NumpyCall(self.vm, self.specs)

    def _tensors(self, inputs: Sequence[Any], named: dict[str, Any] | None = None) -> list:
        """The inputs as TVM tensors over the caller's arrays (checked; see :mod:`tvm_ext.model_call`)."""
        return self._call.tensors(inputs, named)

    def __call__(self, *inputs: Any, **named: Any) -> list[np.ndarray]:
        """Run ``main`` on numpy arrays (positional or by name); outputs are views of the VM's buffers."""
        return self._call(*inputs, **named)


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
        prof = profile(self.built, args, packed=self._packed, simulated=set(self._simulated))
        by_name = {k.name: k for k in self.report.kernels}
        for k in self.report.kernels:
            k.calls, k.seconds, k.cycles, k.simulated_seconds, k.traffic = 0, None, None, None, {}
        for st in prof.stats:
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
            for symbol, cycles, seconds, traffic in rep.since(marks[name]):
                k = by_name.get(symbol)
                if k is None:
                    continue
                k.cycles = (k.cycles or 0) + int(cycles)
                k.simulated_seconds = (k.simulated_seconds or 0.0) + float(seconds)
                for level, nbytes in traffic.items():
                    k.traffic[level] = k.traffic.get(level, 0) + int(nbytes)
        self.report.measured = True
        self.report.llvm_seconds = prof.seconds_of("tir") + prof.seconds_of("packed")
        self.report.run_wall_seconds = prof.wall_seconds
        self.last_outputs = prof.outputs
        return self.report


class _SextansReporter:
    """Reads the Sextans engine's per-call offload reports of this model's symbols."""

    def __init__(self, symbols: set[str]):
        self.symbols = set(symbols)

    def mark(self) -> int:
        from tvm_ext.spmm_engine.byoc import offload_reports

        return len(offload_reports())

    def since(self, mark: int):
        from tvm_ext.spmm_engine.byoc import offload_reports

        for r in offload_reports()[mark:]:
            if r.symbol in self.symbols:
                yield r.symbol, r.cycles, r.seconds, {f"hbm.{k}": v for k, v in r.traffic.items()}


class _AccelReporter:
    """Reads the accelerator's call log; each call costs its function's (static) schedule."""

    def __init__(self, symbols: set[str]):
        self.symbols = set(symbols)

    def mark(self) -> int:
        from tvm_ext.accel.byoc import call_log

        return len(call_log())

    def since(self, mark: int):
        from tvm_ext.accel.byoc import call_log, function_report

        for symbol, _ in call_log()[mark:]:
            if symbol in self.symbols:
                r = function_report(symbol)
                yield symbol, r.cycles, r.seconds, dict(r.bytes_by_level)


# ---------------------------------------------------------------------------
# compile
# ---------------------------------------------------------------------------
def _prepare(mod):
    """Decompose BN for inference, merge repeated subexpressions (a frontend re-transposes a
    recurrent weight at every step), fold constants (weights transposed once, at compile time)."""
    from tvm import relax

    mod = relax.transform.DecomposeOpsForInference()(mod)
    mod = relax.transform.EliminateCommonSubexpr()(mod)
    return relax.transform.FoldConstant()(mod)


#: Layout of the convolutions left for llvm: NHWC makes the output channels the unit-stride
#: axis, which the x86 micro-kernels vectorise (NCHW leaves the image width, often 7/14/28).
CONV_LAYOUT = {"relax.nn.conv2d": ["NHWC", "OHWI"]}


def _legalize_and_fuse(mod, conv_layout: bool = True):
    """(ConvertLayout to NHWC +) LegalizeOps + FuseOps + FuseTIR; also returns each fused
    kernel's member op names."""
    import tvm
    from tvm import relax

    if conv_layout:
        mod = relax.transform.ConvertLayout(CONV_LAYOUT)(mod)
    mod = tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                    relax.transform.FoldConstant(), relax.transform.FuseOps()])(mod)
    members: dict[str, list[str]] = {}
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function) and func.attrs is not None and "Primitive" in func.attrs:
            names = []

            def visit(e, names=names):
                if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir":
                    names.append(e.args[0].name_hint)

            relax.analysis.post_order_visit(func, visit)
            members[gv.name_hint] = names
    mod = relax.transform.FuseTIR()(mod)
    return relax.transform.DeadCodeElimination()(mod), members


def _kernel_reports(mod, schedules: dict, members: dict[str, list[str]]) -> list[KernelReport]:
    import re

    out = []
    for name, how in schedules.items():
        ops = [re.sub(r"\d+$", "", m) for m in members.get(name, [name])]
        out.append(KernelReport(name, _LLVM, how.how, "; ".join(x for x in (how.detail, how.reason) if x), ops))
    return out


@dataclass
class _Build:
    """What the compile steps share: the module, the op snapshot and what each step registered."""

    mod: Any
    snapshot: list[OpPlacement]
    kernels: list[KernelReport] = field(default_factory=list)
    packed: dict[str, Any] = field(default_factory=dict)  # llvm kernels registered from Python -> timer
    simulated: dict[str, str] = field(default_factory=dict)  # simulated kernel symbol -> target
    reporters: dict[str, Any] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)
    clock: float = field(default_factory=time.perf_counter)
    engine_tuning: list[Any] = field(default_factory=list)

    def phase(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = round(self.phases.get(name, 0.0) + now - self.clock, 4)
        self.clock = now


def _offload_sparse(b: _Build, tgt: Any, engine: Any, threshold: float, fuse_gcn: bool):
    """Step 2: sparse-constant matmuls -> sparse executor / fused GCN / Sextans stand-ins."""
    from tvm_ext.compile_steps.sparse_offload import offload_sparse_matmuls

    b.mod, rewrites, stand_ins = offload_sparse_matmuls(b.mod, target=tgt, engine=engine,
                                                        engine_name=engine.name if engine else "",
                                                        threshold=threshold, fuse_gcn=fuse_gcn)
    for rw in rewrites:
        where = "sextans" if rw.where == "sextans" else f"llvm/{rw.where}"
        detail = rw.detail + (f"; {rw.fallback}" if rw.fallback else "")
        _claim(b.snapshot, rw.keys, where, detail)
        if rw.kernel is not None:
            b.packed[rw.symbol] = rw.kernel.time
            b.kernels.append(KernelReport(rw.symbol, where, rw.where, detail, [lbl.split("(")[0] for lbl in rw.ops]))
    return rewrites, stand_ins


def _offload_accel(b: _Build, accel: Any, knobs: Any) -> str:
    """Step 3a: the matrix accelerator's BYOC (weights lifted to arguments for its patterns)."""
    from tvm_ext.compile_steps.constants import lift_constants

    n_inputs = len(b.mod["main"].params)
    mod, weights = lift_constants(b.mod)
    ops_before = op_calls(mod["main"])
    mod, syms, label, tuning = _accel_partition(mod, accel, knobs)
    b.engine_tuning.append(tuning)
    b.mod = _bind_back(mod, n_inputs, weights)  # constants again for llvm (folded, layout-converted)
    _claim(b.snapshot, _removed(ops_before, op_calls(b.mod["main"])), "accel", f"accelerator {label}")
    b.simulated.update({s: "accel" for s in syms})
    b.reporters["accel"] = _AccelReporter(syms)
    b.kernels += [KernelReport(s, "accel", "simulated", f"matrix accelerator {label}, approach {_approach_of(s)}")
                  for s in sorted(syms)]
    for p in b.snapshot:
        if p.target == _LLVM and not p.note and p.op in ("matmul", "nn.conv2d"):
            p.note = "not offloaded: no accelerator pattern accepted it"
    return label


def _approach_of(symbol: str) -> str:
    from tvm_ext.accel.byoc import function_report

    return function_report(symbol).approach


def _offload_sextans(b: _Build, engine: _Engine, rewrites: list, knobs: Any) -> None:
    """Step 3b: the Sextans engine's BYOC over the sparse products marked for it (tuned knobs applied).

    ``knobs``: the tuning database's checked knob records (or None).
    """
    from tvm_ext.compile_steps.engine_records import EngineTuning, tuned_sextans_config
    from tvm_ext.spmm_engine import paper_knobs
    from tvm_ext.spmm_engine.byoc import partition_for_sextans

    if engine.explicit:
        b.engine_tuning.append(EngineTuning("sextans", paper_knobs(engine.config), "explicit config"))
    else:
        products = [(rw.matrix, rw.n_cols) for rw in rewrites if rw.where == "sextans"]
        config, tuning = tuned_sextans_config(knobs, products, engine.config, engine.name)
        engine = engine._replace(config=config)
        b.engine_tuning.append(tuning)

    before = set(_extern_symbols(b.mod))
    b.mod = partition_for_sextans(b.mod, engine.config, engine.platform)
    syms = set(_extern_symbols(b.mod)) - before
    b.simulated.update({s: "sextans" for s in syms})
    b.reporters["sextans"] = _SextansReporter(syms)
    b.kernels += [KernelReport(s, "sextans", "simulated", f"Sextans HBM engine, platform {engine.name}", ["matmul"])
                  for s in sorted(syms)]


def _check_options(sparse_threshold: float, tensorize: str) -> None:
    if not 0.0 <= float(sparse_threshold) <= 1.0:
        raise ConfigError(f"sparse_threshold={sparse_threshold!r}: must be a density in [0, 1]")
    if tensorize not in ("measure", "always", "never"):
        raise ConfigError(f"tensorize={tensorize!r}: choose 'measure', 'always' or 'never'")


def compile(mod: Any, target: Any = None, *, accel: Any = None, spmm_engine: Any = None, tuning_db: Any = None,
            tensorize: str = "measure", sparse_threshold: float = 0.1, fuse_gcn: bool = True,
            measure: bool = False, inputs: Sequence[Any] | None = None) -> CompiledModel:  # noqa: A001
    """Compile a Relax module with every extension; returns a :class:`CompiledModel`.

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

    from tvm_ext.compile_steps.engine_records import knob_report
    from tvm_ext.compile_steps.llvm_schedule import schedule_module, tuning_database
    from tvm_ext.compile_steps.sparse_offload import materialize_packed
    from tvm_ext.kernel_cache import get_or_build

    t0 = time.perf_counter()
    mod = _relax_module(mod)
    tgt = _llvm_target(target)
    _check_options(sparse_threshold, tensorize)
    engine = _engine(spmm_engine)
    db = tuning_database(tuning_db)
    knobs = knob_report(tuning_db)
    specs = input_specs(mod)

    t1 = time.perf_counter()
    mod = _prepare(mod)  # 1
    b = _Build(mod, [OpPlacement(i, op, shapes, _LLVM) for i, (op, shapes) in enumerate(op_calls(mod["main"]))],
               clock=t1)
    b.phase("prepare")
    rewrites, stand_ins = _offload_sparse(b, tgt, engine, sparse_threshold, fuse_gcn)  # 2
    b.phase("sparse")
    # 3: the accelerator first (MergeCompositeFunctions cannot look through extern calls), then Sextans
    accel_label = _offload_accel(b, accel, knobs) if accel not in (None, False) else None
    if engine is not None and any(rw.where == "sextans" for rw in rewrites):
        _offload_sextans(b, engine, rewrites, knobs)
    _note_unsupported(b.snapshot)
    b.mod = materialize_packed(b.mod, stand_ins)
    b.phase("byoc")
    b.mod, members = _legalize_and_fuse(b.mod)  # 4
    b.phase("legalize")
    b.mod, schedules = schedule_module(b.mod, target=tgt, db=db, tensorize=tensorize)
    b.phase("schedule")
    b.mod, schedules, members = _prepack(b.mod, tgt, schedules, members)
    b.phase("prepack")
    signature = ("tvm_ext.compile", tvm_ffi.structural_hash(b.mod), tensorize)  # 5: constants are hashed too
    built = get_or_build(signature, lambda: b.mod, tgt)
    b.phase("build")
    report = CompileReport(str(tgt.attrs.get("mcpu", tgt.kind.name)), accel_label, engine.name if engine else None,
                           str(tuning_db) if tuning_db is not None else None, b.snapshot,
                           _kernel_reports(b.mod, schedules, members) + b.kernels, time.perf_counter() - t0,
                           b.phases, engine_tuning=b.engine_tuning)
    model = CompiledModel(built, specs, report, packed=b.packed, simulated=b.simulated, reporters=b.reporters)
    if measure or inputs is not None:
        model.profile(*(inputs or model.random_inputs()))
    return model


def _prepack(mod: Any, tgt: Any, schedules: dict, members: dict) -> tuple[Any, dict, dict]:
    """Step 4b: constant weights packed at compile time (kernels renamed ``*_prepacked``)."""
    from dataclasses import replace

    from tvm_ext.compile_steps.weight_prepack import PREPACKED_SUFFIX, prepack_weights

    mod, marked = prepack_weights(mod, tgt)
    for name, params in marked.items():
        if name in schedules:
            how = schedules.pop(name)
            note = f"weights {', '.join(params)} packed at compile time"
            schedules[name + PREPACKED_SUFFIX] = replace(how, name=name + PREPACKED_SUFFIX,
                                                         detail="; ".join(x for x in (how.detail, note) if x))
        if name in members:
            members[name + PREPACKED_SUFFIX] = members.pop(name)
    return mod, schedules, members


def _bind_back(mod: Any, n_inputs: int, values: Sequence[np.ndarray]) -> Any:
    """Bind the lifted weight parameters of ``main`` (those after the first ``n_inputs``) as constants."""
    from tvm import relax

    if not values:
        return mod
    names = [p.name for p in mod["main"].params[n_inputs:]]
    return relax.transform.BindParams("main", dict(zip(names, values)))(mod)


def _note_unsupported(snapshot: list[OpPlacement]) -> None:
    """Say, for each op left on llvm, why and how it runs there."""
    for p in snapshot:
        if p.target != _LLVM or p.note:
            continue
        if p.op in ("matmul", "nn.conv2d"):
            p.note = "dense: llvm kernel, x86 tensorize where it measures faster (see kernels)"
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
