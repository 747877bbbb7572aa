"""tensorize.emit and its rooms (binding, intrin_spec, tensor_intrin, schedule_steps) + tensorize.x86:
TensorIntrin generation from a mapping, schedules, x86 impls."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import s_tir

from tensorize import kernels as K
from tensorize.binding import AxisBinding, as_binding
from tensorize.emit import apply
from tensorize.intrin_spec import derive_spec
from tensorize.tensor_intrin import (
    Implementation,
    desc_source,
    get_implementation,
    implementations,
    register_implementation,
    register_intrin,
)
from tensorize.x86 import count_vector_fma
from tvm_ext.errors import ConfigError, MappingError, ScheduleError
from tvm_ext.target import default_target, gemm_blocking, hardware_facts

MATMUL = AxisBinding("matmul", {"i": "i", "j": "j", "k": "k"})


def _matmul_sch(M=64, N=96, K_=48):
    return s_tir.Schedule(K.matmul(M, N, K_).prim_func())


def _run(mod, kernel, seed=0):
    ins = kernel.random_inputs(seed)
    out = tvm.runtime.empty(tuple(int(s) for s in kernel.output.shape), "float32")
    mod["main"](*[tvm.runtime.tensor(a) for a in ins], out)
    return out.numpy(), kernel.reference(*ins)


def _build(sch):
    return tvm.compile(sch.mod, target=default_target())


# --------------------------------------------------------------------------- spec + intrinsic


def test_spec_of_matmul_keeps_kernel_dims_and_finds_the_vector_axis():
    sch = _matmul_sch()
    spec = derive_spec(sch, sch.get_sblock("C"), MATMUL)
    assert spec.axes == ("i", "j", "k") and spec.kinds == ("S", "S", "R")
    assert spec.output.buffer == "C" and spec.output.scope == "local"
    assert {op.buffer: op.axes for op in spec.inputs} == {"A": ("i", "k"), "B": ("k", "j")}
    assert spec.vector_axis == "j" and spec.row_axis == "i"
    assert spec.expr == "C[v_i, v_j] + A[v_i, v_k] * B[v_k, v_j]"


def test_spec_of_strided_nchw_conv_records_the_stride_and_full_rank():
    k = K.conv2d_nchw(1, 8, 16, 9, 3, stride=2, pad=1)
    sch = s_tir.Schedule(k.prim_func())
    spec = derive_spec(sch, sch.get_sblock("conv"), AxisBinding("matmul", {"i": "co", "j": "w", "k": "rc"}))
    x = next(op for op in spec.inputs if op.buffer == "pad")
    assert x.rank == 4 and x.dims == (1, 3) and x.terms == ((("k", 1),), (("j", 2),))
    assert x.shape({"i": 4, "j": 5, "k": 8}) == (1, 8, 1, 9)  # 2 * (5 - 1) + 1 columns


def test_desc_parses_and_registered_names_are_stable():
    sch = _matmul_sch()
    impl = get_implementation("x86", "micro")
    spec = derive_spec(sch, sch.get_sblock("C"), MATMUL).with_extents({"i": 8, "j": 32, "k": 48})
    assert "T.sblock(\"update\")" in desc_source(spec)
    n1, n2 = register_intrin(spec, impl), register_intrin(spec, impl)
    n3 = register_intrin(spec.with_extents({"i": 4, "j": 32, "k": 48}), impl)
    assert n1 == n2 and n1 != n3
    assert n1.startswith("tvmext.x86.matmul.micro.float32.8x32x48.")
    assert s_tir.TensorIntrin.get(n1) is not None


def test_mapping_errors_name_the_problem():
    sch = _matmul_sch()
    with pytest.raises(MappingError, match="not one of its loops"):
        derive_spec(sch, sch.get_sblock("C"), AxisBinding("matmul", {"i": "i", "j": "nope", "k": "k"}))
    kinds = {"i": "S", "j": "S", "k": "R"}
    with pytest.raises(MappingError, match="instruction axis 'i' is spatial but kernel axis 'k'"):
        derive_spec(sch, sch.get_sblock("C"), AxisBinding("matmul", {"i": "k", "j": "j", "k": "i"}, kinds=kinds))
    with pytest.raises(MappingError, match="same kernel axis"):
        derive_spec(sch, sch.get_sblock("C"), AxisBinding("matmul", {"i": "i", "j": "i"}))


def test_unknown_implementation_and_bad_knobs_are_schedule_errors():
    sch = _matmul_sch()
    with pytest.raises(ScheduleError, match="no implementation 'nope'"):
        apply(sch, sch.get_sblock("C"), MATMUL, "nope")
    with pytest.raises(ScheduleError, match="not understood"):
        apply(sch, sch.get_sblock("C"), MATMUL, pack="sometimes")
    assert {"micro", "blas", "packed"} <= set(implementations("x86"))


# --------------------------------------------------------------------------- micro-kernel


def test_micro_kernel_matmul_is_correct_and_uses_the_targets_vector_fma():
    facts = hardware_facts()
    block = gemm_blocking(facts)
    sch = _matmul_sch(64, 96, 48)
    done = apply(sch, sch.get_sblock("C"), MATMUL, "micro")
    rows = max(d for d in range(1, block.mr + 1) if 64 % d == 0)
    assert done.tiles == {"i": rows, "j": block.nr, "k": 48}
    assert any("cache_write" in s for s in done.steps) and any("tensorize" in s for s in done.steps)
    ex = _build(sch)
    got, ref = _run(ex, K.matmul(64, 96, 48))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    if facts.has_fma:  # rows x NR/lanes accumulators -> that many vfmadd on the target's widest registers
        reg = {512: "zmm", 256: "ymm"}.get(facts.vector_bits, "xmm")
        assert count_vector_fma(ex.mod, reg) >= rows * block.nr_vectors


def test_role_tiles_override_the_register_tile():
    sch = _matmul_sch(64, 64, 32)
    done = apply(sch, sch.get_sblock("C"), MATMUL, tiles={"rows": 4, "vector": 64})
    assert done.tiles["i"] == 4 and done.tiles["j"] == 64
    got, ref = _run(_build(sch), K.matmul(64, 64, 32))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_dense_weights_are_packed_so_the_vector_axis_is_unit_stride():
    k = K.dense_bias(32, 64, 40)
    sch = s_tir.Schedule(k.prim_func())
    done = apply(sch, sch.get_sblock("dense"), MATMUL)
    assert done.packed == ["W"] and any("layout transform (pack) W" in s for s in done.steps)
    got, ref = _run(_build(sch), k)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def _conv_bn_relu(n=1, c_in=16, c_out=32, hw=8):
    """NHWC 3x3 conv, then batch norm ((y - mean) / sd * gamma + beta) and ReLU, as separate blocks."""
    from tvm import te

    conv = K.conv2d_nhwc(n, c_in, c_out, hw, 3, stride=1, pad=1)
    X, W, Y = conv.tensors
    p = [te.placeholder((c_out,), name=f"bn{i}") for i in range(4)]
    bn = te.compute(Y.shape, lambda *i: (Y(*i) - p[0][i[-1]]) / p[1][i[-1]] * p[2][i[-1]] + p[3][i[-1]], name="bn")
    out = te.compute(Y.shape, lambda *i: te.max(bn(*i), tvm.tirx.const(0, "float32")), name="relu")
    return conv, [X, W, *p, out]


def test_conv_batch_norm_relu_run_in_the_register_tiles_write_back():
    from tvm import te

    conv, tensors = _conv_bn_relu()
    sch = s_tir.Schedule(te.create_prim_func(tensors))
    done = apply(sch, sch.get_sblock("conv"), AxisBinding("matmul", {"i": "w", "j": "co", "k": "rc"}))
    assert done.epilogue == ["bn", "relu"] and any("epilogue bn, relu" in s for s in done.steps)
    names = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}
    assert not names & {"bn", "relu"}  # no pass over memory left for them
    rng = np.random.default_rng(3)
    x, w = conv.random_inputs(seed=3)
    bn = [rng.uniform(0.5, 1.5, 32).astype("float32") for _ in range(4)]
    out = tvm.runtime.empty((1, 8, 8, 32), "float32")
    _build(sch)["main"](*[tvm.runtime.tensor(a) for a in (x, w, *bn)], out)
    ref = np.maximum((conv.reference(x, w) - bn[0]) / bn[1] * bn[2] + bn[3], 0)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)


def test_epilogue_off_keeps_the_consumer_blocks():
    from tvm import te

    _, tensors = _conv_bn_relu()
    sch = s_tir.Schedule(te.create_prim_func(tensors))
    done = apply(sch, sch.get_sblock("conv"), AxisBinding("matmul", {"i": "w", "j": "co", "k": "rc"}), epilogue=False)
    names = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}
    assert done.epilogue == [] and {"bn", "relu"} <= names


def test_padded_matmul_with_bias_stays_right_whether_or_not_its_epilogue_fuses():
    from tvm import te

    A = te.placeholder((24, 40), name="A")
    B = te.placeholder((40, 100), name="B")
    bias = te.placeholder((100,), name="bias")
    k = te.reduce_axis((0, 40), name="k")
    C = te.compute((24, 100), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((24, 100), lambda i, j: te.max(C[i, j] + bias[j], tvm.tirx.const(0, "float32")), name="D")
    sch = s_tir.Schedule(te.create_prim_func([A, B, bias, D]))
    done = apply(sch, sch.get_sblock("C"), MATMUL)
    assert done.padded  # 100 columns: padded to the vector tile
    rng = np.random.default_rng(4)
    a, b, c = (rng.standard_normal(s).astype("float32") for s in ((24, 40), (40, 100), (100,)))
    out = tvm.runtime.empty((24, 100), "float32")
    _build(sch)["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), tvm.runtime.tensor(c), out)
    np.testing.assert_allclose(out.numpy(), np.maximum(a @ b + c, 0), rtol=1e-4, atol=1e-4)


@settings(max_examples=6, deadline=None)
@given(M=st.integers(1, 40), N=st.integers(1, 70), K_=st.integers(2, 40))
def test_micro_kernel_pads_sizes_the_tile_does_not_divide(M, N, K_):
    k = K.matmul(M, N, K_)
    sch = s_tir.Schedule(k.prim_func())
    apply(sch, sch.get_sblock("C"), MATMUL, tiles={"rows": 8, "vector": 32})
    got, ref = _run(_build(sch), k, seed=M * 7 + N)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_strided_nchw_conv_maps_with_a_strided_operand():
    k = K.conv2d_nchw(1, 8, 16, 11, 3, stride=2, pad=1)
    sch = s_tir.Schedule(k.prim_func())
    apply(sch, sch.get_sblock("conv"), AxisBinding("matmul", {"i": "co", "j": "w", "k": "rc"}))
    got, ref = _run(_build(sch), k)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_depthwise_vectorises_across_calls_when_no_axis_indexes_the_channels():
    k = K.depthwise_conv2d(1, 32, 10, 3, stride=1, pad=1)
    sch = s_tir.Schedule(k.prim_func())
    done = apply(sch, sch.get_sblock("depthwise"), AxisBinding("conv1d_16xk", {"x": "w", "d": "rw"}))
    assert "lane" in done.spec.axes and done.spec.vector_axis == "lane"
    got, ref = _run(_build(sch), k)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- BLAS-like and packed


def test_blas_pseudo_instruction_through_call_extern():
    k = K.conv2d_nhwc(1, 16, 32, 8, 3, stride=1, pad=1)
    sch = s_tir.Schedule(k.prim_func())
    done = apply(sch, sch.get_sblock("conv"), AxisBinding("matmul", {"i": "w", "j": "co", "k": "rc"}), "blas")
    assert done.intrin.startswith("tvmext.x86.matmul.blas.float32")
    assert "tvmext_sgemm_acc" in get_implementation("x86", "blas").impl_source(done.spec)
    got, ref = _run(_build(sch), k)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_blas_rejects_what_is_not_a_matmul():
    k = K.depthwise_conv2d(1, 16, 8, 3, pad=1)
    sch = s_tir.Schedule(k.prim_func())
    with pytest.raises(ScheduleError, match="blas pseudo-instruction"):
        apply(sch, sch.get_sblock("depthwise"), AxisBinding("conv1d", {"x": "w", "d": "rw"}), "blas")


def test_blas_without_a_compiler_is_a_clear_config_error(monkeypatch, tmp_path):
    import shutil

    import tensorize.x86 as x86

    monkeypatch.setattr(x86, "_LIB", {})
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path))  # nothing built there yet
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match="no C compiler"):
        x86.build_gemm_library()


def test_packed_call_runs_numpy_einsum_per_tile():
    k = K.batch_matmul(2, 16, 24, 8)
    sch = s_tir.Schedule(k.prim_func())
    done = apply(sch, sch.get_sblock("C"), MATMUL, "packed")
    assert "T.call_packed" in get_implementation("x86", "packed").impl_source(done.spec)
    got, ref = _run(_build(sch), k)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- pluggable + mapper


class _ScalarLoops(Implementation):
    """A toy ISA implementation: the instruction as plain serial loops."""

    name = "loops"
    isa = "toy"
    accumulate_local = False

    def impl_source(self, spec):
        from contextlib import ExitStack

        from tensorize.tensor_intrin import intrin_function
        from tvm_ext.tvmscript_text import Code

        code = Code()
        with intrin_function(code, spec, strided=True), ExitStack() as loops:
            for a in spec.axes:
                loops.enter_context(code.block(f"for v_{a} in range({spec.extent[a]}):"))
            code(f"{spec.output.ref()} = {spec.expr}")
        return code.text() + "\n"


def test_implementations_are_pluggable_per_isa():
    register_implementation(_ScalarLoops(), override=True)
    sch = _matmul_sch(16, 16, 8)
    done = apply(sch, sch.get_sblock("C"), AxisBinding("matmul", {"i": "i", "j": "j", "k": "k"}, isa="toy"),
                 "loops", tiles={"i": 4, "j": 8, "k": 8})
    assert done.intrin.startswith("tvmext.toy.matmul.loops.")
    got, ref = _run(_build(sch), K.matmul(16, 16, 8))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


class _Unparsable(_ScalarLoops):
    """An implementation whose text is not TVMScript (a generator bug)."""

    name = "unparsable"

    def impl_source(self, spec):
        return super().impl_source(spec).replace("T.sblock", "T.no_such_block")


def test_generated_text_that_does_not_parse_is_a_codegen_error_with_the_numbered_text():
    from tensorize.tensor_intrin import register_intrin
    from tvm_ext.errors import CodegenError

    sch = _matmul_sch(16, 16, 8)
    spec = derive_spec(sch, sch.get_sblock("C"), MATMUL).with_extents({"i": 4, "j": 8, "k": 8})
    with pytest.raises(CodegenError, match="generated TVMScript does not parse") as err:
        register_intrin(spec, _Unparsable())
    numbered = [line.split(None, 1) for line in str(err.value).splitlines() if "T.no_such_block(" in line]
    assert numbered[-1][0].isdigit() and numbered[-1][1] == 'with T.no_such_block("root"):'


def test_mapper_mapping_converts_to_a_binding_with_origins():
    from tensorize.search import find_mappings

    k = K.gru_cell(8, 8, 32)
    func = k.prim_func()
    ms = find_mappings(func, "x86", block=["gate_h"], instructions=["matmul_8x32xk"])
    plain = next(m for m in ms if not m.transforms)
    b = as_binding(plain)
    assert b.instruction == "matmul_8x32xk" and b.sizes == {"i": 8, "j": 32}
    assert {b.origins[h] for h in b.axis_map.values()} == {("gate_h", "v_b"), ("gate_h", "v_g"),
                                                           ("gate_h", "v_kh")}
    sch = s_tir.Schedule(func)
    spec = derive_spec(sch, sch.get_sblock("gate_h"), b)
    assert spec.output.buffer == "gate_h" and spec.reduction == ("k",)


def _strided_conv_mapping():
    """A stride-2 NHWC conv (16 output columns) and its untransformed w x co x rc matmul mapping."""
    from tensorize.search import find_mappings

    func = K.conv2d_nhwc(1, 8, 32, 31, 3, stride=2, pad=1).prim_func()
    ms = find_mappings(func, "x86", block=["conv"], instructions=["matmul_8x32xk"])
    return func, next(m for m in ms if not m.transforms and m.axis_map == {"i": "w", "j": "co", "k": "rc"})


def test_spec_operands_are_the_mappings_layout():
    func, m = _strided_conv_mapping()
    b = as_binding(m)
    # the mapping's dim and stride maps, in kernel buffer terms: pad[n, 2*w + rw, ..., rc]
    assert m.dim_strides["A"] == (2, 1) and b.layouts["pad"] == {2: (("i", 2),), 3: (("k", 1),)}
    assert b.layouts["W"] == {2: (("k", 1),), 3: (("j", 1),)} and b.layouts["conv"] == {2: (("i", 1),), 3: (("j", 1),)}
    sch = s_tir.Schedule(func)
    spec = derive_spec(sch, sch.get_sblock("conv"), b)
    assert {op.buffer: dict(zip(op.dims, op.terms)) for op in spec.operands} == b.layouts
    assert spec.expr == "C[0, 0, v_i, v_j] + A[0, 0, v_i * 2, v_k] * B[0, 0, v_k, v_j]"


def test_a_mapping_layout_the_block_disagrees_with_raises_schedule_error():
    from dataclasses import replace

    func, m = _strided_conv_mapping()
    b = as_binding(m)
    sch = s_tir.Schedule(func)
    blk = sch.get_sblock("conv")
    unstrided = replace(b, layouts={**b.layouts, "pad": {2: (("i", 1),), 3: (("k", 1),)}})
    with pytest.raises(ScheduleError, match=r"lays out pad as \{dim 2: i, dim 3: k\} but the block indexes it as "
                                            r"\{dim 2: 2\*i, dim 3: k\}"):
        derive_spec(sch, blk, unstrided)
    swapped = replace(b, layouts={**b.layouts, "W": {2: (("j", 1),), 3: (("k", 1),)}})
    with pytest.raises(ScheduleError, match="lays out W"):
        apply(sch, blk, swapped)
    with pytest.raises(ScheduleError, match="lays out buffer.* bias, which the update does not access"):
        derive_spec(sch, blk, replace(b, layouts={**b.layouts, "bias": {0: (("j", 1),)}}))
    # the same binding without layouts reads them from the block
    assert derive_spec(sch, blk, replace(unstrided, layouts={})).inputs[0].terms == ((("i", 2),), (("k", 1),))


def test_a_buffer_two_needle_operands_read_differently_keeps_the_blocks_verdict():
    from tvm import te

    from tensorize.search import find_mappings

    A = te.placeholder((16, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((16, 16), lambda i, j: te.sum(A[i, k] * A[j, k], axis=k), name="C")
    m = find_mappings(C, "x86", instructions=["matmul_16x16x16"])[0]
    b = as_binding(m)
    assert m.buffer_map["A"] == m.buffer_map["B"] == "A" and set(b.layouts) == {"C"}
    sch = s_tir.Schedule(te.create_prim_func([A, C]))
    with pytest.raises(MappingError, match="buffer A is read at two different places"):
        derive_spec(sch, sch.get_sblock("C"), b)


def _planned_binding(kernel, block):
    """The kernel's schedule and the binding of the first mapping the micro-kernel takes for ``block``."""
    from tensorize.search import find_mappings

    func = kernel.prim_func()
    sch = s_tir.Schedule(func)
    cands = K.plan_mappings(func, find_mappings(func, "x86", block=[block])).candidates[block]
    return sch, as_binding(K.first_fitting(sch, block, cands, "micro"))


