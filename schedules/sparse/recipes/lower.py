"""Lower a transformed :class:`~.nest.SparseNest` to a TIR PrimFunc with TVM's IR builder.

Every executor takes the executors' contract (see
:mod:`schedules.sparse.executors.spec`): ``(*format arrays, [part], B, C_in,
C_out, alpha, beta)`` and computes ``C_out = alpha * A @ B + beta * C_in``.

* :func:`naive_primfunc`: the nest as written (every guard kept, each placed
  at the shallowest loop that binds its variables); executable for any state
  of a recipe, make-dense without compaction included.
* :func:`row_tile_primfunc`: the nest whose outermost loop is the output row,
  with the micro-kernel schedule of :class:`~.schedule.MicroKernel`: rows in
  ``T.parallel`` parts, one ``T.sblock`` per (row, column tile), the tile's
  accumulators in registers across every inner loop, the innermost loop's
  iterations interleaved over independent partial sums, ``C`` written once.
* :func:`scatter_primfunc`: nests whose output row is data (COO): ``C_out``
  scaled first, then each entry's vector update; parallel over row-aligned
  chunks when entries are row-sorted.

>>> from schedules.sparse.recipes.nest import csr_loop_nest, nest_from_primfunc
>>> "T.prim_func" in naive_primfunc(nest_from_primfunc(csr_loop_nest())).script()
True
"""
from __future__ import annotations

from typing import Callable, Sequence

from schedules.sparse.recipes.nest import Level, SparseNest, free_vars, subst
from tvm_ext.errors import ScheduleError

__all__ = ["naive_primfunc", "row_tile_primfunc", "vector_rows_primfunc", "vector_rows_fit",
           "scatter_primfunc", "dense_operands",
           "simplify_guards", "is_row_tile"]

#: Tier widths below this use a masked serial remainder (mirrors the text executors).
MIN_LANES = 4


def _const(v, dtype):
    from tvm import tirx

    return tirx.const(v, dtype)


def dense_operands(nest: SparseNest):
    """``B``, ``C_in``, ``C_out`` buffers (element-aligned: numpy arrays arrive through DLPack)."""
    import numpy as np
    from tvm import tirx

    M, K = nest.sizes["M"], nest.sizes["K"]
    align = np.dtype(nest.dtype).itemsize
    if nest.kind == "spmm":
        N = nest.sizes["N"] if "N" in nest.sizes else tirx.Var("N", "int32")
        b, c = (K, N), (M, N)
    else:
        N = None
        b, c = (K,), (M,)
    B = tirx.decl_buffer(b, nest.dtype, "B", data_alignment=align)
    C_in = tirx.decl_buffer(c, nest.dtype, "C_in", data_alignment=align)
    C_out = tirx.decl_buffer(c, nest.dtype, "C_out", data_alignment=align)
    return N, B, C_in, C_out


def simplify_guards(nest: SparseNest, guards: Sequence) -> list:
    """Guards simplified knowing every size is non-negative and each loop's range; true ones dropped."""
    import tvm

    ana = tvm.sym.Analyzer()
    for v in nest.sizes.values():
        ana.update(v, tvm.sym.ConstIntBound(0, (1 << 31) - 1))
    for lv in nest.levels:
        lo = ana.const_int_bound(lv.lo)
        hi = ana.const_int_bound(lv.hi)
        ana.update(lv.var, tvm.sym.ConstIntBound(lo.min_value, max(hi.max_value - 1, lo.min_value)))
    out = []
    for g in guards:
        g = ana.simplify(g)
        if hasattr(g, "value") and int(g.value) == 1:
            continue
        out.append(g)
    return out


def _all(conds):
    from tvm import tirx

    out = None
    for c in conds:
        out = c if out is None else tirx.And(out, c)
    return out


