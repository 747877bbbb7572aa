"""Build and load the small C helpers of the sparse executors, privately and hash-checked.

TIR kernels reach C functions through ``T.call_extern``; the symbols must be
in the process before a kernel that uses them is compiled or loaded, so the
library is loaded ``RTLD_GLOBAL``.  Safety rules:

* the shared object is compiled with the system C compiler into a **private
  directory** (mode 0700, owned by this user): ``$TVM_EXT_CACHE_DIR/native``
  beside the kernel cache, or a fresh ``mkdtemp`` directory when that cache is
  off or its directory is not private; never a shared ``/tmp`` path;
* it is written to a ``mkstemp`` file and renamed into place, with its SHA-256
  recorded next to it; before ``dlopen`` the file's hash is checked against
  the record, and a mismatch rebuilds it;
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
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

from tvm_ext.errors import ConfigError

__all__ = ["load_native", "private_dir"]

_CSRC = Path(__file__).with_name("csrc")
_FLAGS = ("-O2", "-std=c11", "-fPIC", "-shared")
_LOCK = threading.Lock()
_LOADED: dict[str, ctypes.CDLL] = {}
_FALLBACK: list[Path] = []


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise ConfigError("the point-to-point executor needs a C compiler (looked for $CC, cc, gcc, "
                          "clang); install one or use the barrier executor (sync='barrier')")
    return cc


def _is_private(path: Path) -> bool:
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
            and (st.st_mode & 0o077) == 0)


def private_dir() -> Path:
    """A directory only this user can write: the cache's ``native`` dir, else a private temp dir."""
    from tvm_ext.kernel_cache import cache_dir

    root = cache_dir()
    if root is not None:
        d = root / "native"
        try:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not _is_private(d) and os.lstat(d).st_uid == os.getuid() and not d.is_symlink():
                os.chmod(d, 0o700)
            if _is_private(d):
                return d
        except OSError:
            pass
    if not _FALLBACK:
        _FALLBACK.append(Path(tempfile.mkdtemp(prefix="tvm-ext-native-")))  # 0700
    return _FALLBACK[0]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build(src: Path, out: Path, cc: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=out.parent, suffix=".so")
    os.close(fd)
    try:
        res = subprocess.run([cc, *_FLAGS, str(src), "-o", tmp], capture_output=True, text=True)
        if res.returncode != 0:
            raise ConfigError(f"compiling {src.name} failed: {res.stderr.strip()[:500]}")
        digest = _sha256(Path(tmp))
        fd, tmp_hash = tempfile.mkstemp(dir=out.parent, suffix=".sha256")
        with os.fdopen(fd, "w") as fh:
            fh.write(digest)
        os.replace(tmp_hash, str(out) + ".sha256")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _verified(out: Path) -> bool:
    rec = Path(str(out) + ".sha256")
    try:
        return out.is_file() and not out.is_symlink() and rec.read_text().strip() == _sha256(out)
    except OSError:
        return False


def load_native(source: str) -> ctypes.CDLL:
    """Compile ``schedules/sparse/csrc/<source>`` once and load it ``RTLD_GLOBAL``.

    Raises :class:`tvm_ext.errors.ConfigError` when no C compiler is found or
    the compilation fails.
    """
    src = _CSRC / source
    with _LOCK:
        if source in _LOADED:
            return _LOADED[source]
        cc = _compiler()
        tag = hashlib.sha256(src.read_bytes() + " ".join((cc, *_FLAGS)).encode()).hexdigest()[:16]
        out = private_dir() / f"lib{src.stem}_{tag}.so"
        if not _verified(out):
            _build(src, out, cc)
            if not _verified(out):
                raise ConfigError(f"{out}: hash check failed right after building it")
        lib = ctypes.CDLL(str(out), mode=ctypes.RTLD_GLOBAL)
        _LOADED[source] = lib
        return lib
