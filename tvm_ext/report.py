"""``tvm-ext report``: run the benchmark suites at one size and write one report with tables and plots.

Each :class:`Suite` is a ``bench/`` module with the function API
``run(quick, out=None, argv=()) -> list[dict]`` (see ``bench.harness``).
:func:`run_suite` calls it in a child process, ``python -m bench.harness
bench.<name> --rows-json FILE``, which writes the returned rows as JSON; the
report keeps the child's printed tables as text and plots the rows.  A child
process per suite, because a suite sets its thread counts before TVM and
torch start their pools, may load native peers (MKL via ctypes) that can
crash the process, and must be killable at its time limit, none of which
should stop the other suites.  :func:`write_report` puts everything in
``DIR/report.md`` (or ``report.html``, rendered with the ``markdown``
package, the plots embedded) with the plots under ``DIR/plots``.

The suites live in the ``bench/`` folder of a tvm-ext checkout (it is not
installed): :func:`bench_root` finds it in the working directory or beside
the ``tvm_ext`` package of an editable install.

The default suites cover the GOGETA traffic model, the Sextans sweep, the
sparse executors against scipy and torch, the tensorized GEMM/conv against
numpy and torch, the block-CG speed-ups, and the models end to end.

>>> [s.name for s in SUITES][:3]
['gogeta_traffic', 'sextans_sweep', 'sparse_executors']
"""
from __future__ import annotations

import html
import json
import math
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from tvm_ext.errors import ConfigError
from tvm_ext.figures import png_figure

__all__ = ["Suite", "SuiteResult", "SUITES", "SIZES", "run_suite", "write_report", "suite_names", "markdown_to_html",
           "stdout_markdown", "bench_root", "render_report", "claims_section", "write_claims"]

SIZES = ("quick", "full")


@dataclass(frozen=True)
class Suite:
    """A benchmark script, its title and how to plot its rows."""

    name: str
    title: str
    module: str
    plot: Callable[[dict[str, list[dict]], Path], list[Path]] | None = None
    timeout_s: int = 1800
    extra_args: tuple[str, ...] = ()


@dataclass
class SuiteResult:
    """What one suite run produced."""

    suite: Suite
    status: str  # "ok" | "failed" | "timeout"
    seconds: float
    stdout: str
    rows: dict[str, list[dict]] = field(default_factory=dict)  # JSON lines by bench name
    plots: list[Path] = field(default_factory=list)
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.suite.name, "status": self.status, "seconds": round(self.seconds, 1),
                "rows": sum(len(v) for v in self.rows.values()), "plots": [str(p) for p in self.plots],
                "error": self.error}


# ---------------------------------------------------------------------------
# Plots (matplotlib, Agg); every one is defensive about missing columns
# ---------------------------------------------------------------------------
def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) and f > 0 else None


def _bars(path: Path, title: str, labels: Sequence[str], series: dict[str, Sequence[Any]], ylabel: str,
          log: bool = True) -> Path | None:
    """Grouped bar chart; returns the PNG path (None when nothing is plottable)."""
    series = {k: [_num(v) for v in vals] for k, vals in series.items()}
    series = {k: v for k, v in series.items() if any(x is not None for x in v)}
    if not labels or not series:
        return None
    width = 0.8 / len(series)
    many = len(labels) > 30
    figsize = (min(16.0, max(6.0, 0.55 * len(labels) * len(series) ** 0.5 + 2)), 4.5)
    with png_figure(path, figsize=figsize, dpi=110) as (_, ax):
        for i, (name, vals) in enumerate(series.items()):
            xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(labels))]
            ax.bar(xs, [v or 0.0 for v in vals], width, label=name)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=90 if many else 40, ha="center" if many else "right",
                           fontsize=5 if many else 8)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=8)
    return path


def _keep(paths: Sequence[Path | None]) -> list[Path]:
    return [p for p in paths if p is not None]


