"""The peers an SpMM is measured against: scipy.sparse and torch.sparse (MKL).

:func:`compare_spmm` runs a plan's executor and the peers on the same
operands in one process and reports GFLOP/s, ratios and the error against
scipy.  The CLI, the demo and ``bench/`` all use it.

>>> from tvm_ext.workloads import lap2d
>>> from schedules.sparse.plan import inspect
>>> r = compare_spmm(inspect(lap2d(20), n_cols=4), repeat=2, min_repeat_s=0.001)
>>> r["max_rel_err"] < 1e-5
True
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tvm_ext.timing import time_python

__all__ = ["scipy_spmm", "torch_spmm", "torch_available", "compare_spmm", "spmm_flops"]


def spmm_flops(nnz: int, n_cols: int) -> int:
    """Floating-point operations of ``A @ B``: one multiply and one add per entry and column."""
    return 2 * int(nnz) * int(n_cols)


def scipy_spmm(A, B: np.ndarray) -> Callable[[], np.ndarray]:
    """A zero-argument callable computing ``A @ B`` with scipy."""
    return lambda: A @ B


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def torch_spmm(A, B: np.ndarray) -> Callable[[], Any] | None:
    """``torch.sparse.mm`` on a CSR tensor (None without torch)."""
    if not torch_available():
        return None
    import warnings

    import torch

    with warnings.catch_warnings():  # "CSR support is in beta" / invariant-check notices
        warnings.simplefilter("ignore", UserWarning)
        At = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                     torch.from_numpy(A.indices.astype(np.int64)),
                                     torch.from_numpy(A.data), size=A.shape)
    Bt = torch.from_numpy(np.ascontiguousarray(B))
    if Bt.ndim == 1:
        return lambda: torch.mv(At, Bt)
    return lambda: torch.sparse.mm(At, Bt)


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    scale = max(float(np.abs(ref).max()) if ref.size else 0.0, 1e-30)
    return float(np.abs(got - ref).max() / scale) if ref.size else 0.0


def compare_spmm(plan, *, B: np.ndarray | None = None, seed: int = 0, repeat: int = 5,
                 min_repeat_s: float = 0.05, with_torch: bool = True, target: Any = None) -> dict:
    """Time the plan's executor, scipy and torch on one ``B``; GFLOP/s and ratios."""
    A = plan.matrix
    n = plan.n_cols
    if B is None:
        shape = (A.shape[1],) if n == 1 else (A.shape[1], n)
        B = np.random.default_rng(seed).standard_normal(shape).astype(A.dtype)
    exe = plan.build(target)
    flops = spmm_flops(A.nnz, n)
    ref = A @ B
    err = _rel_err(exe(B), ref)
    t_ours = exe.time(B, repeat=repeat, min_repeat_ms=int(min_repeat_s * 1e3)).min
    t_scipy = time_python(scipy_spmm(A, B), repeat=repeat, min_repeat_s=min_repeat_s).min
    t_torch = None
    fn = torch_spmm(A, B) if with_torch else None
    if fn is not None:
        t_torch = time_python(fn, repeat=repeat, min_repeat_s=min_repeat_s).min

    def gflops(t):
        return flops / t / 1e9 if t else None

    return {
        "format": plan.label,
        "rows": A.shape[0], "cols": A.shape[1], "nnz": int(A.nnz), "n": n,
        "seconds": t_ours, "gflops": gflops(t_ours),
        "scipy_seconds": t_scipy, "scipy_gflops": gflops(t_scipy),
        "torch_seconds": t_torch, "torch_gflops": gflops(t_torch),
        "speedup_vs_scipy": t_scipy / t_ours, "speedup_vs_torch": (t_torch / t_ours) if t_torch else None,
        "inspector_seconds": plan.inspect_seconds,
        "inspector_runs": plan.inspect_seconds / t_ours,
        "max_rel_err": err,
    }

