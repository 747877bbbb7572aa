"""The ops fused behind an SpMM, as a TIR consumer of the sparse executor's finished row tiles.

:func:`spmm_consumer` turns the rest of an SpMM's fused group into a
:class:`~schedules.sparse.recipes.consumer.RowTileConsumer` (built with TVM's IR
builder, see :func:`~schedules.sparse.recipes.consumer.fused_row_tile_primfunc`):

* a reduction ``xᵀS`` / ``Sᵀy`` (block CG's ``Δ = PᵀS``) adds each finished
  tile into a per-part accumulator, stored to the part's slot of a partial-sum
  workspace and summed over the parts after the parallel loop; the other
  operand is read at the row (the SpMM's own ``B`` when ``A`` is square, or a
  stored tensor);
* a row map ``out = [add ±] S·W`` (a GCN's ``X1 = Z·W``, whose ``Z`` is never
  stored) initialises its output row in the row prologue and adds each tile's
  contribution: the tile is copied to a local row, then read back one value at
  a time as broadcasts over interleaved accumulators.

Parameters are declared in the order the kernel takes them, each recorded in
the returned spec (``("tensor", storage)`` / ``("partial", shape)``, as
:class:`~schedules.fusion.group_codegen.KernelParams` records them).

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
from __future__ import annotations

from typing import Any, Callable, Sequence

from schedules.fusion.einsum_dag import EinsumDAG
from schedules.fusion.group_codegen import _local_names, fresh_name
from schedules.fusion.row_forms import RowOp, family
from schedules.sparse.recipes.consumer import BoundConsumer, FinishedTile, RowTileConsumer
from tvm_ext.errors import ScheduleError

__all__ = ["SpmmRowConsumer", "spmm_consumer"]

#: Vector loops with more whole vectors than this are not unrolled.
_MAX_UNROLL = 8
#: Interleaved accumulators of a fused row map's sum over an SpMM row tile.
_CHAINS = 4


class SpmmRowConsumer(RowTileConsumer):
    """The reductions and row maps that read an SpMM's output ``S``, fused into its row tiles.

    ``spec`` lists the consumer's kernel parameters in order (see the module
    docstring); :meth:`bind` builds their TIR buffers and the hooks.
    """

    def __init__(self, spmm: RowOp, consumers: Sequence[RowOp], storage: dict, stored: set,
                 dag: EinsumDAG, dtype: str, lanes: int):
        self.spmm, self.consumers, self.storage, self.dag = spmm, tuple(consumers), storage, dag
        self.dtype, self.lanes = dtype, int(lanes)
        self.S, self.B = spmm.name, spmm.inputs[1]
        a_shape = dag.tensors[spmm.inputs[0]].shape
        self.square = a_shape[0] == a_shape[1]
        self.names = _local_names(consumers)
        self.reds = [f for f in consumers if f.kind == "rowred"]
        self.maps = [f for f in consumers if f.kind == "rowmap"]
        for f in consumers:
            if f.kind not in ("rowred", "rowmap"):
                raise ScheduleError(f"op {f.name!r} ({f.kind}) cannot be fused into the SpMM {self.S!r}")
            if f.kind == "rowmap" and (f.inputs[0] != self.S or f.name not in stored or f.addend == self.S):
                raise ScheduleError(f"row map {f.name!r} must read {self.S!r} as its row operand and be stored")
            if f.kind == "rowred" and self.S not in f.inputs:
                raise ScheduleError(f"reduction {f.name!r} does not read {self.S!r}")
        self.writes_c = spmm.name in stored
        self.key = ("fusion", tuple((f.kind, tuple("S" if t == self.S else "B" if t == self.B else "t"
                                                   for t in f.inputs), f.addend is not None, f.sign, f.cols,
                                     f.inner) for f in consumers), self.writes_c, self.lanes, dtype)
        self.params: list[tuple[str, str, Any]] = []   # (kind, kernel-local name, storage | shape)
        self._local: dict[str, str] = {}               # storage -> kernel-local name
        self._shapes: dict[str, tuple] = {}            # kernel-local name -> shape ("M", "NP" symbolic)
        self.parts = {f.name: self._partial(f) for f in self.reds}
        self.red_outs = {f.name: self._tensor(f.name, False) for f in self.reds}
        self.smalls = {f.name: self._tensor(f.inputs[1], False) for f in self.maps}
        self.outs = {f.name: self._tensor(f.name, True) for f in self.maps}
        self.addends = {f.name: self._other(f.addend) for f in self.maps if f.addend is not None}
        self.others = {f.name: self._other(f.inputs[0] if f.inputs[1] == self.S else f.inputs[1])
                       for f in self.reds}

    @property
    def spec(self) -> list[tuple[str, Any]]:
        """The consumer's kernel parameters: ``("tensor", storage)`` or ``("partial", shape)``."""
        return [(kind, what) for kind, _, what in self.params]

    def _tensor(self, t: str, streamed: bool) -> str:
        """The parameter holding tensor ``t`` (rows symbolic when ``streamed``), added on first use."""
        name = self.storage[t]
        if name not in self._local:
            local = self._local[name] = fresh_name(f"g_{family(t)}", self._local.values())
            shape = self.dag.tensors[t].shape
            self.params.append(("tensor", local, name))
            self._shapes[local] = (("M",) if streamed else (int(shape[0]),)) + tuple(int(d) for d in shape[1:])
        return self._local[name]

    def _partial(self, f: RowOp) -> str:
        """The per-part partial-sum workspace of reduction ``f``."""
        name = f"w_{self.names[f.name]}"
        self.params.append(("partial", name, tuple(f.cols)))
        self._shapes[name] = ("NP",) + tuple(int(c) for c in f.cols)
        return name

    def _other(self, t: str) -> str | None:
        """The parameter of operand ``t`` read at the row being finished (None: the SpMM's ``B``)."""
        if t == self.S:
            raise ScheduleError(f"an op reads {self.S!r} at columns outside the row tile being finished; "
                                "no fused kernel")
        if t == self.B:
            if not self.square:
                raise ScheduleError(f"{t!r} is read by row, but the SpMM's A is not square")
            return None
        return self._tensor(t, True)

    def bind(self, M, NP) -> BoundConsumer:
        from tvm import tirx

        sizes = {"M": M, "NP": NP}
        bufs = {name: tirx.decl_buffer(tuple(sizes.get(d, d) for d in self._shapes[name]), self.dtype, name)
                for _, name, _ in self.params}
        return _SpmmTileOps(self, bufs)


