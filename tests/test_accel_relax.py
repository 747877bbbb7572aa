"""Relax BYOC: every pattern offloaded equals llvm; what no pattern covers stays on llvm; reports."""
from __future__ import annotations

import numpy as np
import pytest

from tvm_ext import accel
from tvm_ext.accel.models import conv_module, gru_cell_module, linear_module, mlp_module


def inputs(m, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, s).astype("float32") for s in m.input_shapes]


def check(mod, config="default", expect=None):
    m = accel.compile(mod, config)
    ref = accel.compile_llvm(mod)
    ins = inputs(m)
    got, want = m(*ins), ref(*ins)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    comps = [c for r in m.reports for c in r.composites]
    if expect is not None:
        assert comps == expect, comps
    return m


@pytest.mark.parametrize("kw, name", [
    ({}, "matmul"),
    ({"bias": True}, "matmul_bias"),
    ({"bias": True, "relu": True}, "matmul_bias_relu"),
    ({"dense": True}, "dense"),
    ({"dense": True, "bias": True}, "dense_bias"),
    ({"dense": True, "bias": True, "relu": True}, "dense_bias_relu"),
])
def test_linear_patterns(kw, name):
    m = check(linear_module(33, 70, 45, **kw), expect=[f"accel.{name}"])
    (rep,) = m.reports
    assert rep.cycles > 0 and rep.cycles_kl > 0 and rep.bytes_by_level["hbm->regfile"] > 0
    assert "call_dps_packed" in m.module.script() and "R.matmul" not in m.module.script()


def test_conv_patterns():
    check(conv_module(1, 4, 9, 6, stride=2, relu=False), expect=["accel.conv2d"])
    check(conv_module(1, 5, 7, 6, layout="NHWC"), config="mini", expect=["accel.conv2d_relu"])


def test_gru_cell_pattern_is_one_stream():
    m = check(gru_cell_module(3, 40), expect=["accel.gru_cell"])
    (rep,) = m.reports
    assert rep.ops.count("matmul") == 2 and rep.ops.count("sigmoid") == 2 and "tanh" in rep.ops
    assert rep.cycles < rep.cycles_kl  # fused on chip vs one library call per op


def test_neighbouring_composites_merge_and_unsupported_ops_stay_on_llvm():
    m = check(mlp_module(40, 64, 48, 20))
    (rep,) = m.reports  # two composites, one offloaded function, one instruction stream
    assert rep.composites == ["accel.matmul_bias_relu", "accel.dense_bias"]
    text = m.module.script()
    assert text.count("call_dps_packed") == 1 and "R.nn.softmax" in text
    before = rep.calls
    m(*inputs(m))
    assert accel.function_report(rep.symbol).calls == before + 1
    summary = m.report()
    assert summary["offloaded"] == 1 and summary["cycles"] == rep.cycles and summary["cycles_kl"] == rep.cycles_kl


def test_an_op_no_pattern_covers_stays_on_llvm():
    from tvm import relax

    x = relax.Var("x", relax.TensorType((8, 16), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.softmax(relax.op.nn.relu(x)))
        bb.emit_func_output(y)
    mod = bb.get()
    part = accel.partition_for_accel(mod)
    assert "call_dps_packed" not in part.script()
    m = accel.compile(mod)
    x0 = inputs(m)[0]
    e = np.exp(np.maximum(x0, 0) - np.maximum(x0, 0).max(axis=1, keepdims=True))
    np.testing.assert_allclose(m(x0), e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    assert m.reports == []


def test_what_the_system_cannot_run_stays_on_llvm():
    from tvm_ext.accel.patterns import clear_rejections, rejections

    clear_rejections()
    mod = conv_module(1, 4, 9, 6, layout="NCHW")
    part = accel.partition_for_accel(mod, "mini")  # NCHW needs transposed tiles: not on this machine
    assert "call_dps_packed" not in part.script() and "conv2d" in part.script()
    assert any(name == "accel.conv2d_relu" and "transposed" in why for name, why in rejections())
    m = check(linear_module(40, 50, 30, dense=True), config="mini", expect=["accel.dense"])
    assert "transpose_32x32" in accel.function_report(m.symbols[0]).instructions  # an explicit transpose
