"""One compiled-kernel cache, keyed by a kernel's signature.

Compiling a TVM kernel costs about a second, so every executor in the plugin
goes through :func:`get_or_build`.  The key is whatever identifies the kernel
(format, parameters, dtype) plus the target.  Two layers:

* an in-process dict, always on;
* an on-disk layer (``export_library`` / ``load_module``) under
  ``$TVM_EXT_CACHE_DIR`` (default ``~/.cache/tvm-ext/kernels``), keyed by a hash
  of the signature, the TVM version, the target *and the kernel's TVMScript*, so
  a changed kernel can never load a stale binary.  Set ``TVM_EXT_CACHE_DIR=off``
  to disable it.

Example::

    >>> from tvm import te
    >>> from tvm_ext.kernel_cache import get_or_build
    >>> def make():
    ...     A = te.placeholder((4,), name="A")
    ...     B = te.compute((4,), lambda i: A[i] * 2, name="B")
    ...     return te.create_prim_func([A, B])
    >>> mod = get_or_build(("double", 4, "float32"), make)
    >>> mod is get_or_build(("double", 4, "float32"), make)
    True
"""
from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any, Callable, Hashable

__all__ = ["get_or_build", "cache_dir", "clear_memory_cache", "cache_info"]

_lock = threading.Lock()
_memory: dict[tuple, Any] = {}
_stats = {"hits": 0, "disk_hits": 0, "builds": 0}


def cache_dir() -> Path | None:
    """Directory of the on-disk kernel cache, or ``None`` when disabled."""
    raw = os.environ.get("TVM_EXT_CACHE_DIR", "")
    if raw.lower() in ("off", "0", "none", "false"):
        return None
    path = Path(raw) if raw else Path.home() / ".cache" / "tvm-ext" / "kernels"
    return path


def clear_memory_cache() -> None:
    """Forget every in-process kernel (the disk layer is left alone)."""
    with _lock:
        _memory.clear()


def cache_info() -> dict[str, int]:
    """Counts of memory hits, disk hits and fresh builds in this process."""
    return dict(_stats, size=len(_memory))


def _as_module(func_or_mod: Any):
    import tvm

    if isinstance(func_or_mod, tvm.IRModule):
        return func_or_mod
    return tvm.IRModule({"main": func_or_mod})


def _disk_key(signature: Hashable, target_str: str, mod) -> str:
    import tvm

    h = hashlib.sha256()
    for part in (repr(signature), tvm.__version__, target_str, mod.script()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _load_from_disk(path: Path):
    import tvm

    try:
        return tvm.runtime.load_module(str(path))
    except Exception:  # corrupt or foreign file: rebuild
        return None


def _save_to_disk(executable, path: Path) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp.so")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        executable.export_library(str(tmp))
        os.replace(tmp, path)
    except Exception:  # read-only home, no compiler: memory cache still works
        tmp.unlink(missing_ok=True)


def get_or_build(signature: Hashable, make: Callable[[], Any], target: Any = None):
    """Return the compiled runtime module for ``signature``, building it once.

    ``make()`` returns a PrimFunc or IRModule; it is only called on a miss.
    The result is a ``tvm.runtime.Module`` whose functions are called by name
    (``mod["main"](...)``) and which supports ``time_evaluator``.
    """
    from tvm_ext.target import resolve_target

    tgt = resolve_target(target)
    tkey = str(tgt)
    key = (signature, tkey)
    with _lock:
        hit = _memory.get(key)
    if hit is not None:
        _stats["hits"] += 1
        return hit
    mod = _as_module(make())
    built = None
    root = cache_dir()
    path = None
    if root is not None:
        path = root / f"{_disk_key(signature, tkey, mod)}.so"
        if path.exists():
            built = _load_from_disk(path)
            if built is not None:
                _stats["disk_hits"] += 1
    if built is None:
        import tvm

        executable = tvm.compile(mod, target=tgt)
        _stats["builds"] += 1
        if path is not None:
            _save_to_disk(executable, path)
        built = executable.mod
    with _lock:
        _memory[key] = built
    return built
