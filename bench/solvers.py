"""Benchmark: wavefront solvers and PCG against scipy and pyamg (Venkat 2016 ch. 7, Tables 7.1/7.2).

Every number is measured in this run, on matrices of >= 1 M non-zeros (the
``--quick`` corpus is small, for smoke runs):

* HPCG's 27-point 3-D Laplacian ``lap3d(n, points=27)``, the 5-point
  ``lap2d(n)``, the 7-point ``lap3d(n)`` and a pyamg FEM assembly
  (``pyamg.gallery.linear_elasticity``, Q1 elements, 2 dof per node).

Tables:

0. **Memory bandwidth** of one core and of all threads (a vectorised TIR
   copy of an L3-resident and of a DRAM-sized vector): a sweep that one core
   already runs at the machine's bandwidth cannot speed up.
1. **Inspector** stages (dependence graph, levels by the compiled serial
   pass, by the vectorised frontier BFS and by the parallel TIR BFS, reorder,
   and the point-to-point partition) and throughput.
2. **Triangular solve** (lower triangle of ``A``) and **one symmetric
   Gauss-Seidel sweep**: serial TVM executor (same row kernel, natural order),
   the same kernel on one thread in *level order* (no parallelism: it shows
   what the reordering alone gives, since consecutive rows of a level do not
   wait for each other) and in the point-to-point executor's order
   (``p2porder``: its partitions one after another, each in its run order,
   level or super-row, ``p2p_order``), the barrier executor (level by level,
   thin levels merged) and the point-to-point executor, next to
   ``scipy.sparse.linalg.spsolve_triangular`` and pyamg's compiled
   ``gauss_seidel(sweep="symmetric")``.  Kernel times are the best single
   call of many, each executor called in turn with the serial one (on a shared
   machine the best call is the least disturbed one, and taking turns exposes
   both to the same load).  In pairs only two copies of the matrix share the
   last-level cache between calls, so a matrix counted L3-resident is timed
   so: racing all five executors at once streamed ``lap3d(40, 27)``'s 11 MB
   triangle from DRAM, which left the one-thread sweep as fast but held the
   point-to-point solve to DRAM bandwidth (1.37x the serial sweep, 1.6x in
   pairs, same run).  Goal: >= 1.6x the serial TVM sweep on 2 threads where
   levels average >= 100 rows.  Beside it, **what bounds the speed-up**: the
   bytes a sweep must move, the GB/s the serial and point-to-point sweeps
   reach, and two ceilings: the all-thread copy bandwidth of the level the
   data lives in (L3 or DRAM, table 0) over the serial sweep's GB/s (a
   memory-bound sweep gains no more), and threads x serial / p2p order (what
   the point-to-point executor's row order costs one thread, it costs each of
   them).
3. **PCG time-to-solution** (``tol`` relative residual, inspector included)
   with the SGS preconditioner against ``scipy.sparse.linalg.cg`` with the
   *same* preconditioner, ``M^-1 r = (D+U)^-1 D (D+L)^-1 r`` built from
   ``spsolve_triangular`` as a ``LinearOperator``; and with ILU(0).  Goal:
   >= 2x scipy.
4. **Inspector overhead in PCG iterations** (Table 7.2's measure: inspector
   time / time of one PCG iteration) next to the dissertation's numbers, both
   as the dissertation counts it (dependence graph + level sets) and in full
   (plus reordering the matrix, splitting its diagonal and the p2p partition).

Run ``python -m bench.solvers [--quick] [--threads N]``.
"""
from __future__ import annotations

import os
import statistics
import time

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from bench.harness import BenchRun, bench_args, geomean, time_python

QUICK = {"lap2d": 120, "lap3d7": 20, "lap3d27": 14, "elasticity": 40, "hpcg": 16}
FULL = {"lap2d": 500, "lap3d7": 60, "lap3d27": 40, "elasticity": 250, "hpcg": 64}

#: Venkat 2016 Table 7.2, inspector overhead in PCG iterations (17 SuiteSparse matrices, 12 cores)
TABLE_7_2_OVERHEAD_ITERS = [3.48, 22.49, 25.20, 4.71, 7.53, 7.11, 7.75, 8.86, 8.70, 7.63, 15.73,
                            4.56, 2.92, 3.00, 3.25, 3.60, 4.04]


