"""Recurrent scheduling (ISA Mapper §3.6): priming / recursive / finish, replay equals unrolling."""
from __future__ import annotations

import numpy as np
import pytest

from tvm_ext.accel import (
    Timeline,
    Workload,
    check_coherence,
    gru_cell,
    gru_reference,
    gru_sequence_inputs,
    replay_kl,
    schedule,
    schedule_kl,
    schedule_recurrent,
    simulate,
    unrolled_gru,
)
from tvm_ext.accel.stream import COPY, HOME
from tvm_ext.errors import InputError

B, H = 3, 40  # 40 columns: gate blocks straddle the 32-wide tiles


def data(T, b=B, h=H, seed=5):
    d = gru_sequence_inputs(T, b, h, seed=seed)
    consts = {k: d[k] for k in ("h", "w_ih", "w_hh", "b_ih", "b_hh")}
    ref = gru_reference(d["xs"], d["h"], d["w_ih"], d["w_hh"], d["b_ih"], d["b_hh"])
    return d, consts, ref


@pytest.fixture(scope="module")
def rec():
    return schedule_recurrent(gru_cell(B, H), "default")


@pytest.mark.parametrize("T", [1, 2, 3, 5])
def test_recurrent_schedule_equals_unrolled_steps(rec, T):
    d, consts, ref = data(T)
    got = rec.run(consts, {"x": d["xs"]})["h"]
    wl = unrolled_gru(T, B, H)
    ins = {"h": d["h"], **{k: consts[k] for k in ("w_ih", "w_hh", "b_ih", "b_hh")},
           **{f"x{t}": d["xs"][t] for t in range(T)}}
    unrolled = simulate(schedule(wl, "default"), ins, timing=False).outputs["h_out"]
    np.testing.assert_allclose(got, unrolled, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_recurrent_on_the_mini_machine():
    rs = schedule_recurrent(gru_cell(2, 48), "mini")
    d, consts, ref = data(4, 2, 48)
    np.testing.assert_allclose(rs.run(consts, {"x": d["xs"]})["h"], ref, rtol=1e-5, atol=1e-6)


def test_replayed_streams_never_read_stale_data(rec):
    streams = [rec.priming, rec.recursive, rec.recursive, rec.recursive, rec.finish]
    assert check_coherence(rec, streams, live=["h"], rewritten=["x"])


def test_weights_stay_resident_between_steps(rec):
    P = rec.tiles.pieces
    roles = {n: rec.workload.tensors[n].role for n in P.tensor_names}

    def weight_loads(stream):  # weight tiles fetched from their home (HBM)
        return sum(1 for i, k in enumerate(stream.kind) if k == COPY and stream.src[i] == HOME
                   and roles[P.tensor_names[P.tensor[stream.piece[i]]]] == "weight")

    primed = weight_loads(rec.priming)
    assert primed == 24  # every weight tile once: 2 x 8 matrix tiles + 2 x 4 bias tiles
    assert weight_loads(rec.recursive) * 4 <= primed  # later steps find (almost) all of them on chip
    kl = schedule_kl(gru_cell(B, H), "default")
    assert weight_loads(kl.stream) >= primed  # the library reloads them every step
    d, consts, ref = data(3)
    np.testing.assert_allclose(replay_kl(kl, consts, {"x": d["xs"]})["h"], ref, rtol=1e-5, atol=1e-6)


def test_skipped_iterations_are_exact():
    rs = schedule_recurrent(gru_cell(4, 64), "default")
    T = 14
    rep = rs.time(T)
    tl = Timeline("default")  # every iteration simulated
    tl.run(rs.priming)
    for _ in range(T - 2):
        tl.run(rs.recursive)
    tl.run(rs.finish)
    assert rep.simulated_iterations < T
    assert rep.cycles == pytest.approx(tl.horizon, rel=1e-12)
    assert rep.instructions == tl.instructions
    full = tl.report()
    for dev, busy in full.device_busy.items():
        assert rep.device_busy[dev] == pytest.approx(busy, rel=1e-9, abs=1e-6)


def test_fused_recurrent_schedule_beats_the_kernel_library():
    rs = schedule_recurrent(gru_cell(4, 64), "default")
    kl = schedule_kl(gru_cell(4, 64), "default")
    tl = Timeline("default")
    tl.repeat(kl.stream, 8)
    assert rs.time(8).cycles * 2 < tl.horizon


def test_bad_recurrent_inputs():
    wl = Workload()
    wl.relu(wl.input("x", (32, 32)), out="y")
    with pytest.raises(InputError, match="no state"):
        schedule_recurrent(wl)
    rs = schedule_recurrent(gru_cell(2, 32))
    d, consts, _ = data(3, 2, 32)
    with pytest.raises(InputError, match="missing"):
        rs.run(consts, {})
    with pytest.raises(InputError, match="at least one"):
        rs.time(0)
