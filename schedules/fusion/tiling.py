"""GOGETA §5.2 and §6.2.3 (Fig. 12): tiling across clusters and inter-cluster NoC traversals.

Two ways to place a fusion group on C clusters (Fig. 8):

* **GOGETA-df** (Fig. 8 left): each op of a group gets its own contiguous
  block of clusters (proportional to its MACs, at least one); a tensor
  produced on one block and consumed on another crosses the inter-cluster NoC.
* **GOGETA-map** (Fig. 8 right, §5.2): the dominant rank is split across all
  clusters and every op of the group runs on every cluster; the slices of a
  tensor stay in their cluster, and only the small tensors travel: a
  contracted-dominant output (Δ, Γ) is reduced to a root cluster, the small
  ops (every rank <= 1000: Λ, Φ) run on that cluster, and their results are
  broadcast to the clusters that need them.

Traversals are counted as words x links on a 2-D mesh (XY routes, clusters
numbered in snake order so a block of consecutive clusters is compact).  A
broadcast or reduction uses the XY tree from the root: reaching all 16
clusters takes 15 links, which gives §6.2.3's ``2 x N x N x 15`` for
ops 4-5 under GOGETA-map.  Not counted (the same in both strategies, or unknowable
from shapes alone): graph inputs streamed from DRAM into the clusters that use
them, and an SpMM's gather of dense rows through the sparse matrix's column
indices (it depends on the matrix structure).

>>> mesh_shape(16), tree_links(0, range(16), (4, 4))
((4, 4), 15)
>>> split_dominant_rank(10, 4)
[3, 3, 2, 2]
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from schedules.fusion.analysis import DOMINANT_MIN_SIZE
from schedules.fusion.groups import FusionGroup, FusionPlan
from schedules.fusion.loop_order import gathers
from tvm_ext.errors import ConfigError

__all__ = [
    "STRATEGIES",
    "mesh_shape",
    "cluster_xy",
    "hops",
    "tree_links",
    "split_dominant_rank",
    "df_partitions",
    "map_partitions",
    "group_partitions",
    "NocReport",
    "noc_traversals",
]

STRATEGIES = ("df", "map")


def mesh_shape(clusters: int) -> tuple[int, int]:
    """The most square ``rows x cols`` mesh holding ``clusters`` clusters."""
    if clusters < 1:
        raise ConfigError(f"need at least one cluster, got {clusters}")
    rows = max(r for r in range(1, int(math.isqrt(clusters)) + 1) if clusters % r == 0)
    return rows, clusters // rows


def cluster_xy(c: int, shape: tuple[int, int]) -> tuple[int, int]:
    """Mesh coordinates of cluster ``c`` (snake order)."""
    rows, cols = shape
    r, k = divmod(c, cols)
    return r, (k if r % 2 == 0 else cols - 1 - k)


def hops(a: int, b: int, shape: tuple[int, int]) -> int:
    """Links between two clusters on an XY-routed mesh."""
    (ra, ca), (rb, cb) = cluster_xy(a, shape), cluster_xy(b, shape)
    return abs(ra - rb) + abs(ca - cb)


def _xy_route(a: int, b: int, shape: tuple[int, int]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    (r, c), (rb, cb) = cluster_xy(a, shape), cluster_xy(b, shape)
    links = []
    while c != cb:
        nc = c + (1 if cb > c else -1)
        links.append(((r, c), (r, nc)))
        c = nc
    while r != rb:
        nr = r + (1 if rb > r else -1)
        links.append(((r, c), (nr, c)))
        r = nr
    return links


def tree_links(root: int, dests: Iterable[int], shape: tuple[int, int]) -> int:
    """Links of the XY multicast tree from ``root`` to ``dests`` (a reduction uses it reversed)."""
    links = set()
    for d in dests:
        links.update(_xy_route(root, d, shape))
    return len(links)


def split_dominant_rank(extent: int, clusters: int) -> list[int]:
    """§5.2: slice sizes when the dominant rank is split across ``clusters``."""
    if extent < 1 or clusters < 1:
        raise ConfigError(f"cannot split extent {extent} over {clusters} clusters")
    base, rem = divmod(extent, clusters)
    return [base + (i < rem) for i in range(clusters)]


def df_partitions(plan: FusionPlan, group: FusionGroup, clusters: int) -> dict[str, tuple[int, ...]]:
    """GOGETA-df: contiguous cluster blocks per op, proportional to MACs (>= 1 each)."""
    ops = list(group.ops)
    if len(ops) == 1:
        return {ops[0]: tuple(range(clusters))}
    if len(ops) > clusters:  # more ops than clusters: share round-robin
        return {op: (i % clusters,) for i, op in enumerate(ops)}
    work = [max(plan.dag.macs(op), 1) for op in ops]
    spare = clusters - len(ops)
    raw = [spare * w / sum(work) for w in work]
    extra = [int(math.floor(r)) for r in raw]
    for i in sorted(range(len(ops)), key=lambda i: (extra[i] - raw[i], i))[: spare - sum(extra)]:
        extra[i] += 1
    out, start = {}, 0
    for op, e in zip(ops, extra):
        out[op] = tuple(range(start, start + 1 + e))
        start += 1 + e
    return out


def map_partitions(plan: FusionPlan, group: FusionGroup, clusters: int) -> dict[str, tuple[int, ...]]:
    """GOGETA-map: every op of the group spans all clusters (dominant rank split)."""
    return {op: tuple(range(clusters)) for op in group.ops}


def group_partitions(plan: FusionPlan, strategy: str, clusters: int) -> dict[str, tuple[int, ...]]:
    """Op -> clusters it runs on, for every op of the plan."""
    if strategy not in STRATEGIES:
        raise ConfigError(f"tiling strategy {strategy!r} is not one of {STRATEGIES}")
    fn = df_partitions if strategy == "df" else map_partitions
    out: dict[str, tuple[int, ...]] = {}
    for g in plan.groups:
        out.update(fn(plan, g, clusters))
    for op in plan.dag.ops:  # a small op (every rank <= 1000: Λ, Φ) runs on one cluster
        if max(op.index_sizes(plan.dag).values()) <= DOMINANT_MIN_SIZE:
            out[op.name] = out[op.name][:1]
    return out


def _bounds(extent: int, parts: int) -> list[int]:
    """Cumulative slice boundaries of §5.2's split: [0, s0, s0+s1, ..., extent]."""
    out = [0]
    for n in split_dominant_rank(extent, parts):
        out.append(out[-1] + n)
    return out


