"""ONNX graphs built with ``onnx.helper`` (seeded weights as initializers; nothing is downloaded).

* :func:`mlp_onnx`: ``MatMul + Add (+ Relu)`` layers, optionally ending in ``Softmax``
  (an op no extension of the plugin handles: it stays on llvm);
* :func:`bottleneck_onnx`: a ResNet-50 bottleneck block with ``Conv``,
  ``BatchNormalization``, ``Relu`` and the residual ``Add``;
* :func:`gcn_onnx`: the 2-layer GCN with its normalised adjacency as a dense initializer.

Each returns a checked ``onnx.ModelProto`` whose single input is ``x``;
:func:`save` writes one to a file for ``tvm-ext compile MODEL.onnx``.

>>> m = mlp_onnx([8, 16, 4], batch=2)
>>> [n.op_type for n in m.graph.node]
['MatMul', 'Add', 'Relu', 'MatMul', 'Add', 'Identity']
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tvm_ext.errors import ShapeError

__all__ = ["OPSET", "mlp_onnx", "bottleneck_onnx", "gcn_onnx", "save"]

#: The ONNX opset the graphs are written for.
OPSET = 17


class _Graph:
    """Collects nodes and initializers; names are unique by a running counter."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.count = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, stem: str, array: np.ndarray) -> str:
        n = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array, np.float32), n))
        return n

    def node(self, op: str, inputs: Sequence[str], **attrs: Any) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        return out

    def model(self, name: str, x_shape: Sequence[int], out: str, out_shape: Sequence[int]) -> onnx.ModelProto:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(out_shape))
        self.nodes.append(helper.make_node("Identity", [out], ["y"]))
        graph = helper.make_graph(self.nodes, name, [x], [y], initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="tvm-ext")
        m.ir_version = 8
        onnx.checker.check_model(m)
        return m


def _positive(what: str, **sizes: int) -> None:
    for k, v in sizes.items():
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ShapeError(f"{what}: {k} must be a positive integer, got {v!r}")


def mlp_onnx(sizes: Sequence[int], batch: int = 1, *, softmax: bool = False, seed: int = 0) -> onnx.ModelProto:
    """``x (batch, sizes[0])`` through ``MatMul + Add`` layers with ``Relu`` between them."""
    if len(sizes) < 2:
        raise ShapeError(f"mlp_onnx: needs at least [in, out] sizes, got {list(sizes)}")
    _positive("mlp_onnx", batch=batch, **{f"sizes[{i}]": s for i, s in enumerate(sizes)})
    g = _Graph(seed)
    h = "x"
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = g.const("w", g.rng.normal(0, np.sqrt(2.0 / (a + b)), (a, b)))
        bias = g.const("b", g.rng.normal(0, 0.1, b))
        h = g.node("Add", [g.node("MatMul", [h, w]), bias])
        if i + 2 < len(sizes):
            h = g.node("Relu", [h])
    if softmax:
        h = g.node("Softmax", [h], axis=-1)
    return g.model("mlp", (batch, sizes[0]), h, (batch, sizes[-1]))


def _conv_bn(g: _Graph, x: str, c_in: int, c_out: int, k: int, stride: int, relu: bool) -> str:
    w = g.const("conv_w", g.rng.normal(0, np.sqrt(2.0 / (c_in * k * k)), (c_out, c_in, k, k)))
    p = k // 2
    y = g.node("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[p, p, p, p])
    scale = g.const("bn_scale", g.rng.uniform(0.75, 1.25, c_out))
    bias = g.const("bn_bias", g.rng.normal(0, 0.1, c_out))
    mean = g.const("bn_mean", g.rng.normal(0, 0.1, c_out))
    var = g.const("bn_var", g.rng.uniform(0.75, 1.25, c_out))
    y = g.node("BatchNormalization", [y, scale, bias, mean, var], epsilon=1e-5)
    return g.node("Relu", [y]) if relu else y


def bottleneck_onnx(c_in: int, mid: int, hw: int, *, c_out: int | None = None, stride: int = 1, batch: int = 1,
                    seed: int = 0) -> onnx.ModelProto:
    """ResNet-50 bottleneck (NCHW): 1x1, 3x3 (stride), 1x1 with BN, projected skip when needed, ReLU."""
    c_out = c_out or 4 * mid
    _positive("bottleneck_onnx", c_in=c_in, mid=mid, hw=hw, c_out=c_out, stride=stride, batch=batch)
    g = _Graph(seed)
    y = _conv_bn(g, "x", c_in, mid, 1, 1, True)
    y = _conv_bn(g, y, mid, mid, 3, stride, True)
    y = _conv_bn(g, y, mid, c_out, 1, 1, False)
    skip = "x" if (stride == 1 and c_in == c_out) else _conv_bn(g, "x", c_in, c_out, 1, stride, False)
    out = g.node("Relu", [g.node("Add", [y, skip])])
    ohw = (hw - 1) // stride + 1
    return g.model("bottleneck", (batch, c_in, hw, hw), out, (batch, c_out, ohw, ohw))


def gcn_onnx(adj: Any, in_features: int, hidden: int, classes: int, *, seed: int = 0) -> onnx.ModelProto:
    """Kipf's 2-layer GCN with the (normalised) adjacency as a dense initializer."""
    dense = adj.toarray() if hasattr(adj, "toarray") else np.asarray(adj)
    if dense.ndim != 2 or dense.shape[0] != dense.shape[1]:
        raise ShapeError(f"gcn_onnx: the adjacency must be square, got shape {dense.shape}")
    _positive("gcn_onnx", in_features=in_features, hidden=hidden, classes=classes)
    n = dense.shape[0]
    g = _Graph(seed)
    a = g.const("adj", dense)
    w1 = g.const("w1", g.rng.normal(0, np.sqrt(2.0 / (in_features + hidden)), (in_features, hidden)))
    w2 = g.const("w2", g.rng.normal(0, np.sqrt(2.0 / (hidden + classes)), (hidden, classes)))
    b1, b2 = g.const("b1", g.rng.normal(0, 0.1, hidden)), g.const("b2", g.rng.normal(0, 0.1, classes))
    h = g.node("Relu", [g.node("Add", [g.node("MatMul", [a, g.node("MatMul", ["x", w1])]), b1])])
    out = g.node("Add", [g.node("MatMul", [a, g.node("MatMul", [h, w2])]), b2])
    return g.model("gcn", (n, in_features), out, (n, classes))


def save(model: onnx.ModelProto, path: str | os.PathLike) -> str:
    """Write ``model`` to ``path``; returns the path as a string."""
    onnx.save_model(model, str(path))
    return str(path)
