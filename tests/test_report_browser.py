"""``tvm-ext report --format html`` opened in a real headless browser (Debian's chromium).

The page is rendered by chromium: its DOM must hold the suite's table and the
plot as an embedded PNG, and the screenshot must show both (the table header's
background colour and the bar colour of the plot).  Skipped, saying why, where
chromium is not installed (CI installs it when it can: see ``.ci/run``).
"""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from tvm_ext.report import SUITES, Suite, SuiteResult, render_report, write_report

pytest.importorskip("markdown", reason="HTML reports need the markdown package (pip install markdown)")
pytest.importorskip("matplotlib", reason="the report's plots need matplotlib")

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no headless browser: install Debian's chromium "
                                   "(sudo apt-get install -y chromium) to render the HTML report")

#: what a suite printed: a line of prose and a table with a ratio column (bench.harness.BenchRun.markdown)
STDOUT = """three models, one config
| model | config | ours_ms | x llvm |
|---|---|---|---|
| mlp | llvm | 1 | 10 |
| gcn | llvm | 2 | 5 |
| bert | llvm | 3 | 3.333 |
"""
ROWS = {"models": [{"model": m, "config": "llvm", "ours_ms": 1.0 + i, "llvm_only_ms": 10.0, "torch_ms": 4.0}
                   for i, m in enumerate(["mlp", "gcn", "bert"])]}


def _browser(*args: str, profile) -> subprocess.CompletedProcess:
    flags = ["--headless", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}", "--hide-scrollbars"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        flags.append("--no-sandbox")   # chromium refuses to run as root with its sandbox
    return subprocess.run([BROWSER, *flags, *args], capture_output=True, text=True, timeout=120)


def _has_colour(pixels: np.ndarray, rgb: tuple[int, int, int], tol: int = 6) -> bool:
    return bool(np.any(np.all(np.abs(pixels[..., :3].astype(int) - np.array(rgb)) <= tol, axis=-1)))


@pytest.fixture(scope="module")
def report_page(tmp_path_factory):
    """The HTML report of one suite's results, its plot drawn by the models suite's plotter."""
    tmp = tmp_path_factory.mktemp("browser")
    models = next(s for s in SUITES if s.name == "models")
    result = SuiteResult(Suite("browser", "A browser-rendered suite", "browserbench", models.plot), "ok", 1.5,
                         STDOUT, ROWS)
    result.plots = models.plot(ROWS, tmp / "out" / "plots")
    assert result.plots
    return render_report([result], tmp / "out", "quick", "html"), tmp


@needs_browser
def test_browser_dom_has_the_table_and_the_embedded_plot(report_page):
    path, tmp = report_page
    proc = _browser("--dump-dom", path.as_uri(), profile=tmp / "profile-dom")
    dom = proc.stdout
    assert proc.returncode == 0 and "</html>" in dom, proc.stderr[-2000:]
    assert dom.count("<table>") == 2   # the suite summary and the bench script's own table
    assert "<td>gcn</td>" in dom and "<th>x llvm</th>" in dom
    assert "<h2>A browser-rendered suite</h2>" in dom
    assert 'src="data:image/png;base64,' in dom    # the plot travels inside the page
    assert "<pre><code>three models, one config" in dom   # printed prose stays preformatted, tables do not


@needs_browser
def test_browser_screenshot_shows_table_and_plot(report_page):
    from matplotlib.image import imread

    path, tmp = report_page
    shot = tmp / "shot.png"
    proc = _browser(f"--screenshot={shot}", "--window-size=1280,2400", path.as_uri(), profile=tmp / "profile-shot")
    assert proc.returncode == 0 and shot.is_file() and shot.stat().st_size > 0, proc.stderr[-2000:]
    pixels = (imread(str(shot)) * 255).round().astype(np.uint8)
    assert np.ptp(pixels[..., :3]) > 0
    assert _has_colour(pixels, (0xee, 0xf3, 0xf8))   # the tables' header cells (report CSS)
    assert _has_colour(pixels, (0x1f, 0x77, 0xb4))   # the plot's first bar series (matplotlib tab:blue)


def test_html_report_without_markdown_says_so_before_running(tmp_path, monkeypatch):
    """No suite runs when the page could not be written at the end."""
    import builtins

    from tvm_ext.errors import ConfigError

    real_import = builtins.__import__

    def no_markdown(name, *args, **kwargs):
        if name == "markdown":
            raise ImportError("no markdown here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_markdown)
    with pytest.raises(ConfigError, match="pip install"):
        write_report(tmp_path / "out", "quick", fmt="html", suites=["gogeta_traffic"])
    assert not (tmp_path / "out").exists()
