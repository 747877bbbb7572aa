"""The benchmark harness: timings, machine record, JSON lines and ratios."""
from __future__ import annotations

import json

import numpy as np
import tvm
from tvm import te

from bench.harness import BenchRun, geomean, time_python, time_tvm
from tvm_ext.kernel_cache import get_or_build


def test_time_python_reports_min_and_median():
    t = time_python(lambda: sum(range(100)), repeat=4, min_repeat_s=0.001)
    assert len(t.results) == 4 and 0 < t.min <= t.median


def test_time_tvm_uses_time_evaluator():
    def make():
        A = te.placeholder((64,), name="A")
        return te.create_prim_func([A, te.compute((64,), lambda i: A[i] + 1, name="B")])

    mod = get_or_build(("bench-harness-add1",), make)
    a = tvm.runtime.tensor(np.zeros(64, "float32"))
    b = tvm.runtime.empty((64,), "float32")
    t = time_tvm(mod, "main", a, b, repeat=3, min_repeat_ms=1)
    assert len(t.results) == 3 and t.min > 0
    np.testing.assert_array_equal(b.numpy(), 1.0)


def test_bench_run_writes_jsonl_with_machine_and_ratios(tmp_path):
    run = BenchRun("unit", out_dir=tmp_path)
    run.add({"case": "a", "ours": 1.0, "peer": 3.0})
    run.add({"case": "b", "ours": 2.0, "peer": 2.0})
    lines = run.out_path.read_text().splitlines()
    rec = json.loads(lines[0])
    assert len(lines) == 2 and rec["bench"] == "unit"
    assert "TVM_NUM_THREADS" in rec["machine"]["thread_env"]
    md = run.markdown(["case", "ours", "peer"], ratios={"speedup": ("peer", "ours")})
    assert "| a | 1 | 3 | 3 |" in md and "| b | 2 | 2 | 1 |" in md


def test_geomean():
    assert geomean([2.0, 8.0]) == 4.0
    assert np.isnan(geomean([]))
