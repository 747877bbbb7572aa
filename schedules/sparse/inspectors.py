"""Venkat 2016 §5.1.4-5.3 and §6.1: format inspectors derived from CSR by transformation recipes.

One public function per format, scipy style (any scipy matrix or 2-D array
in, a container from :mod:`schedules.sparse.formats` out).  Each starts from
:func:`tvm_ext.workloads.canonical_csr` and runs its :class:`Recipe` of
:mod:`schedules.sparse.transforms`, then lays the compacted arrays out as the
container's docstring specifies:

=========  ==================================================================
``csr``    make_dense -> compact_and_pad(k)                  (Listing 5.3)
``coo``    make_dense -> compact((i, k))                     (coalescing, Ch. 3)
``bcsr``   make_dense -> tile(i,R) -> tile(k,C) -> permute(ii,kk,i,k)
           -> compact_and_pad(kk)                            (Fig. 5.7)
``dia``    make_dense -> skew(k by -i) -> shift(M-1) -> permute(d,i)
           -> compact_and_pad(d)                             (Fig. 5.8)
``ell``    normalize(j) -> known(j < W) -> compact_and_pad(i)  (Fig. 5.9)
``csb``    make_dense -> tile(i,b) -> tile(l,b) -> permute(ii,ll,i,l)
           -> compact_and_pad((i, l))                        (§6.1, 16-bit offsets)
``hyb``    normalize(j) -> split(j < W): ELL part + coalesced COO rest   (§9.6)
``sell``   normalize(j) -> reorder(i by length in sigma windows) -> tile(i,C)
           -> permute(s,j,r) -> compact_and_pad(s, ragged j) (§9.6)
=========  ==================================================================

>>> import scipy.sparse as sp
>>> A = sp.csr_array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])
>>> b = to_bcsr(A, 2, 2)
>>> b.indptr.tolist(), b.bcol.tolist(), b.data.shape
([0, 2], [0, 1], (2, 2, 2))
>>> print(bcsr_recipe(2, 2))
bcsr: make_dense() -> tile(i, 2) -> tile(k, 2) -> permute([ii, kk, i, k]) -> compact_and_pad(kk, identity=0)
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from schedules.sparse.formats import BCSR, COO, CSB, CSR, DIA, ELL, HYB, SELL, SparseFormat
from schedules.sparse.transforms import (
    PaddedCompaction, Recipe, Step, compact, compact_and_pad, csr_space, known, make_dense, normalize,
    permute, reorder, select, shift, skew, split, step, tile,
)
from tvm_ext.errors import ConfigError, InputError
from tvm_ext.workloads import canonical_csr

__all__ = [
    "to_csr", "to_coo", "to_bcsr", "to_ell", "to_dia", "to_csb", "to_hyb", "to_sell",
    "choose_hyb_width", "INSPECTORS", "RECIPES",
    "csr_recipe", "coo_recipe", "bcsr_recipe", "ell_recipe", "dia_recipe", "csb_recipe", "sell_recipe",
]

_INDEX = np.int32
_INT32_MAX = int(np.iinfo(np.int32).max)
_UINT16_MAX = int(np.iinfo(np.uint16).max)
#: ELL/SELL pad: value 0 (identity of +=); column -1 marks the slot until it is
#: replaced by the row's last real column.
_PAD = {"data": 0, "col": -1}


def _param(fmt: str, name: str, value: Any, lo: int = 1, hi: int | None = None) -> int:
    """An integer format parameter in ``[lo, hi]`` or :class:`ConfigError`."""
    ok = not isinstance(value, bool) and isinstance(value, (int, np.integer))
    if not ok or value < lo or (hi is not None and value > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ConfigError(f"{fmt}: {name} must be an integer {rng}, got {value!r}")
    return int(value)


def _row_lengths(csr: sp.csr_array) -> np.ndarray:
    return np.diff(csr.indptr).astype(np.int64)


def _last_cols(csr: sp.csr_array) -> np.ndarray:
    """Each row's last column (0 for empty rows): the pad column of ELL/SELL."""
    lens = _row_lengths(csr)
    last = np.zeros(csr.shape[0], dtype=_INDEX)
    nz = lens > 0
    last[nz] = csr.indices[csr.indptr[1:][nz] - 1]
    return last


