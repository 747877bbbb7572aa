"""What ``model(x)`` costs over its VM function, step by step, warm and after the caches were swept.

``model(x)`` on numpy runs the VM function that ``model.vm["main"]`` returns, plus a thin layer
(:mod:`tvm_ext.model_call`): the checks of the input against the plan, the FFI's DLPack view of
each numpy input, ``np.from_dlpack`` of each output, the Python frames between.  Two tables:

**warm** (``--calls`` calls per loop, best of 5 loops, minus the reference's loop): each step
alone, with TVM's ``testing.echo`` (a C function that returns its argument) in the place of the
VM function, so nothing but the step is timed:

* ``checks``: the hot path's test of the input (type, shape, dtype, numpy's flags word);
* ``ffi_input``: ``echo(x)`` over ``echo(xt)``: the FFI's DLPack view of a numpy argument;
* ``ffi_from_dlpack`` / ``runtime_from_dlpack``: ``tvm_ffi.from_dlpack(x, require_alignment=0)``
  / ``tvm.runtime.from_dlpack(x)``, the view built in Python instead;
* ``output``: ``np.from_dlpack(t)`` and the release of the array (the output exchange);
* ``layer``: :class:`~tvm_ext.model_call.NumpyCall`'s Python hot path around ``echo``: all of
  the above and the frames, over ``echo(xt)``;
* ``native_layer``: its C path (:mod:`tvm_ext.native_call`) around ``echo``, over ``echo(xt)``
  (left out when the C path cannot be built here);
* ``tuple_layer`` / ``native_tuple_layer``: the Python / C path around ``ffi.Array`` (a C function
  that returns its argument in a one-element tuple, as a Relax function returning a tuple does),
  over ``ffi.Array(xt)``: the Python path converts the tuple through tvm_ffi's Python objects and
  ``numpy_outputs``, the C path builds the list of arrays itself.

**cold** (the real VM function of one small model; each call right after a copy of
``--sweep-mb`` MB evicted the caches and TLBs, as a big model's kernels do before its outputs come
back; pairs in alternating order, the median difference, in wall time and in the thread's CPU
time, which a preemption by another process does not enter; ``--rounds`` rounds over all steps,
the median of the rounds kept), each over ``vm(xt)``:

* ``vm``: the VM function on prepared tensors (absolute, not a difference);
* ``ffi_input``: ``vm(x)``; ``output``: ``np.from_dlpack(vm(xt))``; ``exchange``: both
  (``dlpack_us`` of :mod:`bench.models`);
* ``hot_path``: the Python hot path (``NumpyCall(..., native=False).call(x)``); ``native``: the C
  path (``native_call``; left out when it cannot be built; it can read below zero: the reference
  ``vm(xt)`` pays tvm_ffi's Python-level argument and result conversion, which the C path does
  not); ``model``: ``model(x)``, on whichever
  path is active (``overhead_us`` of :mod:`bench.models`: a model of milliseconds pays about this
  cold cost, one of microseconds the warm one);
* ``tuple_path`` / ``native_tuple``: the Python / C path around ``ffi.Array`` (the warm table's
  tuple steps) after the sweep, over ``ffi.Array(xt)``: what a model whose function returns a tuple
  (a torch.export import) pays for its outputs on each path.

``--threads 1`` keeps the VM on the calling thread: on a loaded machine a worker woken after
the sweep waits for a core, which is noise here, not overhead.

Run: ``python -m bench.call_overhead --threads 1 [--quick] [--calls 100000] [--pairs 400] [--rounds 4]
[--sweep-mb 32]``.
"""
from __future__ import annotations

import statistics
import time
import timeit
from typing import Any, Callable, Sequence

import numpy as np

from bench.harness import BenchRun, bench_args

def warm_us(call: Callable[[], Any], reference: Callable[[], Any], *, calls: int, repeat: int = 5) -> float:
    """Microseconds per call ``call()`` takes over ``reference()``: loops of ``calls`` calls of each,
    alternated ``repeat`` times, best loop of each.

    >>> warm_us(lambda: sum(range(200)), lambda: None, calls=1000, repeat=2) > 0
    True
    """
    best_call = best_ref = float("inf")
    for _ in range(repeat):
        best_call = min(best_call, timeit.timeit(call, number=calls))
        best_ref = min(best_ref, timeit.timeit(reference, number=calls))
    return (best_call - best_ref) / calls * 1e6


