"""The NHWC depthwise schedule rule (tvm_ext.compile_steps.depthwise_schedule) against torch."""
import numpy as np
import pytest
import torch

tvm = pytest.importorskip("tvm")
from tvm import te  # noqa: E402

from tvm_ext.compile_steps.depthwise_schedule import depthwise_block, depthwise_schedule  # noqa: E402
from tvm_ext.compile_steps.llvm_schedule import schedule_primfunc  # noqa: E402
from tvm_ext.target import resolve_target  # noqa: E402


def _depthwise_bias_relu(h: int, w: int, c: int, stride: int):
    """A padded NHWC depthwise 3x3 convolution + bias + relu, as ``LegalizeAndFuse`` produces it."""
    x = te.placeholder((1, h, w, c), name="x")
    wt = te.placeholder((c, 3, 3, 1), name="wt")
    b = te.placeholder((1, 1, 1, c), name="b")
    pad = te.compute((1, h + 2, w + 2, c), lambda n, i, j, k: te.if_then_else(
        te.all(i >= 1, i <= h, j >= 1, j <= w), x[n, i - 1, j - 1, k], 0.0), name="pad_temp")
    ho, wo = (h - 1) // stride + 1, (w - 1) // stride + 1
    ry, rx = te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
    conv = te.compute((1, ho, wo, c), lambda n, i, j, k: te.sum(
        pad[n, i * stride + ry, j * stride + rx, k] * wt[k, ry, rx, 0], axis=[ry, rx]), name="dw")
    add = te.compute(conv.shape, lambda n, i, j, k: conv[n, i, j, k] + b[0, 0, 0, k], name="T_add")
    out = te.compute(conv.shape, lambda n, i, j, k: te.max(add[n, i, j, k], 0.0), name="relu")
    return te.create_prim_func([x, wt, b, out]), (ho, wo)


def _torch_reference(x, wt, b, stride):
    y = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(wt).permute(0, 3, 1, 2),
                                   torch.from_numpy(b.reshape(-1)), stride=stride, padding=1, groups=x.shape[3])
    return torch.relu(y).permute(0, 2, 3, 1).numpy()


def _run(func, x, wt, b, out_shape):
    mod = tvm.compile(func.with_attr("global_symbol", "main"), target=resolve_target(None))
    args = [tvm.runtime.tensor(a) for a in (x, wt, b)] + [tvm.runtime.tensor(np.zeros(out_shape, "float32"))]
    mod["main"](*args)
    return args[-1].numpy()


@pytest.mark.parametrize("h,w,c,stride,lanes,registers", [
    (12, 12, 32, 1, 8, 16), (14, 14, 48, 2, 16, 32), (9, 10, 24, 1, 16, 32), (28, 28, 16, 1, 16, 32)])
def test_depthwise_schedule_matches_torch(h, w, c, stride, lanes, registers):
    func, (ho, wo) = _depthwise_bias_relu(h, w, c, stride)
    sch = depthwise_schedule(func, lanes, registers)
    assert sch is not None
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, h, w, c)).astype("float32")
    wt = rng.standard_normal((c, 3, 3, 1)).astype("float32")
    b = rng.standard_normal((1, 1, 1, c)).astype("float32")
    got = _run(sch.mod["main"], x, wt, b, (1, ho, wo, c))
    np.testing.assert_allclose(got, _torch_reference(x, wt, b, stride), rtol=1e-5, atol=1e-5)


def test_pointwise_conv_is_not_depthwise():
    x = te.placeholder((1, 8, 8, 16), name="x")
    wt = te.placeholder((32, 1, 1, 16), name="wt")
    rc = te.reduce_axis((0, 16), "rc")
    y = te.compute((1, 8, 8, 32), lambda n, i, j, k: te.sum(x[n, i, j, rc] * wt[k, 0, 0, rc], axis=rc), name="pw")
    func = te.create_prim_func([x, wt, y])
    from tvm import s_tir

    assert depthwise_block(s_tir.Schedule(func)) is None
    assert depthwise_schedule(func, 8) is None


def test_schedule_primfunc_depthwise_choice_matches_torch():
    func, (ho, wo) = _depthwise_bias_relu(16, 16, 32, 1)
    scheduled, how = schedule_primfunc(func, "dw_bias_relu")
    assert how.how in ("depthwise", "tensorized", "default")
    assert "depthwise" in how.candidates or how.how == "default"
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 16, 16, 32)).astype("float32")
    wt = rng.standard_normal((32, 3, 3, 1)).astype("float32")
    b = rng.standard_normal((1, 1, 1, 32)).astype("float32")
    got = _run(scheduled, x, wt, b, (1, ho, wo, 32))
    np.testing.assert_allclose(got, _torch_reference(x, wt, b, 1), rtol=1e-5, atol=1e-5)
