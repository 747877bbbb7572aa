"""BCSR executors: register-blocked R x C micro-kernel (Venkat 2016 §5.3 BCSR executor).

One spatial block per (block row, column tile).  For each stored R x C block
the micro-kernel is fully unrolled over ``c`` and ``r`` (``T.unroll``) and
vectorised over the N tile: ``R * unroll`` accumulator vectors live in
registers across the block row, each ``B`` row segment is loaded once per
block column and reused for the R rows, and ``C`` is written once.
SpMV keeps one accumulator per block slot instead (blocks of at most
:data:`SPMV_SLOT_ACCUMULATORS` slots) and loads the block's ``C`` entries of
``x`` once.  Block rows are split into block-count-balanced parts for
``T.parallel``.  Reads of ``B`` rows past ``K`` (when ``K % C``) are clamped to row ``K - 1``;
those slots hold zeros, so ``B`` needs no padding copy.

>>> f = bcsr_spmm_primfunc(BCSRParams(lanes=16, unroll=1), "float32", 2, 3)
>>> [int(x) for x in f.params[2].shape[1:]]
[2, 3]
"""
from __future__ import annotations

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
from tvm_ext.errors import InputError

__all__ = ["BCSRParams", "BCSRKernels", "bcsr_spmm_primfunc", "bcsr_spmv_primfunc", "bcsr_source",
           "MAX_BLOCK", "SPMV_SLOT_ACCUMULATORS"]

#: Largest R or C the unrolled micro-kernel is generated for.
MAX_BLOCK = 16
#: Blocks of at most this many slots get the SpMV kernel with one accumulator per slot
#: (larger ones accumulate per row: the slots would not fit in the vector registers).
SPMV_SLOT_ACCUMULATORS = 32


@dataclass(frozen=True)
class BCSRParams(ExecParams):
    """BCSR knobs (see :class:`ExecParams`).  The block shape R x C belongs to
    the format (its inspector's knob); ``unroll`` defaults so that the
    ``R * unroll`` accumulators fit in the vector registers.  ``dynamic``: as
    :class:`~schedules.sparse.executors.csr.CSRParams`."""

    dynamic: bool | None = False


def bcsr_source(params: ExecParams, dtype: str, R: int, C: int, kind: str = "spmm",
                consumer: RowConsumer | None = None) -> str:
    """TVMScript text of the BCSR executor for R x C blocks (``consumer``: see
    :func:`~schedules.sparse.executors.csr.csr_source`)."""
    dtype = check_dtype(dtype)
    _check_block(R, C)
    spmv = kind == "spmv"
    check_consumer(consumer, kind, params)
    bufs = [Buffer("a_indptr", "indptr", ("MBP",), "int32"),
            Buffer("a_bcol", "bcol", ("NB",), "int32"),
            Buffer("a_data", "data", ("NB", str(R), str(C)), dtype)]
    if params.parallel:
        bufs.append(Buffer("a_part", "part", ("NP",), "int32"))
    bufs += consumer_buffers(consumer, kind, dtype)
    code = Code()

    def blocks(code_: Code, tier, fma) -> None:
        def block(c_: Code, b: str, k: str) -> None:
            with c_.block(f"for c in T.unroll({C}):"):
                with c_.block(f"for r in T.unroll({R}):"):
                    fma(c_, f"data[{b}, r, c]", f"T.min(bcol[{b}] * {C} + c, K - 1)", "r", k)

        emit_interleaved(code_, "b", "indptr[vb]", "indptr[vb + 1]", tier_chains(tier, R), block)

    if spmv and R * C <= SPMV_SLOT_ACCUMULATORS:
        _emit_spmv_slots(code, params, dtype, R, C)
        return prim_func_source(f"bcsr{R}x{C}_spmv", bufs, [("alpha", dtype), ("beta", dtype)],
                                ["M", "K", "MBP", "NB"] + (["NP"] if params.parallel else []), code)

    with parallel_items(code, "ib", "MBP - 1", params.parallel,
                        prologue=consumer.part_prologue if consumer else None,
                        epilogue=consumer.part_epilogue if consumer else None,
                        dynamic=bool(getattr(params, "dynamic", False)) and consumer is None):
        if consumer is not None and consumer.row_prologue is not None:
            with code.block(f"for r0 in range({R}):" if R > 1 else None):
                row = f"ib * {R} + r0" if R > 1 else "ib"
                with code.block(f"if {row} < M:" if R > 1 else None):
                    consumer.row_prologue(code, row)
        emit_row_blocks(code, name="block_row",
                        tiers=column_tiers(params.lanes, params.unroll, spmv=spmv), dtype=dtype,
                        bindings=["vb = T.axis.spatial(MBP - 1, ib)"], rows=R,
                        c_row=lambda r: f"vb * {R} + {r}",
                        row_ok=(lambda r: f"vb * {R} + {r} < M") if R > 1 else None,
                        accumulate=blocks, chains=lambda t: tier_chains(t, R), consumer=consumer)
    if consumer is not None and consumer.epilogue is not None:
        consumer.epilogue(code)
    sizes = ["M", "K", "MBP", "NB"] + (["N"] if not spmv else []) + (["NP"] if params.parallel else [])
    sizes += [v for v in (consumer.size_vars if consumer else ()) if v not in sizes]
    name = f"bcsr{R}x{C}_{kind}" + ("_fused" if consumer else "")
    return prim_func_source(name, bufs, [("alpha", dtype), ("beta", dtype)], sizes, code)


