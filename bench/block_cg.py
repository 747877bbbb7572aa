"""Benchmark: Block CG (GOGETA Alg. 1) time per iteration, fused vs unfused TVM vs numpy/scipy vs scipy cg.

Matrices: ``make_spd(nasa4704)`` and ``lap2d(300)`` (cache-resident), pyamg's
Q1 elasticity FEM (``fem_elasticity(800)``: 1.28M rows, 16.6M nnz, 7-15x the
32 MB L3 of the machine this was written on) and ``lap2d(1000)``
(ecology1-sized); N in {1, 8, 16} ({1, 8} with ``--quick``).  Each case is
labelled cache- or DRAM-resident by its per-iteration working set (CSR and
four ``M x N`` blocks) against the target's last-level cache (L3 share times
cores, :func:`schedules.fusion.fusion_choice.cache_bytes`, the size
``fused="auto"``'s rule compares); a read-bandwidth probe (numpy sums over
4 MB - 1 GB arrays) prints where the machine's bandwidth falls, as a check of
that label.  For each case every solver
runs the same ``K`` iterations from ``X0 = 0`` (before any column converges,
so no restart happens), in ``--repeat`` interleaved rounds (the solvers' order
reversed every other round, after a warm-up round); times are medians and
speed-ups the median of the per-round ratios:

* **fused**: the plan's groups as TVM kernels (SpMM+Δ, X/R/Γ, P);
* **unfused**: one TVM kernel per op (the plain executor, then single ops);
* **gogeta**: ``fused="auto"``: fused on a DRAM-resident case (the traffic
  model's pick), else whichever of the two ran faster in a few interleaved
  iterations measured when the solver was built (fusion never loses);
* **fused_host**: fused, with ``Λ`` and ``Φ`` solved on the host between
  the kernels (``inline_solves=False``) rather than in the prologue of the
  kernel that applies them: what the in-kernel solves save;
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

QUICK = {"matrices": ("nasa4704", "lap2d(300)", "fem_elasticity(800)"), "iters": 10, "ns": (1, 8)}
FULL = {"matrices": ("nasa4704", "lap2d(300)", "fem_elasticity(400)", "fem_elasticity(800)", "lap2d(1000)"),
        "iters": 10, "ns": (1, 8, 16)}


def matrices(sizes: dict) -> dict:
    """Name -> factory: the bundled nasa4704 (made SPD), 5-point Laplacians and pyamg's Q1 elasticity FEM."""
    from tvm_ext.workloads import fem_elasticity, lap2d, load_matrix, make_spd

    make = {"nasa4704": lambda: make_spd(load_matrix("nasa4704"))}
    for name in sizes["matrices"]:
        if name.startswith("lap2d("):
            make[name] = (lambda n=int(name[6:-1]): lap2d(n))
        elif name.startswith("fem_elasticity("):
            make[name] = (lambda n=int(name[15:-1]): fem_elasticity(n))
    return {name: make[name] for name in sizes["matrices"]}


def working_set_bytes(A, N: int) -> int:
    """Bytes one iteration streams at least once: A (CSR) and X, R, P, S (M x N float64)."""
    from schedules.fusion.fusion_choice import working_set_bytes as per_iteration

    return per_iteration(A.shape[0], N, A.nnz, A.dtype.itemsize)


