"""Sparse SpMM/SpMV at the numpy call and at the kernel vs MKL, MKL I/E, GraphBLAS, torch.sparse, scipy.

What a user gets from ``exe = inspect(A, n_cols=N).build(); C = exe(B)`` with
numpy ``B``, against the peers called the way their users call them, all in
one run, 2 threads each (``--threads``):

* ours at the call: ``exe(B)`` (allocates the result) and ``exe(B, out=C)``;
  ours at the kernel: ``exe.time(B)`` (TVM's ``time_evaluator``, no Python);
* MKL: ``sparse_dot_mkl.dot_product_mkl(A, B)`` (a new handle per call, no
  ``mkl_sparse_optimize``);
* MKL I/E: :mod:`bench.mkl_ie`, MKL's inspector-executor (hint + optimize
  once, then ``mkl_sparse_?_mm``/``mv`` per call);
* GraphBLAS: python-graphblas ``mxm``/``mxv`` (SuiteSparse), numpy in and out;
* torch: ``torch.sparse.mm`` on a CSR tensor (``torch.mv`` for N = 1);
* scipy ``A @ B`` (single-threaded: context only).

``exe(B)``, MKL and MKL I/E are timed taking turns, round by round
(:func:`paired_rounds`): on a shared machine a ratio of calls timed seconds
apart reads the change of load between them; ``x_mkl`` is the ratio of the
best rounds, ``x_mkl_med`` the median of the per-round ratios.

Every peer's result is checked against scipy once per case.  The corpus is
the bundled matrices plus six generated ones of at least 1 M non-zeros (HPCG
27-point, 2-D 5-point Laplacian, block FEM, R-MAT, pyamg Q1 elasticity, pyamg
Q1 diffusion).  Achieved bandwidth is ``bytes(A) + bytes(B) + bytes(C)`` over
the call time, next to the measured copy bandwidth.  The Python overhead of
the call is measured on a tiny matrix: ``exe(B, out=C)`` against the raw
packed function called with pre-made tensors.

    python -m bench.sparse_numpy_call [--quick] [--matrices LFAT5,lap2d] [--n 1,8] [--dtype float32]
"""
from __future__ import annotations

import os
import time
import timeit
import warnings
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from bench.harness import BenchRun, bench_args, copy_bandwidth, geomean, time_python
from tvm_ext.timing import settle

#: Column counts of the benchmark (N = 1 runs the SpMV executors).
N_VALUES = (1, 8, 32, 128)
#: A matrix this large or larger is "large" in the summary.
LARGE_NNZ = 1_000_000
PEERS = ("mkl", "mkl_ie", "graphblas", "torch", "scipy")
#: Phases of the warm inspect + build reported in executor runs (the rest: validation, the selector).
WARM_PHASES = ("features", "measure", "format", "build")


def _matrices(quick: bool) -> dict[str, Callable[[], sp.csr_array]]:
    from tvm_ext.workloads import block_fem, fem_elasticity, lap2d, lap3d, list_matrices, load_matrix, rmat

    if quick:
        return {"LFAT5": lambda: load_matrix("LFAT5"), "lap2d": lambda: lap2d(40)}
    mats: dict[str, Callable[[], sp.csr_array]] = {
        name: (lambda name=name: load_matrix(name)) for name in sorted(list_matrices())}
    mats.update({
        "hpcg27": lambda: lap3d(48, 27),             # HPCG's 27-point stencil, 2.8 M nnz
        "lap2d": lambda: lap2d(600),                 # 5-point, 1.8 M nnz
        "fem3x3": lambda: block_fem(40000, 3, 3),     # 3.2 M nnz in dense 3x3 blocks
        "rmat17": lambda: rmat(17),                  # Graph500 R-MAT, 2^17 vertices
        "elasticity": lambda: fem_elasticity(300),   # pyamg Q1 plane elasticity, 2.3 M nnz
        "diffusion_fe": _diffusion_fe,               # pyamg Q1 (9-point) diffusion, 2.2 M nnz
    })
    return mats


def _diffusion_fe() -> sp.csr_array:
    """pyamg's bilinear finite-element diffusion stencil on a 500 x 500 grid."""
    from pyamg.gallery import diffusion_stencil_2d, stencil_grid

    return sp.csr_array(stencil_grid(diffusion_stencil_2d(epsilon=0.1, theta=0.5, type="FE"),
                                     (500, 500), format="csr"))


