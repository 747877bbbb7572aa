"""GOGETA §6.1 (Table 3, Table 4, Figs. 10-12): analytical DRAM-access model for
SEQ-Flex, SEQ-Overflow, GOGETA-df, GOGETA-map and Ideal.

The model needs only shapes and nnz.  It walks a schedule - one op per step
for the SEQ baselines, one fusion group per step for GOGETA - through an SRAM
model (:mod:`.sram`) and counts the words read from and written to DRAM:

* **SEQ-Flex**: op by op, every operand starts and ends in DRAM (the SRAM only
  serves reuse inside an op).
* **SEQ-Overflow**: op by op; outputs (and inputs with a later use) are kept
  in SRAM in FIFO order and only what overflows goes to DRAM; no replacement.
  An op that reads a tensor transposed (``Δ = PᵀS``, ``Γ = RᵀR``) cannot use
  the on-chip head in its written layout for the transpose: it stages a
  transposed copy of that head in SRAM, whose overflow goes to DRAM and back
  (§6.2.1: GOGETA wins at fitting sizes "due to the ability to use the same
  tensor for transpose").
* **GOGETA-df**: fusion groups from Alg. 2 + Alg. 3 (pipelined tensors never
  touch memory, a tensor shared by the ops of a group is read once), FIFO
  writes with reuse-distance/frequency eviction (§5.3); the ops of a group run
  on separate cluster blocks (Fig. 8 left), so each op's output lands only in
  its own clusters' SRAM slices.
* **GOGETA-map**: the same plus §5.2's tiling: the dominant rank is split over
  all clusters, so every tensor is spread over every slice and the whole SRAM
  serves the reuse-distance policy.
* **Ideal**: infinite SRAM and perfect reuse: every graph input read once,
  every graph output written once.

Fig. 10 models a window of ``iters`` iterations of Alg. 1's ``while not
converged`` loop, so the loop's state after the window (X, R, P, Γ: what the
next iteration reads) is live-out and ends in DRAM, under every configuration
(:func:`cg_traffic_dag`, ``live_out="loop_state"``).  ``live_out="solution"``
keeps X alone, as if the window ended at convergence.

Every modelling assumption is in :data:`ASSUMPTIONS` (the report prints it).

>>> from schedules.fusion.builders import gcn_layer_dag
>>> dag = gcn_layer_dag(3786, 29, 2, 14456)                     # Table 2 'protein'
>>> arch = TrafficArch.table4(sram_mb=1)
>>> [round(dram_traffic(dag, c, arch).megabytes, 3) for c in ("SEQ-Flex", "SEQ-Overflow", "GOGETA-map", "Ideal")]
[1.41, 0.573, 0.573, 0.573]
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from schedules.fusion.analysis import node_dominance
from schedules.fusion.builders import workload_dag
from schedules.fusion.einsum_dag import EinsumDAG, Op
from schedules.fusion.groups import FusionPlan, plan_fusion
from schedules.fusion.loop_order import format_ok, preferred_orders, read_orders, write_order
from schedules.fusion.sram import SramModel
from schedules.fusion.tiling import group_partitions, noc_traversals
from tvm_ext.errors import ConfigError, InputError
from tvm_ext.workloads import GOGETA_TABLE2, GOGETA_TABLE4, GogetaArch

__all__ = [
    "CONFIGS",
    "MB",
    "KB",
    "ASSUMPTIONS",
    "PAPER_GEOMEAN",
    "PAPER_RANGE",
    "PAPER_IDEAL_WORKLOADS",
    "PAPER_IDEAL_SRAM_MB",
    "ordering_holds",
    "CG_WORKLOADS",
    "GCN_WORKLOADS",
    "TrafficArch",
    "Step",
    "TrafficResult",
    "LIVE_OUT",
    "CG_LOOP_STATE",
    "cg_traffic_dag",
    "transposed_operands",
    "seq_steps",
    "gogeta_steps",
    "seq_loop_orders",
    "simulate_steps",
    "op_extra_words",
    "ideal_words",
    "dram_traffic",
    "traffic_table",
    "fig10_sweep",
    "fig11_gcn",
    "fig12_noc",
    "geomean_reduction",
    "fit_ratio_floor",
]

CONFIGS = ("SEQ-Flex", "SEQ-Overflow", "GOGETA-df", "GOGETA-map", "Ideal")
MB = 1 << 20
KB = 1 << 10
#: GOGETA §6.2.1: "geomean of 6.7x reduction in DRAM traffic over the Seq-Flex
#: baseline, ranging from 1.18x to 23.7x" (the paper's claim, for comparison only).
PAPER_GEOMEAN = 6.7
PAPER_RANGE = (1.18, 23.7)
#: §6.2.1: "aft02 and nasa4704 at 4/16 MB SRAM, Gogeta hits the ideal" (the points the paper names).
PAPER_IDEAL_WORKLOADS = ("aft02", "nasa4704")
PAPER_IDEAL_SRAM_MB = (4, 16)
CG_WORKLOADS = tuple(n for n, w in GOGETA_TABLE2.items() if w.kind == "cg")
GCN_WORKLOADS = tuple(n for n, w in GOGETA_TABLE2.items() if w.kind == "gcn")
#: Tensor families Alg. 1's loop carries from one iteration to the next.
CG_LOOP_STATE = ("X", "R", "P", "Gamma")
#: What a Fig. 10 window of CG iterations leaves in DRAM: the loop state, or the solution X only.
LIVE_OUT = ("loop_state", "solution")

ASSUMPTIONS = [
    "Words are 4 bytes; 1 MB = 2^20 bytes (SRAM sizes and reported traffic alike).",
    "A CSR matrix costs 2*nnz + M words (values, column indices, row pointers), as GOGETA's Eq. 10 counts it.",
    "Block CG is Alg. 1 exactly: set-up (R0 = B - A*X0, Gamma0 = R0'R0, P0 = R0) plus `iters` unrolled "
    "iterations; graph inputs A, B, X0; graph output X_iters.  The convergence test reads diag(Gamma) only "
    "and is not modelled.",
    "Results nobody reads and that are not graph outputs (P and Phi of the last iteration) are dropped by "
    "every configuration, as a compiler would.",
    "Best mapping per op (all configurations): an op reads each operand and writes its result once when "
    "its smallest tensor fits on chip (register files + SRAM); otherwise it pays a square output-stationary "
    "tiling's re-reads.  For CG and GCN the small tensors (N x N, W) always fit, so no op pays extra.",
    "An SpMM reads its dense operand once (Eq. 10's K*N): the gather through the column indices is assumed "
    "to hit rows already on chip.  The model sees only shapes and nnz, so matrix bandwidth cannot refine this.",
    "Register files (16 clusters x 1024 PEs x 0.5 KB = 8 MB) hold only small stationary operands and the "
    "tiles in flight between pipelined ops; they never hold a large tensor between groups.  A "
    "pipeline_with_hold tensor inside a group is assumed to fit there for the stages it waits (no CG or GCN "
    "edge is a hold; Table 1's HPC-like chain has three).",
    "SRAM is tracked per tensor as a resident head (the part written first) plus a DRAM tail.  Writes are "
    "FIFO in both SEQ-Overflow and GOGETA; data read from DRAM is kept on chip (clean) when it is reused.",
    "SEQ-Overflow never replaces live data (Fig. 9 left); GOGETA evicts the tail of the tensor whose next "
    "use is farthest (ties: fewest remaining uses) when a sooner-reused tensor needs room (Fig. 9 right).",
    "A tensor read for the last time in an op or group that streams it in its write order frees its space "
    "before that step's results are written (in-place update, e.g. R -= S*Lambda).",
    "SEQ baselines use each op's own best loop order (dominant rank outermost); GOGETA uses Alg. 3's. "
    "SEQ-Flex reads a transposed operand (P in Delta = P'S, R in Gamma = R'R) straight from DRAM in the order "
    "it needs, at no extra words.  SEQ-Overflow cannot read the transpose from the FIFO head, which holds the "
    "tensor in its written layout (§4.2: reading the transpose in the tensor's own order is a swizzle): it "
    "stages a transposed copy of the resident head in free SRAM for that op; what does not fit is written to "
    "DRAM and read back.  GOGETA reads the same resident tensor for both (§6.2.1), so it needs no copy.",
    "GOGETA-df and GOGETA-map share the schedule and policy.  They differ only inside fused groups: df "
    "gives each op its own block of clusters (proportional to MACs) and writes its output into those "
    "clusters' SRAM slices first; map spreads every tensor over all slices.  What a df op's slices "
    "cannot hold takes free space in the other slices, then evicts by reuse distance there too (§5.3: "
    "R's later part replaces X's tail although ops 3 and 4 ran on separate halves), so the SRAM is one "
    "pool for DRAM traffic and df's price is NoC traffic (Fig. 12), not DRAM traffic.",
    "NoC (Fig. 12): 4x4 mesh, XY routing, words x links; broadcasts and reductions use the XY tree (15 "
    "links for 16 clusters).  Tensors stay in their producer's clusters; graph inputs stream from DRAM to "
    "their users; an SpMM's gather of dense rows is not counted (it needs the matrix structure).",
    "SEQ-Overflow keeps reused inputs (A) in SRAM too, which is what lets it approach Ideal when everything "
    "fits, as the paper's Fig. 10 shows for aft02 and nasa4704.",
    "Fig. 10's 10 iterations are a window of a while loop, so X, R, P and Gamma of the last iteration are "
    "graph outputs (the next iteration reads them), and Ideal is A + B + X0 read once plus X, R, P, Gamma "
    "written once (live_out='solution' keeps X alone; bench.gogeta_traffic and the fusion report show it too).",
    "Where every tensor fits, GOGETA costs Ideal, and no op-by-op schedule can cost less than "
    "fit_ratio_floor() times Ideal (S, X, R, P each written and read once per iteration, A once per "
    "iteration).  Barth5 at N=8 and N=16 fits 4/16 MB in this model, where its ratio is above the paper's "
    "maximum; the paper names only aft02 and nasa4704 as reaching Ideal.",
]


@dataclass(frozen=True)
class TrafficArch:
    """Table 4's architecture at one SRAM size.

    >>> TrafficArch.table4(4).sram_words, TrafficArch.table4(4).rf_words
    (1048576.0, 2097152)
    """

    sram_bytes: float
    bytes_per_word: int = 4
    clusters: int = 16
    pes_per_cluster: int = 1024
    rf_bytes_per_pe: int = 512

    def __post_init__(self):
        if not self.sram_bytes >= 0:
            raise ConfigError(f"SRAM size must be >= 0 bytes, got {self.sram_bytes!r}")
        for name in ("bytes_per_word", "clusters", "pes_per_cluster"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.rf_bytes_per_pe < 0:
            raise ConfigError(f"rf_bytes_per_pe must be >= 0, got {self.rf_bytes_per_pe}")

    @classmethod
    def table4(cls, sram_mb: float, arch: GogetaArch = GOGETA_TABLE4) -> "TrafficArch":
        if not isinstance(sram_mb, (int, float)) or isinstance(sram_mb, bool) or not 0 <= sram_mb < math.inf:
            raise ConfigError(f"SRAM size must be a finite number of MB >= 0, got {sram_mb!r}")
        return cls(sram_mb * MB, arch.bytes_per_word, arch.clusters, arch.pes_per_cluster, arch.rf_bytes_per_pe)

    @property
    def sram_words(self) -> float:
        return self.sram_bytes / self.bytes_per_word if math.isfinite(self.sram_bytes) else math.inf

    @property
    def rf_words(self) -> int:
        return self.clusters * self.pes_per_cluster * self.rf_bytes_per_pe // self.bytes_per_word


@dataclass(frozen=True)
class Step:
    """What one schedule step (an op or a fusion group) reads from and writes to memory."""

    ops: tuple[str, ...]
    reads: tuple[str, ...]
    writes: tuple[str, ...]


@dataclass(frozen=True)
class TrafficResult:
    """DRAM words of one configuration (reads, writes, intra-op re-reads)."""

    config: str
    read_words: int
    write_words: int
    intra_op_words: int
    bytes_per_word: int = 4

    @property
    def words(self) -> int:
        return self.read_words + self.write_words + self.intra_op_words

    @property
    def bytes(self) -> int:
        return self.words * self.bytes_per_word

    @property
    def megabytes(self) -> float:
        return self.bytes / MB


def _live_writes(dag: EinsumDAG, ops: Iterable[str], members: set[str]) -> tuple[str, ...]:
    outs = set(dag.outputs)
    return tuple(n for n in ops if n in outs or any(c not in members for c in dag.consumers(n)))


@dataclass(frozen=True)
class TransposedCopy:
    """SEQ-Overflow's on-chip transposed copy of ``tensor`` (an SRAM resident of its own)."""

    tensor: str


