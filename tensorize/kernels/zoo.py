"""The TE kernel zoo of ISA Mapper's evaluation (§6.1/§7), each with a numpy reference.

Each kernel is a TE definition plus a reference in numpy (:class:`Kernel`):
matmul, batch matmul, dense with bias, conv1d (Listing 5), conv2d NCHW and
NHWC (with stride and padding), depthwise conv2d, the separable depthwise
conv of Listing 3 (one compute with the triple product, which only maps after
factorization) and the GRU cell with its two gate matmuls.  A schedulable
PrimFunc becomes a kernel with :func:`kernel_from_prim_func`.

>>> k = matmul(32, 32, 16)
>>> [t.name for t in k.tensors], k.flops
(['A', 'B', 'C'], 32768)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tvm_ext.errors import InputError, ShapeError

__all__ = [
    "Kernel",
    "kernel_from_prim_func",
    "matmul",
    "batch_matmul",
    "dense_bias",
    "conv1d",
    "conv2d_nchw",
    "conv2d_nhwc",
    "depthwise_conv2d",
    "separable_conv2d",
    "gru_cell",
    "KERNELS",
    "DEFAULT_SIZES",
    "make_kernel",
]


@dataclass
class Kernel:
    """A kernel: TE tensors (inputs then output), a numpy reference, its flop count.

    ``reference(*inputs) -> output`` works on numpy arrays in the kernel's layouts.
    A kernel can also wrap a schedulable PrimFunc (:func:`kernel_from_prim_func`):
    then ``tensors`` is empty and the last parameter is the output.
    """

    name: str
    tensors: list
    reference: Callable[..., np.ndarray] | None
    flops: int
    params: dict[str, Any] = field(default_factory=dict)
    func: Any = None

    @property
    def inputs(self) -> list:
        return self.tensors[:-1]

    @property
    def output(self):
        return self.tensors[-1]

    def prim_func(self):
        """The schedulable PrimFunc (``te.create_prim_func`` of the tensors, named ``main``)."""
        from tvm import te

        return self.func if self.func is not None else te.create_prim_func(self.tensors)

    def arg_specs(self) -> list[tuple[str, tuple[int, ...], str]]:
        """(name, shape, dtype) of every argument, inputs then the output."""
        if self.func is None:
            return [(t.op.name, _shape(t), str(t.dtype)) for t in self.tensors]
        bmap = getattr(self.func, "buffer_map", None)  # TVM < 0.27: params are handles
        bufs = [bmap[p] if bmap else p for p in self.func.params]
        return [(b.name, _shape(b), str(b.dtype)) for b in bufs]

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Random inputs in [-1, 1) with the kernel's shapes and dtypes."""
        rng = np.random.default_rng(seed)
        return [rng.uniform(-1, 1, shape).astype(dtype) for _, shape, dtype in self.arg_specs()[:-1]]

    def signature(self) -> tuple:
        """A hashable key naming the kernel and its sizes (for the kernel cache)."""
        if self.func is not None:
            import hashlib

            return (self.name, hashlib.sha1(self.func.script().encode()).hexdigest()[:16])
        return (self.name, tuple(sorted((k, str(v)) for k, v in self.params.items())))


def kernel_from_prim_func(func, reference: Callable[..., np.ndarray] | None = None, name: str = "prim_func",
                          flops: int = 0) -> Kernel:
    """Wrap a schedulable PrimFunc (inputs first, output last) as a :class:`Kernel`.

    >>> from tvm import te
    >>> A = te.placeholder((8,), name="A")
    >>> k = kernel_from_prim_func(te.create_prim_func([A, te.compute((8,), lambda i: A[i] * 2, name="B")]))
    >>> [n for n, _, _ in k.arg_specs()]
    ['A', 'B']
    """
    from tvm import tirx

    if not isinstance(func, tirx.PrimFunc):
        raise InputError(f"kernel_from_prim_func: expected a PrimFunc, got {type(func).__name__}")
    return Kernel(name, [], reference, flops, {}, func)


def _shape(t) -> tuple[int, ...]:
    return tuple(int(s) for s in t.shape)


def _positive(**sizes: int) -> None:
    for name, v in sizes.items():
        if not isinstance(v, (int, np.integer)) or v <= 0:
            raise ShapeError(f"kernel size {name}={v!r} must be a positive int")