class _SpmmTileOps(BoundConsumer):
    """:class:`SpmmRowConsumer`'s hooks for one PrimFunc (its buffers by kernel-local name)."""

    def __init__(self, desc: SpmmRowConsumer, bufs: dict):
        self.d, self.bufs = desc, bufs
        self.params = [bufs[name] for _, name, _ in desc.params]
        self.acc: dict[str, Any] = {}

    def _row_of(self, f, local: str | None, row, col):
        """Operand ``local`` (None: ``B``) at ``[row, col]``."""
        return f.B[row, col] if local is None else self.bufs[local][row, col]

    def open_part(self, f, t) -> None:
        """Per-part accumulators (registers when small): the row maps' partial sums and tile copy,
        the reductions' sums (zeroed)."""
        d = self.d

        def local(name: str, shape: tuple):
            buf = f.T.alloc_buffer(shape, d.dtype, scope="local")
            f.IRBuilder.name(name, buf)
            self.acc[name] = buf
            return buf
        for m in d.maps:
            n = d.names[m.name]
            local(f"x_{n}", (_CHAINS, m.cols[0]))
            local(f"z_{n}", (m.inner,))
        for r in d.reds:
            acc = local(f"r_{d.names[r.name]}", tuple(r.cols))
            with _loop(f, r.cols[0], "a") as a:
                _vec(f, r.cols[1], d.lanes, lambda c, a=a, acc=acc: f.store(acc, _zero(d.dtype), [a, c]))

    def close_part(self, f, t) -> None:
        """Each reduction's accumulator to its part's slot of the partial-sum workspace."""
        d = self.d
        for r in d.reds:
            acc, part = self.acc[f"r_{d.names[r.name]}"], self.bufs[d.parts[r.name]]
            with _loop(f, r.cols[0], "a") as a:
                _vec(f, r.cols[1], d.lanes, lambda c, a=a, acc=acc, part=part: f.store(part, acc[a, c], [t, a, c]))

    def row_prologue(self, f, row) -> None:
        """Each row map's output row: its addend, or zero."""
        d = self.d
        for m in d.maps:
            out = self.bufs[d.outs[m.name]]
            if m.addend is not None:
                add = d.addends[m.name]
                _vec(f, m.cols[0], d.lanes,
                     lambda c, out=out, add=add: f.store(out, self._row_of(f, add, row, c), [row, c]))
            else:
                _vec(f, m.cols[0], d.lanes, lambda c, out=out: f.store(out, _zero(d.dtype), [row, c]))

    def row_tile(self, tile: FinishedTile) -> None:
        """Add the finished tile of ``S`` into the reductions and the row maps."""
        f, d = tile.func, self.d
        for r in d.reds:
            acc, other = self.acc[f"r_{d.names[r.name]}"], d.others[r.name]
            if r.inputs[1] == d.S:          # xᵀS: acc[a, n] += x[row, a] * S[row, n]
                with _loop(f, r.cols[0], "a") as a:
                    tile.lanes(lambda lane, a=a, acc=acc, other=other: f.store(
                        acc, acc[a, tile.column(lane)] + self._row_of(f, other, tile.row, a) * tile.value(lane),
                        [a, tile.column(lane)]))
            else:                           # Sᵀy: acc[n, b] += S[row, n] * y[row, b]
                with _loop(f, r.cols[1], "b") as b:
                    tile.lanes(lambda lane, b=b, acc=acc, other=other: f.store(
                        acc, acc[tile.column(lane), b] + tile.value(lane) * self._row_of(f, other, tile.row, b),
                        [tile.column(lane), b]))
        for m in d.maps:
            self._rowmap_tile(tile, m)

    def _rowmap_tile(self, tile: FinishedTile, m: RowOp) -> None:
        """``out[row, :] ±= Σ_{n in tile} S[row, n]·small[n, :]``: the tile copied to a local row
        (vector stores), read back one value at a time as broadcasts over :data:`_CHAINS`
        interleaved accumulators (the sum over the tile is a dependency chain)."""
        f, d = tile.func, self.d
        n = d.names[m.name]
        x, z = self.acc[f"x_{n}"], self.acc[f"z_{n}"]
        small, out = self.bufs[d.smalls[m.name]], self.bufs[d.outs[m.name]]
        c0, dtype = m.cols[0], d.dtype
        tile.lanes(lambda lane: f.store(z, tile.value(lane), [tile.column(lane)]))
        with f.loop("unroll", 0, _CHAINS, "u") as u:
            _vec(f, c0, d.lanes, lambda c: f.store(x, _zero(dtype), [u, c]))

        def add(chain, nn):
            _vec(f, c0, d.lanes, lambda c: f.store(x, x[chain, c] + z[tile.column(nn)] * small[tile.column(nn), c],
                                                   [chain, c]))
        if tile.mask is not None:
            with f.loop("serial", 0, tile.mask, "nn") as nn:
                add(0, nn)
        else:
            full, rest = divmod(tile.width, _CHAINS)
            with f.loop("serial", 0, full, "q") as q:
                with f.loop("unroll", 0, _CHAINS, "u") as u:
                    add(u, q * _CHAINS + u)
            for nn in range(full * _CHAINS, full * _CHAINS + rest):
                add(0, nn)

        def total(c):
            s = x[0, c]
            for u in range(1, _CHAINS):
                s = s + x[u, c]
            return s
        row = tile.row
        _vec(f, c0, d.lanes, lambda c: f.store(out, out[row, c] + total(c) if m.sign > 0 else out[row, c] - total(c),
                                               [row, c]))

    def epilogue(self, f) -> None:
        """After the parallel loop: each reduction's output is the sum of its parts' partials."""
        d = self.d
        for r in d.reds:
            out, part = self.bufs[d.red_outs[r.name]], self.bufs[d.parts[r.name]]
            with f.loop("serial", 0, r.cols[0], "a0") as a0:
                with f.loop("serial", 0, r.cols[1], "a1") as a1:
                    f.store(out, _zero(d.dtype), [a0, a1])
                    with f.loop("serial", 0, part.shape[0] - 1, "tt") as tt:
                        f.store(out, out[a0, a1] + part[tt, a0, a1], [a0, a1])