def _plot_gogeta(rows: dict[str, list[dict]], out: Path) -> list[Path]:
    configs = ("SEQ-Flex", "SEQ-Overflow", "GOGETA-df", "GOGETA-map", "Ideal")
    fig10 = [r for r in rows.get("gogeta_traffic_fig10", []) if r.get("figure") == "fig10"]
    fig11 = rows.get("gogeta_traffic_fig11", [])
    out_paths = []
    for name, sel, lab in (("fig10", fig10, lambda r: f"{r.get('workload')} N={r.get('N')} {r.get('sram_mb')} MB"),
                           ("fig11", fig11, lambda r: str(r.get("workload")))):
        cols = [c for c in configs if any(c in r for r in sel)]
        out_paths.append(_bars(out / f"gogeta_{name}.png", f"GOGETA {name}: DRAM traffic (MB) per configuration",
                               [lab(r) for r in sel], {c: [r.get(c) for r in sel] for c in cols}, "MB"))
    return _keep(out_paths)


def _lines(path: Path, title: str, xlabel: str, series: dict[str, tuple[Sequence[Any], Sequence[Any]]],
           ylabel: str, log: bool = True) -> Path | None:
    """One line (with markers) per series of (xs, ys); returns the PNG path or None."""
    series = {k: [(x, _num(y)) for x, y in zip(*xy) if _num(y) is not None] for k, xy in series.items()}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    with png_figure(path, figsize=(7, 4), dpi=110) as (_, ax):
        for name, pts in series.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        if log:
            ax.set_yscale("log")
            ax.set_xscale("log", base=2)
        ax.legend(fontsize=8)
    return path


def _plot_sextans(rows: dict[str, list[dict]], out: Path) -> list[Path]:
    sel = rows.get("sextans_sweep", [])
    ns = sorted({int(r["n"]) for r in sel if _num(r.get("n"))})
    series = {}
    for key, label in (("sextans_gflops", "Sextans"), ("sextans_p_gflops", "Sextans-P")):
        per_n = [[_num(r.get(key)) for r in sel if r.get("n") == n] for n in ns]
        per_n = [[v for v in vs if v] for vs in per_n]
        series[f"{label} geomean"] = (ns, [math.exp(sum(map(math.log, v)) / len(v)) if v else None for v in per_n])
        series[f"{label} best matrix"] = (ns, [max(v) if v else None for v in per_n])
    return _keep([_lines(out / "sextans_sweep.png", f"Sextans model over {len({r.get('matrix') for r in sel})} "
                         "matrices: GFLOP/s vs N", "N (columns of B)", series, "GFLOP/s")])


def _plot_sparse(rows: dict[str, list[dict]], out: Path) -> list[Path]:
    sel = rows.get("sparse_executors", [])
    labels = [f"{r.get('matrix')} N={r.get('N')}" for r in sel]

    def gflops(r, key):
        t, nnz, n = _num(r.get(key)), _num(r.get("nnz")), _num(r.get("N"))
        return 2 * nnz * n / t / 1e6 if t and nnz and n else None

    series = {"ours (best format)": [gflops(r, "ours_ms") for r in sel],
              "scipy": [gflops(r, "scipy_ms") for r in sel], "torch": [gflops(r, "torch_ms") for r in sel]}
    return _keep([_bars(out / "sparse_executors.png", "Sparse executors vs scipy and torch", labels, series,
                        "GFLOP/s")])


def _plot_gemm(rows: dict[str, list[dict]], out: Path) -> list[Path]:
    sel = rows.get("tensorize_gemm", [])
    series = {"ours (tensorized)": [r.get("ours_gflops") for r in sel],
              "MetaSchedule": [r.get("ms_gflops") for r in sel], "numpy": [r.get("numpy_gflops") for r in sel]}
    return _keep([_bars(out / "tensorize_gemm.png", "Tensorized GEMM vs MetaSchedule and numpy",
                        [str(r.get("shape")) for r in sel], series, "GFLOP/s")])


