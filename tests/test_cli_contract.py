"""The CLI contract: every subcommand x a table of bad arguments -> exit 2, one line on stderr, strict JSON.

Subcommands are enumerated from the argparse parser itself, so a new one is
covered by the generic cases (unknown option, and for each of its numeric
options and choices: non-number, zero, negative, beyond int32, unknown
choice; for each file positional: missing file, directory, empty matrix,
garbage).  The CLI runs in-process (``main(argv)``), so the table stays fast.
"""
from __future__ import annotations

import argparse
import json
import sys

import pytest

from tvm_ext.cli.main import build_parser, main

#: Valid positionals and options of each leaf subcommand (the bad value replaces one of them).
BASE: dict[str, tuple[dict[str, str], list[str]]] = {
    "accel gemm": ({"M": "8", "N": "8", "K": "8"}, ["--no-check"]),
    "accel gru": ({}, ["--hidden", "8", "--batch", "1", "--no-check"]),
    "accel sepconv": ({"channels": "4", "hw": "6"}, ["--no-check"]),
    "accel systems": ({}, []),
    "cg": ({"matrix": "LFAT5"}, []),
    "compile": ({"model": "mlp"}, []),
    "demo": ({}, []),
    "fusion report": ({}, []),
    "info": ({}, []),
    "map": ({"kernel": "matmul"}, []),
    "matrix stats": ({"matrix": "LFAT5"}, []),
    "matrix list": ({}, []),
    "report": ({}, ["--out", "{tmp}/report"]),
    "sextans": ({"matrix": "LFAT5"}, ["--no-check"]),
    "spmm": ({"matrix": "LFAT5"}, []),
    "tune accel": ({}, ["--shape", "8", "8", "8", "--db", "{tmp}/db", "--no-progress"]),
    "tune cg": ({"matrix": "LFAT5"}, ["--n", "2", "--db", "{tmp}/db", "--no-progress"]),
    "tune conv": ({}, ["--shape", "1", "4", "4", "8", "3", "--db", "{tmp}/db", "--no-progress"]),
    "tune gemm": ({}, ["--shape", "8", "8", "8", "--db", "{tmp}/db", "--no-progress"]),
    "tune selector": ({}, ["--size", "tiny", "--n", "8", "--model", "{tmp}/m.json", "--no-progress"]),
    "tune sextans": ({"matrix": "LFAT5"}, ["--n", "8", "--db", "{tmp}/db", "--no-progress"]),
    "tune spmm": ({"matrix": "LFAT5"}, ["--n", "8", "--db", "{tmp}/db", "--no-progress"]),
}

#: Commands for which describing an empty (0 x 0) matrix is a valid request.
EMPTY_MATRIX_OK = {"matrix stats"}

INT_NAMES = {"size", "count"}


def _leaves(parser: argparse.ArgumentParser, path=()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path), parser
    for action in subs:
        for name, child in action.choices.items():
            yield from _leaves(child, (*path, name))


LEAVES = dict(_leaves(build_parser()))


def _argv(leaf: str, tmp, positionals: dict[str, str] | None = None, options: list[str] | None = None) -> list[str]:
    parser = LEAVES[leaf]
    base_pos, base_opts = BASE.get(leaf, ({}, []))
    pos = dict(base_pos, **(positionals or {}))
    args = [pos[a.dest] for a in parser._actions if not a.option_strings and a.dest in pos]
    opts = [o.replace("{tmp}", str(tmp)) for o in base_opts]
    if options:  # an option given again overrides the base (argparse keeps the last)
        opts += options
    return [*leaf.split(), *[a.replace("{tmp}", str(tmp)) for a in args], *opts, "--json"]


