"""Shared benchmark harness: timing, machine record, JSON lines, markdown.

* :func:`time_tvm` / :func:`time_python` (from :mod:`tvm_ext.timing`) time a
  compiled TVM function with ``time_evaluator`` and a Python peer with
  repeat + min/median.
* :class:`BenchRun` collects rows, stamps each with the machine and thread
  settings, writes JSON lines and prints a markdown table with ratios against
  peers measured in the same run.  On a terminal, :func:`bench_args` starts
  a status line on stderr that counts the rows as they are recorded.
* :func:`collect_rows` is the function API of a suite: every report suite has
  ``run(quick, out=None, argv=()) -> list[dict]`` that calls its ``main`` with
  a command line and returns the rows its ``BenchRun`` objects recorded.
  ``python -m bench.harness bench.<suite> --rows-json PATH`` runs one suite in
  its own process and writes those rows as JSON (what ``tvm-ext report`` uses).

>>> run = BenchRun("demo", out_dir=None)
>>> t = time_python(lambda: sum(range(1000)), repeat=3)
>>> run.add({"case": "sum", "ours_s": t.min, "peer_s": t.min * 2})
>>> "ratio" in run.markdown(["case", "ours_s", "peer_s"], ratios={"ratio": ("peer_s", "ours_s")})
True
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from tvm_ext.markdown import table
from tvm_ext.platform_info import platform_info
from tvm_ext.timing import Timing, time_python, time_tvm

__all__ = ["Timing", "time_tvm", "time_python", "BenchRun", "geomean", "copy_bandwidth", "bench_args",
           "collect_rows", "suite_argv"]

#: row lists of the active :func:`collect_rows` calls; every ``BenchRun.add`` appends to each
_collectors: list[list[dict[str, Any]]] = []
#: the status line of this process (a terminal's stderr only), started by :func:`bench_args`
_status = None


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive values (nan when empty)."""
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else float("nan")


