"""Tuning sessions: one task, a trial budget, a database directory; resumable.

:func:`run_session` is what ``tvm-ext tune`` calls:

1. open the database (:class:`~.database.TuningDatabase`: every file checked
   first, a corrupt one is an error and is not touched; a lock keeps a second
   session out);
2. measure the untuned default once per task (stored in ``tasks.json``; a
   resumed session reuses it);
3. count the records the task already has; ``--trials N`` is the task's total
   budget, so re-running an interrupted command continues with the remainder
   and keeps every earlier record;
4. tune: MetaSchedule (``tune_tasks`` over :mod:`.spaces` with ``XGBModel``,
   the JSON database, the local runner or an RPC runner) for TIR tasks, the
   XGBoost knob loop of :mod:`.knob_tuner` for simulated tasks; a progress bar
   with the best-so-far goes to stderr after every batch;
5. replay the best record on a fresh schedule, build it and check its output
   against a reference (scipy/numpy, or the library's own kernel).

Ctrl-C (SIGINT) during a session is deferred: the session stops at the next
record or measured batch and raises ``KeyboardInterrupt`` from Python code,
never from inside TVM's C++ (where an exception can cross a worker thread and
abort the process).  Every record measured so far is on disk.  A second Ctrl-C
ends the process at once with exit status 130.

>>> import tempfile
>>> from tvm_ext.tuning.tasks import make_task
>>> from tvm_ext.workloads import lap2d
>>> r = run_session(make_task("sextans", matrix=lap2d(8), n=8), tempfile.mkdtemp(), 6, progress=False)
>>> r.records, r.best <= r.default
(6, True)
"""
from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from tvm_ext.errors import TuningError
from tvm_ext.sigint import sigint_handler
from tvm_ext.tuning.database import TuningDatabase
from tvm_ext.tuning.progress import ProgressBar

__all__ = ["SessionResult", "run_session", "best_schedule", "apply_best", "ms_records"]

#: Largest relative error a replayed record may show against its reference.
CHECK_TOLERANCE = {"float32": 1e-4, "float64": 1e-9}


@dataclass
class SessionResult:
    """What a session did and found (``to_dict`` is ``tvm-ext tune --json``)."""

    task: str
    description: str
    kind: str
    engine: str
    unit: str
    best: float | None
    default: float | None
    records: int
    new_records: int
    trials: int
    seconds: float
    best_config: dict = field(default_factory=dict)
    verified: bool | None = None
    max_rel_err: float | None = None
    rpc: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def speedup(self) -> float | None:
        if self.best and self.default:
            return self.default / self.best
        return None

    def to_dict(self) -> dict[str, Any]:
        suffix = "seconds" if self.unit == "seconds" else "cycles"
        return {
            "task": self.task, "description": self.description, "kind": self.kind, "engine": self.engine,
            "unit": self.unit, f"best_{suffix}": self.best, f"default_{suffix}": self.default,
            "speedup": self.speedup, "records": self.records, "new_records": self.new_records,
            "trials": self.trials, "tuning_seconds": self.seconds, "best_config": self.best_config,
            "verified": self.verified, "max_rel_err": self.max_rel_err, "rpc": self.rpc, "notes": self.notes,
        }


def _check_trials(trials: Any) -> int:
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 0:
        raise TuningError(f"--trials must be a non-negative integer, got {trials!r}")
    return int(trials)


