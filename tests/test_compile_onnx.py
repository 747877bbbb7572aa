"""ONNX graphs built with onnx.helper through the Relax ONNX frontend and ``tvm_ext.compile``;
unsupported ops fall back to llvm; malformed files give clear errors; ``tvm-ext compile``."""
from __future__ import annotations

import json

import pytest

onnx = pytest.importorskip("onnx")

import tvm_ext.compile as tc  # noqa: E402
from tvm_ext.cli.main import main as cli_main  # noqa: E402
from tvm_ext.errors import InputError  # noqa: E402
from tvm_ext.models.frontends import from_onnx, load_model, onnx_reference  # noqa: E402
from tvm_ext.models.onnx_models import bottleneck_onnx, gcn_onnx, mlp_onnx, save  # noqa: E402
from tvm_ext.models.zoo import small_graph  # noqa: E402


def _check_against_onnx_runtime(proto, seed=0, **kw):
    model = tc.compile(from_onnx(proto), **kw)
    x = model.random_inputs(seed)
    out = model(*x)
    ref = onnx_reference(proto, x)
    assert tc.max_rel_err(out, ref) < 1e-4
    return model


def test_mlp_and_bottleneck_graphs_match_onnx_reference():
    _check_against_onnx_runtime(mlp_onnx([24, 48, 10], batch=4))
    m = _check_against_onnx_runtime(bottleneck_onnx(16, 8, 6, c_out=24), tensorize="always")
    assert [p.target for p in m.report.ops if p.op == "nn.conv2d"] == ["llvm"] * 4  # incl. the projection


def test_softmax_no_extension_supports_stays_on_llvm_and_says_so():
    m = _check_against_onnx_runtime(mlp_onnx([16, 32, 8], batch=4, softmax=True), accel="default")
    soft = [p for p in m.report.ops if p.op == "nn.softmax"]
    assert len(soft) == 1 and soft[0].target == "llvm" and "no extension" in soft[0].note
    assert {p.target for p in m.report.ops if p.op == "matmul"} == {"accel"}


def test_gcn_partition_report_names_every_target():
    proto = gcn_onnx(small_graph(), 24, 16, 4)
    m = _check_against_onnx_runtime(proto, accel="default", spmm_engine="sextans-p")
    assert m.report.targets() == {"accel": 2, "sextans": 2, "llvm": 3}
    by_target = {}
    for p in m.report.ops:
        by_target.setdefault(p.target, []).append(p.label)
    assert all(lbl.startswith("matmul#") and "(96x96," in lbl for lbl in by_target["sextans"])
    assert all(lbl.startswith("matmul#") and "(96x" in lbl and "(96x96" not in lbl for lbl in by_target["accel"])
    assert sorted(lbl.split("#")[0] for lbl in by_target["llvm"]) == ["add", "add", "nn.relu"]
    assert m.report.spmm_engine == "sextans-p"


def test_malformed_onnx_files_are_clear_input_errors(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a protobuf \xff\xff\xff")
    with pytest.raises(InputError, match="bad.onnx.*not a valid ONNX protobuf"):
        load_model(bad)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        load_model(empty)
    with pytest.raises(InputError, match="no such file"):
        load_model(tmp_path / "missing.onnx")
    with pytest.raises(InputError, match="unknown format"):
        load_model(tmp_path / "model.tflite")


def test_checker_failure_and_frontend_gaps_are_input_errors(tmp_path):
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    dangling = helper.make_model(helper.make_graph([helper.make_node("Relu", ["nope"], ["y"])], "g", [x], [y]),
                                 opset_imports=[helper.make_opsetid("", 17)])
    path = save(dangling, tmp_path / "dangling.onnx")
    with pytest.raises(InputError, match="fails onnx.checker"):
        load_model(path)
    celu = helper.make_model(helper.make_graph([helper.make_node("Celu", ["x"], ["y"])], "g", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InputError, match="cannot import.*Celu"):
        from_onnx(celu)
    sym = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                                              [y]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(InputError, match="'n' is not static"):
        from_onnx(sym)
    assert from_onnx(sym, shapes={"x": [2, 3]})["main"].params[0].ty.shape is not None


def test_cli_compile_check_json_keys(tmp_path, capsys):
    path = save(gcn_onnx(small_graph(), 24, 16, 4), tmp_path / "gcn.onnx")
    assert cli_main(["compile", path, "--spmm-engine", "sextans", "--check", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"offloaded", "max_rel_err", "cycles"} <= set(data)
    assert data["max_rel_err"] < 1e-4 and data["cycles"] > 0
    targets = [e["target"] for e in data["offloaded"]]
    assert targets.count("sextans") == 2 and "llvm" in targets


def test_cli_compile_text_and_one_line_errors(tmp_path, capsys):
    path = save(mlp_onnx([8, 16, 4], batch=2, softmax=True), tmp_path / "mlp.onnx")
    assert cli_main(["compile", path, "--tensorize", "never"]) == 0
    text = capsys.readouterr().out
    assert "nn.softmax" in text and "no extension takes this op" in text and "measured llvm time" in text
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx at all")
    assert cli_main(["compile", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.onnx" in err[0]
    assert cli_main(["compile", path, "--spmm-engine", "nonsense"]) == 2
    assert "spmm_engine" in capsys.readouterr().err