def test_the_lane_axis_takes_its_coefficients_from_the_mapping():
    from dataclasses import replace

    from tensorize.binding import block_iters
    from tensorize.emit import LANE

    sch, b = _planned_binding(K.depthwise_conv2d(1, 32, 8, 3, pad=1), "depthwise")
    blk = sch.get_sblock("depthwise")
    ch = next(it for it in block_iters(sch, blk) if it.loop_name == "ch")
    assert b.outer_terms["ch"] == {"pad": {3: 1}, "W": {2: 1}, "depthwise": {3: 1}}
    lane = b.with_outer_axis(LANE, ch, "depthwise")
    assert lane.layouts["depthwise"][3] == ((LANE, 1),) and lane.layouts["W"][2] == ((LANE, 1),)
    spec = derive_spec(sch, blk, lane)
    assert {op.buffer: dict(zip(op.dims, op.terms)) for op in spec.operands} == lane.layouts
    # the block is the check: a mapping that says otherwise about the lane axis is refused
    wrong = replace(b, outer_terms={**b.outer_terms, "ch": {**b.outer_terms["ch"], "W": {1: 1}}})
    with pytest.raises(ScheduleError, match="lays out W"):
        derive_spec(sch, blk, wrong.with_outer_axis(LANE, ch, "depthwise"))
    with pytest.raises(ScheduleError, match="does not say how loop ch indexes the operands"):
        replace(b, outer_terms={}).with_outer_axis(LANE, ch, "depthwise")
    # a binding without layouts (written by hand) reads the lane axis from the block: the same operands
    plain = replace(b, layouts={}, outer_terms={}).with_outer_axis(LANE, ch, "depthwise")
    assert derive_spec(sch, blk, plain).operands == spec.operands


