"""Small Relax models that exercise every accelerator pattern (tests, demo, CLI).

All builders return an ``IRModule`` with a ``main`` function taking float32
tensors (weights are parameters, as frontends produce with
``bind_constants=False``):

* :func:`linear_module`: ``matmul`` (+ bias) (+ relu), optionally in the
  dense form ``matmul(x, permute_dims(w))``;
* :func:`mlp_module`: matmul+bias+relu, then a dense layer, then a softmax
  (which no pattern covers: it stays on llvm);
* :func:`conv_module`: ``conv2d`` (+ relu), NCHW or NHWC;
* :func:`gru_cell_module`: one GRU step exactly as the ``accel.gru_cell``
  pattern expects it.

>>> mod = mlp_module(8, 16, 32, 4)
>>> [p.name for p in mod["main"].params]
['x', 'w1', 'b1', 'w2', 'b2']
"""
from __future__ import annotations

from typing import Any, Sequence

__all__ = ["linear_module", "mlp_module", "conv_module", "separable_block_module", "gru_cell_module",
           "from_torch_folded"]


def _var(name: str, shape: Sequence[int]):
    from tvm import relax

    return relax.Var(name, relax.TensorType(tuple(int(s) for s in shape), "float32"))


def _build(params, body) -> Any:
    from tvm import relax

    bb = relax.BlockBuilder()
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(body(bb))
        bb.emit_func_output(out)
    return bb.get()


def linear_module(M: int, K: int, N: int, *, bias: bool = False, relu: bool = False, dense: bool = False) -> Any:
    """``y = [relu](x @ W [+ b])``; ``dense`` stores ``W`` as ``(N, K)`` and uses ``permute_dims``."""
    from tvm import relax

    x = _var("x", (M, K))
    w = _var("w", (N, K) if dense else (K, N))
    params = [x, w]
    b = None
    if bias:
        b = _var("b", (N,))
        params.append(b)

    def body(bb):
        rhs = bb.emit(relax.op.permute_dims(w)) if dense else w
        y = bb.emit(relax.op.matmul(x, rhs))
        if b is not None:
            y = bb.emit(relax.op.add(y, b))
        if relu:
            y = bb.emit(relax.op.nn.relu(y))
        return y

    return _build(params, body)


def mlp_module(M: int, K: int, H: int, N: int) -> Any:
    """``softmax(dense(relu(x @ W1 + b1), W2) + b2)``: two offloadable layers, a softmax left on llvm."""
    from tvm import relax

    x, w1, b1, w2, b2 = _var("x", (M, K)), _var("w1", (K, H)), _var("b1", (H,)), _var("w2", (N, H)), _var("b2", (N,))

    def body(bb):
        h = bb.emit(relax.op.nn.relu(relax.op.add(relax.op.matmul(x, w1), b1)))
        y = bb.emit(relax.op.add(relax.op.matmul(h, relax.op.permute_dims(w2)), b2))
        return bb.emit(relax.op.nn.softmax(y, axis=-1))

    return _build([x, w1, b1, w2, b2], body)


def conv_module(n: int, c_in: int, hw: int, c_out: int, kernel: int = 3, *, stride: int = 1, pad: int = 1,
                relu: bool = True, layout: str = "NCHW") -> Any:
    """``[relu](conv2d(x, w))`` with square kernel, stride and padding."""
    from tvm import relax

    if layout == "NCHW":
        x, w, kl = _var("x", (n, c_in, hw, hw)), _var("w", (c_out, c_in, kernel, kernel)), "OIHW"
    else:
        x, w, kl = _var("x", (n, hw, hw, c_in)), _var("w", (kernel, kernel, c_in, c_out)), "HWIO"

    def body(bb):
        y = bb.emit(relax.op.nn.conv2d(x, w, strides=(stride, stride), padding=(pad, pad, pad, pad),
                                       data_layout=layout, kernel_layout=kl, out_layout=layout))
        return bb.emit(relax.op.nn.relu(y)) if relu else y

    return _build([x, w], body)


