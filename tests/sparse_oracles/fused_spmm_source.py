"""Test oracle: TVMScript text of the row-tile SpMM (CSR, BCSR) with a fused text :class:`RowConsumer`.

The fusion package generated its fused SpMM + row consumer kernels as this
text before they were built in TIR from the recipes' row-tile nest
(:func:`schedules.sparse.recipes.consumer.fused_row_tile_primfunc`, consumer
:mod:`schedules.fusion.spmm_consumer`).  Kept outside the library to check
and time that kernel against (tests/test_fused_spmm_nest.py,
``bench.fused_spmm_nest``), and as the SpMM of the old CSR/BCSR templates
(:mod:`tests.sparse_oracles.csr_template`, :mod:`tests.sparse_oracles.bcsr_template`).
One spatial block per (row or R-row block row, column tile), the row's
non-zeros interleaved over accumulator chains, ``C`` written once (unless the
consumer does not store it), then the consumer's ``row_tile`` on the finished
tile.  It reads the same format arrays and part boundaries
(``kernels_for(fmt).arrays(...)``: ``indptr, indices|bcol, data, part``).

>>> from schedules.sparse.executors.spec import ExecParams
>>> src = csr_spmm_source(ExecParams(lanes=8, unroll=1, parallel=True), "float64")
>>> src.splitlines()[1]
'def csr_spmm(a_indptr: T.handle, a_indices: T.handle, a_data: T.handle, a_part: T.handle, b: T.handle, c_in: T.handle, c_out: T.handle, alpha: T.float64, beta: T.float64):'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from schedules.sparse.executors.bcsr import check_block
from schedules.sparse.executors.codegen import (Buffer, Code, check_dtype, dense_buffers, parallel_items,
                                                parse_prim_func, prim_func_source)
from schedules.sparse.executors.spec import ExecParams
from schedules.sparse.executors.tiles import (column_tiers, emit_interleaved, emit_row_blocks,
                                              tier_chains)
from tvm_ext.errors import ConfigError

__all__ = ["RowConsumer", "csr_spmm_source", "bcsr_spmm_source", "fused_spmm_primfunc"]


@dataclass(frozen=True)
class RowConsumer:
    """Work fused into a row-tile SpMM executor (an epilogue hook, GOGETA's pipelining).

    A row-tile executor (CSR, BCSR) finishes each output row tile in
    registers; a consumer uses it there instead of re-reading ``C`` later:

    * ``buffers`` / ``size_vars``: extra kernel parameters, after ``C_out``
      (before the scalars) and the symbolic sizes they bind;
    * ``bindings``: extra block-axis lines; the part index ``t`` of the
      parallel loop is bound as ``vt`` (consumers force a parallel kernel);
    * ``part_prologue(code)`` / ``part_epilogue(code)``: inside the parallel
      loop, before / after the part's rows (``t`` in scope), e.g. declare and
      zero a per-part accumulator, then store it to a partial-sum workspace;
    * ``row_prologue(code, row)``: before the row tiles of item ``row``;
    * ``row_tile(code, tier, row, value)``: inside each row-tile block, after
      the tile is final; ``value(lane)`` is the TIR expression of the finished
      output at tile lane ``lane`` (``tier.lane()`` inside ``tier.emit``);
    * ``epilogue(code)``: after the parallel loop (e.g. reduce the partials);
    * ``writes_c``: ``False`` drops ``C_in``/``C_out`` (the product is consumed,
      never stored) and needs ``alpha * acc`` only (``beta`` is ignored);
    * ``key``: what the consumer adds to the kernel-cache signature.
    """

    key: tuple
    row_tile: Callable
    buffers: tuple = ()
    size_vars: tuple = ()
    part_prologue: Callable | None = None
    part_epilogue: Callable | None = None
    row_prologue: Callable | None = None
    epilogue: Callable | None = None
    writes_c: bool = True

    @property
    def bindings(self) -> tuple[str, ...]:
        return ("vt = T.axis.spatial(NP - 1, t)",)




def check_consumer(consumer: RowConsumer | None, kind: str, params) -> None:
    """A consumer needs an SpMM kernel with the parallel part loop (``vt`` = part)."""
    if consumer is None:
        return
    if kind != "spmm":
        raise ConfigError(f"a fused row consumer needs kind='spmm', got {kind!r}")
    if not params.parallel:
        raise ConfigError("a fused row consumer needs a parallel kernel (its partial sums are per part)")


def consumer_buffers(consumer: RowConsumer | None, kind: str, dtype: str) -> list[Buffer]:
    """The dense buffers of an executor with ``consumer``: ``B``, ``C_in``, ``C_out``
    (only ``B`` when the consumer does not store the product), then the consumer's."""
    dense = dense_buffers(kind, dtype)
    if consumer is None:
        return dense
    return (dense if consumer.writes_c else dense[:1]) + list(consumer.buffers)



def _dynamic(params: ExecParams, consumer: RowConsumer | None) -> bool:
    """Whether the parts are claimed at run time: asked for (``params.dynamic``), and no
    consumer (whose per-part sums need a part per iteration of the parallel loop)."""
    return bool(getattr(params, "dynamic", False)) and consumer is None


def csr_spmm_source(params: ExecParams, dtype: str, consumer: RowConsumer | None = None) -> str:
    """TVMScript text of the CSR row-tile SpMM (``params`` resolved), ``consumer`` fused into
    its row tiles (a parallel kernel only: the consumer's partial sums are per part).

    Arguments: ``indptr, indices, data, [part], B, [C_in, C_out], *consumer buffers, alpha, beta``.
    """
    dtype = check_dtype(dtype)
    check_consumer(consumer, "spmm", params)
    bufs = [Buffer("a_indptr", "indptr", ("M + 1",), "int32"),
            Buffer("a_indices", "indices", ("NNZ",), "int32"),
            Buffer("a_data", "data", ("NNZ",), dtype)]
    if params.parallel:
        bufs.append(Buffer("a_part", "part", ("NP",), "int32"))
    bufs += consumer_buffers(consumer, "spmm", dtype)
    code = Code()

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
    sizes = ["M", "K", "NNZ", "N"] + (["NP"] if params.parallel else [])
    sizes += [v for v in (consumer.size_vars if consumer else ()) if v not in sizes]
    name = "csr_spmm" + ("_fused" if consumer else "")
    return prim_func_source(name, bufs, [("alpha", dtype), ("beta", dtype)], sizes, code)


def bcsr_spmm_source(params: ExecParams, dtype: str, R: int, C: int,
                     consumer: RowConsumer | None = None) -> str:
    """TVMScript text of the BCSR R x C register-blocked SpMM, ``consumer`` fused into its block
    rows' tiles (see :func:`csr_spmm_source`).  Per stored block the micro-kernel is unrolled
    over ``c`` and ``r`` and vectorised over the N tile; reads of ``B`` rows past ``K`` (when
    ``K % C``) are clamped to row ``K - 1`` (those slots hold zeros).

    Arguments: ``indptr, bcol, data (NB x R x C), [part], B, [C_in, C_out], *consumer buffers,
    alpha, beta``.
    """
    dtype = check_dtype(dtype)
    check_block(R, C)
    check_consumer(consumer, "spmm", params)
    bufs = [Buffer("a_indptr", "indptr", ("MBP",), "int32"),
            Buffer("a_bcol", "bcol", ("NB",), "int32"),
            Buffer("a_data", "data", ("NB", str(R), str(C)), dtype)]
    if params.parallel:
        bufs.append(Buffer("a_part", "part", ("NP",), "int32"))
    bufs += consumer_buffers(consumer, "spmm", dtype)
    code = Code()

    def blocks(code_: Code, tier, fma) -> None:
        def block(c_: Code, b: str, k: str) -> None:
            with c_.block(f"for c in T.unroll({C}):"):
                with c_.block(f"for r in T.unroll({R}):"):
                    fma(c_, f"data[{b}, r, c]", f"T.min(bcol[{b}] * {C} + c, K - 1)", "r", k)

        emit_interleaved(code_, "b", "indptr[vb]", "indptr[vb + 1]", tier_chains(tier, R), block)

    with parallel_items(code, "ib", "MBP - 1", params.parallel,
                        prologue=consumer.part_prologue if consumer else None,
                        epilogue=consumer.part_epilogue if consumer else None,
                        dynamic=_dynamic(params, consumer)):
        if consumer is not None and consumer.row_prologue is not None:
            with code.block(f"for r0 in range({R}):" if R > 1 else None):
                row = f"ib * {R} + r0" if R > 1 else "ib"
                with code.block(f"if {row} < M:" if R > 1 else None):
                    consumer.row_prologue(code, row)
        emit_row_blocks(code, name="block_row",
                        tiers=column_tiers(params.lanes, params.unroll, spmv=False), dtype=dtype,
                        bindings=["vb = T.axis.spatial(MBP - 1, ib)"], rows=R,
                        c_row=lambda r: f"vb * {R} + {r}",
                        row_ok=(lambda r: f"vb * {R} + {r} < M") if R > 1 else None,
                        accumulate=blocks, chains=lambda t: tier_chains(t, R), consumer=consumer)
    if consumer is not None and consumer.epilogue is not None:
        consumer.epilogue(code)
    sizes = ["M", "K", "MBP", "NB", "N"] + (["NP"] if params.parallel else [])
    sizes += [v for v in (consumer.size_vars if consumer else ()) if v not in sizes]
    name = f"bcsr{R}x{C}_spmm" + ("_fused" if consumer else "")
    return prim_func_source(name, bufs, [("alpha", dtype), ("beta", dtype)], sizes, code)


def fused_spmm_primfunc(fmt, params: ExecParams, consumer: RowConsumer | None):
    """The SpMM PrimFunc of a CSR or BCSR container ``fmt`` with ``consumer`` fused into its row
    tiles (``params`` resolved, parallel); :class:`ConfigError` for any other format."""
    dtype = fmt.data.dtype.name
    if fmt.name == "csr":
        return parse_prim_func(csr_spmm_source(params, dtype, consumer))
    if fmt.name == "bcsr":
        return parse_prim_func(bcsr_spmm_source(params, dtype, fmt.R, fmt.C, consumer))
    raise ConfigError(f"format {fmt.name!r} has no row-tile SpMM executor to fuse a consumer into "
                      "(use csr or bcsr)")
