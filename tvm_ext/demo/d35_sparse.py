"""Demo: inspector/executor SpMM on the bundled matrices vs scipy and torch."""
from __future__ import annotations

from tvm_ext.markdown import table
from tvm_ext.workloads import load_matrix

TITLE = "Sparse inspector/executor: inspect(A, N) -> plan.build() vs scipy.sparse and torch.sparse"


def run():
    from schedules.sparse import compare_spmm, inspect

    rows, data = [], {}
    for name, n in (("nasa4704", 1), ("nasa4704", 32), ("cora", 32)):
        plan = inspect(load_matrix(name), n_cols=n)
        r = compare_spmm(plan, repeat=3, min_repeat_s=0.02)
        rows.append([name, n, r["format"], r["gflops"], r["scipy_gflops"], r["torch_gflops"],
                     r["speedup_vs_scipy"], r["speedup_vs_torch"], r["max_rel_err"]])
        data[f"{name}_N{n}"] = {k: r[k] for k in ("format", "gflops", "scipy_gflops", "torch_gflops",
                                                  "max_rel_err")}
    lines = [table(["matrix", "N", "format chosen", "GFLOP/s", "scipy GFLOP/s", "torch GFLOP/s",
                    "x scipy", "x torch", "max rel err"], rows),
             "(timings share the machine with whatever else runs; bench/sparse_executors.py is the measurement)"]
    return data, lines
