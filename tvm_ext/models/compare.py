"""One model, three builds, measured in the same run: llvm-only TVM, ``tvm_ext.compile``, PyTorch (CPU).

:func:`compare_model` imports a :class:`~tvm_ext.models.zoo.ModelCase`
through the Relax torch frontend once, then

* builds it with TVM alone (``tvm.compile``, default pipeline, no extension)
  and times the VM with ``time_evaluator``;
* compiles it with :func:`tvm_ext.compile` under each configuration (plain
  llvm extensions, the accelerator, the Sextans engine), profiles it (measured
  time of every llvm kernel + simulated time of the offloaded kernels), and
  checks its outputs against PyTorch;
* times PyTorch's eager forward on the same inputs (the better of torch's
  thread count and one thread).

The rows feed ``bench/models.py``, the ``models`` demo section and ``tvm-ext report``.

>>> CONFIGS["llvm"]
{}
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

__all__ = ["CONFIGS", "compare_model", "torch_seconds", "ROW_COLUMNS"]

#: ``tvm_ext.compile`` keyword sets by name.
CONFIGS: dict[str, dict[str, Any]] = {
    "llvm": {},
    "accel": {"accel": "default"},
    "sextans": {"spmm_engine": "sextans"},
    "sextans-p": {"spmm_engine": "sextans-p"},
}

#: Columns of a comparison row, in display order.
ROW_COLUMNS = ["model", "config", "targets", "llvm_only_ms", "ours_ms", "ours_llvm_ms", "ours_sim_ms", "cycles",
               "torch_ms", "max_rel_err", "compile_s"]


def torch_seconds(module: Any, inputs: Sequence[np.ndarray], *, repeat: int = 5, min_repeat_s: float = 0.05,
                  threads: Sequence[int] | None = None) -> float:
    """Best seconds per eager forward (no grad) of a PyTorch module.

    Timed with torch's current thread count and with one thread, keeping the
    better: on a loaded machine starved OpenMP threads can make the parallel
    run many times slower, and the peer should not look worse than it is.
    """
    import torch

    from tvm_ext.timing import time_python

    xs = [torch.from_numpy(np.ascontiguousarray(a)) for a in inputs]
    module = module.eval()
    before = torch.get_num_threads()
    best = float("inf")
    try:
        for n in threads or sorted({before, 1}, reverse=True):
            torch.set_num_threads(n)
            with torch.no_grad():
                best = min(best, time_python(lambda: module(*xs), repeat=repeat, min_repeat_s=min_repeat_s,
                                             warmup=3).min)
    finally:
        torch.set_num_threads(before)
    return best


def compare_model(case: Any, configs: Sequence[str] = ("llvm",), *, llvm_only: bool = True, torch: bool = True,
                  repeat: int = 3, min_repeat_ms: int = 50) -> list[dict[str, Any]]:
    """One row per configuration: placement, times (ms), simulated cycles, error vs PyTorch."""
    import tvm_ext.compile as tc
    from tvm_ext.errors import ConfigError

    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise ConfigError(f"compare_model: unknown configuration(s) {unknown}; choose from {sorted(CONFIGS)}")
    t0 = time.perf_counter()
    mod = case.relax_module()
    import_s = time.perf_counter() - t0
    ref = case.reference()
    base_ms = None
    if llvm_only:
        base = tc.llvm_only(mod)
        base_ms = 1e3 * base.time(*case.inputs, repeat=repeat, min_repeat_ms=min_repeat_ms)
    torch_ms = 1e3 * torch_seconds(case.module, case.inputs) if torch else None
    rows = []
    for name in configs:
        t1 = time.perf_counter()
        model = tc.compile(mod, **CONFIGS[name])
        compile_s = time.perf_counter() - t1
        report = model.profile(*case.inputs)
        err = tc.max_rel_err(model.last_outputs, ref)
        wall_ms = None
        if not report.cycles:  # nothing simulated: the VM's own time is the real end-to-end number
            wall_ms = 1e3 * model.time(*case.inputs, repeat=repeat, min_repeat_ms=min_repeat_ms)
        ours_ms = 1e3 * report.total_seconds if wall_ms is None else wall_ms
        rows.append({
            "model": case.name, "size": case.size, "description": case.description, "config": name,
            "targets": ", ".join(f"{k} {v}" for k, v in sorted(report.targets().items())),
            "llvm_only_ms": base_ms, "ours_ms": ours_ms, "ours_llvm_ms": 1e3 * report.llvm_seconds,
            "ours_sim_ms": 1e3 * report.simulated_seconds, "ours_wall_ms": wall_ms, "cycles": report.cycles,
            "cycles_by_target": report.cycles_by_target(), "torch_ms": torch_ms, "max_rel_err": err,
            "compile_s": compile_s, "import_s": import_s,
            "tensorized": sum(1 for k in report.kernels if k.schedule == "tensorized"),
            "kernels": len(report.kernels),
        })
    return rows
