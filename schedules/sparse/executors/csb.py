"""CSB executors, generated from the CSB recipe (make-dense, tile rows and columns by beta,
block-major, compact each block's entries: :func:`~schedules.sparse.recipes.library.csb_recipe`;
Venkat 2016 §6.1, CSB SpMM and SpMM^T from one store, as LOBPCG needs).

The container (:class:`~schedules.sparse.formats.CSB`) binds the recipe's nest as it is
stored: ``blk_ptr`` is the compaction's offset array, ``row_off``/``col_off`` its explicit
in-block ``i`` and ``l`` (``uint16``: the recipe's compaction stores them so, its
``index_dtype``, and the nest widens the loads in TIR, so no copies), ``data`` its value copy.  The scatter schedule (:mod:`schedules.sparse.recipes.scatter`)
gives three products, all conflict-free without atomics:

* ``A @ B``: parallel over parts of block rows of about equal entries; each block row
  scales the output rows it owns, then sums each row's run in a block in registers;
* ``A.T @ B`` (``transpose=True``): the transposed nest, parallel over block columns;
* ``symmetric_half`` (only the lower triangle ``L`` with its diagonal ``D`` stored):
  ``A @ B = L @ B + (L - D).T @ B``, the block-row pass then the block-column pass
  (diagonal skipped) adding into the same ``C``.

The block size beta is the recipe's parameter; the kernel reads it from its int32 argument
after ``C_out`` (:func:`~schedules.sparse.recipes.scatter.runtime_tile_sizes`, as the
hand-written executor did: LLVM kept the pointers in registers then), not from constants in
its loops.  The kernel is still beta's (the shape of its offset array is), so the kernel
cache is keyed on it (one kernel per beta, dtype, kind and product).

>>> f = csb_spmm_primfunc(CSBParams(lanes=16, unroll=1), "float32", symmetric_half=True, block_size=64)
>>> [b.name for b in f.params[:6]], str(f.params[1].dtype)
(['offset', 'explicit_i', 'explicit_l', 'a_data', 'part0', 'part1'], 'uint16')
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from schedules.sparse.executors.checks import (require_array, require_pointer, require_range,
                                               require_value_dtype)
from schedules.sparse.executors.spec import ExecParams
from schedules.sparse.recipes.container import ContainerKernels
from schedules.sparse.recipes.nest import BufferRole, Role
from tvm_ext.errors import InputError, ShapeError

__all__ = ["CSBParams", "CSBKernels", "csb_spmm_primfunc", "csb_spmv_primfunc", "csb_op", "entry_coords"]

#: Primfuncs and part kinds by (recipe key, dtype, kind, product, knobs).
_KERNELS: dict = {}


@dataclass(frozen=True)
class CSBParams(ExecParams):
    """CSB knobs (see :class:`ExecParams`); ``parts_per_thread`` is the number
    of block-row (or block-column) parts per thread.  The block size beta
    belongs to the format."""


def _recipe(block_size: int):
    from schedules.sparse.recipes.library import csb_recipe

    return csb_recipe(int(block_size))


def csb_op(transpose: bool, symmetric_half: bool) -> str:
    """The scatter product (:data:`~schedules.sparse.recipes.scatter.OPS`) a CSB executor runs:
    ``A.T`` is ``A`` itself when only the lower triangle of a symmetric matrix is stored.

    >>> csb_op(True, False), csb_op(True, True)
    ('A.T', 'sym_lower')
    """
    if symmetric_half:
        return "sym_lower"
    return "A.T" if transpose else "A"


def _kernel(recipe, params: ExecParams, dtype: str, kind: str, op: str) -> tuple:
    """``(PrimFunc, part kinds)`` of ``op`` on the recipe's nest (cached)."""
    from schedules.sparse.recipes.scatter import scatter_op_primfunc
    from schedules.sparse.recipes.schedule import MicroKernel

    key = (recipe.key(), dtype, kind, op, params.kernel_key())
    if key not in _KERNELS:
        _KERNELS[key] = scatter_op_primfunc(recipe.nest(dtype, kind), MicroKernel.from_params(params), op)
    return _KERNELS[key]


def _primfunc(params, dtype, kind, n_cols, target, transpose, symmetric_half, block_size):
    from schedules.sparse.executors.codegen import check_dtype
    from schedules.sparse.recipes.recipe import _resolve

    dtype = check_dtype(dtype)
    p = _resolve(params or CSBParams(), dtype, kind, n_cols, target)
    return _kernel(_recipe(block_size), p, dtype, kind, csb_op(transpose, symmetric_half))[0]


def csb_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32", *,
                      transpose: bool = False, symmetric_half: bool = False,
                      n_cols: int | None = None, target=None, block_size: int = 4096):
    """CSB SpMM PrimFunc (``A@B``, ``A.T@B`` or the symmetric-half product) for blocks of
    ``block_size`` (the format's beta), generated from the CSB recipe."""
    return _primfunc(params, dtype, "spmm", n_cols, target, transpose, symmetric_half, block_size)