def separable_block_module(n: int, c_in: int, hw: int, c_out: int, *, stride: int = 1) -> Any:
    """A MobileNet-v1 block (NCHW): ``relu(conv1x1(relu(depthwise3x3(x, stride))))``.

    The depthwise conv is ``nn.conv2d`` with ``groups = c_in`` (weight
    ``(c_in, 1, 3, 3)``), the pointwise one a 1x1 conv (weight ``(c_out, c_in, 1, 1)``);
    batch norms are taken as folded into the weights (inference).
    """
    from tvm import relax

    x, dw, pw = _var("x", (n, c_in, hw, hw)), _var("w_dw", (c_in, 1, 3, 3)), _var("w_pw", (c_out, c_in, 1, 1))

    def body(bb):
        d = bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(x, dw, strides=(stride, stride), padding=(1, 1, 1, 1),
                                                        groups=c_in)))
        return bb.emit(relax.op.nn.relu(relax.op.nn.conv2d(d, pw)))

    return _build([x, dw, pw], body)


def gru_cell_module(batch: int, hidden: int, inputs: int | None = None) -> Any:
    """One GRU step ``h' = GRU(x, h)`` (gates fused as ``3H`` columns, weights ``(in, 3H)``)."""
    from tvm import relax

    B, H, I = int(batch), int(hidden), int(inputs or hidden)
    x, h = _var("x", (B, I)), _var("h", (B, H))
    wi, wh, bi, bh = _var("w_ih", (I, 3 * H)), _var("w_hh", (H, 3 * H)), _var("b_ih", (3 * H,)), _var("b_hh", (3 * H,))
    op = relax.op

    def body(bb):
        gi = bb.emit(op.add(op.matmul(x, wi), bi))
        gh = bb.emit(op.add(op.matmul(h, wh), bh))
        si = bb.emit(op.split(gi, 3, axis=1))
        sh = bb.emit(op.split(gh, 3, axis=1))
        r = bb.emit(op.sigmoid(op.add(relax.TupleGetItem(si, 0), relax.TupleGetItem(sh, 0))))
        z = bb.emit(op.sigmoid(op.add(relax.TupleGetItem(si, 1), relax.TupleGetItem(sh, 1))))
        n = bb.emit(op.tanh(op.add(relax.TupleGetItem(si, 2), op.multiply(r, relax.TupleGetItem(sh, 2)))))
        return bb.emit(op.add(n, op.multiply(z, op.subtract(h, n))))

    return _build([x, h, wi, wh, bi, bh], body)


def from_torch_folded(module: Any, example_inputs: Sequence[Any]) -> tuple[Any, list]:
    """A torch model as the accelerator's BYOC path takes it: ``(relax module, parameter arrays)``.

    Batch norms are folded into the preceding convolutions (inference:
    ``torch.fx.experimental.optimization.fuse``), so a conv + BN + ReLU becomes
    ``relu(conv2d(x, w) + bias)`` (the ``accel.conv2d_bias_relu`` pattern), and
    the parameters stay function inputs (``keep_params_as_input``): call the
    compiled module with ``(*example_inputs, *params)``.
    """
    import numpy as np
    import torch
    from torch.fx.experimental.optimization import fuse
    from tvm.relax.frontend import detach_params
    from tvm.relax.frontend.torch import from_exported_program

    from tvm_ext.errors import InputError

    if not isinstance(module, torch.nn.Module):
        raise InputError(f"from_torch_folded: expected a torch.nn.Module, got {type(module).__name__}")
    folded = fuse(module.eval())
    args = tuple(torch.as_tensor(np.asarray(a)) for a in example_inputs)
    mod = from_exported_program(torch.export.export(folded, args), keep_params_as_input=True)
    mod, params = detach_params(mod)
    return mod, [p.numpy() for p in params.get("main", [])]
