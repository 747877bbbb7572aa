"""Deterministic sparse-matrix generators (seeded, scipy CSR out).

* Stencils from Bell & Garland's set: :func:`lap2d` (5/9-point),
  :func:`lap3d` (7/27-point; 27-point is HPCG's problem).  All are SPD
  M-matrices: positive diagonal, -1 off-diagonal.
* :func:`banded`, :func:`block_fem` (dense r x c blocks), :func:`rmat`
  (R-MAT power-law graphs), :func:`uniform_random`.
* :func:`fem_elasticity`: 2-D Q1 linear elasticity from ``pyamg.gallery``
  (an optional extra), a real FEM assembly with 2 x 2 node blocks.
* :func:`fem_mass_3d`: the Q1 hexahedral mass matrix of a structured 3-D
  mesh; :func:`crystm03_like` sizes it to SuiteSparse crystm03.
* :func:`make_spd` turns any square pattern into a symmetric, strictly
  diagonally dominant (hence SPD) matrix for solvers.

>>> A = lap2d(1000)          # ecology1-sized 2-D 5-point Laplacian
>>> A.shape, A.nnz
((1000000, 1000000), 4996000)
"""
from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from tvm_ext.errors import InputError
from tvm_ext.workloads.validation import canonical_csr

__all__ = ["lap2d", "lap3d", "banded", "block_fem", "rmat", "uniform_random", "make_spd", "fem_elasticity",
           "fem_mass_3d", "crystm03_like", "CRYSTM03_SHAPE"]


def _positive(name: str, value: int) -> int:
    if int(value) != value or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _tri(n: int, lo: float, mid: float, hi: float) -> sp.csr_array:
    return sp.diags_array([np.full(n - 1, lo), np.full(n, mid), np.full(n - 1, hi)],
                          offsets=[-1, 0, 1], shape=(n, n), format="csr")


def _neighbourhood(n: int, dims: int) -> sp.csr_array:
    """0/1 matrix of the full (3^dims - 1)-point neighbourhood plus the centre."""
    S = _tri(n, 1.0, 1.0, 1.0)
    out = S
    for _ in range(dims - 1):
        out = sp.kron(out, S, format="csr")
    return out


def _finish(A, dtype) -> sp.csr_array:
    A = canonical_csr(A, dtype=dtype)
    A.eliminate_zeros()  # kron and diags can store explicit zeros
    return A


def lap2d(n: int, points: int = 5, *, dtype: Any = "float64") -> sp.csr_array:
    """2-D Laplacian on an ``n x n`` grid, natural (row-major) order.

    ``points=5``: diagonal 4, the four axis neighbours -1.
    ``points=9``: diagonal 8, all eight neighbours -1 (Bell & Garland's 9pt).
    """
    n = _positive("n", n)
    if points == 5:
        T, I = _tri(n, -1.0, 2.0, -1.0), sp.identity(n, format="csr")
        A = sp.kron(I, T) + sp.kron(T, I)
    elif points == 9:
        A = 9.0 * sp.identity(n * n, format="csr") - _neighbourhood(n, 2)
    else:
        raise InputError(f"lap2d: points must be 5 or 9, got {points}")
    return _finish(A, dtype)


def lap3d(n: int, points: int = 7, *, dtype: Any = "float64") -> sp.csr_array:
    """3-D Laplacian on an ``n x n x n`` grid, natural order.

    ``points=7``: diagonal 6, axis neighbours -1.
    ``points=27``: diagonal 26, all 26 neighbours -1 (the HPCG matrix).
    """
    n = _positive("n", n)
    if points == 7:
        T, I = _tri(n, -1.0, 2.0, -1.0), sp.identity(n, format="csr")
        A = sp.kron(sp.kron(T, I), I) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(I, I), T)
    elif points == 27:
        A = 27.0 * sp.identity(n ** 3, format="csr") - _neighbourhood(n, 3)
    else:
        raise InputError(f"lap3d: points must be 7 or 27, got {points}")
    return _finish(A, dtype)


def banded(
    n: int, lower: int, upper: int, *, seed: int = 0, spd: bool = False, dtype: Any = "float64"
) -> sp.csr_array:
    """``n x n`` matrix with every diagonal in ``[-lower, upper]`` filled with
    uniform(-1, 1) values.  ``spd=True`` symmetrises it (needs ``lower == upper``)
    and makes it diagonally dominant."""
    n = _positive("n", n)
    if lower < 0 or upper < 0 or lower >= n or upper >= n:
        raise InputError(f"banded: need 0 <= lower, upper < n, got lower={lower}, upper={upper}, n={n}")
    if spd and lower != upper:
        raise InputError("banded: spd=True needs a symmetric band (lower == upper)")
    rng = np.random.default_rng(seed)
    offsets = list(range(-lower, upper + 1))
    diags = [rng.uniform(-1.0, 1.0, n - abs(k)) for k in offsets]
    A = sp.diags_array(diags, offsets=offsets, shape=(n, n), format="csr")
    return make_spd(A, dtype=dtype) if spd else _finish(A, dtype)


