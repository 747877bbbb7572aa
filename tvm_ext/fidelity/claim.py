"""One quantitative claim of a paper set against the number this project computes for it.

A :class:`ClaimResult` holds the paper's number (a constant with its
citation), ours (computed in this run by the project's own models and
executors), a verdict and a one-line reason for any difference.  The verdict
comes from :func:`compare`: a number within ``tolerance`` of the paper's (or
inside the paper's range) *agrees*, otherwise it *differs*; a yes/no claim
*holds* or *does not hold*.

>>> r = compare("Sextans", "peak GFLOP/s", "Fig. 7", 181.1, 177.0, tolerance=0.05, reason="fill/drain")
>>> r.verdict, r.ours_text
('agrees', '177')
>>> compare("X", "c", "s", (2.9, 25.2), 1.1).verdict
'differs'
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from tvm_ext.markdown import fmt, table

__all__ = ["ClaimResult", "compare", "holds", "claims_markdown", "VERDICTS"]

VERDICTS = ("agrees", "differs", "holds", "does not hold")


@dataclass(frozen=True)
class ClaimResult:
    """A paper's claim, its number, ours, the verdict and why they differ (one line)."""

    paper: str
    claim: str
    where: str               # section, figure or table of the paper
    paper_text: str          # the paper's number as the table prints it
    ours_text: str           # ours, as the table prints it
    ours: float | bool | None  # ours as a value (what tests compare with the underlying API)
    verdict: str             # one of VERDICTS
    reason: str              # one line: why ours differs (or what makes it agree)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(v: Any) -> str:
    if isinstance(v, tuple):
        return "-".join(_text(x) for x in v)
    if isinstance(v, float) and abs(v) >= 1e5:
        return f"{v:.3g}"
    return fmt(v)


def compare(paper: str, claim: str, where: str, paper_value: float | tuple[float, float], ours: float, *,
            tolerance: float = 0.1, unit: str = "", reason: str = "", ours_text: str | None = None) -> ClaimResult:
    """A numeric claim: ``agrees`` when ``ours`` is within ``tolerance`` (relative) of ``paper_value``, or
    inside it when it is a ``(low, high)`` range; ``differs`` otherwise.

    >>> compare("P", "ratio", "Fig. 1", 5.0, 5.2, unit="x").ours_text
    '5.2x'
    """
    if isinstance(paper_value, tuple):
        lo, hi = paper_value
        ok = lo * (1 - tolerance) <= ours <= hi * (1 + tolerance)
    else:
        ok = math.isfinite(ours) and abs(ours - paper_value) <= tolerance * abs(paper_value)
    return ClaimResult(paper, claim, where, _text(paper_value) + unit,
                       ours_text if ours_text is not None else _text(ours) + unit, float(ours),
                       "agrees" if ok else "differs", reason)


def holds(paper: str, claim: str, where: str, paper_text: str, ours: bool, ours_text: str, *,
          reason: str = "") -> ClaimResult:
    """A yes/no claim (an ordering, "in every case", "hits the ideal"): ``holds`` or ``does not hold``.

    >>> holds("P", "ours wins every GRU", "Fig. 4", "all", False, "2/3").verdict
    'does not hold'
    """
    return ClaimResult(paper, claim, where, paper_text, ours_text, bool(ours),
                       "holds" if ours else "does not hold", reason)


def claims_markdown(results: Sequence[ClaimResult]) -> str:
    """The claim | paper | ours table (markdown), one row per claim, grouped by paper."""
    cell = lambda v: str(v).replace("|", "\\|")  # noqa: E731 - a bar inside a cell would end it
    return table(["paper", "claim", "where", "paper", "ours", "verdict", "why they differ / agree"],
                 [[cell(v) for v in (r.paper, r.claim, r.where, r.paper_text, r.ours_text, r.verdict, r.reason)]
                  for r in results])
