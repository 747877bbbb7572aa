"""Test oracle: the hand-written DIA executor template the library used before DIA's executor
was generated from its recipe (``schedules.sparse.recipes.library.dia_recipe``).  Kept outside
the library to check and time the generated executor against (tests, ``bench.sparse_recipes``).

* SpMM: one spatial block per (row, column tile); for each stored diagonal
  ``d`` the row reads ``B[i + offsets[d], tile]`` (skipped outside ``[0, K)``)
  and accumulates in registers.
* SpMV: vectorised over ``lanes`` consecutive rows: for a diagonal the
  ``data`` and ``x`` reads are both contiguous, which is why DIA beats ELL on
  stencils (the dissertation's "up to 2x").  Row tiles that cross the matrix
  edge for a diagonal take a scalar, guarded path.

>>> f = dia_spmv_primfunc(DIAParams(lanes=8), "float64")
>>> f.params[1].shape[0].name
'ND'
"""
from __future__ import annotations

from schedules.sparse.executors.codegen import (Buffer, Code, check_dtype, dense_buffers,
                                                parallel_items, parse_prim_func, prim_func_source)
from schedules.sparse.executors.partition import uniform_parts
from schedules.sparse.executors.spec import ExecParams, FormatKernels
from schedules.sparse.executors.tiles import (column_tiers, emit_interleaved, emit_row_blocks,
                                              emit_vector_rows_write, tier_chains, vector_row_tile)

__all__ = ["TemplateDIAKernels", "dia_spmm_primfunc", "dia_spmv_primfunc", "dia_source"]


from schedules.sparse.executors.dia import DIAKernels, DIAParams  # noqa: E402  (the library's knobs and checks)


def _emit_spmm(code: Code, params: ExecParams, dtype: str) -> None:
    def diagonals(code_: Code, tier, fma) -> None:
        def diagonal(c_: Code, d: str, k: str) -> None:
            with c_.block(f"if vi + offsets[{d}] >= 0 and vi + offsets[{d}] < K:"):
                fma(c_, f"data[{d}, vi]", f"vi + offsets[{d}]", "0", k)

        emit_interleaved(code_, "d", "0", "ND", tier_chains(tier), diagonal)

    with parallel_items(code, "i", "M", params.parallel):
        emit_row_blocks(code, name="row", tiers=column_tiers(params.lanes, params.unroll, spmv=False),
                        dtype=dtype, bindings=["vi = T.axis.spatial(M, i)"], rows=1,
                        c_row=lambda r: "vi", row_ok=None, accumulate=diagonals, chains=tier_chains)


def _emit_spmv(code: Code, params: ExecParams, dtype: str) -> None:
    L = params.lanes
    with vector_row_tile(code, L, dtype, params.parallel) as row:
        with code.block("for d in range(ND):"):
            inside = (f"vt * {L} + {L} <= M and vt * {L} + offsets[d] >= 0 and "
                      f"vt * {L} + {L} + offsets[d] <= K")
            with code.block(f"if {inside}:"):
                with code.block(f"for jj in T.vectorized({L}):"):
                    code(f"acc[jj] = acc[jj] + data[d, {row}] * B[{row} + offsets[d]]")
            with code.block("else:"):
                with code.block(f"for jj in range({L}):"):
                    guard = f"{row} < M and {row} + offsets[d] >= 0 and {row} + offsets[d] < K"
                    with code.block(f"if {guard}:"):
                        code(f"acc[jj] = acc[jj] + data[d, {row}] * B[{row} + offsets[d]]")
        with code.block(f"if vt * {L} + {L} <= M:"):
            emit_vector_rows_write(code, dtype, row, f"T.vectorized({L})", None)
        with code.block("else:"):
            emit_vector_rows_write(code, dtype, row, f"range({L})", f"{row} < M")


def dia_source(params: ExecParams, dtype: str, kind: str = "spmm") -> str:
    """TVMScript text of the DIA executor."""
    dtype = check_dtype(dtype)
    spmv = kind == "spmv"
    bufs = [Buffer("a_offsets", "offsets", ("ND",), "int32"),
            Buffer("a_data", "data", ("ND", "M"), dtype)]
    if params.parallel:
        bufs.append(Buffer("a_part", "part", ("NP",), "int32"))
    bufs += dense_buffers(kind, dtype)
    code = Code()
    (_emit_spmv if spmv else _emit_spmm)(code, params, dtype)
    sizes = ["M", "K", "ND"] + (["N"] if not spmv else []) + (["NP"] if params.parallel else [])
    return prim_func_source(f"dia_{kind}", bufs, [("alpha", dtype), ("beta", dtype)], sizes, code)


def dia_spmm_primfunc(params: ExecParams | None = None, dtype: str = "float32", *,
                      n_cols: int | None = None, target=None):
    """DIA SpMM PrimFunc."""
    p = (params or DIAParams()).resolve(check_dtype(dtype), n_cols, target)
    return parse_prim_func(dia_source(p, dtype, "spmm"))


def dia_spmv_primfunc(params: ExecParams | None = None, dtype: str = "float32", *, target=None):
    """DIA SpMV PrimFunc (vectorised over rows)."""
    p = (params or DIAParams()).resolve(check_dtype(dtype), 1, target)
    return parse_prim_func(dia_source(p, dtype, "spmv"))


class TemplateDIAKernels(FormatKernels):
    """The template's executor contract (``Executor(fmt, TemplateDIAKernels(), ...)``)."""

    format_name = "dia"
    params_cls = DIAParams

    check = DIAKernels.check  # the library's own validation of the container

    def primfunc(self, fmt, params, kind, transpose):
        return parse_prim_func(dia_source(params, fmt.data.dtype.name, kind))

    def signature(self, fmt, params, kind, transpose):
        return ("dia", kind, fmt.data.dtype.name, params.kernel_key())

    def arrays(self, fmt, params, kind, transpose, threads):
        out = [fmt.offsets, fmt.data]
        if params.parallel:
            items = -(-fmt.shape[0] // params.lanes) if kind == "spmv" else fmt.shape[0]
            out.append(uniform_parts(items, params.n_parts(threads)))
        return out

    def nnz(self, fmt) -> int:
        return int(fmt.data.size)
