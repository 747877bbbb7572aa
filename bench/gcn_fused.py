"""Benchmark: a GCN layer ``X1 = (A·X0)·W`` on cora, fused (Z stays in registers) vs unfused vs scipy+numpy.

GOGETA Table 2's cora layer (M = 2708, N = 1433 input features, O = 7
outputs; random dense features and weights), plus smaller feature counts.
Each row: milliseconds per layer (TVM: each kernel's best ``time_evaluator``
time, summed; scipy+numpy: best of repeats), the ratios, and GOGETA's
modelled DRAM-traffic reduction (SEQ-Flex / GOGETA-map, no SRAM).  The
scipy+numpy peer runs in fresh processes with 1 and ``--threads`` BLAS
threads (TVM's spinning pool threads would slow BLAS down); the faster is kept.

Run ``python -m bench.gcn_fused [--quick] [--threads N]``.
"""
from __future__ import annotations

import numpy as np

from bench.harness import BenchRun, bench_args, geomean, time_python

QUICK = {"features": (64, 1433), "dtype": "float32"}
FULL = {"features": (16, 64, 256, 1433), "dtype": "float32"}


def modelled(M: int, N: int, O: int, nnz: int) -> float:
    from schedules.fusion.builders import gcn_layer_dag
    from schedules.fusion.groups import plan_fusion
    from schedules.fusion.traffic_model import TrafficArch, dram_traffic

    dag = gcn_layer_dag(M, N, O, nnz)
    plan, arch = plan_fusion(dag), TrafficArch.table4(0)
    return dram_traffic(dag, "SEQ-Flex", arch, plan).words / dram_traffic(dag, "GOGETA-map", arch, plan).words


def case(run: BenchRun, A, N: int, O: int, dtype: str, threads: int) -> None:
    from schedules.fusion.gcn import GCNLayer, gcn_layer_numpy

    X0, W = _inputs(A, N, O, dtype)
    A_t = A.astype(dtype)
    ref = gcn_layer_numpy(A_t, X0, W)
    row = {"graph": "cora", "M": A.shape[0], "nnz": A.nnz, "N": N, "O": O}
    for fused in (True, False):
        layer = GCNLayer(A, N, O, fused=fused, dtype=dtype)
        err = float(np.abs(layer(X0, W) - ref).max() / np.abs(ref).max())
        row[f"{'fused' if fused else 'unfused'}_ms"] = layer.time(X0, W, repeat=5) * 1e3
        row[f"{'fused' if fused else 'unfused'}_err"] = err
    row["scipy_numpy_ms"], row["blas_threads"] = _peer_in_subprocess(N, O, dtype, threads)
    row["modelled"] = modelled(A.shape[0], N, O, A.nnz)
    run.add(row)


def _inputs(A, N: int, O: int, dtype: str):
    rng = np.random.default_rng(N)
    return rng.standard_normal((A.shape[0], N)).astype(dtype), rng.standard_normal((N, O)).astype(dtype)


def _peer_in_subprocess(N: int, O: int, dtype: str, threads: int) -> tuple[float, int]:
    """scipy+numpy in fresh processes with 1 and ``threads`` BLAS threads (no TVM pool beside
    them); the faster is kept."""
    import json
    import os
    import subprocess
    import sys

    best = (float("inf"), 0)
    for blas in sorted({1, threads}):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas), OMP_NUM_THREADS=str(blas),
                   MKL_NUM_THREADS=str(blas))
        out = subprocess.run([sys.executable, "-m", "bench.gcn_fused", "--peer", str(N), str(O), dtype,
                              "--out", "none", "--threads", str(threads)], env=env, capture_output=True,
                             text=True, check=True).stdout
        ms = json.loads(out.strip().splitlines()[-1])["ms"]
        best = min(best, (ms, blas))
    return best


def _peer_main(spec: list[str]) -> None:
    import json

    from schedules.fusion.gcn import gcn_layer_numpy
    from tvm_ext.workloads import load_matrix

    N, O, dtype = int(spec[0]), int(spec[1]), spec[2]
    A = load_matrix("cora")
    X0, W = _inputs(A, N, O, dtype)
    A_t = A.astype(dtype)
    print(json.dumps({"ms": time_python(lambda: gcn_layer_numpy(A_t, X0, W), repeat=5).min * 1e3}))


def main() -> None:
    from tvm_ext.workloads import GOGETA_TABLE2, load_matrix

    import argparse

    args = bench_args(__doc__.splitlines()[0], peer={"nargs": 3, "default": None, "help": argparse.SUPPRESS})
    if args.peer:
        _peer_main(args.peer)
        return
    sizes = QUICK if args.quick else FULL
    out = None if args.out in ("", "none") else args.out
    run = BenchRun("gcn_fused", out_dir=out)
    print(run.header())
    A = load_matrix("cora")
    O = GOGETA_TABLE2["cora"].O
    for N in sizes["features"]:
        case(run, A, N, O, sizes["dtype"], args.threads)
    print(f"\n## GCN layer on cora ({sizes['dtype']}), milliseconds per layer; modelled = GOGETA SEQ-Flex / "
          "GOGETA-map DRAM words\n")
    print(run.markdown(["graph", "N", "O", "fused_ms", "unfused_ms", "scipy_numpy_ms", "fused_err", "modelled"],
                       ratios={"unfused/fused": ("unfused_ms", "fused_ms"),
                               "scipy+numpy/fused": ("scipy_numpy_ms", "fused_ms")}))
    print(f"\ngeomean unfused/fused {geomean(r['unfused_ms'] / r['fused_ms'] for r in run.rows):.2f}x, "
          f"scipy+numpy/fused {geomean(r['scipy_numpy_ms'] / r['fused_ms'] for r in run.rows):.2f}x")


if __name__ == "__main__":
    main()
