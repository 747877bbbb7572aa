"""Fused or op-by-op Block CG: the rule ``BlockCG(fused="auto")`` applies.

Both schedules run the same host steps (``Λ``, ``Φ``: ``N x N`` solves) and
the same arithmetic; they differ in the words they move and the parallel
launches they pay.  The fused one moves fewer words (GOGETA §6.1's SEQ-Flex
over GOGETA-map, :func:`~schedules.fusion.cg_traffic.modelled_traffic`) in
fewer launches (3 kernels per iteration against 6), so:

* **DRAM-resident** (the iteration's working set, CSR plus four ``M x N``
  blocks, is above the last-level cache): time follows the words, the model
  says fused wins by the modelled traffic reduction, and fused is chosen
  without building or timing the op-by-op schedule (``rule="modelled"``);
* **cache-resident**: the saved words cost little, and what decides is each
  kernel's launch and per-part overhead on this machine, which the model
  does not know: both schedules are built and a few real iterations of each
  are timed in interleaved rounds; the pick is the median per-round ratio
  (``rule="measured"``), robust to load that drifts during the rounds.

>>> sel = modelled_selection(1_280_000, 8, 16_608_016, cache_bytes=32 << 20)   # a 1.3M-row FEM matrix
>>> sel.rule, sel.fused, round(sel.modelled_reduction, 2)
('modelled', True, 1.22)
>>> modelled_selection(4704, 8, 104_756, cache_bytes=32 << 20) is None          # nasa4704: measure
True
>>> FusionSelection(1e-3, 2e-3, ratios=(2.1, 0.9, 1.8)).fused                   # median ratio 1.8
True
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from schedules.fusion.cg_traffic import modelled_traffic

__all__ = ["FusionSelection", "working_set_bytes", "cache_bytes", "modelled_selection"]

#: Block vectors one iteration streams besides ``A``: X, R, P and S (``M x N`` each).
_BLOCKS = 4


@dataclass(frozen=True)
class FusionSelection:
    """Why ``fused="auto"`` picked its schedule.

    ``rule``: ``"measured"`` (both timed) or ``"modelled"`` (DRAM-resident:
    fused by the traffic model, nothing timed).  ``fused_seconds`` /
    ``unfused_seconds``: the median seconds per iteration of each schedule
    over the interleaved rounds (None when not measured); ``ratios``: each
    round's unfused / fused time; ``working_set_bytes`` and ``cache_bytes``
    the sizes the rule compared; ``modelled_reduction`` the modelled
    words-per-iteration ratio SEQ-Flex / GOGETA-map.

    >>> FusionSelection(3e-3, 2e-3).fused, FusionSelection(3e-3, 2e-3).speedup
    (False, 0.6666666666666666)
    """

    fused_seconds: float | None
    unfused_seconds: float | None
    ratios: tuple[float, ...] = ()
    rule: str = "measured"
    working_set_bytes: int = 0
    cache_bytes: int = 0
    modelled_reduction: float = 1.0

    @property
    def speedup(self) -> float:
        """Unfused over fused time (> 1: fusion pays): the median per-round ratio when measured,
        else the modelled traffic reduction."""
        if self.rule == "modelled":
            return self.modelled_reduction
        if self.ratios:
            return float(statistics.median(self.ratios))
        return self.unfused_seconds / self.fused_seconds

    @property
    def fused(self) -> bool:
        return self.speedup >= 1.0


def working_set_bytes(M: int, N: int, nnz: int, itemsize: int = 8) -> int:
    """Bytes one Block CG iteration streams at least once: ``A`` in CSR (values, int32 column
    indices, row pointers) and X, R, P, S (``M x N`` each).

    >>> working_set_bytes(100, 8, 460)
    31524
    """
    return int(nnz * (itemsize + 4) + (M + 1) * 4 + _BLOCKS * M * N * itemsize)


def cache_bytes(target: Any = None) -> int:
    """The last-level cache the solver's threads share: the target's L3 share per core times its cores.

    >>> cache_bytes({"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 4}) > 0
    True
    """
    from tvm_ext.target import hardware_facts

    return hardware_facts(target).llc_bytes


def modelled_selection(M: int, N: int, nnz: int, *, itemsize: int = 8, cache_bytes: int | None = None,
                       target: Any = None) -> FusionSelection | None:
    """The model's pick when it can make one: fused for a DRAM-resident working set whose modelled
    traffic fused reduces, else None (cache-resident: measure both schedules).

    ``cache_bytes`` defaults to :func:`cache_bytes` of ``target``.
    """
    cache = _cache_bytes(target) if cache_bytes is None else int(cache_bytes)
    ws = working_set_bytes(M, N, nnz, itemsize)
    if ws <= cache:
        return None
    reduction = float(modelled_traffic(M, N, nnz)["reduction"])
    if reduction <= 1.0:
        return None
    return FusionSelection(None, None, rule="modelled", working_set_bytes=ws, cache_bytes=cache,
                           modelled_reduction=reduction)


_cache_bytes = cache_bytes
