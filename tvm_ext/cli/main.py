# PYTHON_ARGCOMPLETE_OK (argcomplete's marker: this entry point completes its own arguments)
"""Entry point of ``tvm-ext``.

Subcommands live one per module in :mod:`tvm_ext.cli.commands`; each module
defines ``register(subparsers, common)`` and is discovered automatically.
Every subcommand takes ``--json`` (print exactly one JSON object on stdout;
non-finite numbers are printed as ``null``), ``--debug`` (show tracebacks)
and ``--allow-large`` (lift the work limits of :mod:`tvm_ext.limits`).
Errors print one line on stderr.

Exit codes: 0 success; 1 internal error (a bug); 2 bad input (a
:class:`~tvm_ext.errors.TvmExtError` or an unreadable file; also a self-check
whose numbers are wrong, :class:`~tvm_ext.errors.ResultError`, see
:mod:`tvm_ext.cli.selfcheck`); 3 the command ran
but its result failed (e.g. ``cg`` did not converge; the output says why);
130 interrupted (Ctrl-C; records already written are kept).

Shell completion: with the optional ``argcomplete`` package
(``pip install 'tvm-ext[completion]'``) and
``eval "$(register-python-argcomplete tvm-ext)"`` in the shell, Tab completes
subcommands and options.  argcomplete is imported only while the shell asks
for completions (it sets ``_ARGCOMPLETE``), so other runs pay nothing for it.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import pkgutil
import signal
import sys
import threading
import traceback
import warnings
from typing import Any, Iterator, Sequence

from tvm_ext.cli.args import CliParser
from tvm_ext.cli.output import EXIT_RESULT_FAILED  # noqa: F401 - one of the documented exit codes
from tvm_ext.errors import TvmExtError
from tvm_ext.sigint import sigint_handler

__all__ = ["build_parser", "main"]

EXIT_USER_ERROR = 2
EXIT_INTERNAL_ERROR = 1
EXIT_INTERRUPTED = 130


def _common_options() -> argparse.ArgumentParser:
    common = CliParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print exactly one JSON object on stdout")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show full tracebacks on errors")
    common.add_argument("--allow-large", action="store_true", default=argparse.SUPPRESS,
                        help="run requests above the work limits (FLOP, bytes, steps); "
                        "also TVM_EXT_ALLOW_LARGE=1")
    return common


def _version_line() -> str:
    """``tvm-ext X (TVM Y)``; TVM's version is read from its package metadata (no import)."""
    from importlib import metadata

    from tvm_ext import __version__

    try:
        tvm = metadata.version("apache-tvm")
    except metadata.PackageNotFoundError:
        tvm = "not installed"
    return f"tvm-ext {__version__} (TVM {tvm})"


def _complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request and exit, when there is one and argcomplete is installed."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:
        return
    argcomplete.autocomplete(parser)


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every discovered subcommand registered."""
    common = _common_options()
    parser = CliParser(
        prog="tvm-ext", parents=[common],
        description="Scheduling plugin for Apache TVM: sparse, fusion, tensorize and modelled accelerators.")
    parser.add_argument("--version", action="version", version=_version_line(),
                        help="print the versions of tvm-ext and TVM and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    from tvm_ext.cli import commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(subparsers, common)
    return parser


def _finite(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float replaced by None (JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def to_json(data: Any) -> str:
    """``data`` as strict JSON: numpy values as Python ones, NaN/inf as null.

    >>> to_json({"r": float("nan"), "x": [1.5, float("inf")]})
    '{"r": null, "x": [1.5, null]}'
    """
    plain = json.loads(json.dumps(data, default=_json_default))
    return json.dumps(_finite(plain), allow_nan=False)


def _emit(out, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(to_json(out.data) + "\n")
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


class _Interrupts:
    """SIGINT while a command runs: remember it, then raise ``KeyboardInterrupt``.

    The flag, not the exception, decides "interrupted": a ``KeyboardInterrupt``
    raised inside a callback that TVM's FFI or a worker pool calls reaches the
    CLI as some other exception (``RuntimeError``, ``TVMError``).  A second
    Ctrl-C leaves at once (every record written so far is already on disk).
    """

    def __init__(self) -> None:
        self.seen = False

    def _handler(self, signum, frame) -> None:
        if self.seen:
            os.write(2, b"tvm-ext: error: interrupted\n")
            os._exit(EXIT_INTERRUPTED)
        self.seen = True
        raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator["_Interrupts"]:
        with sigint_handler(self._handler):
            yield self


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return " ".join(lines) if lines else ""


def _fail(message: str, code: int, as_json: bool) -> int:
    if as_json:
        sys.stdout.write(json.dumps({"error": _one_line(message)}) + "\n")
    sys.stderr.write(f"tvm-ext: error: {_one_line(message)}\n")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (see the module docstring).

    Without ``argv`` (run as the ``tvm-ext`` program) Ctrl-C is ignored once
    the command has finished and printed: the process is only tearing down,
    and a signal then would end it with no message after a complete result.
    """
    code = _main(list(sys.argv[1:] if argv is None else argv))
    if argv is None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    return code


def _main(argv: list[str]) -> int:
    CliParser.json_errors = "--json" in argv
    try:
        from tvm_ext.limits import allowing_large

        parser = build_parser()  # imports every subcommand (and TVM): a Ctrl-C may well come now
        _complete(parser)
        args = parser.parse_args(argv)
    except SystemExit as e:  # a usage error (one line, see CliParser) or --help
        return e.code if isinstance(e.code, int) else EXIT_USER_ERROR
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED, "--json" in argv)
    as_json = bool(getattr(args, "json", False))
    debug = bool(getattr(args, "debug", False))
    interrupts = _Interrupts()
    try:
        with interrupts.installed(), allowing_large(bool(getattr(args, "allow_large", False))), \
                warnings.catch_warnings():
            if not debug:  # third-party deprecation notices are not the user's concern: stderr stays one line
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", FutureWarning)
            out = args.func(args)
    except BaseException as e:  # noqa: BLE001 - every failure becomes one line and an exit code
        if isinstance(e, SystemExit):
            raise
        if debug:
            traceback.print_exc()
        if interrupts.seen or isinstance(e, KeyboardInterrupt):
            return _fail("interrupted", EXIT_INTERRUPTED, as_json)
        if isinstance(e, TvmExtError):
            return _fail(str(e), EXIT_USER_ERROR, as_json)
        if isinstance(e, OSError) and e.filename is not None:  # a path the user named cannot be used
            return _fail(f"{e.filename}: {e.strerror or e}", EXIT_USER_ERROR, as_json)
        if isinstance(e, MemoryError):
            return _fail("out of memory (the request is too large for this machine)", EXIT_USER_ERROR, as_json)
        if not isinstance(e, Exception):
            raise
        hint = "" if debug else " (run with --debug for a traceback)"
        return _fail(f"internal error: {type(e).__name__}: {e}{hint}", EXIT_INTERNAL_ERROR, as_json)
    if interrupts.seen:  # interrupted, and something swallowed the exception: the result may be partial
        return _fail("interrupted", EXIT_INTERRUPTED, as_json)
    try:
        _emit(out, as_json)
    except BrokenPipeError:  # the reader left (``tvm-ext ... | head``): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's flush at exit must not fail again
    return int(getattr(out, "exit_code", 0))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
