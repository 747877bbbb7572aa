"""``tvm-ext fusion report [--sram MB ...] [--plots DIR]``: GOGETA's DRAM-traffic model.

Prints the Fig. 10/11/12 tables, the geomean reduction against the paper's,
Table 1 and the model's assumptions.  All logic lives in
:func:`schedules.fusion.fusion_report`.  With ``--json`` the keys include
``geomean_reduction`` (GOGETA-map vs SEQ-Flex over the Fig. 10 sweep) and
``table1``.  Other ``fusion`` actions are added as further subparsers.
"""
from __future__ import annotations

from tvm_ext.cli.args import real
from tvm_ext.cli.output import Output
from tvm_ext.errors import ConfigError


def register(subparsers, common) -> None:
    p = subparsers.add_parser("fusion", parents=[common],
                              help="GOGETA inter-operation reuse: einsum-DAG analyses and DRAM-traffic model")
    sub = p.add_subparsers(dest="fusion_command", metavar="ACTION")
    sub.required = True
    r = sub.add_parser("report", parents=[common],
                       help="Fig. 10/11/12 tables, geomean vs the paper's 6.7x, Table 1, assumptions")
    r.add_argument("--sram", nargs="+", type=real("SRAM size (MB)", 0.0, 1e6), metavar="MB", default=None,
                   help="SRAM sizes in MB for the Fig. 10 sweep (default: Table 4's 1 4 16)")
    r.add_argument("--plots", metavar="DIR", default=None,
                   help="also write fig10/fig11/fig12 PNGs to DIR (needs matplotlib)")
    r.set_defaults(func=run_report)


def run_report(args) -> Output:
    import math

    from schedules.fusion import fusion_report
    from tvm_ext.workloads import GOGETA_TABLE4

    sram = args.sram if args.sram is not None else list(GOGETA_TABLE4.sram_sweep_mb)
    for mb in sram:
        if not math.isfinite(mb) or mb < 0:
            raise ConfigError(f"--sram: SRAM size must be a finite number of MB >= 0, got {mb}")
    data, text = fusion_report(sram_mb=sram, plots_dir=args.plots)
    return Output(data, text)
