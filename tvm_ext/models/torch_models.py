"""The five demo models as small PyTorch modules (seeded weights; nothing is downloaded).

* :class:`MLP`: linear layers with ReLU between them.
* :class:`GCN`: Kipf & Welling's 2-layer GCN, ``Â·relu(Â·(X·W1) + b1)·W2 + b2``, with
  the normalised adjacency ``Â`` stored as a dense buffer (what a frontend
  hands a compiler: torch.export densifies sparse tensors anyway).
* :class:`MobileNetV1Stack`: depthwise-separable blocks (3x3 depthwise + BN +
  ReLU, 1x1 pointwise + BN + ReLU) from ``MOBILENET_V1_SEPARABLE``.
* :class:`GRUModel`: one ``nn.GRU`` layer run over a whole sequence
  (DeepBench shapes: ``DEEPBENCH_GRU``, 128 steps).
* :class:`Bottleneck`: a ResNet-50 bottleneck block (1x1, 3x3, 1x1, BN, residual).

BatchNorm running statistics are randomised, so eval-mode BN is not an
identity and the compiled model has real work to get right.

>>> import torch
>>> net = MLP([8, 16, 4], seed=0)
>>> tuple(net(torch.zeros(2, 8)).shape)
(2, 4)
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from tvm_ext.errors import ShapeError

__all__ = ["MLP", "GCN", "SeparableBlock", "MobileNetV1Stack", "GRUModel", "Bottleneck",
           "randomize_batchnorm"]


def randomize_batchnorm(module: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BatchNorm layer seeded, non-trivial statistics and affine parameters."""
    g = torch.Generator().manual_seed(seed)
    for m in module.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(c, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(c, generator=g) * 0.1)
    return module.eval()


def _check_sizes(what: str, **sizes: int) -> None:
    for name, v in sizes.items():
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ShapeError(f"{what}: {name} must be a positive integer, got {v!r}")


class MLP(nn.Module):
    """``Linear -> ReLU -> ... -> Linear`` over ``sizes = [in, hidden..., out]``."""

    def __init__(self, sizes: Sequence[int], seed: int = 0):
        super().__init__()
        if len(sizes) < 2:
            raise ShapeError(f"MLP: needs at least [in, out] sizes, got {list(sizes)}")
        _check_sizes("MLP", **{f"sizes[{i}]": s for i, s in enumerate(sizes)})
        torch.manual_seed(seed)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.eval()

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i + 1 < len(self.layers):
                x = torch.relu(x)
        return x


class GCN(nn.Module):
    """2-layer GCN over a fixed normalised adjacency ``adj`` (scipy sparse or dense, n x n)."""

    def __init__(self, adj: Any, in_features: int, hidden: int, classes: int, seed: int = 0):
        super().__init__()
        _check_sizes("GCN", in_features=in_features, hidden=hidden, classes=classes)
        dense = adj.toarray() if hasattr(adj, "toarray") else np.asarray(adj)
        if dense.ndim != 2 or dense.shape[0] != dense.shape[1]:
            raise ShapeError(f"GCN: the adjacency must be square, got shape {dense.shape}")
        self.register_buffer("adj", torch.from_numpy(np.ascontiguousarray(dense, dtype=np.float32)))
        g = torch.Generator().manual_seed(seed)

        def glorot(a: int, b: int):
            return nn.Parameter(torch.randn(a, b, generator=g) * float(np.sqrt(2.0 / (a + b))))

        self.w1, self.w2 = glorot(in_features, hidden), glorot(hidden, classes)
        self.b1 = nn.Parameter(torch.randn(hidden, generator=g) * 0.1)
        self.b2 = nn.Parameter(torch.randn(classes, generator=g) * 0.1)
        self.eval()

    def forward(self, x):
        h = torch.relu(self.adj @ (x @ self.w1) + self.b1)
        return self.adj @ (h @ self.w2) + self.b2


