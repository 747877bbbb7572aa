"""The tuning database on disk: checked before use, appended record by record, never rewritten.

One directory (``--db DIR``) holds every task tuned into it:

===============================  ==============================================
``database_workload.json``       MetaSchedule ``JSONDatabase``: one workload per line
``database_tuning_record.json``  MetaSchedule: ``[workload index, record]`` per line
``knob_records.json``            knob tasks (simulated or measured outside TIR):
                                 one ``{"task", "knobs", "cost", ...}`` per line
``tasks.json``                   one line per task: its spec and untuned default
``database_meta.json``           one line: ``{"format": 1, "tvm": "0.27.0"}``
``args/``                        real kernel arguments (:class:`~.measure.ArgStore`)
===============================  ==============================================

Every file is JSON lines, written one complete line per record with ``fsync``,
so an interrupted session loses at most the record being measured.
:func:`check_database` parses every line before a session opens the
directory: a line that does not parse, or a record naming a workload that
does not exist, or a record whose run time or cost is not a finite positive
number, raises :class:`~tvm_ext.errors.TuningError` naming the file and line
(``file:line: why``), and nothing is written.  So does a database of another
format version or another TVM release series (``database_meta.json``, and the
``tvm_version`` MetaSchedule stores in each workload): MetaSchedule traces do
not carry across TVM releases.  The one repair: a *torn tail* (the last line
has no newline and does not parse, what a kill during a write leaves) is moved
to ``<file>.torn`` before the session appends.

Each record is appended with one ``write`` on an ``O_APPEND`` descriptor and
``fsync``-ed, so concurrent writers never interleave inside a line.

A ``.lock`` file (``flock``) keeps two sessions from appending to one
directory at once.

Example::

    >>> import tempfile
    >>> db = TuningDatabase(tempfile.mkdtemp())
    >>> with db.session():
    ...     _ = db.add_knob_record("t1", {"K0": 256}, 1200.0, "cycles")
    >>> [r["cost"] for r in db.knob_records("t1")]
    [1200.0]
"""
from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from tvm_ext.errors import TuningError

__all__ = [
    "TuningDatabase",
    "DatabaseReport",
    "check_database",
    "read_json_lines",
    "MS_WORKLOADS",
    "MS_RECORDS",
    "KNOB_RECORDS",
    "TASKS",
    "META",
    "FORMAT_VERSION",
]

MS_WORKLOADS = "database_workload.json"
MS_RECORDS = "database_tuning_record.json"
KNOB_RECORDS = "knob_records.json"
TASKS = "tasks.json"
META = "database_meta.json"
LOCK = ".lock"
#: Version of this directory layout and its record fields.
FORMAT_VERSION = 1
#: MetaSchedule's cost for a failed candidate.
MS_FAILED = 1e9


@dataclass
class _Lines:
    """Parsed lines of one JSON-lines file."""

    path: Path
    items: list[Any]
    torn: bytes | None = None  # the incomplete last line, if any
    good_bytes: int = 0  # length of the file up to the end of the last complete line


