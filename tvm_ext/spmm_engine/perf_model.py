"""Sextans §3.6.1 (Eqs. 6-10) and §4: cycle and HBM model of one SpMM.

Per row pass and per N0-column block of B (Alg. 1), the engine runs stages
one after another; each stage takes ``max(compute, memory)`` (§4.1: "we model
the computing time and memory accessing time and record the larger one"):

=========  ==========================================  ===========================
stage      compute cycles                              HBM traffic (channels)
=========  ==========================================  ===========================
init C     ``ceil(rows / P)`` (Eq. 6)                  Q pointers (1 channel)
stream B   ``ceil(K0_j / (2 F_B))`` per window (Eq. 7)  ``K0_j * N0 * 4`` B (4)
PE         ``Q[j+1] - Q[j]`` per window (Eq. 8, real)  ``len * P * 8`` A words (8)
comp C     ``ceil(rows / F_C)`` (Eq. 9)                ``rows * N0 * 4`` C_in (8), C_out (8)
=========  ==========================================  ===========================

On top of that steady state come the fixed costs that make throughput grow
with problem size and saturate (Fig. 7/8, §4.2.1: "there are setup and
ending processing overheads"; §1: "The OpenCL runtime overhead for launching
one kernel is around 0.15ms"):

* **launch**: the host's kernel launch, once per SpMM (``Platform.launch_us``);
  Sextans runs a whole SpMM, all row passes and N0-blocks, in one kernel.
* **fill / drain**: every stage instance waits for its first HBM burst
  (``hbm_latency_cycles``, §1 C2); a PE window also drains its
  ``pe_latency_cycles``-deep pipeline (§3.5 (3)) before the next B window may
  overwrite the buffer; comp C waits for the C_in read and the last C_out
  write.  Per row pass and N0-block: init C 1 latency, stream B 1 per window,
  PE 1 latency + PE depth per non-empty window, comp C 2 latencies.

``cycles`` sums the compute column as Eq. 10 does, but with the scheduled
stream length of every window (bubbles and padding included) instead of the
average ``NNZ / P``.  Eq. 6 prints ``K / P``; the PEs zero their ``M / P``
scratchpad rows (the released kernel's ``init_C`` loop), so ``rows / P`` is
used.  ``seconds`` sums the per-stage maxima, the fill / drain time and the launch;
``steady_s`` leaves the last two out.

**HBM channel efficiency.**  Every stream gets ``hbm_efficiency`` times its
channels' nominal bandwidth (default 1.0: nominal).  Real pseudo-channels
deliver less (refresh, row activations, the HLS AXI master's gaps between
bursts; §4.2.3 blames the "HLS tool limitation" for the FPGA's low bandwidth
utilisation), and the paper's measured peak includes that.  It matters for
the peak only through A: 8 PEs take one 64-byte beat per cycle from their
channel, :func:`a_stream_demand` = 84% of a U280 pseudo-channel at 189 MHz
(80% on Sextans-P at 350 MHz).  Below that efficiency the A stream, not the
PEs, paces the PE stage.  :data:`PAPER_IMPLIED_HBM_EFFICIENCY` (0.815) is the
efficiency at which that alone would turn the steady-state peak (187 GFLOP/s,
no fill / drain) into the paper's 181.1; Sextans-P's A stream needs less, so
its 347 would stay.  The full model's peak (fill / drain and launch included)
is already 177 / 328 at nominal bandwidth, so the default keeps nominal
bandwidth and the efficiency is an option, not a fit.
Derived metrics follow §4:
problem size ``2 (NNZ + M) N`` FLOP (the released host's count), bandwidth
utilisation ``4 (NNZ + N (2M + K)) / t / Bdw`` (§4.2.3) and FLOP/J (§4.2.4).

>>> import scipy.sparse as sp, numpy as np
>>> from tvm_ext.spmm_engine import schedule
>>> s = schedule(sp.csr_array(np.eye(64)), P=64, K0=4096)
>>> r = model(s, n=8)
>>> r.cycles == 1 + 8 + 1 + 4    # init 64/64, B 64/8, PE 1 row, comp C 64/16
True
>>> r.fill_drain_cycles == 100 + 100 + (100 + 15) + 2 * 100
True
>>> round(r.seconds * 1e6, 2)       # launch 150 us + 529 cycles at 189 MHz
152.8
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from tvm_ext.errors import ConfigError, InputError
from tvm_ext.spmm_engine.config import Platform, get_platform

__all__ = ["StageTime", "PerfReport", "model", "problem_flops", "a_stream_demand", "PAPER_IMPLIED_HBM_EFFICIENCY"]

_STAGES = ("init_c", "stream_b", "pe", "comp_c")

#: The HBM efficiency at which the A stream alone would bring the steady-state Sextans peak from
#: 187 GFLOP/s to the paper's measured 181.1: ``a_stream_demand("sextans") * 181.1 / 187``.
PAPER_IMPLIED_HBM_EFFICIENCY = 0.815


def a_stream_demand(platform: Platform | str | dict | None = None, pes_per_peg: int = 8,
                    nz_bytes: int = 8) -> float:
    """Fraction of one A channel's nominal bandwidth the PEs of one PEG consume
    at one non-zero per PE per cycle; below this HBM efficiency A limits the PE stage.

    >>> round(a_stream_demand("sextans"), 3), round(a_stream_demand("sextans-p"), 3)
    (0.841, 0.796)
    """
    plat = get_platform(platform)
    return pes_per_peg * nz_bytes * plat.freq_hz / (plat.channel_gbs * 1e9)


@dataclass(frozen=True)
class StageTime:
    """One stage kind, summed over windows, blocks and passes."""

    cycles: int
    compute_s: float
    memory_s: float
    seconds: float
    bytes: int
    memory_bound_s: float  # time spent in instances of this stage where memory was slower
    fill_cycles: int = 0   # pipeline fill / drain cycles, included in ``seconds``


@dataclass(frozen=True)
class PerfReport:
    """Modelled execution of ``alpha * A @ B + beta * C`` with B of N columns."""

    platform: str
    n: int
    n_blocks: int
    cycles: int
    seconds: float
    steady_s: float
    fill_drain_cycles: int
    launch_s: float
    flops: float
    gflops: float
    bandwidth_utilization: float
    flop_per_joule: float
    energy_j: float
    traffic: dict[str, int]
    stages: dict[str, StageTime]

    @property
    def kernel_s(self) -> float:
        """Time on the engine alone (steady state plus fill / drain, no host launch)."""
        return self.seconds - self.launch_s

    @property
    def kernel_gflops(self) -> float:
        """GFLOP/s over :attr:`kernel_s`."""
        return self.flops / self.kernel_s / 1e9

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (stages expanded)."""
        d = asdict(self)
        d["kernel_s"], d["kernel_gflops"] = self.kernel_s, self.kernel_gflops
        d["stages"] = {k: asdict(v) for k, v in self.stages.items()}
        return d