def transposed_operands(dag: EinsumDAG, op: Op | str) -> tuple[str, ...]:
    """Dense tensors ``op`` reads as a transpose in its matrix product.

    A left operand is transposed when its first index is contracted
    (``Δ[n',n] = Σ_k P[k,n']·S[k,n]`` is ``PᵀS``); a right operand when its
    last index is.

    >>> from schedules.fusion.builders import block_cg_dag
    >>> dag = block_cg_dag(1, 1000, 4, 5000)
    >>> [(op.name, transposed_operands(dag, op)) for op in dag.ops if transposed_operands(dag, op)]
    [('Gamma0', ('R0',)), ('Delta1', ('R0',)), ('Gamma1', ('R1',))]
    """
    op = dag.op(op) if isinstance(op, str) else op
    if op.kind != "mac" or len(op.inputs) != 2:
        return ()
    out = set(op.output.indices)
    left, right = op.inputs
    found = []
    if left.indices[0] not in out and not dag.tensors[left.tensor].is_sparse:
        found.append(left.tensor)
    if right.indices[-1] not in out and not dag.tensors[right.tensor].is_sparse:
        found.append(right.tensor)
    return tuple(dict.fromkeys(found))


def seq_steps(dag: EinsumDAG) -> list[Step]:
    """One step per op: every operand from memory, every used result to memory."""
    return [Step((op.name,), op.read_tensors, _live_writes(dag, [op.name], {op.name})) for op in dag.ops]