def csb_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32", *,
                      transpose: bool = False, symmetric_half: bool = False, target=None,
                      block_size: int = 4096):
    """CSB SpMV PrimFunc (see :func:`csb_spmm_primfunc`)."""
    return _primfunc(params, dtype, "spmv", 1, target, transpose, symmetric_half, block_size)


def entry_coords(fmt) -> tuple[np.ndarray, np.ndarray]:
    """Row and column of every stored entry of CSB container ``fmt`` (int64)."""
    mb, kb = fmt.block_grid
    blk = np.repeat(np.arange(mb * kb, dtype=np.int64), np.diff(fmt.blk_ptr))
    return ((blk // kb) * fmt.beta + fmt.row_off.astype(np.int64),
            (blk % kb) * fmt.beta + fmt.col_off.astype(np.int64))


class CSBKernels(ContainerKernels):
    """CSB containers on the CSB recipe's scatter executor (``A@B``, ``A.T@B``, symmetric half)."""

    format_name = "csb"
    params_cls = CSBParams
    transposable = True

    def check(self, fmt) -> None:
        m, k = fmt.shape
        if isinstance(fmt.beta, bool) or int(fmt.beta) != fmt.beta or not 1 <= fmt.beta <= 65536:
            raise InputError(f"csb.beta must be an integer in 1..65536, got {fmt.beta!r}")
        if fmt.symmetric_half and m != k:
            raise ShapeError(f"csb: symmetric_half needs a square matrix, got {m}x{k}")
        mb, kb = fmt.block_grid
        nnz = fmt.data.size
        require_value_dtype(fmt.data, "csb.data")
        require_array(fmt.blk_ptr, "csb.blk_ptr", "int32", (mb * kb + 1,))
        nest = self.recipe_for(fmt).nest(fmt.data.dtype.name)
        for arr, what, lv in ((fmt.row_off, "row_off", "i"), (fmt.col_off, "col_off", "l")):
            # the dtype the recipe's compaction stores the in-block offsets in (uint16)
            require_array(arr, f"csb.{what}", str(nest.buffer_of(Role.EXPLICIT, lv).dtype), (nnz,))
        require_array(fmt.data, "csb.data", str(fmt.data.dtype), (nnz,))
        require_pointer(fmt.blk_ptr, nnz, "csb.blk_ptr")
        require_range(fmt.row_off, 0, fmt.beta, "csb.row_off")
        require_range(fmt.col_off, 0, fmt.beta, "csb.col_off")
        rows, cols = entry_coords(fmt)
        require_range(rows, 0, m, "csb rows (block row * beta + row_off)")
        require_range(cols, 0, k, "csb columns (block column * beta + col_off)")
        if fmt.symmetric_half and (rows < cols).any():
            raise InputError("csb: symmetric_half stores the lower triangle only; found entries above "
                             "the diagonal")

    def recipe_for(self, fmt):
        return _recipe(fmt.beta)

    def bind(self, fmt):
        return {BufferRole(Role.OFFSET): fmt.blk_ptr, BufferRole(Role.EXPLICIT, "i"): fmt.row_off,
                BufferRole(Role.EXPLICIT, "l"): fmt.col_off, BufferRole(Role.COPY, "data"): fmt.data}

    def primfunc(self, fmt, params, kind, transpose):
        op = csb_op(transpose, fmt.symmetric_half)
        return _kernel(self.recipe_for(fmt), params, fmt.data.dtype.name, kind, op)[0]

    def signature(self, fmt, params, kind, transpose):
        return (self.format_name, self.recipe_for(fmt).key(), kind, fmt.data.dtype.name,
                csb_op(transpose, fmt.symmetric_half), params.kernel_key())

    def arrays(self, fmt, params, kind, transpose, threads):
        from schedules.sparse.recipes.scatter import block_parts, op_passes

        recipe, dtype = self.recipe_for(fmt), fmt.data.dtype.name
        op = csb_op(transpose, fmt.symmetric_half)
        nest = recipe.nest(dtype, kind)
        out = [fmt.blk_ptr, fmt.row_off, fmt.col_off, fmt.data]
        sizes = {nest.sizes["M"]: fmt.shape[0], nest.sizes["K"]: fmt.shape[1]}
        kinds = _kernel(recipe, params, dtype, kind, op)[1]
        for (pass_nest, _), part_kind in zip(op_passes(nest, op), kinds):
            if part_kind:
                out.append(block_parts(pass_nest, fmt.blk_ptr, sizes, params.n_parts(threads)))
        return out

    def nnz(self, fmt) -> int:
        if fmt.symmetric_half:
            rows, cols = entry_coords(fmt)
            return int(2 * fmt.data.size - np.count_nonzero(rows == cols))
        return int(fmt.data.size)
