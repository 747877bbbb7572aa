"""Gantt charts of the accelerator simulator: what every device runs when, this scheduler beside the kernel library.

:func:`device_intervals` replays instruction streams on one
:class:`~tvm_ext.accel.timing.Timeline` with ``record=True`` and collects,
per device, the ``(start, end)`` cycles of each instruction it ran (a copy
holds its issuer until its last byte leaves; the edge latency after that is
not the issuer's time).  :func:`plot_gantt` draws one row per device,
coloured by device kind and labelled with its utilisation over the run, for
each schedule in its own panel on a shared cycle axis (devices idle in every
panel are left out).
:func:`gemm_gantt` / :func:`gru_gantt` schedule a ``tvm-ext accel`` case both
ways and plot it (a GRU shows its first steps: priming, recursive, finish).

>>> import tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "gemm.png"
>>> gemm_gantt(40, 24, 70, out, system="mini").stat().st_size > 0
True
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from tvm_ext.errors import InputError
from tvm_ext.figures import png_figure

from .stream import COPY, InstructionStream
from .system_graph import SystemGraph, load_system
from .timing import Timeline

__all__ = ["Intervals", "device_intervals", "plot_gantt", "gemm_gantt", "gru_gantt"]

#: Per device name: ``(start, end)`` cycles of each instruction it ran, in issue order.
Intervals = dict[str, list[tuple[float, float]]]

_KIND_COLOURS = ("#3b75af", "#ef8636", "#519e3e", "#c53a32", "#8d69b8", "#84584e")


def device_intervals(streams: Iterable[InstructionStream], system: "SystemGraph | str | None" = None
                     ) -> tuple[Intervals, float]:
    """Run ``streams`` one after another on one timeline; returns each device's busy intervals and the total cycles.

    >>> from tvm_ext.accel.cases import gemm_workload
    >>> from tvm_ext.accel.scheduler import schedule
    >>> iv, cycles = device_intervals([schedule(gemm_workload(16, 16, 16), "mini").stream], "mini")
    >>> cycles > 0 and all(e >= s for spans in iv.values() for s, e in spans)
    True
    """
    tl = Timeline(system)
    latency = [e.latency for e in tl.system.edges]
    out: Intervals = {d: [] for d in tl.system.devices}
    for stream in streams:
        start, end = tl.run(stream, record=True)
        for i, d in enumerate(stream.dev):
            # the timeline records when a copy's data lands; its issuer is free one edge latency earlier
            busy_end = float(end[i]) - (latency[stream.arg[i]] if stream.kind[i] == COPY else 0.0)
            if busy_end > start[i]:   # barriers take no time
                out.setdefault(stream.devices[d], []).append((float(start[i]), busy_end))
    return out, float(tl.horizon)


def _busy_fraction(spans: Sequence[tuple[float, float]], horizon: float) -> float:
    """Time covered by at least one interval, over ``horizon`` (a multi-channel engine's overlaps count once)."""
    covered, reach = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e > reach:
            covered += e - max(s, reach)
            reach = e
    return covered / horizon if horizon > 0 else 0.0


def plot_gantt(panels: Mapping[str, tuple[Intervals, float]], path: str | os.PathLike, *,
               system: "SystemGraph | str | None" = None, title: str = "") -> Path:
    """One Gantt panel per schedule (``name -> (intervals, cycles)``); rows are devices, coloured by kind."""
    if not panels:
        raise InputError("plot_gantt: no schedules to draw")
    sysg = load_system(system)
    kinds = {c.name: c.kind for c in sysg.computes}
    kinds.update({e.name: "dma" for e in sysg.copy_engines})
    palette = {k: _KIND_COLOURS[i % len(_KIND_COLOURS)] for i, k in enumerate(dict.fromkeys(kinds.values()))}
    # devices idle in every panel are left out (a large system has dozens); the title counts them
    devices = [d for d in sysg.devices if any(iv.get(d) for iv, _ in panels.values())] or list(sysg.devices[:1])
    idle = len(sysg.devices) - len(devices)
    height = min(14.0, 1.2 + len(panels) * (0.9 + 0.32 * len(devices)))
    with png_figure(path, nrows=len(panels), figsize=(10, height), dpi=100, sharex=True) as (fig, axes):
        axes = [axes] if len(panels) == 1 else list(axes)
        for ax, (name, (iv, cycles)) in zip(axes, panels.items()):
            labels = []
            for row, dev in enumerate(devices):
                spans = iv.get(dev, [])
                ax.broken_barh([(s, e - s) for s, e in spans], (row - 0.4, 0.8),
                               facecolors=palette.get(kinds.get(dev), "grey"), alpha=0.75, linewidth=0)
                labels.append(f"{dev} ({100 * _busy_fraction(spans, cycles):.0f}%)")
            ax.set_yticks(range(len(devices)))
            ax.set_yticklabels(labels, fontsize=7)
            ax.set_ylim(len(devices) - 0.5, -0.5)
            ax.set_title(f"{name}: {cycles:,.0f} cycles", fontsize=9)
        axes[-1].set_xlabel("cycle")
        from matplotlib.patches import Patch

        used = dict.fromkeys(kinds.get(d) for d in devices)
        axes[0].legend(handles=[Patch(color=palette[k], label=k) for k in used if k in palette], fontsize=7,
                       loc="upper right", title="device kind", title_fontsize=7)
        note = f" ({idle} idle devices not shown)" if idle else ""
        if title or note:
            fig.suptitle(f"{title}{note}", fontsize=10)
    return Path(path)


def gemm_gantt(M: int, N: int, K: int, path: str | os.PathLike, *, system: Any = None) -> Path:
    """Schedule ``C = A @ B`` (``M x K`` by ``K x N``) both ways on ``system`` and draw both timelines."""
    from .cases import gemm_workload
    from .kernel_library import schedule_kl
    from .scheduler import schedule

    sysg = load_system(system)
    wl = gemm_workload(M, N, K)
    panels = {"this scheduler": device_intervals([schedule(wl, sysg).stream], sysg),
              "kernel library": device_intervals([schedule_kl(wl, sysg).stream], sysg)}
    return plot_gantt(panels, path, system=sysg, title=f"GEMM {M} x {N} x {K} on {sysg.name}")


def gru_gantt(steps: int, hidden: int, batch: int, path: str | os.PathLike, *, inputs: int | None = None,
              system: Any = None, shown_steps: int = 4) -> Path:
    """The first ``min(steps, shown_steps)`` GRU steps, recurrent schedule vs the kernel library, as Gantt charts."""
    from .gru import gru_cell
    from .kernel_library import schedule_kl
    from .recurrent import schedule_recurrent

    sysg = load_system(system)
    cell = gru_cell(batch, hidden, inputs if inputs is not None else hidden)
    shown = max(1, min(int(steps), int(shown_steps)))
    rs = schedule_recurrent(cell, sysg)
    ours = ([rs.single().stream] if shown == 1
            else [rs.priming, *[rs.recursive] * (shown - 2), rs.finish])
    kl = schedule_kl(cell, sysg).stream
    panels = {"this scheduler (weights resident)": device_intervals(ours, sysg),
              "kernel library": device_intervals([kl] * shown, sysg)}
    return plot_gantt(panels, path, system=sysg,
                      title=f"GRU H={hidden}, B={batch}: first {shown} of {steps} steps on {sysg.name}")
