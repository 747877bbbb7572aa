"""CSR executors: row-parallel SpMM/SpMV (Venkat 2016 Listing 5.3, the CSR executor).

One spatial block per (row, column tile); the row's non-zero loop
``for p in range(indptr[vi], indptr[vi + 1])`` runs inside the block and
accumulates the tile in registers; ``C`` is written once.  Rows are split into
non-zero-balanced parts for ``T.parallel``.

>>> f = csr_spmm_primfunc(CSRParams(lanes=16, unroll=2), "float32")
>>> sorted(v.name for v in f.params)[:3]
['B', 'C_in', 'C_out']
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from schedules.sparse.executors.checks import (require_array, require_pointer, require_range,
                                               require_value_dtype)
from schedules.sparse.executors.codegen import (Buffer, Code, RowConsumer, check_consumer, check_dtype,
                                                consumer_buffers, dynamic_parts, parallel_items,
                                                parse_prim_func, prim_func_source, resolve_dynamic)
from schedules.sparse.executors.partition import balanced_parts
from schedules.sparse.executors.spec import ExecParams, FormatKernels
from schedules.sparse.executors.tiles import (column_tiers, emit_interleaved, emit_row_blocks,
                                              tier_chains)

__all__ = ["CSRParams", "CSRKernels", "csr_spmm_primfunc", "csr_spmv_primfunc", "csr_source",
           "SPMV_PARTIAL_SUMS"]

#: Default interleaved partial sums of the CSR SpMV kernel.
SPMV_PARTIAL_SUMS = 4


@dataclass(frozen=True)
class CSRParams(ExecParams):
    """CSR knobs (see :class:`ExecParams`): lanes over N, vectors per row tile,
    parallel grain.  For SpMV ``unroll`` is the number of interleaved partial
    sums over a row's non-zeros (default :data:`SPMV_PARTIAL_SUMS`).
    ``dynamic=True`` (or ``None``: when the atomics helper builds): the threads
    of a parallel kernel claim the parts at run time
    (:func:`~schedules.sparse.executors.codegen.parallel_items`; give it more
    ``parts_per_thread``, e.g. 16).  Off by default: on a busy 2-core machine
    it cut the median time 1.3-1.9x in one set of runs and was even or 5-10%
    slower in another, so the fixed shares stay the default."""

    dynamic: bool | None = False


def _dynamic(params: ExecParams, consumer: RowConsumer | None) -> bool:
    """Whether the parts are claimed at run time: asked for, and no consumer (whose per-part
    sums need a part per iteration of the parallel loop)."""
    return bool(getattr(params, "dynamic", False)) and consumer is None


def _emit_spmm(code: Code, params: ExecParams, dtype: str, consumer: RowConsumer | None = None) -> None:
    def nonzeros(code_: Code, tier, fma) -> None:
        # the row's non-zeros interleaved over accumulator chains (latency hiding)
        emit_interleaved(code_, "p", "indptr[vi]", "indptr[vi + 1]", tier_chains(tier),
                         lambda c, p, k: fma(c, f"data[{p}]", f"indices[{p}]", "0", k))

    with parallel_items(code, "i", "M", params.parallel,
                        prologue=consumer.part_prologue if consumer else None,
                        epilogue=consumer.part_epilogue if consumer else None,
                        dynamic=_dynamic(params, consumer)):
        if consumer is not None and consumer.row_prologue is not None:
            consumer.row_prologue(code, "i")
        emit_row_blocks(code, name="row", tiers=column_tiers(params.lanes, params.unroll, spmv=False),
                        dtype=dtype, bindings=["vi = T.axis.spatial(M, i)"], rows=1,
                        c_row=lambda r: "vi", row_ok=None, accumulate=nonzeros, chains=tier_chains,
                        consumer=consumer)
    if consumer is not None and consumer.epilogue is not None:
        consumer.epilogue(code)


def _emit_spmv(code: Code, params: ExecParams, dtype: str) -> None:
    """One row per block; ``unroll`` interleaved partial sums over the row's
    non-zeros break the floating-point add dependency chain."""
    U = params.unroll
    start, length = "indptr[vi]", "(indptr[vi + 1] - indptr[vi])"
    with parallel_items(code, "i", "M", params.parallel, dynamic=_dynamic(params, None)):
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


def csr_source(params: ExecParams, dtype: str, kind: str = "spmm",
               consumer: RowConsumer | None = None) -> str:
    """TVMScript text of the CSR executor (``params`` resolved).

    For SpMV ``params.unroll`` is the number of interleaved partial sums.
    ``consumer`` fuses work on each finished row tile (SpMM, parallel only).
    """
    dtype = check_dtype(dtype)
    spmv = kind == "spmv"
    check_consumer(consumer, kind, params)
    bufs = [Buffer("a_indptr", "indptr", ("M + 1",), "int32"),
            Buffer("a_indices", "indices", ("NNZ",), "int32"),
            Buffer("a_data", "data", ("NNZ",), dtype)]
    if params.parallel:
        bufs.append(Buffer("a_part", "part", ("NP",), "int32"))
    bufs += consumer_buffers(consumer, kind, dtype)
    code = Code()
    if spmv:
        _emit_spmv(code, params, dtype)
    else:
        _emit_spmm(code, params, dtype, consumer)
    sizes = ["M", "K", "NNZ"] + (["N"] if not spmv else []) + (["NP"] if params.parallel else [])
    sizes += [v for v in (consumer.size_vars if consumer else ()) if v not in sizes]
    name = f"csr_{kind}" + ("_fused" if consumer else "")
    return prim_func_source(name, bufs, [("alpha", dtype), ("beta", dtype)], sizes, code)



def csr_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32", *,
                      n_cols: int | None = None, target=None):
    """CSR SpMM PrimFunc ``C_out = alpha*A@B + beta*C_in`` (B is K x N, N symbolic)."""
    p = (params or CSRParams()).resolve(check_dtype(dtype), n_cols, target)
    return parse_prim_func(csr_source(p, dtype, "spmm"))


def csr_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32", *, target=None):
    """CSR SpMV PrimFunc ``y_out = alpha*A@x + beta*y_in``."""
    p = params or CSRParams()
    if p.unroll is None:
        p = dataclasses.replace(p, unroll=SPMV_PARTIAL_SUMS)
    p = p.resolve(check_dtype(dtype), 1, target)
    return parse_prim_func(csr_source(p, dtype, "spmv"))


class CSRKernels(FormatKernels):
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

    def resolve(self, fmt, params, dtype, kind, n_cols, target):
        if kind == "spmv" and params.unroll is None:
            params = dataclasses.replace(params, unroll=SPMV_PARTIAL_SUMS)
        return resolve_dynamic(params.resolve(dtype, n_cols, target, work=self.nnz(fmt)))

    def primfunc(self, fmt, params, kind, transpose):
        return parse_prim_func(csr_source(params, fmt.data.dtype.name, kind))

    def fused_primfunc(self, fmt, params, consumer):
        return parse_prim_func(csr_source(params, fmt.data.dtype.name, "spmm", consumer))

    def signature(self, fmt, params, kind, transpose):
        return ("csr", kind, fmt.data.dtype.name, params.kernel_key(),
                bool(getattr(params, "dynamic", False)))

    def arrays(self, fmt, params, kind, transpose, threads):
        out = [fmt.indptr, fmt.indices, fmt.data]
        if params.parallel:
            parts = dynamic_parts(params, threads, self.nnz(fmt))
            out.append(balanced_parts(fmt.indptr, parts, item_cost=1.0))
        return out

    def nnz(self, fmt) -> int:
        return int(fmt.indices.size)
