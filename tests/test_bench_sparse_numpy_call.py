"""Smoke run of ``bench/sparse_numpy_call.py --quick`` on one tiny matrix: every peer checked and timed."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_sparse_numpy_call_bench_quick_writes_rows_and_overhead(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench.sparse_numpy_call", "--quick", "--matrices", "LFAT5",
                           "--n", "1,8", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for p in tmp_path.glob("sparse_numpy_call-*.jsonl")
            for line in p.read_text().splitlines()]
    cases = [r for r in rows if "N" in r]
    assert [(r["matrix"], r["N"]) for r in cases] == [("LFAT5", 1), ("LFAT5", 8)]
    for r in cases:
        assert r["ours_ms"] > 0 and r["kernel_ms"] > 0 and r["scipy_ms"] > 0 and r["gbs"] > 0
        if "mkl_ie_ms" in r:  # MKL's result agreed with scipy, so it was timed
            assert r["x_mkl_ie"] == r["mkl_ie_ms"] / r["ours_ms"]
            assert r["x_mkl_ie_med"] > 0  # timed in the same rounds as ours
    overhead = [r for r in rows if r["matrix"] == "call-overhead"]
    assert len(overhead) == 1 and overhead[0]["N8_out_us"] > overhead[0]["N8_raw_us"] > 0
    assert "call overhead N=8" in proc.stdout and "vs MKL I/E" in proc.stdout


def test_paired_rounds_time_ours_and_each_peer_in_every_round():
    from bench.sparse_numpy_call import paired_rounds

    calls: list[str] = []
    rounds = paired_rounds(lambda: calls.append("ours"), {"a": lambda: calls.append("a"),
                                                          "b": lambda: calls.append("b")},
                           rounds=3, min_repeat_s=0.0)
    assert {k: len(v) for k, v in rounds.items()} == {"ours": 3, "a": 3, "b": 3}
    assert all(t > 0 for v in rounds.values() for t in v)
    # taking turns: every round runs ours, then a, then b (warm-up, sizing and timed calls)
    firsts = [c for i, c in enumerate(calls) if i == 0 or calls[i - 1] != c]
    assert firsts == ["ours", "a", "b"] * 3
