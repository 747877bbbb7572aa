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

__all__ = ["load_native"]

_CSRC = Path(__file__).with_name("csrc")
_FLAGS = ("-O2", "-std=c11", "-fPIC", "-shared")
_LOCK = threading.Lock()
_LOADED: dict[str, ctypes.CDLL] = {}


def load_native(source: str) -> ctypes.CDLL:
    """Compile ``schedules/sparse/csrc/<source>`` once and load it ``RTLD_GLOBAL``.

    Raises :class:`tvm_ext.errors.ConfigError` when no C compiler is found or
    the compilation fails, :class:`tvm_ext.errors.CacheError` when the kernel
    cache directory is not private.
    """
    from tvm_ext.kernel_cache import c_compiler, load_c_library

    src = _CSRC / source
    with _LOCK:
        if source in _LOADED:
            return _LOADED[source]
        cc = c_compiler("the point-to-point executor", "use the barrier executor (sync='barrier')")
        tag = hashlib.sha256(src.read_bytes() + " ".join((cc, *_FLAGS)).encode()).hexdigest()[:16]
        lib = load_c_library(f"lib{src.stem}_{tag}.so", lambda: [cc, *_FLAGS, str(src), "-o"], what=src.name,
                             subdir="native")
        _LOADED[source] = lib
        return lib
