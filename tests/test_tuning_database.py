"""The tuning database: corruption is an error and nothing is overwritten; torn tails; locking; CLI."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tvm_ext.errors import TuningError
from tvm_ext.tuning.database import (KNOB_RECORDS, MS_RECORDS, MS_WORKLOADS, TASKS, TuningDatabase,
                                     check_database, read_json_lines)
from tvm_ext.tuning.session import run_session
from tvm_ext.tuning.tasks import make_task
from tvm_ext.workloads import lap2d


def _snapshot(root):
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}


@pytest.fixture
def task():
    return make_task("sextans", matrix=lap2d(8), n=8, name="lap8")


@pytest.fixture
def filled_db(tmp_path, task):
    db = tmp_path / "db"
    run_session(task, db, 4, progress=False)
    return db


def test_database_round_trips_records(filled_db, task):
    rep = check_database(filled_db)
    assert len(rep.knob_records) == 4 and len(rep.tasks) == 1
    assert rep.tasks[0]["task"] == task.key
    db = TuningDatabase(filled_db)
    with db.session():
        recs = db.knob_records(task.key)
        rec = db.add_knob_record(task.key, {"K0": 1, "N0": 2, "D": 7, "P": 16}, 99.0, "cycles")
    assert len(recs) == 4 and all(r["unit"] == "cycles" for r in recs)
    again = check_database(filled_db).knob_records
    assert again[-1]["cost"] == 99.0 and again[-1]["knobs"] == rec["knobs"] and len(again) == 5


@pytest.mark.parametrize("garbage", [b"{not json}\n", b"[1, 2, 3]\n", b'{"task": 3, "knobs": {}}\n'])
def test_corrupt_line_is_a_clear_error_and_nothing_is_overwritten(filled_db, task, garbage):
    path = filled_db / KNOB_RECORDS
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + garbage + b"".join(lines[1:]))
    before = _snapshot(filled_db)
    with pytest.raises(TuningError, match=rf"{KNOB_RECORDS}:2: .*not modified"):
        run_session(task, filled_db, 8, progress=False)
    assert _snapshot(filled_db) == before


def test_ms_record_naming_a_missing_workload_is_corruption(tmp_path):
    db = tmp_path / "db"
    db.mkdir()
    (db / MS_WORKLOADS).write_text('["123", "abc"]\n')
    (db / MS_RECORDS).write_text('[0, [[[], []], [1e-3], {}, []]]\n[5, [[[], []], [1e-3], {}, []]]\n')
    before = _snapshot(db)
    with pytest.raises(TuningError, match=r":2: record names workload 5"):
        check_database(db)
    with pytest.raises(TuningError):
        run_session(make_task("gemm", shape=(16, 16, 16)), db, 2, progress=False)
    assert _snapshot(db) == before


def test_torn_tail_is_moved_aside_and_the_session_continues(filled_db, task):
    path = filled_db / KNOB_RECORDS
    good = path.read_bytes()
    path.write_bytes(good + b'{"task": "sextans:abc", "knobs": {"K0"')  # killed mid-write
    assert read_json_lines(path).torn is not None
    r = run_session(task, filled_db, 6, progress=False)
    assert r.records == 6 and any("incomplete last line" in n for n in r.notes)
    assert path.read_bytes().startswith(good)
    assert (filled_db / (KNOB_RECORDS + ".torn")).read_bytes().startswith(b'{"task": "sextans:abc"')
    assert len(check_database(filled_db).knob_records) == 6


def test_second_session_on_the_same_database_is_refused(filled_db, task):
    db = TuningDatabase(filled_db)
    with db.session():
        with pytest.raises(TuningError, match="in use by another session"):
            run_session(task, filled_db, 6, progress=False)


def test_database_path_that_is_a_file_is_an_error(tmp_path, task):
    f = tmp_path / "db"
    f.write_text("x")
    with pytest.raises(TuningError, match="not a directory"):
        run_session(task, f, 2, progress=False)
    assert f.read_text() == "x"


def test_task_entries_record_the_default_once(filled_db, task):
    run_session(task, filled_db, 6, progress=False)
    entries = [json.loads(x) for x in (filled_db / TASKS).read_text().splitlines()]
    assert len(entries) == 1 and entries[0]["default"]["unit"] == "cycles"


# --------------------------------------------------------------------------- CLI
def _cli(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "tvm_ext.cli.main", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_cli_tune_json_has_the_documented_keys_and_progress_on_stderr(tmp_path):
    p = _cli("tune", "sextans", "LFAT5", "--n", "8", "--trials", "6", "--db", str(tmp_path / "db"), "--json")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)  # exactly one JSON object on stdout
    assert {"best_cycles", "default_cycles", "records"} <= set(data)
    assert data["records"] == 6 and data["best_cycles"] <= data["default_cycles"]
    assert "6/6" in p.stderr and "best" in p.stderr
    text = _cli("tune", "sextans", "LFAT5", "--n", "8", "--trials", "7", "--db", str(tmp_path / "db"),
                "--no-progress")
    assert text.returncode == 0 and "best tuned" in text.stdout and "1 new this session" in text.stdout
    assert "best" not in text.stderr  # --no-progress: no bar


def test_cli_unknown_task_and_corrupt_database_are_one_line_errors(tmp_path):
    p = _cli("tune", "fft", "--db", str(tmp_path / "db"), "--json")
    assert p.returncode == 2 and json.loads(p.stdout)["error"].startswith("unknown tuning task 'fft'")
    db = tmp_path / "db2"
    db.mkdir()
    (db / KNOB_RECORDS).write_text("garbage\n")
    p = _cli("tune", "sextans", "LFAT5", "--n", "8", "--trials", "2", "--db", str(db))
    assert p.returncode == 2 and "corrupt line" in p.stderr and "Traceback" not in p.stderr
    assert (db / KNOB_RECORDS).read_text() == "garbage\n"
    p = _cli("tune", "gemm", "--shape", "4", "4", "--db", str(tmp_path / "db3"))
    assert p.returncode == 2 and "three sizes" in p.stderr
