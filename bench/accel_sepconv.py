"""Depthwise-separable convolutions (MobileNet-v1 blocks) on the modelled accelerator, ours vs the kernel library.

Every block of ``MOBILENET_V1_SEPARABLE`` (channels times ``--width``, the
input resolution scaled from 112 to ``--resolution``) is scheduled as one
workload: a depthwise 3x3 conv (a multi-instruction cover: ``fill``, ``scale``
into the kernel's product temporary, ``iadd``), ReLU, the pointwise 1x1
conv (matrix units) and ReLU; the depthwise conv is also scheduled alone.
Both are timed with the same simulator for this scheduler and for the
kernel-library baseline (one isolated call per op), and checked
functionally against the float64 reference (up to ``--check-tiles``).

Run: ``python -m bench.accel_sepconv [--quick] [--width W] [--resolution R] [--blocks N]``.
"""
from __future__ import annotations

import time
from typing import Sequence

from bench.harness import BenchRun, bench_args, collect_rows, geomean, suite_argv
from tvm_ext.accel import load_system
from tvm_ext.accel.cases import run_sepconv
from tvm_ext.workloads import MOBILENET_V1_SEPARABLE


def _hbm(bytes_by_level: dict) -> float:
    return sum(v for k, v in bytes_by_level.items() if "hbm" in k)


def _scale(c: int, width: float) -> int:
    return max(8, int(round(c * width / 8)) * 8)


def blocks_part(args, system) -> list[str]:
    run = BenchRun("accel_sepconv", out_dir=args.out)
    for dw, pw in MOBILENET_V1_SEPARABLE[:args.blocks]:
        c_in, c_out = _scale(dw.c_in, args.width), _scale(pw.c_out, args.width)
        hw = max(dw.kernel, dw.hw * args.resolution // 112)
        full = run_sepconv(c_in, c_out, hw, dw.stride, system=system, check=True)
        alone = run_sepconv(c_in, None, hw, dw.stride, system=system, check=False)
        run.add({"block": dw.name[2:], "c_in": c_in, "c_out": c_out, "hw": hw, "stride": dw.stride,
                 "tiles": full["tiles"], "cycles": full["cycles"], "cycles_kl": full["cycles_kl"],
                 "dw_cycles": alone["cycles"], "dw_cycles_kl": alone["cycles_kl"],
                 "hbm_KB": _hbm(full["bytes_by_level"]) / 1e3, "hbm_KB_kl": _hbm(full["bytes_by_level_kl"]) / 1e3,
                 "vec_util": full["utilisation"].get("elementwise", 0.0),
                 "matrix_util": full["utilisation"].get("matrix", 0.0),
                 "max_rel_err": full["max_rel_err"], "max_rel_err_kl": full["max_rel_err_kl"],
                 "schedule_s": full["schedule_s"]})
    lines = [run.markdown(["block", "c_in", "c_out", "hw", "stride", "tiles", "cycles", "cycles_kl", "dw_cycles",
                           "dw_cycles_kl", "hbm_KB", "hbm_KB_kl", "vec_util", "matrix_util", "max_rel_err"],
                          ratios={"KL/ours": ("cycles_kl", "cycles"), "dw KL/ours": ("dw_cycles_kl", "dw_cycles"),
                                  "dw share": ("dw_cycles", "cycles")})]
    sp = [r["cycles_kl"] / r["cycles"] for r in run.rows]
    dsp = [r["dw_cycles_kl"] / r["dw_cycles"] for r in run.rows]
    if sp:
        lines.append(f"\nblocks: this scheduler faster on {sum(x > 1 for x in sp)}/{len(sp)}; geomean KL/ours "
                     f"{geomean(sp):.2f}x; depthwise alone: geomean KL/ours {geomean(dsp):.2f}x")
    return lines


def run(quick: bool, *, out: str | None = None, argv: Sequence[str] = ()) -> list[dict]:
    """Run this suite as its command line does; its rows, each with its ``bench`` name."""
    return collect_rows(main, suite_argv(quick, out, argv))


def main(argv: Sequence[str] | None = None) -> None:
    args = bench_args(__doc__.splitlines()[0], argv,
                      width=dict(type=float, default=None, help="channel multiplier (default 0.5, 0.25 with --quick)"),
                      resolution=dict(type=int, default=None,
                                      help="input resolution of block 1 (default 56, 28 with --quick)"),
                      blocks=dict(type=int, default=None, help="first N blocks (default 13, 3 with --quick)"),
                      config=dict(default="default", help="system graph"))
    args.width = args.width or (0.25 if args.quick else 0.5)
    args.resolution = args.resolution or (28 if args.quick else 56)
    args.blocks = args.blocks or (3 if args.quick else 13)
    system = load_system(args.config)
    t0 = time.perf_counter()
    print(BenchRun("accel_sepconv", out_dir=None).header())
    print(f"system: {system.summary()}\n")
    print(f"## MobileNet-v1 separable blocks, width {args.width}, block-1 input {args.resolution}x{args.resolution}\n")
    print("\n".join(blocks_part(args, system)))
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
