"""Build and load the small C helpers of the sparse executors, privately and hash-checked.

TIR kernels reach C functions through ``T.call_extern``; the symbols must be
in the process before a kernel that uses them is compiled or loaded, so the
library is loaded ``RTLD_GLOBAL``.  It is built and checked like every binary
the plugin loads (see :mod:`tvm_ext.kernel_cache`):

* it goes to ``native/`` (mode 0700) under the checked kernel cache directory,
  or under this process's private ``mkdtemp`` directory when the cache is off or
  read-only; never a shared ``/tmp`` path;
* it is written to a ``mkstemp`` file, fsynced and renamed into place beside a
  record of its size and SHA-256; before ``dlopen``,
  :func:`tvm_ext.kernel_cache.check_binary` checks owner, mode, size and hash,
  and a library that fails is rebuilt and replaced;
* the file name carries the hash of the source and the compiler flags, so a
  changed source never loads a stale binary.

>>> lib = load_native("tvmext_p2p.c")
>>> hasattr(lib, "tvmext_p2p_wait")
True
"""
from __future__ import annotations

import ctypes
import hashlib
import threading
from pathlib import Path

__all__ = ["load_native", "inspect_helpers"]

_CSRC = Path(__file__).with_name("csrc")
_FLAGS = ("-O2", "-std=c11", "-fPIC", "-shared")
_LOCK = threading.Lock()
_LOADED: dict[str, ctypes.CDLL] = {}


def load_native(source: str, *, user: str = "the point-to-point executor",
                alternative: str = "use the barrier executor (sync='barrier')") -> ctypes.CDLL:
    """Compile ``schedules/sparse/csrc/<source>`` once and load it ``RTLD_GLOBAL``.

    Raises :class:`tvm_ext.errors.ConfigError` when no C compiler is found
    (naming ``user``, what needs the library, and ``alternative``) or the
    compilation fails, :class:`tvm_ext.errors.CacheError` when the kernel
    cache directory is not private.
    """
    from tvm_ext.kernel_cache import c_compiler, load_c_library

    src = _CSRC / source
    with _LOCK:
        if source in _LOADED:
            return _LOADED[source]
        cc = c_compiler(user, alternative)
        tag = hashlib.sha256(src.read_bytes() + " ".join((cc, *_FLAGS)).encode()).hexdigest()[:16]
        lib = load_c_library(f"lib{src.stem}_{tag}.so", lambda: [cc, *_FLAGS, str(src), "-o"], what=src.name,
                             subdir="native")
        _LOADED[source] = lib
        return lib


def inspect_helpers() -> ctypes.CDLL | None:
    """The compiled inspector helpers (``csrc/tvmext_inspect.c``: the BCSR block-row passes,
    the row-major ELL fill, the occupied-diagonal marks, the sampled block counts), argument types set; None without a
    C compiler (the callers then use their numpy/scipy paths).

    >>> lib = inspect_helpers()
    >>> lib is None or hasattr(lib, "tvmext_bcsr_count")
    True
    """
    from tvm_ext.errors import ConfigError

    try:
        lib = load_native("tvmext_inspect.c", user="the compiled sparse inspectors",
                          alternative="the inspectors fall back to numpy and scipy")
    except ConfigError:
        return None
    with _LOCK:
        if not getattr(lib, "_tvmext_typed", False):
            i32, i64, ptr = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p
            lib.tvmext_bcsr_count.argtypes = [i32, i32, i32, i32, ptr, ptr, i64, i64, ptr, ptr]
            lib.tvmext_bcsr_count.restype = ctypes.c_int  # 0, or -1 when it could not allocate its marks
            for fill in (lib.tvmext_bcsr_fill_f32, lib.tvmext_bcsr_fill_f64):
                fill.argtypes = [i32, i32, i32, ptr, ptr, ptr, i64, i64, ptr, ptr, ptr, ptr]
            lib.tvmext_mark_diagonals.argtypes = [i32, ptr, ptr, i64, i64, ptr, i64, ptr]
            lib.tvmext_mark_diagonals.restype = i64  # diagonals marked first (stops past the limit)
            lib.tvmext_sampled_block_counts.argtypes = [i32, i32, i32, ptr, ptr, ptr, i64, ptr, i32, ptr]
            lib.tvmext_sampled_block_counts.restype = ctypes.c_int  # 0, or -1 without memory for its marks
            for fn in (lib.tvmext_ell_fill_f32, lib.tvmext_ell_fill_f64):
                fn.argtypes = [i32, ptr, ptr, ptr, i64, i64, ptr, ptr]
            lib.tvmext_bcsr_count_pool.argtypes = [ptr, i64, ptr, i32, i32, i32, i32, ptr, ptr, ptr, ptr]
            lib.tvmext_bcsr_fill_pool.argtypes = [ptr, i32, i64, ptr, i32, i32, i32, ptr, ptr, ptr, ptr, ptr, ptr, ptr]
            for fn in (lib.tvmext_bcsr_count_pool, lib.tvmext_bcsr_fill_pool):
                fn.restype = ctypes.c_int  # 0; -1 without memory for the marks; -2 when TVM's launch failed
            for fn in (lib.tvmext_bcsr_fill_f32, lib.tvmext_bcsr_fill_f64, lib.tvmext_ell_fill_f32,
                       lib.tvmext_ell_fill_f64):
                fn.restype = None
            lib._tvmext_typed = True
    return lib