def _index(a: np.ndarray, what: str) -> np.ndarray:
    if a.size and int(a.max()) > _INT32_MAX:
        raise InputError(f"{what} exceeds the int32 range of the executors' indices")
    return a.astype(_INDEX)


# ----------------------------------------------------------------------------- recipes

def csr_recipe() -> Recipe:
    """Listing 5.3: make-dense then compact-and-pad at ``k`` gives back CSR.

    >>> print(csr_recipe())
    csr: make_dense() -> compact_and_pad(k, identity=0)
    """
    return Recipe("csr", (step(make_dense), step(compact_and_pad, "k", identity=0)))


def coo_recipe() -> Recipe:
    """Generalised loop coalescing (Ch. 3): compact ``(i, k)`` jointly.

    >>> print(coo_recipe())
    coo: make_dense() -> compact([i, k])
    """
    return Recipe("coo", (step(make_dense), step(compact, ("i", "k"))))


def bcsr_recipe(R: int, C: int) -> Recipe:
    """Fig. 5.7's BCSR script: closed-form ``kk = col // C``, ``k = col - C*kk``.

    >>> bcsr_recipe(2, 4).steps[2].label
    'tile(k, 4)'
    """
    return Recipe("bcsr", (
        step(make_dense), step(tile, "i", R), step(tile, "k", C),
        step(permute, ("ii", "kk", "i", "k")), step(compact_and_pad, "kk", identity=0)))


def dia_recipe(n_rows: int, max_slots: int | None = None) -> Recipe:
    """Fig. 5.8's DIA script: diagonal ``d = col - i + (M-1)``, ``A_prime[d, i]``.

    >>> print(dia_recipe(5))
    dia: make_dense() -> skew(k, i, -1, name=d) -> shift(d, 4) -> permute([d, i]) -> compact_and_pad(d, identity=0)
    """
    return Recipe("dia", (
        step(make_dense), step(skew, "k", "i", -1, name="d"), step(shift, "d", n_rows - 1),
        step(permute, ("d", "i")),
        step(compact_and_pad, "d", identity=0, **({} if max_slots is None else {"max_slots": max_slots}))))


def ell_recipe(width: int) -> Recipe:
    """Fig. 5.9's ELL script: row-relative ``j``, known ``j < W``, pad rows to ``W``.

    >>> ell_recipe(3).steps[2].label
    'known(j, hi=3)'
    """
    return Recipe("ell", (
        step(csr_space), step(normalize, "j"), step(known, "j", hi=width),
        step(compact_and_pad, "i", identity=_PAD, arrays=("data", "col"))))


def _lower_triangle(space):
    return select(space, space.coords["i"] >= space.coords["l"], label="i >= l")


def csb_recipe(beta: int, symmetric_half: bool = False) -> Recipe:
    """§6.1's CSB script: ``beta x beta`` blocks, ``(i, l)`` compacted jointly.

    >>> csb_recipe(4096, symmetric_half=True).steps[1].label
    'select(i >= l)'
    """
    steps = [step(make_dense, name="l")]
    if symmetric_half:
        steps.append(Step("select(i >= l)", _lower_triangle))
    steps += [step(tile, "i", beta), step(tile, "l", beta), step(permute, ("ii", "ll", "i", "l")),
              step(compact_and_pad, ("i", "l"), identity=0)]
    return Recipe("csb", tuple(steps))