def matrices(sizes: dict) -> dict[str, sp.csr_array]:
    import pyamg

    from tvm_ext.workloads import canonical_csr, lap2d, lap3d

    fem = pyamg.gallery.linear_elasticity((sizes["elasticity"], sizes["elasticity"]))[0]
    return {
        f"lap3d({sizes['lap3d27']}) 27pt HPCG": lap3d(sizes["lap3d27"], 27),
        f"lap2d({sizes['lap2d']}) 5pt": lap2d(sizes["lap2d"]),
        f"lap3d({sizes['lap3d7']}) 7pt": lap3d(sizes["lap3d7"]),
        f"pyamg elasticity({sizes['elasticity']}^2) FEM": canonical_csr(sp.csr_array(fem)),
    }


def _copy_funcs():
    """TIR stream kernels ``y = x`` over ``chunks`` contiguous chunks: one parallel
    (``T.parallel``) and one serial twin.  The inner loop has no reduction, so
    LLVM vectorises it and the copy runs at the memory system's speed."""
    import tvm
    from tvm.script import tirx as T

    src = """
@T.prim_func
def copy(x_h: T.handle, y_h: T.handle, chunk: T.int32, chunks: T.int32):
    n = T.int32()
    x = T.match_buffer(x_h, (n,), "float64")
    y = T.match_buffer(y_h, (n,), "float64")
    for c in LOOP(chunks):
        lo = T.bind(c * chunk)
        for k in range(T.min(chunk, n - lo)):
            y[lo + k] = x[lo + k]
"""
    funcs = {}
    for name, loop in (("copy", "T.parallel"), ("copy_serial", "range")):
        f = tvm.script.from_source(src.replace("LOOP", loop), extra_vars={"T": T})
        funcs[name] = f.with_attr("global_symbol", name)
    return tvm.IRModule(funcs)