class CacheSweep:
    """Evicts the caches and TLBs: a copy of ``megabytes`` MB (what a model's kernels do to the
    interpreter's working set before its outputs come back)."""

    def __init__(self, megabytes: float):
        n = max(1, int(megabytes * (1 << 20)) // 16)
        self.src, self.dst = np.ones(n), np.empty(n)

    def __call__(self) -> None:
        np.copyto(self.dst, self.src)


def cold_us(call: Callable[[], Any], reference: Callable[[], Any], sweep: Callable[[], None], *,
            pairs: int) -> tuple[float, float]:
    """(wall, thread CPU) microseconds ``call()`` takes over ``reference()``, each call right after
    ``sweep()``: the median of per-pair differences, pairs in alternating order.

    >>> wall, cpu = cold_us(lambda: sum(range(3000)), lambda: None, lambda: None, pairs=20)
    >>> wall > 0 and cpu > 0
    True
    """
    wall, cpu = time.perf_counter_ns, time.thread_time_ns
    d_wall: list[int] = []
    d_cpu: list[int] = []
    for i in range(pairs):
        sample = []
        for fn in ((reference, call) if i & 1 else (call, reference)):
            sweep()
            c0, w0 = cpu(), wall()
            fn()
            w1, c1 = wall(), cpu()
            sample.append((w1 - w0, c1 - c0))
        (cw, cc), (rw, rc) = sample if not i & 1 else sample[::-1]
        d_wall.append(cw - rw)
        d_cpu.append(cc - rc)
    return statistics.median(d_wall) / 1e3, statistics.median(d_cpu) / 1e3


def warm_steps(x: np.ndarray) -> list[tuple[str, str, Callable[[], Any], Callable[[], Any]]]:
    """(step, what it adds, call, reference) of each step alone, ``testing.echo`` standing for the VM."""
    import tvm
    import tvm_ffi

    from tvm_ext.model_call import _IN_PLACE, NumpyCall

    echo = tvm_ffi.get_global_func("testing.echo")
    xt = tvm_ffi.from_dlpack(x, require_alignment=0)
    layer = NumpyCall({"main": echo}, [("x", x.shape, x.dtype)], native=False).call
    native = NumpyCall({"main": echo}, [("x", x.shape, x.dtype)])
    ndarray, shape, dtype, needed = np.ndarray, x.shape, x.dtype, _IN_PLACE

    def checks() -> bool:
        return type(x) is ndarray and x.shape == shape and (x.dtype is dtype or x.dtype == dtype) \
            and x.flags.num & needed == needed

    def nothing() -> None:
        return None

    steps = [
        ("checks", "the hot path's test of the input", checks, nothing),
        ("ffi_input", "the FFI's view of a numpy argument: echo(x) - echo(xt)", lambda: echo(x), lambda: echo(xt)),
        ("ffi_from_dlpack", "tvm_ffi.from_dlpack(x, require_alignment=0)",
         lambda: tvm_ffi.from_dlpack(x, require_alignment=0), nothing),
        ("runtime_from_dlpack", "tvm.runtime.from_dlpack(x)", lambda: tvm.runtime.from_dlpack(x), nothing),
        ("output", "np.from_dlpack(t) and its release", lambda: np.from_dlpack(xt), nothing),
        ("layer", "NumpyCall's Python path around echo: checks, both exchanges, frames - echo(xt)",
         lambda: layer(x), lambda: echo(xt)),
    ]
    make_tuple = tvm_ffi.get_global_func("ffi.Array")  # a C function: its arguments as one tuple
    tuple_layer = NumpyCall({"main": make_tuple}, [("x", x.shape, x.dtype)], native=False).call
    steps.append(("tuple_layer", "NumpyCall's Python path around ffi.Array (a one-tensor tuple back) - "
                  "ffi.Array(xt)", lambda: tuple_layer(x), lambda: make_tuple(xt)))
    if native.call_path == "native":
        native_tuple = NumpyCall({"main": make_tuple}, [("x", x.shape, x.dtype)]).call
        steps.append(("native_layer", "NumpyCall's C path around echo - echo(xt)", lambda: native.call(x),
                      lambda: echo(xt)))
        steps.append(("native_tuple_layer", "NumpyCall's C path around ffi.Array - ffi.Array(xt)",
                      lambda: native_tuple(x), lambda: make_tuple(xt)))
    return steps


def cold_steps(model: Any, xs: Sequence[np.ndarray]) -> list[tuple[str, str, Callable[[], Any], Callable[[], Any]]]:
    """(step, what it adds, call, reference) of each variant of the call on ``model``'s inputs ``xs``."""
    from tvm_ext.model_call import NumpyCall, numpy_outputs

    vm, tensors = model.vm["main"], model._tensors(xs)
    hot = NumpyCall(model.vm, model.specs, alignment=model.input_alignment, native=False).call
    native = NumpyCall(model.vm, model.specs, alignment=model.input_alignment)
    to_numpy = np.from_dlpack if type(vm(*tensors)) is type(tensors[0]) else numpy_outputs

    def reference():
        return vm(*tensors)

    steps = [
        ("vm", "the VM function on prepared tensors (absolute, not a difference)", reference, lambda: None),
        ("ffi_input", "numpy inputs handed to the FFI call", lambda: vm(*xs), reference),
        ("output", "outputs through np.from_dlpack", lambda: to_numpy(vm(*tensors)), reference),
        ("exchange", "both exchanges (bench.models' dlpack_us)", lambda: to_numpy(vm(*xs)), reference),
        ("hot_path", "the Python hot path: checks + both exchanges + its frame", lambda: hot(*xs), reference),
    ]
    if native.call_path == "native":
        call = native.call
        steps.append(("native", "the C path: checks + both exchanges in one C call", lambda: call(*xs), reference))
    steps.append(("model", f"model(x), {model._call.call_path} path (bench.models' overhead_us)",
                  lambda: model(*xs), reference))
    steps += _tuple_steps(xs)
    return steps


def _tuple_steps(xs: Sequence[np.ndarray]) -> list[tuple[str, str, Callable[[], Any], Callable[[], Any]]]:
    """The Python and the C path around ``ffi.Array`` (the inputs back as one tuple) on ``xs``, each
    over ``ffi.Array`` on prepared tensors (the C path's step left out when it cannot be built)."""
    import tvm_ffi

    from tvm_ext.model_call import NumpyCall

    make_tuple = tvm_ffi.get_global_func("ffi.Array")
    specs = [(f"x{i}", x.shape, x.dtype) for i, x in enumerate(xs)]
    tensors = [tvm_ffi.from_dlpack(x, require_alignment=0) for x in xs]
    python = NumpyCall({"main": make_tuple}, specs, native=False).call
    native = NumpyCall({"main": make_tuple}, specs)

    def reference():
        return make_tuple(*tensors)

    steps = [("tuple_path", "the Python path around ffi.Array: a tuple back through tvm_ffi and numpy_outputs",
              lambda: python(*xs), reference)]
    if native.call_path == "native":
        call = native.call
        steps.append(("native_tuple", "the C path around ffi.Array: the tuple's arrays built in C",
                      lambda: call(*xs), reference))
    return steps


def main(argv: Sequence[str] | None = None) -> None:
    args = bench_args(__doc__.splitlines()[0], argv,
                      calls={"type": int, "default": 100_000, "help": "calls per warm loop (default 1e5)"},
                      pairs={"type": int, "default": 400, "help": "cold pairs per step (default 400)"},
                      rounds={"type": int, "default": 4,
                              "help": "cold rounds, each over every step (the median of the rounds is kept)"},
                      sweep_mb={"type": float, "default": 32.0, "help": "MB copied before each cold call"})
    import tvm_ext
    from tvm_ext.models.frontends import from_onnx
    from tvm_ext.models.onnx_models import mlp_onnx
    from tvm_ext.zero_copy import aligned_copy

    if args.quick:
        args.calls, args.pairs, args.sweep_mb = min(args.calls, 2000), min(args.pairs, 30), min(args.sweep_mb, 4.0)
        args.rounds = min(args.rounds, 2)
    sizes = [24, 16, 16, 4] if args.quick else [784, 512, 512, 10]
    name = f"mlp-{'-'.join(map(str, sizes))}"
    model = tvm_ext.compile(from_onnx(mlp_onnx(sizes, 1)))
    x = aligned_copy(np.random.default_rng(1).standard_normal((1, sizes[0])).astype("float32"))
    run = BenchRun("call_overhead", out_dir=args.out)
    print(run.header())
    print(f"{name} batch 1; warm: best of 5 loops of {args.calls} calls; cold: median of {args.rounds} rounds' "
          f"medians of {max(2, args.pairs // args.rounds)} pairs, each call after a {args.sweep_mb:g} MB copy")
    warm_rows, cold_rows = [], []
    for step, what, call, reference in warm_steps(x):
        call(), reference()
        row = {"table": "warm", "step": step, "what": what, "model": name, "us": warm_us(call, reference,
                                                                                     calls=args.calls),
               "calls": args.calls}
        run.add(row)
        warm_rows.append(row)
        print(f"  warm {step:20s} {row['us']:8.3f} us", flush=True)
    sweep = CacheSweep(args.sweep_mb)
    cold = cold_steps(model, [x])
    for _, _, call, reference in cold:
        call(), reference()
    per_round = max(2, args.pairs // args.rounds)
    samples: dict[str, list[tuple[float, float]]] = {step: [] for step, _, _, _ in cold}
    for _ in range(args.rounds):  # every step in every round: a drift of the machine's load falls on all
        for step, _, call, reference in cold:
            samples[step].append(cold_us(call, reference, sweep, pairs=per_round))
    for step, what, _, _ in cold:
        wall = statistics.median(w for w, _ in samples[step])
        cpu = statistics.median(c for _, c in samples[step])
        row = {"table": "cold", "step": step, "what": what, "model": name, "us": wall, "cpu_us": cpu,
               "rounds_us": [w for w, _ in samples[step]], "pairs": per_round * args.rounds,
               "sweep_mb": args.sweep_mb}
        run.add(row)
        cold_rows.append(row)
        spread = ", ".join(f"{w:.1f}" for w, _ in samples[step])
        print(f"  cold {step:20s} {wall:8.2f} us (CPU {cpu:8.2f} us; rounds {spread})", flush=True)
    print()
    print(run.markdown(["step", "what", "us"], rows=warm_rows))
    print()
    print(run.markdown(["step", "what", "us", "cpu_us"], rows=cold_rows))
    if run.out_path:
        print(f"rows written to {run.out_path}")


if __name__ == "__main__":
    main()
