"""A picture of an iterative solve: each column's relative residual against the iteration (PNG).

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "res.png"
>>> plot_residuals([[1.0, 1.0], [0.1, 0.3], [1e-3, 1e-2]], out, tol=1e-2).stat().st_size > 0
True
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

from tvm_ext.errors import InputError
from tvm_ext.figures import png_figure

__all__ = ["plot_residuals"]


def plot_residuals(history: Sequence[Sequence[float]], path: str | os.PathLike, *, tol: float | None = None,
                   title: str = "") -> Path:
    """Write ``history[k][j]`` (relative residual of column ``j`` after iteration ``k``) as a log plot."""
    rows = [np.atleast_1d(np.asarray(r, dtype=np.float64)) for r in history]
    width = max((r.size for r in rows), default=0)
    # a block solve's history may end with one-column rows (columns finished alone): the block rows are plotted
    h = np.asarray([r for r in rows if r.size == width], dtype=np.float64).reshape(-1, width)
    if h.ndim != 2 or h.shape[0] == 0:
        raise InputError(f"plot_residuals: expected iterations x columns residuals, got shape {h.shape}")
    with png_figure(path) as (_, ax):
        h = np.where(h > 0, h, np.nan)      # a zero residual (a converged, deflated column) has no log
        for j in range(h.shape[1]):
            ax.semilogy(np.arange(h.shape[0]), h[:, j], lw=1.2, label=f"column {j}" if h.shape[1] <= 10 else None)
        if tol:
            ax.axhline(tol, color="black", ls="--", lw=1, label=f"rtol {tol:g}")
        ax.set_xlabel("iteration")
        ax.set_ylabel("||r|| / ||b||")
        ax.set_title(title or "relative residual per column")
        if h.shape[1] <= 10 or tol:
            ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    return Path(path)