def problem_flops(nnz: int, M: int, n: int) -> float:
    """Problem size in FLOP: ``2 (NNZ + M) N`` (the released Sextans host's count).

    >>> problem_flops(10, 4, 8)
    224.0
    """
    return 2.0 * (nnz + M) * n


class _Acc:
    """Accumulates cycles / compute / memory / bytes of one stage kind."""

    def __init__(self) -> None:
        self.cycles = 0
        self.compute = 0.0
        self.memory = 0.0
        self.seconds = 0.0
        self.bytes = 0
        self.mem_bound = 0.0
        self.fill = 0

    def add(self, cycles: np.ndarray, nbytes: np.ndarray, f: float, bw: float, reps: int,
            fill: int, extra_bytes: np.ndarray | None = None,
            extra_bw: float | None = None) -> None:
        comp = np.asarray(cycles, dtype=np.float64) / f
        mem = np.asarray(nbytes, dtype=np.float64) / bw
        if extra_bytes is not None:
            mem = np.maximum(mem, np.asarray(extra_bytes, dtype=np.float64) / extra_bw)
        t = np.maximum(comp, mem)
        self.cycles += reps * int(np.sum(cycles))
        self.compute += reps * float(np.sum(comp))
        self.memory += reps * float(np.sum(mem))
        self.seconds += reps * float(np.sum(t))
        total_bytes = np.sum(nbytes) + (np.sum(extra_bytes) if extra_bytes is not None else 0)
        self.bytes += reps * int(total_bytes)
        self.mem_bound += reps * float(np.sum(np.where(mem > comp, t, 0.0)))
        self.fill += reps * int(fill)
        self.seconds += reps * int(fill) / f

    def done(self) -> StageTime:
        return StageTime(self.cycles, self.compute, self.memory, self.seconds, self.bytes,
                         self.mem_bound, self.fill)


