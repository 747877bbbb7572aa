"""Shared pytest setup: a per-session kernel cache dir, fixed threads, helpers."""
from __future__ import annotations

import os

# Tests run with the thread count CI has (2 cores) unless the caller set one.
os.environ.setdefault("TVM_NUM_THREADS", "2")
# Format choices in tests come from the analytic model, not a model trained on this machine.
os.environ.setdefault("TVM_EXT_SELECTOR", "off")

import pytest  # noqa: E402


@pytest.fixture
def mtx_file(tmp_path):
    """Write Matrix Market text to a temp file and return its path."""

    def write(text: str, name: str = "m.mtx"):
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
