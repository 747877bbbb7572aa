"""The iteration space of a sparse loop nest (Venkat 2016 §5.1), inspected from a CSR matrix.

An :class:`IterationSpace` holds the iterations that satisfy the loop nest's
guard, one per stored non-zero: for each named loop level the coordinate of
every inspected non-zero, the level's dense bounds ``[lo, hi)``, the closed
form of the level, and the originating CSR position ``j`` of each non-zero
(``col_inv`` of Listing 5.11).  :func:`csr_space` is Listing 5.1's ``(i, j)``
space, the start of every transformation.

>>> import scipy.sparse as sp
>>> s = csr_space(sp.csr_array([[1.0, 2.0], [0.0, 3.0]]))
>>> s.levels, s.coords["i"].tolist(), s.describe()
(('i', 'j'), [0, 0, 1], 'for i in [0, 2): for j in [0, 3)')
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from tvm_ext.errors import ScheduleError

__all__ = ["IterationSpace", "csr_space"]


@dataclass(frozen=True)
class _Source:
    """The CSR the space was inspected from (read-only, never permuted)."""

    shape: tuple[int, int]
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray

    def gather(self, name: str, pos: np.ndarray) -> np.ndarray:
        """Per-entry values of source array ``name`` ("data", "col" or "row")."""
        if name == "data":
            return self.data[pos]
        if name == "col":
            return self.indices[pos]
        if name == "row":
            return (np.searchsorted(self.indptr, pos, side="right") - 1).astype(self.indices.dtype)
        raise ScheduleError(f"unknown source array {name!r}: expected 'data', 'col' or 'row'")


@dataclass(frozen=True)
class IterationSpace:
    """The guard-satisfying iterations of a loop nest, one per inspected non-zero.

    ``levels`` are the loop levels outer to inner; ``coords[level][e]`` is the
    coordinate of entry ``e`` at that level and lies in ``bounds[level]``
    (``[lo, hi)``, the dense loop's range); ``pos[e]`` is its position ``j`` in
    the source CSR; ``exprs[level]`` the closed form of the level in terms of
    ``j`` and outer levels; ``history`` the transformations applied so far.

    >>> import scipy.sparse as sp
    >>> from schedules.sparse.transforms import make_dense
    >>> s = make_dense(sp.csr_array([[0.0, 5.0]]))
    >>> s.levels, s.bounds["k"], s.coords["k"].tolist()
    (('i', 'k'), (0, 2), [1])
    """

    levels: tuple[str, ...]
    coords: Mapping[str, np.ndarray]
    bounds: Mapping[str, tuple[int, int]]
    exprs: Mapping[str, str]
    pos: np.ndarray
    source: _Source = field(repr=False)
    history: tuple[str, ...] = ()

    @property
    def n(self) -> int:
        """Number of inspected entries."""
        return int(self.pos.size)

    @property
    def shape(self) -> tuple[int, int]:
        """Shape of the source matrix."""
        return self.source.shape

    def extent(self, level: str) -> int:
        """Trip count of the dense loop at ``level``."""
        lo, hi = self.bounds[level]
        return max(hi - lo, 0)

    def values(self, name: str = "data") -> np.ndarray:
        """Per-entry source array ("data", "col" or "row"), in entry order."""
        return self.source.gather(name, self.pos)

    def check(self) -> None:
        """Raise :class:`ScheduleError` unless every coordinate is in bounds."""
        for lv in self.levels:
            c, (lo, hi) = self.coords[lv], self.bounds[lv]
            if c.size and (c.min() < lo or c.max() >= hi):
                raise ScheduleError(f"level {lv!r}: coordinates outside [{lo}, {hi})")

    def describe(self) -> str:
        """The loop nest as text, e.g. ``for i in [0, 4): for k in [0, 4): if k == col[j]``."""
        loops = [f"for {lv} in [{self.bounds[lv][0]}, {self.bounds[lv][1]})" for lv in self.levels]
        guard = " && ".join(f"{lv} == {self.exprs[lv]}" for lv in self.levels if self.exprs[lv] != lv)
        return ": ".join(loops) + (f": if {guard}" if guard else "")

    def entry_name(self, e: int) -> str:
        """Human name of entry ``e``: its matrix position, CSR position and coordinates."""
        j = int(self.pos[e])
        row = int(self.source.gather("row", np.array([j]))[0])
        col = int(self.source.indices[j])
        where = ", ".join(f"{lv}={int(self.coords[lv][e])}" for lv in self.levels)
        return f"A[{row}, {col}] (j={j}; {where})"

    def _level_index(self, level: str) -> int:
        if level not in self.levels:
            raise ScheduleError(f"no loop level {level!r}; levels are {self.levels}")
        return self.levels.index(level)

    def _take(self, idx: np.ndarray) -> "IterationSpace":
        return dataclasses.replace(
            self, coords={lv: c[idx] for lv, c in self.coords.items()}, pos=self.pos[idx])

    def _with(self, note: str, **changes: Any) -> "IterationSpace":
        return dataclasses.replace(self, history=self.history + (note,), **changes)


# ----------------------------------------------------------------------------- sources

def _source_of(csr: Any) -> _Source:
    try:
        indptr, indices, data, shape = csr.indptr, csr.indices, csr.data, tuple(csr.shape)
    except AttributeError:
        raise ScheduleError(
            f"expected a CSR matrix (indptr/indices/data/shape), got {type(csr).__name__}") from None
    if indptr.size != shape[0] + 1 or indices.size != data.size or int(indptr[-1]) != indices.size:
        raise ScheduleError(f"inconsistent CSR arrays for shape {shape}")
    return _Source((int(shape[0]), int(shape[1])), indptr, indices, data)


def _rows_of(src: _Source) -> np.ndarray:
    return np.repeat(np.arange(src.shape[0], dtype=np.int64), np.diff(src.indptr))


def csr_space(csr: Any) -> IterationSpace:
    """Listing 5.1's CSR SpMV iteration space ``(i, j)``: ``j`` is the CSR position.

    ``csr`` is a canonical scipy CSR (see ``canonical_csr``) or a ``CSR`` container.

    >>> import scipy.sparse as sp
    >>> csr_space(sp.csr_array([[1.0, 2.0], [0.0, 3.0]])).coords["j"].tolist()
    [0, 1, 2]
    """
    src = _source_of(csr)
    nnz = src.indices.size
    pos = np.arange(nnz, dtype=np.int64)
    return IterationSpace(
        levels=("i", "j"), coords={"i": _rows_of(src), "j": pos},
        bounds={"i": (0, src.shape[0]), "j": (0, nnz)},
        exprs={"i": "i", "j": "j"}, pos=pos, source=src, history=("csr",))
