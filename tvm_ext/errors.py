"""One error hierarchy for the whole plugin.

Every error a user can cause derives from :class:`TvmExtError`; the CLI turns it
into a single line.  The subclasses say *which* kind of thing was wrong, so
callers can catch narrowly::

    >>> from tvm_ext.errors import InputError
    >>> try:
    ...     raise InputError("matrix 'A': NaN in data")
    ... except TvmExtError as e:
    ...     print(e)
    matrix 'A': NaN in data
"""
from __future__ import annotations

__all__ = [
    "TvmExtError",
    "InputError",
    "MatrixFormatError",
    "ShapeError",
    "MappingError",
    "ConfigError",
    "ScheduleError",
    "TuningError",
    "ConvergenceError",
    "CacheError",
    "ResultError",
    "CodegenError",
    "positive_int",
]


class TvmExtError(Exception):
    """Base class of every error the plugin raises on purpose."""


class InputError(TvmExtError, ValueError):
    """User data is unusable: NaN, bad dtype, index overflow, wrong shape..."""


class MatrixFormatError(InputError):
    """A matrix file could not be read (malformed, truncated, unsupported)."""


class ShapeError(InputError):
    """Operand shapes do not agree, or a square matrix was required."""


class MappingError(TvmExtError):
    """No instruction mapping exists (carries the mapper's reasons)."""


class ConfigError(TvmExtError, ValueError):
    """A hardware or tuning configuration is invalid."""


class ScheduleError(TvmExtError):
    """A schedule or transformation was illegal (e.g. non-injective compaction)."""


class TuningError(TvmExtError):
    """A tuning session could not run (unknown task, bad database, no tracker)."""


class ConvergenceError(TvmExtError):
    """An iterative solver did not converge and the caller asked for strictness."""


class CacheError(TvmExtError):
    """The compiled-kernel cache directory is unsafe to use (foreign owner, writable by others)."""


class ResultError(TvmExtError):
    """A self-check failed: a built kernel's result disagrees with its reference."""


class CodegenError(TvmExtError):
    """Source text the plugin generated (TVMScript) does not parse: a bug in its generator."""


def positive_int(value: object, what: str, error: type[TvmExtError] = InputError) -> int:
    """``value`` as an ``int`` if it is an integer (Python or numpy, not bool) >= 1; else ``error``.

    >>> positive_int(3, "M")
    3
    >>> positive_int(0, "gemm: M")
    Traceback (most recent call last):
    ...
    tvm_ext.errors.InputError: gemm: M must be a positive integer, got 0
    """
    if isinstance(value, bool) or not hasattr(value, "__index__") or value.__index__() < 1:
        raise error(f"{what} must be a positive integer, got {value!r}")
    return int(value.__index__())
