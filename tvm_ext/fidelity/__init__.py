"""Fidelity: every quantitative claim of the four papers that can be checked here, against ours.

:func:`paper_claims` computes one :class:`ClaimResult` per claim, "ours"
always by the project's own models and executors in this run (GOGETA's
traffic model, the Sextans engine model, the ISA Mapper's mapper and
accelerator simulator, the sparse inspectors, selector and solvers); the
papers' numbers are constants with their section, figure or table.
:func:`claims_markdown` renders the claim | paper | ours table that
``tvm-ext report --claims`` prints and the README shows.  :data:`NOT_CHECKED`
lists the claims that need hardware or data this project does not have.

>>> sorted(PAPERS)
['dissertation', 'gogeta', 'isa_mapper', 'sextans']
"""
from __future__ import annotations

from typing import Callable, Sequence

from tvm_ext.errors import ConfigError

from .claim import VERDICTS, ClaimResult, claims_markdown, compare, holds
from .dissertation import dissertation_claims
from .gogeta import gogeta_claims
from .isa_mapper import isa_mapper_claims
from .sextans import sextans_claims

__all__ = ["ClaimResult", "compare", "holds", "claims_markdown", "paper_claims", "PAPERS", "NOT_CHECKED",
           "VERDICTS", "not_checked_markdown"]

#: Paper key -> the function computing its claims (each takes keyword options, all with quick defaults).
PAPERS: dict[str, Callable[..., list[ClaimResult]]] = {
    "gogeta": gogeta_claims, "sextans": sextans_claims, "isa_mapper": isa_mapper_claims,
    "dissertation": dissertation_claims,
}

#: (paper, claim, why it cannot be checked here).
NOT_CHECKED: tuple[tuple[str, str, str], ...] = (
    ("Sextans", "2.50x geomean over K80, 1.14x Sextans-P over V100 (§4.2)", "needs the GPUs' measured times"),
    ("Sextans", "FPGA resources: 80% of URAMs, 2,048 BRAMs (§3.6)", "a synthesis result, not a model output"),
    ("ISA Mapper", "ISAM-TVM reaches 85% of LIBXSMM on ResNet-50 layers (§7)",
     "needs LIBXSMM and a 28-core Xeon; `python -m bench.tensorize_conv` compares our tensorized convolutions "
     "with torch on this CPU"),
    ("Venkat (dissertation)", "GPU SpMV vs CUSP: CSR 1.13x/1.15x, COO 92%, DIA within 5%, DIA up to 2x ELL "
     "(§4.3, §5.4)", "needs the C2050/K20c GPUs and CUSP"),
    ("Venkat (dissertation)", "BCSR within 1% of OSKI, inspector 1.5x faster (§5.4)", "needs OSKI"),
    ("Venkat (dissertation)", "CSB SpMM + SpMM^T 1.06x the manual code (§6.1)", "the 430 M-nnz matrix is not public"),
    ("Venkat (dissertation)", "SGD BlkDiag executor 1.26x Diag on a K40c (§6.2)", "needs the GPU and the datasets; "
     "`python -m bench.sparse_recipes` times both on this CPU"),
    ("Venkat (dissertation)", "the GS dependence inspector is O(nnz) (§7.2)", "a timing trend that needs a quiet "
     "machine; `python -m bench.level_sets` prints its ns per non-zero over growing matrices"),
    ("Venkat (dissertation)", "GS 5.26x over serial, 3.95x over MKL, 74.9% of STREAM on 12 cores (§7.4)",
     "needs the 12-core Edison socket; `python -m bench.level_sets` measures our level-set sweeps against "
     "the serial one here"),
)


def paper_claims(papers: Sequence[str] | None = None, *,
                 on_paper: Callable[[str, int, int], None] | None = None) -> list[ClaimResult]:
    """Every checkable claim of ``papers`` (default all four), computed now.

    ``on_paper(name, index, total)`` is called before each paper's claims run.
    """
    names = list(papers) if papers else list(PAPERS)
    unknown = [p for p in names if p not in PAPERS]
    if unknown:
        raise ConfigError(f"unknown paper {unknown[0]!r}; choose from {', '.join(PAPERS)}")
    out: list[ClaimResult] = []
    for i, name in enumerate(names):
        if on_paper:
            on_paper(name, i, len(names))
        out += PAPERS[name]()
    return out


def not_checked_markdown() -> str:
    """The claims left out of the table, and why (a markdown list)."""
    return "\n".join(f"- {paper}: {claim}: {why}." for paper, claim, why in NOT_CHECKED)
