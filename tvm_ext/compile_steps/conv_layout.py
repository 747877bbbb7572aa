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

__all__ = ["conv1x1_read_nchw", "residual_in_input_layout", "conv1x1_residual_to_nchw"]

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


_TO_NCHW = [0, 3, 1, 2]


def _conv1x1_residual_nchw(y, w, *rest, width: int, bias: bool, relu: bool):
    """``out[n, o, h, w] = (relu)(conv[n, o, h * width + w] (+ b[o]) + x[n, o, h, w])`` with
    ``conv[n, o, p] = sum_c y[n, p, c] * w[o, 0, 0, c]``: the pixels of the NHWC input flattened
    (``y`` is ``[n, h * width, c]``), the output and the residual ``x`` in NCHW."""
    from tvm import te, tirx

    b, x = (rest[0], rest[1]) if bias else (None, rest[0])
    n, p, c = y.shape
    o = w.shape[0]
    rc = te.reduce_axis((0, c), name="rc")
    conv = te.compute((n, o, p), lambda i, f, j: te.sum(y[i, j, rc] * w[f, 0, 0, rc], axis=rc),
                      name="conv2d_nchw")

    def tail(i, f, r, q):
        v = conv[i, f, r * width + q]
        if b is not None:
            v = v + b[(0,) * (len(b.shape) - 1) + (f,)]
        v = v + x[i, f, r, q]
        return te.max(v, tirx.const(0, "float32")) if relu else v

    return te.compute(tuple(x.shape), tail, name="T_residual")


def _channel_bias(e, channels: int) -> bool:
    """``e`` broadcasts along the last (NHWC channel) axis only, with ``channels`` values."""
    try:
        shape = _ints(e.ty.shape.values)
    except (AttributeError, TypeError, ValueError):
        return False
    return (1 <= len(shape) <= 4 and shape[-1] == channels and all(d == 1 for d in shape[:-1])
            and str(e.ty.dtype) == "float32")


def _fuse_residual_tail(mutator, add, relu: bool, uses: dict):
    """The fused kernel's call replacing ``(relu)(add)`` (emitted through ``mutator``'s builder), or None
    when ``add`` is not ``add(permute_dims((add)(conv2d_1x1(y, w), b), [0, 3, 1, 2]), x)`` with
    single-use intermediates and ``x`` of the output's shape."""
    from tvm import relax

    from tvm_ext.compile_steps.placement import ATTR_MEMBERS
    from tvm_ext.compile_steps.weight_prepack import RUN_TIME_PARAMS

    out_shape = add.ty.shape
    for t, x in (add.args, add.args[::-1]):
        perm = _bound_call(mutator, t, "relax.permute_dims")
        if (perm is None or perm.attrs.axes is None or _ints(perm.attrs.axes) != _TO_NCHW
                or uses.get(t, 0) != 1):
            continue
        try:
            same = _ints(x.ty.shape.values) == _ints(out_shape.values) and str(x.ty.dtype) == "float32"
        except (AttributeError, TypeError, ValueError):
            same = False
        if not same:
            continue
        src, bias = perm.args[0], None
        badd = _bound_call(mutator, src, "relax.add")
        if badd is not None and uses.get(src, 0) == 1:
            for cv, b in (badd.args, badd.args[::-1]):
                if _bound_call(mutator, cv, "relax.nn.conv2d") is not None and uses.get(cv, 0) == 1:
                    src, bias = cv, b
                    break
        conv = _bound_call(mutator, src, "relax.nn.conv2d")
        if (conv is None or not _is_plain_1x1(conv) or (bias is None and badd is not None)
                or uses.get(src, 0) != 1):
            continue
        n, o, h, wd = _ints(out_shape.values)
        if bias is not None and not _channel_bias(bias, o):
            continue
        c = _ints(conv.args[0].ty.shape.values)[3]
        bld = mutator.builder_
        y3 = bld.emit(relax.op.reshape(conv.args[0], (n, h * wd, c)))
        args = [y3, conv.args[1]] + ([bias] if bias is not None else []) + [x]
        fused = bld.call_te(_conv1x1_residual_nchw, *args, width=wd, bias=bias is not None, relu=relu,
                            primfunc_name_hint="conv2d_residual")
        members = ["conv2d"] + (["add"] if bias is not None else []) + ["transpose", "add"] + (
            ["relu"] if relu else [])
        gv = fused.args[0]
        bld.update_func(gv, bld.get()[gv].with_attr(ATTR_MEMBERS, members).with_attr(RUN_TIME_PARAMS, [0]))
        return fused
    return None