class _Func:
    """IR-builder context for one PrimFunc of the executor contract."""

    def __init__(self, nest: SparseNest, name: str, extra: Sequence = ()):
        from tvm import tirx
        from tvm.script.ir_builder import IRBuilder
        from tvm.script.ir_builder import tirx as T

        self.T, self.IRBuilder = T, IRBuilder
        self.nest = nest
        self.N, self.B, self.C_in, self.C_out = dense_operands(nest)
        self.alpha = tirx.Var("alpha", nest.dtype)
        self.beta = tirx.Var("beta", nest.dtype)
        self.params = list(nest.buffers.values()) + list(extra) + [self.B, self.C_in, self.C_out]
        self.name = name
        self.ib = IRBuilder()

    def __enter__(self):
        T = self.T
        self.ib.__enter__()
        self._pf = T.prim_func(s_tir=True)
        self._pf.__enter__()
        T.func_name(self.name)
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for b in self.params:
            T.arg(b.name, b)
        T.arg(self.alpha.name, self.alpha)
        T.arg(self.beta.name, self.beta)
        return self

    def __exit__(self, *exc):
        self._pf.__exit__(*exc)
        self.ib.__exit__(*exc)

    def get(self):
        return self.ib.get()

    def loop(self, kind: str, lo, hi, name: str):
        T = self.T
        frame = {"serial": T.serial, "parallel": T.parallel, "unroll": T.unroll,
                 "vectorized": T.vectorized}[kind](lo, hi)
        return _Named(frame, name, self.IRBuilder)

    def store(self, buf, value, indices):
        self.T.buffer_store(buf, value, list(indices))

    def c(self, buf, row, col):
        return buf[row, col] if self.nest.kind == "spmm" else buf[row]


class _Named:
    def __init__(self, frame, name, ib):
        self.frame, self.name, self.ib = frame, name, ib

    def __enter__(self):
        v = self.frame.__enter__()
        self.ib.name(self.name, v)
        return v

    def __exit__(self, *exc):
        return self.frame.__exit__(*exc)


def _if(T, cond):
    """``with _if(T, cond):`` (``cond`` None: no branch)."""
    from contextlib import contextmanager

    @contextmanager
    def cm():
        if cond is None:
            yield
            return
        with T.If(cond):
            with T.Then():
                yield
    return cm()


def _emit_levels(f: _Func, levels: Sequence[Level], guards: Sequence, vmap: dict,
                 body: Callable[[dict], None], unroll: bool = False) -> None:
    """Loops over ``levels`` (renamed through ``vmap``) with each guard at its shallowest loop."""
    pending = list(guards)

    def ready(bound: set) -> list:
        out = [g for g in pending if all(v in bound for v in free_vars(g) if v not in sizes)]
        for g in out:
            pending.remove(g)
        return out

    sizes = set(f.nest.sizes.values())
    bound = set(vmap)

    def rec(at: int):
        here = ready(bound)
        cond = _all(subst(g, vmap) for g in here)
        with _if(f.T, cond):
            if at == len(levels):
                body(vmap)
                return
            lv = levels[at]
            lo, hi = subst(lv.lo, vmap), subst(lv.hi, vmap)
            ext = subst(hi - lo, {})
            kind = "unroll" if unroll and hasattr(ext, "value") and int(ext.value) <= UNROLL_EXTENT else "serial"
            with f.loop(kind, lo, hi, lv.name) as v:
                vmap[lv.var] = v
                bound.add(lv.var)
                rec(at + 1)
    rec(0)
    if pending:
        raise ScheduleError(f"lowering: guards {pending} read variables no loop binds")


def naive_primfunc(nest: SparseNest):
    """The nest as a PrimFunc, loops and guards as written (no schedule).

    ``C_out = beta * C_in`` first, then ``C_out[row] += alpha * value * B[col]``
    at every guarded iteration.
    """
    name = "recipe_" + nest.kind
    with _Func(nest, name) as f:
        M = nest.sizes["M"]
        with f.loop("serial", 0, M, "r") as r:
            def scale(col):
                f.store(f.C_out, f.beta * f.c(f.C_in, r, col), [r, col] if col is not None else [r])
            if nest.kind == "spmm":
                with f.loop("serial", 0, f.N, "n") as n:
                    scale(n)
            else:
                scale(None)

        def body(vmap):
            row, col, val = (subst(e, vmap) for e in (nest.row, nest.col, nest.value))

            def upd(n):
                idx = [row, n] if n is not None else [row]
                f.store(f.C_out, f.c(f.C_out, row, n) + f.alpha * val * f.c(f.B, col, n), idx)
            if nest.kind == "spmm":
                with f.loop("serial", 0, f.N, "n") as n:
                    upd(n)
            else:
                upd(None)
        _emit_levels(f, nest.levels, simplify_guards(nest, nest.guards), {}, body)
    return f.get()


