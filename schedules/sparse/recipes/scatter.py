"""Scatter executors: nests whose output row is data (COO, CSB).

``C_out`` is scaled first (``beta * C_in``), then every entry adds
``alpha * value * B[col, :]`` into its row.  Row-sorted entries (COO) are cut
into row-aligned chunks and each column tile sums a run of equal rows in
registers (segmented sum); loops that own disjoint rows (CSB's block rows,
marked by a :class:`~.steps.Tile` of the row) run in ``T.parallel``.

>>> from schedules.sparse.recipes.library import coo_recipe
>>> from schedules.sparse.recipes.schedule import MicroKernel
>>> f, part = scatter_primfunc(coo_recipe().nest(), MicroKernel(8, 1, True), row_sorted=True)
>>> part
'chunks'
"""
from __future__ import annotations

from typing import Callable, Sequence

from schedules.sparse.recipes.lower import (_const, _emit_levels, _Func, _if, _lanes, _Tier, _tiers,
                                            part_buffer, simplify_guards)
from schedules.sparse.recipes.nest import SparseNest, subst

__all__ = ["scatter_primfunc", "scatter_part", "emit_scatter"]


def scatter_primfunc(nest: SparseNest, kernel, *, row_sorted: bool, row_runs: bool = False) -> tuple:
    """Scale ``C_out``, then add each entry's ``value * B[col, :]`` into its row.

    With ``kernel.parallel`` and ``row_sorted`` (the outermost loop runs over
    row-sorted entries) the entries are cut into row-aligned chunks
    (``part``), one ``T.parallel`` iteration each.  ``row_runs``: the innermost loop's
    entries are sorted by row within each iteration of the loops outside it (segmented sums
    apply there too).  Returns ``(PrimFunc, part kind)``.
    """
    kind = scatter_part(nest, kernel, row_sorted=row_sorted)
    part = part_buffer() if kind else None
    with _Func(nest, f"recipe_scatter_{nest.kind}", [part] if part is not None else []) as f:
        emit_scatter(f, nest, kernel, part, row_sorted=row_sorted, row_runs=row_runs)
    return f.get(), kind


def scatter_part(nest: SparseNest, kernel, *, row_sorted: bool) -> str | None:
    """The part array :func:`emit_scatter` takes: ``"chunks"`` (row-aligned entry chunks)."""
    return "chunks" if kernel.parallel and row_sorted and nest.levels else None


def emit_scatter(f: _Func, nest: SparseNest, kernel, part, *, row_sorted: bool, row_runs: bool = False,
                 scale: bool = True) -> None:
    """Emit the scatter executor into ``f``; ``scale=False`` adds into ``C_out`` as it is
    (a later part of a split format: HYB's COO remainder after its ELL part)."""
    guards = simplify_guards(nest, nest.guards)
    spmv = nest.kind == "spmv"
    M = nest.sizes["M"]
    T = f.T
    tiers = _tiers(f.N, kernel.lanes, kernel.unroll, spmv)
    loop_kind = "parallel" if kernel.parallel else "serial"
    if scale:
        with f.loop(loop_kind, 0, M, "r") as r:
            with T.If(f.beta == _const(0, nest.dtype)):
                with T.Then():
                    _all_columns(f, tiers, lambda c: f.store(f.C_out, _const(0, nest.dtype),
                                                             [r, c] if not spmv else [r]))
                with T.Else():
                    _all_columns(f, tiers, lambda c: f.store(
                        f.C_out, f.beta * f.c(f.C_in, r, c), [r, c] if not spmv else [r]))

    def update(vmap):
        row, b_row, val = (subst(e, vmap) for e in (nest.row, nest.col, nest.value))
        scaled = f.alpha * val
        _all_columns(f, tiers, lambda c: f.store(
            f.C_out, f.c(f.C_out, row, c) + scaled * f.c(f.B, b_row, c), [row, c] if not spmv else [row]))

    blocks = nest.meta.get("row_blocks")
    if row_sorted and len(nest.levels) == 1 and not guards:
        lv = nest.levels[0]
        if part is not None:
            NP = part.shape[0]
            with f.loop("parallel", 0, NP - 1, "t") as t:
                _segmented_runs(f, nest, tiers, lambda ax, vm: (part[ax[0]], part[ax[0] + 1]),
                                [("t", NP - 1, t, None)])
        else:
            _segmented_runs(f, nest, tiers, lambda ax, vm: (lv.lo, lv.hi), [])
    elif kernel.parallel and nest.levels and nest.levels[0].name == blocks:
        # each iteration of the row-tile loop owns its own output rows: no write conflicts
        first, rest = nest.levels[0], nest.levels[1:]
        if row_runs and not guards:
            _blocked_runs(f, nest, tiers)
        else:
            with f.loop("parallel", first.lo, first.hi, first.name) as b:
                _emit_levels(f, rest, guards, {first.var: b}, update)
    elif part is not None:
        first, rest = nest.levels[0], nest.levels[1:]
        NP = part.shape[0]
        with f.loop("parallel", 0, NP - 1, "t") as t:
            with f.loop("serial", part[t], part[t + 1], first.name) as p:
                _emit_levels(f, rest, guards, {first.var: p}, update)
    else:
        _emit_levels(f, nest.levels, guards, {}, update)


