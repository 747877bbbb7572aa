"""bench.sextans_sweep: GFLOP/s against problem size has Fig. 7/8's rise and saturation."""
from __future__ import annotations

import pytest

from bench.sextans_sweep import model_rows, saturation_flops, size_curve
from tvm_ext.workloads import lap2d, lap3d


@pytest.fixture(scope="module")
def rows():
    out = []
    for name, A in (("lap2d(6)", lap2d(6)), ("lap2d(40)", lap2d(40)), ("lap3d(30)", lap3d(30))):
        out += model_rows(name, A, ns=(8, 32, 128, 512, 2048, 8192))
    return out


def test_rows_carry_flops_and_gflops(rows):
    r = rows[0]
    assert r["flops"] == 2 * (r["nnz"] + r["rows"]) * r["n"]
    assert r["sextans_gflops"] == pytest.approx(r["flops"] / r["sextans_s"] / 1e9)
    assert r["sextans_gflops"] < r["sextans_kernel_gflops"] < r["sextans_steady_gflops"]


def test_gflops_rises_at_small_sizes_and_saturates_at_large_ones(rows):
    curve = size_curve(rows, "sextans", per_decade=1)
    g = [b["geomean_gflops"] for b in curve]
    small = [b["geomean_gflops"] for b in curve if b["flop_hi"] <= 1e7]
    assert len(small) >= 3 and all(a < b for a, b in zip(small, small[1:]))
    assert small[-1] > 10 * small[0]
    # saturation: the Fig. 8(a) peak gains little from the last decade of size, and the
    # largest matrix gains little from 4x more columns
    assert sum(b["spmms"] for b in curve) == len(rows)
    peaks = [b["peak_below"] for b in curve]
    assert peaks == sorted(peaks) and curve[-1]["flop_lo"] >= 1e9
    assert peaks[-1] / peaks[-2] < 1.3 and g[-1] > 5 * small[1]
    big = {r["n"]: r["sextans_gflops"] for r in rows if r["matrix"] == "lap3d(30)"}
    assert big[8192] / big[2048] < 1.1 and big[32] / big[8] > 1.5
    top = max(r["sextans_gflops"] for r in rows)
    sat = saturation_flops(rows, "sextans")
    assert max(r["sextans_gflops"] for r in rows if r["flops"] <= sat) >= 0.95 * top
    assert sat > min(r["flops"] for r in rows)
