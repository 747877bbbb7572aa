"""GOGETA §2.1/§2.2: the einsum-DAG IR (tensors with named ranks, ops, edges) and an einsum parser.

A tensor carries named ranks, their sizes and its sparsity (``nnz`` and a
format: ``dense``, ``csr`` or ``csc``).  An op is a tensor MAC (an einsum,
optionally accumulated into an addend: ``X = X + P·Λ``), an element-wise
add/sub, or a small inverse (``Λ = Δ⁻¹·Γ``: the first operand is inverted).
Tensors are single-assignment, so ops are added in a topological order and an
edge is "op ``src`` produces the tensor that op ``dst`` reads".

>>> dag = EinsumDAG("gemm-chain")
>>> dag.add_tensor("A", ("m", "k"), (64, 32))
>>> dag.add_tensor("B", ("k", "n"), (32, 8))
>>> dag.add_tensor("C", ("n", "o"), (8, 4))
>>> dag.einsum("Z", "mk,kn->mn", "A", "B").output.tensor
'Z'
>>> dag.einsum("Y", "mj,jo->mo", "Z", "C").index_sizes(dag)["j"]
8
>>> [(e.src, e.dst, e.tensor) for e in dag.edges()]
[('Z', 'Y', 'Z')]
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from tvm_ext.errors import InputError, ShapeError, positive_int

__all__ = [
    "EinsumSpec",
    "parse_einsum",
    "TensorSpec",
    "Operand",
    "Op",
    "Edge",
    "EinsumDAG",
    "OP_KINDS",
    "SPARSE_FORMATS",
]

#: Op kinds: tensor MAC (einsum), element-wise add / sub, small inverse.
OP_KINDS = ("mac", "add", "sub", "inv")
#: Storage formats; ``csr`` compresses the second rank, ``csc`` the first.
SPARSE_FORMATS = ("dense", "csr", "csc")

_TOKEN = re.compile(r"[A-Za-z]'*")


@dataclass(frozen=True)
class EinsumSpec:
    """A parsed einsum: one index tuple per operand and the output indices.

    >>> s = parse_einsum("kn',kn->n'n")
    >>> s.inputs, s.output, s.contracted
    ((('k', "n'"), ('k', 'n')), ("n'", 'n'), ('k',))
    """

    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]

    @property
    def indices(self) -> tuple[str, ...]:
        """Every index, in order of first appearance (inputs, then output)."""
        seen: dict[str, None] = {}
        for idx in (*self.inputs, self.output):
            for i in idx:
                seen.setdefault(i, None)
        return tuple(seen)

    @property
    def contracted(self) -> tuple[str, ...]:
        """Indices summed over (in the inputs, not in the output)."""
        return tuple(i for i in self.indices if i not in self.output)

    def __str__(self) -> str:
        return ",".join("".join(t) for t in self.inputs) + "->" + "".join(self.output)


def _tokens(text: str, where: str, spec: str) -> tuple[str, ...]:
    toks, pos = [], 0
    for m in _TOKEN.finditer(text):
        if m.start() != pos:
            raise InputError(f"einsum {spec!r}: unexpected {text[pos:m.start()]!r} in {where}")
        toks.append(m.group())
        pos = m.end()
    if pos != len(text):
        raise InputError(f"einsum {spec!r}: unexpected {text[pos:]!r} in {where}")
    return tuple(toks)


def parse_einsum(spec: str) -> EinsumSpec:
    """Parse ``"mk,kn->mn"`` (letters, optionally primed: ``n'``; blanks ignored).

    Without ``->`` the output is numpy's implicit one: the indices that occur
    once, sorted.  Ellipses, repeated indices within one operand and output
    indices absent from the inputs are rejected with :class:`InputError`.

    >>> parse_einsum("mk,kn->mn").contracted
    ('k',)
    >>> parse_einsum("ij,jk").output
    ('i', 'k')
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InputError(f"einsum spec must be a non-empty string, got {spec!r}")
    text = "".join(spec.split())
    if "..." in text or "." in text:
        raise InputError(f"einsum {spec!r}: ellipsis is not supported")
    if text.count("->") > 1:
        raise InputError(f"einsum {spec!r}: more than one '->'")
    lhs, arrow, rhs = text.partition("->")
    operands = lhs.split(",")
    inputs = []
    for pos, operand in enumerate(operands):
        if not operand:
            raise InputError(f"einsum {spec!r}: operand {pos} has no indices")
        toks = _tokens(operand, f"operand {pos}", spec)
        if len(set(toks)) != len(toks):
            raise InputError(f"einsum {spec!r}: operand {pos} repeats an index (diagonals are not supported)")
        inputs.append(toks)
    if arrow:
        output = _tokens(rhs, "the output", spec) if rhs else ()
        if len(set(output)) != len(output):
            raise InputError(f"einsum {spec!r}: the output repeats an index")
        known = {i for t in inputs for i in t}
        missing = [i for i in output if i not in known]
        if missing:
            raise InputError(f"einsum {spec!r}: output index {missing[0]!r} is in no operand")
    else:
        counts: dict[str, int] = {}
        for t in inputs:
            for i in t:
                counts[i] = counts.get(i, 0) + 1
        output = tuple(sorted(i for i, c in counts.items() if c == 1))
    return EinsumSpec(tuple(inputs), tuple(output))


@dataclass(frozen=True)
class TensorSpec:
    """A tensor: named ranks, their sizes, and sparsity.

    ``words`` is its storage in words: dense = product of sizes; CSR/CSC =
    ``2*nnz + rows`` (values, indices and one pointer per uncompressed row,
    the count GOGETA's Eq. 10 uses).

    >>> TensorSpec("A", ("m", "k"), (4, 4), nnz=7, fmt="csr").words
    18
    """

    name: str
    ranks: tuple[str, ...]
    shape: tuple[int, ...]
    nnz: int | None = None
    fmt: str = "dense"

    @property
    def is_sparse(self) -> bool:
        return self.fmt != "dense"

    @property
    def size(self) -> int:
        """Number of logical elements (product of the rank sizes)."""
        return math.prod(self.shape)

    @property
    def compressed_dim(self) -> int | None:
        """Which dimension the format compresses (CSR: 1, CSC: 0)."""
        return {"csr": 1, "csc": 0}.get(self.fmt)

    @property
    def words(self) -> int:
        if not self.is_sparse:
            return self.size
        outer = self.shape[1 - self.compressed_dim]
        return 2 * int(self.nnz) + outer

    @property
    def nnz_per_outer(self) -> float:
        """Average non-zeros per uncompressed row (CSR) or column (CSC)."""
        if not self.is_sparse:
            raise InputError(f"tensor {self.name!r} is dense")
        return self.nnz / self.shape[1 - self.compressed_dim]


@dataclass(frozen=True)
class Operand:
    """A tensor read (or written) with op-local index letters."""

    tensor: str
    indices: tuple[str, ...]


@dataclass(frozen=True)
class Op:
    """One node of the DAG.  ``name`` equals the output tensor's name.

    ``kind``: ``mac`` (``out = [addend ±] Σ Π inputs``), ``add``/``sub``
    (element-wise, two inputs), ``inv`` (``out = inv(in0) [· in1]``).
    ``label`` is a free tag (Block CG uses the line number of GOGETA Alg. 1)
    and ``iteration`` the unrolled iteration (0 = set-up), if any.
    """

    name: str
    kind: str
    inputs: tuple[Operand, ...]
    output: Operand
    addend: Operand | None = None
    sign: int = 1
    label: str = ""
    iteration: int | None = None

    @property
    def spec(self) -> EinsumSpec:
        return EinsumSpec(tuple(o.indices for o in self.inputs), self.output.indices)

    @property
    def indices(self) -> tuple[str, ...]:
        """The op's loop indices (its iteration space), in appearance order."""
        return self.spec.indices

    @property
    def contracted(self) -> tuple[str, ...]:
        return self.spec.contracted

    @property
    def reads(self) -> tuple[Operand, ...]:
        """Every operand read: the inputs, then the addend."""
        return self.inputs + ((self.addend,) if self.addend is not None else ())

    @property
    def read_tensors(self) -> tuple[str, ...]:
        """Distinct tensors read, in operand order."""
        return tuple(dict.fromkeys(o.tensor for o in self.reads))

    def operands_of(self, tensor: str) -> tuple[Operand, ...]:
        """The operand slots through which this op reads ``tensor``."""
        return tuple(o for o in self.reads if o.tensor == tensor)

    def index_sizes(self, dag: "EinsumDAG") -> dict[str, int]:
        """Extent of every loop index (from the operands' shapes)."""
        sizes: dict[str, int] = {}
        for o in self.reads:
            for idx, n in zip(o.indices, dag.tensors[o.tensor].shape):
                sizes.setdefault(idx, n)
        for idx, n in zip(self.output.indices, dag.tensors[self.output.tensor].shape):
            sizes.setdefault(idx, n)
        return sizes

    def __str__(self) -> str:
        def show(o: Operand) -> str:
            return f"{o.tensor}[{','.join(o.indices)}]"

        if self.kind == "inv":
            rhs = f"inv({show(self.inputs[0])})" + "".join(f"·{show(o)}" for o in self.inputs[1:])
        elif self.kind in ("add", "sub"):
            rhs = f" {'+' if self.kind == 'add' else '-'} ".join(show(o) for o in self.inputs)
        else:
            rhs = "·".join(show(o) for o in self.inputs)
        if self.addend is not None:
            rhs = f"{show(self.addend)} {'+' if self.sign > 0 else '-'} {rhs}"
        return f"{show(self.output)} = {rhs}"


@dataclass(frozen=True)
class Edge:
    """Op ``src`` produces ``tensor``, which op ``dst`` reads."""

    src: str
    dst: str
    tensor: str

    @property
    def key(self) -> tuple[str, str]:
        return (self.src, self.dst)


@dataclass
class EinsumDAG:
    """A DAG of tensor operations (GOGETA's tensor dependency graph)."""

    name: str = "dag"
    tensors: dict[str, TensorSpec] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    _op_index: dict | None = field(default=None, init=False, repr=False, compare=False)

    # ---------------------------------------------------------------- building
    def add_tensor(self, name: str, ranks: Sequence[str], shape: Sequence[int], *,
                   nnz: int | None = None, fmt: str = "dense") -> None:
        """Declare a graph input (a tensor no op produces).

        Sparse tensors must be 2-D with ``0 < nnz <= rows*cols``.
        """
        if not isinstance(name, str) or not name:
            raise InputError(f"tensor name must be a non-empty string, got {name!r}")
        if name in self.tensors:
            raise InputError(f"tensor {name!r} already exists in DAG {self.name!r}")
        ranks, shape = tuple(ranks), tuple(shape)
        if len(ranks) != len(shape):
            raise ShapeError(f"tensor {name!r}: {len(ranks)} rank names for a {len(shape)}-D shape")
        if len(set(ranks)) != len(ranks):
            raise InputError(f"tensor {name!r}: repeated rank name in {ranks}")
        shape = tuple(positive_int(n, f"tensor {name!r} size of rank {r!r}") for r, n in zip(ranks, shape))
        if fmt not in SPARSE_FORMATS:
            raise InputError(f"tensor {name!r}: format {fmt!r} is not one of {SPARSE_FORMATS}")
        if fmt == "dense":
            if nnz is not None:
                raise InputError(f"tensor {name!r}: nnz given for a dense tensor")
        else:
            if len(shape) != 2:
                raise ShapeError(f"tensor {name!r}: {fmt} needs a 2-D tensor, got {len(shape)}-D")
            nnz = positive_int(nnz, f"tensor {name!r} nnz")
            if nnz > shape[0] * shape[1]:
                raise InputError(f"tensor {name!r}: nnz={nnz} exceeds {shape[0]}x{shape[1]} entries")
        self.tensors[name] = TensorSpec(name, ranks, shape, nnz, fmt)

    def add_op(self, name: str, spec: str | EinsumSpec, inputs: Sequence[str], *, kind: str = "mac",
               addend: tuple[str, str] | str | None = None, sign: int = 1, label: str = "",
               iteration: int | None = None, out_ranks: Sequence[str] | None = None) -> Op:
        """Add an op producing the new tensor ``name`` (output shape inferred).

        ``addend`` is a tensor name (read with the output's indices) or a
        ``(tensor, indices)`` pair; the op computes ``addend + sign * einsum``.

        >>> dag = EinsumDAG()
        >>> dag.add_tensor("R", ("m", "n"), (100, 4))
        >>> str(dag.add_op("G", "kn',kn->n'n", ["R", "R"]))
        "G[n',n] = R[k,n']·R[k,n]"
        """
        if kind not in OP_KINDS:
            raise InputError(f"op {name!r}: kind {kind!r} is not one of {OP_KINDS}")
        if name in self.tensors:
            raise InputError(f"op {name!r}: tensor {name!r} already exists (tensors are single-assignment)")
        if sign not in (1, -1):
            raise InputError(f"op {name!r}: sign must be +1 or -1, got {sign!r}")
        es = parse_einsum(spec) if isinstance(spec, str) else spec
        operands = self._bind_operands(name, es, tuple(inputs))
        sizes = self._index_extents(name, operands)
        self._check_kind(name, kind, operands, es)
        add_op = self._bind_addend(name, kind, addend, es, sizes) if addend is not None else None
        ranks = tuple(out_ranks) if out_ranks is not None else es.output
        if len(ranks) != len(es.output):
            raise ShapeError(f"op {name!r}: {len(ranks)} rank names for {len(es.output)} output indices")
        self.tensors[name] = TensorSpec(name, ranks, tuple(sizes[i] for i in es.output))
        op = Op(name, kind, operands, Operand(name, es.output), add_op, sign, str(label), iteration)
        self.ops.append(op)
        self._op_index = None
        return op

    def _bind_operands(self, name: str, es: EinsumSpec, inputs: tuple[str, ...]) -> tuple[Operand, ...]:
        if not inputs:
            raise InputError(f"op {name!r}: needs at least one input")
        if len(inputs) != len(es.inputs):
            raise InputError(f"op {name!r}: einsum {es} has {len(es.inputs)} operands, {len(inputs)} tensors given")
        operands = []
        for t, idx in zip(inputs, es.inputs):
            if t not in self.tensors:
                raise InputError(f"op {name!r}: input tensor {t!r} does not exist (add it or its producer first)")
            ndim = len(self.tensors[t].shape)
            if len(idx) != ndim:
                raise ShapeError(f"op {name!r}: {t!r} is {ndim}-D but indexed with {''.join(idx)!r}")
            operands.append(Operand(t, idx))
        return tuple(operands)

    def _index_extents(self, name: str, operands: tuple[Operand, ...]) -> dict[str, int]:
        sizes: dict[str, tuple[int, str]] = {}
        for o in operands:
            for i, n in zip(o.indices, self.tensors[o.tensor].shape):
                if i in sizes and sizes[i][0] != n:
                    raise ShapeError(f"op {name!r}: index {i!r} is {sizes[i][0]} in {sizes[i][1]!r} "
                                     f"but {n} in {o.tensor!r}")
                sizes.setdefault(i, (n, o.tensor))
        return {i: n for i, (n, _) in sizes.items()}

    def _bind_addend(self, name: str, kind: str, addend, es: EinsumSpec, sizes: dict[str, int]) -> Operand:
        if kind != "mac":
            raise InputError(f"op {name!r}: only a mac op takes an addend")
        a_name, a_idx = (addend, es.output) if isinstance(addend, str) else (addend[0], tuple(addend[1]))
        if a_name not in self.tensors:
            raise InputError(f"op {name!r}: addend tensor {a_name!r} does not exist")
        a = self.tensors[a_name]
        if len(a_idx) != len(a.shape) or set(a_idx) != set(es.output):
            raise ShapeError(f"op {name!r}: addend {a_name!r} must be indexed by the output indices")
        for i, n in zip(a_idx, a.shape):
            if sizes[i] != n:
                raise ShapeError(f"op {name!r}: addend {a_name!r} has size {n} on {i!r}, expected {sizes[i]}")
        if a.is_sparse:
            raise InputError(f"op {name!r}: a sparse addend is not supported")
        return Operand(a_name, a_idx)

    def einsum(self, name: str, spec: str, *inputs: str, **kwargs) -> Op:
        """Shorthand for a MAC op: ``dag.einsum("Z", "mk,kn->mn", "A", "B")``."""
        return self.add_op(name, spec, inputs, kind=kwargs.pop("kind", "mac"), **kwargs)

    def mark_output(self, *names: str) -> None:
        """Declare graph outputs (results the caller observes)."""
        for n in names:
            if n not in self.tensors:
                raise InputError(f"output {n!r} is not a tensor of DAG {self.name!r}")
            if n not in self.outputs:
                self.outputs.append(n)

    @staticmethod
    def _check_kind(name: str, kind: str, operands: list[Operand], es: EinsumSpec) -> None:
        if kind in ("add", "sub"):
            if len(operands) != 2:
                raise InputError(f"op {name!r}: {kind} takes exactly two inputs")
            if any(set(o.indices) != set(es.output) for o in operands) or es.contracted:
                raise ShapeError(f"op {name!r}: {kind} needs every operand indexed by the output indices")
        if kind == "inv":
            first = operands[0].indices
            if len(first) != 2:
                raise ShapeError(f"op {name!r}: inv needs a 2-D first operand, got {''.join(first)!r}")
            if len(operands) > 2:
                raise InputError(f"op {name!r}: inv takes one or two inputs")
        if kind == "mac" and len(operands) > 2:
            # A MAC of more operands is legal einsum, but GOGETA's analyses are
            # for binary tensor products; keep the IR honest about that.
            raise InputError(f"op {name!r}: a mac op takes one or two operands, got {len(operands)}")

    # ---------------------------------------------------------------- queries
    @property
    def op_index(self) -> dict[str, int]:
        """Op name -> position in program (topological) order."""
        cached = self._op_index
        if cached is None or len(cached) != len(self.ops):
            cached = {op.name: i for i, op in enumerate(self.ops)}
            self._op_index = cached
        return cached

    def op(self, name: str) -> Op:
        """The op producing tensor ``name``."""
        idx = self.op_index.get(name)
        if idx is None:
            raise InputError(f"DAG {self.name!r} has no op named {name!r}")
        return self.ops[idx]

    def producer(self, tensor: str) -> str | None:
        """Name of the op producing ``tensor`` (None for graph inputs)."""
        return tensor if tensor in self.op_index else None

    @property
    def inputs(self) -> list[str]:
        """Graph inputs: tensors no op produces, in declaration order."""
        return [t for t in self.tensors if t not in self.op_index]

    def consumers(self, tensor: str) -> list[str]:
        """Ops reading ``tensor``, in program order."""
        return [op.name for op in self.ops if tensor in op.read_tensors]

    def edges(self) -> list[Edge]:
        """Producer -> consumer edges, one per (src, dst) pair, in program order."""
        out = []
        for op in self.ops:
            for t in op.read_tensors:
                if t in self.op_index:
                    out.append(Edge(t, op.name, t))
        out.sort(key=lambda e: (self.op_index[e.src], self.op_index[e.dst]))
        return out

    def out_edges(self, op_name: str) -> list[Edge]:
        return [Edge(op_name, c, op_name) for c in self.consumers(op_name)]

    def in_edges(self, op_name: str) -> list[Edge]:
        return [Edge(t, op_name, t) for t in self.op(op_name).read_tensors if t in self.op_index]

    def effective_sizes(self, op: Op | str) -> dict[str, float]:
        """Index extents as the dataflow sees them: a rank compressed by a
        sparse operand counts as its average non-zeros per row (GOGETA Fig. 7:
        "the first tensor is uncontracted dominant since we compress the K rank")."""
        op = self.op(op) if isinstance(op, str) else op
        sizes: dict[str, float] = dict(op.index_sizes(self))
        for o in op.reads:
            t = self.tensors[o.tensor]
            if t.is_sparse:
                sizes[o.indices[t.compressed_dim]] = t.nnz_per_outer
        return sizes

    def macs(self, op: Op | str) -> int:
        """Multiply-accumulates of an op (sparse operand: nnz x the other ranks)."""
        op = self.op(op) if isinstance(op, str) else op
        sizes = op.index_sizes(self)
        if op.kind in ("add", "sub"):
            return math.prod(sizes[i] for i in op.output.indices)
        sparse = [o for o in op.inputs if self.tensors[o.tensor].is_sparse]
        if sparse:
            s = sparse[0]
            rest = [i for i in op.indices if i not in s.indices]
            work = self.tensors[s.tensor].nnz * math.prod(sizes[i] for i in rest)
        else:
            work = math.prod(sizes[i] for i in op.indices) if len(op.inputs) > 1 or op.contracted else 0
        if op.kind == "inv":
            n = sizes[op.inputs[0].indices[0]]
            work += n ** 3  # Gauss-Jordan on the small square operand
        if op.addend is not None:
            work += math.prod(sizes[i] for i in op.output.indices)
        return int(work)

    def words(self, tensor: str) -> int:
        """Storage of a tensor in words."""
        return self.tensors[tensor].words

    def validate(self) -> None:
        """Re-check the invariants (single assignment, inputs before use, outputs exist)."""
        seen = set(self.inputs)
        for op in self.ops:
            for t in op.read_tensors:
                if t not in seen:
                    raise InputError(f"op {op.name!r} reads {t!r} before it is produced")
            seen.add(op.name)
        for t in self.outputs:
            if t not in self.tensors:
                raise InputError(f"output {t!r} is not a tensor")

    def summary(self) -> list[str]:
        """One line per op: ``label  op``."""
        return [f"{(op.label or '-'):>3}  {op}" for op in self.ops]

    def subset(self, ops: Iterable[str]) -> list[Op]:
        """The named ops, in program order."""
        wanted = set(ops)
        return [op for op in self.ops if op.name in wanted]
