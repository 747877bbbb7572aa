"""GOGETA §5.3 (Fig. 9): SRAM data organisation - FIFO writes, eviction by reuse distance and frequency.

The SRAM is tracked at tensor granularity.  A tensor occupies a *prefix* of
itself in SRAM (its head, in the order it was written); the rest lives in DRAM.

* **FIFO write** (both policies): a tensor being written fills free SRAM in
  production order; what does not fit goes straight to DRAM.  Its own head is
  never replaced by its tail, so a later reader finds the head on chip.
* ``policy="fifo"`` (SEQ-Overflow, Table 3): nothing else happens - no
  replacement of live data.
* ``policy="reuse"`` (GOGETA): when SRAM is full, a tensor whose next use is
  sooner (ties: more remaining uses, i.e. higher reuse frequency) evicts the
  *tail* of tensors reused later (Fig. 9 right: "the tail of X is evicted and
  the next element of R is enqueued").  Evicted dirty words are written to DRAM.

Data read from DRAM is installed behind the resident head (clean, so evicting
it later costs nothing) when the tensor has a future use.  A model may hold
several slices (one per cluster, GOGETA-df); each slice applies the policy to
its own contents.  Counts are words.

>>> sram = SramModel(100, "reuse")
>>> sram.key_of = {"X": (9, -1), "R": (2, -2)}.get
>>> sram.write("X", 80), sram.write("R", 50)   # R's next use is sooner: evicts X's tail
(0, 0)
>>> sram.resident("X"), sram.resident("R"), sram.dram_writes
(50, 50, 30)
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from tvm_ext.errors import ConfigError

__all__ = ["SramSlice", "SramModel", "POLICIES", "split_words"]

POLICIES = ("fifo", "reuse")
_NEVER = (math.inf, 0)


def split_words(words: int, weights: Sequence[float]) -> list[int]:
    """Split ``words`` over slices proportionally to ``weights`` (largest remainder).

    >>> split_words(10, [1, 1, 1])
    [4, 3, 3]
    """
    total = float(sum(weights))
    if total <= 0:
        raise ConfigError("slice weights must have a positive sum")
    raw = [words * w / total for w in weights]
    out = [int(math.floor(r)) for r in raw]
    rest = words - sum(out)
    for i in sorted(range(len(raw)), key=lambda i: (out[i] - raw[i], i))[:rest]:
        out[i] += 1
    return out


class SramSlice:
    """One SRAM bank: per tensor a dirty head and a clean tail."""

    def __init__(self, capacity: float):
        self.capacity = capacity
        self.used = 0
        self.dirty: dict[str, int] = {}
        self.clean: dict[str, int] = {}

    def resident(self, t: str) -> int:
        return self.dirty.get(t, 0) + self.clean.get(t, 0)

    @property
    def free_space(self) -> float:
        return self.capacity - self.used

    def _add(self, t: str, n: int, dirty: bool) -> None:
        if n:
            book = self.dirty if dirty else self.clean
            book[t] = book.get(t, 0) + n
            self.used += n

    def evict_tail(self, t: str, n: int) -> int:
        """Evict ``n`` words from ``t``'s tail (clean first); returns dirty words evicted."""
        c = min(n, self.clean.get(t, 0))
        d = min(n - c, self.dirty.get(t, 0))
        for book, k in ((self.clean, c), (self.dirty, d)):
            if k:
                book[t] -= k
                if not book[t]:
                    del book[t]
        self.used -= c + d
        return d

    def release(self, t: str) -> int:
        """Drop ``t`` entirely; returns how many of its words were dirty."""
        d = self.dirty.pop(t, 0)
        c = self.clean.pop(t, 0)
        self.used -= c + d
        return d

    def allocate(self, t: str, n: int, dirty: bool, policy: str,
                 key_of: Callable[[str], tuple]) -> tuple[int, int]:
        """Place up to ``n`` words of ``t``; returns (placed, dirty words evicted)."""
        take = int(min(n, max(self.free_space, 0)))
        self._add(t, take, dirty)
        placed, evicted_dirty = take, 0
        if placed < n and policy == "reuse":
            mine = key_of(t) or _NEVER
            victims = [v for v in dict.fromkeys([*self.dirty, *self.clean])
                       if v != t and (key_of(v) or _NEVER) > mine]
            victims.sort(key=lambda v: ((key_of(v) or _NEVER), v), reverse=True)  # farthest reuse first
            for v in victims:
                need = n - placed
                if need <= 0:
                    break
                k = min(need, self.resident(v))
                evicted_dirty += self.evict_tail(v, k)
                self._add(t, k, dirty)
                placed += k
        return placed, evicted_dirty


