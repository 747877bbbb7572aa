"""Progress on stderr: the tuner's bar (trials done, best so far, the default, elapsed time) and a status line.

:class:`StatusLine` is the bar of long multi-step runs (``tvm-ext demo``,
``tvm-ext report``, the ``bench/`` scripts); it is drawn only on a terminal.

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

__all__ = ["ProgressBar", "StatusLine", "bar_text", "format_cost"]

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
        text = f"{bar_text(done, self.total)}  best {format_cost(best, self.unit)}"
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


def bar_text(done: int, total: int) -> str:
    """``[######------------------] 3/12``.

    >>> bar_text(1, 4)
    '[######------------------] 1/4'
    """
    frac = min(done / total, 1.0) if total else 1.0
    fill = int(round(frac * WIDTH))
    return f"[{'#' * fill}{'-' * (WIDTH - fill)}] {done}/{total}"


class _ClearingStdout:
    """``sys.stdout`` while a :class:`StatusLine` is drawn: each write first erases the status line."""

    def __init__(self, status: "StatusLine", wrapped: TextIO):
        self._status, self._wrapped = status, wrapped

    def write(self, text: str) -> int:
        with self._status._lock:
            self._status._erase()
            return self._wrapped.write(text)

    def __getattr__(self, name: str):
        return getattr(self._wrapped, name)


class StatusLine:
    """A status line on a terminal's stderr, redrawn in place while a long step runs.

    ``[####------] 3/8  label: text  12s`` (without a ``total``:
    ``label: text  12s``).  A background thread redraws it every ``tick_s``
    seconds, so the elapsed time moves during a long step.  Only drawn when
    ``stream`` (default stderr) is a terminal: redirected or piped runs, and
    ``--json`` output on stdout, see none of it.  Inside the ``with`` block
    ``sys.stdout`` erases the line before each write, so results printed
    meanwhile are never glued to it.  :meth:`log` writes a permanent line
    (also when the status line is not drawn).

    >>> import io
    >>> buf = io.StringIO()
    >>> with StatusLine("demo", total=3, stream=buf) as status:
    ...     status.update(1, "running sparse")
    ...     status.log("sparse done")
    >>> buf.getvalue()            # not a terminal: only the permanent line
    'sparse done\\n'
    >>> StatusLine("demo", total=3, stream=buf).render(1, "running sparse", 4.2)
    '[########----------------] 1/3  demo: running sparse  4s'
    """

    def __init__(self, label: str = "", *, total: int | None = None, stream: TextIO | None = None,
                 enabled: bool | None = None, tick_s: float = 0.5):
        import threading

        self.label, self.total, self.tick_s = label, total, tick_s
        self.stream = stream if stream is not None else sys.stderr
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = tty if enabled is None else bool(enabled) and tty
        self.done, self.text = 0, ""
        self.t0 = time.perf_counter()
        self._lock = threading.RLock()
        self._drawn = False
        self._stop = threading.Event()
        self._thread = None
        self._stdout = None

    def render(self, done: int, text: str, elapsed: float) -> str:
        """The line for ``done`` steps, the current step's ``text`` and ``elapsed`` seconds."""
        head = f"{bar_text(done, self.total)}  " if self.total is not None else ""
        who = f"{self.label}: {text}" if self.label and text else (self.label or text)
        return f"{head}{who}  {elapsed:.0f}s"

    def _erase(self) -> None:
        if self._drawn:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._drawn = False

    def _draw(self) -> None:
        if not self.enabled:
            return
        with self._lock:
            line = self.render(self.done, self.text, time.perf_counter() - self.t0)
            self.stream.write("\r" + line + "\033[K")
            self.stream.flush()
            self._drawn = True

    def update(self, done: int | None = None, text: str | None = None) -> None:
        """Set the steps done and/or the current step's text; redraw."""
        if done is not None:
            self.done = int(done)
        if text is not None:
            self.text = text
        self._draw()

    def log(self, message: str) -> None:
        """A permanent line on the stream (the status line is redrawn below it)."""
        with self._lock:
            self._erase()
            self.stream.write(message + "\n")
            self.stream.flush()
        self._draw()

    def _tick(self) -> None:
        while not self._stop.wait(self.tick_s):
            self._draw()

    def __enter__(self) -> "StatusLine":
        import threading

        if self.enabled:
            self._stdout = sys.stdout
            sys.stdout = _ClearingStdout(self, sys.stdout)
            self._thread = threading.Thread(target=self._tick, name="tvm-ext-status", daemon=True)
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop redrawing, erase the line and give ``sys.stdout`` back."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            self._erase()
        if self._stdout is not None:
            if isinstance(sys.stdout, _ClearingStdout) and sys.stdout._status is self:
                sys.stdout = self._stdout
            self._stdout = None

    def __exit__(self, *exc) -> None:
        self.close()
