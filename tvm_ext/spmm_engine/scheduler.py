"""Sextans §3.3 (Fig. 5): PE-aware out-of-order non-zero scheduling.

Each PE accumulates ``c[row] += a * b[col]`` in a pipeline whose read-modify-
write of one C row takes D cycles, so two updates of the same row must issue
at least D cycles apart.  The Sextans host (``generate_edge_list_for_one_PE``
in the released code) schedules a bin's non-zeros in column-major order: a
non-zero of row r goes to the first *free* cycle at or after
``last_cycle[r] + D`` (cycle 0 for a row's first non-zero), which fills the
bubbles that in-order issue leaves.  In-order issue (the Fig. 5 and Table 1
baselines) instead takes ``max(previous cycle + 1, last_cycle[r] + D)``.

Vectorisation.  Bins (one per window and PE) are independent, so the
greedy runs in lockstep over all bins: step t schedules the t-th non-zero of
every bin that has one, as a handful of numpy operations on vectors as long
as the number of bins.  Each bin's cycle occupancy lives in one flat boolean
array (each bin gets its own segment), plus a per-bin pointer below which
every cycle is taken, so a row's first non-zero does not rescan the filled
prefix and the search for a free cycle only walks the few occupied cycles
ahead of its release time.
The Python loop runs over the largest bin's length, never over non-zeros.

The segment of a bin with n non-zeros, at most m of them in one row, is
``n + (D - 1) * (m - 1) + 1`` cycles: for the last-placed chain of a row,
only the D - 1 cycles after each of its earlier non-zeros can be bubbles,
everything else up to the makespan is occupied.

>>> import numpy as np
>>> # Fig. 5(i) with D=4: rows of its ten non-zeros in column-major order
>>> rows = np.array([0, 2, 3, 1, 2, 0, 2, 3, 0, 3])
>>> list_schedule(np.array([0, 10]), rows, 4).tolist()
[0, 1, 2, 3, 5, 4, 9, 6, 8, 10]
"""
from __future__ import annotations

import numpy as np

from tvm_ext.errors import ConfigError

__all__ = ["list_schedule"]


def _skip_taken(occ: np.ndarray, cand: np.ndarray) -> None:
    """Advance every candidate cycle past occupied ones (in place)."""
    busy = np.flatnonzero(occ[cand])
    while busy.size:
        cand[busy] += 1
        busy = busy[occ[cand[busy]]]


def _lockstep(bin_ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Non-empty bins sorted by size (largest first), their sizes, starts, and
    the number of bins still active at each step."""
    sizes = np.diff(bin_ptr)
    nonempty = np.flatnonzero(sizes)
    ob = nonempty[np.argsort(-sizes[nonempty], kind="stable")]
    sz = sizes[ob]
    active = np.searchsorted(-sz, -np.arange(int(sz[0]) if sz.size else 0), side="left")
    return ob, sz, bin_ptr[ob], active


def _ooo(bin_ptr, key, D, max_mult) -> np.ndarray:
    ob, sz, base, active = _lockstep(bin_ptr)
    caps = sz + (D - 1) * (np.maximum(max_mult[ob], 1) - 1) + 1
    off = np.zeros(ob.size, dtype=np.int64)
    np.cumsum(caps[:-1], out=off[1:])
    occ = np.zeros(int(caps.sum()), dtype=bool)
    # first_free[b]: every cycle of bin b below it is taken (it may itself be
    # taken too; the search below walks past such cycles)
    first_free = off.copy()
    last = np.full(int(key.max()) + 1, -D, dtype=np.int64)  # Sextans' cycles_rows
    slot = np.empty(key.size, dtype=np.int64)
    for t, a in enumerate(active):
        idx = base[:a] + t
        k = key[idx]
        ff = first_free[:a]
        release = last[k]
        release += D
        cand = np.maximum(ff, release)
        _skip_taken(occ, cand)  # first free cycle at or after the release time
        occ[cand] = True
        last[k] = cand
        # searched from first_free: everything up to cand is now taken
        np.copyto(ff, cand + 1, where=release <= ff)
        cand -= off[:a]
        slot[idx] = cand
    return slot


def _in_order(bin_ptr, key, D) -> np.ndarray:
    ob, sz, base, active = _lockstep(bin_ptr)
    prev_cycle = np.full(ob.size, -1, dtype=np.int64)
    last = np.full(int(key.max()) + 1, -D, dtype=np.int64)
    slot = np.empty(key.size, dtype=np.int64)
    for t, a in enumerate(active):
        idx = base[:a] + t
        k = key[idx]
        cand = np.maximum(prev_cycle[:a] + 1, last[k] + D)
        slot[idx] = cand
        last[k] = cand
        prev_cycle[:a] = cand
    return slot


def list_schedule(bin_ptr: np.ndarray, row_key: np.ndarray, raw_distance: int,
                  policy: str = "ooo", max_mult: np.ndarray | None = None) -> np.ndarray:
    """Cycle (within its bin's window) of every non-zero, in scheduling order.

    ``bin_ptr`` delimits the bins; ``row_key[i]`` is a non-negative id of the
    C row non-zero ``i`` updates (equal ids within a bin = same row; a key
    must not appear in two bins); ``raw_distance`` is D.  ``policy`` is
    ``"ooo"`` (Sextans) or ``"in-order"``.  ``max_mult`` (most non-zeros of
    one row per bin) sizes the occupancy segments; it is computed when omitted.
    """
    D = int(raw_distance)
    if D < 1:
        raise ConfigError(f"raw distance D must be >= 1, got {raw_distance}")
    bin_ptr = np.asarray(bin_ptr, dtype=np.int64)
    key = np.asarray(row_key)
    if not np.issubdtype(key.dtype, np.integer):
        raise ConfigError(f"row_key must be integers, got {key.dtype}")
    if key.size == 0:
        return np.zeros(0, dtype=np.int64)
    if policy == "in-order":
        return _in_order(bin_ptr, key, D)
    if policy != "ooo":
        raise ConfigError(f"scheduling policy must be 'ooo' or 'in-order', got {policy!r}")
    if max_mult is None:
        bins = np.repeat(np.arange(bin_ptr.size - 1), np.diff(bin_ptr))
        max_mult = np.zeros(bin_ptr.size - 1, dtype=np.int64)
        np.maximum.at(max_mult, bins, np.bincount(key)[key])
    return _ooo(bin_ptr, key, D, np.asarray(max_mult, dtype=np.int64))
