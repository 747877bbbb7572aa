"""Measure a compiled Relax module kernel by kernel: TVM's ``time_evaluator`` per call site.

The Relax VM calls an instrument before and after every call; :func:`profile`
records each kernel call with its arguments during one run, then times every
distinct (kernel, shapes) pair on its own: TIR kernels (the embedded sparse
executors and fused GCN layers included) with ``time_evaluator`` on the
executable's library.  Simulated kernels (accelerator, Sextans) are counted but not timed: their
cost is the simulated cycles.

>>> flatten_outputs(None)
[]
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

__all__ = ["CallStat", "Profile", "profile", "flatten_outputs", "find_function"]


@dataclass
class CallStat:
    """One kernel at one set of argument shapes: how often it ran and its measured time."""

    symbol: str
    shapes: tuple[tuple[int, ...], ...]
    calls: int
    kind: str  # "tir" | "simulated" | "other"
    seconds: float | None = None  # per call

    @property
    def total_seconds(self) -> float:
        return (self.seconds or 0.0) * self.calls


@dataclass
class Profile:
    """Outputs of the profiled run, per-kernel statistics and the run's wall time."""

    outputs: list[np.ndarray]
    stats: list[CallStat]
    wall_seconds: float

    def seconds_of(self, kind: str | None = None) -> float:
        return sum(s.total_seconds for s in self.stats if kind is None or s.kind == kind)


def flatten_outputs(value: Any) -> list[np.ndarray]:
    """A VM result (tensor, tuple/array of tensors, nested) as a flat list of numpy arrays."""
    if value is None:
        return []
    if hasattr(value, "numpy"):
        return [value.numpy()]
    if isinstance(value, (list, tuple)) or hasattr(value, "__len__"):
        out: list[np.ndarray] = []
        for v in value:
            out += flatten_outputs(v)
        return out
    return [np.asarray(value)]


def find_function(module: Any, symbol: str):
    """The runtime module (``module`` or one of its imports) that implements ``symbol``."""
    stack, seen = [module], set()
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        try:
            if m.implements_function(symbol, False):
                return m
        except Exception:  # noqa: BLE001 - some module kinds cannot answer
            pass
        stack += list(getattr(m, "imports", []) or [])
    return None


def _shapes(args: Sequence[Any]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(d) for d in a.shape) for a in args if hasattr(a, "shape"))


def profile(built: Any, args: Sequence[Any], *, simulated: set[str] | frozenset = frozenset(), repeat: int = 50,
            min_repeat_ms: int = 0, entry: str = "main") -> Profile:
    """Run ``entry`` once under the instrument and time every distinct call site.

    TIR kernels are timed with ``time_evaluator``: the fastest of ``repeat`` single runs (each run
    at least ``min_repeat_ms`` long), so on a shared machine a run that another process interrupted
    is not the one kept (averages over a few milliseconds read such pauses as kernel time, three
    times the kernel's own on a loaded 2-core host).  Symbols in ``simulated`` are only counted.
    """
    import tvm
    from tvm import relax

    dev = tvm.cpu(0)
    vm = relax.VirtualMachine(built, dev)
    calls: list[tuple[str, list]] = []

    def instrument(func, symbol, before, ret, *call_args):
        if before:
            name = str(symbol)
            if not name.startswith("vm.builtin"):
                calls.append((name, list(call_args)))
        return 0

    vm.set_instrument(instrument)
    t0 = time.perf_counter()
    result = vm[entry](*args)
    wall = time.perf_counter() - t0
    outputs = flatten_outputs(result)
    stats: dict[tuple, CallStat] = {}
    first_args: dict[tuple, list] = {}
    for name, call_args in calls:
        key = (name, _shapes(call_args))
        if key in stats:
            stats[key].calls += 1
            continue
        if name in simulated:
            kind = "simulated"
        elif find_function(built, name) is not None:
            kind = "tir"
        else:
            kind = "other"
        stats[key] = CallStat(name, key[1], 1, kind)
        first_args[key] = call_args
    for key, st in stats.items():
        a = first_args[key]
        if st.kind == "tir":
            lib = find_function(built, st.symbol)
            res = lib.time_evaluator(st.symbol, dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)(*a)
            st.seconds = float(min(res.results))
    return Profile(outputs, list(stats.values()), wall)
