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

A cached binary is loaded into this process, so the disk layer trusts nothing
it did not check:

* **The directory** is created with mode 0700.  An existing one must be owned
  by the current user and not writable by group or others, and every directory
  above it must be owned by the user or root and not writable by others unless
  it has the sticky bit (like ``/tmp``).  Otherwise :class:`CacheError` names
  the directory and what is wrong; nothing is read from or written to it.  (A
  directory that cannot be created at all, e.g. in a read-only home, only turns
  the disk layer off.)
* **Writes** go to a fresh ``mkstemp`` file in the cache directory, are fsynced,
  renamed over the entry with ``os.replace``, and the directory is fsynced.  A
  JSON sidecar ``<entry>.json`` records the binary's size and SHA-256 and is
  written the same way.
* **Before loading**, :func:`check_binary` requires the entry and its sidecar to
  be regular files (not symlinks) owned by the current user and not writable by
  group or others, and the entry's size and SHA-256 to match the sidecar.  An
  entry that fails (truncated, corrupted, swapped, missing sidecar, wrong owner
  or mode) is never loaded: it is deleted, rebuilt and replaced.  The load
  then opens the checked path; since only this user can write the directory,
  only this user's own processes could swap the file in between.

Binaries that must exist as files even when the disk cache is off (the C
libraries of :func:`load_c_library`) go to :func:`private_dir`, a ``mkdtemp`` directory
(0700) of this process, removed at exit -- never a shared, predictable path.

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

import atexit
import ctypes
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

from tvm_ext.atomic_file import atomic_write, fsync_dir
from tvm_ext.errors import CacheError, ConfigError

__all__ = [
    "get_or_build",
    "cache_dir",
    "secure_cache_dir",
    "binary_dir",
    "private_dir",
    "store_binary",
    "check_binary",
    "c_compiler",
    "load_c_library",
    "clear_memory_cache",
    "cache_info",
]

_lock = threading.Lock()
_memory: dict[tuple, Any] = {}
_stats = {"hits": 0, "disk_hits": 0, "builds": 0, "rejected": 0}
_private: dict[int, Path] = {}  # pid -> this process's private build directory

#: Largest sidecar accepted (a real one is about 100 bytes).
_SIDECAR_MAX = 4096


def cache_dir() -> Path | None:
    """Configured directory of the on-disk kernel cache, or ``None`` when disabled.

    This is only the location (``$TVM_EXT_CACHE_DIR`` or the default); use
    :func:`secure_cache_dir` to create and check it before reading from it.

    >>> cache_dir() is None or isinstance(cache_dir(), Path)
    True
    """
    raw = os.environ.get("TVM_EXT_CACHE_DIR", "")
    if raw.lower() in ("off", "0", "none", "false"):
        return None
    if raw:
        return Path(raw).expanduser()
    try:
        return Path.home() / ".cache" / "tvm-ext" / "kernels"
    except RuntimeError:  # no home directory: no disk cache
        return None


def clear_memory_cache() -> None:
    """Forget every in-process kernel (the disk layer is left alone)."""
    with _lock:
        _memory.clear()


def cache_info() -> dict[str, int]:
    """Counts of memory hits, disk hits, fresh builds and rejected disk entries in this process."""
    return dict(_stats, size=len(_memory))


# ---------------------------------------------------------------------------
# directories
# ---------------------------------------------------------------------------
def _current_uid() -> int:
    """The user whose files the cache trusts (the effective uid)."""
    return os.geteuid()


def _mode_problem(st: os.stat_result) -> str | None:
    writable = [who for who, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if st.st_mode & bit]
    if writable:
        return f"is writable by {' and '.join(writable)} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _owner_problem(st: os.stat_result, uid: int) -> str | None:
    if st.st_uid != uid:
        return f"is owned by uid {st.st_uid}, not by you (uid {uid})"
    return None


def _refuse(path: Path, why: str) -> CacheError:
    return CacheError(f"kernel cache directory {path}: {why}; refusing to use it (only you may write it and the "
                      "directories above it: chown/chmod 700, point TVM_EXT_CACHE_DIR at a private directory, "
                      "or set TVM_EXT_CACHE_DIR=off)")


