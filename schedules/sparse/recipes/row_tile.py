"""The register-blocked row-tile executor of a nest whose outermost loop owns output rows.

:func:`row_tile_primfunc` lowers the nest with the micro-kernel schedule of
:class:`~.schedule.MicroKernel`: rows in ``T.parallel`` parts (fixed shares, or
claimed at run time: :func:`emit_claimed_parts`), one ``T.sblock`` per (row,
column tile), the tile's accumulators in registers across every inner loop
(``R`` rows of a row tile: BCSR's block in registers), small constant loops
unrolled with B's row loads hoisted out of the tile's rows, the innermost
loop's iterations interleaved over independent partial sums, edge guards
tested once where the format's stored indices bound them, ``C`` written once.

>>> from schedules.sparse.recipes.library import csr_recipe
>>> from schedules.sparse.recipes.schedule import MicroKernel
>>> f, part = row_tile_primfunc(csr_recipe().nest(), MicroKernel(8, 1, True))
>>> part
'rows:1'
"""
from __future__ import annotations

from typing import Callable, Sequence

from schedules.sparse.recipes.interior_split import emit_rows, interior_split
from schedules.sparse.recipes.lower import (UNROLL_EXTENT, _all, _const, _emit_levels, _Func, _if, _lanes,
                                            _Tier, _tiers, part_buffer, row_position, row_structure,
                                            simplify_guards)
from schedules.sparse.recipes.nest import Level, SparseNest, free_vars, loads, subst
from tvm_ext.errors import ScheduleError

__all__ = ["row_tile_primfunc", "emit_row_tile", "row_tile_part", "emit_claimed_parts", "block_rows",
           "short_trip_rounds", "SHORT_TRIP_ROUNDS", "block_sets", "vectors_outside_rows"]

def row_tile_part(nest: SparseNest, kernel) -> str | None:
    """The part array :func:`emit_row_tile` takes: ``"rows:R"`` (outer-loop boundaries) when
    parallel; :class:`ScheduleError` when the outermost loop does not own the output rows."""
    found = row_structure(nest)
    if found is None:
        raise ScheduleError("row_tile: the outermost loop must own the output rows (the row over "
                            "[0, M) or a tile of it); reorder the loops first (outermost is "
                            f"{nest.levels[0].name if nest.levels else None}, row is {nest.row})")
    return f"rows:{found[1]}" if kernel.parallel else None


def row_tile_primfunc(nest: SparseNest, kernel) -> tuple:
    """The register-blocked row-tile executor of ``nest`` under micro-kernel ``kernel``.

    Each block holds ``R x (unroll * lanes)`` accumulators (``R`` rows of a row
    tile, BCSR's block in registers) across every inner loop; small constant
    loops are unrolled.  Returns ``(PrimFunc, part kind)``; with
    ``kernel.parallel`` the kernel takes a ``part`` array of outer-loop
    boundaries (kind ``"rows:R"``) after the format arrays.
    """
    kind = row_tile_part(nest, kernel)
    part = part_buffer() if kind else None
    with _Func(nest, f"recipe_row_{nest.kind}", [part] if part is not None else []) as f:
        emit_row_tile(f, nest, kernel, part)
    return f.get(), kind


def emit_row_tile(f: "_Func", nest: SparseNest, kernel, part) -> None:
    """Emit the row-tile executor's loops into ``f`` (``part``: the parallel parts or None):
    every output row is written, ``C_out = alpha * acc + beta * C_in``."""
    row_tile_part(nest, kernel)
    outer, rows, row_level = row_structure(nest)
    inner = nest.levels[1:]
    guards = simplify_guards(nest, nest.guards)
    spmv = nest.kind == "spmv"
    tiers = _tiers(f.N, kernel.lanes, kernel.unroll, spmv)
    perm = row_position(nest)[1]
    by_row = block_rows(nest) == 1 and rows > 1
    split = interior_split(f, nest, outer, guards) if rows == 1 else None   # edge/interior rows

    def row_body(i, guards=guards):
        if by_row:      # the tile's row loop is outside every reduction loop: one block per row
            with f.loop("serial", 0, rows, row_level.name) as r:
                for tier in tiers:
                    chains = kernel.chains(tier.unroll, spmv)
                    _row_block(f, nest, tier, chains, i, outer, rows, row_level, inner[1:], guards, perm,
                               one_row=r)
            return
        for tier in tiers:
            chains = kernel.chains(tier.unroll * rows, spmv)
            _row_block(f, nest, tier, chains, i, outer, rows, row_level, inner, guards, perm)

    if part is not None and getattr(kernel, "dynamic", False):
        emit_claimed_parts(f, part, row_body, lambda a, b, body: emit_rows(f, split, a, b, guards, body))
    elif part is not None:
        NP = part.shape[0]
        with f.loop("parallel", 0, NP - 1, "t") as t:
            emit_rows(f, split, part[t], part[t + 1], guards, row_body)
    else:
        emit_rows(f, split, 0, outer.hi, guards, row_body)


