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
import os
import shutil
import subprocess
import threading
from pathlib import Path

from tvm_ext.errors import CacheError, ConfigError

__all__ = ["load_native", "private_dir"]

_CSRC = Path(__file__).with_name("csrc")
_FLAGS = ("-O2", "-std=c11", "-fPIC", "-shared")
_LOCK = threading.Lock()
_LOADED: dict[str, ctypes.CDLL] = {}


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise ConfigError("the point-to-point executor needs a C compiler (looked for $CC, cc, gcc, "
                          "clang); install one or use the barrier executor (sync='barrier')")
    return cc


def private_dir(persistent: bool = True) -> Path:
    """``native/`` under the checked kernel cache (``persistent``), else under the process's private dir."""
    from tvm_ext import kernel_cache

    base = kernel_cache.binary_dir() if persistent else kernel_cache.private_dir()
    return kernel_cache.secure_cache_dir(base / "native")


def _build(src: Path, out: Path, cc: str) -> None:
    from tvm_ext.kernel_cache import store_binary

    def compile_to(tmp: str) -> None:
        res = subprocess.run([cc, *_FLAGS, str(src), "-o", tmp], capture_output=True, text=True)
        if res.returncode != 0:
            raise ConfigError(f"compiling {src.name} failed: {res.stderr.strip()[:500]}")

    store_binary(out, compile_to)


def load_native(source: str) -> ctypes.CDLL:
    """Compile ``schedules/sparse/csrc/<source>`` once and load it ``RTLD_GLOBAL``.

    Raises :class:`tvm_ext.errors.ConfigError` when no C compiler is found or
    the compilation fails, :class:`tvm_ext.errors.CacheError` when the kernel
    cache directory is not private.
    """
    from tvm_ext.kernel_cache import check_binary

    src = _CSRC / source
    with _LOCK:
        if source in _LOADED:
            return _LOADED[source]
        cc = _compiler()
        tag = hashlib.sha256(src.read_bytes() + " ".join((cc, *_FLAGS)).encode()).hexdigest()[:16]
        name = f"lib{src.stem}_{tag}.so"
        try:
            out = private_dir() / name
            if check_binary(out) is not None:
                _build(src, out, cc)
        except OSError:  # a read-only cache directory: build privately
            out = private_dir(persistent=False) / name
            _build(src, out, cc)
        why = check_binary(out)
        if why is not None:  # replaced between our write and now: never dlopen it
            raise CacheError(f"{out}: {why}, right after building it")
        lib = ctypes.CDLL(str(out), mode=ctypes.RTLD_GLOBAL)
        _LOADED[source] = lib
        return lib
