"""Picture of a Sextans schedule: each PE's stream split into non-zeros, RAW bubbles and padding (PNG).

Every PE streams ``stream_length`` slots (Sextans §3.4: all PEs walk one
pointer list Q, so each window is padded to its longest PE).  Per PE the
stacked bar shows its non-zeros, the bubbles its own schedule leaves for the
RAW distance, and the padding up to the longest list; a line marks the
stream length.  The numbers are the ``pe_nnz`` / ``pe_lengths`` /
``stream_length`` fields of :func:`tvm_ext.spmm_engine.evaluate`.

>>> import tempfile, pathlib
>>> from tvm_ext.spmm_engine import evaluate
>>> from tvm_ext.workloads import lap2d
>>> r = evaluate(lap2d(12), 8, check=False, pes=8)
>>> out = pathlib.Path(tempfile.mkdtemp()) / "pes.png"
>>> plot_pe_streams(r, out, title="lap2d(12)").stat().st_size > 0
True
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from tvm_ext.errors import InputError
from tvm_ext.figures import png_figure

__all__ = ["plot_pe_streams"]


def plot_pe_streams(result: Mapping[str, Any], path: str | os.PathLike, *, title: str = "") -> Path:
    """Write the per-PE stream length / bubbles bar chart of an ``evaluate`` result; returns the path."""
    try:
        own = np.asarray(result["pe_lengths"], dtype=np.int64)
        nnz = np.asarray(result["pe_nnz"], dtype=np.int64)
        length = int(result["stream_length"])
    except KeyError as err:
        raise InputError(f"plot_pe_streams: the result has no {err.args[0]!r} (pass what evaluate() returns)") from None
    if own.shape != nnz.shape or own.size == 0:
        raise InputError(f"plot_pe_streams: {own.size} PE lengths but {nnz.size} PE non-zero counts")
    pes = np.arange(own.size)
    raw, pad = own - nnz, length - own
    width = min(12.0, max(6.0, 0.12 * own.size + 3))
    with png_figure(path, figsize=(width, 4.2), dpi=110) as (_, ax):
        ax.bar(pes, nnz, 0.85, label="non-zeros", color="#3b75af")
        ax.bar(pes, raw, 0.85, bottom=nnz, label="RAW bubbles", color="#ef8636")
        ax.bar(pes, pad, 0.85, bottom=own, label="padding to the longest PE", color="#c8c8c8")
        ax.axhline(length, color="black", lw=0.8, ls="--", label=f"stream length {length:,}")
        ax.set_xlabel("processing engine (PE)")
        ax.set_ylabel("slots (cycles of the PE stage)")
        ax.set_xlim(-0.6, own.size - 0.4)
        util = float(nnz.sum()) / max(length * own.size, 1)
        head = f"{title}: " if title else ""
        ax.set_title(f"{head}per-PE stream, {own.size} PEs, slot use {100 * util:.1f}%", fontsize=10)
        ax.legend(fontsize=8, loc="lower right")
    return Path(path)