def emit_claimed_parts(f: "_Func", part, body: Callable, rows: Callable | None = None) -> None:
    """``body(i)`` for every outer iteration ``i`` of the parts of ``part``, the threads claiming
    parts at run time (OpenMP's dynamic schedule; ``tvmext_atomic_add`` of ``csrc/tvmext_p2p.c``,
    loaded by :func:`~schedules.sparse.executors.codegen.resolve_dynamic`).

    The same protocol as :func:`~schedules.sparse.executors.codegen.parallel_items`: the
    iterations of the first half of the parallel loop claim parts from the front, the others
    from the back, a shared count of claimed parts keeping the two ends from crossing, so with
    two threads each sweeps contiguous rows; each iteration claims until none is left.
    """
    from tvm import tirx

    T = f.T
    NP = part.shape[0]
    nxt = T.alloc_buffer((3,), "int32")
    f.IRBuilder.name("part_next", nxt)
    claim = T.alloc_buffer((NP,), "int32")
    f.IRBuilder.name("part_claim", claim)

    def add(slot):
        return T.call_extern("int32", "tvmext_atomic_add", T.address_of(nxt[0]),
                             tirx.const(slot, "int32"), tirx.const(1, "int32"))

    def claim_next(t):
        f.store(claim, tirx.const(-1, "int32"), [t])
        with T.If(add(0) < NP - 1):
            with T.Then():
                with T.If(t * 2 < NP - 1):
                    with T.Then():
                        f.store(claim, add(1), [t])
                    with T.Else():
                        f.store(claim, NP - 2 - add(2), [t])

    with f.loop("serial", 0, 3, "c") as c:
        f.store(nxt, tirx.const(0, "int32"), [c])
    with f.loop("parallel", 0, NP - 1, "t") as t:
        claim_next(t)
        with T.While(claim[t] >= 0):
            if rows is not None:        # ``rows(a, b, body)`` runs the part's rows [a, b)
                rows(part[claim[t]], part[claim[t] + 1], lambda i, gs: body(i, gs))
            else:
                with f.loop("serial", part[claim[t]], part[claim[t] + 1], "i") as i:
                    body(i)
            claim_next(t)


#: A reduction loop shorter than this many rounds of its partial sums runs as one chain, by
#: kind, for a trip count fixed for the whole kernel (a size: ELL's width) and for one read
#: from the format per row (CSR's row length); 0: always the partial sums, no test of the trip
#: count.  Measured against the hand-written templates (2 cores, znver4): row-major ELL SpMV on
#: lap2d's 5-wide rows 1.3x with 2 rounds, 0.98x with 1; CSR SpMV 1.0x with 1 round, 0.84x with
#: 2 (cora 0.99x / 0.80x); CSR SpMM at N = 8 with no test 1.0x / 1.26x / 1.05x (lap2d, R-MAT,
#: nasa4704), with 1 round 0.86x / 1.0x / 0.99x; SELL-16 SpMM even either way.
SHORT_TRIP_ROUNDS = {"spmv": {"fixed": 2, "per_row": 1}, "spmm": {"fixed": 1, "per_row": 0}}


def short_trip_rounds(kind: str, trip) -> int:
    """:data:`SHORT_TRIP_ROUNDS` for a reduction loop of ``trip`` iterations (a TIR expression)."""
    from schedules.sparse.recipes.nest import loads

    return SHORT_TRIP_ROUNDS[kind]["per_row" if loads(trip) else "fixed"]


