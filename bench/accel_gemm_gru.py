"""ISA Mapper §6.2 (Figures 3 and 4) on the modelled accelerator: DeepBench GEMMs and GRUs, ours vs the kernel library.

Three parts, all simulated in this run on the default system graph (the
paper's case-study machine as :mod:`tvm_ext.accel` models it):

1. **GEMM** (``DEEPBENCH_GEMM``): cycles per operation (flop) of this
   scheduler and of the kernel-library baseline, their ratio, matrix-unit
   utilisation and HBM traffic.  Shapes with more than ``--max-tiles``
   compute tiles are skipped (listed), as is the functional check above
   ``--check-tiles``.
2. **GRU** (``DEEPBENCH_GRU``, 128 steps): the recurrent schedule (priming /
   recursive / finish, weights kept on chip) vs one library call per op per
   step; cycles per step, HBM bytes per step, and whether the weights fit on
   chip, which is what decides the gap.
3. **Simulation speed**: instructions per second of the timed model, of the
   functional simulator, and of the dry-run scheduler (tiles per second).

Run: ``python -m bench.accel_gemm_gru [--quick] [--max-tiles N] [--steps T]``.
"""
from __future__ import annotations

from typing import Sequence

import time

from bench.harness import BenchRun, bench_args, collect_rows, suite_argv, geomean
from tvm_ext.accel import gemm_workload, gru_cell, load_system, run_gemm, run_gru
from tvm_ext.accel.lowering import lower_workload
from tvm_ext.workloads import DEEPBENCH_GEMM, DEEPBENCH_GRU

QUICK_GEMM = [(1760, 16, 1760), (2560, 32, 2560), (35, 8457, 1760), (3072, 16, 1024), (512, 512, 512)]
QUICK_GRU = [(256, 8), (512, 1), (512, 16), (1024, 32)]


