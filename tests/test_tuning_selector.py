"""The learned sparse-format selector: corpus, training, prediction, regret, installation, fallback."""
from __future__ import annotations

import math

import numpy as np
import pytest

from schedules.sparse import inspect
from schedules.sparse.selection import AnalyticCostModel, get_default_selector, set_default_selector
from tvm_ext.errors import InputError, TuningError
from tvm_ext.tuning.selector import (KINDS, LearnedSelector, build_corpus, candidate_kind, feasible_candidates,
                                     generate_matrices, load_default, regret_report, split_corpus,
                                     sparse_features_of, train_selector)
from tvm_ext.workloads import banded, block_fem, lap2d

#: A machine-independent stand-in cost: stored slots x N, cheaper per slot for blocked/streamed formats.
_FACTOR = {"csr": 1.0, "ell": 0.8, "dia": 0.45, "hyb": 1.1, "sell": 0.9}


def fake_measure(csr, n, cand, B):
    f = sparse_features_of(csr)
    nnz = f["nnz"]
    if cand.format == "bcsr":
        fill = f["block_fill"][f"{cand.args['R']}x{cand.args['C']}"]
        return nnz / fill * n * 0.5 / cand.args["R"] ** 0.5 * 1e-9
    if cand.format == "ell":
        slots = f["rows"] * f["row_length"]["max"]
    elif cand.format == "dia":
        slots = f["rows"] * f["diagonals"]
    else:
        slots = nnz
    return slots * n * _FACTOR[cand.format] * 1e-9


@pytest.fixture(scope="module")
def corpus():
    return build_corpus(generate_matrices("tiny"), (8, 32), measure=fake_measure)


@pytest.fixture(autouse=True)
def restore_selector():
    before = get_default_selector()
    yield
    set_default_selector(before)


def test_corpus_measures_every_feasible_candidate(corpus):
    assert len(corpus.entries) == 2 * len(generate_matrices("tiny"))
    for e in corpus.entries:
        assert len(e.candidates) == len(e.seconds) >= 2
        assert all(candidate_kind(c) in KINDS for c in e.candidates)
        assert e.seconds[e.oracle] == min(e.seconds)


def test_split_holds_out_whole_matrices(corpus):
    train, test = split_corpus(corpus, 0.3, seed=0)
    assert set(train.matrices).isdisjoint(test.matrices)
    assert sorted(train.matrices + test.matrices) == corpus.matrices


def test_selector_trains_predicts_and_has_low_regret_on_unseen_matrices(corpus):
    train, test = split_corpus(corpus, 0.3, seed=0)
    sel = train_selector(train)
    e = test.entries[0]
    choice = sel.choose(e.features, e.n_cols)
    assert choice.selector == "learned" and choice.candidate.label in {c.label for c in e.candidates}
    rep = regret_report(sel, test)
    assert rep["cases"] == len(test.entries)
    for who in ("learned", "analytic"):
        assert rep[who]["mean_regret"] >= 0 and rep[who]["geomean_slowdown"] >= 1.0
        assert 0.0 <= rep[who]["hit_rate"] <= 1.0
    # the stand-in cost is a smooth function of the features: the model must mostly get it right
    assert rep["learned"]["geomean_slowdown"] < 1.3
    for row in rep["rows"]:
        assert math.isclose(row["learned_regret"] + 1, _ratio(test, row), rel_tol=1e-9)


def _ratio(corpus, row):
    e = next(x for x in corpus.entries if x.matrix == row["matrix"] and x.n_cols == row["n"])
    secs = {c.label: s for c, s in zip(e.candidates, e.seconds)}
    return secs[row["learned"]] / min(e.seconds)


def test_selector_fits_its_training_data(corpus):
    sel = train_selector(corpus)
    rep = regret_report(sel, corpus)
    assert rep["learned"]["hit_rate"] >= 0.6


def test_saved_model_round_trips_and_installs_into_inspect(corpus, tmp_path):
    sel = train_selector(corpus, save=tmp_path / "model.json")
    loaded = LearnedSelector.load(tmp_path / "model.json")
    A = block_fem(40, 3, 3, seed=2)
    f = sparse_features_of(A)
    cands, _ = feasible_candidates(f, 16)
    np.testing.assert_allclose(loaded.predict(f, 16, cands), sel.predict(f, 16, cands), rtol=1e-6)
    assert load_default(tmp_path / "model.json") is not None
    plan = inspect(A, 16, dtype="float32")
    assert plan.choice.selector == "learned"
    B = np.ones((A.shape[1], 16), "float32")
    np.testing.assert_allclose(plan.build()(B), A.astype(np.float32) @ B, rtol=1e-4)