def block_rows(nest: SparseNest) -> int:
    """Output rows one row-tile block keeps in registers: the tile's ``R`` rows, or 1 when the
    tile's row loop is the first loop inside it (each row then reduces on its own, SELL)."""
    found = row_structure(nest)
    if found is None:
        return 1
    _, rows, row_level = found
    if row_level is not None and len(nest.levels) > 1 and nest.levels[1].var.same_as(row_level.var):
        return 1
    return rows


def _row_block(f: _Func, nest: SparseNest, tier: _Tier, chains: int, i, outer: Level, rows: int,
               row_level, inner: Sequence[Level], guards: Sequence, perm=None, one_row=None,
               finish: Callable | None = None) -> None:
    """One block: ``rows`` output rows of outer iteration ``i`` (or the single row ``one_row``
    of the tile) for one column tier, accumulated in registers, then written (``finish``: in
    place of :func:`_write_block`, with its arguments: a fused consumer's)."""
    from contextlib import ExitStack

    T, dtype = f.T, nest.dtype
    kept = _rows_as_vector(nest, outer, row_level, inner, guards) if one_row is None else None
    chains = 1 if kept is not None else chains
    with ExitStack() as stack:
        vj = None
        if tier.cond is not None:
            stack.enter_context(_if(T, tier.cond))
        if tier.count is not None:
            jo = stack.enter_context(f.loop("serial", 0, tier.count, "jo"))
        stack.enter_context(T.sblock(f"row{tier.suffix}"))
        vi = T.axis.spatial(outer.hi, i)
        f.IRBuilder.name("vi", vi)
        vr = None
        if one_row is not None:
            vr = T.axis.spatial(rows, one_row)
            f.IRBuilder.name("vr", vr)
        if tier.count is not None:
            vj = T.axis.spatial(tier.count, jo)
            f.IRBuilder.name("vj", vj)
        base = None if tier.base is None else tier.base(vj)
        acc = T.sblock_alloc_buffer((chains * (rows if one_row is None else 1), tier.width), dtype,
                                    scope="local")
        f.IRBuilder.name("acc", acc)

        def col(lane):
            return None if base is None else base + lane

        def out_row(r):
            if vr is not None:
                return vi * rows + vr
            return vi if rows == 1 else vi * rows + r

        held = rows if vr is None else 1
        with f.loop("unroll", 0, chains * held, "r") as r:
            _lanes(f, tier, lambda lane: f.store(acc, _const(0, dtype), [r, lane]))

        def fma(vmap, chain, u=None):
            # u: only the tile's vector u (the block loop holds the vectors outside its rows)
            val, b_row = subst(nest.value, vmap), subst(nest.col, vmap)
            a = chain * held + (vmap[row_level.var] if row_level is not None and vr is None else 0)

            def one(lane):
                f.store(acc, acc[a, lane] + val * f.c(f.B, b_row, col(lane)), [a, lane])
            if u is None:
                _lanes(f, tier, one)
            else:
                _lanes(f, _Tier(tier.suffix, tier.count, tier.base, 1, tier.lanes, tier.mask, tier.cond),
                       lambda lane: one(u * tier.lanes + lane))

        start = {outer.var: vi} if vr is None else {outer.var: vi, row_level.var: vr}
        if kept is not None:        # SELL SpMV: the tile's rows are the innermost loop, one vector
            def vector(vm):
                last = inner[-1]
                with f.loop("vectorized", last.lo, last.hi, last.name) as v:
                    fma({**vm, last.var: v}, 0)
            _emit_levels(f, inner[:-1], kept, dict(start), vector)
        else:
            def fold(used: int, reset: bool) -> None:
                # partial sums 1..used-1 into 0 (and back to zero when the loops run again)
                with f.loop("unroll", 0, used - 1, "k") as k:
                    with f.loop("unroll", 0, held, "r") as r:
                        def one(lane):
                            f.store(acc, acc[r, lane] + acc[(k + 1) * held + r, lane], [r, lane])
                            if reset:
                                f.store(acc, _const(0, dtype), [(k + 1) * held + r, lane])
                        _lanes(f, tier, one)
            _reduce(f, nest, inner, _drop_row_guards(nest, outer, row_level, inner, guards), start, chains, fma,
                    fold, vectors=tier.unroll)

        (finish or _write_block)(f, nest, tier, acc, held, out_row, perm, col, check_rows=rows != 1)