def _use_mkl_rt() -> None:
    """Point ``sparse_dot_mkl`` at the ``mkl`` wheel's runtime (it reads ``$MKL_RT`` at import)."""
    from bench.mkl_ie import mkl_rt_path

    if not os.environ.get("MKL_RT"):
        path = mkl_rt_path()
        if path:
            os.environ["MKL_RT"] = path


def _peers(A: sp.csr_array, B: np.ndarray, n: int, threads: int) -> dict[str, Callable[[], Any]]:
    """Peer name -> zero-argument numpy call (numpy in, numpy out); missing peers are left out."""
    out: dict[str, Callable[[], Any]] = {"scipy": lambda: A @ B}
    try:
        from sparse_dot_mkl import dot_product_mkl

        out["mkl"] = lambda: dot_product_mkl(A, B)
    except ImportError:
        pass
    try:
        from bench import mkl_ie

        mkl_ie.set_threads(threads)
        handle = mkl_ie.MklCsr(A, n)
        out["mkl_ie"] = lambda: handle.matmul(B)
    except (ImportError, OSError):
        pass
    try:
        import graphblas as gb

        gb.ss.config["nthreads"] = threads
        Ag = gb.io.from_scipy_sparse(A)
        if B.ndim == 1:
            out["graphblas"] = lambda: Ag.mxv(gb.Vector.from_dense(B)).new().to_dense(fill_value=0)
        else:
            out["graphblas"] = lambda: Ag.mxm(gb.Matrix.from_dense(B)).new().to_dense(fill_value=0)
    except ImportError:
        pass
    try:
        import torch

        torch.set_num_threads(threads)
        At = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                     torch.from_numpy(A.indices.astype(np.int64)),
                                     torch.from_numpy(A.data), size=A.shape)
        if B.ndim == 1:
            out["torch"] = lambda: torch.mv(At, torch.from_numpy(B)).numpy()
        else:
            out["torch"] = lambda: torch.sparse.mm(At, torch.from_numpy(B)).numpy()
    except ImportError:
        pass
    return out


#: Peers timed in the same rounds as ``exe(B)``, taking turns with it (the ratios the goal reads).
PAIRED = ("mkl", "mkl_ie")


def paired_rounds(ours: Callable[[], Any], peers: dict[str, Callable[[], Any]], *, rounds: int,
                  min_repeat_s: float) -> dict[str, list[float]]:
    """Seconds per call of ``ours`` and each peer, timed taking turns: each round times ``ours``
    then every peer (one :func:`time_python` repeat of ``min_repeat_s`` each, after
    :func:`settle` lets the previous library's workers park), so a ratio of two of them compares
    calls made under the same load of the machine, not calls seconds apart.

    >>> r = paired_rounds(lambda: sum(range(100)), {"peer": lambda: sum(range(200))}, rounds=2,
    ...                   min_repeat_s=0.001)
    >>> sorted(r), len(r["ours"])
    (['ours', 'peer'], 2)
    """
    out: dict[str, list[float]] = {"ours": [], **{p: [] for p in peers}}
    for _ in range(rounds):
        for who, fn in (("ours", ours), *peers.items()):
            settle()
            out[who].append(time_python(fn, repeat=1, min_repeat_s=min_repeat_s).min)
    return out


def _non_peer_blas() -> dict[str, int]:
    """threadpoolctl limits of one thread for every loaded BLAS but MKL: numpy's and scipy's
    OpenBLAS pools stay out of the way of TVM's threads while MKL, a timed peer, keeps its
    ``--threads`` (``user_api="blas"`` would hold MKL to one thread too)."""
    from threadpoolctl import threadpool_info

    return {lib["prefix"]: 1 for lib in threadpool_info()
            if lib["user_api"] == "blas" and lib["internal_api"] != "mkl"}


