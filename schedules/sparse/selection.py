"""Format selection: features -> (format, parameters), with the reasons.

The dissertation leaves representation choice to the user (its ch. 9 calls
automatic selection future work); this module makes it automatic.

:class:`AnalyticCostModel` estimates the bytes an SpMM ``C = A @ B`` moves in
each candidate representation (values of the matrix's dtype, 4 or 8 bytes):

* ``A`` storage: every stored slot's value and index bytes, padding included
  (BCSR blocks, ELL/SELL widths, DIA diagonals), plus row/block pointers;
* ``B`` rows fetched: one ``N``-wide row of ``B`` per stored slot, except
  BCSR (one per block column, shared by the ``R`` rows of the block) and DIA
  (contiguous, streamed); a fetch costs a fraction of a memory byte when
  the rows it reuses are cached: :data:`FETCH_FROM_L2` when the band of
  ``B`` rows a row window touches (``2 * bandwidth + 1`` rows) fits in L2
  (stencils, FEM: each ``B`` row comes from memory once and is reused from
  L2 by the neighbouring rows), :data:`FETCH_FROM_LLC` when all of ``B``
  fits in the last-level cache (the target's L3 share per core times its
  cores, :func:`~tvm_ext.target.hardware_facts`); a fetch of a ``B`` row the
  row just before also fetched is an L1 hit (:data:`FETCH_FROM_L1`) while
  both rows' ``B`` rows fit in L1: the share of such fetches comes from the
  2 x 1 block fill (:func:`repeat_share`), and an R-row BCSR block row
  repeats only at its first row (its R rows share each fetch in registers),
  so the fetches BCSR saves on a stencil are the cheap ones (a 5-point
  Laplacian's 2 x 1 or 3 x 1 blocks save L1 hits and pay padded multiply-adds:
  measured 1.5x slower than CSR at N=128, no faster at N=8 or 32);
* multiply-adds: every stored slot, padding included, costs ``N`` lanes of
  multiply-add -- at least one whole vector, except in the SpMV executors
  vectorised over rows (:data:`ROW_VECTOR_SPMV`) -- weighed at
  :data:`LANE_COST` bytes per lane byte (what a padded BCSR
  block or ELL row costs besides its bytes, which decides once ``B``
  fetches are cache hits: a 5-point Laplacian's 3x1 blocks are 45% full, so
  they save ``B`` loads but double the multiply-adds);
* ``C``: written once (read too when ``beta != 0``);
* DIA at ``N > 1`` pays its SpMM executor's per-slot offset and value reads
  (:data:`DIA_SPMM_SLOT_BYTES`).

Candidates the representation cannot hold efficiently are excluded with a
reason (DIA with more slots than ``max_padding x nnz``, or with more
diagonals than ``max_dia_streams``: each diagonal is one more concurrent
``data`` stream and ``B`` window per row, and past the hardware prefetchers'
stream count the bytes model flatters DIA -- HPCG's 27-point stencil ran
1.4x (N=1) to 2x (N=8) slower in DIA than in CSR, though modelled 1.26x
lighter; 5-point stencils stay within it, ...).  The learned
selector of the tuning package implements the same :class:`Selector`
protocol; once trained and saved it is loaded on first use (see
:data:`SELECTOR_ENTRY_POINTS`, :func:`register_selector_loader`) or installed with
:func:`set_default_selector`;
until then the analytic model decides.

>>> from tvm_ext.workloads import lap2d, block_fem
>>> select_format(block_fem(200, 4, 4), n_cols=32).format
'bcsr'
"""
from __future__ import annotations

import importlib
import os
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from schedules.sparse.choice import Candidate, Choice, Selector
from schedules.sparse.executors.codegen import SUPPORTED_DTYPES
from schedules.sparse.features import sparse_features
from schedules.sparse.timed_choice import (MEASURE_MIN_NNZ, MEASURE_NNZ, MEASURE_ROW_FRACTION,
                                           measure_close_candidates)
from tvm_ext.errors import InputError
from tvm_ext.workloads import canonical_csr

__all__ = [
    "Candidate",
    "Choice",
    "Selector",
    "AnalyticCostModel",
    "select_format",
    "set_default_selector",
    "register_selector_loader",
    "get_default_selector",
    "sparse_features",
    "repeat_share",
    "value_bytes_of",
    "executor_params",
    "DYNAMIC_ROW_CV",
    "DYNAMIC_PARTS_PER_THREAD",
]