def conv1x1_residual_to_nchw(mod: Any) -> Any:
    """``(relu)(add(permute_dims((add)(conv2d_1x1(y, w), b), [0, 3, 1, 2]), x))`` -- a residual
    block's last 1x1 NHWC convolution, its bias, the conversion back to NCHW, the skip add and the
    ReLU -- becomes one kernel that computes the convolution with the output channels as rows and the
    pixels as the vector axis, so it writes NCHW directly with the bias, skip add and ReLU in its
    epilogue: no NHWC copy of the block's output is written and converted back.  The pixels are
    flattened by a reshape of the input (a view at run time), marked a run-time parameter
    (:data:`.weight_prepack.RUN_TIME_PARAMS`): the schedule may pack it one pixel panel at a time
    inside the kernel.  Intermediates used elsewhere keep the graph as it is.

    >>> import numpy as np
    >>> from tvm import relax
    >>> bb = relax.BlockBuilder()
    >>> x = relax.Var("x", relax.TensorType((1, 16, 4, 4), "float32"))
    >>> y = relax.Var("y", relax.TensorType((1, 4, 4, 8), "float32"))
    >>> w = relax.const(np.ones((16, 1, 1, 8), "float32"))
    >>> with bb.function("main", [x, y]):
    ...     with bb.dataflow():
    ...         c = bb.emit(relax.op.nn.conv2d(y, w, data_layout="NHWC", kernel_layout="OHWI"))
    ...         t = bb.emit(relax.op.permute_dims(c, [0, 3, 1, 2]))
    ...         o = bb.emit_output(relax.op.nn.relu(relax.op.add(t, x)))
    ...     _ = bb.emit_func_output(o)
    >>> out = relax.transform.DeadCodeElimination()(conv1x1_residual_to_nchw(bb.get()))
    >>> [str(b.value.op.name) for b in out["main"].body.blocks[0].bindings if hasattr(b.value, "op")]
    ['relax.reshape', 'relax.call_tir']
    """
    import tvm
    from tvm import relax

    from tvm_ext.compile_steps.conv_affine import _uses

    funcs = {gv: f for gv, f in mod.functions.items() if gv.name_hint == "main" and isinstance(f, relax.Function)}
    if not funcs or not isinstance(next(iter(funcs.values())).body, relax.SeqExpr):
        return mod
    main = next(iter(funcs.values()))
    uses = _uses(main)
    relu_input = set()  # values only a ReLU reads: rewritten with the ReLU, not before it
    for block in main.body.blocks:
        for bnd in block.bindings:
            v = bnd.value
            if (isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op) and v.op.name == "relax.nn.relu"
                    and isinstance(v.args[0], relax.Var) and uses.get(v.args[0], 0) == 1):
                relu_input.add(v.args[0])

    @relax.expr_functor.mutator
    class _Rewrite(relax.PyExprMutator):
        bound = None  # the variable of the binding being visited

        def visit_var_binding_(self, binding):  # noqa: N802 - TVM's hook name
            self.bound = binding.var
            super().visit_var_binding_(binding)

        def visit_call_(self, op):  # noqa: N802 - TVM's hook name
            call = super().visit_call_(op)
            if not isinstance(call.op, tvm.ir.Op):
                return call
            relu = call.op.name == "relax.nn.relu"
            if relu:
                add = _bound_call(self, call.args[0], "relax.add")
            elif call.op.name == "relax.add" and self.bound not in relu_input:
                add = call
            else:
                return call
            if add is None:
                return call
            fused = _fuse_residual_tail(self, add, relu, uses)
            return call if fused is None else fused

    rewriter = _Rewrite(mod)
    for gv, func in funcs.items():
        rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    out = rewriter.builder_.get()
    return out.with_attrs(mod.attrs) if mod.attrs is not None and hasattr(out, "with_attrs") else out
