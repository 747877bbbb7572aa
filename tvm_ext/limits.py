"""Work limits: estimate what a request costs before running it, refuse it above a limit.

A public entry point that can be asked for unbounded work (a simulated GEMM of
10^15 FLOP, a GRU of 10^5 steps, an SpMM with 10^9 columns) estimates the work
first and calls :func:`check_work`, which raises
:class:`~tvm_ext.errors.ConfigError` naming the estimate, the limit and the
override.  The override is explicit: ``TVM_EXT_ALLOW_LARGE=1`` in the
environment, :func:`allowing_large` in code, or ``tvm-ext --allow-large``.

Sizes that would overflow 32-bit indices are refused by :func:`check_int32`
with no override: the generated kernels index with ``int32``.

>>> check_work("gemm 64x64x64", flop=2 * 64 ** 3)
>>> try:
...     check_work("gemm 100000x100000x100000", flop=2e15)
... except ConfigError as e:
...     print(str(e).split(";")[0])
gemm 100000x100000x100000: about 2e+15 FLOP, above the limit of 2e+10 FLOP
>>> with allowing_large():
...     check_work("gemm 100000x100000x100000", flop=2e15)
"""
from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Iterator

from tvm_ext.errors import ConfigError, InputError

__all__ = ["LIMITS", "ENV_ALLOW_LARGE", "allow_large", "allowing_large", "check_work", "check_int32", "INT32_MAX"]

#: The environment variable that lifts every work limit (any value but "", "0", "false", "no").
ENV_ALLOW_LARGE = "TVM_EXT_ALLOW_LARGE"

#: Default limits per unit: roughly a minute of simulation or a few GiB of memory on a laptop.
LIMITS: dict[str, float] = {
    "flop": 2e10,          # arithmetic done (simulated or in numpy)
    "bytes": 4 * 2 ** 30,  # memory allocated for operands and references
    "steps": 1e4,          # time steps of a simulated recurrence
}

INT32_MAX = 2 ** 31 - 1

_override: contextvars.ContextVar[bool] = contextvars.ContextVar("tvm_ext_allow_large", default=False)


def allow_large() -> bool:
    """Whether work limits are lifted (``TVM_EXT_ALLOW_LARGE`` or :func:`allowing_large`)."""
    env = os.environ.get(ENV_ALLOW_LARGE, "").strip().lower()
    return _override.get() or env not in ("", "0", "false", "no")


@contextlib.contextmanager
def allowing_large(on: bool = True) -> Iterator[None]:
    """Lift (``on=True``) the work limits inside the ``with`` block."""
    token = _override.set(bool(on) or _override.get())
    try:
        yield
    finally:
        _override.reset(token)


def check_work(what: str, **amounts: float) -> None:
    """Raise :class:`ConfigError` if any ``unit=amount`` is above :data:`LIMITS` (unless lifted).

    ``what`` names the request in the message, e.g. ``"accel gemm 4096x4096x4096"``.
    """
    if allow_large():
        return
    for unit, amount in amounts.items():
        limit = LIMITS[unit]
        if amount > limit:
            shown = "FLOP" if unit == "flop" else unit
            raise ConfigError(f"{what}: about {float(amount):.3g} {shown}, above the limit of {limit:.3g} {shown}; "
                              f"pass --allow-large or set {ENV_ALLOW_LARGE}=1 to run it anyway")


def check_int32(what: str, **extents: int) -> None:
    """Raise :class:`InputError` if an extent (an element count or largest flat index) exceeds int32.

    >>> check_int32("gemm", A=64 * 64)
    >>> check_int32("gemm", A=70000 * 70000)
    Traceback (most recent call last):
    ...
    tvm_ext.errors.InputError: gemm: A has 4900000000 elements, more than int32 indices address (2147483647)
    """
    for name, n in extents.items():
        if int(n) > INT32_MAX:
            raise InputError(f"{what}: {name} has {int(n)} elements, more than int32 indices address ({INT32_MAX})")