def read_json_lines(path: str | os.PathLike, check: Callable[[Any, int], str | None] | None = None) -> _Lines:
    """Parse a JSON-lines file; ``check(item, lineno)`` returns an error text or None.

    Raises :class:`TuningError` ``"<path>:<line>: ..."`` on the first bad line,
    except an unparsable last line without a newline (returned as ``torn``).
    """
    p = Path(path)
    if not p.exists():
        return _Lines(p, [])
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise TuningError(f"tuning database {p}: cannot read ({err.strerror})") from err
    items: list[Any] = []
    pos, lineno = 0, 0
    torn = None
    while pos < len(raw):
        end = raw.find(b"\n", pos)
        complete = end >= 0
        chunk = raw[pos:end if complete else len(raw)]
        lineno += 1
        if not chunk.strip():
            pos = end + 1 if complete else len(raw)
            continue
        try:
            item = json.loads(chunk.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            if not complete:
                torn = bytes(chunk)
                break
            raise TuningError(f"tuning database {p}:{lineno}: corrupt line ({err}); the database was not "
                              "modified; fix or remove the line, or use another --db directory") from None
        why = check(item, lineno) if check else None
        if why:
            raise TuningError(f"tuning database {p}:{lineno}: {why}; the database was not modified")
        items.append(item)
        pos = end + 1 if complete else len(raw)
    good = len(raw) - (len(torn) if torn is not None else 0)
    return _Lines(p, items, torn, good)


@functools.lru_cache(maxsize=None)
def tvm_version() -> str:
    """The installed TVM's version string (without importing TVM when the package metadata has it)."""
    from importlib import metadata

    for dist in ("apache-tvm", "tvm"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    import tvm

    return str(tvm.__version__)


def _series(version: str) -> tuple[str, ...]:
    """``"0.27.0.post1"`` -> ``("0", "27")``: records carry across patch releases, not across series."""
    return tuple(version.split(".")[:2])


def _positive_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def _workload_tvm_version(module_b64: str) -> str | None:
    """The ``tvm_version`` MetaSchedule stored in a workload's serialized module (None: not recorded)."""
    import base64
    import binascii

    try:
        raw = base64.b64decode(module_b64, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("module is not base64") from None
    start = raw.find(b"{", 0, 64)
    if start < 0:
        raise ValueError("module is not TVM JSON")
    try:
        meta = json.loads(raw[start:].decode("utf-8")).get("metadata") or {}
    except (UnicodeDecodeError, ValueError, AttributeError):
        raise ValueError("module is not TVM JSON") from None
    v = meta.get("tvm_version") if isinstance(meta, dict) else None
    return str(v) if v is not None else None


def _check_ms_workload(item: Any, lineno: int) -> str | None:
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], str)):
        return "not a MetaSchedule workload entry [hash, module]"
    try:
        written_by = _workload_tvm_version(item[1])
    except ValueError as err:
        return f"not a MetaSchedule workload entry ({err})"
    here = tvm_version()
    if written_by is not None and _series(written_by) != _series(here):
        return f"workload written by TVM {written_by}; this is TVM {here} (use another --db directory)"
    return None


def _check_ms_record(item: Any, lineno: int) -> str | None:
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int) and isinstance(item[1], list)
            and len(item[1]) >= 2):
        return "not a MetaSchedule tuning record [workload, [trace, run_secs, ...]]"
    secs = item[1][1]
    if secs is not None and not (isinstance(secs, list) and all(_positive_number(s) for s in secs)):
        return f"run_secs must be a list of finite positive numbers, got {json.dumps(secs)[:80]}"
    return None


def _check_knob(item: Any, lineno: int) -> str | None:
    if not isinstance(item, dict) or not isinstance(item.get("task"), str) or not isinstance(item.get("knobs"), dict):
        return "not a knob record {task, knobs, cost, ...}"
    c = item.get("cost")
    if c is not None and not _positive_number(c):
        return f"cost must be a finite positive number or null, got {json.dumps(c)}"
    if not isinstance(item.get("unit", ""), str) or not isinstance(item.get("error") or "", str):
        return "unit and error must be strings"
    return None


def _check_task(item: Any, lineno: int) -> str | None:
    if not isinstance(item, dict) or not isinstance(item.get("task"), str) or not isinstance(item.get("spec"), dict):
        return "not a task entry {task, spec, default}"
    default = item.get("default")
    if not isinstance(default, dict) or not _positive_number(default.get("cost")):
        return "default must be {cost, ...} with a finite positive cost"
    return None


def _check_meta(item: Any, lineno: int) -> str | None:
    if lineno > 1:
        return "more than one line"
    if not isinstance(item, dict) or not isinstance(item.get("format"), int) or not isinstance(item.get("tvm"), str):
        return "not a database header {format, tvm}"
    if item["format"] != FORMAT_VERSION:
        return (f"database format {item['format']}; this tvm-ext reads format {FORMAT_VERSION} "
                "(use another --db directory)")
    here = tvm_version()
    if _series(item["tvm"]) != _series(here):
        return f"database written by TVM {item['tvm']}; this is TVM {here} (use another --db directory)"
    return None


