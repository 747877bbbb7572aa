"""GOGETA Alg. 3: loop orders that satisfy the pipelining conditions, with the
swizzle penalty and a retry under a rising ε.

Pipelining conditions for an edge ``src -> dst`` carrying ``T`` (§5.1):

1. the edge is pipelineable (or pipeline_with_hold) after Alg. 2;
2. ``src``'s outermost loop is an uncontracted rank;
3. ``dst``'s outermost loop is a rank of ``T`` - the same rank (Alg. 3:
   ``dest.loop_order[0] = src.loop_order[0]``);
4. ``T`` is not swizzled: its ranks are read in the order they were written.

Parallel-multicast consumers get the same loop order with respect to the
multicast tensor.  A swizzled pipeline_with_writeback or sequential edge adds
one to the swizzle penalty, which must stay <= ε.  A sparse operand is walked
in its format's order (CSR: row before column), a hard constraint.  A consumer
that *gathers* the multicast tensor through a sparse operand's compressed rank
(the SpMM ``S = A·R0`` in Block CG's set-up) reads it in data-dependent order,
so it is left out of the same-order rule.

"Retry" is implemented as a depth-first search over per-node orders in
topological order (each node's candidates in a preference order: dominant rank
outermost, then contracted ranks, then the rest - Fig. 8's MKN/"P-stationary"
shape), with ε rising from 0.  If no assignment keeps every pipelining
condition, the search allows 1, 2, ... broken conditions (those edges are then
simply not pipelined), so it always returns.

>>> from schedules.fusion.builders import block_cg_dag
>>> lo = assign_loop_orders(block_cg_dag(1, 10_000, 8, 50_000, setup=False))
>>> lo.epsilon, lo.swizzle_penalty, lo.broken
(0, 0, [])
>>> lo.notation("X1"), lo.notation("R1")
('MKN', 'MKN')
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from schedules.fusion.analysis import DOMINANT_MIN_SIZE, GraphAnalysis
from schedules.fusion.einsum_dag import EinsumDAG, Edge, Op
from schedules.fusion.patterns import (
    PIPELINE_WITH_WRITEBACK,
    SEQUENTIAL,
    PatternMarking,
    mark_patterns,
)

__all__ = [
    "LoopOrders",
    "assign_loop_orders",
    "preferred_orders",
    "write_order",
    "read_orders",
    "is_swizzled",
    "pipeline_failures",
    "format_ok",
    "gathers",
    "gemm_notation",
    "fig8_notation",
]

LOOPED_KINDS = ("mac", "add", "sub")  # Alg. 3: "If operation is not a tensor mul/add, skip"


def _has_order(op: Op) -> bool:
    return op.kind in LOOPED_KINDS


def preferred_orders(dag: EinsumDAG, op: Op, dominant: str | None) -> list[tuple[str, ...]]:
    """Every permutation of ``op``'s loop indices, most preferred first:
    the dominant rank (else the first output rank) outermost, then the
    contracted ranks, then the remaining output ranks."""
    out = list(op.output.indices)
    first = dominant if dominant is not None else (out[0] if out else op.indices[0])
    rest_c = [i for i in op.contracted if i != first]
    rest_u = [i for i in out if i != first]
    pref = (first, *rest_c, *rest_u)
    return list(itertools.permutations(pref))


def format_ok(dag: EinsumDAG, op: Op, order: tuple[str, ...]) -> bool:
    """A sparse operand must be walked uncompressed rank first (CSR: row, then column)."""
    pos = {i: n for n, i in enumerate(order)}
    for o in op.reads:
        t = dag.tensors[o.tensor]
        if t.is_sparse:
            c = t.compressed_dim
            if pos[o.indices[1 - c]] > pos[o.indices[c]]:
                return False
    return True


def write_order(dag: EinsumDAG, op: Op, order: tuple[str, ...] | None) -> tuple[int, ...]:
    """The output's dimensions, outermost-written first (canonical if no order)."""
    ndim = len(op.output.indices)
    if order is None:
        return tuple(range(ndim))
    pos = {i: n for n, i in enumerate(order)}
    return tuple(sorted(range(ndim), key=lambda d: pos[op.output.indices[d]]))


def read_orders(dag: EinsumDAG, op: Op, tensor: str, order: tuple[str, ...] | None) -> list[tuple[int, ...]]:
    """For each slot through which ``op`` reads ``tensor``: its dimensions, outermost first."""
    out = []
    for o in op.operands_of(tensor):
        if order is None:
            out.append(tuple(range(len(o.indices))))
            continue
        pos = {i: n for n, i in enumerate(order)}
        out.append(tuple(sorted(range(len(o.indices)), key=lambda d: pos[o.indices[d]])))
    return out


def is_swizzled(dag: EinsumDAG, edge: Edge, orders: dict) -> bool:
    """§4.2 ``edge.tensor.swizzled``: read in a rank order other than the written one."""
    src, dst = dag.op(edge.src), dag.op(edge.dst)
    if orders.get(dst.name) is None:  # read whole by a small op (inverse): no order
        return False
    w = write_order(dag, src, orders.get(src.name))
    return any(r != w for r in read_orders(dag, dst, edge.tensor, orders.get(dst.name)))


