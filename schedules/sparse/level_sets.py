"""Venkat 2016 ch. 7 (Listing 7.3): wavefront dependence inspector and level sets.

A sweep over the rows of a sparse matrix in which row ``i`` reads ``x[j]`` for
every stored ``A[i, j]`` and writes ``x[i]`` (Gauss-Seidel, triangular solve)
carries a dependence between rows ``i`` and ``j`` for every off-diagonal entry.
The inspector

1. builds that **dependence graph** from the matrix itself in O(nnz)
   (:func:`dependence_graph`; Listing 7.3: for row ``ip`` and each off-diagonal
   column ``i = colidx[jp]``, one edge between ``i`` and ``ip``, from the lower
   index to the higher; ``lower=False`` reverses every edge, as a backward or
   upper-triangular sweep needs).
   The loop over rows is parallel, as in the dissertation (each row ``ip``
   writes only its own edge list): two row-parallel TIR kernels, count and
   fill, for the (structurally symmetric) patterns of SPD matrices;
2. computes **level sets**: ``level[i] = 1 + max level[j]`` over the
   predecessors ``j`` of ``i``, the same layering as SpMP's ``deriveLevelSets``
   "modified BFS" (Kahn's algorithm layer by layer): the level of a row is the
   length of the longest dependence chain ending in it.  Three algorithms
   give identical levels (``method=``):

   * ``"parallel"``: SpMP's BFS as one TIR kernel: the rows of a level run in
     parallel (``T.parallel``) and release their successors with atomic
     in-degree updates (C11 atomics in ``csrc/tvmext_p2p.c``), as the
     dissertation's inspector does;
   * ``"frontier"``: the same level-synchronous BFS, vectorised in numpy;
   * ``"serial"`` (default): because every edge points from a lower to a
     higher index, natural order is a topological order, so one compiled TIR
     pass over the **matrix itself** does it, with no graph built (the
     inspector of Park et al.'s hand-tuned code, which the dissertation notes
     inspects less): each row pulls from its entries on the earlier side and
     pushes to the rows of its entries on the later side, which covers the
     edges an unsymmetric pattern stores in one row only.  It is the default
     because it is the fastest on the machines measured: about 1 ns per
     non-zero with no graph, no atomics and no launches, where the parallel
     BFS builds the graph, pays an atomic read-modify-write per edge and a
     launch per level, and the frontier pays numpy's per-level overhead
     (``bench.solvers`` times all three);
3. **reorders** the rows so that each level is contiguous (a counting sort by
   level, stable in the original index) and permutes the matrix to
   ``P A P^T`` (``reorder_data``), so executors index the permuted arrays
   directly with no permutation indirection.

>>> from tvm_ext.workloads import lap2d
>>> s = level_sets(lap2d(8))          # 2-D 5-point Laplacian, natural order
>>> s.levels, s.n                      # 2n - 1 wavefronts (anti-diagonals)
(15, 64)
>>> s.level_ptr[:4].tolist(), s.rows_per_level["max"]
([0, 1, 3, 6], 8)
>>> bool((s.matrix.toarray() == lap2d(8).toarray()[s.perm][:, s.perm]).all())
True
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from tvm_ext.errors import InputError
from tvm_ext.workloads import canonical_csr

__all__ = [
    "DependenceGraph", "LevelSchedule", "dependence_graph", "level_sets", "permute_csr",
    "schedule_of_canonical", "levels_by_frontier", "levels_parallel", "LEVEL_METHODS",
]

_I32 = np.int32


@dataclass(frozen=True)
class DependenceGraph:
    """Incoming-edge adjacency (CSR) of a sweep's iteration DAG.

    Row ``i`` of (``indptr``, ``indices``) lists the iterations ``i`` waits for,
    sorted and without duplicates.  With ``lower=True`` every predecessor is
    smaller than ``i``; with ``lower=False`` every predecessor is larger.
    """

    n: int
    indptr: np.ndarray
    indices: np.ndarray
    lower: bool
    #: every edge into row ``i`` is a stored entry of row ``i`` (a structurally
    #: symmetric pattern, or a matrix with no entries on the other side)
    edges_in_rows: bool = False

    @property
    def n_edges(self) -> int:
        """Number of distinct dependence edges."""
        return int(self.indices.size)

    def predecessors(self, i: int) -> np.ndarray:
        """Iterations that must finish before iteration ``i`` starts."""
        return self.indices[self.indptr[i]:self.indptr[i + 1]]


@dataclass(frozen=True)
class LevelSchedule:
    """Level sets of a sweep and the matrix reordered level by level.

    * ``levels``: number of level sets (wavefronts).
    * ``level_ptr[l]:level_ptr[l+1]``: the (new) rows of level ``l``.
    * ``perm[new] = old`` and ``iperm[old] = new`` (int32).
    * ``level_of[old]``: the level of each original row.
    * ``matrix``: ``P A P^T`` in CSR with sorted indices (row ``new`` is the
      original row ``perm[new]``, columns renumbered the same way).
    * ``lower``: the sweep direction the schedule is for (see module doc).
    * ``n_edges``: edges of the dependence graph (``None`` for
      ``method="serial"``, which reads the levels off the matrix and builds no
      graph).
    * ``seconds``: inspector time per stage (``graph``, ``levels``, ``reorder``).
    * ``edges_in_rows``: every dependence of row ``i`` is a stored entry of
      row ``i`` (see :class:`DependenceGraph`).
    """

    n: int
    levels: int
    level_ptr: np.ndarray
    perm: np.ndarray
    iperm: np.ndarray
    level_of: np.ndarray
    matrix: sp.csr_array
    lower: bool
    n_edges: int | None
    seconds: dict[str, float] = field(default_factory=dict)
    edges_in_rows: bool = False

    @property
    def level_sizes(self) -> np.ndarray:
        """Rows in each level."""
        return np.diff(self.level_ptr)

    @property
    def rows_per_level(self) -> dict[str, float]:
        """Min / mean / median / max rows per level (Table 7.1's 'parallelism' is the mean)."""
        sizes = self.level_sizes
        if sizes.size == 0:
            return {"min": 0, "mean": 0.0, "median": 0.0, "max": 0}
        return {"min": int(sizes.min()), "mean": float(sizes.mean()),
                "median": float(np.median(sizes)), "max": int(sizes.max())}

    @property
    def parallelism(self) -> float:
        """Average rows per level (``n / levels``); 1.0 means fully serial."""
        return self.n / self.levels if self.levels else 0.0

    @property
    def inspector_seconds(self) -> float:
        """Total inspector time (graph + levels + reorder)."""
        return float(sum(self.seconds.values()))

    def to_level_order(self, v: np.ndarray) -> np.ndarray:
        """``v`` indexed by original rows -> indexed by new (level-ordered) rows."""
        return np.asarray(v)[self.perm]

    def from_level_order(self, v: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`to_level_order`."""
        return np.asarray(v)[self.iperm]


# --------------------------------------------------------------------------- graph
def _strict_triangle_func():
    """TIR (Listing 7.3's parallel inspector loop): each row ``ip`` builds only its own
    edge list, so the loop over rows is parallel.  Rows are sorted, so the strictly
    lower entries are a prefix of the row and the strictly upper ones a suffix.
    ``count`` sizes every row's list; ``fill`` copies it after a prefix sum."""
    from tvm.script import tirx as T

    @T.prim_func
    def count(indptr_h: T.handle, indices_h: T.handle, cnt_h: T.handle, upper: T.int32):
        n = T.int32()
        np1 = T.int32()
        m = T.int32()
        indptr = T.match_buffer(indptr_h, (np1,), "int32")
        indices = T.match_buffer(indices_h, (m,), "int32")
        cnt = T.match_buffer(cnt_h, (n,), "int32")
        for ip in T.parallel(n):
            start = T.bind(indptr[ip])
            cnt[ip] = 0
            for p in range(indptr[ip + 1] - start):
                jp = T.bind(indices[start + p])
                if (upper == 0 and jp < ip) or (upper != 0 and jp > ip):
                    cnt[ip] = cnt[ip] + 1

    @T.prim_func
    def fill(indptr_h: T.handle, indices_h: T.handle, gptr_h: T.handle, gidx_h: T.handle,
             upper: T.int32):
        np1 = T.int32()
        m = T.int32()
        e = T.int32()
        indptr = T.match_buffer(indptr_h, (np1,), "int32")
        indices = T.match_buffer(indices_h, (m,), "int32")
        gptr = T.match_buffer(gptr_h, (np1,), "int32")
        gidx = T.match_buffer(gidx_h, (e,), "int32")
        for ip in T.parallel(np1 - 1):
            d = T.bind(gptr[ip])
            size = T.bind(gptr[ip + 1] - d)
            src = T.bind(T.if_then_else(upper != 0, indptr[ip + 1] - size, indptr[ip]))
            for p in range(size):
                gidx[d + p] = indices[src + p]

    import tvm

    return tvm.IRModule({"count": count, "fill": fill})


def _strict_triangle(A: sp.csr_array, upper: bool) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of the strictly lower (or upper) pattern of canonical ``A``."""
    import tvm

    n = A.shape[0]
    mod = _kernel("triangle", _strict_triangle_func)
    indptr, indices = _tensor(A.indptr), _tensor(A.indices)
    cnt = tvm.runtime.empty((n,), "int32", tvm.cpu(0))
    mod["count"](indptr, indices, cnt, int(upper))
    gptr = np.zeros(n + 1, dtype=_I32)
    np.cumsum(cnt.numpy(), out=gptr[1:])
    if gptr[-1] == 0:
        return gptr, np.zeros(0, _I32)
    gidx = tvm.runtime.empty((int(gptr[-1]),), "int32", tvm.cpu(0))
    mod["fill"](indptr, indices, _tensor(gptr), gidx, int(upper))
    return gptr, _view(gidx)


def _graph_of_canonical(A: sp.csr_array, lower: bool) -> DependenceGraph:
    """Listing 7.3 for canonical ``A``.

    The predecessors of row ``i`` (``lower=True``) are the columns ``j < i`` of
    row ``i`` plus the rows ``j < i`` with ``A[j, i]`` stored.  For a
    structurally symmetric ``A`` (every SPD matrix) the two sets coincide, so
    the graph is the strictly lower pattern, extracted by the row-parallel TIR
    kernels of :func:`_strict_triangle_func` with no sort; otherwise the
    other triangle is transposed and merged in (scipy, linear).
    """
    n = A.shape[0]
    if n == 0 or A.nnz == 0:
        z = np.zeros(n + 1, dtype=_I32)
        return DependenceGraph(n, z, np.zeros(0, _I32), bool(lower), True)
    own_ptr, own_idx = _strict_triangle(A, upper=not lower)
    other_ptr, other_idx = _strict_triangle(A, upper=lower)
    ones = lambda k: np.ones(k, dtype=np.int8)  # noqa: E731
    other_t = sp.csr_array((ones(other_idx.size), other_idx, other_ptr), shape=A.shape).T.tocsr()
    other_t.sort_indices()
    if (other_t.indptr.size == own_ptr.size and np.array_equal(other_t.indptr, own_ptr)
            and np.array_equal(other_t.indices, own_idx)):
        return DependenceGraph(n, own_ptr, own_idx, bool(lower), True)
    if other_idx.size == 0:
        return DependenceGraph(n, own_ptr, own_idx, bool(lower), True)
    own = sp.csr_array((ones(own_idx.size), own_idx, own_ptr), shape=A.shape)
    G = (own + other_t).tocsr()   # union of two canonical patterns: a linear merge
    G.sort_indices()
    return DependenceGraph(n, G.indptr.astype(_I32, copy=False),
                           G.indices.astype(_I32, copy=False), bool(lower))


def dependence_graph(A: Any, lower: bool = True) -> DependenceGraph:
    """Dependence DAG of a Gauss-Seidel / triangular sweep over square ``A``.

    O(nnz): for a structurally symmetric ``A`` the row-parallel TIR kernels
    of Listing 7.3 alone (each row builds its own edge list, no sort); for an
    unsymmetric pattern a scipy transpose and linear merge follow.  Every
    off-diagonal entry ``A[ip, i]`` gives one edge between ``i`` and ``ip``
    (Listing 7.3); ``lower=True`` directs it from the lower index to the higher
    (forward sweep, lower-triangular solve), ``lower=False`` the other way.
    Diagonal entries give no edge; a symmetric pattern gives each edge once.

    >>> import scipy.sparse as sp
    >>> g = dependence_graph(sp.csr_array([[2., 0, 1], [1, 2, 0], [0, 0, 2]]))
    >>> [g.predecessors(i).tolist() for i in range(3)]
    [[], [0], [0]]
    >>> g.n_edges
    2
    """
    A = canonical_csr(A, square=True, allow_nan=True, what="dependence_graph matrix")
    return _graph_of_canonical(A, lower)


# --------------------------------------------------------------------------- kernels
def _levels_func():
    """TIR: one serial topological pass, ``level[i] = 1 + max level[pred]``.

    Scalars are ``T.bind`` let-bindings (a plain assignment would be a mutable
    local that TVM 0.27 allocates as workspace memory).
    """
    from tvm.script import tirx as T

    @T.prim_func
    def levels(indptr_h: T.handle, indices_h: T.handle, level_h: T.handle, descending: T.int32):
        n = T.int32()
        np1 = T.int32()
        m = T.int32()
        indptr = T.match_buffer(indptr_h, (np1,), "int32")
        indices = T.match_buffer(indices_h, (m,), "int32")
        level = T.match_buffer(level_h, (n,), "int32")
        for ii in range(n):
            i = T.bind(T.if_then_else(descending != 0, n - 1 - ii, ii))
            start = T.bind(indptr[i])
            level[i] = 0
            for p in range(indptr[i + 1] - start):
                level[i] = T.max(level[i], level[indices[start + p]] + 1)

    return levels


def _levels_direct_func():
    """TIR: levels straight from the matrix, one serial pass, no graph built.

    The matrix itself is the dependence graph (Park et al.'s hand-tuned
    inspector, which the dissertation credits with inspecting less): row
    ``i``, visited in sweep order, first *pulls* ``1 + level[j]`` from its
    own entries on the earlier side, then *pushes* ``level[i] + 1`` into the
    rows of its entries on the later side (their edges that only ``A[i, j]``
    stores).  So the levels are those of the full Listing 7.3 graph whether
    or not the pattern is symmetric.  ``later[0]`` counts the pushed entries
    (0: the matrix is triangular in the sweep direction).
    """
    from tvm.script import tirx as T

    @T.prim_func
    def levels_direct(indptr_h: T.handle, indices_h: T.handle, level_h: T.handle,
                      later_h: T.handle, descending: T.int32):
        n = T.int32()
        np1 = T.int32()
        m = T.int32()
        indptr = T.match_buffer(indptr_h, (np1,), "int32")
        indices = T.match_buffer(indices_h, (m,), "int32")
        level = T.match_buffer(level_h, (n,), "int32")
        later = T.match_buffer(later_h, (1,), "int32")
        later[0] = 0
        for i in range(n):
            level[i] = 0
        for ii in range(n):
            i = T.bind(T.if_then_else(descending != 0, n - 1 - ii, ii))
            start = T.bind(indptr[i])
            for p in range(indptr[i + 1] - start):
                j = T.bind(indices[start + p])
                if (descending == 0 and j < i) or (descending != 0 and j > i):
                    level[i] = T.max(level[i], level[j] + 1)
            for p in range(indptr[i + 1] - start):
                j = T.bind(indices[start + p])
                if (descending == 0 and j > i) or (descending != 0 and j < i):
                    level[j] = T.max(level[j], level[i] + 1)
                    later[0] = later[0] + 1

    return levels_direct


def _levels_direct(A: sp.csr_array, lower: bool) -> tuple[np.ndarray, bool]:
    """Levels of canonical ``A``'s sweep read from ``A`` itself, and whether every
    dependence of a row is one of its own entries (no entry on the later side)."""
    import tvm

    n = A.shape[0]
    level = tvm.runtime.empty((n,), "int32", tvm.cpu(0))
    later = tvm.runtime.empty((1,), "int32", tvm.cpu(0))
    indices = A.indices.astype(_I32, copy=False) if A.nnz else np.zeros(1, _I32)
    _kernel("levels_direct", _levels_direct_func)["main"](
        _tensor(A.indptr.astype(_I32, copy=False)), _tensor(indices), level, later,
        0 if lower else 1)
    return _view(level), int(later.numpy()[0]) == 0


def _place_func():
    """TIR: counting sort of rows by level (stable in the original index)."""
    from tvm.script import tirx as T

    @T.prim_func
    def place(level_h: T.handle, cursor_h: T.handle, perm_h: T.handle):
        n = T.int32()
        nl = T.int32()
        level = T.match_buffer(level_h, (n,), "int32")
        cursor = T.match_buffer(cursor_h, (nl,), "int32")
        perm = T.match_buffer(perm_h, (n,), "int32")
        for i in range(n):
            lv = T.bind(level[i])
            perm[cursor[lv]] = i
            cursor[lv] = cursor[lv] + 1

    return place


def _gather_func():
    """TIR: rows of ``P A P^T`` (parallel over new rows); values travel as positions."""
    from tvm.script import tirx as T

    @T.prim_func
    def gather(indptr_h: T.handle, indices_h: T.handle, perm_h: T.handle, iperm_h: T.handle,
               new_indptr_h: T.handle, new_indices_h: T.handle, src_pos_h: T.handle):
        n = T.int32()
        np1 = T.int32()
        m = T.int32()
        indptr = T.match_buffer(indptr_h, (np1,), "int32")
        indices = T.match_buffer(indices_h, (m,), "int32")
        perm = T.match_buffer(perm_h, (n,), "int32")
        iperm = T.match_buffer(iperm_h, (n,), "int32")
        new_indptr = T.match_buffer(new_indptr_h, (np1,), "int32")
        new_indices = T.match_buffer(new_indices_h, (m,), "int32")
        src_pos = T.match_buffer(src_pos_h, (m,), "int32")
        for r in T.parallel(n):
            old = T.bind(perm[r])
            s = T.bind(indptr[old])
            d = T.bind(new_indptr[r])
            for p in range(indptr[old + 1] - s):
                new_indices[d + p] = iperm[indices[s + p]]
                src_pos[d + p] = s + p

    return gather


_KERNELS: dict[str, Any] = {}


def _kernel(name: str, make):
    """Inspector kernels run on the default (host) target; memoised per process."""
    from tvm_ext.kernel_cache import get_or_build

    if name not in _KERNELS:
        _KERNELS[name] = get_or_build(("schedules.sparse.level_sets", name, 1), make)
    return _KERNELS[name]


def _view(t) -> np.ndarray:
    """Zero-copy numpy view of a TVM tensor (DLPack); it keeps the tensor alive."""
    return np.from_dlpack(t)


def _tensor(a: np.ndarray):
    """A TVM tensor of ``a`` for a kernel input: zero-copy (DLPack) when ``a`` is
    contiguous and 64-byte aligned, as the views of earlier kernels' outputs
    are, else a copy.  The kernels only read such inputs."""
    import tvm

    a = np.ascontiguousarray(a)
    if a.size and a.ctypes.data % 64 == 0:
        return tvm.runtime.from_dlpack(a)
    return tvm.runtime.tensor(a, tvm.cpu(0))


def _compute_levels(g: DependenceGraph) -> np.ndarray:
    import tvm

    level = tvm.runtime.empty((g.n,), "int32", tvm.cpu(0))
    indices = g.indices if g.indices.size else np.zeros(1, _I32)  # no zero-size buffers
    _kernel("levels", _levels_func)["main"](_tensor(g.indptr), _tensor(indices), level,
                                            0 if g.lower else 1)
    return level.numpy()


def _counting_sort(level_of: np.ndarray, level_ptr: np.ndarray) -> np.ndarray:
    import tvm

    perm = tvm.runtime.empty((level_of.size,), "int32", tvm.cpu(0))
    cursor = _tensor(level_ptr[:-1].astype(_I32))
    _kernel("place", _place_func)["main"](_tensor(level_of), cursor, perm)
    return _view(perm)


def permute_csr(A: Any, perm: Any) -> sp.csr_array:
    """``P A P^T``: row ``new`` is ``A[perm[new]]`` with columns renumbered by the
    inverse permutation and sorted.  O(nnz) plus per-row sorting.

    >>> import numpy as np, scipy.sparse as sp
    >>> A = sp.csr_array(np.array([[1., 2, 0], [0, 3, 4], [5, 0, 6]]))
    >>> p = np.array([2, 0, 1], dtype=np.int32)
    >>> bool((permute_csr(A, p).toarray() == A.toarray()[p][:, p]).all())
    True
    """
    A = canonical_csr(A, square=True, allow_nan=True, what="permute_csr matrix")
    n = A.shape[0]
    p = np.asarray(perm)
    if p.shape != (n,) or p.dtype.kind not in "iu":
        raise InputError(f"permute_csr: perm must be {n} integers, got shape {p.shape} "
                         f"dtype {p.dtype}")
    if n and (p.min() < 0 or p.max() >= n or not (np.bincount(p, minlength=n) == 1).all()):
        raise InputError(f"permute_csr: perm is not a permutation of 0..{n - 1}")
    p = p.astype(_I32)
    iperm = np.empty_like(p)
    iperm[p] = np.arange(n, dtype=_I32)
    return _permute_canonical(A, p, iperm)


def _permute_canonical(A: sp.csr_array, perm: np.ndarray, iperm: np.ndarray) -> sp.csr_array:
    """:func:`permute_csr` for a canonical ``A`` and a valid int32 ``perm``/``iperm``."""
    n = A.shape[0]
    lengths = np.diff(A.indptr)[perm]
    new_indptr = np.zeros(n + 1, dtype=_I32)
    np.cumsum(lengths, out=new_indptr[1:])
    if A.nnz == 0 or n == 0:
        return sp.csr_array((A.data[:0].copy(), np.zeros(0, _I32), new_indptr), shape=A.shape)
    import tvm

    cpu = tvm.cpu(0)
    new_indices = tvm.runtime.empty((A.nnz,), "int32", cpu)
    src_pos = tvm.runtime.empty((A.nnz,), "int32", cpu)
    _kernel("gather", _gather_func)["main"](
        _tensor(A.indptr), _tensor(A.indices), _tensor(perm), _tensor(iperm),
        _tensor(new_indptr), new_indices, src_pos)
    # sort each row by new column, carrying the source positions (scipy, C++)
    P = sp.csr_array((_view(src_pos), _view(new_indices), new_indptr), shape=A.shape)
    P.has_sorted_indices = False
    P.sort_indices()
    B = sp.csr_array((A.data[P.data], P.indices, P.indptr), shape=A.shape)
    B.has_sorted_indices = True
    return B


def levels_by_frontier(g: DependenceGraph) -> np.ndarray:
    """Level of every row by a vectorised level-synchronous BFS (Kahn's algorithm).

    One step per level: the frontier's successors are gathered at once, their
    in-degrees lowered (``np.subtract.at``), and those that reach zero form the
    next level.  Equals :func:`schedule_of_canonical`'s serial pass.

    >>> import scipy.sparse as sp
    >>> g = dependence_graph(sp.csr_array([[2., 0, 1], [1, 2, 0], [0, 1, 2]]))
    >>> levels_by_frontier(g).tolist()
    [0, 1, 2]
    """
    n = g.n
    level = np.zeros(n, dtype=_I32)
    if n == 0:
        return level
    preds = sp.csr_array((np.ones(g.indices.size, np.int8), g.indices, g.indptr), shape=(n, n))
    succ = preds.T.tocsr()
    sptr, sidx = succ.indptr.astype(np.int64), succ.indices
    indeg = np.diff(g.indptr).astype(np.int64)
    frontier = np.flatnonzero(indeg == 0)
    step = 0
    while frontier.size:
        level[frontier] = step
        starts = sptr[frontier]
        lens = sptr[frontier + 1] - starts
        total = int(lens.sum())
        if total == 0:
            break
        first = np.cumsum(lens) - lens
        targets = sidx[np.repeat(starts - first, lens) + np.arange(total)]
        np.subtract.at(indeg, targets, 1)
        frontier = np.unique(targets[indeg[targets] == 0])
        step += 1
    return level


def _bfs_func():
    """TIR: SpMP's parallel level-set BFS (the dissertation's ``deriveLevelSets``).

    ``queue[ctl[0]:ctl[1]]`` is the current level.  Its rows are processed in
    parallel: each lowers the in-degree of its successors with an atomic
    fetch-and-add (``tvmext_atomic_add``, csrc/tvmext_p2p.c) and the row
    that brings one to zero appends it to the queue (atomic tail, ``ctl[1]``)
    with the next level number.  One launch per level; the loop ends when a
    level adds nothing.
    """
    from tvm.script import tirx as T

    @T.prim_func
    def bfs(sptr_h: T.handle, sidx_h: T.handle, indeg_h: T.handle, queue_h: T.handle,
            level_h: T.handle, ctl_h: T.handle):
        n = T.int32()
        np1 = T.int32()
        m = T.int32()
        sptr = T.match_buffer(sptr_h, (np1,), "int32")
        sidx = T.match_buffer(sidx_h, (m,), "int32")
        indeg = T.match_buffer(indeg_h, (n,), "int32")
        queue = T.match_buffer(queue_h, (n,), "int32")
        level = T.match_buffer(level_h, (n,), "int32")
        ctl = T.match_buffer(ctl_h, (3,), "int32")
        while ctl[0] < ctl[1]:
            lo = T.bind(ctl[0])
            hi = T.bind(ctl[1])
            for f in T.parallel(hi - lo):
                i = T.bind(queue[lo + f])
                start = T.bind(sptr[i])
                for p in range(sptr[i + 1] - start):
                    j = T.bind(sidx[start + p])
                    if T.call_extern("int32", "tvmext_atomic_add", T.address_of(indeg[0]), j,
                                     -1) == 1:
                        pos = T.bind(T.call_extern("int32", "tvmext_atomic_add",
                                                   T.address_of(ctl[0]), 1, 1))
                        queue[pos] = j
                        level[j] = ctl[2] + 1
            ctl[0] = hi
            ctl[2] = ctl[2] + 1

    return bfs


def levels_parallel(g: DependenceGraph) -> np.ndarray:
    """Level of every row by a parallel level-synchronous BFS in TIR (SpMP's
    ``deriveLevelSets``): the rows of a level run in parallel and release their
    successors with atomic in-degree updates (see :func:`_bfs_func`).  Equals
    the serial pass; the order in which a level's rows are found varies from
    run to run, the levels do not.

    >>> import scipy.sparse as sp
    >>> g = dependence_graph(sp.csr_array([[2., 0, 1], [1, 2, 0], [0, 1, 2]]))
    >>> levels_parallel(g).tolist()
    [0, 1, 2]
    """
    import tvm

    from schedules.sparse.native import load_native

    n = g.n
    if n == 0:
        return np.zeros(0, _I32)
    load_native("tvmext_p2p.c")        # the atomics must resolve before the kernel loads
    preds = sp.csr_array((np.ones(g.indices.size, np.int8), g.indices, g.indptr), shape=(n, n))
    succ = preds.T.tocsr()
    indeg = np.diff(g.indptr).astype(_I32)
    queue = np.zeros(n, dtype=_I32)
    first = np.flatnonzero(indeg == 0).astype(_I32)
    queue[:first.size] = first
    level = tvm.runtime.tensor(np.zeros(n, _I32), tvm.cpu(0))
    sidx = succ.indices.astype(_I32) if succ.nnz else np.zeros(1, _I32)
    _kernel("bfs", _bfs_func)["main"](
        _tensor(succ.indptr.astype(_I32)), _tensor(sidx), _tensor(indeg), _tensor(queue), level,
        _tensor(np.array([0, first.size, 0], _I32)))
    return level.numpy()


LEVEL_METHODS = ("serial", "frontier", "parallel")


# --------------------------------------------------------------------------- schedule
def level_sets(A: Any, lower: bool = True, method: str = "serial") -> LevelSchedule:
    """Level sets of the sweep over ``A`` and the level-ordered matrix ``P A P^T``.

    ``A`` goes through :func:`tvm_ext.workloads.canonical_csr` (square, finite,
    sorted, de-duplicated).  Rows inside a level keep their original relative
    order.  An empty (0 x 0) matrix gives zero levels.  ``method``:
    ``"serial"`` (compiled topological pass), ``"frontier"`` (vectorised
    level-synchronous BFS) or ``"parallel"`` (the BFS as a parallel TIR
    kernel with atomics, :func:`levels_parallel`); all give the same schedule.

    >>> from tvm_ext.workloads import lap3d
    >>> level_sets(lap3d(5)).levels    # 3n - 2 for the 7-point 3-D Laplacian
    13
    """
    return schedule_of_canonical(canonical_csr(A, square=True, what="level_sets matrix"), lower,
                                 method)


def schedule_of_canonical(A: sp.csr_array, lower: bool = True,
                          method: str = "serial") -> LevelSchedule:
    """:func:`level_sets` for a matrix already through ``canonical_csr`` (no copy)."""
    if method not in LEVEL_METHODS:
        raise InputError(f"level_sets: method must be one of {LEVEL_METHODS}, got {method!r}")
    n = A.shape[0]
    t0 = time.perf_counter()
    if method == "serial":          # the matrix is the graph: nothing to build
        n_edges, in_rows = None, False
        t1 = time.perf_counter()
        level_of, in_rows = _levels_direct(A, lower) if n else (np.zeros(0, _I32), True)
    else:
        g = _graph_of_canonical(A, lower)
        n_edges, in_rows = g.n_edges, g.edges_in_rows
        t1 = time.perf_counter()
        level_of = levels_by_frontier(g) if method == "frontier" else levels_parallel(g)
    n_levels = int(level_of.max()) + 1 if n else 0
    level_ptr = np.zeros(n_levels + 1, dtype=_I32)
    np.cumsum(np.bincount(level_of, minlength=n_levels), out=level_ptr[1:])
    t2 = time.perf_counter()
    perm = _counting_sort(level_of, level_ptr) if n else np.zeros(0, _I32)
    iperm = np.empty_like(perm)
    iperm[perm] = np.arange(n, dtype=_I32)
    B = _permute_canonical(A, perm, iperm)
    t3 = time.perf_counter()
    return LevelSchedule(n=n, levels=n_levels, level_ptr=level_ptr, perm=perm, iperm=iperm,
                         level_of=level_of, matrix=B, lower=bool(lower), n_edges=n_edges,
                         seconds={"graph": t1 - t0, "levels": t2 - t1, "reorder": t3 - t2},
                         edges_in_rows=in_rows)
