"""GOGETA Alg. 2: mark every edge sequential, pipelineable, pipeline_with_writeback,
pipeline_with_hold or parallel_multicast.

The rules, per edge ``src -> dst`` carrying tensor ``T`` (Alg. 2, §4.1):

* a non-transitive edge from a node that is not contracted-dominant is
  *pipelineable*;
* it is *sequential* when ``src`` is contracted-dominant or is not a tensor
  MAC/add/sub (an inverse), or when ``dst``'s dominant rank does not index ``T``
  (an unshared rank dominates the consumer);
* a transitive edge from a node that is not contracted-dominant is
  *pipeline_with_writeback* when the longest path between its ends meets a
  contracted-dominant node, else *pipeline_with_hold*;
* the non-transitive edges of a node with ``numcast > 1`` are also
  *parallel_multicast* (an attribute of the node: ``EdgeMarking.multicast``).

Two readings of Alg. 2 are made explicit here.  Its sequential tests are final
(the listing lets the later transitive branch overwrite them; for CG it makes
no difference).  And following §4.1's prose ("if all the edges on the
corresponding critical path are pipelineable, otherwise ... writeback"), a hold
also needs every edge on that path to be pipelineable, not only its nodes to be
free of contracted dominance.

>>> from schedules.fusion.builders import block_cg_dag
>>> pm = mark_patterns(block_cg_dag(1, 10_000, 8, 50_000, setup=False))
>>> pm[("S1", "Delta1")].pattern, pm[("S1", "R1")].pattern, pm[("Lambda1", "X1")].pattern
('pipelineable', 'pipeline_with_writeback', 'parallel_multicast')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping

from schedules.fusion.analysis import GraphAnalysis, analyze
from schedules.fusion.einsum_dag import EinsumDAG

__all__ = [
    "SEQUENTIAL",
    "PIPELINEABLE",
    "PIPELINE_WITH_WRITEBACK",
    "PIPELINE_WITH_HOLD",
    "PARALLEL_MULTICAST",
    "PATTERNS",
    "PAPER_FIG7",
    "EdgeMarking",
    "PatternMarking",
    "mark_patterns",
]

SEQUENTIAL = "sequential"
PIPELINEABLE = "pipelineable"
PIPELINE_WITH_WRITEBACK = "pipeline_with_writeback"
PIPELINE_WITH_HOLD = "pipeline_with_hold"
PARALLEL_MULTICAST = "parallel_multicast"
PATTERNS = (SEQUENTIAL, PIPELINEABLE, PIPELINE_WITH_WRITEBACK, PIPELINE_WITH_HOLD, PARALLEL_MULTICAST)

#: GOGETA Fig. 7 (one Block CG iteration), as its text describes the colours:
#: (producer line, consumer line, tensor) -> pattern.  Blue: S 1->2 and R 4->5;
#: brick red (the two transitive edges): S 1->4 and R 4->7; green: Λ to 3 and 4;
#: the rest sequential.  The paper's claim, used to check Alg. 2's output.
PAPER_FIG7 = {
    ("1", "2", "S"): PIPELINEABLE,
    ("1", "4", "S"): PIPELINE_WITH_WRITEBACK,
    ("2", "2", "Delta"): SEQUENTIAL,
    ("2", "3", "Lambda"): PARALLEL_MULTICAST,
    ("2", "4", "Lambda"): PARALLEL_MULTICAST,
    ("4", "5", "R"): PIPELINEABLE,
    ("4", "7", "R"): PIPELINE_WITH_WRITEBACK,
    ("5", "6", "Gamma"): SEQUENTIAL,
    ("6", "7", "Phi"): SEQUENTIAL,
}

#: Ops Alg. 2 calls ``tensor_mac`` ("tensor multiplication or tensor addition/subtraction").
TENSOR_MAC_KINDS = ("mac", "add", "sub")


@dataclass(frozen=True)
class EdgeMarking:
    """Alg. 2's verdict for one edge.

    ``inter_dataflow`` is one of the first four patterns; ``multicast`` says
    the source node multicasts this (non-transitive) edge; ``pattern`` is what
    Fig. 7 colours the edge (green for multicast).  ``reason`` names the rule.
    """

    src: str
    dst: str
    tensor: str
    inter_dataflow: str
    transitive: bool
    multicast: bool
    reason: str
    path: tuple[str, ...] = ()

    @property
    def pattern(self) -> str:
        return PARALLEL_MULTICAST if self.multicast else self.inter_dataflow

    @property
    def pipelined_kind(self) -> bool:
        """Pipelineable or pipeline_with_hold: Alg. 3 must make it pipeline."""
        return self.inter_dataflow in (PIPELINEABLE, PIPELINE_WITH_HOLD)


class PatternMarking(Mapping):
    """Edge ``(src, dst)`` -> :class:`EdgeMarking`, plus the graph analysis used."""

    def __init__(self, analysis: GraphAnalysis, marks: dict[tuple[str, str], EdgeMarking]):
        self.analysis = analysis
        self._marks = marks

    def __getitem__(self, key: tuple[str, str]) -> EdgeMarking:
        return self._marks[key]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self._marks)

    def __len__(self) -> int:
        return len(self._marks)

    @property
    def dag(self) -> EinsumDAG:
        return self.analysis.dag

    def by_pattern(self, pattern: str) -> list[EdgeMarking]:
        """Edges whose Fig. 7 colour is ``pattern``."""
        return [m for m in self._marks.values() if m.pattern == pattern]

    def counts(self) -> dict[str, int]:
        """How many edges carry each pattern (Fig. 7 colour)."""
        out = {p: 0 for p in PATTERNS}
        for m in self._marks.values():
            out[m.pattern] += 1
        return out

    def multicast_nodes(self) -> list[str]:
        return [n for n, c in self.analysis.numcast.items() if c > 1]


def _sequential_reason(dag: EinsumDAG, ga: GraphAnalysis, src: str, dst: str) -> str | None:
    dom = ga.dominance[src]
    if dom.kind == "C":
        return f"source {src} is contracted-dominant (rank {dom.index!r})"
    if dag.op(src).kind not in TENSOR_MAC_KINDS:
        return f"source {src} is an {dag.op(src).kind} op, not a tensor MAC"
    ddom = ga.dominance[dst]
    if ddom.index is not None:
        read_idx = {i for o in dag.op(dst).operands_of(src) for i in o.indices}
        if ddom.index not in read_idx:
            return f"destination {dst}'s dominant rank {ddom.index!r} does not index {src}"
    return None


def mark_patterns(dag: EinsumDAG, analysis: GraphAnalysis | None = None) -> PatternMarking:
    """Run GOGETA Alg. 2 over every edge of ``dag``."""
    ga = analysis or analyze(dag)
    marks: dict[tuple[str, str], EdgeMarking] = {}
    # Non-transitive edges first: a transitive edge's verdict reads the edges of its path.
    for transitive_pass in (False, True):
        for op in dag.ops:
            src = op.name
            for dst in ga.succ[src]:
                transitive = ga.is_transitive(src, dst)
                if transitive != transitive_pass:
                    continue
                multicast = ga.parallel_multicast(src) and not transitive
                seq = _sequential_reason(dag, ga, src, dst)
                path: tuple[str, ...] = ()
                if seq is not None:
                    kind, reason = SEQUENTIAL, seq
                elif not transitive:
                    kind, reason = PIPELINEABLE, f"{src} is not contracted-dominant and the edge is not transitive"
                else:
                    path = tuple(ga.longest_path(src, dst))
                    c_nodes = [p for p in path if ga.dominance[p].kind == "C"]
                    blocked = [(a, b) for a, b in zip(path, path[1:])
                               if marks[(a, b)].inter_dataflow != PIPELINEABLE]
                    if c_nodes:
                        kind, reason = PIPELINE_WITH_WRITEBACK, f"path {'->'.join(path)} meets contracted-dominant {c_nodes[0]}"
                    elif blocked:
                        a, b = blocked[0]
                        kind, reason = PIPELINE_WITH_WRITEBACK, f"path edge {a}->{b} is {marks[(a, b)].inter_dataflow}"
                    else:
                        kind, reason = PIPELINE_WITH_HOLD, f"path {'->'.join(path)} pipelines end to end"
                marks[(src, dst)] = EdgeMarking(src, dst, src, kind, transitive, multicast, reason, path)
    ordered = dict(sorted(marks.items(), key=lambda kv: (dag.op_index[kv[0][0]], dag.op_index[kv[0][1]])))
    return PatternMarking(ga, ordered)