def pipeline_failures(dag: EinsumDAG, edge: Edge, orders: dict) -> list[str]:
    """Which of §5.1's loop-order conditions for pipelining ``edge`` fail."""
    src, dst = dag.op(edge.src), dag.op(edge.dst)
    so, do = orders.get(src.name), orders.get(dst.name)
    if so is None or do is None:
        return ["an end of the edge is not a tensor MAC/add (no loop order)"]
    fails = []
    if so[0] not in src.output.indices:
        fails.append(f"{src.name}'s outermost loop {so[0]!r} is contracted")
    src_dim = src.output.indices.index(so[0]) if so[0] in src.output.indices else None
    dst_dims = {o.indices.index(do[0]) for o in dst.operands_of(edge.tensor) if do[0] in o.indices}
    if not dst_dims:
        fails.append(f"{dst.name}'s outermost loop {do[0]!r} does not index {edge.tensor}")
    elif src_dim is not None and src_dim not in dst_dims:
        fails.append(f"{dst.name} starts on another rank of {edge.tensor} than {src.name}")
    if is_swizzled(dag, edge, orders):
        fails.append(f"{edge.tensor} is swizzled between {src.name} and {dst.name}")
    return fails


def gathers(dag: EinsumDAG, op: Op, tensor: str) -> bool:
    """Whether ``op`` reads ``tensor`` through a sparse operand's compressed rank
    (an SpMM's dense operand: its rows are fetched in data-dependent order)."""
    compressed = set()
    for o in op.inputs:
        t = dag.tensors[o.tensor]
        if t.is_sparse:
            compressed.add(o.indices[t.compressed_dim])
    return any(compressed & set(o.indices) for o in op.operands_of(tensor))


def _role_signature(op: Op, tensor: str, order: tuple[str, ...]) -> tuple:
    slot = op.operands_of(tensor)[0]
    sig = []
    for i in order:
        if i in slot.indices:
            sig.append(("T", slot.indices.index(i)))
        else:
            sig.append(("out",) if i in op.output.indices else ("red",))
    return tuple(sig)


def gemm_notation(dag: EinsumDAG, op: Op | str, order: tuple[str, ...] | None) -> str:
    """A loop order in GEMM letters (``Z_mn = A_mk B_kn``): M in the first operand
    and the output, N in the second and the output, K contracted (B: batch).

    >>> from schedules.fusion.builders import gcn_layer_dag
    >>> dag = gcn_layer_dag(100, 16, 4, 500)
    >>> gemm_notation(dag, "X1", ("m", "j", "o"))
    'MKN'
    """
    op = dag.op(op) if isinstance(op, str) else op
    if order is None:
        return "-"
    first = set(op.inputs[0].indices)
    out = set(op.output.indices)
    letters = []
    for i in order:
        if i not in out:
            letters.append("K")
        elif i in first and len(op.inputs) > 1 and i in op.inputs[1].indices:
            letters.append("B")
        elif i in first:
            letters.append("M")
        else:
            letters.append("N")
    return "".join(letters)


def fig8_notation(dag: EinsumDAG, op: Op | str, order: tuple[str, ...] | None) -> str:
    """A loop order in Fig. 8's letters: M large rank, N (N') small ranks, K
    contractions of a large rank, J contractions of a small rank."""
    op = dag.op(op) if isinstance(op, str) else op
    if order is None:
        return "-"
    sizes = op.index_sizes(dag)
    out = []
    for i in order:
        large = sizes[i] > DOMINANT_MIN_SIZE
        if i in op.output.indices:
            out.append(("M" if large else "N") + ("'" if i.endswith("'") else ""))
        else:
            out.append("K" if large else "J")
    return "".join(out)


@dataclass
class LoopOrders:
    """Alg. 3's result: an order per op (None for inverse ops) and its bookkeeping."""

    dag: EinsumDAG
    marking: PatternMarking
    orders: dict[str, tuple[str, ...] | None]
    epsilon: int
    swizzle_penalty: int
    swizzled: list[tuple[str, str]] = field(default_factory=list)
    pipelined: list[tuple[str, str]] = field(default_factory=list)
    broken: list[tuple[str, str, str]] = field(default_factory=list)
    attempts: int = 1
    fallback: bool = False  # the search gave up; orders are greedy

    def __getitem__(self, op: str) -> tuple[str, ...] | None:
        return self.orders[op]

    def notation(self, op: str) -> str:
        """GEMM letters (MKN, ...) of an op's order."""
        return gemm_notation(self.dag, op, self.orders[op])

    def fig8(self, op: str) -> str:
        """Fig. 8 letters (M, N, K, J) of an op's order."""
        return fig8_notation(self.dag, op, self.orders[op])

    def pipelines(self, src: str, dst: str) -> bool:
        """Whether Alg. 3 made edge ``src -> dst`` pipeline."""
        return (src, dst) in set(self.pipelined)


