"""Benchmark: Block CG (GOGETA Alg. 1) time per iteration, fused vs unfused TVM vs numpy/scipy vs scipy cg.

Matrices: ``lap2d(1000)`` (ecology1-sized, 1M rows), ``make_spd(nasa4704)``
and the 27-point ``lap3d(100)``; N in {1, 8, 16}.  For each case every solver
runs the same ``K`` iterations from ``X0 = 0`` (before any column converges,
so no restart happens) and the best of ``--repeat`` runs is kept:

* **fused**: the plan's groups as TVM kernels (SpMM+Δ, X/R/Γ, P);
* **unfused**: one TVM kernel per op (the plain executor, then single ops);
* **numpy**: the same Alg. 1 with scipy's SpMM and numpy/BLAS;
* **scipy cg** (N = 1 only): ``scipy.sparse.linalg.cg`` per iteration.

The peers run in a fresh process each (TVM's spinning pool threads would
otherwise compete with OpenBLAS's), once with one BLAS thread and once with
``--threads``; the faster is reported (``numpy_blas_threads``).

Next to the measured fused/unfused ratio: the kernels alone (TVM
``time_evaluator`` on each step, summed) and GOGETA's modelled DRAM-traffic
reduction per iteration (SEQ-Flex / GOGETA-map, no on-chip reuse).

Run ``python -m bench.block_cg [--quick] [--n 8] [--threads N]``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse.linalg as spla

from bench.harness import BenchRun, bench_args, collect_rows, suite_argv, geomean, time_python

QUICK = {"lap2d": 200, "lap3d27": 24, "iters": 10, "ns": (1, 8, 16)}
FULL = {"lap2d": 1000, "lap3d27": 100, "iters": 10, "ns": (1, 8, 16)}


def matrices(sizes: dict) -> dict:
    from tvm_ext.workloads import lap2d, lap3d, load_matrix, make_spd

    return {f"lap2d({sizes['lap2d']})": lambda: lap2d(sizes["lap2d"]),
            "nasa4704 (make_spd)": lambda: make_spd(load_matrix("nasa4704")),
            f"lap3d({sizes['lap3d27']}) 27pt": lambda: lap3d(sizes["lap3d27"], 27)}


def _per_iteration(solve, repeat: int) -> tuple[float, object]:
    solve()  # warm-up (thread pool start, first touch)
    runs = [solve() for _ in range(repeat)]
    best = min(runs, key=lambda r: r.seconds_per_iteration)
    return best.seconds_per_iteration, best


def _kernel_seconds(solver, B: np.ndarray) -> float:
    """Sum over the steps of each kernel's best time (host steps excluded)."""
    from schedules.fusion.block_cg import _TVMBackend

    backend = _TVMBackend(solver, B, np.zeros_like(B))
    backend.restart()
    backend.host[solver.storage["P0"]][...] = backend.host[solver.storage["R0"]]
    return sum(k.time(backend.env, repeat=3).min for k in solver.kernels if k is not None)


def _scipy_cg_per_iteration(A, b: np.ndarray, iters: int) -> float:
    count = [0]

    def run():
        count[0] = 0
        spla.cg(A, b, rtol=1e-30, atol=0.0, maxiter=iters, callback=lambda _: count.__setitem__(0, count[0] + 1))

    t = time_python(run, repeat=3, min_repeat_s=0.0)
    return t.min / max(count[0], 1)


def _peers_in_subprocess(name: str, N: int, iters: int, repeat: int, threads: int, quick: bool) -> dict:
    """numpy/scipy peers in fresh processes (no TVM thread pool spinning beside them), with 1 and
    ``threads`` BLAS threads; the faster setting is kept (OpenBLAS threads slow skinny products here)."""
    import json
    import os
    import subprocess
    import sys

    best: dict = {}
    for blas in sorted({1, threads}):
        env = dict(os.environ, OPENBLAS_NUM_THREADS=str(blas), OMP_NUM_THREADS=str(blas),
                   MKL_NUM_THREADS=str(blas))
        argv = [sys.executable, "-m", "bench.block_cg", "--peer", name, str(N), str(iters), str(repeat),
                "--out", "none", "--threads", str(threads)] + (["--quick"] if quick else [])
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
        res = json.loads(out.strip().splitlines()[-1])
        if not best or res["numpy_ms"] < best["numpy_ms"]:
            best = dict(res, numpy_blas_threads=blas)
    return best


