"""``tvm-ext accel gemm M N K`` / ``tvm-ext accel gru --steps T --hidden H --batch B`` /
``tvm-ext accel sepconv C HW [--c-out N] [--stride S] [--depthwise-only]`` / ``tvm-ext accel systems``.

Runs one case on the modelled ISA Mapper accelerator (default system graph):
cycles of this scheduler and of the kernel-library baseline, per-device-kind
utilisation, bytes moved per memory level and the functional check against
numpy; ``--plot PNG`` adds a Gantt chart of every device over time.  ``--json`` keys include ``cycles``, ``cycles_kl`` and
``max_rel_err``.  All logic is in :func:`tvm_ext.accel.run_gemm` /
:func:`tvm_ext.accel.run_gru` / :func:`tvm_ext.accel.run_sepconv`.
"""
from __future__ import annotations

from tvm_ext.cli.args import seed, size
from tvm_ext.cli.output import Output, table
from tvm_ext.cli.selfcheck import require_close


def register(subparsers, common) -> None:
    p = subparsers.add_parser("accel", parents=[common],
                              help="schedule and simulate a case on the ISA Mapper accelerator model")
    sub = p.add_subparsers(dest="accel_command", metavar="CASE")
    sub.required = True
    g = sub.add_parser("gemm", parents=[common], help="C[M,N] = A[M,K] @ B[K,N]")
    for d in ("M", "N", "K"):
        g.add_argument(d, type=size(d))
    _shared(g)
    g.set_defaults(func=run_gemm)
    r = sub.add_parser("gru", parents=[common], help="a GRU layer over T steps (recurrent schedule)")
    r.add_argument("--steps", type=size("--steps"), default=128, metavar="T", help="time steps (default 128)")
    r.add_argument("--hidden", type=size("--hidden"), required=True, metavar="H", help="hidden size")
    r.add_argument("--batch", type=size("--batch"), required=True, metavar="B", help="batch size")
    r.add_argument("--inputs", type=size("--inputs"), default=None, metavar="I", help="input size (default H)")
    _shared(r)
    r.set_defaults(func=run_gru)
    c = sub.add_parser("sepconv", parents=[common],
                       help="a MobileNet-v1 block, NCHW: depthwise 3x3 + ReLU + pointwise 1x1 + ReLU")
    c.add_argument("channels", type=size("channels"), help="input channels (the depthwise conv's groups)")
    c.add_argument("hw", type=size("hw"), help="input height = width")
    c.add_argument("--c-out", type=size("--c-out"), default=None, help="pointwise output channels (default 2x)")
    c.add_argument("--stride", type=size("--stride"), default=1, help="depthwise stride (default 1)")
    c.add_argument("--depthwise-only", action="store_true", help="the depthwise conv alone")
    _shared(c, plot=False)
    c.set_defaults(func=run_sepconv)
    s = sub.add_parser("systems", parents=[common], help="list the bundled system graphs")
    s.set_defaults(func=run_systems)


def _shared(p, plot: bool = True) -> None:
    p.add_argument("--config", default="default", metavar="NAME|FILE",
                   help="system graph: a bundled name (default, mini) or a JSON file")
    p.add_argument("--no-check", action="store_true", help="skip the functional simulation")
    p.add_argument("--seed", type=seed(), default=0, help="seed of the random inputs")
    if plot:
        p.add_argument("--plot", metavar="PNG", default=None,
                       help="also write a Gantt chart of every device over time, this scheduler above the kernel "
                       "library (a GRU shows its first 4 steps; needs matplotlib)")


def run_gemm(args) -> Output:
    from tvm_ext.accel import run_gemm as gemm

    r = gemm(args.M, args.N, args.K, system=args.config, check=not args.no_check, seed=args.seed)
    _require_checked(r, f"accel gemm {args.M} {args.N} {args.K}")
    head = f"GEMM {args.M} x {args.N} x {args.K} ({r['flops']:,} flop) on {r['system']}, {r['tiles']:,} compute tiles"
    text = render(r, head)
    if args.plot:
        from tvm_ext.accel.plot import gemm_gantt

        r["plot"] = str(gemm_gantt(args.M, args.N, args.K, args.plot, system=args.config))
        text += f"\n\nplot written to {r['plot']}"
    return Output(r, text)


