"""``tvm_ext.accel.compile``: a Relax module in, a runnable module plus a cycle/traffic report out.

Flow: :func:`~tvm_ext.accel.byoc.partition_for_accel` (patterns, merge,
codegen: offloaded functions become simulator kernels) -> ``tvm.compile``
for the default target through the kernel cache (the rest runs on llvm) ->
``relax.VirtualMachine``.  The returned :class:`AccelModule` runs on numpy
arrays and carries one :class:`~tvm_ext.accel.byoc.FunctionReport` per
offloaded function (cycles of this scheduler and of the kernel-library
baseline, utilisation, bytes per memory level).

>>> import numpy as np
>>> from tvm_ext.accel.models import mlp_module
>>> m = compile(mlp_module(32, 64, 48, 16))
>>> ins = [np.ones(s, "float32") for s in m.input_shapes]
>>> out = m(*ins)
>>> out.shape, len(m.reports) >= 1
((32, 16), True)
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .byoc import FunctionReport, function_report, offloaded, partition_for_accel, system_tag
from .system_graph import SystemGraph, load_system

__all__ = ["AccelModule", "compile", "compile_llvm"]

_SYMBOLS: dict[tuple, list[str]] = {}


@dataclass
class AccelModule:
    """A compiled Relax module whose offloaded calls run on the simulated accelerator."""

    vm: Any
    module: Any  # the partitioned IRModule
    system: SystemGraph | None
    symbols: list[str] = field(default_factory=list)
    input_shapes: list[tuple[int, ...]] = field(default_factory=list)
    entry: str = "main"

    @property
    def reports(self) -> list[FunctionReport]:
        """One report per offloaded function (cycles, KL cycles, utilisation, traffic)."""
        return [function_report(s) for s in self.symbols]

    def report(self) -> dict[str, Any]:
        """JSON-able summary: per-function reports and their totals per call of the entry function."""
        reps = [r.to_dict() for r in self.reports]
        total = sum(r["cycles"] for r in reps)
        kl = [r["cycles_kl"] for r in reps if r["cycles_kl"] is not None]
        return {"system": self.system.name if self.system else None, "offloaded": len(reps),
                "cycles": total, "cycles_kl": sum(kl) if len(kl) == len(reps) else None, "functions": reps}

    def __call__(self, *arrays: np.ndarray):
        """Run the entry function on numpy arrays; returns a numpy array (or a list for tuple outputs)."""
        import tvm

        out = self.vm[self.entry](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays])
        return _to_numpy(out)


def _to_numpy(v):
    if hasattr(v, "numpy"):
        return v.numpy()
    return [_to_numpy(x) for x in v]


def _shapes(mod: Any, entry: str) -> list[tuple[int, ...]]:
    from tvm import relax

    out = []
    for p in mod[entry].params:
        si = getattr(p, "ty", None) or getattr(p, "struct_info", None)
        if isinstance(si, relax.TensorType) and si.shape is not None:
            try:
                out.append(tuple(int(d) for d in si.shape.values))
                continue
            except (TypeError, ValueError):
                pass
        out.append(())
    return out


def _key(mod: Any) -> str:
    return hashlib.sha1(mod.script().encode()).hexdigest()[:16]


def compile(mod: Any, config: "SystemGraph | str | dict | None" = None, target: Any = None, *,
            approach: Any = None, baseline: bool = True, entry: str = "main") -> AccelModule:  # noqa: A001
    """Partition ``mod`` for the accelerator ``config``, build the rest for ``target`` (default host CPU)."""
    from tvm import relax
    import tvm

    from tvm_ext.kernel_cache import get_or_build

    system = load_system(config)
    sig = ("accel.relax", _key(mod), system_tag(system, approach), bool(baseline))

    def make():
        part = partition_for_accel(mod, system, approach=approach, baseline=baseline)
        _SYMBOLS[sig] = (offloaded(part), part)
        return part

    if approach is not None:
        _SYMBOLS.pop(sig, None)
        built = _build_fresh(make, target)
    else:
        built = get_or_build(sig, make, target=target)
    syms, part = _SYMBOLS.get(sig) or (None, None)
    if syms is None:  # cached binary from an earlier process would lack the kernels: rebuild them
        make()
        syms, part = _SYMBOLS[sig]
    vm = relax.VirtualMachine(built, tvm.cpu(0))
    return AccelModule(vm, part, system, list(syms), _shapes(mod, entry), entry)


def _build_fresh(make, target):
    import tvm

    from tvm_ext.target import resolve_target

    return tvm.compile(make(), target=resolve_target(target)).mod


def compile_llvm(mod: Any, target: Any = None, *, entry: str = "main") -> AccelModule:
    """The same module entirely on llvm (the reference the offloaded results are checked against)."""
    from tvm import relax
    import tvm

    from tvm_ext.kernel_cache import get_or_build

    built = get_or_build(("accel.llvm-reference", _key(mod)), lambda: mod, target=target)
    return AccelModule(relax.VirtualMachine(built, tvm.cpu(0)), mod, None, [], _shapes(mod, entry), entry)