def call_overhead(dtype: str = "float32", loops: int = 20000) -> dict[str, float]:
    """Microseconds per call on a 16 x 16 matrix: the raw packed function with
    pre-made tensors, ``exe(B, out=C)`` and ``exe(B)`` with numpy."""
    from schedules.sparse import inspect
    from tvm_ext.workloads import lap2d
    from tvm_ext.zero_copy import as_tvm_view

    res: dict[str, float] = {}
    for n in (1, 8):
        exe = inspect(lap2d(4), n_cols=n, dtype=dtype, format="csr").build()
        shape_b, shape_c = ((16,), (16,)) if n == 1 else ((16, n), (16, n))
        B, C = np.ones(shape_b, dtype), np.empty(shape_c, dtype)
        bt, ct = as_tvm_view(B, alignment=0), as_tvm_view(C, alignment=0)
        main = exe.mod["main"]
        args = (*exe._arrays, bt, ct, ct, *exe._scalars, 1.0, 0.0)
        calls = {"raw": lambda: main(*args), "out": lambda: exe(B, out=C), "alloc": lambda: exe(B)}
        best = {k: float("inf") for k in calls}
        for _ in range(7):  # interleaved, best of 7: the machine's noise hits all three alike
            for k, f in calls.items():
                best[k] = min(best[k], timeit.timeit(f, number=loops) / loops * 1e6)
        res.update({f"N{n}_{k}_us": v for k, v in best.items()})
        res[f"N{n}_overhead_us"] = best["out"] - best["raw"]
    return res


def _bytes_moved(A: sp.csr_array, n: int) -> int:
    """Bytes of A (values, column indices, row pointers), B and C: the compulsory traffic."""
    m, k = A.shape
    item = A.data.dtype.itemsize
    return A.nnz * (item + 4) + (m + 1) * 4 + item * n * (k + m)


def _close(got, ref, dtype: str) -> bool:
    got = np.asarray(got).reshape(ref.shape)
    scale = max(float(np.abs(ref).max()) if ref.size else 0.0, 1.0)
    rtol = 1e-3 if dtype == "float32" else 1e-9
    return bool(np.allclose(got, ref, rtol=rtol, atol=rtol * scale))


