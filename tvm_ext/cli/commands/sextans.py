"""``tvm-ext sextans NAME|FILE --n 64``: the Sextans SpMM engine on one matrix.

Prints the schedule statistics (bubbles, stream length per PE), the modelled
time and GFLOP/s, and the functional check against scipy.  All logic lives in
:func:`tvm_ext.spmm_engine.evaluate`.  ``--breakdown`` prints Table 1 (the
speedup of each optimisation, :func:`tvm_ext.spmm_engine.speedup_breakdown`)
instead; ``--plot PNG`` draws each PE's stream (non-zeros, RAW bubbles,
padding).  Besides bundled names and ``.mtx`` files, ``crystm03-like`` names
the generated stand-in for SuiteSparse crystm03 (Table 1's matrix).
"""
from __future__ import annotations

from tvm_ext.cli.args import size
from tvm_ext.cli.output import Output
from tvm_ext.cli.selfcheck import require_close
from tvm_ext.errors import InputError
from tvm_ext.markdown import table
from tvm_ext.spmm_engine import PLATFORMS, evaluate, speedup_breakdown
from tvm_ext.workloads import crystm03_like, resolve_matrix

#: Generated matrices the command accepts by name, next to the bundled ones.
GENERATED = {"crystm03-like": crystm03_like}


def register(subparsers, common) -> None:
    p = subparsers.add_parser("sextans", parents=[common],
                              help="model the Sextans HBM SpMM engine on a matrix")
    p.add_argument("matrix", metavar="NAME|FILE", help="a bundled matrix name or a .mtx file")
    p.add_argument("--n", type=size("--n"), default=64, help="columns of B and C (default 64)")
    p.add_argument("--platform", default="sextans", choices=sorted(PLATFORMS),
                   help="Table 3 platform (default sextans)")
    p.add_argument("--pes", type=size("--pes"), default=None, metavar="P", help="processing engines (64)")
    p.add_argument("--raw-distance", type=size("--raw-distance"), default=None, metavar="D",
                   help="RAW dependency distance in cycles (10)")
    p.add_argument("--window", type=size("--window"), default=None, metavar="K0", help="window size (4096)")
    p.add_argument("--n0", type=size("--n0"), default=None, metavar="N0", help="PUs per PE (8)")
    p.add_argument("--policy", default=None, choices=["ooo", "in-order"],
                   help="non-zero scheduling (ooo = Sextans)")
    p.add_argument("--no-check", action="store_true", help="skip the functional simulation")
    p.add_argument("--plot", metavar="PNG", default=None,
                   help="also write each PE's stream length split into non-zeros, RAW bubbles and padding "
                   "(needs matplotlib)")
    p.add_argument("--breakdown", action="store_true",
                   help="print Table 1: baseline -> OoO scheduling -> 8 PUs -> 64 PEs speedups")
    p.set_defaults(func=run)


def run(args) -> Output:
    A = GENERATED[args.matrix]() if args.matrix in GENERATED else resolve_matrix(args.matrix)
    if args.breakdown:
        if args.plot:
            raise InputError("sextans --breakdown: --plot draws one schedule's PEs; leave it out")
        return breakdown(args, A)
    r = evaluate(A, args.n, platform=args.platform, check=not args.no_check,
                 pes=args.pes, raw_distance=args.raw_distance, window=args.window, n0=args.n0,
                 policy=args.policy)
    r["matrix"] = args.matrix
    require_close(f"sextans {args.matrix}: the functional simulation vs scipy", r["max_rel_err"])
    text = render(r)
    if args.plot:
        from tvm_ext.spmm_engine.plot import plot_pe_streams

        r["plot"] = str(plot_pe_streams(r, args.plot, title=f"{args.matrix}, N = {args.n}"))
        text += f"\n\nplot written to {r['plot']}"
    return Output(r, text)


def _per_peg(lengths: list[int], per_peg: int) -> list[str]:
    return [f"  PEG {g:>2}: " + " ".join(f"{x:>7,}" for x in lengths[i:i + per_peg])
            for g, i in enumerate(range(0, len(lengths), per_peg))]


