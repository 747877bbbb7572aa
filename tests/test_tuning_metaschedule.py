"""MetaSchedule sessions over the plugin's own schedules: spaces, database round trip, resume, replay."""
from __future__ import annotations

import numpy as np
import pytest

from tvm_ext.errors import InputError, ScheduleError, TuningError
from tvm_ext.tuning.database import MS_RECORDS, TuningDatabase
from tvm_ext.tuning.session import best_schedule, run_session
from tvm_ext.tuning.spaces import (cg_tasks, gemm_tasks, schedule_summary, specialize,
                                   spmm_default, spmm_tasks)
from tvm_ext.tuning.tasks import make_task
from tvm_ext.workloads import block_fem, lap2d

SHAPE = (32, 32, 32)


@pytest.fixture(scope="module")
def gemm_session(tmp_path_factory):
    """One tiny MetaSchedule run (XGBModel, JSON database), shared by the tests below."""
    db = tmp_path_factory.mktemp("gemm") / "db"
    task = make_task("gemm", shape=SHAPE)
    result = run_session(task, db, 6, progress=False)
    return task, db, result


def test_gemm_session_measures_the_budget_and_checks_the_best_record(gemm_session):
    task, db, r = gemm_session
    assert r.engine == "metaschedule" and r.records == 6 and r.new_records == 6
    assert r.default > 0 and r.best > 0
    assert r.verified is True and r.max_rel_err < 1e-4
    cfg = r.best_config["all"]
    assert cfg["design_space"] in task.space_tasks(6)[0].knobs["design_spaces"]
    assert len((db / MS_RECORDS).read_text().splitlines()) == 6
    assert r.to_dict()["best_seconds"] == r.best and r.to_dict()["default_seconds"] == r.default


def test_database_round_trip_replays_the_tuned_kernel(gemm_session):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    task, db, r = gemm_session
    st = task.space_tasks(6)[0]
    tdb = TuningDatabase(db)
    tdb.refresh()
    sch1 = best_schedule(tdb, st)
    sch2 = best_schedule(TuningDatabase(db), st)  # a second, independent load of the JSON files
    tvm.ir.assert_structural_equal(sch1.mod, sch2.mod)
    # the replayed record is the best stored record, and MetaSchedule's own query agrees
    recs = ms.database.JSONDatabase(path_workload=str(db / "database_workload.json"),
                                    path_tuning_record=str(db / MS_RECORDS)).get_all_tuning_records()
    assert min(float(np.mean([float(x) for x in rec.run_secs])) for rec in recs) == pytest.approx(r.best)
    assert schedule_summary(sch1)["design_space"] == r.best_config["all"]["design_space"]
    module = tvm.compile(sch1.mod, target=_target())
    rng = np.random.default_rng(1)
    a, b = (rng.uniform(-1, 1, (32, 32)).astype("float32") for _ in range(2))
    c = tvm.runtime.empty((32, 32), "float32")
    module["main"](tvm.runtime.tensor(a), tvm.runtime.tensor(b), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-5)


def test_apply_best_reproduces_the_tuned_kernel(gemm_session):
    import tvm

    from tvm_ext.tuning.session import apply_best

    task, db, r = gemm_session
    before = (db / MS_RECORDS).read_bytes()
    (group, (st, mod)), = apply_best(task, db).items()
    assert group == "" and st.name == "gemm_32x32x32"
    assert (db / MS_RECORDS).read_bytes() == before  # read-only
    assert task.check(st, tvm.compile(mod, target=_target())) < 1e-4
    with pytest.raises(TuningError, match="knob task"):
        apply_best(make_task("sextans", matrix=lap2d(6), n=4), db)


def test_resumed_ms_session_keeps_earlier_records(gemm_session):
    task, db, first = gemm_session
    before = (db / MS_RECORDS).read_text().splitlines()
    r = run_session(task, db, 8, progress=False)
    after = (db / MS_RECORDS).read_text().splitlines()
    assert r.records == 8 and r.new_records == 2
    assert after[:6] == before
    assert r.default == first.default  # the default is measured once per task
    assert r.best <= first.best


def _target():
    from tvm_ext.target import resolve_target

    return resolve_target(None)


# --------------------------------------------------------------------------- spaces
def test_gemm_space_has_the_emitter_default_and_sampled_tilings():
    (t,) = gemm_tasks(64, 64, 32)
    spaces = t.design_spaces()
    labels = [schedule_summary(s)["design_space"] for s in spaces]
    assert labels[0] == "emit default" and any(x.startswith("blocked") for x in labels)
    blocked = spaces[labels.index(next(x for x in labels if x.startswith("blocked")))]
    kinds = {k for k, _ in schedule_summary(blocked)["decisions"]}
    assert kinds == {"SamplePerfectTile", "SampleCategorical"}
    with pytest.raises(InputError):
        gemm_tasks(0, 8, 8)


def test_spmm_space_has_formats_widths_partitions_and_the_library_default_first():
    A = block_fem(40, 3, 3, seed=0)
    tasks = spmm_tasks(A, 16)
    default = spmm_default(A, 16)
    first = tasks[0].knobs
    assert first["library_default"] and first["format"] == default.knobs["format"]
    formats = {t.knobs["format"] for t in tasks}
    assert "csr" in formats and "bcsr" in formats
    static = [t for t in tasks if t.knobs["partition"] == "static"]
    assert static and all(t.max_trials > 1 for t in static)
    summ = schedule_summary(static[0].design_spaces()[0])
    assert [k for k, _ in summ["decisions"]] == ["SamplePerfectTile"]
    # every task carries its real arguments, shapes specialised
    for t in tasks[:3]:
        func = t.mod["main"]
        assert len(t.args) == len([p for p in func.params])


def test_spmm_session_replays_and_checks_against_scipy(tmp_path):
    task = make_task("spmm", matrix=block_fem(30, 2, 2, seed=1), n=16, name="fem30")
    r = run_session(task, tmp_path / "db", 4, progress=False)
    assert r.records == 4 and r.verified is True
    assert r.best_config["all"]["format"] in ("csr", "bcsr", "ell", "dia", "hyb", "sell")


def test_cg_space_groups_alternatives_by_step():
    tasks = cg_tasks(lap2d(12), 2)
    groups = {t.group for t in tasks}
    assert groups == {"S1+Delta1", "X1+R1+Gamma1", "P1"}
    for g in groups:
        ppts = sorted(t.knobs["parts_per_thread"] for t in tasks if t.group == g)
        assert ppts == [1, 4, 16, 64]


def test_specialize_rejects_a_wrong_argument_count():
    (t,) = gemm_tasks(16, 16, 16)
    with pytest.raises(ScheduleError):
        specialize(t.mod["main"], [np.zeros((16, 16), "float32")])


def test_unknown_task_and_bad_trials_are_clear_errors(tmp_path):
    with pytest.raises(TuningError, match="unknown tuning task"):
        make_task("fft")
    with pytest.raises(TuningError, match="--trials"):
        run_session(make_task("gemm", shape=(8, 8, 8)), tmp_path / "db", -3, progress=False)
    assert not (tmp_path / "db").exists()
