"""Column tiling of the dense operand: the vectorised-over-N part of every executor.

An SpMM executor handles the ``N`` columns of ``B``/``C`` in *tiers*, each one
a named ``T.sblock`` (Venkat 2016 §6 register-blocked SpMM, vectorised over N):

* ``<name>``       full tiles of ``unroll * lanes`` columns (``unroll`` vector
  registers per accumulator row, all in registers across the non-zero loop);
* ``<name>_vec``   the remaining whole vectors (``lanes`` columns each);
* ``<name>_v8``, ``<name>_v4``...  the last ``N % lanes`` columns in halving
  vector widths, then ``<name>_rem``, a serial remainder of < 4 columns.

Any ``N >= 1`` works with one compiled kernel.  SpMV kernels use a single
scalar tier (``B``/``C`` are 1-D).  :func:`emit_row_blocks` writes the common
"accumulate rows in registers, then write C once" block; formats only supply
the non-zero loop.

>>> [t.suffix for t in column_tiers(16, 2, spmv=False)]
['', '_vec', '_v8', '_v4', '_rem']
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

from schedules.sparse.executors.codegen import Code, parallel_items

__all__ = ["Tier", "column_tiers", "emit_row_blocks", "emit_vector_rows_write", "emit_scale_blocks", "emit_scale_loops",
           "emit_update_loops", "emit_interleaved", "FmaEmitter", "MIN_CHAINS",
           "tier_chains"]


@dataclass(frozen=True)
class Tier:
    """One group of columns processed by one block."""

    suffix: str
    header: str | None      # loop/if around the block (None: no tiling, SpMV)
    binding: str | None     # block axis binding of the tile variable
    base: str               # first column of the tile
    unroll: int
    lanes: int
    mask: str | None        # active lanes: ``jj < mask``
    spmv: bool

    @property
    def width(self) -> int:
        return self.unroll * self.lanes

    def col(self) -> str:
        """Column expression inside :meth:`emit` loops."""
        return f"{self.base} + {self.lane()}"

    def lane(self) -> str:
        if self.spmv:
            return "0"
        if self.unroll == 1:
            return "jj"
        return f"u * {self.lanes} + jj"

    def b(self, row: str) -> str:
        """Read of ``B`` at row ``row`` and the current column."""
        return f"B[{row}]" if self.spmv else f"B[{row}, {self.col()}]"

    def c(self, buf: str, row: str) -> str:
        return f"{buf}[{row}]" if self.spmv else f"{buf}[{row}, {self.col()}]"

    def emit(self, code: Code, stmt: str | Callable[[], str]) -> None:
        """Emit ``stmt`` inside this tier's unroll/vectorise/mask loops."""
        text = stmt() if callable(stmt) else stmt
        if self.spmv:
            code(text)
            return
        loop = f"range({self.lanes})" if self.mask else f"T.vectorized({self.lanes})"
        with code.block(f"for u in T.unroll({self.unroll}):" if self.unroll > 1 else None):
            with code.block(f"for jj in {loop}:"):
                with code.block(f"if jj < {self.mask}:" if self.mask else None):
                    code(text)


def column_tiers(lanes: int, unroll: int, *, spmv: bool, blocks: bool = True,
                 min_lanes: int = 4) -> list[Tier]:
    """The tiers covering ``N`` columns with ``lanes``-wide vectors, ``unroll`` per tile.

    After the full and single-vector tiers, the last ``N % lanes`` columns
    take halving vector widths (``lanes/2``, ``lanes/4``... down to
    ``min_lanes``) and a short serial remainder of ``N % min_lanes`` columns.
    ``blocks=False`` gives plain loops (the loop variable is ``vj`` itself)
    for code inside an enclosing block (the scatter-style executors).
    """
    if spmv:
        return [Tier("", None, None, "0", 1, 1, None, True)]
    w = lanes * unroll
    full, vec = f"N // {w}", f"N % {w} // {lanes}"
    lv_full, lv_vec = ("jo", "jv") if blocks else ("vj", "vj")
    tiers = [Tier("", f"for {lv_full} in range({full}):",
                  f"vj = T.axis.spatial({full}, jo)" if blocks else None,
                  f"vj * {w}", unroll, lanes, None, False)]
    if unroll > 1:
        tiers.append(Tier("_vec", f"for {lv_vec} in range({vec}):",
                          f"vj = T.axis.spatial({vec}, jv)" if blocks else None,
                          f"N // {w} * {w} + vj * {lanes}", 1, lanes, None, False))
    half = lanes // 2
    min_lanes = max(1, min(min_lanes, lanes))
    while half >= min_lanes:
        tiers.append(Tier(f"_v{half}", f"if N % {2 * half} >= {half}:", None,
                          f"N - N % {2 * half}", 1, half, None, False))
        half //= 2
    last = 2 * half if 2 * half <= lanes else lanes
    if last > 1:
        tiers.append(Tier("_rem", f"if N % {last} != 0:", None, f"N - N % {last}",
                          1, last, f"N % {last}", False))
    return tiers


