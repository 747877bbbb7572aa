"""A learned sparse-format selector: boosted trees over inspector features, trained on measurements.

The analytic model of :mod:`schedules.sparse.selection` estimates bytes; this
one learns from the machine.  The loop:

1. :func:`generate_matrices`: a corpus from the workload generators (2-D/3-D
   stencils, bands, block-FEM matrices with several block sizes, R-MAT power
   laws, uniform random), varied in size, band and block shape; ``"large"``
   adds matrices of 1M non-zeros or more (HPCG's 27-point stencil, pyamg's
   elasticity, block FEM, R-MAT) whose features are sampled estimates;
2. :func:`build_corpus`: for every matrix and every ``N`` of B, the candidate
   formats the analytic model deems feasible (CSR, BCSR R x C, ELL, DIA, HYB,
   SELL; same inspector arguments) are *measured* with their executors;
3. :func:`train_selector`: one regressor predicts ``log(t_candidate /
   t_csr)`` from the matrix features (row-length statistics, diagonals and
   DIA/ELL fill, R x C block fill, size, ``N``) plus the candidate's kind and
   its own fill/padding.  :func:`training_data` gives that ``(X, y)``; the
   default model is :class:`BoostedTreeRegressor` (xgboost's trees behind
   scikit-learn's ``fit(X, y)`` / ``predict(X)``), and any estimator with
   those two methods can be passed instead (``model=``), e.g.
   ``xgboost.XGBRegressor`` where scikit-learn is installed;
4. :class:`LearnedSelector` implements the
   :class:`~schedules.sparse.selection.Selector` protocol: it scores every
   feasible candidate and picks the lowest prediction.  ``install()`` makes it
   the default of :func:`schedules.sparse.inspect`; :func:`load_default`
   installs the model saved at :func:`default_model_path` when there is one,
   and the analytic model stays in charge otherwise (also for a matrix whose
   candidates the model never saw);
5. :func:`regret_report`: on matrices the model never saw, the measured time
   of its choice over the measured best (oracle), next to the analytic
   model's regret.

>>> from tvm_ext.workloads import lap2d
>>> f = matrix_features(sparse_features_of(lap2d(8)), n_cols=16)
>>> f["log2_rows"], f["log2_n"]
(6.0, 4.0)
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from tvm_ext.atomic_file import atomic_write, atomic_write_bytes
from tvm_ext.errors import ConfigError, InputError, TuningError
from tvm_ext.json_config import read_json_file

__all__ = [
    "CorpusEntry", "Corpus", "LearnedSelector", "generate_matrices", "build_corpus", "train_selector",
    "regret_report", "default_model_path", "load_default", "matrix_features", "candidate_kind",
    "feasible_candidates", "measure_seconds", "split_corpus", "sparse_features_of", "train_default",
    "BoostedTreeRegressor", "training_data",
]

#: BCSR block shapes the selector considers (inspector arguments R, C).
BLOCKS = ((2, 2), (3, 3), (4, 4), (6, 6), (2, 1), (1, 2), (3, 1), (4, 1))
#: Candidate kinds (model one-hot); BCSR kinds are ``bcsr{R}x{C}``.
KINDS = ("csr", "ell", "dia", "hyb", "sell") + tuple(f"bcsr{r}x{c}" for r, c in BLOCKS)
FORMAT_VERSION = 1


def default_model_path() -> Path:
    """``$TVM_EXT_SELECTOR_MODEL`` or ``~/.cache/tvm-ext/selector/model.json``.

    (``$TVM_EXT_SELECTOR`` says which selector :func:`schedules.sparse.inspect`
    uses, not where a model is: see :data:`schedules.sparse.selection.SELECTOR_ENV`.)
    """
    env = os.environ.get("TVM_EXT_SELECTOR_MODEL", "").strip()
    return Path(env) if env else Path.home() / ".cache" / "tvm-ext" / "selector" / "model.json"


def sparse_features_of(A) -> dict:
    """The inspector's features of ``A`` (:func:`schedules.sparse.selection.sparse_features`)."""
    from schedules.sparse.selection import sparse_features

    return sparse_features(A)


