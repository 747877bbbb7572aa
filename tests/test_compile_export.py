"""Compiled models export as shared libraries and load in a fresh process with equal outputs
(llvm only, the accelerator, the Sextans engine), through ``tvm_ext.load`` and TVM's own loader."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tvm_ext.compile as tc
from tvm_ext.errors import ConfigError, InputError

torch = pytest.importorskip("torch")

CONFIGS = {"llvm": ("mlp", {}), "accel": ("mlp", {"accel": "default"}),
           "sextans": ("gcn", {"spmm_engine": "sextans"})}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each configuration compiled, exported, with its inputs and outputs saved."""
    from tvm_ext.models import get_model

    d = tmp_path_factory.mktemp("export")
    out = {}
    for name, (model_name, options) in CONFIGS.items():
        case = get_model(model_name, "tiny")
        model = tc.compile(case.relax_module(), tensorize="never", **options)
        model.export_library(d / f"{name}.so")
        inputs = [np.ascontiguousarray(a) for a in case.inputs]
        np.savez(d / f"{name}_in.npz", *inputs)
        out[name] = (model, [np.array(o) for o in model(*inputs)], case.reference())
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
    assert "accel" in targets["accel"] and "sextans" in targets["sextans"] and targets["llvm"] == ["llvm"]
    for name, (model, want, ref) in models.items():
        z = np.load(d / f"{name}_out.npz")
        got = [z[f"arr_{i}"] for i in range(len(z.files))]
        assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want)), name
        assert tc.max_rel_err(got, ref) < 1e-4  # and equal to PyTorch
        assert sorted({p.target for p in model.report.ops}) == targets[name]
    np.testing.assert_array_equal(np.load(d / "accel_tvm.npy"), models["accel"][1][0])


def test_loaded_model_profiles_its_offloaded_kernels(exported):
    d, models = exported
    m = tc.load(d / "sextans.so")
    z = np.load(d / "sextans_in.npz")
    m.profile(*[z[f"arr_{i}"] for i in range(len(z.files))])
    sextans = [k for k in m.report.kernels if k.target == "sextans"]
    assert len(sextans) == 2 and all(k.calls == 1 and k.cycles > 0 and k.traffic for k in sextans)


def test_what_cannot_be_exported_or_loaded_is_a_clear_error(tmp_path):
    from tvm import relax

    rng = np.random.default_rng(0)
    w = np.where(rng.uniform(size=(64, 64)) < 0.05, 1.0, 0.0).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((64, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.matmul(relax.const(w), x))
        bb.emit_func_output(y)
    model = tc.compile(bb.get(), tensorize="never")  # the llvm sparse executor: registered in this process
    with pytest.raises(ConfigError, match="this process only"):
        model.export_library(tmp_path / "sparse.so")
    (tmp_path / "junk.so").write_bytes(b"not a library")
    with pytest.raises(InputError, match="not a model exported by tvm_ext"):
        tc.load(tmp_path / "junk.so")
    with pytest.raises(InputError, match="no such file"):
        tc.load(tmp_path / "missing.so")