def _bad_values(action: argparse.Action) -> list[tuple[str, str]]:
    kind = getattr(action.type, "__name__", "")
    out = []
    if kind in INT_NAMES or kind == "real":
        out += [("non-number", "abc"), ("negative", "-5"), ("huge", "1" + "0" * 30), ("not finite", "nan")]
        try:
            action.type("0")
        except argparse.ArgumentTypeError:
            out.append(("zero", "0"))
    if action.choices and not isinstance(action.choices, dict):
        out.append(("unknown choice", "no-such-choice"))
    return out


def _cases():
    for leaf, parser in LEAVES.items():
        yield pytest.param(leaf, None, ["--no-such-option"], id=f"{leaf}-unknown-option")
        for action in parser._actions:
            if not action.option_strings or action.dest in ("help", "json", "debug", "allow_large"):
                continue
            for what, value in _bad_values(action):
                nargs = action.nargs if isinstance(action.nargs, int) else 1
                yield pytest.param(leaf, None, [action.option_strings[-1], *[value] * nargs],
                                   id=f"{leaf}-{action.option_strings[-1]}-{what}")
        for action in parser._actions:
            if action.option_strings:
                continue
            if action.type is not None and getattr(action.type, "__name__", "") in INT_NAMES:
                for what, value in (("non-number", "abc"), ("zero", "0"), ("negative", "-5"),
                                    ("huge", "1" + "0" * 30)):
                    yield pytest.param(leaf, {action.dest: value}, None, id=f"{leaf}-{action.dest}-{what}")
            elif "FILE" in str(action.metavar or ""):
                for what in ("missing file", "directory", "empty matrix", "garbage file"):
                    if what == "empty matrix" and leaf in EMPTY_MATRIX_OK:
                        continue
                    yield pytest.param(leaf, {action.dest: what}, None, id=f"{leaf}-{action.dest}-{what}")


def _strict_json(text: str):
    def no_constants(name):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=no_constants)


def check_contract(capsys, argv: list[str], code_wanted: int = 2) -> str:
    """Run ``argv`` in-process; assert the exit code, one stderr line, strict JSON; return stderr."""
    try:
        code = main(argv)
    except SystemExit as e:  # argparse, should main ever let it through
        code = e.code
    out, err = capsys.readouterr()
    assert code == code_wanted, (argv, code, err[-2000:])
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, (argv, err[-2000:])
    assert "internal error" not in err and "Traceback" not in err, (argv, err)
    if out.strip():
        assert isinstance(_strict_json(out), dict)
    return lines[0]


@pytest.fixture
def bad_files(tmp_path):
    files = {"missing file": str(tmp_path / "no-such.mtx"), "directory": str(tmp_path / "adir")}
    (tmp_path / "adir").mkdir()
    (tmp_path / "empty.mtx").write_text("%%MatrixMarket matrix coordinate real general\n0 0 0\n")
    (tmp_path / "garbage.mtx").write_bytes(b"\x00\xffnot a matrix\n")
    files["empty matrix"] = str(tmp_path / "empty.mtx")
    files["garbage file"] = str(tmp_path / "garbage.mtx")
    return files


@pytest.mark.parametrize("leaf, positionals, options", list(_cases()))
def test_bad_argument_is_one_line_exit_2(capsys, tmp_path, bad_files, leaf, positionals, options):
    if positionals:
        positionals = {k: bad_files.get(v, v) for k, v in positionals.items()}
    check_contract(capsys, _argv(leaf, tmp_path, positionals, options))


def test_every_leaf_subcommand_has_a_base(capsys):
    """A new subcommand gets the generic cases; give it a valid BASE so its file/number cases reach it."""
    assert set(LEAVES) <= set(BASE), sorted(set(LEAVES) - set(BASE))


HUGE = 2 ** 31 - 1


