"""The learned selector's estimator API: scikit-learn's ``fit(X, y)`` / ``predict(X)``, and duck-typed models."""
from __future__ import annotations

import numpy as np
import pytest

from tvm_ext.errors import InputError, TuningError
from tvm_ext.tuning.selector import (BoostedTreeRegressor, LearnedSelector, build_corpus, generate_matrices,
                                     sparse_features_of, train_selector, training_data)

pytest.importorskip("xgboost")


def friedman1(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Friedman's #1 regression problem (Friedman 1991; scikit-learn's make_friedman1 without noise)."""
    X = np.random.default_rng(seed).uniform(0, 1, (n, 5))
    y = 10 * np.sin(np.pi * X[:, 0] * X[:, 1]) + 20 * (X[:, 2] - 0.5) ** 2 + 10 * X[:, 3] + 5 * X[:, 4]
    return X, y


def r2(pred: np.ndarray, y: np.ndarray) -> float:
    return float(1 - np.sum((pred - y) ** 2) / np.sum((y - y.mean()) ** 2))


def least_squares(X: np.ndarray, y: np.ndarray, Xt: np.ndarray) -> np.ndarray:
    """numpy's linear least-squares fit, the peer the trees must beat on a non-linear target."""
    w = np.linalg.lstsq(np.c_[X, np.ones(len(X))], y, rcond=None)[0]
    return np.c_[Xt, np.ones(len(Xt))] @ w


def test_fit_predict_learns_friedman1_better_than_a_linear_fit():
    X, y = friedman1(400, 0)
    Xt, yt = friedman1(200, 1)
    est = BoostedTreeRegressor()
    assert est.fit(X, y) is est and est.n_features_in_ == 5
    pred = est.predict(Xt)
    assert pred.shape == (200,) and pred.dtype == np.float64
    assert r2(pred, yt) > 0.85 and r2(pred, yt) > r2(least_squares(X, y, Xt), yt) + 0.1


def test_a_step_function_is_learned_exactly_enough():
    X = np.linspace(0, 1, 64).reshape(-1, 1)
    y = np.where(X[:, 0] < 0.3, -1.0, 2.0)
    pred = BoostedTreeRegressor(n_estimators=200, max_depth=2, subsample=1.0).fit(X, y).predict(X)
    np.testing.assert_allclose(pred, y, atol=0.05)


def test_params_follow_scikit_learn_conventions():
    est = BoostedTreeRegressor(n_estimators=20, max_depth=3, random_state=7)
    params = est.get_params()
    assert params["n_estimators"] == 20 and params["random_state"] == 7
    X, y = friedman1(100, 2)
    clone = type(est)(**params)                    # what sklearn.base.clone does
    np.testing.assert_array_equal(clone.fit(X, y).predict(X), est.fit(X, y).predict(X))
    assert est.set_params(max_depth=2) is est and est.max_depth == 2
    with pytest.raises(InputError, match="unknown parameters"):
        est.set_params(depth=2)


def test_bad_input_is_one_clear_error():
    X, y = friedman1(20, 3)
    with pytest.raises(TuningError, match="not fitted"):
        BoostedTreeRegressor().predict(X)
    est = BoostedTreeRegressor(n_estimators=5)
    with pytest.raises(InputError, match="samples in X"):
        est.fit(X, y[:-1])
    with pytest.raises(InputError, match="2-D"):
        est.fit(X[:, 0], y)
    with pytest.raises(InputError, match="NaN"):
        est.fit(np.where(X > 0.9, np.nan, X), y)
    with pytest.raises(InputError, match="features"):
        est.fit(X, y).predict(X[:, :3])


def _slot_cost(csr, n, cand, B):
    """A stand-in cost: the slots a format streams, times N."""
    f = sparse_features_of(csr)
    slots = {"ell": f["rows"] * f["row_length"]["max"], "dia": f["rows"] * f["diagonals"]}.get(cand.format, f["nnz"])
    if cand.format == "bcsr":
        slots = f["nnz"] / f["block_fill"][f"{cand.args['R']}x{cand.args['C']}"] * 0.6
    return slots * n * 1e-9


class LeastSquares:
    """A model of the user's own: anything with fit(X, y) and predict(X) can drive the selector."""

    def fit(self, X, y):
        self.w = np.linalg.lstsq(np.c_[X, np.ones(len(X))], y, rcond=None)[0]
        return self

    def predict(self, X):
        return np.c_[X, np.ones(len(X))] @ self.w


@pytest.fixture(scope="module")
def corpus():
    return build_corpus(generate_matrices("tiny")[:6], (8,), measure=_slot_cost)


def test_training_data_is_what_the_default_model_fits(corpus):
    X, y, names = training_data(corpus)
    assert X.shape == (sum(len(e.candidates) for e in corpus.entries), len(names)) and y.shape == (X.shape[0],)
    sel = train_selector(corpus, rounds=30)
    assert isinstance(sel.model, BoostedTreeRegressor) and sel.feature_names == names
    refit = BoostedTreeRegressor(n_estimators=30, max_depth=5, random_state=0).fit(X, y)
    e = corpus.entries[0]
    np.testing.assert_allclose(sel.predict(e.features, e.n_cols, e.candidates),
                               refit.predict(sel.features(e.features, e.n_cols, e.candidates)), rtol=1e-6)


def test_a_duck_typed_model_drives_the_selector(corpus, tmp_path):
    sel = train_selector(corpus, model=LeastSquares())
    assert isinstance(sel.model, LeastSquares) and sel.meta["model"] == "LeastSquares"
    for e in corpus.entries:
        choice = sel.choose(e.features, e.n_cols)
        assert choice.selector == "learned" and "LeastSquares" in choice.reason
        assert choice.candidate.label in {c.label for c in e.candidates}
    with pytest.raises(TuningError, match="cannot be saved"):
        sel.save(tmp_path / "m.json")
    with pytest.raises(InputError, match="fit"):
        train_selector(corpus, model=object())
    with pytest.raises(InputError, match="predict"):
        LearnedSelector(object(), [], [])


def test_xgbregressor_stands_in_for_the_default_model(corpus, tmp_path):
    pytest.importorskip("sklearn", reason="xgboost.XGBRegressor needs scikit-learn")
    from xgboost import XGBRegressor

    sel = train_selector(corpus, model=XGBRegressor(n_estimators=30, max_depth=4))
    path = sel.save(tmp_path / "m.json")
    loaded = LearnedSelector.load(path)
    e = corpus.entries[0]
    np.testing.assert_allclose(loaded.predict(e.features, e.n_cols, e.candidates),
                               sel.predict(e.features, e.n_cols, e.candidates), rtol=1e-5)