class SramModel:
    """SRAM slices plus DRAM read/write counters (words).

    ``key_of(tensor)`` gives a tensor's priority, smaller = keep: GOGETA uses
    ``(next use step, -remaining uses)``.
    """

    def __init__(self, capacity_words: float, policy: str = "reuse", slices: int = 1):
        if policy not in POLICIES:
            raise ConfigError(f"SRAM policy {policy!r} is not one of {POLICIES}")
        if capacity_words < 0:
            raise ConfigError(f"SRAM capacity must be >= 0 words, got {capacity_words}")
        if slices < 1:
            raise ConfigError(f"SRAM needs at least one slice, got {slices}")
        self.policy = policy
        self.slices = [SramSlice(capacity_words / slices) for _ in range(slices)]
        self.dram_reads = 0
        self.dram_writes = 0
        self.key_of: Callable[[str], tuple | None] = lambda t: None

    def resident(self, t: str) -> int:
        """Words of ``t`` on chip (all slices)."""
        return sum(s.resident(t) for s in self.slices)

    @property
    def used(self) -> int:
        return sum(s.used for s in self.slices)

    def _weights(self, where: Sequence[int] | None) -> list[float]:
        if where is None:
            return [1.0] * len(self.slices)
        w = [0.0] * len(self.slices)
        for i in where:
            w[i] += 1.0
        return w

    def _place(self, t: str, words: int, dirty: bool, where) -> int:
        """Place ``words`` of ``t`` over the slices ``where``; returns words not placed.

        What the home slices ``where`` cannot hold goes to the other slices
        (the SRAM is one address space over the NoC, §5.3: "the later part of
        R will eventually replace the tail of earlier part of X" even when R
        and X were produced on different halves), under the same policy.
        """
        home = self._weights(where)
        passes = [home]
        if where is not None:
            others = [0.0 if w else 1.0 for w in home]
            if any(others):
                passes.append(others)
        # free space first (home slices, then the others), then the policy's evictions in the same order
        left = words
        for policy in ("fifo", self.policy) if self.policy != "fifo" else ("fifo",):
            for weights in passes:
                if left:
                    left = self._place_on(t, left, dirty, weights, policy)
        return left

    def _place_on(self, t: str, words: int, dirty: bool, weights: list[float], policy: str) -> int:
        """Spread ``words`` over the weighted slices; what one slice refuses goes to the
        slices that took all of theirs."""
        left, weights = words, list(weights)
        while left and any(weights):
            refused = 0
            for i, (s, n) in enumerate(zip(self.slices, split_words(left, weights))):
                if n:
                    placed, ev = s.allocate(t, n, dirty, policy, self.key_of)
                    self.dram_writes += ev
                    if placed < n:
                        refused += n - placed
                        weights[i] = 0.0
            if refused == left:
                break
            left = refused
        return left

    def read(self, t: str, words: int, *, install: bool, where: Sequence[int] | None = None) -> int:
        """Read all of ``t``: its non-resident part comes from DRAM (returned) and,
        if ``install``, is kept on chip as far as the policy allows."""
        missing = max(words - self.resident(t), 0)
        self.dram_reads += missing
        if install and missing:
            self._place(t, missing, False, where)
        return missing

    def write(self, t: str, words: int, *, where: Sequence[int] | None = None) -> int:
        """Write ``t`` FIFO: the head fills SRAM, the rest goes to DRAM (returned)."""
        spilled = self._place(t, words, True, where)
        self.dram_writes += spilled
        return spilled

    def free(self, t: str, *, flush: bool = False) -> None:
        """``t`` is dead (or leaves the chip): drop it, writing dirty words if ``flush``."""
        for s in self.slices:
            d = s.release(t)
            if flush:
                self.dram_writes += d
