"""GEMM: mapping + x86 micro-kernel ("ours") vs MetaSchedule (XGBoost), TVM untuned, numpy.

ISA Mapper §6.2.1 / §7 on DeepBench GEMM sizes and square 512-2048.  Per shape:

* **ours**: ``tensorize.kernels.quick_tune`` (find mappings, select, emit the
  micro-kernel under a few register-tile / loop-order knobs, keep the fastest);
  its whole search time is reported (the on-disk kernel cache is off, so every
  build is counted);
* **MetaSchedule**: ``tune_tir`` with the XGBoost cost model, ``--trials`` trials
  (default 64), JSON database in a temp dir; its tuning time is reported
  (``--ms-builder inprocess``, the default, gives it the shortest: see
  :func:`metaschedule`);
* **TVM untuned**: ``te.create_prim_func`` built as is (one timed call);
* **numpy** (OpenBLAS) ``a @ b`` with ``--threads`` threads (``numpy_best_ms``: the
  better of that and one thread, the conservative peer on a loaded machine).

Every kernel is built for ``tvm_ext.target.default_target()`` with
``TVM_NUM_THREADS`` from ``--threads``.  Run: ``python -m bench.tensorize_gemm [--quick]``.

``--peak`` prints, on whatever machine runs it, each GEMM as a fraction of the
FMA peak of the detected CPU (:func:`tvm_ext.target.hardware_facts`): peak =
threads x FMA instructions per cycle x lanes x 2 FLOP x clock, the clock measured
by a TVM FMA-throughput kernel (:func:`measured_fma_peak`; the table clock from
``/proc/cpuinfo`` is printed beside it).  Ours (the default micro-kernel that
``tvm_ext.compile`` emits), numpy (OpenBLAS) and torch (MKL/oneDNN) run at 1 and
``--threads`` threads, each thread count in a fresh process.
"""
from __future__ import annotations

from typing import Sequence

import os

#: OpenBLAS overrides of its CPU detection.  Unset in this bench's own process before numpy
#: loads, so numpy runs the kernel OpenBLAS picks for this CPU (reported by ``--peak``).
OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
UNSET_OVERRIDES = ({k: os.environ.pop(k) for k in OPENBLAS_OVERRIDES if k in os.environ}
                   if __name__ == "__main__" else {})

import json  # noqa: E402  (after the environment is settled)
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from bench.harness import BenchRun, bench_args, collect_rows, suite_argv, geomean, time_python, time_tvm  # noqa: E402
from tvm_ext.timing import numpy_time, settle  # noqa: E402

#: DeepBench training GEMMs that run in seconds here (M, N, K), then square sizes.
DEEPBENCH_PICK = ((1760, 16, 1760), (1760, 32, 1760), (1760, 64, 1760), (1760, 128, 1760),
                  (2048, 32, 2048), (2560, 64, 2560), (3072, 128, 1024), (4096, 16, 4096))
SQUARE = ((512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048))
QUICK = ((256, 256, 256), (512, 64, 512))


def shapes(quick: bool) -> list[tuple[int, int, int]]:
    """The (M, N, K) list of a run; the DeepBench picks are checked against the table."""
    from tvm_ext.workloads import DEEPBENCH_GEMM

    if quick:
        return list(QUICK)
    table = {(g.M, g.N, g.K) for g in DEEPBENCH_GEMM}
    missing = [s for s in DEEPBENCH_PICK if s not in table]
    if missing:
        raise SystemExit(f"DeepBench picks {missing} are not in tvm_ext.workloads.DEEPBENCH_GEMM")
    return list(DEEPBENCH_PICK) + list(SQUARE)


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``"1024x1024x1024,1760x16x1760"`` -> [(M, N, K), ...]."""
    out = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise SystemExit(f"--shapes: {item!r} is not MxNxK")
        out.append(tuple(int(p) for p in parts))
    return out


def argparse_hidden():
    """``argparse.SUPPRESS``: an option for the bench's own child processes."""
    import argparse

    return argparse.SUPPRESS


def _builder(kind: str):
    """MetaSchedule's builder: ``local`` (its LocalBuilder) or ``inprocess`` (tvm_ext.tuning's)."""
    from tvm.s_tir import meta_schedule as ms

    if kind == "local":
        # generous timeout: on a busy 2-core machine 30 s builds time out and MS keeps nothing
        return ms.builder.LocalBuilder(timeout_sec=120)
    from tvm_ext.tuning.measure import InProcessBuilder

    return InProcessBuilder()


