"""Test oracle: the hand-written ELL executor template (row- and column-major) the library used
before ELL's executor was generated from its recipes (``schedules.sparse.recipes.library.ell_recipe``,
``ell_col_recipe``).  Kept outside the library to check and time the generated executor against
(tests, ``bench.sparse_recipes``).

* SpMM: one spatial block per (row, column tile); the fixed-width loop
  ``for w in range(W)`` accumulates the tile in registers (padding slots hold
  value 0 and a valid column, so there are no guards).
* SpMV, column-major layout: vectorised over ``lanes`` consecutive rows (the
  GPU-style layout: contiguous ``data``/``col`` vectors, gathered ``x``); the
  last partial row tile runs scalar.
* SpMV, row-major layout: one scalar accumulator per row.

Rows (or row tiles) are split into equal parts for ``T.parallel``.

>>> f = ell_spmm_primfunc(ELLParams(lanes=16, unroll=1), "float32", "col")
>>> f.params[0].shape[0].name
'W'
"""
from __future__ import annotations

from schedules.sparse.executors.codegen import (Buffer, Code, check_dtype, dense_buffers,
                                                parallel_items, parse_prim_func, prim_func_source)
from schedules.sparse.executors.ell import LAYOUTS, ELLKernels, ELLParams
from schedules.sparse.executors.partition import uniform_parts
from schedules.sparse.executors.spec import ExecParams, FormatKernels
from schedules.sparse.executors.tiles import (column_tiers, emit_interleaved, emit_row_blocks,
                                              emit_vector_rows_write, tier_chains, vector_row_tile)
from tvm_ext.errors import InputError

__all__ = ["TemplateELLKernels", "ell_spmm_primfunc", "ell_spmv_primfunc", "ell_source",
           "emit_ell_rows", "ell_buffers", "ell_part_array"]


def ell_buffers(layout: str, dtype: str, prefix: str = "") -> list[Buffer]:
    """``col``/``data`` buffers of an ELL of width ``W`` (``(M, W)`` or ``(W, M)``)."""
    shape = ("M", f"{prefix.upper()}W") if layout == "row" else (f"{prefix.upper()}W", "M")
    return [Buffer(f"a_{prefix}col", f"{prefix}col", shape, "int32"),
            Buffer(f"a_{prefix}data", f"{prefix}data", shape, dtype)]


def _at(layout: str, row: str, w: str) -> str:
    return f"{row}, {w}" if layout == "row" else f"{w}, {row}"


def emit_ell_rows(code: Code, *, params: ExecParams, dtype: str, layout: str, spmv: bool,
                  prefix: str = "", name: str = "row") -> None:
    """Row-parallel ``C_out = alpha * ELL @ B + beta * C_in`` (one block per row and tile)."""
    col, data, width = f"{prefix}col", f"{prefix}data", f"{prefix.upper()}W"

    def slots(code_: Code, tier, fma) -> None:
        emit_interleaved(code_, "w", "0", width, tier_chains(tier),
                         lambda c, w, k: fma(c, f"{data}[{_at(layout, 'vi', w)}]",
                                             f"{col}[{_at(layout, 'vi', w)}]", "0", k))

    with parallel_items(code, "i", "M", params.parallel):
        emit_row_blocks(code, name=name, tiers=column_tiers(params.lanes, params.unroll, spmv=spmv),
                        dtype=dtype, bindings=["vi = T.axis.spatial(M, i)"], rows=1,
                        c_row=lambda r: "vi", row_ok=None, accumulate=slots, chains=tier_chains)


def _emit_col_spmv(code: Code, params: ExecParams, dtype: str) -> None:
    """Column-major SpMV: a vector of ``L`` consecutive rows per step."""
    L = params.lanes
    with vector_row_tile(code, L, dtype, params.parallel) as row:
        with code.block(f"if vt * {L} + {L} <= M:"):
            with code.block("for w in range(W):"):
                with code.block(f"for jj in T.vectorized({L}):"):
                    code(f"acc[jj] = acc[jj] + data[w, {row}] * B[col[w, {row}]]")
            emit_vector_rows_write(code, dtype, row, f"T.vectorized({L})", None)
        with code.block("else:"):
            with code.block("for w in range(W):"):
                with code.block(f"for jj in range({L}):"):
                    with code.block(f"if {row} < M:"):
                        code(f"acc[jj] = acc[jj] + data[w, {row}] * B[col[w, {row}]]")
            emit_vector_rows_write(code, dtype, row, f"range({L})", f"{row} < M")


def ell_source(params: ExecParams, dtype: str, layout: str = "row", kind: str = "spmm") -> str:
    """TVMScript text of the ELL executor for ``layout`` ("row" or "col")."""
    dtype = check_dtype(dtype)
    if layout not in LAYOUTS:
        raise InputError(f"ell: layout must be 'row' or 'col', got {layout!r}")
    spmv = kind == "spmv"
    bufs = ell_buffers(layout, dtype)
    if params.parallel:
        bufs.append(Buffer("a_part", "part", ("NP",), "int32"))
    bufs += dense_buffers(kind, dtype)
    code = Code()
    if spmv and layout == "col":
        _emit_col_spmv(code, params, dtype)
    else:
        emit_ell_rows(code, params=params, dtype=dtype, layout=layout, spmv=spmv)
    sizes = ["M", "K", "W"] + (["N"] if not spmv else []) + (["NP"] if params.parallel else [])
    return prim_func_source(f"ell_{layout}_{kind}", bufs, [("alpha", dtype), ("beta", dtype)],
                            sizes, code)


def ell_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32",
                      layout: str = "row", *, n_cols: int | None = None, target=None):
    """ELL SpMM PrimFunc for ``layout``."""
    p = (params or ELLParams()).resolve(check_dtype(dtype), n_cols, target)
    return parse_prim_func(ell_source(p, dtype, layout, "spmm"))


def ell_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32",
                      layout: str = "row", *, target=None):
    """ELL SpMV PrimFunc for ``layout``."""
    p = (params or ELLParams()).resolve(check_dtype(dtype), 1, target)
    return parse_prim_func(ell_source(p, dtype, layout, "spmv"))


def ell_part_array(fmt, params: ExecParams, kind: str, threads: int):
    """Row parts (row tiles of ``lanes`` for column-major SpMV)."""
    m = fmt.shape[0]
    items = -(-m // params.lanes) if (kind == "spmv" and fmt.layout == "col") else m
    return uniform_parts(items, params.n_parts(threads))


class TemplateELLKernels(FormatKernels):
    format_name = "ell"
    params_cls = ELLParams

    check = ELLKernels.check  # the library's own validation of the container

    def primfunc(self, fmt, params, kind, transpose):
        return parse_prim_func(ell_source(params, fmt.data.dtype.name, fmt.layout, kind))

    def signature(self, fmt, params, kind, transpose):
        return ("ell", kind, fmt.data.dtype.name, fmt.layout, params.kernel_key())

    def arrays(self, fmt, params, kind, transpose, threads):
        out = [fmt.col, fmt.data]
        if params.parallel:
            out.append(ell_part_array(fmt, params, kind, threads))
        return out

    def nnz(self, fmt) -> int:
        return int(fmt.data.size)