def gogeta_steps(plan: FusionPlan) -> list[Step]:
    """One step per fusion group (pipelined tensors stay out of memory)."""
    return [Step(g.ops, g.reads, g.writes) for g in plan.groups]


def seq_loop_orders(dag: EinsumDAG) -> dict[str, tuple[str, ...] | None]:
    """Each op's own best order: dominant rank outermost, format respected."""
    out: dict[str, tuple[str, ...] | None] = {}
    for op in dag.ops:
        if op.kind == "inv":
            out[op.name] = None
            continue
        cands = preferred_orders(dag, op, node_dominance(dag, op).index)
        out[op.name] = next((c for c in cands if format_ok(dag, op, c)), cands[0])
    return out


def _streams(dag: EinsumDAG, step: Step, t: str, orders: dict) -> bool:
    """Whether every op of the step reads ``t`` in the order it was written."""
    src = dag.producer(t)
    w = write_order(dag, dag.op(src), orders.get(src)) if src else tuple(range(len(dag.tensors[t].shape)))
    for name in step.ops:
        op = dag.op(name)
        if t not in op.read_tensors:
            continue
        if orders.get(name) is None or any(r != w for r in read_orders(dag, op, t, orders[name])):
            return False
    return True


def simulate_steps(dag: EinsumDAG, steps: Sequence[Step], sram_words: float, policy: str,
                   orders: dict, *, partitions: dict | None = None, slices: int = 1,
                   transpose_copies: bool = False) -> tuple[int, int]:
    """Walk ``steps`` through an SRAM model; returns (DRAM read words, DRAM write words).

    ``partitions`` (op -> clusters) with ``slices`` > 1 places each op's
    output in its own clusters' SRAM slices (GOGETA-df).  ``transpose_copies``
    (SEQ-Overflow): a tensor an op reads transposed is read through a copy of
    its resident head staged in free SRAM; the copy's overflow is written to
    DRAM and read back.
    """
    uses: dict[str, list[int]] = {}
    for s, step in enumerate(steps):
        for t in step.reads:
            uses.setdefault(t, []).append(s)
    nxt = {t: 0 for t in uses}
    outputs = set(dag.outputs)

    def key_of(t: str):
        u = uses.get(t, ())
        p = nxt.get(t, 0)
        return (u[p], -(len(u) - p)) if p < len(u) else None

    sram = SramModel(sram_words, policy, slices)
    sram.key_of = key_of

    def where_read(step: Step, t: str):
        if partitions is None:
            return None
        return sorted({c for n in step.ops if t in dag.op(n).read_tensors for c in partitions[n]})

    for s, step in enumerate(steps):
        for t in step.reads:
            nxt[t] += 1
        reads = sorted(step.reads, key=lambda t: key_of(t) or (math.inf, 0)) if policy == "reuse" else step.reads
        for t in reads:
            sram.read(t, dag.words(t), install=key_of(t) is not None, where=where_read(step, t))
        if transpose_copies:
            for t in dict.fromkeys(x for n in step.ops for x in transposed_operands(dag, n)):
                head, copy = sram.resident(t), TransposedCopy(t)
                if head:
                    sram.write(copy, head)
                    sram.read(copy, head, install=False)
                    sram.free(copy)
        dying = [t for t in step.reads if key_of(t) is None]
        for t in dying:
            if _streams(dag, step, t, orders):
                sram.free(t, flush=t in outputs)
        writes = sorted(step.writes, key=lambda t: key_of(t) or (math.inf, 0)) if policy == "reuse" else step.writes
        for t in writes:
            sram.write(t, dag.words(t), where=partitions[t] if partitions is not None else None)
        for t in dying:
            sram.free(t, flush=t in outputs)
    for t in outputs:
        sram.free(t, flush=True)
    return sram.dram_reads, sram.dram_writes


