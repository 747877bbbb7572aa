"""Convolutions: mapping + x86 micro-kernel ("ours") vs torch (oneDNN) and TVM untuned.

ISA Mapper §7 ("ISAM-TVM" reached 85% of LIBXSMM on ResNet-50 layers).  Batch 1:

* every distinct ResNet-50 conv layer (``tvm_ext.workloads.RESNET50_CONV``) as an
  NHWC conv2d (HWIO weights);
* the 13 MobileNet-v1 depthwise-separable blocks (``MOBILENET_V1_SEPARABLE``) as
  the fused kernel of Listing 3, which the mapper factorizes into a depthwise and
  a pointwise stage before tensorizing.

Ours is ``tensorize.kernels.quick_tune`` (a few register-tile / loop-order
knobs; its search time is reported).  The torch peer is
``torch.nn.functional.conv2d`` on the same data, timed NCHW-contiguous and
channels-last with ``--threads`` threads (the faster layout is the reference,
``torch_ms``) and also with one thread (``torch_best_ms``: the best of all,
a conservative peer when a loaded machine stalls torch's OpenMP barriers).  TVM untuned is
``te.create_prim_func`` built as is (for the separable blocks: the two-stage
depthwise + pointwise definition, not the 9x costlier fused product).
Each layer is also reported as a percentage of the detected CPU's FMA peak
(``ours_pct_peak``, ``torch_pct_peak``): the one-thread clock measured by
:func:`bench.tensorize_gemm.measured_fma_peak` times ``--threads``.
Run: ``python -m bench.tensorize_conv [--quick]``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from bench.harness import BenchRun, bench_args, collect_rows, suite_argv, geomean, time_python, time_tvm
from bench.tensorize_gemm import measured_fma_peak
from tvm_ext.timing import settle

QUICK_RESNET = ("res5_3x3",)
QUICK_MOBILENET = (13,)


def _torch_time(fn) -> tuple[float, float]:
    """(seconds with ``--threads`` torch threads, seconds with one thread) of ``fn``.

    On a loaded 2-core machine torch's OpenMP barriers can stall badly with two
    threads; the one-thread time is kept as a second, conservative reference.
    """
    import os

    import torch

    n = int(os.environ.get("OMP_NUM_THREADS", "2"))
    out = []
    for threads in (n, 1):
        torch.set_num_threads(threads)
        settle()
        out.append(time_python(fn, repeat=5, min_repeat_s=0.1).min)
    torch.set_num_threads(n)
    return out[0], out[1]


def torch_conv(layer, x: np.ndarray, w: np.ndarray):
    """(NCHW (n, 1)-thread seconds, channels-last (n, 1)-thread seconds, NHWC output) of torch's conv2d."""
    import torch

    xt = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
    wt = torch.from_numpy(w).permute(3, 2, 0, 1).contiguous()
    xc, wc = xt.to(memory_format=torch.channels_last), wt.to(memory_format=torch.channels_last)
    conv = torch.nn.functional.conv2d
    with torch.no_grad():
        t_nchw = _torch_time(lambda: conv(xt, wt, stride=layer.stride, padding=layer.pad))
        t_cl = _torch_time(lambda: conv(xc, wc, stride=layer.stride, padding=layer.pad))
        out = conv(xt, wt, stride=layer.stride, padding=layer.pad).permute(0, 2, 3, 1).numpy()
    return t_nchw, t_cl, out


def torch_separable(dw, a: np.ndarray, d: np.ndarray, p: np.ndarray):
    import torch

    c = dw.c_in
    at = torch.from_numpy(a).permute(0, 3, 1, 2).contiguous()
    dt = torch.from_numpy(d).permute(2, 3, 0, 1).reshape(c, 1, dw.kernel, dw.kernel).contiguous()
    pt = torch.from_numpy(p).T[:, :, None, None].contiguous()
    conv = torch.nn.functional.conv2d

    def run(x, dd, pp):
        return conv(conv(x, dd, stride=dw.stride, padding=dw.pad, groups=c), pp)

    cl = [t.to(memory_format=torch.channels_last) for t in (at, dt, pt)]
    with torch.no_grad():
        t_nchw = _torch_time(lambda: run(at, dt, pt))
        t_cl = _torch_time(lambda: run(*cl))
        out = run(at, dt, pt).permute(0, 2, 3, 1).numpy()
    return t_nchw, t_cl, out


