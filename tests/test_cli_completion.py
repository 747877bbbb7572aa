"""Shell completion of ``tvm-ext`` through the optional argcomplete package."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

argcomplete = pytest.importorskip("argcomplete", reason="completion is the optional 'completion' extra")


def _complete(tmp_path, line: str) -> list[str]:
    """What argcomplete offers for ``line`` (the cursor at its end), asked the way the shell asks."""
    out = tmp_path / "completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "_ARGCOMPLETE_STDOUT_FILENAME": str(out), "_ARGCOMPLETE_IFS": "\n"}
    proc = subprocess.run([sys.executable, "-m", "tvm_ext.cli"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out.read_text().split()


def test_subcommands_and_their_options_complete(tmp_path):
    assert set(_complete(tmp_path, "tvm-ext ma")) == {"map", "matrix"}
    assert "--plot" in _complete(tmp_path, "tvm-ext sextans LFAT5 --p")
    assert set(_complete(tmp_path, "tvm-ext report --format ")) == {"md", "html"}


def test_the_entry_point_carries_argcomplete_marker():
    """``register-python-argcomplete tvm-ext`` only completes modules marked PYTHON_ARGCOMPLETE_OK early on."""
    import importlib

    with open(importlib.import_module("tvm_ext.cli.main").__file__, encoding="utf-8") as f:
        assert "PYTHON_ARGCOMPLETE_OK" in f.read(1024)


def test_plain_runs_do_not_import_argcomplete():
    code = ("import sys; from tvm_ext.cli.main import main; rc = main(['matrix', 'list', '--json']); "
            "print(rc, 'argcomplete' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "_ARGCOMPLETE"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines()[-1] == "0 False", proc.stderr[-2000:]
