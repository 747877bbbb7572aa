"""Models at the call from numpy: ``tvm_ext.compile`` vs ONNX Runtime, OpenVINO, TVM + MetaSchedule, torch.

Every runtime is timed the way users call it, ``outputs = run(x)`` on numpy
arrays (64-byte-aligned inputs, so ``model(x)`` takes no copy), in one run:

* **ours**: ``tvm_ext.compile(mod)`` then ``model(x)``; also the VM alone
  (``ours_vm_ms``: the VM function called from Python on prepared TVM
  tensors, timed in the same turns as ``model(x)``; ``ours_te_ms``: TVM's
  ``time_evaluator``, after the other runtimes' threads parked), and the call
  overhead in µs: ``model(x)`` against the VM function on prepared tensors,
  paired call by call (:func:`call_overhead_us`, the median of the per-pair
  differences), and ``dlpack_us``, the part of it that is the DLPack exchange
  alone (:func:`dlpack_exchange_us`: the VM function on the numpy arrays, outputs
  through ``np.from_dlpack``), and ``overhead_cpu_us``, the overhead in the calling thread's CPU
  time (what a preemption by another process adds is left out; :mod:`bench.call_overhead` breaks
  the overhead down step by step); and ``ours_unaligned_ms``, the call on
  inputs 16 bytes off a 64-byte boundary (where numpy often allocates), which
  ``model(x)`` reads in place (its kernels declare element-aligned parameters);
* **ort**: ONNX Runtime, CPU execution provider, ``intra_op_num_threads`` =
  ``--threads``, ``inter_op`` 1, on the same ONNX graph.  Ours (and our VM
  alone) and ORT take three turns each (:func:`separate_turns`, best kept),
  every turn after the previous runtime's worker threads have parked: two thread pools interleaved
  call by call on two cores slow each other by up to 6x, which measures their
  interference, not either runtime;
* **openvino**: OpenVINO's CPU plugin on the same ONNX graph (f32);
* **ms**: TVM's own best, ``relax.pipeline.static_shape_tuning_pipeline``
  (``cpu_weight_prepack=True``) applied before ``tvm.compile``, with a budget of
  ``--ms-trials-per-task`` trials per MetaSchedule task (about 64 is fair; the
  total is that times the task count) and its tuning time.  Opt-in (slow); the
  database is kept under ``--ms-work`` so a re-run is free; ``--quick`` skips it;
* **torch.compile** (inductor) and **eager** PyTorch, ``torch.set_num_threads(--threads)``;
* **llvm-only**: ``tvm.compile`` with TVM's default pipeline and no tuning (a column only).

Models: the MLPs 1024-2048-2048-1000 (batch 64) and 784-512-512-10 (batch 1),
ResNet-50 bottlenecks 256-64-256 at 56x56 and 512-128-512 at 28x28 and the
2-layer GCN on cora, built as ONNX graphs (:mod:`tvm_ext.models.onnx_models`;
TVM and ONNX Runtime/OpenVINO run the same graph, torch an equal-shaped module
with its own seeded weights); plus the MobileNet-v1 stack and the GRU of
:mod:`tvm_ext.models.zoo` (TVM imports ``torch.export``, ONNX Runtime and
OpenVINO get ``torch.onnx.export``).  Outputs are checked against ONNX Runtime
(ONNX graphs) or PyTorch (zoo models).  ``--quick``: tiny shapes, no
MetaSchedule, no torch.compile.

Run: ``python -m bench.models [--quick] [--models mlp-2048,gcn] [--ms-trials-per-task 64]``.
"""
from __future__ import annotations

import io
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tvm_ext.timing import settle
from bench.harness import BenchRun, bench_args, collect_rows, suite_argv, geomean, time_python

#: Columns of the printed table, in order.
COLUMNS = ["model", "ort_ms", "openvino_ms", "ms_ms", "torch_compile_ms", "torch_ms", "ours_ms", "ours_vm_ms",
           "ours_te_ms", "overhead_us", "overhead_cpu_us", "dlpack_us", "ours_unaligned_ms", "llvm_only_ms",
           "max_rel_err"]
