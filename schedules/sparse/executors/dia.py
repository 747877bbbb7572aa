"""DIA executors, generated from the DIA recipe (Venkat 2016 Listing 5.13: make-dense, skew,
shift, compact-and-pad the diagonals; :func:`~schedules.sparse.recipes.library.dia_recipe`).

The container (:class:`~schedules.sparse.formats.DIA`: ``offsets``, ``data[d, i]``) binds
the recipe's nest directly: ``data`` is the padded copy ``a_data[p, i]`` and the shifted
diagonal ``offsets + M - 1`` its explicit index.  SpMM keeps a row's column tile in
registers across the diagonals; SpMV runs ``lanes`` consecutive rows as one vector (the
``data`` and ``x`` reads of a diagonal are contiguous), guarded at the matrix edges.

>>> f = dia_spmv_primfunc(DIAParams(lanes=8), "float64")
>>> [b.name for b in f.params[:2]]
['explicit_d', 'a_data']
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedules.sparse.executors.checks import require_array, require_range, require_value_dtype
from schedules.sparse.executors.spec import ExecParams
from schedules.sparse.recipes.container import ContainerKernels
from schedules.sparse.recipes.nest import BufferRole, Role
from tvm_ext.errors import InputError

__all__ = ["DIAParams", "DIAKernels", "dia_spmm_primfunc", "dia_spmv_primfunc"]


@dataclass(frozen=True)
class DIAParams(ExecParams):
    """DIA knobs (see :class:`ExecParams`); for SpMV ``lanes`` rows per vector."""


def _recipe():
    from schedules.sparse.recipes.library import dia_recipe

    return dia_recipe()


def dia_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32", *,
                      n_cols: int | None = None, target=None):
    """DIA SpMM PrimFunc (the recipe's generated executor)."""
    from schedules.sparse.recipes.container import generated_primfunc

    return generated_primfunc(_recipe(), params or DIAParams(), dtype, "spmm", n_cols, target)


def dia_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32", *, target=None):
    """DIA SpMV PrimFunc (vectorised over rows; the recipe's generated executor)."""
    from schedules.sparse.recipes.container import generated_primfunc

    return generated_primfunc(_recipe(), params or DIAParams(), dtype, "spmv", 1, target)


class DIAKernels(ContainerKernels):
    """DIA containers on the DIA recipe's executor."""

    format_name = "dia"
    params_cls = DIAParams

    def check(self, fmt) -> None:
        m, k = fmt.shape
        nd = fmt.offsets.size
        require_value_dtype(fmt.data, "dia.data")
        require_array(fmt.offsets, "dia.offsets", "int32", (nd,))
        require_array(fmt.data, "dia.data", str(fmt.data.dtype), (nd, m))
        require_range(fmt.offsets, -max(m - 1, 0), max(k, 1), "dia.offsets")
        if nd > 1 and len(set(fmt.offsets.tolist())) != nd:
            raise InputError("dia.offsets: each diagonal must be stored once")

    def recipe_for(self, fmt):
        return _recipe()

    def bind(self, fmt):
        # the recipe numbers diagonals from 0 by its shift(d, M - 1)
        shifted = (fmt.offsets.astype(np.int64) + fmt.shape[0] - 1).astype(np.int32)
        return {BufferRole(Role.EXPLICIT, "d"): shifted, BufferRole(Role.COPY, "data"): fmt.data}

    def nnz(self, fmt) -> int:
        return int(fmt.data.size)
