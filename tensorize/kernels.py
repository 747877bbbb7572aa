"""ISA Mapper §6.1/§7: the kernels mapped end to end, and ``tensorized()`` to build them.

Each kernel of ISA Mapper's evaluation is a TE definition plus a numpy/torch-free
reference (:class:`Kernel`): matmul, batch matmul, dense with bias, conv1d
(Listing 5), conv2d NCHW and NHWC (with stride and padding), depthwise conv2d,
the separable depthwise conv of Listing 3 (one compute with the triple product,
which only maps after factorization) and the GRU cell with its two gate matmuls.

:func:`tensorized` runs the whole flow of the paper: find the mappings of every
block onto the ISA's instructions, select one per block, export the transformed
kernel when the mapping needed IR transforms, :func:`tensorize.emit.apply` it
and build through the kernel cache.

>>> k = matmul(32, 32, 16)
>>> [t.name for t in k.tensors], k.flops
(['A', 'B', 'C'], 32768)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from tvm_ext.errors import InputError, ShapeError

__all__ = [
    "Kernel",
    "matmul",
    "batch_matmul",
    "dense_bias",
    "conv1d",
    "conv2d_nchw",
    "conv2d_nhwc",
    "depthwise_conv2d",
    "separable_conv2d",
    "gru_cell",
    "kernel_from_prim_func",
    "KERNELS",
    "DEFAULT_SIZES",
    "make_kernel",
    "Plan",
    "plan_mappings",
    "simulate_plan",
    "plan_cycles",
    "mapping_rank",
    "real_calls",
    "compute_blocks",
    "program_to_te",
    "rebuild",
    "Tensorized",
    "tensorized",
    "DEFAULT_KNOBS",
    "TuneResult",
    "quick_tune",
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


#: Kernel constructors by name (the ``tvm-ext map`` names plus the rest of item 7).
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


# ---------------------------------------------------------------------------
# Choosing mappings and building the tensorized kernel
# ---------------------------------------------------------------------------
#: Transforms that leave the TIR block as written: the emitter re-derives layout
#: (transpose), operand order (commutativity) and padding (pad) from the block itself.
SCHEDULE_LEVEL_TRANSFORMS = frozenset({"commutativity", "pad", "transpose"})
_KIND_RANK = {"matmul": 0, "conv1d": 1, "axpy": 2, "elementwise": 3, "dot": 4}


def transform_names(mapping) -> list[str]:
    """Names of the transforms in a mapping's sequence (``factorization``, ``pad``, ...)."""
    return [str(t).split("(")[0] for t in getattr(mapping, "transforms", ())]


