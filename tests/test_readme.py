"""The README's Python examples run as written (in order, one namespace)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples():
    assert len(_python_blocks()) >= 5


@pytest.mark.slow
def test_readme_python_examples_run():
    namespace: dict = {}
    for i, block in enumerate(_python_blocks()):
        try:
            exec(compile(block, f"README.md python block {i}", "exec"), namespace)
        except Exception as e:  # pragma: no cover - the message names the block
            pytest.fail(f"README python block {i} failed: {type(e).__name__}: {e}\n{block}")
