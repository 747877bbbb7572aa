"""Test oracle: the fused SpMM's row consumer as TVMScript text, the form the fusion package used
before the consumer was built in TIR (:mod:`schedules.fusion.spmm_consumer`).  Kept outside the
library to check and time the TIR consumer against (tests/test_fused_spmm_nest.py,
``bench.fused_spmm_nest``); it hooks into :mod:`tests.sparse_oracles.fused_spmm_source`.
"""
from __future__ import annotations

from typing import Sequence

from schedules.fusion.einsum_dag import EinsumDAG
from schedules.fusion.group_codegen import _CHAINS, KernelParams, _local_names, _loop, _reduce_partials, _vec
from schedules.fusion.row_forms import RowOp
from schedules.sparse.executors.codegen import Code
from tests.sparse_oracles.fused_spmm_source import RowConsumer
from tvm_ext.errors import ScheduleError

__all__ = ["spmm_consumer"]


class _SpmmConsumerCode:
    """The ops fused behind an SpMM, as the code of the executor's :class:`RowConsumer` hooks.

    Reductions ``xᵀS`` / ``Sᵀy`` add the finished row tile into per-part
    partials (the other operand is read at the row: the SpMM's own ``B`` when
    ``A`` is square, or a stored tensor); row maps ``out = [add ±] S·W`` add
    the tile's contribution to the output row, which a row prologue
    initialises.  Parameters are declared in the order the kernel takes them.
    """

    def __init__(self, spmm: RowOp, consumers: Sequence[RowOp], storage: dict, stored: set,
                 dag: EinsumDAG, dtype: str, lanes: int):
        self.spmm, self.consumers, self.storage, self.stored = spmm, consumers, storage, stored
        self.dtype, self.lanes = dtype, lanes
        self.prm = KernelParams(dag, dtype)
        self.S, self.B = spmm.name, spmm.inputs[1]
        self.square = dag.tensors[spmm.inputs[0]].shape[0] == dag.tensors[spmm.inputs[0]].shape[1]
        self.names = _local_names(consumers)
        self.reds = [f for f in consumers if f.kind == "rowred"]
        self.maps = [f for f in consumers if f.kind == "rowmap"]
        S = self.S
        for f in consumers:
            if f.kind not in ("rowred", "rowmap"):
                raise ScheduleError(f"op {f.name!r} ({f.kind}) cannot be fused into the SpMM {S!r}")
            if f.kind == "rowmap" and (f.inputs[0] != S or f.name not in stored or f.addend == S):
                raise ScheduleError(f"row map {f.name!r} must read {S!r} as its row operand and be stored")
            if f.kind == "rowred" and S not in f.inputs:
                raise ScheduleError(f"reduction {f.name!r} does not read {S!r}")
        prm, names = self.prm, self.names
        self.parts = {f.name: prm.partial(f, names[f.name]) for f in self.reds}
        self.red_outs = {f.name: prm.tensor(f.name, storage, False) for f in self.reds}
        self.smalls = {f.name: prm.tensor(f.inputs[1], storage, False) for f in self.maps}
        self.outs = {f.name: prm.tensor(f.name, storage, True) for f in self.maps}
        # the operands read at the row, declared now: the kernel's parameters are fixed when the
        # consumer is made, before its hooks run
        for f in self.maps:
            if f.addend is not None:
                self.other(f.addend, "0", "0")
        for f in self.reds:
            self.other(f.inputs[0] if f.inputs[1] == S else f.inputs[1], "0", "0")

    def other(self, t: str, col: str, row: str) -> str:
        """Tensor ``t`` at ``[row, col]``: an operand other than the tile being finished."""
        if t == self.S:
            raise ScheduleError(f"an op reads {self.S!r} at columns outside the row tile being finished; "
                                "no fused kernel")
        if t == self.B:
            if not self.square:
                raise ScheduleError(f"{t!r} is read by row, but the SpMM's A is not square")
            return f"B[{row}, {col}]"
        return f"{self.prm.tensor(t, self.storage, True)}[{row}, {col}]"

    def row_prologue(self, code: Code, row: str) -> None:
        """Initialise each row map's output row: its addend, or zero."""
        dtype, lanes = self.dtype, self.lanes
        for f in self.maps:
            out = self.outs[f.name]
            if f.addend is not None:
                _vec(code, f.cols[0], lanes,
                     lambda c, f=f, out=out: f"{out}[{row}, {c}] = {self.other(f.addend, c, row)}")
            else:
                _vec(code, f.cols[0], lanes, lambda c, out=out: f"{out}[{row}, {c}] = T.{dtype}(0)")

    def part_prologue(self, code: Code) -> None:
        """Per-part accumulators, kept in registers when small."""
        dtype, lanes = self.dtype, self.lanes
        for f in self.maps:  # the row map's partial sums, and the finished row of S it reads back
            code(f'x_{self.names[f.name]} = T.decl_buffer(({_CHAINS}, {f.cols[0]}), "{dtype}", scope="local")')
            code(f'z_{self.names[f.name]} = T.decl_buffer(({f.inner},), "{dtype}", scope="local")')
        for f in self.reds:
            r = f"r_{self.names[f.name]}"
            code(f'{r} = T.decl_buffer(({f.cols[0]}, {f.cols[1]}), "{dtype}", scope="local")')
            with code.block(f"for a in {_loop(f.cols[0])}:"):
                _vec(code, f.cols[1], lanes, lambda c, r=r: f"{r}[a, {c}] = T.{dtype}(0)")

    def part_epilogue(self, code: Code) -> None:
        """Store each reduction's per-part accumulator to its slot of the partial-sum workspace."""
        for f in self.reds:
            r, part = f"r_{self.names[f.name]}", self.parts[f.name]
            with code.block(f"for a in {_loop(f.cols[0])}:"):
                _vec(code, f.cols[1], self.lanes, lambda c, r=r, part=part: f"{part}[t, a, {c}] = {r}[a, {c}]")

    def row_tile(self, code: Code, tier, row: str, value) -> None:
        """Use one finished row tile of ``S``: add it into the reductions and the row maps."""
        for f in self.reds:
            r = f"r_{self.names[f.name]}"
            x, y = f.inputs
            if y == self.S:
                with code.block(f"for a in {_loop(f.cols[0])}:"):
                    tier.emit(code, f"{r}[a, {tier.col()}] = {r}[a, {tier.col()}] + "
                                    f"{self.other(x, 'a', row)} * {value(tier.lane())}")
            else:
                with code.block(f"for b in {_loop(f.cols[1])}:"):
                    tier.emit(code, f"{r}[{tier.col()}, b] = {r}[{tier.col()}, b] + "
                                    f"{value(tier.lane())} * {self.other(y, 'b', row)}")
        for f in self.maps:
            _rowmap_tile(code, f, self.names[f.name], tier, row, value, self.outs[f.name], self.smalls[f.name],
                         self.dtype, self.lanes)

    def epilogue(self, code: Code) -> None:
        """After the parallel loop: sum each reduction's partials."""
        _reduce_partials(code, self.reds, self.red_outs, self.parts, self.dtype)

    def consumer(self) -> RowConsumer:
        """The :class:`RowConsumer` whose hooks are these methods (only the ones the ops need)."""
        S, B, reds, maps = self.S, self.B, self.reds, self.maps
        return RowConsumer(
            key=("fusion", tuple((f.kind, tuple("S" if t == S else "B" if t == B else "t" for t in f.inputs),
                                  f.addend is not None, f.sign, f.cols, f.inner) for f in self.consumers),
                 self.spmm.name in self.stored, self.lanes, self.dtype),
            row_tile=self.row_tile, buffers=tuple(self.prm.buffers), size_vars=("M", "NP"),
            part_prologue=self.part_prologue, part_epilogue=self.part_epilogue if reds else None,
            row_prologue=self.row_prologue if maps else None,
            epilogue=self.epilogue if reds else None,
            writes_c=self.spmm.name in self.stored)


