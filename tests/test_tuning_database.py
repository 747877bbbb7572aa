"""The tuning database: corruption is an error and nothing is overwritten; torn tails; locking; CLI."""
from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys

import pytest

from tvm_ext.errors import TuningError
from tvm_ext.tuning.database import (KNOB_RECORDS, META, MS_RECORDS, MS_WORKLOADS, TASKS, TuningDatabase,
                                     check_database, read_json_lines, tvm_version)
from tvm_ext.tuning.session import run_session
from tvm_ext.tuning.tasks import make_task
from tvm_ext.workloads import lap2d


def _snapshot(root):
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}


def _session_refuses_untouched(task, db, match: str) -> None:
    """A session on ``db`` raises TuningError matching ``match`` and leaves every file as it was."""
    before = _snapshot(db)
    with pytest.raises(TuningError, match=match):
        run_session(task, db, 8, progress=False)
    assert _snapshot(db) == before


def _workload_line(shash: str = "123", version: str | None = None) -> str:
    """A MetaSchedule workload line whose module JSON records ``version`` (default: this TVM)."""
    body = json.dumps({"root_index": 0, "nodes": [], "metadata": {"tvm_version": version or tvm_version()}}).encode()
    return json.dumps([shash, base64.b64encode(struct.pack("<Q", len(body)) + body).decode()]) + "\n"


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
    _session_refuses_untouched(task, filled_db, rf"{KNOB_RECORDS}:2: .*not modified")


def test_ms_record_naming_a_missing_workload_is_corruption(tmp_path):
    db = tmp_path / "db"
    db.mkdir()
    (db / MS_WORKLOADS).write_text(_workload_line())
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
    err = json.loads(p.stdout)["error"]
    assert p.returncode == 2 and "invalid choice: 'fft'" in err and "'gemm'" in err and "'selector'" in err
    db = tmp_path / "db2"
    db.mkdir()
    (db / KNOB_RECORDS).write_text("garbage\n")
    p = _cli("tune", "sextans", "LFAT5", "--n", "8", "--trials", "2", "--db", str(db))
    assert p.returncode == 2 and "corrupt line" in p.stderr and "Traceback" not in p.stderr
    assert (db / KNOB_RECORDS).read_text() == "garbage\n"
    p = _cli("tune", "gemm", "--shape", "4", "4", "--db", str(tmp_path / "db3"))
    assert p.returncode == 2 and "three sizes" in p.stderr


# --------------------------------------------------------------------------- validation and versions
@pytest.mark.parametrize("cost", ["-9.0", "0", "NaN", "Infinity", "-Infinity", '"fast"', "true"])
def test_knob_record_with_a_bad_cost_names_file_and_line(filled_db, task, cost):
    path = filled_db / KNOB_RECORDS
    lines = path.read_bytes().splitlines(keepends=True)
    bad = json.loads(lines[1])
    text = json.dumps(bad).replace(json.dumps(bad["cost"]), "COST", 1).replace('"cost": COST', f'"cost": {cost}')
    path.write_bytes(lines[0] + text.encode() + b"\n" + b"".join(lines[2:]))
    _session_refuses_untouched(task, filled_db, rf"{KNOB_RECORDS}:2: cost must be a finite positive number")


@pytest.mark.parametrize("secs", ["[-0.001]", "[NaN]", "[Infinity]", "[0.001, -1e-05]", '["x"]', "[0]"])
def test_ms_record_with_a_bad_run_time_names_file_and_line(tmp_path, secs):
    db = tmp_path / "db"
    db.mkdir()
    (db / MS_WORKLOADS).write_text(_workload_line())
    (db / MS_RECORDS).write_text(f'[0, [[[], []], [1e-3], {{}}, []]]\n[0, [[[], []], {secs}, {{}}, []]]\n')
    before = _snapshot(db)
    with pytest.raises(TuningError, match=rf"{MS_RECORDS}:2: run_secs must be a list of finite positive"):
        check_database(db)
    assert _snapshot(db) == before


def test_task_entry_with_a_negative_default_is_refused(filled_db, task):
    path = filled_db / TASKS
    entry = json.loads(path.read_text())
    entry["default"]["cost"] = -9.0
    path.write_text(json.dumps(entry) + "\n")
    with pytest.raises(TuningError, match=rf"{TASKS}:1: default must be .* finite positive cost"):
        run_session(task, filled_db, 6, progress=False)


def test_session_writes_a_header_with_format_and_tvm_version(filled_db):
    meta = json.loads((filled_db / META).read_text())
    assert meta["format"] == 1 and meta["tvm"] == tvm_version()
    assert check_database(filled_db).meta["tvm"] == tvm_version()


