"""A learned sparse-format selector: XGBoost over inspector features, trained on measurements.

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
3. :func:`train_selector`: one gradient-boosted tree regressor predicts
   ``log(t_candidate / t_csr)`` from the matrix features (row-length
   statistics, diagonals and DIA/ELL fill, R x C block fill, size, ``N``)
   plus the candidate's kind and its own fill/padding;
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
    """Numeric features of a matrix (from :func:`sparse_features_of`) and ``N``."""
    m, k, nnz = max(f["rows"], 1), max(f["cols"], 1), max(f["nnz"], 1)
    rl = f["row_length"]
    mean = max(rl["mean"], 1e-9)
    out = {
        "log2_rows": math.log2(m), "log2_cols": math.log2(k), "log2_nnz": math.log2(nnz),
        "log2_n": math.log2(max(int(n_cols), 1)), "row_mean": rl["mean"], "row_cv": rl["std"] / mean,
        "row_max_over_mean": rl["max"] / mean, "empty_frac": rl["empty_rows"] / m,
        "band_frac": f["bandwidth"] / m, "log2_diagonals": math.log2(max(f["diagonals"], 1)),
        "dia_fill": f["dia_fill"], "ell_fill": f["ell_fill"], "density_log": math.log10(max(f["density"], 1e-12)),
        "b_bytes_log2": math.log2(k * max(int(n_cols), 1) * 4),
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
class LearnedSelector:
    """The trained model as a :class:`~schedules.sparse.selection.Selector` (``name = "learned"``)."""

    name = "learned"

    def __init__(self, booster, feature_names: Sequence[str], kinds: Sequence[str], meta: dict | None = None):
        self.booster = booster
        self.feature_names = list(feature_names)
        self.kinds = set(kinds)
        self.meta = dict(meta or {})

    # -- prediction ---------------------------------------------------------------
    def predict(self, features: dict, n_cols: int, cands: Sequence) -> np.ndarray:
        """Predicted ``log(t / t_csr)`` of each candidate."""
        import xgboost as xgb

        X = np.array([[_row(c, features, n_cols)[k] for k in self.feature_names] for c in cands], dtype=np.float64)
        return self.booster.predict(xgb.DMatrix(X, feature_names=self.feature_names))

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
                  f"(XGBoost over {len(self.feature_names)} inspector features, "
                  f"trained on {self.meta.get('train_entries', '?')} measured cases)")
        return Choice(known[best], scores, excluded, reason, self.name,
                      scored=tuple((c, float(math.exp(p))) for c, p in zip(known, pred)))

    # -- persistence ----------------------------------------------------------------
    def save(self, path: str | os.PathLike | None = None) -> Path:
        """Write ``model.json`` (XGBoost) and ``model.meta.json`` next to it."""
        p = Path(path) if path else default_model_path()
        p.parent.mkdir(parents=True, exist_ok=True)
        # xgboost picks its format from the suffix of the file it writes
        atomic_write(p, lambda tmp: self.booster.save_model(tmp), suffix=p.suffix or ".json")
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
        return cls(booster, meta["feature_names"], meta["kinds"], meta)

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


def _training_rows(corpus: Corpus) -> tuple[list[dict], list[float]]:
    rows, ys = [], []
    for e in corpus.entries:
        csr_time = next((s for c, s in zip(e.candidates, e.seconds) if c.format == "csr"), min(e.seconds))
        for c, s in zip(e.candidates, e.seconds):
            rows.append(_row(c, e.features, e.n_cols))
            ys.append(math.log(max(s, 1e-12) / max(csr_time, 1e-12)))
    return rows, ys


def train_selector(corpus: Corpus, *, rounds: int = 150, max_depth: int = 5, seed: int = 0,
                   save: str | os.PathLike | bool | None = None, install: bool = False) -> LearnedSelector:
    """Fit the model on a corpus; optionally save it (``True``: default path) and install it."""
    import xgboost as xgb

    rows, ys = _training_rows(corpus)
    if len(rows) < 4:
        raise TuningError(f"train_selector: {len(rows)} measured cases are too few to train on")
    names = list(rows[0])
    X = np.array([[r[k] for k in names] for r in rows], dtype=np.float64)
    params = {"max_depth": max_depth, "eta": 0.1, "objective": "reg:squarederror", "nthread": 1,
              "seed": seed, "subsample": 0.9, "verbosity": 0}
    booster = xgb.train(params, xgb.DMatrix(X, label=np.array(ys), feature_names=names), num_boost_round=rounds)
    kinds = sorted({candidate_kind(c) for e in corpus.entries for c in e.candidates})
    meta = {"train_entries": len(corpus.entries), "train_rows": len(rows), "matrices": corpus.matrices,
            "trained_at": time.time()}
    sel = LearnedSelector(booster, names, kinds, meta)
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