def sell_recipe(C: int, new_of_old: np.ndarray) -> Recipe:
    """SELL-C-sigma (beyond the dissertation, §9.6): sorted rows, slices of ``C``, ragged widths.

    >>> sell_recipe(8, np.arange(3)).steps[-1].label
    "compact_and_pad(s, identity={'data': 0, 'col': -1}, arrays=[data, col], ragged=j)"
    """
    return Recipe("sell", (
        step(csr_space), step(normalize, "j"), step(reorder, "i", new_of_old),
        step(tile, "i", C, outer="s", inner="r"), step(permute, ("s", "j", "r")),
        step(compact_and_pad, "s", identity=_PAD, arrays=("data", "col"), ragged="j")))


#: Recipe factories by format name (HYB composes the ELL and COO pieces).
RECIPES: dict[str, Callable[..., Recipe]] = {
    "csr": csr_recipe, "coo": coo_recipe, "bcsr": bcsr_recipe, "dia": dia_recipe,
    "ell": ell_recipe, "csb": csb_recipe, "sell": sell_recipe,
}


# ----------------------------------------------------------------------------- inspectors

def to_csr(A: Any, *, dtype: Any = None) -> CSR:
    """CSR through make-dense + compact-and-pad (Listing 5.3); equals scipy's CSR.

    >>> import scipy.sparse as sp
    >>> to_csr(sp.csr_array([[0.0, 2.0]])).indices.tolist()
    [1]
    """
    csr = canonical_csr(A, dtype=dtype)
    res = csr_recipe().run(csr)
    return CSR(tuple(csr.shape), _index(res.offset_index, "csr: nnz"),
               _index(res.explicit_index["k"], "csr: column"), res.a_prime["data"])


def to_coo(A: Any, *, dtype: Any = None) -> COO:
    """COO sorted by (row, col): coalescing ``(i, k)``; values read through ``col_inv``.

    >>> import scipy.sparse as sp
    >>> c = to_coo(sp.csr_array([[0.0, 2.0], [3.0, 0.0]]))
    >>> c.row.tolist(), c.col.tolist(), c.data.tolist()
    ([0, 1], [1, 0], [2.0, 3.0])
    """
    csr = canonical_csr(A, dtype=dtype)
    res = coo_recipe().run(csr)
    return COO(tuple(csr.shape), _index(res.explicit_index["i"], "coo: row"),
               _index(res.explicit_index["k"], "coo: col"), csr.data[res.col_inv])


def to_bcsr(A: Any, R: int = 4, C: int = 4, *, dtype: Any = None) -> BCSR:
    """BCSR with ``R x C`` zero-filled blocks (any R, C >= 1; ragged edges allowed).

    >>> import scipy.sparse as sp
    >>> to_bcsr(sp.identity(3, format="csr"), 2, 2).bcol.tolist()
    [0, 1]
    """
    R, C = _param("bcsr", "R", R), _param("bcsr", "C", C)
    csr = canonical_csr(A, dtype=dtype)
    res = bcsr_recipe(R, C).run(csr)
    return BCSR(tuple(csr.shape), R, C, _index(res.offset_index, "bcsr: block count"),
                _index(res.explicit_index["kk"], "bcsr: block column"), res.a_prime["data"])