#: Cost of one ``B`` byte fetched from the last-level cache, per byte from memory.
FETCH_FROM_LLC = 0.25
#: Cost of one ``B`` byte fetched from L2 (the band of ``B`` a row window reuses fits there),
#: per byte from memory: L2 delivers about 8x the memory bandwidth per core.
FETCH_FROM_L2 = 0.125
#: Cost of one ``B`` byte fetched again right after the row before fetched it (an L1 hit), per
#: byte from memory: one load beside the multiply-add, priced as a lane (:data:`LANE_COST`).
FETCH_FROM_L1 = 1 / 32
#: Cost of one multiply-add lane (``value_bytes`` of ``B`` times a stored slot), per byte from
#: memory: two FMA ports of 16 fp32 lanes on two cores give about 32x the memory bandwidth in bytes.
LANE_COST = 1 / 32
#: Formats whose SpMV executor is vectorised over rows (one lane per slot): SELL's slices,
#: DIA's diagonals.  The others' SpMV runs a row's slots one vector instruction each.
ROW_VECTOR_SPMV = ("sell", "dia")
#: What a stored slot costs the DIA SpMM executor besides its bytes, in bytes of memory traffic:
#: its interior rows run with no edge test (:mod:`~schedules.sparse.recipes.interior_split`),
#: but each slot still loads its diagonal's offset and a value from a separate ``data`` row
#: (one stream per diagonal) for one multiply-add.  On lap2d(600) at N=8 (2 cores, znver4,
#: paired rounds) it ran 0.84-0.89x CSR's speed though modelled 1.2x lighter: about 6 bytes
#: per slot (it ran 0.67x, 16 bytes, when every slot tested the matrix edge).
DIA_SPMM_SLOT_BYTES = 6


def repeat_share(features: dict[str, Any]) -> float:
    """Share of a row's non-zeros whose column the row just before also has: ``2 * (1 - 1/(2 f))``
    for the 2 x 1 block fill ``f`` (a row pair's shared columns, counted for both pairings of
    consecutive rows), in ``[0, 1]``; 0 without the fill.

    >>> from tvm_ext.workloads import lap2d
    >>> round(repeat_share(sparse_features(lap2d(50))), 2)  # 2 of a 5-point row's 5 columns
    0.41
    """
    fill = features.get("block_fill", {}).get("2x1", 0.0)
    if fill <= 0:
        return 0.0
    return float(min(max(2.0 * (1.0 - 1.0 / (2.0 * fill)), 0.0), 1.0))


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


def value_bytes_of(dtype: Any) -> int:
    """Bytes of one value of ``dtype``, one of the executors' value dtypes (float32, float64).

    >>> value_bytes_of("float32"), value_bytes_of(np.float64)
    (4, 8)
    """
    name = np.dtype(dtype).name
    if name not in SUPPORTED_DTYPES:
        raise InputError(f"AnalyticCostModel: value dtype {name} is not priced; the executors take "
                         f"{' or '.join(SUPPORTED_DTYPES)}")
    return np.dtype(name).itemsize