def copy_bandwidth(n_bytes: int = 256 << 20, repeat: int = 5) -> float:
    """Measured memory copy bandwidth (bytes/s, read + write) with numpy.

    The reference for 'effective bandwidth as a share of copy bandwidth'.
    """
    import numpy as np

    src = np.ones(n_bytes // 8)
    dst = np.empty_like(src)
    t = time_python(lambda: np.copyto(dst, src), repeat=repeat, min_repeat_s=0.1)
    return 2 * src.nbytes / t.min


class BenchRun:
    """Rows of one benchmark run, stamped with the machine record."""

    def __init__(self, name: str, out_dir: str | os.PathLike | None = "bench/results"):
        self.name = name
        self.machine = platform_info()
        self.rows: list[dict[str, Any]] = []
        self.out_path = None
        if out_dir is not None:
            Path(out_dir).mkdir(parents=True, exist_ok=True)
            stamp = time.strftime("%Y%m%d-%H%M%S")
            self.out_path = Path(out_dir) / f"{name}-{stamp}.jsonl"

    def add(self, row: dict[str, Any]) -> None:
        """Record one row (also appended to the JSON-lines file)."""
        row = dict(row)
        self.rows.append(row)
        for rows in _collectors:
            rows.append({"bench": self.name, **row})
        if _status is not None:
            _status.update(text=f"{self.name}: {len(self.rows)} rows")
        if self.out_path is not None:
            record = {"bench": self.name, **row, "machine": self.machine}
            with open(self.out_path, "a") as fh:
                fh.write(json.dumps(record, default=_json_default) + "\n")

    def markdown(self, columns: Sequence[str], *,
                 ratios: dict[str, tuple[str, str]] | None = None,
                 rows: Iterable[dict[str, Any]] | None = None) -> str:
        """Markdown table of ``columns`` plus ratio columns ``{name: (num, den)}``, of ``rows``
        (default: every row recorded)."""
        ratios = ratios or {}
        headers = list(columns) + list(ratios)
        body = []
        for row in self.rows if rows is None else rows:
            vals = [row.get(c) for c in columns]
            for num, den in ratios.values():
                a, b = row.get(num), row.get(den)
                vals.append(a / b if a and b else None)
            body.append(vals)
        return table(headers, body)

    def header(self) -> str:
        """One line naming the machine and thread settings of this run."""
        m = self.machine
        env = ", ".join(f"{k}={v}" for k, v in m["thread_env"].items() if v is not None)
        return f"{self.name}: {m['cpu_model']} ({m['cores']} cores), mcpu={m['mcpu']}, {env}"


def _json_default(obj):
    try:
        return asdict(obj)
    except TypeError:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        return str(obj)


def bench_args(description: str, argv: Sequence[str] | None = None, **extra: Any) -> argparse.Namespace:
    """Common CLI of bench scripts: ``--quick``, ``--out DIR`` (``none``: no files), ``--threads``.

    ``argv``: the command line to parse (``sys.argv[1:]`` when None).
    """
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small sizes, for smoke runs")
    p.add_argument("--out", default="bench/results", help="directory for JSON-lines results")
    p.add_argument("--threads", type=int, default=2,
                   help="TVM_NUM_THREADS and peers' OMP/MKL threads (default 2)")
    for name, kwargs in extra.items():
        p.add_argument(f"--{name.replace('_', '-')}", **kwargs)
    args = p.parse_args(None if argv is None else list(argv))
    if args.out in ("", "none"):
        args.out = None
    set_threads(args.threads)
    _start_status(description)
    return args


def _start_status(label: str) -> None:
    """On a terminal, a status line on stderr (rows recorded, elapsed time) until the script ends."""
    global _status
    if _status is None:
        import atexit

        from tvm_ext.tuning.progress import StatusLine

        status = StatusLine(label)
        if not status.enabled:   # piped or redirected: no status line, nothing to stop later
            return
        _status = status.__enter__()
        atexit.register(status.close)
    _status.label = label
    _status.update(text="starting")


def suite_argv(quick: bool, out: str | os.PathLike | None, argv: Sequence[str] = ()) -> list[str]:
    """The command line of a suite's ``main`` for :func:`collect_rows`.

    >>> suite_argv(True, None, ["--n", "8"])
    ['--quick', '--out', 'none', '--n', '8']
    """
    return [*(["--quick"] if quick else []), "--out", "none" if out is None else str(out), *argv]


def collect_rows(main: Callable[[Sequence[str]], None], argv: Sequence[str]) -> list[dict[str, Any]]:
    """Call a suite's ``main(argv)``; the rows every ``BenchRun`` recorded meanwhile, each with its ``bench`` name.

    >>> def main(argv):
    ...     BenchRun("demo", out_dir=None).add({"case": argv[0]})
    >>> collect_rows(main, ["x"])
    [{'bench': 'demo', 'case': 'x'}]
    """
    rows: list[dict[str, Any]] = []
    _collectors.append(rows)
    try:
        main(argv)
    finally:
        _collectors.remove(rows)
    return rows


def _suite_process(argv: Sequence[str] | None = None) -> None:
    """``python -m bench.harness MODULE --rows-json PATH [--quick] [--out DIR] [suite options]``."""
    import importlib

    p = argparse.ArgumentParser(description="run one report suite; write its rows as JSON")
    p.add_argument("module", help="the suite module, e.g. bench.block_cg")
    p.add_argument("--rows-json", required=True, help="file for the rows (a JSON list)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=None, help="directory for the suite's JSON lines")
    args, rest = p.parse_known_args(argv)
    rows = importlib.import_module(args.module).run(args.quick, out=args.out, argv=rest)
    Path(args.rows_json).write_text(json.dumps(rows, default=_json_default))


def set_threads(n: int) -> None:
    """Set the thread count for TVM and for the peers, before either starts."""
    for key in ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[key] = str(n)
    # OpenMP pools (MKL's iomp, torch's and GraphBLAS's gomp) park at once after a call instead of
    # spinning for up to 200 ms: on 2 cores a spinning pool starves the next library timed
    os.environ.setdefault("KMP_BLOCKTIME", "0")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import torch

        torch.set_num_threads(n)
    except ImportError:
        pass


if __name__ == "__main__":
    _suite_process()
