"""SGD matrix completion from recipes: Diag and BlkDiag schedules (Venkat 2016 §6.2, Kaleem et al.).

The ratings matrix (movies x users) is the CSR loop nest; the SGD update of
an entry ``(i, u, r)`` (Listing 6.8) is::

    err = r - <fm[i], fu[u]>
    fm[i] += step * (err * fu[u] - lam * fm[i]);  fu[u] += step * (err * fm_old[i] - lam * fu[u])

Two entries conflict when they share a movie or a user; entries on one
diagonal never do.  The recipes only reorder the iteration space:

* Diag: make-dense, skew ``k`` by ``-i``, shift by ``M - 1``, diagonal-major,
  compact ``i``: ``|M| + |U| - 1`` diagonals, no padding.
* BlkDiag: tile ``i`` by R and ``k`` by C first, skew/shift the tile loops,
  compact-and-pad the block rows: ``ceil(|M|/R) + ceil(|U|/C) - 1`` block
  diagonals of R x C blocks (padded slots carry column -1 and are skipped).

The executor (:func:`sgd_primfunc`, generated from the same nest) runs the
diagonals in order and the entries (blocks) of one diagonal in
``T.parallel``: fewer diagonals mean fewer parallel-region barriers, the
BlkDiag gain the dissertation reports.

>>> import scipy.sparse as sp
>>> A = sp.random(4, 6, 0.5, format="csr", random_state=0)
>>> build_sgd(sgd_diag_recipe(), A, 4).diagonals
9
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from schedules.sparse.recipes.lower import _emit_levels, _Func, simplify_guards
from schedules.sparse.recipes.nest import Role, SparseNest, subst
from schedules.sparse.recipes.recipe import GeneratedFormat, Recipe
from schedules.sparse.recipes.steps import Compact, CompactAndPad, MakeDense, Permute, Shift, Skew, Tile
from tvm_ext.errors import InputError, ScheduleError, ShapeError

__all__ = ["sgd_diag_recipe", "sgd_blkdiag_recipe", "sgd_primfunc", "SGDExecutor", "build_sgd",
           "sgd_reference", "sgd_compare"]


def sgd_diag_recipe() -> Recipe:
    """Diag: one diagonal per ``k - i``; diagonals numbered from 0 by the shift ``M - 1``."""
    return Recipe("sgd_diag", (MakeDense(), Skew("k", "i", -1, name="d"), Shift("d", lambda m, k: m - 1),
                               Permute(("d", "i")), Compact(("i",))), ())


def sgd_blkdiag_recipe(R: int = 4, C: int = 4) -> Recipe:
    """BlkDiag: R x C blocks, one block diagonal per ``kk - ii``, padded blocks."""
    return Recipe(f"sgd_blkdiag{R}x{C}", (
        MakeDense(), Tile("i", R), Tile("k", C), Skew("kk", "ii", -1, name="dd"),
        Shift("dd", lambda m, k, R=R: (m + R - 1) // R - 1), Permute(("dd", "ii", "i", "k")),
        CompactAndPad(("ii",), identity={"data": 0, "col": -1}, arrays=("data", "col"))), ())


def _inspect(recipe: Recipe, A) -> GeneratedFormat:
    fmt = recipe.inspect(A)
    nest = recipe.nest(fmt.dtype.name)
    diag = nest.levels[0]
    offset = fmt.arrays_with(Role.OFFSET)
    if not offset:
        raise ScheduleError(f"{recipe.name}: the diagonal loop must be outside the compacted loop")
    sizes = dict(fmt.meta["sizes"], diagonals=int(offset[0].size - 1))
    return dataclasses.replace(fmt, meta=dict(fmt.meta, sizes=sizes, diagonal_loop=diag.name))


def sgd_primfunc(nest: SparseNest, features: int):
    """The SGD executor of a diagonal-major compacted nest: diagonals serial, the compacted
    loop (entries or blocks of one diagonal) in ``T.parallel``, loops inside serial."""
    from tvm import tirx

    if len(nest.levels) < 2 or nest.levels[1].name != "p":
        raise ScheduleError("sgd: expected the diagonal loop, then the compacted loop p")
    diag, comp, inner = nest.levels[0], nest.levels[1], nest.levels[2:]
    M, K = nest.sizes["M"], nest.sizes["K"]
    dtype = nest.dtype
    fm = tirx.decl_buffer((M, features), dtype, "FM")
    fu = tirx.decl_buffer((K, features), dtype, "FU")
    guards = simplify_guards(nest, nest.guards)
    if nest.buffer_of(Role.COPY, "col") is not None:            # padded slots carry column -1
        guards.append(nest.col >= 0)
    f = _Func(nest, "sgd")
    f.params = list(nest.buffers.values()) + [fm, fu]
    f.alpha = tirx.Var("step", dtype)       # the contract's two scalars: step size, lambda
    f.beta = tirx.Var("lam", dtype)
    with f:
        T = f.T
        step, lam = f.alpha, f.beta
        with f.loop("serial", diag.lo, diag.hi, diag.name) as d:
            lo, hi = subst(comp.lo, {diag.var: d}), subst(comp.hi, {diag.var: d})
            with f.loop("parallel", 0, hi - lo, "p0") as p0:
                err = T.alloc_local((1,), dtype)
                f.IRBuilder.name("err", err)

                def body(vmap):
                    row, col, val = (subst(e, vmap) for e in (nest.row, nest.col, nest.value))
                    f.store(err, val, [0])
                    with f.loop("serial", 0, features, "c") as c:
                        f.store(err, err[0] - fm[row, c] * fu[col, c], [0])
                    with f.loop("serial", 0, features, "c") as c:
                        old = T.bind(fm[row, c])
                        f.store(fm, old + step * (err[0] * fu[col, c] - lam * old), [row, c])
                        f.store(fu, fu[col, c] + step * (err[0] * old - lam * fu[col, c]), [col, c])
                _emit_levels(f, inner, guards, {diag.var: d, comp.var: lo + p0}, body)
    return f.get()


class SGDExecutor:
    """One SGD sweep over every rating, in the recipe's conflict-free order.

    ``exe(fm, fu, step, lam)`` updates the float arrays ``fm`` (M x F) and
    ``fu`` (K x F) in place; ``exe.time(fm, fu)`` times one sweep (seconds).
    """

    def __init__(self, recipe: Recipe, A, features: int, target: Any = None):
        import tvm

        from tvm_ext.target import resolve_target

        self.recipe = recipe
        self.format = _inspect(recipe, A)
        self.features = int(features)
        self.diagonals = self.format.meta["sizes"]["diagonals"]
        nest = recipe.nest(self.format.dtype.name)
        self.prim_func = sgd_primfunc(nest, self.features)
        self.mod = tvm.compile(tvm.IRModule({"main": self.prim_func}), target=resolve_target(target))
        self._arrays = [tvm.runtime.tensor(self.format.arrays[n]) for n in nest.buffers]
        self.shape = self.format.shape

    def _tensors(self, fm, fu):
        import tvm

        m, k = self.shape
        dt = self.format.dtype
        for x, shp, what in ((fm, (m, self.features), "fm"), (fu, (k, self.features), "fu")):
            if not isinstance(x, np.ndarray) or x.shape != shp or x.dtype != dt:
                raise ShapeError(f"sgd: {what} must be a {dt} array of shape {shp}")
        return tvm.runtime.tensor(fm), tvm.runtime.tensor(fu)

    def __call__(self, fm: np.ndarray, fu: np.ndarray, step: float = 0.01, lam: float = 0.05) -> None:
        tm, tu = self._tensors(fm, fu)
        self.mod["main"](*self._arrays, tm, tu, float(step), float(lam))
        fm[...] = tm.numpy()
        fu[...] = tu.numpy()

    def time(self, fm: np.ndarray, fu: np.ndarray, repeat: int = 5) -> float:
        import tvm

        tm, tu = self._tensors(fm, fu)
        ev = self.mod.mod.time_evaluator("main", tvm.cpu(0), number=1, repeat=repeat, min_repeat_ms=20)
        return ev(*self._arrays, tm, tu, 1e-6, 0.0).min


def build_sgd(recipe: Recipe, A, features: int = 16, *, target: Any = None) -> SGDExecutor:
    """Inspect ``A`` (movies x users ratings) with ``recipe`` and compile its SGD executor."""
    if int(features) < 1:
        raise InputError(f"sgd: features must be >= 1, got {features!r}")
    return SGDExecutor(recipe, A, features, target)


def sgd_reference(A, fm: np.ndarray, fu: np.ndarray, step: float, lam: float, *,
                  R: int | None = None, C: int | None = None) -> None:
    """numpy sweep in the same order: diagonals (or R x C block diagonals) in order, the
    independent entries (blocks) of a diagonal at once, in place."""
    coo = A.tocoo()
    i, u, r = coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data
    m = A.shape[0]
    if R is None:
        key, sub = u - i + m - 1, np.zeros_like(i)
    else:
        key = u // C - i // R + (m + R - 1) // R - 1
        sub = (i % R) * C + (u % C)
    order = np.lexsort((i, sub, key))
    i, u, r, key, sub = i[order], u[order], r[order], key[order], sub[order]
    for kv in np.unique(key):
        sel = key == kv
        for sv in np.unique(sub[sel]):
            s = sel & (sub == sv)
            ii, uu, rr = i[s], u[s], r[s]
            err = rr - np.einsum("ef,ef->e", fm[ii], fu[uu])
            old = fm[ii].copy()
            fm[ii] = old + step * (err[:, None] * fu[uu] - lam * old)
            fu[uu] = fu[uu] + step * (err[:, None] * old - lam * fu[uu])


def sgd_compare(A, features: int = 16, tiles: tuple[int, int] = (4, 4)) -> list[dict]:
    """Time one sweep of Diag and BlkDiag on ``A``: rows with diagonals, ms and gain vs Diag."""
    A = A.astype(np.float32)
    rng = np.random.default_rng(0)
    fm = rng.random((A.shape[0], features), dtype=np.float32)
    fu = rng.random((A.shape[1], features), dtype=np.float32)
    rows = []
    base = None
    for recipe in (sgd_diag_recipe(), sgd_blkdiag_recipe(*tiles)):
        exe = build_sgd(recipe, A, features)
        t = exe.time(fm.copy(), fu.copy())
        base = t if base is None else base
        rows.append({"format": recipe.name, "diagonals": exe.diagonals, "ms": t * 1e3, "gain": base / t})
    return rows
