"""Demo: the Sextans HBM SpMM engine on nasa4704 at N = 64, both Table 3 platforms."""
from __future__ import annotations

import time

import numpy as np

from tvm_ext.markdown import table
from tvm_ext.spmm_engine import SEXTANS, SEXTANS_P, functional_check, model, preprocess
from tvm_ext.workloads import load_matrix

TITLE = "Sextans SpMM engine (BYOC target 2): nasa4704, N = 64"

_PAPER_PEAK = {"sextans": 181.1, "sextans-p": 343.6}  # GFLOP/s, Table 3 / Fig. 7


def run():
    A = load_matrix("nasa4704")
    n = 64
    t0 = time.perf_counter()
    prog = preprocess(A)
    pre_s = time.perf_counter() - t0
    st = prog.stats
    check = functional_check(prog, A, n)
    B = np.random.default_rng(0).uniform(-1, 1, (A.shape[1], n))
    t0 = time.perf_counter()
    A @ B
    scipy_s = time.perf_counter() - t0
    rows, data = [], {"nnz": A.nnz, "stream_length": st["stream_length"], "bubbles": st["bubbles"],
                      "max_rel_err": check["max_rel_err"], "scipy_s": scipy_s}
    for plat in (SEXTANS, SEXTANS_P):
        r = model(prog, n, plat)
        rows.append([plat.name, r.cycles, r.seconds * 1e6, round(r.gflops, 1), _PAPER_PEAK[plat.name],
                     round(100 * r.bandwidth_utilization, 2), f"{r.flop_per_joule:.3g}",
                     round(scipy_s / r.seconds, 1)])
        data[plat.name] = {"cycles": r.cycles, "seconds": r.seconds, "gflops": r.gflops}
    lines = [
        f"preprocessed {A.nnz:,} non-zeros in {pre_s * 1e3:.0f} ms: {st['windows']} windows x 64 PEs, "
        f"stream length {st['stream_length']:,} (ideal nnz/P = {A.nnz / 64:,.0f}), "
        f"{st['bubbles']:,} bubbles ({st['raw_bubbles']:,} from RAW distance D=10, "
        f"{st['padding']:,} padding)",
        table(["platform", "cycles", "modelled us", "GFLOP/s", "paper peak GFLOP/s",
               "BW util %", "FLOP/J", "x scipy (this CPU)"], rows),
        f"functional check: simulated fp32 C vs scipy float64, max rel err {check['max_rel_err']:.1e} "
        f"(simulated in {check['simulate_s']:.2f} s; scipy SpMM took {scipy_s * 1e3:.1f} ms)",
    ]
    return data, lines
