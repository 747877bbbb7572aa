"""Test oracle: the hand-written BCSR executor template the library used before BCSR's executor
was generated from its recipe (``schedules.sparse.recipes.library.bcsr_recipe``).  Kept outside
the library to check and time the generated executor against (tests, ``bench.sparse_recipes``,
``bench.sparse_executors --generated``).

Register-blocked R x C micro-kernel (Venkat 2016 §5.3).  SpMM is the fusion package's block-row
text (:func:`tests.sparse_oracles.fused_spmm_source.bcsr_spmm_source` with no consumer): per
stored block, unrolled over ``c`` and ``r``, vectorised over the N tile, ``R * unroll``
accumulator vectors in registers.  SpMV keeps one accumulator per block slot (blocks of at
most :data:`SPMV_SLOT_ACCUMULATORS` slots) and loads the block's ``C`` entries of ``x`` once;
larger blocks accumulate per row.

>>> f = bcsr_spmv_primfunc(BCSRParams(lanes=16, unroll=1), "float32", 2, 3)
>>> [int(x) for x in f.params[2].shape[1:]]
[2, 3]
"""
from __future__ import annotations

from tests.sparse_oracles.fused_spmm_source import bcsr_spmm_source
from schedules.sparse.executors.bcsr import BCSRKernels, BCSRParams, check_block
from schedules.sparse.executors.codegen import (Buffer, Code, check_dtype, dense_buffers, dynamic_parts,
                                                parallel_items, parse_prim_func, prim_func_source,
                                                resolve_dynamic)
from schedules.sparse.executors.partition import balanced_parts
from schedules.sparse.executors.spec import ExecParams, FormatKernels
from schedules.sparse.executors.tiles import column_tiers, emit_row_blocks

__all__ = ["TemplateBCSRKernels", "bcsr_spmm_primfunc", "bcsr_spmv_primfunc",
           "bcsr_source", "SPMV_SLOT_ACCUMULATORS"]

#: Blocks of at most this many slots get the SpMV kernel with one accumulator per slot.
SPMV_SLOT_ACCUMULATORS = 32



def _emit_spmv_slots(code: Code, params: ExecParams, dtype: str, R: int, C: int) -> None:
    """SpMV with one accumulator per block slot (OSKI's register-blocked R x C kernel)."""
    with parallel_items(code, "ib", "MBP - 1", params.parallel,
                        dynamic=bool(getattr(params, "dynamic", False))):
        with code.block('with T.sblock("block_row"):'):
            code("vb = T.axis.spatial(MBP - 1, ib)")
            code(f'acc = T.sblock_alloc_buffer(({R * C},), "{dtype}", scope="local")')
            code(f'xs = T.sblock_alloc_buffer(({C},), "{dtype}", scope="local")')
            with code.block(f"for s in T.unroll({R * C}):"):
                code(f"acc[s] = T.{dtype}(0)")
            with code.block("for b in range(indptr[vb], indptr[vb + 1]):"):
                with code.block(f"for c in T.unroll({C}):"):
                    code(f"xs[c] = B[T.min(bcol[b] * {C} + c, K - 1)]")
                with code.block(f"for r in T.unroll({R}):"):
                    with code.block(f"for c in T.unroll({C}):"):
                        code(f"acc[r * {C} + c] = acc[r * {C} + c] + data[b, r, c] * xs[c]")
            with code.block(f"for r in T.unroll({R}):"):
                with code.block(f"for c in T.unroll({C - 1}):" if C > 1 else None):
                    if C > 1:
                        code(f"acc[r * {C}] = acc[r * {C}] + acc[r * {C} + c + 1]")
                row = f"vb * {R} + r"
                with code.block(f"if {row} < M:" if R > 1 else None):
                    with code.block(f"if beta == T.{dtype}(0):"):
                        code(f"C_out[{row}] = alpha * acc[r * {C}]")
                    with code.block("else:"):
                        code(f"C_out[{row}] = alpha * acc[r * {C}] + beta * C_in[{row}]")


