"""``tvm-ext report --out DIR``: run the benchmark suites and write one report with tables and plots.

``tvm-ext report --claims`` instead prints the claim | paper | ours table of
:mod:`tvm_ext.fidelity` (every checkable claim of the four papers, ours
computed now, about a minute); with ``--out DIR`` it also writes ``DIR/claims.md``
(or ``.html``).  ``--claims --suites A,B --out DIR`` runs those suites too and
puts the claims section first in ``DIR/report.md``.

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
    p.add_argument("--out", metavar="DIR", help="directory for report.md/.html, plots/ and data/ (claims.md with "
                   "--claims); required without --claims")
    p.add_argument("--claims", action="store_true",
                   help="print the papers' claims against ours (computed now); with --suites, also run those "
                   "suites and put the claims first in the report")
    p.add_argument("--papers", default=None, metavar="A,B", help="with --claims: comma list of papers (default all: "
                   "gogeta, sextans, isa_mapper, dissertation)")
    p.add_argument("--size", default="quick", choices=SIZES,
                   help="quick: every script's --quick sizes (minutes); full: the full runs (hours)")
    p.add_argument("--format", default="md", choices=("md", "html"), help="report format (default md)")
    p.add_argument("--suites", default=None, metavar="A,B",
                   help=f"comma list of suites (default all: {', '.join(suite_names())})")
    p.add_argument("--timeout", type=count("--timeout", 1, 10 ** 6), default=None, metavar="S", help="per-suite time limit in seconds")
    p.set_defaults(func=run)


def compute_claims(args) -> tuple[list, float]:
    """The papers' claims (``--papers``, default all) and the seconds they took, with a status line."""
    import time

    from tvm_ext.fidelity import paper_claims
    from tvm_ext.tuning.progress import StatusLine

    papers = [p.strip() for p in args.papers.split(",") if p.strip()] if args.papers else None
    t0 = time.perf_counter()
    with StatusLine("claims") as status:
        def on_paper(name: str, index: int, total: int) -> None:
            status.total = total
            status.update(index, f"computing {name}'s claims")

        claims = paper_claims(papers, on_paper=on_paper)
    return claims, time.perf_counter() - t0


def run_claims(args) -> Output:
    """Compute the papers' claims; print their table (and write ``claims.md`` under ``--out``)."""
    from tvm_ext.report import claims_section, write_claims

    claims, seconds = compute_claims(args)
    data = {"claims": [c.to_dict() for c in claims], "seconds": seconds}
    if args.out:
        data["path"] = str(write_claims(args.out, claims, args.format, seconds))
    return Output(data, claims_section(claims, seconds))


def run(args) -> Output:
    from tvm_ext.errors import InputError
    from tvm_ext.report import write_report

    if args.claims and not args.suites:
        return run_claims(args)
    if not args.out:
        raise InputError("report: --out DIR is required (or --claims for the papers' claims table)")

    from tvm_ext.report import claims_section
    from tvm_ext.tuning.progress import StatusLine

    suites = [s.strip() for s in args.suites.split(",") if s.strip()] if args.suites else None
    claims = claims_section(*compute_claims(args)) if args.claims else None

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
                                     on_suite=on_suite, claims=claims)
    rows = [[r.suite.name, r.status, round(r.seconds, 1), sum(len(v) for v in r.rows.values()), len(r.plots),
             r.error[:80]] for r in results]
    text = "\n".join([f"report written to {path}",
                      table(["suite", "status", "seconds", "rows", "plots", "note"], rows)])
    return Output({"report": str(path), "size": args.size, "suites": [r.to_dict() for r in results]}, text)
