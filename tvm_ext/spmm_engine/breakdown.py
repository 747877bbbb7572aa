"""Sextans Table 1 (§3.5 (5)): speedup breakdown of the optimisations on any matrix.

Four engine configurations, each preprocessed and modelled
(:func:`~tvm_ext.spmm_engine.model`, launch and fill / drain included) on
the same SpMM:

==================  ==============================================  =============
step                engine                                          paper (crystm03)
==================  ==============================================  =============
baseline            1 PE, 1 PU, in-order row-major (CSR) stream      1x
+ OoO scheduling    1 PE, 1 PU, Sextans' out-of-order stream (§3.3)  9.97x
+ 8 PUs             1 PE, N0 = 8 (each A non-zero feeds 8 columns)   7.97x
+ 64 PEs            64 PEs, N0 = 8 (the prototype)                   45.3x
==================  ==============================================  =============

Every ratio is a ratio of modelled times; none is set by construction.  Each
step carries a one-line account of where its ratio comes from, in the
model's own quantities (stream lengths, N0-blocks, the stages that do not
shrink), for comparison with the paper's.

>>> from tvm_ext.workloads import lap2d
>>> steps = speedup_breakdown(lap2d(40), 16)
>>> [s.label for s in steps][1], steps[0].incremental
('+ OoO scheduling', 1.0)
>>> 1.0 < steps[2].incremental < 8.0      # the launch does not shrink with N0
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tvm_ext.errors import InputError, positive_int
from tvm_ext.spmm_engine.config import EngineConfig, Platform, get_platform
from tvm_ext.spmm_engine.perf_model import PerfReport, model
from tvm_ext.spmm_engine.preprocess import resolve_config, schedule
from tvm_ext.workloads import canonical_csr

__all__ = ["BreakdownStep", "speedup_breakdown", "PAPER_TABLE1", "BREAKDOWN_STEPS"]

#: Table 1 of the paper (crystm03): incremental and accumulated speedups.
PAPER_TABLE1 = {"incremental": (1.0, 9.97, 7.97, 45.3), "accumulated": (1.0, 9.97, 79.6, 3608.0)}

#: (label, EngineConfig overrides) of the four Table 1 steps.
BREAKDOWN_STEPS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("baseline (1 PE, 1 PU, in-order CSR)", dict(pes=1, n0=1, policy="in-order", nz_order="row")),
    ("+ OoO scheduling", dict(pes=1, n0=1, policy="ooo", nz_order="column")),
    ("+ 8 PUs", dict(pes=1, n0=8, policy="ooo", nz_order="column")),
    ("+ 64 PEs", dict(pes=64, n0=8, policy="ooo", nz_order="column")),
)


@dataclass(frozen=True)
class BreakdownStep:
    """One column of Table 1: its engine, modelled run and speedups."""

    label: str
    config: EngineConfig
    stream_length: int
    report: PerfReport
    incremental: float
    accumulated: float
    paper_incremental: float
    paper_accumulated: float
    why: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary."""
        r = self.report
        return {"step": self.label, "pes": self.config.pes, "n0": self.config.n0,
                "policy": self.config.policy, "nz_order": self.config.nz_order,
                "stream_length": self.stream_length, "cycles": r.cycles, "seconds": r.seconds,
                "gflops": r.gflops, "incremental": self.incremental, "accumulated": self.accumulated,
                "paper_incremental": self.paper_incremental,
                "paper_accumulated": self.paper_accumulated, "why": self.why}


def _share(r: PerfReport, *stages: str) -> float:
    return sum(r.stages[s].seconds for s in stages) / r.seconds


def _why(i: int, prev: "tuple[int, PerfReport] | None", cur: tuple[int, PerfReport],
         cfg: EngineConfig, nnz: int, rows: int) -> str:
    length, r = cur
    if prev is None:
        return (f"row-major in-order stream: {length:,} cycles per N0-block for {nnz:,} non-zeros "
                f"(each of a row's non-zeros waits D={cfg.raw_distance} cycles for the previous one)")
    plen, p = prev
    if i == 1:
        per_row = nnz / max(rows, 1)
        ideal = (cfg.raw_distance * (per_row - 1) + 1) / per_row if per_row else 1.0
        return (f"PE stream {plen:,} -> {length:,} cycles ({plen / max(length, 1):.2f}x; bound "
                f"D={cfg.raw_distance}, {ideal:.2f}x at {per_row:.1f} nnz/row); the B stream and "
                f"C stages do not shrink. Paper 9.97x ~ D=10 on crystm03's 23.6 nnz/row")
    if i == 2:
        launch = r.launch_s / r.seconds
        mem = sum(s.memory_bound_s for s in r.stages.values()) / r.seconds
        return (f"N0-blocks {p.n_blocks} -> {r.n_blocks} ({p.n_blocks / r.n_blocks:.2f}x fewer passes "
                f"over A); below that: the once-per-SpMM launch ({launch:.1%} of the time) and "
                f"memory-bound stage time ({mem:.1%}). Paper 7.97x")
    fixed = _share(r, "stream_b", "init_c", "comp_c")
    fill = r.fill_drain_cycles / r.cycles if r.cycles else 0.0
    no_launch = (p.seconds - p.launch_s) / (r.seconds - r.launch_s)
    return (f"longest PE stream {plen:,} -> {length:,} cycles ({plen / max(length, 1):.1f}x of "
            f"{cfg.pes}); stream B / init C / comp C do not shrink with P and are {fixed:.0%} of the "
            f"64-PE time, fill / drain {fill:.0%} of its cycles, launch {r.launch_s / r.seconds:.0%} "
            f"({no_launch:.1f}x without the launch). Paper 45.3x")


def speedup_breakdown(A: Any, n: int = 64, platform: Platform | str | None = None,
                      **overrides: Any) -> list[BreakdownStep]:
    """Table 1 for ``A``: the four steps, modelled for ``n`` columns of B.

    ``overrides`` (``raw_distance``, ``window``, ...) apply to every step.

    >>> from tvm_ext.workloads import load_matrix
    >>> [round(s.accumulated) >= 1 for s in speedup_breakdown(load_matrix("LFAT5"), 8)]
    [True, True, True, True]
    """
    csr = canonical_csr(A, what="A")
    n = positive_int(n, "breakdown: n", InputError)
    plat = get_platform(platform)
    for key in ("pes", "n0", "policy", "nz_order"):
        if key in overrides:
            raise InputError(f"breakdown: {key} is set by each step of Table 1 and cannot be overridden")
    steps: list[BreakdownStep] = []
    prev = None
    for i, (label, kw) in enumerate(BREAKDOWN_STEPS):
        cfg = resolve_config(None, **{**overrides, **kw})
        stream = schedule(csr, config=cfg)
        r = model(stream, n, plat)
        length = int(stream.stats()["stream_length"])
        first = steps[0].report.seconds if steps else r.seconds
        inc = (prev[1].seconds / r.seconds) if prev else 1.0
        steps.append(BreakdownStep(
            label=label, config=cfg, stream_length=length, report=r, incremental=inc,
            accumulated=first / r.seconds, paper_incremental=PAPER_TABLE1["incremental"][i],
            paper_accumulated=PAPER_TABLE1["accumulated"][i],
            why=_why(i, prev, (length, r), cfg, int(csr.nnz), int(csr.shape[0]))))
        prev = (length, r)
    return steps
