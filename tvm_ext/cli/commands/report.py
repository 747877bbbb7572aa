"""``tvm-ext report --out DIR``: run the benchmark suites and write one report with tables and plots."""
from __future__ import annotations

import sys

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

    suites = [s.strip() for s in args.suites.split(",") if s.strip()] if args.suites else None

    def progress(msg: str) -> None:
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()

    path, results = write_report(args.out, args.size, suites=suites, fmt=args.format, timeout_s=args.timeout,
                                 progress=progress)
    rows = [[r.suite.name, r.status, round(r.seconds, 1), sum(len(v) for v in r.rows.values()), len(r.plots),
             r.error[:80]] for r in results]
    text = "\n".join([f"report written to {path}",
                      table(["suite", "status", "seconds", "rows", "plots", "note"], rows)])
    return Output({"report": str(path), "size": args.size, "suites": [r.to_dict() for r in results]}, text)
