"""``tvm-ext matrix stats NAME|FILE``: structure of a sparse matrix; ``tvm-ext matrix list``: the bundled ones."""
from __future__ import annotations

from tvm_ext.cli.output import Output, table
from tvm_ext.workloads import list_matrices, load_matrix, matrix_stats, resolve_matrix


def register(subparsers, common) -> None:
    p = subparsers.add_parser("matrix", parents=[common], help="inspect sparse matrices")
    sub = p.add_subparsers(dest="matrix_command", metavar="ACTION")
    sub.required = True
    s = sub.add_parser("stats", parents=[common], help="shape, nnz, row lengths, bandwidth, diagonals, block fill")
    s.add_argument("matrix", metavar="NAME|FILE", help="a bundled matrix name or a .mtx file")
    s.add_argument("--plot", metavar="PNG", default=None,
                   help="also write a spy plot and the row-length histogram to this PNG (needs matplotlib)")
    s.set_defaults(func=run_stats)
    ls = sub.add_parser("list", parents=[common], help="the bundled matrices with their shape, nnz and kind")
    ls.set_defaults(func=run_list)


def run_list(args) -> Output:
    """Every bundled matrix: name, shape, stored non-zeros (symmetric files expanded), field, symmetry."""
    from tvm_ext.workloads import bundled_path
    from tvm_ext.workloads.matrix_market import matrix_market_header

    rows = []
    for name, what in sorted(list_matrices().items(), key=lambda kv: kv[0].lower()):
        A = load_matrix(name)
        head = matrix_market_header(bundled_path(name))
        rows.append({"name": name, "rows": int(A.shape[0]), "cols": int(A.shape[1]), "nnz": int(A.nnz),
                     "field": head["field"], "symmetry": head["symmetry"], "description": what})
    text = table(["name", "shape", "nnz", "field", "symmetry", "description"],
                 [[r["name"], f"{r['rows']:,} x {r['cols']:,}", f"{r['nnz']:,}", r["field"], r["symmetry"],
                   r["description"]] for r in rows])
    return Output({"matrices": rows}, text)


def run_stats(args) -> Output:
    A = resolve_matrix(args.matrix)
    st = matrix_stats(A)
    st["matrix"] = args.matrix
    text = render_stats(st)
    if args.plot:
        from tvm_ext.workloads.plot import plot_matrix

        st["plot"] = str(plot_matrix(A, args.plot, title=str(args.matrix)))
        text += f"\n\nplot written to {st['plot']}"
    return Output(st, text)


def render_stats(st: dict) -> str:
    """Human-readable form of :func:`~tvm_ext.workloads.matrix_stats`."""
    rl = st["row_length"]
    lines = [
        f"matrix      {st.get('matrix', '')}",
        f"shape       {st['rows']:,} x {st['cols']:,}",
        f"nnz         {st['nnz']:,}  (density {st['density']:.3g})",
        f"row length  min {rl['min']}, max {rl['max']}, mean {rl['mean']:.2f}, std {rl['std']:.2f}, "
        f"empty rows {rl['empty_rows']}",
        f"bandwidth   {st['bandwidth']:,} (lower {st['lower_bandwidth']:,}, upper {st['upper_bandwidth']:,})",
        f"diagonals   {st['diagonals']:,} occupied (DIA fill {st['dia_fill']:.3f}, ELL fill {st['ell_fill']:.3f})",
        f"symmetric   {st['pattern_symmetric']} (pattern)",
        "",
        "row-length histogram:",
    ]
    edges, counts = rl["histogram"]["edges"], rl["histogram"]["counts"]
    peak = max(counts) if counts else 1
    for lo, hi, c in zip(edges[:-1], edges[1:], counts):
        bar = "#" * max(0, round(40 * c / peak)) if peak else ""
        lines.append(f"  [{lo:>6}, {hi:>6})  {c:>9,}  {bar}")
    lines += ["", "R x C block fill ratio (nnz / stored block slots):"]
    fill = st["block_fill"]
    rs = sorted({int(k.split("x")[0]) for k in fill})
    cs = sorted({int(k.split("x")[1]) for k in fill})
    rows = [[f"R={r}"] + [round(fill[f"{r}x{c}"], 3) for c in cs] for r in rs]
    lines.append(table(["", *[f"C={c}" for c in cs]], rows))
    return "\n".join(lines)