def compute_blocks(func) -> list[str]:
    """Names of the blocks of ``func`` that reduce (the ones worth an instruction)."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    out = []
    for b in sch.get_child_blocks(sch.get_sblock("root")):
        stmt = sch.get(b)
        if any(int(iv.iter_type) == 2 for iv in stmt.iter_vars):
            out.append(stmt.name_hint)
    return out


def _block_statements(program, block: str, exported: bool) -> list[int]:
    if exported:
        from tensorize.exporters import export_groups

        return next((list(ks) for name, ks in export_groups(program) if name == block), [])
    return [k for k, s in enumerate(program.statements) if s.block == block]


def _is_init(stmt) -> bool:
    from tensorize.isamir import Const

    return stmt.op == ":=" and isinstance(stmt.src, Const) and stmt.fn is None


def covers(mapping, block: str, exported: bool = False) -> bool:
    """True when the mapping computes every statement of ``block`` (its init aside)."""
    prog = mapping.program
    stmts = [k for k in _block_statements(prog, block, exported) if not _is_init(prog.statements[k])]
    return bool(stmts) and set(stmts) <= set(mapping.statement_map)


def origin_block(mapping) -> str | None:
    """The TIR block of the kernel as written that the mapped axes come from (or None)."""
    prog = mapping.program
    blocks = set()
    for hay in mapping.axis_map.values():
        origin = prog.axis(hay).origin if prog.has_axis(hay) else None
        if not origin:
            return None
        blocks.add(origin[0])
    return blocks.pop() if len(blocks) == 1 else None


def _keeps_output_layout(mapping) -> bool:
    """The needle's unit-stride output axis lands on the kernel output's unit-stride axis."""
    needle = mapping.instruction.needle
    n_out = needle.statements[-1].dst
    h_out = mapping.program.statements[max(mapping.statement_map)].dst
    if not n_out.rows or not h_out.rows:
        return False
    n_last, h_last = n_out.rows[-1], h_out.rows[-1]
    if len(n_last.terms) != 1 or len(h_last.terms) != 1:
        return False
    return mapping.axis_map.get(n_last.terms[0][0]) == h_last.terms[0][0]


def mapping_rank(mapping, cost_model: Any = None) -> tuple:
    """Sort key of a mapping for the x86 micro-kernel: matmul first, then mappings that keep
    the output's unit-stride axis in the instruction's vector position, then the cost
    (``cost_model.cost(instruction, mapping)`` when given, else the instruction calls on
    the kernel's own extents, ISA Mapper §2.4), then bigger instructions, then mapped
    axes further inside the kernel's loop nest, then fewer transforms."""
    kind = _KIND_RANK.get(mapping.instruction.kind, 5)
    prog = mapping.program
    depth = sum(prog.axis_names.index(h) for h in mapping.axis_map.values())
    size = 1
    for n in mapping.tile.values():
        size *= int(n)
    cost = float(cost_model.cost(mapping.instruction, mapping)) if cost_model is not None else real_calls(mapping)
    return (kind, 0 if _keeps_output_layout(mapping) else 1, cost, -size, -depth, len(mapping.transforms))


def real_calls(mapping) -> int:
    """Instruction calls on the kernel's own extents (before any pad transform):
    outer trip counts times ``ceil(extent / tile)`` per mapped axis."""
    src = mapping.source if getattr(mapping, "source", None) is not None else mapping.program

    def extent(axis: str) -> int:
        prog = src if src.has_axis(axis) else mapping.program
        return int(prog.extent(axis))

    n = 1
    for a in mapping.outer_axes:
        n *= extent(a)
    for needle_axis, hay in mapping.axis_map.items():
        n *= -(-extent(hay) // int(mapping.tile[needle_axis]))
    return n


@dataclass
class Plan:
    """Candidate mappings per block (best first), and the program to rebuild the kernel from.

    ``program`` is ``None`` when the kernel is tensorized as written.
    ``covers`` holds the blocks no single instruction computes, each with the
    several mappings (one program, disjoint statements) that compute it
    together, e.g. fill + scale + accumulate for a depthwise convolution on
    fixed-size element-wise units.
    """

    candidates: dict[str, list]
    program: Any = None
    covers: dict[str, list] = field(default_factory=dict)

    @property
    def blocks(self) -> dict[str, Any]:
        """The first-choice mapping of each block (for a covered block: the one that reduces)."""
        out = {b: ms[0] for b, ms in self.candidates.items()}
        out.update({b: ms[-1] for b, ms in self.covers.items()})
        return out

    def cover(self, block: str) -> list:
        """The mappings that compute ``block``, in statement order (one unless it is covered)."""
        return list(self.covers[block]) if block in self.covers else [self.candidates[block][0]]

    @property
    def chosen(self) -> list:
        """Every mapping the plan runs: each block's :meth:`cover`, block by block."""
        return [m for b in self.blocks for m in self.cover(b)]

    def on_one_program(self, cost_model: Any = None) -> "Plan":
        """The same plan with first choices that all live on one transformed program (what
        :func:`simulate_plan` runs), the one of least total cost (modelled cycles by default).

        Blocks planned independently may pick candidates padded differently; this
        picks, per program the candidates share, each block's cheapest candidate
        there, and keeps the program with the least sum.  Raises
        :class:`~tvm_ext.errors.MappingError` when no program is common to all blocks.
        """
        from tensorize.selection import CycleCostModel
        from tvm_ext.errors import MappingError

        model = cost_model or CycleCostModel()
        fixed = {m.program.key for ms in self.covers.values() for m in ms}
        keys = None
        for cands in self.candidates.values():
            ks = {m.program.key for m in cands}
            keys = ks if keys is None else keys & ks
        if fixed:  # the covers' program is fixed: the candidates must live on it too
            keys = fixed if keys is None else keys & fixed
        if not keys:
            raise MappingError("no transformed program carries a candidate for every block of the plan")

        def cost(m) -> float:
            return float(model.cost(m.instruction, m))

        best = None
        for key in sorted(keys, key=str):
            picks = {b: min((m for m in ms if m.program.key == key), key=cost) for b, ms in self.candidates.items()}
            total = sum(cost(m) for m in picks.values())
            if best is None or total < best[0]:
                best = (total, picks)
        cands = {b: [best[1][b]] + [m for m in ms if m is not best[1][b]] for b, ms in self.candidates.items()}
        return Plan(cands, self.program, dict(self.covers))

    @property
    def structural(self) -> list[str]:
        """The structural transforms of the rebuilt program (``[]`` when none)."""
        first = next(iter(self.candidates.values()), [None])[0]
        return [str(t) for t in structural_transforms(first)] if (first and self.program is not None) else []


def structural_transforms(mapping) -> tuple:
    """Transforms that change the kernel's blocks (not schedule-level ones)."""
    return tuple(t for t in getattr(mapping, "transforms", ())
                 if str(t).split("(")[0] not in SCHEDULE_LEVEL_TRANSFORMS)


def plan_mappings(func, mappings: Sequence[Any], cost_model: Any = None) -> Plan:
    """Rank the mappings of every compute block (ISA Mapper §2.4 with :func:`mapping_rank`).

    Mappings usable on the kernel as written (only schedule-level transforms:
    commutativity, transpose, pad, which the emitter redoes from the block
    itself) are preferred.  When some compute block has none, the structural
    transform sequence (e.g. factorization) giving the least ISAMIR work and
    covering the most compute blocks is chosen; its program is rebuilt and the
    mappings of every program reached by that sequence plus schedule-level
    transforms are its candidates.  A block that neither way computes with one
    instruction gets the cheapest set of schedule-level mappings that compute
    it together (:attr:`Plan.covers`), as a depthwise convolution on the
    accelerator's fixed 32x32 element-wise units.
    """
    from tvm_ext.errors import MappingError

    wanted = compute_blocks(func)
    direct: dict[str, list] = {}
    for m in mappings:
        b = origin_block(m)
        if b in wanted and not structural_transforms(m) and covers(m, b):
            direct.setdefault(b, []).append(m)
    def rank(m):
        return mapping_rank(m, cost_model)

    if all(b in direct for b in wanted):
        return Plan({b: sorted(direct[b], key=rank) for b in wanted})
    best, best_key = None, None
    for seq, group in _by_structure(mappings).items():
        base = _base_program(group)
        if base is None:
            continue
        chosen, uncovered = _cover_program(base, group, rank)
        if not chosen:
            continue
        work = sum(base.points(k) for k in range(len(base.statements)))
        key = (uncovered, work, sum(rank(ms[0])[0] for ms in chosen.values()), len(seq))
        if best_key is None or key < best_key:
            best, best_key = Plan(chosen, base), key
    if best is not None and (not direct or best_key[0] == 0):
        return best
    multi = _multi_instruction_covers(mappings, [b for b in wanted if b not in direct], cost_model)
    if direct or multi:
        return Plan({b: sorted(ms, key=rank) for b, ms in direct.items()}, covers=multi)
    raise MappingError(f"no mapping covers any compute block of the kernel ({', '.join(wanted)}): "
                       f"{len(mappings)} mappings found, none computes a whole block")


def _multi_instruction_covers(mappings, blocks: Sequence[str], cost_model: Any = None) -> dict[str, list]:
    """For each block no single mapping computes: the cheapest set of schedule-level mappings
    of one program that together compute all its statements (ISA Mapper §2.4 selection,
    :func:`tensorize.selection.rank_selections`, cycle cost by default)."""
    from tensorize.selection import CycleCostModel, rank_selections

    out: dict[str, list] = {}
    for b in blocks:
        pool = [m for m in mappings if origin_block(m) == b and not structural_transforms(m)]
        for sel in rank_selections(pool, cost_model or CycleCostModel()):
            stmts = set(_block_statements(sel.program, b, False))
            if sel.mappings and stmts and not (set(sel.uncovered) & stmts):
                chosen = [m for m in sel.mappings if set(m.statement_map) & stmts]
                out[b] = sorted(chosen, key=lambda m: min(m.statement_map))
                break
    return out


def simulate_plan(plan: Plan, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the planned program on numpy ``inputs`` with every planned block done as instruction calls.

    All the plan's mappings must share one program (the same transform
    sequence); the statements none covers run as scalar ISAMIR.  ``inputs``
    are named as the program's input buffers (before any pad layout).

    >>> k = depthwise_conv2d(1, 4, 6, 3, pad=1)
    >>> from tensorize.search import find_mappings
    >>> plan = plan_mappings(k.prim_func(), find_mappings(k.prim_func(), "accel", block=["depthwise"]))
    >>> [m.instruction.name for m in plan.cover("depthwise")]
    ['fill_32x32', 'scale_32x32', 'iadd_32x32']
    >>> x, w = k.random_inputs()
    >>> out = simulate_plan(plan, {"pad": np.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)]), "W": w})
    >>> bool(np.allclose(out["depthwise"], k.reference(x, w), atol=1e-5))
    True
    """
    from tensorize.isamir import collect_outputs, prepare_arrays, run_statement
    from tvm_ext.errors import MappingError

    chosen = plan.chosen
    programs = {m.program.key for m in chosen}
    if len(programs) != 1:
        raise MappingError(f"simulate_plan: the plan's mappings live on {len(programs)} different programs; "
                           "pick candidates with one transform sequence")
    program = chosen[0].program
    first = {min(m.statement_map): m for m in chosen}
    covered = set().union(*(set(m.statement_map) for m in chosen))
    arrays = prepare_arrays(program, inputs)
    for k in range(len(program.statements)):
        if k in first:
            first[k]._run_calls(arrays)
        elif k not in covered:
            run_statement(program, k, arrays)
    return collect_outputs(program, arrays)


def plan_cycles(plan: Plan, cost_model: Any = None) -> float:
    """Modelled cycles of the plan's instruction calls: ``calls x per-call cost`` summed
    (:class:`tensorize.selection.CycleCostModel` unless ``cost_model`` is given).

    >>> from tensorize.search import find_mappings
    >>> k = matmul(64, 64, 64)
    >>> plan = plan_mappings(k.prim_func(), find_mappings(k.prim_func(), "accel", block=["C"]))
    >>> plan_cycles(plan) >= 8 * (16 + 32768 / 1024)    # at least 8 calls of matmul_32x32x32
    True
    """
    from tensorize.selection import CycleCostModel

    model = cost_model or CycleCostModel()
    return float(sum(model.cost(m.instruction, m) for m in plan.chosen))


def _by_structure(mappings) -> dict:
    out: dict = {}
    for m in mappings:
        seq = tuple(str(t) for t in structural_transforms(m))
        if seq:
            out.setdefault(seq, []).append(m)
    return out


def _base_program(group):
    """The program of the group reached by structural transforms alone (no buffer layouts).

    When every mapping of the group also went through a layout-changing
    schedule-level transform (``pad`` rounding extents up to a fixed-size
    instruction, as on the accelerator), the structural steps are replayed on
    the kernel as imported instead.
    """
    from tensorize.transforms import apply_steps
    from tvm_ext.errors import TvmExtError

    plain = [m.program for m in group if all(b.layout == () for b in m.program.buffers)]
    exact = [m.program for m in group if not (set(transform_names(m)) & SCHEDULE_LEVEL_TRANSFORMS)
             and all(b.layout == () for b in m.program.buffers)]
    if exact or plain:
        return (exact or plain)[0]
    for m in group:
        if getattr(m, "source", None) is None:
            continue
        try:
            base = apply_steps(m.source, structural_transforms(m))
        except TvmExtError:  # a step that only applies after its schedule-level companions
            continue
        if all(b.layout == () for b in base.buffers):
            return base
    return None


def _cover_program(prog, group, rank=mapping_rank) -> tuple[dict, int]:
    """Ranked covering mappings for each reducing exported block of ``prog``, and how many lack one."""
    from tensorize.exporters import export_groups

    chosen, uncovered = {}, 0
    for name, stmts in export_groups(prog):
        if not any(prog.statements[k].reduced_axes for k in stmts):
            continue
        cands = [m for m in group if m.blocks == (name,) and covers(m, name, exported=True)]
        if cands:
            chosen[name] = sorted(cands, key=rank)
        else:
            uncovered += 1
    return chosen, uncovered


def program_to_te(program, known: dict[str, Any]) -> dict[str, Any]:
    """Build TE computes for an ISAMIR program, given TE tensors for its inputs.

    Each exported block (see :func:`tensorize.exporters.export_groups`) becomes
    one ``te.compute`` named like the block, with loops named like the ISAMIR
    axes, so a mapping's axis map names the loops of the built PrimFunc.
    """
    import keyword

    from tvm import te
    from tensorize.exporters import _groups, _tree_axes

    from tvm_ext.errors import MappingError

    tensors = dict(known)
    for g in _groups(program, True):
        dims = []
        for row in g.dst.rows:
            if len(row.terms) != 1 or row.terms[0][1] != 1 or row.const:
                raise MappingError(f"program_to_te: block {g.name} writes {g.dst.format()} (not a plain index)")
            dims.append(row.terms[0][0])
        red = [a for a in program.ordered(_tree_axes(g.expr)) if a not in dims]
        if any(keyword.iskeyword(a) for a in dims + red):
            raise MappingError(f"program_to_te: axis names {dims + red} clash with Python keywords")
        raxes = {a: te.reduce_axis((0, program.extent(a)), name=a) for a in red}
        op = program.statements[g.statements[-1]].op if g.update else None
        body = _te_body(program, g, dims, raxes, op, tensors)
        fn = eval(f"lambda {', '.join(dims)}: body(({', '.join(dims)},))", {"body": body})  # named loops
        tensors[g.dst.buffer] = te.compute([program.extent(a) for a in dims], fn, name=g.name)
    return tensors


def _te_body(program, g, dims, raxes, op, tensors):
    from tvm import te, tirx

    from tvm_ext.errors import MappingError

    reducers = {"+=": (te.sum, 0.0), "max=": (te.max, None), "min=": (te.min, None)}
    dtype = program.buffer(g.dst.buffer).dtype

    def value(tree, env):
        kind = tree[0]
        if kind == "const":
            return tirx.const(float(tree[1]), dtype)
        if kind == "load":
            acc = tree[1]
            idx = [sum((env[a] * c if c != 1 else env[a] for a, c in row.terms), row.const) if row.terms
                   else row.const for row in acc.rows]
            return tensors[acc.buffer][tuple(idx)]
        if kind == "bin":
            a, b = value(tree[2], env), value(tree[3], env)
            return {"+=": lambda: a + b, "-=": lambda: a - b, "*=": lambda: a * b, "/=": lambda: a / b,
                    "max=": lambda: tirx.max(a, b), "min=": lambda: tirx.min(a, b)}[tree[1]]()
        if kind == "fn":
            inner = value(tree[2], env)
            return {"exp": te.exp, "tanh": te.tanh, "sigmoid": te.sigmoid, "sqrt": te.sqrt, "log": te.log,
                    "abs": te.abs, "neg": lambda x: -x}[tree[1]](inner)
        raise MappingError(f"program_to_te: expression node {kind!r}")

    def body(ivs):
        env = dict(zip(dims, ivs))
        env.update(raxes)
        val = value(g.expr, env)
        if not g.update:
            return val
        if op not in reducers or g.init is None:
            raise MappingError(f"program_to_te: block {g.name} updates with {op!r} without an init")
        if not raxes:
            return {"+=": lambda: g.init.value + val}.get(op, lambda: val)()
        fn, ident = reducers[op]
        if ident is not None and float(g.init.value) != ident:
            raise MappingError(f"program_to_te: block {g.name} starts a {op} reduction at {g.init.value}")
        return fn(val, axis=list(raxes.values()))

    return body


def _te_tensors(kernel: Kernel) -> dict[str, Any]:
    """Every TE tensor of the kernel by op name (placeholders, pads, computes)."""
    out: dict[str, Any] = {}
    stack = list(kernel.tensors)
    while stack:
        t = stack.pop()
        if t.op.name in out:
            continue
        out[t.op.name] = t
        stack += list(getattr(t.op, "input_tensors", []))
    return out


def rebuild(kernel: Kernel, program) -> Any:
    """The kernel with its compute blocks replaced by ``program`` (a transformed ISAMIR)."""
    from tvm import te

    from tvm_ext.errors import MappingError

    if kernel.func is not None:
        return _rebuild_func(kernel, program)
    known = _te_tensors(kernel)
    inputs = {b.name: known[b.name] for b in program.buffers if b.role == "input" and b.name in known}
    missing = [b.name for b in program.buffers if b.role == "input" and b.name not in known]
    if missing:
        raise MappingError(f"rebuild: program inputs {missing} are not tensors of kernel {kernel.name}")
    built = program_to_te(program, inputs)
    out_name = kernel.output.op.name
    if out_name not in built or out_name in inputs:
        raise MappingError(f"rebuild: the transformed program does not compute the output {out_name}")
    return te.create_prim_func([*kernel.inputs, built[out_name]])


def _rebuild_func(kernel: Kernel, program) -> Any:
    """A PrimFunc kernel rebuilt from ``program`` with the mapper's exporter (whole kernel only)."""
    from tensorize.exporters import to_prim_func

    from tvm_ext.errors import MappingError

    names = [n for n, _, _ in kernel.arg_specs()]
    if list(program.params) != names:
        raise MappingError(f"rebuild: the transformed program covers {list(program.params)}, not the whole "
                           f"PrimFunc {names}; pass a TE kernel (tensorize.kernels.Kernel) instead")
    return to_prim_func(program, name="main")


