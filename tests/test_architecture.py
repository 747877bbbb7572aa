"""The import-layers contract and the size rule, checked over the source's AST.

Layers, bottom to top (README "Architecture"):

0. base: ``tvm_ext`` (the package's lazy facade), ``tvm_ext.errors``, ``target``
   (with the hardware facts), ``kernel_cache``, ``timing``, ``workloads``,
   ``zero_copy``, ``limits``, ``json_config``, ``lazy_exports``, ``platform_info``,
   ``atomic_file``, ``markdown``, ``sigint``, ``figures``, ``tvmscript_text`` (the
   TVMScript text builder both siblings generate code with), and the TVM registration
   hooks ``import_hooks`` and ``runtime_functions``;
1. ``schedules`` and ``tensorize``: siblings on the base, neither imports the other;
2. the ``tvm_ext`` top layers: compile / pipeline / compile_steps, accel,
   spmm_engine, tuning, models, report, demo, byoc_common, model_call;
3. ``tvm_ext.cli``.

An import may point down or sideways within its layer group, never up.  Every
``import``, ``from ... import`` (also inside functions) and
``importlib.import_module`` / ``__import__`` call with a literal module name
counts.  ``bench`` is not installed, so nothing in the packages imports it.
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tvm_ext", "schedules", "tensorize")

BASE_MODULES = ("tvm_ext.errors", "tvm_ext.target", "tvm_ext.kernel_cache", "tvm_ext.timing", "tvm_ext.workloads",
                "tvm_ext.zero_copy", "tvm_ext.limits", "tvm_ext.json_config", "tvm_ext.lazy_exports",
                "tvm_ext.platform_info", "tvm_ext.atomic_file", "tvm_ext.markdown", "tvm_ext.sigint", "tvm_ext.figures",
                "tvm_ext.import_hooks", "tvm_ext.runtime_functions", "tvm_ext.tvmscript_text")

#: (importer, imported): edges that break the layering on purpose, each with why.
ALLOWED_UPWARD = {
    # Runs when TVM itself is imported (an import hook), after every layer can load:
    # it registers the "tvm_ext" Relax pipeline and the BYOC patterns with TVM.
    ("tvm_ext.import_hooks", "tvm_ext.pipeline"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=None)
def _text(path: Path) -> str:
    return path.read_text()


def _sources() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


MODULES = _sources()


def _resolve(name: str) -> str:
    """The longest known module prefix of ``name`` (``pkg.mod.attr`` -> ``pkg.mod``)."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in MODULES:
            return ".".join(parts[:k])
    return name


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file, string imports included."""
    mod = _module_name(path)
    return imports_in(_text(path), mod if path.name == "__init__.py" else mod.rpartition(".")[0])


def imports_in(text: str, pkg: str) -> list[tuple[str, int]]:
    """(imported module, line) for every import in source ``text`` of a module in package ``pkg``."""
    tree = ast.parse(text)
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(_resolve(a.name), node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                head = pkg.split(".")[:len(pkg.split(".")) - node.level + 1]
                base = ".".join(head + ([node.module] if node.module else []))
            out += [(_resolve(f"{base}.{a.name}"), node.lineno) for a in node.names]
        elif isinstance(node, ast.Call):
            f = node.func
            called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if called in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                out.append((_resolve(node.args[0].value), node.lineno))
    return out


def layer(module: str) -> tuple[int, str]:
    """(rank, group) of a first-party module; ``(-1, "")`` for third-party ones."""
    top = module.split(".")[0]
    if top == "bench":
        return 99, "bench"
    if top in ("schedules", "tensorize"):
        return 1, top
    if top != "tvm_ext":
        return -1, ""
    if module == "tvm_ext" or any(module == b or module.startswith(b + ".") for b in BASE_MODULES):
        return 0, "base"
    if module == "tvm_ext.cli" or module.startswith("tvm_ext.cli."):
        return 3, "cli"
    return 2, "top"


def violations() -> list[str]:
    bad = []
    for mod, path in MODULES.items():
        rank, group = layer(mod)
        for target, line in imports_of(path):
            t_rank, t_group = layer(target)
            if t_rank < 0 or t_group == group or (mod, target) in ALLOWED_UPWARD:
                continue
            if t_rank >= rank:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {mod} ({group}) imports {target} ({t_group})")
    return bad


def test_the_layer_classification_covers_the_packages():
    assert layer("tvm_ext.errors") == (0, "base") and layer("tvm_ext.workloads.stats") == (0, "base")
    assert layer("schedules.sparse.selection") == (1, "schedules") and layer("tensorize.emit") == (1, "tensorize")
    assert layer("tvm_ext.tuning.selector") == (2, "top") and layer("tvm_ext.cli.main") == (3, "cli")
    probe = "import importlib\ndef f():\n    from .selection import Candidate\n" \
            "    return importlib.import_module('tvm_ext.tuning.selector')\n"
    found = imports_in(probe, "schedules.sparse")
    assert ("schedules.sparse.selection", 3) in found and ("tvm_ext.tuning.selector", 4) in found


def test_imports_point_down_the_layers():
    assert violations() == []


def test_allowances_are_still_needed():
    for importer, imported in ALLOWED_UPWARD:
        assert imported in {t for t, _ in imports_of(MODULES[importer])}, (importer, imported)


# --------------------------------------------------------------------------- import cycles
#: Packages whose modules never reach themselves through their imports (function-level and
#: ``TYPE_CHECKING`` ones included): what two modules share lives a layer below both.
ACYCLIC_PACKAGES = ("tensorize", "tvm_ext.accel", "schedules.sparse", "schedules.fusion", "tvm_ext.compile_steps")
#: package -> sub-packages its check leaves out for now, each with why (a cycle still to break).
CYCLIC_SUBPACKAGES: dict[str, dict[str, str]] = {}


def import_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (module -> modules it imports), or ``[]``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(mod: str, path: list[str]) -> list[str]:
        state[mod] = 1
        for dep in sorted(graph.get(mod, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep, path + [dep])):
                return found
        state[mod] = 2
        return []

    for mod in sorted(graph):
        if mod not in state and (found := visit(mod, [mod])):
            return found
    return []


def package_graph(package: str, without: tuple[str, ...] = ()) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports, leaving out the sub-packages ``without``."""
    def inside(m: str, pkg: str) -> bool:
        return m == pkg or m.startswith(pkg + ".")

    def kept(m: str) -> bool:
        return inside(m, package) and not any(inside(m, sub) for sub in without)

    return {m: {t for t, _ in imports_of(p) if kept(t) and t != m} for m, p in MODULES.items() if kept(m)}


