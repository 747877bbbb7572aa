"""Sparse storage formats as plain containers of numpy arrays (scipy style).

Each format is a frozen dataclass of arrays plus the logical ``shape``; it holds
no behaviour beyond ``nbytes``/``to_scipy``.  Inspectors (``inspectors.py``)
build them from a canonical CSR; executors (``executors/``) consume them.
Index arrays are int32 (CSB's in-block offsets are uint16); values use the
matrix dtype.  Padding slots hold value 0 (the identity of ``+=``) and a column
index that is valid to read, so executors need no guards.

Layouts (``M x K`` matrix, ``nnz`` stored entries):

* :class:`CSR` ``indptr[M+1], indices[nnz], data[nnz]``.
* :class:`COO` ``row[nnz], col[nnz], data[nnz]``, sorted by (row, col).
* :class:`BCSR` ``R x C`` blocks: ``indptr[MB+1]`` over block rows
  (``MB = ceil(M/R)``), ``bcol[nb]`` block-column index, ``data[nb, R, C]``
  dense, zero-filled.  Element ``(ii*R + r, bcol[b]*C + c)`` is
  ``data[b, r, c]``.  Reads of B rows past ``K`` are possible when ``K % C``:
  executors pad B to ``KB*C`` rows.
* :class:`ELL` width ``W``: ``col`` and ``data`` of shape ``(M, W)`` when
  ``layout == "row"`` or ``(W, M)`` when ``layout == "col"``.  Padding has
  value 0 and column = the row's last real column (0 for empty rows).
* :class:`DIA` ``offsets[ND]`` (sorted, ``k = col - row``) and
  ``data[ND, M]`` with ``data[d, i] = A[i, i + offsets[d]]`` (0 where
  ``i + offsets[d]`` is outside ``[0, K)``).
* :class:`CSB` ``beta x beta`` blocks: ``blk_ptr[MB*KB + 1]`` over blocks in
  block-row-major order (block ``(ii, ll)`` holds entries
  ``blk_ptr[ii*KB+ll] : blk_ptr[ii*KB+ll+1]``), ``row_off[nnz]`` and
  ``col_off[nnz]`` (uint16, < beta <= 65536), ``data[nnz]``.
  ``symmetric_half`` marks that only the lower triangle (incl. diagonal) of a
  symmetric matrix is stored.
* :class:`HYB` an ``ELL`` part (``layout == "col"``) of width ``W`` plus a
  ``COO`` remainder for rows longer than ``W``.
* :class:`SELL` SELL-C-sigma: rows sorted by length (descending) inside windows
  of ``sigma`` rows (``perm[new] = old``), grouped into slices of ``C`` rows;
  slice ``s`` has width ``slice_width[s]`` and its entries start at
  ``slice_ptr[s]``, stored column-major inside the slice:
  entry ``j`` of slice-row ``r`` is at ``slice_ptr[s] + j*C + r``.  ``col``
  and ``data`` have ``slice_ptr[-1]`` entries, padding as in ELL.  Rows past
  ``M`` in the last slice are padding rows; ``perm`` has length
  ``n_slices*C`` with padding rows pointing at ``M`` (a scratch row).

>>> import scipy.sparse as sp
>>> A = sp.csr_array([[1.0, 0.0], [0.0, 2.0]])
>>> csr = CSR.from_scipy(A)
>>> csr.shape, csr.nnz
((2, 2), 2)
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import ClassVar

import numpy as np
import scipy.sparse as sp

__all__ = ["SparseFormat", "CSR", "COO", "BCSR", "ELL", "DIA", "CSB", "HYB", "SELL", "FORMATS"]


@dataclass(frozen=True)
class SparseFormat(ABC):
    """Common base: the logical shape and byte accounting."""

    shape: tuple[int, int]
    name: ClassVar[str] = "base"

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype  # type: ignore[attr-defined]

    def arrays(self) -> dict[str, np.ndarray]:
        """The format's arrays by field name (what an executor receives)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, np.ndarray):
                out[f.name] = v
        return out

    @property
    def nbytes(self) -> int:
        """Bytes of every stored array (indices, padding and values)."""
        return int(sum(a.nbytes for a in self.arrays().values()))

    def to_scipy(self) -> sp.csr_array:
        """Back to scipy CSR (for checks); padding drops out."""
        r, c, v = self._triples()
        keep = v != 0
        A = sp.coo_array((v[keep], (r[keep], c[keep])), shape=self.shape).tocsr()
        A.sum_duplicates()
        return A

    @abstractmethod
    def _triples(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rows, cols, values) of every stored slot, padding included."""


@dataclass(frozen=True)
class CSR(SparseFormat):
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    name: ClassVar[str] = "csr"

    @property
    def nnz(self) -> int:
        return int(self.indices.size)

    @classmethod
    def from_scipy(cls, A: sp.csr_array) -> "CSR":
        """Wrap a canonical scipy CSR (no copy)."""
        return cls(tuple(A.shape), A.indptr, A.indices, A.data)

    def _triples(self):
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        return rows, self.indices, self.data


@dataclass(frozen=True)
class COO(SparseFormat):
    row: np.ndarray
    col: np.ndarray
    data: np.ndarray
    name: ClassVar[str] = "coo"

    @property
    def nnz(self) -> int:
        return int(self.row.size)

    def _triples(self):
        return self.row, self.col, self.data


@dataclass(frozen=True)
class BCSR(SparseFormat):
    R: int
    C: int
    indptr: np.ndarray
    bcol: np.ndarray
    data: np.ndarray  # (nb, R, C)
    name: ClassVar[str] = "bcsr"

    @property
    def n_blocks(self) -> int:
        return int(self.bcol.size)

    @property
    def fill(self) -> float:
        """Share of stored slots that hold a non-zero."""
        return float(np.count_nonzero(self.data) / max(self.data.size, 1))

    def _triples(self):
        nbr = self.indptr.size - 1
        brow = np.repeat(np.arange(nbr), np.diff(self.indptr))
        rr = brow[:, None, None] * self.R + np.arange(self.R)[None, :, None]
        cc = self.bcol[:, None, None] * self.C + np.arange(self.C)[None, None, :]
        rr, cc = np.broadcast_arrays(rr, cc)
        keep = (rr < self.shape[0]) & (cc < self.shape[1])
        return rr[keep], cc[keep], self.data[keep]


@dataclass(frozen=True)
class ELL(SparseFormat):
    width: int
    layout: str  # "row" -> (M, W); "col" -> (W, M)
    col: np.ndarray
    data: np.ndarray
    name: ClassVar[str] = "ell"

    def _row_major(self) -> tuple[np.ndarray, np.ndarray]:
        return (self.col, self.data) if self.layout == "row" else (self.col.T, self.data.T)

    def _triples(self):
        col, data = self._row_major()
        rows = np.repeat(np.arange(self.shape[0]), self.width)
        return rows, col.ravel(), data.ravel()


@dataclass(frozen=True)
class DIA(SparseFormat):
    offsets: np.ndarray
    data: np.ndarray  # (ND, M)
    name: ClassVar[str] = "dia"

    def _triples(self):
        m, k = self.shape
        i = np.broadcast_to(np.arange(m), self.data.shape)
        j = i + self.offsets[:, None]
        keep = (j >= 0) & (j < k)
        return i[keep], j[keep], self.data[keep]


@dataclass(frozen=True)
class CSB(SparseFormat):
    beta: int
    blk_ptr: np.ndarray
    row_off: np.ndarray  # uint16
    col_off: np.ndarray  # uint16
    data: np.ndarray
    symmetric_half: bool = False
    name: ClassVar[str] = "csb"

    @property
    def block_grid(self) -> tuple[int, int]:
        b = self.beta
        return (-(-self.shape[0] // b), -(-self.shape[1] // b))

    def _triples(self):
        mb, kb = self.block_grid
        blk = np.repeat(np.arange(mb * kb), np.diff(self.blk_ptr))
        rows = (blk // kb) * self.beta + self.row_off.astype(np.int64)
        cols = (blk % kb) * self.beta + self.col_off.astype(np.int64)
        if self.symmetric_half:
            off = rows != cols
            return (np.concatenate([rows, cols[off]]), np.concatenate([cols, rows[off]]),
                    np.concatenate([self.data, self.data[off]]))
        return rows, cols, self.data


@dataclass(frozen=True)
class HYB(SparseFormat):
    ell: ELL
    coo: COO
    name: ClassVar[str] = "hyb"

    @property
    def dtype(self) -> np.dtype:
        return self.ell.data.dtype

    def arrays(self) -> dict[str, np.ndarray]:
        return {**{f"ell_{k}": v for k, v in self.ell.arrays().items()},
                **{f"coo_{k}": v for k, v in self.coo.arrays().items()}}

    def _triples(self):
        a, b = self.ell._triples(), self.coo._triples()
        return tuple(np.concatenate([x, y]) for x, y in zip(a, b))


@dataclass(frozen=True)
class SELL(SparseFormat):
    C: int
    sigma: int
    perm: np.ndarray
    slice_ptr: np.ndarray
    slice_width: np.ndarray
    col: np.ndarray
    data: np.ndarray
    name: ClassVar[str] = "sell"

    @property
    def n_slices(self) -> int:
        return int(self.slice_width.size)

    def _triples(self):
        rows, cols, vals = [], [], []
        c = self.C
        for s in range(self.n_slices):  # per slice, vectorised inside (checks only)
            w = int(self.slice_width[s])
            seg = slice(int(self.slice_ptr[s]), int(self.slice_ptr[s]) + w * c)
            r_new = s * c + np.tile(np.arange(c), w)
            rows.append(self.perm[r_new])
            cols.append(self.col[seg])
            vals.append(self.data[seg])
        rows_a = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        keep = rows_a < self.shape[0]
        return (rows_a[keep], np.concatenate(cols)[keep] if cols else rows_a,
                np.concatenate(vals)[keep] if vals else np.zeros(0))


#: Format classes by name.
FORMATS: dict[str, type[SparseFormat]] = {
    cls.name: cls for cls in (CSR, COO, BCSR, ELL, DIA, CSB, HYB, SELL)
}
