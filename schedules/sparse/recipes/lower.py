"""Lower a transformed :class:`~.nest.SparseNest` to a TIR PrimFunc with TVM's IR builder.

Every executor takes the executors' contract (see
:mod:`schedules.sparse.executors.spec`): ``(*format arrays, [part], B, C_in,
C_out, alpha, beta)`` and computes ``C_out = alpha * A @ B + beta * C_in``.

This module holds the IR-building core every lowering shares (the function
frame, loops, guards, column tiers) and :func:`naive_primfunc`: the nest as
written (every guard kept, each placed at the shallowest loop that binds its
variables); executable for any state of a recipe, make-dense without
compaction included.  A row-outermost nest keeps its row loop outside a
spatial block (the row's only writer), so ``tvm.s_tir.Schedule`` can split,
reorder, unroll and parallelise it.  The scheduled executors build on it: the
register-blocked row tiles in :mod:`.row_tile`, SpMV over row vectors in
:mod:`.vector_rows`, scatter executors in :mod:`.scatter`.

>>> from schedules.sparse.recipes.nest import csr_loop_nest, nest_from_primfunc
>>> "T.prim_func" in naive_primfunc(nest_from_primfunc(csr_loop_nest())).script()
True
"""
from __future__ import annotations

from typing import Callable, Sequence

from schedules.sparse.recipes.nest import Level, SparseNest, free_vars, subst
from tvm_ext.errors import ScheduleError

__all__ = ["naive_primfunc", "part_buffer", "row_structure", "row_position", "dense_operands",
           "simplify_guards", "is_row_tile", "UNROLL_EXTENT"]

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
        for v, _ in self.nest.meta.get("runtime_sizes", ()):  # int32 scalars after C_out
            T.arg(v.name, v)
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
    found = row_structure(nest)
    with _Func(nest, name) as f:
        T = f.T
        M = nest.sizes["M"]

        def scale_row(vr):
            def scale(col):
                f.store(f.C_out, f.beta * f.c(f.C_in, vr, col), [vr, col] if col is not None else [vr])
            if nest.kind == "spmm":
                with f.loop("serial", 0, f.N, "n") as n:
                    scale(n)
            else:
                scale(None)
        if found is not None and row_position(nest)[1] is not None:
            found = None           # rows through a permutation: the generic scale-then-update form
        if found is None or found[1] != 1:
            with f.loop("serial", 0, M, "r") as r:
                with T.sblock("scale"):
                    scale_row(T.axis.spatial(M, r))

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
        guards = simplify_guards(nest, nest.guards)
        if found is not None and found[1] == 1:
            # the row loop outside a spatial block "row": tvm.s_tir.Schedule can split,
            # reorder, unroll and parallelise it
            lv = nest.levels[0]
            with f.loop("serial", lv.lo, lv.hi, lv.name) as i:
                with T.sblock("row"):
                    vi = T.axis.spatial(M, i)
                    f.IRBuilder.name("vi", vi)
                    # the row block is the only writer of its row; its own partial sums are
                    # not an input (what makes the row loop parallel for s_tir.Schedule)
                    row_cols = (vi, slice(0, f.N)) if nest.kind == "spmm" else (slice(vi, vi + 1),)
                    T.reads(*[b[tuple(slice(0, e) for e in b.shape)] for b in nest.buffers.values()],
                            f.B[tuple(slice(0, e) for e in f.B.shape)], f.C_in[row_cols])
                    T.writes(f.C_out[row_cols])
                    scale_row(vi)
                    _emit_levels(f, nest.levels[1:], guards, {lv.var: vi}, body)
        else:
            _emit_levels(f, nest.levels, guards, {}, body)
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


def part_buffer(name: str = "part"):
    """The ``int32`` boundaries of a parallel loop's parts (a kernel parameter)."""
    from tvm import tirx

    return tirx.decl_buffer((tirx.Var(f"{name.upper()}_N", "int32"),), "int32", name)


#: Constant inner loops up to this trip count are unrolled (a block's rows/columns).
UNROLL_EXTENT = 8


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
    pos = row_position(nest)[0]
    if pos.same_as(lv.var) and ana.can_prove_equal(lv.lo, 0) \
            and ana.can_prove_equal(lv.hi, nest.sizes["M"]):
        return lv, 1, None
    if nest.meta.get("row_blocks") != lv.name or not ana.can_prove_equal(lv.lo, 0):
        return None
    for r in nest.levels[1:]:
        ext = ana.simplify(r.hi - r.lo)
        if r.existential or not hasattr(ext, "value") or not ana.can_prove_equal(r.lo, 0):
            continue
        if ana.can_prove_equal(pos - (lv.var * int(ext.value) + r.var), 0):
            return lv, int(ext.value), r
    return None


def row_position(nest: SparseNest) -> tuple:
    """``(position, perm)``: the output row is ``perm[position]`` when it is read through a row
    permutation of the format (SELL's sorted rows), else ``(row, None)``."""
    from tvm.ir.expr import TensorLoad

    from schedules.sparse.recipes.nest import Role

    row = nest.row
    if isinstance(row, TensorLoad) and len(row.indices) == 1:
        role = nest.roles.get(row.source.name)
        if role is not None and role.role is Role.PERMUTATION:
            return row.indices[0], row.source
    return row, None


def is_row_tile(nest: SparseNest) -> bool:
    """Whether the outermost loop owns consecutive output rows (see :func:`row_structure`)."""
    return row_structure(nest) is not None