@pytest.mark.parametrize("argv, needle", [
    (["accel", "gemm", "100000", "100000", "100000"], "--allow-large"),
    (["accel", "gru", "--steps", "100000", "--hidden", "64", "--batch", "8"], "steps"),
    (["spmm", "LFAT5", "--n", str(HUGE)], "--allow-large"),
    (["cg", "LFAT5", "--n", str(HUGE)], "--allow-large"),
    (["sextans", "LFAT5", "--n0", str(HUGE)], "--allow-large"),
    (["sextans", "LFAT5", "--n", str(HUGE)], "--allow-large"),
    (["sextans", "LFAT5", "--raw-distance", str(HUGE)], "--allow-large"),
    (["tune", "gemm", "--shape", "100000", "100000", "100000", "--db", "{tmp}/db"], "int32"),
    (["tune", "gemm", "--shape", "70000", "70000", "8", "--db", "{tmp}/db"], "int32"),
    (["tune", "spmm", "LFAT5", "--n", str(HUGE), "--db", "{tmp}/db"], "--allow-large"),
    (["tune", "accel", "--shape", "100000", "100000", "100000", "--db", "{tmp}/db"], "--allow-large"),
    (["spmm", "LFAT5", "--repeat", "0"], "--repeat"),
    (["cg", "LFAT5", "--repeat", "0"], "--repeat"),
    (["accel", "gemm", "8", "8", "8", "--config", "{tmp}"], ""),
    (["map", "conv2d", "--size", "hw=100000", "--build"], "int32"),
    (["map", "conv2d", "--size", "hw=2000", "--build"], "--allow-large"),
])
def test_unbounded_or_degenerate_requests_are_refused(capsys, tmp_path, argv, needle):
    line = check_contract(capsys, [a.replace("{tmp}", str(tmp_path)) for a in argv] + ["--json"])
    assert needle in line
    assert not (tmp_path / "db").exists()  # refused before a database was created


def test_help_documents_the_override():
    assert "--allow-large" in build_parser().format_help()


def test_empty_and_zero_matrices_in_spmm_and_cg(capsys, tmp_path):
    zero = tmp_path / "zero.mtx"
    zero.write_text("%%MatrixMarket matrix coordinate real general\n3 3 0\n")
    assert "empty" in check_contract(capsys, ["spmm", str(zero), "--json"])
    assert "no non-zeros" in check_contract(capsys, ["cg", str(zero), "--json"])
    not_spd = tmp_path / "negdiag.mtx"
    not_spd.write_text("%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 -1\n2 2 1\n")
    assert "positive" in check_contract(capsys, ["cg", str(not_spd), "--json"])