def spmm_consumer(spmm: RowOp, consumers: Sequence[RowOp], storage: dict, stored: set,
                  dag: EinsumDAG, dtype: str, lanes: int) -> tuple[RowConsumer, list]:
    """The rest of an SpMM's group as a :class:`RowConsumer` of its finished row tiles, and its parameters.

    Returns ``(consumer, spec)``: ``spec`` lists the consumer's kernel
    parameters as ``("tensor", storage)`` / ``("partial", shape)`` entries
    (see :class:`KernelParams`).  Raises :class:`ScheduleError` for an op that
    cannot consume the tile.

    >>> from schedules.fusion.builders import block_cg_dag
    >>> from schedules.fusion.groups import plan_fusion
    >>> from schedules.fusion.row_forms import row_form, streamed_rank
    >>> plan = plan_fusion(block_cg_dag(2, 4096, 8, 20_000, setup=False))
    >>> S, D = (row_form(plan.dag, plan.dag.op(o), streamed_rank(plan, o)) for o in ("S1", "Delta1"))
    >>> consumer, spec = spmm_consumer(S, [D], {"S1": "S", "P0": "P", "Delta1": "Delta"}, {"S1", "Delta1"},
    ...                                plan.dag, "float64", 8)
    >>> spec, consumer.writes_c
    ([('partial', (8, 8)), ('tensor', 'Delta')], True)
    """
    code = _SpmmConsumerCode(spmm, consumers, storage, stored, dag, dtype, lanes)
    return code.consumer(), code.prm.spec


