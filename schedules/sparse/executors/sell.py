"""SELL-C-sigma executors, generated from the SELL recipe (Kreutzer et al.'s sliced ELL: rows
sorted by length inside sigma-windows, tiled into slices of ``C``, each slice
compacted-and-padded column-major to its own longest row;
:func:`~schedules.sparse.recipes.library.sell_recipe`).

The container (:class:`~schedules.sparse.formats.SELL`) binds the recipe's nest: ``perm``'s
first ``M`` entries are the row permutation, ``slice_ptr / C`` the slices' position offsets,
``col`` and ``data`` seen as ``(positions, C)`` the padded copies.  SpMM keeps a slice row's
column tile in registers across its positions; SpMV runs the slice's ``C`` rows as one
vector; results are written through ``perm``.  The slice height ``C`` is a compile-time
constant (part of the recipe, so of the cache signature).

>>> f = sell_spmv_primfunc(SELLParams(), "float32", 8)
>>> [b.name for b in f.params[:2]]
['perm_i', 'offset']
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedules.sparse.executors.checks import (require_array, require_pointer, require_range,
                                               require_value_dtype)
from schedules.sparse.executors.spec import ExecParams
from schedules.sparse.recipes.container import ContainerKernels, generated_primfunc
from schedules.sparse.recipes.nest import BufferRole, Role
from tvm_ext.errors import InputError

__all__ = ["SELLParams", "SELLKernels", "sell_spmm_primfunc", "sell_spmv_primfunc", "check_height",
           "MAX_SLICE"]

#: Largest slice height the generators accept.
MAX_SLICE = 256


@dataclass(frozen=True)
class SELLParams(ExecParams):
    """SELL knobs (see :class:`ExecParams`); C and sigma belong to the format."""


def check_height(c: int) -> None:
    """:class:`InputError` unless the slice height ``c`` is an integer in ``1..MAX_SLICE``."""
    if int(c) != c or not 1 <= c <= MAX_SLICE:
        raise InputError(f"sell: slice height C must be an integer in 1..{MAX_SLICE}, got {c!r}")


def _recipe(C: int, sigma: int | None = None):
    from schedules.sparse.recipes.library import sell_recipe

    check_height(C)
    return sell_recipe(int(C), sigma)


def sell_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32",
                       slice_height: int = 8, *, n_cols: int | None = None, target=None):
    """SELL SpMM PrimFunc for slices of ``slice_height`` rows (the recipe's generated executor)."""
    return generated_primfunc(_recipe(slice_height), params or SELLParams(), dtype, "spmm", n_cols, target)


def sell_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32",
                       slice_height: int = 8, *, target=None):
    """SELL SpMV PrimFunc, vectorised over the slice's rows (the recipe's generated executor)."""
    return generated_primfunc(_recipe(slice_height), params or SELLParams(), dtype, "spmv", 1, target)


class SELLKernels(ContainerKernels):
    """SELL containers on the SELL-C-sigma recipe's executor."""

    format_name = "sell"
    params_cls = SELLParams

    def check(self, fmt) -> None:
        check_height(fmt.C)
        m, k = fmt.shape
        ns = fmt.slice_width.size
        require_value_dtype(fmt.data, "sell.data")
        if ns != -(-m // fmt.C):
            raise InputError(f"sell.slice_width: {m} rows in slices of {fmt.C} make {-(-m // fmt.C)} "
                             f"slices, got {ns}")
        require_array(fmt.perm, "sell.perm", "int32", (ns * fmt.C,))
        require_array(fmt.slice_ptr, "sell.slice_ptr", "int32", (ns + 1,))
        require_array(fmt.slice_width, "sell.slice_width", "int32", (ns,))
        ne = fmt.data.size
        require_array(fmt.col, "sell.col", "int32", (ne,))
        require_array(fmt.data, "sell.data", str(fmt.data.dtype), (ne,))
        require_pointer(fmt.slice_ptr, ne, "sell.slice_ptr")
        if ns and not np.array_equal(np.diff(fmt.slice_ptr), fmt.slice_width.astype(np.int64) * fmt.C):
            raise InputError("sell.slice_ptr: slice s must hold slice_width[s] * C entries")
        require_range(fmt.col, 0, max(k, 1), "sell.col")
        require_range(fmt.perm, 0, m + 1, "sell.perm")
        # perm (range-checked above) holds each row 0..M-1 once and pads (M): a count per row, no sort
        if (np.bincount(fmt.perm, minlength=m + 1)[:m] != 1).any():
            raise InputError(f"sell.perm: every row 0..{m - 1} must appear exactly once "
                             "(padding rows point at M)")
        if (fmt.perm[m:] != m).any():
            raise InputError(f"sell.perm: padding rows (value {m}) must come after the {m} real rows")

    def recipe_for(self, fmt):
        return _recipe(fmt.C, fmt.sigma)

    def bind(self, fmt):
        m, c = fmt.shape[0], int(fmt.C)
        offset = (fmt.slice_ptr // c).astype(np.int32)
        # a position's place in its slice row (the compaction's explicit j)
        pos_j = (np.arange(offset[-1], dtype=np.int32)
                 - np.repeat(offset[:-1], fmt.slice_width)).astype(np.int32)
        return {BufferRole(Role.PERMUTATION, "i"): fmt.perm[:m], BufferRole(Role.OFFSET): offset,
                BufferRole(Role.EXPLICIT, "j"): pos_j,
                BufferRole(Role.COPY, "col"): fmt.col.reshape(-1, c),
                BufferRole(Role.COPY, "data"): fmt.data.reshape(-1, c)}

    def nnz(self, fmt) -> int:
        return int(fmt.data.size)
