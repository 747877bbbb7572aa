"""Relax to accelerator workload: turn an offloaded (composite) Relax function into a :class:`Workload`.

The BYOC codegen hands over functions whose bodies call composite functions
(``matmul + bias + relu``, ``conv2d``, a GRU cell, ...); this module inlines
them and translates each Relax operator into workload ops (which the
``tensorize`` mapper then lowers onto the accelerator's instructions):

=============================  ==========================================
Relax                          workload
=============================  ==========================================
``matmul(a, b)``               ``matmul`` (``matmul_nt`` when ``b`` is
                               ``permute_dims(w)``: a dense layer)
``add``                        ``add``, or ``bias_add`` for an ``(N,)`` row,
                               ``channel_bias_add`` for a 4-D tensor plus
                               a ``(1, C, 1, 1)`` / ``(1, 1, 1, C)`` bias
``subtract`` / ``multiply``    ``sub``/``mul``; ``rsub``/``scale`` with a
                               scalar constant
``nn.relu``, ``sigmoid``,
``tanh``, ``exp``              element-wise ops
``nn.conv2d``                  ``conv2d`` (NCHW/OIHW or NHWC/HWIO, groups 1,
                               dilation 1, padding as a zero border);
                               ``depthwise_conv2d`` when groups = input =
                               output channels
``split`` + tuple items        column/row blocks (views, no data moved)
``permute_dims`` (2-D)         a transposed operand, or ``transpose``
=============================  ==========================================

Anything else raises :class:`UnsupportedRelaxOp` (an ``InputError``): the
pattern check uses that to leave the subgraph on llvm.

>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType((4, 8), "float32")); w = relax.Var("w", relax.TensorType((8, 2), "float32"))
>>> with bb.function("f", [x, w]):
...     y = bb.emit(relax.op.nn.relu(relax.op.matmul(x, w)))
...     _ = bb.emit_func_output(y)
>>> wl = translate_function(bb.get()["f"])
>>> [op.kind for op in wl.ops], wl.inputs, wl.outputs
(['matmul', 'relu'], ['x', 'w'], ['t3'])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tvm_ext.errors import InputError, ShapeError

from .workload import Ref, Workload

__all__ = ["UnsupportedRelaxOp", "translate_function", "translate_expr"]


class UnsupportedRelaxOp(InputError):
    """A Relax construct the accelerator workload cannot express."""


@dataclass(frozen=True)
class _Transposed:
    """``permute_dims(x)`` of a 2-D tensor, not materialised yet."""

    ref: Ref


@dataclass(frozen=True)
class _Scalar:
    value: float


def _shape(expr) -> tuple[int, ...]:
    from tvm import relax

    sinfo = getattr(expr, "ty", None) or getattr(expr, "struct_info", None)
    if not isinstance(sinfo, relax.TensorType):
        raise UnsupportedRelaxOp(f"{_name(expr)}: not a tensor ({type(sinfo).__name__})")
    if sinfo.shape is None or not isinstance(sinfo.shape, relax.ShapeExpr):
        raise UnsupportedRelaxOp(f"{_name(expr)}: unknown shape")
    try:
        shape = tuple(int(d) for d in sinfo.shape.values)
    except (TypeError, ValueError):
        raise UnsupportedRelaxOp(f"{_name(expr)}: symbolic shape {sinfo.shape}") from None
    if str(sinfo.dtype) != "float32":
        raise UnsupportedRelaxOp(f"{_name(expr)}: dtype {sinfo.dtype} (the accelerator runs float32)")
    return shape


def _name(expr) -> str:
    hint = getattr(expr, "name", None) or getattr(expr, "name_hint", None)
    return str(hint) if hint is not None else type(expr).__name__


def _ints(x) -> tuple[int, ...]:
    return tuple(int(v) for v in x)


class _Translator:
    def __init__(self, name: str):
        self.wl = Workload(name)
        self.memo: dict[Any, Any] = {}

    # -- values ------------------------------------------------------------------
    def input(self, var) -> str:
        base = "".join(c if c.isalnum() else "_" for c in _name(var)) or "arg"
        if not base[0].isalpha():
            base = "v" + base
        name, k = base, 1
        while name in self.wl.tensors:
            name, k = f"{base}_{k}", k + 1
        return self.wl.input(name, _shape(var))

    def tensor(self, v) -> "str | Ref":
        """A value usable as an op operand (materialising transposes)."""
        if isinstance(v, _Transposed):
            return self.wl.transpose(v.ref)
        if isinstance(v, (str, Ref)):
            return v
        if isinstance(v, _Scalar):
            raise UnsupportedRelaxOp("a scalar constant is only supported as the other operand of subtract/multiply")
        raise UnsupportedRelaxOp(f"cannot use {type(v).__name__} as a tensor")

    def shape(self, v) -> tuple[int, ...]:
        if isinstance(v, str):
            return self.wl.tensors[v].shape
        if isinstance(v, Ref):
            return v.shape
        if isinstance(v, _Transposed):
            return v.ref.shape[::-1]
        return ()

    def value(self, expr, bindings: dict, resolve_unbound: Callable | None = None):
        from tvm import relax

        key = expr
        if key in self.memo:
            return self.memo[key]
        if isinstance(expr, relax.Var):
            if expr in bindings:
                out = self.value(bindings[expr], bindings, resolve_unbound)
            elif resolve_unbound is not None:
                out = resolve_unbound(expr)
            else:
                raise UnsupportedRelaxOp(f"variable {_name(expr)} is not bound")
        elif isinstance(expr, _constant_type()):
            out = self.constant(expr)
        elif isinstance(expr, relax.TupleGetItem):
            tup = self.value(expr.tuple_value, bindings, resolve_unbound)
            if not isinstance(tup, tuple):
                raise UnsupportedRelaxOp("tuple item of a non-tuple")
            out = tup[int(expr.index)]
        elif isinstance(expr, relax.Tuple):
            out = tuple(self.value(f, bindings, resolve_unbound) for f in expr.fields)
        elif isinstance(expr, relax.Call):
            out = self.call(expr, bindings, resolve_unbound)
        elif isinstance(expr, relax.Function):
            out = expr
        else:
            raise UnsupportedRelaxOp(f"unsupported Relax expression {type(expr).__name__}")
        self.memo[key] = out
        return out

    def constant(self, c) -> _Scalar:
        data = c.value.numpy() if hasattr(c.value, "numpy") else np.asarray(c.value)
        if data.size != 1:
            raise UnsupportedRelaxOp(f"tensor constant of shape {data.shape} (bind_constants=False keeps weights as "
                                     "parameters; only scalar constants are supported)")
        return _Scalar(float(data.reshape(-1)[0]))

    # -- calls -------------------------------------------------------------------
    def call(self, call, bindings, resolve):
        from tvm import relax

        op = call.op
        if isinstance(op, relax.Var) and op in bindings and isinstance(bindings[op], relax.Function):
            op = bindings[op]
        if isinstance(op, relax.Function):
            return self.inline(op, [self.value(a, bindings, resolve) for a in call.args])
        if not isinstance(op, _op_type()):
            raise UnsupportedRelaxOp(f"call to {type(op).__name__} {op}")
        name = str(op.name)
        args = [self.value(a, bindings, resolve) for a in call.args]
        handler = _HANDLERS.get(name)
        if handler is None:
            raise UnsupportedRelaxOp(f"operator {name} has no accelerator lowering")
        return handler(self, call, args)

    def inline(self, func, args: list):
        if len(args) != len(func.params):
            raise UnsupportedRelaxOp(f"composite call with {len(args)} arguments for {len(func.params)} parameters")
        bindings = _bindings(func.body)
        sub = dict(zip(func.params, args))
        return self.value(func.body.body, bindings, lambda v: sub[v] if v in sub else _unbound(v))


def _constant_type():
    import tvm

    return tvm.ir.expr.Constant


def _op_type():
    import tvm

    return tvm.ir.Op


def _unbound(v):
    raise UnsupportedRelaxOp(f"variable {_name(v)} is not bound")


def _bindings(seq) -> dict:
    from tvm import relax

    out = {}
    if isinstance(seq, relax.SeqExpr):
        for block in seq.blocks:
            for b in block.bindings:
                if isinstance(b, relax.VarBinding):
                    out[b.var] = b.value
                else:
                    raise UnsupportedRelaxOp(f"unsupported binding {type(b).__name__}")
    return out


# --------------------------------------------------------------------------- operator handlers


def _matmul(tr: _Translator, call, args):
    a, b = args
    if any(isinstance(x, _Scalar) for x in args):
        raise UnsupportedRelaxOp("matmul with a scalar")
    if len(tr.shape(a)) != 2 or len(tr.shape(b)) != 2:
        raise UnsupportedRelaxOp(f"matmul of {tr.shape(a)} and {tr.shape(b)}: only 2-D operands are offloaded")
    if isinstance(b, _Transposed):
        return tr.wl.matmul(tr.tensor(a), b.ref, transpose_b=True)
    return tr.wl.matmul(tr.tensor(a), tr.tensor(b))


def _permute(tr: _Translator, call, args):
    (x,) = args
    shape = tr.shape(x)
    axes = call.attrs.axes
    axes = None if axes is None else _ints(axes)
    if len(shape) != 2 or axes not in (None, (1, 0)):
        raise UnsupportedRelaxOp(f"permute_dims {axes} of a {len(shape)}-D tensor")
    if isinstance(x, _Transposed):
        return x.ref
    ref = tr.wl._ref(x) if isinstance(x, str) else x
    return _Transposed(ref)


def _is_row(shape_a, shape_b) -> bool:
    return len(shape_a) == 2 and len(shape_b) == 1 and shape_b[0] == shape_a[1]


def _add(tr: _Translator, call, args):
    a, b = args
    if isinstance(a, _Scalar) or isinstance(b, _Scalar):
        raise UnsupportedRelaxOp("add of a scalar constant")
    sa, sb = tr.shape(a), tr.shape(b)
    if sa == sb:
        return tr.wl.add(tr.tensor(a), tr.tensor(b))
    if _is_row(sa, sb):
        return tr.wl.bias_add(tr.tensor(a), tr.tensor(b))
    if _is_row(sb, sa):
        return tr.wl.bias_add(tr.tensor(b), tr.tensor(a))
    for x, y, sx, sy in ((a, b, sa, sb), (b, a, sb, sa)):
        layout = _channel_layout(sx, sy)
        if layout:
            return tr.wl.channel_bias_add(tr.tensor(x), tr.tensor(y), layout=layout)
    raise UnsupportedRelaxOp(f"add of shapes {sa} and {sb} (only equal shapes, a (N,) row bias or a per-channel "
                             f"(1, C, 1, 1) / (1, 1, 1, C) bias of a 4-D tensor)")


def _channel_layout(sa: tuple, sb: tuple) -> str | None:
    """``"NCHW"`` / ``"NHWC"`` when ``sb`` is a per-channel bias of the 4-D ``sa`` on axis 1 / 3, else None."""
    if len(sa) != 4 or len(sb) != 4:
        return None
    for layout, ch in (("NCHW", 1), ("NHWC", 3)):
        if all(sb[d] == (sa[ch] if d == ch else 1) for d in range(4)):
            return layout
    return None


def _subtract(tr: _Translator, call, args):
    a, b = args
    if isinstance(a, _Scalar) and not isinstance(b, _Scalar):
        return tr.wl.rsub(a.value, tr.tensor(b))
    if isinstance(b, _Scalar):
        raise UnsupportedRelaxOp("tensor minus scalar")
    if tr.shape(a) != tr.shape(b):
        raise UnsupportedRelaxOp(f"subtract of shapes {tr.shape(a)} and {tr.shape(b)}")
    return tr.wl.sub(tr.tensor(a), tr.tensor(b))


def _multiply(tr: _Translator, call, args):
    a, b = args
    if isinstance(a, _Scalar) and not isinstance(b, _Scalar):
        return tr.wl.scale(tr.tensor(b), a.value)
    if isinstance(b, _Scalar) and not isinstance(a, _Scalar):
        return tr.wl.scale(tr.tensor(a), b.value)
    if tr.shape(a) != tr.shape(b):
        raise UnsupportedRelaxOp(f"multiply of shapes {tr.shape(a)} and {tr.shape(b)}")
    return tr.wl.mul(tr.tensor(a), tr.tensor(b))


def _unary(kind: str):
    def handler(tr: _Translator, call, args):
        (x,) = args
        if len(tr.shape(x)) < 2:
            raise UnsupportedRelaxOp(f"{kind} of a {len(tr.shape(x))}-D tensor (the units work on 2-D tiles)")
        if kind == "relu":
            return tr.wl.relu(tr.tensor(x))
        return tr.wl.unary(kind, tr.tensor(x))
    return handler


def _conv2d(tr: _Translator, call, args):
    x, w = args
    at = call.attrs
    layouts = (str(at.data_layout), str(at.kernel_layout), str(at.out_layout))
    if layouts not in (("NCHW", "OIHW", "NCHW"), ("NHWC", "HWIO", "NHWC")):
        raise UnsupportedRelaxOp(f"conv2d layouts {layouts} (NCHW/OIHW or NHWC/HWIO)")
    groups = int(at.groups)
    channels = tr.shape(x)[1 if layouts[0] == "NCHW" else 3]
    out_channels = tr.shape(w)[0 if layouts[0] == "NCHW" else 3]
    depthwise = groups == channels == out_channels and groups > 1
    if (groups != 1 and not depthwise) or _ints(at.dilation) != (1, 1):
        raise UnsupportedRelaxOp(f"conv2d with groups={groups} ({channels} input, {out_channels} output channels), "
                                 f"dilation={_ints(at.dilation)} (groups 1, or groups = channels: depthwise)")
    if at.out_dtype is not None and str(at.out_dtype) not in ("", "float32", "void"):
        raise UnsupportedRelaxOp(f"conv2d out_dtype {at.out_dtype}")
    pad = _ints(at.padding)
    pad = pad * 2 if len(pad) == 2 else pad
    if depthwise:
        return tr.wl.depthwise_conv2d(tr.tensor(x), tr.tensor(w), strides=_ints(at.strides), padding=pad,
                                      layout=layouts[0])
    return tr.wl.conv2d(tr.tensor(x), tr.tensor(w), strides=_ints(at.strides), padding=pad, layout=layouts[0])


def _split(tr: _Translator, call, args):
    (x,) = args
    if isinstance(x, _Transposed):
        x = tr.tensor(x)
    ref = tr.wl._ref(x) if isinstance(x, str) else x
    axis = int(call.attrs.axis)
    axis = axis + len(ref.shape) if axis < 0 else axis
    ios = call.attrs.indices_or_sections
    n = ref.shape[axis]
    if isinstance(ios, int) or hasattr(ios, "value"):
        k = int(ios)
        if n % k:
            raise ShapeError(f"split of {n} into {k} sections")
        bounds = [i * (n // k) for i in range(k + 1)]
    else:
        bounds = [0] + [int(i) for i in ios] + [n]
    parts = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        off = list(ref.offset)
        off[axis] += lo
        shape = list(ref.shape)
        shape[axis] = hi - lo
        parts.append(Ref(ref.tensor, tuple(off), tuple(shape)))
    return tuple(parts)


_HANDLERS = {
    "relax.matmul": _matmul,
    "relax.permute_dims": _permute,
    "relax.add": _add,
    "relax.subtract": _subtract,
    "relax.multiply": _multiply,
    "relax.nn.relu": _unary("relu"),
    "relax.sigmoid": _unary("sigmoid"),
    "relax.tanh": _unary("tanh"),
    "relax.exp": _unary("exp"),
    "relax.nn.conv2d": _conv2d,
    "relax.split": _split,
}


def _finish(tr: _Translator, result) -> Workload:
    outs = result if isinstance(result, tuple) else (result,)
    for v in outs:
        if isinstance(v, _Scalar):
            raise UnsupportedRelaxOp("a scalar result")
        t = v
        if isinstance(v, (Ref, _Transposed)):
            t = tr.tensor(v)
            if isinstance(t, Ref):
                t = tr.wl.copy(t)
        if tr.wl.tensors[t].role in ("input", "weight"):
            t = tr.wl.copy(t)
        tr.wl.mark_output(t)
    if not tr.wl.ops:
        raise UnsupportedRelaxOp("nothing to compute")
    return tr.wl


def translate_function(func, name: str | None = None) -> Workload:
    """A Relax function (params = inputs, return = outputs) as a workload; composite calls are inlined."""
    if name is None:
        attrs = func.attrs
        name = str(attrs["global_symbol"]) if attrs is not None and "global_symbol" in attrs else "offloaded"
    tr = _Translator(name)
    params = {p: tr.input(p) for p in func.params}
    bindings = _bindings(func.body)
    result = tr.value(func.body.body, bindings, lambda v: params[v] if v in params else _unbound(v))
    return _finish(tr, result)


def translate_expr(expr, bindings: dict, name: str = "pattern") -> Workload:
    """The subgraph rooted at ``expr`` (variables bound in ``bindings`` are followed, others are inputs)."""
    tr = _Translator(name)
    inputs: dict = {}

    def unbound(v):
        if v not in inputs:
            inputs[v] = tr.input(v)
        return inputs[v]

    result = tr.value(expr, dict(bindings), unbound)
    return _finish(tr, result)