def _write_block(f: _Func, nest: SparseNest, tier: _Tier, acc, held: int, out_row: Callable, perm,
                 col: Callable, check_rows: bool) -> None:
    """``C_out = alpha * acc + beta * C_in`` for the block's ``held`` rows (``beta == 0``: ``C_in``
    is not read); a row past ``M`` is skipped when ``check_rows``; SELL's rows go through ``perm``."""
    T, dtype, M = f.T, nest.dtype, nest.sizes["M"]

    def write(with_beta):
        with f.loop("unroll", 0, held, "r") as r:
            row = out_row(r)
            with _if(T, row < M if check_rows else None):
                c_row = row if perm is None else perm[row]

                def one(lane):
                    rhs = f.alpha * acc[r, lane]
                    if with_beta:
                        rhs = rhs + f.beta * f.c(f.C_in, c_row, col(lane))
                    f.store(f.C_out, rhs, [c_row, col(lane)] if not nest.kind == "spmv" else [c_row])
                _lanes(f, tier, one)
    with T.If(f.beta == _const(0, dtype)):
        with T.Then():
            write(False)
        with T.Else():
            write(True)


def _rows_as_vector(nest: SparseNest, outer: Level, row_level, inner: Sequence[Level], guards: Sequence):
    """The guards to keep when an SpMV row tile's rows run as one vector (None: they cannot):
    the innermost loop is the tile's row, values and columns are padded copies read row-inner
    (every lane's read is in bounds), and the guards that read only the row are dropped (a
    padded row adds 0 to an accumulator that is never written)."""
    from tvm.ir.expr import TensorLoad

    from schedules.sparse.recipes.nest import Role

    if nest.kind != "spmv" or row_level is None or not inner or not inner[-1].var.same_as(row_level.var):
        return None
    for e in (nest.value, nest.col):
        role = nest.roles.get(e.source.name) if isinstance(e, TensorLoad) else None
        if role is None or role.role is not Role.COPY or not e.indices[-1].same_as(row_level.var):
            return None
    row_vars = {outer.var, row_level.var} | set(nest.sizes.values())
    kept = [g for g in guards if not set(free_vars(g)) <= row_vars]
    if any(any(v.same_as(row_level.var) for v in free_vars(g)) for g in kept):
        return None
    return kept


def _reduce(f: _Func, nest: SparseNest, levels: Sequence[Level], guards: Sequence, vmap: dict,
            chains: int, fma: Callable, fold: Callable[[int, bool], None], vectors: int = 1) -> None:
    """The reduction loops; the innermost one's iterations go round-robin to ``chains`` sets
    (``vectors``: the column tile's vectors, ``fma(vmap, chain, u)`` updating vector ``u`` only).

    ``fold(used, reset)`` adds partial sums ``1..used-1`` into 0 (``reset``: and zeroes them);
    it is emitted only where partial sums were used: a short trip that runs as one chain pays
    no adds of zeros (a ``-0.0``-exact ``x + 0`` is not folded away by LLVM)."""
    if not levels:
        _guarded(f, guards, vmap, lambda: fma(vmap, 0))
        return
    block = _constant_tail(levels)
    if block:
        _reduce_block(f, nest, levels[:len(levels) - len(block)], block, guards, vmap, chains, fma, fold,
                      vectors)
        return
    slots: list = []            # partial sums a per-slot constant loop used (folded at the end)
    outer, last = levels[:-1], levels[-1]
    outer_guards = [g for g in guards if not any(v.same_as(last.var) for v in free_vars(g))]
    last_guards = [g for g in guards if g not in outer_guards]

    def innermost(vm):
        lo, hi = subst(last.lo, vm), subst(last.hi, vm)
        ext = subst(hi - lo, {})
        small = hasattr(ext, "value") and int(ext.value) <= UNROLL_EXTENT
        if chains == 1 or small:
            # a constant loop no longer than the chains gives each iteration its own partial sum
            # (BCSR's block slots: no FMA waits on the block's previous column)
            per_slot = small and 1 < int(ext.value) <= chains
            if per_slot:
                slots.append(int(ext.value))

            def plain(gs):
                with f.loop("unroll" if small else "serial", lo, hi, last.name) as v:
                    vm2 = dict(vm)
                    vm2[last.var] = v
                    _guarded(f, gs, vm2, lambda: fma(vm2, v - lo if per_slot else 0))
            hoisted = _hoist_edge_guards(last, last_guards) if small else None
            if hoisted is None:
                plain(last_guards)
                return
            # BCSR's block column: the whole block in range runs unguarded, the edge block guarded
            with f.T.If(subst(hoisted[0], vm)):
                with f.T.Then():
                    plain(hoisted[1])
                with f.T.Else():
                    plain(last_guards)
            return
        def one_chain():
            with f.loop("serial", lo, hi, last.name) as v:
                vm1 = dict(vm)
                vm1[last.var] = v
                _guarded(f, last_guards, vm1, lambda: fma(vm1, 0))

        def interleaved():
            _interleave(f, last, last_guards, vm, chains, fma)
            fold(chains, bool(outer))
        # a short trip runs as one chain, where the chains' remainder and final sums cost more
        # than the latency they hide (SHORT_TRIP_ROUNDS)
        rounds = short_trip_rounds(nest.kind, hi - lo)
        if rounds == 0:
            interleaved()
            return
        with f.T.If(hi - lo >= rounds * chains):
            with f.T.Then():
                interleaved()
            with f.T.Else():
                one_chain()

    _emit_levels(f, outer, outer_guards, dict(vmap), innermost, unroll=True)
    if slots:
        fold(max(slots), False)


