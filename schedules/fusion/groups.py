"""GOGETA §4-§5 glue: fusion groups (pipelined / multicast ops run together) from Alg. 2 + Alg. 3.

A group is a convex set of ops joined by edges that Alg. 3 made pipeline
(pipelineable or pipeline_with_hold with loop orders meeting §5.1's
conditions) and by parallel multicast (consumers of one multicast tensor with
the same order with respect to it).  A merge is refused when it would put a
non-pipelined edge inside a group or make the group graph cyclic (a pipelined
edge whose ends are far apart in the schedule, such as ``X_i -> X_{i+1}`` of
unrolled CG, cannot be fused).  Groups are returned in a topological order:
the execution order GOGETA's mapping uses.

For Block CG each iteration gives ``{S = A·P, Δ = PᵀS}``, ``{Λ}``,
``{X += PΛ, R -= SΛ, Γ = RᵀR}``, ``{Φ}`` and ``{P = R + PΦ}``.

>>> from schedules.fusion.builders import block_cg_dag
>>> [g.ops for g in fusion_groups(block_cg_dag(1, 10_000, 8, 50_000, setup=False))]
[('S1', 'Delta1'), ('Lambda1',), ('X1', 'R1', 'Gamma1'), ('Phi1',), ('P1',)]
"""
from __future__ import annotations

from dataclasses import dataclass, field

from schedules.fusion.analysis import GraphAnalysis, analyze
from schedules.fusion.einsum_dag import EinsumDAG
from schedules.fusion.loop_order import LoopOrders, _role_signature, assign_loop_orders, gathers
from schedules.fusion.patterns import PatternMarking, mark_patterns

__all__ = ["FusionGroup", "FusionPlan", "plan_fusion", "fusion_groups"]


@dataclass(frozen=True)
class FusionGroup:
    """Ops that run together, what streams inside, what touches memory.

    * ``ops``: in program order; ``loop_orders``: op -> loop indices (None: inverse op)
    * ``dominant``: op -> its dominant loop index (None for 'bal'/'small' ops);
      ``dominant_extent``: the extent GOGETA-map splits across clusters (§5.2)
    * ``pipelined``: internal ``(src, dst)`` edges streamed producer -> consumer
    * ``reads`` / ``writes``: tensors read from / written to the memory hierarchy
    * ``shared_reads``: tensors read from memory once for several of its ops
      (multicast to parallel consumers)
    """

    index: int
    ops: tuple[str, ...]
    loop_orders: dict
    dominant: dict
    dominant_extent: int | None
    pipelined: tuple[tuple[str, str], ...]
    reads: tuple[str, ...]
    writes: tuple[str, ...]
    shared_reads: tuple[str, ...]

    @property
    def fused(self) -> bool:
        return len(self.ops) > 1


@dataclass
class FusionPlan:
    """Everything the traffic model and kernel emitters need: analyses, Alg. 2
    marking, Alg. 3 loop orders and the groups."""

    dag: EinsumDAG
    analysis: GraphAnalysis
    marking: PatternMarking
    loop_orders: LoopOrders
    groups: list[FusionGroup] = field(default_factory=list)

    def group_of(self, op: str) -> FusionGroup:
        for g in self.groups:
            if op in g.ops:
                return g
        raise KeyError(op)


