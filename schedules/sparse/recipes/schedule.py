"""Executor-side schedule steps applied to the compacted loop nest (after the recipe's steps).

* :class:`Reorder`: permute the loops of the compacted nest (legal when no
  loop moves outside a loop its bounds read), e.g. DIA's ``(p, i) -> (i, p)``
  so that the row is outermost.
* :class:`RowTile`: the register-blocked micro-kernel on a row-outermost nest:
  ``parallel`` rows in work-balanced parts, ``tile_columns`` (``unroll``
  vectors of ``lanes`` columns of ``C`` held in registers across the whole
  row), ``interleave`` (the innermost loop's iterations spread over
  independent partial sums), ``vectorize`` the lanes.  Its knobs come from
  :class:`~schedules.sparse.executors.spec.ExecParams` (same resolution as the
  hand-written executors: the target's vector width, the N-dependent unroll).
* :class:`Scatter`: entries whose output row is data (COO): scale ``C``,
  then vector updates, parallel over row-aligned chunks.

These steps act on the nest's TIR loops, not on text; loops outside the
data-dependent ones can also be split/reordered/parallelised with
``tvm.s_tir.Schedule`` on :func:`~.lower.naive_primfunc` (see
:meth:`~.recipe.Recipe.tir_schedule`).

>>> MicroKernel(lanes=8, unroll=2, parallel=True).chains(2, spmv=False)
2
"""
from __future__ import annotations

from dataclasses import dataclass

from schedules.sparse.executors.tiles import MIN_CHAINS
from schedules.sparse.recipes.nest import SparseNest
from schedules.sparse.recipes.steps import permute_levels

__all__ = ["MicroKernel", "Reorder", "RowTile", "Scatter"]


@dataclass(frozen=True)
class MicroKernel:
    """Resolved micro-kernel knobs: vector ``lanes`` over N, ``unroll`` vectors per row tile,
    ``parallel`` parts (``dynamic``: claimed by the threads at run time); SpMV interleaves
    ``unroll`` partial sums; ``row_runs``: a scatter sums row runs in registers where the
    nest's entries allow (else adds each entry into ``C``)."""

    lanes: int
    unroll: int
    parallel: bool
    dynamic: bool = False
    row_runs: bool = True

    def chains(self, tier_unroll: int, spmv: bool) -> int:
        """Independent partial-sum sets: enough FMA chains in flight (``MIN_CHAINS``)."""
        if spmv:
            return max(1, self.unroll)
        return max(1, MIN_CHAINS // tier_unroll)

    @classmethod
    def from_params(cls, params) -> "MicroKernel":
        return cls(int(params.lanes), int(params.unroll), bool(params.parallel),
                   bool(getattr(params, "dynamic", False)) and bool(params.parallel),
                   getattr(params, "row_runs", None) is not False)


@dataclass(frozen=True)
class Reorder:
    """Permute the compacted nest's loops (``order`` outer to inner)."""

    order: tuple
    kinds: tuple = ("spmm", "spmv")

    @property
    def label(self) -> str:
        only = "" if set(self.kinds) >= {"spmm", "spmv"} else f" [{', '.join(self.kinds)}]"
        return f"reorder({', '.join(self.order)}){only}"

    def on_nest(self, nest: SparseNest) -> SparseNest:
        return permute_levels(nest, self.order, self.label)


@dataclass(frozen=True)
class RowTile:
    """Lower with :func:`~.row_tile.row_tile_primfunc` (the micro-kernel steps); with
    ``vector_rows``, SpMV nests whose inner ranges do not depend on the row use
    :func:`~.lower.vector_rows_primfunc` (one vector over ``lanes`` rows) instead."""

    vector_rows: bool = True

    @property
    def label(self) -> str:
        text = ("parallel(row parts) -> tile_columns(N, lanes, unroll) -> interleave(innermost) "
                "-> vectorize(lanes)")
        return text + (" [SpMV: vectorize(rows)]" if self.vector_rows else "")


@dataclass(frozen=True)
class Scatter:
    """Lower with :func:`~.lower.scatter_primfunc`."""

    label: str = ("scale(C) -> parallel(row-aligned chunks: segmented row sums | row blocks) "
                  "-> vectorize(N)")
