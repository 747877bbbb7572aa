"""Smoke run of ``bench/models.py --quick``: every runtime at the call, one JSON row per model."""
from __future__ import annotations

import json
import os
import sys

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")


def test_models_bench_quick_writes_rows_with_peers_and_overhead(tmp_path, monkeypatch, capsys):
    from bench import models

    for key in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(key, os.environ.get(key, "2"))  # the bench sets them; restored afterwards
    monkeypatch.setattr(sys, "argv", ["models", "--quick", "--models", "mlp-512", "--no-openvino", "--no-llvm-only",
                                      "--out", str(tmp_path)])
    models.main()
    out = capsys.readouterr().out
    rows = [json.loads(line) for p in tmp_path.glob("models-*.jsonl") for line in p.read_text().splitlines()]
    assert [r["model"] for r in rows] == ["mlp-512"]
    r = rows[0]
    assert r["max_rel_err"] < 1e-4  # checked against ONNX Runtime on the same graph
    assert r["ours_ms"] > 0 and r["ours_vm_ms"] > 0 and r["ours_te_ms"] > 0 and r["ort_ms"] > 0 and r["torch_ms"] > 0
    # model(x) over the VM called on prepared tensors: a few us here; the bound leaves room for a loaded machine
    assert abs(r["overhead_us"]) < 1e3
    assert isinstance(r["dlpack_us"], float) and isinstance(r["overhead_cpu_us"], float)  # the DLPack exchange alone, measured the same way
    assert r["aligned_copies"] == 0 and r["ours_unaligned_ms"] > 0  # aligned inputs: no copy at the call
    assert "ours/ORT" in out and "call overhead" in out and "MetaSchedule baseline: not run" in out