def secure_cache_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (mode 0700) if missing and check it is private; return it as an absolute path.

    Raises :class:`CacheError` when the directory, or a directory above it, lets
    another user replace what is in it; ``OSError`` when it cannot be created.

    >>> import tempfile, stat
    >>> d = secure_cache_dir(Path(tempfile.mkdtemp()) / "kernels")
    >>> oct(stat.S_IMODE(d.stat().st_mode))
    '0o700'
    """
    path = Path(os.path.abspath(Path(path).expanduser()))
    missing = []
    probe = path
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:  # another process made it meanwhile: checked below like any other
            continue
        os.chmod(d, 0o700)  # mkdir's mode is masked by the umask
    uid = _current_uid()
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "is not a directory")
    why = _owner_problem(st, uid) or _mode_problem(st)
    if why:
        raise _refuse(path, why)
    for link in (path, *path.parents):  # a symlink on the way could be swapped by its owner
        lst = os.lstat(link)
        if stat.S_ISLNK(lst.st_mode) and lst.st_uid not in (uid, 0):
            raise _refuse(path, f"{link} is a symlink owned by uid {lst.st_uid}")
    for parent in path.resolve().parents:
        pst = os.stat(parent)
        if pst.st_uid not in (uid, 0):
            raise _refuse(path, f"its parent {parent} is owned by uid {pst.st_uid}, neither you nor root")
        if _mode_problem(pst) and not pst.st_mode & stat.S_ISVTX:
            raise _refuse(path, f"its parent {parent} {_mode_problem(pst)} without the sticky bit")
    return path


def private_dir() -> Path:
    """This process's private build directory: a ``mkdtemp`` (mode 0700), removed at exit.

    >>> import stat
    >>> oct(stat.S_IMODE(private_dir().stat().st_mode)), private_dir() == private_dir()
    ('0o700', True)
    """
    pid = os.getpid()
    with _lock:
        d = _private.get(pid)
        if d is None or not d.is_dir():
            d = Path(tempfile.mkdtemp(prefix="tvm-ext-kernels-"))
            os.chmod(d, 0o700)
            atexit.register(shutil.rmtree, d, True)
            _private[pid] = d
        return d


def _usable_cache_dir() -> Path | None:
    """The checked disk-cache directory; ``None`` when disabled or impossible to create."""
    root = cache_dir()
    if root is None:
        return None
    try:
        return secure_cache_dir(root)
    except CacheError:
        raise
    except OSError:  # read-only home, a file in the way: the memory cache still works
        return None


def binary_dir() -> Path:
    """Where to put a binary that must exist as a file: the checked disk cache, else :func:`private_dir`.

    >>> binary_dir().is_dir()
    True
    """
    return _usable_cache_dir() or private_dir()


# ---------------------------------------------------------------------------
# entries: atomic writes, verification before loading
# ---------------------------------------------------------------------------
def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def _open_entry(path: Path, what: str) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading without following a symlink; check it is a private regular file."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise _BadEntry(f"{what} is missing") from None
    except OSError as e:  # ELOOP: a symlink
        raise _BadEntry(f"{what} cannot be opened safely ({e.strerror})") from None
    st = os.fstat(fd)
    why = None if stat.S_ISREG(st.st_mode) else "is not a regular file"
    why = why or _owner_problem(st, _current_uid()) or _mode_problem(st)
    if why:
        os.close(fd)
        raise _BadEntry(f"{what} {why}")
    return fd, st


class _BadEntry(Exception):
    """Why a cache entry must not be loaded."""


def _hash_fd(fd: int) -> str:
    h = hashlib.sha256()
    while chunk := os.read(fd, 1 << 20):
        h.update(chunk)
    return h.hexdigest()


def _write_file(path: Path, write: Callable[[str], None]) -> tuple[str, int]:
    """``write(tmp)`` into a fresh mkstemp file beside ``path``; fsync it, ``os.replace`` it over ``path``.

    Returns the SHA-256 and size of what was written.
    """
    def write_and_hash(tmp: str) -> tuple[str, int]:
        write(tmp)
        os.chmod(tmp, 0o700)  # a linker recreates its output with the umask's mode
        rfd, st = _open_entry(Path(tmp), "new file")
        try:
            return _hash_fd(rfd), st.st_size
        finally:
            os.close(rfd)

    return atomic_write(path, write_and_hash, mode=0o700, sync_dir=False)


def store_binary(path: str | os.PathLike, write: Callable[[str], None]) -> Path:
    """Atomically (re)place the cache entry ``path``: ``write(tmp)`` produces the binary at ``tmp``.

    ``path``'s directory must come from :func:`secure_cache_dir` or
    :func:`private_dir`.  The binary is renamed into place, then its sidecar
    (size and SHA-256), then the directory is fsynced.

    >>> p = store_binary(private_dir() / "hello.bin", lambda tmp: Path(tmp).write_bytes(b"hello"))
    >>> check_binary(p) is None
    True
    """
    path = Path(path)
    digest, size = _write_file(path, write)
    record = json.dumps({"sha256": digest, "size": size}).encode()

    def write_sidecar(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(record)

    _write_file(_sidecar(path), write_sidecar)
    fsync_dir(path.parent)
    return path


def _recorded(path: Path) -> tuple[str, int]:
    side = _sidecar(path)
    fd, st = _open_entry(side, f"checksum file {side.name}")
    try:
        if st.st_size > _SIDECAR_MAX:
            raise _BadEntry(f"checksum file {side.name} is {st.st_size} bytes, too large")
        raw = os.read(fd, _SIDECAR_MAX + 1)
    finally:
        os.close(fd)
    try:
        rec = json.loads(raw)
        digest, size = rec["sha256"], rec["size"]
    except (ValueError, TypeError, KeyError):
        raise _BadEntry(f"checksum file {side.name} is unreadable") from None
    if not isinstance(digest, str) or len(digest) != 64 or type(size) is not int:
        raise _BadEntry(f"checksum file {side.name} is malformed")
    return digest, size


def check_binary(path: str | os.PathLike) -> str | None:
    """``None`` if the entry ``path`` may be loaded, else why not.

    The entry and its sidecar must be regular files owned by the current user,
    not writable by group or others, and the entry's size and SHA-256 must
    match the sidecar.  Nothing is loaded or executed here.

    >>> check_binary(private_dir() / "absent.so")
    'checksum file absent.so.json is missing'
    """
    path = Path(path)
    try:
        digest, size = _recorded(path)
        fd, st = _open_entry(path, path.name)
        try:
            if st.st_size != size:
                return f"{path.name} is {st.st_size} bytes, {size} recorded (truncated or replaced)"
            if _hash_fd(fd) != digest:
                return f"{path.name} does not match its recorded SHA-256 (corrupted or replaced)"
        finally:
            os.close(fd)
    except _BadEntry as e:
        return str(e)
    return None


def c_compiler(user: str, alternative: str) -> str:
    """The C compiler to build with: ``$CC``, else the first of ``cc``, ``gcc``, ``clang`` on ``PATH``.

    Without one, raises :class:`ConfigError` naming ``user`` (what needs it)
    and ``alternative`` (what to do instead).

    >>> bool(c_compiler("this example", "skip it"))
    True
    """
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise ConfigError(f"{user}: no C compiler found (looked for $CC, cc, gcc, clang); "
                          f"install one or {alternative}")
    return cc


def load_c_library(name: str, compile_command: Callable[[], Sequence[str]] | None = None, *, what: str,
                   subdir: str = "", build: Callable[[str], None] | None = None) -> ctypes.CDLL:
    """Load the C library cache entry ``name`` ``RTLD_GLOBAL``, compiled first unless a checked one is there.

    The entry lives in :func:`binary_dir` (``subdir`` below it, mode 0700), or
    in :func:`private_dir` when that cannot be written.  A missing entry, or one
    :func:`check_binary` rejects, is compiled by ``[*compile_command(), tmp]``
    (the command ends with ``-o``; it is asked for only when compiling), or by
    ``build(tmp)`` when given (e.g. ``tvm.support.cc.create_shared``; its
    ``RuntimeError`` is a failed compile), and stored with :func:`store_binary`;
    a freshly built entry is checked again before ``dlopen``.  ``name`` must
    carry a hash of the source and flags, so that a changed source never loads
    a stale library.  Raises :class:`ConfigError`
    when compiling ``what`` fails, :class:`CacheError` when the built entry
    fails its check.

    >>> src = private_dir() / "answer.c"
    >>> _ = src.write_text("int answer(void) { return 42; }")
    >>> cc = c_compiler("this example", "skip it")
    >>> lib = load_c_library("libanswer_v1.so", lambda: [cc, "-shared", "-fPIC", str(src), "-o"], what="answer.c")
    >>> lib.answer()
    42
    """
    def compile_to(tmp: str) -> None:
        if build is not None:
            try:
                build(tmp)
            except (RuntimeError, OSError) as e:
                raise ConfigError(f"compiling {what} failed: {str(e).strip()[:500]}") from None
            return
        res = subprocess.run([*compile_command(), tmp], capture_output=True, text=True)
        if res.returncode != 0:
            raise ConfigError(f"compiling {what} failed: {res.stderr.strip()[:500]}")

    def build_in(base: Path) -> tuple[Path, bool]:
        """The entry in ``base`` and whether it was (re)built just now."""
        out = (secure_cache_dir(base / subdir) if subdir else base) / name
        if check_binary(out) is None:
            return out, False
        store_binary(out, compile_to)
        return out, True

    try:
        out, built = build_in(binary_dir())
    except OSError:  # a read-only cache directory: build privately
        out, built = build_in(private_dir())
    why = check_binary(out) if built else None  # an entry that was already there was just checked
    if why is not None:  # replaced between our write and now: never dlopen it
        raise CacheError(f"{out}: {why}, right after building it")
    return ctypes.CDLL(str(out), mode=ctypes.RTLD_GLOBAL)


def _discard(path: Path) -> None:
    for p in (path, _sidecar(path)):
        try:
            p.unlink()
        except OSError:  # gone already, or e.g. a directory in the way: store_binary's replace fails, memory only
            pass


# ---------------------------------------------------------------------------
# the cache
# ---------------------------------------------------------------------------
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


def _load_verified(path: Path):
    """The module at ``path`` if the entry verifies and loads; else ``None`` (the entry is discarded)."""
    import tvm

    if not (os.path.lexists(path) or os.path.lexists(_sidecar(path))):
        return None
    if check_binary(path) is None:
        try:
            return tvm.runtime.load_module(str(path))
        except Exception:  # verified but unloadable (e.g. built for another CPU): rebuild
            pass
    _stats["rejected"] += 1
    _discard(path)
    return None


def get_or_build(signature: Hashable, make: Callable[[], Any], target: Any = None):
    """Return the compiled runtime module for ``signature``, building it once.

    ``make()`` returns a PrimFunc or IRModule; it is only called on a miss.
    The result is a ``tvm.runtime.Module`` whose functions are called by name
    (``mod["main"](...)``) and which supports ``time_evaluator``.  A disk entry
    is loaded only after :func:`check_binary` accepts it; a bad one is rebuilt
    and replaced.  Raises :class:`CacheError` if the cache directory is unsafe.
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
    root = _usable_cache_dir()
    mod = _as_module(make())
    built = None
    path = None
    if root is not None:
        path = root / f"{_disk_key(signature, tkey, mod)}.so"
        built = _load_verified(path)
        if built is not None:
            _stats["disk_hits"] += 1
    if built is None:
        import tvm

        executable = tvm.compile(mod, target=tgt)
        _stats["builds"] += 1
        if path is not None:
            try:
                store_binary(path, executable.export_library)
            except Exception:  # disk full, no compiler to link: the memory cache still works
                pass
        built = executable.mod
    with _lock:
        _memory[key] = built
    return built