def render(r: dict) -> str:
    """Human-readable form of :func:`~tvm_ext.spmm_engine.evaluate`'s result."""
    cfg, plat = r["config"], r["platform"]
    pe = r["pe_length"]
    lines = [
        f"matrix        {r['matrix']}: {r['rows']:,} x {r['cols']:,}, nnz {r['nnz']:,}, N = {r['n']}",
        f"engine        P={cfg['pes']} PEs, N0={cfg['n0']}, K0={cfg['window']}, D={cfg['raw_distance']}, "
        f"policy {cfg['policy']}; {r['passes']} row pass(es), {r['windows']} window(s)",
        f"platform      {plat['name']}: {plat['freq_mhz']:g} MHz, "
        f"{plat['hbm_channels'] * plat['channel_gbs']:.0f} GB/s, {plat['power_w']:g} W",
        f"preprocess    {r['preprocess_s'] * 1e3:.1f} ms "
        f"({r['nnz'] / max(r['preprocess_s'], 1e-9) / 1e6:.2f} M nnz/s)",
        "",
        "schedule:",
        table(["stream length", "bubbles", "RAW bubbles", "padding", "slot use",
               "PE length min", "mean", "max"],
              [[r["stream_length"], r["bubbles"], r["raw_bubbles"], r["padding"],
                round(r["slot_utilization"], 4), pe["min"], round(pe["mean"], 1), pe["max"]]]),
        "stream length per PE (own schedule, before padding to the longest PE):",
        *_per_peg(r["pe_lengths"], cfg["pes_per_peg"]),
        "",
        "model:",
        table(["cycles", "seconds", "GFLOP/s", "BW utilisation", "FLOP/J"],
              [[r["cycles"], f"{r['seconds']:.4e}", r["gflops"], round(r["bandwidth_utilization"], 4),
                f"{r['flop_per_joule']:.3e}"]]),
        "stage time (s): " + ", ".join(f"{k} {v:.3e}" for k, v in r["stages"].items()),
        f"fixed costs: host launch {r['launch_s'] * 1e6:g} us, pipeline fill / drain "
        f"{r['fill_drain_cycles']:,} cycles (steady state alone {r['steady_s']:.4e} s)",
        "",
    ]
    if r["max_rel_err"] is None:
        lines.append("functional check: skipped")
    else:
        lines.append(f"functional check vs scipy (float64): max rel err {r['max_rel_err']:.2e}, "
                     f"max abs err {r['max_abs_err']:.2e} (simulated in {r['simulate_s']:.2f} s)")
    return "\n".join(lines)


def breakdown(args, A) -> Output:
    """Table 1 on ``A``: modelled speedup of each optimisation, against the paper's crystm03."""
    for flag, value in (("--pes", args.pes), ("--n0", args.n0), ("--policy", args.policy)):
        if value is not None:
            raise InputError(f"sextans --breakdown: {flag} is set by each Table 1 step; leave it out")
    steps = speedup_breakdown(A, args.n, args.platform, raw_distance=args.raw_distance,
                              window=args.window)
    data = {"matrix": args.matrix, "rows": A.shape[0], "cols": A.shape[1], "nnz": int(A.nnz),
            "n": args.n, "platform": args.platform, "steps": [s.to_dict() for s in steps]}
    lines = [
        f"Table 1 breakdown: {args.matrix} ({A.shape[0]:,} x {A.shape[1]:,}, nnz {A.nnz:,}), "
        f"N = {args.n}, platform {args.platform} (paper: crystm03, 24,696 x 24,696, nnz 583,770)",
        table(["step", "stream length", "cycles", "time (us)", "GFLOP/s", "incr.", "paper incr.",
               "accum.", "paper accum."],
              [[s.label, s.stream_length, s.report.cycles, round(s.report.seconds * 1e6, 1),
                round(s.report.gflops, 2), round(s.incremental, 2), s.paper_incremental,
                round(s.accumulated, 1), s.paper_accumulated] for s in steps]),
        "",
        "where each ratio comes from:",
        *(f"  {s.label}: {s.why}" for s in steps),
    ]
    return Output(data, "\n".join(lines))
