"""Test oracle: the hand-written CSB executor template the library used before CSB's executor
was generated from its recipe (``schedules.sparse.recipes.library.csb_recipe``).  Kept outside
the library to check and time the generated executor against (tests, ``bench.sparse_recipes``).

A @ B and A.T @ B from one store (Venkat 2016 §6.1, CSB SpMM/SpMM^T for LOBPCG).  The
beta x beta blocks are stored block-row-major.  Three kernels, all conflict-free without atomics:

* ``A @ B`` parallel over **block rows**: a thread owns the output rows of
  its block rows, scales them (``beta * C_in``) and scatters
  ``alpha * a * B[col]`` into them;
* ``A.T @ B`` parallel over **block columns**: a thread owns the output rows
  of its block columns (the block column's entries are found through
  ``blk_ptr[ii * KB + ll]``);
* ``symmetric_half`` (only the lower triangle L, with its diagonal D, is
  stored): ``A @ B = L @ B + (L - D).T @ B`` in two passes.

Block-grid sizes (``mb``, ``kb``) and ``beta`` are runtime int32 scalars, so
one kernel serves every block size.

>>> f = csb_spmm_primfunc(CSBParams(lanes=16, unroll=1), "float32", symmetric_half=True)
>>> [str(v.name) for v in f.params][-5:]
['mb', 'kb', 'bs', 'alpha', 'beta']
"""
from __future__ import annotations

import numpy as np

from schedules.sparse.executors.codegen import (Buffer, Code, check_dtype, dense_buffers,
                                                parallel_items, parse_prim_func, prim_func_source)
from schedules.sparse.executors.csb import CSBKernels, CSBParams, entry_coords
from schedules.sparse.executors.partition import balanced_parts
from schedules.sparse.executors.spec import ExecParams, FormatKernels
from schedules.sparse.executors.tiles import column_tiers, emit_scale_loops, emit_update_loops

__all__ = ["TemplateCSBKernels", "csb_spmm_primfunc", "csb_spmv_primfunc", "csb_source"]

_ROW = 'T.Cast("int32", row_off[p])'
_COL = 'T.Cast("int32", col_off[p])'


def _emit_row_pass(code: Code, params: ExecParams, dtype: str, tiers) -> None:
    """Block-row-parallel ``C = beta*C + alpha*A@B`` (A as stored)."""
    with parallel_items(code, "ib", "mb", params.parallel, part="part_r", count="NPR"):
        with code.block('with T.sblock("block_row"):'):
            code("vb = T.axis.spatial(mb, ib)")
            with code.block("for i in range(vb * bs, T.min(vb * bs + bs, M)):"):
                emit_scale_loops(code, tiers=tiers, dtype=dtype, row="i")
            with code.block("for ll in range(kb):"):
                with code.block("for p in range(blk_ptr[vb * kb + ll], blk_ptr[vb * kb + ll + 1]):"):
                    emit_update_loops(code, tiers=tiers, out_row=f"vb * bs + {_ROW}",
                                      scale="alpha * data[p]", b_row=f"ll * bs + {_COL}")


def _emit_col_pass(code: Code, params: ExecParams, dtype: str, tiers, *, scale_rows: str | None,
                   skip_diagonal: bool) -> None:
    """Block-column-parallel ``C += alpha * A.T @ B`` (scaling the owned rows first
    when ``scale_rows`` names the output row count)."""
    with parallel_items(code, "lb", "kb", params.parallel, part="part_c", count="NPC"):
        with code.block('with T.sblock("block_col"):'):
            code("vl = T.axis.spatial(kb, lb)")
            if scale_rows:
                with code.block(f"for i in range(vl * bs, T.min(vl * bs + bs, {scale_rows})):"):
                    emit_scale_loops(code, tiers=tiers, dtype=dtype, row="i")
            with code.block("for ii in range(mb):"):
                with code.block("for p in range(blk_ptr[ii * kb + vl], blk_ptr[ii * kb + vl + 1]):"):
                    guard = f"ii * bs + {_ROW} != vl * bs + {_COL}" if skip_diagonal else None
                    with code.block(f"if {guard}:" if guard else None):
                        emit_update_loops(code, tiers=tiers, out_row=f"vl * bs + {_COL}",
                                          scale="alpha * data[p]", b_row=f"ii * bs + {_ROW}")