def _segmented_runs(f: _Func, nest: SparseNest, tiers: Sequence[_Tier], lo_hi, axes) -> None:
    """Entries of the innermost loop sorted by output row: each column tile sums a run of
    equal rows in registers and adds it to ``C_out`` once, when the row changes.

    ``axes``: ``(name, extent, loop var, nest var or None)`` of the enclosing loops, bound as
    block axes; ``lo_hi(axis vars)`` the entry range of one block."""
    from contextlib import ExitStack

    from tvm import tirx

    T = f.T
    lv = nest.levels[-1]
    dtype = nest.dtype
    for tier in tiers:
        with ExitStack() as stack:
            if tier.cond is not None:
                stack.enter_context(_if(T, tier.cond))
            if tier.count is not None:
                jo = stack.enter_context(f.loop("serial", 0, tier.count, "jo"))
            stack.enter_context(T.sblock(f"run{tier.suffix}"))
            vmap, bound = {}, []
            for name, extent, loop_var, nest_var in axes:
                v = T.axis.spatial(extent, loop_var)
                f.IRBuilder.name(f"v{name}", v)
                bound.append(v)
                if nest_var is not None:
                    vmap[nest_var] = v
            lo, hi = lo_hi(bound, vmap)
            vj = None
            if tier.count is not None:
                vj = T.axis.spatial(tier.count, jo)
                f.IRBuilder.name("vj", vj)
            base = None if tier.base is None else tier.base(vj)
            acc = T.sblock_alloc_buffer((1, tier.width), dtype, scope="local")
            f.IRBuilder.name("acc", acc)

            def col(lane):
                return None if base is None else base + lane
            _lanes(f, tier, lambda lane: f.store(acc, _const(0, dtype), [0, lane]))
            with f.loop("serial", lo, hi, lv.name) as p:
                at = dict(vmap, **{})
                at[lv.var] = p
                row, b_row, val = (subst(e, at) for e in (nest.row, nest.col, nest.value))
                nxt = subst(nest.row, dict(at, **{}) | {lv.var: tirx.Min(p + 1, hi - 1)})
                _lanes(f, tier, lambda lane: f.store(
                    acc, acc[0, lane] + val * f.c(f.B, b_row, col(lane)), [0, lane]))
                with T.If(tirx.Or(tirx.EQ(p + 1, hi), tirx.NE(nxt, row))):
                    with T.Then():
                        def flush(lane):
                            idx = [row, col(lane)] if nest.kind == "spmm" else [row]
                            f.store(f.C_out, f.c(f.C_out, row, col(lane)) + f.alpha * acc[0, lane], idx)
                            f.store(acc, _const(0, dtype), [0, lane])
                        _lanes(f, tier, flush)


def _blocked_runs(f: _Func, nest: SparseNest, tiers: Sequence[_Tier]) -> None:
    """Row-block loop in ``T.parallel``, middle loops serial, segmented sums over the innermost."""
    from contextlib import ExitStack

    first, mid, last = nest.levels[0], nest.levels[1:-1], nest.levels[-1]
    with ExitStack() as stack:
        axes = []
        b = stack.enter_context(f.loop("parallel", first.lo, first.hi, first.name))
        axes.append((first.name, first.hi - first.lo, b, first.var))
        for lv in mid:
            v = stack.enter_context(f.loop("serial", lv.lo, lv.hi, lv.name))
            axes.append((lv.name, lv.hi - lv.lo, v, lv.var))

        def lo_hi(ax, vm):
            at = {first.var: ax[0] + first.lo}
            at.update({lv.var: x + lv.lo for lv, x in zip(mid, ax[1:])})
            return subst(last.lo, at), subst(last.hi, at)
        _segmented_runs(f, nest, tiers, lo_hi, axes)


def _all_columns(f: _Func, tiers: Sequence[_Tier], stmt: Callable) -> None:
    """``stmt(col)`` for every column, tier by tier (block-less loops)."""
    T = f.T
    for tier in tiers:
        if tier.count is None and tier.base is None:
            stmt(None)
            continue
        with _if(T, tier.cond):
            if tier.count is not None:
                with f.loop("serial", 0, tier.count, "jo") as jo:
                    base = tier.base(jo)
                    _lanes(f, tier, lambda lane: stmt(base + lane))
            else:
                base = tier.base(None)
                _lanes(f, tier, lambda lane: stmt(base + lane))
