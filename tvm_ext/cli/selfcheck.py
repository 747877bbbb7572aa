"""The CLI's self-checks: a computed result compared with its reference must be within tolerance.

A command that checks its own numbers (``spmm`` vs scipy, ``accel`` and
``sextans`` simulations vs numpy/scipy, ``compile --check`` vs the llvm-only
build) calls :func:`require_close` on the error it measured; an error above
the tolerance (or NaN) raises :class:`~tvm_ext.errors.ResultError`, which the
CLI turns into one line and exit status 2 instead of printing a wrong answer.

>>> require_close("spmm nasa4704 vs scipy", 3e-7, "float32")
>>> require_close("spmm nasa4704 vs scipy", 0.5, "float32")
Traceback (most recent call last):
...
tvm_ext.errors.ResultError: spmm nasa4704 vs scipy: max relative error 0.5 exceeds the tolerance 0.001: the result is wrong
"""
from __future__ import annotations

import math

from tvm_ext.errors import ResultError

__all__ = ["SELF_CHECK_TOLERANCE", "require_close"]

#: Largest accepted ``max |got - ref| / max |ref|`` by the dtype the result was computed in.
SELF_CHECK_TOLERANCE = {"float32": 1e-3, "float64": 1e-8}


def require_close(what: str, max_rel_err: float | None, dtype: str = "float32") -> None:
    """Raise :class:`ResultError` when ``max_rel_err`` is above the tolerance of ``dtype`` or not finite.

    ``None`` means the check was skipped (``--no-check``) and passes.
    """
    if max_rel_err is None:
        return
    tol = SELF_CHECK_TOLERANCE[dtype]
    err = float(max_rel_err)
    if not (math.isfinite(err) and err <= tol):
        raise ResultError(f"{what}: max relative error {err:.3g} exceeds the tolerance {tol:.3g}: the result is wrong")