def op_extra_words(dag: EinsumDAG, op: Op | str, onchip_words: float) -> int:
    """Words an op re-reads beyond its compulsory traffic when none of its
    tensors fits on chip (square output-stationary tiling); 0 otherwise.

    >>> from schedules.fusion.builders import nn_like_chain
    >>> dag = nn_like_chain(dict(M=64, K=64, N=64, O=64, P=64, Q=64, R=64))
    >>> op_extra_words(dag, "Z", 10**6), op_extra_words(dag, "Z", 2048) > 0
    (0, True)
    """
    op = dag.op(op) if isinstance(op, str) else op
    if op.kind != "mac" or len(op.inputs) != 2 or any(dag.tensors[o.tensor].is_sparse for o in op.inputs):
        return 0
    sizes = op.index_sizes(dag)
    a, b = set(op.inputs[0].indices), set(op.inputs[1].indices)
    out = set(op.output.indices)
    prod = lambda idx: math.prod(sizes[i] for i in idx)  # noqa: E731
    batch = prod(a & b & out)
    m, n, k = prod((a & out) - b), prod((b & out) - a), prod((a & b) - out) * prod(a - b - out) * prod(b - a - out)
    if min(m * k, k * n, m * n) <= onchip_words:
        return 0
    t = max(1, int(math.isqrt(int(onchip_words // 2))))
    tm, tn = min(t, m), min(t, n)
    tiled = m * k * math.ceil(n / tn) + k * n * math.ceil(m / tm) + m * n
    return int(batch * max(tiled - (m * k + k * n + m * n), 0))


def ideal_words(dag: EinsumDAG) -> int:
    """Ideal (Table 3): inputs read once, outputs written once."""
    return sum(dag.words(t) for t in dag.inputs) + sum(dag.words(t) for t in dag.outputs)


def dram_traffic(dag: EinsumDAG, config: str, arch: TrafficArch, plan: FusionPlan | None = None) -> TrafficResult:
    """DRAM traffic of ``dag`` under one Table 3 configuration."""
    if config not in CONFIGS:
        raise ConfigError(f"configuration {config!r} is not one of {CONFIGS}")
    bpw = arch.bytes_per_word
    if config == "Ideal":
        return TrafficResult(config, sum(dag.words(t) for t in dag.inputs),
                             sum(dag.words(t) for t in dag.outputs), 0, bpw)
    extra = sum(op_extra_words(dag, op, arch.rf_words + arch.sram_words) for op in dag.ops)
    if config.startswith("SEQ"):
        sram = 0 if config == "SEQ-Flex" else arch.sram_words
        r, w = simulate_steps(dag, seq_steps(dag), sram, "fifo", seq_loop_orders(dag),
                              transpose_copies=config == "SEQ-Overflow")
        return TrafficResult(config, r, w, extra, bpw)
    plan = plan or plan_fusion(dag)
    orders = plan.loop_orders.orders
    if config == "GOGETA-map":
        r, w = simulate_steps(dag, gogeta_steps(plan), arch.sram_words, "reuse", orders)
    else:
        part = group_partitions(plan, "df", arch.clusters)
        r, w = simulate_steps(dag, gogeta_steps(plan), arch.sram_words, "reuse", orders,
                              partitions=part, slices=arch.clusters)
    return TrafficResult(config, r, w, extra, bpw)


def traffic_table(dag: EinsumDAG, arch: TrafficArch, plan: FusionPlan | None = None,
                  configs: Sequence[str] = CONFIGS) -> dict[str, TrafficResult]:
    """Every configuration for one DAG and architecture."""
    plan = plan or plan_fusion(dag)
    return {c: dram_traffic(dag, c, arch, plan) for c in configs}


def _check_names(names: Iterable[str], kind: str) -> list[str]:
    names = list(names)
    for n in names:
        w = GOGETA_TABLE2.get(n)
        if w is None or w.kind != kind:
            known = [k for k, v in GOGETA_TABLE2.items() if v.kind == kind]
            raise InputError(f"{n!r} is not a {kind.upper()} workload of GOGETA Table 2 ({known})")
    return names


def cg_traffic_dag(workload: str, N: int, iters: int = GOGETA_TABLE4.cg_iterations,
                   live_out: str = "loop_state") -> EinsumDAG:
    """A Table 2 CG workload as Fig. 10 counts it: ``iters`` iterations of Alg. 1's
    loop whose state after the window (``live_out="loop_state"``: X, R, P, Γ) or
    solution alone (``"solution"``: X) ends in DRAM.

    >>> cg_traffic_dag("nasa4704", 8, iters=2).outputs
    ['X2', 'R2', 'P2', 'Gamma2']
    """
    if live_out not in LIVE_OUT:
        raise ConfigError(f"live_out must be one of {LIVE_OUT}, got {live_out!r}")
    dag = workload_dag(_check_names([workload], "cg")[0], N, iters=iters)
    if live_out == "loop_state":
        dag.mark_output(*(f"{t}{iters}" for t in CG_LOOP_STATE))
    return dag


def fig10_sweep(workloads: Iterable[str] = CG_WORKLOADS, n_values: Iterable[int] = GOGETA_TABLE4.n_sweep,
                sram_mb: Iterable[float] = GOGETA_TABLE4.sram_sweep_mb,
                iters: int = GOGETA_TABLE4.cg_iterations, arch: GogetaArch = GOGETA_TABLE4,
                live_out: str = "loop_state") -> list[dict]:
    """Fig. 10: DRAM MB of Block CG per workload x N x SRAM size, every configuration.

    Each row also has ``reduction`` = SEQ-Flex / GOGETA-map.  ``live_out``: see
    :func:`cg_traffic_dag`.
    """
    rows = []
    sram_mb = list(sram_mb)
    for name in _check_names(workloads, "cg"):
        for n in n_values:
            dag = cg_traffic_dag(name, n, iters, live_out)
            plan = plan_fusion(dag)
            for mb in sram_mb:
                res = traffic_table(dag, TrafficArch.table4(mb, arch), plan)
                row = {"workload": name, "N": n, "sram_mb": mb}
                row.update({c: res[c].megabytes for c in CONFIGS})
                row["reduction"] = res["SEQ-Flex"].words / res["GOGETA-map"].words
                rows.append(row)
    return rows


def fig11_gcn(workloads: Iterable[str] = GCN_WORKLOADS, sram_mb: Iterable[float] = (1,),
              arch: GogetaArch = GOGETA_TABLE4) -> list[dict]:
    """Fig. 11: DRAM MB of a GCN layer (cora, protein) per SRAM size."""
    rows = []
    for name in _check_names(workloads, "gcn"):
        dag = workload_dag(name)
        plan = plan_fusion(dag)
        for mb in sram_mb:
            res = traffic_table(dag, TrafficArch.table4(mb, arch), plan)
            row = {"workload": name, "sram_mb": mb}
            row.update({c: res[c].megabytes for c in CONFIGS})
            row["reduction"] = res["SEQ-Flex"].words / res["GOGETA-map"].words
            rows.append(row)
    return rows


def _pair_45(plan: FusionPlan, report, i: int) -> int:
    """§6.2.3's ops 4 and 5 of iteration ``i``: R between them, the Λ broadcast, the Γ reduction."""
    R, G, L = f"R{i}", f"Gamma{i}", f"Lambda{i}"
    total = 0
    for kind, src, dsts, w in report.records:
        if (src == R and G in dsts) or (kind == "broadcast" and src == L) or (kind == "reduce" and src == G):
            total += w
    return total


def fig12_noc(workloads: Iterable[str] = CG_WORKLOADS, N: int = 8,
              iters: int = GOGETA_TABLE4.cg_iterations, arch: GogetaArch = GOGETA_TABLE4) -> list[dict]:
    """Fig. 12: inter-cluster NoC link traversals (KB) for GOGETA-df and GOGETA-map.

    ``*_kb``: the whole unrolled DAG; ``ops45_*_kb``: ops 4-5 of one iteration
    (§6.2.3: ``M x N`` words at least for df, ``2 x N x N x 15`` for map).
    """
    rows = []
    for name in _check_names(workloads, "cg"):
        dag = workload_dag(name, N, iters=iters)
        plan = plan_fusion(dag)
        row = {"workload": name, "N": N}
        for strategy in ("df", "map"):
            rep = noc_traversals(plan, strategy, arch.clusters)
            row[f"{strategy}_kb"] = rep.total_words * arch.bytes_per_word / KB
            row[f"ops45_{strategy}_kb"] = _pair_45(plan, rep, 1) * arch.bytes_per_word / KB
        row["df_over_map"] = row["df_kb"] / row["map_kb"] if row["map_kb"] else math.inf
        rows.append(row)
    return rows


def geomean_reduction(rows: Sequence[dict], config: str = "GOGETA-map", baseline: str = "SEQ-Flex") -> dict:
    """Geomean, min and max of ``baseline / config`` over the rows of a sweep."""
    ratios = [r[baseline] / r[config] for r in rows if r[config] > 0]
    if not ratios:
        raise InputError("geomean_reduction: no rows with positive traffic")
    g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    return {"geomean": g, "min": min(ratios), "max": max(ratios), "points": len(ratios),
            "config": config, "baseline": baseline}


def ordering_holds(row: dict, rel: float = 1e-4) -> bool:
    """§6.2.1's "clear downward trend" at one Fig. 10 row: SEQ-Flex >= SEQ-Overflow >=
    GOGETA-df >= Ideal (``rel``: GOGETA-df's 16 integer SRAM slices round words)."""
    return (row["SEQ-Flex"] >= row["SEQ-Overflow"] >= row["GOGETA-df"] * (1 - rel)
            and row["GOGETA-df"] >= row["Ideal"] * (1 - rel))


def fit_ratio_floor(M: int, N: int, nnz: int, iters: int = GOGETA_TABLE4.cg_iterations,
                    live_out: str = "loop_state") -> float:
    """The least SEQ-Flex / Ideal of Block CG over any op-by-op schedule.

    SEQ-Flex starts and ends every op in DRAM, so each iteration reads A once
    and writes and reads each of S, X, R, P at least once (``8·M·N`` words,
    fewer than the 14 of Alg. 1's ops); Ideal is ``A + B + X0`` plus the
    live-out M x N tensors (X, R, P for the loop state, X for the solution).
    Where every tensor fits the SRAM GOGETA costs Ideal, so its reduction
    there is at least this floor.

    >>> w = GOGETA_TABLE2["Barth5"]
    >>> round(fit_ratio_floor(w.M, 16, w.nnz), 1), round(fit_ratio_floor(w.M, 16, w.nnz, live_out="solution"), 1)
    (15.4, 24.1)
    """
    if live_out not in LIVE_OUT:
        raise ConfigError(f"live_out must be one of {LIVE_OUT}, got {live_out!r}")
    a, v = 2 * nnz + M, M * N
    out = 3 if live_out == "loop_state" else 1
    return iters * (a + 8 * v) / (a + (2 + out) * v)
