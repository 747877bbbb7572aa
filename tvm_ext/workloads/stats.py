"""Structural statistics of a sparse matrix (``tvm-ext matrix stats``).

The same numbers are the features the sparse format selector reads: row-length
statistics, bandwidth, occupied diagonals, and the R x C block fill ratio
``nnz / (blocks * R * C)`` for R, C in 1..8 (OSKI's fill, inverted: 1.0 means
every stored block is dense).

On large matrices the block fill is *estimated* from a random sample of block
rows (:func:`estimate_block_fill`), as OSKI does, with a confidence bound on
the error reported next to each estimate; below :data:`EXACT_FILL_NNZ`
non-zeros it is exact.

>>> from tvm_ext.workloads import lap2d
>>> s = matrix_stats(lap2d(4))
>>> s["rows"], s["nnz"], s["diagonals"], s["bandwidth"]
(16, 64, 5, 4)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from tvm_ext.errors import InputError
from tvm_ext.workloads.validation import canonical_csr

__all__ = ["matrix_stats", "block_fill", "row_lengths", "estimate_block_fill", "BlockFillEstimate",
           "EXACT_FILL_NNZ", "SELECTOR_BLOCK_SIZES", "sample_block_rows", "block_row_bounds", "BlockRowBounds",
           "fill_from_counts"]

#: Below this many non-zeros :func:`estimate_block_fill` counts every block (exact).
EXACT_FILL_NNZ = 200_000
#: Block heights/widths the format selectors read (6 x 6 = 36 shapes).
SELECTOR_BLOCK_SIZES = (1, 2, 3, 4, 6, 8)


def row_lengths(A) -> np.ndarray:
    """Non-zeros per row of a CSR matrix."""
    return np.diff(A.indptr).astype(np.int64)


def _coords(A) -> tuple[np.ndarray, np.ndarray]:
    rows = np.repeat(np.arange(A.shape[0], dtype=np.int64), row_lengths(A))
    return rows, A.indices.astype(np.int64)


def _blocks_per_block_row(br: np.ndarray, cols: np.ndarray, n_block_rows: int, r_sorted: bool,
                          widths: Sequence[int]) -> dict[int, np.ndarray]:
    """Distinct ``col // C`` per block row, for every ``C`` in ``widths``.

    ``br`` (block row of each entry, non-decreasing) and ``cols`` come in CSR
    order.  One stable sort by ``(block row, col)`` serves every ``C``: that
    order is also ``(block row, col // C)`` order, so each ``C`` is a linear
    scan.  With one row per block row (``r_sorted``) CSR order already is that
    order; otherwise the sort merges R sorted runs per block row (near linear).
    """
    if not r_sorted:
        ncols = int(cols.max()) + 1 if cols.size else 1
        keys = np.sort(br.astype(np.int64) * ncols + cols, kind="stable")
        keep = np.empty(keys.size, dtype=bool)
        keep[:1] = True
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        keys = keys[keep]  # distinct (block row, column) pairs
        br, cols = keys // ncols, keys % ncols
    br = br.astype(np.int32, copy=False)
    cols = cols.astype(np.int32, copy=False)
    new_row = np.empty(br.size, dtype=bool)
    new_row[:1] = True
    np.not_equal(br[1:], br[:-1], out=new_row[1:])
    new = np.empty_like(new_row)
    out = {}
    for c in widths:
        bc = cols // c if c > 1 else cols
        new[:1] = True
        np.not_equal(bc[1:], bc[:-1], out=new[1:])
        new |= new_row
        out[c] = np.bincount(br[new], minlength=n_block_rows)
    return out


def block_fill(A, max_r: int = 8, max_c: int = 8) -> dict[str, float]:
    """Exact ``{"RxC": nnz / (occupied R x C blocks * R * C)}`` for R, C in 1..max.

    One sort per R: ordering non-zeros by (row // R, col) also orders them by
    (row // R, col // C) for every C, so each C is a linear scan.  The sort
    merges R already-sorted CSR rows per block row, which a stable sort does
    in near-linear time.
    """
    A = canonical_csr(A, allow_nan=True)
    return _exact_fill(A, range(1, max_r + 1), range(1, max_c + 1))


def _exact_fill(A, heights: Sequence[int], widths: Sequence[int]) -> dict[str, float]:
    if A.nnz == 0:
        return {f"{r}x{c}": 0.0 for r in heights for c in widths}
    rows, cols = _coords(A)
    out: dict[str, float] = {}
    for r in heights:
        n_br = -(-A.shape[0] // r)
        counts = _blocks_per_block_row(rows // r if r > 1 else rows, cols, n_br, r == 1, widths)
        for c in widths:
            out[f"{r}x{c}"] = A.nnz / (int(counts[c].sum()) * r * c)
    return out


@dataclass(frozen=True)
class BlockFillEstimate:
    """Block fill per ``"RxC"``, with the half-width of its confidence interval.

    ``|fill - true fill| <= bound[shape]`` holds with probability at least
    ``confidence`` for each shape; ``exact`` estimates (every block row
    counted) have ``bound == 0``.  ``fraction[shape]`` is the share of block
    rows that were read.
    """

    fill: dict[str, float]
    bound: dict[str, float]
    fraction: dict[str, float] = field(default_factory=dict)
    confidence: float = 0.99
    exact: bool = True


def _sampled_block_counts(indptr: np.ndarray, indices: np.ndarray, picked: np.ndarray, r: int, m: int,
                          n_cols: int, widths: Sequence[int]) -> np.ndarray:
    """Occupied R x C blocks of each block row in ``picked`` (sorted), one row per C in ``widths``.

    A block row is the contiguous CSR range ``indptr[i*R] : indptr[i*R + R]``,
    so the sample is gathered by one ragged index.  For R > 1 one stable sort
    by (block row, column) merges the R sorted rows and drops repeated
    columns; in that order a new block starts where ``col // C`` or the block
    row changes, for every C at once (a ``(len(widths), nnz)`` array), and a
    prefix sum at the block-row boundaries gives the per-row counts.
    """
    n = picked.size
    first = picked * r
    starts = indptr[first]
    lens = indptr[np.minimum(first + r, m)] - starts
    seg = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=seg[1:])
    total = int(seg[-1])
    if total == 0:
        return np.zeros((len(widths), n), dtype=np.int64)
    pos = np.arange(total, dtype=np.int64)
    pos += np.repeat(starts - seg[:-1], lens)
    cols = indices[pos]
    if r > 1:
        keys = np.repeat(np.arange(n, dtype=np.int64) * n_cols, lens)
        keys += cols
        keys.sort(kind="stable")  # R sorted runs per block row: near-linear merge
        keep = np.empty(keys.size, dtype=bool)
        keep[:1] = True
        np.not_equal(keys[1:], keys[:-1], out=keep[1:])
        keys = keys[keep]  # distinct (block row, column) pairs, in order
        owner = keys // n_cols
        cols = keys - owner * n_cols
        seg = np.searchsorted(owner, np.arange(n + 1, dtype=np.int64))
    cols = cols.astype(np.int32, copy=False)
    w = np.asarray(widths, dtype=np.int32)[:, None]
    bc = cols[None, :] // w
    new = np.empty(bc.shape, dtype=bool)
    new[:, :1] = True
    np.not_equal(bc[:, 1:], bc[:, :-1], out=new[:, 1:])
    row_first = seg[:-1][seg[1:] > seg[:-1]]
    new[:, row_first] = True  # the first entry of every non-empty block row opens a block
    csum = np.zeros((len(widths), new.shape[1] + 1), dtype=np.int64)
    np.cumsum(new, axis=1, out=csum[:, 1:])
    return csum[:, seg[1:]] - csum[:, seg[:-1]]


def _mean_deviation(n: int, var: float, width: float, n_pop: int, delta: float) -> float:
    """Half-width ``eps`` with ``P(|sample mean - population mean| > eps) <= delta``.

    The sample (size ``n``, unbiased variance ``var``) is drawn without
    replacement from ``n_pop`` values in ``[0, width]``.  The smaller of
    Hoeffding-Serfling's bound (Serfling 1974) and the empirical Bernstein
    bound (Maurer & Pontil 2009), each at ``delta / 2``: the first is tight
    for spread-out values, the second when the sample varies little.
    """
    if n >= n_pop or width <= 0:
        return 0.0
    log_term = math.log(4.0 / delta)
    hoeffding = width * math.sqrt((1.0 - (n - 1) / n_pop) * log_term / (2.0 * n))
    if n < 2:
        return hoeffding
    bernstein = math.sqrt(2.0 * var * log_term / n) + 7.0 * width * log_term / (3.0 * (n - 1))
    return min(hoeffding, bernstein)


def estimate_block_fill(A: Any, sizes: Sequence[int] = SELECTOR_BLOCK_SIZES, *, fraction: float = 0.02,
                        min_block_rows: int = 512, confidence: float = 0.99,
                        exact_below: int = EXACT_FILL_NNZ, seed: int = 0,
                        count_blocks: Callable[..., np.ndarray] | None = None) -> BlockFillEstimate:
    """R x C block fill for R, C in ``sizes``, counted on a random ``fraction`` of block rows.

    As OSKI (Vuduc, Demmel & Yelick 2005, §3.1) the blocks are counted on a
    uniform sample of block rows (at least ``min_block_rows`` per R).  Each
    block row's count ``b_i`` lies between bounds known from its size alone,
    ``lo_i = ceil(nnz_i / (R*C))`` and ``hi_i = min(nnz_i, block columns)``;
    the total ``sum(lo_i) + N * mean(b_i - lo_i)`` is estimated from the
    sample, and a concentration bound on that mean (:func:`_mean_deviation`,
    range ``max(hi_i - lo_i)``) gives an interval on the block count, hence on
    the fill: ``bound`` is the widest deviation of
    the fill over it, valid with probability ``confidence`` per shape.
    Matrices with fewer than ``exact_below`` non-zeros are counted exactly.
    ``count_blocks`` replaces the sampled count (same arguments and result as
    :func:`_sampled_block_counts`; the sparse selector passes a compiled one).
    The three steps are public for a caller that runs them on threads: the
    sample (:func:`sample_block_rows`), each height's population bounds
    (:func:`block_row_bounds`) and counts, and :func:`fill_from_counts`.

    >>> from tvm_ext.workloads import lap2d
    >>> est = estimate_block_fill(lap2d(400), exact_below=0, seed=0)
    >>> est.exact, abs(est.fill["1x2"] - block_fill(lap2d(400), 1, 2)["1x2"]) <= est.bound["1x2"]
    (False, True)
    """
    A = canonical_csr(A, allow_nan=True)
    sizes = _check_fill_args(sizes, fraction, confidence)
    if A.nnz < exact_below or A.nnz == 0:
        keys = [f"{r}x{c}" for r in sizes for c in sizes]
        fill = _exact_fill(A, sizes, sizes)
        return BlockFillEstimate(fill, dict.fromkeys(keys, 0.0), dict.fromkeys(keys, 1.0), confidence, True)
    sample = sample_block_rows(A, sizes, fraction=fraction, min_block_rows=min_block_rows, seed=seed)
    indptr = A.indptr.astype(np.int64)
    counts = {r: (count_blocks or _sampled_block_counts)(indptr, A.indices, picked, r, A.shape[0], A.shape[1], sizes)
              for r, picked in sample.items()}
    return fill_from_counts(sample, {r: block_row_bounds(A, r, sizes) for r in sizes}, counts, confidence)


def _check_fill_args(sizes: Sequence[int], fraction: float, confidence: float) -> tuple[int, ...]:
    if not 0.0 < fraction <= 1.0:
        raise InputError(f"estimate_block_fill: fraction must be in (0, 1], got {fraction}")
    if not 0.0 < confidence < 1.0:
        raise InputError(f"estimate_block_fill: confidence must be in (0, 1), got {confidence}")
    sizes = tuple(int(s) for s in sizes)
    if not sizes or min(sizes) < 1:
        raise InputError(f"estimate_block_fill: block sizes must be positive integers, got {sizes}")
    return sizes


def sample_block_rows(A: Any, sizes: Sequence[int], *, fraction: float, min_block_rows: int,
                      seed: int = 0) -> dict[int, np.ndarray]:
    """The block rows :func:`estimate_block_fill` counts, per height R in ``sizes``: a sorted
    uniform sample without replacement of ``fraction`` of them (at least ``min_block_rows``;
    all of them when that is every one), drawn from one generator seeded ``seed``, R by R.

    >>> from tvm_ext.workloads import lap2d
    >>> s = sample_block_rows(lap2d(100), (1, 2), fraction=0.01, min_block_rows=300)
    >>> s[1].size, s[2].size, bool((s[1][1:] > s[1][:-1]).all())
    (300, 300, True)
    """
    rng = np.random.default_rng(seed)
    m = A.shape[0]
    out: dict[int, np.ndarray] = {}
    for r in sizes:
        n_br = -(-m // r)
        n = min(n_br, max(int(math.ceil(fraction * n_br)), min_block_rows))
        out[r] = np.arange(n_br) if n == n_br else np.sort(rng.choice(n_br, n, replace=False))
    return out


@dataclass(frozen=True)
class BlockRowBounds:
    """What the whole matrix says about its R-row block rows for every block width in
    ``widths`` (:func:`block_row_bounds`): the non-zeros ``nz`` of every block row (``nnz``
    in all), the sums
    of the per-block-row bounds ``lo_i`` and ``hi_i`` on their block counts, and the widest
    ``hi_i - lo_i`` (one entry per width)."""

    r: int
    widths: np.ndarray
    nnz: int
    nz: np.ndarray
    total_lo: np.ndarray
    total_hi: np.ndarray
    spread: np.ndarray


def block_row_bounds(A: Any, r: int, widths: Sequence[int]) -> BlockRowBounds:
    """:class:`BlockRowBounds` of ``A``'s block rows of ``r`` rows: ``lo_i = ceil(nz_i / (R*C))``
    (R*C non-zeros per block at most), ``hi_i = min(nz_i, block columns)`` (one block per
    non-zero or block column at most), summed through the histogram of the block-row sizes.

    >>> from tvm_ext.workloads import lap2d
    >>> b = block_row_bounds(lap2d(10), 2, (1, 2))
    >>> int(b.nz.sum()), b.total_lo.tolist()
    (460, [240, 140])
    """
    m, k = A.shape
    indptr = A.indptr  # int32 or int64 (canonical_csr): a block row's non-zeros fit either
    nz = np.diff(np.append(indptr[::r], indptr[m]) if m % r else indptr[::r]) if r > 1 else np.diff(indptr)
    w = np.asarray(widths, dtype=np.int64)[:, None]
    hist = np.bincount(nz)
    nz_vals = np.flatnonzero(hist)[None, :]  # distinct block-row sizes and how often they occur
    nz_counts = hist[nz_vals[0]]
    lo_v, hi_v = -(-nz_vals // (r * w)), np.minimum(nz_vals, -(-k // w))
    return BlockRowBounds(int(r), w[:, 0], int(indptr[m]), nz, lo_v @ nz_counts, hi_v @ nz_counts,
                          (hi_v - lo_v).max(axis=1))


def fill_from_counts(sample: dict[int, np.ndarray], bounds: dict[int, BlockRowBounds],
                     counts: dict[int, np.ndarray], confidence: float = 0.99) -> BlockFillEstimate:
    """:func:`estimate_block_fill`'s estimate from its parts: per height R, the sampled block rows
    ``sample[R]``, the whole matrix's ``bounds[R]`` and the occupied blocks ``counts[R][j, p]``
    of width ``bounds[R].widths[j]`` in block row ``sample[R][p]``."""
    fill: dict[str, float] = {}
    bound: dict[str, float] = {}
    frac: dict[str, float] = {}
    exact = True
    for r, picked in sample.items():
        b = bounds[r]
        exact &= picked.size == b.nz.size
        for c, (f, e) in zip(b.widths.tolist(), _height_estimates(b, picked, counts[r], 1.0 - confidence)):
            fill[f"{r}x{c}"], bound[f"{r}x{c}"], frac[f"{r}x{c}"] = f, e, picked.size / b.nz.size
    return BlockFillEstimate(fill, bound, frac, confidence, exact)


def _height_estimates(b: BlockRowBounds, picked: np.ndarray, counts: np.ndarray,
                      delta: float) -> list[tuple[float, float]]:
    """(fill, bound) of the R x C blocks for every C in ``b.widths``, from the occupied blocks
    ``counts[j, p]`` of width ``b.widths[j]`` in the sampled block rows ``picked``:
    :func:`estimate_block_fill`'s estimate and bound."""
    r, nnz, n_br, n = b.r, b.nnz, b.nz.size, picked.size
    w = b.widths[:, None]
    y = counts - (-(-b.nz[picked][None, :] // (r * w)))
    y_mean = y.mean(axis=1)
    y_var = y.var(axis=1, ddof=1) if n > 1 else np.zeros(len(b.widths))
    blocks_v = np.minimum(np.maximum(b.total_lo + n_br * y_mean, b.total_lo), b.total_hi)
    out = []
    for j, c in enumerate(b.widths.tolist()):
        blocks = float(blocks_v[j])
        if blocks <= 0:
            out.append((0.0, 0.0))
            continue
        fill = nnz / (blocks * r * c)
        eps = n_br * _mean_deviation(n, float(y_var[j]), float(b.spread[j]), n_br, delta)
        fewest, most = max(blocks - eps, int(b.total_lo[j]), 1e-300), min(blocks + eps, int(b.total_hi[j]))
        out.append((fill, max(nnz / (fewest * r * c) - fill, fill - nnz / (most * r * c))))
    return out


def _histogram(lengths: np.ndarray, bins: int = 10) -> dict[str, list]:
    if lengths.size == 0:
        return {"edges": [], "counts": []}
    hi = int(lengths.max())
    n_bins = max(1, min(bins, hi + 1))
    edges = np.unique(np.linspace(0, hi + 1, n_bins + 1).astype(np.int64))
    # integer lengths: one count per length, summed per bin (np.histogram's bins, without its search)
    counts = np.add.reduceat(np.bincount(lengths, minlength=hi + 1), edges[:-1])
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def matrix_stats(A: Any, *, max_block: int = 8, bins: int = 10, block_sizes: Sequence[int] | None = None,
                 sample: bool = False, symmetry: bool = True, seed: int = 0,
                 sample_fraction: float = 0.02) -> dict[str, Any]:
    """Shape, nnz, row-length histogram, bandwidth, diagonals and block fill.

    ``block_sizes`` (default ``1..max_block``) are the R and C values of the
    block fill.  ``sample=True`` estimates the fill with
    :func:`estimate_block_fill` on matrices of :data:`EXACT_FILL_NNZ` or more
    non-zeros and adds ``block_fill_bound`` (the estimates' confidence
    half-widths) and ``block_fill_sampled`` (share of block rows read: about
    ``sample_fraction``, at least 512 block rows per R).
    ``symmetry=False`` skips the pattern-symmetry test (a transpose).

    >>> from tvm_ext.workloads import lap2d
    >>> matrix_stats(lap2d(4), block_sizes=(1, 2), sample=True)["block_fill_bound"]["2x2"]
    0.0
    """
    A = canonical_csr(A, allow_nan=True)
    m, n = A.shape
    lengths = row_lengths(A)
    sizes = tuple(block_sizes) if block_sizes is not None else tuple(range(1, max_block + 1))
    if A.nnz:
        # diagonal col - row + (M-1) of every non-zero, in int32 (canonical_csr bounds M + N);
        # occupied diagonals by counting (linear), not by sorting; the extreme offsets are the
        # first and last occupied diagonals, so no min/max pass over the non-zeros
        idx = np.int64 if m + n > np.iinfo(np.int32).max else np.int32
        diag = np.repeat(np.arange(m - 1, -1, -1, dtype=idx), lengths)
        diag += A.indices
        occupied = np.flatnonzero(np.bincount(diag, minlength=m + n - 1))
        n_diag = int(occupied.size)
        lo_off, hi_off = int(occupied[0]) - (m - 1), int(occupied[-1]) - (m - 1)
    else:
        n_diag, lo_off, hi_off = 0, 0, 0
    max_len = int(lengths.max()) if m else 0
    stats: dict[str, Any] = {
        "rows": int(m),
        "cols": int(n),
        "nnz": int(A.nnz),
        "density": float(A.nnz / (m * n)) if m and n else 0.0,
        "row_length": {
            "min": int(lengths.min()) if m else 0,
            "max": max_len,
            "mean": float(lengths.mean()) if m else 0.0,
            "std": float(lengths.std()) if m else 0.0,
            "empty_rows": int((lengths == 0).sum()),
            "histogram": _histogram(lengths, bins),
        },
        "bandwidth": max(-lo_off, hi_off, 0),
        "lower_bandwidth": max(0, -lo_off),
        "upper_bandwidth": max(0, hi_off),
        "diagonals": n_diag,
        # share of DIA / ELL slots that hold a real non-zero (1.0 = no padding)
        "dia_fill": float(A.nnz / (n_diag * m)) if n_diag and m else 0.0,
        "ell_fill": float(A.nnz / (max_len * m)) if max_len and m else 0.0,
    }
    if symmetry:
        stats["pattern_symmetric"] = bool(m == n and m and _pattern_symmetric(A))
    if sample:
        est = estimate_block_fill(A, sizes, fraction=sample_fraction, seed=seed)
        stats["block_fill"] = est.fill
        stats["block_fill_bound"] = est.bound
        stats["block_fill_sampled"] = min(est.fraction.values(), default=1.0)
    else:
        stats["block_fill"] = _exact_fill(A, sizes, sizes)
    return stats


def _pattern_symmetric(A) -> bool:
    P = A.copy()
    P.data = np.ones_like(P.data)
    return (P != P.T).nnz == 0
