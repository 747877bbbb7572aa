"""BCSR executors, generated from the BCSR recipe (make-dense, tile rows by R and columns by C,
block-major, compact-and-pad the block columns: :func:`~schedules.sparse.recipes.library.bcsr_recipe`;
Venkat 2016 §5.3's register-blocked BCSR executor).

The container (:class:`~schedules.sparse.formats.BCSR`) binds the recipe's nest directly:
``indptr`` is the compaction's offset index over block rows, ``bcol`` its explicit block
column ``kk`` and ``data`` (``NB x R x C``) its value copy.  SpMM: one spatial block per
(block row, column tile) holds the ``R`` output rows' accumulators in registers across the
block row; each stored block is unrolled over its ``R x C`` slots and vectorised over the N
tile, the block column's edge (``K % C``) tested once per block.  SpMV gives each block slot
its own partial sum.  Block rows run in block-count-balanced ``T.parallel`` parts.  The fused
GOGETA kernels apply their row consumer to the same recipe nest's row tiles
(:func:`~schedules.sparse.recipes.consumer.fused_row_tile_primfunc`, through
:meth:`BCSRKernels.fused_primfunc`).

>>> f = bcsr_spmm_primfunc(BCSRParams(lanes=16, unroll=1), "float32", 2, 3)
>>> [int(x) for x in f.params[2].shape[1:]]
[2, 3]
"""
from __future__ import annotations

from dataclasses import dataclass

from schedules.sparse.executors.checks import (require_array, require_pointer, require_range,
                                               require_value_dtype)
from schedules.sparse.executors.spec import ExecParams
from schedules.sparse.recipes.container import ContainerKernels, generated_primfunc
from schedules.sparse.recipes.nest import BufferRole, Role
from tvm_ext.errors import InputError

__all__ = ["BCSRParams", "BCSRKernels", "bcsr_spmm_primfunc", "bcsr_spmv_primfunc", "check_block", "MAX_BLOCK"]

#: Largest R or C the unrolled micro-kernel is generated for.
MAX_BLOCK = 16


@dataclass(frozen=True)
class BCSRParams(ExecParams):
    """BCSR knobs (see :class:`ExecParams`).  The block shape R x C belongs to the format (its
    inspector's knob); ``unroll`` defaults so that the ``R * unroll`` accumulators fit in the
    vector registers.  ``dynamic``: as :class:`~schedules.sparse.executors.csr.CSRParams`."""

    dynamic: bool | None = False

    def kernel_key(self) -> tuple:
        return super().kernel_key() + (bool(self.dynamic),)


def _recipe(R: int, C: int):
    from schedules.sparse.recipes.library import bcsr_recipe

    check_block(R, C)
    return bcsr_recipe(int(R), int(C))


def check_block(R: int, C: int) -> None:
    """Raise :class:`InputError` unless ``R`` and ``C`` are integers in ``1..MAX_BLOCK``."""
    for name, v in (("R", R), ("C", C)):
        if int(v) != v or not 1 <= v <= MAX_BLOCK:
            raise InputError(f"bcsr: block {name} must be an integer in 1..{MAX_BLOCK}, got {v!r}")


def bcsr_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32", R: int = 2,
                       C: int = 2, *, n_cols: int | None = None, target=None):
    """BCSR SpMM PrimFunc for R x C blocks (the recipe's generated executor)."""
    return generated_primfunc(_recipe(R, C), params or BCSRParams(), dtype, "spmm", n_cols, target)


def bcsr_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32", R: int = 2,
                       C: int = 2, *, target=None):
    """BCSR SpMV PrimFunc for R x C blocks (the recipe's generated executor)."""
    return generated_primfunc(_recipe(R, C), params or BCSRParams(), dtype, "spmv", 1, target)


class BCSRKernels(ContainerKernels):
    """BCSR containers on the BCSR recipe's executor for their block shape."""

    format_name = "bcsr"
    params_cls = BCSRParams

    def check(self, fmt) -> None:
        check_block(fmt.R, fmt.C)
        m, k = fmt.shape
        mb, kb = -(-m // fmt.R), -(-k // fmt.C)
        require_value_dtype(fmt.data, "bcsr.data")
        require_array(fmt.indptr, "bcsr.indptr", "int32", (mb + 1,))
        nb = fmt.bcol.size
        require_array(fmt.bcol, "bcsr.bcol", "int32", (nb,))
        require_array(fmt.data, "bcsr.data", str(fmt.data.dtype), (nb, fmt.R, fmt.C))
        require_pointer(fmt.indptr, nb, "bcsr.indptr")
        require_range(fmt.bcol, 0, max(kb, 1), "bcsr.bcol")

    def recipe_for(self, fmt):
        return _recipe(fmt.R, fmt.C)

    def bind(self, fmt):
        return {BufferRole(Role.OFFSET): fmt.indptr, BufferRole(Role.EXPLICIT, "kk"): fmt.bcol,
                BufferRole(Role.COPY, "data"): fmt.data}

    def fused_primfunc(self, fmt, params, consumer):
        from schedules.sparse.recipes.consumer import fused_row_tile_primfunc

        return fused_row_tile_primfunc(self.recipe_for(fmt).nest(fmt.data.dtype.name, "spmm"), params, consumer)

    def nnz(self, fmt) -> int:
        return int(fmt.bcol.size) * fmt.R * fmt.C
