"""Tensorized conv search spaces and ``tvm-ext tune conv``: spaces, session, replay, resume, bad input."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from tvm_ext.errors import InputError
from tvm_ext.tuning.conv_space import (conv_default, conv_reference, conv_tasks, kernel_reference,
                                       kernel_tasks)
from tvm_ext.tuning.session import apply_best, ms_records, run_session
from tvm_ext.tuning.spaces import schedule_summary
from tvm_ext.tuning.tasks import make_task

#: N C_IN C_OUT HW K with pad 1 (NHWC), and a strided 1x1 NCHW layer.
SHAPE = [1, 16, 32, 8, 3]
STRIDED = dict(n=1, c_in=16, c_out=32, hw=8, kernel=1, stride=2, layout="nchw")
TRIALS = 8


def _target():
    from tvm_ext.target import resolve_target

    return resolve_target(None)


def _run(mod, inputs, out_shape, dtype="float32") -> np.ndarray:
    import tvm

    module = tvm.compile(mod, target=_target())
    out = tvm.runtime.empty(tuple(out_shape), dtype)
    module["main"](*[tvm.runtime.tensor(np.ascontiguousarray(a)) for a in inputs], out)
    return out.numpy()


def _rel_err(got, ref) -> float:
    return float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))


def _parallel_extents(mod) -> list[int]:
    """Extents of the parallel loops of a scheduled module (read from its TVMScript)."""
    import re

    return [int(e) for e in re.findall(r"T\.parallel\((\d+)\)", mod.script())]


@pytest.fixture(scope="module")
def conv_session(tmp_path_factory):
    """One tiny MetaSchedule run of the NHWC conv (XGBModel, JSON database)."""
    db = tmp_path_factory.mktemp("conv") / "db"
    task = make_task("conv", shape=SHAPE, pad=1)
    return task, db, run_session(task, db, TRIALS, progress=False)


# --------------------------------------------------------------------------- spaces
@pytest.mark.parametrize("sizes", [dict(n=1, c_in=16, c_out=32, hw=8, kernel=3, pad=1), STRIDED],
                         ids=["nhwc3x3", "nchw1x1s2"])
def test_every_design_space_builds_and_matches_the_reference(sizes):
    import tvm

    default, searched = conv_tasks(**sizes)
    tvm.ir.assert_structural_equal(default.mod, conv_default(**sizes))  # the one-point task is the default
    (x, w), ref = conv_reference(**sizes)
    spaces = searched.design_spaces()
    labels = [schedule_summary(s)["design_space"] for s in spaces]
    assert labels[0] == "emit default" and len(labels) >= 4 and len(set(labels)) == len(labels)
    assert labels == list(searched.knobs["design_spaces"])
    assert searched.max_trials > len(labels)
    one_point = default.design_spaces()[0]
    assert schedule_summary(one_point)["decisions"] == []
    for s in spaces:  # every searched space samples the parallel grain and the unroll budget
        assert {k for k, _ in schedule_summary(s)["decisions"]} == {"SamplePerfectTile", "SampleCategorical"}
    for s in [one_point, *spaces]:
        assert _rel_err(_run(s.mod, [x, w], ref.shape), ref) < 1e-5


def test_parallel_grain_is_a_sampled_knob_that_changes_the_parallel_loop():
    from tvm import s_tir

    _, searched = conv_tasks(1, 16, 32, 8, 3, pad=1)
    sch = searched.design_spaces()[0]
    trace = sch.trace
    tile = next(i for i in trace.insts if i.kind.name == "SamplePerfectTile")
    extent = int(np.prod([int(v) for v in trace.decisions[tile]]))
    assert extent == 8  # the output rows: 8 tiles of the fused parallel loop by default
    (x, w), ref = conv_reference(1, 16, 32, 8, 3, pad=1)
    par = {}
    for grain in (1, extent):
        s = s_tir.Schedule(searched.mod)
        trace.with_decision(tile, [extent // grain, grain], remove_postproc=True).apply_to_schedule(
            s, remove_postproc=True)
        par[grain] = _parallel_extents(s.mod)
        assert _rel_err(_run(s.mod, [x, w], ref.shape), ref) < 1e-5
    # the conv's parallel loop: 8 iterations of one row each, or one iteration running all 8
    # (the pad block keeps its own parallel loop either way)
    assert set(par[1]) - set(par[extent]) == {extent} and set(par[extent]) - set(par[1]) == {1}


def test_transformed_and_non_matmul_mappings_work_or_are_rejected_clearly():
    from tensorize.kernels import depthwise_conv2d, kernel_from_prim_func, separable_conv2d

    sep = separable_conv2d(1, 8, 16, 6, 3, pad=1)  # factorised + rebuilt, two tensorized blocks
    dw = depthwise_conv2d(1, 16, 6, 3, pad=1)  # a conv1d instruction
    for k, want in ((sep, "matmul"), (dw, "conv1d")):
        _, searched = kernel_tasks(k)
        assert all(name.startswith(want) for name in searched.knobs["instructions"].values())
        inputs, ref = kernel_reference(k)
        for s in searched.design_spaces()[:3]:
            assert _rel_err(_run(s.mod, inputs, ref.shape), ref) < 1e-5
    assert kernel_tasks(sep)[1].knobs["structural_transforms"]
    # the same kernel as a bare PrimFunc is rebuilt the same way (its pad block kept)
    _, from_func = kernel_tasks(kernel_from_prim_func(sep.prim_func()))
    assert from_func.knobs["structural_transforms"]
    inputs, ref = kernel_reference(sep)
    assert _rel_err(_run(from_func.design_spaces()[0].mod, inputs, ref.shape), ref) < 1e-5


# --------------------------------------------------------------------------- session
def test_session_best_is_never_worse_than_the_default_record(conv_session):
    task, db, r = conv_session
    assert r.engine == "metaschedule" and r.records == TRIALS and r.new_records == TRIALS
    default_task, searched = task.space_tasks(TRIALS)
    from tvm_ext.tuning.database import TuningDatabase

    tdb = TuningDatabase(db)
    tdb.refresh()
    costs = ms_records(tdb, [default_task, searched])
    # the untuned default was measured as a record of this run, so the best record (a minimum over
    # every record, the default's included) cannot be worse: no timing comparison involved
    assert len(costs[default_task.name]) == 1 and len(costs[searched.name]) == TRIALS - 1
    assert r.best == min(c for cs in costs.values() for c in cs if c is not None)
    assert r.best <= costs[default_task.name][0]
    assert r.verified is True and r.max_rel_err < 1e-4
    cfg = r.best_config["all"]
    assert cfg["design_space"] == "untuned default" or cfg["design_space"] in searched.knobs["design_spaces"]
    d = r.to_dict()
    assert d["best_seconds"] == r.best and d["default_seconds"] == r.default > 0 and d["records"] == TRIALS


def test_best_record_replays_and_matches_torch(conv_session):
    torch = pytest.importorskip("torch")
    task, db, r = conv_session
    (group, (st, mod)), = apply_best(task, db).items()
    assert group == "" and st.name in {t.name for t in task.space_tasks(0)}
    (x, w), _ = conv_reference(*task.sizes)
    got = _run(mod, [x, w], (1, 8, 8, 32))
    want = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(w).permute(3, 2, 0, 1),
                                      padding=1).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tvm_ext.cli.main", *args], capture_output=True, text=True,
                          timeout=300)


def test_cli_tune_conv_json_and_resume(conv_session, tmp_path):
    task, db, first = conv_session
    copy = tmp_path / "db"
    shutil.copytree(db, copy)
    p = _cli("tune", "conv", "--shape", *map(str, SHAPE), "--pad", "1", "--trials", str(TRIALS + 2),
             "--db", str(copy), "--json", "--no-progress")
    assert p.returncode == 0, p.stderr
    data = json.loads(p.stdout)
    assert {"best_seconds", "default_seconds", "records"} <= set(data)
    assert data["records"] == TRIALS + 2 and data["new_records"] == 2  # resumed: earlier records kept
    assert data["default_seconds"] == first.default and data["best_seconds"] <= first.best
    p = _cli("tune", "conv", "--shape", "1", "16", "32", "--db", str(tmp_path / "bad"))
    assert p.returncode == 2 and "five sizes" in p.stderr and "Traceback" not in p.stderr


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("shape, options, match", [
    (None, {}, "five sizes"),
    ([1, 16, 32, 8], {}, "five sizes"),
    ([1, 16, 0, 8, 3], {}, "C_OUT must be a positive integer"),
    ([1, 16, 32, 8, 2.5], {}, "K must be a positive integer"),
    ([1, 16, 32, 4, 7], {"pad": 1}, "larger than the padded input"),
    (SHAPE, {"stride": 0}, "stride"),
    (SHAPE, {"pad": -1}, "pad"),
    (SHAPE, {"layout": "nchw16c"}, "layout"),
    (SHAPE, {"dtype": "int8"}, "dtype"),
])
def test_bad_conv_tasks_are_input_errors(shape, options, match):
    with pytest.raises(InputError, match=match):
        make_task("conv", shape=shape, **options)


def test_conv_tasks_rejects_bad_sizes_directly():
    with pytest.raises(InputError, match="larger than the padded input"):
        conv_tasks(1, 4, 4, 3, 5)
    with pytest.raises(InputError, match="N must be"):
        conv_reference(0, 4, 4, 3, 3)