def test_missing_or_broken_model_leaves_the_analytic_selector(tmp_path):
    set_default_selector(None)
    assert load_default(tmp_path / "nothing.json") is None
    assert isinstance(get_default_selector(), AnalyticCostModel)
    (tmp_path / "bad.json").write_text("{broken")
    (tmp_path / "bad.meta.json").write_text("{}")
    with pytest.raises(TuningError, match="cannot read"):
        LearnedSelector.load(tmp_path / "bad.json")
    assert load_default(tmp_path / "bad.json") is None
    assert inspect(lap2d(10), 8).choice.selector == "analytic"


def test_learned_selector_falls_back_when_it_knows_no_candidate(corpus):
    only_csr = corpus.subset(corpus.matrices[:2])
    for e in only_csr.entries:  # a model that only ever saw csr
        keep = [i for i, c in enumerate(e.candidates) if c.format == "csr"]
        e.candidates = [e.candidates[i] for i in keep] * 2
        e.seconds = [e.seconds[i] for i in keep] + [e.seconds[keep[0]] * 2]
    sel = train_selector(only_csr)
    sel.kinds = {"bcsr8x8"}
    choice = sel.choose(sparse_features_of(banded(200, 2, 2)), 8)
    assert choice.selector == "analytic" and "knows none" in choice.reason


def test_real_measurements_train_a_selector_on_a_small_corpus():
    mats = [("fem2x2", block_fem(60, 2, 2, seed=0)), ("lap", lap2d(20)), ("band", banded(300, 3, 3, seed=0))]
    c = build_corpus(mats, (16,), kinds=("csr", "bcsr2x2", "ell"))
    assert all(s > 0 for e in c.entries for s in e.seconds)
    sel = train_selector(c, rounds=30)
    assert sel.choose(c.entries[0].features, 16).candidate.label in {x.label for x in c.entries[0].candidates}


def test_bad_corpus_requests_are_errors():
    with pytest.raises(InputError):
        generate_matrices("huge")
    with pytest.raises(InputError):
        build_corpus([("x", lap2d(4))], (8,), kinds=("coo-ish",))
    from tvm_ext.tuning.selector import Corpus

    with pytest.raises(TuningError):
        train_selector(Corpus())


@pytest.mark.slow
def test_train_default_measures_reports_saves_and_installs(tmp_path):
    from tvm_ext.tuning.selector import train_default

    rep = train_default("tiny", (8,), path=tmp_path / "m.json")
    assert rep["held_out_cases"] >= 1 and rep["corpus_cases"] == len(generate_matrices("tiny"))
    assert (tmp_path / "m.json").exists() and (tmp_path / "m.meta.json").exists()
    assert get_default_selector().name == "learned"
    assert LearnedSelector.load(tmp_path / "m.json").meta["held_out_regret"]["cases"] == rep["held_out_cases"]


def test_selector_env_vars_have_one_meaning_each(corpus, tmp_path, monkeypatch):
    """TVM_EXT_SELECTOR picks the selector; TVM_EXT_SELECTOR_MODEL says where the model file is."""
    import schedules.sparse.selection as sel
    from tvm_ext.errors import ConfigError
    from tvm_ext.tuning.selector import default_model_path

    model = tmp_path / "m.json"
    monkeypatch.setenv("TVM_EXT_SELECTOR_MODEL", str(model))
    monkeypatch.setenv("TVM_EXT_SELECTOR", "off")
    assert default_model_path() == model             # "off" is not a path (it used to save to ./off)
    try:
        monkeypatch.setattr(sel, "_default_selector", None)
        with pytest.raises(ConfigError, match="learned"):   # asked for a model that does not exist
            monkeypatch.setenv("TVM_EXT_SELECTOR", "learned")
            get_default_selector()
        train_selector(corpus, save=model)
        set_default_selector(None)
        monkeypatch.setattr(sel, "_default_selector", None)
        assert get_default_selector().name == "learned"   # found through TVM_EXT_SELECTOR_MODEL
        for off in ("off", "analytic"):
            monkeypatch.setattr(sel, "_default_selector", None)
            monkeypatch.setenv("TVM_EXT_SELECTOR", off)
            assert isinstance(get_default_selector(), AnalyticCostModel)
        monkeypatch.setattr(sel, "_default_selector", None)
        monkeypatch.setenv("TVM_EXT_SELECTOR", str(model))   # a path in the wrong variable: an error, not a fallback
        with pytest.raises(ConfigError, match="TVM_EXT_SELECTOR_MODEL"):
            get_default_selector()
    finally:
        set_default_selector(None)
    monkeypatch.delenv("TVM_EXT_SELECTOR_MODEL")
    assert default_model_path().name == "model.json" and ".cache" in default_model_path().parts