#: ``fma(code, value, b_row, r, chain)`` emits ``acc[chain, r, :] += value * B[b_row, :]``.
FmaEmitter = Callable[..., None]

#: Independent multiply-add chains a row tile should keep in flight (FMA
#: latency x issue width); narrow tiles interleave non-zeros to reach it.
MIN_CHAINS = 4


def tier_chains(tier: Tier, rows: int = 1) -> int:
    """Interleaved accumulator sets for a tier of ``rows`` accumulator rows:
    ``MIN_CHAINS // (unroll * rows)``, at least 1 (SpMV tiers: 1)."""
    return 1 if tier.spmv else max(1, MIN_CHAINS // (tier.unroll * rows))


def emit_interleaved(code: Code, var: str, start: str, stop: str, n: int,
                     body: Callable[[Code, str, str], None]) -> None:
    """Loop ``var`` over ``[start, stop)`` calling ``body(code, index, chain)``;
    with ``n > 1`` consecutive iterations go to ``n`` accumulator chains
    (``for q: for k in T.unroll(n)``) and the remainder to chain 0."""
    if n == 1:
        with code.block(f"for {var} in range({start}, {stop}):"):
            body(code, var, "0")
        return
    length = f"({stop} - {start})"
    with code.block(f"for q in range({length} // {n}):"):
        with code.block(f"for k in T.unroll({n}):"):
            body(code, f"{start} + q * {n} + k", "k")
    with code.block(f"for {var} in range({start} + {length} // {n} * {n}, {stop}):"):
        body(code, var, "0")


def emit_row_blocks(code: Code, *, name: str, tiers: Sequence[Tier], dtype: str,
                    bindings: Sequence[str], rows: int, c_row: Callable[[str], str],
                    row_ok: Callable[[str], str] | None,
                    accumulate: Callable[[Code, Tier, FmaEmitter], None],
                    chains: Callable[[Tier], int] | None = None, consumer=None) -> None:
    """Emit one block per tier: zero the accumulators, run the format's
    non-zero loop (``accumulate``), write ``C_out = alpha*acc + beta*C_in``.

    ``c_row(r)`` is the output row of accumulator row ``r`` (a TIR expression
    string, ``r`` a loop variable or literal), ``row_ok(r)`` guards rows past
    the matrix (BCSR's last block row) or ``None``.  ``chains(tier)`` > 1
    allocates that many accumulator sets (``acc[chain * rows + r]``) that the
    non-zero loop may interleave; they are summed before the write.
    ``consumer`` (a text row consumer: ``tests/sparse_oracles/fused_spmm_source.py``)
    adds its bindings and runs its ``row_tile`` on each finished tile, after
    the write (or instead of it when ``consumer.writes_c`` is false).
    """
    for tier in tiers:
        n_chain = chains(tier) if chains else 1
        with code.block(tier.header):
            with code.block(f'with T.sblock("{name}{tier.suffix}"):'):
                for line in (*bindings, *(consumer.bindings if consumer else ())):
                    code(line)
                if tier.binding:
                    code(tier.binding)
                code(f'acc = T.sblock_alloc_buffer(({rows * n_chain}, {tier.width}), "{dtype}", '
                     'scope="local")')
                _for_rows(code, rows * n_chain,
                          lambda r: tier.emit(code, f"acc[{r}, {tier.lane()}] = T.{dtype}(0)"))

                def fma(code_: Code, value: str, b_row: str, r: str = "0", chain: str = "0",
                        _t: Tier = tier) -> None:
                    a = r if chain == "0" else f"{chain} * {rows} + {r}"
                    _t.emit(code_, f"acc[{a}, {_t.lane()}] = acc[{a}, {_t.lane()}] + {value} * {_t.b(b_row)}")

                accumulate(code, tier, fma)
                if n_chain > 1:
                    with code.block(f"for k in T.unroll({n_chain - 1}):"):
                        _for_rows(code, rows, lambda r: tier.emit(
                            code, f"acc[{r}, {tier.lane()}] = acc[{r}, {tier.lane()}] + "
                                  f"acc[(k + 1) * {rows} + {r}, {tier.lane()}]"))
                if consumer is None or consumer.writes_c:
                    _emit_write(code, tier, dtype, rows, c_row, row_ok)
                if consumer is not None:
                    _emit_consumer(code, tier, rows, c_row, row_ok, consumer)


def _emit_consumer(code: Code, tier: Tier, rows: int, c_row, row_ok, consumer) -> None:
    """Run ``consumer.row_tile`` on each finished row of the tile (stored ``C_out``
    or, when the product is not stored, ``alpha * acc``)."""
    def one(r: str) -> None:
        row = c_row(r)
        if consumer.writes_c:
            def value(lane: str) -> str:
                return f"C_out[{row}, {tier.base} + {lane}]"
        else:
            def value(lane: str) -> str:
                return f"alpha * acc[{r}, {lane}]"
        with code.block(f"if {row_ok(r)}:" if row_ok else None):
            consumer.row_tile(code, tier, row, value)
    _for_rows(code, rows, one)


def _for_rows(code: Code, rows: int, body: Callable[[str], None]) -> None:
    if rows == 1:
        body("0")
        return
    with code.block(f"for r in T.unroll({rows}):"):
        body("r")


def _emit_write(code: Code, tier: Tier, dtype: str, rows: int, c_row, row_ok) -> None:
    def write(with_beta: bool) -> None:
        def one(r: str) -> None:
            row = c_row(r)
            rhs = f"alpha * acc[{r}, {tier.lane()}]"
            if with_beta:
                rhs += f" + beta * {tier.c('C_in', row)}"
            with code.block(f"if {row_ok(r)}:" if row_ok else None):
                tier.emit(code, f"{tier.c('C_out', row)} = {rhs}")
        _for_rows(code, rows, one)

    with code.block(f"if beta == T.{dtype}(0):"):
        write(False)
    with code.block("else:"):
        write(True)


def emit_scale_blocks(code: Code, *, name: str, tiers: Sequence[Tier], dtype: str,
                      bindings: Sequence[str], row: str) -> None:
    """Emit ``C_out[row, :] = beta * C_in[row, :]`` (or 0 when beta is 0), one block per tier.

    The first pass of the scatter-style executors (COO, CSB, HYB's COO part).
    """
    for tier in tiers:
        with code.block(tier.header):
            with code.block(f'with T.sblock("{name}{tier.suffix}"):'):
                for line in bindings:
                    code(line)
                if tier.binding:
                    code(tier.binding)
                with code.block(f"if beta == T.{dtype}(0):"):
                    tier.emit(code, f"{tier.c('C_out', row)} = T.{dtype}(0)")
                with code.block("else:"):
                    tier.emit(code, f"{tier.c('C_out', row)} = beta * {tier.c('C_in', row)}")


def emit_scale_loops(code: Code, *, tiers: Sequence[Tier], dtype: str, row: str) -> None:
    """Block-less ``C_out[row, :] = beta * C_in[row, :]`` (``tiers`` from ``blocks=False``)."""
    with code.block(f"if beta == T.{dtype}(0):"):
        for tier in tiers:
            with code.block(tier.header):
                tier.emit(code, f"{tier.c('C_out', row)} = T.{dtype}(0)")
    with code.block("else:"):
        for tier in tiers:
            with code.block(tier.header):
                tier.emit(code, f"{tier.c('C_out', row)} = beta * {tier.c('C_in', row)}")


def emit_update_loops(code: Code, *, tiers: Sequence[Tier], out_row: str, scale: str,
                      b_row: str) -> None:
    """Block-less scatter update ``C_out[out_row, :] += scale * B[b_row, :]``."""
    for tier in tiers:
        with code.block(tier.header):
            dst = tier.c("C_out", out_row)
            tier.emit(code, f"{dst} = {dst} + {scale} * {tier.b(b_row)}")


def emit_vector_rows_write(code, dtype: str, row: str, loop: str, guard: str | None) -> None:
    """Write ``acc[jj]`` (one value per row, SpMV vectorised over rows) to ``C_out[row]``
    as ``alpha * acc (+ beta * C_in)``; ``guard`` masks rows past ``M`` in a tail."""
    with code.block(f"if beta == T.{dtype}(0):"):
        with code.block(f"for jj in {loop}:"):
            with code.block(f"if {guard}:" if guard else None):
                code(f"C_out[{row}] = alpha * acc[jj]")
    with code.block("else:"):
        with code.block(f"for jj in {loop}:"):
            with code.block(f"if {guard}:" if guard else None):
                code(f"C_out[{row}] = alpha * acc[jj] + beta * C_in[{row}]")


@contextmanager
def vector_row_tile(code: Code, lanes: int, dtype: str, parallel: bool) -> Iterator[str]:
    """Open one SpMV tile of ``lanes`` consecutive rows (block ``row_tile``, iter ``vt``) with a
    zeroed ``acc[jj]``; yields the row expression ``vt * lanes + jj``."""
    tiles = f"(M + {lanes - 1}) // {lanes}"
    with parallel_items(code, "it", tiles, parallel):
        with code.block('with T.sblock("row_tile"):'):
            code(f"vt = T.axis.spatial({tiles}, it)")
            code(f'acc = T.sblock_alloc_buffer(({lanes},), "{dtype}", scope="local")')
            with code.block(f"for jj in T.vectorized({lanes}):"):
                code(f"acc[jj] = T.{dtype}(0)")
            yield f"vt * {lanes} + jj"
