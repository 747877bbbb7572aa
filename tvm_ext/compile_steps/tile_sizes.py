"""Tile sizes that need no bounds test: the divisors of a loop's extent.

>>> largest_divisor(56, 16), largest_divisor(13, 8), largest_divisor(6, 4)
(14, 1, 3)
"""
from __future__ import annotations

__all__ = ["largest_divisor"]


def largest_divisor(n: int, cap: int) -> int:
    """The largest divisor of ``n`` that is at most ``cap`` (1 when none larger divides, or ``n`` < 1).

    >>> largest_divisor(32, 4), largest_divisor(7, 4), largest_divisor(16, 100)
    (4, 1, 16)
    """
    return next((d for d in range(min(cap, n), 1, -1) if n % d == 0), 1)
