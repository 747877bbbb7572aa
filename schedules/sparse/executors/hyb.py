"""HYB executors (Bell & Garland's ELL part plus COO remainder), generated from the HYB split
recipe (§9.6's ``j < W`` split: :func:`~schedules.sparse.recipes.library.hyb_recipe`).

One PrimFunc runs both parts: the ELL part writes every row
(``C_out = alpha * ELL @ B + beta * C_in``, row-parallel, column-major SpMV vectorised over
rows), then the row-sorted COO remainder adds its segmented row sums, in row-aligned chunks.
The container (:class:`~schedules.sparse.formats.HYB`) binds the two parts' roles directly.

>>> f = hyb_spmm_primfunc(HYBParams(lanes=16, unroll=1), "float32")
>>> [b.name for b in f.params[:2]]
['ell_a_data', 'ell_a_col']
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedules.sparse.executors.coo import check_coo
from schedules.sparse.executors.ell import check_ell
from schedules.sparse.executors.spec import ExecParams
from schedules.sparse.recipes.container import ContainerKernels, generated_primfunc
from schedules.sparse.recipes.nest import BufferRole, Role
from tvm_ext.errors import InputError, ShapeError

__all__ = ["HYBParams", "HYBKernels", "hyb_spmm_primfunc", "hyb_spmv_primfunc"]


@dataclass(frozen=True)
class HYBParams(ExecParams):
    """HYB knobs (see :class:`ExecParams`); the ELL width W belongs to the format."""


def _recipe(layout: str):
    from schedules.sparse.recipes.library import hyb_recipe

    return hyb_recipe(layout=layout)


def hyb_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32",
                      layout: str = "col", *, n_cols: int | None = None, target=None):
    """HYB SpMM PrimFunc (ELL part in ``layout``; the recipe's generated executor)."""
    return generated_primfunc(_recipe(layout), params or HYBParams(), dtype, "spmm", n_cols, target)


def hyb_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32",
                      layout: str = "col", *, target=None):
    """HYB SpMV PrimFunc (ELL part in ``layout``; the recipe's generated executor)."""
    return generated_primfunc(_recipe(layout), params or HYBParams(), dtype, "spmv", 1, target)


class HYBKernels(ContainerKernels):
    """HYB containers on the HYB split recipe's executor."""

    format_name = "hyb"
    params_cls = HYBParams

    def check(self, fmt) -> None:
        if tuple(fmt.ell.shape) != tuple(fmt.shape) or tuple(fmt.coo.shape) != tuple(fmt.shape):
            raise ShapeError(f"hyb: parts have shapes {fmt.ell.shape} (ELL) and {fmt.coo.shape} "
                             f"(COO), the matrix is {fmt.shape}")
        check_ell(fmt.ell, "hyb.ell")
        check_coo(fmt.coo, "hyb.coo")
        if fmt.ell.data.dtype != fmt.coo.data.dtype:
            raise InputError(f"hyb: ELL values are {fmt.ell.data.dtype}, COO values {fmt.coo.data.dtype}")

    def recipe_for(self, fmt):
        return _recipe(fmt.ell.layout)

    def bind(self, fmt):
        ell, coo = fmt.ell, fmt.coo
        return {BufferRole(Role.COPY, "col", 0): ell.col, BufferRole(Role.COPY, "data", 0): ell.data,
                BufferRole(Role.EXPLICIT, "i", 1): coo.row, BufferRole(Role.EXPLICIT, "k", 1): coo.col,
                BufferRole(Role.COPY, "data", 1): coo.data}

    def value_dtype(self, fmt) -> np.dtype:
        return fmt.ell.data.dtype

    def nnz(self, fmt) -> int:
        return int(fmt.ell.data.size + fmt.coo.data.size)
