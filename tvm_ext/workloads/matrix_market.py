"""Matrix Market loading through ``scipy.io.mmread``.

scipy (>= 1.12) reads Matrix Market with the ``fast_matrix_market`` C++ core,
handles general / symmetric / skew-symmetric / hermitian / pattern files and
expands the stored triangle.  This module only adds the plugin's contract:
canonical CSR (sorted, no duplicates, the dtype you ask for) and one clear
:class:`~tvm_ext.errors.MatrixFormatError` naming the file and the problem.

Pattern files carry no values; they load with value 1.0.

>>> from tvm_ext.workloads import bundled_path
>>> A = read_matrix_market(bundled_path("LFAT5"), dtype="float32")
>>> A.shape, A.nnz, A.dtype.name
((14, 14), 46, 'float32')
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import scipy.io
import scipy.sparse as sp

from tvm_ext.errors import InputError, MatrixFormatError
from tvm_ext.workloads.validation import canonical_csr

__all__ = ["read_matrix_market", "matrix_market_header"]

_FIELDS = {"real", "integer", "pattern", "double", "complex"}
_SYMMETRIES = {"general", "symmetric", "skew-symmetric", "hermitian"}


def matrix_market_header(path: str | os.PathLike) -> dict[str, str]:
    """Parse the banner line: ``{'format', 'field', 'symmetry'}``."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            first = fh.readline().decode("ascii", "replace").strip()
    except OSError as e:
        raise MatrixFormatError(f"{path}: cannot open ({e.strerror})") from None
    if not first:
        raise MatrixFormatError(f"{path}: empty file (no Matrix Market banner)")
    parts = first.split()
    if len(parts) != 5 or parts[0].lower() != "%%matrixmarket" or parts[1].lower() != "matrix":
        raise MatrixFormatError(f"{path}: not a Matrix Market file (banner is {first[:60]!r})")
    fmt, field, sym = (p.lower() for p in parts[2:])
    if fmt not in {"coordinate", "array"}:
        raise MatrixFormatError(f"{path}: unsupported format {fmt!r} in banner")
    if field not in _FIELDS:
        raise MatrixFormatError(f"{path}: unsupported field {field!r} in banner")
    if sym not in _SYMMETRIES:
        raise MatrixFormatError(f"{path}: unsupported symmetry {sym!r} in banner")
    return {"format": fmt, "field": field, "symmetry": sym}


def read_matrix_market(
    path: str | os.PathLike, *, dtype: Any = "float64", allow_nan: bool = False
) -> sp.csr_array:
    """Read a ``.mtx`` file as canonical CSR with the requested value dtype.

    Symmetric, skew-symmetric and hermitian files are expanded to the full
    matrix; duplicate entries are summed (the Matrix Market convention).
    """
    path = Path(path)
    header = matrix_market_header(path)
    if header["field"] == "complex" or header["symmetry"] == "hermitian":
        raise MatrixFormatError(f"{path}: complex matrices are not supported")
    try:
        raw = scipy.io.mmread(str(path))
    except (ValueError, OverflowError, IndexError, EOFError) as e:
        msg = str(e).strip().rstrip(".") or type(e).__name__
        raise MatrixFormatError(f"{path}: {msg[0].lower() + msg[1:]}") from None
    if isinstance(raw, np.ndarray):
        raw = sp.coo_array(raw)
    try:
        return canonical_csr(raw, dtype=dtype, allow_nan=allow_nan, what=str(path))
    except InputError as e:
        raise MatrixFormatError(str(e)) from None
