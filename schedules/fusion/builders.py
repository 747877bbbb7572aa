"""GOGETA Alg. 1 / Fig. 3, §2.2.2 and Table 1: builders of the paper's einsum DAGs.

* :func:`block_cg_dag` - Block Conjugate Gradient, exactly Alg. 1, unrolled
  over ``iters`` iterations as in Fig. 3 (with the set-up lines before the loop).
* :func:`gcn_layer_dag` - a GCN layer, ``Z = A·X0`` then ``X1 = Z·W``.
* :func:`nn_like_chain` / :func:`hpc_like_chain` - the two chains of Table 1.
* :func:`workload_dag` - a row of Table 2 (``GOGETA_TABLE2``) as a DAG.

>>> dag = block_cg_dag(iters=2, M=1000, N=8, nnz=5000)
>>> [op.name for op in dag.ops if op.iteration == 1]
['S1', 'Delta1', 'Lambda1', 'X1', 'R1', 'Gamma1', 'Phi1', 'P1']
>>> dag.outputs
['X2']
"""
from __future__ import annotations

from dataclasses import dataclass

from schedules.fusion.einsum_dag import EinsumDAG
from tvm_ext.errors import InputError, ShapeError, positive_int
from tvm_ext.workloads import GOGETA_TABLE2, GogetaWorkload

__all__ = [
    "block_cg_dag",
    "gcn_layer_dag",
    "EinsumChain",
    "NN_LIKE_CHAIN",
    "HPC_LIKE_CHAIN",
    "chain_dag",
    "nn_like_chain",
    "hpc_like_chain",
    "workload_dag",
    "CG_LINE_OF",
]

#: Alg. 1 line of each Block CG op family (the prefix of its tensor name).
CG_LINE_OF = {"S": "1", "Delta": "2", "Lambda": "2", "X": "3", "R": "4", "Gamma": "5", "Phi": "6", "P": "7"}


def block_cg_dag(iters: int, M: int, N: int, nnz: int, *, setup: bool = True) -> EinsumDAG:
    """Block CG (GOGETA Alg. 1) unrolled over ``iters`` iterations (Fig. 3).

    Tensors: sparse ``A`` (M x M, CSR, ``nnz``), ``B`` and ``X0`` (M x N).  With
    ``setup`` the pre-loop lines ``R0 = B - A·X0``, ``Γ0 = R0ᵀR0`` are ops and
    ``P0 = R0`` is an alias; without it ``R0``, ``P0``, ``Gamma0`` are inputs.
    Iteration ``i`` adds, with ``P = P{i-1}``::

        1  S_i = A·P                 (SpMM)
        2  Δ_i = PᵀS_i ; Λ_i = Δ_i⁻¹·Γ_{i-1}
        3  X_i = X_{i-1} + P·Λ_i
        4  R_i = R_{i-1} - S_i·Λ_i
        5  Γ_i = R_iᵀR_i
        6  Φ_i = Γ_{i-1}⁻¹·Γ_i       (Γ_prev = Γ_{i-1})
        7  P_i = R_i + P·Φ_i

    The convergence test reads diag(Γ_i) only and is not an op.  The graph
    output is ``X{iters}``.
    """
    iters = positive_int(iters, "iters")
    M = positive_int(M, "M")
    N = positive_int(N, "N")
    nnz = positive_int(nnz, "nnz")
    dag = EinsumDAG(f"block_cg(iters={iters}, M={M}, N={N}, nnz={nnz})")
    dag.add_tensor("A", ("m", "k"), (M, M), nnz=nnz, fmt="csr")
    dag.add_tensor("X0", ("m", "n"), (M, N))
    if setup:
        dag.add_tensor("B", ("m", "n"), (M, N))
        dag.add_op("R0", "mk,kn->mn", ["A", "X0"], addend="B", sign=-1, label="0", iteration=0)
        dag.add_op("Gamma0", "kn',kn->n'n", ["R0", "R0"], label="0", iteration=0)
        p_prev = "R0"  # P = R
    else:
        dag.add_tensor("R0", ("m", "n"), (M, N))
        dag.add_tensor("P0", ("m", "n"), (M, N))
        dag.add_tensor("Gamma0", ("n'", "n"), (N, N))
        p_prev = "P0"
    for i in range(1, iters + 1):
        S, D, L, X, R, G, F, P = (f"{t}{i}" for t in ("S", "Delta", "Lambda", "X", "R", "Gamma", "Phi", "P"))
        Xp, Rp, Gp = f"X{i - 1}", f"R{i - 1}", f"Gamma{i - 1}"
        kw = {"iteration": i}
        dag.add_op(S, "mk,kn->mn", ["A", p_prev], label="1", **kw)
        dag.add_op(D, "kn',kn->n'n", [p_prev, S], label="2", **kw)
        dag.add_op(L, "n'j,jn->n'n", [D, Gp], kind="inv", label="2", **kw)
        dag.add_op(X, "mj,jn->mn", [p_prev, L], addend=Xp, label="3", **kw)
        dag.add_op(R, "mj,jn->mn", [S, L], addend=Rp, sign=-1, label="4", **kw)
        dag.add_op(G, "kn',kn->n'n", [R, R], label="5", **kw)
        dag.add_op(F, "n'j,jn->n'n", [Gp, G], kind="inv", label="6", **kw)
        dag.add_op(P, "mj,jn->mn", [p_prev, F], addend=R, label="7", **kw)
        p_prev = P
    dag.mark_output(f"X{iters}")
    return dag