def _plot_conv(rows: dict[str, list[dict]], out: Path) -> list[Path]:
    sel = rows.get("tensorize_conv", [])
    series = {"ours (tensorized)": [r.get("ours_gflops") for r in sel], "torch": [r.get("torch_gflops") for r in sel]}
    return _keep([_bars(out / "tensorize_conv.png", "Tensorized convolutions vs torch",
                        [str(r.get("layer")) for r in sel], series, "GFLOP/s")])


def _ratio(a: Any, b: Any) -> float | None:
    a, b = _num(a), _num(b)
    return a / b if a and b else None


def _plot_block_cg(rows: dict[str, list[dict]], out: Path) -> list[Path]:
    sel = rows.get("block_cg", [])
    series = {"unfused / fused": [_ratio(r.get("unfused_ms"), r.get("fused_ms")) for r in sel],
              "numpy / fused": [_ratio(r.get("numpy_ms"), r.get("fused_ms")) for r in sel]}
    return _keep([_bars(out / "block_cg.png", "Block CG: speed-up of the fused kernels (per iteration)",
                        [f"{r.get('matrix')} N={r.get('N')}" for r in sel], series, "speed-up (x)")])


def _plot_models(rows: dict[str, list[dict]], out: Path) -> list[Path]:
    sel = rows.get("models", [])
    series = {"llvm-only / ours": [_ratio(r.get("llvm_only_ms"), r.get("ours_ms")) for r in sel],
              "torch / ours": [_ratio(r.get("torch_ms"), r.get("ours_ms")) for r in sel]}
    return _keep([_bars(out / "models.png", "Models: speed-up of tvm_ext.compile (measured + simulated)",
                        [f"{r.get('model')} {r.get('config')}" for r in sel], series, "speed-up (x)")])


def _plot_accel(rows: dict[str, list[dict]], out: Path) -> list[Path]:
    gemm = rows.get("accel_gemm", [])
    gru = rows.get("accel_gru", [])
    return _keep([
        _bars(out / "accel_gemm.png", "Accelerator GEMM: cycles, ISA Mapper scheduler vs kernel library",
              [str(r.get("shape")) for r in gemm],
              {"ours": [r.get("cycles") for r in gemm], "KL": [r.get("cycles_kl") for r in gemm]}, "cycles"),
        _bars(out / "accel_gru.png", "Accelerator GRU: cycles per step, ours vs kernel library",
              [f"H={r.get('H')} B={r.get('B')}" for r in gru],
              {"ours": [r.get("cycles_per_step") for r in gru], "KL": [r.get("cycles_per_step_kl") for r in gru]},
              "cycles / step"),
    ])


SUITES: tuple[Suite, ...] = (
    Suite("gogeta_traffic", "GOGETA DRAM-traffic model (Fig. 10-12, Table 1)", "bench.gogeta_traffic", _plot_gogeta),
    Suite("sextans_sweep", "Sextans HBM engine sweep (Fig. 7/8, Table 1)", "bench.sextans_sweep", _plot_sextans),
    Suite("sparse_executors", "Sparse executors vs scipy and torch", "bench.sparse_executors", _plot_sparse),
    Suite("tensorize_gemm", "Tensorized GEMM vs MetaSchedule and numpy", "bench.tensorize_gemm", _plot_gemm),
    Suite("tensorize_conv", "Tensorized convolutions vs torch", "bench.tensorize_conv", _plot_conv),
    Suite("block_cg", "Block CG: fused kernels vs unfused, numpy and scipy", "bench.block_cg", _plot_block_cg),
    Suite("models", "Models: tvm_ext.compile vs llvm-only TVM vs PyTorch", "bench.models", _plot_models),
    Suite("accel_gemm_gru", "Matrix accelerator: ISA Mapper scheduler vs kernel library", "bench.accel_gemm_gru",
          _plot_accel),
)


def suite_names() -> list[str]:
    return [s.name for s in SUITES]


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------
def bench_root(start: str | os.PathLike | None = None) -> Path:
    """The checkout holding the ``bench/`` suites: ``start`` (default: the working directory) or the
    checkout of an editable ``tvm_ext``; :class:`ConfigError` if neither has one.

    >>> (bench_root() / "bench" / "harness.py").is_file()
    True
    """
    candidates = [Path(start) if start is not None else Path.cwd(), Path(__file__).resolve().parents[1]]
    for root in candidates:
        if (root / "bench" / "harness.py").is_file():
            return root.resolve()
    raise ConfigError("tvm-ext report runs the bench/ suites of a tvm-ext checkout and found none in "
                      f"{candidates[0]} or beside the installed tvm_ext; run it from the repository root")