def metaschedule(func, target, trials: int, builder: str = "inprocess"):
    """Tune ``func`` with MetaSchedule (XGBoost); return (runtime module, tuning seconds).

    ``builder="inprocess"`` (default) compiles candidates in this process and
    skips ``TuneContext``'s eager import of TVM's intrinsic library
    (:func:`tvm_ext.tuning.measure.lean_meta_schedule`): MetaSchedule's
    ``LocalBuilder`` pays about 25 s of worker start-up per batch here, so the
    default gives MetaSchedule its *shortest* tuning time.
    """
    import contextlib
    import logging

    import tvm
    from tvm.s_tir import meta_schedule as ms

    from tvm_ext.tuning.measure import lean_meta_schedule

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)  # its INFO goes to the log dir
    mod = tvm.IRModule({"main": func})
    lean = lean_meta_schedule() if builder == "inprocess" else contextlib.nullcontext()
    with tempfile.TemporaryDirectory(prefix="ms-gemm-") as work, lean:
        t0 = time.perf_counter()
        db = ms.tune_tir(
            mod=mod, target=target, work_dir=work, max_trials_global=trials,
            num_trials_per_iter=min(16, trials),
            builder=_builder(builder),
            runner=ms.runner.LocalRunner(timeout_sec=120, evaluator_config=ms.runner.EvaluatorConfig(
                number=3, repeat=1, min_repeat_ms=50)),
            database=ms.database.JSONDatabase(work_dir=work), cost_model="xgb", num_tuning_cores=2, seed=0)
        tune_s = time.perf_counter() - t0
        sch = db.query_schedule(mod, target, workload_name="main")
        if sch is None:  # every trial failed (e.g. build/run timeouts on a loaded machine)
            records = db.get_all_tuning_records()
            errors = {str(getattr(r, "run_secs", None))[:60] for r in records[:3]}
            print(f"  MetaSchedule found no valid schedule ({len(records)} records, e.g. run_secs {errors})")
            return None, tune_s
        return tvm.compile(sch.mod, target=target).mod, tune_s


def untuned(func, target):
    import tvm

    return tvm.compile(tvm.IRModule({"main": func}), target=target).mod


def run_shape(M: int, N: int, K: int, trials: int, target, builder: str = "inprocess") -> dict:
    import tvm

    from tensorize.kernels import matmul, quick_tune

    kern = matmul(M, N, K)
    a, b = kern.random_inputs(seed=0)
    dev = tvm.cpu(0)
    ta, tb = tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev)
    tc = tvm.runtime.empty((M, N), "float32", dev)
    flops = 2.0 * M * N * K

    tuned = quick_tune(kern, target=target)
    settle()
    ours = time_tvm(tuned.best.module, "main", ta, tb, tc, repeat=5, min_repeat_ms=100)
    np.testing.assert_allclose(tc.numpy(), a @ b, rtol=2e-3, atol=2e-3)

    ms_mod, ms_tune = metaschedule(kern.prim_func(), target, trials, builder)
    settle()
    ms_t = time_tvm(ms_mod, "main", ta, tb, tc, repeat=5, min_repeat_ms=100).min if ms_mod else None

    naive = untuned(kern.prim_func(), target)
    naive_t = time_tvm(naive, "main", ta, tb, tc, repeat=1, min_repeat_ms=0).min

    c = np.empty((M, N), "float32")
    np_t, np_best = numpy_time(lambda: np.matmul(a, b, out=c))
    tiles = next(iter(tuned.best.emitted.values())).tiles
    return {
        "shape": f"{M}x{N}x{K}", "gflop": flops / 1e9,
        "ours_ms": ours.min * 1e3, "ms_ms": ms_t * 1e3 if ms_t else None,
        "untuned_ms": naive_t * 1e3, "numpy_ms": np_t * 1e3, "numpy_best_ms": np_best * 1e3,
        "ours_gflops": flops / ours.min / 1e9, "ms_gflops": flops / ms_t / 1e9 if ms_t else None,
        "numpy_gflops": flops / np_t / 1e9,
        "ours_search_s": tuned.search_seconds, "ms_tune_s": ms_tune,
        "instruction": next(iter(tuned.best.plan.blocks.values())).instruction.name,
        "knobs": f"{tiles} {tuned.knobs.get('outer')}",
    }