def gcn_layer_dag(M: int, N: int, O: int, nnz: int) -> EinsumDAG:
    """A GCN layer (GOGETA §2.2.2): ``Z = A·X0`` (SpMM) then ``X1 = Z·W``.

    >>> [str(op) for op in gcn_layer_dag(100, 16, 4, 500).ops]
    ['Z[m,n] = A[m,k]·X0[k,n]', 'X1[m,o] = Z[m,j]·W[j,o]']
    """
    M, N, O, nnz = (positive_int(v, w) for v, w in ((M, "M"), (N, "N"), (O, "O"), (nnz, "nnz")))
    dag = EinsumDAG(f"gcn_layer(M={M}, N={N}, O={O}, nnz={nnz})")
    dag.add_tensor("A", ("m", "k"), (M, M), nnz=nnz, fmt="csr")
    dag.add_tensor("X0", ("m", "n"), (M, N))
    dag.add_tensor("W", ("n", "o"), (N, O))
    dag.add_op("Z", "mk,kn->mn", ["A", "X0"], label="1")
    dag.add_op("X1", "mj,jo->mo", ["Z", "W"], label="2")
    dag.mark_output("X1")
    return dag


@dataclass(frozen=True)
class EinsumChain:
    """A chain of einsums with symbolic rank sizes (GOGETA Table 1).

    ``ops``: ``(output, einsum, inputs)``; ``input_ranks``: the rank symbols
    (upper-case size names) of every graph input; ``output``: the final result.
    """

    name: str
    ops: tuple[tuple[str, str, tuple[str, ...]], ...]
    input_ranks: dict
    output: str

    @property
    def symbols(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for ranks in self.input_ranks.values():
            for r in ranks:
                seen.setdefault(r, None)
        return tuple(seen)


#: Table 1, "NN like": a new weight is injected by every operation.
NN_LIKE_CHAIN = EinsumChain(
    "NN-like",
    (("Z", "mk,kn->mn", ("A", "B")),
     ("Y", "oj,jn->on", ("C", "Z")),
     ("X", "pi,in->pn", ("D", "Y")),
     ("W", "qh,hn->qn", ("E", "X")),
     ("V", "rg,gn->rn", ("F", "W"))),
    {"A": ("M", "K"), "B": ("K", "N"), "C": ("O", "M"), "D": ("P", "O"), "E": ("Q", "P"), "F": ("R", "Q")},
    "V",
)

#: Table 1, "HPC like": three inputs, intermediates reused by later operations.
HPC_LIKE_CHAIN = EinsumChain(
    "HPC-like",
    (("Z", "mk,kn->mn", ("A", "B")),
     ("Y", "oj,jn->on", ("C", "Z")),
     ("X", "mi,in->mn", ("Z", "Y")),
     ("W", "oh,hn->on", ("Y", "X")),
     ("V", "mg,gn->mn", ("X", "W"))),
    {"A": ("M", "K"), "B": ("K", "N"), "C": ("O", "M")},
    "V",
)


def chain_dag(chain: EinsumChain, sizes: dict) -> EinsumDAG:
    """A numeric DAG of a Table 1 chain: ``sizes`` maps each rank symbol to an int.

    >>> dag = nn_like_chain(dict(M=64, K=32, N=8, O=16, P=16, Q=16, R=4))
    >>> dag.tensors["V"].shape
    (4, 8)
    """
    missing = [s for s in chain.symbols if s not in sizes]
    if missing:
        raise InputError(f"chain {chain.name!r}: no size for rank {missing[0]!r}")
    dag = EinsumDAG(f"{chain.name}({', '.join(f'{s}={sizes[s]}' for s in chain.symbols)})")
    for t, ranks in chain.input_ranks.items():
        dag.add_tensor(t, tuple(r.lower() for r in ranks), tuple(positive_int(sizes[r], f"rank {r}") for r in ranks))
    for n, (out, spec, ins) in enumerate(chain.ops, start=1):
        dag.add_op(out, spec, list(ins), label=str(n))
    dag.mark_output(chain.output)
    return dag


def nn_like_chain(sizes: dict) -> EinsumDAG:
    """Table 1's NN-like chain (ranks M, K, N, O, P, Q, R)."""
    return chain_dag(NN_LIKE_CHAIN, sizes)


def hpc_like_chain(sizes: dict) -> EinsumDAG:
    """Table 1's HPC-like chain (ranks M, K, N, O).

    The paper's operations 3-5 contract an index whose extent differs between
    their operands (``X = Z_{m,i}·Y_{i,n}``: i is N in Z, O in Y;
    ``W = Y_{o,h}·X_{h,n}``: h is N in Y, M in X), so as a concrete DAG the chain
    is well-formed only for ``M == N == O``; other sizes raise
    :class:`ShapeError`.  Table 1's symbolic formulas (:mod:`.table1`) follow
    the paper's own per-operation accounting instead.
    """
    if len({sizes.get("M"), sizes.get("N"), sizes.get("O")}) != 1:
        raise ShapeError(f"HPC-like chain: M={sizes.get('M')}, N={sizes.get('N')}, O={sizes.get('O')} differ, "
                         "but its ops 3-5 contract indices of size N against O and N against M "
                         "(a concrete chain needs M == N == O)")
    return chain_dag(HPC_LIKE_CHAIN, sizes)


def workload_dag(workload: str | GogetaWorkload, N: int | None = None, *, iters: int = 10) -> EinsumDAG:
    """A Table 2 workload as a DAG: CG rows need ``N`` (the swept rank); GCN rows
    use their own N and O.

    >>> workload_dag("protein").tensors["X1"].shape
    (3786, 2)
    """
    if isinstance(workload, str):
        if workload not in GOGETA_TABLE2:
            raise InputError(f"unknown GOGETA workload {workload!r}; known: {sorted(GOGETA_TABLE2)}")
        workload = GOGETA_TABLE2[workload]
    if workload.kind == "cg":
        if N is None:
            raise InputError(f"workload {workload.name!r} is a CG workload: give N (the number of right-hand sides)")
        return block_cg_dag(iters, workload.M, N, workload.nnz)
    if workload.kind == "gcn":
        return gcn_layer_dag(workload.M, N or workload.N, workload.O, workload.nnz)
    raise InputError(f"workload {workload.name!r}: unknown kind {workload.kind!r}")