def test_the_call_batch_axis_takes_its_coefficients_from_the_mapping():
    from dataclasses import replace

    from tensorize.emit import CALLS

    kernel = K.conv2d_nhwc(1, 16, 32, 8, 3, stride=1, pad=1)
    sch, b = _planned_binding(kernel, "conv")
    assert b.outer_terms["h"] == {"pad": {1: 1}, "conv": {1: 1}}
    done = apply(sch, sch.get_sblock("conv"), b, call_rows=2)
    pad = next(op for op in done.spec.inputs if op.buffer == "pad")
    assert done.spec.axes[0] == CALLS and dict(zip(pad.dims, pad.terms))[1][0] == (CALLS, 1)
    got, ref = _run(_build(sch), kernel)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    sch, b = _planned_binding(kernel, "conv")
    wrong = replace(b, outer_terms={**b.outer_terms, "h": {"pad": {1: 2}, "conv": {1: 1}}})
    with pytest.raises(ScheduleError, match="lays out pad"):
        apply(sch, sch.get_sblock("conv"), wrong, call_rows=2)


@pytest.mark.parametrize("drop", ["i", "j", "k"])
def test_a_spec_restricted_to_fewer_axes_is_the_spec_derived_for_them(drop):
    from tensorize.intrin_spec import last_nonunit, region_buffer

    func, m = _strided_conv_mapping()
    b = as_binding(m)
    sch = s_tir.Schedule(func)
    blk = sch.get_sblock("conv")
    stmt = sch.get(blk)
    last = {x.name: last_nonunit(x) for x in (region_buffer(r) for r in (*stmt.reads, *stmt.writes))}
    assert derive_spec(sch, blk, b).without_axes({drop}, last) == derive_spec(sch, blk, b.without_axes([drop]))