def _rowmap_tile(code: Code, f: RowOp, name: str, tier, row: str, value, out: str, small: str,
                 dtype: str, lanes: int) -> None:
    """``out[row, :] ±= Σ_{n in tile} S[row, n]·small[n, :]``.

    The finished tile is first copied to a local row (vector stores; the
    SpMM's accumulators stay in registers), then read back one scalar at a
    time as broadcasts, over :data:`_CHAINS` interleaved accumulators (the sum
    over the tile is a dependency chain).
    """
    x, z, c0 = f"x_{name}", f"z_{name}", f.cols[0]
    op = "+" if f.sign > 0 else "-"
    tier.emit(code, f"{z}[{tier.col()}] = {value(tier.lane())}")
    with code.block(f"for u in T.unroll({_CHAINS}):"):
        _vec(code, c0, lanes, lambda c: f"{x}[u, {c}] = T.{dtype}(0)")
    if tier.mask:
        with code.block(f"for nn in range({tier.mask}):"):
            _vec(code, c0, lanes, lambda c: f"{x}[0, {c}] = {x}[0, {c}] + {z}[{tier.base} + nn] * {small}[{tier.base} + nn, {c}]")
    else:
        full, rest = divmod(tier.width, _CHAINS)
        with code.block(f"for q in range({full}):"):
            with code.block(f"for u in T.unroll({_CHAINS}):"):
                _vec(code, c0, lanes, lambda c: f"{x}[u, {c}] = {x}[u, {c}] + {z}[{tier.base} + q * {_CHAINS} + u] * "
                                                f"{small}[{tier.base} + q * {_CHAINS} + u, {c}]")
        for nn in range(full * _CHAINS, full * _CHAINS + rest):
            _vec(code, c0, lanes, lambda c, nn=nn: f"{x}[0, {c}] = {x}[0, {c}] + {z}[{tier.base} + {nn}] * "
                                                   f"{small}[{tier.base} + {nn}, {c}]")
    total = " + ".join(f"{x}[{u}, {{c}}]" for u in range(_CHAINS))
    _vec(code, c0, lanes, lambda c: f"{out}[{row}, {c}] = {out}[{row}, {c}] {op} ({total.format(c=c)})")