#: Ratio columns: peer time / our time at the call (above 1: we are faster).
RATIOS = {"ours/ORT": ("ort_ms", "ours_ms"), "ours/OpenVINO": ("openvino_ms", "ours_ms"),
          "ours/MS-tuned": ("ms_ms", "ours_ms"), "ours/torch.compile": ("torch_compile_ms", "ours_ms"),
          "ours/eager": ("torch_ms", "ours_ms"), "x llvm-only": ("llvm_only_ms", "ours_ms")}


@dataclass
class Case:
    """One model: how TVM imports it, the ONNX graph the ONNX peers run, the torch module, inputs."""

    name: str
    description: str
    relax_module: Callable[[], Any]
    onnx: Any
    torch_module: Any
    inputs: list[np.ndarray]
    reference: str  # "ort" or "torch": what our outputs are checked against


def _aligned(arrays) -> list[np.ndarray]:
    from tvm_ext.zero_copy import aligned_copy

    return [aligned_copy(a) for a in arrays]


def _onnx_case(name: str, description: str, proto: Any, torch_module: Any, x: np.ndarray) -> Case:
    from tvm_ext.models.frontends import from_onnx

    return Case(name, description, lambda: from_onnx(proto), proto, torch_module, _aligned([x]), "ort")


def _mlp(name: str, sizes: list[int], batch: int) -> Case:
    from tvm_ext.models.onnx_models import mlp_onnx
    from tvm_ext.models.torch_models import MLP

    x = np.random.default_rng(1).standard_normal((batch, sizes[0])).astype("float32")
    return _onnx_case(name, f"MLP {'-'.join(map(str, sizes))}, batch {batch}", mlp_onnx(sizes, batch), MLP(sizes), x)


def _bottleneck(name: str, c_in: int, mid: int, hw: int) -> Case:
    from tvm_ext.models.onnx_models import bottleneck_onnx
    from tvm_ext.models.torch_models import Bottleneck

    x = np.random.default_rng(5).standard_normal((1, c_in, hw, hw)).astype("float32")
    return _onnx_case(name, f"ResNet-50 bottleneck {c_in}-{mid}-{4 * mid}, {hw}x{hw}", bottleneck_onnx(c_in, mid, hw),
                      Bottleneck(c_in, mid), x)


def _gcn(name: str, quick: bool) -> Case:
    from tvm_ext.models.onnx_models import gcn_onnx
    from tvm_ext.models.torch_models import GCN
    from tvm_ext.models.zoo import small_graph

    if quick:
        A, (f, h, c), label = small_graph(), (24, 16, 4), "a random graph"
    else:
        from tvm_ext.spmm_engine.gcn import normalize_adjacency
        from tvm_ext.workloads import load_matrix

        A, (f, h, c), label = normalize_adjacency(load_matrix("cora")), (1433, 16, 7), "cora"
    x = (np.random.default_rng(2).random((A.shape[0], f)) < 0.05).astype(np.float32)
    return _onnx_case(name, f"2-layer GCN on {label} ({A.shape[0]} nodes), {f}-{h}-{c}", gcn_onnx(A, f, h, c),
                      GCN(A, f, h, c), x)


def _zoo(name: str, size: str) -> Case:
    """A zoo model: TVM imports torch.export; the ONNX peers get torch.onnx.export (TorchScript exporter)."""
    import onnx
    import torch

    from tvm_ext.models import get_model

    case = get_model(name, size)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(case.module.eval(), tuple(torch.from_numpy(a) for a in case.inputs), buf, dynamo=False,
                          input_names=[f"x{i}" for i in range(len(case.inputs))])
    return Case(name, case.description, case.relax_module, onnx.load_model_from_string(buf.getvalue()), case.module,
                _aligned(case.inputs), "torch")


