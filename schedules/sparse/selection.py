"""Format selection: features -> (format, parameters), with the reasons.

The dissertation leaves representation choice to the user (its ch. 9 calls
automatic selection future work); this module makes it automatic.

:class:`AnalyticCostModel` estimates the bytes an SpMM ``C = A @ B`` moves in
each candidate representation:

* ``A`` storage: every stored slot's value and index bytes, padding included
  (BCSR blocks, ELL/SELL widths, DIA diagonals), plus row/block pointers;
* ``B`` rows fetched: one ``N``-wide row of ``B`` per stored slot, except
  BCSR (one per block column, shared by the ``R`` rows of the block) and DIA
  (contiguous, streamed); ``B`` traffic is discounted when ``B`` fits in the
  last-level cache;
* ``C``: written once (read too when ``beta != 0``).

Candidates the representation cannot hold efficiently are excluded with a
reason (DIA with more slots than ``max_padding x nnz``, ...).  The learned
selector of the tuning package implements the same :class:`Selector`
protocol; once trained and saved it is loaded on first use (see
:data:`DEFAULT_SELECTOR_LOADER`) or installed with :func:`set_default_selector`;
until then the analytic model decides.

>>> from tvm_ext.workloads import lap2d, block_fem
>>> select_format(block_fem(200, 4, 4), n_cols=32).format
'bcsr'
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tvm_ext.workloads import canonical_csr, matrix_stats
from tvm_ext.workloads.stats import SELECTOR_BLOCK_SIZES

__all__ = [
    "Candidate",
    "Choice",
    "Selector",
    "AnalyticCostModel",
    "select_format",
    "set_default_selector",
    "get_default_selector",
    "sparse_features",
]

#: Bytes of last-level cache assumed when discounting B traffic.
LLC_BYTES = 32 << 20


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
class Choice:
    """The selected candidate, every score, and why."""

    candidate: Candidate
    scores: dict[str, float]
    excluded: dict[str, str]
    reason: str
    selector: str

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


def sparse_features(A: Any, *, seed: int = 0) -> dict[str, Any]:
    """Selector features of a matrix: :func:`matrix_stats` plus row lengths.

    The R x C block fill (R, C in :data:`SELECTOR_BLOCK_SIZES`) is estimated
    from a sample of block rows on large matrices, with its error bound in
    ``block_fill_bound`` (:func:`~tvm_ext.workloads.estimate_block_fill`).
    ``_row_lengths`` (an array) rides along for exact SELL/HYB padding counts.
    """
    A = canonical_csr(A, allow_nan=True)
    feats = matrix_stats(A, block_sizes=SELECTOR_BLOCK_SIZES, sample=True, symmetry=False, seed=seed)
    feats["_row_lengths"] = np.diff(A.indptr).astype(np.int64)
    return feats


def _sell_slots(lengths: np.ndarray, c: int, sigma: int) -> int:
    """Stored slots of SELL-C-sigma: rows sorted inside sigma windows, C-row slices."""
    m = lengths.size
    if m == 0:
        return 0
    pad = (-m) % sigma
    win = np.concatenate([lengths, np.zeros(pad, np.int64)]).reshape(-1, sigma)
    srt = -np.sort(-win, axis=1).ravel()[: m + (-m) % c]
    srt = np.concatenate([srt, np.zeros((-srt.size) % c, np.int64)]).reshape(-1, c)
    return int(srt.max(axis=1).sum() * c)


def _hyb_width(lengths: np.ndarray, value_bytes: int) -> tuple[int, int, int]:
    """(width, ELL slots, COO entries) minimising bytes of the ELL+COO split."""
    if lengths.size == 0:
        return 0, 0, 0
    m = lengths.size
    counts = np.bincount(lengths)
    widths = np.arange(counts.size)
    # entries beyond width w: sum over rows of max(len - w, 0)
    tail = np.cumsum((counts * widths)[::-1])[::-1] - widths * np.cumsum(counts[::-1])[::-1]
    ell_cost = widths * m * (4 + value_bytes)
    coo_cost = tail * (8 + value_bytes)
    w = int(np.argmin(ell_cost + coo_cost))
    return w, w * m, int(tail[w])


class AnalyticCostModel:
    """Bytes-moved model over CSR, BCSR (R, C in 1..8), ELL, DIA, HYB and SELL.

    ``max_padding``: a representation storing more than this many slots per
    non-zero is excluded (its memory would dwarf the matrix).
    """

    name = "analytic"

    def __init__(self, *, value_bytes: int = 4, max_padding: float = 3.0,
                 bcsr_sizes: tuple[int, ...] = (1, 2, 3, 4, 6, 8), beta: float = 0.0):
        self.value_bytes = value_bytes
        self.max_padding = max_padding
        self.bcsr_sizes = bcsr_sizes
        self.beta = beta

    # -- per-format estimates: (A bytes, B row fetches, streamed?) ---------------
    def _estimates(self, f: dict[str, Any]) -> tuple[dict[Candidate, tuple[float, float, bool]], dict[str, str]]:
        vb, m, nnz = self.value_bytes, f["rows"], f["nnz"]
        lengths = f.get("_row_lengths")
        est: dict[Candidate, tuple[float, float, bool]] = {}
        excluded: dict[str, str] = {}
        est[Candidate("csr")] = (nnz * (4 + vb) + (m + 1) * 4, nnz, False)
        for r in self.bcsr_sizes:
            for c in self.bcsr_sizes:
                if (r, c) == (1, 1):
                    continue
                fill = f["block_fill"].get(f"{r}x{c}", 0.0)
                if fill <= 0:
                    continue
                blocks = nnz / (fill * r * c)
                if blocks * r * c > self.max_padding * nnz:
                    excluded[f"bcsr(R={r},C={c})"] = f"fill {fill:.2f}: {1 / fill:.1f} slots per non-zero"
                    continue
                est[Candidate.of("bcsr", R=r, C=c)] = (
                    blocks * (r * c * vb + 4) + (m / r + 1) * 4, blocks * c, False)
        width = f["row_length"]["max"]
        if width and m * width <= self.max_padding * nnz:
            est[Candidate.of("ell", width=width)] = (m * width * (4 + vb), m * width, False)
        elif width:
            excluded["ell"] = f"max row {width} vs mean {f['row_length']['mean']:.1f}: too much padding"
        nd = f["diagonals"]
        if nd and nd * m <= self.max_padding * nnz:
            est[Candidate("dia")] = (nd * (m * vb + 4), nd * m, True)
        elif nd:
            excluded["dia"] = f"{nd} occupied diagonals: {nd * m / max(nnz, 1):.1f} slots per non-zero"
        if lengths is not None and lengths.size:
            w, ell_slots, coo = _hyb_width(lengths, vb)
            if 0 < w < width and coo > 0:
                est[Candidate.of("hyb", width=w)] = (
                    ell_slots * (4 + vb) + coo * (8 + vb), ell_slots + coo, False)
            slots = _sell_slots(lengths, 8, 256)
            if slots <= self.max_padding * nnz:
                est[Candidate.of("sell", C=8, sigma=256)] = (
                    slots * (4 + vb) + 12 * (m / 8 + 1), slots, False)
        return est, excluded

    def scores(self, features: dict[str, Any], n_cols: int) -> tuple[dict[Candidate, float], dict[str, str]]:
        """Estimated bytes moved by one SpMM with ``n_cols`` columns, per candidate."""
        est, excluded = self._estimates(features)
        vb, m, k = self.value_bytes, features["rows"], features["cols"]
        b_row = n_cols * vb
        b_fits = k * b_row <= LLC_BYTES
        c_bytes = m * b_row * (2 if self.beta else 1)
        out = {}
        for cand, (a_bytes, fetches, streamed) in est.items():
            factor = 0.25 if (b_fits or streamed) else 1.0
            out[cand] = a_bytes + fetches * b_row * factor + c_bytes
        return out, excluded

    def choose(self, features: dict[str, Any], n_cols: int) -> Choice:
        scores, excluded = self.scores(features, n_cols)
        best = min(scores, key=scores.get)
        csr = scores[Candidate("csr")]
        reason = (f"{best.label}: {scores[best] / 1e6:.3g} MB modelled traffic vs csr "
                  f"{csr / 1e6:.3g} MB ({csr / scores[best]:.2f}x less) for N={n_cols}")
        return Choice(best, {c.label: s for c, s in scores.items()}, excluded, reason, self.name)


#: ``module:function`` returning a trained :class:`Selector` (or None); read
#: from ``$TVM_EXT_SELECTOR`` (``off`` disables).  Named, not imported, so
#: ``schedules`` keeps no import of the tuning package that trains it.
DEFAULT_SELECTOR_LOADER = "tvm_ext.tuning.selector:load_default"

_default_selector: Selector | None = None


def set_default_selector(selector: Selector | None) -> None:
    """Install a selector (e.g. the tuning package's learned one); ``None`` restores the analytic model."""
    global _default_selector
    _default_selector = selector if selector is not None else AnalyticCostModel()


def _load_trained_selector() -> Selector | None:
    spec = os.environ.get("TVM_EXT_SELECTOR", DEFAULT_SELECTOR_LOADER)
    if spec.lower() in ("off", "none", "analytic", ""):
        return None
    module, _, func = spec.partition(":")
    try:
        loader = getattr(importlib.import_module(module), func)
        return loader(install=False)
    except Exception:  # no trained model, or an unreadable one: the analytic model decides
        return None


def get_default_selector() -> Selector:
    """The selector :func:`select_format` uses when none is passed.

    On first use, a trained selector saved by the tuning package
    (``tvm-ext tune selector``) is loaded if one exists; otherwise the
    analytic cost model decides.
    """
    global _default_selector
    if _default_selector is None:
        _default_selector = _load_trained_selector() or AnalyticCostModel()
    return _default_selector


def select_format(A: Any, n_cols: int, *, selector: Selector | None = None,
                  features: dict[str, Any] | None = None) -> Choice:
    """Pick a representation for ``A @ B`` with ``B`` of ``n_cols`` columns."""
    feats = features if features is not None else sparse_features(A)
    chooser = selector or get_default_selector()
    try:
        return chooser.choose(feats, n_cols)
    except Exception as err:  # a learned model that fails must not take the plugin down
        if chooser is AnalyticCostModel or isinstance(chooser, AnalyticCostModel):
            raise
        choice = AnalyticCostModel().choose(feats, n_cols)
        return Choice(choice.candidate, choice.scores, choice.excluded,
                      f"{choice.reason} (fallback: {chooser.name} failed: {err})", "analytic")
