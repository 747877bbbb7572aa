"""The one default target / thread setting, and the compiled-kernel cache."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest
import tvm
from tvm import te

from tvm_ext import kernel_cache
from tvm_ext.errors import ConfigError
from tvm_ext.target import default_target, num_threads, resolve_target, target_key


def test_default_target_is_the_host_cpu_not_generic():
    t = default_target()
    assert t.kind.name == "llvm"
    assert str(t.attrs["mcpu"]) not in ("", "generic")
    assert int(t.attrs["num-cores"]) == num_threads()


def test_threads_default_is_set_in_environment():
    assert os.environ["TVM_NUM_THREADS"] == str(num_threads())
    assert tvm.runtime.num_threads() == num_threads()


def test_resolve_target_promotes_plain_llvm():
    assert resolve_target(None).attrs["mcpu"] == default_target().attrs["mcpu"]
    assert resolve_target({"kind": "llvm"}).attrs["mcpu"] == default_target().attrs["mcpu"]
    explicit = resolve_target({"kind": "llvm", "mcpu": "core-avx2"})
    assert str(explicit.attrs["mcpu"]) == "core-avx2"
    assert target_key(explicit) != target_key(None)


def test_resolve_target_rejects_cli_strings():
    with pytest.raises(ConfigError, match="dicts"):
        resolve_target("llvm -mcpu=znver4")
    with pytest.raises(ConfigError):
        resolve_target(42)


def _scale_kernel(factor: float):
    def make():
        n = tvm.tirx.Var("n", "int32")
        A = te.placeholder((n,), name="A")
        B = te.compute((n,), lambda i: A[i] * factor, name="B")
        return te.create_prim_func([A, B])

    return make


def _run(mod, x):
    a = tvm.runtime.tensor(x)
    b = tvm.runtime.empty(x.shape, "float32")
    mod["main"](a, b)
    return b.numpy()


def test_kernel_cache_builds_once_per_signature(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path))
    kernel_cache.clear_memory_cache()
    x = np.arange(5, dtype="float32")
    before = kernel_cache.cache_info()["builds"]
    m1 = kernel_cache.get_or_build(("scale", 3.0), _scale_kernel(3.0))
    m2 = kernel_cache.get_or_build(("scale", 3.0), _scale_kernel(3.0))
    assert m1 is m2
    assert kernel_cache.cache_info()["builds"] == before + 1
    np.testing.assert_allclose(_run(m1, x), 3 * x)
    assert len(list(tmp_path.glob("*.so"))) == 1


def test_kernel_cache_disk_layer_survives_memory_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path))
    kernel_cache.clear_memory_cache()
    kernel_cache.get_or_build(("scale", 5.0), _scale_kernel(5.0))
    kernel_cache.clear_memory_cache()
    hits = kernel_cache.cache_info()["disk_hits"]
    mod = kernel_cache.get_or_build(("scale", 5.0), _scale_kernel(5.0))
    assert kernel_cache.cache_info()["disk_hits"] == hits + 1
    np.testing.assert_allclose(_run(mod, np.ones(4, "float32")), 5.0)


def test_kernel_cache_never_loads_a_stale_binary(tmp_path, monkeypatch):
    # same signature, different kernel text -> different disk key -> correct result
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path))
    kernel_cache.clear_memory_cache()
    kernel_cache.get_or_build(("scale", "x"), _scale_kernel(2.0))
    kernel_cache.clear_memory_cache()
    mod = kernel_cache.get_or_build(("scale", "x"), _scale_kernel(7.0))
    np.testing.assert_allclose(_run(mod, np.ones(3, "float32")), 7.0)


def test_kernel_cache_can_be_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", "off")
    assert kernel_cache.cache_dir() is None
    kernel_cache.clear_memory_cache()
    mod = kernel_cache.get_or_build(("scale", 4.0), _scale_kernel(4.0))
    np.testing.assert_allclose(_run(mod, np.ones(2, "float32")), 4.0)


@pytest.mark.parametrize("config, needle", [
    ({"kind": "nope"}, "Target kind \"nope\" is not defined"),
    ({"kind": "llvm", "mcpu": "bogus"}, "mcpu 'bogus' is not a CPU that LLVM knows"),
    ({"kind": "llvm", "mcpu": 3}, "mcpu 3 is not a CPU"),
    ({"kind": "llvm", "num-cores": "x"}, "num-cores"),
    ({"kind": "llvm", "no-such-option": 1}, "no-such-option"),
    ({"kind": "llvm", "num-cores": 0}, "num-cores must be a positive integer, got 0"),
    ({"kind": "llvm", "num-cores": -4}, "num-cores must be a positive integer, got -4"),
])
def test_a_bad_target_dict_is_a_config_error(config, needle):
    with pytest.raises(ConfigError, match=re.escape(needle)):
        resolve_target(config)
    assert str(resolve_target({"kind": "llvm", "mcpu": "x86-64-v3"}).attrs["mcpu"]) == "x86-64-v3"
