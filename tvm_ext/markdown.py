"""Markdown tables: the one renderer the CLI, the reports and ``bench/`` share.

>>> fmt(2.5e-5), fmt(12345.678)
('2.500e-05', '12,345.7')
>>> print(table(["a", "b"], [[1, 2.5]]))
| a | b |
|---|---|
| 1 | 2.5 |
"""
from __future__ import annotations

import math
from typing import Any, Sequence

__all__ = ["table", "fmt"]


def fmt(v: Any) -> str:
    """Compact text for one table cell (thousands separators, 4 significant digits)."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v == 0 or 1e-3 <= abs(v) < 1000:
            return f"{v:.4g}"
        return f"{v:,.1f}" if 1000 <= abs(v) < 1e9 else f"{v:.3e}"
    return str(v)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Render a markdown table, numbers formatted with :func:`fmt`."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
