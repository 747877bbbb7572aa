"""``tvm-ext sextans``: schedule statistics, model and functional check, text and JSON."""
from __future__ import annotations

import json

from tvm_ext.cli.main import main
from tvm_ext.spmm_engine import model, preprocess
from tvm_ext.workloads import load_matrix


def run_json(capsys, *argv):
    code = main(["sextans", *argv, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_json_keys_and_values_agree_with_the_library(capsys):
    code, data = run_json(capsys, "nasa4704", "--n", "16", "--platform", "sextans-p",
                          "--pes", "16", "--raw-distance", "6", "--window", "2048", "--n0", "4")
    assert code == 0
    for key in ("cycles", "seconds", "gflops", "bubbles", "max_rel_err", "stream_length"):
        assert key in data
    assert data["config"]["pes"] == 16 and data["config"]["raw_distance"] == 6
    prog = preprocess(load_matrix("nasa4704"), pes=16, raw_distance=6, window=2048, n0=4)
    perf = model(prog, 16, "sextans-p")
    assert data["stream_length"] == prog.stream_length
    assert data["cycles"] == perf.cycles
    assert data["bubbles"] == 16 * prog.stream_length - prog.nnz
    assert data["max_rel_err"] < 1e-5


def test_text_output_and_errors(capsys):
    assert main(["sextans", "LFAT5", "--n", "8", "--pes", "4", "--window", "8"]) == 0
    text = capsys.readouterr().out
    assert "stream length" in text and "GFLOP/s" in text and "functional check" in text
    assert "host launch 150 us" in text and "fill / drain" in text
    code, data = run_json(capsys, "LFAT5", "--window", "100000")
    assert code == 2 and "column field" in data["error"]
    code, data = run_json(capsys, "LFAT5", "--n", "0")
    assert code == 2 and "positive" in data["error"]


def test_breakdown_prints_table1_for_any_matrix_file(capsys, tmp_path):
    import scipy.io

    from tvm_ext.spmm_engine import speedup_breakdown
    from tvm_ext.workloads import fem_mass_3d

    A = fem_mass_3d(5, 5, 6)
    path = tmp_path / "mass.mtx"
    scipy.io.mmwrite(str(path), A)
    code, data = run_json(capsys, str(path), "--breakdown", "--n", "16")
    assert code == 0 and data["nnz"] == A.nnz
    steps = data["steps"]
    assert [s["paper_incremental"] for s in steps] == [1.0, 9.97, 7.97, 45.3]
    lib = speedup_breakdown(A, 16)
    assert [s["incremental"] for s in steps] == [s.incremental for s in lib]
    assert steps[1]["incremental"] > 2 and steps[3]["incremental"] > 1
    assert main(["sextans", "LFAT5", "--breakdown", "--n", "8"]) == 0
    text = capsys.readouterr().out
    assert "+ 8 PUs" in text and "where each ratio comes from" in text and "Paper 45.3x" in text
    code, data = run_json(capsys, "LFAT5", "--breakdown", "--pes", "4")
    assert code == 2 and "--pes" in data["error"]