def run_gru(args) -> Output:
    from tvm_ext.accel import run_gru as gru

    r = gru(args.steps, args.hidden, args.batch, args.inputs, system=args.config, check=not args.no_check,
            seed=args.seed)
    _require_checked(r, f"accel gru T={args.steps} H={args.hidden} B={args.batch}")
    head = (f"GRU T={r['steps']}, H={r['hidden']}, B={r['batch']}, I={r['inputs']} on {r['system']}: "
            f"streams priming/recursive/finish {r['stream_lengths']['priming']:,}/"
            f"{r['stream_lengths']['recursive']:,}/{r['stream_lengths']['finish']:,} instructions "
            f"(recursive replayed {max(r['steps'] - 2, 0)}x; {r['simulated_steps']} steps simulated, "
            "the rest exact repeats)")
    text = render(r, head)
    if args.plot:
        from tvm_ext.accel.plot import gru_gantt

        r["plot"] = str(gru_gantt(args.steps, args.hidden, args.batch, args.plot, inputs=args.inputs,
                                  system=args.config))
        text += f"\n\nplot written to {r['plot']}"
    return Output(r, text)


def run_sepconv(args) -> Output:
    from tvm_ext.accel import run_sepconv as sepconv

    c_out = None if args.depthwise_only else (args.c_out or 2 * args.channels)
    r = sepconv(args.channels, c_out, args.hw, args.stride, system=args.config, check=not args.no_check,
                seed=args.seed)
    what = f"accel sepconv {args.channels} {args.hw}"
    _require_checked(r, what)
    block = "depthwise 3x3" if c_out is None else f"depthwise 3x3 + pointwise to {c_out} channels"
    head = (f"{block}, {args.channels} x {args.hw} x {args.hw} input, stride {args.stride} ({r['flops']:,} flop) "
            f"on {r['system']}, {r['tiles']:,} compute tiles ({', '.join(r['instruction_set'])})")
    return Output(r, render(r, head))


def _require_checked(r: dict, what: str) -> None:
    """The functional simulations of both schedules must agree with numpy (``ResultError`` otherwise)."""
    require_close(f"{what}: this scheduler's simulation vs numpy", r["max_rel_err"])
    require_close(f"{what}: the kernel library's simulation vs numpy", r["max_rel_err_kl"])


def run_systems(args) -> Output:
    from tvm_ext.accel import available_systems, load_system

    rows, data = [], {}
    for name in available_systems():
        g = load_system(name)
        data[name] = {"summary": g.summary(), "description": g.description}
        rows.append([name, g.summary()])
    return Output({"systems": data}, table(["name", "summary"], rows))


def render(r: dict, head: str) -> str:
    """Human-readable form of a :func:`tvm_ext.accel.run_gemm` / ``run_gru`` result."""
    kinds = list(dict.fromkeys(list(r["utilisation"]) + list(r["utilisation_kl"])))
    rows = [["this scheduler", round(r["cycles"]), f"{r['cycles_per_op']:.3g}",
             *[f"{100 * r['utilisation'].get(k, 0):.1f}" for k in kinds]],
            ["kernel library", round(r["cycles_kl"]), f"{r['cycles_per_op_kl']:.3g}",
             *[f"{100 * r['utilisation_kl'].get(k, 0):.1f}" for k in kinds]]]
    levels = sorted(set(r["bytes_by_level"]) | set(r["bytes_by_level_kl"]))
    traffic = [["this scheduler", *[f"{r['bytes_by_level'].get(l, 0):,.0f}" for l in levels]],
               ["kernel library", *[f"{r['bytes_by_level_kl'].get(l, 0):,.0f}" for l in levels]]]
    lines = [head, "",
             table(["schedule", "cycles", "cycles/flop", *[f"{k} util %" for k in kinds]], rows),
             f"speedup over the kernel library: {r['speedup_vs_kl']:.2f}x", "",
             "bytes moved per memory level:", table(["schedule", *levels], traffic), ""]
    if r["max_rel_err"] is None:
        lines.append("functional check: skipped")
    else:
        lines.append(f"functional check vs numpy (float64): max rel err {r['max_rel_err']:.2e} "
                     f"(kernel library {r['max_rel_err_kl']:.2e})")
    return "\n".join(lines)