@dataclass
class Tensorized:
    """A kernel mapped, tensorized and built; call it on numpy arrays."""

    kernel: Kernel
    module: Any
    scheduled: Any
    plan: Plan
    emitted: dict[str, Any]
    impl: str
    isa: str

    def __call__(self, *inputs: np.ndarray) -> np.ndarray:
        import tvm

        *specs, (_, out_shape, out_dtype) = self.kernel.arg_specs()
        if len(inputs) != len(specs):
            raise ShapeError(f"{self.kernel.name}: expected {len(specs)} inputs, got {len(inputs)}")
        args = []
        for arr, (name, shape, dtype) in zip(inputs, specs):
            a = np.ascontiguousarray(arr, dtype=dtype)
            if a.shape != shape:
                raise ShapeError(f"{self.kernel.name}: input {name} has shape {a.shape}, expected {shape}")
            args.append(tvm.runtime.tensor(a))
        out = tvm.runtime.empty(out_shape, out_dtype)
        self.module["main"](*args, out)
        return out.numpy()

    @property
    def intrinsics(self) -> dict[str, str]:
        return {b: e.intrin for b, e in self.emitted.items()}

    def steps(self) -> list[str]:
        """Every schedule step, block by block."""
        return [f"{b}: {s}" for b, e in self.emitted.items() for s in e.steps]


