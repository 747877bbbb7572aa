"""``tvm-ext demo``: a tour of what the plugin can do, on the bundled data."""
from __future__ import annotations

from tvm_ext.cli.output import Output
from tvm_ext.demo import run_demo, section_names


def register(subparsers, common) -> None:
    p = subparsers.add_parser("demo", parents=[common], help="run every capability on the bundled data")
    p.add_argument("--only", nargs="*", metavar="SECTION", choices=section_names(),
                   help="run only these sections")
    p.set_defaults(func=run)


def run(args) -> Output:
    results, text = run_demo(only=args.only)
    return Output({"sections": results}, text)