# ---------------------------------------------------------------------------
# Fraction of the FMA peak (--peak)
# ---------------------------------------------------------------------------
PEAK_SHAPES = ((512, 512, 512), (2048, 2048, 2048))


def fma_peak_func(parts: int, chains: int, lanes: int, iters: int):
    """A PrimFunc of ``parts`` parallel parts, each running ``chains`` independent vector FMA
    chains (``acc = acc * a + b``, ``lanes`` wide) ``iters`` times in registers.

    >>> fma_peak_func(1, 4, 16, 8).attrs["global_symbol"]
    'main'
    """
    from tvm.script import tirx as T

    @T.prim_func
    def main(out: T.Buffer((parts, chains, lanes), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        acc = T.alloc_buffer((chains, lanes), "float32", scope="local")  # allocated per part (its uses' LCA)
        for p in T.parallel(parts):
            for r in T.unroll(chains):
                for lane in T.vectorized(lanes):
                    acc[r, lane] = T.Cast("float32", p + r)
            for _ in range(iters):
                for r in T.unroll(chains):
                    for lane in T.vectorized(lanes):
                        acc[r, lane] = acc[r, lane] * T.float32(0.99999) + T.float32(1e-6)
            for r in T.unroll(chains):
                for lane in T.vectorized(lanes):
                    out[p, r, lane] = acc[r, lane]

    return main


def measured_fma_peak(threads: int, target=None, iters: int = 1 << 16) -> dict:
    """GFLOP/s of :func:`fma_peak_func` on ``threads`` threads, and the clock it implies.

    It uses all but four of the target's vector registers as independent chains (more than
    FMA units x latency), so it runs at the FMA issue rate: ``ghz`` = GFLOP/s / (threads x
    FLOP per cycle of the detected CPU).  On a shared machine the multi-thread figure
    suffers from other load first; the one-thread clock is the steadier one.  A run of a
    few ms fits in one scheduler slice and gives the core's peak; ``iters=1 << 20`` runs
    about as long as a 2048^3 GEMM and gives the share of it other processes leave.
    """
    import tvm

    from tvm_ext.target import hardware_facts, resolve_target

    tgt = resolve_target(target)
    facts = hardware_facts(tgt)
    chains, lanes = facts.vector_registers - 4, facts.lanes("float32")
    ex = tvm.compile(tvm.IRModule({"main": fma_peak_func(threads, chains, lanes, iters)}), target=tgt)
    out = tvm.runtime.empty((threads, chains, lanes), "float32")
    res = ex.mod.time_evaluator("main", tvm.cpu(0), number=3, repeat=7)(out)
    gflops = threads * chains * lanes * iters * 2 / min(res.results) / 1e9
    return {"threads": threads, "gflops": gflops, "ghz": gflops / (threads * facts.flops_per_cycle("float32"))}


def _table_ghz() -> float | None:
    """The clock ``/proc/cpuinfo`` reports (often the base or current frequency, not the boost)."""
    try:
        with open("/proc/cpuinfo") as fh:
            mhz = [float(line.split(":")[1]) for line in fh if line.startswith("cpu MHz")]
    except (OSError, ValueError):
        return None
    return max(mhz) / 1000 if mhz else None


def numpy_kernel() -> str:
    """OpenBLAS's kernel and version as threadpoolctl reports them (e.g. ``SkylakeX 0.3.31``)."""
    from threadpoolctl import threadpool_info

    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(f"{i.get('internal_api')} {i.get('architecture')} {i.get('version')}" for i in blas) or "?"


def torch_backend() -> str:
    """The BLAS torch was built with and whether oneDNN (mkldnn) is on."""
    import torch

    cfg = torch.__config__.show()
    blas = next((line.split("=", 1)[1].strip(" ,") for line in cfg.replace(",", "\n").splitlines()
                 if "BLAS_INFO=" in line), "?")
    return f"{blas}, oneDNN {'on' if torch.backends.mkldnn.is_available() else 'off'}"


def peak_rows(threads: int, shape_list, repeat: int = 5) -> dict:
    """In this process (``TVM_NUM_THREADS`` = ``threads``): the measured FMA peak and, per shape,
    ours / numpy / torch GFLOP/s on ``threads`` threads."""
    import torch
    import tvm
    from threadpoolctl import threadpool_limits

    from tensorize.kernels import matmul, tensorized
    from tvm_ext.target import default_target, hardware_facts

    target = default_target()
    torch.set_num_threads(threads)
    peak1 = measured_fma_peak(1, target)
    peak_n = measured_fma_peak(threads, target) if threads > 1 else peak1
    available = measured_fma_peak(threads, target, iters=1 << 20)  # as long as a big GEMM: what load leaves
    rows = []
    for M, N, K in shape_list:
        kern = matmul(M, N, K)
        a, b = kern.random_inputs(seed=0)
        flops = 2.0 * M * N * K
        t = tensorized(kern, target=target)
        ta, tb, tc = tvm.runtime.tensor(a), tvm.runtime.tensor(b), tvm.runtime.empty((M, N), "float32")
        settle()
        ours = time_tvm(t.module, "main", ta, tb, tc, repeat=repeat, min_repeat_ms=100).min
        np.testing.assert_allclose(tc.numpy(), a @ b, rtol=2e-3, atol=2e-3)
        c = np.empty((M, N), "float32")
        with threadpool_limits(threads, user_api="blas"):
            settle()
            np_t = time_python(lambda: np.matmul(a, b, out=c), repeat=repeat, min_repeat_s=0.1).min
        at, bt, ct = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)
        with torch.no_grad():
            settle()
            torch_t = time_python(lambda: torch.matmul(at, bt, out=ct), repeat=repeat, min_repeat_s=0.1).min
        tile = next(iter(t.emitted.values())).tiles
        rows.append({"threads": threads, "shape": f"{M}x{N}x{K}", "tile": str(tile),
                     "ours_gflops": flops / ours / 1e9, "numpy_gflops": flops / np_t / 1e9,
                     "torch_gflops": flops / torch_t / 1e9})
    return {"threads": threads, "peak_1thread": peak1, "peak": peak_n, "available": available, "rows": rows,
            "facts": hardware_facts(target).to_dict(), "numpy_kernel": numpy_kernel(),
            "torch_backend": torch_backend()}


def _child(threads: int, shape_list) -> dict:
    """Run :func:`peak_rows` in a fresh process with ``threads`` threads (TVM's pool starts once)."""
    env = dict(os.environ)
    for key in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[key] = str(threads)
    spec = ",".join(f"{m}x{n}x{k}" for m, n, k in shape_list)
    cmd = [sys.executable, "-m", "bench.tensorize_gemm", "--peak-child", str(threads), "--shapes", spec,
           "--threads", str(threads)]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"--peak: the {threads}-thread run failed:\n{res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def peak_report(args) -> None:
    """Print each GEMM as a fraction of the detected CPU's FMA peak, at 1 and ``--threads`` threads."""
    from tvm_ext.target import gemm_blocking, hardware_facts

    shape_list = parse_shapes(args.shapes) if args.shapes else list(PEAK_SHAPES)
    run = BenchRun("tensorize_gemm_peak", out_dir=args.out)
    print(run.header())
    facts = hardware_facts()
    print(f"hardware facts: {facts}\nGEMM blocking (Low et al. 2016): {gemm_blocking(facts)}")
    if UNSET_OVERRIDES:
        print(f"unset in this process before numpy loaded: {UNSET_OVERRIDES}")
    table_ghz = _table_ghz()
    for threads in dict.fromkeys((1, args.threads)):
        rec = _child(threads, shape_list)
        per_core = rec["peak_1thread"]["gflops"]
        peak = per_core * threads  # the one-thread measurement scales; a loaded machine spoils the n-thread one
        nominal = facts.peak_gflops(table_ghz, cores=threads) if table_ghz else None
        print(f"{threads} thread(s): measured FMA peak {peak:.0f} GFLOP/s (1 thread {per_core:.0f} at an "
              f"implied {rec['peak_1thread']['ghz']:.2f} GHz; {threads}-thread kernel {rec['peak']['gflops']:.0f}); "
              f"table clock {table_ghz or float('nan'):.2f} GHz -> {nominal or float('nan'):.0f}; sustained "
              f"(~100 ms runs, what other load leaves) {rec['available']['gflops']:.0f}; "
              f"numpy: {rec['numpy_kernel']}; torch: {rec['torch_backend']}")
        for row in rec["rows"]:
            avail = rec["available"]["gflops"]
            row.update({"peak_gflops": peak, "nominal_peak_gflops": nominal, "available_gflops": avail,
                        **{f"{who}_pct_peak": 100 * row[f"{who}_gflops"] / peak for who in ("ours", "numpy", "torch")},
                        "ours_pct_available": 100 * row["ours_gflops"] / avail,
                        "numpy_kernel": rec["numpy_kernel"], "torch_backend": rec["torch_backend"]})
            run.add(row)
    cols = ["threads", "shape", "peak_gflops", "available_gflops", "ours_gflops", "ours_pct_peak",
            "ours_pct_available", "numpy_gflops", "numpy_pct_peak", "torch_gflops", "torch_pct_peak", "tile"]
    print(run.markdown(cols, ratios={"ours/numpy": ("ours_gflops", "numpy_gflops"),
                                     "ours/torch": ("ours_gflops", "torch_gflops")}))
    if run.out_path:
        print(f"rows written to {run.out_path}")


def run(quick: bool, *, out: str | None = None, argv: Sequence[str] = ()) -> list[dict]:
    """Run this suite as its command line does; its rows, each with its ``bench`` name.

    ``out``: directory for the JSON lines (None: none written); ``argv``: more options of ``main``.
    """
    return collect_rows(main, suite_argv(quick, out, argv))


def main(argv: Sequence[str] | None = None) -> None:
    args = bench_args(__doc__.splitlines()[0], argv,
                      trials=dict(type=int, default=None, help="MetaSchedule trials (default 64; 16 with --quick)"),
                      shapes=dict(default=None, help="comma-separated MxNxK list instead of the default set"),
                      ms_builder=dict(default="inprocess", choices=("inprocess", "local"),
                                      help="MetaSchedule builder (default inprocess: its fastest tuning time)"),
                      peak=dict(action="store_true", help="GEMM as a fraction of this CPU's FMA peak, with "
                                "numpy and torch at 1 and --threads threads"),
                      peak_child=dict(type=int, default=None, help=argparse_hidden()))
    if args.peak_child is not None:
        shape_list = parse_shapes(args.shapes) if args.shapes else list(PEAK_SHAPES)
        print(json.dumps(peak_rows(args.peak_child, shape_list), default=str))
        return
    if args.peak:
        peak_report(args)
        return

    from tvm_ext.target import default_target

    # our search time must include its builds: no kernel from an earlier run's disk cache
    os.environ["TVM_EXT_CACHE_DIR"] = "off"
    trials = args.trials or (16 if args.quick else 64)
    target = default_target()
    run = BenchRun("tensorize_gemm", out_dir=args.out)
    print(run.header())
    print(f"MetaSchedule: {trials} trials, XGBoost cost model, {args.ms_builder} builder; target {target}")
    for M, N, K in parse_shapes(args.shapes) if args.shapes else shapes(args.quick):
        row = run_shape(M, N, K, trials, target, args.ms_builder)
        run.add(row)
        print(f"  {row['shape']}: ours {row['ours_gflops']:.1f} GFLOP/s ({row['knobs']}), "
              f"MS {row['ms_gflops'] or float('nan'):.1f}, numpy {row['numpy_gflops']:.1f}", flush=True)
    cols = ["shape", "gflop", "ours_ms", "ms_ms", "untuned_ms", "numpy_ms", "numpy_best_ms", "ours_gflops",
            "ours_search_s", "ms_tune_s", "instruction", "knobs"]
    print(run.markdown(cols, ratios={"MS/ours": ("ms_ms", "ours_ms"), "numpy/ours": ("numpy_ms", "ours_ms"),
                                     "untuned/ours": ("untuned_ms", "ours_ms"),
                                     "search ours/MS": ("ours_search_s", "ms_tune_s")}))
    rows = run.rows
    g_ms = geomean(r["ms_ms"] / r["ours_ms"] for r in rows if r["ms_ms"])
    g_np = geomean(r["numpy_ms"] / r["ours_ms"] for r in rows)
    ours_s = sum(r["ours_search_s"] for r in rows)
    ms_s = sum(r["ms_tune_s"] for r in rows)
    print(f"\ngeomean speed vs MetaSchedule-{trials}: {g_ms:.2f}x (goal >= 0.9x); vs numpy: {g_np:.2f}x "
          f"(goal >= 2x); search time ours {ours_s:.1f} s vs MetaSchedule {ms_s:.1f} s "
          f"({ours_s / ms_s:.3f} of it; goal < 0.1)")
    if run.out_path:
        print(f"rows written to {run.out_path}")


if __name__ == "__main__":
    main()
