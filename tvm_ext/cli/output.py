"""What a CLI command returns: a JSON-able dict plus its human rendering.

>>> out = Output({"rows": 3}, "rows: 3")
>>> out.data["rows"], out.text
(3, 'rows: 3')
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

__all__ = ["Output", "table"]


@dataclass
class Output:
    """``data`` is printed with ``--json``; ``text`` otherwise."""

    data: dict[str, Any]
    text: str = ""
    extra_lines: list[str] = field(default_factory=list)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v == 0 or 1e-3 <= abs(v) < 1e6:
            return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.1f}"
        return f"{v:.3e}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return "-" if v is None else str(v)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Render a markdown table (numbers formatted compactly).

    >>> print(table(["a", "b"], [[1, 2.5]]))
    | a | b |
    |---|---|
    | 1 | 2.5 |
    """
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
