"""A format made of parts: an index-set split of the loop nest, one recipe per part (HYB).

``SplitRecipe(name, split, parts)`` splits the CSR nest with a
:class:`~.steps.SplitAt` (HYB's ``j < W``: each row's first ``W`` entries,
then the rest) and applies one :class:`~.recipe.Recipe`'s steps to each part,
on the executor's nest and on the inspected iteration space alike.  The
executor is one PrimFunc running the parts in order: the first writes every
row (``C_out = alpha * part0 @ B + beta * C_in``), the later ones are scatter
passes that add into ``C_out``.

>>> from schedules.sparse.recipes.library import hyb_recipe
>>> print(hyb_recipe())          # doctest: +ELLIPSIS
recipe hyb: split(j < j.lo + W)
  part 0: normalize(j) -> known(j < W) -> permute(j, i) -> compact_and_pad(j, ...
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from schedules.sparse.executors.codegen import check_dtype
from schedules.sparse.executors.spec import ExecParams
from schedules.sparse.recipes import lower
from schedules.sparse.recipes.nest import SparseNest, csr_loop_nest, nest_from_primfunc
from schedules.sparse.recipes.recipe import GeneratedFormat, _resolve
from schedules.sparse.recipes.schedule import MicroKernel, Scatter
from schedules.sparse.recipes.steps import SplitAt
from tvm_ext.errors import ScheduleError

__all__ = ["SplitRecipe"]

_NESTS: dict = {}
_LOWERED: dict = {}


@dataclass(frozen=True)
class SplitRecipe:
    """``split`` the nest, then ``parts[i]``'s steps and schedule on part ``i``."""

    name: str
    split: SplitAt
    parts: tuple

    def key(self) -> tuple:
        """What identifies the executor: the split and each part's key."""
        return (self.name, self.split.label, tuple(p.key() for p in self.parts))

    def compiled(self, target: Any = None) -> "SplitRecipe":
        """Each part's :meth:`~.recipe.Recipe.compiled` (its inspector's compaction compiled)."""
        return replace(self, parts=tuple(p.compiled(target) for p in self.parts))

    def nest(self, dtype: str = "float32", kind: str = "spmm", part: int = 0) -> SparseNest:
        """Part ``part``'s loop nest after its steps and reorders."""
        key = (self.key(), check_dtype(dtype), kind)
        if key not in _NESTS:
            base = nest_from_primfunc(csr_loop_nest(check_dtype(dtype), kind))
            _NESTS[key] = tuple(r.transform(self.split.on_nest(base, at), kind)
                                for at, r in enumerate(self.parts))
        return _NESTS[key][part]

    def _primfunc(self, dtype: str, kind: str, params: ExecParams):
        key = (self.key(), dtype, kind, params.kernel_key())
        if key not in _LOWERED:
            _LOWERED[key] = self._lower(dtype, kind, params)
        return _LOWERED[key]

    def _lower(self, dtype, kind, params):
        kernel = MicroKernel.from_params(params)
        nests = [self.nest(dtype, kind, at) for at in range(len(self.parts))]
        plans = []
        for at, (recipe, nest) in enumerate(zip(self.parts, nests)):
            if at and not isinstance(recipe._lowering(), Scatter):
                raise ScheduleError(f"recipe {self.name}: part {at} must be a scatter (it adds into "
                                    "the rows the first part wrote)")
            part_kind, emit = recipe.plan(nest, kernel)
            buf = lower.part_buffer(f"{nest.meta.get('part_prefix', '')}part") if part_kind else None
            plans.append((part_kind, emit, buf))
        extra = [plans[0][2]] if plans[0][2] is not None else []
        for nest, (_, _, buf) in zip(nests[1:], plans[1:]):
            extra += list(nest.buffers.values()) + ([buf] if buf is not None else [])
        with lower._Func(nests[0], f"{self.name}_{kind}", extra) as f:
            for at, (_, emit, buf) in enumerate(plans):
                emit(f, buf, scale=at == 0)
        return f.get(), tuple(p[0] for p in plans)

    def executor(self, dtype: str = "float32", kind: str = "spmm", params: ExecParams | None = None,
                 *, target: Any = None, n_cols: int | None = None):
        """The executor PrimFunc (all parts in one)."""
        dtype = check_dtype(dtype)
        return self._primfunc(dtype, kind, _resolve(params, dtype, kind, n_cols, target))[0]

    def part_nests(self, dtype: str, kind: str, params: ExecParams) -> list:
        """``[(nest, part kind)]`` of the parts, in executor-argument order."""
        kinds = self._primfunc(dtype, kind, params)[1]
        return [(self.nest(dtype, kind, at), k) for at, k in enumerate(kinds)]

    def acc_rows(self, dtype: str) -> int:
        return max(r.acc_rows(dtype) for r in self.parts)

    def inspect(self, A: Any, *, dtype: Any = None) -> GeneratedFormat:
        """Split ``A``'s iteration space, run each part's steps: the format's arrays."""
        from schedules.sparse import transforms as tf
        from tvm_ext.workloads.validation import canonical_csr

        csr = canonical_csr(A, dtype=dtype)
        base = nest_from_primfunc(csr_loop_nest(csr.dtype.name, "spmm"))
        spaces = self.split.on_space(tf.csr_space(csr), csr, base)
        arrays, roles, sizes, meta = {}, {}, {self.split.size: self.split.bound(csr)}, []
        for at, (recipe, space) in enumerate(zip(self.parts, spaces)):
            nest = self.nest(csr.dtype.name, "spmm", at)
            a, s, comp, history = recipe.inspect_space(space, csr, nest)
            arrays.update(a)
            roles.update(nest.roles)
            sizes.update(s)
            meta.append({"compaction": comp, "history": history})
        return GeneratedFormat(self.name, tuple(csr.shape), arrays, {"sizes": sizes, "parts": meta}, roles)

    def __str__(self) -> str:
        lines = [f"recipe {self.name}: {self.split.label}"]
        for at, r in enumerate(self.parts):
            lines.append(f"  part {at}: {' -> '.join(s.label for s in r.steps)}")
            lines.append(f"  schedule: {' -> '.join(s.label for s in r.schedule)}")
            lines += ["    " + ln for ln in str(self.nest(part=at)).splitlines()]
        return "\n".join(lines)
