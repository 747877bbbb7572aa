"""Recipe-generated sparse executors vs the hand-written TVMScript templates, per format and N.

For every matrix, format (CSR, COO, CSB, ELL row- and column-major, DIA, BCSR 4x4,
SELL-8-256, HYB; ELL/DIA only where their padding stays below 3x, BCSR where 4x4
blocks are at least half full) and N in {1, 8, 32, 128} (N = 1 is SpMV), the executor
generated from the format's recipe (``schedules.sparse.recipes``) and the
library's hand-written one (``build_executor`` on the ``inspectors.to_*``
container, or for a format the library now generates, the hand-written template
it replaced, kept in ``tests/sparse_oracles``) are built with the same default knobs, checked against scipy, and
timed alternately with ``time_evaluator`` in 7 interleaved rounds.  The table
shows the best times and the median of the per-round ratios hand / generated
(>= 1: the generated one is as fast); the summary
gives the geomean and worst ratio per format.  S-DIA (blocked diagonals, a
format with no hand-written executor) is timed against the hand-written DIA.  Also times the SGD Diag and
BlkDiag executors (one kernel launch per diagonal, ``schedules.sparse.recipes.sgd``), and the
generated BCSR 3x3 SpMV against the library's CSR SpMV on a matrix of dense 3x3 blocks
(row ``bcsr3x3``, hand-written side ``csr``).

    python -m bench.sparse_recipes [--quick] [--out none] [--formats sell,hyb] [--no-sgd]
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import scipy.sparse as sp

from bench.harness import BenchRun, bench_args, geomean

N_VALUES = (1, 8, 32, 128)


def _matrices(quick: bool) -> dict[str, Callable[[], sp.csr_array]]:
    from tvm_ext.workloads import block_fem, lap2d, load_matrix, rmat

    if quick:
        return {"lap2d": lambda: lap2d(120), "nasa4704": lambda: load_matrix("nasa4704"),
                "rmat": lambda: rmat(12)}
    return {"lap2d": lambda: lap2d(600), "nasa4704": lambda: load_matrix("nasa4704"),
            "fem3x3": lambda: block_fem(20000, 3, 3), "rmat": lambda: rmat(15)}


def _formats(A: sp.csr_array) -> dict[str, Callable[[], Any]]:
    from schedules.sparse import inspectors as I

    m = A.shape[0]
    lens = np.diff(A.indptr)
    nnz = max(A.nnz, 1)
    out: dict[str, Callable[[], Any]] = {"csr": lambda: I.to_csr(A), "coo": lambda: I.to_coo(A),
                                         "csb": lambda: I.to_csb(A)}
    if m and nnz / (m * max(int(lens.max()), 1)) >= 1 / 3:
        out["ell"] = lambda: I.to_ell(A, layout="row")
        out["ell_col"] = lambda: I.to_ell(A, layout="col")
    out["sell"] = lambda: I.to_sell(A)
    out["hyb"] = lambda: I.to_hyb(A)
    ndiag = np.unique(A.tocoo().col.astype(np.int64) - A.tocoo().row).size
    if ndiag * m <= 3 * nnz:
        out["dia"] = lambda: I.to_dia(A)
    from tvm_ext.workloads import block_fill

    if A.nnz and block_fill(A, 4, 4).get("4x4", 0.0) >= 0.5:
        out["bcsr"] = lambda: I.to_bcsr(A, 4, 4)
    return out


#: Generated formats without a hand-written twin: timed against this hand-written format.
NEW_FORMATS = {"sdia": "dia"}


def templates() -> dict:
    """Formats whose library executor is generated now: the hand-written template each replaced,
    kept as a test oracle (its kernels class), is the "hand" side."""
    from tests.sparse_oracles.bcsr_template import TemplateBCSRKernels
    from tests.sparse_oracles.coo_template import TemplateCOOKernels
    from tests.sparse_oracles.csb_template import TemplateCSBKernels
    from tests.sparse_oracles.csr_template import TemplateCSRKernels
    from tests.sparse_oracles.dia_template import TemplateDIAKernels
    from tests.sparse_oracles.ell_template import TemplateELLKernels
    from tests.sparse_oracles.hyb_template import TemplateHYBKernels
    from tests.sparse_oracles.sell_template import TemplateSELLKernels

    return {"csr": TemplateCSRKernels, "bcsr": TemplateBCSRKernels, "coo": TemplateCOOKernels,
            "dia": TemplateDIAKernels, "ell": TemplateELLKernels,
            "hyb": TemplateHYBKernels, "sell": TemplateSELLKernels, "csb": TemplateCSBKernels}


def _hand_executor(fmt, n: int, kind: str):
    """The hand-written executor of ``fmt``: the library's, or the template it replaced."""
    from schedules.sparse.executors import Executor, build_executor

    template = templates().get(fmt.name)
    if template is None:
        return build_executor(fmt, n_cols=n, kind=kind)
    kernels = template()
    kernels.check(fmt)
    p = kernels.resolve(fmt, kernels.params_cls(), fmt.dtype.name, kind, 1 if kind == "spmv" else n, None)
    return Executor(fmt, kernels, p, kind, False, None)


def _time_pair(hand, gen, B, rounds: int = 7) -> tuple[float, float, float]:
    """Interleaved A/B rounds: best time of each, and the median of the per-round ratios
    hand / generated (robust to load that comes and goes on a shared machine)."""
    th, tg = [], []
    for _ in range(rounds):
        th.append(hand.time(B, repeat=5).min)
        tg.append(gen.time(B, repeat=5).min)
    return min(th), min(tg), float(np.median(np.array(th) / np.array(tg)))