def _interleave(f: _Func, last: Level, guards: Sequence, vm: dict, sets: int,
                body: Callable[[dict, object], None]) -> None:
    """Loop ``last`` (bounds renamed through ``vm``) with ``sets`` consecutive iterations per
    round, iteration ``c`` of a round calling ``body(vmap, c)`` (its own partial-sum set), and
    the remainder iterations ``body(vmap, 0)``: independent multiply-add chains, one loop test
    per round."""
    lo, hi = subst(last.lo, vm), subst(last.hi, vm)
    length = hi - lo
    with f.loop("serial", 0, length // sets, "q") as q:
        with f.loop("unroll", 0, sets, "c") as c:
            vm2 = dict(vm)
            vm2[last.var] = lo + q * sets + c
            _guarded(f, guards, vm2, lambda: body(vm2, c))
    with f.loop("serial", lo + length // sets * sets, hi, last.name) as v:
        vm3 = dict(vm)
        vm3[last.var] = v
        _guarded(f, guards, vm3, lambda: body(vm3, 0))


def _constant_tail(levels: Sequence[Level]) -> list:
    """The innermost loops with constant bounds of at most :data:`UNROLL_EXTENT` iterations (a
    stored block's rows and columns), outer to inner; empty when the innermost loop is not one."""
    import tvm

    ana = tvm.sym.Analyzer()
    tail: list = []
    for lv in reversed(levels):
        lo, hi = ana.simplify(lv.lo), ana.simplify(lv.hi)
        if lv.existential or not (hasattr(lo, "value") and hasattr(hi, "value")) \
                or not 0 < int(hi.value) - int(lo.value) <= UNROLL_EXTENT:
            break
        tail.insert(0, lv)
    return tail


def _reduce_block(f: _Func, nest: SparseNest, head: Sequence[Level], block: Sequence[Level],
                  guards: Sequence, vmap: dict, chains: int, fma: Callable,
                  fold: Callable[[int, bool], None], vectors: int = 1) -> None:
    """The reduction loops ending in a constant block of loops (BCSR's R x C slots), unrolled.

    * Loop order: the block loops that ``B``'s row depends on run outside the others (the
      accumulator rows), so each ``B`` row segment is loaded once and reused for every row of
      the tile while few vectors are live (OSKI's register-blocked micro-kernel).
    * Edge guards ``e + v < b`` increasing in the block's variables hold for the whole block
      when they hold at its last iteration: tested once per block, the block then runs
      unguarded; the edge block keeps them.
    * Partial sums (:func:`block_sets`): consecutive blocks of a data-dependent block loop go
      round-robin to ``chains`` sets (:func:`_interleave`: independent chains and one loop
      test per round, the hand-written BCSR kernel's two blocks per iteration); else, when the
      innermost ``B``-dependent block loop has at most ``chains`` iterations, each gets its own
      (no multiply-add waits on the block's previous column).
    * Registers (:func:`vectors_outside_rows`): with more tile vectors than block rows, each
      vector's loop runs outside the rows, so one ``B`` vector and the rows' ``A`` values are
      live next to the accumulators instead of the whole ``B`` row segment.
    """
    block_vars = [lv.var for lv in block]
    ordered = sorted(block, key=lambda lv: not any(v.same_as(lv.var) for v in free_vars(nest.col)))
    reads_b = [lv for lv in ordered if any(v.same_as(lv.var) for v in free_vars(nest.col))]
    sets = block_sets(nest.kind, head, chains)
    slot = reads_b[-1] if reads_b and sets == 1 else None
    if slot is not None:
        ext = int(subst(slot.hi - slot.lo, {}).value)
        slot = slot if 1 < ext <= chains else None
    in_block = [g for g in guards if any(any(v.same_as(b) for b in block_vars) for v in free_vars(g))]
    head_guards = [g for g in guards if g not in in_block]
    hoisted = _hoist_block_guards(block, in_block)


    def emit(vm, gs, chain):
        _block_loops(f, nest, ordered, reads_b, vectors, vm, gs, lambda vm2, u=None: fma(
            vm2, vm2[slot.var] - subst(slot.lo, {}) if slot is not None else chain, u))

    def body(vm, chain):
        if hoisted is None:
            emit(vm, in_block, chain)
            return
        with f.T.If(subst(hoisted[0], vm)):
            with f.T.Then():
                emit(vm, hoisted[1], chain)
            with f.T.Else():
                emit(vm, in_block, chain)

    def over_head(per_block):
        _head_loops(f, head, head_guards, vmap, sets, per_block)

    whole = _at_largest_index(nest, hoisted[0]) if hoisted is not None else None
    if whole is None:
        over_head(body)
    else:
        # the edge guards hold on every block when they hold at the largest index the format can
        # store (a size test, once per row tile: BCSR with C dividing K runs with no test per block)
        with f.T.If(whole):
            with f.T.Then():
                over_head(lambda vm, chain: emit(vm, hoisted[1], chain))
            with f.T.Else():
                over_head(body)
    if slot is not None:
        fold(int(subst(slot.hi - slot.lo, {}).value), False)
    if sets > 1:
        fold(sets, False)


def _block_loops(f: _Func, nest: SparseNest, ordered: Sequence[Level], reads_b: Sequence[Level],
                 vectors: int, vm: dict, guards: Sequence, at: Callable) -> None:
    """One block's unrolled loops (``ordered``: the ``B``-row loops ``reads_b`` first), each
    iteration ``at(vmap)`` over the tile's vectors, or, where :func:`vectors_outside_rows`,
    the ``B``-row loops, then a loop over the tile's vectors ``u``, then the rows, each
    iteration ``at(vmap, u)``."""
    row_loops = [lv for lv in ordered if lv not in reads_b]
    if not reads_b or not vectors_outside_rows(vectors, _extent(row_loops)):
        _emit_levels(f, ordered, guards, dict(vm), at, unroll=True)
        return
    bound = set(vm) | {lv.var for lv in reads_b} | set(nest.sizes.values())
    first = [g for g in guards if all(v in bound for v in free_vars(g))]

    def vectors_then_rows(vm2):
        with f.loop("unroll", 0, vectors, "u") as u:
            _emit_levels(f, row_loops, [g for g in guards if g not in first], dict(vm2),
                         lambda vm3: at(vm3, u), unroll=True)
    _emit_levels(f, reads_b, first, dict(vm), vectors_then_rows, unroll=True)


def _head_loops(f: _Func, head: Sequence[Level], guards: Sequence, vmap: dict, sets: int,
                per_block: Callable[[dict, object], None]) -> None:
    """The loops outside a constant block, ``per_block(vmap, set)`` inside; with ``sets > 1``
    the innermost one runs in rounds of ``sets`` blocks (:func:`_interleave`)."""
    if sets == 1:
        _emit_levels(f, head, guards, dict(vmap), lambda vm: per_block(vm, 0), unroll=True)
        return
    last = head[-1]
    outer_guards = [g for g in guards if not any(v.same_as(last.var) for v in free_vars(g))]
    last_guards = [g for g in guards if g not in outer_guards]
    _emit_levels(f, head[:-1], outer_guards, dict(vmap),
                 lambda vm: _interleave(f, last, last_guards, vm, sets, per_block), unroll=True)


def vectors_outside_rows(vectors: int, rows: int) -> bool:
    """Whether a block's column-tile vectors loop outside its accumulator rows: then one ``B``
    vector and the ``rows`` broadcast ``A`` values are live beside the ``rows * vectors``
    accumulators, else every ``B`` vector of the tile (each reused by every row) and one ``A``
    value; the fewer live registers win.  BCSR 3x3 at N = 128 on AVX-512 holds 24 accumulators:
    8 ``B`` vectors more spill, 3 ``A`` values do not."""
    return rows > 1 and vectors > rows


def _extent(levels: Sequence[Level]) -> int:
    """Iterations of constant loops ``levels`` together."""
    out = 1
    for lv in levels:
        out *= int(subst(lv.hi - lv.lo, {}).value)
    return out


def block_sets(kind: str, head: Sequence[Level], chains: int) -> int:
    """Partial-sum sets the blocks of a block-reduction nest go round-robin to: for SpMM,
    ``chains`` when the innermost loop outside the constant block (``head[-1]``) has a
    data-dependent trip count (BCSR's blocks of a block row), else 1 (a constant outer loop is
    unrolled anyway).  SpMV keeps one partial sum per block slot instead (scalar accumulators,
    OSKI's R x C kernel).

    Measured against the hand-written BCSR 2x2 SpMM at N = 8 (2 cores, znver4): per-slot sums
    0.88-0.92x (nasa4704, lap2d, fem3x3), two blocks per round 0.97-1.09x."""
    if kind != "spmm" or chains <= 1 or not head:
        return 1
    last = head[-1]
    ext = subst(last.hi - last.lo, {})
    return 1 if last.existential or hasattr(ext, "value") else chains


def _at_largest_index(nest: SparseNest, cond):
    """``cond`` (a conjunction of ``a < b``) with each explicit index read replaced by the largest
    value the format stores there (the last iteration of the loop it compacted, a bound in the
    sizes), when every ``a`` grows with those reads and no ``b`` reads one: then it holds for
    every stored entry when it holds here, and it reads only sizes.  None otherwise."""
    import tvm
    from tvm import tirx

    from schedules.sparse.recipes.nest import Role

    bounds = nest.meta.get("compaction", {}).get("bounds", {})
    sizes = list(nest.sizes.values())
    ana = tvm.sym.Analyzer()
    conds: list = []

    def largest(load):
        role = nest.roles.get(load.source.name)
        if role is None or role.role is not Role.EXPLICIT or role.of not in bounds:
            return None
        lo, hi = bounds[role.of]
        if not all(any(v.same_as(s) for s in sizes) for v in free_vars(lo) + free_vars(hi)):
            return None
        conds.append(ana.simplify(lo < hi))     # an empty range: no stored index is below hi
        return hi - 1

    def one(g):
        if not isinstance(g, tirx.LT) or loads(g.b):
            return None
        x = tirx.Var("x", "int32")
        found: list = []
        a = _map_loads(g.a, lambda ld: found.append(ld) or x)
        top = largest(found[0]) if len(found) == 1 else None
        if top is None:
            return None
        step = ana.simplify(subst(a, {x: x + 1}) - a)
        if not hasattr(step, "value") or int(step.value) <= 0:
            return None
        return ana.simplify(subst(a, {x: top}) < g.b)

    stack = [cond]
    while stack:
        g = stack.pop()
        if isinstance(g, tirx.And):
            stack += [g.a, g.b]
            continue
        c = one(g)
        if c is None:
            return None
        conds.append(c)
    return _all(conds)


def _map_loads(expr, on_load):
    """``expr`` with each buffer read replaced by ``on_load(read)`` (variables kept)."""
    from tvm import tirx
    from tvm.ir.expr import TensorLoad

    if isinstance(expr, TensorLoad):
        return on_load(expr)
    if isinstance(expr, (tirx.Var, tirx.IntImm, tirx.FloatImm)):
        return expr
    name = type(expr).__name__
    if hasattr(tirx, name) and hasattr(expr, "a") and hasattr(expr, "b"):
        return getattr(tirx, name)(_map_loads(expr.a, on_load), _map_loads(expr.b, on_load))
    if isinstance(expr, tirx.Cast):
        return tirx.Cast(str(expr.ty), _map_loads(expr.value, on_load))
    raise ScheduleError(f"lowering: unsupported expression in a guard: {expr}")


def _hoist_block_guards(block: Sequence[Level], guards: Sequence):
    """``(condition, rest)``: the guards ``a < b`` with ``b`` free of the block's variables and
    ``a`` increasing in each of them hold on the whole block when they hold at its last
    iteration (``condition``: their conjunction there); ``rest`` keeps the others.  None when
    no guard has that form."""
    import tvm
    from tvm import tirx

    ana = tvm.sym.Analyzer()
    block_vars = [lv.var for lv in block]
    last = {lv.var: subst(lv.hi - 1, {}) for lv in block}

    def reads(e, v) -> bool:
        return any(u.same_as(v) for u in free_vars(e))

    def increasing(a, v) -> bool:
        step = ana.simplify(subst(a, {v: v + 1}) - a)
        if hasattr(step, "value"):
            return int(step.value) > 0
        return not reads(ana.simplify(a - v), v)      # ``e + v`` with e free of v

    hoist, rest = [], []
    for g in guards:
        if isinstance(g, tirx.LT) and not any(reads(g.b, v) for v in block_vars) \
                and all(increasing(g.a, v) for v in block_vars if reads(g.a, v)):
            hoist.append(subst(g, last))
        else:
            rest.append(g)
    return (_all(hoist), rest) if hoist else None


def _hoist_edge_guards(last: Level, guards: Sequence):
    """``(condition, rest)``: the guards ``e + v < b`` on the constant loop ``v`` (``e``, ``b``
    free of ``v``) hold for every ``v`` when they hold at its last iteration, so ``condition``
    (their conjunction there) can be tested once outside the loop, which then keeps only
    ``rest``; None when no guard has that form."""
    import tvm
    from tvm import tirx

    ana = tvm.sym.Analyzer()
    hoist, rest = [], []
    for g in guards:
        if isinstance(g, tirx.LT) and not any(v.same_as(last.var) for v in free_vars(g.b)) \
                and not any(v.same_as(last.var) for v in free_vars(ana.simplify(g.a - last.var))):
            hoist.append(subst(g, {last.var: last.hi - 1}))
        else:
            rest.append(g)
    return (_all(hoist), rest) if hoist else None


def _drop_row_guards(nest: SparseNest, outer: Level, row_level, inner: Sequence[Level],
                            guards: Sequence) -> list:
    """``guards`` without those reading only the row tile's rows, where that is safe: the value
    is a padded copy with identity 0 (a row past ``M`` adds 0 to an accumulator never written),
    the column does not depend on the row, and no inner loop's bounds read the row."""
    from tvm.ir.expr import TensorLoad

    from schedules.sparse.recipes.nest import Role

    if row_level is None:
        return list(guards)
    role = nest.roles.get(nest.value.source.name) if isinstance(nest.value, TensorLoad) else None
    identity = nest.meta.get("compaction", {}).get("identity")
    identity = identity.get("data") if isinstance(identity, dict) else identity
    reads_row = any(v.same_as(row_level.var) for lv in inner for v in free_vars(lv.lo) + free_vars(lv.hi))
    if role is None or role.role is not Role.COPY or identity != 0 or reads_row \
            or any(v.same_as(row_level.var) for v in free_vars(nest.col)):
        return list(guards)
    row_vars = {outer.var, row_level.var} | set(nest.sizes.values())
    return [g for g in guards if not set(free_vars(g)) <= row_vars]


def _guarded(f: _Func, guards: Sequence, vmap: dict, body: Callable[[], None]) -> None:
    cond = _all(subst(g, vmap) for g in guards)
    with _if(f.T, cond):
        body()
