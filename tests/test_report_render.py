"""The report page from suite results: printed tables stay tables, prose becomes code, plots are linked relatively."""
from __future__ import annotations

from pathlib import Path

import pytest

from tvm_ext.report import SUITES, SuiteResult, render_report, stdout_markdown


def test_stdout_markdown_keeps_tables_and_fences_prose():
    text = "sizes: 3\n| a | b |\n|---|---|\n| 1 | 2 |\n\nnote: ``` inside\nmore"
    assert stdout_markdown(text).split("\n\n") == [
        "```\nsizes: 3\n```", "| a | b |\n|---|---|\n| 1 | 2 |", "````\nnote: ``` inside\nmore\n````"]


def test_report_with_a_relative_out_links_its_plots_relatively(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    models = next(s for s in SUITES if s.name == "models")
    rows = {"models": [{"model": "mlp", "config": "llvm", "ours_ms": 1.0, "llvm_only_ms": 3.0, "torch_ms": 2.0}]}
    result = SuiteResult(models, "ok", 1.0, "| a |\n|---|\n| 1 |\n", rows)
    result.plots = models.plot(rows, Path("rep") / "plots")
    page = render_report([result], "rep", "quick", "md").read_text()
    assert "![models](plots/models.png)" in page and (tmp_path / "rep" / "plots" / "models.png").is_file()
    assert "| a |\n|---|\n| 1 |" in page
