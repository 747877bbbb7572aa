"""The compiled TIR kernels of a recipe's inspector: count passes, prefix sums, fill passes.

Each ``*_primfunc`` returns one PrimFunc; :func:`kernel` builds it once per target
through the kernel cache; :mod:`.inspector_tir` drives them (which kernel for
which compaction, and the checks between them).  Parallel loops run over chunks
of entries, or of outer iterations, that own disjoint outputs; every prefix sum
is serial (it runs over buckets or outer iterations, not entries).

:func:`segment_compact_primfunc`'s passes for outer iteration ``o`` (entries
``seg_ptr[o]:seg_ptr[o + 1]``, chunks of outer iterations from ``chunk_ptr``):
the count pass gives ``n_new[o]``, the distinct low parts ``key - o * div`` (a
marker over ``div`` per chunk, stamped with ``o``); the fill pass (``offset``
the prefix sum of ``n_new``) ranks the low parts by counting the smaller ones
(a segment holds few), counts the entries per rank, takes first slots by a
prefix sum and scatters the entries stably (``order``, ``key_out``,
``owner``); ``first[g]`` is iteration ``g``'s first entry, by its position
before sorting.  The segment bounds are let-bound before the loops: written as
loads in the loop bounds, TVM 0.27's parallel body read segment 0's bounds in
every chunk.

>>> len(radix_pass_primfunc().params), len(gather_primfunc("float32").params)
(6, 3)
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["RADIX_BITS", "CHUNK_MIN", "radix_pass_primfunc", "bucket_pass_primfunc", "counting_pass_primfunc",
           "group_primfunc",
           "segment_compact_primfunc", "collision_primfunc", "gather_primfunc", "pad_fill_primfunc",
           "kernel", "build_kernels", "as_tensor", "threads"]

#: Bits of the key one radix pass sorts (2048 buckets per chunk: the counts stay in L1/L2).
RADIX_BITS = 11
#: Entries per chunk of the parallel passes (at least; fewer chunks on small inputs).
CHUNK_MIN = 1 << 15


def radix_pass_primfunc():
    """The PrimFunc of one stable LSD radix-sort pass over ``(key, idx)`` pairs by digit ``shift``
    (:func:`counting_pass_primfunc` with digit ``(key >> shift) & (2**RADIX_BITS - 1)``).

    Arguments: ``key_in, idx_in, key_out, idx_out`` (int64, length ``n``),
    ``hist`` (int64 ``[nchunk, 2**RADIX_BITS]`` workspace), ``shift``.

    >>> len(radix_pass_primfunc().params)
    6
    """
    from tvm import tirx

    mask = (1 << RADIX_BITS) - 1
    return counting_pass_primfunc(lambda key, shift: tirx.shift_right(key, shift) & tirx.const(mask, "int64"))


def bucket_pass_primfunc():
    """The PrimFunc of a stable counting sort of ``(key, idx)`` pairs by bucket ``key // div``
    (the outer iteration; :func:`counting_pass_primfunc`), ``hist``'s second extent buckets.

    >>> len(bucket_pass_primfunc().params)
    6
    """
    return counting_pass_primfunc(lambda key, div: key // div)


def counting_pass_primfunc(digit):
    """The PrimFunc of one stable counting-sort pass of ``(key, idx)`` pairs by ``digit(key, arg)``
    (a TIR expression of the key and the kernel's scalar ``arg``, in ``[0, nb)``): per chunk of
    entries a count pass into ``hist[chunk, digit]``, a serial prefix sum over (digit, chunk),
    and a stable scatter pass, both parallel over chunks.

    Arguments: ``key_in, idx_in, key_out, idx_out`` (int64, length ``n``), ``hist`` (int64
    ``[nchunk, nb]`` workspace), ``arg`` (int64).

    >>> len(counting_pass_primfunc(lambda key, arg: key % arg).params)
    6
    """
    from tvm.script import tirx as T

    @T.prim_func
    def counting_pass(k_in: T.handle, i_in: T.handle, k_out: T.handle, i_out: T.handle, h: T.handle,
                      arg: T.int64):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        n = T.int64()
        nchunk = T.int64()
        nb = T.int64()
        key_in = T.match_buffer(k_in, (n,), "int64")
        idx_in = T.match_buffer(i_in, (n,), "int64")
        key_out = T.match_buffer(k_out, (n,), "int64")
        idx_out = T.match_buffer(i_out, (n,), "int64")
        hist = T.match_buffer(h, (nchunk, nb), "int64")
        for c in T.parallel(nchunk):                      # count pass, one chunk of entries each
            for b in range(nb):
                hist[c, b] = T.int64(0)
            for e in range(c * n // nchunk, (c + 1) * n // nchunk):
                d: T.int64 = digit(key_in[e], arg)
                hist[c, d] = hist[c, d] + T.int64(1)
        run = T.alloc_buffer((1,), "int64")
        run[0] = T.int64(0)
        for b in range(nb):                               # prefix sum over (digit, chunk)
            for q in range(nchunk):
                t: T.int64 = hist[q, b]
                hist[q, b] = run[0]
                run[0] = run[0] + t
        for c in T.parallel(nchunk):                      # stable scatter pass
            for e in range(c * n // nchunk, (c + 1) * n // nchunk):
                d: T.int64 = digit(key_in[e], arg)
                p: T.int64 = hist[c, d]
                key_out[p] = key_in[e]
                idx_out[p] = idx_in[e]
                hist[c, d] = p + T.int64(1)

    return counting_pass


def group_primfunc():
    """The PrimFunc of the compacted iterations of sorted ``key`` (outer part ``key // div``).

    Writes ``owner[e]`` (the iteration of entry ``e``), ``starts[g]`` (its first
    entry), ``offset`` (prefix sums of the iterations per outer iteration,
    length ``n_outer + 1``) and ``count[0]``.

    >>> len(group_primfunc().params)
    6
    """
    from tvm.script import tirx as T

    @T.prim_func
    def group(k: T.handle, o: T.handle, s: T.handle, off: T.handle, cnt: T.handle, div: T.int64):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        n = T.int64()
        n_off = T.int64()
        key = T.match_buffer(k, (n,), "int64")
        owner = T.match_buffer(o, (n,), "int64")
        starts = T.match_buffer(s, (n,), "int64")
        offset = T.match_buffer(off, (n_off,), "int64")
        count = T.match_buffer(cnt, (1,), "int64")
        for q in range(n_off):
            offset[q] = T.int64(0)
        count[0] = T.int64(0)
        for e in range(n):                                # count pass
            if e == 0 or key[e] != key[T.max(e - 1, T.int64(0))]:
                starts[count[0]] = e
                count[0] = count[0] + T.int64(1)
                offset[key[e] // div + 1] = offset[key[e] // div + 1] + T.int64(1)
            owner[e] = count[0] - T.int64(1)
        for q in range(n_off - 1):                        # prefix sum
            offset[q + 1] = offset[q + 1] + offset[q]

    return group


def segment_compact_primfunc():
    """The PrimFunc compacting a key whose outer part ``key // div`` is sorted, per outer iteration
    (BCSR's block rows, S-DIA's row tiles, SELL's chunks) and parallel over chunks of them: a count
    pass (distinct low parts, by a marker), then with ``fill`` = 1 the fill pass (see the module docstring).

    >>> len(segment_compact_primfunc().params)
    16
    """
    from tvm.script import tirx as T

    @T.prim_func
    def segment_compact(k: T.handle, sp_: T.handle, cb: T.handle, nn: T.handle, off: T.handle,
                        mk: T.handle, rk: T.handle, ls: T.handle, ct: T.handle, sc: T.handle, od: T.handle,
                        ko: T.handle, ow: T.handle, fs: T.handle, div: T.int64, fill: T.int64):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        n = T.int64()
        n_outer = T.int64()
        nchunk = T.int64()
        span = T.int64()
        lanes = T.int64()
        n_groups = T.int64()
        key = T.match_buffer(k, (n,), "int64")
        seg_ptr = T.match_buffer(sp_, (n_outer + 1,), "int64")
        n_new = T.match_buffer(nn, (n_outer,), "int64")
        chunk_ptr = T.match_buffer(cb, (nchunk + 1,), "int64")
        offset = T.match_buffer(off, (n_outer + 1,), "int64")
        mark = T.match_buffer(mk, (nchunk, lanes), "int64")
        rank = T.match_buffer(rk, (nchunk, lanes), "int64")
        lst = T.match_buffer(ls, (nchunk, span), "int64")
        cnt = T.match_buffer(ct, (nchunk, span), "int64")
        scalars = T.match_buffer(sc, (nchunk, 3), "int64")     # per chunk: distinct count, rank, slot
        order = T.match_buffer(od, (n,), "int64")
        key_out = T.match_buffer(ko, (n,), "int64")
        owner = T.match_buffer(ow, (n,), "int64")
        first = T.match_buffer(fs, (n_groups,), "int64")
        for c in T.parallel(nchunk):
            for b in range(lanes):
                mark[c, b] = T.int64(-1)
            for o in range(chunk_ptr[c], chunk_ptr[c + 1]):
                e_lo: T.int64 = seg_ptr[o]         # not in the loop bounds: see the module docstring
                e_hi: T.int64 = seg_ptr[o + 1]
                scalars[c, 0] = T.int64(0)
                for e in range(e_lo, e_hi):       # count pass
                    lo: T.int64 = key[e] - o * div
                    if mark[c, lo] != o:
                        mark[c, lo] = o
                        lst[c, scalars[c, 0]] = lo
                        scalars[c, 0] = scalars[c, 0] + T.int64(1)
                n_new[o] = scalars[c, 0]
                if fill > 0:                                      # fill pass
                    for r in range(scalars[c, 0]):                # rank = how many low parts are smaller
                        scalars[c, 1] = T.int64(0)
                        for q in range(scalars[c, 0]):
                            scalars[c, 1] = scalars[c, 1] + T.Select(lst[c, q] < lst[c, r], T.int64(1),
                                                                     T.int64(0))
                        rank[c, lst[c, r]] = scalars[c, 1]
                        cnt[c, r] = T.int64(0)
                    for e in range(e_lo, e_hi):
                        r2: T.int64 = rank[c, key[e] - o * div]
                        cnt[c, r2] = cnt[c, r2] + T.int64(1)
                    scalars[c, 2] = e_lo
                    for r in range(scalars[c, 0]):                        # prefix sum: first slots
                        t: T.int64 = cnt[c, r]
                        cnt[c, r] = scalars[c, 2]
                        lst[c, r] = scalars[c, 2]
                        scalars[c, 2] = scalars[c, 2] + t
                    for e in range(e_lo, e_hi):   # stable scatter
                        r3: T.int64 = rank[c, key[e] - o * div]
                        p: T.int64 = cnt[c, r3]
                        if p == lst[c, r3]:
                            first[offset[o] + r3] = e
                        order[p] = e
                        key_out[p] = key[e]
                        owner[p] = offset[o] + r3
                        cnt[c, r3] = p + T.int64(1)

    return segment_compact


def collision_primfunc():
    """The PrimFunc of compact-and-pad's injectivity test (§5.1.3), parallel over chunks of
    entries: every entry writes its index to ``marker[slot[e]]``, then an entry that does not
    read its own index back shares its slot; ``bad[c]`` is chunk ``c``'s first such entry (-1: none).
    A race between two entries of one slot leaves one of them, so a shared slot is always found.

    >>> len(collision_primfunc().params)
    3
    """
    from tvm.script import tirx as T

    @T.prim_func
    def collision(s: T.handle, m: T.handle, b: T.handle):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        n = T.int64()
        total = T.int64()
        nchunk = T.int64()
        slot = T.match_buffer(s, (n,), "int64")
        marker = T.match_buffer(m, (total,), "int64")
        bad = T.match_buffer(b, (nchunk,), "int64")
        for c in T.parallel(nchunk):
            for e in range(c * n // nchunk, (c + 1) * n // nchunk):
                marker[slot[e]] = e
        for c in T.parallel(nchunk):
            bad[c] = T.int64(-1)
            for e in range(c * n // nchunk, (c + 1) * n // nchunk):
                if bad[c] < 0 and marker[slot[e]] != e:
                    bad[c] = e

    return collision


def gather_primfunc(dtype: str = "int64"):
    """The PrimFunc ``out[e] = src[idx[e]]``, parallel over chunks of ``e``.

    >>> len(gather_primfunc("float32").params)
    3
    """
    from tvm.script import tirx as T

    @T.prim_func
    def gather(s: T.handle, i: T.handle, o: T.handle):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        n = T.int64()
        m = T.int64()
        src = T.match_buffer(s, (m,), dtype)
        idx = T.match_buffer(i, (n,), "int64")
        out = T.match_buffer(o, (n,), dtype)
        for c in T.parallel((n + T.int64(CHUNK_MIN) - 1) // T.int64(CHUNK_MIN)):
            for e in range(c * T.int64(CHUNK_MIN), T.min((c + 1) * T.int64(CHUNK_MIN), n)):
                out[e] = src[idx[e]]

    return gather


def pad_fill_primfunc(dtype: str):
    """The fill pass of compact-and-pad: ``a_prime[owner[e] * size + inner[e]] = src[pos[e]]``.

    Parallel over chunks of entries; the caller has checked that the slots are distinct.

    >>> len(pad_fill_primfunc("float64").params)
    6
    """
    from tvm.script import tirx as T

    @T.prim_func
    def pad_fill(a: T.handle, o: T.handle, i: T.handle, s: T.handle, p: T.handle, size: T.int64):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        n = T.int64()
        m = T.int64()
        total = T.int64()
        a_prime = T.match_buffer(a, (total,), dtype)
        owner = T.match_buffer(o, (n,), "int64")
        inner = T.match_buffer(i, (n,), "int64")
        src = T.match_buffer(s, (m,), dtype)
        pos = T.match_buffer(p, (n,), "int64")
        for c in T.parallel((n + T.int64(CHUNK_MIN) - 1) // T.int64(CHUNK_MIN)):
            for e in range(c * T.int64(CHUNK_MIN), T.min((c + 1) * T.int64(CHUNK_MIN), n)):
                a_prime[owner[e] * size + inner[e]] = src[pos[e]]

    return pad_fill


# ----------------------------------------------------------------------------- building and calling

#: Compiled kernels by (name, target): resolving the target costs more than a small matrix's pass.
_KERNELS: dict = {}


def kernel(name: str, make, target: Any = None):
    from tvm_ext.kernel_cache import get_or_build

    key = (name, None if target is None else str(target))
    if key not in _KERNELS:
        _KERNELS[key] = get_or_build(("recipe_inspector", name), make, target)["main"]
    return _KERNELS[key]


def build_kernels(dtype: str = "float32", target: Any = None) -> None:
    """Build (or load from the kernel cache) every kernel the compiled inspector may call on
    values of ``dtype``, so a timed inspection pays no compilation.

    >>> build_kernels("float64")
    """
    kernel("radix_pass", radix_pass_primfunc, target)
    kernel("group", group_primfunc, target)
    kernel("segment_compact", segment_compact_primfunc, target)
    kernel("bucket_pass", bucket_pass_primfunc, target)
    kernel("collision", collision_primfunc, target)
    for dt in dict.fromkeys(("int64", "int32", dtype)):
        kernel(f"gather_{dt}", lambda dt=dt: gather_primfunc(dt), target)
    for dt in dict.fromkeys(("int32", dtype)):
        kernel(f"pad_fill_{dt}", lambda dt=dt: pad_fill_primfunc(dt), target)

def as_tensor(a: np.ndarray):
    import tvm_ffi

    return tvm_ffi.from_dlpack(a, require_alignment=0)


def threads() -> int:
    from tvm_ext.target import num_threads

    return max(int(num_threads()), 1)
