"""A row consumer fused into the register-blocked row-tile executor, built in TIR (GOGETA's pipelining).

A fused step of the GOGETA pipeline runs the ops that read an SpMM's output
inside the SpMM's row loop, on each output row tile while it is still in
registers or cache (``Δ = PᵀS`` per-part partial sums, a GCN's ``Z·W``).
:func:`fused_row_tile_primfunc` lowers a row-outermost recipe nest (CSR,
BCSR) with the same micro-kernel steps as :mod:`.row_tile` (rows in
``T.parallel`` parts, one block per (row tile, column tier), the tile's
accumulators in registers, the innermost loop interleaved over partial sums,
``C`` written once) and applies a :class:`RowTileConsumer` to it:

* its kernel parameters follow ``C_out`` (or ``B`` when it does not store the
  product: ``writes_c`` false);
* per part of the parallel loop: :meth:`BoundConsumer.open_part` (declare and
  zero per-part accumulators) and :meth:`BoundConsumer.close_part` (store them);
* per output row: :meth:`BoundConsumer.row_prologue`, before the row's tiles;
* per finished row tile, inside its block after the write:
  :meth:`BoundConsumer.row_tile` on a :class:`FinishedTile`;
* after the parallel loop: :meth:`BoundConsumer.epilogue`.

The hooks build TIR with the IR builder (``f.store``, ``f.loop``); nothing is
printed or parsed.

>>> from schedules.sparse.recipes.library import csr_recipe
>>> from schedules.sparse.executors.csr import CSRParams
>>> f = fused_row_tile_primfunc(csr_recipe().nest("float64"), CSRParams(8, 1, True), _NoConsumer())
>>> [p.name for p in f.params][:4]
['offset', 'explicit_k', 'a_data', 'part']
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from schedules.sparse.recipes.lower import _Func, _if, _lanes, _Tier, _tiers, part_buffer, simplify_guards
from schedules.sparse.recipes.nest import SparseNest
from schedules.sparse.recipes.row_tile import _row_block, _write_block, block_rows, row_tile_part
from schedules.sparse.recipes.schedule import MicroKernel
from tvm_ext.errors import ConfigError

__all__ = ["RowTileConsumer", "BoundConsumer", "FinishedTile", "fused_row_tile_primfunc"]


@dataclass(frozen=True)
class FinishedTile:
    """One finished output row tile, as :meth:`BoundConsumer.row_tile` sees it.

    ``row`` is the output row, ``column(lane)`` the output column of tile lane
    ``lane``, ``value(lane)`` the finished product there (``C_out`` as stored, or
    ``alpha * acc`` when the product is not stored); :meth:`lanes` runs a
    statement over the tile's lanes (vectorised, unrolled or masked like the
    tile's own loops).
    """

    func: _Func
    tier: _Tier
    row: Any
    column: Callable[[Any], Any]
    value: Callable[[Any], Any]

    def lanes(self, stmt: Callable[[Any], None]) -> None:
        """``stmt(lane)`` over the tile's lanes."""
        _lanes(self.func, self.tier, stmt)

    @property
    def width(self) -> int:
        """Columns of a whole tile (a masked tile uses the first :attr:`mask` of them)."""
        return self.tier.width

    @property
    def mask(self):
        """The active lane count of a masked remainder tile (a TIR expression), else None."""
        return self.tier.mask


class BoundConsumer:
    """A consumer's hooks for one PrimFunc under construction (see the module docstring).

    ``params``: the kernel parameters it adds (TIR buffers); the hooks that a
    consumer does not need stay no-ops.
    """

    params: Sequence = ()

    def open_part(self, f: _Func, t) -> None:
        """Inside the parallel loop, before part ``t``'s rows."""

    def close_part(self, f: _Func, t) -> None:
        """Inside the parallel loop, after part ``t``'s rows."""

    def row_prologue(self, f: _Func, row) -> None:
        """Before the tiles of output row ``row``."""

    def row_tile(self, tile: FinishedTile) -> None:
        """On each finished row tile."""

    def epilogue(self, f: _Func) -> None:
        """After the parallel loop."""


