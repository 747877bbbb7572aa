"""How many leading loops a parallel loop fuses so that every thread gets the same work.

TVM's runtime splits a parallel loop of extent ``E`` statically: each of ``T`` threads runs
``ceil(E / T)`` iterations, so an extent that ``T`` does not divide leaves one thread idle for
part of the kernel (7 rows on 2 threads: 4 against 3, the kernel takes 8/7 of its balanced time).
:func:`balanced_prefix` picks the fused extent from the thread count: enough iterations for a few
per thread, then more loops fused until the count divides evenly (or the uneven remainder is a
small fraction of each thread's share).

>>> balanced_prefix([7, 28, 16], 2), balanced_prefix([28, 28, 16], 2), balanced_prefix([1, 6, 6], 4)
(2, 1, 3)
>>> imbalance(7, 2), imbalance(28, 2)
(1.1428571428571428, 1.0)
"""
from __future__ import annotations

from typing import Sequence

__all__ = ["balanced_prefix", "imbalance", "MIN_CHUNKS_PER_THREAD", "MAX_IMBALANCE"]

#: The parallel loop gets at least this many iterations per thread when the loops allow it.
MIN_CHUNKS_PER_THREAD = 4
#: An uneven split is accepted once the slowest thread's share exceeds the even share by at most this.
MAX_IMBALANCE = 1.0 + 1.0 / 32


def imbalance(extent: int, threads: int) -> float:
    """The busiest thread's iterations over the even share, for a static split of ``extent`` on ``threads``.

    >>> imbalance(9, 2), imbalance(1, 4)
    (1.1111111111111112, 4.0)
    """
    if extent < 1 or threads < 1:
        raise ValueError(f"extent {extent} and threads {threads} must be positive")
    return -(-extent // threads) * threads / extent


def balanced_prefix(extents: Sequence[int], threads: int, *, min_chunks: int = MIN_CHUNKS_PER_THREAD,
                    max_imbalance: float = MAX_IMBALANCE) -> int:
    """The number of leading loops (of ``extents``, outermost first) to fuse into the parallel loop.

    The fewest loops whose product gives ``min_chunks`` iterations per thread, then more while the
    static split stays more uneven than ``max_imbalance``; every loop when no prefix balances.
    Returns at least 1 for a non-empty ``extents``.

    >>> balanced_prefix([3, 3, 64], 2), balanced_prefix([64], 3), balanced_prefix([], 2)
    (3, 1, 0)
    """
    if not extents:
        return 0
    span, k = 1, 0
    for k, e in enumerate(extents, 1):
        span *= int(e)
        if span >= min_chunks * threads and imbalance(span, threads) <= max_imbalance:
            return k
    return k