def _emit_spmv_rows(code: Code, params: ExecParams, dtype: str, R: int, C: int) -> None:
    """SpMV of blocks too large for one accumulator per slot: one accumulator per block row."""
    def blocks(code_: Code, tier, fma) -> None:
        with code_.block("for b in range(indptr[vb], indptr[vb + 1]):"):
            with code_.block(f"for c in T.unroll({C}):"):
                with code_.block(f"for r in T.unroll({R}):"):
                    fma(code_, "data[b, r, c]", f"T.min(bcol[b] * {C} + c, K - 1)", "r", "0")

    with parallel_items(code, "ib", "MBP - 1", params.parallel,
                        dynamic=bool(getattr(params, "dynamic", False))):
        emit_row_blocks(code, name="block_row", tiers=column_tiers(params.lanes, params.unroll, spmv=True),
                        dtype=dtype, bindings=["vb = T.axis.spatial(MBP - 1, ib)"], rows=R,
                        c_row=lambda r: f"vb * {R} + {r}",
                        row_ok=(lambda r: f"vb * {R} + {r} < M") if R > 1 else None, accumulate=blocks)


def bcsr_source(params: ExecParams, dtype: str, R: int, C: int, kind: str = "spmm") -> str:
    """TVMScript text of the BCSR template for R x C blocks (``params`` resolved)."""
    dtype = check_dtype(dtype)
    check_block(R, C)
    if kind == "spmm":
        return bcsr_spmm_source(params, dtype, R, C)
    bufs = [Buffer("a_indptr", "indptr", ("MBP",), "int32"),
            Buffer("a_bcol", "bcol", ("NB",), "int32"),
            Buffer("a_data", "data", ("NB", str(R), str(C)), dtype)]
    if params.parallel:
        bufs.append(Buffer("a_part", "part", ("NP",), "int32"))
    bufs += dense_buffers(kind, dtype)
    code = Code()
    if R * C <= SPMV_SLOT_ACCUMULATORS:
        _emit_spmv_slots(code, params, dtype, R, C)
    else:
        _emit_spmv_rows(code, params, dtype, R, C)
    sizes = ["M", "K", "MBP", "NB"] + (["NP"] if params.parallel else [])
    return prim_func_source(f"bcsr{R}x{C}_spmv", bufs, [("alpha", dtype), ("beta", dtype)], sizes, code)


def bcsr_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32", R: int = 2,
                       C: int = 2, *, n_cols: int | None = None, target=None):
    """The template's BCSR SpMM PrimFunc for R x C blocks."""
    p = (params or BCSRParams()).resolve(check_dtype(dtype), n_cols, target, acc_rows=R)
    return parse_prim_func(bcsr_source(p, dtype, R, C, "spmm"))


def bcsr_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32", R: int = 2,
                       C: int = 2, *, target=None):
    """The template's BCSR SpMV PrimFunc for R x C blocks."""
    p = (params or BCSRParams()).resolve(check_dtype(dtype), 1, target, acc_rows=R)
    return parse_prim_func(bcsr_source(p, dtype, R, C, "spmv"))


class TemplateBCSRKernels(FormatKernels):
    format_name = "bcsr"
    params_cls = BCSRParams

    check = BCSRKernels.check  # the library's own validation of the container

    def resolve(self, fmt, params, dtype, kind, n_cols, target):
        return resolve_dynamic(params.resolve(dtype, n_cols, target, acc_rows=fmt.R, work=self.nnz(fmt)))

    def primfunc(self, fmt, params, kind, transpose):
        return parse_prim_func(bcsr_source(params, fmt.data.dtype.name, fmt.R, fmt.C, kind))

    def signature(self, fmt, params, kind, transpose):
        return ("bcsr_template", kind, fmt.data.dtype.name, fmt.R, fmt.C, params.kernel_key(),
                bool(getattr(params, "dynamic", False)))

    def arrays(self, fmt, params, kind, transpose, threads):
        out = [fmt.indptr, fmt.bcol, fmt.data]
        if params.parallel:
            parts = dynamic_parts(params, threads, self.nnz(fmt))
            out.append(balanced_parts(fmt.indptr, parts, item_cost=1.0))
        return out

    def nnz(self, fmt) -> int:
        return int(fmt.bcol.size) * fmt.R * fmt.C