def _zero(dtype: str):
    from tvm import tirx

    return tirx.const(0, dtype)


def _loop(f, n: int, name: str):
    """A loop over ``n`` small-rank entries: unrolled when short."""
    return f.loop("unroll" if n <= 2 * _MAX_UNROLL else "serial", 0, n, name)


def _vec(f, cols: int, lanes: int, stmt: Callable[[Any], None]) -> None:
    """``stmt(col)`` over ``cols`` columns: whole ``lanes``-wide vectors, then the rest."""
    full, rest = divmod(int(cols), lanes)
    if full == 1:
        with f.loop("vectorized", 0, lanes, "jj") as jj:
            stmt(jj)
    elif full > 1:
        with f.loop("unroll" if full <= _MAX_UNROLL else "serial", 0, full, "jv") as jv:
            with f.loop("vectorized", 0, lanes, "jj") as jj:
                stmt(jv * lanes + jj)
    if rest:
        with f.loop("vectorized", 0, rest, "jj") as jj:
            stmt(full * lanes + jj if full else jj)


def spmm_consumer(spmm: RowOp, consumers: Sequence[RowOp], storage: dict, stored: set,
                  dag: EinsumDAG, dtype: str, lanes: int) -> tuple[SpmmRowConsumer, list]:
    """The rest of an SpMM's group as a :class:`SpmmRowConsumer` of its finished row tiles, and its
    parameters' spec (see the module docstring).  Raises :class:`ScheduleError` for an op that
    cannot consume the tile.
    """
    consumer = SpmmRowConsumer(spmm, consumers, storage, stored, dag, dtype, lanes)
    return consumer, consumer.spec
