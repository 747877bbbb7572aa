"""``tvm-ext demo``: a tour of what the plugin can do, on the bundled data.

Each section is printed as soon as it finishes (the whole tour takes a few
minutes); on a terminal a status line on stderr shows the section running and
the time spent on it.  ``--json`` prints one object at the end.  ``--only`` with no names
lists the sections; ``--only NAME ...`` runs just those.
"""
from __future__ import annotations

import sys

from tvm_ext.cli.output import Output, table
from tvm_ext.demo import run_demo, section_names, section_titles


def register(subparsers, common) -> None:
    names = section_names()
    p = subparsers.add_parser("demo", parents=[common], help="run every capability on the bundled data")
    p.add_argument("--only", nargs="*", metavar="SECTION", choices=names,
                   help=f"run only these sections ({', '.join(names)}); --only alone lists them")
    p.set_defaults(func=run)


def run(args) -> Output:
    if args.only is not None and not args.only:   # bare --only: list the sections
        titles = section_titles()
        return Output({"sections": [{"name": n, "title": t} for n, t in titles.items()]},
                      table(["section", "what it shows"], [[n, t] for n, t in titles.items()]))
    from tvm_ext.tuning.progress import StatusLine

    streaming = not getattr(args, "json", False)

    def show(name: str, text: str) -> None:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()

    with StatusLine("demo") as status:   # drawn on a terminal's stderr only
        def start(name: str, title: str, index: int, total: int) -> None:
            status.total = total
            status.update(index, f"running {title}")

        results, text = run_demo(only=args.only, on_section=show if streaming else None, on_start=start)
    if not streaming:
        return Output({"sections": results}, text)
    total = sum(float(d.get("seconds", 0.0)) for d in results.values())
    return Output({"sections": results}, f"demo: {len(results)} sections in {total:.1f} s")