def _peer_main(spec: list[str], quick: bool) -> None:
    """Child process: time the numpy Block CG and scipy cg on one case, print JSON."""
    import json

    from schedules.fusion.block_cg import block_cg_numpy

    name, N, iters, repeat = spec[0], int(spec[1]), int(spec[2]), int(spec[3])
    A = matrices(QUICK if quick else FULL)[name]()
    B = np.random.default_rng(N).standard_normal((A.shape[0], N))
    t, _ = _per_iteration(lambda: block_cg_numpy(A, B, tol=1e-30, maxiter=iters), repeat)
    print(json.dumps({"numpy_ms": t * 1e3, "scipy_cg_ms": _scipy_cg_per_iteration(A, B[:, 0], iters) * 1e3}))


def case(run: BenchRun, name: str, A, N: int, iters: int, repeat: int, threads: int, quick: bool) -> None:
    from schedules.fusion.block_cg import BlockCG
    from schedules.fusion.cg_compare import modelled_traffic

    B = np.random.default_rng(N).standard_normal((A.shape[0], N))
    row = {"matrix": name, "rows": A.shape[0], "nnz": A.nnz, "N": N, "iters": iters}
    for fused in (True, False):
        solver = BlockCG(A, N, fused=fused)
        t, res = _per_iteration(lambda: solver.solve(B, rtol=1e-30, maxiter=iters), repeat)
        key = "fused" if fused else "unfused"
        row[f"{key}_ms"] = t * 1e3
        row[f"{key}_kernels_ms"] = _kernel_seconds(solver, B) * 1e3
        row[f"{key}_restarts"] = res.restarts
    peers = _peers_in_subprocess(name, N, iters, repeat, threads, quick)
    row["numpy_ms"], row["numpy_blas_threads"] = peers["numpy_ms"], peers["numpy_blas_threads"]
    row["scipy_cg_ms"] = peers["scipy_cg_ms"] if N == 1 else None
    row["modelled"] = modelled_traffic(A.shape[0], N, A.nnz)["reduction"]
    run.add(row)
    print(f"  {name} N={N}: fused {row['fused_ms']:.3f} ms, unfused {row['unfused_ms']:.3f} ms, "
          f"numpy {row['numpy_ms']:.3f} ms per iteration", flush=True)


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


def run(quick: bool, *, out: str | None = None, argv: Sequence[str] = ()) -> list[dict]:
    """Run this suite as its command line does; its rows, each with its ``bench`` name.

    ``out``: directory for the JSON lines (None: none written); ``argv``: more options of ``main``.
    """
    return collect_rows(main, suite_argv(quick, out, argv))


def main(argv: Sequence[str] | None = None) -> None:
    args = bench_args(__doc__.splitlines()[0], argv,
                      n={"type": int, "nargs": "+", "default": None, "help": "N values (default 1 8 16)"},
                      repeat={"type": int, "default": 3, "help": "solves per solver; best kept"},
                      peer={"nargs": 4, "default": None, "help": argparse_suppress()})
    sizes = QUICK if args.quick else FULL
    if args.peer:
        _peer_main(args.peer, args.quick)
        return
    out = None if args.out in ("", "none") else args.out
    run = BenchRun("block_cg", out_dir=out)
    print(run.header())
    for name, make in matrices(sizes).items():
        A = make()
        for N in args.n or sizes["ns"]:
            case(run, name, A, N, sizes["iters"], args.repeat, args.threads, args.quick)
    print(f"\n## Block CG, milliseconds per iteration ({sizes['iters']} iterations from X0 = 0, best of "
          f"{args.repeat}); kernels = sum of the steps' kernel times; modelled = GOGETA SEQ-Flex / GOGETA-map "
          "DRAM words per iteration\n")
    print(run.markdown(["matrix", "N", "fused_ms", "unfused_ms", "numpy_ms", "scipy_cg_ms", "fused_kernels_ms",
                        "unfused_kernels_ms", "modelled"],
                       ratios={"unfused/fused": ("unfused_ms", "fused_ms"),
                               "kernels unfused/fused": ("unfused_kernels_ms", "fused_kernels_ms"),
                               "numpy/fused": ("numpy_ms", "fused_ms"),
                               "scipy cg/fused": ("scipy_cg_ms", "fused_ms")}))
    n8 = [r for r in run.rows if r["N"] == 8]
    if n8:
        g_unf = geomean(r["unfused_ms"] / r["fused_ms"] for r in n8)
        g_np = geomean(r["numpy_ms"] / r["fused_ms"] for r in n8)
        print(f"\nN = 8 geomean: fused {g_unf:.2f}x faster than unfused (goal >= 1.3x), "
              f"{g_np:.2f}x faster than numpy/scipy (goal >= 2x); modelled traffic reduction "
              f"{geomean(r['modelled'] for r in n8):.2f}x")
    if any(r["fused_restarts"] or r["unfused_restarts"] for r in run.rows):
        print("\nnote: some timed solves restarted (a column converged within the timed iterations)")


if __name__ == "__main__":
    main()
