"""Depthwise -> pointwise blocks merged into one kernel (tvm_ext.compile_steps.depthwise_pointwise), against torch."""
import numpy as np
import pytest
import torch

tvm = pytest.importorskip("tvm")

import tvm_ext.compile as tc  # noqa: E402
from tvm_ext.compile_steps import depthwise_pointwise as dp  # noqa: E402
from tvm_ext.compile_steps.candidate_timing import param_buffers  # noqa: E402
from tvm_ext.models.torch_models import MobileNetV1Stack  # noqa: E402
from tvm_ext.target import resolve_target  # noqa: E402


def _stack():
    """Two separable blocks (the second strided), NCHW input 16x12x12; the module and its torch twin."""
    from tvm_ext.models.frontends import from_torch

    net = MobileNetV1Stack([(16, 32, 1), (32, 32, 2)])
    x = np.random.default_rng(3).standard_normal((1, 16, 12, 12)).astype("float32")
    return from_torch(net, [x]), net, x


def _legalized(mod):
    """``mod`` through the pipeline's passes up to LegalizeAndFuse (what FuseSeparableBlocks sees)."""
    from tvm_ext.pipeline import optimization_passes

    with resolve_target(None):
        for p in optimization_passes():
            mod = p(mod)
            if p.info.name == "tvm_ext.LegalizeAndFuse":
                return mod
    raise AssertionError("no LegalizeAndFuse pass in the pipeline")


def test_pairs_are_found_from_structure_and_the_merged_kernel_matches_the_two():
    mod, _, _ = _stack()
    legal = _legalized(mod)
    pairs = dp.separable_pairs(legal)
    assert len(pairs) == 2  # each block's depthwise feeds only its pointwise; block 1 -> block 2 is pw -> dw
    merged = dp.merge_pairs(legal, pairs)
    for p in pairs:
        func = merged[p.name]
        assert [str(m) for m in func.attrs["tvm_ext.members"]] == ["conv2d", "add", "relu"] * 2
        dw, pw = legal[p.depthwise.args[0]], legal[p.pointwise.args[0]]
        rng = np.random.default_rng(0)
        params = param_buffers(func)
        args = [rng.uniform(-1, 1, _shape(b)).astype("float32") for b in params[:-1]]
        n_dw = len(dw.params) - 1
        tgt = resolve_target(None)
        mid = _call(dw, args[:n_dw], _shape(param_buffers(dw)[-1]), tgt)  # the two kernels, unscheduled
        want = _call(pw, [mid] + args[n_dw:], _shape(params[-1]), tgt)
        for lanes, registers, target in ((16, 32, tgt), (8, 16, tvm.target.Target({"kind": "llvm", "mcpu": "haswell"}))):
            sch = dp.separable_schedule(func, lanes, registers)
            assert sch is not None
            got = _call(sch.mod["main"], args, _shape(params[-1]), target)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def _shape(buf) -> list[int]:
    return [int(d) for d in buf.shape]


def _call(func, xs, out_shape, target):
    mod = tvm.compile(func.with_attr("global_symbol", "main"), target=target)
    args = [tvm.runtime.tensor(a) for a in xs] + [tvm.runtime.tensor(np.zeros(out_shape, "float32"))]
    mod["main"](*args)
    return args[-1].numpy()


class _DepthwiseAlsoReturned(torch.nn.Module):
    """A separable block whose depthwise output is also a model output (two users)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = torch.nn.Conv2d(16, 32, 1)

    def forward(self, x):
        d = torch.relu(self.dw(x))
        return torch.relu(self.pw(d)), d


def test_only_a_depthwise_result_with_no_other_user_is_merged(monkeypatch):
    from tvm_ext.models.frontends import from_torch

    net = _DepthwiseAlsoReturned().eval()
    x = np.random.default_rng(4).standard_normal((1, 16, 8, 8)).astype("float32")
    mod = from_torch(net, [x])
    assert dp.separable_pairs(_legalized(mod)) == []
    monkeypatch.setattr(dp, "_time_fused_and_separate", lambda *a: {"fused": 1.0, "separate": 2.0})
    model = tc.compile(mod, tensorize="never")
    assert not [k for k in model.report.kernels if k.schedule == dp.SCHEDULE]
    with torch.no_grad():
        want = [t.numpy() for t in net(torch.from_numpy(x))]
    for got, w in zip(model(x), want):
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-4)


def test_pointwise_block_rejects_a_3x3_convolution():
    from tvm import te, s_tir

    x = te.placeholder((1, 6, 6, 8), name="x")
    w = te.placeholder((16, 3, 3, 8), name="w")
    ry, rx, rc = te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx"), te.reduce_axis((0, 8), "rc")
    y = te.compute((1, 4, 4, 16), lambda n, h, v, o: te.sum(x[n, h + ry, v + rx, rc] * w[o, ry, rx, rc],
                                                             axis=[ry, rx, rc]), name="conv")
    assert dp.pointwise_block(s_tir.Schedule(te.create_prim_func([x, w, y]))) is None
    w1 = te.placeholder((16, 1, 1, 8), name="w1")
    y1 = te.compute((1, 6, 6, 16), lambda n, h, v, o: te.sum(x[n, h, v, rc] * w1[o, 0, 0, rc], axis=[rc]), name="pw")
    assert dp.pointwise_block(s_tir.Schedule(te.create_prim_func([x, w1, y1]))) is not None


@pytest.mark.parametrize("fused_wins", [True, False])
def test_compiled_stack_matches_torch_whichever_kernels_the_measurement_keeps(monkeypatch, fused_wins):
    """The pass keeps the merged kernel only where it measures faster; either way the model equals torch."""
    times = {"fused": 1.0, "separate": 2.0} if fused_wins else {"fused": 2.0, "separate": 1.0}
    monkeypatch.setattr(dp, "_time_fused_and_separate", lambda *a: dict(times))
    mod, net, x = _stack()
    model = tc.compile(mod, tensorize="never")
    merged = [k for k in model.report.kernels if k.schedule == dp.SCHEDULE]
    assert len(merged) == (2 if fused_wins else 0)
    for k in merged:
        assert k.ops == ["conv2d", "add", "relu"] * 2 and "2.00x faster than the two kernels" in k.detail
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(x)[0], want, rtol=1e-4, atol=1e-4)


def test_tensorize_always_keeps_the_two_kernels(monkeypatch):
    """``tensorize="always"`` asks for every kernel the micro-kernels map: the pointwise stays its own."""
    monkeypatch.setattr(dp, "_time_fused_and_separate", lambda *a: {"fused": 1.0, "separate": 2.0})
    legal = _legalized(_stack()[0])
    with resolve_target(None):
        kept = dp.FuseSeparableBlocks("always")(legal)
        merged = dp.FuseSeparableBlocks("never", measure=False)(legal)
    schedules = lambda m: [str(f.attrs["tvm_ext.schedule"][0]) for _, f in m.functions.items()  # noqa: E731
                           if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and "tvm_ext.schedule" in f.attrs]
    assert schedules(kept) == [] and schedules(merged) == [dp.SCHEDULE] * 2
