"""Test oracle: the hand-written SELL-C-sigma executor template the library used before SELL's
executor was generated from its recipe (``schedules.sparse.recipes.library.sell_recipe``).  Kept
outside the library to check and time the generated executor against (tests,
``bench.sparse_recipes``).

Slices of ``C`` rows (sorted by length inside sigma-windows, ``perm[new] = old``)
are stored column-major inside the slice, with per-slice widths.

* SpMM: one spatial block per (slice, slice row, column tile); the slice
  row's ``slice_width[s]`` entries accumulate in registers and the result is
  written to ``C[perm[...]]`` (padding rows, ``perm == M``, are skipped).
* SpMV: vectorised over the ``C`` rows of a slice (contiguous ``data``/``col``
  vectors, gathered ``x``), then scattered through ``perm``.

Slices are split into entry-balanced parts for ``T.parallel``.  The slice
height ``C`` is a compile-time constant (part of the cache signature).

>>> f = sell_spmv_primfunc(SELLParams(), "float32", 8)
>>> f.params[0].shape[0].name
'NPERM'
"""
from __future__ import annotations

from schedules.sparse.executors.codegen import (Buffer, Code, check_dtype, dense_buffers,
                                                parallel_items, parse_prim_func, prim_func_source)
from schedules.sparse.executors.partition import balanced_parts
from schedules.sparse.executors.sell import SELLKernels, SELLParams, check_height
from schedules.sparse.executors.spec import ExecParams, FormatKernels
from schedules.sparse.executors.tiles import (column_tiers, emit_interleaved, emit_row_blocks,
                                              tier_chains)

__all__ = ["TemplateSELLKernels", "sell_spmm_primfunc", "sell_spmv_primfunc", "sell_source"]


def _emit_spmm(code: Code, params: ExecParams, dtype: str, SC: int) -> None:
    perm = f"perm[vs * {SC} + vr]"

    def entries(code_: Code, tier, fma) -> None:
        def entry(c_: Code, j: str, k: str) -> None:
            e = f"slice_ptr[vs] + ({j}) * {SC} + vr"
            fma(c_, f"data[{e}]", f"col[{e}]", "0", k)

        emit_interleaved(code_, "j", "0", "slice_width[vs]", tier_chains(tier), entry)

    with parallel_items(code, "s", "NS", params.parallel):
        with code.block(f"for r in range({SC}):"):
            emit_row_blocks(code, name="row", tiers=column_tiers(params.lanes, params.unroll, spmv=False),
                            dtype=dtype, bindings=["vs = T.axis.spatial(NS, s)",
                                                   f"vr = T.axis.spatial({SC}, r)"],
                            rows=1, c_row=lambda _: perm, row_ok=lambda _: f"{perm} < M",
                            accumulate=entries, chains=tier_chains)


def _emit_spmv(code: Code, params: ExecParams, dtype: str, SC: int) -> None:
    e = f"slice_ptr[vs] + j * {SC} + r"
    perm = f"perm[vs * {SC} + r]"
    with parallel_items(code, "s", "NS", params.parallel):
        with code.block('with T.sblock("slice"):'):
            code("vs = T.axis.spatial(NS, s)")
            code(f'acc = T.sblock_alloc_buffer(({SC},), "{dtype}", scope="local")')
            with code.block(f"for r in T.vectorized({SC}):"):
                code(f"acc[r] = T.{dtype}(0)")
            with code.block("for j in range(slice_width[vs]):"):
                with code.block(f"for r in T.vectorized({SC}):"):
                    code(f"acc[r] = acc[r] + data[{e}] * B[col[{e}]]")
            with code.block(f"if beta == T.{dtype}(0):"):
                with code.block(f"for r in range({SC}):"):
                    with code.block(f"if {perm} < M:"):
                        code(f"C_out[{perm}] = alpha * acc[r]")
            with code.block("else:"):
                with code.block(f"for r in range({SC}):"):
                    with code.block(f"if {perm} < M:"):
                        code(f"C_out[{perm}] = alpha * acc[r] + beta * C_in[{perm}]")


def sell_source(params: ExecParams, dtype: str, slice_height: int, kind: str = "spmm") -> str:
    """TVMScript text of the SELL executor for slices of ``slice_height`` rows."""
    dtype = check_dtype(dtype)
    check_height(slice_height)
    spmv = kind == "spmv"
    bufs = [Buffer("a_perm", "perm", ("NPERM",), "int32"),
            Buffer("a_slice_ptr", "slice_ptr", ("NS + 1",), "int32"),
            Buffer("a_slice_width", "slice_width", ("NS",), "int32"),
            Buffer("a_col", "col", ("NE",), "int32"),
            Buffer("a_data", "data", ("NE",), dtype)]
    if params.parallel:
        bufs.append(Buffer("a_part", "part", ("NP",), "int32"))
    bufs += dense_buffers(kind, dtype)
    code = Code()
    (_emit_spmv if spmv else _emit_spmm)(code, params, dtype, int(slice_height))
    sizes = ["M", "K", "NPERM", "NS", "NE"] + (["N"] if not spmv else [])
    sizes += ["NP"] if params.parallel else []
    return prim_func_source(f"sell{slice_height}_{kind}", bufs, [("alpha", dtype), ("beta", dtype)],
                            sizes, code)


def sell_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32",
                       slice_height: int = 8, *, n_cols: int | None = None, target=None):
    """SELL SpMM PrimFunc for slices of ``slice_height`` rows."""
    p = (params or SELLParams()).resolve(check_dtype(dtype), n_cols, target)
    return parse_prim_func(sell_source(p, dtype, slice_height, "spmm"))


def sell_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32",
                       slice_height: int = 8, *, target=None):
    """SELL SpMV PrimFunc (vectorised over the slice's rows)."""
    p = (params or SELLParams()).resolve(check_dtype(dtype), 1, target)
    return parse_prim_func(sell_source(p, dtype, slice_height, "spmv"))


class TemplateSELLKernels(FormatKernels):
    format_name = "sell"
    params_cls = SELLParams

    check = SELLKernels.check  # the library's own validation of the container

    def primfunc(self, fmt, params, kind, transpose):
        return parse_prim_func(sell_source(params, fmt.data.dtype.name, fmt.C, kind))

    def signature(self, fmt, params, kind, transpose):
        return ("sell", kind, fmt.data.dtype.name, int(fmt.C), params.kernel_key())

    def arrays(self, fmt, params, kind, transpose, threads):
        out = [fmt.perm, fmt.slice_ptr, fmt.slice_width, fmt.col, fmt.data]
        if params.parallel:
            out.append(balanced_parts(fmt.slice_ptr, params.n_parts(threads), item_cost=float(fmt.C)))
        return out

    def nnz(self, fmt) -> int:
        return int(fmt.data.size)