def block_fem(
    n_block_rows: int,
    r: int = 3,
    c: int = 3,
    *,
    blocks_per_row: int = 9,
    seed: int = 0,
    spd: bool = False,
    dtype: Any = "float64",
) -> sp.csr_array:
    """FEM-like matrix of dense ``r x c`` blocks.

    Each block row couples to its diagonal block and ``blocks_per_row - 1``
    other block columns drawn from a window around the diagonal (as a mesh
    ordered by a bandwidth-reducing permutation would).  Every block is fully
    dense, so the R x C block fill ratio at (r, c) is exactly 1.
    ``spd=True`` (needs ``r == c``) symmetrises blocks and adds a dominant
    diagonal.
    """
    nb = _positive("n_block_rows", n_block_rows)
    r, c = _positive("r", r), _positive("c", c)
    k = min(_positive("blocks_per_row", blocks_per_row), nb)
    if spd and r != c:
        raise InputError("block_fem: spd=True needs square blocks (r == c)")
    rng = np.random.default_rng(seed)
    window = max(4 * k, 16)
    offs = rng.integers(-window, window + 1, size=(nb, 3 * k))
    bcols = np.clip(np.arange(nb)[:, None] + offs, 0, nb - 1)
    bcols[:, 0] = np.arange(nb)
    # keep the first k distinct block columns of each row (vectorised dedupe)
    keys = np.sort(bcols, axis=1)
    fresh = np.ones_like(keys, dtype=bool)
    fresh[:, 1:] = keys[:, 1:] != keys[:, :-1]
    rank = np.cumsum(fresh, axis=1)
    keep = fresh & (rank <= k)
    brow = np.broadcast_to(np.arange(nb)[:, None], keys.shape)[keep]
    bcol = keys[keep]
    nblk = brow.size
    vals = rng.uniform(-1.0, 1.0, size=(nblk, r, c))
    B = sp.bsr_array((vals, bcol, np.concatenate([[0], np.cumsum(keep.sum(axis=1))])),
                     shape=(nb * r, nb * c))
    return make_spd(B, dtype=dtype) if spd else _finish(B, dtype)


def rmat(
    scale: int,
    edge_factor: int = 16,
    *,
    a: float = 0.57,
    b: float = 0.19,
    c: float = 0.19,
    seed: int = 0,
    permute: bool = True,
    values: str = "ones",
    dtype: Any = "float64",
) -> sp.csr_array:
    """R-MAT power-law graph with ``2**scale`` vertices (Graph500 parameters).

    ``edge_factor * 2**scale`` edges are drawn recursively into quadrants with
    probabilities ``a, b, c, 1-a-b-c``; duplicates collapse.  ``permute``
    relabels vertices randomly (as Graph500 does) so locality is not an
    artefact of the generator.  ``values``: ``"ones"`` or ``"random"``.
    """
    scale = _positive("scale", scale)
    if scale > 30:
        raise InputError(f"rmat: scale {scale} overflows int32 indices")
    d = 1.0 - a - b - c
    if min(a, b, c, d) < 0:
        raise InputError(f"rmat: probabilities a={a}, b={b}, c={c} must sum to <= 1")
    rng = np.random.default_rng(seed)
    n = 1 << scale
    m = edge_factor * n
    rows = np.zeros(m, dtype=np.int64)
    cols = np.zeros(m, dtype=np.int64)
    for bit in range(scale):
        u = rng.random(m)
        right = (u >= a) & (u < a + b) | (u >= a + b + c)
        down = u >= a + b
        rows |= down.astype(np.int64) << bit
        cols |= right.astype(np.int64) << bit
    if permute:
        perm = rng.permutation(n)
        rows, cols = perm[rows], perm[cols]
    if values == "ones":
        data = np.ones(m)
    elif values == "random":
        data = rng.uniform(0.0, 1.0, m)
    else:
        raise InputError(f"rmat: values must be 'ones' or 'random', got {values!r}")
    A = sp.coo_array((data, (rows, cols)), shape=(n, n)).tocsr()
    A.sum_duplicates()
    if values == "ones":
        A.data[:] = 1.0
    return _finish(A, dtype)


def uniform_random(
    m: int, n: int, density: float, *, seed: int = 0, spd: bool = False, dtype: Any = "float64"
) -> sp.csr_array:
    """``m x n`` matrix with uniformly placed non-zeros, values uniform(-1, 1)."""
    m, n = _positive("m", m), _positive("n", n)
    if not 0.0 <= density <= 1.0:
        raise InputError(f"uniform_random: density must be in [0, 1], got {density}")
    rng = np.random.default_rng(seed)
    A = sp.random_array((m, n), density=density, rng=rng, format="csr",
                        data_sampler=lambda size: rng.uniform(-1.0, 1.0, size))
    return make_spd(A, dtype=dtype) if spd else _finish(A, dtype)