def bandwidth(run: BenchRun, threads: int) -> dict[str, float]:
    """Copy bandwidth (GB/s, read + write) of one core and of ``threads`` threads, on an
    L3-resident and a DRAM-sized pair of vectors: a vectorised TIR copy, its serial twin
    against its chunked parallel version, called in turn (best call of many).

    Returns the all-thread figures by working set (``"L3"``, ``"DRAM"``), the
    ceilings :func:`sweep_bound` holds the sweeps against."""
    import tvm

    from tvm_ext.kernel_cache import get_or_build

    mod = get_or_build(("bench.solvers.copy", 1), _copy_funcs)
    ceilings = {}
    for key, label, nbytes in (("L3", "L3-resident (2 x 4 MiB)", 4 << 20),
                               ("DRAM", "DRAM (2 x 256 MiB)", 256 << 20)):
        n = nbytes // 8
        x = tvm.runtime.tensor(np.ones(n), tvm.cpu(0))
        y = tvm.runtime.empty((n,), "float64", tvm.cpu(0))
        chunk = -(-n // threads)
        rounds = 100 if nbytes < (64 << 20) else 6
        t = _race({"one": lambda: mod["copy_serial"](x, y, n, 1),
                   "all": lambda: mod["copy"](x, y, chunk, threads)}, rounds=rounds, min_s=0.5)
        run.add({"working set": label, "bytes": 2 * nbytes, "threads": threads,
                 "one_core_gbs": 2 * nbytes / t["one"] / 1e9,
                 "all_threads_gbs": 2 * nbytes / t["all"] / 1e9})
        ceilings[key] = 2 * nbytes / t["all"] / 1e9
    return ceilings


def sweep_bytes(executor, passes: int) -> int:
    """Bytes one sweep must move at the least (``passes`` row passes: 1 for a
    triangular solve, 2 for symmetric Gauss-Seidel): every stored off-diagonal
    entry (value + int32 column), and per row its ``indptr`` entry, ``1/diag``,
    ``b`` and the written ``x``.  Reads of ``x[j]`` are taken as cache hits.

    >>> from schedules.sparse.triangular import TriangularSolver
    >>> import scipy.sparse as sp
    >>> sweep_bytes(TriangularSolver(sp.eye_array(4, format="csr")).executor, 1)
    112
    """
    n, vb = executor.n, np.dtype(executor.dtype).itemsize
    return passes * (executor.offdiag_nnz * (vb + 4) + n * (4 + 3 * vb))


def sweep_bound(nbytes: int, serial_s: float, ceilings: dict[str, float],
                working_set: int | None = None) -> tuple[str, float]:
    """Where a sweep's data lives between calls (``"L3"`` when its working set,
    by default ``nbytes``, fits in the last-level cache, else ``"DRAM"``) and
    the most any parallel executor can gain over the serial sweep if it is
    memory-bound: that level's all-thread copy bandwidth over the serial
    sweep's achieved bandwidth (``nbytes`` moved in ``serial_s``).

    >>> sweep_bound(10 << 20, 1e-3, {"L3": 100.0, "DRAM": 30.0})[0]
    'L3'
    """
    from tvm_ext.target import hardware_facts

    f = hardware_facts()
    ws = nbytes if working_set is None else working_set
    where = "L3" if ws <= 0.75 * f.llc_bytes else "DRAM"
    return where, ceilings[where] / (nbytes / serial_s / 1e9)


def _best_call(fn, reps: int, min_s: float = 0.3) -> float:
    """Best single call of at least ``reps`` calls (and at least ``min_s`` seconds)."""
    fn()
    best, spent, k = float("inf"), 0.0, 0
    while k < reps or spent < min_s:
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best, spent, k = min(best, dt), spent + dt, k + 1
        if k >= 20 * reps:
            break
    return best


def inspectors(run: BenchRun, name: str, A: sp.csr_array) -> None:
    """Level-set inspector stages, with the three level algorithms (best of 3 each),
    and the point-to-point partition of the schedule."""
    from schedules.sparse.level_sets import level_sets
    from schedules.sparse.p2p import p2p_schedule, pool_threads

    row = {"matrix": name, "rows": A.shape[0], "nnz": A.nnz}
    for method in ("serial", "frontier", "parallel"):
        level_sets(A, method=method)
        best = min((level_sets(A, method=method) for _ in range(3)),
                   key=lambda s: s.inspector_seconds)
        # serial: levels read off the matrix (no graph); frontier/parallel: Listing 7.3's graph + BFS
        row[f"{method}_graph_levels_s"] = best.seconds["graph"] + best.seconds["levels"]
        row[f"{method}_total_s"] = best.inspector_seconds
        if method == "serial":
            row.update(levels=best.levels, reorder_s=best.seconds["reorder"])
        if method == "parallel":
            row["parallel_graph_s"] = best.seconds["graph"]
    # CPU time of the default inspector: unlike wall time it does not grow when
    # other processes share the cores (the inspector is mostly serial)
    t0 = time.process_time()
    level_sets(A)
    row["serial_total_cpu_s"] = time.process_time() - t0
    s = level_sets(A)
    row["p2p_partition_s"] = min(_timed(lambda: p2p_schedule(s, pool_threads())) for _ in range(3))
    row["mnnz_per_s"] = A.nnz / row["serial_total_s"] / 1e6
    run.add(row)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _call(executor, n: int, mode: int):
    """A no-argument call of one ``mode`` sweep of ``executor`` on fixed vectors."""
    from schedules.sparse.triangular import wrap
    from tvm_ext.zero_copy import empty_aligned

    b = empty_aligned(n, executor.dtype)
    b[:] = np.random.default_rng(0).standard_normal(n)
    x = empty_aligned(n, executor.dtype)
    x[:] = 0.0
    bt, xt = wrap(b), wrap(x)
    return lambda: executor.run(bt, xt, mode, 1)


def _race(fns: dict, rounds: int = 150, min_s: float = 1.0) -> dict[str, float]:
    """Best single call of each function, the functions called in turn (round robin).

    Taking turns gives every contender the same machine: on a shared machine
    a load change then hits all of them, not just the one timed at that moment.
    """
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    spent, k = 0.0, 0
    while k < rounds or (spent < min_s and k < 20 * rounds):
        for key, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
            best[key] = min(best[key], dt)
            spent += dt
        k += 1
    return best


def _race_with(base: str, fns: dict) -> dict[str, float]:
    """Best single call of each function, each raced (:func:`_race`) against ``base``
    alone; ``base``'s time is its best over all the races.  Two contenders' data
    stay in the last-level cache where five would not."""
    best = {base: float("inf")}
    for key in fns:
        if key != base:
            t = _race({base: fns[base], key: fns[key]})
            best[base], best[key] = min(best[base], t[base]), t[key]
    return best


def sweeps(run: BenchRun, name: str, A: sp.csr_array, ceilings: dict[str, float]) -> None:
    from pyamg.relaxation.relaxation import gauss_seidel

    from schedules.sparse.triangular import FORWARD, SYMMETRIC, GaussSeidel, TriangularSolver

    n = A.shape[0]
    L = sp.csr_array(sp.tril(A))
    row = {"matrix": name, "rows": n, "nnz": A.nnz}
    serial = TriangularSolver(L, parallel=False)
    in_order = TriangularSolver(L, min_parallel_rows=np.iinfo(np.int32).max)  # level order, 1 thread
    barrier = TriangularSolver(L)
    p2p = TriangularSolver(L, sync="p2p")
    s = barrier.schedule
    row.update(levels=s.levels, rows_per_level=s.parallelism,
               p2p_waits=p2p.executor.schedule.waits[0])
    trsv = {"serial": serial.executor, "levelorder": in_order.executor, "barrier": barrier.executor,
            "p2p": p2p.executor, "p2porder": _one_thread(p2p.executor)}
    for k, t in _race_with("serial", {k: _call(v, n, FORWARD) for k, v in trsv.items()}).items():
        row[f"trsv_{k}_s"] = t
    row["p2p_order"] = "super_rows" if p2p.executor.schedule.super_rows else "level"
    row["p2p_task_levels"] = p2p.executor.schedule.levels
    b = np.random.default_rng(1).standard_normal(n)
    threads = p2p.executor.schedule.threads
    _bounds(row, "trsv", serial.executor, 1, ceilings, threads)
    row["trsv_scipy_s"] = time_python(lambda: spla.spsolve_triangular(L, b, lower=True),
                                      repeat=3, min_repeat_s=0.0).min
    gs = {k: GaussSeidel(A, **kw).executor for k, kw in
          (("serial", dict(parallel=False)),
           ("levelorder", dict(min_parallel_rows=np.iinfo(np.int32).max)),
           ("barrier", {}), ("p2p", dict(sync="p2p")))}
    gs["p2porder"] = _one_thread(gs["p2p"])
    for k, t in _race_with("serial", {k: _call(ex, n, SYMMETRIC) for k, ex in gs.items()}).items():
        row[f"sgs_{k}_s"] = t
    x = np.zeros(n)
    row["sgs_pyamg_s"] = _best_call(lambda: gauss_seidel(A, x, b, iterations=1, sweep="symmetric"),
                                    50)
    row["trsv_best_s"] = min(row["trsv_barrier_s"], row["trsv_p2p_s"])
    _bounds(row, "sgs", gs["serial"], 2, ceilings, threads)
    row["sgs_segments"] = gs["p2p"].schedule.segments[0]
    # share of the point-to-point calls that its "auto" policy ran as the one-thread replay
    row["trsv_p2p_replayed"] = p2p.executor.replayed / max(p2p.executor.calls, 1)
    row["sgs_p2p_replayed"] = gs["p2p"].replayed / max(gs["p2p"].calls, 1)
    row["sgs_best_s"] = min(row["sgs_barrier_s"], row["sgs_p2p_s"])
    run.add(row)


def _one_thread(p2p_executor):
    """The serial sweep kernel on the point-to-point executor's row order (its
    partitions one after the other, each in its own run order): what that order
    costs one thread."""
    from schedules.sparse.triangular import SweepExecutor, executor_segments

    ps = p2p_executor.schedule
    seg_ptr, seg_par = executor_segments(None, p2p_executor.n)
    return SweepExecutor(ps.matrix, seg_ptr=seg_ptr, seg_par=seg_par, parallel=False, perm=ps.perm,
                         what="p2p order")


def _bounds(row: dict, what: str, executor, passes: int, ceilings: dict[str, float],
            threads: int) -> None:
    """Bytes, achieved GB/s and the two ceilings of one sweep's parallel speed-up:
    memory bandwidth (:func:`sweep_bound`; the working set is one pass's bytes of
    the two executors raced together, the traffic ``passes`` times one's) and the
    row order (``threads`` x the
    serial sweep over the same kernel on one thread in the point-to-point
    executor's row order: what that order costs one thread, it costs each)."""
    serial, order = row[f"{what}_serial_s"], row[f"{what}_p2porder_s"]
    nbytes = sweep_bytes(executor, passes)
    where, bw_x = sweep_bound(nbytes, serial, ceilings, working_set=2 * sweep_bytes(executor, 1))
    row.update({f"{what}_mb": nbytes / 1e6, f"{what}_lives_in": where,
                f"{what}_serial_gbs": nbytes / serial / 1e9,
                f"{what}_p2p_gbs": nbytes / row[f"{what}_p2p_s"] / 1e9,
                f"{what}_bw_bound_x": bw_x, f"{what}_order_bound_x": threads * serial / order,
                f"{what}_bound_x": min(bw_x, threads * serial / order)})


def _scipy_sgs_operator(A: sp.csr_array) -> spla.LinearOperator:
    """SGS ``M^-1 r = (D+U)^-1 D (D+L)^-1 r`` on scipy's ``spsolve_triangular``."""
    DL, DU, d = sp.csr_array(sp.tril(A)), sp.csr_array(sp.triu(A)), A.diagonal()

    def apply(r):
        y = spla.spsolve_triangular(DL, r, lower=True)
        return spla.spsolve_triangular(DU, d * y, lower=False)

    return spla.LinearOperator(A.shape, matvec=apply, dtype=A.dtype)


def pcg_rows(run: BenchRun, name: str, A: sp.csr_array, tol: float, maxiter: int) -> None:
    from schedules.sparse.solvers import PCG

    n = A.shape[0]
    b = np.random.default_rng(2).standard_normal(n)
    row = {"matrix": name, "rows": n, "nnz": A.nnz, "tol": tol}
    for pc in ("sgs", "ilu0"):
        for sync in ("barrier", "p2p"):
            PCG(A, preconditioner=pc, sync=sync)  # compile/load kernels, first-touch
            t0 = time.perf_counter()
            solver = PCG(A, preconditioner=pc, sync=sync)
            res = solver.solve(b, rtol=tol, maxiter=maxiter)
            total = time.perf_counter() - t0
            key = f"{pc}_{sync}"
            row[f"{key}_total_s"] = total
            row[f"{key}_iters"] = res.iterations
            row[f"{key}_converged"] = res.converged
            row[f"{key}_inspector_s"] = res.inspector_seconds
            row[f"{key}_s_per_iter"] = res.seconds_per_iteration
            row[f"{key}_overhead_iters"] = res.inspector_overhead_iterations
            row[f"{key}_true_residual"] = res.true_residual
            if pc == "sgs":   # Table 7.2 counts graph construction + level sets only
                counted = res.inspector_breakdown["graph"] + res.inspector_breakdown["levels"]
                row[f"{key}_graph_levels_s"] = counted
                row[f"{key}_overhead_iters_diss"] = counted / res.seconds_per_iteration
        row[f"{pc}_best_total_s"] = min(row[f"{pc}_barrier_total_s"], row[f"{pc}_p2p_total_s"])
    count = [0]

    def cb(_):
        count[0] += 1

    t0 = time.perf_counter()   # one timed run: scipy's preconditioned CG takes seconds
    M = _scipy_sgs_operator(A)
    x, info = spla.cg(A, b, rtol=tol, atol=0.0, maxiter=maxiter, M=M, callback=cb)
    row["scipy_sgs_total_s"] = time.perf_counter() - t0
    row["scipy_sgs_iters"] = count[0]
    row["scipy_sgs_converged"] = info == 0
    row["scipy_sgs_true_residual"] = float(np.linalg.norm(b - A @ x) / np.linalg.norm(b))
    count[0] = 0
    t0 = time.perf_counter()
    spla.cg(A, b, rtol=tol, atol=0.0, maxiter=maxiter, callback=cb)
    row["scipy_plain_total_s"] = time.perf_counter() - t0
    row["scipy_plain_iters"] = count[0]
    run.add(row)


def main() -> None:
    args = bench_args(__doc__.splitlines()[0], tol=dict(type=float, default=1e-6,
                                                        help="PCG relative residual (default 1e-6)"))
    sizes = QUICK if args.quick else FULL
    out = None if args.out in ("", "none") else args.out
    mats = matrices(sizes)

    bw = BenchRun("solvers_bandwidth", out_dir=out)
    print(bw.header())
    print(f"load average at start: {os.getloadavg()[0]:.2f} (the machine may be shared)")
    ceilings = bandwidth(bw, args.threads)
    print("\n## Copy bandwidth, GB/s read + write (vectorised TIR copy: serial twin vs chunked "
          "parallel, called in turn)\n")
    print(bw.markdown(["working set", "threads", "one_core_gbs", "all_threads_gbs"],
                      ratios={"threads/one core": ("all_threads_gbs", "one_core_gbs")}))

    ins = BenchRun("solvers_inspector", out_dir=out)
    for name, A in mats.items():
        inspectors(ins, name, A)
    print("\n## Level-set inspector (seconds).  serial: levels read off the matrix in one "
          "compiled pass; frontier / parallel: Listing 7.3's row-parallel graph kernels + BFS "
          "(numpy / parallel TIR with atomics)\n")
    print(ins.markdown(["matrix", "rows", "nnz", "levels", "serial_graph_levels_s",
                        "parallel_graph_s", "parallel_graph_levels_s", "frontier_graph_levels_s",
                        "reorder_s", "serial_total_s", "serial_total_cpu_s", "p2p_partition_s",
                        "mnnz_per_s"],
                       ratios={"parallel/serial": ("parallel_graph_levels_s", "serial_graph_levels_s"),
                               "frontier/serial": ("frontier_graph_levels_s", "serial_graph_levels_s")}))

    from tvm_ext.workloads import lap3d

    sw = BenchRun("solvers_sweeps", out_dir=out)
    hpcg = {f"lap3d({sizes['hpcg']}) 27pt HPCG": lap3d(sizes["hpcg"], 27)}
    for name, A in {**hpcg, **mats}.items():
        sweeps(sw, name, A, ceilings)
    print("\n## Lower triangular solve and one symmetric Gauss-Seidel sweep (seconds, best of runs)\n")
    print(sw.markdown(
        ["matrix", "rows", "nnz", "levels", "rows_per_level", "p2p_order", "p2p_task_levels",
         "p2p_waits", "sgs_segments", "trsv_serial_s", "trsv_levelorder_s", "trsv_p2porder_s",
         "trsv_barrier_s", "trsv_p2p_s", "trsv_scipy_s", "sgs_serial_s", "sgs_levelorder_s",
         "sgs_p2porder_s", "sgs_barrier_s", "sgs_p2p_s", "sgs_pyamg_s"],
        ratios={"trsv serial/levelorder": ("trsv_serial_s", "trsv_levelorder_s"),
                "trsv serial/p2porder": ("trsv_serial_s", "trsv_p2porder_s"),
                "trsv serial/barrier": ("trsv_serial_s", "trsv_barrier_s"),
                "trsv serial/p2p": ("trsv_serial_s", "trsv_p2p_s"),
                "trsv scipy/best": ("trsv_scipy_s", "trsv_best_s"),
                "sgs serial/levelorder": ("sgs_serial_s", "sgs_levelorder_s"),
                "sgs serial/p2porder": ("sgs_serial_s", "sgs_p2porder_s"),
                "sgs serial/barrier": ("sgs_serial_s", "sgs_barrier_s"),
                "sgs serial/p2p": ("sgs_serial_s", "sgs_p2p_s"),
                "sgs pyamg/best": ("sgs_pyamg_s", "sgs_best_s")}))
    print("\n## What bounds the speed-up: bytes per sweep, achieved GB/s, and the ceilings "
          "(all-thread copy bandwidth of where the data lives / the serial sweep's GB/s; "
          "threads x serial / p2p order)\n")
    print(sw.markdown(
        ["matrix", "trsv_mb", "trsv_lives_in", "trsv_serial_gbs", "trsv_p2p_gbs",
         "trsv_bw_bound_x", "trsv_order_bound_x", "trsv_p2p_replayed", "sgs_mb", "sgs_serial_gbs",
         "sgs_p2p_gbs", "sgs_bw_bound_x", "sgs_order_bound_x", "sgs_p2p_replayed"],
        ratios={"trsv serial/p2p": ("trsv_serial_s", "trsv_p2p_s"),
                "sgs serial/p2p": ("sgs_serial_s", "sgs_p2p_s")}))
    wide = [r for r in sw.rows if r["rows_per_level"] >= 100]
    for what in ("trsv", "sgs"):
        for ex in ("barrier", "p2p"):
            ratios = [r[f"{what}_serial_s"] / r[f"{what}_{ex}_s"] for r in wide]
            print(f"{what} serial/{ex} on matrices with >= 100 rows per level: geomean "
                  f"{geomean(ratios):.2f}, min {min(ratios, default=float('nan')):.2f} "
                  f"(goal >= 1.6)")
        bound = [r[f"{what}_bound_x"] for r in wide]
        print(f"{what} ceiling on the same matrices (min of bandwidth and order bounds): geomean "
              f"{geomean(bound):.2f}, min {min(bound, default=float('nan')):.2f}; bandwidth "
              f"alone {geomean(r[f'{what}_bw_bound_x'] for r in wide):.2f}")

    pc = BenchRun("solvers_pcg", out_dir=out)
    maxiter = 3000
    for name, A in mats.items():
        pcg_rows(pc, name, A, args.tol, maxiter)
    print(f"\n## PCG time-to-solution (tol {args.tol:g}, inspector included), seconds\n")
    print(pc.markdown(
        ["matrix", "sgs_barrier_iters", "sgs_barrier_total_s", "sgs_p2p_total_s",
         "scipy_sgs_iters", "scipy_sgs_total_s", "ilu0_barrier_iters", "ilu0_barrier_total_s",
         "ilu0_p2p_total_s", "scipy_plain_iters", "scipy_plain_total_s"],
        ratios={"scipy SGS / ours SGS": ("scipy_sgs_total_s", "sgs_best_total_s"),
                "scipy SGS / ours ILU0": ("scipy_sgs_total_s", "ilu0_best_total_s"),
                "scipy plain / ours SGS": ("scipy_plain_total_s", "sgs_best_total_s")}))
    r = [row["scipy_sgs_total_s"] / row["sgs_best_total_s"] for row in pc.rows]
    print(f"\nPCG+SGS vs scipy cg + the same SGS: geomean {geomean(r):.2f}x, min {min(r):.2f}x "
          "(goal >= 2)")
    print("\n## Inspector overhead in PCG iterations (Table 7.2's measure)\n")
    print(pc.markdown(["matrix", "sgs_barrier_graph_levels_s", "sgs_barrier_inspector_s",
                       "sgs_barrier_s_per_iter", "sgs_barrier_overhead_iters_diss",
                       "sgs_barrier_overhead_iters", "sgs_p2p_overhead_iters_diss",
                       "sgs_p2p_overhead_iters",
                       "ilu0_barrier_inspector_s", "ilu0_barrier_overhead_iters",
                       "ilu0_p2p_overhead_iters"]))
    t72 = TABLE_7_2_OVERHEAD_ITERS
    print(f"\nDissertation Table 7.2 (17 matrices, 12 Ivy Bridge cores, GS inspector): "
          f"{min(t72):.2f}-{max(t72):.2f} PCG iterations, median {statistics.median(t72):.2f}, "
          f"mean {statistics.mean(t72):.2f} (graph construction + level sets).  Here (SGS, "
          f"barrier), counted the same way: median "
          f"{statistics.median(row['sgs_barrier_overhead_iters_diss'] for row in pc.rows):.2f}; "
          f"with reordering and executor set-up: median "
          f"{statistics.median(row['sgs_barrier_overhead_iters'] for row in pc.rows):.2f}; "
          f"ILU(0) inspector + factorization: median "
          f"{statistics.median(row['ilu0_barrier_overhead_iters'] for row in pc.rows):.2f}.")


if __name__ == "__main__":
    main()
