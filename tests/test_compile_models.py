"""The five model definitions through torch.export + the Relax frontend + ``tvm_ext.compile``
equal PyTorch's own outputs, on llvm and with the accelerator / Sextans offloads."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tvm_ext.compile as tc  # noqa: E402
from tvm_ext.models import MODEL_NAMES, get_model  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module")
def imported():
    """Each tiny model imported once: (case, relax module, torch reference)."""
    cache = {}

    def get(name):
        if name not in cache:
            case = get_model(name, "tiny")
            cache[name] = (case, case.relax_module(), case.reference())
        return cache[name]

    return get


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_model_matches_pytorch(imported, name):
    case, mod, ref = imported(name)
    model = tc.compile(mod, tensorize="always" if name in ("mobilenet", "bottleneck") else "measure")
    out = model(*case.inputs)
    assert [o.shape for o in out] == [r.shape for r in ref]
    assert tc.max_rel_err(out, ref) < TOL
    assert all(k.schedule in ("tuned", "tensorized", "depthwise", "depthwise-pointwise", "gemv", "default")
               for k in model.report.kernels if k.target == "llvm")
    if name in ("mlp", "bottleneck"):  # matmul/conv kernels are mapped onto x86 instructions (or the GEMV rule)
        assert any(k.schedule in ("tensorized", "gemv") or "tensorized was slower" in k.detail
                   for k in model.report.kernels)


def test_gcn_adjacency_products_leave_dense_llvm(imported):
    case, mod, ref = imported("gcn")
    fused = tc.compile(mod)
    assert fused.report.targets() == {"llvm/gcn-fused": 4, "llvm": 3}
    plain = tc.compile(mod, fuse_gcn=False)
    assert plain.report.targets() == {"llvm/sparse-executor": 2, "llvm": 5}
    for m in (fused, plain):
        assert tc.max_rel_err(m(*case.inputs), ref) < TOL
    dense = tc.compile(mod, sparse_threshold=0.0)  # nothing is sparse enough: all on llvm
    assert dense.report.targets() == {"llvm": 7}
    assert tc.max_rel_err(dense(*case.inputs), ref) < TOL


def test_gcn_on_sextans_reports_cycles_and_traffic(imported):
    case, mod, ref = imported("gcn")
    model = tc.compile(mod, spmm_engine="sextans")
    sextans = [p for p in model.report.ops if p.target == "sextans"]
    assert len(sextans) == 2 and all(p.op == "matmul" and p.shapes.startswith("(96x96") for p in sextans)
    report = model.profile(*case.inputs)
    assert tc.max_rel_err(model.last_outputs, ref) < TOL
    engine = [k for k in report.kernels if k.target == "sextans"]
    assert len(engine) == 2 and all(k.cycles > 0 and k.traffic and k.calls == 1 for k in engine)
    assert report.cycles == sum(k.cycles for k in engine) and report.cycles_by_target() == {"sextans": report.cycles}
    assert report.llvm_seconds > 0 and report.total_seconds > report.llvm_seconds


def test_mlp_runs_on_the_accelerator(imported):
    case, mod, ref = imported("mlp")
    model = tc.compile(mod, accel="default")
    assert model.report.targets() == {"accel": 5}
    report = model.profile(*case.inputs)
    assert tc.max_rel_err(model.last_outputs, ref) < TOL
    assert report.cycles > 0 and set(report.cycles_by_target()) == {"accel"}
    assert report.simulated_seconds > 0


@pytest.mark.slow  # ~10 s: the accelerator's dry-run scheduler places every conv tile
def test_bottleneck_convolutions_offload_and_the_rest_stays_on_llvm():
    from tvm_ext.models.frontends import from_torch, torch_reference
    from tvm_ext.models.torch_models import Bottleneck

    net = Bottleneck(16, 4)  # smaller than "tiny": the accelerator schedules every conv tile
    x = np.random.default_rng(0).standard_normal((1, 16, 6, 6)).astype("float32")
    model = tc.compile(from_torch(net, [x]), accel="default", tensorize="never")
    convs = [p for p in model.report.ops if p.op == "nn.conv2d"]
    assert len(convs) == 3 and all(p.target == "accel" for p in convs)
    assert any(p.target == "llvm" for p in model.report.ops)  # BN arithmetic, residual add, relu
    assert tc.max_rel_err(model(x), torch_reference(net, [x])) < TOL


def test_compiled_model_unpacks_to_module_and_report(imported):
    case, mod, ref = imported("mlp")
    module, report = tc.compile(mod, tensorize="never", measure=True)
    assert report is module.report and report.measured
    assert report.llvm_seconds > 0 and report.total_seconds == pytest.approx(report.llvm_seconds)
    assert tc.max_rel_err(module(*case.inputs), ref) < TOL
