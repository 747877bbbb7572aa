"""Depthwise and separable convolutions on the modelled accelerator: a multi-instruction cover
(fill, scale into the kernel's product temporary, iadd) lowered with that temporary as a tensor,
scheduled, timed and executed on the functional simulator, checked against torch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tvm_ext.accel import Workload, check_capacity, check_coherence, schedule, simulate
from tvm_ext.accel.lowering import legalize, lower_workload
from tvm_ext.accel.system_graph import load_system
from tvm_ext.errors import ShapeError


def _torch_depthwise(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    t = torch.nn.functional.conv2d(torch.from_numpy(x).double(), torch.from_numpy(w).double(), stride=stride,
                                   padding=pad, groups=x.shape[1])
    return t.numpy()


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_runs_timed_and_matches_torch(stride):
    wl = Workload("dw")
    y = wl.depthwise_conv2d(wl.input("x", (1, 3, 9, 9)), wl.weight("w", (3, 1, 3, 3)), strides=(stride, stride),
                            padding=(1, 1, 1, 1), out="y")
    s = schedule(wl, "default")
    temps = [n for n, t in s.workload.tensors.items() if t.role == "temp"]
    assert temps == ["op0_depthwise_conv2d_tmp"]
    names = {c.instruction.name for c in s.tiles.calls}
    assert {"fill_32x32", "scale_32x32", "iadd_32x32"} <= names
    assert check_coherence(s) and check_capacity(s)
    ins = wl.random_inputs(1)
    res = simulate(s, ins)
    assert res.cycles > 0
    np.testing.assert_allclose(res.outputs[y], _torch_depthwise(ins["x"], ins["w"], stride, 1), rtol=1e-5, atol=1e-5)
    # the caller's workload is not modified: the temporary lives in the legalized copy
    assert "op0_depthwise_conv2d_tmp" not in wl.tensors


def test_separable_conv_runs_and_matches_torch():
    wl = Workload("sep")
    x = wl.input("x", (1, 8, 12, 12))  # the shapes of the BYOC tests below: one mapping search for all
    d = wl.depthwise_conv2d(x, wl.weight("dw", (8, 1, 3, 3)), strides=(2, 2), padding=(1, 1, 1, 1))
    y = wl.relu(wl.conv2d(wl.relu(d), wl.weight("pw", (16, 8, 1, 1))), out="y")
    s = schedule(wl, "default")
    assert check_coherence(s)
    ins = wl.random_inputs(2)
    res = simulate(s, ins)
    t = torch.relu(torch.from_numpy(_torch_depthwise(ins["x"], ins["dw"], 2, 1)))
    want = torch.relu(torch.nn.functional.conv2d(t, torch.from_numpy(ins["pw"]).double())).numpy()
    np.testing.assert_allclose(res.outputs[y], want, rtol=1e-5, atol=1e-5)
    assert res.cycles > simulate(schedule(_depthwise_only(), "default"), timing=True, functional=False).cycles


def _depthwise_only() -> Workload:
    wl = Workload("dw_only")
    wl.depthwise_conv2d(wl.input("x", (1, 8, 12, 12)), wl.weight("dw", (8, 1, 3, 3)), strides=(2, 2),
                        padding=(1, 1, 1, 1), out="y")
    return wl


def test_depthwise_nhwc_reference_matches_torch():
    wl = Workload("dw_nhwc")
    y = wl.depthwise_conv2d(wl.input("x", (1, 7, 7, 5)), wl.weight("w", (3, 3, 1, 5)), strides=(2, 2),
                            padding=(1, 1, 1, 1), layout="NHWC", out="y")
    ins = wl.random_inputs(3)
    w_oihw = ins["w"].transpose(3, 2, 0, 1)
    want = _torch_depthwise(ins["x"].transpose(0, 3, 1, 2), w_oihw, 2, 1).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(wl.reference(ins)[y], want, rtol=1e-10)


def test_depthwise_rejects_bad_weight():
    wl = Workload("bad")
    with pytest.raises(ShapeError, match="channels"):
        wl.depthwise_conv2d(wl.input("x", (1, 4, 8, 8)), wl.weight("w", (4, 2, 3, 3)))


def test_tensor_only_covers_keep_no_temporaries():
    """Ops coverable through tensors alone are lowered exactly as before (no temporary tensors)."""
    wl = Workload()
    wl.relu(wl.matmul(wl.input("a", (40, 64)), wl.weight("b", (64, 32))), out="y")
    system = load_system("default")
    assert legalize(wl, system) is wl
    low = lower_workload(wl, system)
    assert [(c.instruction.name, c.calls) for c in low[0].calls] == [("fill_32x32", 2), ("matmul_32x32x32", 4)]


def test_depthwise_nhwc_schedules_and_matches_torch():
    wl = Workload("dw_nhwc")
    y = wl.depthwise_conv2d(wl.input("x", (1, 6, 6, 3)), wl.weight("w", (3, 3, 1, 3)), padding=(1, 1, 1, 1),
                            layout="NHWC", out="y")
    ins = wl.random_inputs(4)
    res = simulate(schedule(wl, "default"), ins)
    want = _torch_depthwise(ins["x"].transpose(0, 3, 1, 2), ins["w"].transpose(3, 2, 0, 1), 1, 1)
    np.testing.assert_allclose(res.outputs[y], want.transpose(0, 2, 3, 1), rtol=1e-5, atol=1e-5)


def test_mobilenet_block_offloads_whole_through_byoc():
    """Depthwise (grouped conv, groups = channels) + ReLU + pointwise + ReLU: one offloaded function."""
    from tvm_ext import accel
    from tvm_ext.accel.models import separable_block_module

    m = accel.compile(separable_block_module(1, 8, 12, 16, stride=2), "default")
    rng = np.random.default_rng(0)
    ins = [rng.uniform(-1, 1, s).astype("float32") for s in m.input_shapes]
    got = np.asarray(m(*ins))
    x, dw, pw = (torch.from_numpy(a).double() for a in ins)
    d = torch.relu(torch.nn.functional.conv2d(x, dw, stride=2, padding=1, groups=8))
    want = torch.relu(torch.nn.functional.conv2d(d, pw)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (rep,) = m.reports
    assert rep.ops == ["depthwise_conv2d", "relu", "conv2d", "relu"]
    assert "scale_32x32" in rep.instructions and rep.cycles > 0 and rep.cycles_kl > 0
    assert "conv2d" not in m.module.script()


def test_grouped_conv_other_than_depthwise_is_rejected():
    from tvm import relax

    from tvm_ext.accel.translate import UnsupportedRelaxOp, translate_function

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 6, 6), "float32"))
    w = relax.Var("w", relax.TensorType((4, 2, 3, 3), "float32"))
    with bb.function("f", [x, w]):
        y = bb.emit(relax.op.nn.conv2d(x, w, groups=2))
        bb.emit_func_output(y)
    with pytest.raises(UnsupportedRelaxOp, match="groups=2"):
        translate_function(bb.get()["f"])


@pytest.mark.parametrize("layout, xs, bs", [("NCHW", (1, 5, 7, 7), (1, 5, 1, 1)), ("NHWC", (1, 7, 7, 5), (1, 1, 1, 5))])
def test_channel_bias_add_runs_on_the_accelerator(layout, xs, bs):
    wl = Workload()
    y = wl.channel_bias_add(wl.input("x", xs), wl.weight("b", bs), out="y", layout=layout)
    ins = wl.random_inputs(5)
    res = simulate(schedule(wl, "default"), ins)
    np.testing.assert_allclose(res.outputs[y], ins["x"] + ins["b"], rtol=1e-6)
    with pytest.raises(ShapeError, match="channel"):
        wl.channel_bias_add("x", wl.weight("b2", (1, 5)), layout=layout)


def test_zoo_mobilenet_block_with_batchnorm_offloads_whole():
    """The models zoo's SeparableBlock (conv + BN + ReLU twice): BN folded, the block one accelerator function."""
    from tvm_ext import accel
    from tvm_ext.accel.models import from_torch_folded
    from tvm_ext.models.torch_models import SeparableBlock, randomize_batchnorm

    net = SeparableBlock(8, 16, stride=2)
    randomize_batchnorm(net, 0)
    x = np.random.default_rng(0).standard_normal((1, 8, 12, 12)).astype(np.float32)
    with torch.no_grad():
        want = net.eval()(torch.from_numpy(x)).numpy()
    mod, params = from_torch_folded(net, [x])
    m = accel.compile(mod, "default")
    got = m(x, *params)
    np.testing.assert_allclose(np.asarray(got[0]), want, rtol=1e-4, atol=1e-5)
    (rep,) = m.reports
    assert rep.composites == ["accel.conv2d_bias_relu"] * 2
    assert rep.ops == ["depthwise_conv2d", "channel_bias_add", "relu", "conv2d", "channel_bias_add", "relu"]
    script = m.module.script()
    assert "conv2d" not in script and "R.nn.relu" not in script
    # a loaded module decodes the program again (legalize names the kernel temporaries the same way)
    from tvm_ext.accel import byoc

    with byoc._KERNELS._lock:
        byoc._KERNELS._kernels.clear()
    np.testing.assert_array_equal(np.asarray(m(x, *params)[0]), np.asarray(got[0]))


def test_depthwise_on_a_system_without_iadd_names_the_missing_instruction():
    from tvm_ext.errors import ConfigError

    wl = Workload("dw")
    wl.depthwise_conv2d(wl.input("x", (1, 3, 9, 9)), wl.weight("w", (3, 1, 3, 3)), padding=(1, 1, 1, 1), out="y")
    with pytest.raises(ConfigError, match=r"iadd_32x32.*no compute unit of system 'isam-mini'"):
        schedule(wl, "mini")


def test_cli_sepconv_json_and_unsupported_system(capsys):
    import json

    from tvm_ext.cli.main import main

    assert main(["accel", "sepconv", "8", "12", "--c-out", "16", "--stride", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cycles"] > 0 and data["cycles_kl"] > 0 and data["max_rel_err"] < 1e-5
    assert {"scale_32x32", "iadd_32x32", "matmul_32x32x32"} <= set(data["instruction_set"])
    assert main(["accel", "sepconv", "8", "12", "--depthwise-only", "--config", "mini"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "iadd_32x32" in err[0]
