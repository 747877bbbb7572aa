"""Atomic file replacement (tvm_ext.atomic_file) and its users: no predictable temporary names, no torn files."""
from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from tvm_ext.atomic_file import atomic_write, atomic_write_bytes
from tvm_ext.errors import TuningError


def _plant_old_temporary_names(directory, stem_names, victim):
    """Symlinks to ``victim`` at every ``<name>.<pid>.*`` temporary name the old writers used."""
    pid = os.getpid()
    planted = []
    for name in stem_names:
        for suffix in (".tmp.json", ".npz", ".tmp"):
            link = directory / f".{name}.{pid}{suffix}"
            link.symlink_to(victim)
            planted.append(link)
    return planted


def test_replaces_the_whole_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"old")
    atomic_write_bytes(p, b"new contents")
    assert p.read_bytes() == b"new contents"
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert sorted(f.name for f in tmp_path.iterdir()) == ["f.bin"]


def test_a_failing_writer_leaves_the_old_file(tmp_path):
    p = tmp_path / "f.txt"
    p.write_text("old")

    def write(tmp):
        with open(tmp, "w") as fh:
            fh.write("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(p, write)
    assert p.read_text() == "old"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["f.txt"]


def test_the_temporary_file_keeps_the_suffix_a_writer_needs(tmp_path):
    seen = []
    atomic_write(tmp_path / "a.npz", lambda tmp: seen.append(tmp) or np.savez(tmp, x=np.ones(2)))
    atomic_write(tmp_path / "b", lambda tmp: seen.append(tmp) or open(tmp, "w").close(), suffix=".json")
    assert seen[0].endswith(".tmp.npz") and seen[1].endswith(".tmp.json")
    with np.load(tmp_path / "a.npz") as z:
        assert z["x"].tolist() == [1.0, 1.0]


def test_arg_store_does_not_follow_a_symlink_at_a_guessable_name(tmp_path):
    from tvm_ext.tuning.measure import ArgStore, args_key

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    root = tmp_path / "args"
    root.mkdir()
    info = [["TENSOR", "float32", [3]]]
    planted = _plant_old_temporary_names(root, [args_key(info)], victim)
    store = ArgStore(root)
    key = store.put(info, [np.arange(3, dtype="float32")])
    assert store.get(key)[0].tolist() == [0.0, 1.0, 2.0]
    assert victim.read_text() == "precious" and all(p.is_symlink() for p in planted)


def test_selector_save_does_not_follow_a_symlink_at_a_guessable_name(tmp_path):
    xgb = pytest.importorskip("xgboost")
    from tvm_ext.tuning.selector import LearnedSelector

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    planted = _plant_old_temporary_names(tmp_path, ["model"], victim)
    X = np.arange(20, dtype=float).reshape(10, 2)
    booster = xgb.train({"max_depth": 2}, xgb.DMatrix(X, label=X[:, 0]), num_boost_round=2)
    sel = LearnedSelector(booster, ["a", "b"], ["csr"], {})
    p = sel.save(tmp_path / "model.json")
    loaded = LearnedSelector.load(p)
    np.testing.assert_allclose(loaded.booster.predict(xgb.DMatrix(X)), booster.predict(xgb.DMatrix(X)))
    assert victim.read_text() == "precious" and all(q.is_symlink() for q in planted)


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity"])
def test_selector_metadata_with_a_non_finite_number_is_refused(tmp_path, bad):
    pytest.importorskip("xgboost")
    from tvm_ext.tuning.selector import FORMAT_VERSION, LearnedSelector

    (tmp_path / "m.json").write_text("{}")
    (tmp_path / "m.meta.json").write_text(
        f'{{"version": {FORMAT_VERSION}, "feature_names": [], "kinds": [], "train_entries": {bad}}}')
    with pytest.raises(TuningError, match=f"train_entries: non-finite number {bad}"):
        LearnedSelector.load(tmp_path / "m.json")


def test_selector_metadata_of_the_wrong_shape_is_refused(tmp_path):
    xgb = pytest.importorskip("xgboost")
    from tvm_ext.tuning.selector import FORMAT_VERSION, LearnedSelector

    X = np.arange(8, dtype=float).reshape(4, 2)
    xgb.train({}, xgb.DMatrix(X, label=X[:, 0]), num_boost_round=1).save_model(str(tmp_path / "m.json"))
    (tmp_path / "m.meta.json").write_text(f'{{"version": {FORMAT_VERSION}, "feature_names": 3, "kinds": []}}')
    with pytest.raises(TuningError, match="'feature_names' must be a list of strings"):
        LearnedSelector.load(tmp_path / "m.json")