@dataclass
class DatabaseReport:
    """What :func:`check_database` found."""

    meta: dict | None = None  # the database_meta.json header (None: not written yet)
    ms_workloads: list[str] = field(default_factory=list)  # structural hashes, in file order
    ms_records: list[tuple[int, float | None]] = field(default_factory=list)  # (workload index, mean seconds)
    knob_records: list[dict] = field(default_factory=list)
    tasks: list[dict] = field(default_factory=list)
    torn: dict[str, _Lines] = field(default_factory=dict)

    def ms_costs(self, shash: str) -> list[float | None]:
        """Mean seconds of every MetaSchedule record of one workload (None: failed)."""
        idx = {i for i, h in enumerate(self.ms_workloads) if h == shash}
        return [c for w, c in self.ms_records if w in idx]


def _mean_secs(secs: Any) -> float | None:
    if not secs:
        return None
    vals = [float(s) for s in secs]
    m = sum(vals) / len(vals)
    return None if (not math.isfinite(m) or m >= MS_FAILED) else m


def check_database(root: str | os.PathLike) -> DatabaseReport:
    """Parse and cross-check every file of a database directory (read-only)."""
    r = Path(root)
    if r.exists() and not r.is_dir():
        raise TuningError(f"tuning database {r}: not a directory")
    rep = DatabaseReport()
    meta = read_json_lines(r / META, _check_meta)
    if meta.torn is not None:
        raise TuningError(f"tuning database {meta.path}:1: incomplete header line; the database was not modified")
    rep.meta = meta.items[0] if meta.items else None
    wl = read_json_lines(r / MS_WORKLOADS, _check_ms_workload)
    n_wl = len(wl.items)

    def check_rec(item: Any, lineno: int) -> str | None:
        why = _check_ms_record(item, lineno)
        if why is None and not 0 <= item[0] < n_wl:
            why = f"record names workload {item[0]}, but {MS_WORKLOADS} has {n_wl}"
        return why

    rec = read_json_lines(r / MS_RECORDS, check_rec)
    knobs = read_json_lines(r / KNOB_RECORDS, _check_knob)
    tasks = read_json_lines(r / TASKS, _check_task)
    if wl.torn is not None and rec.items:
        # a torn workload line that records refer to cannot be repaired
        if any(item[0] >= n_wl for item in rec.items):
            raise TuningError(f"tuning database {wl.path}: last line is incomplete and records refer to it")
    rep.ms_workloads = [item[0] for item in wl.items]
    rep.ms_records = [(item[0], _mean_secs(item[1][1])) for item in rec.items]
    rep.knob_records = knobs.items
    rep.tasks = tasks.items
    rep.torn = {str(x.path): x for x in (wl, rec, knobs, tasks) if x.torn is not None}
    return rep


