"""ISA Mapper (seed 004): its checkable claims against :mod:`tensorize` and :mod:`tvm_ext.accel`.

Ours comes from the mapper (which built-in kernels get a covering plan on the
accelerator's instructions) and from the accelerator's simulator: this
scheduler against the kernel library (:mod:`tvm_ext.accel.kernel_library`)
on GEMMs and GRUs (:func:`~tvm_ext.accel.run_gemm`, :func:`~tvm_ext.accel.run_gru`).
The paper's machine and library are confidential; the system graph models
its description, so ratios, not cycles, are compared.

>>> [k for k in MAPPED_KERNELS][:2]
['conv1d', 'conv2d']
"""
from __future__ import annotations

from typing import Any, Sequence

from .claim import ClaimResult, compare, holds

__all__ = ["isa_mapper_claims", "mapped_kernels", "MAPPED_KERNELS", "TUNED_GEMM", "GEMMS", "GRUS", "PAPER"]

P = "ISA Mapper"

#: The paper's numbers.
PAPER = {
    "kl_over_isam_tuned": 5.0,      # §6.2.1, Fig. 3(a): the library "can perform well over five times faster"
    "isam_over_kl": (2.0, 5.0),     # abstract: "two to five times better performance on DeepBench sized GEMMs and GRU"
}

#: The kernels §6.1 maps ("depthwise and separable depthwise convolution and GRU cells", convolutions).
MAPPED_KERNELS = ("conv1d", "conv2d", "depthwise", "sepconv", "gru")
#: A GEMM the library would be tuned for: every dimension a multiple of the 32-wide instruction and of the units.
TUNED_GEMM = (512, 512, 512)
#: DeepBench-like GEMMs (skinny, ragged) and GRUs (hidden, batch) of the quick benchmark.
GEMMS = ((1760, 16, 1760), (1024, 256, 1024), (3072, 16, 1024))
GRUS = ((256, 8), (512, 1), (512, 16), (1024, 32))


def mapped_kernels(kernels: Sequence[str] = MAPPED_KERNELS, isa: str = "accel") -> dict[str, bool]:
    """Kernel -> whether the mapper finds mappings that together compute every block of it on ``isa``."""
    from tensorize.instructions import get_isa
    from tensorize.kernels import compute_blocks, make_kernel, mapping_rank, plan_mappings
    from tensorize.search import find_mappings
    from tvm_ext.errors import TvmExtError

    target = get_isa(isa)
    out = {}
    for name in kernels:
        func = make_kernel(name).prim_func()
        blocks = compute_blocks(func) or None
        try:
            plan = plan_mappings(func, sorted(find_mappings(func, target, block=blocks), key=mapping_rank))
            out[name] = bool(plan.blocks)
        except TvmExtError:
            out[name] = False
    return out


def _hbm(run: dict, suffix: str) -> float:
    return sum(v for k, v in run[f"bytes_by_level{suffix}"].items() if "hbm" in k)


def _gemm(system: Any, tuned_shape: tuple[int, int, int], shapes: Sequence[tuple[int, int, int]]
          ) -> list[ClaimResult]:
    from tvm_ext.accel import load_system, run_gemm

    hbm_bw = sum(m.bandwidth for m in load_system(system).memories if m.kind == "hbm")
    tuned = run_gemm(*tuned_shape, system=system, check=False)
    util, util_kl = tuned["utilisation"]["matrix"], tuned["utilisation_kl"]["matrix"]
    others = [run_gemm(*s, system=system, check=False) for s in shapes]
    best = max(others + [tuned], key=lambda r: r["speedup_vs_kl"])
    shape = "x".join(str(best[k]) for k in "MNK")
    return [
        compare(P, f"kernel library vs this scheduler on a tuned GEMM ({'x'.join(map(str, tuned_shape))})",
                "§6.2.1, Fig. 3(a)", PAPER["kl_over_isam_tuned"], 1 / tuned["speedup_vs_kl"], unit="x",
                reason=f"the library wins: its output-stationary kernels keep {util_kl:.0%} of the matrix units "
                       f"busy, ours {util:.0%}, so no more than {1 / util:.2f}x was left to win; the paper's gap "
                       "came from ISAM heuristics that left one unit of a pair idle (§6.2.1), which ours does not"),
        compare(P, "best speed-up over the kernel library, GEMMs", "abstract, Fig. 3(d)", PAPER["isam_over_kl"],
                best["speedup_vs_kl"], tolerance=0.0, unit="x",
                reason=f"at {shape}: HBM is busy {_hbm(best, '') / hbm_bw / best['cycles']:.0%} of our cycles "
                       f"(the library moves {_hbm(best, '_kl') / _hbm(best, ''):.2f}x our bytes); a lone GEMM has "
                       "no cross-op reuse to win, and both use every unit"),
    ]


