"""Autotuning benchmarks: tuned vs default, selector regret, RPC throughput.

Three parts, everything measured in this run:

1. **Tuned vs default** for each search space: the tensorized GEMM, the
   tensorized conv2d (ResNet-50 3x3 and 1x1 layers, NHWC), the sparse
   executors x formats, one fused block-CG iteration (MetaSchedule,
   measured seconds), Sextans K0/N0/D/P and the accelerator's Approach
   choices (XGBoost knob loop, simulated cycles): default cost, best tuned
   cost, speed-up, records and tuning time.
2. **Learned format selector**: a corpus of generated matrices is measured
   (every feasible format's executor), the model is trained on 70% of the
   matrices and judged on the other 30%: regret of its choice against the
   measured best, next to the analytic model's regret on the same cases.
3. **Tuning throughput** over RPC: the same GEMM session measured through a
   tracker with one local server, then with two (trials per minute).  On a
   2-core machine two servers share the same cores, so the second row shows
   the RPC overhead rather than a speed-up; on real machines each server adds
   its own cores.

Run: ``python -m bench.tuning [--quick]``.
"""
from __future__ import annotations

import tempfile
import time

from bench.harness import BenchRun, bench_args, geomean


def _resnet_conv(name: str):
    """The ``tvm-ext tune conv`` task of ResNet-50 layer ``name`` (batch 1, NHWC)."""
    from tvm_ext.tuning.tasks import make_task
    from tvm_ext.workloads import RESNET50_CONV

    layer = next(x for x in RESNET50_CONV if x.name == name)
    return make_task("conv", shape=(layer.n, layer.c_in, layer.c_out, layer.hw, layer.kernel), stride=layer.stride,
                     pad=layer.pad)


def _label(task) -> str:
    """The table's task column: the description, or for a conv the ResNet-50 layer and its sizes."""
    from tvm_ext.workloads import RESNET50_CONV

    if task.kind != "conv":
        return task.describe()[:60]
    s = task.spec()
    _, c_in, c_out, hw, k = s["shape"]
    name = next((x.name for x in RESNET50_CONV
                 if (x.c_in, x.c_out, x.hw, x.kernel, x.stride, x.pad) == (c_in, c_out, hw, k, s["stride"], s["pad"])),
                "conv")
    return f"{name}: {c_in}->{c_out} {hw}x{hw} k{k} s{s['stride']} {s['layout']}"


def _spaces(quick: bool):
    from tvm_ext.tuning.tasks import make_task
    from tvm_ext.workloads import block_fem, lap2d

    if quick:
        return [
            (make_task("gemm", shape=(64, 64, 64)), 12),
            (_resnet_conv("res5_3x3"), 8),
            (_resnet_conv("res5_1x1b"), 8),
            (make_task("spmm", matrix=block_fem(200, 3, 3, seed=0), n=32, name="fem3x3_200"), 8),
            (make_task("cg", matrix=lap2d(32), n=4, name="lap2d_32"), 12),
            (make_task("sextans", matrix="LFAT5", n=8), 30),
            (make_task("accel", workload="matmul", shape=(128, 128, 128)), 12),
        ]
    return [
        (make_task("gemm", shape=(256, 256, 256)), 64),
        (_resnet_conv("res4_3x3"), 48),
        (_resnet_conv("res5_3x3"), 48),
        (_resnet_conv("res3_1x1b"), 32),
        (make_task("spmm", matrix="nasa4704", n=64), 48),
        (make_task("spmm", matrix="cora", n=64), 48),
        (make_task("cg", matrix="nasa4704", n=8, dtype="float64"), 16),
        (make_task("sextans", matrix="nasa4704", n=64), 120),
        (make_task("accel", workload="gru", shape=(8, 128)), 30),
        (make_task("accel", workload="matmul", shape=(256, 256, 256)), 30),
    ]


