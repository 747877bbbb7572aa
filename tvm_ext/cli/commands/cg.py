"""``tvm-ext cg NAME|FILE --n 8 [--rtol] [--maxiter]``: Block CG (GOGETA Alg. 1), fused vs unfused vs peers.

Solves ``A X = B`` for a random ``B`` with ``N`` columns using the fused TVM
kernels, the unfused ones, a numpy/scipy Block CG and ``scipy.sparse.linalg.cg``
column by column, and prints the time per iteration of each next to the
modelled DRAM traffic per iteration (GOGETA SEQ-Flex vs GOGETA-map).  A
pattern matrix (no values, e.g. nasa4704) is made SPD with
``tvm_ext.workloads.make_spd`` first, and the output says so; ``--make-spd``
forces that for any matrix.  All logic is :func:`schedules.fusion.compare_block_cg`.
``--json`` keys include ``converged``, ``iterations``, ``residual``,
``t_iter_fused``, ``t_iter_unfused`` and ``t_iter_numpy`` (a value that is
not a finite number, e.g. the time per iteration of a solver that did no
iteration, is ``null``).

Exit status: 0 when the fused solver converged; 3 when it ran but did not
(``converged`` is false and ``reason`` says why, e.g. a breakdown on a matrix
that is not positive definite); 2 for bad input, including a matrix that is
empty, not square, not symmetric or has a non-positive diagonal entry.
"""
from __future__ import annotations

from tvm_ext.cli.args import count, real, seed, size
from tvm_ext.cli.output import EXIT_RESULT_FAILED, Output, table
from tvm_ext.errors import InputError
from tvm_ext.limits import check_work


def register(subparsers, common) -> None:
    p = subparsers.add_parser("cg", parents=[common],
                              help="Block CG on fused vs unfused TVM kernels vs numpy/scipy, with modelled traffic")
    p.add_argument("matrix", metavar="NAME|FILE", help="a bundled matrix name or a .mtx file (SPD)")
    p.add_argument("--n", type=size("--n"), default=8, help="right-hand sides N (default 8)")
    p.add_argument("--rtol", "--tol", dest="tol", metavar="RTOL", type=real("--rtol", 0.0, 1.0, low_open=True, high_open=True), default=1e-8,
                   help="stop each column at ||b - Ax|| <= RTOL ||b|| (scipy's rtol; --tol is the old name; default 1e-8)")
    p.add_argument("--maxiter", type=size("--maxiter"), default=None, help="iteration limit (default 10 x rows)")
    p.add_argument("--make-spd", action="store_true", help="make the matrix SPD first (always for pattern files)")
    p.add_argument("--seed", type=seed(), default=0, help="seed of the random right-hand sides")
    p.add_argument("--plot", metavar="PNG", default=None,
                   help="also write the fused solver's residual per column against the iteration (needs matplotlib)")
    p.add_argument("--repeat", type=count("--repeat", 1, 1000), default=3, help="solves per solver; the best time is kept (default 3)")
    p.set_defaults(func=run)


def _is_pattern(name: str) -> bool:
    from pathlib import Path

    from tvm_ext.workloads import bundled_path, list_matrices, matrix_market_header

    path = bundled_path(name) if name in list_matrices() else Path(name)
    try:
        return matrix_market_header(path).get("field") == "pattern"
    except Exception:  # not a Matrix Market file: resolve_matrix reports it
        return False


def run(args) -> Output:
    from schedules.fusion.cg_compare import compare_block_cg
    from tvm_ext.workloads import make_spd, resolve_matrix

    A = resolve_matrix(args.matrix)
    pattern = _is_pattern(args.matrix)
    made_spd = pattern or args.make_spd
    if A.shape[0] == 0 or A.shape[1] == 0:
        raise InputError(f"matrix {args.matrix!r} is empty ({A.shape[0]}x{A.shape[1]}): nothing to solve")
    if made_spd:
        A = make_spd(A)
    _check_spd(args.matrix, A)
    rows = A.shape[0]
    check_work(f"cg {args.matrix} ({rows}x{rows}, nnz {A.nnz}) x N={args.n}",
               bytes=16 * rows * args.n * 8 + 24 * A.nnz)  # X, R, P, Q, B and the peers' copies
    res = compare_block_cg(A, args.n, tol=args.tol, maxiter=args.maxiter, seed=args.seed, repeat=args.repeat)
    res.update(matrix=args.matrix, made_spd=made_spd)
    text = render(res, pattern)
    if args.plot:
        from tvm_ext.residual_plot import plot_residuals

        res["plot"] = str(plot_residuals(res["history"], args.plot, tol=args.tol,
                                         title=f"Block CG (fused) on {args.matrix}, N = {args.n}"))
        text += f"\n\nplot written to {res['plot']}"
    return Output(res, text, exit_code=0 if res["converged"] else EXIT_RESULT_FAILED)


