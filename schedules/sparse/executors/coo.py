"""COO executors, generated from the COO recipe (make-dense, compact rows and columns jointly:
:func:`~schedules.sparse.recipes.library.coo_recipe`; Venkat 2016 §3.1's coalesced COO executor).

The container (:class:`~schedules.sparse.formats.COO`, entries sorted by row) binds the
recipe's nest directly: ``row`` and ``col`` are the compaction's explicit ``i`` and ``k``,
``data`` its value copy.  The executor first writes ``C_out = beta * C_in`` row-parallel,
then runs row-aligned chunks of the entry stream in parallel, each keeping a row's run in
registers and adding it to ``C_out`` when the row changes (a segmented sum).

>>> f = coo_spmm_primfunc(COOParams(lanes=8, unroll=1), "float64")
>>> [b.name for b in f.params[:3]]
['explicit_i', 'explicit_k', 'a_data']
"""
from __future__ import annotations

from dataclasses import dataclass

from schedules.sparse.executors.checks import require_array, require_range, require_value_dtype
from schedules.sparse.executors.spec import ExecParams
from schedules.sparse.recipes.container import ContainerKernels, generated_primfunc
from schedules.sparse.recipes.nest import BufferRole, Role
from tvm_ext.errors import InputError

__all__ = ["COOParams", "COOKernels", "coo_spmm_primfunc", "coo_spmv_primfunc", "check_coo"]


@dataclass(frozen=True)
class COOParams(ExecParams):
    """COO knobs (see :class:`ExecParams`); ``parts_per_thread`` sets the chunk count."""


def _recipe():
    from schedules.sparse.recipes.library import coo_recipe

    return coo_recipe()


def coo_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32", *,
                      n_cols: int | None = None, target=None):
    """COO SpMM PrimFunc ``C_out = alpha*A@B + beta*C_in`` (the recipe's generated executor)."""
    return generated_primfunc(_recipe(), params or COOParams(), dtype, "spmm", n_cols, target)


def coo_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32", *, target=None):
    """COO SpMV PrimFunc (the recipe's generated executor)."""
    return generated_primfunc(_recipe(), params or COOParams(), dtype, "spmv", 1, target)


def check_coo(coo, what: str = "coo") -> None:
    """Arrays int32/int32/float, equal lengths, indices in range, sorted by row."""
    m, k = coo.shape
    require_value_dtype(coo.data, f"{what}.data")
    nnz = coo.row.size
    require_array(coo.row, f"{what}.row", "int32", (nnz,))
    require_array(coo.col, f"{what}.col", "int32", (nnz,))
    require_array(coo.data, f"{what}.data", str(coo.data.dtype), (nnz,))
    require_range(coo.row, 0, m, f"{what}.row")
    require_range(coo.col, 0, k, f"{what}.col")
    if nnz > 1 and (coo.row[1:] < coo.row[:-1]).any():
        raise InputError(f"{what}.row: entries must be sorted by row")


class COOKernels(ContainerKernels):
    """COO containers on the COO recipe's executor."""

    format_name = "coo"
    params_cls = COOParams

    def check(self, fmt) -> None:
        check_coo(fmt)

    def recipe_for(self, fmt):
        return _recipe()

    def bind(self, fmt):
        return {BufferRole(Role.EXPLICIT, "i"): fmt.row, BufferRole(Role.EXPLICIT, "k"): fmt.col,
                BufferRole(Role.COPY, "data"): fmt.data}

    def nnz(self, fmt) -> int:
        return int(fmt.row.size)
