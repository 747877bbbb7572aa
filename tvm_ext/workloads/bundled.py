"""Real SuiteSparse matrices shipped inside the package.

| name | what |
|---|---|
| ``nasa4704`` | NASA structural matrix, a GOGETA block-CG workload (pattern, symmetric; 104,756 nnz expanded) |
| ``cora`` | Cora citation graph, the GOGETA GCN workload (symmetric) |
| ``LFAT5`` | tiny 14x14 SPD matrix for hand-checkable tests |

``nasa4704`` is a *pattern* file: it loads with value 1.0 everywhere.  Solvers
that need SPD data should pass it through :func:`~tvm_ext.workloads.make_spd`.

>>> sorted(list_matrices())
['LFAT5', 'cora', 'nasa4704']
>>> load_matrix("nasa4704").nnz
104756
"""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any

import scipy.sparse as sp

from tvm_ext.errors import InputError
from tvm_ext.workloads.matrix_market import read_matrix_market

__all__ = ["list_matrices", "load_matrix", "bundled_path", "resolve_matrix"]

_DESCRIPTIONS = {
    "nasa4704": "NASA structural matrix (SuiteSparse), GOGETA block-CG workload; pattern, symmetric",
    "cora": "Cora citation graph (SuiteSparse/GE-SpMM), GOGETA GCN workload; symmetric",
    "LFAT5": "14x14 SPD matrix (SuiteSparse), for hand-checkable tests",
}


def list_matrices() -> dict[str, str]:
    """Names of the bundled matrices, each with a one-line description."""
    return dict(_DESCRIPTIONS)


def bundled_path(name: str) -> Path:
    """Filesystem path of a bundled ``.mtx`` file."""
    if name not in _DESCRIPTIONS:
        raise InputError(f"unknown bundled matrix {name!r}; available: {', '.join(sorted(_DESCRIPTIONS))}")
    return Path(str(resources.files("tvm_ext.workloads") / "data" / f"{name}.mtx"))


def load_matrix(name: str, *, dtype: Any = "float64") -> sp.csr_array:
    """Load a bundled matrix by name as canonical CSR (symmetric files expanded)."""
    return read_matrix_market(bundled_path(name), dtype=dtype)


def resolve_matrix(name_or_file: str | os.PathLike, *, dtype: Any = "float64") -> sp.csr_array:
    """A bundled name, or a path to a ``.mtx`` file: what the CLI's ``NAME|FILE`` means."""
    text = str(name_or_file)
    if text in _DESCRIPTIONS:
        return load_matrix(text, dtype=dtype)
    path = Path(text)
    if not path.exists():
        raise InputError(
            f"{text!r} is neither a bundled matrix ({', '.join(sorted(_DESCRIPTIONS))}) nor an existing file"
        )
    return read_matrix_market(path, dtype=dtype)
