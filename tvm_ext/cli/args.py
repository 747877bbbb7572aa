"""Argument types of the CLI: every number is parsed, range-checked and bounded here.

Each factory returns a callable for ``argparse``'s ``type=``; a bad value is
an ``argparse.ArgumentTypeError``, which :class:`CliParser` prints as one line
(exit 2).  Sizes are bounded by ``int32`` (the generated kernels index with
it); how much *work* a size asks for is checked where the work is done
(:mod:`tvm_ext.limits`).

>>> size("--n")("64")
64
>>> size("--n")("0")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: --n must be a positive integer, got 0
>>> real("--tol", low=0.0, low_open=True)("nan")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: --tol must be a finite number > 0, got 'nan'
"""
from __future__ import annotations

import argparse
import math
import re
import sys
from typing import Callable

from tvm_ext.errors import InputError, positive_int
from tvm_ext.limits import INT32_MAX

__all__ = ["CliParser", "plain_text", "size", "count", "seed", "real"]

_ROLE = re.compile(r":(?:mod|func|class|meth|attr|data|exc|obj|ref|doc|envvar|option):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")
_BLOCK = re.compile(r"(?<=\S)::[ \t]*$", re.M)


def plain_text(doc: str | None) -> str | None:
    """A docstring written for Sphinx as text for a terminal: roles and literals unwrapped.

    >>> plain_text("Run :func:`~tvm_ext.compile` on ``MODEL``; forms::")
    'Run tvm_ext.compile on MODEL; forms:'
    """
    if doc is None:
        return None
    return _BLOCK.sub(":", _LITERAL.sub(r"\1", _ROLE.sub(r"\1", doc)))


class CliParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (exit 2).

    ``json_errors`` (set by :func:`tvm_ext.cli.main.main` when ``--json`` is on
    the command line) also prints ``{"error": ...}`` on stdout.
    """

    json_errors = False

    def __init__(self, *args, **kwargs):
        if kwargs.get("description"):   # help is read by people: no Sphinx markup
            kwargs["description"] = plain_text(kwargs["description"])
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):  # noqa: D102 - argparse's method
        if isinstance(kwargs.get("help"), str):
            kwargs["help"] = plain_text(kwargs["help"])
        return super().add_argument(*args, **kwargs)

    def error(self, message: str):  # noqa: D102 - argparse's hook
        line = " ".join(str(message).split())
        if CliParser.json_errors:
            import json

            sys.stdout.write(json.dumps({"error": f"{self.prog}: {line}"}) + "\n")
        sys.stderr.write(f"{self.prog}: error: {line} (see {self.prog} --help)\n")
        sys.exit(2)


def _integer(text: str, what: str) -> int:
    try:
        return int(str(text).strip(), 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}") from None


def size(what: str, maximum: int = INT32_MAX) -> Callable[[str], int]:
    """A positive integer no larger than ``maximum`` (default: ``int32``'s)."""

    def parse(text: str) -> int:
        try:
            v = positive_int(_integer(text, what), what)
        except InputError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        if v > maximum:
            raise argparse.ArgumentTypeError(f"{what} must be at most {maximum}, got {v}")
        return v

    parse.__name__ = "size"  # argparse names the type in "invalid <name> value" messages
    return parse


def count(what: str, minimum: int = 0, maximum: int = 1_000_000) -> Callable[[str], int]:
    """An integer in ``[minimum, maximum]`` (repeats, trials, list lengths, timeouts)."""

    def parse(text: str) -> int:
        v = _integer(text, what)
        if not minimum <= v <= maximum:
            raise argparse.ArgumentTypeError(f"{what} must be an integer in [{minimum}, {maximum}], got {v}")
        return v

    parse.__name__ = "count"
    return parse


def seed(what: str = "--seed") -> Callable[[str], int]:
    """A random seed: an integer in ``[0, 2**32 - 1]``."""
    return count(what, 0, 2 ** 32 - 1)


def real(what: str, low: float = -math.inf, high: float = math.inf, *, low_open: bool = False,
         high_open: bool = False) -> Callable[[str], float]:
    """A finite float in the interval given by ``low``/``high`` (open ends with ``*_open``)."""
    lo = f"> {low:g}" if low_open else f">= {low:g}"
    hi = f"< {high:g}" if high_open else f"<= {high:g}"
    bounds = " and ".join(b for b, on in ((lo, math.isfinite(low)), (hi, math.isfinite(high))) if on)

    def parse(text: str) -> float:
        try:
            v = float(str(text).strip())
        except ValueError:
            v = math.nan
        ok = math.isfinite(v) and (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
        if not ok:
            raise argparse.ArgumentTypeError(f"{what} must be a finite number{' ' + bounds if bounds else ''}, "
                                             f"got {text!r}")
        return v

    parse.__name__ = "real"
    return parse