class SeparableBlock(nn.Module):
    """MobileNet-v1 block: depthwise 3x3 (stride s) + BN + ReLU, pointwise 1x1 + BN + ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        _check_sizes("SeparableBlock", c_in=c_in, c_out=c_out, stride=stride)
        self.dw = nn.Conv2d(c_in, c_in, 3, stride=stride, padding=1, groups=c_in, bias=False)
        self.bn1 = nn.BatchNorm2d(c_in)
        self.pw = nn.Conv2d(c_in, c_out, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)

    def forward(self, x):
        x = torch.relu(self.bn1(self.dw(x)))
        return torch.relu(self.bn2(self.pw(x)))


class MobileNetV1Stack(nn.Module):
    """A stack of depthwise-separable blocks given as ``(c_in, c_out, stride)`` triples.

    :meth:`from_table` takes blocks of MobileNet-v1's Table 1 (``MOBILENET_V1_SEPARABLE``),
    optionally scaled by a width multiplier.
    """

    def __init__(self, blocks: Sequence[tuple[int, int, int]], seed: int = 0):
        super().__init__()
        if not blocks:
            raise ShapeError("MobileNetV1Stack: needs at least one block")
        for (_, c_out, _), (c_in, _, _) in zip(blocks[:-1], blocks[1:]):
            if c_out != c_in:
                raise ShapeError(f"MobileNetV1Stack: block outputs {c_out} channels, the next takes {c_in}")
        torch.manual_seed(seed)
        self.blocks = nn.Sequential(*(SeparableBlock(a, b, s) for a, b, s in blocks))
        self.spec = [tuple(int(v) for v in b) for b in blocks]
        randomize_batchnorm(self, seed)

    @classmethod
    def from_table(cls, first: int = 1, count: int = 13, width: float = 1.0, seed: int = 0) -> "MobileNetV1Stack":
        """Blocks ``first .. first+count-1`` (1-based) of MobileNet-v1, channels times ``width``."""
        from tvm_ext.workloads import MOBILENET_V1_SEPARABLE

        table = MOBILENET_V1_SEPARABLE[first - 1:first - 1 + count]
        if first < 1 or not table:
            raise ShapeError(f"MobileNetV1Stack: blocks {first}..{first + count - 1} are not in 1..13")

        def scale(c: int) -> int:
            return max(8, int(round(c * width / 8)) * 8)

        return cls([(scale(dw.c_in), scale(pw.c_out), dw.stride) for dw, pw in table], seed)

    def forward(self, x):
        return self.blocks(x)


class GRUModel(nn.Module):
    """One GRU layer over a sequence ``x: (T, B, I)``; returns every hidden state ``(T, B, H)``."""

    def __init__(self, input_size: int, hidden: int, seed: int = 0):
        super().__init__()
        _check_sizes("GRUModel", input_size=input_size, hidden=hidden)
        torch.manual_seed(seed)
        self.gru = nn.GRU(input_size, hidden)
        self.eval()

    def forward(self, x):
        return self.gru(x)[0]


class Bottleneck(nn.Module):
    """ResNet-50 bottleneck: 1x1 (c_in -> mid) + BN + ReLU, 3x3 (stride) + BN + ReLU,
    1x1 (mid -> c_out, default 4 * mid) + BN, plus the input (projected when the shape
    changes), then ReLU."""

    def __init__(self, c_in: int, mid: int, c_out: int | None = None, stride: int = 1, seed: int = 0):
        super().__init__()
        c_out = c_out or 4 * mid
        _check_sizes("Bottleneck", c_in=c_in, mid=mid, c_out=c_out, stride=stride)
        torch.manual_seed(seed)
        self.conv1, self.bn1 = nn.Conv2d(c_in, mid, 1, bias=False), nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3, self.bn3 = nn.Conv2d(mid, c_out, 1, bias=False), nn.BatchNorm2d(c_out)
        self.project = None
        if stride != 1 or c_in != c_out:
            self.project = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                         nn.BatchNorm2d(c_out))
        randomize_batchnorm(self, seed)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        skip = x if self.project is None else self.project(x)
        return torch.relu(y + skip)