def test_x86_implementations_are_attached_to_the_isa_registry():
    from tensorize.instructions import get_isa

    isa = get_isa("x86")
    backends = isa.backends("matmul_8x32xk")
    assert {"tvm.micro", "tvm.blas", "tvm.packed"} <= set(backends)
    assert "tvm.blas" not in isa.backends("conv1d_16xk")
    assert get_implementation("x86", "micro", "matmul_8x32xk") is isa.implementation("matmul_8x32xk", "tvm.micro")


def test_call_rows_batches_calls_along_the_next_outer_axis():
    k = K.conv2d_nhwc(1, 16, 32, 8, 3, stride=1, pad=1)
    sch = s_tir.Schedule(k.prim_func())
    done = apply(sch, sch.get_sblock("conv"), AxisBinding("matmul", {"i": "w", "j": "co", "k": "rc"}),
                 tiles={"rows": 4, "vector": 32}, call_rows=2)
    assert done.tiles["calls"] == 2 and done.tiles["i"] == 4
    assert any("batch 2 instruction calls along h" in s for s in done.steps)
    got, ref = _run(_build(sch), k)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("K_,unrolled", [(48, True), (37, False)])
def test_micro_kernel_unrolls_the_reduction_by_the_targets_k_unroll(K_, unrolled):
    from tensorize.x86 import MICRO

    ku = gemm_blocking(hardware_facts()).k_unroll
    sch = _matmul_sch(16, 32, K_)
    spec = derive_spec(sch, sch.get_sblock("C"), MATMUL).with_extents({"i": 8, "j": 32, "k": K_})
    src = MICRO.impl_source(spec)
    assert (f"v_k_u in T.unroll({ku})" in src and f"range({K_ // ku})" in src) == unrolled
    done = apply(sch, sch.get_sblock("C"), MATMUL)
    got, ref = _run(_build(sch), K.matmul(16, 32, K_))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    assert done.tiles["k"] == K_


@pytest.mark.parametrize("module", ["tensorize.binding", "tensorize.intrin_spec", "tensorize.tensor_intrin",
                                    "tensorize.schedule_steps", "tensorize.emit", "tensorize.exporters",
                                    "tvm_ext.tvmscript_text"])
def test_the_emission_modules_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0
