"""``tvm-ext demo``: sections discovered from this package, run in name order.

Each section is a module ``dNN_<name>.py`` with a ``TITLE`` and a
``run() -> (data: dict, lines: list[str])``.  A section only prints numbers it
computed in this run, each next to its peer (scipy, numpy, torch or the paper).
Later issues add sections by adding modules.

>>> "workloads" in section_names()
True
"""
from __future__ import annotations

import importlib
import pkgutil
import time
from typing import Any, Callable, Iterable

__all__ = ["section_names", "section_titles", "run_demo"]


def _sections() -> list[tuple[str, Any]]:
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("d") and "_" in info.name:
            found.append((info.name.split("_", 1)[1], f"{__name__}.{info.name}"))
    return found


def section_names() -> list[str]:
    """Names of the demo sections, in the order they run."""
    return [name for name, _ in _sections()]


def section_titles() -> dict[str, str]:
    """Each section's name and title, in the order they run (imports every section module)."""
    return {name: importlib.import_module(mod).TITLE for name, mod in _sections()}


def run_demo(only: Iterable[str] | None = None,
             on_section: Callable[[str, str], None] | None = None,
             on_start: Callable[[str, str, int, int], None] | None = None) -> tuple[dict[str, Any], str]:
    """Run the sections (all, or ``only``); returns per-section data and the text.

    ``on_start(name, title, index, total)`` is called as a section starts
    (``index`` sections are done) and ``on_section(name, text)`` as it
    finishes, with that section's text (the CLI prints it at once and shows a
    status line meanwhile).
    """
    wanted = set(only) if only else None
    chosen = [(name, mod) for name, mod in _sections() if wanted is None or name in wanted]
    results: dict[str, Any] = {}
    out: list[str] = []
    for index, (name, modname) in enumerate(chosen):
        module = importlib.import_module(modname)
        if on_start is not None:
            on_start(name, module.TITLE, index, len(chosen))
        t0 = time.perf_counter()
        data, lines = module.run()
        elapsed = time.perf_counter() - t0
        data["seconds"] = round(elapsed, 3)
        results[name] = data
        block = [f"== {module.TITLE} ({elapsed:.1f} s) ==", *lines, ""]
        out += block
        if on_section is not None:
            on_section(name, "\n".join(block))
    return results, "\n".join(out)