def model(program: Any, n: int, platform: Platform | str | dict | None = None, *,
          hbm_efficiency: float = 1.0) -> PerfReport:
    """Cycles, time, GFLOP/s, bandwidth utilisation and FLOP/J for ``n`` columns of B.

    ``program`` is a :class:`~tvm_ext.spmm_engine.SextansProgram` or a
    :class:`~tvm_ext.spmm_engine.ScheduledStream` (both carry Q per pass).
    ``hbm_efficiency``: fraction of each channel's nominal bandwidth the
    streams get (1.0: nominal, the default).
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"n: the number of columns of B must be a positive integer, got {n!r}")
    if isinstance(hbm_efficiency, bool) or not isinstance(hbm_efficiency, (int, float)) \
            or not 0 < hbm_efficiency <= 1:
        raise ConfigError(f"hbm_efficiency must be a number in (0, 1], got {hbm_efficiency!r}")
    plat = get_platform(platform)
    bw = {c: plat.class_bandwidth(c) * hbm_efficiency for c in ("q", "a", "b", "c_in", "c_out")}
    cfg = program.config
    M, K = program.shape
    P, N0, K0 = cfg.pes, cfg.n0, cfg.window
    n_blocks = -(-int(n) // N0)
    f = plat.freq_hz
    acc = {s: _Acc() for s in _STAGES}
    traffic = dict.fromkeys(("q", "a", "b", "c_in", "c_out"), 0)
    for ps in program.passes:
        q = np.asarray(ps.q, dtype=np.int64)
        W = q.size - 1
        widths = np.minimum(K0, K - np.arange(W, dtype=np.int64) * K0)
        lens = np.diff(q)
        rows = int(ps.rows)
        q_bytes = (W + 1) * 4
        b_bytes = widths * N0 * 4
        a_bytes = lens * P * 8
        c_bytes = rows * N0 * 4
        lat, depth = plat.hbm_latency_cycles, plat.pe_latency_cycles
        acc["init_c"].add([-(-rows // P)], [q_bytes], f, bw["q"], n_blocks,
                          fill=lat)
        acc["stream_b"].add(-(-widths // (2 * cfg.b_partition)), b_bytes, f,
                            bw["b"], n_blocks, fill=W * lat)
        acc["pe"].add(lens, a_bytes, f, bw["a"], n_blocks,
                      fill=int(np.count_nonzero(lens)) * (lat + depth))
        acc["comp_c"].add([-(-rows // cfg.c_parallel)], [c_bytes], f, bw["c_in"],
                          n_blocks, fill=2 * lat, extra_bytes=[c_bytes],
                          extra_bw=bw["c_out"])
        traffic["q"] += n_blocks * q_bytes
        traffic["b"] += n_blocks * int(b_bytes.sum())
        traffic["a"] += n_blocks * int(a_bytes.sum())
        traffic["c_in"] += n_blocks * c_bytes
        traffic["c_out"] += n_blocks * c_bytes
    stages = {s: a.done() for s, a in acc.items()}
    cycles = sum(s.cycles for s in stages.values())
    fill_cycles = sum(s.fill_cycles for s in stages.values())
    engine_s = sum(s.seconds for s in stages.values())
    steady_s = engine_s - fill_cycles / f
    seconds = engine_s + plat.launch_s
    flops = problem_flops(program.nnz, M, int(n))
    useful_bytes = 4.0 * (program.nnz + int(n) * (2 * M + K))
    return PerfReport(
        platform=plat.name, n=int(n), n_blocks=n_blocks, cycles=int(cycles), seconds=seconds,
        steady_s=steady_s, fill_drain_cycles=int(fill_cycles), launch_s=plat.launch_s,
        flops=flops, gflops=flops / seconds / 1e9,
        bandwidth_utilization=useful_bytes / seconds / (plat.bandwidth_gbs * 1e9),
        flop_per_joule=flops / (seconds * plat.power_w), energy_j=seconds * plat.power_w,
        traffic=traffic, stages=stages,
    )
