"""A 1x1 convolution whose NHWC input is only a ``permute_dims`` of an NCHW tensor reads the NCHW tensor.

After ``ConvertLayout`` a model with an NCHW input starts with ``permute_dims(x, [0, 2, 3, 1])``:
a full pass over the input before the first convolution.  A stride-1, unpadded 1x1 convolution
needs no window, so it can read ``x[n, c, h, w]`` where it read ``x_nhwc[n, h, w, c]``: its
reduction over ``c`` broadcasts one input value per output pixel, and the pixels of one row are
contiguous in NCHW too (the micro-kernel's row axis).  The kernel still writes NHWC, so the
convolutions after it keep their layout; the transpose stays only where something else reads it.

>>> import numpy as np
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
>>> w = relax.const(np.ones((16, 1, 1, 8), "float32"))
>>> with bb.function("main", [x]):
...     with bb.dataflow():
...         t = bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
...         y = bb.emit_output(relax.op.nn.conv2d(t, w, data_layout="NHWC", kernel_layout="OHWI"))
...     _ = bb.emit_func_output(y)
>>> out = relax.transform.DeadCodeElimination()(conv1x1_read_nchw(bb.get()))
>>> [str(b.value.op.name) for b in out["main"].body.blocks[0].bindings if hasattr(b.value, "op")]
['relax.call_tir']
"""
from __future__ import annotations

from typing import Any

__all__ = ["conv1x1_read_nchw", "residual_in_input_layout"]

_TO_NHWC = [0, 2, 3, 1]


def _ints(xs) -> list[int]:
    return [int(v) for v in xs]


def _is_plain_1x1(call) -> bool:
    a = call.attrs
    try:
        w_shape = _ints(call.args[1].ty.shape.values)
    except (AttributeError, TypeError, ValueError):
        return False
    return (str(a.data_layout) == "NHWC" and str(a.kernel_layout) == "OHWI"
            and str(a.out_layout or a.data_layout) == "NHWC" and int(a.groups) == 1
            and _ints(a.strides) == [1, 1] and _ints(a.padding) == [0, 0, 0, 0] and _ints(a.dilation) == [1, 1]
            and len(w_shape) == 4 and w_shape[1:3] == [1, 1] and str(call.args[0].ty.dtype) == "float32"
            and (a.out_dtype is None or str(a.out_dtype) in ("", "float32")))


def _conv1x1_nchw_to_nhwc(x, w):
    """``out[n, h, w, o] = sum_c x[n, c, h, w] * w[o, 0, 0, c]`` (NCHW in, NHWC out)."""
    from tvm import te

    n, c, h, wd = x.shape
    o = w.shape[0]
    rc = te.reduce_axis((0, c), name="rc")
    return te.compute((n, h, wd, o), lambda b, i, j, f: te.sum(x[b, rc, i, j] * w[f, 0, 0, rc], axis=rc),
                      name="conv2d_nhwc")


def conv1x1_read_nchw(mod: Any) -> Any:
    """``mod`` with every plain 1x1 NHWC convolution of a ``permute_dims``-to-NHWC value reading the
    value before the permute (a TE kernel, fused and scheduled like the legalized convolution)."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class _Rewrite(relax.PyExprMutator):
        def visit_call_(self, op):  # noqa: N802 - TVM's hook name
            call = super().visit_call_(op)
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d" and _is_plain_1x1(call)):
                return call
            data = call.args[0]
            bound = self.lookup_binding(data) if isinstance(data, relax.Var) else None
            if not (isinstance(bound, relax.Call) and isinstance(bound.op, tvm.ir.Op)
                    and bound.op.name == "relax.permute_dims" and bound.attrs.axes is not None
                    and _ints(bound.attrs.axes) == _TO_NHWC):
                return call
            return self.builder_.call_te(_conv1x1_nchw_to_nhwc, bound.args[0], call.args[1],
                                         primfunc_name_hint="conv2d")

    rewriter = _Rewrite(mod)
    for gv, func in mod.functions.items():
        if gv.name_hint == "main" and isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    out = rewriter.builder_.get()
    return out.with_attrs(mod.attrs) if mod.attrs is not None and hasattr(out, "with_attrs") else out


def _bound_call(mutator, e, name: str):
    """The call ``e`` is bound to when it is a call of op ``name``, else None."""
    import tvm
    from tvm import relax

    v = mutator.lookup_binding(e) if isinstance(e, relax.Var) else None
    if isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name == name:
        return v
    return None


def residual_in_input_layout(mod: Any) -> Any:
    """``permute_dims(relu(add(y, permute_dims(x, p))), q)`` with ``q`` undoing ``p`` becomes
    ``relu(add(permute_dims(y, q), x))``: a residual block's skip input is read in its own layout by
    the kernel that converts the block's output back, so the input needs no converted copy.
    The ReLU is optional; intermediates used elsewhere keep the graph as it is.

    >>> import numpy as np
    >>> from tvm import relax
    >>> bb = relax.BlockBuilder()
    >>> x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
    >>> y = relax.Var("y", relax.TensorType((1, 4, 4, 8), "float32"))
    >>> with bb.function("main", [x, y]):
    ...     with bb.dataflow():
    ...         t = bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
    ...         s = bb.emit(relax.op.nn.relu(relax.op.add(y, t)))
    ...         o = bb.emit_output(relax.op.permute_dims(s, [0, 3, 1, 2]))
    ...     _ = bb.emit_func_output(o)
    >>> out = relax.transform.DeadCodeElimination()(residual_in_input_layout(bb.get()))
    >>> [str(b.value.op.name) for b in out["main"].body.blocks[0].bindings if hasattr(b.value, "op")]
    ['relax.permute_dims', 'relax.add', 'relax.nn.relu']
    """
    import tvm
    from tvm import relax

    from tvm_ext.compile_steps.conv_affine import _uses

    funcs = {gv: f for gv, f in mod.functions.items() if gv.name_hint == "main" and isinstance(f, relax.Function)}
    if not funcs or not isinstance(next(iter(funcs.values())).body, relax.SeqExpr):
        return mod
    uses = _uses(next(iter(funcs.values())))

    @relax.expr_functor.mutator
    class _Rewrite(relax.PyExprMutator):
        def visit_call_(self, op):  # noqa: N802 - TVM's hook name
            call = super().visit_call_(op)
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.permute_dims"
                    and call.attrs.axes is not None):
                return call
            q = _ints(call.attrs.axes)
            src = call.args[0]
            relu = _bound_call(self, src, "relax.nn.relu")
            add = _bound_call(self, relu.args[0] if relu is not None else src, "relax.add")
            if add is None or (relu is not None and uses.get(relu.args[0], 0) != 1) or uses.get(src, 0) != 1:
                return call
            for y, t in (add.args, add.args[::-1]):
                perm = _bound_call(self, t, "relax.permute_dims")
                if perm is None or perm.attrs.axes is None:
                    continue
                p = _ints(perm.attrs.axes)
                if len(p) != len(q) or [p[i] for i in q] != list(range(len(q))):
                    continue
                out = self.builder_.emit(relax.op.add(self.builder_.emit(relax.op.permute_dims(y, q)),
                                                      perm.args[0]))
                return relax.op.nn.relu(out) if relu is not None else out
            return call

    rewriter = _Rewrite(mod)
    for gv, func in funcs.items():
        rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    out = rewriter.builder_.get()
    return out.with_attrs(mod.attrs) if mod.attrs is not None and hasattr(out, "with_attrs") else out
