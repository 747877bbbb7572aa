"""PNG figures with matplotlib's non-interactive backend: draw inside a ``with`` block, saved on leaving it.

matplotlib is an optional dependency (``tvm-ext[bench]``); without it the
first figure raises :class:`~tvm_ext.errors.ConfigError` saying how to install it.

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "sub" / "line.png"
>>> with png_figure(out) as (fig, ax):
...     _ = ax.plot([0, 1], [1, 0])
>>> out.stat().st_size > 0
True
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterator

from tvm_ext.errors import ConfigError

__all__ = ["png_figure", "pyplot"]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed).

    >>> pyplot().get_backend().lower()
    'agg'
    """
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install 'tvm-ext[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextlib.contextmanager
def png_figure(path: str | os.PathLike, *, ncols: int = 1, nrows: int = 1, figsize: tuple[float, float] = (7, 4.5),
               dpi: int = 100, sharex: bool = False) -> Iterator[tuple[Any, Any]]:
    """A figure of ``nrows`` x ``ncols`` axes; yields ``(fig, axes)`` (``axes`` as ``plt.subplots`` gives them).

    When the block ends without an error the figure is laid out and written to
    ``path`` (``dpi`` dots per inch, parent folders made); the figure is closed
    either way.

    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "two.png"
    >>> with png_figure(out, ncols=2, figsize=(8, 3)) as (fig, (left, right)):
    ...     _ = left.bar([0, 1], [2, 3]), right.hist([1, 2, 2, 3])
    >>> out.exists()
    True
    """
    plt = pyplot()
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, sharex=sharex)
    try:
        yield fig, axes
        fig.tight_layout()
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=dpi)
    finally:
        plt.close(fig)