class _Search:
    def __init__(self, dag: EinsumDAG, marking: PatternMarking, max_visits: int):
        self.dag, self.marking, self.max_visits = dag, marking, max_visits
        ga: GraphAnalysis = marking.analysis
        self.nodes = [op for op in dag.ops if _has_order(op)]
        self.cands = {op.name: [c for c in preferred_orders(dag, op, ga.dominance[op.name].index)
                                if format_ok(dag, op, c)] for op in self.nodes}
        self.in_edges = {op.name: dag.in_edges(op.name) for op in self.nodes}
        # multicast: consumer -> [(source, tensor)] for non-transitive edges of multicasting nodes
        self.mcast: dict[str, list[str]] = {}
        for (s, d), m in marking.items():
            if m.multicast and not gathers(dag, dag.op(d), s):
                self.mcast.setdefault(d, []).append(s)
        self.base = {op.name: None for op in dag.ops if not _has_order(op)}

    def cost(self, op: Op, order, orders) -> tuple[int, int]:
        """(broken conditions, swizzle penalty) that choosing ``order`` adds."""
        trial = dict(orders)
        trial[op.name] = order
        broken = swz = 0
        for e in self.in_edges[op.name]:
            m = self.marking[(e.src, e.dst)]
            if m.pipelined_kind:
                broken += bool(pipeline_failures(self.dag, e, trial))
            elif m.inter_dataflow in (PIPELINE_WITH_WRITEBACK, SEQUENTIAL):
                swz += is_swizzled(self.dag, e, trial)
        for s in self.mcast.get(op.name, []):
            mine = _role_signature(op, s, order)
            for d in self.marking.analysis.succ[s]:
                if d != op.name and s in self.mcast.get(d, ()) and trial.get(d) is not None:
                    if _role_signature(self.dag.op(d), s, trial[d]) != mine:
                        broken += 1
        return broken, swz

    def run(self, max_broken: int, eps: int) -> dict | None:
        orders = dict(self.base)
        stack: list[tuple[list, int, int]] = []  # (candidates left, broken so far, penalty so far)
        visits, depth, broken, pen = 0, 0, 0, 0
        pending = None
        while True:
            if depth == len(self.nodes):
                return orders
            op = self.nodes[depth]
            if pending is None:
                scored = []
                for rank, c in enumerate(self.cands[op.name]):
                    b, s = self.cost(op, c, orders)
                    if broken + b <= max_broken and pen + s <= eps:
                        scored.append((b, s, rank, c))
                scored.sort()
                pending = scored
            visits += 1
            if visits > self.max_visits:
                return None
            if pending:
                b, s, _, c = pending.pop(0)
                stack.append((pending, broken, pen))
                orders[op.name] = c
                broken, pen = broken + b, pen + s
                depth += 1
                pending = None
            else:
                if not stack:
                    return None
                depth -= 1
                orders.pop(self.nodes[depth].name, None)
                pending, broken, pen = stack.pop()


def _summarize(dag: EinsumDAG, marking: PatternMarking, orders: dict, eps: int, attempts: int) -> LoopOrders:
    swizzled, pipelined, broken = [], [], []
    for (s, d), m in marking.items():
        e = Edge(s, d, s)
        if m.pipelined_kind:
            fails = pipeline_failures(dag, e, orders)
            (broken.append((s, d, "; ".join(fails))) if fails else pipelined.append((s, d)))
        elif m.inter_dataflow in (PIPELINE_WITH_WRITEBACK, SEQUENTIAL) and is_swizzled(dag, e, orders):
            swizzled.append((s, d))
    return LoopOrders(dag, marking, orders, eps, len(swizzled), swizzled, pipelined, broken, attempts)


def assign_loop_orders(dag: EinsumDAG, marking: PatternMarking | None = None, *,
                       max_epsilon: int | None = None, max_visits: int = 20_000) -> LoopOrders:
    """GOGETA Alg. 3 over ``dag`` (marking from Alg. 2, computed if not given)."""
    marking = marking or mark_patterns(dag)
    search = _Search(dag, marking, max_visits)
    n_edges = len(marking)
    max_eps = n_edges if max_epsilon is None else int(max_epsilon)
    n_pipe = sum(m.pipelined_kind for m in marking.values()) + sum(m.multicast for m in marking.values())
    attempts = 0
    for max_broken in range(n_pipe + 1):
        for eps in range(max_eps + 1):  # "threshold could start from zero and gradually increase"
            attempts += 1
            found = search.run(max_broken, eps)
            if found is not None:
                return _summarize(dag, marking, found, eps, attempts)
    # Search budget exhausted: greedy, most preferred order per node.
    orders = dict(search.base)
    for op in search.nodes:
        orders[op.name] = min(search.cands[op.name] or preferred_orders(dag, op, None),
                              key=lambda c: search.cost(op, c, orders))
    res = _summarize(dag, marking, orders, 0, attempts)
    res.epsilon = res.swizzle_penalty
    res.fallback = True
    return res
