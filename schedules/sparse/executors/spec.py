"""What every format's executor module provides: tuning params and a kernel spec.

* :class:`ExecParams` holds the knobs the autotuner varies (vector lanes over
  N, vectors per row tile, parallel grain).  Each format module subclasses it
  (``CSRParams``, ``BCSRParams``...), adding its own knobs.  ``None`` lanes or
  unroll mean "choose for this target and N" (:meth:`ExecParams.resolve`).
* :class:`FormatKernels` is the contract between a format module and
  :class:`~schedules.sparse.executors.executor.Executor`: validate a format's
  arrays, generate the PrimFunc, name its cache signature, and list the
  runtime arrays/scalars in argument order.

Every executor PrimFunc takes ``(*format arrays, *partition arrays, B, C_in,
C_out, *int32 scalars, alpha, beta)`` and computes
``C_out = alpha * op(A) @ B + beta * C_in`` (``C_in`` is not read when
``beta == 0``; it may be the same tensor as ``C_out``).

>>> p = ExecParams().resolve("float32", n_cols=32, target=None)
>>> p.lanes in (4, 8, 16), p.unroll >= 1
(True, True)
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tvm_ext.errors import ConfigError

__all__ = ["ExecParams", "FormatKernels", "KINDS", "SERIAL_WORK", "SPMV_PARTIAL_SUMS"]

#: Executor kinds: sparse times dense matrix, sparse times vector.
KINDS = ("spmm", "spmv")

#: Below this many multiply-adds (stored entries x N) the default is a serial
#: kernel: a parallel launch costs a few microseconds of thread wake-up.
SERIAL_WORK = 1 << 16

#: Default interleaved partial sums of the SpMV kernels (a row's non-zeros round-robin).
SPMV_PARTIAL_SUMS = 4


@dataclass(frozen=True)
class ExecParams:
    """Knobs shared by every executor.

    * ``lanes``: vector lanes over N (SpMM) or over rows/non-zeros (SpMV);
      ``None`` = the target's native width (16 fp32 lanes on AVX-512).
    * ``unroll``: vectors per row tile; the tile is ``lanes * unroll`` columns
      held in registers across a row's non-zeros.  ``None`` = from ``n_cols``.
    * ``parallel``: emit a ``T.parallel`` loop over work-balanced parts;
      ``False`` gives a serial row loop a user can split/parallelise;
      ``None`` = parallel unless the matrix is so small (stored entries x N
      below :data:`SERIAL_WORK`) that waking the thread pool costs more.
    * ``parts_per_thread``: parallel grain (parts per thread).
    * ``row_runs``: scatter executors (CSB) sum each row's run of a block's entries in
      registers (``True``) or add every entry straight into ``C`` (``False``); ``None`` =
      runs, unless the matrix's run pattern says direct updates are faster
      (:func:`~schedules.sparse.recipes.run_ends.with_row_runs`).
    """

    lanes: int | None = None
    unroll: int | None = None
    parallel: bool | None = None
    parts_per_thread: int = 4
    row_runs: bool | None = None

    def resolve(self, dtype: str, n_cols: int | None, target: Any, *,
                acc_rows: int = 1, work: int | None = None) -> "ExecParams":
        """A copy with concrete ``lanes``/``unroll``/``parallel`` for ``dtype`` on ``target``.

        ``acc_rows`` accumulator rows per tile (BCSR's R) bound ``unroll`` so
        the tile stays within the target's accumulator registers
        (:func:`~schedules.sparse.executors.codegen.accumulator_registers`);
        ``work`` (stored entries) decides an automatic ``parallel``.
        """
        from schedules.sparse.executors.codegen import accumulator_registers, native_lanes

        lanes = self.lanes if self.lanes is not None else native_lanes(dtype, target)
        unroll = self.unroll
        if unroll is None:
            budget = max(1, accumulator_registers(target) // max(1, acc_rows))
            want = 2 if n_cols is None else -(-int(n_cols) // lanes)
            unroll = int(max(1, min(want, budget, 8)))
        parallel = self.parallel
        if parallel is None:
            parallel = work is None or int(work) * int(n_cols or 8) >= SERIAL_WORK
        out = dataclasses.replace(self, lanes=int(lanes), unroll=int(unroll), parallel=bool(parallel))
        out.validate()
        return out

    def validate(self) -> None:
        """Raise :class:`ConfigError` for out-of-range knobs."""
        for name in ("lanes", "unroll"):
            v = getattr(self, name)
            if v is not None and (int(v) != v or not 1 <= v <= 64):
                raise ConfigError(f"{type(self).__name__}.{name} must be an integer in 1..64, got {v!r}")
        if int(self.parts_per_thread) != self.parts_per_thread or self.parts_per_thread < 1:
            raise ConfigError(f"{type(self).__name__}.parts_per_thread must be >= 1, got {self.parts_per_thread!r}")

    def kernel_key(self) -> tuple:
        """The knobs that change the generated code (cache signature part)."""
        key = (self.lanes, self.unroll, bool(self.parallel))
        return key if self.row_runs is None else key + (("row_runs", bool(self.row_runs)),)

    def n_parts(self, threads: int) -> int:
        """Parts of the parallel loop for ``threads`` threads."""
        return max(1, int(threads) * int(self.parts_per_thread)) if self.parallel else 1


class FormatKernels(ABC):
    """Executor generator for one sparse format (one per format module)."""

    format_name: ClassVar[str]
    params_cls: ClassVar[type[ExecParams]] = ExecParams
    transposable: ClassVar[bool] = False

    @abstractmethod
    def check(self, fmt) -> None:
        """Raise :class:`~tvm_ext.errors.InputError` if ``fmt``'s arrays are malformed."""

    def resolve(self, fmt, params: ExecParams, dtype: str, kind: str, n_cols: int | None,
                target: Any) -> ExecParams:
        """Concrete params for this format instance and kind."""
        return params.resolve(dtype, n_cols, target, work=self.nnz(fmt))

    @abstractmethod
    def primfunc(self, fmt, params: ExecParams, kind: str, transpose: bool):
        """The PrimFunc for this format instance's compile-time attributes."""

    @abstractmethod
    def signature(self, fmt, params: ExecParams, kind: str, transpose: bool) -> tuple:
        """Kernel-cache signature (format, compile-time attributes, dtype, knobs)."""

    @abstractmethod
    def arrays(self, fmt, params: ExecParams, kind: str, transpose: bool,
               threads: int) -> list[np.ndarray]:
        """Format and partition arrays in PrimFunc argument order."""

    def fused_primfunc(self, fmt, params: ExecParams, consumer):
        """The SpMM PrimFunc with a :class:`~schedules.sparse.recipes.consumer.RowTileConsumer`
        fused into its row tiles (row-tile formats only: CSR, BCSR)."""
        raise ConfigError(f"format {self.format_name!r} has no row-tile SpMM executor to fuse a "
                          "consumer into (use csr or bcsr)")

    def scalars(self, fmt, transpose: bool) -> list[int]:
        """int32 scalar arguments after ``C_out`` (CSB's block grid)."""
        return []

    def nnz(self, fmt) -> int:
        """Entries the kernel multiplies (padding slots included)."""
        return int(fmt.to_scipy().nnz)
