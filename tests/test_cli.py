"""The tvm-ext CLI: --json on every subcommand, one-line errors, exit codes."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tvm_ext.cli.main import build_parser, main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_matrix_stats_nasa4704_json(capsys):
    code, out, _ = run_cli(capsys, "matrix", "stats", "nasa4704", "--json")
    assert code == 0
    data = json.loads(out)
    assert (data["rows"], data["cols"], data["nnz"]) == (4704, 4704, 104_756)
    assert "3x3" in data["block_fill"] and data["diagonals"] > 0


def test_matrix_stats_text_mentions_expanded_nnz(capsys):
    code, out, _ = run_cli(capsys, "matrix", "stats", "nasa4704")
    assert code == 0 and "104,756" in out and "R x C block fill" in out


def test_matrix_stats_reads_a_file(capsys, mtx_file):
    p = mtx_file("%%MatrixMarket matrix coordinate real general\n2 3 2\n1 1 1.0\n2 3 2.0\n")
    code, out, _ = run_cli(capsys, "matrix", "stats", str(p), "--json")
    assert code == 0 and json.loads(out)["cols"] == 3


def test_info_json(capsys):
    code, out, _ = run_cli(capsys, "info", "--json")
    data = json.loads(out)
    assert code == 0 and data["tvm_version"].startswith("0.27")
    assert data["mcpu"] != "generic" and data["tvm_num_threads"] >= 1


def test_errors_are_one_line_without_traceback(capsys, mtx_file):
    p = mtx_file("", name="empty.mtx")
    code, out, err = run_cli(capsys, "matrix", "stats", str(p))
    assert code == 2
    assert err.count("\n") == 1 and "empty.mtx" in err and "Traceback" not in err


def test_errors_with_json_print_one_object(capsys):
    code, out, _ = run_cli(capsys, "matrix", "stats", "not-a-matrix", "--json")
    assert code == 2
    assert "error" in json.loads(out)


def test_debug_shows_traceback(capsys, mtx_file):
    p = mtx_file("", name="empty.mtx")
    code, _, err = run_cli(capsys, "matrix", "stats", str(p), "--debug")
    assert code == 2 and "Traceback" in err


def test_every_subcommand_accepts_json():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")

    def leaves(p):
        nested = [a for a in p._actions if getattr(a, "choices", None) and isinstance(a.choices, dict)]
        if not nested:
            yield p
        for a in nested:
            for child in a.choices.values():
                yield from leaves(child)

    for name, p in sub.choices.items():
        for leaf in leaves(p):
            assert any("--json" in a.option_strings for a in leaf._actions), leaf.prog


def test_demo_json_runs_the_workload_section(capsys):
    code, out, _ = run_cli(capsys, "demo", "--only", "workloads", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["sections"]["workloads"]["nasa4704"]["nnz"] == 104_756


def test_console_script_entry_point():
    proc = subprocess.run([sys.executable, "-m", "tvm_ext.cli.main", "matrix", "stats", "LFAT5", "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["nnz"] == 46


@pytest.mark.parametrize("argv", [[], ["matrix"], ["nope"]])
def test_usage_errors_exit_2_with_one_line(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "error" in err


def test_version_names_tvm_ext_and_tvm(capsys):
    from importlib import metadata

    import tvm_ext

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.strip() == f"tvm-ext {tvm_ext.__version__} (TVM {metadata.version('apache-tvm')})"
    assert main(["--version"]) == 0 and tvm_ext.__version__ in capsys.readouterr().out


def test_matrix_list_matches_the_loaded_matrices(capsys):
    from tvm_ext.workloads import list_matrices, load_matrix

    code, out, _ = run_cli(capsys, "matrix", "list", "--json")
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)["matrices"]}
    assert set(rows) == set(list_matrices())
    for name, r in rows.items():
        A = load_matrix(name)
        assert (r["rows"], r["cols"], r["nnz"]) == (A.shape[0], A.shape[1], A.nnz)
    assert rows["nasa4704"]["field"] == "pattern" and rows["nasa4704"]["nnz"] == 104_756
    code, out, _ = run_cli(capsys, "matrix", "list")
    assert code == 0 and "4,704 x 4,704" in out and "104,756" in out


def test_demo_only_lists_sections_and_a_bad_name_lists_them_too(capsys):
    from tvm_ext.demo import section_names

    code, out, _ = run_cli(capsys, "demo", "--only", "--json")
    assert code == 0
    assert [s["name"] for s in json.loads(out)["sections"]] == section_names()
    code, out, err = run_cli(capsys, "demo", "--only", "no_such_section")
    assert code == 2 and all(name in err for name in section_names())


def test_demo_prints_each_section_as_it_finishes(capsys, monkeypatch):
    from tvm_ext.demo import d20_workloads

    before = []
    real_run = d20_workloads.run

    def spy():
        before.append(capsys.readouterr().out)   # stdout when the second section starts
        return real_run()

    monkeypatch.setattr(d20_workloads, "run", spy)
    code = main(["demo", "--only", "workloads", "platform"])
    out = capsys.readouterr().out
    assert code == 0
    # platform runs first: its text was on stdout before workloads started
    assert "== Platform" in before[0] and "== Workloads" not in before[0]
    assert "== Workloads" in out and "demo: 2 sections" in out


def test_every_subcommand_help_is_plain_text_without_sphinx_markup():
    import argparse
    import re

    markup = re.compile(r"``|:(?:mod|func|class|meth|attr|data|exc|obj|ref):`|\S::\s*$", re.M)

    def leaves(p, path=()):
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        yield " ".join(path), p
        for action in subs:
            for name, child in action.choices.items():
                yield from leaves(child, (*path, name))

    checked = 0
    for name, parser in leaves(build_parser()):
        text = parser.format_help()
        bad = markup.search(text)
        assert bad is None, f"tvm-ext {name} --help has Sphinx markup near {text[max(bad.start() - 40, 0):bad.end() + 20]!r}"
        checked += 1
    assert checked > 10
    tune = next(p for n, p in leaves(build_parser()) if n == "tune").format_help()
    assert "see tvm_ext.tuning.tasks" in tune        # roles unwrapped, the text kept


def test_tune_has_one_subparser_per_task_with_only_its_options():
    import argparse

    tune = build_parser()._subparsers._group_actions[0].choices["tune"]
    tasks = next(a for a in tune._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(tasks) == {"gemm", "conv", "spmm", "cg", "sextans", "accel", "selector"}

    def flags(task):
        return {o for a in tasks[task]._actions for o in a.option_strings}

    assert {"--stride", "--pad", "--layout"} <= flags("conv")
    for task in ("gemm", "spmm", "cg", "sextans", "accel", "selector"):
        assert not {"--stride", "--pad", "--layout"} & flags(task), task
    assert "--platform" in flags("sextans") and "--platform" not in flags("spmm")
    assert "--model" in flags("selector") and "--db" not in flags("selector")
    assert "--workload" in flags("accel") and "--workload" not in flags("gemm")


def test_matrix_stats_plot_writes_a_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "sub" / "lfat5.png"
    code, out, _ = run_cli(capsys, "matrix", "stats", "LFAT5", "--plot", str(png), "--json")
    assert code == 0 and json.loads(out)["plot"] == str(png)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000
    from PIL import Image

    with Image.open(png) as im:     # a real image of the size the figure asks for
        assert im.size == (1100, 480)


def test_cg_plot_writes_the_residual_history_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "cg.png"
    code = main(["cg", "LFAT5", "--n", "2", "--repeat", "1", "--json", "--plot", str(png)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["plot"] == str(png)
    assert len(data["history"]) >= data["iterations"] + 1 and len(data["history"][0]) == 2   # + one per restart
    assert data["history"][0] == pytest.approx([1.0, 1.0]) and max(data["history"][-1]) <= 1e-8 * 10
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000


def test_tune_plot_writes_best_so_far_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    from tvm_ext.tuning.plot import session_costs

    png = tmp_path / "tune.png"
    code = main(["tune", "sextans", "LFAT5", "--n", "8", "--trials", "6", "--db", str(tmp_path / "db"),
                 "--no-progress", "--json", "--plot", str(png)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["plot"] == str(png)
    costs = session_costs(tmp_path / "db", data["task"], data["engine"])
    assert len(costs) == data["records"] and min(c for c in costs if c is not None) == data["best_cycles"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000


def test_spmm_plot_writes_the_gflops_png(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "spmm.png"
    code = main(["spmm", "LFAT5", "--n", "4", "--repeat", "1", "--json", "--plot", str(png)])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["plot"] == str(png) and data["gflops"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000


def test_a_reader_that_leaves_early_gets_no_traceback():
    """``tvm-ext ... | head``: the closed pipe ends the command quietly."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "tvm_ext.cli", "matrix", "list"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before anything is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0
    assert "Traceback" not in err and "BrokenPipe" not in err, err
