"""``tvm-ext spmm NAME|FILE --n 32``: inspect, build, run, and compare with scipy and torch."""
from __future__ import annotations

from tvm_ext.cli.args import count, size
from tvm_ext.cli.output import Output
from tvm_ext.cli.selfcheck import require_close
from tvm_ext.markdown import table
from tvm_ext.workloads import resolve_matrix


def register(subparsers, common) -> None:
    p = subparsers.add_parser("spmm", parents=[common],
                              help="sparse x dense product with the inspector-chosen format vs scipy/torch")
    p.add_argument("matrix", metavar="NAME|FILE", help="a bundled matrix name or a .mtx file")
    p.add_argument("--n", type=size("--n"), default=32, help="columns of the dense operand (1 = SpMV)")
    p.add_argument("--format", default=None, help="force a format (csr, coo, bcsr, ell, dia, csb, hyb, sell)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--repeat", type=count("--repeat", 1, 1000), default=5, help="timing repeats (best is reported)")
    p.add_argument("--plot", metavar="PNG", default=None,
                   help="also write this run's GFLOP/s, ours beside each peer, as a bar chart (needs matplotlib)")
    p.set_defaults(func=run)


def plot_gflops(res: dict, path: str, title: str) -> str:
    """Bar chart of one comparison: the chosen format's GFLOP/s next to scipy's and torch's."""
    from tvm_ext.figures import png_figure

    bars = [(f"tvm-ext {res['format']}", res["gflops"], "tab:blue"),
            ("scipy.sparse", res["scipy_gflops"], "tab:gray")]
    if res.get("torch_gflops"):
        bars.append(("torch.sparse.mm", res["torch_gflops"], "tab:orange"))
    with png_figure(path) as (fig, ax):
        ax.bar([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
        for i, (_, v, _) in enumerate(bars):
            ax.annotate(f"{v:.2f}", (i, v), ha="center", va="bottom", fontsize=9)
        ax.set_ylabel("GFLOP/s (best of the repeats)")
        ax.set_title(title)
    return str(path)


def check_spmm_size(name: str, A, n: int, itemsize: int, repeat: int) -> None:
    """Refuse an empty matrix (``InputError``) or a product above :mod:`tvm_ext.limits` (``ConfigError``)."""
    from tvm_ext.errors import InputError
    from tvm_ext.limits import check_work

    rows, cols = A.shape
    if rows == 0 or cols == 0 or A.nnz == 0:
        raise InputError(f"matrix {name!r} is empty ({rows}x{cols}, {A.nnz} non-zeros): nothing to multiply")
    # B, C and the scipy/torch results are dense (rows|cols) x n; every peer runs `repeat` times
    check_work(f"spmm {name} ({rows}x{cols}, nnz {A.nnz}) x N={n}",
               bytes=(2 * cols + 3 * rows) * n * itemsize + 24 * A.nnz, flop=2 * A.nnz * n * 3 * (repeat + 1))


def run(args) -> Output:
    from schedules.sparse import inspect
    from schedules.sparse.peers import compare_spmm

    A = resolve_matrix(args.matrix, dtype=args.dtype)
    check_spmm_size(args.matrix, A, args.n, 4 if args.dtype == "float32" else 8, args.repeat)
    plan = inspect(A, n_cols=args.n, format=args.format)
    res = compare_spmm(plan, repeat=args.repeat)
    res["matrix"] = args.matrix
    res["reason"] = plan.choice.reason
    require_close(f"spmm {args.matrix} ({res['format']}) vs scipy", res["max_rel_err"], args.dtype)
    rows = [["tvm-ext " + res["format"], res["gflops"], 1.0],
            ["scipy.sparse", res["scipy_gflops"], res["gflops"] / res["scipy_gflops"]]]
    if res["torch_gflops"]:
        rows.append(["torch.sparse.mm", res["torch_gflops"], res["gflops"] / res["torch_gflops"]])
    text = "\n".join([
        f"{args.matrix}: {res['rows']:,} x {res['cols']:,}, nnz {res['nnz']:,}, N = {args.n}, {args.dtype}",
        plan.explain(),
        "",
        table(["kernel", "GFLOP/s", "ours / this"], rows),
        "" if res["torch_gflops"] else "(torch not installed: no torch peer)",
        f"max relative error vs scipy: {res['max_rel_err']:.2e}; "
        f"inspector = {res['inspector_runs']:.1f} executor runs",
    ])
    if args.plot:
        res["plot"] = plot_gflops(res, args.plot, f"{args.matrix}, N = {args.n}, {args.dtype}")
        text += f"\n\nplot written to {res['plot']}"
    return Output(res, text)
