"""A recipe: transformation steps that yield a format's inspector *and* its executor.

``Recipe(name, steps, schedule)`` applies its steps to two things:

* the CSR loop nest in TIR (:func:`~.nest.csr_loop_nest`): the result,
  after the executor-side ``schedule``, is lowered to the executor PrimFunc
  (:meth:`Recipe.executor`);
* the inspected iteration space of a matrix (:meth:`Recipe.inspect`): the
  result is the format's arrays, named as the executor's parameters, plus
  metadata (:class:`GeneratedFormat`).

:func:`build_recipe_executor` compiles the executor once per signature
through the library's :class:`~schedules.sparse.executors.executor.Executor`
(same calling API as ``build_executor``).

>>> from schedules.sparse.recipes.library import csr_recipe
>>> print(csr_recipe())          # doctest: +ELLIPSIS
recipe csr: make_dense(j -> k) -> compact_and_pad(k, identity=0)
schedule: parallel(row parts) -> tile_columns(N, lanes, unroll) -> interleave(innermost) -> ...
for i in range(0, M):
    for p in range(offset[i], offset[i + 1]):
        C[i, n] += a_data[p] * B[explicit_k[p], n]
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from schedules.sparse.executors.codegen import check_dtype
from schedules.sparse.executors.partition import balanced_parts, row_aligned_chunks, uniform_parts
from schedules.sparse.executors.spec import SPMV_PARTIAL_SUMS, ExecParams, FormatKernels
from schedules.sparse.recipes import lower, row_tile, run_ends, scatter, vector_rows
from schedules.sparse.recipes.nest import (BufferRole, Role, SparseNest, csr_loop_nest,
                                           nest_from_primfunc)
from schedules.sparse.recipes.schedule import MicroKernel, Reorder, RowTile, Scatter
from tvm_ext.errors import InputError, ScheduleError

__all__ = ["Recipe", "GeneratedFormat", "RecipeKernels", "build_recipe_executor"]

_INT32_MAX = np.iinfo(np.int32).max
#: Lowered executors and transformed nests by recipe key (the lowering is the slow part).
_LOWERED: dict = {}
_NESTS: dict = {}
_ACC_ROWS: dict = {}  # (recipe key, dtype) -> acc_rows


@dataclass(frozen=True)
class GeneratedFormat:
    """A matrix in a recipe's format: ``arrays`` in executor-parameter order, and metadata.

    ``roles`` says what each array holds (a :class:`~.nest.BufferRole` by
    array name); ``meta`` holds the concrete sizes the arrays bind (``M``,
    ``K``, ``NC``, ``W``...), the compaction's levels and the recipe's history.
    """

    name: str
    shape: tuple[int, int]
    arrays: Mapping[str, np.ndarray]
    meta: Mapping[str, Any] = field(default_factory=dict)
    roles: Mapping[str, BufferRole] = field(default_factory=dict)

    def arrays_with(self, role: Role, of: str = "") -> list[np.ndarray]:
        """The arrays holding ``role`` (of ``of``), in parameter order (one per part of a split)."""
        return [self.arrays[n] for n, r in self.roles.items() if r.role is role and r.of == of]

    @property
    def values(self) -> list[np.ndarray]:
        """The stored values (padding included), one array per part."""
        return self.arrays_with(Role.COPY, "data")

    @property
    def dtype(self) -> np.dtype:
        return self.values[0].dtype

    @property
    def slots(self) -> int:
        """Stored value slots, padding included."""
        return int(sum(a.size for a in self.values))

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self.arrays.values()))


@dataclass(frozen=True)
class Recipe:
    """Transformation ``steps`` (inspector + executor) and an executor-side ``schedule``."""

    name: str
    steps: tuple
    schedule: tuple = (RowTile(),)

    # ------------------------------------------------------------------ executor side
    def nest(self, dtype: str = "float32", kind: str = "spmm", *, upto: int | None = None) -> SparseNest:
        """The loop nest after the steps (``upto``: only the first ``upto``) and the reorders."""
        key = (self.key(), check_dtype(dtype), kind, upto)
        if key not in _NESTS:
            _NESTS[key] = self._nest(dtype, kind, upto)
        return _NESTS[key]

    def _nest(self, dtype: str, kind: str, upto: int | None) -> SparseNest:
        return self.transform(nest_from_primfunc(csr_loop_nest(check_dtype(dtype), kind)), kind, upto=upto)

    def transform(self, nest: SparseNest, kind: str, *, upto: int | None = None) -> SparseNest:
        """``nest`` after the steps (``upto``: only the first ``upto``) and the reorders for ``kind``."""
        steps = self.steps if upto is None else self.steps[:upto]
        for s in steps:
            nest = s.on_nest(nest)
        if upto is None:
            for s in self.schedule:
                if isinstance(s, Reorder) and kind in s.kinds:
                    nest = s.on_nest(nest)
        return nest

    def _lowering(self):
        for s in self.schedule:
            if isinstance(s, (RowTile, Scatter)):
                return s
        return None

    def executor(self, dtype: str = "float32", kind: str = "spmm", params: ExecParams | None = None,
                 *, target: Any = None, n_cols: int | None = None):
        """The executor PrimFunc (``params`` resolved like the hand-written executors')."""
        dtype = check_dtype(dtype)
        p = _resolve(params, dtype, kind, n_cols, target)
        return self._primfunc(dtype, kind, p)[0]

    def key(self) -> tuple:
        """What identifies the executor: the step and schedule labels."""
        return (self.name, tuple(s.label for s in self.steps), tuple(s.label for s in self.schedule))

    def _primfunc(self, dtype, kind, params):
        key = (self.key(), dtype, kind, params.kernel_key())
        if key not in _LOWERED:
            _LOWERED[key] = self._lower(dtype, kind, params)
        return _LOWERED[key]

    def _lower(self, dtype, kind, params):
        nest = self.nest(dtype, kind)
        if self._lowering() is None:
            return lower.naive_primfunc(nest), False
        if isinstance(self._lowering(), Scatter):
            nest = scatter.runtime_tile_sizes(nest)
        part_kind, emit = self.plan(nest, MicroKernel.from_params(params))
        part = lower.part_buffer() if part_kind else None
        with lower._Func(nest, f"{self.name}_{kind}", [part] if part is not None else []) as f:
            emit(f, part, scale=True)
        return f.get(), part_kind

    def plan(self, nest: SparseNest, kernel: MicroKernel) -> tuple:
        """``(part kind, emit)``: the part array the schedule's lowering needs (or None) and
        ``emit(func, part, scale=)`` writing its loops into a PrimFunc under construction."""
        how = self._lowering()
        if isinstance(how, RowTile):
            if how.vector_rows and vector_rows.vector_rows_fit(nest):
                return (vector_rows.vector_rows_part(nest, kernel),
                        lambda f, part, scale: vector_rows.emit_vector_rows(f, nest, kernel, part))
            return (row_tile.row_tile_part(nest, kernel),
                    lambda f, part, scale: row_tile.emit_row_tile(f, nest, kernel, part))
        if isinstance(how, Scatter):
            sorted_, runs = scatter.row_sorted(nest), scatter.row_runs(nest)
            return (scatter.scatter_part(nest, kernel, row_sorted=sorted_),
                    lambda f, part, scale: scatter.emit_scatter(f, nest, kernel, part, row_sorted=sorted_,
                                                                row_runs=runs, scale=scale))
        raise ScheduleError(f"recipe {self.name}: the schedule names no lowering (row_tile or scatter)")

    def scalars(self) -> list[int]:
        """The executor's int32 arguments after ``C_out``: a scatter's tile sizes
        (:func:`~.scatter.runtime_tile_sizes`).

        >>> from schedules.sparse.recipes.library import csb_recipe, csr_recipe
        >>> csb_recipe(256).scalars(), csr_recipe().scalars()
        ([256], [])
        """
        return scatter.tile_size_values(self.nest()) if isinstance(self._lowering(), Scatter) else []

    def part_nests(self, dtype: str, kind: str, params: ExecParams) -> list:
        """``[(nest, part kind)]`` in executor-argument order (one entry; a split recipe has more)."""
        return [(self.nest(dtype, kind), self._primfunc(dtype, kind, params)[1])]

    def acc_rows(self, dtype: str) -> int:
        """Output rows one SpMM block holds in registers (bounds the column tile's vectors);
        derived from the nest once per recipe and dtype (every executor build asks)."""
        key = (self.key(), check_dtype(dtype))
        if key not in _ACC_ROWS:
            nest = self.nest(dtype, "spmm")
            _ACC_ROWS[key] = row_tile.block_rows(nest) if isinstance(self._lowering(), RowTile) else 1
        return _ACC_ROWS[key]

    def naive_executor(self, dtype: str = "float32", kind: str = "spmm", *, upto: int | None = None):
        """The nest (after ``upto`` steps) lowered as written: no schedule, every guard kept."""
        return lower.naive_primfunc(self.nest(dtype, kind, upto=upto))

    def tir_schedule(self, dtype: str = "float32", kind: str = "spmm"):
        """A ``tvm.s_tir.Schedule`` of :meth:`naive_executor` for ordinary loop transformations."""
        from tvm import s_tir

        return s_tir.Schedule(self.naive_executor(dtype, kind))

    # ------------------------------------------------------------------ inspector side
    def inspector(self, kind: str = "auto", *, target: Any = None):
        """The inspector: compiled TIR (``"tir"``), numpy (``"numpy"``) or the faster, measured (``"auto"``);
        see :class:`~.inspector_choice.RecipeInspector` (``insp(A)``, ``insp.last.explain()``)."""
        from schedules.sparse.recipes.inspector_choice import RecipeInspector

        return RecipeInspector(self, kind, target=target)

    def compiled(self, target: Any = None) -> "Recipe":
        """This recipe with its final compaction's inspector run by compiled TIR kernels
        (:class:`~.inspector_tir.CompiledCompaction`); the executor side is unchanged."""
        from schedules.sparse.recipes.inspector_tir import CompiledCompaction

        if not self.steps or isinstance(self.steps[-1], CompiledCompaction):
            return self
        return dataclasses.replace(self, steps=self.steps[:-1] + (CompiledCompaction(self.steps[-1], target),))

    def inspect(self, A: Any, *, dtype: Any = None) -> GeneratedFormat:
        """Run the steps on ``A``'s iteration space: the format's arrays and metadata."""
        from schedules.sparse import transforms as tf
        from tvm_ext.workloads.validation import canonical_csr

        csr = canonical_csr(A, dtype=dtype)
        arrays, sizes, comp_meta, history = self.inspect_space(tf.csr_space(csr), csr,
                                                               self.nest(csr.dtype.name, "spmm"))
        return GeneratedFormat(self.name, tuple(csr.shape), arrays,
                               {"sizes": sizes, "compaction": comp_meta, "history": history},
                               dict(self.nest(csr.dtype.name, "spmm").roles))

    def inspect_space(self, x, csr, nest: SparseNest) -> tuple:
        """Run the steps on iteration space ``x`` of ``csr``: ``(arrays by name of nest's buffers,
        sizes, compaction metadata, history)``."""
        from schedules.sparse import transforms as tf

        made: dict = {}                 # arrays steps other than compaction make (a row permutation)
        for s in self.steps:
            if hasattr(s, "inspected"):
                made.update(s.inspected(x))
            x = s.on_space(x, csr)
        if not isinstance(x, tf.Compaction):
            raise ScheduleError(f"recipe {self.name}: the last step must compact (compact or "
                                "compact_and_pad) to give the format's arrays")
        m, k = csr.shape
        comp_meta = nest.meta.get("compaction", {})
        arrays = {}
        sizes: dict = {"M": m, "K": k}
        for name, buf in nest.buffers.items():
            role = nest.roles.get(name)
            arrays[name] = _int32(made[role], name) if role in made else _array(name, role, x, comp_meta)
            if role is not None and role.role is Role.EXPLICIT and str(buf.dtype) != "int32":
                arrays[name] = _narrow(arrays[name], str(buf.dtype), name)
        for name, buf in nest.buffers.items():
            for dim, n in zip(buf.shape, arrays[name].shape):
                if hasattr(dim, "name"):
                    sizes.setdefault(dim.name, int(n))
        for s in self.steps:
            if hasattr(s, "bound") and s.size not in sizes:
                sizes[s.size] = s.bound(csr)
        return arrays, sizes, comp_meta, x.space.history

    # ------------------------------------------------------------------ display
    def __str__(self) -> str:
        steps = " -> ".join(s.label for s in self.steps)
        sched = " -> ".join(s.label for s in self.schedule)
        return f"recipe {self.name}: {steps}\nschedule: {sched}\n{self.nest()}"


def _array(name: str, role: BufferRole | None, x, comp_meta) -> np.ndarray:
    """The inspector array that executor parameter ``name`` (holding ``role``) binds."""
    if role is None or role.role is Role.SOURCE:
        raise ScheduleError(f"inspector: executor parameter {name!r} is not made by a compaction "
                            f"(role {role}); the recipe must compact the loops that read it")
    if role.role is Role.OFFSET:
        return _int32(x.offset_index, name)
    if role.role is Role.EXPLICIT:
        return _int32(x.explicit_index[role.of], name)
    if role.role is Role.COPY:
        what = role.of
        if hasattr(x, "a_prime") and what in x.a_prime:
            a = x.a_prime[what]
        elif what == "data":
            a = x.space.values("data")          # compact: the col_inv data copy
        else:
            raise ScheduleError(f"inspector: no array for {name}")
        if comp_meta.get("keep_empty"):
            a = _fill_empty(x, a, what, comp_meta)
        a = _int32(a, name) if what != "data" else np.ascontiguousarray(a)
        return a
    raise ScheduleError(f"inspector: no array for executor parameter {name!r}")


def _fill_empty(x, a: np.ndarray, what: str, comp_meta) -> np.ndarray:
    """compact-and-pad with ``keep_empty``: one block per iteration of the compacted loops."""
    space = x.space
    extents = [space.extent(lv) for lv in x.levels]
    full = np.full((int(np.prod(extents)),) + a.shape[1:], comp_meta["identity"][what]
                   if isinstance(comp_meta["identity"], dict) else comp_meta["identity"], dtype=a.dtype)
    key = np.zeros(a.shape[0], dtype=np.int64)
    for lv, ext in zip(x.levels, extents):
        key = key * ext + (x.explicit_index[lv] - space.bounds[lv][0])
    full[key] = a
    return full.reshape(tuple(extents) + a.shape[1:])


def _narrow(a: np.ndarray, dtype: str, what: str) -> np.ndarray:
    """``a`` in the narrower integer ``dtype`` its executor buffer declares (range checked)."""
    info = np.iinfo(np.dtype(dtype))
    if a.size and (int(a.max()) > info.max or int(a.min()) < info.min):
        raise InputError(f"{what}: values outside the {dtype} the executor reads")
    return np.ascontiguousarray(a, dtype=dtype)


def _int32(a: np.ndarray, what: str) -> np.ndarray:
    a = np.asarray(a)
    if a.size and (int(a.max()) > _INT32_MAX or int(a.min()) < -_INT32_MAX):
        raise InputError(f"{what}: values overflow the int32 the executor reads")
    return np.ascontiguousarray(a, dtype=np.int32)


def _resolve(params: ExecParams | None, dtype: str, kind: str, n_cols, target, work=None,
             acc_rows: int = 1) -> ExecParams:
    p = params or ExecParams()
    if kind == "spmv" and p.unroll is None:
        p = dataclasses.replace(p, unroll=SPMV_PARTIAL_SUMS)
    p = p.resolve(dtype, n_cols if kind == "spmm" else 1, target, work=work,
                  acc_rows=acc_rows if kind == "spmm" else 1)
    if getattr(p, "dynamic", False) is not False:
        from schedules.sparse.executors.codegen import resolve_dynamic

        p = resolve_dynamic(p)
    return p


def scatter_row_runs(recipe, params: ExecParams, arrays, dtype: str, kind: str, n_cols) -> ExecParams:
    """``params`` with the row-run choice of :func:`~.run_ends.with_row_runs` for ``recipe``'s
    scatter executor on the matrix whose arrays are ``arrays`` (other lowerings: ``params``)."""
    if kind != "spmm" or not isinstance(recipe, Recipe) or not isinstance(recipe._lowering(), Scatter):
        return params
    return run_ends.with_row_runs(recipe.nest(dtype, kind), params, arrays, n_cols)


class RecipeKernels(FormatKernels):
    """The executor contract for a recipe's :class:`GeneratedFormat` (see ``executors.spec``)."""

    params_cls = ExecParams

    def __init__(self, recipe: Recipe):
        self.recipe = recipe
        self.format_name = recipe.name

    def check(self, fmt) -> None:
        if fmt.name != self.recipe.name:
            raise InputError(f"{self.recipe.name}: got a matrix inspected by recipe {fmt.name!r}")
        missing = [n for n in fmt.roles if n not in fmt.arrays]
        if missing:
            raise InputError(f"{self.recipe.name}: format arrays missing: {missing}")

    def resolve(self, fmt, params, dtype, kind, n_cols, target):
        p = _resolve(params, dtype, kind, n_cols, target, work=self.nnz(fmt),
                     acc_rows=self.recipe.acc_rows(dtype))
        return scatter_row_runs(self.recipe, p, fmt.arrays, dtype, kind, n_cols)

    def primfunc(self, fmt, params, kind, transpose):
        return self.recipe._primfunc(fmt.dtype.name, kind, params)[0]

    def signature(self, fmt, params, kind, transpose):
        return ("recipe", self.recipe.key(), kind, fmt.dtype.name, params.kernel_key())

    def scalars(self, fmt, transpose):
        return self.recipe.scalars() if isinstance(self.recipe, Recipe) else []

    def arrays(self, fmt, params, kind, transpose, threads):
        out = []
        for nest, part_kind in self.recipe.part_nests(fmt.dtype.name, kind, params):
            out += [fmt.arrays[n] for n in nest.buffers]
            if part_kind:
                out.append(self._part(fmt, nest, params, threads, part_kind))
        return out

    def _part(self, fmt, nest, params, threads, part_kind: str) -> np.ndarray:
        from schedules.sparse.executors.codegen import dynamic_parts

        n = params.n_parts(threads)
        if part_kind == "tiles":
            return uniform_parts(-(-fmt.shape[0] // params.lanes), n)
        if part_kind == "blocks":
            return scatter.block_parts(nest, fmt.arrays[nest.buffer_of(Role.OFFSET).name],
                                       {nest.sizes["M"]: fmt.shape[0], nest.sizes["K"]: fmt.shape[1]}, n)
        if part_kind == "chunks":
            comp = nest.meta["compaction"]
            return row_aligned_chunks(fmt.arrays[nest.buffer_of(Role.EXPLICIT, comp["levels"][0]).name], n)
        rows = int(part_kind.split(":")[1]) if part_kind.startswith("rows:") else 1
        offset = nest.buffer_of(Role.OFFSET)
        if offset is not None and _bounded_by_outer_offset(nest, offset):
            return balanced_parts(fmt.arrays[offset.name], dynamic_parts(params, threads, self.nnz(fmt)),
                                  item_cost=1.0)
        return uniform_parts(-(-fmt.shape[0] // rows), dynamic_parts(params, threads, self.nnz(fmt)))

    def nnz(self, fmt) -> int:
        return fmt.slots


def _bounded_by_outer_offset(nest: SparseNest, offset) -> bool:
    """Whether an inner loop starts at ``offset[outer]`` (the outer loop's work is the offset's
    differences: parts balanced by it), at any depth: SELL's positions sit inside the slice's rows."""
    from tvm.ir.expr import TensorLoad

    outer = nest.levels[0].var
    return any(isinstance(lv.lo, TensorLoad) and lv.lo.source.same_as(offset)
               and len(lv.lo.indices) == 1 and lv.lo.indices[0].same_as(outer)
               for lv in nest.levels[1:])


def build_recipe_executor(recipe: Recipe, A: Any, n_cols: int | None = None, *, kind: str = "spmm",
                          params: ExecParams | None = None, target: Any = None, dtype: Any = None,
                          fmt: GeneratedFormat | None = None):
    """Inspect ``A`` with ``recipe`` (or take ``fmt``) and compile its generated executor.

    Returns the library's :class:`~schedules.sparse.executors.executor.Executor`
    (``exe(B)``, ``exe(B, C, alpha=, beta=)``, ``exe.time(B)``, ``exe.prim_func``).

    >>> import numpy as np, scipy.sparse as sp
    >>> from schedules.sparse.recipes.library import csr_recipe
    >>> A = sp.csr_array(np.array([[1.0, 0.0], [2.0, 3.0]], dtype=np.float32))
    >>> build_recipe_executor(csr_recipe(), A, 2)(np.ones((2, 2), np.float32)).tolist()
    [[1.0, 1.0], [5.0, 5.0]]
    """
    from schedules.sparse.executors.executor import Executor

    if kind not in ("spmm", "spmv"):
        raise InputError(f"kind must be 'spmm' or 'spmv', got {kind!r}")
    fmt = fmt if fmt is not None else recipe.inspect(A, dtype=dtype)
    kernels = RecipeKernels(recipe)
    kernels.check(fmt)
    p = kernels.resolve(fmt, params, fmt.dtype.name, kind, n_cols, target)
    return Executor(fmt, kernels, p, kind, False, target)
