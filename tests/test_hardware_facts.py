"""tvm_ext.target's hardware facts, and kernels built for AVX2 and generic x86-64 targets.

Haswell code runs on any AVX2 host and x86-64 code anywhere, so the kernels built for those
targets are run and checked against numpy/torch here whatever the host; their assembly must
not touch a zmm register.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm.target import Target

from tensorize import kernels as K
from tvm_ext.target import (
    FMA_PER_CYCLE,
    default_target,
    gemm_blocking,
    hardware_facts,
    target_features,
)

HASWELL = {"kind": "llvm", "mcpu": "haswell"}
GENERIC = {"kind": "llvm", "mcpu": "x86-64"}


@pytest.mark.parametrize("target,bits,regs,fma", [
    (HASWELL, 256, 16, True),
    (GENERIC, 128, 16, False),
    ({"kind": "llvm", "mcpu": "skylake-avx512"}, 512, 32, True),
    ({"kind": "llvm", "mcpu": "znver4", "mattr": ["-avx512f"]}, 256, 16, True),
])
def test_vector_width_and_registers_come_from_the_targets_features(target, bits, regs, fma):
    f = hardware_facts(target)
    assert (f.vector_bits, f.vector_registers, f.has_fma) == (bits, regs, fma)
    assert f.lanes("float32") == bits // 32 and f.lanes("float64") == bits // 64
    assert ("avx512f" in target_features(target)) == (bits == 512)


def test_fma_rate_follows_the_documented_table_and_gives_the_peak():
    assert hardware_facts({"kind": "llvm", "mcpu": "skylake-avx512"}).fma_per_cycle == 2
    assert hardware_facts({"kind": "llvm", "mcpu": "znver4"}).fma_per_cycle == FMA_PER_CYCLE["znver4"] == 1
    assert hardware_facts({"kind": "llvm", "mcpu": "icelake-client"}).fma_per_cycle == 1
    assert hardware_facts({"kind": "llvm", "mcpu": "znver3"}).fma_per_cycle == 2  # unlisted AVX2: 2
    hsw = hardware_facts({**HASWELL, "num-cores": 4})
    assert hsw.cores == 4 and hsw.flops_per_cycle() == 2 * 8 * 2
    assert hsw.peak_gflops(3.0) == pytest.approx(4 * 32 * 3.0)
    assert hardware_facts(GENERIC).flops_per_cycle() == 1 * 4 * 2  # SSE: one mul + one add


def test_the_target_in_scope_is_the_default():
    with Target(HASWELL):
        assert hardware_facts().vector_bits == 256
    assert hardware_facts().mcpu == str(default_target().attrs["mcpu"])


def test_host_caches_are_read_from_sysfs():
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    f = hardware_facts()
    if not root.is_dir():
        assert f.caches_from == "defaults"
        return
    sizes = {}
    for idx in root.glob("index*"):
        if (idx / "type").read_text().strip() != "Instruction":
            text = (idx / "size").read_text().strip()
            sizes[int((idx / "level").read_text())] = int(text.rstrip("KMG")) << {"K": 10, "M": 20}.get(text[-1], 0)
    assert f.caches_from == "sysfs" and f.l1d_bytes <= sizes[1] and f.l2_bytes <= sizes[2]
    assert hardware_facts(HASWELL).caches_from == "defaults" or default_target().attrs["mcpu"] == "haswell"


@pytest.mark.parametrize("target", [HASWELL, GENERIC, {"kind": "llvm", "mcpu": "skylake-avx512"}, None])
def test_gemm_blocking_hides_fma_latency_within_the_register_file_and_caches(target):
    f = hardware_facts(target)
    b = gemm_blocking(f)
    accs = b.mr * b.nr_vectors
    assert accs >= f.fma_per_cycle * f.fma_latency  # Low et al.: enough independent FMA chains
    assert accs + b.nr_vectors + 1 <= f.vector_registers  # + the B row and the A broadcast
    assert b.nr == b.nr_vectors * f.lanes("float32")
    assert b.kc * b.nr * 4 <= f.l1d_bytes // 2 and b.mc * b.kc * 4 <= f.l2_bytes // 2
    assert b.nc * b.kc * 4 <= max(f.l3_bytes // 2, b.nr * b.kc * 4) and b.mc % b.mr == 0


def test_haswell_blocking_is_blis_haswell_kernel():
    b = gemm_blocking(hardware_facts(HASWELL))
    assert (b.mr, b.nr) == (6, 16)  # BLIS's haswell sgemm micro-kernel: 6 x 16


# --------------------------------------------------------------------------- AVX2 / generic kernels
#: Every kernel of the zoo, small.
ZOO = {
    "matmul": dict(M=24, N=48, K=40),
    "batch_matmul": dict(batch=2, M=16, N=32, K=24),
    "dense_bias": dict(M=16, N=48, K=40),
    "conv1d": dict(batch=1, width=18, kernel=3, c_in=8, c_out=16),
    "conv2d_nhwc": dict(n=1, c_in=8, c_out=16, hw=8, kernel=3, stride=1, pad=1),
    "conv2d_nchw": dict(n=1, c_in=8, c_out=16, hw=8, kernel=3, stride=2, pad=1),
    "depthwise_conv2d": dict(n=1, c=16, hw=8, kernel=3, stride=1, pad=1),
    "separable_conv2d": dict(n=1, c_in=8, c_out=16, hw=8, kernel=3, stride=1, pad=1),
    "gru_cell": dict(batch=4, input_size=16, hidden=16),
}


def _asm(t, target) -> str:
    """The module's assembly; a kernel loaded from the disk cache has none: build it fresh."""
    try:
        asm = t.module.inspect_source("asm")
        if asm:
            return asm
    except Exception:  # noqa: BLE001 - a loaded library keeps no source
        pass
    return tvm.compile(t.scheduled, target=Target(target)).mod.inspect_source("asm")