def candidate_kind(cand) -> str:
    """Model name of a candidate: ``csr``, ``bcsr3x3``, ``hyb``..."""
    if cand.format == "bcsr":
        return f"bcsr{cand.args['R']}x{cand.args['C']}"
    return cand.format


def feasible_candidates(features: dict, n_cols: int) -> tuple[list, dict]:
    """Candidates the analytic model keeps (padding within bounds), restricted to :data:`KINDS`."""
    from schedules.sparse.selection import AnalyticCostModel

    model = AnalyticCostModel(bcsr_sizes=tuple(sorted({x for b in BLOCKS for x in b})))
    scores, excluded = model.scores(features, n_cols)
    cands = [c for c in scores if candidate_kind(c) in KINDS]
    return cands, excluded


def matrix_features(f: dict, n_cols: int) -> dict[str, float]:
    """Numeric features of a matrix (from :func:`sparse_features_of`) and ``N``.

    ``b_bytes_log2`` prices ``B`` at the features' value dtype (``dtype``: 4 bytes a float32
    value, 8 a float64 one; features without the key, as a corpus saved before the
    features named their dtype, are float32, the corpus's dtype).

    >>> from tvm_ext.workloads import lap2d
    >>> f32 = matrix_features(sparse_features_of(lap2d(8).astype("float32")), 4)["b_bytes_log2"]
    >>> matrix_features(sparse_features_of(lap2d(8)), 4)["b_bytes_log2"] - f32  # float64: twice the bytes
    1.0
    """
    from schedules.sparse.selection import value_bytes_of

    m, k, nnz = max(f["rows"], 1), max(f["cols"], 1), max(f["nnz"], 1)
    value_bytes = value_bytes_of(f.get("dtype", "float32"))
    rl = f["row_length"]
    mean = max(rl["mean"], 1e-9)
    out = {
        "log2_rows": math.log2(m), "log2_cols": math.log2(k), "log2_nnz": math.log2(nnz),
        "log2_n": math.log2(max(int(n_cols), 1)), "row_mean": rl["mean"], "row_cv": rl["std"] / mean,
        "row_max_over_mean": rl["max"] / mean, "empty_frac": rl["empty_rows"] / m,
        "band_frac": f["bandwidth"] / m, "log2_diagonals": math.log2(max(f["diagonals"], 1)),
        "dia_fill": f["dia_fill"], "ell_fill": f["ell_fill"], "density_log": math.log10(max(f["density"], 1e-12)),
        "b_bytes_log2": math.log2(k * max(int(n_cols), 1) * value_bytes),
    }
    for r, c in BLOCKS:
        out[f"fill_{r}x{c}"] = float(f["block_fill"].get(f"{r}x{c}", 0.0))
    return out


def _candidate_features(cand, f: dict) -> dict[str, float]:
    kind = candidate_kind(cand)
    out = {f"is_{k}": float(k == kind) for k in KINDS}
    m, nnz = max(f["rows"], 1), max(f["nnz"], 1)
    if cand.format == "bcsr":
        fill = float(f["block_fill"].get(f"{cand.args['R']}x{cand.args['C']}", 0.0))
        slots = nnz / max(fill, 1e-9)
    elif cand.format == "ell":
        fill, slots = f["ell_fill"], m * f["row_length"]["max"]
    elif cand.format == "dia":
        fill, slots = f["dia_fill"], m * f["diagonals"]
    elif cand.format == "hyb":
        w = cand.args.get("width", 0)
        fill, slots = (nnz / max(w * m, 1)), max(w * m, nnz)
    else:
        fill, slots = 1.0, nnz
    out["cand_fill"] = float(fill)
    out["cand_padding"] = float(slots / nnz)
    out["cand_block_area"] = float(cand.args.get("R", 1) * cand.args.get("C", 1))
    return out


def _row(cand, f: dict, n_cols: int) -> dict[str, float]:
    return {**matrix_features(f, n_cols), **_candidate_features(cand, f)}