class TuningDatabase:
    """One database directory (see the module docstring)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self._lock_fd: int | None = None
        self.report = DatabaseReport()
        self.repaired: list[str] = []

    # -- opening --------------------------------------------------------------
    @contextlib.contextmanager
    def session(self) -> Iterator["TuningDatabase"]:
        """Check, lock and (if needed) repair a torn tail; unlock on exit."""
        self.report = check_database(self.root)  # before anything is created or written
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise TuningError(f"tuning database {self.root}: cannot create ({err.strerror})") from err
        self._lock()
        try:
            self._repair_torn()
            if self.report.meta is None:
                self._write_meta()
            yield self
        finally:
            self._unlock()

    def _lock(self) -> None:
        import fcntl

        path = self.root / LOCK
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise TuningError(f"tuning database {self.root} is in use by another session") from None
        self._lock_fd = fd

    def _write_meta(self) -> None:
        item = {"format": FORMAT_VERSION, "tvm": tvm_version(), "time": time.time()}
        try:
            fd = os.open(self.root / META, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return
        try:
            os.write(fd, (json.dumps(item, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        self.report.meta = item

    def _unlock(self) -> None:
        import fcntl

        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _repair_torn(self) -> None:
        for path, lines in self.report.torn.items():
            aside = Path(path + ".torn")
            with open(aside, "ab") as fh:
                fh.write(lines.torn + b"\n")
            with open(path, "r+b") as fh:
                fh.truncate(lines.good_bytes)
            self.repaired.append(f"{path}: incomplete last line moved to {aside.name}")
        self.report.torn = {}

    # -- paths ------------------------------------------------------------------
    @property
    def args_dir(self) -> Path:
        return self.root / "args"

    @property
    def scratch_dir(self) -> Path:
        return self.root / "scratch"

    # -- appending ----------------------------------------------------------------
    def _append(self, name: str, item: dict, check: Callable[[Any, int], str | None]) -> None:
        why = check(item, 0)  # never write a record that loading would refuse
        if why:
            raise TuningError(f"tuning database {self.root / name}: refusing to append a bad record: {why}")
        line = (json.dumps(item, sort_keys=True, allow_nan=False) + "\n").encode()
        fd = os.open(self.root / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, line)  # one write on O_APPEND: concurrent writers never interleave a line
            os.fsync(fd)
        finally:
            os.close(fd)
        if written != len(line):
            raise TuningError(f"tuning database {self.root / name}: short write ({written} of {len(line)} bytes; "
                              "disk full?)")

    def add_knob_record(self, task: str, knobs: dict, cost: float | None, unit: str, *,
                        error: str | None = None, extra: dict | None = None) -> dict:
        item = {"task": task, "knobs": knobs, "cost": cost, "unit": unit, "error": error, "time": time.time()}
        if extra:
            item.update(extra)
        self._append(KNOB_RECORDS, item, _check_knob)
        self.report.knob_records.append(item)
        return item

    def add_task(self, task: str, spec: dict, default: dict) -> None:
        item = {"task": task, "spec": spec, "default": default, "time": time.time()}
        self._append(TASKS, item, _check_task)
        self.report.tasks.append(item)

    # -- reading --------------------------------------------------------------------
    def knob_records(self, task: str) -> list[dict]:
        return [r for r in self.report.knob_records if r["task"] == task]

    def task_entry(self, task: str) -> dict | None:
        for r in self.report.tasks:
            if r["task"] == task:
                return r
        return None

    def refresh(self) -> DatabaseReport:
        """Re-read the directory (after MetaSchedule appended records)."""
        self.report = check_database(self.root)
        return self.report

    def ms_database(self):
        """MetaSchedule's ``JSONDatabase`` over this directory (checked first)."""
        from tvm.s_tir import meta_schedule as ms

        self.root.mkdir(parents=True, exist_ok=True)
        try:
            return ms.database.JSONDatabase(path_workload=str(self.root / MS_WORKLOADS),
                                            path_tuning_record=str(self.root / MS_RECORDS),
                                            allow_missing=True)
        except Exception as err:  # noqa: BLE001 - TVM's parser errors: name the file and line instead
            where, why = self._locate_ms_failure(str(err))
            raise TuningError(f"tuning database {where}: MetaSchedule cannot read it ({why}); "
                              "the database was not modified") from None

    def _locate_ms_failure(self, message: str) -> tuple[str, str]:
        """``(file:line, why)`` of the first workload or record MetaSchedule cannot parse."""
        from tvm.s_tir import meta_schedule as ms

        first = next((ln.strip() for ln in message.splitlines() if ln.strip()), "parse error")
        workloads = []
        for lineno, item in enumerate(read_json_lines(self.root / MS_WORKLOADS).items, 1):
            try:
                workloads.append(ms.database.Workload.from_json(item))
            except Exception as err:  # noqa: BLE001
                return f"{self.root / MS_WORKLOADS}:{lineno}", str(err).strip().splitlines()[-1][:200]
        for lineno, item in enumerate(read_json_lines(self.root / MS_RECORDS).items, 1):
            try:
                ms.database.TuningRecord.from_json(item[1], workloads[item[0]])
            except Exception as err:  # noqa: BLE001
                return f"{self.root / MS_RECORDS}:{lineno}", str(err).strip().splitlines()[-1][:200]
        return str(self.root), first[:200]