def _host_has_avx2() -> bool:
    return "avx2" in target_features(None)


@pytest.fixture
def fresh_builds(tmp_path, monkeypatch):
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path / "kernels"))


@pytest.mark.parametrize("target", [HASWELL, GENERIC], ids=["haswell", "x86-64"])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_kernels_for_avx2_and_generic_targets_use_no_zmm_and_are_right(name, target, fresh_builds):
    if target is HASWELL and not _host_has_avx2():
        pytest.skip("the host cannot run AVX2 code")
    kernel = K.make_kernel(name, **ZOO[name])
    t = K.tensorized(kernel, target=target)
    asm = _asm(t, target)
    assert not re.search(r"%zmm\d", asm), f"{name}: AVX-512 code for {target['mcpu']}"
    if target is GENERIC:
        assert not re.search(r"%ymm\d", asm)
    else:
        assert re.search(r"vfmadd\w*ps", asm), f"{name}: no FMA for haswell"
    ins = kernel.random_inputs(seed=5)
    np.testing.assert_allclose(t(*ins), kernel.reference(*ins), rtol=1e-4, atol=1e-4)
    facts = hardware_facts(target)
    for e in t.emitted.values():  # the register tile fits the target's register file
        vec = e.spec.vector_axis
        if vec is not None:
            lanes = facts.lanes("float32")
            regs = -(-e.tiles[vec] // lanes) * int(np.prod([e.tiles[a] for a in e.spec.spatial if a != vec]))
            assert regs <= facts.vector_registers


@pytest.mark.parametrize("target", [HASWELL, GENERIC], ids=["haswell", "x86-64"])
def test_blas_library_for_avx2_and_generic_targets_has_no_avx512(target, fresh_builds):
    from tensorize import x86

    if target is HASWELL and not _host_has_avx2():
        pytest.skip("the host cannot run AVX2 code")
    kernel = K.matmul(32, 48, 40)
    t = K.tensorized(kernel, impl="blas", target=target)
    ins = kernel.random_inputs(seed=6)
    np.testing.assert_allclose(t(*ins), kernel.reference(*ins), rtol=1e-4, atol=1e-4)
    with Target(target):
        flags = x86._arch_flags()
        lib = x86.build_gemm_library()
    assert flags == [f"-march={target['mcpu']}", f"-mprefer-vector-width={hardware_facts(target).vector_bits}"]
    if shutil.which("objdump"):
        dis = subprocess.run(["objdump", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
        assert "%zmm" not in dis and "tvmext_sgemm_acc" in dis
