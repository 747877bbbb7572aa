"""A kernel's run-time operand packed one panel at a time inside its parallel loop (``pack_at="panel"``):
offered for the residual-tail convolution's activation input, equal to numpy, never split out as a
weight's packing; candidate timing keeps a candidate whose first round hit a burst of load."""
from __future__ import annotations

import numpy as np
import pytest


def _residual_conv(h: int, w: int, c: int, o: int, *, run_time: bool = True):
    """The fused NCHW-output 1x1 convolution of :mod:`.conv_layout` (bias, skip add, ReLU) as a PrimFunc."""
    from tvm import te

    from tvm_ext.compile_steps.conv_layout import _conv1x1_residual_nchw
    from tvm_ext.compile_steps.weight_prepack import RUN_TIME_PARAMS

    y = te.placeholder((1, h * w, c), name="y")
    wt = te.placeholder((o, 1, 1, c), name="w")
    b = te.placeholder((1, 1, 1, o), name="b")
    x = te.placeholder((1, o, h, w), name="x")
    out = _conv1x1_residual_nchw(y, wt, b, x, width=w, bias=True, relu=True)
    func = te.create_prim_func([y, wt, b, x, out])
    return func.with_attr(RUN_TIME_PARAMS, [0]) if run_time else func


def _names(func) -> set[str]:
    from tvm import s_tir

    s = s_tir.Schedule(func)
    return {s.get(b).name_hint for b in s.get_child_blocks(s.get_sblock("root"))}


def _packed_in_panel(func, parallel: bool = False) -> bool:
    """The ``y_global`` copy sits in the convolution's outermost loop (a parallel one when ``parallel``)."""
    from tvm import s_tir, tirx

    s = s_tir.Schedule(func)
    copy, conv = s.get_loops(s.get_sblock("y_global")), s.get_loops(s.get_sblock("conv2d_nchw_update_o"))
    return (bool(copy) and s.get(copy[0]).same_as(s.get(conv[0]))
            and (not parallel or tirx.ForKind(s.get(conv[0]).kind) == tirx.ForKind.PARALLEL))


def test_the_panel_variant_is_offered_only_for_a_kernel_with_run_time_params():
    from tvm_ext.compile_steps.kernel_variants import PACK_IN_PANEL, loop_order_variants
    from tvm_ext.target import default_target

    from tvm_ext.target import hardware_facts

    offered = loop_order_variants(_residual_conv(56, 56, 64, 256), default_target())
    assert PACK_IN_PANEL in offered
    lanes = hardware_facts(default_target()).lanes("float32")
    assert [v["tiles"]["vector"] for v in offered if v.get("pack_at") == "panel" and "tiles" in v] == [lanes]
    assert PACK_IN_PANEL not in loop_order_variants(_residual_conv(56, 56, 64, 256, run_time=False),
                                                    default_target())


@pytest.mark.parametrize("h,w,c,o,parallel,tiles", [(4, 16, 64, 32, True, None), (5, 6, 16, 24, False, None),
                                                     (7, 16, 32, 64, True, {"rows": 16, "vector": 16})])
def test_panel_packing_equals_numpy_and_packs_inside_the_parallel_loop(h, w, c, o, parallel, tiles):
    import tvm

    from tvm_ext.compile_steps.llvm_schedule import tensorize_primfunc
    from tvm_ext.target import default_target

    func = _residual_conv(h, w, c, o)
    with default_target():
        sch, emitted, why = tensorize_primfunc(func, pack_at="panel", **({"tiles": tiles} if tiles else {}))
    assert sch is not None, why
    assert any("packs y" in e for e in emitted)
    shipped = sch.mod["main"]
    assert _packed_in_panel(shipped, parallel)  # no pass over the whole input before the loops
    rng = np.random.default_rng(0)
    yv, wv = rng.standard_normal((1, h * w, c), "float32"), rng.standard_normal((o, 1, 1, c), "float32")
    bv, xv = rng.standard_normal((1, 1, 1, o), "float32"), rng.standard_normal((1, o, h, w), "float32")
    conv = (yv[0] @ wv.reshape(o, c).T).T.reshape(1, o, h, w)
    want = np.maximum(conv + bv.reshape(1, o, 1, 1) + xv, 0)
    out = tvm.runtime.empty((1, o, h, w), "float32")
    tvm.compile(sch.mod, target=default_target())["main"](*[tvm.runtime.tensor(a) for a in (yv, wv, bv, xv)], out)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_run_time_params_packing_is_not_split_out_as_a_weights():
    from tvm_ext.compile_steps.candidate_timing import prepacked_compute
    from tvm_ext.compile_steps.llvm_schedule import tensorize_primfunc
    from tvm_ext.compile_steps.weight_prepack import mark_weight_packing
    from tvm_ext.target import default_target

    for run_time in (True, False):
        with default_target():
            sch, _, why = tensorize_primfunc(_residual_conv(4, 16, 64, 32, run_time=run_time))
        assert sch is not None, why
        assert not _packed_in_panel(sch.mod["main"])  # packed whole, before the loops
        _, names = mark_weight_packing(sch.mod["main"])
        timed = prepacked_compute(sch.mod["main"], default_target())
        if run_time:  # timed as it runs: with its copy
            assert names == [] and "y_global" in _names(timed)
        else:
            assert names == ["y"] and "y_global" not in _names(timed)


def test_a_candidate_slowed_in_its_first_round_is_not_dropped():
    from tvm_ext.compile_steps.candidate_timing import alternating_best

    times = {"a": iter([1.0] * 7), "b": iter([3.0] + [0.8] * 6), "far": iter([40.0] * 7)}
    calls = dict.fromkeys(times, 0)

    def run(tag):
        calls[tag] += 1
        return next(times[tag])

    best = alternating_best({t: (lambda t=t: run(t)) for t in times}, rounds=5)
    assert best["b"] == 0.8 and min(best, key=best.get) == "b"
    assert calls == {"a": 5, "b": 5, "far": 1}
