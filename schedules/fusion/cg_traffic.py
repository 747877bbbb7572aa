"""Modelled DRAM words per Block CG iteration: GOGETA §6.1's SEQ-Flex against GOGETA-map.

SEQ-Flex runs one op at a time; GOGETA-map runs the fusion groups of
:func:`~schedules.fusion.groups.plan_fusion`; neither keeps data on chip
between steps, which is what the CPU kernels do.  The fused-or-not rule
(:mod:`schedules.fusion.fusion_choice`) and the measured comparison
(:mod:`schedules.fusion.cg_compare`) both read it.
"""
from __future__ import annotations

from schedules.fusion.builders import block_cg_dag
from schedules.fusion.groups import plan_fusion
from schedules.fusion.traffic_model import TrafficArch, dram_traffic

__all__ = ["modelled_traffic"]


def modelled_traffic(M: int, N: int, nnz: int, *, sram_mb: float = 0.0) -> dict[str, float]:
    """Words per Block CG iteration: SEQ-Flex, GOGETA-map and their ratio (GOGETA §6.1 model).

    >>> t = modelled_traffic(10**6, 8, 5 * 10**6)
    >>> round(t["reduction"], 2)
    1.26
    """
    dag = block_cg_dag(1, M, N, max(int(nnz), 1), setup=False)
    plan = plan_fusion(dag)
    arch = TrafficArch.table4(sram_mb)
    seq = dram_traffic(dag, "SEQ-Flex", arch, plan).words
    fused = dram_traffic(dag, "GOGETA-map", arch, plan).words
    return {"seq_words": seq, "gogeta_words": fused, "reduction": seq / fused, "sram_mb": sram_mb}