class RowTileConsumer(ABC):
    """What a fused kernel does with the SpMM's finished row tiles (a typed description).

    ``key`` is what the consumer adds to the kernel-cache signature,
    ``writes_c`` whether ``C_out`` is stored (false: ``C_in``/``C_out`` are not
    parameters and ``beta`` is ignored).  :meth:`bind` gives the hooks for one
    PrimFunc, with its row count ``M`` and part-array length ``NP``.
    """

    key: tuple = ()
    writes_c: bool = True

    @abstractmethod
    def bind(self, M, NP) -> BoundConsumer:
        """The hooks and parameters for one PrimFunc (``M``, ``NP``: its size variables)."""


class _NoConsumer(RowTileConsumer):
    """Consumes nothing: the plain parallel row-tile SpMM (a doctest and test baseline)."""

    key = ("none",)

    def bind(self, M, NP) -> BoundConsumer:
        return BoundConsumer()


def fused_row_tile_primfunc(nest: SparseNest, params, consumer: RowTileConsumer):
    """The row-tile SpMM of ``nest`` (``params`` resolved) with ``consumer`` fused into its row tiles.

    Arguments: ``*format arrays, part, B, [C_in, C_out], *consumer parameters,
    alpha, beta``; the parts are fixed (each part's accumulators belong to one
    iteration of the parallel loop).  :class:`ConfigError` for an SpMV nest, a
    serial kernel, or a nest whose tiles do not hold their rows in one block.
    """
    if nest.kind != "spmm":
        raise ConfigError(f"a fused row consumer needs kind='spmm', got {nest.kind!r}")
    if not params.parallel:
        raise ConfigError("a fused row consumer needs a parallel kernel (its partial sums are per part)")
    kernel = MicroKernel(int(params.lanes), int(params.unroll), True, False)
    row_tile_part(nest, kernel)
    from schedules.sparse.recipes.lower import row_structure

    outer, rows, row_level = row_structure(nest)
    if block_rows(nest) != rows:
        raise ConfigError("a fused row consumer needs the row tile's rows in one block")
    part = part_buffer()
    f = _Func(nest, "recipe_row_spmm_fused", [part])
    bound = consumer.bind(nest.sizes["M"], part.shape[0])
    keep = len(f.params) - (0 if consumer.writes_c else 2)
    f.params = f.params[:keep] + list(bound.params)
    with f:
        _emit_parts(f, nest, kernel, part, bound, consumer.writes_c, (outer, rows, row_level))
    return f.get()


def _emit_parts(f: _Func, nest: SparseNest, kernel: MicroKernel, part, bound: BoundConsumer, writes_c: bool,
                found: tuple) -> None:
    """The parallel part loop: each part's hooks around its row tiles (:mod:`.row_tile`'s blocks,
    finished by :func:`_finisher`), then the epilogue."""
    outer, rows, row_level = found
    tiers = _tiers(f.N, kernel.lanes, kernel.unroll, False)
    guards = simplify_guards(nest, nest.guards)
    finish = _finisher(bound, writes_c)
    M = nest.sizes["M"]
    NP = part.shape[0]
    with f.loop("parallel", 0, NP - 1, "t") as t:
        bound.open_part(f, t)
        with f.loop("serial", part[t], part[t + 1], "i") as i:
            if rows == 1:
                bound.row_prologue(f, i)
            else:
                with f.loop("serial", 0, rows, "r0") as r0:
                    with _if(f.T, i * rows + r0 < M):
                        bound.row_prologue(f, i * rows + r0)
            for tier in tiers:
                chains = kernel.chains(tier.unroll * rows, False)
                _row_block(f, nest, tier, chains, i, outer, rows, row_level, nest.levels[1:], guards,
                           finish=finish)
        bound.close_part(f, t)
    bound.epilogue(f)


def _finisher(bound: BoundConsumer, writes_c: bool) -> Callable:
    """The end of a row-tile block (in place of :mod:`.row_tile`'s write): ``C_out`` written unless
    the consumer takes the product instead, then each row's finished tile handed to the consumer."""
    def finish(f: _Func, nest: SparseNest, tier: _Tier, acc, held: int, out_row: Callable, perm,
               col: Callable, check_rows: bool) -> None:
        if writes_c:
            _write_block(f, nest, tier, acc, held, out_row, perm, col, check_rows=check_rows)
        with f.loop("unroll", 0, held, "r") as r:
            row = out_row(r)
            if writes_c:
                def value(lane, row=row):
                    return f.C_out[row, col(lane)]
            else:
                def value(lane, r=r):
                    return f.alpha * acc[r, lane]
            with _if(f.T, row < nest.sizes["M"] if check_rows else None):
                bound.row_tile(FinishedTile(f, tier, row, col, value))
    return finish
