"""ISA Mapper §6.2: the two evaluation cases (a GEMM, a GRU over T steps), this scheduler vs the kernel library.

:func:`run_gemm` and :func:`run_gru` schedule the case both ways on one
system graph, time both streams with the same simulator, optionally run both
functionally against a float64 numpy reference, and return one flat dict
(what the CLI prints, the demo shows and the benchmark records).

``max_rel_err`` is ``max |out - ref| / max |ref|`` (the largest error
relative to the output's scale).  ``cycles_per_op`` divides cycles by the
case's floating-point operations (2 per multiply-add, 1 per element-wise
result), the paper's Figure 3/4 metric.

>>> r = run_gemm(40, 24, 70, system="mini")
>>> r["cycles"] > 0 and r["cycles_kl"] > 0 and r["max_rel_err"] < 1e-5
True
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from tvm_ext.errors import InputError, positive_int
from tvm_ext.limits import check_work

from .gru import gru_cell, gru_reference, gru_sequence_inputs
from .kernel_library import schedule_kl
from .recurrent import replay_kl, schedule_recurrent
from .scheduler import schedule
from .simulator import simulate
from .system_graph import load_system
from .timing import Timeline, TimingReport, time_stream
from .workload import Workload

__all__ = ["run_gemm", "run_gru", "run_sepconv", "gemm_workload", "sepconv_workload", "rel_err"]


def gemm_workload(M: int, N: int, K: int) -> Workload:
    """``C[M, N] = A[M, K] @ B[K, N]``."""
    wl = Workload(f"gemm_{M}x{N}x{K}")
    wl.matmul(wl.input("A", (M, K)), wl.weight("B", (K, N)), out="C")
    return wl


def sepconv_workload(c_in: int, c_out: int | None, hw: int, stride: int = 1, kernel: int = 3,
                     batch: int = 1) -> Workload:
    """A MobileNet-v1 block (NCHW): ``relu(conv1x1(relu(depthwise(x))))``; ``c_out=None``: the depthwise conv alone.

    >>> [op.kind for op in sepconv_workload(8, 16, 10).ops]
    ['depthwise_conv2d', 'relu', 'conv2d', 'relu']
    """
    pad = kernel // 2
    wl = Workload(f"sepconv_{c_in}x{hw}x{hw}_{c_out}_s{stride}" if c_out else f"depthwise_{c_in}x{hw}x{hw}_s{stride}")
    x = wl.input("x", (batch, c_in, hw, hw))
    d = wl.depthwise_conv2d(x, wl.weight("w_dw", (c_in, 1, kernel, kernel)), strides=(stride, stride),
                            padding=(pad,) * 4, out=None if c_out else "y")
    if c_out:
        wl.relu(wl.conv2d(wl.relu(d), wl.weight("w_pw", (c_out, c_in, 1, 1))), out="y")
    return wl


def rel_err(out: np.ndarray, ref: np.ndarray) -> float:
    """``max |out - ref| / max |ref|``."""
    ref = np.asarray(ref, dtype=np.float64)
    scale = float(np.abs(ref).max()) or 1.0
    return float(np.abs(np.asarray(out, dtype=np.float64) - ref).max() / scale)


def _timing_fields(prefix: str, rep: TimingReport) -> dict[str, Any]:
    return {f"cycles{prefix}": rep.cycles, f"seconds{prefix}": rep.seconds,
            f"utilisation{prefix}": rep.utilisation_by_kind(), f"bytes_by_level{prefix}": dict(rep.bytes_by_level),
            f"instructions{prefix}": rep.instructions}


def run_gemm(M: int, N: int, K: int, system: Any = None, *, check: bool = True, seed: int = 0) -> dict[str, Any]:
    """One GEMM on ``system``: cycles of this scheduler and of the KL baseline, utilisation, traffic, check.

    Scheduling and simulation grow with the FLOP count: above
    :data:`tvm_ext.limits.LIMITS` the request is refused with ``ConfigError``
    (lift with ``TVM_EXT_ALLOW_LARGE=1``).
    """
    M, N, K = (positive_int(v, f"accel gemm: {n}", InputError) for n, v in (("M", M), ("N", N), ("K", K)))
    operands = M * K + K * N + M * N
    check_work(f"accel gemm {M}x{N}x{K}", flop=2 * M * N * K, bytes=operands * (4 + 8 + 8) if check else 0)
    sysg = load_system(system)
    wl = gemm_workload(M, N, K)
    t0 = time.perf_counter()
    ours = schedule(wl, sysg)
    t1 = time.perf_counter()
    kl = schedule_kl(wl, sysg)
    t2 = time.perf_counter()
    rep, krep = time_stream(ours.stream, sysg), time_stream(kl.stream, sysg)
    t3 = time.perf_counter()
    flops = 2 * M * N * K
    out: dict[str, Any] = {"case": "gemm", "M": M, "N": N, "K": K, "system": sysg.name, "flops": flops,
                           **_timing_fields("", rep), **_timing_fields("_kl", krep)}
    out.update(cycles_per_op=rep.cycles / flops, cycles_per_op_kl=krep.cycles / flops,
               speedup_vs_kl=krep.cycles / rep.cycles, tiles=ours.tiles.n, schedule_s=t1 - t0,
               schedule_kl_s=t2 - t1, timing_s=t3 - t2, stats=dict(ours.stats),
               instruction_set=sorted({c.instruction.name for c in ours.tiles.calls}))
    out["max_rel_err"] = out["max_rel_err_kl"] = None
    if check:
        ins = wl.random_inputs(seed=seed)
        ref = ins["A"].astype(np.float64) @ ins["B"].astype(np.float64)
        t4 = time.perf_counter()
        res = simulate(ours, ins, timing=False)
        out["functional_s"] = time.perf_counter() - t4
        out["max_rel_err"] = rel_err(res.outputs["C"], ref)
        out["max_rel_err_kl"] = rel_err(simulate(kl, ins, timing=False).outputs["C"], ref)
        out["sim_instructions_per_s"] = len(ours.stream) / max(out["functional_s"], 1e-9)
    out["timing_instructions_per_s"] = (len(ours.stream) + len(kl.stream)) / max(t3 - t2, 1e-9)
    return out


def run_sepconv(c_in: int, c_out: int | None, hw: int, stride: int = 1, system: Any = None, *,
                check: bool = True, seed: int = 0) -> dict[str, Any]:
    """A depthwise-separable block (or, with ``c_out=None``, its depthwise conv) on ``system``: cycles of this
    scheduler and of the KL baseline, utilisation, traffic and the check against the float64 reference.

    >>> r = run_sepconv(4, 8, 6, system="default")
    >>> r["cycles"] > 0 and r["cycles_kl"] > 0 and r["max_rel_err"] < 1e-5
    True
    """
    C, H, S = (positive_int(v, f"accel sepconv: {n}", InputError) for n, v in (("c_in", c_in), ("hw", hw),
                                                                             ("stride", stride)))
    O = None if c_out is None else positive_int(c_out, "accel sepconv: c_out", InputError)
    wl = sepconv_workload(C, O, H, S)
    check_work(f"accel {wl.name}", flop=wl.flops, bytes=sum(t.nbytes for t in wl.tensors.values()) * 5)
    sysg = load_system(system)
    t0 = time.perf_counter()
    ours = schedule(wl, sysg)
    t1 = time.perf_counter()
    kl = schedule_kl(wl, sysg)
    t2 = time.perf_counter()
    rep, krep = time_stream(ours.stream, sysg), time_stream(kl.stream, sysg)
    flops = wl.flops
    out: dict[str, Any] = {"case": "sepconv" if O else "depthwise", "c_in": C, "c_out": O, "hw": H, "stride": S,
                           "system": sysg.name, "flops": flops, **_timing_fields("", rep),
                           **_timing_fields("_kl", krep)}
    out.update(cycles_per_op=rep.cycles / flops, cycles_per_op_kl=krep.cycles / flops,
               speedup_vs_kl=krep.cycles / rep.cycles, tiles=ours.tiles.n, schedule_s=t1 - t0,
               schedule_kl_s=t2 - t1, stats=dict(ours.stats),
               instruction_set=sorted({c.instruction.name for c in ours.tiles.calls}),
               temporaries={n: t.shape for n, t in ours.workload.tensors.items()
                            if n not in wl.tensors and t.role == "temp"})
    out["max_rel_err"] = out["max_rel_err_kl"] = None
    if check:
        ins = wl.random_inputs(seed=seed)
        ref = wl.reference(ins)["y"]
        out["max_rel_err"] = rel_err(simulate(ours, ins, timing=False).outputs["y"], ref)
        out["max_rel_err_kl"] = rel_err(simulate(kl, ins, timing=False).outputs["y"], ref)
    return out


def run_gru(steps: int, hidden: int, batch: int, inputs: int | None = None, system: Any = None, *,
            check: bool = True, seed: int = 0) -> dict[str, Any]:
    """A GRU layer over ``steps`` steps: recurrent schedule (weights resident) vs the KL, cycles and check.

    The timing repeats a few simulated steps; the functional check runs every
    step, so with ``check`` the steps and FLOP are limited by
    :data:`tvm_ext.limits.LIMITS` (``ConfigError``; lift with ``TVM_EXT_ALLOW_LARGE=1``).
    """
    T, H, B = (positive_int(v, f"accel gru: {n}", InputError) for n, v in (("steps", steps), ("hidden", hidden),
                                                                        ("batch", batch)))
    I = positive_int(inputs if inputs is not None else H, "accel gru: inputs", InputError)
    weights = 3 * H * (H + I)
    check_work(f"accel gru H={H} B={B} I={I}", flop=2 * B * weights, bytes=weights * 4 * 3)  # one step's schedule
    if check:
        check_work(f"accel gru T={T} H={H} B={B} I={I} with the functional check", steps=T,
                   flop=T * 2 * B * weights, bytes=T * B * (I + H) * 8)
    sysg = load_system(system)
    cell = gru_cell(B, H, I)
    t0 = time.perf_counter()
    rs = schedule_recurrent(cell, sysg)
    t1 = time.perf_counter()
    kl = schedule_kl(cell, sysg)
    t2 = time.perf_counter()
    rep = rs.time(T)
    tl = Timeline(sysg)
    sim_kl = tl.repeat(kl.stream, T)
    krep = tl.report(iterations=T, simulated=sim_kl)
    t3 = time.perf_counter()
    flops = T * cell.flops
    out: dict[str, Any] = {"case": "gru", "steps": T, "hidden": H, "batch": B, "inputs": I, "system": sysg.name,
                           "flops": flops, **_timing_fields("", rep), **_timing_fields("_kl", krep)}
    out.update(cycles_per_op=rep.cycles / flops, cycles_per_op_kl=krep.cycles / flops,
               speedup_vs_kl=krep.cycles / rep.cycles, cycles_per_step=rep.cycles / T,
               cycles_per_step_kl=krep.cycles / T, simulated_steps=rep.simulated_iterations,
               simulated_steps_kl=krep.simulated_iterations, schedule_s=t1 - t0, schedule_kl_s=t2 - t1,
               timing_s=t3 - t2, stats=rs.stats,
               stream_lengths={n: len(s) for n, s in rs.streams()}, stream_length_kl=len(kl.stream))
    out["max_rel_err"] = out["max_rel_err_kl"] = None
    if check:
        data = gru_sequence_inputs(T, B, H, I, seed=seed)
        consts = {k: data[k] for k in ("h", "w_ih", "w_hh", "b_ih", "b_hh")}
        ref = gru_reference(data["xs"], data["h"], data["w_ih"], data["w_hh"], data["b_ih"], data["b_hh"])
        t4 = time.perf_counter()
        got = rs.run(consts, {"x": data["xs"]})["h"]
        out["functional_s"] = time.perf_counter() - t4
        out["max_rel_err"] = rel_err(got, ref)
        out["max_rel_err_kl"] = rel_err(replay_kl(kl, consts, {"x": data["xs"]})["h"], ref)
        out["sim_instructions_per_s"] = rs.executed / max(out["functional_s"], 1e-9)
    return out
