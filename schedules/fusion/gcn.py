"""GOGETA §2.2.2 / Fig. 11: a GCN layer ``X1 = (A·X0)·W`` on TVM kernels, fused or not.

The layer is :func:`~schedules.fusion.builders.gcn_layer_dag`; its plan makes
``{Z = A·X0, X1 = Z·W}`` one pipelineable group (both ops stream the node
rank).  ``fused=True`` runs that group as one kernel: the sparse executor
computes each row tile of ``Z`` in registers and the GEMM consumes it there
(``Z`` is never written); ``fused=False`` runs the plain executor (``Z`` to
memory) and then a row-parallel GEMM kernel.  Activations are not part of
the DAG (apply them to the result).

>>> import numpy as np
>>> from tvm_ext.workloads import load_matrix
>>> A = load_matrix("cora")
>>> X0 = np.random.default_rng(0).standard_normal((A.shape[0], 32)).astype("float32")
>>> W = np.random.default_rng(1).standard_normal((32, 7)).astype("float32")
>>> bool(np.allclose(gcn_layer(A, X0, W), (A @ X0) @ W, rtol=1e-4, atol=1e-3))
True
"""
from __future__ import annotations

from typing import Any

import numpy as np

from schedules.fusion.analysis import analyze
from schedules.fusion.builders import gcn_layer_dag
from schedules.fusion.groups import plan_fusion
from schedules.fusion.kernels import build_step_kernels
from schedules.fusion.steps import schedule_steps
from tvm_ext.errors import InputError, ShapeError

__all__ = ["GCNLayer", "gcn_layer", "gcn_layer_numpy"]


class GCNLayer:
    """One GCN layer's kernels for a graph ``A`` (``M x M``), ``N`` input and ``O`` output features.

    ``layer(X0, W)`` returns ``(A·X0)·W``; ``steps``/``kernels`` expose the
    schedule (one fused step, or the SpMM then the GEMM).

    >>> from tvm_ext.workloads import load_matrix
    >>> GCNLayer(load_matrix("cora"), 16, 4).steps
    [('Z', 'X1')]
    """

    def __init__(self, A: Any, n_features: int, n_out: int, *, fused: bool = True,
                 dtype: Any = "float32", target: Any = None):
        from schedules.sparse import inspect
        from schedules.sparse.executors.codegen import check_dtype
        from tvm_ext.workloads import canonical_csr

        self.dtype = check_dtype(dtype, "gcn_layer dtype")
        for what, v in (("number of input features", n_features), ("number of output features", n_out)):
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise InputError(f"gcn_layer: the {what} must be >= 1, got {v!r}")
        self.A = canonical_csr(A, square=True, dtype=self.dtype, what="gcn_layer adjacency A")
        self.n, self.n_features, self.n_out, self.fused = self.A.shape[0], int(n_features), int(n_out), fused
        if self.n == 0:
            raise ShapeError("gcn_layer: the graph has no nodes")
        dag = gcn_layer_dag(self.n, self.n_features, self.n_out, max(int(self.A.nnz), 1))
        self.plan = plan_fusion(dag) if fused else analyze(dag)
        self.steps = schedule_steps(self.plan, ["Z", "X1"], fused)
        fmt = inspect(self.A, self.n_features, dtype=self.dtype, format="csr").format
        self.storage, self.kernels = build_step_kernels(self.plan, self.steps, fmt=fmt, dtype=self.dtype,
                                                        target=target)

    def _env(self, X0: Any, W: Any) -> dict:
        import tvm

        from tvm_ext.workloads import check_dense_operand

        X0 = check_dense_operand(X0, self.n, dtype=self.dtype, what="gcn_layer features X0")
        if X0.shape[1] != self.n_features:
            raise ShapeError(f"gcn_layer: X0 has {X0.shape[1]} features, the layer was built for {self.n_features}")
        W = check_dense_operand(W, self.n_features, dtype=self.dtype, what="gcn_layer weights W")
        if W.shape[1] != self.n_out:
            raise ShapeError(f"gcn_layer: W has {W.shape[1]} columns, the layer was built for {self.n_out}")
        st = self.storage
        env = {st["X0"]: tvm.runtime.tensor(X0), st["W"]: tvm.runtime.tensor(W),
               st["X1"]: tvm.runtime.empty((self.n, self.n_out), self.dtype, tvm.cpu(0))}
        if st["Z"] not in env and any("Z" in s and len(s) == 1 for s in self.steps):
            env[st["Z"]] = tvm.runtime.empty((self.n, self.n_features), self.dtype, tvm.cpu(0))
        return env

    def __call__(self, X0: Any, W: Any) -> np.ndarray:
        env = self._env(X0, W)
        for k in self.kernels:
            k(env)
        return env[self.storage["X1"]].numpy()

    def time(self, X0: Any, W: Any, *, repeat: int = 5) -> float:
        """Seconds per layer (sum of its kernels' best times)."""
        env = self._env(X0, W)
        return sum(k.time(env, repeat=repeat).min for k in self.kernels)


def gcn_layer(A: Any, X0: Any, W: Any, fused: bool = True, *, dtype: Any = "float32",
              target: Any = None) -> np.ndarray:
    """``(A·X0)·W`` with the GOGETA-fused kernel (``fused=True``) or SpMM then GEMM."""
    if np.ndim(X0) != 2 or np.ndim(W) != 2:
        raise ShapeError(f"gcn_layer: X0 and W must be matrices, got shapes {np.shape(X0)} and {np.shape(W)}")
    layer = GCNLayer(A, np.shape(X0)[1], np.shape(W)[1], fused=fused, dtype=dtype, target=target)
    return layer(X0, W)


def gcn_layer_numpy(A: Any, X0: Any, W: Any) -> np.ndarray:
    """The scipy + numpy peer: ``(A @ X0) @ W``."""
    return np.asarray((A @ X0) @ W)
