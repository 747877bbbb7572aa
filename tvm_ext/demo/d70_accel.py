"""Demo: the ISA Mapper accelerator (BYOC target 1), a GEMM and a short GRU, this scheduler vs the kernel library."""
from __future__ import annotations

from tvm_ext.markdown import table

TITLE = "ISA Mapper accelerator: GEMM 512x64x512 and GRU H=256 B=8 T=8 on the default system graph"


def _row(name: str, r: dict, peer: str) -> list:
    return [name, round(r["cycles"]), round(r["cycles_kl"]), round(r["speedup_vs_kl"], 2),
            round(100 * r["utilisation"]["matrix"], 1), round(100 * r["utilisation_kl"]["matrix"], 1),
            f"{r['max_rel_err']:.1e}", peer]


def run():
    from tvm_ext.accel import load_system, run_gemm, run_gru

    system = load_system("default")
    g = run_gemm(512, 64, 512, system=system)
    r = run_gru(8, 256, 8, system=system)
    data = {"system": system.name,
            "gemm": {k: g[k] for k in ("cycles", "cycles_kl", "speedup_vs_kl", "max_rel_err", "utilisation")},
            "gru": {k: r[k] for k in ("cycles", "cycles_kl", "speedup_vs_kl", "max_rel_err", "utilisation",
                                      "simulated_steps")}}
    hbm = lambda d: sum(v for k, v in d.items() if "hbm" in k)  # noqa: E731
    lines = [
        f"system: {system.summary()}",
        table(["case", "cycles (ours)", "cycles (KL)", "KL/ours", "matrix util % (ours)", "matrix util % (KL)",
               "max rel err vs numpy", "peer"],
              [_row("GEMM 512x64x512", g, "kernel library, same simulator"),
               _row("GRU H=256 B=8, 8 steps", r, "kernel library, same simulator")]),
        f"GRU: {r['stream_lengths']['priming']:,}-instruction priming, {r['stream_lengths']['recursive']:,}-"
        f"instruction recursive iteration replayed {r['steps'] - 2}x ({r['simulated_steps']} steps simulated, "
        f"the rest exact repeats); HBM bytes per step ours {hbm(r['bytes_by_level']) / r['steps'] / 1e3:,.0f} KB "
        f"vs KL {hbm(r['bytes_by_level_kl']) / r['steps'] / 1e3:,.0f} KB (the weights are "
        f"{4 * (2 * 256 * 768 + 2 * 768) / 1e3:,.0f} KB: the recurrent schedule keeps most of them on chip)",
        f"GEMM: {g['tiles']:,} compute tiles; HBM bytes ours {hbm(g['bytes_by_level']) / 1e6:.1f} MB vs KL "
        f"{hbm(g['bytes_by_level_kl']) / 1e6:.1f} MB",
    ]
    return data, lines
