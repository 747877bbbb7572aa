"""A ResNet bottleneck compiles to one kernel per convolution (batch norm folded to a bias, ReLU and
the residual add in its epilogue; the last convolution writes NCHW itself, or one layout conversion
back to NCHW where the skip is projected), and still matches ONNX Runtime; the batch norm folding and the layout rewrites on their own; plain copy blocks (a 1x1
convolution's ``pad_temp``) are inlined into the reduction that reads them."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import tvm_ext.compile as tc  # noqa: E402
from tvm_ext.models.frontends import from_onnx, onnx_reference  # noqa: E402
from tvm_ext.models.onnx_models import bottleneck_onnx  # noqa: E402
from tvm_ext.compile_steps.weight_prepack import PACKING_SUFFIX  # noqa: E402


def _kernel_ops(model) -> dict[str, list[str]]:
    return {k["name"]: list(k["ops"]) for k in model.report.to_dict()["kernels"]}


@pytest.mark.parametrize("c_in,c_out", [(32, None), (16, 24)])  # identity skip; projected skip
def test_bottleneck_is_one_kernel_per_convolution_and_one_layout_conversion(c_in, c_out):
    proto = bottleneck_onnx(c_in, 8, 6, c_out=c_out)
    model = tc.compile(from_onnx(proto), tensorize="always")  # the micro-kernels' epilogues compute it
    x = model.random_inputs(3)
    assert tc.max_rel_err(model(*x), onnx_reference(proto, x)) < 1e-4
    kernels = {name: ops for name, ops in _kernel_ops(model).items() if not name.endswith(PACKING_SUFFIX)}
    convs = [ops for ops in kernels.values() if "conv2d" in ops]
    others = [ops for ops in kernels.values() if "conv2d" not in ops]
    assert all(ops[:2] == ["conv2d", "add"] and "subtract" not in ops and "divide" not in ops for ops in convs)
    if c_out is None:  # the last convolution writes NCHW, the skip add and ReLU in its epilogue
        assert len(convs) == 3 and others == []
        assert [ops for ops in convs if "transpose" in ops] == [["conv2d", "add", "transpose", "add", "relu"]]
        assert sum(ops.count("relu") for ops in convs) == 3
    else:  # the 1x1 convolutions read the NCHW input; the residual add joins the last convolution
        assert len(convs) == 4 and others == [["transpose"]]
        assert sum(ops.count("relu") for ops in convs) == 3
        assert any(ops.count("add") == 2 and "relu" in ops for ops in convs)


def test_inline_copies_removes_a_1x1_convs_input_copy_and_keeps_the_result():
    import tvm
    from tvm import s_tir, te, topi

    from tvm_ext.compile_steps.llvm_schedule import _root_blocks, inline_copies

    x = te.placeholder((1, 4, 4, 8), name="x")
    w = te.placeholder((1, 1, 8, 16), name="w")
    y = topi.nn.conv2d_nhwc(x, w, 1, 0, 1)
    func = te.create_prim_func([x, w, y])
    before = s_tir.Schedule(func)
    assert len(_root_blocks(before)) == 2  # pad_temp (a copy), conv
    after = inline_copies(func)
    sch = s_tir.Schedule(after)
    assert [sch.get(b).name_hint for b in _root_blocks(sch)] == [before.get(_root_blocks(before)[1]).name_hint]
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((1, 4, 4, 8)).astype("float32"), rng.standard_normal((1, 1, 8, 16)).astype("float32")
    out = tvm.runtime.empty((1, 4, 4, 16), "float32", tvm.cpu())
    tvm.compile(tvm.IRModule({"main": after}), target="llvm")["main"](tvm.runtime.tensor(xs), tvm.runtime.tensor(ws),
                                                                       out)
    np.testing.assert_allclose(out.numpy(), np.einsum("nhwc,co->nhwo", xs, ws[0, 0]), rtol=1e-5, atol=1e-5)


def _conv_chain(steps, *, reuse: bool = False):
    """``main(x)``: a 1x1 conv followed by ``steps`` ((op, constant, constant first?), ...)."""
    from tvm import relax

    rng = np.random.default_rng(1)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 3, 4, 4), "float32"))
    w = relax.const(rng.standard_normal((5, 3, 1, 1)).astype("float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = conv = bb.emit(relax.op.nn.conv2d(x, w))
            for op, c, first in steps:
                y = bb.emit(op(relax.const(c), y) if first else op(y, relax.const(c)))
            if reuse:
                y = bb.emit(relax.op.add(y, conv))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _run(mod, x):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def _ops(mod) -> list[str]:
    return [str(b.value.op.name) for blk in mod["main"].body.blocks for b in blk.bindings
            if hasattr(b.value, "op")]


def test_fold_conv_affine_turns_a_batch_norm_chain_into_one_bias_and_keeps_the_result():
    from tvm import relax

    from tvm_ext.compile_steps.conv_affine import fold_conv_affine

    rng = np.random.default_rng(2)
    ch = lambda lo=0.5: rng.uniform(lo, 2.0, (1, 5, 1, 1)).astype("float32")  # noqa: E731
    mod = _conv_chain([(relax.op.subtract, ch(), False), (relax.op.divide, ch(), False),
                       (relax.op.multiply, ch(), True), (relax.op.add, ch()[0], False)])  # rank 3: (5, 1, 1)
    folded = fold_conv_affine(mod)
    assert _ops(folded) == ["relax.nn.conv2d", "relax.add"]
    x = rng.standard_normal((1, 3, 4, 4)).astype("float32")
    np.testing.assert_allclose(_run(folded, x), _run(mod, x), rtol=1e-5, atol=1e-5)


def test_fold_conv_affine_leaves_what_is_not_a_per_channel_affine_chain():
    from tvm import relax

    from tvm_ext.compile_steps.conv_affine import fold_conv_affine

    per_channel = np.full((1, 5, 1, 1), 2.0, "float32")
    per_pixel = np.full((1, 1, 4, 4), 2.0, "float32")
    for steps, reuse in [([(relax.op.multiply, per_pixel, False)], False),  # varies along a spatial axis
                         ([(relax.op.subtract, per_channel, True)], False),  # c - y
                         ([(relax.op.multiply, per_channel, False)], True)]:  # the conv's output used twice
        mod = _conv_chain(steps, reuse=reuse)
        assert _ops(fold_conv_affine(mod)) == _ops(mod)


def test_layout_rewrites_leave_other_permutes_alone():
    from tvm import relax

    from tvm_ext.compile_steps.conv_layout import conv1x1_read_nchw, residual_in_input_layout

    x = relax.Var("x", relax.TensorType((1, 8, 4, 4), "float32"))
    y = relax.Var("y", relax.TensorType((1, 4, 4, 8), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            t = bb.emit(relax.op.permute_dims(x, [0, 3, 2, 1]))  # not the NHWC conversion
            s = bb.emit(relax.op.add(y, t))
            o = bb.emit_output(relax.op.permute_dims(s, [0, 3, 1, 2]))
        bb.emit_func_output(o)
    mod = bb.get()
    w = relax.const(np.ones((4, 3, 3, 8), "float32"))  # 3x3: needs the window, keeps its NHWC input
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            t = bb.emit(relax.op.permute_dims(x, [0, 2, 3, 1]))
            o = bb.emit_output(relax.op.nn.conv2d(t, w, data_layout="NHWC", kernel_layout="OHWI"))
        bb.emit_func_output(o)
    conv = bb.get()
    assert _ops(residual_in_input_layout(mod)) == _ops(mod)
    assert _ops(conv1x1_read_nchw(conv)) == _ops(conv)


def _residual_tail(*, relu: bool, bias: bool, skip_first: bool, reuse: bool = False):
    """``main(x, y)``: (relu)(add(permute_dims(conv1x1(y) (+ b), NCHW), x)), y NHWC, x NCHW."""
    from tvm import relax

    rng = np.random.default_rng(4)
    x = relax.Var("x", relax.TensorType((1, 24, 5, 6), "float32"))
    y = relax.Var("y", relax.TensorType((1, 5, 6, 8), "float32"))
    w = relax.const(rng.standard_normal((24, 1, 1, 8)).astype("float32"))
    b = relax.const(rng.standard_normal((1, 1, 1, 24)).astype("float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x, y]):
        with bb.dataflow():
            c = conv = bb.emit(relax.op.nn.conv2d(y, w, data_layout="NHWC", kernel_layout="OHWI"))
            if bias:
                c = bb.emit(relax.op.add(b, c))
            t = bb.emit(relax.op.permute_dims(c, [0, 3, 1, 2]))
            s = bb.emit(relax.op.add(x, t) if skip_first else relax.op.add(t, x))
            if relu:
                s = bb.emit(relax.op.nn.relu(s))
            if reuse:  # the NHWC convolution's output read again: the rewrite must not apply
                s = bb.emit(relax.op.add(s, relax.op.permute_dims(conv, [0, 3, 1, 2])))
            o = bb.emit_output(s)
        bb.emit_func_output(o)
    return bb.get()


def _run2(mod, *xs):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](*[tvm.runtime.tensor(a) for a in xs]).numpy()


@pytest.mark.parametrize("relu,bias,skip_first", [(True, True, False), (False, True, True), (True, False, True)])
def test_conv1x1_residual_to_nchw_is_one_kernel_and_keeps_the_result(relu, bias, skip_first):
    from tvm_ext.compile_steps.conv_layout import conv1x1_residual_to_nchw

    mod = _residual_tail(relu=relu, bias=bias, skip_first=skip_first)
    out = conv1x1_residual_to_nchw(mod)
    from tvm import relax

    assert _ops(relax.transform.DeadCodeElimination()(out)) == ["relax.reshape", "relax.call_tir"]
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal((1, 24, 5, 6)).astype("float32"), rng.standard_normal((1, 5, 6, 8)).astype("float32")
    np.testing.assert_allclose(_run2(out, x, y), _run2(mod, x, y), rtol=1e-5, atol=1e-5)


def test_conv1x1_residual_to_nchw_leaves_a_reused_convolution_alone():
    from tvm_ext.compile_steps.conv_layout import conv1x1_residual_to_nchw

    mod = _residual_tail(relu=True, bias=False, skip_first=False, reuse=True)
    assert _ops(conv1x1_residual_to_nchw(mod)) == _ops(mod)


def test_convert_conv_layout_in_a_sequential_fuses_the_residual_tail_into_the_last_convolution():
    """The pass works in one's own ``Sequential``; the fused kernel tensorizes with the tail in its
    epilogue and the compiled module equals the unfused graph."""
    import tvm
    from tvm import relax

    from tvm_ext.compile_steps import passes as P
    from tvm_ext.compile_steps.placement import ATTR_MEMBERS

    mod = _residual_tail(relu=True, bias=True, skip_first=False)
    seq = tvm.transform.Sequential([P.AnnotateOpIds(), P.ConvertConvLayout(), P.LegalizeAndFuse(),
                                    P.TensorizeOrDefault("always")])
    with tvm_ext_target():
        out = seq(mod)
    members = {gv.name_hint: [str(m) for m in f.attrs[ATTR_MEMBERS]] for gv, f in out.functions.items()
               if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and ATTR_MEMBERS in f.attrs}
    assert ["conv2d", "add", "transpose", "add", "relu"] in members.values()
    assert not any("transpose" in ms and "conv2d" not in ms for ms in members.values())
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((1, 24, 5, 6)).astype("float32"), rng.standard_normal((1, 5, 6, 8)).astype("float32")
    got = relax.VirtualMachine(tvm.compile(out, target=tvm_ext_target()), tvm.cpu())["main"](
        tvm.runtime.tensor(x), tvm.runtime.tensor(y)).numpy()
    np.testing.assert_allclose(got, _run2(mod, x, y), rtol=1e-4, atol=1e-4)


def tvm_ext_target():
    from tvm_ext.target import resolve_target

    return resolve_target(None)


def test_a_plain_reshape_gets_no_schedule_and_runs_as_a_view():
    """The default schedule rule declines a reshape (here of a matmul's input, which no kernel
    absorbs), so TVM's RewriteDataflowReshape makes it a view: no copy kernel, the same result."""
    from tvm import relax

    x = relax.Var("x", relax.TensorType((4, 6), "float32"))
    w = np.arange(36, dtype="float32").reshape(12, 3) / 36
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            r = bb.emit(relax.op.reshape(x, (2, 12)))
            o = bb.emit_output(relax.op.matmul(r, relax.const(w)))
        bb.emit_func_output(o)
    model = tc.compile(bb.get())
    assert [k["ops"] for k in model.report.to_dict()["kernels"] if "reshape" in k["ops"]] == []
    xs = np.linspace(-1, 1, 24, dtype="float32").reshape(4, 6)
    np.testing.assert_allclose(model(xs)[0], xs.reshape(2, 12) @ w, rtol=1e-5, atol=1e-5)