def _first_fitting(sch, block: str, candidates: Sequence[Any], impl: str):
    """The first candidate the emitter accepts for ``block`` (spec derivable, impl supports it)."""
    from tensorize.emit import _drop_unit_axes, as_binding, derive_spec, get_implementation

    from tvm_ext.errors import MappingError, ScheduleError

    blk = sch.get_sblock(block)
    for m in candidates:
        try:
            binding = _drop_unit_axes(sch, blk, as_binding(m), [])
            implementation = get_implementation(binding.isa, impl, binding.instruction)
            implementation.check(derive_spec(sch, blk, binding, accumulate_local=implementation.accumulate_local))
            return m
        except (MappingError, ScheduleError):
            continue
    return None


def tensorized(kernel: Kernel | Any, isa: str = "x86", *, impl: str = "micro", target: Any = None,
               tiles: dict[str, int] | None = None, pack: str = "auto", outer: str = "auto", call_rows: int = 1,
               mappings: Sequence[Any] | None = None, kinds: Sequence[str] | None = None,
               cost_model: Any = None) -> Tensorized:
    """Find mappings, select, (rebuild if transformed), apply and build ``kernel``.

    ``kernel`` is a :class:`Kernel` or a schedulable PrimFunc (wrapped with
    :func:`kernel_from_prim_func`).  ``tiles``/``pack``/``outer`` are the
    emission knobs of :func:`tensorize.emit.apply`, used for every tensorized
    block; ``cost_model`` goes to :func:`plan_mappings`.

    >>> t = tensorized(matmul(16, 32, 8))
    >>> a, b = np.ones((16, 8), "float32"), np.ones((8, 32), "float32")
    >>> float(t(a, b)[0, 0])
    8.0
    """
    from tvm import s_tir

    from tensorize.emit import apply, schedule_elementwise
    from tensorize.search import find_mappings
    from tvm_ext.kernel_cache import get_or_build
    from tvm_ext.target import resolve_target

    if not isinstance(kernel, Kernel):
        kernel = kernel_from_prim_func(kernel)
    func = kernel.prim_func()
    if mappings is None:
        mappings = find_mappings(func, isa, block=compute_blocks(func), kinds=kinds)
    plan = plan_mappings(func, mappings, cost_model)
    if plan.covers:
        from tvm_ext.errors import MappingError

        raise MappingError(f"{kernel.name}: block(s) {', '.join(plan.covers)} need several instructions "
                           f"together, which the TVM emitter does not emit (simulate_plan runs them)")
    if plan.program is not None:
        func = rebuild(kernel, plan.program)
    sch = s_tir.Schedule(func)
    others = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))
              if sch.get(b).name_hint not in plan.blocks]
    emitted = {}
    with resolve_target(target):  # tiles and vector widths follow the target (tvm_ext.target.hardware_facts)
        for name, cands in plan.candidates.items():
            m = _first_fitting(sch, name, cands, impl)
            if m is None:
                continue
            plan.candidates[name] = [m] + [c for c in cands if c is not m]
            emitted[name] = apply(sch, sch.get_sblock(name), m, impl, tiles=tiles, pack=pack, outer=outer,
                                  call_rows=call_rows)
        others += [b for b in plan.candidates if b not in emitted]
        fused = {b for e in emitted.values() for b in e.epilogue}  # now part of a tensorized block
        for name in others:
            if name not in fused:
                schedule_elementwise(sch, sch.get_sblock(name))
    if not emitted:
        from tvm_ext.errors import MappingError

        raise MappingError(f"{kernel.name}: none of the selected mappings fits implementation {impl!r}")
    key = ("tensorized", kernel.signature(), isa, impl, tuple(sorted((tiles or {}).items())), pack, outer,
           call_rows, tuple((b, e.intrin) for b, e in emitted.items()))
    mod = get_or_build(key, lambda: sch.mod, target)
    return Tensorized(kernel, mod, sch.mod, plan, emitted, impl, isa)


