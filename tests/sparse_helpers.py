"""Matrices the sparse recipe tests share."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp


def random_csr_with_empty_row(m: int, k: int, density: float, seed: int, dtype=np.float32) -> sp.csr_array:
    """A random ``m x k`` CSR array whose middle row is empty (when ``m > 2``), explicit zeros removed.

    >>> A = random_csr_with_empty_row(5, 4, 0.9, 0)
    >>> A.shape, int(A[[2]].nnz)
    ((5, 4), 0)
    """
    A = sp.random(m, k, density, format="csr", dtype=dtype, random_state=seed)
    if m > 2:                      # an empty row in the middle
        A = A.tolil()
        A[m // 2, :] = 0
        A = sp.csr_array(A.tocsr())
    A.eliminate_zeros()
    return sp.csr_array(A)