def test_compile_without_torch_gives_an_install_hint(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    model = tmp_path / "model.pt2"
    model.write_bytes(b"PK\x03\x04")
    for name in ("mlp", str(model)):
        assert "pip install" in check_contract(capsys, ["compile", name, "--json"])


def test_compile_help_says_pt2_is_trusted_only():
    text = LEAVES["compile"].format_help()
    assert ".pt2" in text and "trusted files only" in " ".join(text.split())


@pytest.mark.parametrize("how", ["flag", "env"])
def test_allow_large_lifts_a_work_limit(capsys, monkeypatch, how):
    from tvm_ext.limits import LIMITS

    monkeypatch.setitem(LIMITS, "flop", 1e4)  # a small GEMM is now "large"
    argv = ["accel", "gemm", "32", "32", "32", "--json"]
    assert "about 6.55e+04 FLOP" in check_contract(capsys, argv)
    if how == "flag":
        argv.append("--allow-large")
    else:
        monkeypatch.setenv("TVM_EXT_ALLOW_LARGE", "1")
    assert main(argv) == 0
    data = _strict_json(capsys.readouterr().out)
    assert data["flops"] == 2 * 32 ** 3 and data["max_rel_err"] < 1e-5


def test_cg_that_does_not_converge_exits_3_with_strict_json(capsys):
    code = main(["cg", "LFAT5", "--n", "2", "--maxiter", "1", "--repeat", "1", "--json"])
    out, err = capsys.readouterr()
    data = _strict_json(out)  # no NaN/Infinity tokens
    assert code == 3, err
    assert data["converged"] is False and data["reason"] and data["iterations"] == 1


def test_json_output_never_carries_nan_or_infinity():
    import numpy as np

    from tvm_ext.cli.main import to_json

    text = to_json({"a": float("nan"), "b": [np.float64("inf"), np.float32(2.5)], "c": {"d": -np.inf}, "e": "NaN"})
    assert _strict_json(text) == {"a": None, "b": [None, 2.5], "c": {"d": None}, "e": "NaN"}


class _Wrong:
    """Proxy of an executor or compiled model whose results are off by a factor (every other attribute kept)."""

    def __init__(self, inner, factor=1.5):
        self._inner, self._factor = inner, factor

    def __call__(self, *args, **kwargs):
        out = self._inner(*args, **kwargs)
        if isinstance(out, (list, tuple)):
            return type(out)(self._wrong(o) for o in out)
        return self._wrong(out)

    def _wrong(self, out):
        import numpy as np

        return np.asarray(out.numpy() if hasattr(out, "numpy") else out) * self._factor

    def __getattr__(self, name):
        return getattr(self._inner, name)


def _wrong_simulation(module, name, key=None):
    """Wrap ``module.name`` (a simulator) so that its output is 1.5 times too large."""
    real = getattr(module, name)

    def simulate(*args, **kwargs):
        res = real(*args, **kwargs)
        if key is None:
            return res * 1.5
        res.outputs[key] = res.outputs[key] * 1.5
        return res

    return simulate


def test_self_checks_exit_2_when_the_numbers_are_wrong(capsys, monkeypatch):
    """spmm, accel gemm/gru and sextans compare with a reference; a wrong result must not exit 0."""
    import tvm_ext.accel.cases as accel_cases
    import tvm_ext.spmm_engine.engine as engine
    from schedules.sparse.plan import Plan

    real_build = Plan.build
    monkeypatch.setattr(Plan, "build", lambda self, *a, **k: _Wrong(real_build(self, *a, **k)))
    line = check_contract(capsys, ["spmm", "LFAT5", "--n", "4", "--repeat", "1", "--json"])
    assert "vs scipy" in line and "the result is wrong" in line

    monkeypatch.setattr(accel_cases, "simulate", _wrong_simulation(accel_cases, "simulate", "C"))
    line = check_contract(capsys, ["accel", "gemm", "16", "16", "16", "--json"])
    assert "accel gemm 16 16 16" in line and "the result is wrong" in line
    real_ref = accel_cases.gru_reference
    monkeypatch.setattr(accel_cases, "gru_reference", lambda *a: real_ref(*a) * 2.0)
    line = check_contract(capsys, ["accel", "gru", "--steps", "3", "--hidden", "8", "--batch", "1", "--json"])
    assert "accel gru" in line and "the result is wrong" in line

    monkeypatch.setattr(engine, "simulate", _wrong_simulation(engine, "simulate"))
    line = check_contract(capsys, ["sextans", "LFAT5", "--n", "8", "--json"])
    assert "sextans LFAT5" in line and "the result is wrong" in line


def test_compile_check_exits_2_when_the_numbers_are_wrong(capsys, monkeypatch):
    pytest.importorskip("torch")
    import tvm_ext.compile as tc
    import tvm_ext.models as models

    real_llvm_only = tc.llvm_only
    monkeypatch.setattr(tc, "llvm_only", lambda *a, **k: _Wrong(real_llvm_only(*a, **k)))
    line = check_contract(capsys, ["compile", "mlp", "--size", "tiny", "--check", "--json"])
    assert "llvm-only" in line and "the result is wrong" in line

    real_get_model = models.get_model

    class WrongReference(_Wrong):
        def reference(self):
            return [self._wrong(r) for r in self._inner.reference()]

    monkeypatch.setattr(models, "get_model", lambda *a, **k: WrongReference(real_get_model(*a, **k)))
    line = check_contract(capsys, ["compile", "mlp", "--size", "tiny", "--json"])
    assert "vs PyTorch" in line and "the result is wrong" in line


@pytest.mark.parametrize("target, needle", [
    ('{"kind": "llvm", "mcpu": NaN}', "mcpu: non-finite number NaN"),
    ('{"kind": "llvm", "num-cores": Infinity}', "non-finite number Infinity"),
    ("[1]", "expected a JSON dict"),
    ("not json", "invalid JSON"),
    ('{"kind": "cuda"}', "compile builds for kind 'llvm'"),
    ('{"kind": "llvm", "mcpu": "bogus"}', "not a CPU that LLVM knows"),
])
def test_compile_target_is_strict_json_for_llvm(capsys, target, needle):
    pytest.importorskip("torch")
    assert needle in check_contract(capsys, ["compile", "mlp", "--size", "tiny", "--target", target, "--json"])


def test_config_with_a_string_for_a_number_or_a_directory_is_exit_2(capsys, tmp_path):
    from pathlib import Path

    import tvm_ext.accel

    mini = json.loads((Path(tvm_ext.accel.__file__).parent / "configs" / "mini.json").read_text())
    mini["clock_ghz"] = "fast"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(mini))
    assert "clock_ghz" in check_contract(capsys, ["accel", "gemm", "8", "8", "8", "--config", str(bad), "--json"])
    check_contract(capsys, ["accel", "gru", "--hidden", "8", "--batch", "1", "--config", str(tmp_path), "--json"])