def untuned_separable(dw, pw):
    """TVM untuned of the two-stage (depthwise, pointwise) definition."""
    from tvm import te

    from tensorize.kernels import depthwise_conv2d

    k = depthwise_conv2d(1, dw.c_in, dw.hw, dw.kernel, dw.stride, dw.pad)
    X, D, Y = k.tensors
    P = te.placeholder((dw.c_in, pw.c_out), name="P")
    q = te.reduce_axis((0, dw.c_in), name="q")
    o = int(Y.shape[1])
    C = te.compute((1, o, o, pw.c_out), lambda b, i, j, c: te.sum(Y[b, i, j, q] * P[q, c], axis=q), name="C")
    return te.create_prim_func([X, D, P, C])


def _time_untuned(func, args, target) -> float:
    import tvm

    mod = tvm.compile(tvm.IRModule({"main": func}), target=target).mod
    return time_tvm(mod, "main", *args, repeat=1, min_repeat_ms=0).min


def run_resnet(layer, target) -> dict:
    import tvm

    from tensorize.kernels import conv2d_nhwc, quick_tune

    k = conv2d_nhwc(1, layer.c_in, layer.c_out, layer.hw, layer.kernel, layer.stride, layer.pad)
    x, w = k.random_inputs(seed=0)
    tuned = quick_tune(k, target=target)
    args = [tvm.runtime.tensor(x), tvm.runtime.tensor(w),
            tvm.runtime.empty(tuple(int(s) for s in k.output.shape), "float32")]
    settle()
    ours = time_tvm(tuned.best.module, "main", *args, repeat=5, min_repeat_ms=100).min
    t_nchw, t_cl, ref = torch_conv(layer, x, w)
    np.testing.assert_allclose(args[2].numpy(), ref, rtol=2e-3, atol=2e-3)
    untuned = _time_untuned(k.prim_func(), args, target)
    return _row(layer.name, "resnet50", layer.flops, ours, t_nchw, t_cl, untuned, tuned)


def run_separable(index: int, target) -> dict:
    import tvm

    from tensorize.kernels import separable_conv2d, quick_tune
    from tvm_ext.workloads import MOBILENET_V1_SEPARABLE

    dw, pw = MOBILENET_V1_SEPARABLE[index - 1]
    k = separable_conv2d(1, dw.c_in, pw.c_out, dw.hw, dw.kernel, dw.stride, dw.pad)
    a, d, p = k.random_inputs(seed=0)
    tuned = quick_tune(k, target=target)
    out = tvm.runtime.empty(tuple(int(s) for s in k.output.shape), "float32")
    args = [tvm.runtime.tensor(a), tvm.runtime.tensor(d), tvm.runtime.tensor(p), out]
    settle()
    ours = time_tvm(tuned.best.module, "main", *args, repeat=5, min_repeat_ms=100).min
    t_nchw, t_cl, ref = torch_separable(dw, a, d, p)
    np.testing.assert_allclose(out.numpy(), ref, rtol=2e-3, atol=2e-3)
    d3 = np.ascontiguousarray(d[..., 0])  # multiplier 1: (k, k, c)
    untuned = _time_untuned(untuned_separable(dw, pw), [tvm.runtime.tensor(a), tvm.runtime.tensor(d3),
                                                         tvm.runtime.tensor(p), out], target)
    return _row(f"sep{index} ({dw.name}+{pw.name})", "mobilenet_v1", dw.flops + pw.flops, ours, t_nchw, t_cl,
                untuned, tuned)


