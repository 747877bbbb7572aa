"""Fold per-channel affine steps after a convolution into its weights and one bias.

An inference batch norm decomposes to ``(conv(x, W) - mean) / sqrt(var + eps) * gamma + beta``:
four element-wise passes (one a division) over the convolution's output.  With constant
per-output-channel operands the chain is ``conv(x, W * s) + b`` (``s`` the product of the
multipliers, ``b`` the folded shifts), so the convolution kernel's epilogue adds one bias.
Only chains whose intermediate values have no other use are folded.

>>> import numpy as np
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType((1, 2, 4, 4), "float32"))
>>> w = relax.const(np.ones((3, 2, 1, 1), "float32"))
>>> s = relax.const(np.full((1, 3, 1, 1), 2.0, "float32"))
>>> with bb.function("main", [x]):
...     with bb.dataflow():
...         y = bb.emit(relax.op.nn.conv2d(x, w))
...         z = bb.emit_output(relax.op.multiply(y, s))
...     _ = bb.emit_func_output(z)
>>> out = fold_conv_affine(bb.get())
>>> [b.value.op.name for b in out["main"].body.blocks[0].bindings]
['relax.nn.conv2d', 'relax.add']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["fold_conv_affine"]

_AFFINE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


@dataclass
class _Chain:
    """A convolution with its weight scaled by ``scale`` and ``bias`` added (per output channel)."""

    conv: Any  # the relax.Call of the convolution
    weight: np.ndarray
    o_axis: int  # the weight's output-channel axis
    c_axis: int  # the output's channel axis
    scale: np.ndarray
    bias: np.ndarray
    vars: list  # the folded bindings' variables, first the convolution's


def _op_name(e) -> str:
    op = getattr(e, "op", None)
    return str(getattr(op, "name", "")) if op is not None else ""


def _per_channel(c, rank: int, c_axis: int, channels: int) -> np.ndarray | None:
    """The constant ``c`` as one value per channel, or None when it varies along another axis."""
    from tvm.ir.expr import Constant

    if not isinstance(c, Constant):
        return None
    v = c.value.numpy()
    if v.dtype != np.float32 or v.ndim > rank:
        return None
    shape = (1,) * (rank - v.ndim) + v.shape
    if any(n != 1 for i, n in enumerate(shape) if i != c_axis) or shape[c_axis] not in (1, channels):
        return None
    return np.broadcast_to(v.reshape(-1), (channels,)).astype(np.float32)


def _start(call) -> _Chain | None:
    from tvm.ir.expr import Constant

    if _op_name(call) != "relax.nn.conv2d" or not isinstance(call.args[1], Constant):
        return None
    w = call.args[1].value.numpy()
    out_layout = str(call.attrs.out_layout or call.attrs.data_layout)
    kernel_layout = str(call.attrs.kernel_layout)
    if w.dtype != np.float32 or "O" not in kernel_layout or "C" not in out_layout or len(out_layout) != 4:
        return None
    o = kernel_layout.index("O")
    return _Chain(call, w, o, out_layout.index("C"), np.ones(w.shape[o], np.float32),
                  np.zeros(w.shape[o], np.float32), [])


def _extend(chain: _Chain, call, var) -> bool:
    """Fold the affine ``call`` of ``var`` (the chain's last value) into ``chain``; False if it does not fit."""
    name = _op_name(call)
    a, b = call.args
    if b.same_as(var):
        if name not in ("relax.add", "relax.multiply"):  # c - y and c / y are not affine in y's scale
            return False
        a, b = b, a
    if not a.same_as(var):
        return False
    c = _per_channel(b, 4, chain.c_axis, chain.scale.shape[0])
    if c is None or (name == "relax.divide" and not np.all(c != 0)):
        return False
    if name == "relax.add":
        chain.bias = chain.bias + c
    elif name == "relax.subtract":
        chain.bias = chain.bias - c
    elif name == "relax.multiply":
        chain.scale, chain.bias = chain.scale * c, chain.bias * c
    else:
        chain.scale, chain.bias = chain.scale / c, chain.bias / c
    return True


def _uses(func) -> dict:
    from tvm import relax

    count: dict = {}

    def visit(e):
        if isinstance(e, relax.Var):
            count[e] = count.get(e, 0) + 1

    for block in func.body.blocks:
        for binding in block.bindings:
            relax.analysis.post_order_visit(binding.value, visit)
    relax.analysis.post_order_visit(func.body.body, visit)
    return count


def _fold_block(block, uses: dict):
    """The block with every foldable chain replaced by ``conv(x, W * s) + b``; None when none was."""
    from tvm import relax

    chains: dict = {}  # var -> the chain it ends
    ends: dict = {}  # var of a chain's last binding -> chain (only chains with an affine step)
    for binding in block.bindings:
        value, var = binding.value, binding.var
        if not isinstance(binding, relax.VarBinding) or not isinstance(value, relax.Call):
            continue
        start = _start(value)
        if start is not None:
            start.vars = [var]
            chains[var] = start
            continue
        if _op_name(value) not in _AFFINE:
            continue
        prev = next((a for a in value.args if isinstance(a, relax.Var) and a in chains), None)
        if prev is None or uses.get(prev, 0) != 1:
            continue
        chain = chains[prev]
        if not _extend(chain, value, prev):
            continue
        del chains[prev]
        ends.pop(prev, None)
        chain.vars.append(var)
        chains[var] = chain
        ends[var] = chain
    if not ends:
        return None
    folded = {v for chain in ends.values() for v in chain.vars}
    out = []
    for binding in block.bindings:
        var = binding.var
        if var not in folded:
            out.append(binding)
            continue
        chain = ends.get(var)
        if chain is None:
            continue  # an intermediate step: gone
        shape = [1] * chain.weight.ndim
        shape[chain.o_axis] = -1
        weight = relax.const((chain.weight * chain.scale.reshape(shape)).astype(np.float32))
        var_kind = relax.DataflowVar if isinstance(block, relax.DataflowBlock) else relax.Var
        conv_var = var_kind(chain.vars[0].name, chain.vars[0].ty)
        conv = relax.Call(chain.conv.op, [chain.conv.args[0], weight], chain.conv.attrs, chain.conv.ty_args,
                          chain.conv.span)
        bshape = [1, 1, 1, 1]
        bshape[chain.c_axis] = -1
        out.append(relax.VarBinding(conv_var, conv))
        out.append(relax.VarBinding(var, relax.op.add(conv_var, relax.const(chain.bias.reshape(bshape)))))
    return relax.DataflowBlock(out) if isinstance(block, relax.DataflowBlock) else relax.BindingBlock(out)


def fold_conv_affine(mod):
    """``mod`` with the per-channel affine steps after ``main``'s convolutions folded (see the module doc)."""
    from tvm import relax

    func = next((f for gv, f in mod.functions.items() if gv.name_hint == "main" and isinstance(f, relax.Function)),
                None)
    if func is None or not isinstance(func.body, relax.SeqExpr):
        return mod
    uses = _uses(func)
    blocks, changed = [], False
    for block in func.body.blocks:
        new = _fold_block(block, uses)
        changed |= new is not None
        blocks.append(new if new is not None else block)
    if not changed:
        return mod
    body = relax.SeqExpr(blocks, func.body.body)
    new_func = relax.Function(func.params, body, func.ret_ty, func.is_pure, func.attrs, func.span)
    out = mod.clone() if hasattr(mod, "clone") else mod
    out["main"] = new_func
    return relax.transform.Normalize()(out)
