"""Demo: the five models through torch.export -> Relax -> ``tvm_ext.compile``, next to llvm-only TVM and PyTorch."""
from __future__ import annotations

from tvm_ext.markdown import table

TITLE = "Models end to end: tvm_ext.compile vs the llvm-only TVM build vs PyTorch (CPU)"

#: (model, configurations) at the "small" sizes; accelerator/Sextans runs only where they are quick.
PLAN = (("mlp", ("llvm", "accel")), ("gcn", ("llvm", "sextans", "accel")), ("mobilenet", ("llvm",)),
        ("gru", ("llvm",)), ("bottleneck", ("llvm",)))


def _ratio(num, den):
    return round(num / den, 2) if num and den else None


def run():
    try:
        import torch  # noqa: F401
    except ImportError:
        return {"skipped": "torch not installed"}, ["PyTorch is not installed (pip install 'tvm-ext[torch]'): "
                                                    "the model definitions are PyTorch modules; skipped."]
    from tvm_ext.models import get_model
    from tvm_ext.models.compare import compare_model

    rows, data = [], {}
    for name, configs in PLAN:
        case = get_model(name, "small")
        for r in compare_model(case, configs, repeat=3, min_repeat_ms=20):
            rows.append([name, r["config"], r["targets"], r["ours_ms"], r["llvm_only_ms"], r["torch_ms"],
                         _ratio(r["llvm_only_ms"], r["ours_ms"]), _ratio(r["torch_ms"], r["ours_ms"]),
                         r["cycles"] or None, f"{r['max_rel_err']:.1e}"])
            data[f"{name}/{r['config']}"] = {k: r[k] for k in ("targets", "ours_ms", "ours_llvm_ms", "ours_sim_ms",
                                                               "llvm_only_ms", "torch_ms", "cycles", "max_rel_err",
                                                               "compile_s")}
        data[name] = {"description": case.description}
    lines = [
        "each model: PyTorch module -> torch.export -> Relax frontend -> tvm_ext.compile (sparse executors / "
        "fused GCN / x86 tensorize / accelerator or Sextans BYOC), checked against PyTorch on the same inputs",
        table(["model", "config", "ops run on", "ours ms", "llvm-only ms", "torch ms", "x llvm-only", "x torch",
               "simulated cycles", "max rel err"], rows),
        "ours ms: the VM's wall time when nothing is simulated; with an accelerator/Sextans offload it is the "
        "measured time of the llvm kernels plus the simulated time of the offloaded ones",
        "shapes: " + "; ".join(f"{n} = {data[n]['description']}" for n, _ in PLAN),
        "(timings share the machine with whatever else runs; bench/models.py is the measurement)",
    ]
    return data, lines