def _gru(system: Any, steps: int, shapes: Sequence[tuple[int, int]]) -> list[ClaimResult]:
    from tvm_ext.accel import load_system, run_gru

    sysg = load_system(system)
    rf = sum(m.capacity for m in sysg.memories if m.kind == "regfile")
    runs = [(h, b, run_gru(steps, h, b, system=sysg, check=False)) for h, b in shapes]
    wins = [(h, b) for h, b, r in runs if r["speedup_vs_kl"] > 1]
    losses = [f"H={h} B={b} ({r['speedup_vs_kl']:.2f}x; weights {4 * 3 * h * 2 * h / rf:.2f}x the register "
              f"files, matrix units busy {r['utilisation']['matrix']:.0%} ours vs "
              f"{r['utilisation_kl']['matrix']:.0%} library)" for h, b, r in runs if r["speedup_vs_kl"] <= 1]
    h, b, top = max(runs, key=lambda x: x[2]["speedup_vs_kl"])
    hbm_bw = sum(m.bandwidth for m in sysg.memories if m.kind == "hbm")
    reload = (_hbm(top, "_kl") - _hbm(top, "")) / hbm_bw / top["cycles_kl"]
    return [
        holds(P, f"this scheduler beats the kernel library on every GRU ({steps} steps)", "§6.2.2, Fig. 4",
              "every case", not losses, f"{len(wins)}/{len(runs)} cases",
              reason=("the recurrent schedule keeps weights on chip and overlaps a step's ops, which wins on "
                      "small GRUs; the library's output-stationary kernels win at " + "; ".join(losses))
              if losses else "the recurrent schedule keeps the weights on chip; the library reloads them every step"),
        compare(P, f"best speed-up over the kernel library, GRUs ({steps} steps)", "abstract, Fig. 4",
                PAPER["isam_over_kl"], top["speedup_vs_kl"], tolerance=0.0, unit="x",
                reason=f"at H={h} B={b}: the library's per-op calls leave the units idle between ops (busy "
                       f"{top['utilisation_kl']['matrix']:.0%} vs ours {top['utilisation']['matrix']:.0%}); "
                       f"its weight reloads take {reload:.0%} of its cycles at the modelled HBM bandwidth"),
    ]


def isa_mapper_claims(*, system: Any = "default", gru_steps: int = 16,
                      tuned_gemm: tuple[int, int, int] = TUNED_GEMM, gemms: Sequence[tuple[int, int, int]] = GEMMS,
                      grus: Sequence[tuple[int, int]] = GRUS,
                      kernels: Sequence[str] = MAPPED_KERNELS) -> list[ClaimResult]:
    """The ISA Mapper's checkable claims on ``system`` (a system graph or config name); the cases default to
    :data:`TUNED_GEMM`, :data:`GEMMS`, :data:`GRUS` and :data:`MAPPED_KERNELS`."""
    found = mapped_kernels(kernels)
    ok = [k for k, v in found.items() if v]
    return [holds(P, "the mapper finds the expected matrix-instruction mappings for every kernel", "§6.1",
                  "all tested kernels", len(ok) == len(found), f"{len(ok)}/{len(found)} ({', '.join(ok)})",
                  reason="feedback-driven transforms (factorization, pad, fuse) expose the matmul in each")
            ] + _gemm(system, tuned_gemm, gemms) + _gru(system, gru_steps, grus)