# ----------------------------------------------------------------------------- column tiers

class _Tier:
    """A group of output columns handled by one block (see ``executors.tiles``)."""

    def __init__(self, suffix, count, base, unroll, lanes, mask=None, cond=None):
        self.suffix, self.count, self.base = suffix, count, base
        self.unroll, self.lanes, self.mask, self.cond = unroll, lanes, mask, cond

    @property
    def width(self):
        return self.unroll * self.lanes


def _tiers(N, lanes: int, unroll: int, spmv: bool) -> list[_Tier]:
    """Full tiles of ``unroll*lanes`` columns, then single vectors, halving vectors and a
    masked remainder, so one kernel serves every ``N``."""
    from tvm import tirx

    if spmv:
        return [_Tier("", None, None, 1, 1)]
    w = lanes * unroll
    tiers = [_Tier("", tirx.FloorDiv(N, w), lambda vj: vj * w, unroll, lanes)]
    if unroll > 1:
        tiers.append(_Tier("_vec", tirx.FloorDiv(tirx.FloorMod(N, w), lanes),
                           lambda vj: tirx.FloorDiv(N, w) * w + vj * lanes, 1, lanes))
    half = lanes // 2
    min_lanes = max(1, min(MIN_LANES, lanes))
    while half >= min_lanes:
        h2 = 2 * half
        tiers.append(_Tier(f"_v{half}", None, lambda vj, h2=h2: N - tirx.FloorMod(N, h2), 1, half,
                           cond=tirx.FloorMod(N, h2) >= half))
        half //= 2
    last = 2 * half if 2 * half <= lanes else lanes
    if last > 1:
        tiers.append(_Tier("_rem", None, lambda vj, last=last: N - tirx.FloorMod(N, last), 1, last,
                           mask=tirx.FloorMod(N, last), cond=tirx.FloorMod(N, last) != 0))
    return tiers


def _lanes(f: _Func, tier: _Tier, stmt: Callable) -> None:
    """Run ``stmt(lane)`` over the tier's lanes: unrolled vectors, vectorised, or masked."""
    T = f.T
    if tier.count is None and tier.base is None:          # SpMV: one scalar lane
        stmt(0)
        return

    def inner(u):
        kind = "serial" if tier.mask is not None else "vectorized"
        with f.loop(kind, 0, tier.lanes, "jj") as jj:
            lane = jj if u is None else u * tier.lanes + jj
            with _if(T, None if tier.mask is None else jj < tier.mask):
                stmt(lane)
    if tier.unroll > 1:
        with f.loop("unroll", 0, tier.unroll, "u") as u:
            inner(u)
    else:
        inner(None)


def row_structure(nest: SparseNest):
    """``(outer level, rows R, row level)`` when the outermost loop owns ``R`` consecutive
    output rows: the row itself over ``[0, M)`` (``R = 1``, row level None), or a row tile
    ``row = R * outer + r`` (a :class:`~.steps.Tile` of the row) with ``r`` a loop over
    ``[0, R)`` inside; else None."""
    import tvm

    if not nest.levels or nest.levels[0].existential:
        return None
    lv = nest.levels[0]
    ana = tvm.sym.Analyzer()
    if nest.row.same_as(lv.var) and ana.can_prove_equal(lv.lo, 0) \
            and ana.can_prove_equal(lv.hi, nest.sizes["M"]):
        return lv, 1, None
    if nest.meta.get("row_blocks") != lv.name or not ana.can_prove_equal(lv.lo, 0):
        return None
    for r in nest.levels[1:]:
        ext = ana.simplify(r.hi - r.lo)
        if r.existential or not hasattr(ext, "value") or not ana.can_prove_equal(r.lo, 0):
            continue
        if ana.can_prove_equal(nest.row - (lv.var * int(ext.value) + r.var), 0):
            return lv, int(ext.value), r
    return None


