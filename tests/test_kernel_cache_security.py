"""Fault injection and planted files against the compiled-kernel cache and the tensorize blas library.

Nothing a test plants (truncated, corrupted, swapped, foreign, group/other-writable
or symlinked entries, libraries in the old shared temp directory) may be loaded;
every kernel still computes the right answer.
"""
from __future__ import annotations

import ctypes
import hashlib
import itertools
import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import te

from tvm_ext import kernel_cache
from tvm_ext.cli.main import main as cli_main
from tvm_ext.errors import CacheError


def _scale(factor: float):
    def make():
        A = te.placeholder((8,), name="A")
        B = te.compute((8,), lambda i: A[i] * factor, name="B")
        return te.create_prim_func([A, B])

    return make


def _run(mod) -> np.ndarray:
    x = np.arange(8, dtype="float32")
    b = tvm.runtime.empty((8,), "float32")
    mod["main"](tvm.runtime.tensor(x), b)
    return b.numpy()


def _expect(factor: float) -> np.ndarray:
    return np.arange(8, dtype="float32") * np.float32(factor)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache directory, an empty memory cache, and the list of paths ``load_module`` was given."""
    root = tmp_path / "kernels"
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(root))
    kernel_cache.clear_memory_cache()
    loaded: list[str] = []
    real = tvm.runtime.load_module

    def spy(path, *a, **k):
        loaded.append(str(path))
        return real(path, *a, **k)

    monkeypatch.setattr(tvm.runtime, "load_module", spy)
    yield root, loaded
    kernel_cache.clear_memory_cache()


def _build(factor: float, tag: str = "sec"):
    return kernel_cache.get_or_build((tag, factor), _scale(factor))


def _entry(root: Path) -> Path:
    (so,) = (p for p in root.glob("*.so") if not p.name.startswith("."))  # not temporaries
    return so


def _rebuilt_after(root: Path, loaded: list[str], damage, factor: float = 3.0) -> Path:
    """Build, damage the entry, build again from disk: the entry is rejected, rebuilt, replaced."""
    _build(factor)
    so = _entry(root)
    damage(so)
    kernel_cache.clear_memory_cache()
    before = kernel_cache.cache_info()
    np.testing.assert_allclose(_run(_build(factor)), _expect(factor))
    after = kernel_cache.cache_info()
    assert after["builds"] == before["builds"] + 1 and after["rejected"] == before["rejected"] + 1
    assert loaded == []  # the damaged entry was never handed to load_module
    assert kernel_cache.check_binary(so) is None  # replaced by a good entry
    kernel_cache.clear_memory_cache()
    np.testing.assert_allclose(_run(_build(factor)), _expect(factor))
    assert loaded == [str(so)] and kernel_cache.cache_info()["disk_hits"] == after["disk_hits"] + 1
    return so


def test_entries_are_private_written_atomically_and_checksummed(cache):
    root, loaded = cache
    np.testing.assert_allclose(_run(_build(2.0)), _expect(2.0))
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    so = _entry(root)
    assert stat.S_IMODE(so.stat().st_mode) & 0o022 == 0
    record = json.loads(Path(str(so) + ".json").read_text())
    assert record == {"sha256": hashlib.sha256(so.read_bytes()).hexdigest(), "size": so.stat().st_size}
    assert sorted(p.name for p in root.iterdir()) == [so.name, so.name + ".json"]  # no temporaries left
    assert kernel_cache.check_binary(so) is None


def test_entry_file_and_directory_are_fsynced(cache, monkeypatch):
    root, _ = cache
    synced = []
    real = os.fsync

    def spy(fd):
        st = os.fstat(fd)
        synced.append(("dir" if stat.S_ISDIR(st.st_mode) else "file", st.st_ino))
        return real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    _build(4.0)
    so = _entry(root)
    kinds = [k for k, _ in synced]
    assert kinds == ["file", "file", "dir"]  # the binary, its checksum file, then the directory
    assert synced[0][1] == so.stat().st_ino and synced[2][1] == root.stat().st_ino


def test_truncated_entry_is_never_loaded_and_is_rebuilt(cache):
    root, loaded = cache

    def truncate(so: Path) -> None:
        os.truncate(so, so.stat().st_size // 2)

    so = _rebuilt_after(root, loaded, truncate)
    assert so.stat().st_size == json.loads(Path(str(so) + ".json").read_text())["size"]


def test_corrupted_entry_of_the_same_size_is_rebuilt(cache):
    root, loaded = cache

    def corrupt(so: Path) -> None:
        data = bytearray(so.read_bytes())
        data[len(data) // 2] ^= 0xFF
        so.write_bytes(bytes(data))

    _rebuilt_after(root, loaded, corrupt)


def test_entry_without_its_checksum_file_is_rebuilt(cache):
    root, loaded = cache
    _rebuilt_after(root, loaded, lambda so: Path(str(so) + ".json").unlink())


def test_group_or_other_writable_entry_is_never_loaded(cache):
    root, loaded = cache
    so = _rebuilt_after(root, loaded, lambda so: so.chmod(0o666))
    assert stat.S_IMODE(so.stat().st_mode) & 0o022 == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_entry_owned_by_another_user_is_never_loaded(cache):
    root, loaded = cache
    so = _rebuilt_after(root, loaded, lambda so: os.chown(so, 4242, 4242))
    assert so.stat().st_uid == os.geteuid()


def test_swapped_entries_are_rebuilt(cache):
    root, loaded = cache
    _build(2.0, "swap")
    first = set(root.glob("*.so"))
    _build(5.0, "swap")
    (a,) = first
    (b,) = set(root.glob("*.so")) - first
    tmp = root / "swap.tmp"
    os.replace(a, tmp), os.replace(b, a), os.replace(tmp, b)
    kernel_cache.clear_memory_cache()
    before = kernel_cache.cache_info()
    np.testing.assert_allclose(_run(_build(2.0, "swap")), _expect(2.0))
    np.testing.assert_allclose(_run(_build(5.0, "swap")), _expect(5.0))
    after = kernel_cache.cache_info()
    assert after["builds"] == before["builds"] + 2 and after["rejected"] == before["rejected"] + 2
    assert loaded == [] and kernel_cache.check_binary(a) is None and kernel_cache.check_binary(b) is None


def test_symlinked_entry_is_not_followed(cache, tmp_path):
    root, loaded = cache
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")

    def plant(so: Path) -> None:
        so.unlink()
        so.symlink_to(victim)

    so = _rebuilt_after(root, loaded, plant)
    assert not so.is_symlink() and victim.read_text() == "precious"


def test_symlink_planted_at_a_temporary_name_is_not_followed(cache, tmp_path, monkeypatch):
    root, loaded = cache
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    real_names = tempfile._RandomNameSequence
    # every temporary name tried first is "planted", where a symlink to the victim already waits
    monkeypatch.setattr(tempfile, "_get_candidate_names", lambda: itertools.chain(["planted"], real_names()))
    real_mkstemp = tempfile.mkstemp
    planted = []

    def mkstemp(suffix=None, prefix=None, dir=None, text=False):
        if dir is not None and Path(dir) == root:
            planted.append(Path(dir) / f"{prefix}planted{suffix}")
            planted[-1].symlink_to(victim)
        return real_mkstemp(suffix, prefix, dir, text)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    np.testing.assert_allclose(_run(_build(7.0)), _expect(7.0))
    assert len(planted) == 2  # the binary and its checksum file
    assert victim.read_text() == "precious" and all(p.is_symlink() for p in planted)
    assert kernel_cache.check_binary(_entry(root)) is None


def test_world_writable_cache_directory_is_refused(cache):
    root, loaded = cache
    _build(2.0)
    root.chmod(0o777)
    kernel_cache.clear_memory_cache()
    with pytest.raises(CacheError, match=f"{root}.*writable by group and others"):
        _build(2.0)
    assert loaded == []


def test_cache_directory_owned_by_another_user_is_refused(cache, monkeypatch):
    root, loaded = cache
    _build(2.0)
    kernel_cache.clear_memory_cache()
    monkeypatch.setattr(kernel_cache, "_current_uid", lambda: 4242)
    with pytest.raises(CacheError, match=f"{root}: is owned by uid {os.geteuid()}, not by you"):
        _build(2.0)
    assert loaded == []


def test_a_parent_others_can_write_is_refused_unless_sticky(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(CacheError, match=f"its parent {shared} is writable"):
        kernel_cache.secure_cache_dir(shared / "kernels")
    shared.chmod(0o1777)  # like /tmp: others cannot rename what is ours
    assert kernel_cache.secure_cache_dir(shared / "kernels") == shared / "kernels"


def test_missing_directories_are_created_0700(tmp_path):
    d = kernel_cache.secure_cache_dir(tmp_path / "a" / "b" / "kernels")
    for p in (tmp_path / "a", tmp_path / "a" / "b", d):
        assert stat.S_IMODE(p.stat().st_mode) == 0o700


def test_unsafe_cache_directory_is_one_line_exit_2_from_the_cli(cache, capsys):
    root, _ = cache
    root.mkdir(mode=0o700)
    root.chmod(0o757)
    code = cli_main(["map", "matmul", "--size", "M=16", "--size", "N=16", "--size", "K=16", "--build"])
    _, err = capsys.readouterr()
    assert code == 2 and str(root) in err and "writable by others" in err and err.count("\n") == 1


# --------------------------------------------------------------------------- the tensorize blas library
@pytest.fixture
def x86(monkeypatch):
    """tensorize.x86 with no library loaded yet, and the list of paths handed to ``CDLL``."""
    import tensorize.x86 as x86

    if shutil.which("cc") is None and shutil.which("gcc") is None and not os.environ.get("CC"):
        pytest.skip("no C compiler")
    monkeypatch.setattr(x86, "_LIB", {})
    opened: list[str] = []
    real = ctypes.CDLL

    def spy(name, *a, **k):
        opened.append(str(name))
        return real(name, *a, **k)

    monkeypatch.setattr(x86.ctypes, "CDLL", spy)
    return x86, opened


def _blas_matmul_is_right() -> None:
    from tensorize import kernels as K

    k = K.matmul(16, 32, 8)
    t = K.tensorized(k, impl="blas")
    a, b = k.random_inputs()
    np.testing.assert_allclose(t(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_blas_with_the_cache_off_never_loads_a_planted_library(x86, tmp_path, monkeypatch):
    x86, opened = x86
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", "off")
    shared = Path(tempfile.gettempdir()) / "tvm-ext-kernels"
    made = not shared.exists()
    marker = tmp_path / "planted-code-ran"
    src = tmp_path / "evil.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void run(void) {\n'
                   f'  FILE *f = fopen("{marker}", "w"); if (f) fclose(f);\n}}\n')
    try:
        shared.mkdir(mode=0o777, exist_ok=True)
        csrc = Path(x86.__file__).with_name("csrc") / "tvmext_gemm.c"
        flags = ["-O3", "-march=native", "-mprefer-vector-width=512", "-fPIC", "-shared"]
        old_name = "libtvmext_gemm_" + hashlib.sha1(csrc.read_bytes() + " ".join(flags).encode()).hexdigest()[:12]
        planted = [shared / f"{old_name}.so"]
        subprocess.run([x86._compiler(), "-shared", "-fPIC", str(src), "-o", str(planted[0])], check=True)
        out = x86.build_gemm_library()
        assert opened == [str(out)] and not marker.exists()
        assert out.parent != shared and out.parent == kernel_cache.private_dir()
        st = out.parent.stat()
        assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
        assert kernel_cache.check_binary(out) is None
        _blas_matmul_is_right()
    finally:
        for p in shared.glob("libtvmext_gemm_*") if shared.exists() else ():
            p.unlink()
        if made and shared.exists():
            shared.rmdir()


def test_blas_library_in_the_cache_is_verified_before_dlopen(x86, tmp_path, monkeypatch):
    x86, opened = x86
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path / "kernels"))
    out = x86.build_gemm_library()
    assert out.parent == tmp_path / "kernels" and kernel_cache.check_binary(out) is None
    # a torn write renamed into place (a new file: truncating the loaded one would break this process)
    torn = out.with_name("torn")
    torn.write_bytes(out.read_bytes()[:100])
    os.replace(torn, out)
    monkeypatch.setattr(x86, "_LIB", {})
    again = x86.build_gemm_library()
    assert again == out and kernel_cache.check_binary(out) is None and out.stat().st_size > 100
    assert opened == [str(out), str(out)]
    _blas_matmul_is_right()


def test_map_build_with_a_wrong_result_exits_non_zero(monkeypatch, capsys):
    from tensorize import kernels as K

    real = K.tensorized

    def off_by_one(*args, **kwargs):
        t = real(*args, **kwargs)

        class Wrong:
            intrinsics, steps = t.intrinsics, t.steps

            def __call__(self, *inputs):
                return t(*inputs) + 1.0

        return Wrong()

    monkeypatch.setattr(K, "tensorized", off_by_one)
    code = cli_main(["map", "matmul", "--size", "M=16", "--size", "N=16", "--size", "K=16", "--build"])
    _, err = capsys.readouterr()
    assert code == 2 and "is wrong: max |error| 1" in err and err.count("\n") == 1


def test_sparse_native_helpers_are_verified_before_dlopen(x86, tmp_path, monkeypatch):
    from schedules.sparse import native

    _, opened = x86  # ctypes.CDLL is spied on
    monkeypatch.setattr(native, "_LOADED", {})
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path / "kernels"))
    lib = native.load_native("tvmext_p2p.c")
    (out,) = (tmp_path / "kernels" / "native").glob("*.so")
    assert opened == [str(out)] and hasattr(lib, "tvmext_p2p_wait") and kernel_cache.check_binary(out) is None
    torn = out.with_name("torn")
    torn.write_bytes(out.read_bytes()[:100])
    os.replace(torn, out)
    monkeypatch.setattr(native, "_LOADED", {})
    native.load_native("tvmext_p2p.c")
    assert opened == [str(out)] * 2 and kernel_cache.check_binary(out) is None
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", "off")
    monkeypatch.setattr(native, "_LOADED", {})
    native.load_native("tvmext_p2p.c")
    assert Path(opened[-1]).parent == kernel_cache.private_dir() / "native"