def _ell_rows(res: PaddedCompaction, csr: sp.csr_array, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-major ``(M, W)`` col/data from a compact-and-pad at ``i`` (empty rows padded)."""
    m = csr.shape[0]
    last = _last_cols(csr)
    data = np.zeros((m, width), dtype=csr.data.dtype)
    col = np.repeat(last[:, None], width, axis=1)
    rows = res.explicit_index["i"]
    data[rows] = res.a_prime["data"]
    block = res.a_prime["col"]
    col[rows] = np.where(block < 0, last[rows][:, None], block)
    return col, data


def _check_layout(fmt: str, layout: str) -> None:
    if layout not in ("row", "col"):
        raise ConfigError(f"{fmt}: layout must be 'row' or 'col', got {layout!r}")


def to_ell(A: Any, width: int | None = None, layout: str = "row", *, dtype: Any = None) -> ELL:
    """ELL of width ``W`` (default: the longest row, at least 1), row- or column-major.

    Every row must fit (:class:`InputError` otherwise; use :func:`to_hyb`).

    >>> import scipy.sparse as sp
    >>> e = to_ell(sp.csr_array([[1.0, 2.0], [0.0, 3.0]]))
    >>> e.col.tolist(), e.data.tolist()
    ([[0, 1], [1, 1]], [[1.0, 2.0], [3.0, 0.0]])
    """
    _check_layout("ell", layout)
    csr = canonical_csr(A, dtype=dtype)
    lens = _row_lengths(csr)
    longest = int(lens.max()) if lens.size else 0
    width = max(longest, 1) if width is None else _param("ell", "width", width)
    if longest > width:
        r = int(np.argmax(lens))
        raise InputError(f"ell: row {r} has {longest} non-zeros, more than width {width}; "
                         "use to_hyb for an ELL+COO split")
    col, data = _ell_rows(ell_recipe(width).run(csr), csr, width)
    if layout == "col":
        col, data = np.ascontiguousarray(col.T), np.ascontiguousarray(data.T)
    return ELL(tuple(csr.shape), width, layout, col, data)


def to_dia(A: Any, max_diagonals: int | None = None, max_fill: float = 20.0, *, dtype: Any = None) -> DIA:
    """DIA: one ``M``-slot row per occupied diagonal, offsets sorted.

    Refuses (:class:`InputError`) when more than ``max_diagonals`` diagonals are
    occupied or the ``ND * M`` slots exceed ``max_fill`` times the non-zeros.

    >>> import scipy.sparse as sp
    >>> d = to_dia(sp.csr_array([[1.0, 2.0], [0.0, 3.0]]))
    >>> d.offsets.tolist(), d.data.tolist()
    ([0, 1], [[1.0, 3.0], [2.0, 0.0]])
    """
    csr = canonical_csr(A, dtype=dtype)
    m, k = csr.shape
    rows = np.repeat(np.arange(m, dtype=np.int64), _row_lengths(csr))
    occupied = np.bincount(csr.indices - rows + (m - 1), minlength=m + k - 1) if csr.nnz else np.zeros(0)
    nd = int(np.count_nonzero(occupied))
    if max_diagonals is not None and nd > _param("dia", "max_diagonals", max_diagonals, lo=0):
        raise InputError(f"dia: the matrix occupies {nd} diagonals, more than max_diagonals={max_diagonals}")
    slots = nd * m
    if slots > max_fill * max(csr.nnz, 1):
        raise InputError(f"dia: {nd} diagonals x {m} rows = {slots} slots for {csr.nnz} non-zeros "
                         f"(fill {slots / max(csr.nnz, 1):.1f} > max_fill={max_fill})")
    res = dia_recipe(m).run(csr)
    offsets = res.explicit_index["d"] - (m - 1)
    return DIA(tuple(csr.shape), offsets.astype(_INDEX), res.a_prime["data"])


def _check_symmetric(csr: sp.csr_array) -> None:
    diff = (csr - csr.T).tocoo()
    bad = np.flatnonzero(diff.data != 0)
    if bad.size:
        r, c = int(diff.row[bad[0]]), int(diff.col[bad[0]])
        raise InputError(f"csb: symmetric_half=True needs a symmetric matrix, but "
                         f"A[{r}, {c}] = {csr[r, c]} and A[{c}, {r}] = {csr[c, r]}")


def to_csb(A: Any, beta: int = 4096, symmetric_half: bool = False, *, dtype: Any = None) -> CSB:
    """CSB: ``beta x beta`` blocks of COO entries with 16-bit in-block offsets.

    ``beta <= 65536`` is required so the offsets fit ``uint16``.
    ``symmetric_half=True`` needs a square symmetric matrix and stores the lower
    triangle with the diagonal (A@B and A.T@B then share it, as in LOBPCG).

    >>> import scipy.sparse as sp
    >>> c = to_csb(sp.csr_array([[1.0, 2.0], [2.0, 3.0]]), beta=1, symmetric_half=True)
    >>> c.blk_ptr.tolist(), c.data.tolist()
    ([0, 1, 1, 2, 3], [1.0, 2.0, 3.0])
    """
    beta = _param("csb", "beta", beta, hi=_UINT16_MAX + 1)
    csr = canonical_csr(A, dtype=dtype, square=symmetric_half)
    if symmetric_half:
        _check_symmetric(csr)
    m, k = csr.shape
    n_blocks = (-(-m // beta)) * (-(-k // beta))
    if n_blocks > max(8 * csr.nnz, 1 << 16):
        raise ConfigError(f"csb: beta={beta} gives {n_blocks} blocks for {csr.nnz} non-zeros; "
                          "blk_ptr would dwarf the matrix, use a larger beta")
    res = csb_recipe(beta, symmetric_half).run(csr)
    for lv in ("i", "l"):  # the 16-bit safety check reads the levels' dense bounds
        if res.space.bounds[lv][1] - 1 > _UINT16_MAX:
            raise ConfigError(f"csb: in-block offset {lv} reaches {res.space.bounds[lv][1] - 1} > 65535")
    return CSB(tuple(csr.shape), beta, _index(res.offset_index, "csb: nnz"),
               res.explicit_index["i"].astype(np.uint16), res.explicit_index["l"].astype(np.uint16),
               res.a_prime["data"], symmetric_half=bool(symmetric_half))


def choose_hyb_width(A: Any, *, ell_slot_bytes: int | None = None, coo_entry_bytes: int | None = None,
                     min_width: int = 1, max_width: int | None = None) -> int:
    """The ELL width ``W`` minimising ``W*M*ell_slot_bytes + overflow(W)*coo_entry_bytes``.

    ``overflow(W)`` is the number of non-zeros beyond column ``W`` of their row
    (the COO part).  Defaults: a slot is value + int32 column, a COO entry value
    + two int32 indices.  Ties go to the smaller ``W``.

    >>> import scipy.sparse as sp
    >>> A = sp.csr_array(np.vstack([np.ones((1, 50)), np.eye(50)[:30] + np.eye(50, k=1)[:30]]))
    >>> choose_hyb_width(A)
    2
    """
    csr = canonical_csr(A)
    return _hyb_width(_row_lengths(csr), csr.data.dtype.itemsize, ell_slot_bytes, coo_entry_bytes,
                      min_width, max_width)


def _hyb_width(lens: np.ndarray, item: int, ell_slot_bytes: int | None, coo_entry_bytes: int | None,
               min_width: int, max_width: int | None) -> int:
    slot = item + 4 if ell_slot_bytes is None else ell_slot_bytes
    entry = item + 8 if coo_entry_bytes is None else coo_entry_bytes
    min_width = _param("hyb", "min_width", min_width)
    longest = int(lens.max()) if lens.size else 0
    top = max(longest, min_width)
    if max_width is not None:
        top = max(min(top, _param("hyb", "max_width", max_width)), min_width)
    hist = np.bincount(lens, minlength=max(longest, top) + 1)
    longer = lens.size - np.cumsum(hist)          # longer[w]: rows with more than w entries
    overflow = np.cumsum(longer[::-1])[::-1]      # overflow[W] = sum_{w >= W} longer[w]
    widths = np.arange(min_width, top + 1)
    cost = widths * lens.size * slot + overflow[widths] * entry
    return int(widths[np.argmin(cost)])


def to_hyb(A: Any, width: int | None = None, *, dtype: Any = None) -> HYB:
    """HYB: the first ``W`` entries of each row in column-major ELL, the rest in COO.

    ``width=None`` picks ``W`` with :func:`choose_hyb_width`.

    >>> import scipy.sparse as sp
    >>> h = to_hyb(sp.csr_array([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]]), width=1)
    >>> h.ell.data.tolist(), h.coo.col.tolist()
    ([[1.0, 4.0]], [1, 2])
    """
    csr = canonical_csr(A, dtype=dtype)
    width = (_hyb_width(_row_lengths(csr), csr.data.dtype.itemsize, None, None, 1, None)
             if width is None else _param("hyb", "width", width))
    space = normalize(csr_space(csr), "j")
    in_ell, rest = split(space, space.coords["j"] < width, label=f"j < {width}")
    padded = compact_and_pad(known(in_ell, "j", hi=width), "i", identity=_PAD, arrays=("data", "col"))
    col, data = _ell_rows(padded, csr, width)
    ell = ELL(tuple(csr.shape), width, "col", np.ascontiguousarray(col.T), np.ascontiguousarray(data.T))
    coal = compact(rest, ("i", "j"))
    coo = COO(tuple(csr.shape), _index(coal.explicit_index["i"], "hyb: row"),
              csr.indices[coal.col_inv], csr.data[coal.col_inv])
    return HYB(tuple(csr.shape), ell, coo)


def _sell_order(lens: np.ndarray, sigma: int) -> np.ndarray:
    """``perm[new] = old``: rows by decreasing length inside each window of ``sigma`` rows."""
    longest = int(lens.max()) if lens.size else 0
    window = np.arange(lens.size, dtype=np.int64) // sigma
    return np.argsort(window * (longest + 1) + (longest - lens), kind="stable")


def to_sell(A: Any, C: int = 8, sigma: int | None = None, *, dtype: Any = None) -> SELL:
    """SELL-C-sigma: rows sorted by length in windows of ``sigma`` (default ``32*C``), slices of ``C``.

    >>> import scipy.sparse as sp
    >>> s = to_sell(sp.csr_array([[1.0, 0.0], [2.0, 3.0]]), C=2, sigma=2)
    >>> s.perm.tolist(), s.slice_width.tolist(), s.col.tolist(), s.data.tolist()
    ([1, 0], [2], [0, 0, 1, 0], [2.0, 1.0, 3.0, 0.0])
    """
    C = _param("sell", "C", C)
    sigma = 32 * C if sigma is None else _param("sell", "sigma", sigma)
    csr = canonical_csr(A, dtype=dtype)
    m = csr.shape[0]
    perm = _sell_order(_row_lengths(csr), sigma)
    new_of_old = np.empty(m, dtype=np.int64)
    new_of_old[perm] = np.arange(m, dtype=np.int64)
    res = sell_recipe(C, new_of_old).run(csr)
    n_slices = -(-m // C)
    width = np.zeros(n_slices, dtype=np.int64)
    width[res.explicit_index["s"]] = res.segment_extent
    ptr = np.zeros(n_slices + 1, dtype=np.int64)
    np.cumsum(width * C, out=ptr[1:])
    perm_full = np.full(n_slices * C, m, dtype=_INDEX)
    perm_full[:m] = perm
    col, data = res.a_prime["col"], res.a_prime["data"]
    pad = np.flatnonzero(col < 0)
    if pad.size:  # pad column = the row's last real column (0 for empty and scratch rows)
        s = np.searchsorted(ptr, pad, side="right") - 1
        old = perm_full[s * C + (pad - ptr[s]) % C]
        col[pad] = np.append(_last_cols(csr), 0)[old]
    return SELL(tuple(csr.shape), C, sigma, perm_full, _index(ptr, "sell: padded size"),
                width.astype(_INDEX), col.astype(_INDEX, copy=False), data)


#: Inspector functions by format name.
INSPECTORS: dict[str, Callable[..., SparseFormat]] = {
    "csr": to_csr, "coo": to_coo, "bcsr": to_bcsr, "ell": to_ell, "dia": to_dia,
    "csb": to_csb, "hyb": to_hyb, "sell": to_sell,
}
