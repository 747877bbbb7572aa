"""The inspector/executor entry point: ``plan = inspect(A, n_cols)``; ``exe = plan.build()``.

:func:`inspect` validates ``A`` once, computes its features, asks the selector
(analytic cost model, or a learned one installed with
:func:`~schedules.sparse.selection.set_default_selector`) for a format, and
runs that format's inspector (the data transformation).  :meth:`Plan.build`
compiles the executor made for the representation (once per signature,
through the kernel cache).  ``exe(B)`` then computes ``A @ B`` for numpy or
TVM tensors.

>>> import numpy as np
>>> from tvm_ext.workloads import block_fem
>>> A = block_fem(50, 3, 3, seed=0)
>>> plan = inspect(A, n_cols=8, dtype="float32")   # A is float64; None would keep it
>>> plan.format_name, plan.args
('bcsr', {'R': 3, 'C': 3})
>>> B = np.ones((A.shape[1], 8), dtype="float32")
>>> bool(np.allclose(plan.build()(B), A @ B, rtol=1e-4))
True
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from schedules.sparse.choice import Measurement
from schedules.sparse.formats import SparseFormat
from schedules.sparse.inspectors import INSPECTORS
from schedules.sparse.selection import (MEASURE_MIN_NNZ, MEASURE_NNZ, MEASURE_ROW_FRACTION, Candidate, Choice,
                                        Selector, executor_params, select_format, sparse_features)
from schedules.sparse.timed_choice import EXPECTED_RUNS, measure_close_candidates
from tvm_ext.errors import ConfigError, InputError
from tvm_ext.workloads import canonical_csr

__all__ = ["Plan", "inspect", "plan_spmm"]


@dataclass
class Plan:
    """A chosen representation of one matrix, ready to build executors."""

    choice: Choice
    format: SparseFormat
    n_cols: int
    matrix: Any = field(repr=False)  # the validated CSR the format was built from
    features: dict[str, Any] = field(repr=False, default_factory=dict)
    inspect_seconds: float = 0.0
    select_seconds: float = 0.0  # features, the selector and any measurement (not the format's build)
    features_seconds: float = 0.0  # the features alone (part of select_seconds)
    expected_runs: float | None = EXPECTED_RUNS  # the runs a timed format's construction is priced over

    @property
    def format_name(self) -> str:
        return self.choice.format

    @property
    def args(self) -> dict[str, Any]:
        return self.choice.args

    @property
    def label(self) -> str:
        return self.choice.candidate.label

    def build(self, target: Any = None, *, kind: str | None = None, params: Any = None,
              transpose: bool = False):
        """Compile (or fetch) the executor for this plan's format.

        ``kind`` defaults to ``"spmv"`` when the plan was made for one column;
        ``params=None`` takes the knobs the matrix's features call for
        (:func:`~schedules.sparse.selection.executor_params`), else the executor's defaults.
        """
        from schedules.sparse.executors import build_executor

        kind = kind or ("spmv" if self.n_cols == 1 else "spmm")
        if params is None and self.features:
            params = executor_params(self.format_name, self.features, kind)
        return build_executor(self.format, self.n_cols, kind=kind, params=params, target=target,
                              transpose=transpose)

    def explain(self) -> str:
        """Why this format: the reason, the best alternatives, the exclusions."""
        lines = [f"chose {self.label} ({self.choice.selector} selector): {self.choice.reason}"]
        ranked = sorted(self.choice.scores.items(), key=lambda kv: kv[1])[:5]
        if ranked:
            lines.append("  modelled bytes: " + ", ".join(f"{k} {v / 1e6:.3g} MB" for k, v in ranked))
        # whole formats first (DIA, ELL, SELL...), then BCSR shapes; at most six lines
        excluded = sorted(self.choice.excluded.items(), key=lambda kv: (kv[0].startswith("bcsr"), kv[0]))
        for name, why in excluded[:6]:
            lines.append(f"  excluded {name}: {why}")
        if len(excluded) > 6:
            lines.append(f"  ... and {len(excluded) - 6} more excluded block shapes or formats")
        if self.choice.measurement is not None:
            lines.append(_construction_line(self.choice.measurement, self.expected_runs))
        knobs = executor_params(self.format_name, self.features, "spmv" if self.n_cols == 1 else "spmm")
        if knobs is not None:
            rl = self.features["row_length"]
            lines.append(f"  executor: {knobs} (row lengths spread {rl['std'] / rl['mean']:.1f}x their mean)")
        lines.append(f"  inspector {self.inspect_seconds * 1e3:.1f} ms, "
                     f"selection {self.select_seconds * 1e3:.1f} ms "
                     f"(features {self.features_seconds * 1e3:.1f} ms)")
        return "\n".join(lines)


def _construction_line(meas: Measurement, expected_runs: float | None) -> str:
    """How construction was priced: each timed format's inspector, timed on the block (on the
    whole matrix's threads), in runs of the model's choice on the block -- the ratio the whole
    matrix keeps, both growing with its non-zeros -- and the rule a faster format had to meet."""
    run = meas.seconds.get(meas.model_choice)
    costs = ", ".join(f"{label} {meas.build_seconds[label] / run:.1f}" for label in meas.seconds
                      if run and label in meas.build_seconds)
    built = f"; construction in runs of {meas.model_choice}: {costs}" if costs else ""
    if expected_runs is None:
        return f"  construction not priced (expected_runs=None){built}"
    return (f"  construction priced over {expected_runs:g} expected runs{built}; a format timed faster than the "
            f"model's choice replaces it only when its gain per run x {expected_runs:g} runs exceeds its extra "
            f"construction")


def _value_dtype(A: Any, dtype: Any) -> str:
    """The executors' value dtype for ``A``: ``dtype``, or ``A``'s own (see :func:`inspect`)."""
    from schedules.sparse.executors.codegen import SUPPORTED_DTYPES, check_dtype

    if dtype is not None:
        return check_dtype(dtype, "inspect(dtype=)")
    have = np.dtype(getattr(A, "dtype", np.float64))
    if np.issubdtype(have, np.integer) or have == np.bool_:
        return "float64"
    if have.name not in SUPPORTED_DTYPES:
        raise InputError(f"inspect(A): value dtype {have} is not supported; the executors take "
                         f"{' or '.join(SUPPORTED_DTYPES)} (pass dtype= to convert)")
    return have.name


def _forced_choice(format: str, args: dict[str, Any]) -> Choice:
    if format not in INSPECTORS:
        raise ConfigError(f"inspect: unknown format {format!r}; choose from {', '.join(sorted(INSPECTORS))}")
    cand = Candidate.of(format, **args)
    return Choice(cand, {}, {}, f"{cand.label} requested by the caller", "user")


def inspect(A: Any, n_cols: int = 1, *, dtype: Any = None, selector: Selector | None = None,
            measure: bool | None = None, expected_runs: float | None = EXPECTED_RUNS,
            format: str | None = None, **format_args: Any) -> Plan:
    """Inspect ``A`` for products with ``n_cols``-column operands and build its format.

    * ``dtype``: the value dtype of the format and its executors, float32 or
      float64 (:data:`~schedules.sparse.executors.codegen.SUPPORTED_DTYPES`).
      ``None`` keeps ``A``'s own: a float32 or float64 matrix stays so end to
      end (``B`` and the result have that dtype too); an integer or boolean
      matrix becomes float64, like scipy's ``A @ B`` with float ``B``; any other
      dtype (float16, longdouble) is an :class:`InputError`, as is ``dtype=``
      naming one.
    * ``format=`` (with its inspector arguments, e.g. ``R=2, C=2``) bypasses the
      selector.
    * ``measure``: when candidates score within 15% of the best, time them on a
      block of the matrix and keep the fastest (recorded in :meth:`Plan.explain`);
      ``None`` (default) measures on matrices of 250K non-zeros or more,
      ``False`` never.
    * ``expected_runs``: how many products the caller expects to run with the
      plan (default :data:`~schedules.sparse.timed_choice.EXPECTED_RUNS`, 100).
      A timed candidate replaces the model's choice only when its gain per
      run times ``expected_runs`` exceeds what building it costs beyond the
      model's choice, both inspectors timed on the block
      (:meth:`~schedules.sparse.choice.Measurement.pays`; :meth:`Plan.explain`
      shows each in runs); ``None`` keeps any clear winner whatever it costs
      to build.  Only the kept candidate is built on the whole matrix.

    >>> import numpy as np, scipy.sparse as sp
    >>> inspect(sp.eye(4, dtype=np.float64, format="csr"), 2).build().dtype
    'float64'
    """
    if int(n_cols) != n_cols or n_cols < 1:
        raise InputError(f"inspect: n_cols must be a positive integer, got {n_cols!r}")
    if expected_runs is not None and (isinstance(expected_runs, bool) or not isinstance(expected_runs, (int, float))
                                      or not 0 < expected_runs < float("inf")):
        raise InputError(f"inspect: expected_runs must be a positive number or None, got {expected_runs!r}")
    csr = canonical_csr(A, dtype=_value_dtype(A, dtype), what="inspect(A)")
    t0 = time.perf_counter()
    feats = sparse_features(csr)
    t_feats = time.perf_counter() - t0
    if format is not None:
        choice = _forced_choice(format, format_args)
    else:
        choice = select_format(csr, int(n_cols), selector=selector, features=feats, measure=False)
        if measure or (measure is None and feats["nnz"] >= MEASURE_MIN_NNZ):
            # the candidates are timed on a block first and only the kept one is built on the whole
            # matrix: building the model's choice first cost a whole construction every time the
            # timing replaced it (HPCG's CSR copy, fem3x3's 3x3 blocks before its 3x1 ones)
            choice = measure_close_candidates(csr, int(n_cols), choice,
                                              max_row_fraction=MEASURE_ROW_FRACTION if feats["nnz"] > MEASURE_NNZ
                                              else 1.0, expected_runs=expected_runs)
    t1 = time.perf_counter()
    choice, fmt = _build_kept(csr, choice)
    t_format = time.perf_counter() - t1
    return Plan(choice, fmt, int(n_cols), csr, feats, inspect_seconds=t_format, select_seconds=t1 - t0,
                features_seconds=t_feats, expected_runs=expected_runs)


def _build_kept(csr: Any, choice: Choice) -> tuple[Choice, SparseFormat]:
    """``choice``'s format on the whole of ``csr``, the inspector's checks off (``inspect``
    validated ``csr``).  A timed choice whose inspector refuses the whole matrix (DIA past its
    fill limit, which a block may stay within) gives way to the next timed candidate, fastest
    first, the reason saying so; an untimed one raises the inspector's error."""
    meas = choice.measurement
    try:
        return choice, INSPECTORS[choice.format](csr, **choice.args, check_finite=False)
    except (InputError, ConfigError, MemoryError) as err:
        if meas is None:
            raise
        refused = err
    by_label = {c.label: c for c, _ in choice.scored}
    ranked = sorted((t, label) for label, t in meas.seconds.items() if label != choice.candidate.label)
    for _, label in ranked:
        cand = by_label.get(label)
        if cand is None:
            continue
        try:
            fmt = INSPECTORS[cand.format](csr, **cand.args, check_finite=False)
        except (InputError, ConfigError, MemoryError):
            continue
        reason = (f"{cand.label}: the next fastest when timed; the kept {choice.candidate.label} could not be "
                  f"built on the whole matrix ({type(refused).__name__}: {refused}); {choice.reason}")
        return replace(choice, candidate=cand, reason=reason), fmt
    raise refused


#: :func:`inspect` under a name that does not shadow the standard library's
#: ``inspect`` module (``from schedules.sparse import plan_spmm``).
plan_spmm = inspect