# ---------------------------------------------------------------------------
# "ours": a few emission knobs, measured
# ---------------------------------------------------------------------------
#: The knobs :func:`quick_tune` tries: register tile (rows x vector lanes) and outer loop order.
DEFAULT_KNOBS: tuple[dict, ...] = tuple(
    {"tiles": {"rows": r, "vector": v}, "outer": outer, "pack": pack}
    for (r, v) in ((8, 32), (12, 32), (4, 64), (6, 64), (16, 16), (24, 16))
    for outer, pack in (("panel", "auto"), ("kernel", "auto"), ("kernel", "never"))
)


@dataclass
class TuneResult:
    """The fastest knob setting of :func:`quick_tune`, every trial, and the total search time."""

    best: Tensorized
    knobs: dict
    seconds_per_call: float
    search_seconds: float
    trials: list[dict]


def quick_tune(kernel: Kernel | Any, isa: str = "x86", *, impl: str = "micro", knobs: Sequence[dict] = DEFAULT_KNOBS,
               target: Any = None, repeat: int = 3, min_repeat_ms: int = 20) -> TuneResult:
    """Map ``kernel`` once, build it under each knob setting, time each, keep the fastest.

    Settings that end up with the same tiles (a 16-wide kernel clamps every
    vector width to 16) are measured once.  ``search_seconds`` counts mapping,
    builds and measurements.
    """
    import time

    import tvm

    from tensorize.search import find_mappings

    t0 = time.perf_counter()
    if not isinstance(kernel, Kernel):
        kernel = kernel_from_prim_func(kernel)
    func = kernel.prim_func()
    mappings = find_mappings(func, isa, block=compute_blocks(func))
    dev = tvm.cpu(0)
    args = [tvm.runtime.tensor(a, dev) for a in kernel.random_inputs()]
    _, out_shape, out_dtype = kernel.arg_specs()[-1]
    args.append(tvm.runtime.empty(out_shape, out_dtype, dev))
    from tvm_ext.errors import ScheduleError, TuningError

    trials, seen, best = [], set(), None
    for kn in knobs:
        try:
            t = tensorized(kernel, isa, impl=impl, target=target, mappings=mappings, **kn)
        except ScheduleError as e:  # e.g. a tile over the register budget: skip the setting
            trials.append({"knobs": kn, "error": str(e).splitlines()[0]})
            continue
        key = (tuple((b, tuple(sorted(e.tiles.items())), tuple(e.packed)) for b, e in t.emitted.items()),
               kn.get("outer"))
        if key in seen:
            continue
        seen.add(key)
        res = t.module.time_evaluator("main", dev, number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)(*args)
        sec = float(min(res.results))
        trials.append({"knobs": kn, "tiles": {b: e.tiles for b, e in t.emitted.items()}, "seconds": sec})
        if best is None or sec < best[0]:
            best = (sec, t, kn)
    if best is None:
        reasons = "; ".join(t.get("error", "") for t in trials[:3])
        raise TuningError(f"quick_tune {kernel.name}: no knob setting could be built ({reasons})")
    return TuneResult(best[1], best[2], best[0], time.perf_counter() - t0, trials)