def _aligned_transfer(extent: int, row_words: int, src: Sequence[int], dst: Sequence[int],
                      shape: tuple[int, int]) -> int:
    """Words x links moving a tensor split on a rank of ``extent`` over the
    clusters ``src`` (slice j on ``src[j]``) to the same split over ``dst``."""
    bs, bd = _bounds(extent, len(src)), _bounds(extent, len(dst))
    cuts = sorted(set(bs) | set(bd))
    total, i, j = 0, 0, 0
    for lo, hi in zip(cuts, cuts[1:]):
        while bs[i + 1] <= lo:
            i += 1
        while bd[j + 1] <= lo:
            j += 1
        total += (hi - lo) * row_words * hops(src[i], dst[j], shape)
    return total


@dataclass
class NocReport:
    """Inter-cluster link traversals (words x links) of one strategy.

    ``records``: ``(kind, source op, consumer ops, words x links)``; kinds are
    ``slice_transfer``, ``broadcast``, ``reduce``, ``small_transfer`` and
    ``gather_to_root``.
    """

    strategy: str
    clusters: int
    records: list[tuple[str, str, tuple[str, ...], int]] = field(default_factory=list)
    excluded_gather_words: int = 0

    @property
    def by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for kind, _, _, w in self.records:
            out[kind] = out.get(kind, 0) + w
        return out

    @property
    def total_words(self) -> int:
        return sum(r[3] for r in self.records)

    def total_bytes(self, bytes_per_word: int = 4) -> int:
        return self.total_words * bytes_per_word

    def ops_traversals(self, ops: Iterable[str]) -> int:
        """Traversals feeding ``ops`` plus their own reductions (e.g. CG ops 4 and 5)."""
        ops = set(ops)
        return sum(w for kind, src, dsts, w in self.records
                   if ops & set(dsts) or (kind == "reduce" and src in ops))

    def _add(self, kind: str, src: str, dsts: Iterable[str], words: int) -> None:
        self.records.append((kind, src, tuple(dsts), int(words)))


def _slice_dim(plan: FusionPlan, op: str) -> int | None:
    """The output dimension an op's tensor is sliced on (its dominant rank, if uncontracted)."""
    dom = plan.analysis.dominance[op]
    o = plan.dag.op(op)
    if dom.kind == "U" and dom.index in o.output.indices:
        return o.output.indices.index(dom.index)
    return None


def noc_traversals(plan: FusionPlan, strategy: str, clusters: int = 16) -> NocReport:
    """Count inter-cluster NoC traversals of ``plan`` under GOGETA-df or -map."""
    dag = plan.dag
    shape = mesh_shape(clusters)
    part = group_partitions(plan, strategy, clusters)
    rep = NocReport(strategy, clusters)
    root = {op: part[op][0] for op in part}
    for op in dag.ops:  # reductions of contracted-dominant ops spread over several clusters
        if plan.analysis.dominance[op.name].kind == "C" and len(part[op.name]) > 1:
            rep._add("reduce", op.name, (), dag.words(op.name) * tree_links(root[op.name], part[op.name], shape))
    for g in plan.groups:
        # broadcasts of small tensors: one tree per (tensor, group) covering every consumer
        bcast: dict[str, tuple[set[int], list[str]]] = {}
        for dst in g.ops:
            for t in dag.op(dst).read_tensors:
                src = dag.producer(t)
                if src is None:
                    continue  # graph input: streamed from DRAM where it is used
                sdim = _slice_dim(plan, src)
                ddom = plan.analysis.dominance[dst].index
                if sdim is not None:
                    if gathers(dag, dag.op(dst), t):
                        rep.excluded_gather_words += dag.words(t)
                        continue
                    slot = dag.op(dst).operands_of(t)[0]
                    if ddom is not None and slot.indices[sdim] == ddom:
                        extent = dag.tensors[t].shape[sdim]
                        row = dag.words(t) // extent
                        rep._add("slice_transfer", src, (dst,), _aligned_transfer(extent, row, part[src], part[dst], shape))
                    else:  # a sliced tensor gathered whole by one op's root
                        rep._add("gather_to_root", src, (dst,), dag.words(t) * max(
                            hops(c, root[dst], shape) for c in part[src]))
                elif ddom is not None or len(part[dst]) > 1:
                    clusters_, users = bcast.setdefault(t, (set(), []))
                    clusters_.update(part[dst])
                    users.append(dst)
                else:
                    rep._add("small_transfer", src, (dst,), dag.words(t) * hops(root[src], root[dst], shape))
        for t, (dests, users) in bcast.items():
            src = dag.producer(t)
            rep._add("broadcast", src, users, dag.words(t) * tree_links(root[src], dests, shape))
    return rep
