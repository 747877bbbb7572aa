"""Status lines of long runs (``demo``, ``report``, ``bench/``): drawn on a terminal's stderr only, stdout kept clean."""
from __future__ import annotations

import io
import json
import sys

import pytest

from tvm_ext.cli.main import main
from tvm_ext.tuning.progress import StatusLine


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class Screen:
    """stdout and stderr writing to one record, as on a terminal where both show."""

    def __init__(self):
        self.writes: list[tuple[str, str]] = []

    def stream(self, name: str, tty: bool):
        screen = self

        class Stream(Terminal if tty else io.StringIO):
            def write(self, text):
                screen.writes.append((name, text))
                return super().write(text)

        return Stream()


def test_status_line_is_erased_before_stdout_writes(monkeypatch):
    screen = Screen()
    err = screen.stream("err", tty=True)
    monkeypatch.setattr(sys, "stdout", screen.stream("out", tty=True))
    with StatusLine("demo", total=4, stream=err, tick_s=60) as status:
        status.update(1, "running sparse")
        print("section text")
        status.log("a permanent line")
    assert sys.stdout.__class__.__name__ == "Stream"   # stdout given back
    drawn = [i for i, (n, t) in enumerate(screen.writes) if n == "err" and "running sparse" in t]
    printed = next(i for i, (n, t) in enumerate(screen.writes) if n == "out" and "section text" in t)
    assert drawn and drawn[0] < printed
    assert screen.writes[printed - 1] == ("err", "\r\033[K")   # the bar was erased just before the text
    assert "[######------------------] 1/4  demo: running sparse" in screen.writes[drawn[0]][1]
    assert screen.writes[-1] == ("err", "\r\033[K")            # nothing left on the line at the end
    assert ("err", "a permanent line\n") in screen.writes


def test_status_line_draws_nothing_off_a_terminal():
    err = io.StringIO()
    with StatusLine("report", total=2, stream=err) as status:
        assert not status.enabled and type(sys.stdout).__name__ != "_ClearingStdout"   # stdout untouched
        status.update(1, "running bench.block_cg")
        status.log("  block_cg: ok")
    assert err.getvalue() == "  block_cg: ok\n"


@pytest.mark.parametrize("as_json", [False, True])
def test_demo_shows_its_status_on_a_terminal_and_keeps_stdout_clean(monkeypatch, capsys, as_json):
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    code = main(["demo", "--only", "platform", *(["--json"] if as_json else [])])
    out = capsys.readouterr().out
    assert code == 0
    assert "[------------------------] 0/1  demo: running Platform" in err.getvalue()
    assert "\r" not in out and "running Platform" not in out
    if as_json:
        assert set(json.loads(out)["sections"]) == {"platform"}
    else:
        assert "== Platform" in out and "TVM_NUM_THREADS" in out


def test_bench_scripts_count_rows_on_a_terminal(monkeypatch):
    from bench import harness

    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(harness, "_status", None)
    try:
        harness.bench_args("a bench", ["--out", "none"])
        run = harness.BenchRun("rows", out_dir=None)
        run.add({"case": 1})
        run.add({"case": 2})
        assert "a bench: rows: 2 rows" in err.getvalue()
    finally:
        if harness._status is not None:
            harness._status.close()


def test_bench_scripts_piped_get_no_status(monkeypatch, capsys):
    from bench import harness

    monkeypatch.setattr(harness, "_status", None)
    harness.bench_args("a bench", ["--out", "none"])
    harness.BenchRun("rows", out_dir=None).add({"case": 1})
    assert harness._status is None and capsys.readouterr().err == ""


FAKE_SUITE = '''
from bench.harness import BenchRun, bench_args, collect_rows, suite_argv

def run(quick, *, out=None, argv=()):
    return collect_rows(main, suite_argv(quick, out, argv))

def main(argv=None):
    bench = BenchRun("fake", out_dir=bench_args("fake", argv).out)
    bench.add({"case": "a", "ours_ms": 1.0})
    print(bench.markdown(["case", "ours_ms"]))
'''


def test_report_logs_each_suite_and_shows_the_running_one(monkeypatch, capsys, tmp_path):
    from tvm_ext import report

    (tmp_path / "statusbench.py").write_text(FAKE_SUITE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(report, "SUITES", (report.Suite("fake", "A fake suite", "statusbench"),))
    err = Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    code = main(["report", "--out", str(tmp_path / "r"), "--suites", "fake", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["suites"][0]["status"] == "ok" and data["suites"][0]["rows"] == 1
    shown = err.getvalue()
    assert "[------------------------] 0/1  report: running statusbench (quick)" in shown
    assert "  fake: ok in " in shown and "1 rows, 0 plots\n" in shown