def tuned_vs_default(quick: bool, out: str) -> BenchRun:
    from tvm_ext.tuning.session import run_session

    run = BenchRun("tuning_spaces", out)
    for task, trials in _spaces(quick):
        with tempfile.TemporaryDirectory(prefix="tvmext-bench-") as db:
            r = run_session(task, db, trials, progress=False)
        run.add({"space": task.kind, "task": _label(task), "unit": r.unit, "default": r.default,
                 "tuned": r.best, "records": r.records, "tuning_s": round(r.seconds, 1),
                 "verified": r.verified, "best_config": r.best_config})
    print(run.header())
    print(run.markdown(["space", "task", "unit", "default", "tuned", "records", "tuning_s", "verified"],
                       ratios={"speedup": ("default", "tuned")}))
    sp = [row["default"] / row["tuned"] for row in run.rows if row["tuned"]]
    print(f"\ngeomean speed-up over the untuned defaults: {geomean(sp):.2f}x\n")
    return run


def selector_regret(quick: bool, out: str) -> BenchRun:
    from tvm_ext.tuning.selector import build_corpus, generate_matrices, regret_report, split_corpus, train_selector

    mats = generate_matrices("tiny" if quick else "small")
    t0 = time.perf_counter()
    corpus = build_corpus(mats, (8, 32) if quick else (8, 32, 128))
    measure_s = time.perf_counter() - t0
    train, test = split_corpus(corpus, 0.3, seed=0)
    t0 = time.perf_counter()
    sel = train_selector(train)
    train_s = time.perf_counter() - t0
    rep = regret_report(sel, test)
    run = BenchRun("tuning_selector", out)
    for who in ("learned", "analytic"):
        s = rep[who]
        run.add({"selector": who, "held_out_cases": rep["cases"], "mean_regret": s["mean_regret"],
                 "geomean_slowdown": s["geomean_slowdown"], "max_regret": s["max_regret"],
                 "hit_rate": s["hit_rate"]})
    print(f"selector: corpus of {len(corpus.matrices)} matrices x N ({len(corpus.entries)} cases) measured in "
          f"{measure_s:.0f} s; trained on {len(train.matrices)} matrices in {train_s:.1f} s; "
          f"held out: {', '.join(test.matrices)}")
    print(run.markdown(["selector", "held_out_cases", "mean_regret", "geomean_slowdown", "max_regret", "hit_rate"]))
    print()
    rows = BenchRun("tuning_selector_cases", out)
    for row in rep["rows"]:
        rows.add(row)
    print(rows.markdown(["matrix", "n", "oracle", "learned", "learned_regret", "analytic", "analytic_regret"]))
    print()
    return run


def rpc_throughput(quick: bool, out: str) -> BenchRun:
    from tvm_ext.tuning.rpc import LocalCluster
    from tvm_ext.tuning.session import run_session
    from tvm_ext.tuning.tasks import make_task

    trials = 8 if quick else 32
    shape = (64, 64, 64) if quick else (128, 128, 128)
    run = BenchRun("tuning_rpc", out)
    for servers in (1, 2):
        with LocalCluster(servers, key=f"bench{servers}") as cluster:
            with tempfile.TemporaryDirectory(prefix="tvmext-bench-rpc-") as db:
                r = run_session(make_task("gemm", shape=shape), db, trials, rpc=cluster.settings, progress=False)
        run.add({"servers": servers, "records": r.records, "session_s": round(r.seconds, 1),
                 "trials_per_min": r.records / r.seconds * 60, "best_s": r.best})
    print(f"RPC throughput, gemm {shape[0]}x{shape[1]}x{shape[2]}, {trials} trials per session "
          "(session time includes the untuned default and the replay check)")
    print(run.markdown(["servers", "records", "session_s", "trials_per_min", "best_s"]))
    base = run.rows[0]["trials_per_min"]
    print(f"\ntwo servers vs one: {run.rows[1]['trials_per_min'] / base:.2f}x trials/min\n")
    return run


def main() -> None:
    args = bench_args(__doc__.splitlines()[0])
    tuned_vs_default(args.quick, args.out)
    selector_regret(args.quick, args.out)
    rpc_throughput(args.quick, args.out)


if __name__ == "__main__":
    main()