def _out_size(size: int, kernel: int, stride: int, pad: int, what: str) -> int:
    out = (size + 2 * pad - kernel) // stride + 1
    if out <= 0:
        raise ShapeError(f"{what}: input {size} with kernel {kernel}, stride {stride}, pad {pad} has no output")
    return out


# ---------------------------------------------------------------------------
# matmul family
# ---------------------------------------------------------------------------
def matmul(M: int, N: int, K: int, dtype: str = "float32") -> Kernel:
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` (Listing 1)."""
    from tvm import te

    _positive(M=M, N=N, K=K)
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return Kernel("matmul", [A, B, C], lambda a, b: a @ b, 2 * M * N * K, dict(M=M, N=N, K=K, dtype=dtype))


def batch_matmul(batch: int, M: int, N: int, K: int, dtype: str = "float32") -> Kernel:
    """``C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]``."""
    from tvm import te

    _positive(batch=batch, M=M, N=N, K=K)
    A = te.placeholder((batch, M, K), dtype, name="A")
    B = te.placeholder((batch, K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((batch, M, N), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    return Kernel("batch_matmul", [A, B, C], lambda a, b: a @ b, 2 * batch * M * N * K,
                  dict(batch=batch, M=M, N=N, K=K, dtype=dtype))


def dense_bias(M: int, N: int, K: int, dtype: str = "float32") -> Kernel:
    """``Y = X @ W.T + bias`` with torch's ``Linear`` layout ``W[N, K]``."""
    from tvm import te

    _positive(M=M, N=N, K=K)
    X = te.placeholder((M, K), dtype, name="X")
    W = te.placeholder((N, K), dtype, name="W")
    bias = te.placeholder((N,), dtype, name="bias")
    k = te.reduce_axis((0, K), name="k")
    D = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="dense")
    Y = te.compute((M, N), lambda i, j: D[i, j] + bias[j], name="bias_add")
    return Kernel("dense_bias", [X, W, bias, Y], lambda x, w, b: x @ w.T + b, 2 * M * N * K + M * N,
                  dict(M=M, N=N, K=K, dtype=dtype))


# ---------------------------------------------------------------------------
# convolutions
# ---------------------------------------------------------------------------
def conv1d(batch: int, width: int, kernel: int, c_in: int, c_out: int, dtype: str = "float32") -> Kernel:
    """Listing 5: ``C[i][x][ko] += A[i][x+d][ki] * B[d][ki][ko]`` (valid padding)."""
    from tvm import te

    _positive(batch=batch, width=width, kernel=kernel, c_in=c_in, c_out=c_out)
    out_w = _out_size(width, kernel, 1, 0, "conv1d")
    A = te.placeholder((batch, width, c_in), dtype, name="A")
    B = te.placeholder((kernel, c_in, c_out), dtype, name="B")
    d = te.reduce_axis((0, kernel), name="d")
    ki = te.reduce_axis((0, c_in), name="ki")
    C = te.compute((batch, out_w, c_out),
                   lambda i, x, ko: te.sum(A[i, x + d, ki] * B[d, ki, ko], axis=[d, ki]), name="C")

    def ref(a, b):
        return sum(np.einsum("ixk,ko->ixo", a[:, t:t + out_w, :], b[t]) for t in range(kernel))

    return Kernel("conv1d", [A, B, C], ref, 2 * batch * out_w * c_out * c_in * kernel,
                  dict(batch=batch, width=width, kernel=kernel, c_in=c_in, c_out=c_out, dtype=dtype))


def _pad_nhwc(X, pad: int, name: str = "pad"):
    from tvm import topi

    return topi.nn.pad(X, [0, pad, pad, 0], name=name) if pad else X


def _windows(x: np.ndarray, kernel: int, stride: int, pad: int, out: int, spatial: tuple[int, int]):
    """Yield (rh, rw, strided window of x) for a numpy direct convolution."""
    widths = [(0, 0)] * x.ndim
    for ax in spatial:
        widths[ax] = (pad, pad)
    xp = np.pad(x, widths)
    for rh in range(kernel):
        for rw in range(kernel):
            sl = [slice(None)] * x.ndim
            sl[spatial[0]] = slice(rh, rh + stride * (out - 1) + 1, stride)
            sl[spatial[1]] = slice(rw, rw + stride * (out - 1) + 1, stride)
            yield rh, rw, xp[tuple(sl)]


def conv2d_nhwc(n: int, c_in: int, c_out: int, hw: int, kernel: int, stride: int = 1, pad: int = 0,
                dtype: str = "float32") -> Kernel:
    """``Y[n, h, w, co] = sum X[n, s*h+rh, s*w+rw, ci] * W[rh, rw, ci, co]`` (HWIO weights)."""
    from tvm import te

    _positive(n=n, c_in=c_in, c_out=c_out, hw=hw, kernel=kernel, stride=stride)
    out = _out_size(hw, kernel, stride, pad, "conv2d_nhwc")
    X = te.placeholder((n, hw, hw, c_in), dtype, name="X")
    W = te.placeholder((kernel, kernel, c_in, c_out), dtype, name="W")
    P = _pad_nhwc(X, pad)
    rh = te.reduce_axis((0, kernel), name="rh")
    rw = te.reduce_axis((0, kernel), name="rw")
    rc = te.reduce_axis((0, c_in), name="rc")
    Y = te.compute((n, out, out, c_out), lambda b, h, w, co: te.sum(
        P[b, h * stride + rh, w * stride + rw, rc] * W[rh, rw, rc, co], axis=[rh, rw, rc]), name="conv")

    def ref(x, w):
        return sum(np.einsum("nhwc,co->nhwo", win, w[a, b]) for a, b, win in
                   _windows(x, kernel, stride, pad, out, (1, 2)))

    return Kernel("conv2d_nhwc", [X, W, Y], ref, 2 * n * out * out * c_out * c_in * kernel * kernel,
                  dict(n=n, c_in=c_in, c_out=c_out, hw=hw, kernel=kernel, stride=stride, pad=pad, dtype=dtype))


def conv2d_nchw(n: int, c_in: int, c_out: int, hw: int, kernel: int, stride: int = 1, pad: int = 0,
                dtype: str = "float32") -> Kernel:
    """``Y[n, co, h, w] = sum X[n, ci, s*h+rh, s*w+rw] * W[co, ci, rh, rw]`` (torch layout)."""
    from tvm import te, topi

    _positive(n=n, c_in=c_in, c_out=c_out, hw=hw, kernel=kernel, stride=stride)
    out = _out_size(hw, kernel, stride, pad, "conv2d_nchw")
    X = te.placeholder((n, c_in, hw, hw), dtype, name="X")
    W = te.placeholder((c_out, c_in, kernel, kernel), dtype, name="W")
    P = topi.nn.pad(X, [0, 0, pad, pad], name="pad") if pad else X
    rc = te.reduce_axis((0, c_in), name="rc")
    rh = te.reduce_axis((0, kernel), name="rh")
    rw = te.reduce_axis((0, kernel), name="rw")
    Y = te.compute((n, c_out, out, out), lambda b, co, h, w: te.sum(
        P[b, rc, h * stride + rh, w * stride + rw] * W[co, rc, rh, rw], axis=[rc, rh, rw]), name="conv")

    def ref(x, w):
        return sum(np.einsum("nchw,oc->nohw", win, w[:, :, a, b]) for a, b, win in
                   _windows(x, kernel, stride, pad, out, (2, 3)))

    return Kernel("conv2d_nchw", [X, W, Y], ref, 2 * n * out * out * c_out * c_in * kernel * kernel,
                  dict(n=n, c_in=c_in, c_out=c_out, hw=hw, kernel=kernel, stride=stride, pad=pad, dtype=dtype))


def depthwise_conv2d(n: int, c: int, hw: int, kernel: int, stride: int = 1, pad: int = 0,
                     dtype: str = "float32") -> Kernel:
    """NHWC depthwise: ``Y[n, h, w, c] = sum X[n, s*h+rh, s*w+rw, c] * W[rh, rw, c]``."""
    from tvm import te

    _positive(n=n, c=c, hw=hw, kernel=kernel, stride=stride)
    out = _out_size(hw, kernel, stride, pad, "depthwise_conv2d")
    X = te.placeholder((n, hw, hw, c), dtype, name="X")
    W = te.placeholder((kernel, kernel, c), dtype, name="W")
    P = _pad_nhwc(X, pad)
    rh = te.reduce_axis((0, kernel), name="rh")
    rw = te.reduce_axis((0, kernel), name="rw")
    Y = te.compute((n, out, out, c), lambda b, h, w, ch: te.sum(
        P[b, h * stride + rh, w * stride + rw, ch] * W[rh, rw, ch], axis=[rh, rw]), name="depthwise")

    def ref(x, w):
        return sum(win * w[a, b] for a, b, win in _windows(x, kernel, stride, pad, out, (1, 2)))

    return Kernel("depthwise_conv2d", [X, W, Y], ref, 2 * n * out * out * c * kernel * kernel,
                  dict(n=n, c=c, hw=hw, kernel=kernel, stride=stride, pad=pad, dtype=dtype))


def separable_conv2d(n: int, c_in: int, c_out: int, hw: int, kernel: int, stride: int = 1, pad: int = 0,
                     multiplier: int = 1, dtype: str = "float32") -> Kernel:
    """Listing 3 as one compute (needs factorization before it maps)::

        C[b][i][j][k] += A[b][s*i+di][s*j+dj][q] * D[di][dj][q][r] * P[c*q+r][k]

    ``A`` is NHWC, ``D`` the depthwise filter (multiplier ``c``), ``P`` the pointwise one.
    """
    from tvm import te

    _positive(n=n, c_in=c_in, c_out=c_out, hw=hw, kernel=kernel, stride=stride, multiplier=multiplier)
    out = _out_size(hw, kernel, stride, pad, "separable_conv2d")
    cm = multiplier
    A = te.placeholder((n, hw, hw, c_in), dtype, name="A")
    D = te.placeholder((kernel, kernel, c_in, cm), dtype, name="D")
    P = te.placeholder((c_in * cm, c_out), dtype, name="P")
    Ap = _pad_nhwc(A, pad)
    di = te.reduce_axis((0, kernel), name="di")
    dj = te.reduce_axis((0, kernel), name="dj")
    q = te.reduce_axis((0, c_in), name="q")
    r = te.reduce_axis((0, cm), name="r")
    C = te.compute((n, out, out, c_out), lambda b, i, j, k: te.sum(
        Ap[b, stride * i + di, stride * j + dj, q] * D[di, dj, q, r] * P[cm * q + r, k],
        axis=[di, dj, q, r]), name="C")

    def ref(a, d, p):
        dw = np.zeros((n, out, out, c_in, cm), dtype=np.float64)
        for x, y, win in _windows(a, kernel, stride, pad, out, (1, 2)):
            dw += win[..., None] * d[x, y][None, None, None]
        return (dw.reshape(n, out, out, c_in * cm) @ p).astype(a.dtype)

    flops = 2 * n * out * out * c_in * cm * (kernel * kernel + c_out)
    return Kernel("separable_conv2d", [A, D, P, C], ref, flops,
                  dict(n=n, c_in=c_in, c_out=c_out, hw=hw, kernel=kernel, stride=stride, pad=pad,
                       multiplier=multiplier, dtype=dtype))


def gru_cell(batch: int, input_size: int, hidden: int, dtype: str = "float32") -> Kernel:
    """One GRU step with torch's ``GRUCell`` layouts and gate order (r, z, n).

    The two gate matmuls ``gx = x @ W_ih.T`` and ``gh = h @ W_hh.T`` are the
    blocks that map to matmul; the gate arithmetic is one elementwise block.
    """
    from tvm import te

    _positive(batch=batch, input_size=input_size, hidden=hidden)
    H = hidden
    x = te.placeholder((batch, input_size), dtype, name="x")
    h = te.placeholder((batch, H), dtype, name="h")
    w_ih = te.placeholder((3 * H, input_size), dtype, name="w_ih")
    w_hh = te.placeholder((3 * H, H), dtype, name="w_hh")
    b_ih = te.placeholder((3 * H,), dtype, name="b_ih")
    b_hh = te.placeholder((3 * H,), dtype, name="b_hh")
    ki = te.reduce_axis((0, input_size), name="ki")
    kh = te.reduce_axis((0, H), name="kh")
    gx = te.compute((batch, 3 * H), lambda b, g: te.sum(x[b, ki] * w_ih[g, ki], axis=ki), name="gate_x")
    gh = te.compute((batch, 3 * H), lambda b, g: te.sum(h[b, kh] * w_hh[g, kh], axis=kh), name="gate_h")

    def cell(b, u):
        r = te.sigmoid(gx[b, u] + b_ih[u] + gh[b, u] + b_hh[u])
        z = te.sigmoid(gx[b, H + u] + b_ih[H + u] + gh[b, H + u] + b_hh[H + u])
        nn = te.tanh(gx[b, 2 * H + u] + b_ih[2 * H + u] + r * (gh[b, 2 * H + u] + b_hh[2 * H + u]))
        return (1.0 - z) * nn + z * h[b, u]

    out = te.compute((batch, H), cell, name="h_next")

    def ref(xv, hv, wi, wh, bi, bh):
        def sig(v):
            return 1.0 / (1.0 + np.exp(-v))

        a = xv @ wi.T + bi
        c = hv @ wh.T + bh
        r = sig(a[:, :H] + c[:, :H])
        z = sig(a[:, H:2 * H] + c[:, H:2 * H])
        nn = np.tanh(a[:, 2 * H:] + r * c[:, 2 * H:])
        return ((1 - z) * nn + z * hv).astype(xv.dtype)

    flops = 2 * batch * 3 * H * (input_size + H) + 12 * batch * H
    return Kernel("gru_cell", [x, h, w_ih, w_hh, b_ih, b_hh, out], ref, flops,
                  dict(batch=batch, input_size=input_size, hidden=hidden, dtype=dtype))


#: Kernel constructors by name (the ``tvm-ext map`` short names and the full ones).
KERNELS: dict[str, Callable[..., Kernel]] = {
    "matmul": matmul,
    "batch_matmul": batch_matmul,
    "dense_bias": dense_bias,
    "conv1d": conv1d,
    "conv2d": conv2d_nhwc,
    "conv2d_nhwc": conv2d_nhwc,
    "conv2d_nchw": conv2d_nchw,
    "depthwise": depthwise_conv2d,
    "depthwise_conv2d": depthwise_conv2d,
    "sepconv": separable_conv2d,
    "separable_conv2d": separable_conv2d,
    "gru": gru_cell,
    "gru_cell": gru_cell,
}

#: Small default sizes per kernel name (what ``tvm-ext map NAME`` uses).
DEFAULT_SIZES: dict[str, dict[str, int]] = {
    "matmul": dict(M=64, N=64, K=64),
    "batch_matmul": dict(batch=2, M=32, N=32, K=32),
    "dense_bias": dict(M=32, N=64, K=48),
    "conv1d": dict(batch=2, width=34, kernel=3, c_in=16, c_out=32),
    "conv2d": dict(n=1, c_in=16, c_out=32, hw=16, kernel=3, stride=1, pad=1),
    "conv2d_nhwc": dict(n=1, c_in=16, c_out=32, hw=16, kernel=3, stride=1, pad=1),
    "conv2d_nchw": dict(n=1, c_in=16, c_out=32, hw=16, kernel=3, stride=1, pad=1),
    "depthwise": dict(n=1, c=32, hw=16, kernel=3, stride=1, pad=1),
    "depthwise_conv2d": dict(n=1, c=32, hw=16, kernel=3, stride=1, pad=1),
    "sepconv": dict(n=1, c_in=16, c_out=32, hw=14, kernel=3, stride=1, pad=1),
    "separable_conv2d": dict(n=1, c_in=16, c_out=32, hw=14, kernel=3, stride=1, pad=1),
    "gru": dict(batch=4, input_size=32, hidden=32),
    "gru_cell": dict(batch=4, input_size=32, hidden=32),
}


def make_kernel(name: str, **sizes: int) -> Kernel:
    """Build kernel ``name`` with :data:`DEFAULT_SIZES` overridden by ``sizes``.

    >>> make_kernel("conv2d", hw=8).params["hw"]
    8
    """
    if name not in KERNELS:
        raise InputError(f"unknown kernel {name!r}; known: {', '.join(sorted(KERNELS))}")
    args = dict(DEFAULT_SIZES[name])
    args.update(sizes)
    return KERNELS[name](**args)
