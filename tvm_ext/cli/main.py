"""Entry point of ``tvm-ext``.

Subcommands live one per module in :mod:`tvm_ext.cli.commands`; each module
defines ``register(subparsers, common)`` and is discovered automatically.
Every subcommand takes ``--json`` (print exactly one JSON object on stdout)
and ``--debug`` (show tracebacks).  Errors print one line and exit non-zero.
"""
from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import traceback
from typing import Sequence

from tvm_ext.errors import TvmExtError

__all__ = ["build_parser", "main"]

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1


def _common_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print exactly one JSON object on stdout")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show full tracebacks on errors")
    return common


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every discovered subcommand registered."""
    common = _common_options()
    parser = argparse.ArgumentParser(
        prog="tvm-ext", parents=[common],
        description="Scheduling plugin for Apache TVM: sparse, fusion, tensorize and modelled accelerators.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    from tvm_ext.cli import commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(subparsers, common)
    return parser


def _emit(out, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(out.data, default=_json_default) + "\n")
    else:
        sys.stdout.write(out.text.rstrip("\n") + "\n")
    sys.stdout.flush()


def _json_default(obj):
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def _fail(message: str, code: int, as_json: bool) -> int:
    if as_json:
        sys.stdout.write(json.dumps({"error": message}) + "\n")
    sys.stderr.write(f"tvm-ext: error: {message}\n")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    as_json = bool(getattr(args, "json", False))
    debug = bool(getattr(args, "debug", False))
    try:
        out = args.func(args)
    except TvmExtError as e:
        if debug:
            traceback.print_exc()
        return _fail(str(e), EXIT_USER_ERROR, as_json)
    except KeyboardInterrupt:
        return _fail("interrupted", 130, as_json)
    except Exception as e:  # an internal bug: still one line unless --debug
        if debug:
            traceback.print_exc()
        hint = "" if debug else " (run with --debug for a traceback)"
        return _fail(f"internal error: {type(e).__name__}: {e}{hint}", EXIT_INTERNAL_ERROR, as_json)
    _emit(out, as_json)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