def test_the_cycle_finder_finds_cycles_and_the_graphs_have_edges():
    assert import_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert import_cycle({"a": {"b"}, "b": set()}) == []
    assert "tensorize.tensor_intrin" in package_graph("tensorize")["tensorize.x86"]
    assert "tvm_ext.accel.approach" in package_graph("tvm_ext.accel")["tvm_ext.accel.scheduler"]
    sparse = package_graph("schedules.sparse", ("schedules.sparse.recipes",))
    assert "schedules.sparse.row_sweep" in sparse["schedules.sparse.p2p"]
    assert "schedules.sparse.p2p" in sparse["schedules.sparse.triangular"]
    assert "schedules.sparse.timed_choice" in sparse["schedules.sparse.selection"]
    assert not any(m.startswith("schedules.sparse.recipes") for m in sparse)
    assert "schedules.fusion.cg_traffic" in package_graph("schedules.fusion")["schedules.fusion.fusion_choice"]
    assert "tvm_ext.compile_steps.block_queries" in package_graph("tvm_ext.compile_steps")["tvm_ext.compile_steps.llvm_schedule"]


@pytest.mark.parametrize("package", ACYCLIC_PACKAGES)
def test_packages_import_their_modules_without_cycles(package):
    assert import_cycle(package_graph(package, tuple(CYCLIC_SUBPACKAGES.get(package, ())))) == []


