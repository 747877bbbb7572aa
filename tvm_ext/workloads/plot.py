"""Pictures of a sparse matrix: where its non-zeros are, and how long its rows are (matplotlib, PNG).

The spy plot is a density image of the non-zeros binned onto at most
``bins x bins`` cells (each cell's colour is its count), so its cost and size
are bounded for any matrix; the histogram is of the row lengths (non-zeros
per row), the quantity the format selector reads first.

>>> import tempfile, pathlib
>>> from tvm_ext.workloads import lap2d
>>> out = pathlib.Path(tempfile.mkdtemp()) / "lap.png"
>>> plot_matrix(lap2d(10), out, title="lap2d(10)").stat().st_size > 0
True
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from tvm_ext.figures import png_figure
from tvm_ext.workloads.validation import canonical_csr

__all__ = ["plot_matrix"]


def plot_matrix(A: Any, path: str | os.PathLike, *, title: str = "", bins: int = 400) -> Path:
    """Write a PNG with ``A``'s binned spy plot and its row-length histogram; returns the path."""
    A = canonical_csr(A, what="plot_matrix(A)")
    m, k = A.shape
    row_len = np.diff(A.indptr)
    rows = np.repeat(np.arange(m), row_len)
    with png_figure(path, ncols=2, figsize=(11, 4.8)) as (fig, (spy, hist)):
        if A.nnz:
            br, bc = max(1, min(bins, m)), max(1, min(bins, k))
            counts, _, _ = np.histogram2d(rows, A.indices, bins=(br, bc), range=((0, m), (0, k)))
            image = np.ma.masked_equal(counts, 0)
            shown = spy.imshow(image, extent=(0, k, m, 0), aspect="auto", interpolation="nearest",
                               cmap="viridis")
            fig.colorbar(shown, ax=spy, label="non-zeros per cell")
        spy.set_xlim(0, max(k, 1))
        spy.set_ylim(max(m, 1), 0)
        spy.set_xlabel("column")
        spy.set_ylabel("row")
        spy.set_title(f"{title} {m:,} x {k:,}, {A.nnz:,} non-zeros".strip())
        hist.hist(row_len, bins=min(60, max(1, int(row_len.max(initial=0)) + 1)), color="tab:blue")
        hist.set_xlabel("non-zeros per row")
        hist.set_ylabel("rows")
        hist.set_yscale("log")
        hist.set_title(f"row lengths: mean {row_len.mean() if m else 0:.1f}, max {int(row_len.max(initial=0))}")
    return Path(path)
