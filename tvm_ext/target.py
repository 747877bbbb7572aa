"""The one place that decides the default TVM target and thread count.

Everything in the plugin that builds or runs a kernel asks this module:

* :func:`default_target` is ``Target.from_device(tvm.cpu())`` (the host CPU's
  real ``mcpu``, never generic x86-64) plus ``num-cores`` for MetaSchedule.
* :func:`configure_threads` sets ``TVM_NUM_THREADS`` to all cores unless the
  user already set it.  TVM reads the variable when its thread pool first
  starts, so this runs when :mod:`tvm_ext.target` is imported.
* :func:`hardware_facts` is the one source of what a target's CPU offers:
  vector width and registers (from the features LLVM reports for the
  target's ``mcpu``/``mattr``), FMA instructions per cycle (a table by
  ``mcpu``), cache sizes and cores.  Kernels size their register tiles and
  cache blocks from it (:func:`gemm_blocking`), never from constants.

Example::

    >>> from tvm_ext.target import default_target, num_threads
    >>> default_target().kind.name
    'llvm'
    >>> num_threads() >= 1
    True
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "configure_threads",
    "num_threads",
    "default_target",
    "resolve_target",
    "target_key",
    "cpu_features",
    "target_features",
    "HardwareFacts",
    "hardware_facts",
    "GemmBlocking",
    "gemm_blocking",
    "FMA_PER_CYCLE",
]


def _all_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def configure_threads(n: int | None = None) -> int:
    """Set ``TVM_NUM_THREADS`` (default: keep the user's value, else all cores).

    Returns the thread count now in force for kernels that have not started
    TVM's thread pool yet.
    """
    if n is not None:
        os.environ["TVM_NUM_THREADS"] = str(int(n))
    else:
        os.environ.setdefault("TVM_NUM_THREADS", str(_all_cores()))
    return int(os.environ["TVM_NUM_THREADS"])


configure_threads()


def num_threads() -> int:
    """Threads TVM's runtime uses (``TVM_NUM_THREADS`` as configured)."""
    return int(os.environ.get("TVM_NUM_THREADS", _all_cores()))


@functools.lru_cache(maxsize=1)
def _host_target_dict() -> dict[str, Any]:
    import tvm
    from tvm.target import Target

    host = Target.from_device(tvm.cpu())
    d = dict(host.export())
    d["keys"] = list(d.get("keys", ("cpu",)))
    d["num-cores"] = num_threads()
    return d


@functools.lru_cache(maxsize=1)
def default_target():
    """The host CPU target: ``Target.from_device(tvm.cpu())`` + ``num-cores``.

    Made once per process (its content is the cached host description, a Target is
    immutable, and making one costs ~30-50 us on every executor build that asks).

    >>> str(default_target().attrs["mcpu"]) != "generic"
    True
    """
    from tvm.target import Target

    return Target(dict(_host_target_dict()))


def resolve_target(target: Any = None):
    """Turn ``None`` / a dict / a Target into a Target (``None`` = default).

    Plain ``"llvm"`` (or ``{"kind": "llvm"}``) is promoted to the host CPU, since
    generic x86-64 has no AVX and would silently run several times slower.
    """
    from tvm.target import Target

    if target is None:
        return default_target()
    if isinstance(target, Target):
        if target.kind.name == "llvm" and "mcpu" not in target.attrs:
            return default_target()
        return target
    if isinstance(target, str):
        if target.strip() == "llvm":
            return default_target()
        from tvm_ext.errors import ConfigError

        raise ConfigError(
            f"target {target!r}: TVM 0.27 takes targets as dicts, e.g. "
            '{"kind": "llvm", "mcpu": "znver4"}; pass None for the host CPU'
        )
    if isinstance(target, dict):
        if target.get("kind") == "llvm" and "mcpu" not in target:
            merged = dict(_host_target_dict())
            merged.update(target)
            return _target_from_dict(merged)
        return _target_from_dict(dict(target))
    from tvm_ext.errors import ConfigError

    raise ConfigError(f"target: expected None, a dict or a tvm Target, got {type(target).__name__}")


def _target_from_dict(config: dict) -> Any:
    """``Target(config)``; an unknown kind, attribute or llvm ``mcpu`` is a :class:`ConfigError`, not LLVM's fallback."""
    from tvm.target import Target, codegen

    from tvm_ext.errors import ConfigError

    if config.get("kind") == "llvm" and "mcpu" in config:
        triple = str(config.get("mtriple") or codegen.llvm_get_system_triple())
        if not isinstance(config["mcpu"], str) or not codegen.llvm_is_valid_cpu(config["mcpu"], triple):
            raise ConfigError(f"target: mcpu {config['mcpu']!r} is not a CPU that LLVM knows for {triple} "
                              "(e.g. 'x86-64-v3', 'skylake-avx512', 'znver4')")
    cores = config.get("num-cores")
    if cores is not None and (isinstance(cores, bool) or not isinstance(cores, int) or cores < 1):
        raise ConfigError(f"target: num-cores must be a positive integer, got {cores!r}")
    try:
        return Target(config)
    except (ValueError, TypeError, AttributeError, RuntimeError) as e:  # TVM's target parser
        raise ConfigError(f"target {config}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None


def target_key(target: Any = None) -> str:
    """A stable string naming a target, for cache keys and result records."""
    return str(resolve_target(target))


def cpu_features() -> list[str]:
    """CPU SIMD features LLVM reports for the host (e.g. ``avx512f``, ``fma``)."""
    feats = target_features(default_target())
    if feats:
        return sorted(feats)
    flags: set[str] = set()  # a TVM build without the LLVM query: the kernel's flags
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags.update(line.split(":", 1)[1].split())
                    break
    except OSError:  # pragma: no cover
        pass
    simd = ("sse", "avx", "fma", "f16c", "amx", "vnni", "bf16")
    return sorted(x for x in flags if x.startswith(simd))


# ---------------------------------------------------------------------------
# Hardware facts
# ---------------------------------------------------------------------------
def _current_or_default(target: Any = None):
    """``target`` resolved; ``None`` means the target in scope (``with target:``), else the host."""
    if target is None:
        from tvm.target import Target

        current = Target.current(allow_none=True)
        if current is not None and current.kind.name == "llvm":
            return current
    return resolve_target(target)


@functools.lru_cache(maxsize=64)
def _features_of(target_json: str) -> frozenset[str]:
    import tvm
    from tvm.target import Target

    f = tvm.get_global_func("target.llvm_get_cpu_features", allow_missing=True)
    if f is None:  # pragma: no cover - every llvm-enabled TVM build has it
        return frozenset()
    return frozenset(str(k) for k in f(Target(target_json)))


def target_features(target: Any = None) -> frozenset[str]:
    """The CPU features LLVM enables for ``target`` (its ``mcpu`` plus ``mattr``).

    >>> "avx512f" in target_features({"kind": "llvm", "mcpu": "haswell"})
    False
    """
    return _features_of(str(_current_or_default(target)))


#: Vector FMA instructions a core retires per cycle at its full vector width, by LLVM ``mcpu``.
#: Sources: Intel 64 and IA-32 Optimization Reference Manual (port tables of Haswell through
#: Sapphire Rapids), AMD Software Optimization Guides for families 17h/19h/1Ah, and the
#: throughput tables of uops.info.  Xeon Gold/Platinum have two 512-bit FMA ports (Silver and
#: Bronze parts of the same ``mcpu`` have one: the measured peak of ``bench.tensorize_gemm --peak``
#: shows it); client AVX-512 cores fuse ports 0+1 into one.  Zen 4 runs a 512-bit FMA on its two
#: 256-bit pipes (one zmm FMA per cycle); Zen 5 has a full 512-bit datapath.  Zen 1 has two
#: 128-bit FMA pipes (one ymm FMA per cycle).
FMA_PER_CYCLE: dict[str, int] = {
    **dict.fromkeys(("skylake-avx512", "cascadelake", "cooperlake", "icelake-server", "sapphirerapids",
                     "emeraldrapids", "graniterapids", "graniterapids-d", "znver5", "diamondrapids"), 2),
    **dict.fromkeys(("cannonlake", "icelake-client", "tigerlake", "rocketlake", "znver4"), 1),
    **dict.fromkeys(("haswell", "broadwell", "skylake", "alderlake", "raptorlake", "meteorlake",
                     "arrowlake", "lunarlake", "znver2", "znver3", "x86-64-v3"), 2),
    "znver1": 1,
}
#: Latency of a vector FMA in cycles (Low et al.'s L_vfma): 5 on Haswell/Broadwell and Zen 1-3, 4 elsewhere.
FMA_LATENCY: dict[str, int] = dict.fromkeys(("haswell", "broadwell", "znver1", "znver2", "znver3"), 5)

#: Cache sizes assumed when the target is not the host (or sysfs is unreadable): bytes per core.
_DEFAULT_CACHES = {512: (32 << 10, 1 << 20, 1536 << 10), 256: (32 << 10, 256 << 10, 2 << 20),
                   128: (32 << 10, 256 << 10, 1 << 20)}


@dataclass(frozen=True)
class HardwareFacts:
    """What a CPU target offers a kernel.

    ``vector_bits``: the widest vector the target has (512 with AVX-512F, 256
    with AVX, else 128); ``vector_registers``: 32 with AVX-512, else 16;
    ``fma_per_cycle``: vector FMA instructions per cycle and core at that width
    (multiply + add pairs without FMA); ``l1d/l2/l3_bytes``: data cache per core
    (L3: the core's share); ``cores``: the target's ``num-cores`` or the thread count.

    >>> f = hardware_facts({"kind": "llvm", "mcpu": "haswell"})
    >>> (f.vector_bits, f.vector_registers, f.lanes("float32"))
    (256, 16, 8)
    """

    mcpu: str
    vector_bits: int
    vector_registers: int
    has_fma: bool
    fma_per_cycle: int
    fma_latency: int
    l1d_bytes: int
    l2_bytes: int
    l3_bytes: int
    cores: int
    caches_from: str  # "sysfs" (the host's) or "defaults"

    def lanes(self, dtype: str = "float32") -> int:
        """Elements of ``dtype`` in one vector register."""
        import numpy as np

        return max(self.vector_bits // (8 * np.dtype(dtype).itemsize), 1)

    @property
    def vector_bytes(self) -> int:
        return self.vector_bits // 8

    @property
    def llc_bytes(self) -> int:
        """The last-level cache the target's threads share: the L3 share per core times the cores."""
        return int(self.l3_bytes) * max(int(self.cores), 1)

    @property
    def accumulator_registers(self) -> int:
        """Vector registers a micro-kernel's accumulator tile may take: three quarters of the file.

        The rest hold the B row (one or two vectors), the A broadcast and whatever
        the compiler needs; BLIS's hand-written kernels use the same split (6x16 on
        Haswell: 12 of 16 ymm; 12x32 on Skylake-X: 24 of 32 zmm).
        """
        return self.vector_registers * 3 // 4

    def flops_per_cycle(self, dtype: str = "float32") -> int:
        """Peak FLOP per cycle and core: FMA instructions x lanes x 2."""
        return self.fma_per_cycle * self.lanes(dtype) * 2

    def peak_gflops(self, ghz: float, dtype: str = "float32", cores: int | None = None) -> float:
        """FMA peak at ``ghz`` on ``cores`` (default: all of the target's)."""
        return (cores or self.cores) * self.flops_per_cycle(dtype) * ghz

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def _cache_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def _cpu_count(cpu_list: str) -> int:
    n = 0
    for part in cpu_list.strip().split(","):
        lo, _, hi = part.partition("-")
        n += int(hi) - int(lo) + 1 if hi else 1
    return max(n, 1)


@functools.lru_cache(maxsize=1)
def _host_caches() -> tuple[int, int, int] | None:
    """(L1d, L2, L3 share) bytes per core from ``/sys/devices/system/cpu/cpu0/cache``, or None."""
    found: dict[int, int] = {}
    try:
        for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text())
            size = _cache_size((index / "size").read_text())
            sharing = (index / "shared_cpu_list")
            found[level] = size // (_cpu_count(sharing.read_text()) if sharing.exists() else 1)
    except (OSError, ValueError):
        return None
    if 1 not in found or 2 not in found:
        return None
    return found[1], found[2], found.get(3, found[2])


def _vector_shape(feats: frozenset[str]) -> tuple[int, int]:
    if "avx512f" in feats:
        return 512, 32
    if "avx" in feats:
        return 256, 16
    return 128, 16


@functools.lru_cache(maxsize=64)
def _facts_of(target_json: str) -> HardwareFacts:
    from tvm.target import Target

    tgt = Target(target_json)
    mcpu = str(tgt.attrs.get("mcpu", "") or "generic")
    feats = _features_of(target_json)
    bits, regs = _vector_shape(feats)
    fma = "fma" in feats
    rate = FMA_PER_CYCLE.get(mcpu, 2 if bits >= 256 else 1)
    host = str(_host_target_dict().get("mcpu", "")) == mcpu
    caches = _host_caches() if host else None
    l1d, l2, l3 = caches or _DEFAULT_CACHES[bits]
    cores = int(tgt.attrs.get("num-cores", 0) or 0) or num_threads()
    return HardwareFacts(mcpu=mcpu, vector_bits=bits, vector_registers=regs, has_fma=fma,
                         fma_per_cycle=rate if fma else 1, fma_latency=FMA_LATENCY.get(mcpu, 4),
                         l1d_bytes=l1d, l2_bytes=l2, l3_bytes=l3, cores=cores,
                         caches_from="sysfs" if caches else "defaults")


def hardware_facts(target: Any = None) -> HardwareFacts:
    """The :class:`HardwareFacts` of ``target`` (None: the target in scope, else the host CPU).

    >>> hardware_facts({"kind": "llvm", "mcpu": "x86-64"}).vector_bits
    128
    """
    return _facts_of(str(_current_or_default(target)))


@dataclass(frozen=True)
class GemmBlocking:
    """Register block ``mr x nr`` (``nr`` = ``nr_vectors`` vectors), K unroll and cache blocks.

    ``kc``: depth of a B micro-panel (``kc x nr``) that stays in half of L1;
    ``mc``: rows of an A block (``mc x kc``) in half of L2; ``nc``: columns of a B
    block (``kc x nc``) in half of the core's L3 share.  The micro-kernel
    (:mod:`tensorize.x86`) applies ``nr`` and ``k_unroll`` only; ``kc``, ``mc`` and
    ``nc`` are reported (``bench.tensorize_gemm --peak``), not used to block loops.
    """

    mr: int
    nr: int
    nr_vectors: int
    k_unroll: int
    kc: int
    mc: int
    nc: int


def _round_down(x: int, m: int) -> int:
    return max(m, x // m * m)


def gemm_blocking(facts: HardwareFacts | None = None, dtype: str = "float32") -> GemmBlocking:
    """BLIS block sizes derived from the facts, after Low et al. 2016, "Analytical modeling is
    enough for high-performance BLIS" (ACM TOMS 43(2)): enough independent accumulators to hide
    the FMA latency (``mr * nr_vectors >= fma_per_cycle * fma_latency``) within the register file,
    then ``kc``, ``mc``, ``nc`` so each packed panel fits its cache level.

    >>> b = gemm_blocking(hardware_facts({"kind": "llvm", "mcpu": "haswell"}))
    >>> (b.mr, b.nr, b.kc)
    (6, 16, 256)
    """
    facts = facts or hardware_facts()
    lanes = facts.lanes(dtype)
    size = max(facts.vector_bytes // lanes, 1)  # bytes per element
    nvec = 2
    mr = max(facts.accumulator_registers // nvec, 1)
    need = facts.fma_per_cycle * facts.fma_latency  # independent FMA chains in flight
    if mr * nvec < need:  # a register file too small for two vectors a row: one vector, more rows
        nvec, mr = 1, facts.accumulator_registers
    nr = nvec * lanes
    # K unroll 4 (as BLIS's kernels): loop control is then < 1/(4 * mr * nvec) of the FMAs
    kc = _round_down(facts.l1d_bytes // 2 // (nr * size), 8)
    mc = _round_down(facts.l2_bytes // 2 // (kc * size), mr)
    nc = _round_down(facts.l3_bytes // 2 // (kc * size), nr)
    return GemmBlocking(mr=mr, nr=nr, nr_vectors=nvec, k_unroll=4, kc=kc, mc=mc, nc=nc)