class _Interrupt:
    """SIGINT deferred to points where raising is safe (see the module docstring)."""

    def __init__(self) -> None:
        self.requested = False

    def _handler(self, signum, frame) -> None:
        if self.requested:
            os.write(2, b"interrupted\n")
            os._exit(130)
        self.requested = True

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if Ctrl-C was pressed (call only from Python code)."""
        if self.requested:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self) -> Iterator["_Interrupt"]:
        with sigint_handler(self._handler):  # off the main thread none is installed: nothing is deferred
            try:
                yield self
            except Exception:
                if self.requested:  # the interrupt surfaced through TVM as another exception
                    raise KeyboardInterrupt from None
                raise
        self.check()


def run_session(task, db_dir: str | os.PathLike, trials: int, *, rpc=None, progress: bool = True,
                seed: int = 0, stream=None) -> SessionResult:
    """Tune ``task`` up to ``trials`` records in ``db_dir`` (see the module docstring).

    ``rpc``: an :class:`~.rpc.RPCSettings` to measure on tracker-registered
    servers (MetaSchedule tasks only).
    """
    trials = _check_trials(trials)
    db = TuningDatabase(db_dir)
    t0 = time.perf_counter()
    stop = _Interrupt()
    with db.session(), stop.deferred():
        if task.engine == "knobs":
            result = _knob_session(task, db, trials, progress, seed, stream, stop)
            if rpc is not None:
                result.notes.append("simulated task: cost computed locally, --rpc-tracker not used")
        else:
            result = _ms_session(task, db, trials, rpc, progress, seed, stream, stop)
        result.notes += db.repaired
    result.seconds = time.perf_counter() - t0
    return result


# --------------------------------------------------------------------------- knob tasks
def _knob_session(task, db: TuningDatabase, trials: int, progress: bool, seed: int, stream,
                  stop: _Interrupt) -> SessionResult:
    from tvm_ext.tuning.knob_tuner import tune_knobs

    key, unit = task.key, task.unit
    entry = db.task_entry(key)
    if entry is None:
        default_cost = float(task.evaluate(task.default_knobs()))
        db.add_task(key, task.spec(), {"cost": default_cost, "unit": unit, "knobs": task.default_knobs()})
    else:
        default_cost = entry["default"]["cost"]
    history = db.knob_records(key)
    remaining = max(trials - len(history), 0)
    bar = ProgressBar(trials, unit, stream=stream, label=task.kind, enabled=progress)

    def best_of(recs):
        costs = [r["cost"] for r in recs if r.get("cost") is not None]
        return min(costs) if costs else None

    bar.update(len(history), best=best_of(history), default=default_cost)

    def on_record(rec: dict) -> None:
        db.add_knob_record(key, rec["knobs"], rec["cost"], unit, error=rec["error"])
        stop.check()

    def on_batch(done: list) -> None:
        bar.update(len(done), best=best_of(done), default=default_cost)

    try:
        tune_knobs(task.knob_space(), task.evaluate, trials=remaining, history=history,
                   default=task.default_knobs(), seed=seed, on_record=on_record, on_batch=on_batch)
    finally:
        bar.close()
    stop.check()
    recs = db.knob_records(key)
    ok = [r for r in recs if r.get("cost") is not None]
    best = min(ok, key=lambda r: r["cost"]) if ok else None
    verified = None
    if best is not None:  # a simulated cost is deterministic: re-simulating the best must agree
        verified = bool(np.isclose(float(task.evaluate(best["knobs"])), best["cost"], rtol=1e-9))
    return SessionResult(key, task.describe(), task.kind, task.engine, unit, best["cost"] if best else None,
                         default_cost, len(recs), len(recs) - len(history), trials, 0.0,
                         best_config={"all": dict(best["knobs"])} if best else {}, verified=verified)


# --------------------------------------------------------------------------- MetaSchedule tasks
def _shash(mod) -> str:
    import tvm_ffi

    return str(tvm_ffi.structural_hash(mod) & ((1 << 64) - 1))


def ms_records(db: TuningDatabase, space_tasks) -> dict[str, list[float | None]]:
    """Mean seconds of every record of each space task (by task name; None = failed)."""
    rep = db.report
    return {st.name: rep.ms_costs(_shash(st.mod)) for st in space_tasks}


def _group_best(task, space_tasks, costs: dict) -> dict[str, tuple[float, Any]]:
    best: dict[str, tuple[float, Any]] = {}
    for st in space_tasks:
        for c in costs.get(st.name, []):
            if c is not None and (st.group not in best or c < best[st.group][0]):
                best[st.group] = (c, st)
    return best


def _combined(task, space_tasks, group_best: dict) -> float | None:
    groups = {st.group for st in space_tasks}
    if not group_best or set(group_best) != groups:
        return None
    return task.combine({g: c for g, (c, _) in group_best.items()})


def _quiet_logger() -> logging.Logger:
    log = logging.getLogger("tvm_ext.tuning.metaschedule")
    log.setLevel(logging.WARNING)
    log.propagate = False
    if not log.handlers:
        log.addHandler(logging.NullHandler())
    return log


def _runner(db: TuningDatabase, rpc, servers: int = 1):
    from tvm_ext.tuning.measure import local_runner

    if rpc is None:
        return local_runner(db.args_dir)
    from tvm_ext.tuning.rpc import rpc_runner

    return rpc_runner(rpc, db.args_dir, servers)


def _register_intrinsics(space_tasks) -> None:
    """Generate every design space once: registers the tensor intrinsics their traces name.

    MetaSchedule's JSON database parses stored traces when it opens, and a trace
    naming an unregistered intrinsic would not load.
    """
    for st in space_tasks:
        st.design_spaces()


def _store_args(db: TuningDatabase, space_tasks) -> None:
    from tvm_ext.tuning.measure import ArgStore, args_info_of

    store = ArgStore(db.args_dir)
    for st in space_tasks:
        if st.args is not None:
            store.put(args_info_of(st.mod["main"]), st.args)


def _measure_default(task, db: TuningDatabase, target, builder, runner) -> dict:
    from tvm_ext.tuning.measure import measure_mods

    defaults = task.default_tasks()
    _store_args(db, defaults)
    secs = measure_mods([d.mod for d in defaults], target, builder, runner)
    bad = [s for s in secs if isinstance(s, str)]
    if bad:
        raise TuningError(f"{task.describe()}: the untuned default failed to build or run: {bad[0][:2000]}")
    groups = {d.group: s for d, s in zip(defaults, secs)}
    return {"cost": task.combine(groups), "unit": "seconds", "groups": groups,
            "knobs": {d.group or "all": d.knobs for d in defaults}}


def _note_cost(st, cost: float | None, state: dict) -> None:
    state["done"] += 1
    if cost is not None and (st.group not in state["best"] or cost < state["best"][st.group]):
        state["best"][st.group] = cost


def _draw(task, bar: ProgressBar, state: dict, all_tasks) -> None:
    groups = {t.group for t in all_tasks}
    best = task.combine(state["best"]) if set(state["best"]) == groups else None
    bar.update(state["done"], best=best, default=state["default"])


#: MetaSchedule's run time for a candidate that failed.
FAILED_SECS = 1e10


def _enumerate(task, db: TuningDatabase, tasks, target, builder, runner, bar, state, all_tasks,
               stop: _Interrupt, batch: int = 8) -> int:
    """Measure one-point tasks (code-generation settings) directly; commit MetaSchedule records.

    They go into the same JSON database as searched records (their trace is the
    one-point design space: the generated kernel as is), so resuming and
    replaying treat them alike.
    """
    from tvm.s_tir import meta_schedule as ms

    from tvm_ext.tuning.measure import measure_mods

    msdb = db.ms_database()
    done = 0
    for i in range(0, len(tasks), batch):
        stop.check()
        chunk = tasks[i:i + batch]
        spaces = [st.design_spaces()[0] for st in chunk]
        secs = measure_mods([sch.mod for sch in spaces], target, builder, runner)
        for st, sch, sec in zip(chunk, spaces, secs):
            ok = not isinstance(sec, str)
            workload = msdb.commit_workload(st.mod)
            rec = ms.database.TuningRecord(sch.trace, workload,
                                           [float(sec) if ok else FAILED_SECS], target,
                                           ms.arg_info.ArgInfo.from_prim_func(st.mod["main"]))
            msdb.commit_tuning_record(rec)
            done += 1
            _note_cost(st, float(sec) if ok else None, state)
        _draw(task, bar, state, all_tasks)
    return done


def _progress_callback(bar: ProgressBar, task, contexts_tasks, state: dict, stop: _Interrupt, all_tasks=None):
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class _Progress(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            st = contexts_tasks[task_id]
            for res in runner_results:
                ok = res.error_msg is None and res.run_secs
                c = float(np.mean([float(s) for s in res.run_secs])) if ok else None
                _note_cost(st, c, state)
            _draw(task, bar, state, all_tasks or contexts_tasks)
            stop.check()  # MetaSchedule's scheduler loop, on this thread: safe to unwind from here

    return _Progress()


def _tune_ms(task, db, space_tasks, remaining: int, target, builder, runner, bar, state, seed: int,
             stop: _Interrupt) -> None:
    from tvm.s_tir import meta_schedule as ms

    from tvm_ext.target import num_threads

    log = _quiet_logger()
    contexts = []
    batches = -(-remaining // 8)
    per_iter = max(1, -(-remaining // batches))  # equal batches of at most 8: no overshoot past the budget
    for i, st in enumerate(space_tasks):
        size = max(1, st.max_trials)
        strategy = ms.search_strategy.EvolutionarySearch(
            population_size=int(min(256, max(16, 4 * size))), init_min_unmeasured=int(min(32, size)),
            max_fail_count=2, genetic_num_iters=2)
        contexts.append(ms.TuneContext(st.mod, target=target, space_generator=st.space(),
                                       search_strategy=strategy, task_name=st.name,
                                       rand_state=seed + i, num_threads=num_threads(), logger=log).clone())
    callbacks = list(ms.measure_callback.MeasureCallback.create("default"))
    callbacks.append(_progress_callback(bar, task, space_tasks, state, stop, state.get("all_tasks")))
    cost_model = ms.cost_model.XGBModel(
        config=ms.cost_model.xgb_model.XGBConfig(max_depth=6, nthread=num_threads()),
        num_warmup_samples=int(min(16, max(4, remaining // 4))), early_stopping_rounds=20,
        num_tuning_cores=num_threads())
    ms.tune_tasks(tasks=contexts, task_weights=[1.0] * len(contexts), work_dir=str(db.root),
                  max_trials_global=int(remaining),
                  max_trials_per_task=int(min(remaining, max(st.max_trials for st in space_tasks))),
                  num_trials_per_iter=per_iter, builder=builder, runner=runner, database=db.ms_database(),
                  cost_model=cost_model, measure_callbacks=callbacks,
                  task_scheduler=ms.task_scheduler.GradientBased(), module_equality="structural")


def _ms_session(task, db: TuningDatabase, trials: int, rpc, progress: bool, seed: int, stream,
                stop: _Interrupt) -> SessionResult:
    from tvm_ext.target import resolve_target
    from tvm_ext.tuning.measure import InProcessBuilder, lean_meta_schedule

    target = resolve_target(None)
    key = task.key
    servers = 1
    if rpc is not None:  # fail fast, before any kernel is generated
        from tvm_ext.tuning.rpc import check_tracker

        servers = check_tracker(rpc)
    with lean_meta_schedule():
        space_tasks = task.space_tasks(trials)
        _register_intrinsics(space_tasks)
        _store_args(db, space_tasks)
        builder = InProcessBuilder()
        runner = _runner(db, rpc, servers)
        entry = db.task_entry(key)
        if entry is None:
            default = _measure_default(task, db, target, builder, runner)
            stop.check()
            db.add_task(key, task.spec(), default)
        else:
            default = entry["default"]
        costs = ms_records(db, space_tasks)
        existing = sum(len(v) for v in costs.values())
        remaining = max(trials - existing, 0)
        bar = ProgressBar(trials, "seconds", stream=stream, label=task.kind, enabled=progress)
        gb = _group_best(task, space_tasks, costs)
        state = {"done": existing, "best": {g: c for g, (c, _) in gb.items()}, "default": default["cost"],
                 "all_tasks": space_tasks}
        bar.update(existing, best=_combined(task, space_tasks, gb), default=default["cost"])
        enum = [st for st in space_tasks if st.max_trials <= 1 and not costs.get(st.name)]
        search = [st for st in space_tasks if st.max_trials > 1]
        try:
            if remaining > 0 and enum:
                share = remaining if not search else max(1, remaining // 2)
                remaining -= _enumerate(task, db, enum[:share], target, builder, runner, bar, state, space_tasks,
                                        stop)
            if remaining > 0 and search:
                _tune_ms(task, db, search, remaining, target, builder, runner, bar, state, seed, stop)
        finally:
            bar.close()
            _shutdown(runner)
        stop.check()
        db.refresh()
        costs = ms_records(db, space_tasks)
        records = sum(len(v) for v in costs.values())
        gb = _group_best(task, space_tasks, costs)
        best = _combined(task, space_tasks, gb)
        result = SessionResult(key, task.describe(), task.kind, task.engine, "seconds", best, default["cost"],
                               records, records - existing, trials, 0.0,
                               best_config={g or "all": _knob_summary(st, c) for g, (c, st) in gb.items()},
                               rpc=None if rpc is None else f"{rpc.host}:{rpc.port}/{rpc.key}")
        if records and best is None:
            result.notes.append("no successful record yet for every kernel of the task")
        if gb:
            result.max_rel_err, result.verified, summaries = _verify(task, db, gb, target)
            for g, summ in summaries.items():
                result.best_config[g or "all"].update(summ)
    return result


def _shutdown(runner) -> None:
    pool = getattr(runner, "pool", None)
    if pool is not None:
        try:
            pool.shutdown()
        except Exception:  # noqa: BLE001 - best effort
            pass


def best_schedule(db: TuningDatabase, space_task, target=None):
    """Replay the best MetaSchedule record of ``space_task`` on a fresh schedule (None if no record)."""
    from tvm import s_tir

    from tvm_ext.target import resolve_target

    target = resolve_target(target)
    space_task.design_spaces()  # registers the tensor intrinsics the stored traces name
    msdb = db.ms_database()
    if not msdb.has_workload(space_task.mod):
        return None
    rec = msdb.query_tuning_record(space_task.mod, target, workload_name="main")
    if rec is None:
        return None
    sch = s_tir.Schedule(space_task.mod)
    rec.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch


def _knob_summary(st, seconds: float) -> dict:
    knobs = {k: v for k, v in st.knobs.items() if k != "design_spaces"}
    return dict(knobs, task=st.name, seconds=seconds)


def apply_best(task, db_dir: str | os.PathLike, target=None) -> dict[str, tuple[Any, Any]]:
    """The tuned kernels of a MetaSchedule task: ``{group: (space task, scheduled IRModule)}``.

    Reads the database (checked, not modified), picks the best record of every
    group (``""`` for gemm/spmm, one per CG step) and replays it on a fresh
    schedule; ``tvm.compile`` of the module gives the tuned kernel, which takes
    the space task's stored arguments (``space_task.args``).
    """
    from tvm_ext.target import resolve_target
    from tvm_ext.tuning.database import check_database
    from tvm_ext.tuning.measure import lean_meta_schedule

    if task.engine != "metaschedule":
        raise TuningError(f"apply_best: {task.kind} is a knob task; its best record is SessionResult.best_config")
    target = resolve_target(target)
    db = TuningDatabase(db_dir)
    db.report = check_database(db_dir)
    with lean_meta_schedule():
        space_tasks = task.space_tasks(0)
        gb = _group_best(task, space_tasks, ms_records(db, space_tasks))
        if not gb:
            raise TuningError(f"apply_best: {db_dir} has no successful record of {task.describe()}")
        out = {}
        for g, (_, st) in gb.items():
            sch = best_schedule(db, st, target)
            out[g] = (st, sch.mod)
    return out


def _verify(task, db: TuningDatabase, gb: dict, target) -> tuple[float, bool, dict]:
    """Replay each group's best record, build it, check it; also describe its decisions."""
    import tvm

    from tvm_ext.tuning.spaces import schedule_summary

    worst, summaries = 0.0, {}
    for g, (_, st) in gb.items():
        sch = best_schedule(db, st, target)
        if sch is None:
            raise TuningError(f"{task.describe()}: best record of {st.name} could not be replayed")
        summaries[g] = schedule_summary(sch)
        module = tvm.compile(sch.mod, target=target)
        worst = max(worst, task.check(st, module))
    tol = CHECK_TOLERANCE.get(getattr(task, "dtype", "float32"), 1e-4)
    return worst, bool(worst <= tol), summaries
