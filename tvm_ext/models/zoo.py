"""The five benchmark models at three sizes: ``tiny`` (tests), ``small`` (demo), ``full`` (benchmarks).

:func:`get_model` returns a :class:`ModelCase`: the PyTorch module, seeded
example inputs, and a one-line description of the shapes.  The ``full``
sizes follow the seeds' tables: MobileNet-v1's 13 separable blocks
(``MOBILENET_V1_SEPARABLE``), a DeepBench GRU (hidden 512, batch 16) over 128
steps (``DEEPBENCH_GRU``), ResNet-50's res2 bottleneck at 56x56
(``RESNET50_CONV``) and a GCN on cora (GOGETA Table 2).  ``small`` keeps the
shapes but shrinks the work (32 GRU steps, res2 at 28x28, 3 MobileNet blocks
at half width) so the demo runs in about a minute.

>>> import pytest; _ = pytest.importorskip("torch")
>>> case = get_model("mlp", "tiny")
>>> case.name, [a.shape for a in case.inputs]
('mlp', [(8, 32)])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tvm_ext.errors import InputError

__all__ = ["MODEL_NAMES", "SIZES", "ModelCase", "get_model", "small_graph"]

MODEL_NAMES = ("mlp", "gcn", "mobilenet", "gru", "bottleneck")
SIZES = ("tiny", "small", "full")


@dataclass
class ModelCase:
    """A model definition ready to import: module, inputs, description."""

    name: str
    size: str
    module: Any
    inputs: list[np.ndarray]
    description: str
    meta: dict[str, Any] = field(default_factory=dict)

    def relax_module(self):
        """The model imported through ``torch.export`` + the Relax torch frontend."""
        from tvm_ext.models.frontends import from_torch

        return from_torch(self.module, self.inputs)

    def reference(self) -> list[np.ndarray]:
        """PyTorch's own outputs on :attr:`inputs`."""
        from tvm_ext.models.frontends import torch_reference

        return torch_reference(self.module, self.inputs)


def _normal(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def small_graph(n: int = 96, density: float = 0.04, seed: int = 0):
    """A random symmetric graph with self-loops, normalised like a GCN adjacency."""
    import scipy.sparse as sp

    from tvm_ext.spmm_engine.gcn import normalize_adjacency
    from tvm_ext.workloads import uniform_random

    A = uniform_random(n, n, density, seed=seed)
    A = sp.csr_array(((A + A.T) != 0).astype(np.float64))
    return normalize_adjacency(A)


def _mlp(size: str) -> ModelCase:
    from tvm_ext.models.torch_models import MLP

    sizes, batch = {"tiny": ([32, 64, 10], 8), "small": ([784, 512, 512, 10], 64),
                    "full": ([1024, 2048, 2048, 1000], 64)}[size]
    return ModelCase("mlp", size, MLP(sizes), [_normal(1, batch, sizes[0])],
                     f"MLP {'-'.join(map(str, sizes))}, batch {batch}")


def _gcn(size: str) -> ModelCase:
    from tvm_ext.models.torch_models import GCN

    if size == "tiny":
        A, (f, h, c), label = small_graph(), (24, 16, 4), "random graph"
    else:
        from tvm_ext.spmm_engine.gcn import normalize_adjacency
        from tvm_ext.workloads import load_matrix

        A, (f, h, c), label = normalize_adjacency(load_matrix("cora")), (1433, 16, 7), "cora"
    n = A.shape[0]
    x = (np.random.default_rng(2).random((n, f)) < 0.05).astype(np.float32)
    return ModelCase("gcn", size, GCN(A, f, h, c), [x],
                     f"2-layer GCN on {label} ({n} nodes, {A.nnz:,} edges incl. self-loops), {f}-{h}-{c}",
                     {"adjacency": A})


def _mobilenet(size: str) -> ModelCase:
    from tvm_ext.models.torch_models import MobileNetV1Stack

    if size == "tiny":
        net, hw, label = MobileNetV1Stack([(16, 32, 1), (32, 32, 2)]), 16, "2 blocks"
    elif size == "small":
        net, hw, label = MobileNetV1Stack.from_table(4, 3, width=0.5), 56, "blocks 4-6 at width 0.5"
    else:
        net, hw, label = MobileNetV1Stack.from_table(1, 13), 112, "all 13 blocks"
    c = net.spec[0][0]
    return ModelCase("mobilenet", size, net, [_normal(3, 1, c, hw, hw)],
                     f"MobileNet-v1 separable stack, {label}, input {c}x{hw}x{hw}")


def _gru(size: str) -> ModelCase:
    from tvm_ext.models.torch_models import GRUModel
    from tvm_ext.workloads import DEEPBENCH_GRU

    if size == "tiny":
        steps, batch, hidden = 4, 2, 16
    elif size == "small":  # 32 steps of DeepBench's smallest shape: the frontend unrolls every step
        shape = DEEPBENCH_GRU[0]
        steps, batch, hidden = 32, shape.batch, shape.hidden
    else:  # DeepBench hidden 512, batch 16, 128 steps (ISA Mapper §6.2.2)
        shape = DEEPBENCH_GRU[1]
        steps, batch, hidden = shape.steps, shape.batch, shape.hidden
    return ModelCase("gru", size, GRUModel(hidden, hidden), [_normal(4, steps, batch, hidden)],
                     f"GRU, {steps} steps, batch {batch}, hidden {hidden}")


def _bottleneck(size: str) -> ModelCase:
    from tvm_ext.models.torch_models import Bottleneck

    c_in, mid, hw = {"tiny": (32, 8, 8), "small": (256, 64, 28), "full": (256, 64, 56)}[size]
    return ModelCase("bottleneck", size, Bottleneck(c_in, mid), [_normal(5, 1, c_in, hw, hw)],
                     f"ResNet-50 bottleneck {c_in}-{mid}-{4 * mid} at {hw}x{hw}")


_BUILDERS: dict[str, Callable[[str], ModelCase]] = {
    "mlp": _mlp, "gcn": _gcn, "mobilenet": _mobilenet, "gru": _gru, "bottleneck": _bottleneck}


def get_model(name: str, size: str = "small") -> ModelCase:
    """One of :data:`MODEL_NAMES` at one of :data:`SIZES`."""
    if name not in _BUILDERS:
        raise InputError(f"unknown model {name!r}; choose from {', '.join(MODEL_NAMES)}")
    if size not in SIZES:
        raise InputError(f"unknown model size {size!r}; choose from {', '.join(SIZES)}")
    return _BUILDERS[name](size)
