"""Compiled models export as shared libraries and load in a fresh process with equal outputs
(llvm only, the accelerator, the Sextans engine, the llvm sparse executor, the fused GCN layer),
through ``tvm_ext.load`` and TVM's own loader."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tvm_ext.compile as tc
from tvm_ext.errors import InputError

torch = pytest.importorskip("torch")

#: configuration -> (model, compile options, the target its offloaded ops get)
CONFIGS = {"llvm": ("mlp", {}, "llvm"), "accel": ("mlp", {"accel": "default"}, "accel"),
           "sextans": ("gcn", {"spmm_engine": "sextans"}, "sextans"),
           "sparse": ("gcn", {"fuse_gcn": False}, "llvm/sparse-executor"),
           "gcn-fused": ("gcn_onnx", {}, "llvm/gcn-fused")}


def _case(model_name: str):
    """(Relax module, inputs, reference outputs): PyTorch models from the zoo, the ONNX GCN
    against ONNX Runtime."""
    if model_name == "gcn_onnx":
        pytest.importorskip("onnxruntime")
        from tvm_ext.models.frontends import from_onnx, onnx_reference
        from tvm_ext.models.onnx_models import gcn_onnx
        from tvm_ext.models.zoo import small_graph

        proto = gcn_onnx(small_graph(), 24, 16, 4)
        x = [(np.random.default_rng(3).random((96, 24)) < 0.2).astype(np.float32)]
        return from_onnx(proto), x, onnx_reference(proto, x)
    from tvm_ext.models import get_model

    case = get_model(model_name, "tiny")
    return case.relax_module(), [np.ascontiguousarray(a) for a in case.inputs], case.reference()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each configuration compiled, exported, with its inputs and outputs saved."""
    d = tmp_path_factory.mktemp("export")
    out = {}
    for name, (model_name, options, _) in CONFIGS.items():
        mod, inputs, ref = _case(model_name)
        model = tc.compile(mod, tensorize="never", **options)
        model.export_library(d / f"{name}.so")
        np.savez(d / f"{name}_in.npz", *inputs)
        out[name] = (model, [np.array(o) for o in model(*inputs)], ref)
    return d, out


def _in_fresh_process(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_exported_models_give_equal_outputs_in_a_fresh_process(exported):
    """``tvm_ext.load`` for every configuration, and TVM's own loader for the offloaded one."""
    d, models = exported
    stdout = _in_fresh_process(f"""
        import json, numpy as np, tvm_ext, tvm
        from tvm import relax
        d = {str(d)!r}
        vm = relax.VirtualMachine(tvm.runtime.load_module(f"{{d}}/accel.so"), tvm.cpu())
        z = np.load(f"{{d}}/accel_in.npz")
        out = vm["main"](*[tvm.runtime.tensor(z[f"arr_{{i}}"]) for i in range(len(z.files))])
        np.save(f"{{d}}/accel_tvm.npy", (out if hasattr(out, "numpy") else out[0]).numpy())
        targets = {{}}
        for name in {list(CONFIGS)!r}:
            m = tvm_ext.load(f"{{d}}/{{name}}.so")
            z = np.load(f"{{d}}/{{name}}_in.npz")
            ins = [z[f"arr_{{i}}"] for i in range(len(z.files))]
            np.savez(f"{{d}}/{{name}}_out.npz", *[np.array(o) for o in m(*ins)])
            targets[name] = sorted({{p.target for p in m.report.ops}})
        print(json.dumps(targets))
    """)
    targets = json.loads(stdout.strip().splitlines()[-1])
    assert targets["llvm"] == ["llvm"]
    assert all(CONFIGS[name][2] in targets[name] for name in CONFIGS), targets
    for name, (model, want, ref) in models.items():
        z = np.load(d / f"{name}_out.npz")
        got = [z[f"arr_{i}"] for i in range(len(z.files))]
        assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want)), name
        assert tc.max_rel_err(got, ref) < 1e-4, name  # and equal to PyTorch / ONNX Runtime
        assert sorted({p.target for p in model.report.ops}) == targets[name]
    np.testing.assert_array_equal(np.load(d / "accel_tvm.npy"), models["accel"][1][0])


def test_loaded_model_profiles_its_offloaded_kernels(exported):
    d, models = exported
    m = tc.load(d / "sextans.so")
    z = np.load(d / "sextans_in.npz")
    m.profile(*[z[f"arr_{i}"] for i in range(len(z.files))])
    sextans = [k for k in m.report.kernels if k.target == "sextans"]
    assert len(sextans) == 2 and all(k.calls == 1 and k.cycles > 0 and k.traffic for k in sextans)


def test_sparse_kernels_are_tir_functions_of_the_exported_module(exported):
    """The sparse executor and the fused GCN layer are TIR functions of the module: the loaded model
    reports them by name on their llvm placement and times them like any other kernel."""
    d, models = exported
    for name in ("sparse", "gcn-fused"):
        model = models[name][0]
        want = {k.name for k in model.report.kernels if k.target == CONFIGS[name][2]}
        assert len(want) == 2, (name, [(k.name, k.target) for k in model.report.kernels])
        m = tc.load(d / f"{name}.so")
        z = np.load(d / f"{name}_in.npz")
        m.profile(*[z[f"arr_{i}"] for i in range(len(z.files))])
        got = {k.name: k for k in m.report.kernels if k.target == CONFIGS[name][2]}
        assert set(got) == want and all(k.calls == 1 and k.seconds > 0 for k in got.values())
        ops = [o for o in m.report.ops if o.target == CONFIGS[name][2]]
        assert len(ops) == (2 if name == "sparse" else 4) and {o.op for o in ops} == {"matmul"}


def test_what_cannot_be_loaded_is_a_clear_error(tmp_path):
    (tmp_path / "junk.so").write_bytes(b"not a library")
    with pytest.raises(InputError, match="not a model exported by tvm_ext"):
        tc.load(tmp_path / "junk.so")
    with pytest.raises(InputError, match="no such file"):
        tc.load(tmp_path / "missing.so")
