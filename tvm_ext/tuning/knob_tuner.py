"""The XGBoost-model tuning loop for knobs that do not live in TIR (AutoTVM's idea, MetaSchedule's model).

Format choice, engine parameters and accelerator scheduling choices are not
schedule decisions of a PrimFunc, so MetaSchedule cannot sample them.  They
get the same loop MetaSchedule runs with its ``XGBModel``:

1. measure (or simulate) a first batch: the default plus random valid points;
2. fit a gradient-boosted tree model (``xgboost``) of ``log(cost)`` on knob
   features (each knob's value, log2 for positive numbers, plus its index);
3. propose the next batch: the unmeasured points with the lowest predicted
   cost, with an ``eps`` share of random points (epsilon-greedy exploration);
4. measure them, add them to the data, refit, repeat until the trial budget
   is spent or the space is exhausted.

Records go to the caller (the session appends each to the database as soon
as it is measured), and earlier records seed the model, so an interrupted
session resumes where it stopped.

>>> space = KnobSpace([Knob("x", (1, 2, 4, 8)), Knob("y", (1, 2, 3))])
>>> recs = tune_knobs(space, lambda k: (k["x"] - 4) ** 2 + k["y"], trials=12, seed=0)
>>> min(recs, key=lambda r: r["cost"])["knobs"]
{'x': 4, 'y': 1}
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np

from tvm_ext.errors import ConfigError, TuningError, TvmExtError

__all__ = ["Knob", "KnobSpace", "XGBCostModel", "tune_knobs"]

#: Largest space enumerated exhaustively; bigger spaces are sampled.
ENUMERATE_LIMIT = 20000
#: Candidates scored by the model per proposal when sampling.
POOL = 2000


@dataclass(frozen=True)
class Knob:
    """One knob and its candidate values (numbers or strings)."""

    name: str
    values: tuple

    def __post_init__(self) -> None:
        if not self.values:
            raise ConfigError(f"knob {self.name!r} has no values")
        object.__setattr__(self, "values", tuple(self.values))


@dataclass
class KnobSpace:
    """The cartesian product of knobs, minus points ``constraint(config)`` rejects (returns a reason)."""

    knobs: Sequence[Knob]
    constraint: Callable[[dict], str | None] | None = None
    names: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.knobs = tuple(self.knobs)
        self.names = tuple(k.name for k in self.knobs)
        if len(set(self.names)) != len(self.names):
            raise ConfigError(f"knob space: duplicate knob names {self.names}")

    def valid(self, config: dict) -> bool:
        return self.constraint is None or self.constraint(config) is None

    def raw_size(self) -> int:
        return math.prod(len(k.values) for k in self.knobs)

    def key(self, config: dict) -> tuple:
        return tuple((n, config[n]) for n in self.names)

    def all_points(self) -> list[dict]:
        """Every valid point (only for spaces up to :data:`ENUMERATE_LIMIT` raw points)."""
        out = []
        for combo in itertools.product(*(k.values for k in self.knobs)):
            cfg = dict(zip(self.names, combo))
            if self.valid(cfg):
                out.append(cfg)
        return out

    def sample(self, rng: np.random.Generator, n: int, exclude: set) -> list[dict]:
        """Up to ``n`` distinct valid points not in ``exclude`` (keys)."""
        out, seen = [], set(exclude)
        for _ in range(n * 20):
            cfg = {k.name: k.values[int(rng.integers(len(k.values)))] for k in self.knobs}
            key = self.key(cfg)
            if key in seen or not self.valid(cfg):
                continue
            seen.add(key)
            out.append(cfg)
            if len(out) >= n:
                break
        return out

    def features(self, configs: Sequence[dict]) -> np.ndarray:
        """Model features: per knob, log2 of a positive number (else 0) and the value's index."""
        rows = []
        for cfg in configs:
            row = []
            for k in self.knobs:
                v = cfg[k.name]
                idx = k.values.index(v) if v in k.values else -1
                num = math.log2(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else 0.0
                row += [num, float(idx)]
            rows.append(row)
        return np.asarray(rows, dtype=np.float64).reshape(len(rows), 2 * len(self.knobs))


class XGBCostModel:
    """Gradient-boosted trees predicting ``log(cost)`` from knob features (xgboost core API)."""

    def __init__(self, rounds: int = 60, max_depth: int = 4, seed: int = 0):
        self.rounds, self.max_depth, self.seed = rounds, max_depth, seed
        self.booster = None

    def fit(self, X: np.ndarray, costs: np.ndarray) -> "XGBCostModel":
        import xgboost as xgb

        y = np.log(np.maximum(np.asarray(costs, dtype=np.float64), 1e-30))
        params = {"max_depth": self.max_depth, "eta": 0.3, "objective": "reg:squarederror",
                  "nthread": 1, "seed": self.seed, "verbosity": 0}
        self.booster = xgb.train(params, xgb.DMatrix(X, label=y), num_boost_round=self.rounds)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        import xgboost as xgb

        if self.booster is None:
            raise TuningError("XGBCostModel: predict before fit")
        return self.booster.predict(xgb.DMatrix(X))


def _propose(space: KnobSpace, done: list[dict], rng: np.random.Generator, batch: int, eps: float,
             seed: int, warmup: int) -> list[dict]:
    measured = {space.key(r["knobs"]) for r in done}
    small = space.raw_size() <= ENUMERATE_LIMIT
    pool = [c for c in space.all_points() if space.key(c) not in measured] if small else \
        space.sample(rng, POOL, measured)
    if not pool:
        return []
    ok = [r for r in done if r.get("cost") is not None]
    if len(ok) < warmup:
        idx = rng.permutation(len(pool))[:batch]
        return [pool[i] for i in idx]
    model = XGBCostModel(seed=seed).fit(space.features([r["knobs"] for r in ok]),
                                        np.array([r["cost"] for r in ok]))
    pred = model.predict(space.features(pool))
    order = list(np.argsort(pred, kind="stable"))
    n_explore = min(len(pool), int(round(batch * eps)))
    greedy = order[: batch - n_explore]
    rest = order[batch - n_explore:]
    explore = [rest[i] for i in rng.permutation(len(rest))[:n_explore]] if rest else []
    return [pool[i] for i in greedy + explore]


def tune_knobs(space: KnobSpace, evaluate: Callable[[dict], float], *, trials: int,
               history: Iterable[dict] = (), default: dict | None = None, batch: int = 8,
               eps: float = 0.25, seed: int = 0, on_record: Callable[[dict], None] | None = None,
               on_batch: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """Run ``trials`` new evaluations; return the new records ``{"knobs", "cost", "error"}``.

    ``history``: earlier records (seed the model and are never re-measured).
    ``default``: measured first if it is not in the history.  ``evaluate``
    returns the cost (lower is better) or raises a
    :class:`~tvm_ext.errors.TvmExtError` for an infeasible point (recorded with
    ``cost=None``).  ``on_record`` sees each record as soon as it exists,
    ``on_batch`` all records so far after each batch.
    """
    if int(trials) != trials or trials < 0:
        raise TuningError(f"tune_knobs: trials must be a non-negative integer, got {trials!r}")
    done = [dict(r) for r in history]
    rng = np.random.default_rng([seed, len(done)])
    new: list[dict] = []
    measured = {space.key(r["knobs"]) for r in done}

    def run(cfg: dict) -> None:
        try:
            cost = float(evaluate(cfg))
            if not math.isfinite(cost) or cost <= 0:
                raise TuningError(f"cost {cost} is not a positive finite number")
            rec = {"knobs": dict(cfg), "cost": cost, "error": None}
        except TvmExtError as err:
            rec = {"knobs": dict(cfg), "cost": None, "error": str(err)}
        done.append(rec)
        new.append(rec)
        measured.add(space.key(cfg))
        if on_record:
            on_record(rec)

    if default is not None and trials > 0 and space.key(default) not in measured:
        run(default)
    while len(new) < trials:
        want = min(batch, trials - len(new))
        cands = _propose(space, done, rng, want, eps, seed, warmup=batch)
        cands = [c for c in cands if space.key(c) not in measured][:want]
        if not cands:
            break  # space exhausted
        for cfg in cands:
            run(cfg)
        if on_batch:
            on_batch(done)
    return new