def is_row_tile(nest: SparseNest) -> bool:
    """Whether the outermost loop owns consecutive output rows (see :func:`row_structure`)."""
    return row_structure(nest) is not None


def row_tile_primfunc(nest: SparseNest, kernel) -> tuple:
    """The register-blocked row-tile executor of ``nest`` under micro-kernel ``kernel``.

    Each block holds ``R x (unroll * lanes)`` accumulators (``R`` rows of a row
    tile, BCSR's block in registers) across every inner loop; small constant
    loops are unrolled.  Returns ``(PrimFunc, part kind)``; with
    ``kernel.parallel`` the kernel takes a ``part`` array of outer-loop
    boundaries (kind ``"rows:R"``) after the format arrays.
    """
    from tvm import tirx

    found = row_structure(nest)
    if found is None:
        raise ScheduleError("row_tile: the outermost loop must own the output rows (the row over "
                            "[0, M) or a tile of it); reorder the loops first (outermost is "
                            f"{nest.levels[0].name if nest.levels else None}, row is {nest.row})")
    outer, rows, row_level = found
    inner = nest.levels[1:]
    part = tirx.decl_buffer((tirx.Var("NP", "int32"),), "int32", "part") if kernel.parallel else None
    guards = simplify_guards(nest, nest.guards)
    spmv = nest.kind == "spmv"
    with _Func(nest, f"recipe_row_{nest.kind}", [part] if part is not None else []) as f:
        tiers = _tiers(f.N, kernel.lanes, kernel.unroll, spmv)

        def row_body(i):
            for tier in tiers:
                chains = kernel.chains(tier.unroll * rows, spmv)
                _row_block(f, nest, tier, chains, i, outer, rows, row_level, inner, guards)

        if kernel.parallel:
            NP = part.shape[0]
            with f.loop("parallel", 0, NP - 1, "t") as t:
                with f.loop("serial", part[t], part[t + 1], "i") as i:
                    row_body(i)
        else:
            with f.loop("serial", 0, outer.hi, "i") as i:
                row_body(i)
    return f.get(), (f"rows:{rows}" if part is not None else None)


#: Constant inner loops up to this trip count are unrolled (a block's rows/columns).
UNROLL_EXTENT = 8


def _row_block(f: _Func, nest: SparseNest, tier: _Tier, chains: int, i, outer: Level, rows: int,
               row_level, inner: Sequence[Level], guards: Sequence) -> None:
    from contextlib import ExitStack

    T = f.T
    dtype = nest.dtype
    M = nest.sizes["M"]
    with ExitStack() as stack:
        vj = None
        if tier.cond is not None:
            stack.enter_context(_if(T, tier.cond))
        if tier.count is not None:
            jo = stack.enter_context(f.loop("serial", 0, tier.count, "jo"))
        stack.enter_context(T.sblock(f"row{tier.suffix}"))
        vi = T.axis.spatial(outer.hi, i)
        f.IRBuilder.name("vi", vi)
        if tier.count is not None:
            vj = T.axis.spatial(tier.count, jo)
            f.IRBuilder.name("vj", vj)
        base = None if tier.base is None else tier.base(vj)
        acc = T.sblock_alloc_buffer((chains * rows, tier.width), dtype, scope="local")
        f.IRBuilder.name("acc", acc)

        def col(lane):
            return None if base is None else base + lane

        def out_row(r):
            return vi if rows == 1 else vi * rows + r

        with f.loop("unroll", 0, chains * rows, "r") as r:
            _lanes(f, tier, lambda lane: f.store(acc, _const(0, dtype), [r, lane]))

        def fma(vmap, chain):
            val, b_row = subst(nest.value, vmap), subst(nest.col, vmap)
            a = chain * rows + (vmap[row_level.var] if row_level is not None else 0)
            _lanes(f, tier, lambda lane: f.store(
                acc, acc[a, lane] + val * f.c(f.B, b_row, col(lane)), [a, lane]))

        _reduce(f, nest, inner, guards, {outer.var: vi}, chains, fma)
        if chains > 1:
            with f.loop("unroll", 0, chains - 1, "k") as k:
                with f.loop("unroll", 0, rows, "r") as r:
                    _lanes(f, tier, lambda lane: f.store(
                        acc, acc[r, lane] + acc[(k + 1) * rows + r, lane], [r, lane]))

        def write(with_beta):
            with f.loop("unroll", 0, rows, "r") as r:
                row = out_row(r)
                with _if(T, None if rows == 1 else row < M):
                    def one(lane):
                        rhs = f.alpha * acc[r, lane]
                        if with_beta:
                            rhs = rhs + f.beta * f.c(f.C_in, row, col(lane))
                        f.store(f.C_out, rhs, [row, col(lane)] if not nest.kind == "spmv" else [row])
                    _lanes(f, tier, one)
        with T.If(f.beta == _const(0, dtype)):
            with T.Then():
                write(False)
            with T.Else():
                write(True)