class AnalyticCostModel:
    """Bytes-moved model over CSR, BCSR (R, C in 1..8), ELL, DIA, HYB and SELL.

    ``max_padding``: a representation storing more than this many slots per
    non-zero is excluded (its memory would dwarf the matrix).  ``value_bytes``:
    the bytes of one stored value and one ``B``/``C`` element; ``None`` (the
    default) takes them from the matrix's value dtype, the features' ``dtype``
    (float32: 4, float64: 8; :func:`value_bytes_of`).

    >>> from tvm_ext.workloads import lap2d
    >>> f = sparse_features(lap2d(10).astype("float32"))
    >>> AnalyticCostModel().value_bytes_for(f), AnalyticCostModel(value_bytes=8).value_bytes_for(f)
    (4, 8)
    """

    name = "analytic"

    def __init__(self, *, value_bytes: int | None = None, max_padding: float = 3.0,
                 bcsr_sizes: tuple[int, ...] = (1, 2, 3, 4, 6, 8), beta: float = 0.0,
                 max_dia_streams: int = 16, l2_bytes: int | None = None, vector_bytes: int | None = None,
                 llc_bytes: int | None = None, l1_bytes: int | None = None):
        self.value_bytes = value_bytes  # None: the features' value dtype's
        self.l1_bytes = l1_bytes  # per core; None: the host target's
        self.l2_bytes = l2_bytes  # per core; None: the host target's (hardware_facts)
        self.llc_bytes = llc_bytes  # shared by the threads; None: the host target's
        self.vector_bytes = vector_bytes  # widest vector; None: the host target's
        self.max_padding = max_padding
        self.max_dia_streams = max_dia_streams
        self.bcsr_sizes = bcsr_sizes
        self.beta = beta

    # -- per-format estimates: (A bytes, B row fetches, streamed?, stored slots) ------
    def _estimates(self, f: dict[str, Any], n_cols: int = 1) -> tuple[
            dict[Candidate, tuple[float, float, bool, float]], dict[str, str]]:
        vb, m, nnz = self.value_bytes_for(f), f["rows"], f["nnz"]
        lengths = f.get("_row_lengths")
        est: dict[Candidate, tuple[float, float, bool, float]] = {}
        excluded: dict[str, str] = {}
        est[Candidate("csr")] = (nnz * (4 + vb) + (m + 1) * 4, nnz, False, nnz)
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
                    blocks * (r * c * vb + 4) + (m / r + 1) * 4, blocks * c, False, blocks * r * c)
        width = f["row_length"]["max"]
        if width and m * width <= self.max_padding * nnz:
            est[Candidate.of("ell", width=width)] = (m * width * (4 + vb), m * width, False, m * width)
        elif width:
            excluded["ell"] = f"max row {width} vs mean {f['row_length']['mean']:.1f}: too much padding"
        nd = f["diagonals"]
        counted = "" if f.get("diagonals_exact", True) else "more than "  # the count stopped early
        if nd > self.max_dia_streams or counted:
            excluded["dia"] = (f"{counted}{nd} occupied diagonals: more concurrent streams than the "
                               f"{self.max_dia_streams} the prefetchers follow")
        elif nd and nd * m <= self.max_padding * nnz:
            est[Candidate("dia")] = (nd * (m * vb + 4), nd * m, True, nd * m)
        elif nd:
            excluded["dia"] = f"{nd} occupied diagonals: {nd * m / max(nnz, 1):.1f} slots per non-zero"
        if lengths is not None and lengths.size:
            w, ell_slots, coo = _hyb_width(lengths, vb)
            if 0 < w < width and coo > 0:
                est[Candidate.of("hyb", width=w)] = (
                    ell_slots * (4 + vb) + coo * (8 + vb), ell_slots + coo, False, ell_slots + coo)
            sell = Candidate.of("sell", C=8, sigma=256)
            if n_cols > 1:
                excluded[sell.label] = ("for N > 1 its executor runs CSR's row loop (vectorised over N) over "
                                        "padded, permuted rows: never lighter than CSR")
                return est, excluded
            slots = _sell_slots(lengths, 8, 256)
            if slots <= self.max_padding * nnz:
                # perm (the output row of every slice row) + slice pointers and widths
                est[sell] = (
                    slots * (4 + vb) + 4 * m + 8 * (m / 8 + 1), slots, False, slots)
        return est, excluded

    def scores(self, features: dict[str, Any], n_cols: int) -> tuple[dict[Candidate, float], dict[str, str]]:
        """Estimated cost of one product with ``n_cols`` columns, per candidate, in bytes of
        memory traffic (cache fetches and multiply-adds converted at their relative rates)."""
        est, excluded = self._estimates(features, n_cols)
        repeats = repeat_share(features)
        vb, m, k = self.value_bytes_for(features), features["rows"], features["cols"]
        row_b_bytes = features["row_length"]["mean"] * n_cols * vb
        b_row = n_cols * vb
        band = min(k, 2 * int(features.get("bandwidth", k)) + 1) * b_row
        if band <= self._l2_bytes():
            fetch = FETCH_FROM_L2
        elif k * b_row <= self._llc_bytes():
            fetch = FETCH_FROM_LLC
        else:
            fetch = 1.0
        c_bytes = m * b_row * (2 if self.beta else 1)
        vector = self._vector_bytes()
        out = {}
        for cand, (a_bytes, fetches, streamed, slots) in est.items():
            factor = min(fetch, FETCH_FROM_LLC) if streamed else fetch
            rows = int(cand.args.get("R", 1)) if cand.format == "bcsr" else 1
            if not streamed and 2 * rows * row_b_bytes <= self._l1_bytes():
                # the fetches repeating the row (block row) before hit L1; an R-row block
                # repeats only across its first row
                share = repeats / rows
                factor = (1.0 - share) * factor + share * min(factor, FETCH_FROM_L1)
            # a slot's multiply-add is one vector instruction however few of its lanes N fills,
            # except in the SpMV executors that vectorise over rows (a slot is one lane there)
            lane_bytes = b_row if n_cols == 1 and cand.format in ROW_VECTOR_SPMV else max(b_row, vector)
            out[cand] = a_bytes + fetches * b_row * factor + slots * lane_bytes * LANE_COST + c_bytes
            if cand.format == "dia" and n_cols > 1:
                out[cand] += slots * DIA_SPMM_SLOT_BYTES
        return out, excluded

    def value_bytes_for(self, features: dict[str, Any]) -> int:
        """Bytes of one value in the product the features describe: ``value_bytes`` when the
        model was given it, else the size of the features' ``dtype`` (:func:`value_bytes_of`)."""
        if self.value_bytes is not None:
            return int(self.value_bytes)
        if "dtype" not in features:
            raise InputError("AnalyticCostModel: the features name no value dtype (the 'dtype' key "
                             "sparse_features sets); pass value_bytes= to price another layout")
        return value_bytes_of(features["dtype"])

    def _l1_bytes(self) -> int:
        if self.l1_bytes is None:
            from tvm_ext.target import hardware_facts

            self.l1_bytes = int(hardware_facts().l1d_bytes)
        return self.l1_bytes

    def _vector_bytes(self) -> int:
        if self.vector_bytes is None:
            from tvm_ext.target import hardware_facts

            self.vector_bytes = int(hardware_facts().vector_bytes)
        return self.vector_bytes

    def _llc_bytes(self) -> int:
        """Last-level cache the executor's threads share: the target's per-core L3 share times
        its cores (:func:`~tvm_ext.target.hardware_facts`; sysfs on the host)."""
        if self.llc_bytes is None:
            from tvm_ext.target import hardware_facts

            self.llc_bytes = hardware_facts().llc_bytes
        return self.llc_bytes

    def _l2_bytes(self) -> int:
        if self.l2_bytes is None:
            from tvm_ext.target import hardware_facts

            self.l2_bytes = int(hardware_facts().l2_bytes)
        return self.l2_bytes

    def choose(self, features: dict[str, Any], n_cols: int) -> Choice:
        scores, excluded = self.scores(features, n_cols)
        best = min(scores, key=scores.get)
        csr = scores[Candidate("csr")]
        reason = (f"{best.label}: {scores[best] / 1e6:.3g} MB modelled traffic vs csr "
                  f"{csr / 1e6:.3g} MB ({csr / scores[best]:.2f}x less) for N={n_cols}")
        return Choice(best, {c.label: s for c, s in scores.items()}, excluded, reason, self.name,
                      scored=tuple(scores.items()))