def test_the_left_out_subpackages_still_have_cycles():
    """A sub-package whose cycle is gone is checked with its package, not left out."""
    for package, subs in CYCLIC_SUBPACKAGES.items():
        assert package in ACYCLIC_PACKAGES
        for sub in subs:
            assert import_cycle(package_graph(sub)), sub


# --------------------------------------------------------------------------- size rule
MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80

#: module -> why it may exceed MAX_MODULE_LINES for now (each one is a split still to do).
LONG_MODULES: dict[str, str] = {}
#: "module:function" -> why it may exceed MAX_FUNCTION_LINES.
LONG_FUNCTIONS: dict[str, str] = {
    "tvm_ext.accel.timing:run": "the simulator's hot loop: locals bound once, no calls per instruction",
    "tvm_ext.compile_steps.sparse_offload:_make_mutator": "a Relax mutator class defined in a function "
                                                          "(TVM loads lazily); its methods are short",
}


def _functions(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


@functools.lru_cache(maxsize=None)
def size_violations() -> tuple[list[str], list[str]]:
    modules, functions = [], []
    for mod, path in MODULES.items():
        text = _text(path)
        if text.count("\n") > MAX_MODULE_LINES and mod not in LONG_MODULES:
            modules.append(f"{mod}: {text.count(chr(10))} lines")
        for fn in _functions(ast.parse(text)):
            n = fn.end_lineno - fn.lineno + 1
            if n > MAX_FUNCTION_LINES and f"{mod}:{fn.name}" not in LONG_FUNCTIONS:
                functions.append(f"{mod}:{fn.name}: {n} lines")
    return modules, functions


@pytest.mark.parametrize("kind", ["modules", "functions"])
def test_sizes_stay_within_the_rule(kind):
    modules, functions = size_violations()
    assert (modules if kind == "modules" else functions) == []


def test_size_allowances_are_still_needed():
    """An allowance whose module or function came back under the limit is removed, not kept."""
    for mod in LONG_MODULES:
        assert _text(MODULES[mod]).count("\n") > MAX_MODULE_LINES, mod
    for key in LONG_FUNCTIONS:
        mod, name = key.split(":")
        sizes = [f.end_lineno - f.lineno + 1 for f in _functions(ast.parse(_text(MODULES[mod]))) if f.name == name]
        assert max(sizes) > MAX_FUNCTION_LINES, key


# --------------------------------------------------------------------------- process words
#: Text that names the work item a piece of code came from instead of saying what the code does.
PROCESS_WORDS = re.compile(r"\b(issue \d+|the issues? asks?|issue's|deliverables? \d*)", re.IGNORECASE)
#: path -> why it may still say so.
PROCESS_WORD_FILES: dict[str, str] = {}


def test_docstrings_and_comments_name_no_work_items():
    files = [p for d in (*PACKAGES, "bench", "tests") for p in sorted((ROOT / d).rglob("*.py"))]
    found = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in files if p.name != Path(__file__).name
             and p.relative_to(ROOT).as_posix() not in PROCESS_WORD_FILES
             for i, line in enumerate(_text(p).splitlines(), 1) if PROCESS_WORDS.search(line)]
    assert found == []


@pytest.mark.parametrize("first", ["tvm", "tensorize", "schedules.sparse", "tvm_ext.accel"])
def test_packages_import_in_any_order(first):
    """Registering with TVM on import must not re-enter a package that is still initialising."""
    import subprocess
    import sys

    code = (f"import {first}\n"
            "import tensorize, schedules.sparse, schedules.fusion, tvm_ext.accel, tvm_ext.spmm_engine, tvm\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