def test_compile_model_file_and_shape_errors_are_one_line(capsys, tmp_path):
    pytest.importorskip("torch")
    bad_zip = tmp_path / "bad.pt2"
    bad_zip.write_bytes(b"PK\x03\x04" + b"not really a zip archive" * 10)  # torch logs a traceback for this
    assert "cannot load" in check_contract(capsys, ["compile", str(bad_zip), "--json"])
    assert "--shape applies to ONNX" in check_contract(capsys, ["compile", "mlp", "--shape", "x=1,2", "--json"])
    onnx_file = tmp_path / "m.onnx"
    onnx_file.write_bytes(b"\x00")
    for shape, needle in [("x=-1,2", "positive"), ("x=100000,100000", "int32"), ("x=a", "NAME=D1")]:
        assert needle in check_contract(capsys, ["compile", str(onnx_file), "--shape", shape, "--json"])
    assert "neither a built-in model (mlp" in check_contract(capsys, ["compile", "resnet9000", "--json"])
    assert "is a directory" in check_contract(capsys, ["compile", str(tmp_path), "--json"])


def test_map_size_beyond_int32_is_refused_before_the_kernel_is_made(capsys):
    assert "below 2**31" in check_contract(capsys, ["map", "conv2d", "--size", "hw=" + "9" * 30, "--json"])


def test_ctrl_c_while_the_subcommands_load_is_one_line_exit_130(capsys, monkeypatch):
    cli_main = sys.modules["tvm_ext.cli.main"]  # the package re-exports main(), which shadows the module name

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main, "build_parser", interrupted)
    assert check_contract(capsys, ["info", "--json"], code_wanted=130) == "tvm-ext: error: interrupted"


def test_the_program_ignores_ctrl_c_once_its_result_is_printed(capsys, monkeypatch):
    import signal

    previous = signal.getsignal(signal.SIGINT)
    monkeypatch.setattr(sys, "argv", ["tvm-ext", "info", "--json"])
    try:
        assert main() == 0  # as the console script calls it
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # teardown cannot be killed mid-way
    finally:
        signal.signal(signal.SIGINT, previous)
    assert isinstance(_strict_json(capsys.readouterr().out), dict)
    assert main(["info", "--json"]) == 0 and signal.getsignal(signal.SIGINT) is previous  # in-process callers keep theirs
