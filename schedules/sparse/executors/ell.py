"""ELL executors, row- and column-major, generated from the ELL recipes (Venkat 2016 Listing
5.16: normalise, bound by the width ``W``, compact-and-pad every row;
:func:`~schedules.sparse.recipes.library.ell_recipe` and, with the position loop moved
outside the rows, :func:`~schedules.sparse.recipes.library.ell_col_recipe`).

The container (:class:`~schedules.sparse.formats.ELL`: ``col`` and ``data`` of shape
``(M, W)`` or ``(W, M)``) binds the recipe's padded copies directly.  SpMM keeps a row's
column tile in registers across the ``W`` slots (padding slots hold value 0 and a valid
column, so there are no guards); column-major SpMV runs ``lanes`` consecutive rows as one
vector, row-major SpMV one row at a time.  Rows (or row tiles) are split into equal parts for
``T.parallel``.

>>> f = ell_spmm_primfunc(ELLParams(lanes=16, unroll=1), "float32", "col")
>>> [b.name for b in f.params[:2]]
['a_data', 'a_col']
"""
from __future__ import annotations

from dataclasses import dataclass

from schedules.sparse.executors.checks import require_array, require_range, require_value_dtype
from schedules.sparse.executors.spec import ExecParams
from schedules.sparse.recipes.container import ContainerKernels, generated_primfunc
from schedules.sparse.recipes.nest import BufferRole, Role
from tvm_ext.errors import InputError

__all__ = ["ELLParams", "ELLKernels", "ell_spmm_primfunc", "ell_spmv_primfunc", "check_ell", "LAYOUTS"]

LAYOUTS = ("row", "col")


@dataclass(frozen=True)
class ELLParams(ExecParams):
    """ELL knobs (see :class:`ExecParams`).  For column-major SpMV ``lanes``
    is the number of rows per vector.  The width W belongs to the format."""


def _recipe(layout: str):
    from schedules.sparse.recipes.library import ell_col_recipe, ell_recipe

    if layout not in LAYOUTS:
        raise InputError(f"ell: layout must be 'row' or 'col', got {layout!r}")
    return ell_recipe() if layout == "row" else ell_col_recipe()


def ell_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32",
                      layout: str = "row", *, n_cols: int | None = None, target=None):
    """ELL SpMM PrimFunc for ``layout`` (the recipe's generated executor)."""
    return generated_primfunc(_recipe(layout), params or ELLParams(), dtype, "spmm", n_cols, target)


def ell_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32",
                      layout: str = "row", *, target=None):
    """ELL SpMV PrimFunc for ``layout`` (the recipe's generated executor)."""
    return generated_primfunc(_recipe(layout), params or ELLParams(), dtype, "spmv", 1, target)


def check_ell(ell, what: str = "ell") -> None:
    """Layout known, ``col``/``data`` of the layout's shape, columns in range."""
    if ell.layout not in LAYOUTS:
        raise InputError(f"{what}.layout must be 'row' or 'col', got {ell.layout!r}")
    m, k = ell.shape
    shape = (m, ell.width) if ell.layout == "row" else (ell.width, m)
    require_value_dtype(ell.data, f"{what}.data")
    require_array(ell.col, f"{what}.col", "int32", shape)
    require_array(ell.data, f"{what}.data", str(ell.data.dtype), shape)
    require_range(ell.col, 0, max(k, 1), f"{what}.col")


class ELLKernels(ContainerKernels):
    """ELL containers on the row- or column-major ELL recipe's executor."""

    format_name = "ell"
    params_cls = ELLParams

    def check(self, fmt) -> None:
        check_ell(fmt)

    def recipe_for(self, fmt):
        return _recipe(fmt.layout)

    def bind(self, fmt):
        return {BufferRole(Role.COPY, "col"): fmt.col, BufferRole(Role.COPY, "data"): fmt.data}

    def nnz(self, fmt) -> int:
        return int(fmt.data.size)
