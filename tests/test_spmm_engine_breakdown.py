"""Sextans Table 1: the speedup breakdown is modelled, step by step, on any matrix."""
from __future__ import annotations

import pytest

from tvm_ext.errors import InputError
from tvm_ext.spmm_engine import SEXTANS, model, schedule, speedup_breakdown
from tvm_ext.workloads import fem_mass_3d


@pytest.fixture(scope="module")
def mass():
    return fem_mass_3d(6, 6, 8)  # 864 rows, 3 dofs per node, 27-node coupling


def test_each_step_is_a_ratio_of_modelled_times(mass):
    steps = speedup_breakdown(mass, 32)
    for prev, cur in zip(steps, steps[1:]):
        assert cur.incremental == pytest.approx(prev.report.seconds / cur.report.seconds)
    assert steps[-1].accumulated == pytest.approx(steps[0].report.seconds / steps[-1].report.seconds)
    base = model(schedule(mass, P=1, n0=1, policy="in-order", nz_order="row"), 32, SEXTANS)
    assert steps[0].report.seconds == pytest.approx(base.seconds)


def test_ratios_follow_the_engine_not_the_step_names(mass):
    steps = speedup_breakdown(mass, 32)
    # OoO: bounded by D = 10 (a row's non-zeros D cycles apart in order)
    assert 5 < steps[1].incremental < 10
    # 8 PUs: 8x fewer passes over A, less the launch that does not shrink
    assert 4 < steps[2].incremental < 8
    assert "N0-blocks 32 -> 4" in steps[2].why
    # without launch and fill / drain, nothing else keeps N0 = 8 from exactly 8x here
    steady = SEXTANS.replace(launch_us=0.0, hbm_latency_cycles=0, pe_latency_cycles=0)
    assert speedup_breakdown(mass, 32, steady)[2].incremental == pytest.approx(8.0)
    # 64 PEs: far below 64 on a small matrix (B stream, C stages and the launch stay)
    assert 1 < steps[3].incremental < 64


def test_overrides_apply_to_every_step_and_step_knobs_are_refused(mass):
    steps = speedup_breakdown(mass, 8, raw_distance=4)
    assert all(s.config.raw_distance == 4 for s in steps)
    assert steps[1].incremental < speedup_breakdown(mass, 8)[1].incremental  # smaller D, less to win
    with pytest.raises(InputError, match="pes"):
        speedup_breakdown(mass, 8, pes=4)
    with pytest.raises(InputError):
        speedup_breakdown(mass, 0)
