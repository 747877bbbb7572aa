"""Models end to end: llvm-only TVM vs ``tvm_ext.compile`` (measured + simulated) vs PyTorch CPU.

For each of the five models of issue 9 (MLP, GCN on cora, MobileNet-v1
separable stack, DeepBench GRU over 128 steps, ResNet-50 bottleneck), in one
run:

* **llvm-only**: ``tvm.compile`` with TVM's default pipeline and no extension
  (the legalized TIR as written), Relax VM ``time_evaluator``;
* **ours** for each configuration: ``llvm`` (sparse executors / fused GCN,
  tensorized or default-scheduled llvm kernels), ``accel`` (the matrix
  accelerator offload), ``sextans`` (GCN products on the HBM engine).  ``ours_ms``
  is the VM's wall time when nothing is simulated, else the measured time of
  every llvm kernel plus the simulated time of the offloaded ones;
* **torch**: eager forward, no grad, ``--threads`` threads.

Sizes: ``full`` (default: the seeds' shapes), ``small`` (the demo's), ``tiny``
(``--quick``).  Run: ``python -m bench.models [--quick] [--size small] [--models gcn,mlp]``.
"""
from __future__ import annotations

from bench.harness import BenchRun, bench_args, geomean

#: Configurations per model (simulated ones only where the offload is meaningful and affordable).
PLAN = {
    "mlp": ("llvm", "accel"),
    "gcn": ("llvm", "sextans", "accel"),
    "mobilenet": ("llvm", "accel"),
    "gru": ("llvm", "accel"),
    "bottleneck": ("llvm", "accel"),
}
#: At the full sizes the accelerator's functional simulation of these takes too long for a bench run.
FULL_SKIP = {("gru", "accel"), ("mobilenet", "accel"), ("bottleneck", "accel")}


def main() -> None:
    args = bench_args(__doc__.splitlines()[0],
                      size={"default": None, "choices": ("tiny", "small", "full"),
                            "help": "model sizes (default full; tiny with --quick)"},
                      models={"default": ",".join(PLAN), "help": "comma list of models"},
                      configs={"default": None, "help": "comma list of configurations (default: per model)"})
    from tvm_ext.models import get_model
    from tvm_ext.models.compare import ROW_COLUMNS, compare_model

    size = args.size or ("tiny" if args.quick else "full")
    run = BenchRun("models", out_dir=args.out)
    print(run.header())
    print(f"model sizes: {size}")
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        configs = args.configs.split(",") if args.configs else PLAN[name]
        if size == "full" and not args.configs:
            configs = [c for c in configs if (name, c) not in FULL_SKIP]
        case = get_model(name, size)
        print(f"  {name}: {case.description} ...", flush=True)
        for row in compare_model(case, configs):
            run.add(row)
            print(f"    {row['config']}: ours {row['ours_ms']:.3f} ms, llvm-only {row['llvm_only_ms']:.3f} ms, "
                  f"torch {row['torch_ms']:.3f} ms, err {row['max_rel_err']:.1e} ({row['targets']})", flush=True)
    print()
    print(run.markdown(ROW_COLUMNS, ratios={"llvm-only/ours": ("llvm_only_ms", "ours_ms"),
                                            "torch/ours": ("torch_ms", "ours_ms")}))
    plain = [r for r in run.rows if r["config"] == "llvm"]
    print(f"\ngeomean over models, llvm configuration (all measured): "
          f"{geomean(r['llvm_only_ms'] / r['ours_ms'] for r in plain):.2f}x vs the llvm-only TVM build, "
          f"{geomean(r['torch_ms'] / r['ours_ms'] for r in plain):.2f}x vs PyTorch")
    worst = max(r["max_rel_err"] for r in run.rows)
    print(f"worst max relative error vs PyTorch: {worst:.1e}")
    if run.out_path:
        print(f"rows written to {run.out_path}")


if __name__ == "__main__":
    main()
