"""tvm_ext as a TVM pipeline: ``tvm.compile(..., relax_pipeline="tvm_ext")``, the passes on their own,
the pattern registry, placement of same-shape ops, and the report past 10,000 offloaded calls."""
from __future__ import annotations

import numpy as np
import pytest

import tvm_ext  # noqa: F401 - registers the pipeline, the patterns and the runtime functions
import tvm_ext.compile as tc

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")


def _run(ex, inputs):
    import tvm
    from tvm import relax

    from tvm_ext.compile_steps.profiling import flatten_outputs

    vm = relax.VirtualMachine(ex, tvm.cpu())
    return flatten_outputs(vm["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in inputs]))


def _rng_inputs(mod, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, shape).astype(dtype) for _, shape, dtype in tc.input_specs(mod)]


@pytest.mark.parametrize("graph", ["mlp", "bottleneck", "gcn"])
def test_onnx_graphs_through_tvm_compile_equal_onnx_runtime(graph):
    import tvm

    from tvm_ext.models.frontends import from_onnx, onnx_reference
    from tvm_ext.models.onnx_models import bottleneck_onnx, gcn_onnx, mlp_onnx
    from tvm_ext.workloads import load_matrix

    proto = {"mlp": lambda: mlp_onnx([24, 48, 10], batch=4),
             "bottleneck": lambda: bottleneck_onnx(16, 8, 6, c_out=24),
             "gcn": lambda: gcn_onnx(load_matrix("LFAT5"), 8, 6, 3)}[graph]()
    mod = from_onnx(proto)
    # the registered name (defaults: tensorize measured per kernel); the larger graphs skip the measuring
    pipeline = "tvm_ext" if graph == "mlp" else tvm_ext.pipeline(tensorize="never")
    ex = tvm.compile(mod, tvm_ext.default_target(), relax_pipeline=pipeline)
    x = _rng_inputs(mod)
    assert tc.max_rel_err(_run(ex, x), onnx_reference(proto, x)) < 1e-4
    from tvm import relax

    report = tc.report_of(relax.VirtualMachine(ex, tvm.cpu()))  # carried by the built module
    assert [p.index for p in report.ops] == list(range(len(report.ops))) and report.kernels
    assert {p.target for p in report.ops} == {"llvm"}  # defaults; these graphs hold nothing sparse enough


@pytest.mark.parametrize("name", ["mlp", "gru"])
def test_torch_models_through_tvm_compile_equal_pytorch(name):
    import tvm

    from tvm_ext.models import get_model

    case = get_model(name, "tiny")
    ex = tvm.compile(case.relax_module(), tvm_ext.default_target(),
                     relax_pipeline=tvm_ext.pipeline(tensorize="never"))
    assert tc.max_rel_err(_run(ex, case.inputs), case.reference()) < 1e-4


def _two_same_shape_matmuls():
    """x @ W_dense -> relu -> @ W_sparse (5% dense): two matmuls of one shape, (64x64, 64x64) -> 64x64."""
    from tvm import relax

    rng = np.random.default_rng(0)
    w_dense = rng.uniform(-1, 1, (64, 64)).astype("float32")
    w_sparse = np.where(rng.uniform(size=(64, 64)) < 0.05, rng.uniform(-1, 1, (64, 64)), 0).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((64, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.relu(relax.op.matmul(x, relax.const(w_dense))))
            y = bb.emit_output(relax.op.matmul(h, relax.const(w_sparse)))
        bb.emit_func_output(y)
    return bb.get(), lambda a: np.maximum(a @ w_dense, 0) @ w_sparse


def test_two_same_shape_matmuls_on_different_targets_are_reported_apart():
    mod, ref = _two_same_shape_matmuls()
    model = tc.compile(mod, accel="default", tensorize="never")
    matmuls = [p for p in model.report.ops if p.op == "matmul"]
    assert [p.shapes for p in matmuls] == ["(64x64, 64x64) -> 64x64"] * 2
    # the first (dense) went to the accelerator, the second (sparse constant) to the sparse executor
    assert [p.target for p in matmuls] == ["accel", "llvm/sparse-executor"]
    assert [p.index for p in matmuls] == [0, 2]
    x = model.random_inputs(1)[0]
    assert tc.max_rel_err(model(x), [ref(x.astype(np.float64))]) < 1e-4


def test_each_pass_runs_in_a_users_own_sequential():
    import tvm
    from tvm import relax

    from tvm_ext.compile_steps import passes as P
    from tvm_ext.compile_steps.placement import ATTR_SCHEDULE, placement
    from tvm_ext.compile_steps.sparse_offload import OPERAND_ATTR

    mod, ref = _two_same_shape_matmuls()
    seq = tvm.transform.Sequential([
        P.PrepareForInference(), P.AnnotateOpIds(), relax.transform.FoldConstant(),  # one of the user's own
        P.OffloadSparseMatmuls(), P.PartitionForAccel(), P.ConvertConvLayout(),
        P.LegalizeAndFuse(), P.ApplyTuningRecords(), P.TensorizeOrDefault("never"), P.PrepackWeights()])
    with tvm_ext.default_target():
        out = seq(mod)
    assert sorted(t for t, _ in placement(out).values()) == ["accel", "llvm/sparse-executor"]
    funcs = [f for _, f in out.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
    sparse = [f for f in funcs if OPERAND_ATTR in f.attrs]  # the executor, embedded as generated
    kernels = [f for f in funcs if OPERAND_ATTR not in f.attrs]
    assert len(sparse) == 1 and bool(sparse[0].attrs["tirx.is_scheduled"]) and ATTR_SCHEDULE not in sparse[0].attrs
    assert kernels and all(str(f.attrs[ATTR_SCHEDULE][0]) == "default" for f in kernels)
    x = _rng_inputs(mod)
    got = _run(tvm.compile(out, tvm_ext.default_target()), x)
    assert tc.max_rel_err(got, [ref(x[0].astype(np.float64))]) < 1e-4


def test_patterns_are_in_tvms_registry():
    from tvm.relax.backend.pattern_registry import get_patterns_with_prefix

    from tvm_ext.accel.patterns import pattern_table
    from tvm_ext.spmm_engine.relax_op import sextans_patterns

    assert [p.name for p in get_patterns_with_prefix("accel")] == [p[0] for p in pattern_table()]
    assert [p.name for p in get_patterns_with_prefix("sextans")] == [p[0] for p in sextans_patterns()]


def test_report_stays_right_after_more_than_10000_offloaded_calls():
    from tvm import relax

    w = np.arange(64, dtype="float32").reshape(8, 8) / 64
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.matmul(x, relax.const(w)))
        bb.emit_func_output(y)
    model = tc.compile(bb.get(), accel="default", tensorize="never")
    (kernel,) = [k for k in model.report.kernels if k.target == "accel"]
    xs = model.random_inputs(0)[0]
    for _ in range(10_001):
        out = model(xs)
    np.testing.assert_allclose(out[0], xs @ w, rtol=1e-5, atol=1e-6)
    report = model.profile(xs)
    per_call = kernel.cycles
    assert kernel.calls == 1 and per_call > 0  # this run's call, still seen
    assert report.cycles_by_target() == {"accel": per_call}
    counters = model.offload_counters()[kernel.name]
    assert counters.calls >= 10_002 and counters.cycles == counters.calls * per_call


def test_an_error_inside_a_pass_reaches_the_caller_as_itself():
    import tvm
    from tvm import relax

    from tvm_ext.errors import InputError

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4, 8), "float32"))
    with bb.function("not_main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.relu(x))
        bb.emit_func_output(y)
    with pytest.raises(InputError, match="no Relax function 'main'"):
        tvm.compile(bb.get(), tvm_ext.default_target(), relax_pipeline=tvm_ext.pipeline(accel="default"))


def test_the_llvm_schedule_is_a_rule_chain_that_takes_a_users_rule():
    import tvm

    from tvm_ext.compile_steps import passes as P
    from tvm_ext.compile_steps.llvm_schedule import KernelSchedule
    from tvm_ext.compile_steps.placement import ATTR_SCHEDULE

    class Decline(P.ScheduleRule):
        seen: list[str] = []

        def apply(self, func, name, target, declined=None):
            self.seen.append(name)
            return None, KernelSchedule(name, "default", reason="declined by the user's rule")

    mod, ref = _two_same_shape_matmuls()
    seq = tvm.transform.Sequential([P.PrepareForInference(), P.LegalizeAndFuse(),
                                    P.ApplyScheduleRules(Decline(), P.DefaultSchedule())])
    with tvm_ext.default_target():
        out = seq(mod)
    kernels = {gv.name_hint: f for gv, f in out.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert sorted(Decline.seen) == sorted(kernels)
    assert all([str(x) for x in f.attrs[ATTR_SCHEDULE]] == ["default", "", "declined by the user's rule"]
               for f in kernels.values())
    x = _rng_inputs(mod)
    got = _run(tvm.compile(out, tvm_ext.default_target()), x)
    assert tc.max_rel_err(got, [ref(x[0].astype(np.float64))]) < 1e-4
