"""CSR executors, generated from the CSR recipe (make-dense, compact-and-pad the column loop:
:func:`~schedules.sparse.recipes.library.csr_recipe`; Venkat 2016 Listing 5.3's CSR executor).

The container (:class:`~schedules.sparse.formats.CSR`) binds the recipe's nest directly:
``indptr`` is the compaction's offset index, ``indices`` its explicit ``k`` and ``data`` its
value copy.  SpMM: rows in non-zero-balanced ``T.parallel`` parts, one spatial block per
(row, column tile), the tile's accumulators in registers across the row's non-zeros
(interleaved over independent partial sums), ``C`` written once.  SpMV: one row per block,
``unroll`` interleaved partial sums (default :data:`SPMV_PARTIAL_SUMS`).  The fused GOGETA
kernels apply their row consumer to the same recipe nest's row tiles
(:func:`~schedules.sparse.recipes.consumer.fused_row_tile_primfunc`, through
:meth:`CSRKernels.fused_primfunc`).

>>> f = csr_spmm_primfunc(CSRParams(lanes=16, unroll=2), "float32")
>>> [b.name for b in f.params[:3]]
['offset', 'explicit_k', 'a_data']
"""
from __future__ import annotations

from dataclasses import dataclass

from schedules.sparse.executors.checks import (require_array, require_pointer, require_range,
                                               require_value_dtype)
from schedules.sparse.executors.spec import SPMV_PARTIAL_SUMS, ExecParams
from schedules.sparse.recipes.container import ContainerKernels, generated_primfunc
from schedules.sparse.recipes.nest import BufferRole, Role

__all__ = ["CSRParams", "CSRKernels", "csr_spmm_primfunc", "csr_spmv_primfunc", "SPMV_PARTIAL_SUMS"]


@dataclass(frozen=True)
class CSRParams(ExecParams):
    """CSR knobs (see :class:`ExecParams`): lanes over N, vectors per row tile, parallel
    grain.  For SpMV ``unroll`` is the number of interleaved partial sums over a row's
    non-zeros (default :data:`SPMV_PARTIAL_SUMS`).  ``dynamic=True`` (or ``None``: when the
    atomics helper builds): the threads of a parallel kernel claim the parts at run time
    (:func:`~schedules.sparse.recipes.row_tile.emit_claimed_parts`; give it more
    ``parts_per_thread``, e.g. 16).  Off by default: on a busy 2-core machine it cut the median
    time 1.3-1.9x in one set of runs and was even or 5-10% slower in another."""

    dynamic: bool | None = False

    def kernel_key(self) -> tuple:
        return super().kernel_key() + (bool(self.dynamic),)


def _recipe():
    from schedules.sparse.recipes.library import csr_recipe

    return csr_recipe()


def csr_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32", *,
                      n_cols: int | None = None, target=None):
    """CSR SpMM PrimFunc ``C_out = alpha*A@B + beta*C_in`` (B is K x N, N symbolic; the
    recipe's generated executor)."""
    return generated_primfunc(_recipe(), params or CSRParams(), dtype, "spmm", n_cols, target)


def csr_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32", *, target=None):
    """CSR SpMV PrimFunc ``y_out = alpha*A@x + beta*y_in`` (the recipe's generated executor)."""
    return generated_primfunc(_recipe(), params or CSRParams(), dtype, "spmv", 1, target)


class CSRKernels(ContainerKernels):
    """CSR containers on the CSR recipe's executor."""

    format_name = "csr"
    params_cls = CSRParams

    def check(self, fmt) -> None:
        m, k = fmt.shape
        require_value_dtype(fmt.data, "csr.data")
        require_array(fmt.indptr, "csr.indptr", "int32", (m + 1,))
        nnz = fmt.indices.size
        require_array(fmt.indices, "csr.indices", "int32", (nnz,))
        require_array(fmt.data, "csr.data", str(fmt.data.dtype), (nnz,))
        require_pointer(fmt.indptr, nnz, "csr.indptr")
        require_range(fmt.indices, 0, k, "csr.indices")

    def recipe_for(self, fmt):
        return _recipe()

    def bind(self, fmt):
        return {BufferRole(Role.OFFSET): fmt.indptr, BufferRole(Role.EXPLICIT, "k"): fmt.indices,
                BufferRole(Role.COPY, "data"): fmt.data}

    def fused_primfunc(self, fmt, params, consumer):
        from schedules.sparse.recipes.consumer import fused_row_tile_primfunc

        return fused_row_tile_primfunc(_recipe().nest(fmt.data.dtype.name, "spmm"), params, consumer)

    def nnz(self, fmt) -> int:
        return int(fmt.indices.size)