def cases(quick: bool, zoo_size: str) -> dict[str, Callable[[], Case]]:
    """Model name -> case builder (tiny shapes with ``quick``)."""
    if quick:
        return {"mlp-2048": lambda: _mlp("mlp-2048", [32, 64, 48, 10], 8),
                "mlp-512": lambda: _mlp("mlp-512", [24, 16, 16, 4], 1),
                "bottleneck-56": lambda: _bottleneck("bottleneck-56", 32, 8, 8),
                "bottleneck-28": lambda: _bottleneck("bottleneck-28", 16, 4, 6),
                "gcn": lambda: _gcn("gcn", True),
                "mobilenet": lambda: _zoo("mobilenet", "tiny"),
                "gru": lambda: _zoo("gru", "tiny")}
    return {"mlp-2048": lambda: _mlp("mlp-2048", [1024, 2048, 2048, 1000], 64),
            "mlp-512": lambda: _mlp("mlp-512", [784, 512, 512, 10], 1),
            "bottleneck-56": lambda: _bottleneck("bottleneck-56", 256, 64, 56),
            "bottleneck-28": lambda: _bottleneck("bottleneck-28", 512, 128, 28),
            "gcn": lambda: _gcn("gcn", False),
            "mobilenet": lambda: _zoo("mobilenet", zoo_size),
            "gru": lambda: _zoo("gru", zoo_size)}


def separate_turns(calls: dict[str, Callable[[], Any] | None], timing: dict, *, turns: int = 3
                   ) -> dict[str, float]:
    """Best seconds per call of each of ``calls`` (None entries are skipped) over ``turns`` turns.

    The calls take turns, so a burst of other load on a shared machine does not fall on one of them
    only; every turn starts after :func:`~tvm_ext.timing.settle`, so the previous runtime's worker
    threads have parked and do not slow the next one (two pools on two cores slow each other by up to 6x).

    >>> best = separate_turns({"a": lambda: None, "b": None}, {"repeat": 1, "min_repeat_s": 1e-4}, turns=1)
    >>> sorted(best)
    ['a']
    """
    best: dict[str, float] = {}
    for _ in range(turns):
        for key, fn in calls.items():
            if fn is not None:
                settle(0.1)
                best[key] = min(best.get(key, float("inf")), time_python(fn, **timing).min)
    return best


