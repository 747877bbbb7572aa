"""Inspector cost of every sparse format (Venkat 2016 §5.4: inspector time vs. the libraries').

Times each ``schedules.sparse.inspectors`` function on lap2d(1000) (1e6 rows,
5e6 nnz; ``--quick``: lap2d(200)) and the bundled nasa4704, next to scipy's own
converters where one exists (``tocoo``, ``tobsr``, ``todia``, a canonical CSR
copy) measured in the same run.  ``insp_in_spmv`` is the inspector's cost in
scipy CSR SpMVs on the same matrix: how many SpMVs it takes to pay it back if
the format were free.  Our times include ``canonical_csr``'s validation (copy,
sort check, NaN scan); scipy's converters skip it.

    python -m bench.sparse_inspectors [--quick]
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from bench.harness import BenchRun, bench_args, geomean, time_python

#: format label -> (our inspector, scipy peer or None, peer name)
def _cases() -> dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any] | None, str]]:
    from schedules.sparse.inspectors import to_bcsr, to_coo, to_csb, to_csr, to_dia, to_ell, to_hyb, to_sell

    def scipy_csr(A):
        B = sp.csr_array(A, copy=True)
        B.sum_duplicates()
        return B

    return {
        "csr": (to_csr, scipy_csr, "csr copy+sum_duplicates"),
        "coo": (to_coo, lambda A: A.tocoo(), "tocoo"),
        "bcsr 2x2": (lambda A: to_bcsr(A, 2, 2), lambda A: A.tobsr(blocksize=(2, 2)), "tobsr(2,2)"),
        "bcsr 4x4": (lambda A: to_bcsr(A, 4, 4), lambda A: A.tobsr(blocksize=(4, 4)), "tobsr(4,4)"),
        "dia": (lambda A: to_dia(A, max_fill=np.inf), lambda A: A.todia(), "todia"),
        "ell row": (to_ell, None, ""),
        "ell col": (lambda A: to_ell(A, layout="col"), None, ""),
        "csb 4096": (lambda A: to_csb(A, 4096), None, ""),
        "hyb": (to_hyb, None, ""),
        "sell 8/256": (lambda A: to_sell(A, C=8, sigma=256), None, ""),
    }


def _matrices(quick: bool) -> dict[str, sp.csr_array]:
    from tvm_ext.workloads import lap2d, load_matrix

    n = 200 if quick else 1000
    return {f"lap2d({n})": lap2d(n), "nasa4704": load_matrix("nasa4704")}


def main() -> None:
    args = bench_args(__doc__.splitlines()[0])
    warnings.simplefilter("ignore", sp.SparseEfficiencyWarning)  # scipy's todia on nasa4704
    run = BenchRun("sparse_inspectors", out_dir=args.out)
    repeat = 2 if args.quick else 3
    for mname, A in _matrices(args.quick).items():
        x = np.ones(A.shape[1])
        spmv = time_python(lambda: A @ x, repeat=repeat).min
        for fmt, (ours, peer, peer_name) in _cases().items():
            t_ours = time_python(lambda: ours(A), repeat=repeat, min_repeat_s=0.0).min
            t_peer = time_python(lambda: peer(A), repeat=repeat, min_repeat_s=0.0).min if peer else None
            run.add({"matrix": mname, "rows": A.shape[0], "nnz": A.nnz, "format": fmt,
                     "ours_s": t_ours, "peer": peer_name or "-", "peer_s": t_peer,
                     "spmv_s": spmv, "insp_in_spmv": t_ours / spmv})
    print(run.header())
    print(run.markdown(["matrix", "format", "ours_s", "peer", "peer_s", "insp_in_spmv"],
                       ratios={"peer/ours": ("peer_s", "ours_s")}))
    with_peer = [r["peer_s"] / r["ours_s"] for r in run.rows if r["peer_s"]]
    print(f"\ngeomean peer/ours over {len(with_peer)} rows with a scipy peer: {geomean(with_peer):.3f}")


if __name__ == "__main__":
    main()