def _group_rows(rows: Sequence[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for rec in rows:
        if isinstance(rec, dict):
            grouped.setdefault(str(rec.get("bench", "")), []).append(rec)
    return grouped


def _read_rows(path: Path) -> dict[str, list[dict]]:
    try:
        return _group_rows(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError):
        return {}


def run_suite(suite: Suite, size: str, out_dir: str | os.PathLike, *, timeout_s: int | None = None,
              env: dict[str, str] | None = None) -> SuiteResult:
    """Run one suite's ``run()`` in a child process; collect its printed tables, rows and plots."""
    if size not in SIZES:
        raise ConfigError(f"report size {size!r}: choose from {', '.join(SIZES)}")
    root = bench_root()
    out = Path(out_dir).resolve()
    rows_dir = out / "data" / suite.name
    rows_dir.mkdir(parents=True, exist_ok=True)
    for old in [*rows_dir.glob("*.jsonl"), rows_dir / "rows.json"]:
        old.unlink(missing_ok=True)
    rows_json = rows_dir / "rows.json"
    cmd = [sys.executable, "-m", "bench.harness", suite.module, "--rows-json", str(rows_json),
           *(("--quick",) if size == "quick" else ()), "--out", str(rows_dir), *suite.extra_args]
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [child_env.get("PYTHONPATH")])])
    t0 = time.perf_counter()
    status, error = "ok", ""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s or suite.timeout_s,
                              env=child_env, cwd=root)
        stdout = proc.stdout
        if proc.returncode != 0:
            status = "failed"
            tail = (proc.stderr or "").strip().splitlines()[-3:]
            error = f"exit code {proc.returncode}: " + " | ".join(tail)
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        status, error = "timeout", f"no result within {timeout_s or suite.timeout_s} s"
    seconds = time.perf_counter() - t0
    result = SuiteResult(suite, status, seconds, stdout, _read_rows(rows_json), error=error)
    if suite.plot is not None and result.rows:
        try:
            result.plots = suite.plot(result.rows, out / "plots")
        except (ImportError, ConfigError):  # the plots' only ConfigError: tvm_ext.figures finds no matplotlib
            result.error += ("; " if result.error else "") + "matplotlib not installed: no plots"
        except Exception as e:  # noqa: BLE001 - a plot must not lose the tables
            result.error += ("; " if result.error else "") + f"plot failed: {type(e).__name__}: {e}"
    return result


def _machine_line() -> str:
    from tvm_ext.platform_info import platform_info

    m = platform_info()
    env = ", ".join(f"{k}={v}" for k, v in m.get("thread_env", {}).items() if v is not None)
    return f"{m.get('cpu_model')} ({m.get('cores')} cores), mcpu={m.get('mcpu')}, {env}"


def claims_section(claims: Sequence[Any], seconds: float | None = None) -> str:
    """The "Papers' claims against ours" section: the claim | paper | ours table of
    :func:`tvm_ext.fidelity.paper_claims` results, then the claims it leaves out and why."""
    from tvm_ext.fidelity import claims_markdown, not_checked_markdown

    count = {v: sum(c.verdict == v for c in claims) for v in ("agrees", "holds", "differs", "does not hold")}
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    return "\n".join([
        "## Papers' claims against ours", "",
        f"{len(claims)} claims, each \"ours\" computed{took} by this project's models and executors "
        f"(`tvm-ext report --claims`): {count['agrees']} agree, {count['holds']} hold, {count['differs']} differ, "
        f"{count['does not hold']} do not hold.  A number agrees within 10% of the paper's (tighter for "
        "peaks and exact counts, 50% for the paper's \"around\") or inside the paper's range.", "",
        claims_markdown(claims), "", "Not checked here:", "", not_checked_markdown(), ""])