def _check_spd(name: str, A) -> None:
    """``InputError`` when cheap O(nnz) evidence shows ``A`` is not SPD (square, symmetric, positive diagonal)."""
    from schedules.sparse.solvers import spd_precheck
    from tvm_ext.workloads import canonical_csr

    csr = canonical_csr(A, square=True, dtype="float64", what=f"cg matrix {name!r}")
    if csr.nnz == 0:
        raise InputError(f"cg matrix {name!r} has no non-zeros: it is not symmetric positive definite")
    problem = spd_precheck(csr)
    if problem:
        raise InputError(f"cg matrix {name!r}: {problem} (--make-spd makes an SPD matrix from its pattern)")


def render(res: dict, pattern: bool) -> str:
    """Human-readable comparison."""
    note = ""
    if res["made_spd"]:
        why = "a pattern matrix (no values)" if pattern else "--make-spd"
        note = f"  [made SPD with make_spd: {why}]"
    head = (f"{res['matrix']}: {res['rows']:,} x {res['rows']:,}, nnz {res['nnz']:,}, N = {res['n_rhs']}, "
            f"tol {res['tol']:g}, {res['dtype']}, SpMM format {res['format']}{note}")
    t_f = res["t_iter_fused"]
    rows = [["TVM fused (GOGETA groups)", res["iterations_fused"], res["converged_fused"], t_f * 1e6, 1.0],
            ["TVM unfused (one op per kernel)", res["iterations_unfused"], res["converged_unfused"],
             res["t_iter_unfused"] * 1e6, res["t_iter_unfused"] / t_f],
            [f"TVM auto (picked {res['auto_choice']})", res["iterations_auto"], res["converged_auto"],
             res["t_iter_auto"] * 1e6, res["t_iter_auto"] / t_f],
            ["numpy/scipy Block CG", res["iterations_numpy"], res["converged_numpy"], res["t_iter_numpy"] * 1e6,
             res["t_iter_numpy"] / t_f],
            ["scipy cg, column by column", res["iterations_scipy_cg"], res["converged_scipy_cg"],
             res["t_iter_scipy_cg"] * 1e6, None]]
    status = "converged" if res["converged"] else f"NOT converged: {res['reason']}"
    extra = []
    if res["restarts"] > 1 or res["fallback_columns"]:
        extra.append(f"restarts {res['restarts']}, columns finished alone {res['fallback_columns']}")
    lines = [head, "",
             table(["solver", "iterations", "converged", "us / iteration", "this / fused"], rows), "",
             f"fused: {status}; max true relative residual {max(res['residual']):.2e}; "
             f"max |x - x_scipy_cg| / max|x| = {res['max_diff_vs_scipy_cg']:.1e}",
             *extra,
             f"measured speed-up of fusion {res['speedup_vs_unfused']:.2f}x per iteration vs modelled DRAM-traffic "
             f"reduction {res['modelled_traffic_reduction']:.2f}x (GOGETA SEQ-Flex {res['modelled_words_unfused']:,} "
             f"vs GOGETA-map {res['modelled_words_fused']:,} words per iteration, no SRAM reuse); "
             f"fused='auto' (timed at build time) picked {res['auto_choice']}: "
             f"{res['speedup_auto_vs_unfused']:.2f}x vs unfused",
             "(scipy cg's time is per single-column iteration; the Block CG rows are per N-column iteration)"]
    return "\n".join(lines)
