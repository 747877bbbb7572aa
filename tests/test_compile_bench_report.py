"""``tvm-ext report`` runs each suite's ``run()`` in a child process and writes one report with tables and
plots; the models comparison rows and the ``models`` demo section."""
from __future__ import annotations

import json
import textwrap

import pytest

from tvm_ext.cli.main import main as cli_main
from tvm_ext.errors import ConfigError
from tvm_ext.report import SUITES, Suite, markdown_to_html, write_report

FAKE = textwrap.dedent('''
    """fake suite."""
    from bench.harness import BenchRun, bench_args, collect_rows, suite_argv

    def run(quick, *, out=None, argv=()):
        return collect_rows(main, suite_argv(quick, out, argv))

    def main(argv=None):
        args = bench_args("fake", argv)
        bench = BenchRun("models", out_dir=args.out)
        for i, model in enumerate(["mlp", "gcn"]):
            bench.add({"model": model, "config": "llvm", "ours_ms": 1.0 + i, "llvm_only_ms": 10.0,
                       "torch_ms": 4.0 if args.quick else 8.0})
        print(bench.markdown(["model", "config", "ours_ms"], ratios={"x": ("llvm_only_ms", "ours_ms")}))
''')


@pytest.fixture()
def fake_env(tmp_path):
    (tmp_path / "fakebench.py").write_text(FAKE)
    (tmp_path / "brokenbench.py").write_text("raise SystemExit('boom: this suite fails')\n")
    import os

    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}


def test_report_collects_tables_rows_and_plots(tmp_path, fake_env):
    pytest.importorskip("matplotlib")
    models_plot = next(s for s in SUITES if s.name == "models").plot
    suites = [Suite("fake", "A fake suite", "fakebench", models_plot), Suite("broken", "A broken suite", "brokenbench")]
    path, results = write_report(tmp_path / "out", "quick", suites=suites, env=fake_env)
    ok, broken = results
    assert ok.status == "ok" and len(ok.rows["models"]) == 2 and ok.rows["models"][0]["torch_ms"] == 4.0
    assert [p.name for p in ok.plots] == ["models.png"] and ok.plots[0].stat().st_size > 1000
    assert broken.status == "failed" and "boom" in broken.error and not broken.rows
    text = path.read_text()
    assert "## A fake suite" in text and "| mlp | llvm |" in text and "![models](plots/models.png)" in text
    assert "boom" in text  # a failing suite is reported, not fatal


def test_report_html_and_bad_arguments(tmp_path, fake_env):
    pytest.importorskip("markdown", reason="HTML reports need the markdown package")
    path, _ = write_report(tmp_path / "h", "full", suites=[Suite("fake", "Fake", "fakebench")], fmt="html",
                           env=fake_env)
    page = path.read_text()
    assert path.name == "report.html" and "<table>" in page and "<h2>Fake</h2>" in page
    assert "<td>8.0</td>" not in page  # the table shows ours_ms (1.0, 2.0), full size ran without --quick
    data = next((tmp_path / "h" / "data" / "fake").glob("*.jsonl"))
    rows = [json.loads(x) for x in data.read_text().splitlines()]
    assert rows[0]["torch_ms"] == 8.0
    returned = json.loads((tmp_path / "h" / "data" / "fake" / "rows.json").read_text())
    assert [r["model"] for r in returned] == ["mlp", "gcn"] and returned[0]["bench"] == "models"
    with pytest.raises(ConfigError, match="unknown report suite"):
        write_report(tmp_path / "x", suites=["nope"])
    with pytest.raises(ConfigError, match="size"):
        write_report(tmp_path / "x", "medium")
    assert "<img" in markdown_to_html("![p](plots/p.png)")
    assert cli_main(["report", "--out", str(tmp_path / "c"), "--suites", "nope"]) == 2


def test_report_needs_a_checkout_with_bench(tmp_path, monkeypatch):
    from tvm_ext import report

    assert (report.bench_root(tmp_path) / "bench" / "harness.py").is_file()  # falls back to tvm_ext's checkout
    monkeypatch.setattr(report, "__file__", str(tmp_path / "site" / "tvm_ext" / "report.py"))
    with pytest.raises(ConfigError, match="repository root"):
        report.bench_root(tmp_path)


def test_suite_run_returns_the_rows_main_prints():
    from bench import gogeta_traffic

    rows = gogeta_traffic.run(True)
    fig10 = [r for r in rows if r["bench"] == "gogeta_traffic_fig10" and r["figure"] == "fig10"]
    assert fig10 and all(r["GOGETA-map"] <= r["SEQ-Flex"] for r in fig10)


def test_compare_model_rows_and_demo_section(monkeypatch):
    pytest.importorskip("torch")
    from tvm_ext.demo import d80_models
    from tvm_ext.models import get_model
    from tvm_ext.models.compare import compare_model

    rows = compare_model(get_model("mlp", "tiny"), ("llvm", "accel"), repeat=1, min_repeat_ms=1)
    llvm, accel = rows
    assert llvm["llvm_only_ms"] > 0 and llvm["torch_ms"] > 0 and llvm["ours_ms"] > 0 and llvm["cycles"] == 0
    assert accel["cycles"] > 0 and accel["targets"] == "accel 5" and accel["ours_sim_ms"] > 0
    assert max(r["max_rel_err"] for r in rows) < 1e-4
    monkeypatch.setattr(d80_models, "PLAN", (("mlp", ("llvm",)),))
    from tvm_ext.models import zoo

    real = zoo.get_model
    monkeypatch.setattr("tvm_ext.models.get_model", lambda name, size: real(name, "tiny"))
    data, lines = d80_models.run()
    assert data["mlp/llvm"]["max_rel_err"] < 1e-4 and any("x llvm-only" in ln for ln in lines)