# --------------------------------------------------------------------------- corpus
#: Matrices of 1M non-zeros or more that ``size="large"`` adds to the medium corpus.
LARGE_MATRICES = (
    ("lap3d27_48", "lap3d", (48,), {"points": 27}),          # HPCG's 27-point stencil, 2.9M nnz
    ("lap2d_600", "lap2d", (600,), {}),                      # 1.8M nnz
    ("fem3x3_40000", "block_fem", (40000, 3, 3), {}),        # 3.2M nnz in dense 3x3 blocks
    ("rmat17", "rmat", (17,), {"edge_factor": 16}),          # power-law graph, 2M nnz
    ("elasticity_300", "fem_elasticity", (300,), {}),        # pyamg Q1 elasticity, 3.2M nnz
)


def generate_matrices(size: str = "small", seed: int = 0) -> list[tuple[str, Any]]:
    """Named corpus matrices from the generators.

    ``size``: ``"tiny"`` (tests), ``"small"``, ``"medium"``, or ``"large"``
    (medium plus :data:`LARGE_MATRICES`, each of 1M non-zeros or more; the
    pyamg elasticity matrix needs the optional pyamg package).
    """
    from tvm_ext import workloads
    from tvm_ext.workloads import banded, block_fem, lap2d, lap3d, rmat, uniform_random

    if size == "large":
        out = generate_matrices("medium", seed)
        rng = np.random.default_rng(seed + 1)
        for name, gen, args, kwargs in LARGE_MATRICES:
            if gen in ("block_fem", "rmat"):
                kwargs = dict(kwargs, seed=int(rng.integers(1 << 30)))
            out.append((name, getattr(workloads, gen)(*args, **kwargs)))
        return out
    scale = {"tiny": 0, "small": 1, "medium": 2}.get(size)
    if scale is None:
        raise InputError(f"generate_matrices: size must be tiny, small, medium or large, got {size!r}")
    rng = np.random.default_rng(seed)
    out: list[tuple[str, Any]] = []
    grid = (12, 24, 48)[scale]
    for n in sorted({grid, grid * 2}):
        out.append((f"lap2d_{n}", lap2d(n)))
        out.append((f"lap2d9_{n}", lap2d(n, points=9)))
    out.append((f"lap3d_{grid // 2}", lap3d(max(4, grid // 2))))
    if scale:
        out.append((f"lap3d27_{grid // 3}", lap3d(max(4, grid // 3), points=27)))
    nb = (60, 200, 600)[scale]
    blocks = ((2, 2), (3, 3), (4, 4), (6, 6), (3, 1)) if scale else ((2, 2), (3, 3), (4, 1))
    for r, c in blocks:
        out.append((f"fem{r}x{c}_{nb}", block_fem(nb, r, c, seed=int(rng.integers(1 << 30)))))
    n = (300, 1500, 5000)[scale]
    for lo, hi in ((1, 1), (4, 4), (16, 2)) if scale else ((1, 1), (6, 6)):
        out.append((f"band{lo}_{hi}_{n}", banded(n, lo, hi, seed=int(rng.integers(1 << 30)))))
    for sc in ((8, 10) if scale else (8,)):
        out.append((f"rmat{sc + scale}", rmat(sc + scale, edge_factor=8, seed=int(rng.integers(1 << 30)))))
    for dens in ((0.002, 0.01) if scale else (0.02,)):
        out.append((f"rand_{dens}_{n}", uniform_random(n, n, dens, seed=int(rng.integers(1 << 30)))))
    return out


@dataclass
class CorpusEntry:
    """One (matrix, N): features and the measured seconds of every feasible candidate."""

    matrix: str
    n_cols: int
    features: dict
    candidates: list  # Candidate objects, aligned with seconds
    seconds: list[float]

    @property
    def oracle(self) -> int:
        return int(np.argmin(self.seconds))


@dataclass
class Corpus:
    entries: list[CorpusEntry] = field(default_factory=list)
    measure_seconds: float = 0.0

    @property
    def matrices(self) -> list[str]:
        return sorted({e.matrix for e in self.entries})

    def subset(self, names: Iterable[str]) -> "Corpus":
        keep = set(names)
        return Corpus([e for e in self.entries if e.matrix in keep], self.measure_seconds)


def measure_seconds(csr, n_cols: int, cand, B: np.ndarray, *, repeat: int = 3, min_repeat_ms: int = 10) -> float:
    """Median seconds of one SpMM with candidate ``cand``'s executor (default parameters)."""
    from schedules.sparse import inspect

    plan = inspect(csr, n_cols, format=cand.format, **cand.args)
    exe = plan.build()
    return float(exe.time(B, repeat=repeat, min_repeat_ms=min_repeat_ms).median)


def build_corpus(matrices: Sequence[tuple[str, Any]], n_values: Sequence[int] = (8, 32), *,
                 measure: Callable | None = None, dtype: str = "float32", seed: int = 0,
                 kinds: Sequence[str] | None = None,
                 progress: Callable[[str], None] | None = None) -> Corpus:
    """Measure every feasible candidate on every matrix and ``N``.

    ``measure(csr, n, candidate, B) -> seconds`` defaults to :func:`measure_seconds`;
    ``kinds`` restricts the candidates (e.g. ``("csr", "ell", "bcsr2x2")``).
    """
    if kinds is not None:
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise InputError(f"build_corpus: unknown candidate kinds {unknown}; kinds: {', '.join(KINDS)}")
    from tvm_ext.workloads import canonical_csr

    measure = measure or measure_seconds
    rng = np.random.default_rng(seed)
    corpus = Corpus()
    t0 = time.perf_counter()
    for name, A in matrices:
        csr = canonical_csr(A, dtype=dtype, what=f"corpus matrix {name}")
        feats = sparse_features_of(csr)
        for n in n_values:
            cands, _ = feasible_candidates(feats, n)
            if kinds is not None:
                cands = [c for c in cands if candidate_kind(c) in kinds]
            if not cands:
                continue
            B = rng.uniform(-1, 1, (csr.shape[1], n)).astype(dtype)
            secs = [float(measure(csr, n, c, B)) for c in cands]
            corpus.entries.append(CorpusEntry(name, int(n), feats, cands, secs))
            if progress:
                best = cands[int(np.argmin(secs))].label
                progress(f"{name} N={n}: {len(cands)} candidates, best {best}")
    corpus.measure_seconds = time.perf_counter() - t0
    return corpus


def split_corpus(corpus: Corpus, held_out: float = 0.3, seed: int = 0) -> tuple[Corpus, Corpus]:
    """Split by matrix (held-out matrices are never seen in training)."""
    names = corpus.matrices
    rng = np.random.default_rng(seed)
    order = list(rng.permutation(len(names)))
    k = max(1, int(round(len(names) * held_out)))
    test = {names[i] for i in order[:k]}
    return corpus.subset(n for n in names if n not in test), corpus.subset(test)


# --------------------------------------------------------------------------- model
class BoostedTreeRegressor:
    """Gradient-boosted regression trees with scikit-learn's estimator API: ``fit(X, y)``, ``predict(X)``.

    The trees are xgboost's core ``Booster`` (``xgboost.train``, squared
    error); scikit-learn is not needed.  ``get_params``/``set_params`` follow
    scikit-learn's conventions, so ``type(est)(**est.get_params())`` is an
    unfitted copy.  Any object with the same ``fit``/``predict`` methods can
    stand in for it (duck typing), e.g. ``xgboost.XGBRegressor`` where
    scikit-learn is installed: ``train_selector(corpus, model=XGBRegressor())``.

    >>> X = np.linspace(0, 1, 40).reshape(-1, 1)
    >>> est = BoostedTreeRegressor(n_estimators=40, max_depth=2).fit(X, (X[:, 0] > 0.5).astype(float))
    >>> est.predict(np.array([[0.1], [0.9]])).round(1).tolist()
    [0.0, 1.0]
    """

    def __init__(self, n_estimators: int = 150, max_depth: int = 5, learning_rate: float = 0.1,
                 subsample: float = 0.9, random_state: int = 0, n_jobs: int = 1):
        self.n_estimators = n_estimators
        self.max_depth = max_depth
        self.learning_rate = learning_rate
        self.subsample = subsample
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.booster = None

    _PARAMS = ("n_estimators", "max_depth", "learning_rate", "subsample", "random_state", "n_jobs")

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor's arguments (scikit-learn's convention)."""
        return {k: getattr(self, k) for k in self._PARAMS}

    def set_params(self, **params: Any) -> "BoostedTreeRegressor":
        """Change constructor arguments; unknown names are an :class:`InputError`."""
        unknown = sorted(set(params) - set(self._PARAMS))
        if unknown:
            raise InputError(f"BoostedTreeRegressor: unknown parameters {unknown}; known: {', '.join(self._PARAMS)}")
        for k, v in params.items():
            setattr(self, k, v)
        return self

    @staticmethod
    def _matrix(X: Any, what: str) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise InputError(f"BoostedTreeRegressor.{what}: X must be 2-D (samples x features), got shape {X.shape}")
        if not np.all(np.isfinite(X)):
            raise InputError(f"BoostedTreeRegressor.{what}: X has NaN or infinite entries")
        return X

    def fit(self, X: Any, y: Any) -> "BoostedTreeRegressor":
        """Fit the trees to ``X`` (samples x features) and targets ``y``; returns ``self``."""
        import xgboost as xgb

        X = self._matrix(X, "fit")
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if y.shape[0] != X.shape[0]:
            raise InputError(f"BoostedTreeRegressor.fit: {X.shape[0]} samples in X but {y.shape[0]} targets in y")
        if X.shape[0] == 0 or not np.all(np.isfinite(y)):
            raise InputError("BoostedTreeRegressor.fit: y must be non-empty and finite")
        params = {"max_depth": int(self.max_depth), "eta": float(self.learning_rate),
                  "objective": "reg:squarederror", "nthread": int(self.n_jobs), "seed": int(self.random_state),
                  "subsample": float(self.subsample), "verbosity": 0}
        self.booster = xgb.train(params, xgb.DMatrix(X, label=y), num_boost_round=int(self.n_estimators))
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predicted target of each row of ``X`` (1-D float array)."""
        import xgboost as xgb

        if self.booster is None:
            raise TuningError("BoostedTreeRegressor.predict: the model is not fitted (call fit first)")
        X = self._matrix(X, "predict")
        if X.shape[1] != self.n_features_in_:
            raise InputError(f"BoostedTreeRegressor.predict: X has {X.shape[1]} features, "
                             f"the model was fitted on {self.n_features_in_}")
        names = self.booster.feature_names   # a booster trained with named columns checks them
        return np.asarray(self.booster.predict(xgb.DMatrix(X, feature_names=names)), dtype=np.float64)

    def save_model(self, path: str | os.PathLike) -> None:
        """Write the fitted trees (xgboost's format, picked from the suffix)."""
        if self.booster is None:
            raise TuningError("BoostedTreeRegressor.save_model: the model is not fitted")
        self.booster.save_model(str(path))

    @classmethod
    def from_booster(cls, booster: Any, n_features: int | None = None) -> "BoostedTreeRegressor":
        """Wrap an already trained ``xgboost.Booster``."""
        est = cls()
        est.booster = booster
        est.n_features_in_ = int(n_features if n_features is not None else booster.num_features())
        return est


class LearnedSelector:
    """The trained model as a :class:`~schedules.sparse.selection.Selector` (``name = "learned"``).

    ``model`` is a fitted estimator whose ``predict(X)`` maps rows of
    ``feature_names`` columns to ``log(t / t_csr)``: a
    :class:`BoostedTreeRegressor`, or anything with that method (duck
    typing: ``xgboost.XGBRegressor``, a scikit-learn regressor...).  A bare
    ``xgboost.Booster`` is wrapped in a :class:`BoostedTreeRegressor`.
    """

    name = "learned"

    def __init__(self, model, feature_names: Sequence[str], kinds: Sequence[str], meta: dict | None = None):
        if not callable(getattr(model, "predict", None)):
            raise InputError(f"LearnedSelector: the model ({type(model).__name__}) has no predict(X) method")
        xgb = sys.modules.get("xgboost")   # a Booster exists only once xgboost is imported
        if xgb is not None and isinstance(model, xgb.Booster):
            model = BoostedTreeRegressor.from_booster(model, len(feature_names))
        self.model = model
        self.feature_names = list(feature_names)
        self.kinds = set(kinds)
        self.meta = dict(meta or {})

    @property
    def booster(self):
        """The underlying ``xgboost.Booster`` of a :class:`BoostedTreeRegressor` or ``XGBRegressor`` model (else None)."""
        if hasattr(self.model, "get_booster"):
            return self.model.get_booster()
        return getattr(self.model, "booster", None)

    # -- prediction ---------------------------------------------------------------
    def features(self, features: dict, n_cols: int, cands: Sequence) -> np.ndarray:
        """The model's input: one row per candidate, columns :attr:`feature_names`."""
        return np.array([[_row(c, features, n_cols)[k] for k in self.feature_names] for c in cands],
                        dtype=np.float64).reshape(len(cands), len(self.feature_names))

    def predict(self, features: dict, n_cols: int, cands: Sequence) -> np.ndarray:
        """Predicted ``log(t / t_csr)`` of each candidate."""
        return np.asarray(self.model.predict(self.features(features, n_cols, cands)), dtype=np.float64).reshape(-1)

    def choose(self, features: dict, n_cols: int):
        """Pick the candidate with the lowest predicted time (Selector protocol)."""
        from schedules.sparse.selection import AnalyticCostModel, Choice

        cands, excluded = feasible_candidates(features, n_cols)
        known = [c for c in cands if candidate_kind(c) in self.kinds]
        if not known:
            choice = AnalyticCostModel().choose(features, n_cols)
            return replace(choice, reason=f"{choice.reason} (learned model knows none of the candidates)")
        pred = self.predict(features, n_cols, known)
        best = int(np.argmin(pred))
        scores = {c.label: float(math.exp(p)) for c, p in zip(known, pred)}
        reason = (f"{known[best].label}: predicted {math.exp(pred[best]):.2f}x the time of csr for N={n_cols} "
                  f"({type(self.model).__name__} over {len(self.feature_names)} inspector features, "
                  f"trained on {self.meta.get('train_entries', '?')} measured cases)")
        return Choice(known[best], scores, excluded, reason, self.name,
                      scored=tuple((c, float(math.exp(p))) for c, p in zip(known, pred)))

    # -- persistence ----------------------------------------------------------------
    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write ``model.json`` (xgboost's format) and ``model.meta.json`` next to it.

        The model must have ``save_model(path)`` writing xgboost's format
        (:class:`BoostedTreeRegressor` and ``xgboost.XGBRegressor`` do).
        """
        if not callable(getattr(self.model, "save_model", None)):
            raise TuningError(f"learned selector: a {type(self.model).__name__} model cannot be saved "
                              "(it has no save_model(path) writing xgboost's format)")
        p = Path(path) if path else default_model_path()
        p.parent.mkdir(parents=True, exist_ok=True)
        # xgboost picks its format from the suffix of the file it writes
        atomic_write(p, lambda tmp: self.model.save_model(tmp), suffix=p.suffix or ".json")
        meta = dict(self.meta, version=FORMAT_VERSION, feature_names=self.feature_names, kinds=sorted(self.kinds))
        atomic_write_bytes(_meta_path(p), json.dumps(meta, indent=1, default=str).encode())
        return p

    @classmethod
    def load(cls, path: str | os.PathLike | None = None) -> "LearnedSelector":
        """Load a saved model; :class:`TuningError` if missing or unreadable."""
        import xgboost as xgb

        p = Path(path) if path else default_model_path()
        mp = _meta_path(p)
        if not p.exists() or not mp.exists():
            raise TuningError(f"learned selector: no model at {p} (train one with tvm_ext.tuning.train_selector)")
        try:
            meta = read_json_file(mp, f"learned selector: {mp}")
        except ConfigError as err:
            raise TuningError(f"{err} (cannot read the model's metadata)") from None
        try:
            booster = xgb.Booster()
            booster.load_model(str(p))
        except Exception as err:  # noqa: BLE001 - any unreadable model is the same user problem
            raise TuningError(f"learned selector: cannot read the model at {p}: {err}") from None
        version = meta.get("version") if isinstance(meta, dict) else None
        if version != FORMAT_VERSION:
            raise TuningError(f"learned selector: model at {p} has format {version}, "
                              f"expected {FORMAT_VERSION}; retrain it")
        for key in ("feature_names", "kinds"):
            if not isinstance(meta.get(key), list) or not all(isinstance(v, str) for v in meta[key]):
                raise TuningError(f"learned selector: {mp}: {key!r} must be a list of strings; retrain the model")
        model = BoostedTreeRegressor.from_booster(booster, len(meta["feature_names"]))
        return cls(model, meta["feature_names"], meta["kinds"], meta)

    def install(self) -> "LearnedSelector":
        """Make this the default selector of :func:`schedules.sparse.inspect`."""
        from schedules.sparse.selection import set_default_selector

        set_default_selector(self)
        return self


def _meta_path(p: Path) -> Path:
    return p.with_name(p.stem + ".meta.json")


def load_default(path: str | os.PathLike | None = None, *, install: bool = True) -> LearnedSelector | None:
    """Install the saved model if there is one; else leave the analytic selector and return None.

    A model that cannot be read also leaves the analytic selector in place.
    """
    try:
        sel = LearnedSelector.load(path)
    except TuningError:
        return None
    return sel.install() if install else sel


def training_data(corpus: Corpus) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """``(X, y, feature_names)``: one row per measured candidate, ``y = log(t / t_csr)`` of its (matrix, N).

    What :func:`train_selector` fits; an estimator of your own can be fitted on it
    and handed to :class:`LearnedSelector` with the same ``feature_names``.
    """
    rows, ys = [], []
    for e in corpus.entries:
        csr_time = next((s for c, s in zip(e.candidates, e.seconds) if c.format == "csr"), min(e.seconds))
        for c, s in zip(e.candidates, e.seconds):
            rows.append(_row(c, e.features, e.n_cols))
            ys.append(math.log(max(s, 1e-12) / max(csr_time, 1e-12)))
    names = list(rows[0]) if rows else []
    X = np.array([[r[k] for k in names] for r in rows], dtype=np.float64).reshape(len(rows), len(names))
    return X, np.array(ys, dtype=np.float64), names


def train_selector(corpus: Corpus, *, rounds: int = 150, max_depth: int = 5, seed: int = 0, model=None,
                   save: str | os.PathLike | bool | None = None, install: bool = False) -> LearnedSelector:
    """Fit a model on a corpus; optionally save it (``True``: default path) and install it.

    ``model`` is an unfitted estimator with ``fit(X, y)`` / ``predict(X)``
    (default: ``BoostedTreeRegressor(n_estimators=rounds, max_depth=max_depth,
    random_state=seed)``); ``xgboost.XGBRegressor()`` works in its place.
    """
    X, y, names = training_data(corpus)
    if len(y) < 4:
        raise TuningError(f"train_selector: {len(y)} measured cases are too few to train on")
    if model is None:
        model = BoostedTreeRegressor(n_estimators=rounds, max_depth=max_depth, random_state=seed)
    elif not (callable(getattr(model, "fit", None)) and callable(getattr(model, "predict", None))):
        raise InputError(f"train_selector: model {type(model).__name__} needs fit(X, y) and predict(X) methods")
    fitted = model.fit(X, y)
    model = fitted if fitted is not None else model   # scikit-learn's fit returns self; tolerate None
    kinds = sorted({candidate_kind(c) for e in corpus.entries for c in e.candidates})
    meta = {"train_entries": len(corpus.entries), "train_rows": len(y), "matrices": corpus.matrices,
            "trained_at": time.time(), "model": type(model).__name__}
    sel = LearnedSelector(model, names, kinds, meta)
    if save:
        sel.save(None if save is True else save)
    if install:
        sel.install()
    return sel


# --------------------------------------------------------------------------- regret
def _choice_index(selector, e: CorpusEntry) -> int:
    label = selector.choose(e.features, e.n_cols).candidate.label
    for i, c in enumerate(e.candidates):
        if c.label == label:
            return i
    raise TuningError(f"selector chose {label}, which was not measured for {e.matrix} N={e.n_cols}")


def _analytic_index(e: CorpusEntry) -> int:
    """The analytic model's pick among the measured candidates (lowest modelled bytes)."""
    from schedules.sparse.selection import AnalyticCostModel

    model = AnalyticCostModel(bcsr_sizes=tuple(sorted({x for b in BLOCKS for x in b})))
    scores, _ = model.scores(e.features, e.n_cols)
    by_label = {c.label: s for c, s in scores.items()}
    return int(np.argmin([by_label.get(c.label, math.inf) for c in e.candidates]))


def regret_report(selector, corpus: Corpus) -> dict[str, Any]:
    """Regret of ``selector`` and of the analytic model against the measured oracle.

    Per (matrix, N): ``regret = t(choice) / t(best measured) - 1``; both pick
    among the same measured candidates.  Returns the mean, geometric-mean
    slowdown, max and hit rate (choice == oracle) of each, and the per-case rows.
    """
    rows = []
    for e in corpus.entries:
        o = e.oracle
        li, ai = _choice_index(selector, e), _analytic_index(e)
        rows.append({"matrix": e.matrix, "n": e.n_cols, "oracle": e.candidates[o].label,
                     "oracle_s": e.seconds[o], "learned": e.candidates[li].label,
                     "learned_regret": e.seconds[li] / e.seconds[o] - 1,
                     "analytic": e.candidates[ai].label, "analytic_regret": e.seconds[ai] / e.seconds[o] - 1})

    def summary(key: str, label_key: str) -> dict:
        r = np.array([x[key] for x in rows]) if rows else np.zeros(0)
        return {"mean_regret": float(r.mean()) if r.size else 0.0,
                "geomean_slowdown": float(np.exp(np.log1p(r).mean())) if r.size else 1.0,
                "max_regret": float(r.max()) if r.size else 0.0,
                "hit_rate": float(np.mean([x[label_key] == x["oracle"] for x in rows])) if rows else 0.0}

    return {"cases": len(rows), "learned": summary("learned_regret", "learned"),
            "analytic": summary("analytic_regret", "analytic"), "rows": rows}


def train_default(size: str = "small", n_values: Sequence[int] = (8, 32, 128), *,
                  path: str | os.PathLike | None = None, held_out: float = 0.3, seed: int = 0,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Measure a generated corpus, report held-out regret, train on all of it, save and install.

    What ``tvm-ext tune selector`` runs.  The regret is measured with a model
    trained without the held-out matrices; the saved model then learns from
    every matrix.
    """
    corpus = build_corpus(generate_matrices(size, seed), n_values, seed=seed, progress=progress)
    train, test = split_corpus(corpus, held_out, seed)
    report = regret_report(train_selector(train, seed=seed), test)
    sel = train_selector(corpus, seed=seed)
    sel.meta["held_out_regret"] = {k: report[k] for k in ("cases", "learned", "analytic")}
    saved = sel.save(path)
    sel.install()
    return {"model": str(saved), "matrices": len(corpus.matrices), "corpus_cases": len(corpus.entries),
            "measure_seconds": corpus.measure_seconds, "held_out": test.matrices,
            "held_out_cases": report["cases"], "learned": report["learned"], "analytic": report["analytic"],
            "rows": report["rows"]}
