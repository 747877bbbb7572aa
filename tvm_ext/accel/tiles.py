"""ISA Mapper §3.3: unrolling into compute tiles, the data pieces they touch, and their order.

Every selected mapping is unrolled into **compute tiles**, one instruction call
each (outer axes x tiles of the mapped axes).  Each operand of a call touches
a **piece**: a rectangular, possibly strided region of one tensor laid out in
the needle's dimension order (:class:`PieceTable`).  Pieces are the unit the
scheduler moves, caches and invalidates; pieces of one tensor whose regions
overlap (different tile sizes or layouts, convolution windows) are tracked so
a write to one invalidates the others.

:func:`dependencies` derives the tile DAG (read-after-write, write-after-write
and write-after-read on overlapping pieces) with numpy, and
:func:`fused_order` unrolls it demand-first: each sink tile pulls the chain
that produces its operands right before it, so a producer's tile is consumed
while it still sits in a register file (the §3.3 heuristic of placing
computations on the same memory close together).

>>> from tvm_ext.accel.workload import Workload
>>> from tvm_ext.accel.system_graph import load_system
>>> from tvm_ext.accel.lowering import lower_workload
>>> wl = Workload(); _ = wl.matmul(wl.input("a", (64, 64)), wl.weight("b", (64, 64)), out="c")
>>> ts = unroll(wl, lower_workload(wl, load_system("default")))
>>> ts.n, ts.pieces.n, [int(t) for t in fused_order(ts)[:3]]
(12, 12, [0, 4, 5])
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tvm_ext.errors import ScheduleError

from .lowering import LoweredOp, MappedCall, OperandSpec
from .workload import Workload

__all__ = ["PieceTable", "TileSet", "unroll", "dependencies", "fused_order", "op_order"]

_ITEM = 4  # float32


class PieceTable:
    """All pieces of a workload: region, tile layout, and how they sit in their tensor.

    Per piece ``p``: ``tensor[p]`` (tensor index), ``shape[p]`` (tile shape),
    ``nbytes[p]`` (tile bytes, what a register-file slot holds),
    ``valid_bytes[p]`` (bytes inside the tensor: what a copy moves),
    ``home_index[p]`` (slices of the tensor), ``tile_valid[p]`` (slices of the
    tile), ``axes[p]`` (transpose taking the tensor block to tile order),
    ``partial[p]`` (the tile sticks out of the tensor), ``overlaps[p]`` (other
    pieces of the same tensor sharing elements; filled by :meth:`link_overlaps`).
    """

    def __init__(self, wl: Workload):
        self.tensor_names = list(wl.tensors)
        self.tensor_index = {n: i for i, n in enumerate(self.tensor_names)}
        self.tensor_shapes = [wl.tensors[n].shape for n in self.tensor_names]
        self._keys: dict[tuple, dict[tuple, int]] = {}
        self.tensor: list[int] = []
        self.start: list[tuple] = []
        self.counts: list[tuple] = []
        self.steps: list[tuple] = []
        self.order: list[tuple] = []
        self.shape: list[tuple] = []
        self.nbytes: list[int] = []
        self.valid_bytes: list[int] = []
        self.home_index: list[tuple] = []
        self.tile_valid: list[tuple] = []
        self.valid_shape: list[tuple] = []
        self.axes: list[tuple] = []
        self.partial: list[bool] = []
        self.lo: list[tuple] = []
        self.hi: list[tuple] = []
        self.overlaps: list[tuple] = []
        self.group: np.ndarray | None = None

    @property
    def n(self) -> int:
        return len(self.tensor)

    def intern(self, spec: OperandSpec, starts: np.ndarray) -> np.ndarray:
        """Piece ids for the rows of ``starts`` (tensor coordinates of each call's region)."""
        key = (spec.tensor, spec.counts, spec.steps, spec.order)
        table = self._keys.setdefault(key, {})
        lo = starts.min(axis=0)
        span = starts.max(axis=0) - lo + 1
        mult = np.ones(len(span), dtype=np.int64)
        for d in range(len(span) - 2, -1, -1):
            mult[d] = mult[d + 1] * span[d + 1]
        if float(np.prod(span.astype(np.float64))) > 2**62:
            raise ScheduleError(f"tensor {spec.tensor}: too many distinct tile positions to index")
        codes = (starts - lo) @ mult
        uniq, first, inv = np.unique(codes, return_index=True, return_inverse=True)
        ids = np.empty(len(uniq), dtype=np.int64)
        for u, row in enumerate(starts[first]):
            t = tuple(int(x) for x in row)
            pid = table.get(t)
            if pid is None:
                pid = self._create(spec, t)
                table[t] = pid
            ids[u] = pid
        return ids[inv.reshape(-1)]

    def _create(self, spec: OperandSpec, start: tuple) -> int:
        t = self.tensor_index[spec.tensor]
        full = self.tensor_shapes[t]
        home, lo_c, hi_c, lo, hi = [], [], [], [], []
        for s, c, st, n in zip(start, spec.counts, spec.steps, full):
            a = (-s + st - 1) // st if s < 0 else 0
            b = min(c, (n - 1 - s) // st + 1) if n - 1 - s >= 0 else 0
            if b <= a:
                a = b = 0
            lo_c.append(a)
            hi_c.append(b)
            home.append(slice(s + st * a, s + st * (b - 1) + 1, st) if b > a else slice(0, 0))
            lo.append(s + st * a)
            hi.append(s + st * (b - 1) + 1 if b > a else s + st * a)
        empty = any(b <= a for a, b in zip(lo_c, hi_c))
        order = spec.order
        tile_valid = tuple(slice(lo_c[e], hi_c[e]) for e in order)
        valid_shape = tuple(hi_c[e] - lo_c[e] for e in order)
        rest = tuple(e for e in range(len(full)) if e not in order)
        pid = len(self.tensor)
        self.tensor.append(t)
        self.start.append(start)
        self.counts.append(spec.counts)
        self.steps.append(spec.steps)
        self.order.append(order)
        self.shape.append(spec.shape)
        self.nbytes.append(int(np.prod(spec.shape)) * _ITEM)
        self.valid_bytes.append(0 if empty else int(np.prod(valid_shape)) * _ITEM)
        self.home_index.append(tuple(home))
        self.tile_valid.append(tile_valid)
        self.valid_shape.append(valid_shape)
        self.axes.append(tuple(order) + rest)
        self.partial.append(empty or valid_shape != tuple(spec.shape))
        self.lo.append(tuple(lo))
        self.hi.append(tuple(hi))
        self.overlaps.append(())
        return pid

    def link_overlaps(self, tensors: set[int]) -> None:
        """Fill :attr:`overlaps` for the pieces of ``tensors`` and the coherence :attr:`group` of every piece.

        Two pieces overlap when their bounding boxes intersect (conservative
        for strided regions).  A group is a connected set of overlapping
        pieces: dependencies are tracked per group.
        """
        n = self.n
        parent = np.arange(n)
        tens = np.asarray(self.tensor, dtype=np.int64)
        over: dict[int, list[int]] = {}
        for t in tensors:
            ids = np.flatnonzero(tens == t)
            if len(ids) < 2:
                continue
            lo = np.asarray([self.lo[i] for i in ids])
            hi = np.asarray([self.hi[i] for i in ids])
            nonempty = (hi > lo).all(axis=1)
            ids, lo, hi = ids[nonempty], lo[nonempty], hi[nonempty]
            order = np.lexsort(tuple(lo[:, d] for d in range(lo.shape[1] - 1, -1, -1)))
            ids, lo, hi = ids[order], lo[order], hi[order]
            stop = np.searchsorted(lo[:, 0], hi[:, 0], side="left")
            for a in range(len(ids)):
                b = stop[a]
                if b <= a + 1:
                    continue
                hit = np.flatnonzero(((lo[a + 1:b] < hi[a]) & (hi[a + 1:b] > lo[a])).all(axis=1))
                for k in hit:
                    i, j = int(ids[a]), int(ids[a + 1 + k])
                    over.setdefault(i, []).append(j)
                    over.setdefault(j, []).append(i)
        for i, js in over.items():
            self.overlaps[i] = tuple(sorted(set(js)))
            for j in js:
                ri, rj = _find(parent, i), _find(parent, j)
                if ri != rj:
                    parent[max(ri, rj)] = min(ri, rj)
        self.group = np.array([_find(parent, i) for i in range(n)], dtype=np.int64) if over else np.arange(n)

    def label(self, p: int) -> str:
        """``tensor[a:b, c:d]`` text of a piece (tensor coordinates)."""
        parts = []
        for s, c, st, lo, hi in zip(self.start[p], self.counts[p], self.steps[p], self.lo[p], self.hi[p]):
            parts.append(str(s) if c == 1 else f"{s}:{s + c * st}" + (f":{st}" if st != 1 else ""))
        lay = "" if list(self.order[p]) == sorted(self.order[p]) else "ᵀ"
        return f"{self.tensor_names[self.tensor[p]]}[{','.join(parts)}]{lay}"


def _find(parent: np.ndarray, i: int) -> int:
    while parent[i] != i:
        parent[i] = parent[parent[i]]
        i = parent[i]
    return int(i)


@dataclass
class TileSet:
    """The unrolled compute tiles of a workload in canonical (program) order.

    ``call[t]`` indexes :attr:`calls` (the selected mapping), ``pieces[t, k]``
    is the piece of the call's ``k``-th operand (-1 past its operand count),
    ``op[t]`` the op index.
    """

    workload: Workload
    calls: list[MappedCall]
    pieces: PieceTable
    call: np.ndarray
    op: np.ndarray
    operand_pieces: np.ndarray
    modes: list[tuple[str, ...]]
    written_tensors: set[int] = field(default_factory=set)
    _deps: tuple | None = None

    @property
    def n(self) -> int:
        return int(self.call.shape[0])

    def dependencies(self) -> tuple[np.ndarray, np.ndarray]:
        """CSR ``(ptr, pred)`` of each tile's predecessors (computed once)."""
        if self._deps is None:
            self._deps = dependencies(self)
        return self._deps


def _call_env(call: MappedCall) -> tuple[list[str], np.ndarray]:
    """Axis names and the (calls x axes) matrix of axis values at each call's origin."""
    m = call.mapping
    prog = m.program
    outer = list(call.outer_axes)
    mapped = [(x, h) for x, h in m.axis_map.items()]
    dims = [prog.extent(a) for a in outer] + [m.tiles[h] for _, h in mapped]
    names = outer + [h for _, h in mapped]
    scale = np.array([1] * len(outer) + [m.tile[x] for x, _ in mapped], dtype=np.int64)
    if not dims:
        return names, np.zeros((1, 0), dtype=np.int64)
    grid = np.indices(dims, dtype=np.int64).reshape(len(dims), -1).T
    return names, grid * scale


def _starts(spec: OperandSpec, names: list[str], env: np.ndarray) -> np.ndarray:
    col = {a: k for k, a in enumerate(names)}
    out = np.empty((env.shape[0], len(spec.rows)), dtype=np.int64)
    for e, row in enumerate(spec.rows):
        v = np.full(env.shape[0], row.const + spec.offset[e], dtype=np.int64)
        for a, c in row.terms:
            if a not in col:
                raise ScheduleError(f"operand {spec.needle} of {spec.tensor}: axis {a} neither outer nor mapped")
            v += c * env[:, col[a]]
        out[:, e] = v
    return out


def unroll(wl: Workload, lowered: list[LoweredOp]) -> TileSet:
    """§3.3: one compute tile per instruction call, in program order (ops, then mappings, then calls)."""
    table = PieceTable(wl)
    calls = [c for low in lowered for c in low.calls]
    width = max(len(c.operands) for c in calls)
    call_ids, op_ids, blocks, modes = [], [], [], []
    written = set()
    for ci, c in enumerate(calls):
        names, env = _call_env(c)
        block = np.full((env.shape[0], width), -1, dtype=np.int64)
        for k, spec in enumerate(c.operands):
            block[:, k] = table.intern(spec, _starts(spec, names, env))
            if spec.mode != "r":
                written.add(table.tensor_index[spec.tensor])
        blocks.append(block)
        call_ids.append(np.full(env.shape[0], ci, dtype=np.int32))
        op_ids.append(np.full(env.shape[0], c.op_index, dtype=np.int32))
        modes.append(tuple(s.mode for s in c.operands))
    table.link_overlaps(written)
    return TileSet(wl, calls, table, np.concatenate(call_ids), np.concatenate(op_ids), np.concatenate(blocks),
                   modes, written)


def dependencies(ts: TileSet) -> tuple[np.ndarray, np.ndarray]:
    """Predecessors of every tile: RAW, WAW and WAR on overlapping pieces of written tensors.

    Vectorised: operand events are sorted by (coherence group, tile); a
    tile depends on the previous write of its group, and a write depends on
    the reads since the previous write.
    """
    n = ts.n
    pieces = ts.pieces
    tens = np.asarray(pieces.tensor, dtype=np.int64)
    written = np.zeros(len(pieces.tensor_names), dtype=bool)
    written[list(ts.written_tensors)] = True
    ev_t, ev_g, ev_r, ev_w = [], [], [], []
    width = ts.operand_pieces.shape[1]
    mode_r = np.zeros((len(ts.calls), width), dtype=bool)
    mode_w = np.zeros((len(ts.calls), width), dtype=bool)
    for ci, ms in enumerate(ts.modes):
        for k, m in enumerate(ms):
            mode_r[ci, k] = m in ("r", "rw")
            mode_w[ci, k] = m in ("w", "rw")
    tile_ids = np.arange(n, dtype=np.int64)
    for k in range(width):
        p = ts.operand_pieces[:, k]
        ok = p >= 0
        ok[ok] &= written[tens[p[ok]]]
        if not ok.any():
            continue
        ev_t.append(tile_ids[ok])
        ev_g.append(pieces.group[p[ok]])
        ev_r.append(mode_r[ts.call[ok], k])
        ev_w.append(mode_w[ts.call[ok], k])
    if not ev_t:
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    t = np.concatenate(ev_t)
    g = np.concatenate(ev_g)
    r = np.concatenate(ev_r)
    w = np.concatenate(ev_w)
    order = np.lexsort((t, g))
    t, g, r, w = t[order], g[order], r[order], w[order]
    # one event per (group, tile): an instruction reading and writing a group does both
    new = np.ones(len(t), dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (t[1:] != t[:-1])
    starts = np.flatnonzero(new)
    r = np.logical_or.reduceat(r, starts)
    w = np.logical_or.reduceat(w, starts)
    t, g = t[starts], g[starts]
    E = len(t)
    idx = np.arange(E)
    seg = np.ones(E, dtype=bool)
    seg[1:] = g[1:] != g[:-1]
    first = np.maximum.accumulate(np.where(seg, idx, 0))
    last_seg = np.ones(E, dtype=bool)
    last_seg[:-1] = seg[1:]
    last = np.minimum.accumulate(np.where(last_seg, idx, E)[::-1])[::-1]
    prev = np.empty(E, dtype=np.int64)
    prev[0] = -1
    prev[1:] = np.maximum.accumulate(np.where(w, idx, -1))[:-1]
    has_prev = prev >= first
    nxt = np.empty(E, dtype=np.int64)
    nxt[-1] = E
    nxt[:-1] = np.minimum.accumulate(np.where(w, idx, E)[::-1])[::-1][1:]
    war = r & ~w & (nxt <= last)
    src = np.concatenate([t[prev[has_prev]], t[war]])
    dst = np.concatenate([t[has_prev], t[nxt[war]]])
    keep = src != dst
    src, dst = src[keep], dst[keep]
    code = np.unique(dst * n + src)
    dst, src = code // n, code % n
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
    return ptr, src


def fused_order(ts: TileSet) -> np.ndarray:
    """Consumer-first list scheduling of the tile DAG.

    The next tile is one just enabled by the last tile emitted (its consumer,
    the next step of its accumulation chain; the lowest program position
    first), else the ready tile earliest in program order.  Producers are
    thereby consumed right away, while their results still sit on chip.
    """
    import heapq

    ptr, pred = ts.dependencies()
    n = ts.n
    if not len(pred):
        return np.arange(n)
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
    order = np.argsort(pred, kind="stable")
    succ_src, succ_dst = pred[order], dst[order]
    sptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(succ_src, minlength=n), out=sptr[1:])
    sptr_l, succ_l = sptr.tolist(), succ_dst.tolist()
    indeg = np.diff(ptr).tolist()
    ready = [t for t in range(n) if indeg[t] == 0]  # already a heap (sorted)
    hot: list[int] = []
    out = []
    append = out.append
    while ready or hot:
        t = hot.pop() if hot else heapq.heappop(ready)
        append(t)
        enabled = []
        for k in range(sptr_l[t], sptr_l[t + 1]):
            s = succ_l[k]
            indeg[s] -= 1
            if indeg[s] == 0:
                enabled.append(s)
        if enabled:
            enabled.sort(reverse=True)
            hot.extend(enabled)
    if len(out) != n:
        raise ScheduleError("internal: the tile dependencies have a cycle")
    return np.asarray(out, dtype=np.int64)


def op_order(ts: TileSet, order: np.ndarray) -> np.ndarray:
    """``order`` stably regrouped op by op (each op's tiles contiguous, ops in program order)."""
    return order[np.argsort(ts.op[order], kind="stable")]