def _median_warm_inspect(A: sp.csr_array, n: int, repeats: int = 3,
                         after: Callable[[], Any] | None = None) -> tuple[Any, float, float]:
    """``inspect(A, n).build()`` with its kernels already in this process, ``repeats`` times: the
    plan of the median run, its seconds, and its build's seconds (one run on 2 cores reads the
    inspector threads' and the timed candidates' contention as much as their cost).

    Each run starts the way a process finds TVM between two pieces of work: with ``after=None``,
    after :func:`settle` (TVM's pool workers, which spin for tens of milliseconds after every
    parallel kernel, parked, as they are when ``inspect`` is the first work after a pause); with
    ``after`` (a product), right after calling it: the inspect a user runs straight after a
    product, whose inspector threads share the cores with the still-spinning workers.
    """
    from schedules.sparse import inspect

    runs = []
    for _ in range(repeats):
        if after is None:
            settle()  # the previous run's timed candidates left TVM's workers spinning
        else:
            after()
        t0 = time.perf_counter()
        plan = inspect(A, n_cols=n)
        t_select = time.perf_counter()
        plan.build()
        t1 = time.perf_counter()
        runs.append((t1 - t0, t1 - t_select, plan))
    runs.sort(key=lambda r: r[0])
    seconds, build, plan = runs[len(runs) // 2]
    return plan, seconds, build


def run_case(name: str, A: sp.csr_array, n: int, repeat: int, min_s: float, threads: int,
             rng: np.random.Generator) -> dict[str, Any]:
    """One matrix x N: ours at the call and the kernel, every peer, ratios and bandwidth."""
    from threadpoolctl import threadpool_limits

    from schedules.sparse import inspect

    dtype = A.data.dtype.name
    m, k = A.shape
    B = rng.uniform(-1, 1, k if n == 1 else (k, n)).astype(dtype)
    ref = A @ B
    t0 = time.perf_counter()
    plan = inspect(A, n_cols=n)
    t_inspect = time.perf_counter() - t0
    exe = plan.build()
    if not _close(exe(B), ref, dtype):
        raise AssertionError(f"{name} N={n}: our {plan.label} executor disagrees with scipy")
    out = np.empty(ref.shape, dtype)
    peers = _peers(A, B, n, threads)
    for peer, fn in list(peers.items()):
        if not _close(fn(), ref, dtype):
            print(f"  WRONG RESULT from {peer} on {name} N={n}: not timed")
            del peers[peer]
    paired = {p: peers[p] for p in PAIRED if p in peers}
    with threadpool_limits(limits=_non_peer_blas()):  # numpy's BLAS pool must not fight TVM's
        rounds = paired_rounds(lambda: exe(B), paired, rounds=repeat, min_repeat_s=min_s)
        t_call = min(rounds["ours"])
        t_out = time_python(lambda: exe(B, out=out), repeat=repeat, min_repeat_s=min_s).min
        t_kernel = exe.time(B, repeat=repeat, min_repeat_ms=int(min_s * 1e3)).min
    warm, t_warm, t_build = _median_warm_inspect(A, n)
    _, t_hot, _ = _median_warm_inspect(A, n, after=lambda: exe(B, out=out))
    meas = warm.choice.measurement
    phases = {"features": warm.features_seconds, "measure": meas.spent_seconds if meas else 0.0,
              "format": warm.inspect_seconds, "build": t_build}
    row: dict[str, Any] = {"matrix": name, "rows": m, "nnz": A.nnz, "N": n, "dtype": dtype,
                           "format": plan.label, "inspect_ms": t_inspect * 1e3,
                           "inspect_runs": t_inspect / t_call, "inspect_build_ms": t_warm * 1e3,
                           "inspect_build_runs": t_warm / t_call, "inspect_mnnz_s": A.nnz / t_warm / 1e6,
                           "inspect_hot_runs": t_hot / t_call,
                           **{f"warm_{k}_runs": v / t_call for k, v in phases.items()},
                           "ours_ms": t_call * 1e3,
                           "ours_out_ms": t_out * 1e3, "kernel_ms": t_kernel * 1e3}
    for peer, fn in peers.items():
        if peer in paired:
            row[f"{peer}_ms"] = min(rounds[peer]) * 1e3
            row[f"x_{peer}_med"] = float(np.median(np.array(rounds[peer]) / np.array(rounds["ours"])))
            continue
        settle()  # the previous library's worker threads park before this one is timed
        row[f"{peer}_ms"] = time_python(fn, repeat=repeat, min_repeat_s=min_s).min * 1e3
    for peer in PAIRED:
        if row.get(f"{peer}_ms"):
            row[f"x_{peer}"] = row[f"{peer}_ms"] / row["ours_ms"]
            row[f"kx_{peer}"] = row[f"{peer}_ms"] / row["kernel_ms"]
    row["gbs"] = _bytes_moved(A, n) / t_call / 1e9
    return row


def main() -> None:
    args = bench_args(__doc__.splitlines()[0],
                      matrices={"default": None, "help": "comma list of matrix names"},
                      n={"default": None, "help": "comma list of N (1 = SpMV)"},
                      dtype={"default": "float32", "help": "float32 or float64"})
    _use_mkl_rt()
    from tvm_ext.workloads import canonical_csr

    warnings.simplefilter("ignore")  # torch's "sparse CSR support is in beta"
    mats = _matrices(args.quick)
    if args.matrices:
        mats = {k: v for k, v in mats.items() if k in args.matrices.split(",")}
    ns = tuple(int(x) for x in args.n.split(",")) if args.n else N_VALUES
    repeat, min_s = (3, 0.01) if args.quick else (5, 0.05)
    copy_bw = copy_bandwidth(64 << 20 if args.quick else 256 << 20)
    overhead = call_overhead(args.dtype, loops=2000 if args.quick else 20000)
    run = BenchRun("sparse_numpy_call", out_dir=args.out)
    load_before = os.getloadavg()[0]
    rng = np.random.default_rng(0)
    for name, load in mats.items():
        A = canonical_csr(load(), dtype=args.dtype)
        for n in ns:
            row = run_case(name, A, n, repeat, min_s, args.threads, rng)
            row["copy_gbs"] = copy_bw / 1e9
            run.add(row)
            print(f"  {name} N={n}: ours {row['ours_ms']:.3f} ms (kernel {row['kernel_ms']:.3f}), "
                  f"MKL {row.get('mkl_ms', float('nan')):.3f}, MKL I/E {row.get('mkl_ie_ms', float('nan')):.3f}",
                  flush=True)
    run.add({"matrix": "call-overhead", **overhead})
    run.add({"matrix": "load-average", "before": load_before, "after": os.getloadavg()[0]})
    _report(run, copy_bw, overhead)


def _summary(rows: list[dict], key: str) -> str:
    vals = [r[key] for r in rows if r.get(key)]
    if not vals:
        return "n/a"
    worst = min(rows, key=lambda r: r.get(key) or float("inf"))
    return f"geomean {geomean(vals):.2f}x, worst {min(vals):.2f}x ({worst['matrix']} N={worst['N']})"


def _report(run: BenchRun, copy_bw: float, overhead: dict[str, float]) -> None:
    rows = [r for r in run.rows if "N" in r]
    print(run.header())
    load = next((r for r in run.rows if r.get("matrix") == "load-average"), None)
    if load:
        print(f"1-minute load average {load['before']:.2f} before, {load['after']:.2f} after "
              f"(a run on a loaded machine reads contention, not cost)")
    print(f"copy bandwidth {copy_bw / 1e9:.1f} GB/s; gbs = (bytes of A + B + C) / time of exe(B)\n")
    cols = ["matrix", "N", "nnz", "format", "ours_ms", "ours_out_ms", "kernel_ms"] + \
        [f"{p}_ms" for p in PEERS] + ["x_mkl", "x_mkl_med", "x_mkl_ie", "x_mkl_ie_med", "kx_mkl", "kx_mkl_ie",
                                      "gbs", "inspect_runs", "inspect_build_runs", "inspect_hot_runs",
                                      "inspect_mnnz_s"] + \
        [f"warm_{k}_runs" for k in WARM_PHASES]
    keep = BenchRun("sparse_numpy_call", out_dir=None)
    keep.rows = rows
    print(keep.markdown(cols))
    large = [r for r in rows if r["nnz"] >= LARGE_NNZ]
    print("\nx_* = peer time / ours at the numpy call (exe(B)), best rounds; x_*_med = median of the "
          "per-round ratios (ours and MKL, MKL I/E timed taking turns); kx_* = peer time / our kernel alone")
    print("inspect_runs = first inspect(A, N) (kernels loaded from the disk cache) / exe(B); "
          "inspect_build_runs = inspect(A, N).build() again, kernels in memory (warm; median of 3, each "
          "after TVM's workers parked), / exe(B); inspect_hot_runs = the same right after a product "
          "(its workers still spinning on the cores the inspector's threads use); "
          "inspect_mnnz_s = nnz / that time, in millions; warm_*_runs = its phases / exe(B): the "
          "features (sampled), the candidates' timing, the chosen format's construction, the build")
    for label, sub in (("all", rows), (f">= {LARGE_NNZ // 10**6} M nnz", large)):
        if not sub:
            continue
        print(f"{label} ({len(sub)} cases): vs MKL {_summary(sub, 'x_mkl')}; "
              f"vs MKL I/E {_summary(sub, 'x_mkl_ie')}")
        print(f"{' ' * len(label)}   per-round median: vs MKL {_summary(sub, 'x_mkl_med')}; "
              f"vs MKL I/E {_summary(sub, 'x_mkl_ie_med')}")
        print(f"{' ' * len(label)}   kernel: vs MKL {_summary(sub, 'kx_mkl')}; "
              f"vs MKL I/E {_summary(sub, 'kx_mkl_ie')}")
    for n in (1, 8):
        print(f"call overhead N={n}: raw packed call {overhead[f'N{n}_raw_us']:.2f} us, "
              f"exe(B, out=C) {overhead[f'N{n}_out_us']:.2f} us (+{overhead[f'N{n}_overhead_us']:.2f} us), "
              f"exe(B) {overhead[f'N{n}_alloc_us']:.2f} us")
    xm = [r["x_mkl"] for r in rows if r.get("x_mkl")]
    xi = [r["x_mkl_ie"] for r in rows if r.get("x_mkl_ie")]
    xl = [r["x_mkl"] for r in large if r.get("x_mkl")]
    runs8 = [r["inspect_build_runs"] for r in large if r["N"] == 8]
    if runs8:
        worst = max((r for r in large if r["N"] == 8), key=lambda r: r["inspect_build_runs"])
        hot = max((r for r in large if r["N"] == 8), key=lambda r: r["inspect_hot_runs"])
        print(f"inspect+build (warm) at N=8, >= 1M nnz: worst {worst['inspect_build_runs']:.1f} runs "
              f"({worst['matrix']}, {worst['inspect_mnnz_s']:.0f} M nnz/s); right after a product "
              f"worst {hot['inspect_hot_runs']:.1f} runs ({hot['matrix']})")
    met = (xm and xi and geomean(xm) >= 1.5 and geomean(xi) >= 1.2 and (not xl or min(xl) >= 1.0)
           and max(overhead["N1_overhead_us"], overhead["N8_overhead_us"]) <= 3.0
           and (not runs8 or max(runs8) <= 20))
    print("goal: geomean >= 1.5x MKL and >= 1.2x MKL I/E at the call, no >= 1M-nnz case below 1x MKL, "
          f"call overhead <= 3 us, warm inspect+build <= 20 runs at N=8 on >= 1M nnz (TVM's workers parked; "
          f"the figure right after a product is printed above, not part of the goal) "
          f"-> {'met' if met else 'not met'}")


if __name__ == "__main__":
    main()