def write_claims(out_dir: str | os.PathLike, claims: Sequence[Any], fmt: str = "md",
                 seconds: float | None = None) -> Path:
    """Write ``claims.md`` / ``claims.html`` in ``out_dir`` with :func:`claims_section`."""
    if fmt not in ("md", "html"):
        raise ConfigError(f"report format {fmt!r}: choose md or html")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = "# tvm-ext: the papers' claims against ours\n\n" + claims_section(claims, seconds)
    path = out / f"claims.{fmt}"
    path.write_text(markdown_to_html(text, "tvm-ext: papers' claims") if fmt == "html" else text)
    return path


def _markdown(results: Sequence[SuiteResult], size: str, out: Path, claims: str | None = None) -> str:
    from tvm_ext.markdown import table

    lines = [f"# tvm-ext benchmark report ({size})", "",
             f"{time.strftime('%Y-%m-%d %H:%M:%S')}; {_machine_line()}", "",
             "Every table below is printed by its `bench/` script in this run; ratios compare peers measured "
             "in the same run.  Raw rows: `data/<suite>/rows.json` and `*.jsonl`.", "",
             table(["suite", "status", "seconds", "rows", "plots", "note"],
                   [[r.suite.name, r.status, round(r.seconds, 1), sum(len(v) for v in r.rows.values()),
                     len(r.plots), r.error[:100]] for r in results]), ""]
    if claims:
        lines += [claims, ""]
    for r in results:
        lines += [f"## {r.suite.title}", "", f"`python -m {r.suite.module}{' --quick' if size == 'quick' else ''}` "
                  f"({r.status}, {r.seconds:.1f} s)", ""]
        if r.error:
            lines += [f"> {r.error}", ""]
        lines += [f"![{p.stem}]({Path(os.path.relpath(Path(p).resolve(), out)).as_posix()})" for p in r.plots]
        lines += ["", stdout_markdown(r.stdout), ""]
    return "\n".join(lines)


def stdout_markdown(text: str) -> str:
    """A bench script's printed output as markdown: its tables as tables, every other run of lines as code.

    >>> print(stdout_markdown("sizes: 3\\n| a |\\n|---|\\n| 1 |"))
    ```
    sizes: 3
    ```
    <BLANKLINE>
    | a |
    |---|
    | 1 |
    """
    blocks: list[tuple[bool, list[str]]] = []   # (is_table, lines); an empty list marks a blank line
    for line in text.strip("\n").splitlines():
        is_table = line.lstrip().startswith("|")
        if not line.strip():
            blocks.append((False, []))
        elif blocks and blocks[-1][0] == is_table and blocks[-1][1]:
            blocks[-1][1].append(line.strip() if is_table else line.rstrip())
        else:
            blocks.append((is_table, [line.strip() if is_table else line.rstrip()]))
    out = []
    for tab, ls in blocks:
        body = "\n".join(ls)
        if ls:   # a code fence longer than any run of backticks inside it
            fence = "`" * max(3, 1 + max((len(r) for r in re.findall("`+", body)), default=0))
            out.append(body if tab else f"{fence}\n{body}\n{fence}")
    return "\n\n".join(out)