def csb_source(params: ExecParams, dtype: str, kind: str = "spmm", *, transpose: bool = False,
               symmetric_half: bool = False) -> str:
    """TVMScript text of the CSB executor (``transpose`` ignored when symmetric)."""
    dtype = check_dtype(dtype)
    spmv = kind == "spmv"
    transpose = transpose and not symmetric_half
    bufs = [Buffer("a_blk_ptr", "blk_ptr", ("NBP",), "int32"),
            Buffer("a_row_off", "row_off", ("NNZ",), "uint16"),
            Buffer("a_col_off", "col_off", ("NNZ",), "uint16"),
            Buffer("a_data", "data", ("NNZ",), dtype)]
    row_pass, col_pass = (not transpose), (transpose or symmetric_half)
    if params.parallel and row_pass:
        bufs.append(Buffer("a_part_r", "part_r", ("NPR",), "int32"))
    if params.parallel and col_pass:
        bufs.append(Buffer("a_part_c", "part_c", ("NPC",), "int32"))
    bufs += dense_buffers(kind, dtype, in_rows="M" if transpose else "K",
                          out_rows="K" if transpose else "M")
    tiers = column_tiers(params.lanes, params.unroll, spmv=spmv, blocks=False)
    code = Code()
    if row_pass:
        _emit_row_pass(code, params, dtype, tiers)
    if col_pass:
        _emit_col_pass(code, params, dtype, tiers, scale_rows="K" if transpose else None,
                       skip_diagonal=symmetric_half)
    sizes = ["M", "K", "NBP", "NNZ"] + (["N"] if not spmv else [])
    if params.parallel:
        sizes += (["NPR"] if row_pass else []) + (["NPC"] if col_pass else [])
    name = "csb" + ("_sym" if symmetric_half else "") + ("_t" if transpose else "") + f"_{kind}"
    scalars = [("mb", "int32"), ("kb", "int32"), ("bs", "int32"), ("alpha", dtype), ("beta", dtype)]
    return prim_func_source(name, bufs, scalars, sizes, code)


def csb_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32", *,
                      transpose: bool = False, symmetric_half: bool = False,
                      n_cols: int | None = None, target=None):
    """CSB SpMM PrimFunc (``A@B``, ``A.T@B`` or the symmetric-half product)."""
    p = (params or CSBParams()).resolve(check_dtype(dtype), n_cols, target)
    return parse_prim_func(csb_source(p, dtype, "spmm", transpose=transpose,
                                      symmetric_half=symmetric_half))


def csb_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32", *,
                      transpose: bool = False, symmetric_half: bool = False, target=None):
    """CSB SpMV PrimFunc."""
    p = (params or CSBParams()).resolve(check_dtype(dtype), 1, target)
    return parse_prim_func(csb_source(p, dtype, "spmv", transpose=transpose,
                                      symmetric_half=symmetric_half))


class TemplateCSBKernels(FormatKernels):
    """The template's executor contract (``Executor(fmt, TemplateCSBKernels(), ...)``)."""

    format_name = "csb"
    params_cls = CSBParams
    transposable = True

    def check(self, fmt) -> None:
        CSBKernels().check(fmt)  # the library's own validation of the container

    def primfunc(self, fmt, params, kind, transpose):
        return parse_prim_func(csb_source(params, fmt.data.dtype.name, kind, transpose=transpose,
                                          symmetric_half=fmt.symmetric_half))

    def signature(self, fmt, params, kind, transpose):
        t = transpose and not fmt.symmetric_half
        return ("csb-template", kind, fmt.data.dtype.name, bool(fmt.symmetric_half), t, params.kernel_key())

    def arrays(self, fmt, params, kind, transpose, threads):
        out = [fmt.blk_ptr, fmt.row_off, fmt.col_off, fmt.data]
        if not params.parallel:
            return out
        mb, kb = fmt.block_grid
        per_block = np.diff(fmt.blk_ptr).reshape(mb, kb) if mb * kb else np.zeros((mb, kb), np.int64)
        t = transpose and not fmt.symmetric_half
        cost = fmt.beta / 4.0
        n = params.n_parts(threads)
        if not t:
            out.append(balanced_parts(np.concatenate([[0], np.cumsum(per_block.sum(1))]), n, item_cost=cost))
        if t or fmt.symmetric_half:
            out.append(balanced_parts(np.concatenate([[0], np.cumsum(per_block.sum(0))]), n, item_cost=cost))
        return out

    def scalars(self, fmt, transpose):
        mb, kb = fmt.block_grid
        return [mb, kb, int(fmt.beta)]

    def nnz(self, fmt) -> int:
        if fmt.symmetric_half:
            rows, cols = entry_coords(fmt)
            return int(2 * fmt.data.size - np.count_nonzero(rows == cols))
        return int(fmt.data.size)
