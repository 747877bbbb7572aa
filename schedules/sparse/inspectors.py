"""Venkat 2016 §5.1.4-5.3 and §6.1: format inspectors derived from CSR by transformation recipes.

One public function per format, scipy style (any scipy matrix or 2-D array
in, a container from :mod:`schedules.sparse.formats` out; ``check_finite=False``
skips the NaN/Inf scan, as in ``scipy.linalg``, for a matrix the caller has
already checked, as :func:`~schedules.sparse.plan.inspect` has).  Each starts from
:func:`tvm_ext.workloads.canonical_csr` and evaluates the closed form of its
:class:`Recipe` of :mod:`schedules.sparse.transforms` (vectorised numpy, one
pass over the non-zeros plus at most one near-linear stable sort; BCSR through
a compiled R-way merge of each block row's CSR rows, ``csrc/tvmext_inspect.c``,
which evaluates the same closed form on the host's threads -- scipy's CSR -> BSR
converter without a C compiler), laid out as the container's docstring specifies; running the recipe
itself gives the same arrays:

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

from typing import Any, Callable

import numpy as np
import scipy.sparse as sp

from schedules.sparse.host_threads import CLAIMED_PARTS_PER_THREAD, on_threads, row_ranges
from schedules.sparse.formats import BCSR, COO, CSB, CSR, DIA, ELL, HYB, SELL, SparseFormat
from schedules.sparse.transforms import (
    Recipe, Step, compact, compact_and_pad, csr_space, known, make_dense, normalize, permute, reorder,
    select, shift, skew, step, tile,
)
from tvm_ext.errors import ConfigError, InputError
from tvm_ext.workloads import canonical_csr
from tvm_ext.zero_copy import aligned_copy, empty_aligned, is_aligned

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
    return _aligned(a, _INDEX)


def _aligned(a: np.ndarray, dtype: Any = None) -> np.ndarray:
    """``a`` (cast to ``dtype``) in a 64-byte aligned buffer: ``a`` itself when it already is one.

    The executors read format arrays that start on 64 bytes in place (a DLPack
    view); any other array is copied at build time.
    """
    dt = a.dtype if dtype is None else np.dtype(dtype)
    if a.dtype == dt and a.flags.c_contiguous and is_aligned(a):
        return a
    return aligned_copy(a, dt)


def _zeros(shape: Any, dtype: Any) -> np.ndarray:
    """A zero-filled 64-byte aligned array."""
    out = empty_aligned(shape, dtype)
    out.fill(0)
    return out


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
#
# Each inspector evaluates the closed form its recipe derives (§5.2.2: every
# level's coordinate is an expression of the CSR position ``j``), as the
# inspector code CHiLL generates from a script would: one vectorised pass over
# the non-zeros, plus at most one stable sort where the recipe's compaction
# reorders entries (CSB merges sorted CSR rows, which is near linear; BCSR's
# compaction is a compiled merge of each block row's sorted rows).  ``recipe.run(csr)`` through :mod:`.transforms` gives the same
# arrays; the tests check it.

def _rows(csr: sp.csr_array, dtype=np.int64) -> np.ndarray:
    """Row ``i`` of every non-zero (CSR order)."""
    return np.repeat(np.arange(csr.shape[0], dtype=dtype), np.diff(csr.indptr))


def _ranks(csr: sp.csr_array, rows: np.ndarray) -> np.ndarray:
    """Row-relative position ``j - index(i)`` of every non-zero (ELL's normalised ``j``)."""
    return np.arange(csr.nnz, dtype=np.int64) - csr.indptr[rows].astype(np.int64)


def to_csr(A: Any, *, dtype: Any = None, check_finite: bool = True) -> CSR:
    """CSR through make-dense + compact-and-pad (Listing 5.3); equals scipy's CSR.

    On a canonical CSR the recipe is the identity: ``offset_index = indptr``,
    ``explicit_index[k] = indices``, ``A_prime = data``.  The format shares
    the arrays of a canonical CSR input whose buffers start on 64 bytes (as
    ``scipy.sparse.csr_array(A)`` shares them); others are copied once into
    aligned buffers, which the executors then read in place.

    >>> import scipy.sparse as sp
    >>> to_csr(sp.csr_array([[0.0, 2.0]])).indices.tolist()
    [1]
    """
    csr = canonical_csr(A, dtype=dtype, allow_nan=not check_finite)
    return CSR(tuple(csr.shape), _aligned(csr.indptr, _INDEX), _aligned(csr.indices, _INDEX), _aligned(csr.data))


def to_coo(A: Any, *, dtype: Any = None, check_finite: bool = True) -> COO:
    """COO sorted by (row, col): coalescing ``(i, k)``; values read through ``col_inv``.

    >>> import scipy.sparse as sp
    >>> c = to_coo(sp.csr_array([[0.0, 2.0], [3.0, 0.0]]))
    >>> c.row.tolist(), c.col.tolist(), c.data.tolist()
    ([0, 1], [1, 0], [2.0, 3.0])
    """
    csr = canonical_csr(A, dtype=dtype, allow_nan=not check_finite)
    return COO(tuple(csr.shape), _rows(csr, _INDEX), csr.indices.astype(_INDEX), csr.data.copy())


def to_bcsr(A: Any, R: int = 4, C: int = 4, *, dtype: Any = None, check_finite: bool = True) -> BCSR:
    """BCSR with ``R x C`` zero-filled blocks (any R, C >= 1; ragged edges allowed).

    Fig. 5.7's closed forms: ``ii = i // R``, ``kk = col // C``; blocks are the
    distinct ``(ii, kk)`` in sorted order, ``A_prime[block, i - R*ii, col - C*kk]``
    (the same arrays as ``scipy.sparse``'s ``tobsr`` on the matrix padded to whole blocks).

    >>> import scipy.sparse as sp
    >>> to_bcsr(sp.identity(3, format="csr"), 2, 2).bcol.tolist()
    [0, 1]
    """
    R, C = _param("bcsr", "R", R), _param("bcsr", "C", C)
    csr = canonical_csr(A, dtype=dtype, allow_nan=not check_finite)
    m, k = csr.shape
    n_br = -(-m // R)
    if csr.nnz == 0:
        return BCSR(tuple(csr.shape), R, C, _zeros(n_br + 1, _INDEX), _zeros(0, _INDEX),
                    _zeros((0, R, C), csr.data.dtype))
    native = _native_helpers(csr, R)
    if native is not None:
        return _bcsr_merge(native, csr, R, C)
    return _bcsr_scipy(csr, R, C)


_MAX_NATIVE_R = 64  # tvmext_inspect.c's MAX_R (the fill's merge heads)


def _native_helpers(csr: sp.csr_array, R: int = 1):
    """The compiled inspector helpers (``csrc/tvmext_inspect.c``: the BCSR block-row merge, the
    ELL fill), or None where they do not apply (no C compiler, a value dtype other than
    float32/float64, 64-bit indices, R > 64)."""
    from schedules.sparse.native import inspect_helpers

    if csr.data.dtype not in (np.float32, np.float64) or R > _MAX_NATIVE_R:
        return None
    if csr.indices.dtype != np.int32 or csr.indptr.dtype != np.int32:
        return None
    return inspect_helpers()


def _bcsr_merge(lib, csr: sp.csr_array, R: int, C: int) -> BCSR:
    """BCSR by the compiled block-row passes: a count pass (marks per block column), the
    block pointers, a fill pass (an R-way merge of each block row's rows, or a copy run by run where
    the count found its rows share one pattern); block-row ranges
    run on the host's threads (ctypes releases the GIL), claimed as they go: on TVM's own
    thread pool when TVM is loaded and no :func:`~schedules.sparse.host_threads.inspector_threads`
    cap is below its threads (:func:`_tvm_pool_launch`), else on the inspectors' pool."""
    m, k = csr.shape
    n_br = -(-m // R)
    indptr, indices, values = csr.indptr, csr.indices, csr.data
    ranges = row_ranges(csr, R, CLAIMED_PARTS_PER_THREAD)
    counts = np.empty(n_br, dtype=np.int64)
    pattern = np.empty(n_br, dtype=np.uint8)  # whether a block row's rows share one pattern
    launch = _tvm_pool_launch() if len(ranges) > 1 else None
    cuts = np.array([a for a, _ in ranges] + [ranges[-1][1]], dtype=np.int64)
    if launch is not None:
        status = np.array([lib.tvmext_bcsr_count_pool(launch, len(ranges), cuts.ctypes.data, R, C, m, k,
                                                      indptr.ctypes.data, indices.ctypes.data, counts.ctypes.data,
                                                      pattern.ctypes.data)])
    else:
        status = np.zeros(len(ranges), dtype=np.int64)

        def count(t: int, a: int, b: int) -> None:
            status[t] = lib.tvmext_bcsr_count(R, C, m, k, indptr.ctypes.data, indices.ctypes.data, a, b,
                                              counts[a:].ctypes.data, pattern.ctypes.data)

        on_threads([lambda t=t, a=a, b=b: count(t, a, b) for t, (a, b) in enumerate(ranges)])
    if (status == -2).any():
        raise RuntimeError("bcsr: TVM's thread pool could not run the compiled inspector")
    if status.any():
        raise MemoryError("bcsr: the compiled inspector could not allocate its block-column marks")
    bptr = np.zeros(n_br + 1, dtype=np.int64)
    np.cumsum(counts, out=bptr[1:])
    nb = int(bptr[-1])
    bcol = empty_aligned(nb, _INDEX)
    data = empty_aligned((nb, R, C), values.dtype)
    if launch is not None:
        if lib.tvmext_bcsr_fill_pool(launch, values.dtype.itemsize, len(ranges), cuts.ctypes.data, R, C, m,
                                     indptr.ctypes.data, indices.ctypes.data, values.ctypes.data, bptr.ctypes.data,
                                     bcol.ctypes.data, data.ctypes.data, pattern.ctypes.data):
            raise RuntimeError("bcsr: TVM's thread pool could not run the compiled inspector")
        return BCSR(tuple(csr.shape), R, C, _index(bptr, "bcsr: block count"), bcol, data)
    fill = lib.tvmext_bcsr_fill_f32 if values.dtype == np.float32 else lib.tvmext_bcsr_fill_f64
    on_threads([lambda a=a, b=b: fill(R, C, m, indptr.ctypes.data, indices.ctypes.data, values.ctypes.data,
                                       a, b, bptr.ctypes.data, bcol.ctypes.data, data.ctypes.data,
                                       pattern.ctypes.data)
                for a, b in ranges])
    return BCSR(tuple(csr.shape), R, C, _index(bptr, "bcsr: block count"), bcol, data)


def _tvm_pool_launch() -> int | None:
    """The address of TVM's ``TVMBackendParallelLaunch`` when TVM is loaded in this process and
    the inspectors may use as many threads as TVM's pool has (no lower
    :func:`~schedules.sparse.host_threads.inspector_threads` cap); else None.  Right after a
    product TVM's workers spin waiting for work: the compiled passes run on them then take
    the cores at once, where the inspectors' own pool would share them with the spinning
    workers (elasticity's 2 x 2 BCSR right after the timed candidates: 7.9 -> 3.1 ms best,
    13.8 -> 7.0 ms median, on a loaded 2-core host)."""
    import ctypes
    import sys

    from schedules.sparse.host_threads import host_threads
    from tvm_ext.target import num_threads

    if "tvm" not in sys.modules or host_threads() < num_threads():
        return None
    try:
        return ctypes.cast(ctypes.CDLL(None).TVMBackendParallelLaunch, ctypes.c_void_p).value
    except AttributeError:  # TVM's runtime not loaded into the global namespace
        return None


def _bcsr_scipy(csr: sp.csr_array, R: int, C: int) -> BCSR:
    """BCSR through scipy's CSR -> BSR converter (no C compiler at hand)."""
    m, k = csr.shape
    n_br, n_bc = -(-m // R), -(-k // C)
    # The closed form, evaluated by scipy's compiled CSR -> BSR converter (one pass per block
    # row with a block-column lookup table, then a per-block-row sort of the block columns):
    # 2.5-4x faster than the same closed form in numpy (a stable sort of every non-zero's
    # (ii, kk) key; bench.sparse_inspectors).  Ragged edges: the shape is padded to whole
    # blocks (empty trailing rows, unused columns), which adds no block.
    indptr = csr.indptr
    if n_br * R != m:
        indptr = np.concatenate([indptr, np.full(n_br * R - m, indptr[-1], indptr.dtype)])
    padded = sp.csr_array((csr.data, csr.indices, indptr), shape=(n_br * R, n_bc * C))
    padded.has_sorted_indices = True  # canonical_csr's guarantee, kept by the padding
    bsr = padded.tobsr(blocksize=(R, C), copy=False)
    if not bsr.has_sorted_indices:
        bsr.sort_indices()  # blocks of one block row in block-column order
    return BCSR(tuple(csr.shape), R, C, _index(bsr.indptr, "bcsr: block count"),
                _index(bsr.indices, "bcsr: block column"), _aligned(bsr.data.reshape(-1, R, C)))


def _ell_rows(csr: sp.csr_array, width: int, keep: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Row-major ``(M, W)`` col/data: entry ``j`` of row ``i`` at ``[i, j]``, pads in the row's last column.

    ``keep`` (a mask over the non-zeros) restricts the entries (HYB's ``j < W``).
    """
    m = csr.shape[0]
    native = _native_helpers(csr) if keep is None else None
    if native is not None:
        return _ell_fill(native, csr, width)
    last = _last_cols(csr)
    data = _zeros((m, width), csr.data.dtype)
    col = empty_aligned((m, width), _INDEX)
    col[...] = last[:, None]
    rows = _rows(csr)
    rank = _ranks(csr, rows)
    idx, vals, cols = rows * width + rank, csr.data, csr.indices
    if keep is not None:
        idx, vals, cols = idx[keep], vals[keep], cols[keep]
    data.reshape(-1)[idx] = vals
    col.reshape(-1)[idx] = cols
    return col, data


def _ell_fill(lib, csr: sp.csr_array, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Row-major ELL col/data by the compiled row copy (``tvmext_ell_fill_*``), row ranges on the
    host's threads: the arrays :func:`_ell_rows`' numpy scatter gives, each slot written once."""
    m = csr.shape[0]
    col = empty_aligned((m, width), _INDEX)
    data = empty_aligned((m, width), csr.data.dtype)
    fill = lib.tvmext_ell_fill_f32 if csr.data.dtype == np.float32 else lib.tvmext_ell_fill_f64
    indptr, indices, values = csr.indptr, csr.indices, csr.data
    on_threads([lambda a=a, b=b: fill(width, indptr.ctypes.data, indices.ctypes.data, values.ctypes.data, a, b,
                                       col.ctypes.data, data.ctypes.data)
                for a, b in row_ranges(csr, 1, CLAIMED_PARTS_PER_THREAD)])
    return col, data


def _check_layout(fmt: str, layout: str) -> None:
    if layout not in ("row", "col"):
        raise ConfigError(f"{fmt}: layout must be 'row' or 'col', got {layout!r}")


def to_ell(A: Any, width: int | None = None, layout: str = "row", *, dtype: Any = None,
           check_finite: bool = True) -> ELL:
    """ELL of width ``W`` (default: the longest row, at least 1), row- or column-major.

    Every row must fit (:class:`InputError` otherwise; use :func:`to_hyb`).

    >>> import scipy.sparse as sp
    >>> e = to_ell(sp.csr_array([[1.0, 2.0], [0.0, 3.0]]))
    >>> e.col.tolist(), e.data.tolist()
    ([[0, 1], [1, 1]], [[1.0, 2.0], [3.0, 0.0]])
    """
    _check_layout("ell", layout)
    csr = canonical_csr(A, dtype=dtype, allow_nan=not check_finite)
    lens = _row_lengths(csr)
    longest = int(lens.max()) if lens.size else 0
    width = max(longest, 1) if width is None else _param("ell", "width", width)
    if longest > width:
        r = int(np.argmax(lens))
        raise InputError(f"ell: row {r} has {longest} non-zeros, more than width {width}; "
                         "use to_hyb for an ELL+COO split")
    col, data = _ell_rows(csr, width)
    if layout == "col":
        col, data = _aligned(col.T), _aligned(data.T)
    return ELL(tuple(csr.shape), width, layout, col, data)


def to_dia(A: Any, max_diagonals: int | None = None, max_fill: float = 20.0, *, dtype: Any = None,
           check_finite: bool = True) -> DIA:
    """DIA: one ``M``-slot row per occupied diagonal, offsets sorted.

    Fig. 5.8's closed form: diagonal ``d = col - i + (M-1)``, ``A_prime[rank(d), i]``.
    Refuses (:class:`InputError`) when more than ``max_diagonals`` diagonals are
    occupied or the ``ND * M`` slots exceed ``max_fill`` times the non-zeros.

    >>> import scipy.sparse as sp
    >>> d = to_dia(sp.csr_array([[1.0, 2.0], [0.0, 3.0]]))
    >>> d.offsets.tolist(), d.data.tolist()
    ([0, 1], [[1.0, 3.0], [2.0, 0.0]])
    """
    csr = canonical_csr(A, dtype=dtype, allow_nan=not check_finite)
    m, k = csr.shape
    rows = _rows(csr)
    d = csr.indices - rows + (m - 1)
    occupied = np.bincount(d, minlength=m + k - 1) > 0 if csr.nnz else np.zeros(0, dtype=bool)
    nd = int(np.count_nonzero(occupied))
    if max_diagonals is not None and nd > _param("dia", "max_diagonals", max_diagonals, lo=0):
        raise InputError(f"dia: the matrix occupies {nd} diagonals, more than max_diagonals={max_diagonals}")
    slots = nd * m
    if slots > max_fill * max(csr.nnz, 1):
        raise InputError(f"dia: {nd} diagonals x {m} rows = {slots} slots for {csr.nnz} non-zeros "
                         f"(fill {slots / max(csr.nnz, 1):.1f} > max_fill={max_fill})")
    rank = np.cumsum(occupied, dtype=np.int64) - 1
    data = _zeros((nd, m), csr.data.dtype)
    if csr.nnz:
        data.reshape(-1)[rank[d] * m + rows] = csr.data
    offsets = np.flatnonzero(occupied) - (m - 1)
    return DIA(tuple(csr.shape), offsets.astype(_INDEX), data)


def _check_symmetric(csr: sp.csr_array) -> None:
    diff = (csr - csr.T).tocoo()
    bad = np.flatnonzero(diff.data != 0)
    if bad.size:
        r, c = int(diff.row[bad[0]]), int(diff.col[bad[0]])
        raise InputError(f"csb: symmetric_half=True needs a symmetric matrix, but "
                         f"A[{r}, {c}] = {csr[r, c]} and A[{c}, {r}] = {csr[c, r]}")


def to_csb(A: Any, beta: int = 4096, symmetric_half: bool = False, *, dtype: Any = None,
           check_finite: bool = True) -> CSB:
    """CSB: ``beta x beta`` blocks of COO entries with 16-bit in-block offsets.

    §6.1's closed form: block ``(i // beta, col // beta)``, offsets
    ``(i - beta*ii, col - beta*ll)``; entries grouped by block (row-major over
    the block grid), CSR order inside a block.
    ``beta <= 65536`` is required so the offsets fit ``uint16``.
    ``symmetric_half=True`` needs a square symmetric matrix and stores the lower
    triangle with the diagonal (A@B and A.T@B then share it, as in LOBPCG).

    >>> import scipy.sparse as sp
    >>> c = to_csb(sp.csr_array([[1.0, 2.0], [2.0, 3.0]]), beta=1, symmetric_half=True)
    >>> c.blk_ptr.tolist(), c.data.tolist()
    ([0, 1, 1, 2, 3], [1.0, 2.0, 3.0])
    """
    beta = _param("csb", "beta", beta, hi=_UINT16_MAX + 1)
    csr = canonical_csr(A, dtype=dtype, allow_nan=not check_finite, square=symmetric_half)
    if symmetric_half:
        _check_symmetric(csr)
    m, k = csr.shape
    n_br, n_bc = -(-m // beta), -(-k // beta)
    n_blocks = n_br * n_bc
    if n_blocks > max(8 * csr.nnz, 1 << 16):
        raise ConfigError(f"csb: beta={beta} gives {n_blocks} blocks for {csr.nnz} non-zeros; "
                          "blk_ptr would dwarf the matrix, use a larger beta")
    rows = _rows(csr)
    cols = csr.indices.astype(np.int64)
    vals = csr.data
    if symmetric_half:
        low = rows >= cols
        rows, cols, vals = rows[low], cols[low], vals[low]
    key = (rows // beta) * n_bc + cols // beta
    order = np.argsort(key, kind="stable") if n_bc > 1 else None  # one block column: CSR order
    if order is not None:
        rows, cols, vals, key = rows[order], cols[order], vals[order], key[order]
    ptr = np.zeros(n_blocks + 1, dtype=np.int64)
    np.cumsum(np.bincount(key, minlength=n_blocks), out=ptr[1:])
    return CSB(tuple(csr.shape), beta, _index(ptr, "csb: nnz"), (rows % beta).astype(np.uint16),
               (cols % beta).astype(np.uint16), np.array(vals, copy=True), symmetric_half=bool(symmetric_half))


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


def to_hyb(A: Any, width: int | None = None, *, dtype: Any = None, check_finite: bool = True) -> HYB:
    """HYB: the first ``W`` entries of each row in column-major ELL, the rest in COO.

    The split ``j < W`` on the row-relative position (§9.6); ``width=None``
    picks ``W`` with :func:`choose_hyb_width`.

    >>> import scipy.sparse as sp
    >>> h = to_hyb(sp.csr_array([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]]), width=1)
    >>> h.ell.data.tolist(), h.coo.col.tolist()
    ([[1.0, 4.0]], [1, 2])
    """
    csr = canonical_csr(A, dtype=dtype, allow_nan=not check_finite)
    width = (_hyb_width(_row_lengths(csr), csr.data.dtype.itemsize, None, None, 1, None)
             if width is None else _param("hyb", "width", width))
    rows = _rows(csr)
    in_ell = _ranks(csr, rows) < width
    col, data = _ell_rows(csr, width, in_ell)
    ell = ELL(tuple(csr.shape), width, "col", _aligned(col.T), _aligned(data.T))
    rest = ~in_ell
    coo = COO(tuple(csr.shape), _index(rows[rest], "hyb: row"), csr.indices[rest], csr.data[rest])
    return HYB(tuple(csr.shape), ell, coo)


def _sell_order(lens: np.ndarray, sigma: int) -> np.ndarray:
    """``perm[new] = old``: rows by decreasing length inside each window of ``sigma`` rows.

    One stable sort per window (the lengths as a windows x sigma array, sorted
    along its rows), not a sort of every row's (window, length) key.
    """
    m = lens.size
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    sigma = min(sigma, m)
    longest = int(lens.max())
    pad = (-m) % sigma
    key = np.empty(m + pad, dtype=np.int32 if longest < _INT32_MAX else np.int64)
    np.subtract(longest, lens, out=key[:m], casting="unsafe")
    key[m:] = longest + 1  # the last window's missing rows sort after its real ones
    order = np.argsort(key.reshape(-1, sigma), axis=1, kind="stable").astype(np.int64, copy=False)
    order += np.arange(0, m + pad, sigma, dtype=np.int64)[:, None]
    return order.reshape(-1)[:m]


def to_sell(A: Any, C: int = 8, sigma: int | None = None, *, dtype: Any = None,
            check_finite: bool = True) -> SELL:
    """SELL-C-sigma: rows sorted by length in windows of ``sigma`` (default ``32*C``), slices of ``C``.

    Closed form of :func:`sell_recipe`: new row ``n = perm_inv[i]``, slice
    ``s = n // C``, lane ``r = n - C*s``, entry ``j - index(i)`` of the row at
    ``slice_ptr[s] + (j - index(i)) * C + r`` (column-major inside a slice of
    width = its longest row).

    >>> import scipy.sparse as sp
    >>> s = to_sell(sp.csr_array([[1.0, 0.0], [2.0, 3.0]]), C=2, sigma=2)
    >>> s.perm.tolist(), s.slice_width.tolist(), s.col.tolist(), s.data.tolist()
    ([1, 0], [2], [0, 0, 1, 0], [2.0, 1.0, 3.0, 0.0])
    """
    C = _param("sell", "C", C)
    sigma = 32 * C if sigma is None else _param("sell", "sigma", sigma)
    csr = canonical_csr(A, dtype=dtype, allow_nan=not check_finite)
    m = csr.shape[0]
    lens = _row_lengths(csr)
    perm = _sell_order(lens, sigma)
    n_slices = -(-m // C)
    perm_full = np.full(n_slices * C, m, dtype=np.int64)
    perm_full[:m] = perm
    width = np.append(lens, 0)[perm_full].reshape(n_slices, C).max(axis=1) if m else np.zeros(0, np.int64)
    ptr = np.zeros(n_slices + 1, dtype=np.int64)
    np.cumsum(width * C, out=ptr[1:])
    total = int(ptr[-1])
    # every slot starts as a pad: value 0, column = its row's last real column (0 for empty/scratch
    # rows); slot (s, j, r) sits at ptr[s] + j*C + r, so repeating slice s's C pad columns width[s]
    # times lays out every slot in order
    pad_cols = np.concatenate([_last_cols(csr), np.zeros(1, _INDEX)])[perm_full].reshape(n_slices, C)
    col = empty_aligned(total, _INDEX)
    col.reshape(-1, C)[...] = np.repeat(pad_cols, width, axis=0) if total else 0
    data = _zeros(total, csr.data.dtype)
    # entry j of old row i (new row n) at ptr[n // C] + n % C + (j - indptr[i]) * C: a per-row base
    # plus j * C
    new_of_old = np.empty(m, dtype=np.int64)
    new_of_old[perm] = np.arange(m, dtype=np.int64)
    base = ptr[new_of_old // C] + new_of_old % C - csr.indptr[:-1].astype(np.int64) * C
    at = np.repeat(base, lens)
    at += np.arange(0, csr.nnz * C, C, dtype=np.int64)
    data[at] = csr.data
    col[at] = csr.indices
    return SELL(tuple(csr.shape), C, sigma, perm_full.astype(_INDEX), _index(ptr, "sell: padded size"),
                width.astype(_INDEX), col, data)


#: Inspector functions by format name.
INSPECTORS: dict[str, Callable[..., SparseFormat]] = {
    "csr": to_csr, "coo": to_coo, "bcsr": to_bcsr, "ell": to_ell, "dia": to_dia,
    "csb": to_csb, "hyb": to_hyb, "sell": to_sell,
}
