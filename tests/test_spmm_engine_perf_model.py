"""Sextans Eqs. 6-10 and §4: the cycle / HBM model, checked by hand."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from tvm_ext.errors import ConfigError, InputError
from tvm_ext.spmm_engine import SEXTANS, SEXTANS_P, EngineConfig, Platform, model, preprocess, schedule



def fig5_matrix() -> sp.csr_array:
    """Fig. 5(i) (see test_spmm_engine_schedule.py): 4x4, ten non-zeros."""
    r, c = zip(*[(0, 0), (2, 0), (3, 0), (1, 1), (2, 1), (0, 2), (2, 2), (3, 2), (0, 3), (3, 3)])
    return sp.csr_array((np.ones(10), (r, c)), shape=(4, 4))


def test_fig5_cycles_by_hand():
    s = schedule(fig5_matrix(), D=4, P=1, K0=4)
    r = model(s, n=8, platform=SEXTANS)
    # init C ceil(4/1) + stream B ceil(4/(2*4)) + PE 11 + comp C ceil(4/16)
    assert r.cycles == 4 + 1 + 11 + 1
    assert r.steady_s == pytest.approx(17 / 189e6)
    # fill / drain: init C 1 HBM latency, B 1 per window, PE latency + depth, comp C 2 latencies
    assert r.fill_drain_cycles == 100 + 100 + (100 + 15) + 200
    assert r.seconds == pytest.approx((17 + 515) / 189e6 + 150e-6)
    assert r.flops == 2 * (10 + 4) * 8
    assert r.gflops == pytest.approx(r.flops / r.seconds / 1e9)
    assert r.stages["pe"].cycles == 11 and r.stages["stream_b"].cycles == 1
    assert all(st.memory_bound_s == 0 for st in r.stages.values())
    # three N0-blocks for N = 20
    assert model(s, n=20).cycles == 3 * 17


def test_balanced_stream_reproduces_eq10():
    # eye(256), 64 PEs, K0=128: every PE gets 2 distinct rows per window, no bubbles
    s = schedule(sp.csr_array(np.eye(256)), P=64, K0=128, D=10)
    assert s.stats()["bubbles"] == 0
    r = model(s, n=64)
    K, M, nnz, P, FB, FC = 256, 256, 256, 64, 4, 16
    eq10 = (M / P + K / (2 * FB) + nnz / P + M / FC) * (64 / 8)
    assert r.cycles == eq10


def test_memory_bound_stages_take_the_hbm_time():
    s = schedule(fig5_matrix(), D=4, P=1, K0=4)
    slow = Platform("slow-hbm", freq_mhz=189.0, channel_gbs=1e-3,  # 1 MB/s per channel
                    launch_us=0.0, hbm_latency_cycles=0, pe_latency_cycles=0)
    r = model(s, n=8, platform=slow)
    bw = 1e6
    expect = (max(4 / 189e6, 8 / bw)                   # init C vs Q (2 pointers, 1 channel)
              + max(1 / 189e6, 4 * 8 * 4 / (4 * bw))    # B window, 4 channels
              + max(11 / 189e6, 11 * 1 * 8 / (8 * bw))  # A words, 8 channels
              + max(1 / 189e6, 4 * 8 * 4 / (8 * bw)))   # C_in / C_out, 8 channels each
    assert r.seconds == pytest.approx(expect)
    assert r.cycles == 17  # cycles count compute only (Eq. 10)
    assert r.stages["pe"].memory_bound_s == pytest.approx(r.stages["pe"].seconds)
    assert r.traffic == {"q": 8, "a": 88, "b": 128, "c_in": 128, "c_out": 128}


def test_derived_metrics_follow_the_paper_formulas():
    from tvm_ext.workloads import load_matrix

    A = load_matrix("nasa4704")
    prog = preprocess(A)
    for plat in (SEXTANS, SEXTANS_P):
        r = model(prog, n=64, platform=plat)
        M, K = A.shape
        util = 4 * (A.nnz + 64 * (2 * M + K)) / r.seconds / (plat.bandwidth_gbs * 1e9)
        assert r.bandwidth_utilization == pytest.approx(util)
        assert r.flop_per_joule == pytest.approx(r.flops / (r.seconds * plat.power_w))
        # never faster than all P*N0 PUs busy every cycle
        peak = 2 * 64 * 8 * plat.freq_hz * (A.nnz + M) / A.nnz / 1e9
        assert 0 < r.gflops < peak
        assert r.cycles >= prog.stream_length * 8
    fast, slow = model(prog, 64, SEXTANS_P), model(prog, 64, SEXTANS)
    assert fast.seconds < slow.seconds and fast.cycles == slow.cycles


def test_out_of_order_beats_in_order_and_more_pes_help():
    from tvm_ext.workloads import lap2d

    A = lap2d(24)
    ooo = model(schedule(A, P=8, K0=64), n=32)
    ino = model(schedule(A, P=8, K0=64, policy="in-order"), n=32)
    wide = model(schedule(A, P=64, K0=64), n=32)
    assert ooo.cycles < ino.cycles
    assert wide.cycles < ooo.cycles


def test_bad_n_raises():
    s = schedule(fig5_matrix(), D=4, P=1, K0=4)
    for n in (0, -3, 2.5, True):
        with pytest.raises(InputError):
            model(s, n=n)
    assert model(s, n=np.int64(8)).n == 8
    assert EngineConfig().pegs == 8


def test_fixed_costs_make_throughput_grow_then_saturate_with_n():
    from tvm_ext.workloads import lap2d

    prog = preprocess(lap2d(200))
    g = {n: model(prog, n).gflops for n in (8, 16, 32, 64, 128, 256, 512, 4096)}
    ns = sorted(g)
    assert all(g[a] < g[b] for a, b in zip(ns, ns[1:]))  # the launch amortises
    assert g[16] / g[8] > 1.5                            # launch-dominated: nearly doubles
    assert g[4096] / g[512] < 1.15                       # saturated
    steady = Platform("steady", freq_mhz=189.0, launch_us=0.0, hbm_latency_cycles=0,
                      pe_latency_cycles=0)
    flat = [model(prog, n, steady).gflops for n in (8, 512)]
    assert flat[0] == pytest.approx(flat[1])             # Eqs. 6-10 alone: size-independent
    assert g[4096] < flat[1]                             # fill / drain cost something


def test_launch_is_paid_once_per_spmm():
    s = schedule(fig5_matrix(), D=4, P=1, K0=4)
    plat = SEXTANS.replace(launch_us=1000.0)
    a, b = model(s, 8, SEXTANS), model(s, 8, plat)
    assert b.seconds - a.seconds == pytest.approx(850e-6)
    assert model(s, 800, plat).seconds - model(s, 800, SEXTANS).seconds == pytest.approx(850e-6)


def test_bad_platform_overheads_raise():
    from tvm_ext.errors import ConfigError

    for kw in (dict(launch_us=-1.0), dict(launch_us=float("nan")), dict(hbm_latency_cycles=-1),
               dict(pe_latency_cycles=2.5)):
        with pytest.raises(ConfigError):
            Platform("bad", freq_mhz=100.0, **kw)


def test_hbm_efficiency_makes_the_a_stream_bound_the_pe_stage():
    """A's demand: 8 PEs x 8 B per cycle = 84% of a U280 channel at 189 MHz, 80% on Sextans-P at 350 MHz.
    At nominal bandwidth A never limits; at the efficiency implied by the paper's 181.1 GFLOP/s it
    paces Sextans's PE stage and leaves Sextans-P's alone."""
    from tvm_ext.spmm_engine.perf_model import PAPER_IMPLIED_HBM_EFFICIENCY as eta, a_stream_demand
    from tvm_ext.workloads import lap2d

    assert a_stream_demand(SEXTANS) == pytest.approx(64 * 189e6 / 14.375e9)
    assert a_stream_demand(SEXTANS_P) < eta < a_stream_demand(SEXTANS) < 1.0
    assert 187 * eta / a_stream_demand(SEXTANS) == pytest.approx(181.1, abs=0.3)  # steady-state peak scaled
    prog = preprocess(lap2d(300))
    for plat, limited in ((SEXTANS, True), (SEXTANS_P, False)):
        nominal, real = model(prog, 512, plat), model(prog, 512, plat, hbm_efficiency=eta)
        assert nominal.stages["pe"].memory_bound_s == 0.0  # at nominal bandwidth A never limits
        assert (real.stages["pe"].memory_bound_s > 0) == limited
        if limited:  # the PE stage now runs at the A stream's pace
            pe = real.stages["pe"]
            assert pe.seconds == pytest.approx(pe.memory_s + pe.fill_cycles / plat.freq_hz)
            assert pe.memory_s / pe.compute_s == pytest.approx(a_stream_demand(plat) / eta, rel=1e-6)
            assert real.gflops < nominal.gflops * 0.99
        else:
            assert real.seconds == pytest.approx(nominal.seconds, rel=2e-3)
    for bad in (0, -0.5, 1.5, True, "0.9"):
        with pytest.raises(ConfigError):
            model(prog, 8, SEXTANS, hbm_efficiency=bad)
