"""The host threads the compiled inspectors split a matrix over.

:func:`row_ranges` cuts a CSR matrix into ranges of block rows with about
equal non-zeros, one per thread (:func:`host_threads`: TVM's thread count, at
most the cores this process may run on, at most an enclosing
:func:`inspector_threads` cap), and :func:`on_threads` runs one GIL-releasing
call per range on a thread pool kept for the process.

>>> import scipy.sparse as sp
>>> A = sp.random(1000, 1000, density=0.3, format="csr")
>>> sum(b - a for a, b in row_ranges(A)) == A.shape[0]
True
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np
import scipy.sparse as sp

__all__ = ["BCSR_THREADED_NNZ", "CLAIMED_PARTS_PER_THREAD", "inspector_threads", "host_threads", "row_ranges",
           "on_threads"]

#: Non-zeros from which the compiled helpers (the BCSR merge, the diagonal marks) split their
#: pass over the host's threads.
BCSR_THREADED_NNZ = 200_000
#: Ranges per thread of the format inspectors' compiled passes (BCSR count and fill, ELL fill),
#: claimed by the threads as they go: after a product TVM's runtime workers spin (yielding) on
#: the cores for a while, and an even split of one range per thread then waits for the thread
#: that shares its core (fem3x3's BCSR build 6.2 ms right after a product, 3.7 ms with TVM's
#: spinning off, measured on a loaded 2-core host).
CLAIMED_PARTS_PER_THREAD = 4


_THREAD_CAP = threading.local()


@contextmanager
def inspector_threads(threads: int) -> Iterator[None]:
    """Cap the compiled inspectors' threads (:func:`row_ranges`) on this thread to ``threads``
    (at least 1) inside the ``with`` block: :func:`~schedules.sparse.plan.inspect` builds a
    format on a thread of its own while its main thread builds the timed candidates, and the
    two together must not ask for more threads than there are cores.

    >>> import scipy.sparse as sp
    >>> with inspector_threads(1):
    ...     len(row_ranges(sp.random(1000, 1000, density=0.3, format="csr")))
    1
    """
    before = getattr(_THREAD_CAP, "threads", None)
    _THREAD_CAP.threads = max(int(threads), 1)
    try:
        yield
    finally:
        _THREAD_CAP.threads = before


def host_threads() -> int:
    """Threads the compiled inspectors may use on this thread: TVM's thread count
    (:func:`~tvm_ext.target.num_threads`), at most the cores this process may run on, and at
    most the cap of an enclosing :func:`inspector_threads`."""
    from tvm_ext.target import num_threads

    cap = getattr(_THREAD_CAP, "threads", None)
    threads = min(num_threads(), len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                  else (os.cpu_count() or 1))
    return max(min(threads, cap) if cap is not None else threads, 1)


def row_ranges(csr: sp.csr_array, R: int = 1, parts_per_thread: int = 1) -> list[tuple[int, int]]:
    """Ranges of block rows of ``R`` rows with about equal non-zeros, ``parts_per_thread`` per
    inspector thread (:func:`host_threads`; one range below :data:`BCSR_THREADED_NNZ`
    non-zeros): the split of the compiled helpers.  With several parts per thread the threads
    claim them as they go (:func:`on_threads`), so a thread that starts late or runs on a busy
    core does fewer.

    >>> import scipy.sparse as sp
    >>> A = sp.random(1000, 1000, density=0.3, format="csr")
    >>> with inspector_threads(1):
    ...     len(row_ranges(A, parts_per_thread=4))
    1
    """
    n_br = -(-csr.shape[0] // R)
    threads = min(host_threads(), n_br) if csr.nnz >= BCSR_THREADED_NNZ else 1
    if threads <= 1:
        return [(0, n_br)]
    parts = min(threads * max(int(parts_per_thread), 1), n_br)
    starts = csr.indptr[::R]  # non-zeros before each block row
    cuts = np.searchsorted(starts, np.linspace(0, csr.nnz, parts + 1)[1:-1], side="left")
    cuts = np.unique(np.concatenate([[0], cuts, [n_br]])).tolist()
    return list(zip(cuts[:-1], cuts[1:]))


def on_threads(calls: list[Callable[[], Any]]) -> None:
    """Run ``calls`` (compiled, GIL-releasing) on up to :func:`host_threads` threads, this one
    and workers of a pool kept for the process (starting a thread waits until the OS runs it:
    tens of microseconds on an idle machine, milliseconds on a busy one, twice per BCSR build).
    Each thread claims the next call until none is left, so with more calls than threads
    (:func:`row_ranges`' ``parts_per_thread``) a thread that starts late, or shares its core
    (with TVM's runtime workers spinning after a kernel, say), runs fewer of them.
    An exception in any call is raised here once all have finished."""
    if len(calls) == 1:
        calls[0]()
        return
    claims = iter(range(len(calls)))
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        while True:
            with lock:
                i = next(claims, None)
            if i is None:
                return
            try:
                calls[i]()
            except BaseException as err:  # every claimed call runs; the first error is raised
                errors.append(err)

    workers = min(host_threads(), len(calls))
    futures = [_pool(workers - 1).submit(work) for _ in range(workers - 1)]
    try:
        work()
    finally:
        for f in futures:
            # a worker that has not started has nothing left to claim: it is not waited for;
            # one that runs a call finishes it before any error leaves (they write shared arrays)
            if not f.cancel():
                f.exception()
    if errors:
        raise errors[0]


_POOL: dict[str, Any] = {"executor": None, "workers": 0}
_POOL_LOCK = threading.Lock()


def _pool(workers: int):
    """The inspectors' thread pool, grown to at least ``workers`` threads."""
    from concurrent.futures import ThreadPoolExecutor

    with _POOL_LOCK:
        if _POOL["workers"] < workers:
            old = _POOL["executor"]
            _POOL.update(executor=ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tvmext-inspect"),
                         workers=workers)
            if old is not None:
                old.shutdown(wait=False)
        return _POOL["executor"]
