"""Atomic file replacement: a fresh ``mkstemp`` file beside the target, fsynced, then ``os.replace``.

The temporary name is unpredictable and created with ``O_EXCL`` (``mkstemp``),
so a symlink planted at a guessable name can never redirect the write.  After
``os.replace`` the directory is fsynced too, so a crash leaves either the old
file or the whole new one, never a torn one.

>>> import tempfile
>>> from pathlib import Path
>>> p = Path(tempfile.mkdtemp()) / "greeting.txt"
>>> atomic_write_bytes(p, b"hello") == p, p.read_bytes()
(True, b'hello')
>>> atomic_write(p, lambda tmp: Path(tmp).write_text("bye")), p.read_text()
(3, 'bye')
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable, TypeVar

__all__ = ["atomic_write", "atomic_write_bytes", "fsync_dir"]

T = TypeVar("T")


def fsync_dir(directory: str | os.PathLike) -> None:
    """fsync ``directory`` so that a rename inside it is durable.

    >>> fsync_dir(tempfile.gettempdir())
    """
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, write: Callable[[str], T], *, mode: int = 0o600,
                 sync_dir: bool = True, suffix: str | None = None) -> T:
    """Replace ``path`` atomically with what ``write(tmp)`` writes at the path ``tmp``; returns its result.

    ``tmp`` is a fresh ``mkstemp`` file in ``path``'s directory whose name ends
    in ``suffix`` (default ``path``'s suffix: writers such as XGBoost or
    ``numpy.savez`` read it).
    After ``write`` the file gets ``mode``, is fsynced and renamed over
    ``path``; with ``sync_dir`` the directory is fsynced as well.  On any error
    the temporary file is removed and ``path`` is untouched.

    >>> d = Path(tempfile.mkdtemp())
    >>> atomic_write(d / "n.txt", lambda tmp: Path(tmp).write_text("42"))
    2
    >>> sorted(f.name for f in d.iterdir())
    ['n.txt']
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + (path.suffix if suffix is None else suffix),
                                dir=path.parent)
    os.close(fd)
    try:
        result = write(tmp)
        os.chmod(tmp, mode)  # a writer may recreate the file with the umask's mode
        rfd = os.open(tmp, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        try:
            os.fsync(rfd)
        finally:
            os.close(rfd)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)
    return result


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, mode: int = 0o600) -> Path:
    """Replace ``path`` atomically with ``data`` (see :func:`atomic_write`); returns ``path``.

    >>> d = Path(tempfile.mkdtemp())
    >>> atomic_write_bytes(d / "x.bin", b"\\x00\\x01").read_bytes()
    b'\\x00\\x01'
    """
    path = Path(path)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    atomic_write(path, write, mode=mode)
    return path
