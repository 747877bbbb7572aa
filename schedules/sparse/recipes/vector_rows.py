"""SpMV lowered with one vector over consecutive rows (the DIA/ELL SpMV micro-kernel).

Applies to a row-outermost SpMV nest whose inner loop ranges do not depend on
the row: each block takes ``lanes`` consecutive rows; a full tile whose row
guards hold at both ends takes the vector path (contiguous ``a_data[p, i]``
reads for DIA), the rest run lane by lane, guarded.

>>> from schedules.sparse.recipes.library import csr_recipe, dia_recipe
>>> vector_rows_fit(dia_recipe().nest("float32", "spmv")), vector_rows_fit(csr_recipe().nest("float32", "spmv"))
(True, False)
"""
from __future__ import annotations

from schedules.sparse.recipes.interior_split import InteriorSplit, emit_rows, interior_split
from schedules.sparse.recipes.lower import (_all, _const, _emit_levels, _Func, _if, is_row_tile,
                                            part_buffer, row_position, simplify_guards)
from schedules.sparse.recipes.nest import SparseNest, free_vars, subst
from tvm_ext.errors import ScheduleError

__all__ = ["vector_rows_fit", "vector_rows_primfunc", "vector_rows_part", "emit_vector_rows"]


def vector_rows_fit(nest: SparseNest) -> bool:
    """SpMV rows can share one vector when the values are row-inner (``a_data[.., i]``: one
    contiguous vector), no inner loop's range depends on the row and each guard on the row is
    affine in it (it then holds on a whole tile when it holds at both ends)."""
    if nest.kind != "spmv" or not is_row_tile(nest) or row_position(nest)[1] is not None:
        return False
    row = nest.levels[0].var
    from tvm.ir.expr import TensorLoad

    if isinstance(nest.value, TensorLoad) and nest.value.indices and \
            not nest.value.indices[-1].same_as(row):
        return False          # values not row-inner (row-major ELL): a vector of rows would gather
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
    kind = vector_rows_part(nest, kernel)
    part = part_buffer() if kind else None
    with _Func(nest, "recipe_rows_spmv", [part] if part is not None else []) as f:
        emit_vector_rows(f, nest, kernel, part)
    return f.get(), kind


def vector_rows_part(nest: SparseNest, kernel) -> str | None:
    """The part array :func:`emit_vector_rows` takes (``"tiles"`` when parallel)."""
    if not vector_rows_fit(nest):
        raise ScheduleError("vector_rows: needs an SpMV row-outermost nest whose inner ranges do "
                            "not depend on the row")
    return "tiles" if kernel.parallel else None


def emit_vector_rows(f: _Func, nest: SparseNest, kernel, part) -> None:
    """Emit the row-vector SpMV into ``f`` (every output row written)."""
    from tvm import tirx

    vector_rows_part(nest, kernel)
    L = int(kernel.lanes)
    row_level = nest.levels[0]
    M = nest.sizes["M"]
    guards = simplify_guards(nest, nest.guards)
    row_guards = [g for g in guards if any(v.same_as(row_level.var) for v in free_vars(g))]
    other = [g for g in guards if g not in row_guards]
    tiles = tirx.FloorDiv(M + (L - 1), L)
    rows = interior_split(f, nest, row_level, row_guards)
    # the tiles whose rows all lie in the interior rows [lo, hi) test no row guard
    split = None if rows is None else InteriorSplit(
        tirx.FloorDiv(rows.lo + (L - 1), L),
        tirx.max(tirx.FloorDiv(rows.lo + (L - 1), L), tirx.FloorDiv(rows.hi, L)), rows.rest)

    def tile(it, gs):
        _row_tile(f, nest, it, tiles, L, list(gs), other)
    if part is not None:
        NP = part.shape[0]
        with f.loop("parallel", 0, NP - 1, "t") as t:
            emit_rows(f, split, part[t], part[t + 1], row_guards, tile)
    else:
        emit_rows(f, split, 0, tiles, row_guards, tile)


def _row_tile(f: _Func, nest: SparseNest, it, tiles, L: int, row_guards, other) -> None:
    """One block of ``L`` rows: zero, reduce (vector or guarded lanes), write."""
    T = f.T
    dtype = nest.dtype
    M = nest.sizes["M"]
    row_level, inner = nest.levels[0], nest.levels[1:]
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


