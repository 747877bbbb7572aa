"""ISA Mapper §5 / Listing 3: depthwise and separable convolutions mapped onto the accelerator ISA.

For each kernel: the mapper's search (``find_mappings`` on the ``accel``
instruction library: 32x32x32 / 16x16x16 matmul units, 32x32 element-wise
units, all fixed-size, so every mapping pads), the plan
(:func:`tensorize.kernels.plan_mappings` ranked by modelled cycles, with
first choices on one program, :meth:`~tensorize.kernels.Plan.on_one_program`:
factorization + matmul for the separable convolution, a fill + scale +
accumulate cover for the depthwise one), a functional run of the plan as instruction calls
(:func:`tensorize.kernels.simulate_plan`) checked against numpy and torch, and
the modelled accelerator time (:func:`tensorize.kernels.plan_cycles`, the
ISA's nominal per-call cycles) next to the ideal time of the kernel's own
FLOP at the used unit's peak.  The host-side simulation time is reported
too (it is an instruction-level interpreter, not a speed claim).

Run: ``python -m bench.isa_map_accel [--quick]``.
"""
from __future__ import annotations

import time

import numpy as np

from bench.harness import BenchRun, bench_args
from tensorize.instructions import get_isa
from tensorize.kernels import compute_blocks, depthwise_conv2d, plan_cycles, plan_mappings, separable_conv2d, simulate_plan
from tensorize.search import find_mappings
from tensorize.selection import CycleCostModel


def program_inputs(kernel, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """The ISAMIR program's input buffers: the kernel's inputs, the first one zero-padded
    and named ``pad`` when the kernel pads (the pad block is not a compute block)."""
    names = [name for name, _, _ in kernel.arg_specs()[:-1]]
    feeds = dict(zip(names, inputs))
    pad = int(kernel.params.get("pad", 0))
    if pad:
        feeds["pad"] = np.pad(feeds.pop(names[0]), [(0, 0), (pad, pad), (pad, pad), (0, 0)])
    return feeds


def torch_reference(kernel, inputs: list[np.ndarray]) -> np.ndarray:
    """The same convolution in torch (NCHW, ``groups=C`` for the depthwise stage)."""
    import torch
    import torch.nn.functional as F

    s = kernel.params
    x = torch.from_numpy(inputs[0]).permute(0, 3, 1, 2).double()
    if kernel.name == "depthwise_conv2d":
        w = torch.from_numpy(inputs[1]).double().permute(2, 0, 1)[:, None]
        y = F.conv2d(x, w, stride=s["stride"], padding=s["pad"], groups=s["c"])
    else:
        d, p = (torch.from_numpy(a).double() for a in inputs[1:])
        dw = F.conv2d(x, d.permute(2, 3, 0, 1).reshape(-1, 1, s["kernel"], s["kernel"]), stride=s["stride"],
                      padding=s["pad"], groups=s["c_in"])
        y = F.conv2d(dw, p.t()[:, :, None, None])
    return y.permute(0, 2, 3, 1).numpy()


def case(kernel, isa) -> dict:
    """Map, plan, simulate and model one kernel on ``isa``."""
    func = kernel.prim_func()
    t0 = time.perf_counter()
    mappings = find_mappings(func, isa, block=compute_blocks(func))
    model = CycleCostModel()
    plan = plan_mappings(func, mappings, model).on_one_program(model)
    map_s = time.perf_counter() - t0
    inputs = kernel.random_inputs(seed=1)
    t0 = time.perf_counter()
    out = simulate_plan(plan, program_inputs(kernel, inputs))
    sim_s = time.perf_counter() - t0
    got = next(iter(out.values()))
    ref = kernel.reference(*inputs)
    cycles = plan_cycles(plan)
    used = [m.instruction for m in plan.chosen]
    # ideal: the kernel's own FLOP on the fastest unit the plan uses, every cycle busy
    peak_flop_per_cycle = max(2 * i.throughput if i.kind == "matmul" else i.throughput for i in used)
    ideal = kernel.flops / peak_flop_per_cycle
    sizes = {("ksize" if k == "kernel" else k): v for k, v in kernel.params.items() if k != "dtype"}
    return {"kernel": kernel.name, **sizes,
            "mappings": len(mappings), "map_s": map_s,
            "plan": "; ".join(f"{b}: " + " + ".join(m.instruction.name for m in plan.cover(b))
                              for b in plan.blocks),
            "transforms": " > ".join(str(t) for t in next(iter(plan.blocks.values())).transforms),
            "calls": sum(m.calls for m in plan.chosen),
            "flops": kernel.flops, "cycles": cycles, "ideal_cycles": ideal,
            "unit_utilization": ideal / cycles,
            "max_err_numpy": float(np.max(np.abs(got - ref))),
            "max_err_torch": float(np.max(np.abs(got - torch_reference(kernel, inputs)))),
            "simulate_s": sim_s}


def main() -> None:
    args = bench_args(__doc__.splitlines()[0])
    isa = get_isa("accel")
    run = BenchRun("isa_map_accel", out_dir=args.out)
    kernels = [depthwise_conv2d(1, 32, 14, 3, pad=1), depthwise_conv2d(1, 64, 28, 3, stride=2, pad=1)]
    if not args.quick:
        kernels.append(separable_conv2d(1, 16, 32, 14, 3, pad=1))
    for k in kernels:
        run.add(case(k, isa))
    print(run.header())
    print(run.markdown(["kernel", "hw", "ksize", "stride", "mappings", "map_s", "plan", "calls", "flops", "cycles",
                        "ideal_cycles", "unit_utilization", "max_err_numpy", "max_err_torch", "simulate_s"]))
    print("\ncycles: the accel ISA's nominal per-call cost (latency + points / throughput) x calls; "
          "ideal: the kernel's FLOP at the fastest used unit's peak.")
    if run.out_path is not None:
        print(f"\nJSON lines: {run.out_path}")


if __name__ == "__main__":
    main()