def main(argv: Sequence[str] | None = None) -> None:
    args = bench_args(__doc__.splitlines()[0], argv,
                      formats={"default": None, "help": "comma-separated formats to run (default: all)"},
                      no_sgd={"action": "store_true", "help": "skip the SGD Diag/BlkDiag timing"})
    only = set(args.formats.split(",")) if args.formats else None
    from schedules.sparse.recipes import RECIPES, build_recipe_executor

    run = BenchRun("sparse_recipes", out_dir=args.out)
    rng = np.random.default_rng(0)
    for mname, make in _matrices(args.quick).items():
        A = sp.csr_array(make(), dtype=np.float32)
        m, k = A.shape
        formats = _formats(A)
        cases = [(f, f, formats[f]) for f in formats]
        cases += [(new, old, formats[old]) for new, old in NEW_FORMATS.items() if old in formats]
        for fname, hname, to_fmt in cases:
            if only is not None and fname not in only:
                continue
            fmt = to_fmt()
            recipe = RECIPES[fname]()
            gen_fmt = recipe.inspect(A)
            for n in N_VALUES:
                kind = "spmv" if n == 1 else "spmm"
                B = rng.random((k,) if kind == "spmv" else (k, n), dtype=np.float32)
                hand = _hand_executor(fmt, n, kind)
                gen = build_recipe_executor(recipe, A, n, kind=kind, fmt=gen_fmt)
                ref = A @ B
                tol = 1e-4 * max(1.0, float(np.abs(ref).max()))
                for exe, who in ((hand, "hand-written"), (gen, "generated")):
                    err = float(np.abs(exe(B) - ref).max())
                    if err > tol:
                        raise AssertionError(f"{who} {fname} on {mname} N={n}: error {err}")
                th, tg, ratio = _time_pair(hand, gen, B)
                run.add({"matrix": mname, "format": fname, "hand": hname, "N": n, "nnz": int(A.nnz),
                         "hand_ms": th * 1e3, "gen_ms": tg * 1e3, "ratio": ratio,
                         "gen_slots": gen_fmt.slots})
    if only is None or "bcsr3x3" in only:
        _bcsr_spmv_vs_csr(run, args.quick)
    if not args.no_sgd:
        _sgd(run, args.quick)
    _report(run)


def _bcsr_spmv_vs_csr(run: BenchRun, quick: bool) -> None:
    """The generated BCSR 3x3 SpMV against the library's CSR SpMV on a matrix of dense 3x3
    blocks (where OSKI and the dissertation find register blocking wins)."""
    from schedules.sparse import inspectors as I
    from schedules.sparse.executors import build_executor
    from schedules.sparse.recipes import build_recipe_executor
    from schedules.sparse.recipes.library import bcsr_recipe
    from tvm_ext.workloads import block_fem

    A = sp.csr_array(block_fem(4000 if quick else 20000, 3, 3), dtype=np.float32)
    x = np.random.default_rng(1).random(A.shape[1], dtype=np.float32)
    csr = build_executor(I.to_csr(A), kind="spmv")
    gen = build_recipe_executor(bcsr_recipe(3, 3), A, kind="spmv")
    ref = A @ x
    for exe, who in ((csr, "csr"), (gen, "generated bcsr3x3")):
        err = float(np.abs(exe(x) - ref).max())
        if err > 1e-4 * max(1.0, float(np.abs(ref).max())):
            raise AssertionError(f"{who} SpMV on fem3x3: error {err}")
    th, tg, ratio = _time_pair(csr, gen, x)
    run.add({"matrix": "fem3x3", "format": "bcsr3x3", "hand": "csr", "N": 1, "nnz": int(A.nnz),
             "hand_ms": th * 1e3, "gen_ms": tg * 1e3, "ratio": ratio, "gen_slots": int(A.nnz)})


def _sgd(run: BenchRun, quick: bool) -> None:
    from schedules.sparse.recipes.sgd import sgd_compare
    from tvm_ext.workloads import rmat

    R = sp.csr_array(rmat(10 if quick else 13), dtype=np.float32)
    for row in sgd_compare(R, features=16, tiles=(4, 4)):
        run.add({"matrix": "rmat-sgd", "format": row["format"], "N": 16, "nnz": int(R.nnz),
                 "sgd_ms": row["ms"], "diagonals": row["diagonals"], "sgd_gain": row["gain"]})


def _report(run: BenchRun) -> None:
    print(run.header())
    spmm = [r for r in run.rows if "ratio" in r]
    print(run.markdown(["matrix", "format", "hand", "N", "nnz", "hand_ms", "gen_ms", "ratio"], rows=spmm))
    print("\nhand-written time / generated time (>= 1: generated is as fast)")
    for f in sorted({r["format"] for r in spmm}):
        xs = [r["ratio"] for r in spmm if r["format"] == f]
        vs = spmm[[r["format"] for r in spmm].index(f)]["hand"]
        print(f"  {f:7s} vs hand-written {vs:7s} geomean {geomean(xs):.2f}x  worst {min(xs):.2f}x  "
              f"({len(xs)} cases)")
    sgd = [r for r in run.rows if "sgd_ms" in r]
    if sgd:
        print(run.markdown(["matrix", "format", "diagonals", "sgd_ms", "sgd_gain"], rows=sgd))


if __name__ == "__main__":
    main()