def _reduce(f: _Func, nest: SparseNest, levels: Sequence[Level], guards: Sequence, vmap: dict,
            chains: int, fma: Callable) -> None:
    """The reduction loops; the innermost one's iterations go round-robin to ``chains`` sets."""
    if not levels:
        _guarded(f, guards, vmap, lambda: fma(vmap, 0))
        return
    outer, last = levels[:-1], levels[-1]
    outer_guards = [g for g in guards if not any(v.same_as(last.var) for v in free_vars(g))]
    last_guards = [g for g in guards if g not in outer_guards]

    def innermost(vm):
        lo, hi = subst(last.lo, vm), subst(last.hi, vm)
        ext = subst(hi - lo, {})
        small = hasattr(ext, "value") and int(ext.value) <= UNROLL_EXTENT
        if chains == 1 or small:
            with f.loop("unroll" if small else "serial", lo, hi, last.name) as v:
                vm2 = dict(vm)
                vm2[last.var] = v
                _guarded(f, last_guards, vm2, lambda: fma(vm2, 0))
            return
        length = hi - lo
        with f.loop("serial", 0, length // chains, "q") as q:
            with f.loop("unroll", 0, chains, "c") as c:
                vm2 = dict(vm)
                vm2[last.var] = lo + q * chains + c
                _guarded(f, last_guards, vm2, lambda: fma(vm2, c))
        with f.loop("serial", lo + length // chains * chains, hi, last.name) as v:
            vm3 = dict(vm)
            vm3[last.var] = v
            _guarded(f, last_guards, vm3, lambda: fma(vm3, 0))

    _emit_levels(f, outer, outer_guards, dict(vmap), innermost, unroll=True)


def _guarded(f: _Func, guards: Sequence, vmap: dict, body: Callable[[], None]) -> None:
    cond = _all(subst(g, vmap) for g in guards)
    with _if(f.T, cond):
        body()


# ----------------------------------------------------------------------------- SpMV over row vectors

def vector_rows_fit(nest: SparseNest) -> bool:
    """SpMV rows can share one vector when no inner loop's range depends on the row and each
    guard on the row is affine in it (it then holds on a whole tile when it holds at both ends)."""
    if nest.kind != "spmv" or not is_row_tile(nest):
        return False
    row = nest.levels[0].var
    for lv in nest.levels[1:]:
        if lv.existential or any(v.same_as(row) for v in free_vars(lv.lo) + free_vars(lv.hi)):
            return False
    return not any(_indexes_with(g, row) for g in nest.guards)


def _indexes_with(expr, var) -> bool:
    """Whether ``var`` appears inside an index of a buffer read in ``expr``."""
    from tvm import tirx
    from tvm.ir.expr import TensorLoad

    if isinstance(expr, TensorLoad):
        return any(any(v.same_as(var) for v in free_vars(i)) for i in expr.indices)
    if isinstance(expr, (tirx.Var, tirx.IntImm, tirx.FloatImm)):
        return False
    subs = [getattr(expr, n) for n in ("a", "b", "value", "condition", "true_value", "false_value")
            if hasattr(expr, n)]
    return any(_indexes_with(e, var) for e in subs)


def vector_rows_primfunc(nest: SparseNest, kernel) -> tuple:
    """SpMV vectorised over ``kernel.lanes`` consecutive rows (one tile per block): contiguous
    value/column reads when the arrays are row-inner (DIA's ``a_data[p, i]``).  Full tiles whose
    row guards hold at both ends take the vector path; the rest run lane by lane, guarded.
    Returns ``(PrimFunc, part kind)`` (``"tiles"``: parts over row tiles)."""
    from tvm import tirx

    if not vector_rows_fit(nest):
        raise ScheduleError("vector_rows: needs an SpMV row-outermost nest whose inner ranges do "
                            "not depend on the row")
    L = int(kernel.lanes)
    row_level, inner = nest.levels[0], nest.levels[1:]
    M = nest.sizes["M"]
    part = tirx.decl_buffer((tirx.Var("NP", "int32"),), "int32", "part") if kernel.parallel else None
    guards = simplify_guards(nest, nest.guards)
    row_guards = [g for g in guards if any(v.same_as(row_level.var) for v in free_vars(g))]
    other = [g for g in guards if g not in row_guards]
    dtype = nest.dtype
    with _Func(nest, "recipe_rows_spmv", [part] if part is not None else []) as f:
        T = f.T
        tiles = tirx.FloorDiv(M + (L - 1), L)

        def tile_body(it):
            with T.sblock("row_tile"):
                vt = T.axis.spatial(tiles, it)
                f.IRBuilder.name("vt", vt)
                acc = T.sblock_alloc_buffer((L,), dtype, scope="local")
                f.IRBuilder.name("acc", acc)
                with f.loop("vectorized", 0, L, "jj") as jj:
                    f.store(acc, _const(0, dtype), [jj])

                def lanes(vector: bool, vm: dict, guard_rows: bool):
                    kind = "vectorized" if vector else "serial"
                    with f.loop(kind, 0, L, "jj") as jj:
                        row = vt * L + jj
                        vm2 = dict(vm)
                        vm2[row_level.var] = row
                        conds = [subst(g, vm2) for g in row_guards] if guard_rows else []
                        if not vector:
                            conds.insert(0, row < M)
                        with _if(T, _all(conds) if conds else None):
                            val, b_row = subst(nest.value, vm2), subst(nest.col, vm2)
                            f.store(acc, acc[jj] + val * f.B[b_row], [jj])

                def reduce(full: bool):
                    def innermost(vm):
                        if full and row_guards:
                            ends = []
                            for g in row_guards:
                                for r in (vt * L, vt * L + L - 1):
                                    ends.append(subst(g, {**vm, row_level.var: r}))
                            with T.If(_all(ends)):
                                with T.Then():
                                    lanes(True, vm, False)
                                with T.Else():
                                    lanes(False, vm, True)
                        else:
                            lanes(full, vm, not full or bool(row_guards))
                    _emit_levels(f, inner, other, {}, innermost)

                def write(vector: bool):
                    kind = "vectorized" if vector else "serial"
                    for with_beta, branch in ((False, T.Then), (True, T.Else)):
                        with branch():
                            with f.loop(kind, 0, L, "jj") as jj:
                                row = vt * L + jj
                                with _if(T, None if vector else row < M):
                                    rhs = f.alpha * acc[jj]
                                    if with_beta:
                                        rhs = rhs + f.beta * f.C_in[row]
                                    f.store(f.C_out, rhs, [row])

                with T.If(vt * L + L <= M):
                    with T.Then():
                        reduce(True)
                        with T.If(f.beta == _const(0, dtype)):
                            write(True)
                    with T.Else():
                        reduce(False)
                        with T.If(f.beta == _const(0, dtype)):
                            write(False)

        if kernel.parallel:
            NP = part.shape[0]
            with f.loop("parallel", 0, NP - 1, "t") as t:
                with f.loop("serial", part[t], part[t + 1], "it") as it:
                    tile_body(it)
        else:
            with f.loop("serial", 0, tiles, "it") as it:
                tile_body(it)
    return f.get(), ("tiles" if part is not None else None)


# ----------------------------------------------------------------------------- scatter

def scatter_primfunc(nest: SparseNest, kernel, *, row_sorted: bool) -> tuple:
    """Scale ``C_out``, then add each entry's ``value * B[col, :]`` into its row.

    With ``kernel.parallel`` and ``row_sorted`` (the outermost loop runs over
    row-sorted entries) the entries are cut into row-aligned chunks
    (``part``), one ``T.parallel`` iteration each.  Returns ``(PrimFunc, part kind)``.
    """
    from tvm import tirx

    parallel = bool(kernel.parallel and row_sorted and nest.levels)
    part = tirx.decl_buffer((tirx.Var("NP", "int32"),), "int32", "part") if parallel else None
    guards = simplify_guards(nest, nest.guards)
    spmv = nest.kind == "spmv"
    M = nest.sizes["M"]
    with _Func(nest, f"recipe_scatter_{nest.kind}", [part] if part is not None else []) as f:
        T = f.T
        tiers = _tiers(f.N, kernel.lanes, kernel.unroll, spmv)
        loop_kind = "parallel" if kernel.parallel else "serial"
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
            _segmented_runs(f, nest, tiers, part)
        elif kernel.parallel and nest.levels and nest.levels[0].name == blocks:
            # each iteration of the row-tile loop owns its own output rows: no write conflicts
            first, rest = nest.levels[0], nest.levels[1:]
            with f.loop("parallel", first.lo, first.hi, first.name) as b:
                _emit_levels(f, rest, guards, {first.var: b}, update)
        elif parallel:
            first, rest = nest.levels[0], nest.levels[1:]
            NP = part.shape[0]
            with f.loop("parallel", 0, NP - 1, "t") as t:
                with f.loop("serial", part[t], part[t + 1], first.name) as p:
                    _emit_levels(f, rest, guards, {first.var: p}, update)
        else:
            _emit_levels(f, nest.levels, guards, {}, update)
    return f.get(), ("chunks" if part is not None else None)


def _segmented_runs(f: _Func, nest: SparseNest, tiers: Sequence[_Tier], part) -> None:
    """Row-sorted entries: each column tile sums a run of equal output rows in registers
    and adds it to ``C_out`` once, when the row changes (segmented sum)."""
    from contextlib import ExitStack

    from tvm import tirx

    T = f.T
    lv = nest.levels[0]
    dtype = nest.dtype
    with ExitStack() as outer:
        if part is not None:
            NP = part.shape[0]
            t = outer.enter_context(f.loop("parallel", 0, NP - 1, "t"))
        for tier in tiers:
            with ExitStack() as stack:
                if tier.cond is not None:
                    stack.enter_context(_if(T, tier.cond))
                if tier.count is not None:
                    jo = stack.enter_context(f.loop("serial", 0, tier.count, "jo"))
                stack.enter_context(T.sblock(f"run{tier.suffix}"))
                if part is not None:
                    vt = T.axis.spatial(NP - 1, t)
                    f.IRBuilder.name("vt", vt)
                    lo, hi = part[vt], part[vt + 1]
                else:
                    lo, hi = lv.lo, lv.hi
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
                    row, b_row, val = (subst(e, {lv.var: p}) for e in (nest.row, nest.col, nest.value))
                    nxt = subst(nest.row, {lv.var: tirx.Min(p + 1, lv.hi - 1)})
                    _lanes(f, tier, lambda lane: f.store(
                        acc, acc[0, lane] + val * f.c(f.B, b_row, col(lane)), [0, lane]))
                    with T.If(tirx.Or(tirx.EQ(p + 1, hi), tirx.NE(nxt, row))):
                        with T.Then():
                            def flush(lane):
                                idx = [row, col(lane)] if nest.kind == "spmm" else [row]
                                f.store(f.C_out, f.c(f.C_out, row, col(lane)) + f.alpha * acc[0, lane], idx)
                                f.store(acc, _const(0, dtype), [0, lane])
                            _lanes(f, tier, flush)


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