class _Groups:
    def __init__(self, dag: EinsumDAG, ga: GraphAnalysis, pipelined: set):
        self.dag, self.ga, self.pipelined = dag, ga, pipelined
        self.idx = dag.op_index
        self.members: dict[str, set[str]] = {op.name: {op.name} for op in dag.ops}
        self.leader = {op.name: op.name for op in dag.ops}

    def find(self, v: str) -> str:
        while self.leader[v] != v:
            self.leader[v] = self.leader[self.leader[v]]
            v = self.leader[v]
        return v

    def _bits(self, nodes) -> int:
        b = 0
        for n in nodes:
            b |= 1 << self.idx[n]
        return b

    def can_merge(self, a: str, b: str) -> bool:
        ga, gb = self.members[self.find(a)], self.members[self.find(b)]
        union = ga | gb
        # every edge between the two parts must be a realized pipeline
        for u in ga | gb:
            for v in self.ga.succ[u]:
                if v in union and ((u in ga) != (v in ga)) and (u, v) not in self.pipelined:
                    return False
        # convexity: no path leaves the union and comes back
        ubits = self._bits(union)
        out = 0
        for u in union:
            out |= self.ga._reach[u]
        out &= ~ubits
        for op in self.dag.ops:
            if out >> self.idx[op.name] & 1 and self.ga._reach[op.name] & ubits:
                return False
        return True

    def merge(self, a: str, b: str) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return True
        if not self.can_merge(a, b):
            return False
        if self.idx[rb] < self.idx[ra]:
            ra, rb = rb, ra
        self.leader[rb] = ra
        self.members[ra] |= self.members.pop(rb)
        return True


def _topo_groups(dag: EinsumDAG, ga: GraphAnalysis, sets: list[set[str]]) -> list[set[str]]:
    idx = dag.op_index
    gid = {n: i for i, s in enumerate(sets) for n in s}
    deps = {i: set() for i in range(len(sets))}
    for e in dag.edges():
        if gid[e.src] != gid[e.dst]:
            deps[gid[e.dst]].add(gid[e.src])
    order, done = [], set()
    while len(order) < len(sets):
        ready = [i for i in deps if i not in done and deps[i] <= done]
        nxt = min(ready, key=lambda i: min(idx[n] for n in sets[i]))
        order.append(nxt)
        done.add(nxt)
    return [sets[i] for i in order]


def plan_fusion(dag: EinsumDAG, loop_orders: LoopOrders | None = None) -> FusionPlan:
    """Run the analyses, Alg. 2, Alg. 3 (unless given) and form the groups."""
    if loop_orders is None:
        ga = analyze(dag)
        marking = mark_patterns(dag, ga)
        loop_orders = assign_loop_orders(dag, marking)
    marking = loop_orders.marking
    ga = marking.analysis
    orders = loop_orders.orders
    pipelined = set(loop_orders.pipelined)
    uf = _Groups(dag, ga, pipelined)
    for op in dag.ops:
        v = op.name
        if ga.parallel_multicast(v):
            consumers = [d for d in ga.succ[v] if marking[(v, d)].multicast
                         and not gathers(dag, dag.op(d), v) and orders.get(d) is not None]
            for a in consumers:
                for b in consumers:
                    if a < b and _role_signature(dag.op(a), v, orders[a]) == _role_signature(dag.op(b), v, orders[b]):
                        uf.merge(a, b)
        for u in ga.pred[v]:
            if (u, v) in pipelined:
                uf.merge(u, v)
    sets = _topo_groups(dag, ga, list(uf.members.values()))
    groups = []
    outputs = set(dag.outputs)
    for gi, members in enumerate(sets):
        ops = tuple(op.name for op in dag.ops if op.name in members)
        reads: dict[str, int] = {}
        for n in ops:
            for t in dag.op(n).read_tensors:
                if t not in members:
                    reads[t] = reads.get(t, 0) + 1
        writes = tuple(n for n in ops if n in outputs or any(c not in members for c in dag.consumers(n)))
        internal = tuple((u, v) for u in ops for v in ga.succ[u] if v in members)
        dom = {n: ga.dominance[n].index for n in ops}
        extents = [dag.op(n).index_sizes(dag)[i] for n, i in dom.items() if i is not None]
        groups.append(FusionGroup(gi, ops, {n: orders.get(n) for n in ops}, dom,
                                  max(extents) if extents else None, internal, tuple(reads),
                                  writes, tuple(t for t, c in reads.items() if c > 1)))
    return FusionPlan(dag, ga, marking, loop_orders, groups)


def fusion_groups(dag: EinsumDAG) -> list[FusionGroup]:
    """The pipelineable / multicast groups of ``dag`` with dominant rank and loop orders."""
    return plan_fusion(dag).groups
