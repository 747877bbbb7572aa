"""GOGETA §4.2: node and edge attributes of the tensor dependency graph.

* node dominance: ``'U'`` (an uncontracted rank dominates), ``'C'`` (a
  contracted rank dominates), ``'bal'`` (no dominant rank, every rank >= 50),
  ``'small'`` (no dominant rank, some rank < 50).  A rank dominates when it is
  > 1000 *and* more skewed than 100:1 against every other rank of the op.  A
  rank compressed by a sparse operand counts as its non-zeros per row.
* the critical (longest) path, and ``longest_path(u, v)`` between two nodes;
* transitive edges; ``numcast`` and ``parallel_multicast``.

Transitivity: the paper calls an edge transitive when it is not on the
critical path but both its nodes are.  We use the graph-theoretic form, "some
longer path joins its endpoints"; for edges between critical-path nodes the two
agree, and ours also covers edges that end off the critical path in an unrolled
DAG (e.g. ``P_{i-1} -> X_i``), which the paper's one-iteration Fig. 7 never shows.

>>> from schedules.fusion.builders import block_cg_dag
>>> ga = analyze(block_cg_dag(1, 10_000, 8, 50_000, setup=False))
>>> ga.dominance["S1"].kind, ga.dominance["Delta1"].kind, ga.dominance["Lambda1"].kind
('U', 'C', 'small')
>>> sorted(ga.transitive)
[('R1', 'P1'), ('S1', 'R1')]
"""
from __future__ import annotations

from dataclasses import dataclass, field

from schedules.fusion.einsum_dag import EinsumDAG, Op

__all__ = [
    "DOMINANT_MIN_SIZE",
    "DOMINANT_SKEW",
    "BALANCED_MIN_SIZE",
    "Dominance",
    "node_dominance",
    "GraphAnalysis",
    "analyze",
]

#: GOGETA §4.2: "If a rank is greater than 1000 AND the ratio of the rank to
#: the other ranks is more skewed than 100:1, the rank is considered dominant."
DOMINANT_MIN_SIZE = 1000
DOMINANT_SKEW = 100
#: 'bal': "all ranks are not too small ... minimum value of the rank is 50".
BALANCED_MIN_SIZE = 50


@dataclass(frozen=True)
class Dominance:
    """``kind`` in {'U', 'C', 'bal', 'small'}; ``index`` is the dominant loop index (U/C)."""

    kind: str
    index: str | None = None


def node_dominance(dag: EinsumDAG, op: Op | str) -> Dominance:
    """Dominance of one op (GOGETA §4.2).

    >>> from schedules.fusion.builders import gcn_layer_dag
    >>> dag = gcn_layer_dag(3786, 29, 2, 14456)      # Table 2 'protein'
    >>> node_dominance(dag, "Z"), node_dominance(dag, "X1")
    (Dominance(kind='U', index='m'), Dominance(kind='U', index='m'))
    """
    op = dag.op(op) if isinstance(op, str) else op
    sizes = dag.effective_sizes(op)
    for idx, size in sizes.items():
        others = [s for i, s in sizes.items() if i != idx]
        if size > DOMINANT_MIN_SIZE and all(size > DOMINANT_SKEW * s for s in others):
            return Dominance("U" if idx in op.output.indices else "C", idx)
    return Dominance("bal" if min(sizes.values()) >= BALANCED_MIN_SIZE else "small")


@dataclass
class GraphAnalysis:
    """Everything Alg. 2 and Alg. 3 read from the graph."""

    dag: EinsumDAG
    dominance: dict[str, Dominance]
    succ: dict[str, list[str]]
    pred: dict[str, list[str]]
    critical_path: list[str]
    transitive: set[tuple[str, str]]
    numcast: dict[str, int]
    _reach: dict[str, int] = field(repr=False, default_factory=dict)

    @property
    def on_critical_path(self) -> set[str]:
        return set(self.critical_path)

    @property
    def critical_edges(self) -> set[tuple[str, str]]:
        cp = self.critical_path
        return set(zip(cp, cp[1:]))

    def parallel_multicast(self, node: str) -> bool:
        """GOGETA §4.2: the node multicasts its output (numcast > 1)."""
        return self.numcast[node] > 1

    def is_transitive(self, src: str, dst: str) -> bool:
        return (src, dst) in self.transitive

    def reaches(self, src: str, dst: str) -> bool:
        """Whether a path (of >= 1 edge) leads from ``src`` to ``dst``."""
        return bool(self._reach[src] >> self.dag.op_index[dst] & 1)

    def longest_path(self, src: str, dst: str) -> list[str]:
        """GOGETA's ``longestpath(edge)``: the longest path from ``src`` to ``dst``
        (nodes, both ends included); ties go to the path through earlier ops."""
        idx = self.dag.op_index
        if src == dst:
            return [src]
        if not self.reaches(src, dst):
            return []
        best: dict[str, tuple[int, str | None]] = {src: (0, None)}
        for op in self.dag.ops[idx[src] + 1: idx[dst] + 1]:
            v = op.name
            if v != dst and not self.reaches(v, dst):
                continue
            cands = [(best[u][0] + 1, -idx[u], u) for u in self.pred[v] if u in best]
            if cands:
                length, _, u = max(cands)
                best[v] = (length, u)
        path, v = [dst], dst
        while v != src:
            v = best[v][1]
            path.append(v)
        return path[::-1]


def _reachability(dag: EinsumDAG, succ: dict[str, list[str]]) -> dict[str, int]:
    idx = dag.op_index
    reach: dict[str, int] = {}
    for op in reversed(dag.ops):
        bits = 0
        for v in succ[op.name]:
            bits |= reach[v] | (1 << idx[v])
        reach[op.name] = bits
    return reach


def _critical_path(dag: EinsumDAG, pred: dict[str, list[str]]) -> list[str]:
    # Longest path by node count; ties: more total work, then earlier ops.
    idx = dag.op_index
    best: dict[str, tuple[int, int, str | None]] = {}
    for op in dag.ops:
        v = op.name
        work = dag.macs(op)
        cands = [(best[u][0] + 1, best[u][1] + work, -idx[u], u) for u in pred[v]]
        if cands:
            n, w, _, u = max(cands)
            best[v] = (n, w, u)
        else:
            best[v] = (1, work, None)
    if not best:
        return []
    end = max(best, key=lambda v: (best[v][0], best[v][1], -idx[v]))
    path = [end]
    while best[path[-1]][2] is not None:
        path.append(best[path[-1]][2])
    return path[::-1]


def analyze(dag: EinsumDAG) -> GraphAnalysis:
    """Dominance, critical path, transitive edges and numcast of every node."""
    dag.validate()
    succ: dict[str, list[str]] = {op.name: [] for op in dag.ops}
    pred: dict[str, list[str]] = {op.name: [] for op in dag.ops}
    for e in dag.edges():
        succ[e.src].append(e.dst)
        pred[e.dst].append(e.src)
    reach = _reachability(dag, succ)
    idx = dag.op_index
    transitive = set()
    for u, vs in succ.items():
        for v in vs:
            # another (hence longer) path u -> w ~> v exists
            if any(w != v and reach[w] >> idx[v] & 1 for w in vs):
                transitive.add((u, v))
    numcast = {u: sum((u, v) not in transitive for v in vs) for u, vs in succ.items()}
    dominance = {op.name: node_dominance(dag, op) for op in dag.ops}
    return GraphAnalysis(dag, dominance, succ, pred, _critical_path(dag, pred), transitive, numcast, reach)
