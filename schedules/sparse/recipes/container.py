"""The library's format containers run on their recipes' generated executors.

A :class:`ContainerKernels` subclass is a format's executor module: it
validates the container (``schedules.sparse.formats``), names the recipe
whose executor runs it (:meth:`recipe_for`) and says which container array
plays which role in that recipe's loop nest (:meth:`bind`).  Everything else
(PrimFunc, cache signature, argument list, parallel parts) comes from the
recipe, so the container keeps its layout and the ``build_executor`` /
``Executor`` API is unchanged.

>>> from schedules.sparse.executors.dia import DIAKernels
>>> issubclass(DIAKernels, ContainerKernels)
True
"""
from __future__ import annotations

from abc import abstractmethod
from typing import Any, Mapping

import numpy as np

from schedules.sparse.executors.spec import ExecParams, FormatKernels
from schedules.sparse.recipes.nest import BufferRole
from tvm_ext.errors import InputError

# The executor modules import this one while the executor package loads, so the recipe
# machinery (which imports executor helpers) is imported on first use, not here.

__all__ = ["ContainerKernels", "generated_primfunc"]


def generated_primfunc(recipe, params: ExecParams, dtype: str, kind: str, n_cols: int | None = None,
                       target: Any = None):
    """``recipe``'s executor PrimFunc with ``params`` resolved as the executor resolves them.

    >>> from schedules.sparse.recipes.library import dia_recipe
    >>> from schedules.sparse.executors.dia import DIAParams
    >>> generated_primfunc(dia_recipe(), DIAParams(), "float32", "spmv").params[0].name
    'explicit_d'
    """
    from schedules.sparse.executors.codegen import check_dtype
    from schedules.sparse.recipes.recipe import _resolve

    dtype = check_dtype(dtype)
    p = _resolve(params, dtype, kind, n_cols, target, acc_rows=recipe.acc_rows(dtype))
    return recipe._primfunc(dtype, kind, p)[0]


class ContainerKernels(FormatKernels):
    """Executor contract for a format container whose executor a recipe generates."""

    @abstractmethod
    def recipe_for(self, fmt):
        """The recipe (or split recipe) whose executor runs ``fmt``."""

    @abstractmethod
    def bind(self, fmt) -> Mapping[BufferRole, np.ndarray]:
        """``fmt``'s arrays by the role they play in the recipe's nest."""

    def generated(self, fmt):
        """``fmt`` seen as its recipe's :class:`~.recipe.GeneratedFormat` (no copies)."""
        from schedules.sparse.recipes.recipe import GeneratedFormat
        from schedules.sparse.recipes.split import SplitRecipe

        recipe = self.recipe_for(fmt)
        dtype = np.dtype(self.value_dtype(fmt)).name
        nests = ([recipe.nest(dtype, "spmm", part) for part in range(len(recipe.parts))]
                 if isinstance(recipe, SplitRecipe) else [recipe.nest(dtype, "spmm")])
        roles: dict = {}
        for nest in nests:
            roles.update(nest.roles)
        bound = self.bind(fmt)
        missing = sorted(str(r) for r in set(roles.values()) if r not in bound)
        if missing:
            raise InputError(f"{self.format_name}: no container array for roles {missing}")
        arrays = {name: bound[role] for name, role in roles.items()}
        return GeneratedFormat(recipe.name, tuple(fmt.shape), arrays, {}, roles)

    def value_dtype(self, fmt) -> np.dtype:
        return fmt.data.dtype

    def _kernels(self, fmt):
        from schedules.sparse.recipes.recipe import RecipeKernels

        return RecipeKernels(self.recipe_for(fmt))

    def resolve(self, fmt, params, dtype, kind, n_cols, target):
        from schedules.sparse.recipes.recipe import _resolve, scatter_row_runs

        recipe = self.recipe_for(fmt)
        p = _resolve(params, dtype, kind, n_cols, target, work=self.nnz(fmt), acc_rows=recipe.acc_rows(dtype))
        if kind != "spmm":
            return p
        return scatter_row_runs(recipe, p, self.generated(fmt).arrays, dtype, kind, n_cols)

    def primfunc(self, fmt, params, kind, transpose):
        return self.recipe_for(fmt)._primfunc(np.dtype(self.value_dtype(fmt)).name, kind, params)[0]

    def signature(self, fmt, params, kind, transpose):
        return (self.format_name, self.recipe_for(fmt).key(), kind, np.dtype(self.value_dtype(fmt)).name,
                params.kernel_key())

    def arrays(self, fmt, params, kind, transpose, threads):
        return self._kernels(fmt).arrays(self.generated(fmt), params, kind, transpose, threads)

    def scalars(self, fmt, transpose):
        return self._kernels(fmt).scalars(fmt, transpose)