def _tiles(M: int, N: int, K: int) -> int:
    t = 32
    return -(-M // t) * -(-N // t) * -(-K // t)


def _hbm(bytes_by_level: dict) -> float:
    return sum(v for k, v in bytes_by_level.items() if "hbm" in k)


def gemm_part(args, system) -> list[str]:
    run = BenchRun("accel_gemm", out_dir=args.out)
    shapes = QUICK_GEMM if args.quick else [(g.M, g.N, g.K) for g in DEEPBENCH_GEMM]
    skipped = []
    for M, N, K in shapes:
        tiles = _tiles(M, N, K)
        if tiles > args.max_tiles:
            skipped.append(f"{M}x{N}x{K} ({tiles:,} tiles)")
            continue
        r = run_gemm(M, N, K, system=system, check=tiles <= args.check_tiles)
        run.add({"shape": f"{M}x{N}x{K}", "tiles": r["tiles"], "cycles": r["cycles"], "cycles_kl": r["cycles_kl"],
                 "cycles_per_op": r["cycles_per_op"], "cycles_per_op_kl": r["cycles_per_op_kl"],
                 "matrix_util": r["utilisation"]["matrix"], "matrix_util_kl": r["utilisation_kl"]["matrix"],
                 "hbm_MB": _hbm(r["bytes_by_level"]) / 1e6, "hbm_MB_kl": _hbm(r["bytes_by_level_kl"]) / 1e6,
                 "max_rel_err": r["max_rel_err"], "schedule_s": r["schedule_s"]})
    lines = [run.markdown(["shape", "tiles", "cycles", "cycles_kl", "cycles_per_op", "cycles_per_op_kl",
                           "matrix_util", "matrix_util_kl", "hbm_MB", "hbm_MB_kl", "max_rel_err"],
                          ratios={"KL/ours": ("cycles_kl", "cycles")})]
    sp = [r["cycles_kl"] / r["cycles"] for r in run.rows]
    if sp:
        wins = sum(1 for x in sp if x > 1)
        lines.append(f"\nthis scheduler faster on {wins}/{len(sp)} GEMMs; geomean KL/ours {geomean(sp):.2f}x "
                     f"(min {min(sp):.2f}x, max {max(sp):.2f}x)")
        hbm_bw = sum(m.bandwidth for m in load_system(system).memories if m.kind == "hbm")
        for r in run.rows:
            busy = r["hbm_MB"] * 1e6 / hbm_bw / r["cycles"]
            who = "ours" if r["cycles_kl"] > r["cycles"] else "library"
            lines.append(f"{r['shape']}: {who} faster ({r['cycles_kl'] / r['cycles']:.2f}x KL/ours); matrix units "
                         f"busy {100 * r['matrix_util']:.0f}% ours vs {100 * r['matrix_util_kl']:.0f}% library; "
                         f"HBM busy {100 * busy:.0f}% of our cycles")
        lines.append("Why: the library's kernels are output-stationary over every unit, blocked to load the least "
                     "operand data per unit.  Where the output tiles divide evenly over the units its matrix units "
                     "stay busier than ours, and where its blocking reads fewer HBM bytes (hbm_MB_kl < hbm_MB) it "
                     "wins; where both move the same bytes and HBM is the bottleneck (skinny N), ours overlaps the "
                     "copies better.  The paper's 'library > 5x faster on tuned sizes' needs a scheduler far below "
                     "the machine's peak; ours keeps the units busy on a lone GEMM.")
    if skipped:
        lines.append(f"skipped (more than --max-tiles {args.max_tiles:,}): {', '.join(skipped)}")
    return lines


def gru_part(args, system) -> list[str]:
    run = BenchRun("accel_gru", out_dir=args.out)
    sysg = load_system(system)
    rf = sum(m.capacity for m in sysg.memories if m.kind == "regfile")
    shapes = QUICK_GRU if args.quick else [(g.hidden, g.batch) for g in DEEPBENCH_GRU]
    steps = args.steps or (16 if args.quick else 128)
    for H, B in shapes:
        r = run_gru(steps, H, B, system=system, check=H * B <= args.check_gru)
        weights = 4 * (2 * H * 3 * H + 2 * 3 * H)
        run.add({"H": H, "B": B, "T": steps, "cycles_per_step": r["cycles_per_step"],
                 "cycles_per_step_kl": r["cycles_per_step_kl"], "cycles_per_op": r["cycles_per_op"],
                 "cycles_per_op_kl": r["cycles_per_op_kl"],
                 "hbm_KB_per_step": _hbm(r["bytes_by_level"]) / steps / 1e3,
                 "hbm_KB_per_step_kl": _hbm(r["bytes_by_level_kl"]) / steps / 1e3,
                 "weights_MB": weights / 1e6, "weights_vs_regfiles": weights / rf,
                 "matrix_util": r["utilisation"]["matrix"], "matrix_util_kl": r["utilisation_kl"]["matrix"],
                 "simulated_steps": r["simulated_steps"], "max_rel_err": r["max_rel_err"],
                 "schedule_s": r["schedule_s"]})
    lines = [f"T = {steps} steps; register files hold {rf / 2**20:.0f} MiB in all",
             run.markdown(["H", "B", "cycles_per_step", "cycles_per_step_kl", "cycles_per_op", "cycles_per_op_kl",
                           "hbm_KB_per_step", "hbm_KB_per_step_kl", "weights_MB", "weights_vs_regfiles",
                           "matrix_util", "matrix_util_kl", "simulated_steps", "max_rel_err"],
                          ratios={"KL/ours": ("cycles_per_step_kl", "cycles_per_step")})]
    for row in run.rows:
        sp = row["cycles_per_step_kl"] / row["cycles_per_step"]
        traffic = row["hbm_KB_per_step_kl"] / max(row["hbm_KB_per_step"], 1e-9)
        fit = "fit" if row["weights_vs_regfiles"] <= 0.8 else "do not fit"
        lines.append(f"H={row['H']:5d} B={row['B']:3d}: ours {'faster' if sp > 1 else 'slower'} ({sp:.2f}x); "
                     f"weights {fit} on chip ({row['weights_vs_regfiles']:.2f} of the register files); "
                     f"the library moves {traffic:.1f}x the HBM bytes per step; matrix units busy "
                     f"{100 * row['matrix_util']:.0f}% (ours) vs {100 * row['matrix_util_kl']:.0f}% (library)")
    wins = sum(r["cycles_per_step_kl"] > r["cycles_per_step"] for r in run.rows)
    lines.append(f"ours faster on {wins}/{len(run.rows)} GRUs: 'GRU beats KL on every case' "
                 f"{'holds' if wins == len(run.rows) else 'does not hold'} against this library.")
    lines.append("Why: the recurrent schedule keeps weights on chip and overlaps a step's ops, while the library "
                 "calls one output-stationary kernel per op behind a barrier and reloads the weights every step "
                 "(the HBM columns).  On small GRUs the per-op calls leave the units idle between ops and ours "
                 "wins; on large ones each op is big enough for the library's blocking to keep more matrix units "
                 "busy (matrix_util), and where the weights do not fit ours streams them too.")
    return lines


def speed_part(args, system) -> list[str]:
    run = BenchRun("accel_sim_speed", out_dir=args.out)
    cases = [("gemm 1024x64x1024", lambda: run_gemm(1024, 64, 1024, system=system)),
             ("gru H=512 B=32 T=8", lambda: run_gru(8, 512, 32, system=system))]
    for name, fn in cases:
        r = fn()
        instr = r["instructions"] + r["instructions_kl"]
        run.add({"case": name, "instructions": instr, "timing_s": r["timing_s"],
                 "timed_instr_per_s": instr / r["timing_s"], "functional_instr_per_s": r["sim_instructions_per_s"],
                 "schedule_s": r["schedule_s"]})
    # scheduler throughput on one larger GEMM
    M, N, K = (1024, 128, 1024) if args.quick else (2048, 128, 2048)
    from tvm_ext.accel import Scheduler

    wl = gemm_workload(M, N, K)
    t0 = time.perf_counter()
    sched = Scheduler(wl, system)
    t1 = time.perf_counter()
    sched.run()
    t2 = time.perf_counter()
    lines = [run.markdown(["case", "instructions", "timing_s", "timed_instr_per_s", "functional_instr_per_s",
                           "schedule_s"]),
             f"dry-run scheduler, GEMM {M}x{N}x{K}: {sched.tiles.n:,} tiles in {t2 - t1:.2f} s "
             f"({sched.tiles.n / (t2 - t1):,.0f} tiles/s; lowering + unrolling {t1 - t0:.2f} s)"]
    return lines


def run(quick: bool, *, out: str | None = None, argv: Sequence[str] = ()) -> list[dict]:
    """Run this suite as its command line does; its rows, each with its ``bench`` name.

    ``out``: directory for the JSON lines (None: none written); ``argv``: more options of ``main``.
    """
    return collect_rows(main, suite_argv(quick, out, argv))


def main(argv: Sequence[str] | None = None) -> None:
    args = bench_args(__doc__.splitlines()[0], argv,
                      max_tiles=dict(type=int, default=300_000,
                                     help="skip GEMMs with more compute tiles (the two largest DeepBench "
                                          "shapes need --max-tiles 3000000 and several minutes)"),
                      check_tiles=dict(type=int, default=20_000, help="functional check up to this many tiles"),
                      check_gru=dict(type=int, default=16 * 512, help="functional GRU check up to H*B"),
                      steps=dict(type=int, default=None, help="GRU steps (default 128, 16 with --quick)"),
                      config=dict(default="default", help="system graph"))
    system = load_system(args.config)
    lower_workload(gemm_workload(64, 64, 64), system)  # warm the mapper once
    lower_workload(gru_cell(1, 64), system)
    t0 = time.perf_counter()
    print(BenchRun("accel_gemm_gru", out_dir=None).header())
    print(f"system: {system.summary()}\n")
    print("## GEMM (DeepBench), cycles per flop\n")
    print("\n".join(gemm_part(args, system)))
    print("\n## GRU (DeepBench), recurrent schedule vs kernel library\n")
    print("\n".join(gru_part(args, system)))
    print("\n## Simulation speed\n")
    print("\n".join(speed_part(args, system)))
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