def make_spd(A: Any, *, shift: float = 1.0, dtype: Any = "float64") -> sp.csr_array:
    """Symmetric, strictly diagonally dominant version of square ``A`` (SPD).

    Off-diagonal values become ``-(|A| + |A|^T)/2``; the diagonal becomes the
    absolute off-diagonal row sum plus ``shift`` (> 0), so Gershgorin puts
    every eigenvalue at or above ``shift``.

    >>> import scipy.sparse as sp, numpy as np
    >>> S = make_spd(sp.random_array((50, 50), density=0.1, rng=0))
    >>> bool(np.linalg.eigvalsh(S.toarray()).min() > 0)
    True
    """
    A = canonical_csr(A, square=True, what="make_spd input")
    if shift <= 0:
        raise InputError(f"make_spd: shift must be > 0, got {shift}")
    M = abs(A)
    M = (M + M.T) * 0.5
    M.setdiag(0.0)
    M.eliminate_zeros()
    M = -M
    diag = np.asarray(abs(M).sum(axis=1)).ravel() + shift
    return _finish(M + sp.diags_array(diag, format="csr"), dtype)


def fem_elasticity(n: int, *, dtype: Any = "float64") -> sp.csr_array:
    """Plane-strain linear elasticity, bilinear (Q1) elements on an ``n x n`` node grid.

    ``pyamg.gallery.linear_elasticity``: SPD, two interleaved displacement
    unknowns per node (``2 n^2`` rows; 2 x 2 node blocks, 13 non-zeros per
    interior row once the element matrices' exact zeros are dropped).  Needs the optional ``pyamg`` package
    (``pip install 'tvm-ext[pyamg]'``).

    >>> A = fem_elasticity(10)
    >>> A.shape, A.nnz
    ((200, 200), 2216)
    """
    n = _positive("n", n)
    if n < 2:
        raise InputError(f"fem_elasticity: n must be at least 2 (one element), got {n}")
    try:
        from pyamg.gallery import linear_elasticity
    except ImportError as err:
        raise InputError(f"fem_elasticity needs the optional pyamg package ({err}); "
                         "install it with: pip install 'tvm-ext[pyamg]'") from None
    A, _ = linear_elasticity((n, n), format="csr")
    return _finish(A, dtype)


def fem_mass_3d(nx: int, ny: int, nz: int, dofs: int = 3, *, h: float = 1.0,
                density: float = 1.0, dtype: Any = "float64") -> sp.csr_array:
    """Consistent mass matrix of trilinear (Q1) hexahedra on an ``nx x ny x nz`` node grid.

    The Q1 mass matrix of a structured mesh is the tensor product of the 1-D
    linear-element mass matrices ``h/6 * tridiag(1, 4, 1)`` (2 on the end
    diagonal entries); each node carries ``dofs`` displacement components,
    which the mass couples only with themselves (``M_scalar kron I_dofs``,
    node-major).  SPD; an interior row holds 27 non-zeros, so the pattern has
    ``dofs (3nx-2)(3ny-2)(3nz-2)`` of them.

    >>> A = fem_mass_3d(2, 2, 2, dofs=1)
    >>> A.shape, A.nnz, round(float(A.sum()), 6)   # the total mass of one unit cube
    ((8, 8), 64, 1.0)
    """
    nx, ny, nz = (_positive(name, v) for name, v in (("nx", nx), ("ny", ny), ("nz", nz)))
    dofs = _positive("dofs", dofs)
    if min(nx, ny, nz) < 2:
        raise InputError(f"fem_mass_3d: every axis needs at least 2 nodes (one element), "
                         f"got {nx} x {ny} x {nz}")
    for name, v in (("h", h), ("density", density)):
        if not (isinstance(v, (int, float)) and 0 < v < float("inf")):
            raise InputError(f"fem_mass_3d: {name} must be a positive finite number, got {v!r}")

    def mass_1d(n: int) -> sp.csr_array:
        M = _tri(n, 1.0, 4.0, 1.0).tolil()
        M[0, 0] = M[n - 1, n - 1] = 2.0
        return sp.csr_array(M) * (h / 6.0)

    # natural order: x fastest, then y, then z
    M = sp.kron(sp.kron(mass_1d(nz), mass_1d(ny)), mass_1d(nx), format="csr") * density
    if dofs > 1:
        M = sp.kron(M, sp.identity(dofs, format="csr"), format="csr")
    return _finish(M, dtype)


#: SuiteSparse Boeing/crystm03 (FEM crystal free-vibration mass matrix): 24,696 rows, 583,770 nnz.
CRYSTM03_SHAPE = (24_696, 583_770)


def crystm03_like(*, dtype: Any = "float64") -> sp.csr_array:
    """A matrix with crystm03's size and non-zero count, from its known structure.

    crystm03 is the mass matrix of a 3-D crystal FEM model with three
    displacement unknowns per node.  ``24,696 = 3 x 8,232`` and
    ``8,232 = 8 x 21 x 49``: the Q1 hexahedral mass matrix on an
    8 x 21 x 49 node grid (:func:`fem_mass_3d`) has exactly
    ``3 (3*8-2)(3*21-2)(3*49-2) = 583,770`` non-zeros, crystm03's count (the
    values and the node order of the real mesh differ).

    >>> A = crystm03_like()
    >>> (A.shape[0], A.nnz) == CRYSTM03_SHAPE
    True
    """
    return fem_mass_3d(8, 21, 49, dofs=3, dtype=dtype)
