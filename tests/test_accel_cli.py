"""``tvm-ext accel gemm|gru|systems``: cycles ours vs the kernel library, utilisation, functional check."""
from __future__ import annotations

import json

from tvm_ext.accel import gemm_workload, schedule, schedule_kl, time_stream
from tvm_ext.cli.main import main


def run_json(capsys, *argv):
    code = main(["accel", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_gemm_json_agrees_with_the_library(capsys):
    code, data = run_json(capsys, "gemm", "70", "40", "96")
    assert code == 0
    for key in ("cycles", "cycles_kl", "max_rel_err", "utilisation", "utilisation_kl", "bytes_by_level"):
        assert key in data
    wl = gemm_workload(70, 40, 96)
    assert data["cycles"] == time_stream(schedule(wl).stream, "default").cycles
    assert data["cycles_kl"] == time_stream(schedule_kl(wl).stream, "default").cycles
    assert data["max_rel_err"] < 1e-5 and data["max_rel_err_kl"] < 1e-5
    assert 0 < data["utilisation"]["matrix"] <= 1


def test_gru_text_and_json(capsys):
    assert main(["accel", "gru", "--steps", "4", "--hidden", "40", "--batch", "3"]) == 0
    text = capsys.readouterr().out
    assert "kernel library" in text and "functional check" in text and "priming/recursive/finish" in text
    code, data = run_json(capsys, "gru", "--steps", "3", "--hidden", "32", "--batch", "2", "--config", "mini",
                          "--no-check")
    assert code == 0 and data["system"] == "isam-mini" and data["max_rel_err"] is None
    assert data["cycles"] > 0 and data["cycles_kl"] > 0 and data["steps"] == 3


def test_systems_and_errors(capsys):
    assert main(["accel", "systems"]) == 0
    assert "isam-mini" in capsys.readouterr().out
    code, data = run_json(capsys, "gemm", "0", "4", "4")
    assert code == 2 and "positive" in data["error"]
    code, data = run_json(capsys, "gemm", "8", "8", "8", "--config", "no-such")
    assert code == 2 and "bundled" in data["error"]
    code, data = run_json(capsys, "gru", "--steps", "0", "--hidden", "8", "--batch", "1")
    assert code == 2 and "steps" in data["error"]
