"""A picture of a tuning session: the best cost found so far against the trial, next to the default's (PNG).

The costs are the database's records in the order they were measured (knob
records of the task, or the MetaSchedule records of its one workload); a
failed trial (no cost) keeps the best so far unchanged.

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "tune.png"
>>> plot_best_so_far([3.0, None, 2.0, 2.5, 1.0], 2.8, "seconds", out).stat().st_size > 0
True
"""
from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from tvm_ext.errors import InputError
from tvm_ext.figures import png_figure

__all__ = ["plot_best_so_far", "session_costs"]


def session_costs(db_dir: str | os.PathLike, task: str, engine: str) -> list[float | None]:
    """Every trial's cost of ``task`` in the database at ``db_dir``, in measured order (None: failed)."""
    from tvm_ext.tuning.database import check_database

    rep = check_database(db_dir)
    if engine == "knobs":
        return [r.get("cost") for r in rep.knob_records if r["task"] == task]
    workloads = sorted(set(rep.ms_workloads))
    if len(workloads) != 1:
        raise InputError(f"tune --plot: the database holds {len(workloads)} MetaSchedule workloads; "
                         "plot a database of one task")
    return [c for _, c in rep.ms_records]


def plot_best_so_far(costs: Sequence[float | None], default: float | None, unit: str,
                     path: str | os.PathLike, *, title: str = "") -> Path:
    """Write the running minimum of ``costs`` (and ``default`` as a line) to a PNG; returns the path."""
    vals = np.array([c if c is not None and math.isfinite(c) and c > 0 else np.inf for c in costs], dtype=float)
    if not np.isfinite(vals).any():
        raise InputError("tune --plot: no trial of this task has a cost to plot")
    best = np.minimum.accumulate(vals)
    trials = np.arange(1, len(vals) + 1)
    with png_figure(path) as (_, ax):
        ok = np.isfinite(vals)
        ax.scatter(trials[ok], vals[ok], s=8, color="tab:gray", alpha=0.5, label="trial")
        shown = np.isfinite(best)
        ax.step(trials[shown], best[shown], where="post", color="tab:blue", lw=1.8, label="best so far (tuned)")
        if default is not None and math.isfinite(default) and default > 0:
            ax.axhline(default, color="tab:red", ls="--", lw=1.2, label=f"default schedule {default:.3g}")
        ax.set_yscale("log")
        ax.set_xlabel("trial")
        ax.set_ylabel(unit)
        ax.set_title(title or "tuning: best so far against trials")
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
    return Path(path)
