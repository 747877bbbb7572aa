"""Scatter executors: nests whose output row is data (COO, CSB).

``C_out`` is scaled first (``beta * C_in``), then every entry adds
``alpha * value * B[col, :]`` into its row.  Row-sorted entries (COO) are cut
into row-aligned chunks and each column tile sums a run of equal rows in
registers (segmented sum); loops that own disjoint rows (CSB's block rows,
marked by a :class:`~.steps.Tile` of the row) run in ``T.parallel`` over parts of
about equal entries (``part``, :func:`block_parts`), each block scaling the output rows
it owns before adding into them (one parallel region, the rows still in cache).  SpMM
sums each row's run inside a block in registers (unless ``kernel.row_runs`` is off: the
matrix's run ends too random for the branch predictor, :mod:`~.run_ends`); SpMV adds every
entry straight into ``C_out`` (one scalar lane: a run saves nothing, its end test costs a
load and a branch).

The same nest gives ``A.T @ B`` (:func:`transposed`: the update's row and column
exchanged, the column tile's loop outermost, where it owns disjoint output rows) and,
with the strict-triangle guard of :func:`strict`, the second pass of a product with a
matrix whose lower triangle alone is stored (:func:`scatter_op_primfunc`).

>>> from schedules.sparse.recipes.library import coo_recipe
>>> from schedules.sparse.recipes.schedule import MicroKernel
>>> f, part = scatter_primfunc(coo_recipe().nest(), MicroKernel(8, 1, True), row_sorted=True)
>>> part
'chunks'
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from schedules.sparse.recipes.lower import (_const, _emit_levels, _Func, _if, _lanes, _Tier, _tiers,
                                            part_buffer, simplify_guards)
from schedules.sparse.recipes.nest import Role, SparseNest, _rebuild, loads, subst, uses
from tvm_ext.errors import ScheduleError

__all__ = ["scatter_primfunc", "scatter_part", "emit_scatter", "transposed", "strict", "block_parts",
           "scatter_op_primfunc", "op_passes", "row_sorted", "row_runs", "runtime_tile_sizes",
           "tile_size_values", "OPS"]

#: Products one stored matrix gives: ``A @ B``, ``A.T @ B``, and ``(L + L.T - D) @ B`` when
#: only the lower triangle ``L`` (diagonal ``D`` included) is stored.
OPS = ("A", "A.T", "sym_lower")


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
    """The part array :func:`emit_scatter` takes: ``"chunks"`` (row-aligned entry chunks) or
    ``"blocks"`` (parts of the outermost loop when it owns disjoint row blocks, :func:`block_parts`)."""
    if not kernel.parallel or not nest.levels:
        return None
    if row_sorted:
        return "chunks"
    return "blocks" if _owned_rows(nest) is not None else None


def _owned_rows(nest: SparseNest):
    """``(size, hi)`` when iteration ``b`` of the outermost loop owns output rows
    ``[b * size, min(b * size + size, hi))`` (a tile of the row loop from 0), else None."""
    import tvm

    first = nest.levels[0] if nest.levels else None
    if first is None or nest.meta.get("row_blocks") != first.name:
        return None
    size, lo, hi = nest.meta.get("block_sizes", {}).get(first.name, (None, None, None))
    ana = tvm.sym.Analyzer()
    if size is None or not ana.can_prove_equal(lo, 0) or not ana.can_prove_equal(first.lo, 0):
        return None
    return size, hi


def tile_size_values(nest: SparseNest) -> list[int]:
    """The distinct sizes of ``nest``'s tiles (``meta["block_sizes"]``), ascending: the int32
    arguments :func:`runtime_tile_sizes` gives the executor, in argument order.

    >>> from schedules.sparse.recipes.library import csb_recipe
    >>> tile_size_values(csb_recipe(64).nest())
    [64]
    """
    return sorted({int(s) for s, _, _ in nest.meta.get("block_sizes", {}).values()})


def runtime_tile_sizes(nest: SparseNest) -> SparseNest:
    """``nest`` reading each tile size from an int32 executor argument whose value is that size
    (``meta["runtime_sizes"]``: ``((var, value), ...)``, :func:`tile_size_values` order) in
    its products (a block's first row or column in the entry's row and column and loop bounds)
    and the block loop's own rows (``meta["block_sizes"]``); quotients by the size keep the
    constant (shifts, not divisions).  The kernel computes the same values; with the size a
    compile-time constant in both a block's scale loop and its entries' indices, LLVM kept
    fewer of the kernel's pointers in registers and reloaded them from the stack per entry
    (CSB ``A.T @ B`` 0.75x the same loops with the size an argument).

    >>> from schedules.sparse.recipes.library import csb_recipe
    >>> n = runtime_tile_sizes(csb_recipe(64).nest())
    >>> str(n.row), [(str(v), s) for v, s in n.meta["runtime_sizes"]]
    ('ii * tile_size + T.Cast("int32", explicit_i[p])', [('tile_size', 64)])
    """
    import dataclasses

    from tvm import tirx

    values = tile_size_values(nest)
    if not values:
        return nest
    names = ["tile_size"] if len(values) == 1 else [f"tile_size{i}" for i in range(len(values))]
    by_value = {s: tirx.Var(name, "int32") for s, name in zip(values, names)}

    def size(e):
        return by_value.get(int(e.value), e) if isinstance(e, tirx.IntImm) and str(e.ty) == "int32" else e

    def on_binary(e):
        return tirx.Mul(size(e.a), size(e.b)) if type(e).__name__ == "Mul" else e

    def rt(e):
        return None if e is None else _rebuild(e, lambda v: v, on_binary)
    levels = tuple(dataclasses.replace(lv, lo=rt(lv.lo), hi=rt(lv.hi)) for lv in nest.levels)
    blocks = {k: (by_value[int(s)], lo, hi) for k, (s, lo, hi) in nest.meta["block_sizes"].items()}
    meta = dict(nest.meta, block_sizes=blocks, runtime_sizes=tuple((by_value[s], s) for s in values))
    return nest.replace("runtime tile sizes", levels=levels, row=rt(nest.row), col=rt(nest.col),
                        value=rt(nest.value), guards=tuple(rt(g) for g in nest.guards), meta=meta,
                        sizes=dict(nest.sizes, **{v.name: v for v in by_value.values()}))


def transposed(nest: SparseNest) -> SparseNest:
    """The nest of ``A.T @ B``: ``C[col, n] += value * B[row, n]`` with the column tile's loop
    (``meta["col_blocks"]``, a :class:`~.steps.Tile` of the column loop) moved outermost, where
    each of its iterations owns disjoint output rows.  Sizes ``M`` and ``K`` trade places
    (``M`` names the output's rows).

    >>> from schedules.sparse.recipes.library import csb_recipe
    >>> t = transposed(csb_recipe(8).nest())
    >>> [lv.name for lv in t.levels], t.meta["row_blocks"]
    (['ll', 'ii', 'p'], 'll')
    """
    cb = nest.meta.get("col_blocks")
    names = [lv.name for lv in nest.levels]
    if cb is None or cb not in names:
        raise ScheduleError("transpose: the nest has no loop over column tiles (tile the column loop, "
                            "as CSB's recipe does) to run A.T @ B without write conflicts")
    at = names.index(cb)
    lv = nest.levels[at]
    for outer in nest.levels[:at]:
        if uses(lv.lo, outer.var) or uses(lv.hi, outer.var):
            raise ScheduleError(f"transpose: loop {cb}'s bounds read loop {outer.name}; it cannot move "
                                "outermost")
    levels = (lv,) + nest.levels[:at] + nest.levels[at + 1:]
    sizes = dict(nest.sizes, M=nest.sizes["K"], K=nest.sizes["M"])
    meta = dict(nest.meta, row_blocks=cb, col_blocks=nest.meta.get("row_blocks"))
    return nest.replace("transpose", levels=levels, row=nest.col, col=nest.row, sizes=sizes, meta=meta)


def strict(nest: SparseNest) -> SparseNest:
    """``nest`` skipping its diagonal entries (guard ``row != col``)."""
    from tvm import tirx

    return nest.replace("strict", guards=nest.guards + (tirx.NE(nest.row, nest.col),))


def block_parts(nest: SparseNest, offset: np.ndarray, sizes: dict, n_parts: int) -> np.ndarray:
    """Parts of the outermost loop (its iterations own row blocks) of about equal stored
    entries plus a per-block cost, from the compaction's ``offset`` array (one entry per
    iteration of the compacted outer loops, in their order).  ``sizes``: value per size
    variable (``{var: int}``), to evaluate the loop extents.

    >>> from schedules.sparse.recipes.library import csb_recipe
    >>> n = csb_recipe(2).nest()
    >>> block_parts(n, np.array([0, 5, 5, 6, 6]), {n.sizes["M"]: 4, n.sizes["K"]: 4}, 2).tolist()
    [0, 1, 2]
    """
    import tvm

    from schedules.sparse.executors.partition import balanced_parts

    outer = tuple(nest.meta.get("compaction", {}).get("outer", ()))
    first = nest.levels[0]
    if first.name not in outer or nest.buffer_of(Role.OFFSET) is None:
        raise ScheduleError(f"block parts: loop {first.name} is not a compacted outer loop of the nest")
    ana = tvm.sym.Analyzer()
    extents = []
    for name in outer:
        lv = next(x for x in nest.levels if x.name == name)
        ext = ana.simplify(subst(lv.hi - lv.lo, sizes))
        extents.append(int(ext.value) if hasattr(ext, "value") else int(ext))
    counts = np.diff(np.asarray(offset, dtype=np.int64)).reshape(extents)
    work = counts.sum(axis=tuple(i for i in range(len(outer)) if outer[i] != first.name)) \
        if len(outer) > 1 else counts
    size = nest.meta.get("block_sizes", {}).get(first.name, (1,))[0]
    size = next((s for v, s in nest.meta.get("runtime_sizes", ()) if v.same_as(size)), size)
    return balanced_parts(np.concatenate([[0], np.cumsum(work)]), n_parts, item_cost=size / 4.0)


def op_passes(nest: SparseNest, op: str) -> list:
    """``[(pass nest, scales C_out)]``: the passes of :func:`scatter_op_primfunc`, in order.

    >>> from schedules.sparse.recipes.library import csb_recipe
    >>> [(p.levels[0].name, s) for p, s in op_passes(csb_recipe(8).nest(), "sym_lower")]
    [('ii', True), ('ll', False)]
    """
    if op not in OPS:
        raise ScheduleError(f"scatter: op must be one of {OPS}, got {op!r}")
    if op == "A.T":
        return [(transposed(nest), True)]
    if op == "sym_lower":
        return [(nest, True), (strict(transposed(nest)), False)]
    return [(nest, True)]


def scatter_op_primfunc(nest: SparseNest, kernel, op: str = "A"):
    """The executor of ``op`` (:data:`OPS`) on ``nest``'s stored matrix, for nests whose
    outermost loop owns row blocks and that tile the column loop too (CSB):

    * ``"A"``: ``C_out = alpha * A @ B + beta * C_in``, parallel over the row tiles;
    * ``"A.T"``: the :func:`transposed` nest, parallel over the column tiles;
    * ``"sym_lower"`` (square, the lower triangle ``L`` stored): ``A @ B = L @ B + (L - D).T @ B``,
      the row-tile pass, then the column-tile pass of the :func:`strict` transposed nest adding
      into the same ``C_out``; each pass is race-free and the parallel region's join orders them.

    Returns ``(PrimFunc, [part kind per pass])`` (part arrays follow the format arrays, in pass
    order; the tile sizes, :func:`tile_size_values`, are int32 arguments after ``C_out``).
    """
    passes = op_passes(runtime_tile_sizes(nest), op)
    kinds = [scatter_part(p, kernel, row_sorted=False) for p, _ in passes]
    parts = [part_buffer(f"part{i}") if k else None for i, k in enumerate(kinds)]
    name = {"A": "", "A.T": "_t", "sym_lower": "_sym"}[op]
    with _Func(passes[0][0], f"recipe_scatter{name}_{nest.kind}", [p for p in parts if p is not None]) as f:
        for (pn, scale), part in zip(passes, parts):
            emit_scatter(f, pn, kernel, part, row_sorted=False, row_runs=row_runs(pn), scale=scale)
    return f.get(), kinds


def emit_scatter(f: _Func, nest: SparseNest, kernel, part, *, row_sorted: bool, row_runs: bool = False,
                 scale: bool = True) -> None:
    """Emit the scatter executor into ``f``; ``scale=False`` adds into ``C_out`` as it is
    (a later part of a split format: HYB's COO remainder after its ELL part)."""
    guards = simplify_guards(nest, nest.guards)
    spmv = nest.kind == "spmv"
    M = nest.sizes["M"]
    tiers = _tiers(f.N, kernel.lanes, kernel.unroll, spmv)
    loop_kind = "parallel" if kernel.parallel else "serial"
    blocks = nest.meta.get("row_blocks")
    owned = _owned_rows(nest)
    block_loop = kernel.parallel and nest.levels and nest.levels[0].name == blocks
    fused = block_loop and part is not None and owned is not None and not (row_sorted and len(nest.levels) == 1)
    if scale and not fused:
        with f.loop(loop_kind, 0, M, "r") as r:
            _scale_row(f, nest, tiers, r)

    def update(vmap):
        row, b_row, val = (subst(e, vmap) for e in (nest.row, nest.col, nest.value))
        scaled = f.alpha * val
        _all_columns(f, tiers, lambda c: f.store(
            f.C_out, f.c(f.C_out, row, c) + scaled * f.c(f.B, b_row, c), [row, c] if not spmv else [row]))

    if row_sorted and len(nest.levels) == 1 and not guards:
        lv = nest.levels[0]
        if part is not None:
            NP = part.shape[0]
            with f.loop("parallel", 0, NP - 1, "t") as t:
                _segmented_runs(f, nest, tiers, lambda ax, vm: (part[ax[0]], part[ax[0] + 1]),
                                [("t", NP - 1, t, None)])
        else:
            _segmented_runs(f, nest, tiers, lambda ax, vm: (lv.lo, lv.hi), [])
    elif block_loop:
        # each iteration of the row-tile loop owns its own output rows: no write conflicts
        first, rest = nest.levels[0], nest.levels[1:]
        with _block_loop(f, first, part if fused else None) as b:
            if fused and scale:
                size, hi = owned
                from tvm import tirx

                # loops from 0 (s_tir's CanonicalizeLoop misses the outer shift in a nested extent)
                with f.loop("serial", 0, tirx.Min(b * size + size, hi) - b * size, "r") as r:
                    _scale_row(f, nest, tiers, b * size + r)
            if row_runs and kernel.row_runs and not guards and not spmv:
                # segmented sums keep a row's run of a block in vector registers; with one scalar
                # lane (SpMV) a run saves nothing and its end test costs a load and a branch per entry
                _blocked_runs(f, nest, tiers, b)
            else:
                _emit_levels(f, rest, guards, {first.var: b}, update)
    elif part is not None:
        first, rest = nest.levels[0], nest.levels[1:]
        NP = part.shape[0]
        with f.loop("parallel", 0, NP - 1, "t") as t:
            with f.loop("serial", part[t], part[t + 1], first.name) as p:
                _emit_levels(f, rest, guards, {first.var: p}, update)
    else:
        _emit_levels(f, nest.levels, guards, {}, update)


def _scale_row(f: _Func, nest: SparseNest, tiers: Sequence[_Tier], r) -> None:
    """``C_out[r, :] = beta * C_in[r, :]`` (0 when ``beta == 0``: ``C_in`` is not read)."""
    T, spmv = f.T, nest.kind == "spmv"
    with T.If(f.beta == _const(0, nest.dtype)):
        with T.Then():
            _all_columns(f, tiers, lambda c: f.store(f.C_out, _const(0, nest.dtype), [r, c] if not spmv else [r]))
        with T.Else():
            _all_columns(f, tiers, lambda c: f.store(
                f.C_out, f.beta * f.c(f.C_in, r, c), [r, c] if not spmv else [r]))


def _block_loop(f: _Func, first, part):
    """The outermost (row-block) loop: ``T.parallel`` over it, or over the parts of ``part``
    with a serial loop over each part's blocks."""
    from contextlib import contextmanager

    @contextmanager
    def cm():
        if part is None:
            with f.loop("parallel", first.lo, first.hi, first.name) as b:
                yield b
            return
        NP = part.shape[0]
        with f.loop("parallel", 0, NP - 1, "t") as t:
            with f.loop("serial", 0, part[t + 1] - part[t], first.name) as b:
                yield part[t] + b
    return cm()


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
            stack.enter_context(_if(T, tirx.LT(lo, hi)))      # empty blocks cost one compare

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


def _blocked_runs(f: _Func, nest: SparseNest, tiers: Sequence[_Tier], b) -> None:
    """Inside iteration ``b`` of the row-block loop: middle loops serial, segmented sums over
    the innermost."""
    from contextlib import ExitStack

    first, mid, last = nest.levels[0], nest.levels[1:-1], nest.levels[-1]
    with ExitStack() as stack:
        axes = [(first.name, first.hi - first.lo, b, first.var)]
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


def row_sorted(nest: SparseNest) -> bool:
    """Whether the outermost loop runs over compacted entries sorted by the output row."""
    comp = nest.meta.get("compaction", {})
    levels = comp.get("levels", ())
    if not levels or comp.get("outer") or not nest.levels:
        return False
    first = nest.buffer_of(Role.EXPLICIT, levels[0])
    return first is not None and bool(loads(nest.row)) and loads(nest.row)[0].same_as(first) \
        and nest.levels[0].name == "p"


def row_runs(nest: SparseNest) -> bool:
    """Whether the innermost loop runs over single entries sorted by output row within each
    iteration of the loops outside it (the compaction's first level is the row's)."""
    comp = nest.meta.get("compaction", {})
    levels = comp.get("levels", ())
    if not levels or comp.get("inner") or comp.get("keep_empty") or nest.levels[-1].name != "p":
        return False
    first = nest.buffer_of(Role.EXPLICIT, levels[0])
    return first is not None and any(b.same_as(first) for b in loads(nest.row))