#: Row-length spread (standard deviation over mean) from which a CSR executor claims its parts
#: at run time (``dynamic=True``) instead of fixed shares: parts balanced by non-zeros are not
#: balanced in time when rows are power-law (a hub row's scattered ``B`` reads, many one-entry
#: rows' row overhead), and a thread that the OS parks leaves its fixed share undone.  R-MAT's
#: rows spread 6x their mean (the stencils and FEM matrices of the bench 0.0-0.3).  Its SpMV ran
#: 3-10% faster with claimed parts in four interleaved comparisons; at N = 8, with
#: :data:`DYNAMIC_PARTS_PER_THREAD` parts, the median per-round ratio was 1.11x and 1.21x for
#: the claimed parts (best calls 1.04x, 1.13x); at N = 128 even (1.01x).
DYNAMIC_ROW_CV = 2.0
#: Parts per thread of such a claimed executor: the thread that claims the last part finishes
#: up to one part after the other, so the tail is ``1 / (threads * parts_per_thread)`` of the
#: work.  With the executors' default 4 (8 parts on 2 threads) a power-law part's time spread can
#: leave an eighth of the product on one thread.  On R-MAT 17's SpMV (2-core machine at a load of
#: 8-10) the best calls were equal with 4 and 16; the median call was 1.2x faster with 16 in one
#: interleaved comparison (the per-round ratio even) and 1.4x in another; a claim is one atomic.
DYNAMIC_PARTS_PER_THREAD = 16


def executor_params(format_name: str, features: dict[str, Any], kind: str) -> Any:
    """The executor knobs the features call for, or None for the executor's defaults: a CSR
    executor (SpMV or SpMM) over rows whose lengths spread more than :data:`DYNAMIC_ROW_CV`
    times their mean claims its parts at run time, :data:`DYNAMIC_PARTS_PER_THREAD` parts per
    thread.

    >>> from tvm_ext.workloads import rmat, lap2d
    >>> p = executor_params("csr", sparse_features(rmat(10)), "spmm")
    >>> p.dynamic, p.parts_per_thread
    (True, 16)
    >>> executor_params("csr", sparse_features(lap2d(10)), "spmv") is None
    True
    """
    if format_name != "csr":
        return None
    from schedules.sparse.executors.csr import CSRParams

    rl = features.get("row_length", {})
    mean = float(rl.get("mean", 0.0))
    if mean <= 0:
        return None
    if float(rl.get("std", 0.0)) / mean < DYNAMIC_ROW_CV:
        return None
    return CSRParams(dynamic=True, parts_per_thread=DYNAMIC_PARTS_PER_THREAD)


