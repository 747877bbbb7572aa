"""The XGBoost knob loop and the simulated-cycle tasks (Sextans, accelerator Approach)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tvm_ext.errors import ConfigError, InputError, TuningError
from tvm_ext.tuning.knob_tuner import Knob, KnobSpace, XGBCostModel, tune_knobs
from tvm_ext.tuning.model_knobs import (KnobApproach, accel_cycles, accel_default, accel_workload,
                                        sextans_cycles, sextans_default, sextans_space)
from tvm_ext.tuning.session import run_session
from tvm_ext.tuning.tasks import SextansTask, make_task
from tvm_ext.workloads import lap2d


def _bowl(k):
    return (np.log2(k["x"]) - 3) ** 2 + abs(k["y"] - 2) + 1.0


SPACE = KnobSpace([Knob("x", (1, 2, 4, 8, 16, 32)), Knob("y", (0, 1, 2, 3, 4))])


def test_knob_tuner_finds_the_optimum_of_a_known_cost():
    recs = tune_knobs(SPACE, _bowl, trials=20, seed=1)
    best = min(recs, key=lambda r: r["cost"])
    assert best["knobs"] == {"x": 8, "y": 2}
    assert len({tuple(sorted(r["knobs"].items())) for r in recs}) == len(recs)  # never re-measures


def test_knob_tuner_reaches_the_optimum_in_12_of_30_points_for_most_seeds():
    # 4 random warm-up points, then the model proposes: the optimum is usually found early
    hits = 0
    for seed in range(4):
        recs = tune_knobs(SPACE, _bowl, trials=12, batch=4, seed=seed)
        hits += min(r["cost"] for r in recs) == 1.0
    assert hits >= 3


def test_knob_tuner_resumes_from_history_without_remeasuring():
    first = tune_knobs(SPACE, _bowl, trials=6, seed=0)
    seen = []

    def counting(k):
        seen.append(dict(k))
        return _bowl(k)

    more = tune_knobs(SPACE, counting, trials=6, history=first, seed=0)
    old = {tuple(sorted(r["knobs"].items())) for r in first}
    assert len(more) == 6 and len(seen) == 6
    assert not old & {tuple(sorted(k.items())) for k in seen}


def test_knob_tuner_respects_constraints_and_records_infeasible_points():
    space = KnobSpace([Knob("a", (1, 2, 3, 4))], constraint=lambda k: "odd" if k["a"] % 2 else None)

    def cost(k):
        if k["a"] == 4:
            raise ConfigError("a=4 does not fit")
        return float(k["a"])

    recs = tune_knobs(space, cost, trials=10, seed=0)
    assert sorted(r["knobs"]["a"] for r in recs) == [2, 4]  # space exhausted: only the even points
    bad = next(r for r in recs if r["knobs"]["a"] == 4)
    assert bad["cost"] is None and "does not fit" in bad["error"]


def test_knob_space_rejects_bad_definitions():
    with pytest.raises(ConfigError):
        Knob("x", ())
    with pytest.raises(ConfigError):
        KnobSpace([Knob("x", (1,)), Knob("x", (2,))])
    with pytest.raises(TuningError):
        tune_knobs(SPACE, _bowl, trials=-1)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.1, 100.0), min_size=4, max_size=20))
def test_xgb_cost_model_ranks_a_monotone_cost(costs):
    space = KnobSpace([Knob("v", tuple(range(len(costs))))])
    order = sorted(range(len(costs)), key=lambda i: costs[i])
    X = space.features([{"v": i} for i in range(len(costs))])
    model = XGBCostModel(rounds=40).fit(X, np.array(costs))
    pred = model.predict(X)
    # trees fit the training points closely: the cheapest point is predicted among the cheapest
    assert int(np.argmin(pred)) in order[: max(2, len(costs) // 4)] or np.isclose(costs[int(np.argmin(pred))],
                                                                                   costs[order[0]], rtol=0.2)


# --------------------------------------------------------------------------- Sextans
def test_sextans_space_respects_the_pu_budget_and_contains_the_default():
    space = sextans_space(lap2d(16))
    pts = space.all_points()
    assert sextans_default() in pts
    assert all(p["P"] * p["N0"] <= 512 for p in pts)
    assert max(p["K0"] for p in pts) <= 16384


def test_sextans_cost_is_the_simulated_cycle_count():
    from tvm_ext.spmm_engine import EngineConfig, model, preprocess

    A = lap2d(12)
    k = {"K0": 256, "N0": 4, "D": 7, "P": 16}
    ref = model(preprocess(A, EngineConfig(pes=16, n0=4, window=256, raw_distance=7)), 16).cycles
    assert sextans_cycles(A, 16, k) == ref
    assert sextans_cycles(A, 16, k) != sextans_cycles(A, 16, dict(k, D=12))  # D changes the schedule


def test_tuned_sextans_is_at_least_as_fast_as_the_default_on_deterministic_cycles(tmp_path):
    task = make_task("sextans", matrix=lap2d(16), n=16, name="lap16")
    r = run_session(task, tmp_path / "db", 12, progress=False)
    assert r.records == 12 and r.new_records == 12
    assert r.default == sextans_cycles(task.A, 16, sextans_default())
    assert r.best <= r.default
    assert r.best == sextans_cycles(task.A, 16, r.best_config["all"])  # the record reproduces
    assert r.verified is True


def test_interrupted_session_resumes_and_keeps_earlier_records(tmp_path):
    task = make_task("sextans", matrix=lap2d(12), n=8, name="lap12")
    db = tmp_path / "db"
    first = run_session(task, db, 5, progress=False)
    lines_before = (db / "knob_records.json").read_text().splitlines()
    second = run_session(task, db, 9, progress=False)
    lines_after = (db / "knob_records.json").read_text().splitlines()
    assert first.records == 5 and second.records == 9 and second.new_records == 4
    assert lines_after[:5] == lines_before  # earlier records untouched
    knobs = [json.dumps(json.loads(x)["knobs"], sort_keys=True) for x in lines_after]
    assert len(set(knobs)) == 9  # the resumed session did not re-measure
    assert second.best <= first.best
    third = run_session(task, db, 9, progress=False)  # budget reached: nothing new
    assert third.new_records == 0 and third.records == 9


def test_progress_bar_goes_to_the_given_stream_with_best_so_far(tmp_path):
    import io

    buf = io.StringIO()
    task = make_task("sextans", matrix=lap2d(8), n=8, name="lap8")
    run_session(task, tmp_path / "db", 4, stream=buf)
    text = buf.getvalue()
    assert "4/4" in text and "best" in text and "cycles" in text


def test_sextans_task_bad_input():
    with pytest.raises(InputError):
        make_task("sextans", matrix=lap2d(8), n=0)
    with pytest.raises(InputError):
        make_task("sextans", matrix="no-such-matrix", n=8)
    with pytest.raises(InputError):
        make_task("sextans", matrix=lap2d(8))
    assert isinstance(make_task("sextans", matrix="LFAT5", n=4), SextansTask)


# --------------------------------------------------------------------------- accelerator Approach
def test_knob_approach_default_matches_the_heuristic_approach():
    from tvm_ext.accel.approach import HeuristicApproach
    from tvm_ext.accel.scheduler import schedule
    from tvm_ext.accel.timing import time_stream

    wl = accel_workload("matmul", (64, 64, 64))
    ref = time_stream(schedule(wl, "default", HeuristicApproach()).stream, "default").cycles
    assert accel_cycles(wl, "default", accel_default()) == ref


def test_accel_knobs_change_the_simulated_cycles_and_tuning_keeps_the_best(tmp_path):
    task = make_task("accel", workload="matmul", shape=(64, 64, 64))
    r = run_session(task, tmp_path / "db", 6, progress=False)
    assert r.unit == "cycles" and r.records == 6
    assert r.best <= r.default
    assert r.best == accel_cycles(task.workload, "default", r.best_config["all"])


def test_knob_approach_rejects_unknown_choices():
    with pytest.raises(ConfigError):
        KnobApproach(tile_order="random")
    with pytest.raises(ConfigError):
        KnobApproach(device="fastest")
    with pytest.raises(InputError):
        accel_workload("conv", (1, 2, 3))


class _Interrupting(SextansTask):
    """A Sextans task whose simulator is 'killed' (Ctrl-C) after a number of evaluations."""

    def __init__(self, *a, stop_after: int | None = None, **kw):
        super().__init__(*a, **kw)
        self.stop_after, self.calls = stop_after, 0

    def evaluate(self, knobs):
        self.calls += 1
        if self.stop_after is not None and self.calls > self.stop_after:
            raise KeyboardInterrupt
        return super().evaluate(knobs)


def test_ctrl_c_mid_session_loses_no_records_and_the_rerun_completes(tmp_path):
    db = tmp_path / "db"
    A = lap2d(10)
    # call 1 measures the default for tasks.json, then 4 trials are recorded before the interrupt
    task = _Interrupting(A, 8, name="lap10", stop_after=5)
    with pytest.raises(KeyboardInterrupt):
        run_session(task, db, 10, progress=False)
    kept = (db / "knob_records.json").read_text().splitlines()
    assert len(kept) == 4
    again = run_session(_Interrupting(A, 8, name="lap10"), db, 10, progress=False)
    lines = (db / "knob_records.json").read_text().splitlines()
    assert again.records == 10 and again.new_records == 6 and lines[:4] == kept
    # the lock was released by the interrupted session
    assert run_session(_Interrupting(A, 8, name="lap10"), db, 10, progress=False).new_records == 0