def cache_limit(sizes_mb: Sequence[int] = (4, 16, 64, 256, 1024), repeat: int = 5) -> tuple[int, list]:
    """Measure read bandwidth (``a.sum()``) over growing arrays; the cache limit is the largest size
    whose bandwidth is still above half the smallest size's.  Returns (limit bytes, [(MB, GB/s)])."""
    probe = []
    for mb in sizes_mb:
        a = np.ones(mb * (1 << 20) // 8)
        a.sum()
        t = time_python(a.sum, repeat=repeat, min_repeat_s=0.0)
        probe.append((mb, a.nbytes / t.min / 1e9))
        del a
    cached = probe[0][1]
    limit = max(mb for mb, bw in probe if bw > 0.5 * cached)
    return limit * (1 << 20), probe


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


def _host_steps_seconds(N: int) -> float:
    """Seconds of one iteration's two host steps (Λ = Δ⁻¹Γ, Φ = Γ_prev⁻¹Γ: N x N SPD solves)."""
    from schedules.fusion.block_cg_iteration import spd_pinv_solve

    rng = np.random.default_rng(N)
    V = rng.standard_normal((4 * N, N))
    G, R, out = V.T @ V, rng.standard_normal((N, N)), np.empty((N, N))
    t = time_python(lambda: (spd_pinv_solve(G, R, out), spd_pinv_solve(G, R, out)), repeat=5, min_repeat_s=0.01)
    return t.min


#: the TVM solvers of a case: BlockCG keyword arguments by row key
SOLVERS = {"fused": {"fused": True}, "unfused": {"fused": False}, "gogeta": {"fused": "auto"},
           "fused_host": {"fused": True, "inline_solves": False}}


def interleaved(solves: dict, rounds: int) -> dict:
    """Each solve once per round, the order reversed every other round, after one warm-up round.
    Returns, per key, the list of results (one per timed round)."""
    out: dict = {k: [] for k in solves}
    for r in range(rounds + 1):
        for k in (list(solves) if r % 2 else list(solves)[::-1]):
            res = solves[k]()
            if r:
                out[k].append(res)
    return out


def _median_ratio(num: list, den: list) -> float:
    return float(np.median([a.seconds_per_iteration / b.seconds_per_iteration for a, b in zip(num, den)]))


def case(run: BenchRun, name: str, A, N: int, iters: int, repeat: int, threads: int, quick: bool,
         cache_bytes: int) -> None:
    from schedules.fusion.block_cg import BlockCG
    from schedules.fusion.cg_compare import modelled_traffic

    B = np.random.default_rng(N).standard_normal((A.shape[0], N))
    ws = working_set_bytes(A, N)
    row = {"matrix": name, "rows": A.shape[0], "nnz": A.nnz, "N": N, "iters": iters,
           "working_set_mb": ws / (1 << 20), "ws_over_cache": ws / cache_bytes,
           "resident": "DRAM" if ws > cache_bytes else "cache"}
    solvers = {key: BlockCG(A, N, **kw) for key, kw in SOLVERS.items()}
    results = interleaved({key: (lambda s=s: s.solve(B, rtol=1e-30, maxiter=iters)) for key, s in solvers.items()},
                          repeat)
    for key, runs in results.items():
        row[f"{key}_ms"] = float(np.median([r.seconds_per_iteration for r in runs])) * 1e3
        row[f"{key}_restarts"] = sum(r.restarts for r in runs)
    row["speedup_fused"] = _median_ratio(results["unfused"], results["fused"])
    row["speedup_gogeta"] = _median_ratio(results["unfused"], results["gogeta"])
    row["speedup_inline"] = _median_ratio(results["fused_host"], results["fused"])
    auto = solvers["gogeta"]
    sel = auto.selection
    row["gogeta_choice"] = "fused" if auto.fused else "unfused"
    row["gogeta_rule"] = sel.rule
    row["choice_speedup"] = sel.speedup
    row["choice_fused_ms"] = None if sel.fused_seconds is None else sel.fused_seconds * 1e3
    row["choice_unfused_ms"] = None if sel.unfused_seconds is None else sel.unfused_seconds * 1e3
    for key in ("fused", "unfused"):
        row[f"{key}_kernels_ms"] = _kernel_seconds(solvers[key], B) * 1e3
    del solvers, auto
    row["host_steps_ms"] = _host_steps_seconds(N) * 1e3
    peers = _peers_in_subprocess(name, N, iters, repeat, threads, quick)
    row["numpy_ms"], row["numpy_blas_threads"] = peers["numpy_ms"], peers["numpy_blas_threads"]
    row["scipy_cg_ms"] = peers["scipy_cg_ms"] if N == 1 else None
    row["modelled"] = modelled_traffic(A.shape[0], N, A.nnz)["reduction"]
    run.add(row)
    print(f"  {name} N={N} ({row['resident']}, {row['working_set_mb']:.0f} MB): fused {row['fused_ms']:.3f} ms, "
          f"unfused {row['unfused_ms']:.3f} ms (x{row['speedup_fused']:.2f}, modelled x{row['modelled']:.2f}), "
          f"gogeta ({row['gogeta_choice']}, {row['gogeta_rule']}) {row['gogeta_ms']:.3f} ms, "
          f"fused with host solves {row['fused_host_ms']:.3f} ms, numpy {row['numpy_ms']:.3f} ms per iteration",
          flush=True)


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
                      repeat={"type": int, "default": 3, "help": "interleaved rounds (one solve of each)"},
                      peer={"nargs": 4, "default": None, "help": argparse_suppress()})
    sizes = QUICK if args.quick else FULL
    if args.peer:
        _peer_main(args.peer, args.quick)
        return
    out = None if args.out in ("", "none") else args.out
    run = BenchRun("block_cg", out_dir=out)
    print(run.header())
    from schedules.fusion.fusion_choice import cache_bytes

    limit = cache_bytes()
    _, probe = cache_limit()
    print("read bandwidth (numpy sum): " + ", ".join(f"{mb} MB {bw:.1f} GB/s" for mb, bw in probe)
          + f"; last-level cache {limit >> 20} MB: a working set above it counts as DRAM-resident")
    for name, make in matrices(sizes).items():
        A = make()
        for N in args.n or sizes["ns"]:
            case(run, name, A, N, sizes["iters"], args.repeat, args.threads, args.quick, limit)
    print(f"\n## Block CG, milliseconds per iteration ({sizes['iters']} iterations from X0 = 0, median of "
          f"{args.repeat} interleaved rounds); speedup_* = median per-round ratio: fused = unfused/fused, "
          "gogeta = unfused/auto, inline = fused with host N x N solves / fused with in-kernel solves; "
          "gogeta = fused='auto' (DRAM-resident: fused by the traffic model; cache-resident: the faster "
          "schedule in a few interleaved iterations measured at build time); kernels = sum of the steps' kernel "
          "times; host_steps = the two N x N host solves; modelled = GOGETA SEQ-Flex / GOGETA-map DRAM words "
          "per iteration\n")
    print(run.markdown(["matrix", "N", "resident", "ws_over_cache", "fused_ms", "unfused_ms", "speedup_fused",
                        "modelled", "gogeta_ms", "gogeta_choice", "gogeta_rule", "speedup_gogeta", "fused_host_ms",
                        "speedup_inline", "numpy_ms", "scipy_cg_ms", "fused_kernels_ms", "unfused_kernels_ms",
                        "host_steps_ms"],
                       ratios={"kernels unfused/fused": ("unfused_kernels_ms", "fused_kernels_ms"),
                               "numpy/gogeta": ("numpy_ms", "gogeta_ms"),
                               "scipy cg/gogeta": ("scipy_cg_ms", "gogeta_ms")}))
    for where in ("cache", "DRAM"):
        rows = [r for r in run.rows if r["resident"] == where]
        if rows:
            print(f"\n{where}-resident ({len(rows)} cases), geomean: fused "
                  f"{geomean(r['speedup_fused'] for r in rows):.2f}x "
                  f"and gogeta {geomean(r['speedup_gogeta'] for r in rows):.2f}x faster than unfused "
                  f"(worst gogeta {min(r['speedup_gogeta'] for r in rows):.2f}x); modelled DRAM-traffic "
                  f"reduction {geomean(r['modelled'] for r in rows):.2f}x; in-kernel N x N solves "
                  f"{geomean(r['speedup_inline'] for r in rows):.2f}x faster than host ones (fused)")
    if any(r["fused_restarts"] or r["unfused_restarts"] for r in run.rows):
        print("\nnote: some timed solves restarted (a column converged within the timed iterations)")


if __name__ == "__main__":
    main()