def paired_overhead_us(call: Callable[[], Any], reference: Callable[[], Any], *, budget_s: float = 1.0,
                       min_pairs: int = 40, max_pairs: int = 20000,
                       clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """Microseconds ``call()`` takes over ``reference()``, paired call by call.

    Each pair runs both once, each call timed on its own.  A burst of other load lasts longer than a
    pair, so it falls on both calls of most pairs, and a median drops the pairs it split.  The order
    alternates between pairs, and the result is the mean of the two orders' median differences:
    whatever the first call of a pair pays more than the second (waking the thread pool after the
    loop's own work) enters one order with a plus sign and the other with a minus sign, and cancels.
    (Differences of two loops' best times read noise of about 2% of the model's time: +-70 us on a
    3.6 ms model.)  ``budget_s``: seconds of pairs to run (at least ``min_pairs``, at most ``max_pairs``).
    ``clock``: nanoseconds, wall time by default; ``time.thread_time_ns`` counts only what the calling
    thread ran, so a preemption by another process on a loaded machine does not enter a call's time.

    >>> nap = lambda: time.sleep(2e-4)  # a call that costs a sleep more than the reference
    >>> 150 < paired_overhead_us(nap, lambda: None, budget_s=0.02, min_pairs=20) < 5000
    True
    """
    for _ in range(2):  # warm: pooled buffers mapped, caches and branch predictors primed
        call()
        reference()
    t0 = time.perf_counter_ns()
    call()
    reference()
    pairs = int(min(max_pairs, max(min_pairs, budget_s * 1e9 / max(time.perf_counter_ns() - t0, 1))))
    diffs: tuple[list[int], list[int]] = ([], [])  # call - reference, call first / reference first
    for i in range(pairs):
        if i & 1:
            t0 = clock()
            reference()
            t1 = clock()
            call()
            t2 = clock()
            diffs[1].append((t2 - t1) - (t1 - t0))
        else:
            t0 = clock()
            call()
            t1 = clock()
            reference()
            t2 = clock()
            diffs[0].append((t1 - t0) - (t2 - t1))
    return float(np.median(diffs[0]) + np.median(diffs[1])) / 2e3


def call_overhead_us(model: Any, xs: Sequence[np.ndarray], *, budget_s: float = 1.0, min_pairs: int = 40,
                     max_pairs: int = 20000, clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """Microseconds ``model(*xs)`` takes over its VM function called on prepared TVM tensors.

    Both calls run the same kernels on the same memory (the prepared tensors view ``xs``), and both
    drop their result at once, so the output buffers go back to the VM's pool the same way (no page
    faults in either); the difference is what a user pays for calling from numpy: the checks, the
    FFI's DLPack view of each numpy input, ``np.from_dlpack`` of each output and its release
    (:func:`dlpack_exchange_us` measures those two alone).  On a model of milliseconds that path runs
    from caches and TLBs the kernels just swept, which is why it costs 15-25 us there against
    ~1-3 us on a 24 us model (about 1 us of it warm work): :mod:`bench.call_overhead` measures
    each step with the caches swept by a 32 MB copy before each call, where the layer costs about
    20 us over the VM on a tiny model, about half of it the DLPack exchange.  Paired as
    :func:`paired_overhead_us` (``clock``: its clock).

    >>> class M:  # a model whose call costs a sleep more than its VM function
    ...     vm = {"main": lambda: None}
    ...     def _tensors(self, xs): return []
    ...     def __call__(self): time.sleep(2e-4)
    >>> 150 < call_overhead_us(M(), [], budget_s=0.02, min_pairs=20) < 5000
    True
    """
    vm_main, tensors = model.vm["main"], model._tensors(xs)
    return paired_overhead_us(lambda: model(*xs), lambda: vm_main(*tensors), budget_s=budget_s,
                              min_pairs=min_pairs, max_pairs=max_pairs, clock=clock)


def dlpack_exchange_us(model: Any, xs: Sequence[np.ndarray], *, budget_s: float = 1.0, min_pairs: int = 40,
                       max_pairs: int = 20000) -> float:
    """Microseconds the DLPack exchange alone adds to the VM function: called on the numpy arrays
    themselves (the FFI views each), its outputs taken by ``np.from_dlpack``, against the VM function
    on prepared tensors (paired as :func:`paired_overhead_us`).  This is the part of
    :func:`call_overhead_us` that lies in TVM's FFI and numpy rather than in ``model(x)``'s own layer.

    >>> class M:  # a VM function that returns its input
    ...     vm = {"main": lambda x: x}
    ...     def _tensors(self, xs): return list(xs)
    >>> -1000 < dlpack_exchange_us(M(), [np.zeros(3)], budget_s=0.01, min_pairs=20) < 1000
    True
    """
    from tvm_ext.model_call import numpy_outputs

    vm_main, tensors = model.vm["main"], model._tensors(xs)
    to_numpy = np.from_dlpack if hasattr(vm_main(*tensors), "__dlpack__") else numpy_outputs  # one output or more
    return paired_overhead_us(lambda: to_numpy(vm_main(*xs)), lambda: vm_main(*tensors), budget_s=budget_s,
                              min_pairs=min_pairs, max_pairs=max_pairs)


def _off_by_16(a: np.ndarray) -> np.ndarray:
    """A copy of ``a`` starting 16 bytes past a 64-byte boundary (``model(x)`` must copy it aligned)."""
    from tvm_ext.zero_copy import empty_aligned

    raw = empty_aligned(a.nbytes + 16, "uint8")
    out = raw[16:].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else 1e3 * seconds


def _peer(row: dict, key: str, make: Callable[[], Callable], xs: list[np.ndarray], timing: dict) -> None:
    """Time one peer at the call; on failure the row says why instead of a number."""
    from tvm_ext.models.peers import PeerUnavailable

    try:
        run = make()
        settle()  # the previous runtime's worker threads park first
        row[key] = _ms(time_python(lambda: run(*xs), **timing).min)
    except PeerUnavailable as e:
        row[key] = None
        row.setdefault("notes", []).append(f"{key}: {e}")


def _ort_or_note(row: dict, case: Case, threads: int) -> Callable | None:
    """ONNX Runtime on ``case``, or None with a note in ``row`` saying why it cannot run."""
    from tvm_ext.models.peers import PeerUnavailable, ort_runner

    try:
        return ort_runner(case.onnx, threads)
    except PeerUnavailable as e:
        row["ort_ms"] = None
        row.setdefault("notes", []).append(f"ort_ms: {e}")
        return None


def bench_case(case: Case, args: Any) -> dict[str, Any]:
    """One row: every runtime on ``case`` at the call, ours checked against the reference."""
    import tvm_ext
    import tvm_ext.compile as tc
    from tvm_ext.models.peers import metaschedule_build, openvino_runner, ort_runner, torch_runner

    timing = {"repeat": args.repeat, "min_repeat_s": args.min_repeat_s, "warmup": 2}
    xs = case.inputs
    row: dict[str, Any] = {"model": case.name, "description": case.description, "config": "llvm"}
    t0 = time.perf_counter()
    mod = case.relax_module()
    row["import_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    model = tvm_ext.compile(mod)
    row["compile_s"] = time.perf_counter() - t0
    outs = model(*xs)
    ort = _ort_or_note(row, case, args.threads)
    ref = (ort or ort_runner(case.onnx, args.threads))(*xs) if case.reference == "ort" else \
        torch_runner(case.torch_module, xs, threads=args.threads)(*xs)
    row["max_rel_err"] = tc.max_rel_err(outs, ref)
    vm_main, tensors = model.vm["main"], model._tensors(xs)
    best = separate_turns({"ours_ms": lambda: model(*xs), "ours_vm_ms": lambda: vm_main(*tensors),
                           "ort_ms": ort and (lambda: ort(*xs))}, timing)
    row.update({k: _ms(v) for k, v in best.items()})
    settle()  # ONNX Runtime's workers park first: they spin on the two cores the VM's threads need
    row["ours_te_ms"] = _ms(model.time(*xs, repeat=args.repeat, min_repeat_ms=int(1e3 * args.min_repeat_s)))
    row["overhead_us"] = call_overhead_us(model, xs)
    row["overhead_cpu_us"] = call_overhead_us(model, xs, clock=time.thread_time_ns)
    row["dlpack_us"] = dlpack_exchange_us(model, xs)
    row["aligned_copies"] = model._call.aligned_copies
    misaligned = [_off_by_16(a) for a in xs]  # where numpy's own allocator often puts an array
    row["ours_unaligned_ms"] = _ms(time_python(lambda: model(*misaligned), **timing).min)
    row["targets"] = ", ".join(f"{k} {v}" for k, v in sorted(model.report.targets().items()))
    if not args.no_openvino:
        _peer(row, "openvino_ms", lambda: openvino_runner(case.onnx, args.threads), xs, timing)
    _peer(row, "torch_ms", lambda: torch_runner(case.torch_module, xs, threads=args.threads), xs, timing)
    if not args.quick and not args.no_torch_compile:
        _peer(row, "torch_compile_ms", lambda: torch_runner(case.torch_module, xs, compile=True, threads=args.threads),
              xs, timing)
    if args.ms_trials_per_task and not args.quick:
        try:
            tuned = metaschedule_build(mod, model.specs, Path(args.ms_work) / case.name,
                                       trials_per_task=args.ms_trials_per_task)
        except Exception as e:  # noqa: BLE001 - a failed baseline is a note in its row, not a lost run
            row.setdefault("notes", []).append(f"ms_ms: MetaSchedule build failed: {type(e).__name__}: {e}")
        else:
            settle()
            row["ms_ms"] = _ms(time_python(lambda: tuned.run(*xs), **timing).min)
            row["ms_max_rel_err"] = tc.max_rel_err(tuned.run(*xs), ref)
            row.update(ms_tuning_s=tuned.tuning_seconds, ms_tasks=tuned.tasks,
                       ms_trials_per_task=tuned.trials_per_task, ms_cached=tuned.cached)
    if not args.no_llvm_only:
        base = tc.llvm_only(mod)
        row["llvm_only_ms"] = _ms(time_python(lambda: base(*xs), repeat=max(2, args.repeat // 2),
                                              min_repeat_s=args.min_repeat_s, warmup=1).min)
    return row


def run(quick: bool, *, out: str | None = None, argv: Sequence[str] = ()) -> list[dict]:
    """Run this suite as its command line does; its rows, each with its ``bench`` name.

    ``out``: directory for the JSON lines (None: none written); ``argv``: more options of ``main``.
    """
    return collect_rows(main, suite_argv(quick, out, argv))


def main(argv: Sequence[str] | None = None) -> None:
    args = bench_args(__doc__.splitlines()[0], argv,
                      models={"default": None, "help": "comma list of models (default: all)"},
                      zoo_size={"default": "small", "choices": ("tiny", "small", "full"),
                                "help": "size of the zoo models (mobilenet, gru); default small"},
                      ms_trials_per_task={"type": int, "default": 0,
                                          "help": "tune TVM's MetaSchedule baseline with about this many trials per "
                                                  "task (64 is fair; 0: skip, the default)"},
                      ms_work={"default": "bench/ms_work", "help": "MetaSchedule databases (re-runs reuse them)"},
                      repeat={"type": int, "default": 5, "help": "timing repeats (the best is kept)"},
                      min_repeat_s={"type": float, "default": 0.1, "help": "seconds per timing repeat"},
                      no_openvino={"action": "store_true", "help": "skip OpenVINO"},
                      no_torch_compile={"action": "store_true", "help": "skip torch.compile"},
                      no_llvm_only={"action": "store_true", "help": "skip the untuned llvm-only TVM build"})
    if args.quick:
        args.repeat, args.min_repeat_s = min(args.repeat, 3), min(args.min_repeat_s, 0.02)
    builders = cases(args.quick, args.zoo_size)
    names = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else list(builders)
    unknown = [n for n in names if n not in builders]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {', '.join(builders)}")
    run = BenchRun("models", out_dir=args.out)
    print(run.header())
    budget = f"about {args.ms_trials_per_task} trials per task" if args.ms_trials_per_task and not args.quick \
        else "not run (pass --ms-trials-per-task 64)"
    print(f"threads {args.threads}; MetaSchedule baseline: {budget}; all times at the call from numpy, best of "
          f"{args.repeat}")
    for name in names:
        case = builders[name]()
        print(f"  {name}: {case.description} ...", flush=True)
        row = bench_case(case, args)
        run.add(row)
        peers = ", ".join(f"{k[:-3]} {row[k]:.3f}" for k in ("ort_ms", "openvino_ms", "ms_ms", "torch_compile_ms",
                                                            "torch_ms") if row.get(k) is not None)
        print(f"    ours {row['ours_ms']:.3f} ms at the call (VM {row['ours_vm_ms']:.3f} ms, overhead "
              f"{row['overhead_us']:.1f} us, DLPack exchange alone {row['dlpack_us']:.1f} us), {peers}; "
              f"err {row['max_rel_err']:.1e}", flush=True)
        for note in row.get("notes", []):
            print(f"    ({note})")
        if row.get("ms_tuning_s") is not None:
            print(f"    MetaSchedule: {row['ms_tasks']} tasks x {row['ms_trials_per_task']} trials, tuning "
                  f"{row['ms_tuning_s']:.0f} s{' (cached)' if row['ms_cached'] else ''}; our compile "
                  f"{row['compile_s']:.1f} s")
    print()
    print(run.markdown(COLUMNS, ratios=RATIOS))
    print()
    for label, (num, den) in RATIOS.items():
        vals = [r[num] / r[den] for r in run.rows if r.get(num) and r.get(den)]
        if vals:
            print(f"geomean {label}: {geomean(vals):.2f}x over {len(vals)} models")
    overheads = [r["overhead_us"] for r in run.rows]
    exchange = [r["dlpack_us"] for r in run.rows]
    cpu = [r["overhead_cpu_us"] for r in run.rows]
    print(f"call overhead (model(x) - VM alone): median {float(np.median(overheads)):.1f} us, "
          f"max {max(overheads):.1f} us (in thread CPU time: median {float(np.median(cpu)):.1f} us; "
          f"the DLPack exchange alone: median {float(np.median(exchange)):.1f} us); "
          f"inputs copied for alignment: {sum(r['aligned_copies'] for r in run.rows)}")
    print(f"worst max relative error: {max(r['max_rel_err'] for r in run.rows):.1e}")
    if run.out_path:
        print(f"rows written to {run.out_path}")


if __name__ == "__main__":
    main()
