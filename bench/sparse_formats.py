"""Format studies from the dissertation.

* **BCSR R x C sweep, R, C in 1..8** on an FEM-like block matrix and on
  nasa4704 (the dissertation swept 1..8 and reported the best, as OSKI does):
  SpMV and SpMM GFLOP/s per R x C, block fill, inspector time.
* **DIA vs ELL** on the Bell & Garland stencils (2-D 5/9-point, 3-D 7/27-point):
  the dissertation found DIA up to 2x faster than ELL.

scipy CSR is timed in the same run as the reference.

    python -m bench.sparse_formats [--quick] [--n 8]
"""
from __future__ import annotations

import time
import warnings

import numpy as np

from bench.harness import BenchRun, bench_args, time_python


def _executor_seconds(fmt, B, n: int, repeat: int) -> tuple[float, float]:
    """(best seconds per call, the executor) for one format instance."""
    from schedules.sparse import build_executor

    exe = build_executor(fmt, n_cols=n, kind="spmv" if n == 1 else "spmm")
    return exe.time(B, repeat=repeat).min, exe


def bcsr_sweep(run: BenchRun, name: str, A, n: int, repeat: int, sizes) -> None:
    from schedules.sparse import to_bcsr
    from tvm_ext.workloads import block_fill

    fill = block_fill(A)
    rng = np.random.default_rng(0)
    B = rng.standard_normal((A.shape[1],) if n == 1 else (A.shape[1], n)).astype(A.dtype)
    ref = A @ B
    t_scipy = time_python(lambda: A @ B, repeat=repeat).min
    for r in sizes:
        for c in sizes:
            t0 = time.perf_counter()
            fmt = to_bcsr(A, r, c)
            t_insp = time.perf_counter() - t0
            t, exe = _executor_seconds(fmt, B, n, repeat)
            err = float(np.abs(exe(B) - ref).max() / max(np.abs(ref).max(), 1e-30))
            run.add({"study": "bcsr", "matrix": name, "N": n, "RxC": f"{r}x{c}",
                     "fill": fill[f"{r}x{c}"], "gflops": 2 * A.nnz * n / t / 1e9,
                     "ms": t * 1e3, "scipy_ms": t_scipy * 1e3, "inspect_ms": t_insp * 1e3,
                     "max_rel_err": err})


def dia_vs_ell(run: BenchRun, name: str, A, n: int, repeat: int) -> None:
    from schedules.sparse import to_dia, to_ell

    rng = np.random.default_rng(1)
    B = rng.standard_normal((A.shape[1],) if n == 1 else (A.shape[1], n)).astype(A.dtype)
    t_scipy = time_python(lambda: A @ B, repeat=repeat).min
    row = {"study": "dia_vs_ell", "matrix": name, "N": n, "nnz": A.nnz, "scipy_ms": t_scipy * 1e3}
    for label, make in (("dia", lambda: to_dia(A)),
                        ("ell", lambda: to_ell(A, layout="col" if n == 1 else "row"))):
        t0 = time.perf_counter()
        fmt = make()
        row[f"{label}_inspect_ms"] = (time.perf_counter() - t0) * 1e3
        t, _ = _executor_seconds(fmt, B, n, repeat)
        row[f"{label}_ms"] = t * 1e3
    run.add(row)


def main() -> None:
    args = bench_args(__doc__.splitlines()[0], n={"default": "1,8", "help": "comma list of N"})
    from tvm_ext.workloads import block_fem, canonical_csr, lap2d, lap3d, load_matrix

    warnings.simplefilter("ignore")
    ns = [int(x) for x in args.n.split(",")]
    repeat = 3 if args.quick else 5
    big = not args.quick
    run = BenchRun("sparse_formats", out_dir=args.out)
    sizes = (1, 2, 4, 8) if args.quick else tuple(range(1, 9))
    mats = {"fem3x3": block_fem(20000 if big else 500, 3, 3), "nasa4704": load_matrix("nasa4704")}
    for name, A in mats.items():
        A = canonical_csr(A, dtype="float32")
        for n in ns:
            bcsr_sweep(run, name, A, n, repeat, sizes)
    stencils = {"lap2d_5pt": lap2d(1000 if big else 100), "lap2d_9pt": lap2d(1000 if big else 100, 9),
                "lap3d_7pt": lap3d(100 if big else 20), "lap3d_27pt": lap3d(64 if big else 16, 27)}
    for name, A in stencils.items():
        A = canonical_csr(A, dtype="float32")
        for n in ns:
            dia_vs_ell(run, name, A, n, repeat)
    _report(run)


def _report(run: BenchRun) -> None:
    print(run.header())
    bcsr = BenchRun("bcsr", out_dir=None)
    for r in run.rows:
        if r["study"] == "bcsr":
            bcsr.add(r)
    print("\nBCSR R x C sweep (GFLOP/s; x_scipy = scipy time / ours)\n")
    print(bcsr.markdown(["matrix", "N", "RxC", "fill", "gflops", "ms", "inspect_ms", "max_rel_err"],
                        ratios={"x_scipy": ("scipy_ms", "ms")}))
    for key in sorted({(r["matrix"], r["N"]) for r in bcsr.rows}):
        rows = [r for r in bcsr.rows if (r["matrix"], r["N"]) == key]
        best = max(rows, key=lambda r: r["gflops"])
        one = next(r for r in rows if r["RxC"] == "1x1")
        print(f"best {key[0]} N={key[1]}: {best['RxC']} {best['gflops']:.1f} GFLOP/s "
              f"({best['gflops'] / one['gflops']:.2f}x the 1x1 blocking)")
    dia = BenchRun("dia", out_dir=None)
    for r in run.rows:
        if r["study"] == "dia_vs_ell":
            dia.add(r)
    print("\nDIA vs ELL on stencils (ms; dia_over_ell = ELL time / DIA time)\n")
    print(dia.markdown(["matrix", "N", "nnz", "dia_ms", "ell_ms", "scipy_ms", "dia_inspect_ms",
                        "ell_inspect_ms"],
                       ratios={"dia_over_ell": ("ell_ms", "dia_ms"), "dia_x_scipy": ("scipy_ms", "dia_ms")}))


if __name__ == "__main__":
    main()
