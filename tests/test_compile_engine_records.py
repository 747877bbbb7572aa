"""``tvm_ext.compile(..., tuning_db=...)`` applies the Sextans and accelerator knob records."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import tvm_ext.compile as tc  # noqa: E402
from tvm_ext.models import get_model  # noqa: E402

TOL = 1e-4


@pytest.fixture(scope="module")
def gcn():
    case = get_model("gcn", "tiny")
    return case, case.relax_module(), case.reference()


#: Columns of B of the tiny GCN's two adjacency products (hidden 16, classes 4).
GCN_N = (16, 4)


def test_sextans_record_is_applied_when_it_models_fewer_cycles(gcn, tmp_path):
    from tvm_ext.spmm_engine import model as sextans_model, preprocess, resolve_config
    from tvm_ext.tuning import run_session
    from tvm_ext.tuning.tasks import SextansTask

    case, mod, ref = gcn
    default = tc.compile(mod, spmm_engine="sextans")
    assert [p.shapes.split("-> 96x")[1] for p in default.report.ops if p.target == "sextans"] == ["16", "4"]
    default.profile(*case.inputs)
    A = case.meta["adjacency"]
    task = SextansTask(A, GCN_N[0], name="gcn-adjacency")
    result = run_session(task, tmp_path, 40, progress=False)
    assert result.best <= result.default

    tuned = tc.compile(mod, spmm_engine="sextans", tuning_db=str(tmp_path))
    (t,) = tuned.report.engine_tuning
    assert t.engine == "sextans" and t.candidates == 1 and t.cycles <= t.default_cycles
    assert t.default_cycles == pytest.approx(default.report.cycles)
    cfg = resolve_config(None, K0=t.knobs["K0"], N0=t.knobs["N0"], D=t.knobs["D"], P=t.knobs["P"])
    assert t.cycles == pytest.approx(sum(sextans_model(preprocess(A, cfg), n, "sextans").cycles for n in GCN_N))
    report = tuned.profile(*case.inputs)
    assert tc.max_rel_err(tuned.last_outputs, ref) < TOL
    engine_cycles = sum(k.cycles for k in report.kernels if k.target == "sextans")
    assert engine_cycles == pytest.approx(t.cycles)  # the partition ran with these knobs
    if t.source != "default":
        assert t.source == task.key and engine_cycles < default.report.cycles
    assert report.to_dict()["engine_tuning"][0]["knobs"] == t.knobs

    explicit = tc.compile(mod, spmm_engine={"platform": "sextans", "config": {"window": 256}},
                          tuning_db=str(tmp_path))
    assert [t.source for t in explicit.report.engine_tuning] == ["explicit config"]


def test_accel_records_are_candidates_and_each_function_keeps_the_fewest_cycles(tmp_path):
    from tvm_ext.tuning.database import TuningDatabase
    from tvm_ext.tuning.model_knobs import accel_cycles, accel_default
    from tvm_ext.tuning.tasks import AccelTask

    case = get_model("mlp", "tiny")
    mod, ref = case.relax_module(), case.reference()
    base = tc.compile(mod, accel="default", tensorize="never")
    assert [t.source for t in base.report.engine_tuning] == ["default"]

    task = AccelTask("matmul", (8, 32, 64))
    knobs = {"tile_order": "op", "device": "round-robin", "locality_weight": 1.0}
    db = TuningDatabase(tmp_path)
    with db.session():  # a real (simulated) cost of a non-default approach on the task's workload
        db.add_task(task.key, task.spec(), {"knobs": accel_default(), "cost": task.evaluate(accel_default())})
        db.add_knob_record(task.key, knobs, accel_cycles(task.workload, "default", knobs), "cycles")
    tuned = tc.compile(mod, accel="default", tensorize="never", tuning_db=str(tmp_path))
    (t,) = tuned.report.engine_tuning
    assert t.engine == "accel" and t.candidates == 2 and task.key in t.detail[0]
    out = tuned(*case.inputs)
    assert tc.max_rel_err(out, ref) < TOL

    from tvm_ext.accel.byoc import function_report

    before = {k.name.rsplit("_", 1)[0]: function_report(k.name) for k in base.report.kernels if k.target == "accel"}
    after = {k.name.rsplit("_", 1)[0]: function_report(k.name) for k in tuned.report.kernels if k.target == "accel"}
    assert before.keys() == after.keys() and after
    for name, rep in after.items():
        assert rep.cycles <= before[name].cycles  # never worse than the default heuristics
        assert rep.approach in ("heuristic", "knobs(op,round-robin,1)")
        assert f"approach {rep.approach}" in next(k.detail for k in tuned.report.kernels if k.name == rep.symbol)


def test_records_of_other_platforms_and_systems_are_ignored(gcn, tmp_path):
    from tvm_ext.tuning.database import TuningDatabase

    case, mod, _ = gcn
    db = TuningDatabase(tmp_path)
    spec = {"kind": "sextans", "matrix": "x", "n": 4, "platform": "sextans-p"}
    with db.session():
        db.add_task("sextans:other", spec, {"cost": 10.0})
        db.add_knob_record("sextans:other", {"K0": 256, "N0": 8, "D": 7, "P": 64}, 5.0, "cycles")
    model = tc.compile(mod, spmm_engine="sextans", tuning_db=str(tmp_path))
    (t,) = model.report.engine_tuning
    assert t.source == "default" and t.candidates == 0
