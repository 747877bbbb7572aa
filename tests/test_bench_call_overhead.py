"""Smoke run of ``bench/call_overhead.py --quick``: every step of ``model(x)``'s layer, warm and cold."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("onnx")


def test_call_overhead_bench_quick_writes_a_row_per_step(tmp_path, capsys):
    from bench import call_overhead

    call_overhead.main(["--quick", "--threads", "1", "--calls", "200", "--pairs", "6", "--out", str(tmp_path)])
    rows = [json.loads(line) for p in tmp_path.glob("call_overhead-*.jsonl") for line in p.read_text().splitlines()]
    warm = {r["step"]: r for r in rows if r["table"] == "warm"}
    cold = {r["step"]: r for r in rows if r["table"] == "cold"}
    from tvm_ext.native_call import native_module

    c_path = native_module() is not None  # the C path's rows are there when it can be built
    assert set(warm) == {"checks", "ffi_input", "ffi_from_dlpack", "runtime_from_dlpack", "output",
                         "layer", "tuple_layer"} | ({"native_layer", "native_tuple_layer"} if c_path else set())
    assert set(cold) == {"vm", "ffi_input", "output", "exchange", "hot_path", "model", "tuple_path"} \
        | ({"native", "native_tuple"} if c_path else set())
    assert ("native path" if c_path else "python path") in cold["model"]["what"]
    assert cold["vm"]["us"] > 0 and cold["vm"]["cpu_us"] > 0  # the VM alone is a time, not a difference
    assert all(isinstance(r["us"], float) for r in rows)
    assert "warm" in capsys.readouterr().out
