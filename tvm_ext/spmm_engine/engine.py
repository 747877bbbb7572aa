"""One call that runs the whole Sextans flow on a matrix: preprocess, simulate, model, check.

Used by the CLI (``tvm-ext sextans``), the demo and the benchmarks.

>>> from tvm_ext.workloads import load_matrix
>>> r = evaluate(load_matrix("LFAT5"), 8, pes=4, window=8)
>>> r["max_rel_err"] < 1e-5, r["stream_length"] >= 14 // 4
(True, True)
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from tvm_ext.errors import InputError, positive_int
from tvm_ext.limits import check_work
from tvm_ext.spmm_engine.config import EngineConfig, Platform, get_platform
from tvm_ext.spmm_engine.perf_model import model
from tvm_ext.spmm_engine.preprocess import preprocess, resolve_config
from tvm_ext.spmm_engine.simulator import simulate
from tvm_ext.workloads import canonical_csr

__all__ = ["evaluate", "functional_check", "estimate_work"]


def estimate_work(csr, n: int, cfg: EngineConfig, check: bool) -> dict[str, float]:
    """Upper estimates of the bytes and FLOP of :func:`evaluate`.

    The out-of-order schedule of a PE holds at most ``D`` slots per non-zero
    (one RAW gap each) plus one per bin, a byte each, next to a few int64
    arrays per non-zero; the functional check holds B and C padded to a
    multiple of N0 and a ``P x depth x N0`` scratchpad.
    """
    M, K = csr.shape
    nnz = int(csr.nnz)
    windows = -(-K // cfg.window) if K else 0
    passes = max(1, -(-M // cfg.rows_per_pass))
    slots = nnz * cfg.raw_distance + cfg.pes * max(windows, 1) * passes
    work = {"bytes": slots + 48 * nnz + 64 * cfg.pes * passes, "flop": 0}
    if check:
        npad = -(-n // cfg.n0) * cfg.n0
        work["bytes"] += (M + K) * npad * 4 + (M + K) * n * 8 + cfg.pes * cfg.rows_per_pe * cfg.n0 * 4
        work["flop"] = 2 * nnz * npad
    return work


def functional_check(program, A, n: int, *, alpha: float = 0.85, beta: float = -2.06,
                     seed: int = 0) -> dict[str, float]:
    """Simulate on random B, C and compare with scipy in float64.

    ``max_rel_err`` is the largest absolute error divided by the largest
    reference magnitude (an element-wise ratio is meaningless where C ~ 0).
    The default alpha/beta are those of the released Sextans host.
    """
    rng = np.random.default_rng(seed)
    M, K = A.shape
    B = rng.uniform(-1.0, 1.0, (K, n)).astype(np.float32)
    C = rng.uniform(-1.0, 1.0, (M, n)).astype(np.float32)
    t0 = time.perf_counter()
    out = simulate(program, B, C, alpha=alpha, beta=beta)
    sim_s = time.perf_counter() - t0
    ref = alpha * (A.astype(np.float64) @ B.astype(np.float64)) + beta * C.astype(np.float64)
    err = float(np.max(np.abs(out - ref))) if ref.size else 0.0
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    return {"max_abs_err": err, "max_rel_err": err / scale if scale else err,
            "simulate_s": sim_s}


def evaluate(A: Any, n: int, *, config: EngineConfig | dict | None = None,
             platform: Platform | str | None = None, check: bool = True, seed: int = 0,
             **overrides: Any) -> dict[str, Any]:
    """Preprocess ``A``, model an SpMM with ``n`` columns, optionally check it functionally.

    Requests whose :func:`estimate_work` is above :data:`tvm_ext.limits.LIMITS`
    are refused with ``ConfigError`` (lift with ``TVM_EXT_ALLOW_LARGE=1``).
    Returns a flat JSON-able dict: schedule statistics (``stream_length``,
    ``bubbles``, ...), the model (``cycles``, ``seconds``, ``gflops``,
    ``bandwidth_utilization``, ``flop_per_joule``), ``max_rel_err`` (None
    when ``check`` is False) and the preprocessing time.
    """
    cfg = resolve_config(config, **overrides)
    plat = get_platform(platform)
    csr = canonical_csr(A, what="A")
    n = positive_int(n, "sextans: n", InputError)
    check_work(f"sextans SpMM {csr.shape[0]}x{csr.shape[1]} (nnz {csr.nnz}) x N={n}, P={cfg.pes}, N0={cfg.n0}, "
               f"D={cfg.raw_distance}", **estimate_work(csr, n, cfg, check))
    t0 = time.perf_counter()
    program = preprocess(csr, cfg)
    pre_s = time.perf_counter() - t0
    perf = model(program, n, plat)
    out: dict[str, Any] = {
        "rows": csr.shape[0], "cols": csr.shape[1], "n": int(n),
        "config": cfg.to_dict(), "platform": plat.to_dict(),
        **program.stats,
        "cycles": perf.cycles, "seconds": perf.seconds, "gflops": perf.gflops,
        "steady_s": perf.steady_s, "fill_drain_cycles": perf.fill_drain_cycles,
        "launch_s": perf.launch_s,
        "bandwidth_utilization": perf.bandwidth_utilization,
        "flop_per_joule": perf.flop_per_joule,
        "stages": {k: v.seconds for k, v in perf.stages.items()},
        "traffic_bytes": perf.traffic,
        "preprocess_s": pre_s,
        "max_rel_err": None, "max_abs_err": None,
    }
    if check:
        out.update(functional_check(program, csr, int(n), seed=seed))
    return out
