"""Test oracle: the hand-written HYB executor template the library used before HYB's executor
was generated from its split recipe (``schedules.sparse.recipes.library.hyb_recipe``).  Kept
outside the library to check and time the generated executor against (tests, ``bench.sparse_recipes``).

Two passes in one PrimFunc:

1. row-parallel ELL pass (as :mod:`.ell`): ``C_out = alpha * ELL @ B + beta * C_in``
   for every row, accumulators in registers;
2. the COO remainder (rows longer than W) as row-aligned chunks in parallel
   (as :mod:`.coo`): segmented sums added into ``C_out``.

>>> f = hyb_spmm_primfunc(HYBParams(lanes=16, unroll=1), "float32")
>>> len(f.params)
12
"""
from __future__ import annotations

from dataclasses import dataclass

from schedules.sparse.executors.codegen import (Buffer, Code, check_dtype, dense_buffers,
                                                parse_prim_func, prim_func_source)
from schedules.sparse.executors.partition import row_aligned_chunks
from schedules.sparse.executors.spec import ExecParams, FormatKernels
from schedules.sparse.executors.tiles import column_tiers
from schedules.sparse.executors.hyb import HYBKernels
from tests.sparse_oracles.coo_template import emit_row_runs
from tests.sparse_oracles.ell_template import ell_buffers, ell_part_array, emit_ell_rows

__all__ = ["HYBParams", "TemplateHYBKernels", "hyb_spmm_primfunc", "hyb_spmv_primfunc", "hyb_source"]


@dataclass(frozen=True)
class HYBParams(ExecParams):
    """HYB knobs (see :class:`ExecParams`); the ELL width W belongs to the format."""


def hyb_source(params: ExecParams, dtype: str, kind: str = "spmm", layout: str = "col") -> str:
    """TVMScript text of the HYB executor (ELL part in ``layout``)."""
    dtype = check_dtype(dtype)
    spmv = kind == "spmv"
    bufs = ell_buffers(layout, dtype, prefix="ell_")
    bufs += [Buffer("a_coo_row", "coo_row", ("COO_NNZ",), "int32"),
             Buffer("a_coo_col", "coo_col", ("COO_NNZ",), "int32"),
             Buffer("a_coo_data", "coo_data", ("COO_NNZ",), dtype)]
    if params.parallel:
        bufs += [Buffer("a_part", "part", ("NP",), "int32"),
                 Buffer("a_chunk", "chunk", ("NCHUNK",), "int32")]
    bufs += dense_buffers(kind, dtype)
    code = Code()
    emit_ell_rows(code, params=params, dtype=dtype, layout=layout, spmv=spmv, prefix="ell_",
                  name="ell_row")
    emit_row_runs(code, name="coo_run", tiers=column_tiers(params.lanes, params.unroll, spmv=spmv),
                  dtype=dtype, prefix="coo_", parallel=params.parallel, chunk="chunk")
    sizes = ["M", "K", "ELL_W", "COO_NNZ"] + (["N"] if not spmv else [])
    sizes += ["NP", "NCHUNK"] if params.parallel else []
    return prim_func_source(f"hyb_{kind}", bufs, [("alpha", dtype), ("beta", dtype)], sizes, code)


def hyb_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32",
                      layout: str = "col", *, n_cols: int | None = None, target=None):
    """HYB SpMM PrimFunc."""
    p = (params or HYBParams()).resolve(check_dtype(dtype), n_cols, target)
    return parse_prim_func(hyb_source(p, dtype, "spmm", layout))


def hyb_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32",
                      layout: str = "col", *, target=None):
    """HYB SpMV PrimFunc."""
    p = (params or HYBParams()).resolve(check_dtype(dtype), 1, target)
    return parse_prim_func(hyb_source(p, dtype, "spmv", layout))


class TemplateHYBKernels(FormatKernels):
    format_name = "hyb"
    params_cls = HYBParams

    check = HYBKernels.check  # the library's own validation of the container

    def primfunc(self, fmt, params, kind, transpose):
        return parse_prim_func(hyb_source(params, fmt.dtype.name, kind, fmt.ell.layout))

    def signature(self, fmt, params, kind, transpose):
        return ("hyb", kind, fmt.dtype.name, fmt.ell.layout, params.kernel_key())

    def arrays(self, fmt, params, kind, transpose, threads):
        out = [fmt.ell.col, fmt.ell.data, fmt.coo.row, fmt.coo.col, fmt.coo.data]
        if params.parallel:
            rows_only = _RowParts(fmt.ell)
            out += [ell_part_array(rows_only, params, "spmm", threads),
                    row_aligned_chunks(fmt.coo.row, params.n_parts(threads))]
        return out

    def nnz(self, fmt) -> int:
        return int(fmt.ell.data.size + fmt.coo.data.size)


class _RowParts:
    """The ELL part seen as row-parallel (HYB's ELL pass is always one row per block)."""

    def __init__(self, ell):
        self.shape, self.layout = ell.shape, "row"