@pytest.mark.parametrize("header, why", [
    ({"format": 1, "tvm": "0.19.0"}, "database written by TVM 0.19.0"),
    ({"format": 99, "tvm": None}, "database format 99"),
    ({"tvm": "0.27.0"}, "not a database header"),
])
def test_foreign_database_version_is_refused_untouched(filled_db, task, header, why):
    if header.get("tvm", "") is None:
        header["tvm"] = tvm_version()
    (filled_db / META).write_text(json.dumps(header) + "\n")
    _session_refuses_untouched(task, filled_db, rf"{META}:1: {why}")


def test_workload_from_another_tvm_series_is_refused(tmp_path):
    db = tmp_path / "db"
    db.mkdir()
    (db / MS_WORKLOADS).write_text(_workload_line() + _workload_line("456", "0.19.0"))
    with pytest.raises(TuningError, match=rf"{MS_WORKLOADS}:2: workload written by TVM 0.19.0"):
        check_database(db)


def test_workload_metaschedule_cannot_parse_names_the_file(tmp_path):
    from tvm.s_tir import meta_schedule as ms
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def add(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("b"):
                vi = T.axis.spatial(4, i)
                b[vi] = a[vi] + T.float32(1)

    import tvm

    shash, module = ms.database.Workload(tvm.IRModule({"main": add})).as_json()
    text = base64.b64decode(module)[8:].replace(b'"ir.GlobalVar"', b'"ir.NoSuchType"')
    body = struct.pack("<Q", len(text)) + text  # TVM's length-prefixed JSON
    db = tmp_path / "db"
    db.mkdir()
    (db / MS_WORKLOADS).write_text(json.dumps([str(shash), base64.b64encode(body).decode()]) + "\n")
    before = _snapshot(db)
    with pytest.raises(TuningError, match=rf"{MS_WORKLOADS}:1: MetaSchedule cannot read it .*NoSuchType"):
        TuningDatabase(db).ms_database()
    assert _snapshot(db) == before


_WRITER = """
import sys
from tvm_ext.tuning.database import TuningDatabase
db = TuningDatabase(sys.argv[1])
for i in range(int(sys.argv[3])):
    db.add_knob_record("t", {"writer": sys.argv[2], "i": i, "pad": "x" * 3000}, 1.0 + i, "cycles")
"""


def test_two_writers_appending_at_once_keep_every_record(tmp_path):
    db = tmp_path / "db"
    db.mkdir()
    n = 150
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(db), w, str(n)]) for w in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    recs = check_database(db).knob_records
    seen = sorted((r["knobs"]["writer"], r["knobs"]["i"]) for r in recs)
    assert seen == sorted((w, i) for w in ("a", "b") for i in range(n))


@pytest.mark.parametrize("task_args, records_file", [
    (["sextans", "LFAT5", "--n", "8", "--trials", "100000"], KNOB_RECORDS),  # simulated: records in a second
    pytest.param(["gemm", "--shape", "16", "16", "16", "--trials", "200"], MS_RECORDS,  # MetaSchedule, popen pool
                 marks=pytest.mark.slow),
], ids=["knobs", "metaschedule"])
def test_ctrl_c_during_tune_exits_130_and_keeps_the_records(tmp_path, task_args, records_file):
    """SIGINT while a session measures: "interrupted", exit 130, the database still loads with every record."""
    import os
    import signal
    import time

    db = tmp_path / "db"
    proc = subprocess.Popen([sys.executable, "-m", "tvm_ext.cli", "tune", *task_args, "--db", str(db),
                             "--no-progress", "--debug"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TVM_NUM_THREADS="2"))
    records = db / records_file
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if records.exists() and records.stat().st_size > 0:
            break
        time.sleep(0.05)
    seen = len(read_json_lines(records).items) if records.exists() else 0
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=240)
    assert seen > 0, err[-2000:]
    assert proc.returncode == 130, err[-3000:]
    assert err.strip().splitlines()[-1] == "tvm-ext: error: interrupted" and out == ""
    rep = check_database(db)  # loads: no torn or invalid line
    kept = rep.knob_records if records_file == KNOB_RECORDS else rep.ms_records
    assert len(kept) >= seen


@pytest.mark.parametrize("cost", [-1.0, 0.0, float("nan"), float("inf")])
def test_a_bad_cost_is_never_written(tmp_path, cost):
    db = TuningDatabase(tmp_path)
    with pytest.raises(TuningError, match="refusing to append a bad record: cost must be"):
        db.add_knob_record("t", {"K0": 1}, cost, "cycles")
    assert not (tmp_path / KNOB_RECORDS).exists()