#: Entry-point group of zero-argument functions returning a trained :class:`Selector`
#: (or None).  The tuning package declares its loader there (setup.cfg) and also
#: registers it with :func:`register_selector_loader` when imported, so this layer
#: names no package above it.
SELECTOR_ENTRY_POINTS = "tvm_ext.selectors"

_default_selector: Selector | None = None
_selector_loaders: list[Callable[[], Selector | None]] = []


def register_selector_loader(loader: Callable[[], Selector | None]) -> None:
    """Add a function that returns a trained selector or None, tried on first :func:`get_default_selector`.

    >>> register_selector_loader(lambda: None)  # a loader that finds no model
    """
    if loader not in _selector_loaders:
        _selector_loaders.append(loader)


def _registered_loaders() -> list[Callable[[], Selector | None]]:
    from importlib.metadata import entry_points

    loaders = list(_selector_loaders)
    for ep in entry_points(group=SELECTOR_ENTRY_POINTS):
        loader = ep.load()
        if loader not in loaders:
            loaders.append(loader)
    return loaders


def set_default_selector(selector: Selector | None) -> None:
    """Install a selector (e.g. the tuning package's learned one); ``None`` restores the analytic model."""
    global _default_selector
    _default_selector = selector if selector is not None else AnalyticCostModel()


#: ``$TVM_EXT_SELECTOR`` picks *which* selector: unset/empty (a trained one if any, else
#: analytic), ``off``/``none``/``analytic``, ``learned`` (a trained one, or an error), or a
#: loader ``module:function``.  *Where* the trained model lives is ``$TVM_EXT_SELECTOR_MODEL``.
SELECTOR_ENV, SELECTOR_MODEL_ENV = "TVM_EXT_SELECTOR", "TVM_EXT_SELECTOR_MODEL"


def _load_trained_selector() -> Selector | None:
    from tvm_ext.errors import ConfigError

    spec = os.environ.get(SELECTOR_ENV, "").strip()
    if spec.lower() in ("off", "none", "analytic"):
        return None
    if not spec or spec.lower() == "learned":  # the registered loaders; each returns None when it has no model
        found = next((sel for sel in (load() for load in _registered_loaders()) if sel is not None), None)
        if found is None and spec:
            raise ConfigError(f"{SELECTOR_ENV}=learned but no trained selector was found (train one with "
                              f"'tvm-ext tune selector'; {SELECTOR_MODEL_ENV} names the model file)")
        return found
    if ":" not in spec:
        raise ConfigError(f"{SELECTOR_ENV}={spec!r}: expected off, analytic, learned or a loader "
                          f"module:function (a model file goes in {SELECTOR_MODEL_ENV})")
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
                  features: dict[str, Any] | None = None, measure: bool | None = False,
                  margin: float = 0.15) -> Choice:
    """Pick a representation for ``A @ B`` with ``B`` of ``n_cols`` columns.

    ``measure``: time the choice against the candidates scored within
    ``margin`` of it and the CSR baseline (:func:`~schedules.sparse.timed_choice.measure_close_candidates`,
    on a block of at most :data:`MEASURE_NNZ` non-zeros and, on larger
    matrices, :data:`MEASURE_ROW_FRACTION` of the rows) and keep the fastest; ``None``
    does so on matrices of :data:`MEASURE_MIN_NNZ` non-zeros or more.
    """
    feats = features if features is not None else sparse_features(A)
    chooser = selector or get_default_selector()
    try:
        choice = chooser.choose(feats, n_cols)
    except Exception as err:  # a learned model that fails must not take the plugin down
        if chooser is AnalyticCostModel or isinstance(chooser, AnalyticCostModel):
            raise
        choice = AnalyticCostModel().choose(feats, n_cols)
        choice = replace(choice, reason=f"{choice.reason} (fallback: {chooser.name} failed: {err})")
    if measure is None:
        measure = feats["nnz"] >= MEASURE_MIN_NNZ
    if measure:
        choice = measure_close_candidates(canonical_csr(A, allow_nan=True), int(n_cols), choice, margin=margin,
                                          max_row_fraction=MEASURE_ROW_FRACTION if feats["nnz"] > MEASURE_NNZ
                                          else 1.0)
    return choice