def _row(name, net, flops, ours, t_nchw, t_cl, untuned, tuned) -> dict:
    torch_n = min(t_nchw[0], t_cl[0])  # the bench's thread count, best layout
    torch_any = min(*t_nchw, *t_cl)  # also one thread: the conservative peer on a loaded machine
    return {
        "layer": name, "net": net, "gflop": flops / 1e9,
        "ours_ms": ours * 1e3, "torch_ms": torch_n * 1e3, "torch_best_ms": torch_any * 1e3,
        "torch_nchw_ms": t_nchw[0] * 1e3, "torch_cl_ms": t_cl[0] * 1e3, "untuned_ms": untuned * 1e3,
        "ours_gflops": flops / ours / 1e9, "torch_gflops": flops / torch_n / 1e9,
        "ours_search_s": tuned.search_seconds,
        "instructions": ",".join(sorted({m.instruction.name for m in tuned.best.plan.blocks.values()})),
        "knobs": f"{tuned.knobs['tiles']} {tuned.knobs.get('outer')} pack={tuned.knobs.get('pack')}",
    }


def _with_peak(row: dict, peak_gflops: float) -> dict:
    """``row`` plus ours / torch as a percentage of the FMA peak."""
    return {**row, "ours_pct_peak": 100 * row["ours_gflops"] / peak_gflops,
            "torch_pct_peak": 100 * row["torch_gflops"] / peak_gflops}


def run(quick: bool, *, out: str | None = None, argv: Sequence[str] = ()) -> list[dict]:
    """Run this suite as its command line does; its rows, each with its ``bench`` name.

    ``out``: directory for the JSON lines (None: none written); ``argv``: more options of ``main``.
    """
    return collect_rows(main, suite_argv(quick, out, argv))


def main(argv: Sequence[str] | None = None) -> None:
    args = bench_args(__doc__.splitlines()[0], argv)
    from tvm_ext.target import default_target
    from tvm_ext.workloads import RESNET50_CONV

    target = default_target()
    run = BenchRun("tensorize_conv", out_dir=args.out)
    print(run.header())
    peak = measured_fma_peak(1, target)["gflops"] * args.threads
    print(f"FMA peak: {peak:.0f} GFLOP/s on {args.threads} thread(s) (measured one-thread rate x threads)")
    layers = [layer for layer in RESNET50_CONV if not args.quick or layer.name in QUICK_RESNET]
    for layer in layers:
        row = _with_peak(run_resnet(layer, target), peak)
        run.add(row)
        print(f"  {row['layer']}: ours {row['ours_gflops']:.0f} GFLOP/s, torch {row['torch_gflops']:.0f}", flush=True)
    for idx in (QUICK_MOBILENET if args.quick else range(1, 14)):
        row = _with_peak(run_separable(idx, target), peak)
        run.add(row)
        print(f"  {row['layer']}: ours {row['ours_gflops']:.0f} GFLOP/s, torch {row['torch_gflops']:.0f}", flush=True)
    cols = ["layer", "gflop", "ours_ms", "torch_ms", "torch_best_ms", "torch_nchw_ms", "torch_cl_ms", "untuned_ms",
            "ours_gflops", "torch_gflops", "ours_pct_peak", "torch_pct_peak", "ours_search_s", "instructions", "knobs"]
    print(run.markdown(cols, ratios={"torch/ours": ("torch_ms", "ours_ms"),
                                     "torch_best/ours": ("torch_best_ms", "ours_ms"),
                                     "untuned/ours": ("untuned_ms", "ours_ms")}))
    for net in ("resnet50", "mobilenet_v1"):
        rows = [r for r in run.rows if r["net"] == net]
        if rows:
            g = geomean(r["torch_ms"] / r["ours_ms"] for r in rows)
            gb = geomean(r["torch_best_ms"] / r["ours_ms"] for r in rows)
            print(f"{net}: geomean speed vs torch {g:.2f}x over {len(rows)} layers (goal >= 0.85x); "
                  f"vs torch's best of {{--threads, 1 thread}} {gb:.2f}x")
    g_all = geomean(r["torch_ms"] / r["ours_ms"] for r in run.rows)
    print(f"all layers: geomean speed vs torch {g_all:.2f}x; vs TVM untuned "
          f"{geomean(r['untuned_ms'] / r['ours_ms'] for r in run.rows):.1f}x")
    if run.out_path:
        print(f"rows written to {run.out_path}")


if __name__ == "__main__":
    main()
