"""The kernel-library baseline (ISA Mapper §6.2): per-op kernels over every unit, output-stationary and issued
to all units at once; it wins where a library is tuned (an evenly dividing GEMM) and loses where data could
stay on chip across calls (a small GRU whose weights fit)."""
from __future__ import annotations

import numpy as np

from tvm_ext.accel import (
    Scheduler,
    gemm_workload,
    load_system,
    schedule,
    schedule_kl,
    simulate,
    time_stream,
)
from tvm_ext.accel.kernel_library import KernelLibraryApproach
from tvm_ext.accel.stream import COMPUTE


def _matmul_units(stream, system):
    units = set(system.units_for("matmul_32x32x32"))
    return {stream.dev[i] for i, k in enumerate(stream.kind) if k == COMPUTE and stream.dev[i] in units}


def test_kernel_library_uses_every_cluster_and_beats_the_per_op_scheduler_on_a_tuned_gemm():
    system = load_system("default")
    wl = gemm_workload(512, 512, 512)
    kl = schedule_kl(wl, system)
    used = _matmul_units(kl.stream, system)
    assert used == set(system.units_for("matmul_32x32x32"))
    assert {system.domain(d) for d in used} == set(range(8))          # all eight clusters
    kl_cycles = time_stream(kl.stream, system).cycles
    ours = time_stream(schedule(wl, system).stream, system).cycles
    per_op = Scheduler(wl, system, isolate_ops=True)
    per_op_cycles = time_stream(per_op.result(per_op.run()).stream, system).cycles
    assert kl_cycles <= min(ours, per_op_cycles)                      # a tuned size: the library wins
    rep = time_stream(kl.stream, system)
    assert rep.utilisation_by_kind()["matrix"] > 0.9                  # near the machine's peak


def test_kernel_library_order_respects_dependencies_on_every_system():
    for name in ("default", "mini"):
        system = load_system(name)
        wl = gemm_workload(40, 24, 70)
        kl = schedule_kl(wl, system)      # the scheduler refuses an order that breaks a dependency
        ins = wl.random_inputs(seed=3)
        np.testing.assert_allclose(simulate(kl, ins).outputs["C"], ins["A"] @ ins["B"], rtol=2e-5, atol=2e-4)


def test_kernel_library_tile_order_is_output_stationary():
    from tvm_ext.accel.lowering import lower_workload
    from tvm_ext.accel.tiles import unroll

    system = load_system("default")
    wl = gemm_workload(128, 128, 128)                                 # 4 x 4 output tiles, 4 reduction steps
    tiles = unroll(wl, lower_workload(wl, system))
    approach = KernelLibraryApproach(system)
    order = approach.tile_order(tiles)
    assert sorted(order.tolist()) == list(range(tiles.n))
    step: dict[int, int] = {}
    steps = []
    for t in order.tolist():
        out = approach._output_piece(tiles, t)
        steps.append(step.get(out, 0))
        step[out] = steps[-1] + 1
    assert steps == sorted(steps)          # every output's step k before any output's step k + 1


def test_small_gru_beats_the_kernel_library_which_reloads_its_weights_every_step():
    from tvm_ext.accel import run_gru

    r = run_gru(6, 64, 4, system="default", check=False)
    assert r["speedup_vs_kl"] > 1
    hbm = lambda d: sum(v for k, v in d.items() if "hbm" in k)  # noqa: E731
    weights = 4 * 3 * 64 * (64 + 64)
    assert hbm(r["bytes_by_level_kl"]) >= r["steps"] * weights            # the library reloads them every step
    assert hbm(r["bytes_by_level"]) < hbm(r["bytes_by_level_kl"])


def test_one_kernel_library_approach_schedules_several_workloads():
    system = load_system("default")
    approach = KernelLibraryApproach(system)
    for M, N, K in ((64, 96, 32), (96, 32, 64)):
        wl = gemm_workload(M, N, K)
        sched = Scheduler(wl, system, approach, isolate_ops=True)
        ins = wl.random_inputs(seed=M)
        out = simulate(sched.result(sched.run(), kind="kl"), ins).outputs["C"]
        np.testing.assert_allclose(out, ins["A"] @ ins["B"], rtol=2e-5, atol=2e-4)
