"""The timed model: exact cycles on a tiny machine, overlap, bandwidth, channels, ports, reports."""
from __future__ import annotations

import numpy as np
import pytest

from tvm_ext.accel import SystemGraph, Timeline, Workload, schedule, time_stream
from tvm_ext.accel.stream import COMPUTE, COPY
from tvm_ext.accel.timing import _Calendar


def machine(*, issuer: str = "dma", bw: float = 32, lat: float = 10, channels: int = 1, port: float | None = None,
            units: int = 1) -> SystemGraph:
    hbm = {"name": "hbm", "kind": "hbm", "capacity": 1 << 24}
    if port is not None:
        hbm["bandwidth"] = port
    return SystemGraph.from_dict({
        "name": "toy",
        "memories": [hbm, {"name": "rf{u}", "kind": "regfile", "capacity": 1 << 16, "foreach": {"u": units}}],
        "copy_engines": [{"name": "dma", "channels": channels}],
        "computes": [{"name": "u{u}", "kind": "vector", "memories": ["rf{u}"], "foreach": {"u": units},
                      "instructions": {"relu_32x32": 8, "add_32x32": 8}}],
        "edges": [{"src": "hbm", "dst": "rf{u}", "bandwidth": bw, "latency": lat, "foreach": {"u": units},
                   "issuer": issuer if issuer == "dma" else "u{u}", "bidirectional": True}],
    })


def relu_workload(rows: int = 32, cols: int = 32) -> Workload:
    wl = Workload("relu")
    wl.relu(wl.input("x", (rows, cols)), out="y")
    return wl


def test_one_tile_costs_load_compute_store_exactly():
    s = schedule(relu_workload(), machine(bw=32, lat=10))
    assert s.stream.counts() == {"compute": 1, "copy": 2, "barrier": 0}
    rep = time_stream(s.stream, s.system)
    assert rep.cycles == (10 + 4096 / 32) + 8 + (10 + 4096 / 32)
    assert rep.bytes_by_level == {"hbm->regfile": 4096, "regfile->hbm": 4096}
    assert rep.device_busy["u0"] == 8 and rep.device_busy["dma"] == 2 * 4096 / 32


def test_partial_tiles_move_only_their_valid_bytes():
    s = schedule(relu_workload(20, 10), machine())
    rep = time_stream(s.stream, s.system)
    assert rep.bytes_by_level == {"hbm->regfile": 800, "regfile->hbm": 800}
    assert rep.cycles == (10 + 800 / 32) + 8 + (10 + 800 / 32)


def test_lower_bandwidth_and_higher_latency_cost_cycles():
    wl = relu_workload(128, 128)
    base = time_stream(schedule(wl, machine()).stream, machine()).cycles
    slow = time_stream(schedule(wl, machine(bw=8)).stream, machine(bw=8)).cycles
    late = time_stream(schedule(wl, machine(lat=500)).stream, machine(lat=500)).cycles
    assert slow > base and late > base


def test_copies_overlap_compute_only_with_their_own_issuer():
    wl = relu_workload(256, 256)
    dma, unit = machine(issuer="dma"), machine(issuer="unit")
    r_dma = time_stream(schedule(wl, dma).stream, dma)
    r_unit = time_stream(schedule(wl, unit).stream, unit)
    assert r_dma.cycles < r_unit.cycles
    # when the unit issues the copies it is busy moving data as well as computing
    assert r_unit.device_busy["u0"] > r_dma.device_busy["u0"] == 64 * 8


def test_more_channels_and_ports():
    wl = relu_workload(256, 256)
    one, four = machine(channels=1, lat=200), machine(channels=4, lat=200)
    c1 = time_stream(schedule(wl, one).stream, one).cycles
    c4 = time_stream(schedule(wl, four).stream, four).cycles
    assert c4 < c1  # a copy waiting for its slot no longer holds up the next one
    narrow = machine(channels=4, lat=200, port=8)
    assert time_stream(schedule(wl, narrow).stream, narrow).cycles > c4  # the HBM port limits


def test_a_port_serves_ready_copies_first():
    cal = _Calendar()
    cal.take(100, 10)  # a copy issued earlier but ready late
    assert cal.fit(0, 16) == 0  # an early copy slips in before it
    assert cal.fit(95, 10) == 110  # one that would collide waits
    cal.take(110, 5)
    assert cal.starts == [100] and cal.ends == [115]  # adjacent intervals merge
    cal.prune(200)
    assert cal.starts == []


def test_device_timelines_are_consistent():
    sysg = machine(units=2, channels=2)
    wl = Workload("two")
    a = wl.relu(wl.input("x", (96, 64)))
    wl.add(a, wl.input("z", (96, 64)), out="y")
    s = schedule(wl, sysg)
    rep = time_stream(s.stream, sysg, record=True)
    start, end = rep.start, rep.end
    assert (end >= start).all() and end.max() == rep.cycles
    for dev in ("u0", "u1"):
        line = rep.device_timeline(s.stream, dev)
        assert line and all(s.stream.kind[i] == COMPUTE for _, _, i in line)
        assert all(b[0] >= a[1] for a, b in zip(line, line[1:]))  # one instruction at a time
    util = rep.utilisation
    assert all(0 <= u <= 1 + 1e-9 for u in util.values())
    copies = [i for i, k in enumerate(s.stream.kind) if k == COPY]
    assert sum(rep.bytes_by_level.values()) == sum(s.stream.nbytes[i] for i in copies)
    mem = rep.bytes_by_memory
    assert mem["hbm"]["read"] == rep.bytes_by_level["hbm->regfile"]


def test_timeline_carries_state_between_streams():
    sysg = machine()
    s = schedule(relu_workload(), sysg)
    tl = Timeline(sysg)
    tl.run(s.stream)
    once = tl.horizon
    tl.run(s.stream)
    assert tl.horizon > once and tl.instructions == 2 * len(s.stream)
    tl2 = Timeline(sysg)
    simulated = tl2.repeat(s.stream, 10)
    assert simulated < 10 and tl2.instructions == 10 * len(s.stream)
    tl3 = Timeline(sysg)
    for _ in range(10):
        tl3.run(s.stream)
    assert tl2.horizon == pytest.approx(tl3.horizon)
    np.testing.assert_allclose(tl2.busy, tl3.busy)
