"""What a format selector decides: the candidate, every score, the reason, and any timing.

A :class:`Selector` (the analytic cost model of
:mod:`schedules.sparse.selection`, the learned one of the tuning package)
turns a matrix's features into a :class:`Choice` of one :class:`Candidate`;
when close candidates were timed on a block of the matrix
(:mod:`schedules.sparse.timed_choice`) the choice carries the
:class:`Measurement`.

>>> c = Choice(Candidate.of("bcsr", R=2, C=2), {"bcsr(R=2,C=2)": 1.0}, {}, "fewest bytes", "analytic")
>>> c.format, c.args
('bcsr', {'R': 2, 'C': 2})
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Candidate", "Choice", "Measurement", "Selector", "BASELINE_FORMATS"]

#: The format that is never far from the best (no padding, no per-slot branches): a choice
#: of any other format is timed against it.
BASELINE_FORMATS = ("csr",)


@dataclass(frozen=True)
class Candidate:
    """One representation the selector may pick, with inspector arguments.

    >>> Candidate.of("bcsr", R=2, C=3).label
    'bcsr(R=2,C=3)'
    """

    format: str
    arg_items: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, format: str, **args: Any) -> "Candidate":
        return cls(format, tuple(args.items()))

    @property
    def args(self) -> dict[str, Any]:
        return dict(self.arg_items)

    @property
    def label(self) -> str:
        inner = ",".join(f"{k}={v}" for k, v in self.arg_items)
        return f"{self.format}({inner})" if inner else self.format


@dataclass(frozen=True)
class Measurement:
    """Candidates timed because the model's scores were within ``margin`` of the best.

    ``seconds[label]`` is the fastest of a few runs of one product with ``n_cols``
    columns on rows ``[row_start, row_stop)`` of the matrix (``nnz`` of its
    non-zeros; all of them on small matrices), kernels from the cache;
    ``failed[label]`` says why a candidate could not be timed.  ``ratios[label]``
    is the median, over the rounds, of the candidate's time over the model's
    choice's time in the same round (the candidates take turns, so a burst of
    other load falls on both sides of a ratio).  :attr:`chosen` is the model's
    choice unless another candidate beats it by more than ``override`` (and has
    the faster fastest run too); one
    timed only as the baseline (``far``: scored beyond ``margin`` of the
    choice) must beat it by more than ``margin`` -- the model's error would be
    gross, not a near tie.

    Construction is priced (:meth:`pays`) when ``expected_runs`` is set: a
    candidate replaces the model's choice only when its gain per run, times
    the runs the caller expects, exceeds what building it costs beyond the
    model's choice (all of its inspector's time when the model's choice is
    ``built`` already on the whole matrix).  Both sides are the block's
    (``build_seconds``: each inspector's seconds on the block, on one thread,
    over the threads the whole matrix's inspector splits over), and both grow
    alike with the matrix, so the rule holds for the whole matrix too.
    """

    seconds: dict[str, float]
    n_cols: int
    row_start: int
    row_stop: int
    nnz: int
    margin: float
    model_choice: str
    failed: dict[str, str] = field(default_factory=dict)
    spent_seconds: float = 0.0
    override: float = 0.0
    ratios: dict[str, float] = field(default_factory=dict)
    far: tuple[str, ...] = ()
    build_seconds: dict[str, float] = field(default_factory=dict)
    expected_runs: float | None = None
    built: str | None = None

    def pays(self, label: str) -> bool:
        """Whether building ``label`` instead of the model's choice pays over ``expected_runs``
        runs: ``(t_choice - t_label) * expected_runs > build(label) - build(choice)``, the
        model's choice's build counting 0 when it is ``built`` already; always when no runs
        are expected (no rule) or a time is missing.

        >>> from dataclasses import replace
        >>> m = Measurement({"csr": 1.0, "ell": 0.9}, 8, 0, 10, 100, 0.15, "csr", build_seconds={"ell": 5.0},
        ...                 expected_runs=100, built="csr")
        >>> m.pays("ell"), replace(m, expected_runs=20).pays("ell")   # 0.1 s x 100 runs > 5 s; x 20 < 5 s
        (True, False)
        """
        if self.expected_runs is None or label == self.model_choice:
            return True
        mine, theirs = self.seconds.get(self.model_choice), self.seconds.get(label)
        cost = self.build_seconds.get(label)
        if mine is None or theirs is None or cost is None:
            return True
        if label in self.ratios:  # the paired median, as chosen() reads the rounds
            theirs = mine * self.ratios[label]
        if self.built != self.model_choice:
            cost -= self.build_seconds.get(self.model_choice, 0.0)
        return (mine - theirs) * float(self.expected_runs) > cost

    @property
    def fastest(self) -> str:
        return min(self.seconds, key=self.seconds.get)

    @property
    def chosen(self) -> str:
        """The model's choice unless a candidate beats it by more than ``override`` (``margin``
        for a ``far`` one): by the paired ratios and the fastest runs both when the model's
        choice was timed with them, else by the fastest runs."""
        if self.ratios and self.model_choice in self.ratios:
            def needed(label: str) -> float:
                return 1.0 + (max(self.margin, self.override) if label in self.far else self.override)

            mine = self.seconds[self.model_choice]
            # both summaries must agree by the margin: the paired median and the fastest runs (a
            # burst of load slows whole rounds; only a run no burst hit is as fast as the kernel)
            wins = {k: r * needed(k) for k, r in self.ratios.items()
                    if r * needed(k) < 1.0 and self.seconds.get(k, mine) * needed(k) < mine and self.pays(k)}
            return min(wins, key=wins.get) if wins else self.model_choice
        best = self.fastest
        mine = self.seconds.get(self.model_choice)
        if mine is not None and (mine <= self.seconds[best] * (1.0 + self.override) or not self.pays(best)):
            return self.model_choice
        return best

    @property
    def unpaid(self) -> tuple[str, ...]:
        """Candidates timed faster than the model's choice whose construction does not pay
        (:meth:`pays`): kept out by the rule alone."""
        mine = self.seconds.get(self.model_choice)
        return tuple(k for k, v in self.seconds.items()
                     if mine is not None and k != self.model_choice and v < mine and not self.pays(k))

    def describe(self) -> str:
        """One line: the timings, fastest first (with the paired ratios to the model's choice)."""
        ranked = sorted(self.seconds.items(), key=lambda kv: kv[1])
        timed = ", ".join(f"{k} {v * 1e3:.3g} ms" + (f" (x{self.ratios[k]:.2f})" if k in self.ratios else "")
                          for k, v in ranked)
        unpaid = self.unpaid
        priced = "" if not unpaid else (
            f"; {', '.join(unpaid)} faster but not worth building for {self.expected_runs:g} runs "
            f"(construction on the block {', '.join(f'{self.build_seconds[k] * 1e3:.2g} ms' for k in unpaid)})")
        return (f"measured N={self.n_cols} on rows [{self.row_start}, {self.row_stop}) "
                f"({self.nnz} nnz) in {self.spent_seconds * 1e3:.0f} ms: {timed}{priced}")


@dataclass(frozen=True)
class Choice:
    """The selected candidate, every score, and why (``measurement`` when candidates were timed)."""

    candidate: Candidate
    scores: dict[str, float]
    excluded: dict[str, str]
    reason: str
    selector: str
    measurement: Measurement | None = None
    #: the scored candidates themselves (``scores`` is keyed by their labels)
    scored: tuple[tuple[Candidate, float], ...] = ()

    @property
    def format(self) -> str:
        return self.candidate.format

    @property
    def args(self) -> dict[str, Any]:
        return dict(self.candidate.args)


class Selector(Protocol):
    """Anything that picks a representation from features."""

    name: str

    def choose(self, features: dict[str, Any], n_cols: int) -> Choice: ...