def _emit_spmv_slots(code: Code, params: ExecParams, dtype: str, R: int, C: int) -> None:
    """SpMV with one accumulator per block slot (OSKI's register-blocked R x C kernel).

    Per block: the ``C`` entries of ``x`` it needs are loaded once (``xs``), then
    ``R * C`` independent multiply-adds run, one per slot, each into its own
    accumulator, so no add waits for another; the row sums fold the ``C``
    accumulators of each row after the block row (accumulating a row's slots
    in one register would chain ``C`` dependent adds per block).
    """
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


def _check_block(R: int, C: int) -> None:
    for name, v in (("R", R), ("C", C)):
        if int(v) != v or not 1 <= v <= MAX_BLOCK:
            raise InputError(f"bcsr: block {name} must be an integer in 1..{MAX_BLOCK}, got {v!r}")


def bcsr_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32", R: int = 2,
                       C: int = 2, *, n_cols: int | None = None, target=None):
    """BCSR SpMM PrimFunc for R x C blocks."""
    p = (params or BCSRParams()).resolve(check_dtype(dtype), n_cols, target, acc_rows=R)
    return parse_prim_func(bcsr_source(p, dtype, R, C, "spmm"))


def bcsr_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32", R: int = 2,
                       C: int = 2, *, target=None):
    """BCSR SpMV PrimFunc for R x C blocks."""
    p = (params or BCSRParams()).resolve(check_dtype(dtype), 1, target, acc_rows=R)
    return parse_prim_func(bcsr_source(p, dtype, R, C, "spmv"))


class BCSRKernels(FormatKernels):
    format_name = "bcsr"
    params_cls = BCSRParams

    def check(self, fmt) -> None:
        _check_block(fmt.R, fmt.C)
        m, k = fmt.shape
        mb, kb = -(-m // fmt.R), -(-k // fmt.C)
        require_value_dtype(fmt.data, "bcsr.data")
        require_array(fmt.indptr, "bcsr.indptr", "int32", (mb + 1,))
        nb = fmt.bcol.size
        require_array(fmt.bcol, "bcsr.bcol", "int32", (nb,))
        require_array(fmt.data, "bcsr.data", str(fmt.data.dtype), (nb, fmt.R, fmt.C))
        require_pointer(fmt.indptr, nb, "bcsr.indptr")
        require_range(fmt.bcol, 0, max(kb, 1), "bcsr.bcol")

    def resolve(self, fmt, params, dtype, kind, n_cols, target):
        return resolve_dynamic(params.resolve(dtype, n_cols, target, acc_rows=fmt.R, work=self.nnz(fmt)))

    def primfunc(self, fmt, params, kind, transpose):
        return parse_prim_func(bcsr_source(params, fmt.data.dtype.name, fmt.R, fmt.C, kind))

    def fused_primfunc(self, fmt, params, consumer):
        return parse_prim_func(bcsr_source(params, fmt.data.dtype.name, fmt.R, fmt.C, "spmm", consumer))

    def signature(self, fmt, params, kind, transpose):
        return ("bcsr", kind, fmt.data.dtype.name, fmt.R, fmt.C, params.kernel_key(),
                bool(getattr(params, "dynamic", False)))

    def arrays(self, fmt, params, kind, transpose, threads):
        out = [fmt.indptr, fmt.bcol, fmt.data]
        if params.parallel:
            parts = dynamic_parts(params, threads, self.nnz(fmt))
            out.append(balanced_parts(fmt.indptr, parts, item_cost=1.0))
        return out

    def nnz(self, fmt) -> int:
        return int(fmt.bcol.size) * fmt.R * fmt.C
