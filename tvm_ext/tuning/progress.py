"""A plain-text progress bar on stderr: trials done, best so far, the default, elapsed time.

Updated once per measured batch.  On a terminal the line is redrawn in place
(``\\r``); otherwise each update is its own line, so logs stay readable.
Nothing is written to stdout (``--json`` keeps stdout for its one object).

>>> import io
>>> buf = io.StringIO()
>>> bar = ProgressBar(8, "cycles", stream=buf, label="sextans")
>>> bar.update(4, best=1200.0, default=1500.0)
>>> "4/8" in buf.getvalue() and "1,200 cycles" in buf.getvalue()
True
"""
from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressBar", "format_cost"]

WIDTH = 24


def format_cost(cost: float | None, unit: str) -> str:
    """``1.23 ms`` / ``45.6 us`` for seconds, ``12,345 cycles`` for cycles, ``-`` for none."""
    if cost is None:
        return "-"
    if unit == "seconds":
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us")):
            if cost >= scale:
                return f"{cost / scale:.3g} {name}"
        return f"{cost * 1e9:.3g} ns"
    return f"{cost:,.0f} {unit}"


class ProgressBar:
    """``[#####-----] done/total  best X  default Y (Zx)  Ns`` on ``stream`` (stderr)."""

    def __init__(self, total: int, unit: str, *, stream: TextIO | None = None, label: str = "",
                 enabled: bool = True):
        self.total = max(int(total), 0)
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.label = label
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._drawn = False

    def render(self, done: int, best: float | None, default: float | None) -> str:
        frac = min(done / self.total, 1.0) if self.total else 1.0
        fill = int(round(frac * WIDTH))
        bar = "#" * fill + "-" * (WIDTH - fill)
        text = f"[{bar}] {done}/{self.total}  best {format_cost(best, self.unit)}"
        if default is not None:
            text += f"  default {format_cost(default, self.unit)}"
            if best:
                text += f" ({default / best:.2f}x)"
        text += f"  {time.perf_counter() - self.t0:.0f}s"
        return f"{self.label}: {text}" if self.label else text

    def update(self, done: int, *, best: float | None, default: float | None = None) -> None:
        if not self.enabled:
            return
        line = self.render(done, best, default)
        if self._tty:
            self.stream.write("\r" + line + "\033[K")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._drawn = True

    def close(self) -> None:
        if self.enabled and self._tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