_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 1em auto; padding: 0 1em; color: #222; }
h1 { border-bottom: 2px solid #3b75af; } h2 { border-bottom: 1px solid #ccc; margin-top: 2em; }
table { border-collapse: collapse; font-size: 13px; margin: 0.8em 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #eef3f8; } tr:nth-child(even) td { background: #fafafa; }
td:first-child, th:first-child { text-align: left; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; font-size: 12px; }
code { font-family: ui-monospace, monospace; } img { max-width: 100%; }
blockquote { border-left: 4px solid #c53a32; margin: 0.5em 0; padding: 0.2em 0.8em; background: #fdf3f2; }
"""


def _markdown_module():
    try:
        import markdown
    except ImportError:
        raise ConfigError("HTML reports need the markdown package: pip install 'tvm-ext[all]' "
                          "(or pip install markdown)") from None
    return markdown


def _inline_images(md, base: Path) -> None:
    """Register a tree processor that turns each local ``<img src>`` under ``base`` into a ``data:`` URI."""
    import base64
    import mimetypes

    from markdown.treeprocessors import Treeprocessor

    class InlineImages(Treeprocessor):
        def run(self, root):
            for img in root.iter("img"):
                src = img.get("src", "")
                path = (base / src) if "://" not in src and not src.startswith("data:") else None
                if path is not None and path.is_file():
                    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                    img.set("src", f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}")

    md.treeprocessors.register(InlineImages(md), "tvm_ext_inline_images", 0)


def markdown_to_html(text: str, title: str = "tvm-ext report", *, images_from: str | os.PathLike | None = None
                     ) -> str:
    """A standalone HTML page from markdown (the ``markdown`` package: tables, fenced code, images).

    With ``images_from`` (a folder), every image whose path is relative to it
    is embedded as a base64 ``data:`` URI, so the page needs no other file.

    >>> page = markdown_to_html("# T\\n\\n| a |\\n|---|\\n| 1 |\\n\\n```\\nx  y\\n```")
    >>> "<table>" in page and "<h1>T</h1>" in page and "<pre><code>x  y" in page
    True
    """
    markdown = _markdown_module()
    md = markdown.Markdown(extensions=["tables", "fenced_code"], output_format="html")
    if images_from is not None:
        _inline_images(md, Path(images_from))
    body = md.convert(text)
    return (f"<!doctype html>\n<html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head>\n<body>\n{body}\n</body></html>\n")


def write_report(out_dir: str | os.PathLike, size: str = "quick", *, suites: Sequence[str | Suite] | None = None,
                 fmt: str = "md", timeout_s: int | None = None, env: dict[str, str] | None = None,
                 on_suite: Callable[[Suite, int, int, SuiteResult | None], None] | None = None,
                 claims: str | None = None) -> tuple[Path, list[SuiteResult]]:
    """Run the suites (all by default) and write ``report.md`` / ``report.html`` in ``out_dir``.

    ``on_suite(suite, index, total, result)`` is called as each suite starts
    (``result`` None; ``index`` suites are done) and again when it has run.
    ``claims``: a :func:`claims_section` to put before the suites' sections.
    """
    if size not in SIZES:
        raise ConfigError(f"report size {size!r}: choose from {', '.join(SIZES)}")
    if fmt not in ("md", "html"):
        raise ConfigError(f"report format {fmt!r}: choose md or html")
    if fmt == "html":
        _markdown_module()   # missing markdown is said before the suites run, not after
    by_name = {s.name: s for s in SUITES}
    chosen: list[Suite] = []
    for s in suites or list(by_name):
        if isinstance(s, Suite):
            chosen.append(s)
        elif s in by_name:
            chosen.append(by_name[s])
        else:
            raise ConfigError(f"unknown report suite {s!r}; choose from {', '.join(by_name)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for index, s in enumerate(chosen):
        if on_suite:
            on_suite(s, index, len(chosen), None)
        results.append(run_suite(s, size, out, timeout_s=timeout_s, env=env))
        if on_suite:
            on_suite(s, index, len(chosen), results[-1])
    return render_report(results, out, size, fmt, claims=claims), results


def render_report(results: Sequence[SuiteResult], out_dir: str | os.PathLike, size: str = "quick",
                  fmt: str = "md", *, claims: str | None = None) -> Path:
    """Write ``report.md`` / ``report.html`` in ``out_dir`` from suite results (plots under ``out_dir``),
    with the ``claims`` section (:func:`claims_section`) first when given."""
    if fmt not in ("md", "html"):
        raise ConfigError(f"report format {fmt!r}: choose md or html")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = _markdown(results, size, out.resolve(), claims)
    path = out / f"report.{fmt}"
    path.write_text(markdown_to_html(text, f"tvm-ext benchmark report ({size})", images_from=out)
                    if fmt == "html" else text)
    return path
