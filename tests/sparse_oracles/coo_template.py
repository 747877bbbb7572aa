"""Test oracle: the hand-written COO executor template the library used before COO's executor
was generated from its recipe (``schedules.sparse.recipes.library.coo_recipe``).  Kept outside
the library to check and time the generated executor against (tests, ``bench.sparse_recipes``).

Row-segmented SpMM/SpMV (Venkat 2016 §3.1 coalesced COO executor).  The row-sorted entry
stream is cut into row-aligned chunks at build time (:func:`~.partition.row_aligned_chunks`),
so chunks run in parallel without write conflicts.  Two passes:

1. ``scale``: ``C_out = beta * C_in`` (or 0) for every row, row-parallel;
2. ``run``: per chunk and column tile, accumulate a row's run of entries in
   registers and add it to ``C_out`` when the row changes (segmented sum).

With ``parallel=False`` pass 2 is one serial loop over all entries.

>>> f = coo_spmm_primfunc(COOParams(lanes=8, unroll=1), "float64")
>>> len(f.params)
9
"""
from __future__ import annotations

from schedules.sparse.executors.codegen import (Buffer, Code, check_dtype, dense_buffers,
                                                parse_prim_func, prim_func_source)
from schedules.sparse.executors.coo import COOKernels, COOParams
from schedules.sparse.executors.partition import row_aligned_chunks
from schedules.sparse.executors.spec import ExecParams, FormatKernels
from schedules.sparse.executors.tiles import Tier, column_tiers, emit_scale_blocks

__all__ = ["TemplateCOOKernels", "coo_spmm_primfunc", "coo_spmv_primfunc", "coo_source", "emit_row_runs"]


def emit_row_runs(code: Code, *, name: str, tiers: list[Tier], dtype: str, prefix: str,
                  parallel: bool, chunk: str) -> None:
    """Pass 2: segmented sums of a row-sorted entry stream added into ``C_out``.

    Arrays are ``{prefix}row``, ``{prefix}col``, ``{prefix}data`` of length
    ``{prefix.upper()}NNZ``; chunks come from the boundary array ``chunk``
    (``N{chunk.upper()}`` entries).
    """
    row, col, data = f"{prefix}row", f"{prefix}col", f"{prefix}data"
    nnz = f"{prefix.upper()}NNZ"
    nchunk = f"N{chunk.upper()}"
    outer = f"for t in T.parallel({nchunk} - 1):" if parallel else None
    lo, hi = (f"{chunk}[vt]", f"{chunk}[vt + 1]") if parallel else ("0", nnz)
    with code.block(outer):
        for tier in tiers:
            with code.block(tier.header):
                with code.block(f'with T.sblock("{name}{tier.suffix}"):'):
                    if parallel:
                        code(f"vt = T.axis.spatial({nchunk} - 1, t)")
                    if tier.binding:
                        code(tier.binding)
                    code(f'acc = T.sblock_alloc_buffer((1, {tier.width}), "{dtype}", scope="local")')
                    tier.emit(code, f"acc[0, {tier.lane()}] = T.{dtype}(0)")
                    with code.block(f"for p in range({lo}, {hi}):"):
                        tier.emit(code, f"acc[0, {tier.lane()}] = acc[0, {tier.lane()}] + "
                                        f"{data}[p] * {tier.b(f'{col}[p]')}")
                        flush = f"p + 1 == {hi} or {row}[T.min(p + 1, {nnz} - 1)] != {row}[p]"
                        with code.block(f"if {flush}:"):
                            dst = tier.c("C_out", f"{row}[p]")
                            tier.emit(code, f"{dst} = {dst} + alpha * acc[0, {tier.lane()}]")
                            tier.emit(code, f"acc[0, {tier.lane()}] = T.{dtype}(0)")


def coo_source(params: ExecParams, dtype: str, kind: str = "spmm") -> str:
    """TVMScript text of the COO executor (``params`` resolved)."""
    dtype = check_dtype(dtype)
    spmv = kind == "spmv"
    bufs = [Buffer("a_row", "row", ("NNZ",), "int32"), Buffer("a_col", "col", ("NNZ",), "int32"),
            Buffer("a_data", "data", ("NNZ",), dtype)]
    if params.parallel:
        bufs.append(Buffer("a_chunk", "chunk", ("NCHUNK",), "int32"))
    bufs += dense_buffers(kind, dtype)
    code = Code()
    with code.block("for i in T.parallel(M):" if params.parallel else "for i in range(M):"):
        emit_scale_blocks(code, name="scale", tiers=column_tiers(params.lanes, params.unroll, spmv=spmv),
                          dtype=dtype, bindings=["vi = T.axis.spatial(M, i)"], row="vi")
    emit_row_runs(code, name="run", tiers=column_tiers(params.lanes, params.unroll, spmv=spmv),
                  dtype=dtype, prefix="", parallel=params.parallel, chunk="chunk")
    sizes = ["M", "K", "NNZ"] + (["N"] if not spmv else []) + (["NCHUNK"] if params.parallel else [])
    return prim_func_source(f"coo_{kind}", bufs, [("alpha", dtype), ("beta", dtype)], sizes, code)


def coo_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32", *,
                      n_cols: int | None = None, target=None):
    """COO SpMM PrimFunc ``C_out = alpha*A@B + beta*C_in``."""
    p = (params or COOParams()).resolve(check_dtype(dtype), n_cols, target)
    return parse_prim_func(coo_source(p, dtype, "spmm"))


def coo_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32", *, target=None):
    """COO SpMV PrimFunc."""
    p = (params or COOParams()).resolve(check_dtype(dtype), 1, target)
    return parse_prim_func(coo_source(p, dtype, "spmv"))


class TemplateCOOKernels(FormatKernels):
    format_name = "coo"
    params_cls = COOParams

    check = COOKernels.check  # the library's own validation of the container

    def primfunc(self, fmt, params, kind, transpose):
        return parse_prim_func(coo_source(params, fmt.data.dtype.name, kind))

    def signature(self, fmt, params, kind, transpose):
        return ("coo", kind, fmt.data.dtype.name, params.kernel_key())

    def arrays(self, fmt, params, kind, transpose, threads):
        out = [fmt.row, fmt.col, fmt.data]
        if params.parallel:
            out.append(row_aligned_chunks(fmt.row, params.n_parts(threads)))
        return out

    def nnz(self, fmt) -> int:
        return int(fmt.row.size)
