"""``tvm-ext report --out DIR``: run the benchmark suites and write one report with tables and plots.

Each finished suite is logged on stderr; on a terminal a status line shows the
suite running, how many are done and the time spent.
"""
from __future__ import annotations

from tvm_ext.cli.args import count
from tvm_ext.cli.output import Output, table


def register(subparsers, common) -> None:
    from tvm_ext.report import SIZES, suite_names

    p = subparsers.add_parser("report", parents=[common], help="run the benchmark suites; write a markdown/HTML "
                              "report with tables and plots")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for report.md/.html, plots/ and data/")
    p.add_argument("--size", default="quick", choices=SIZES,
                   help="quick: every script's --quick sizes (minutes); full: the full runs (hours)")
    p.add_argument("--format", default="md", choices=("md", "html"), help="report format (default md)")
    p.add_argument("--suites", default=None, metavar="A,B",
                   help=f"comma list of suites (default all: {', '.join(suite_names())})")
    p.add_argument("--timeout", type=count("--timeout", 1, 10 ** 6), default=None, metavar="S", help="per-suite time limit in seconds")
    p.set_defaults(func=run)


def run(args) -> Output:
    from tvm_ext.report import write_report

    from tvm_ext.tuning.progress import StatusLine

    suites = [s.strip() for s in args.suites.split(",") if s.strip()] if args.suites else None

    with StatusLine("report") as status:   # the bar is drawn on a terminal's stderr only; the log lines always
        def on_suite(suite, index: int, total: int, result) -> None:
            status.total = total
            if result is None:
                status.update(index, f"running {suite.module} ({args.size})")
                if not status.enabled:
                    status.log(f"running {suite.module} ({args.size}) ...")
                return
            rows = sum(len(v) for v in result.rows.values())
            status.log(f"  {suite.name}: {result.status} in {result.seconds:.1f} s, {rows} rows, "
                       f"{len(result.plots)} plots")
            status.update(index + 1, "")

        path, results = write_report(args.out, args.size, suites=suites, fmt=args.format, timeout_s=args.timeout,
                                     on_suite=on_suite)
    rows = [[r.suite.name, r.status, round(r.seconds, 1), sum(len(v) for v in r.rows.values()), len(r.plots),
             r.error[:80]] for r in results]
    text = "\n".join([f"report written to {path}",
                      table(["suite", "status", "seconds", "rows", "plots", "note"], rows)])
    return Output({"report": str(path), "size": args.size, "suites": [r.to_dict() for r in results]}, text)
