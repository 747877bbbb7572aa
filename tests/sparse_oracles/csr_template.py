"""Test oracle: the hand-written CSR executor template the library used before CSR's executor
was generated from its recipe (``schedules.sparse.recipes.library.csr_recipe``).  Kept outside
the library to check and time the generated executor against (tests, ``bench.sparse_recipes``,
``bench.sparse_executors --generated``).

Row-parallel SpMM/SpMV (Venkat 2016 Listing 5.3).  SpMM is the fusion package's row-tile
text (:func:`tests.sparse_oracles.fused_spmm_source.csr_spmm_source` with no consumer): one
spatial block per (row, column tile), the row's non-zeros accumulated in registers, ``C``
written once.  SpMV: one row per block, ``unroll`` interleaved partial sums.  Rows are split
into non-zero-balanced parts for ``T.parallel``; ``dynamic`` parts are claimed at run time.

>>> f = csr_spmv_primfunc(CSRParams(lanes=16, unroll=2), "float32")
>>> [b.name for b in f.params[:3]]
['indptr', 'indices', 'data']
"""
from __future__ import annotations

import dataclasses
from tests.sparse_oracles.fused_spmm_source import csr_spmm_source
from schedules.sparse.executors.codegen import (Buffer, Code, check_dtype, dense_buffers, dynamic_parts,
                                                parallel_items, parse_prim_func, prim_func_source,
                                                resolve_dynamic)
from schedules.sparse.executors.csr import CSRKernels, CSRParams
from schedules.sparse.executors.partition import balanced_parts
from schedules.sparse.executors.spec import ExecParams, FormatKernels

__all__ = ["TemplateCSRKernels", "csr_spmm_primfunc", "csr_spmv_primfunc",
           "csr_source", "SPMV_PARTIAL_SUMS"]

#: Default interleaved partial sums of the CSR SpMV kernel.
SPMV_PARTIAL_SUMS = 4



def _emit_spmv(code: Code, params: ExecParams, dtype: str) -> None:
    """One row per block; ``unroll`` interleaved partial sums over the row's non-zeros."""
    U = params.unroll
    start, length = "indptr[vi]", "(indptr[vi + 1] - indptr[vi])"
    with parallel_items(code, "i", "M", params.parallel, dynamic=bool(getattr(params, "dynamic", False))):
        with code.block('with T.sblock("row"):'):
            code("vi = T.axis.spatial(M, i)")
            code(f'acc = T.sblock_alloc_buffer(({U},), "{dtype}", scope="local")')
            with code.block(f"for k in T.unroll({U}):"):
                code(f"acc[k] = T.{dtype}(0)")
            if U > 1:
                with code.block(f"for q in range({length} // {U}):"):
                    with code.block(f"for k in T.unroll({U}):"):
                        p = f"{start} + q * {U} + k"
                        code(f"acc[k] = acc[k] + data[{p}] * B[indices[{p}]]")
                tail = f"{start} + {length} // {U} * {U}"
            else:
                tail = start
            with code.block(f"for p in range({tail}, indptr[vi + 1]):"):
                code("acc[0] = acc[0] + data[p] * B[indices[p]]")
            if U > 1:
                with code.block(f"for k in T.unroll({U - 1}):"):
                    code("acc[0] = acc[0] + acc[k + 1]")
            with code.block(f"if beta == T.{dtype}(0):"):
                code("C_out[vi] = alpha * acc[0]")
            with code.block("else:"):
                code("C_out[vi] = alpha * acc[0] + beta * C_in[vi]")


def csr_source(params: ExecParams, dtype: str, kind: str = "spmm") -> str:
    """TVMScript text of the CSR template (``params`` resolved)."""
    dtype = check_dtype(dtype)
    if kind == "spmm":
        return csr_spmm_source(params, dtype)
    bufs = [Buffer("a_indptr", "indptr", ("M + 1",), "int32"),
            Buffer("a_indices", "indices", ("NNZ",), "int32"),
            Buffer("a_data", "data", ("NNZ",), dtype)]
    if params.parallel:
        bufs.append(Buffer("a_part", "part", ("NP",), "int32"))
    bufs += dense_buffers(kind, dtype)
    code = Code()
    _emit_spmv(code, params, dtype)
    sizes = ["M", "K", "NNZ"] + (["NP"] if params.parallel else [])
    return prim_func_source("csr_spmv", bufs, [("alpha", dtype), ("beta", dtype)], sizes, code)


def csr_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32", *,
                      n_cols: int | None = None, target=None):
    """The template's CSR SpMM PrimFunc."""
    p = (params or CSRParams()).resolve(check_dtype(dtype), n_cols, target)
    return parse_prim_func(csr_source(p, dtype, "spmm"))


def csr_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32", *, target=None):
    """The template's CSR SpMV PrimFunc."""
    p = params or CSRParams()
    if p.unroll is None:
        p = dataclasses.replace(p, unroll=SPMV_PARTIAL_SUMS)
    return parse_prim_func(csr_source(p.resolve(check_dtype(dtype), 1, target), dtype, "spmv"))


class TemplateCSRKernels(FormatKernels):
    format_name = "csr"
    params_cls = CSRParams

    check = CSRKernels.check  # the library's own validation of the container

    def resolve(self, fmt, params, dtype, kind, n_cols, target):
        if kind == "spmv" and params.unroll is None:
            params = dataclasses.replace(params, unroll=SPMV_PARTIAL_SUMS)
        return resolve_dynamic(params.resolve(dtype, n_cols, target, work=self.nnz(fmt)))

    def primfunc(self, fmt, params, kind, transpose):
        return parse_prim_func(csr_source(params, fmt.data.dtype.name, kind))

    def signature(self, fmt, params, kind, transpose):
        return ("csr_template", kind, fmt.data.dtype.name, params.kernel_key(),
                bool(getattr(params, "dynamic", False)))

    def arrays(self, fmt, params, kind, transpose, threads):
        out = [fmt.indptr, fmt.indices, fmt.data]
        if params.parallel:
            parts = dynamic_parts(params, threads, self.nnz(fmt))
            out.append(balanced_parts(fmt.indptr, parts, item_cost=1.0))
        return out

    def nnz(self, fmt) -> int:
        return int(fmt.indices.size)
