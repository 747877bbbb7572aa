"""Sextans BYOC, compiler side: patterns, the ``relax.ext.sextans`` codegen and offload reports.

Flow (guide §5): ``FuseOpsByPattern(PATTERNS, bind_constants=False,
annotate_codegen=True)`` wraps each ``sextans_spmm`` / ``sextans_spmm_axpby``
call (see :mod:`~tvm_ext.spmm_engine.relax_op`) in its own function marked
``Codegen="sextans"``; the symbols get a tag naming the engine/platform
configuration; ``RunCodegen`` calls :func:`_codegen`, which registers, under
each function's ``global_symbol``, a DPS packed function ``f(*inputs, out)``
running the engine; the call site becomes ``R.call_dps_packed``.

At run time the kernel rebuilds A from the CSR tensors, preprocesses it
(schedule + encode; cached per matrix content, as a host driver would keep
the prepared stream of a constant weight), runs the functional simulator and
the cycle/HBM model, writes C and appends an :class:`OffloadReport` (cycles,
time, GFLOP/s, HBM bytes per matrix class) to :func:`offload_reports`.

Every call is offloaded one by one (``annotate_codegen`` instead of
``MergeCompositeFunctions``), so two adjacent SpMMs stay two engine runs.

>>> from tvm_ext.spmm_engine.byoc import PATTERNS
>>> [name for name, _ in PATTERNS]
['sextans.spmm_axpby', 'sextans.spmm']
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tvm_ext.byoc_common import ReportLog, composite_names, register_kernel, tag_symbols
from tvm_ext.errors import MappingError, ShapeError
from tvm_ext.spmm_engine.config import EngineConfig, Platform, get_platform
from tvm_ext.spmm_engine.perf_model import model
from tvm_ext.spmm_engine.preprocess import preprocess, resolve_config
from tvm_ext.spmm_engine.relax_op import SPMM_AXPBY_FUNC, SPMM_FUNC
from tvm_ext.spmm_engine.simulator import simulate

__all__ = ["CODEGEN", "PATTERNS", "OffloadReport", "offload_reports", "clear_offload_reports",
           "partition_for_sextans", "compile_relax", "config_tag"]

CODEGEN = "sextans"


def _patterns():
    from tvm.relax.dpl import is_call_tir

    return [(f"{CODEGEN}.spmm_axpby", is_call_tir(SPMM_AXPBY_FUNC)),
            (f"{CODEGEN}.spmm", is_call_tir(SPMM_FUNC))]


PATTERNS = _patterns()


@dataclass(frozen=True)
class OffloadReport:
    """What one offloaded SpMM call did on the modelled engine."""

    symbol: str
    composite: str
    shape: tuple[int, int]
    nnz: int
    n: int
    platform: str
    cycles: int
    seconds: float
    gflops: float
    bandwidth_utilization: float
    traffic: dict[str, int]
    stream_length: int
    bubbles: int
    preprocessed: bool  # False when the prepared stream came from the cache
    stages: dict[str, float] = field(default_factory=dict)

    @property
    def hbm_bytes(self) -> int:
        """All HBM traffic of the call (Q, A, B, C_in, C_out)."""
        return int(sum(self.traffic.values()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict."""
        d = asdict(self)
        d["hbm_bytes"] = self.hbm_bytes
        return d


_reports = ReportLog(max_len=10_000)  # the oldest are dropped beyond this


def offload_reports() -> list[OffloadReport]:
    """Reports of every offloaded call run so far in this process (oldest first)."""
    return _reports.items()


def clear_offload_reports() -> None:
    """Forget the collected reports."""
    _reports.clear()


def config_tag(config: EngineConfig, platform: Platform) -> str:
    """Short hash of an engine + platform configuration (suffix of kernel symbols)."""
    text = config.to_json() + platform.to_json()
    return hashlib.sha1(text.encode()).hexdigest()[:8]


# Prepared streams of the matrices seen by offloaded calls, keyed by configuration
# and content (a constant weight is preprocessed once, whichever call uses it).
_PROGRAM_CACHE_SIZE = 16
_lock = threading.Lock()  # guards the program cache
_programs: "OrderedDict[tuple[str, str], Any]" = OrderedDict()


def _program(config: EngineConfig, indptr, indices, data, shape) -> tuple[Any, bool]:
    """The encoded program of a CSR matrix (cached); True when freshly preprocessed."""
    h = hashlib.blake2b(digest_size=16)
    for a in (indptr, indices, data, np.asarray(shape, dtype=np.int64)):
        h.update(np.ascontiguousarray(a).tobytes())
    key = (config.to_json(), h.hexdigest())
    with _lock:
        prog = _programs.get(key)
        if prog is not None:
            _programs.move_to_end(key)
            return prog, False
    import scipy.sparse as sp

    prog = preprocess(sp.csr_array((data, indices, indptr), shape=shape), config)
    with _lock:
        _programs[key] = prog
        while len(_programs) > _PROGRAM_CACHE_SIZE:
            _programs.popitem(last=False)
    return prog, True


class _EngineKernel:
    """The DPS packed function registered for one offloaded call."""

    def __init__(self, symbol: str, composite: str, config: EngineConfig, platform: Platform):
        self.symbol, self.composite = symbol, composite
        self.config, self.platform = config, platform

    def __call__(self, *args: Any) -> None:
        *inputs, out = args
        arrays = [t.numpy() for t in inputs]
        indptr, indices, data, B = arrays[:4]
        M, N = (int(x) for x in out.shape)
        if indptr.shape[0] != M + 1:
            raise ShapeError(f"{self.symbol}: indptr has {indptr.shape[0]} entries, C has {M} rows")
        C, alpha, beta = None, 1.0, 0.0
        if self.composite.endswith("spmm_axpby"):
            C, (alpha, beta) = arrays[4], (float(arrays[5][0]), float(arrays[5][1]))
        program, fresh = _program(self.config, indptr, indices, data, (M, B.shape[0]))
        result = simulate(program, B, C, alpha=alpha, beta=beta)
        perf = model(program, N, self.platform)
        report = OffloadReport(
            symbol=self.symbol, composite=self.composite, shape=program.shape, nnz=program.nnz,
            n=N, platform=self.platform.name, cycles=perf.cycles, seconds=perf.seconds,
            gflops=perf.gflops, bandwidth_utilization=perf.bandwidth_utilization,
            traffic=dict(perf.traffic), stream_length=program.stream_length,
            bubbles=int(program.stats["bubbles"]), preprocessed=fresh,
            stages={k: v.seconds for k, v in perf.stages.items()},
        )
        _reports.append(report)
        out.copyfrom(result)


def _codegen(funcs, options, constant_names):
    """``relax.ext.sextans``: register one engine kernel per offloaded function."""
    opts = dict(options) if options is not None else {}
    cfg = EngineConfig.from_json(str(opts["config"])) if "config" in opts else EngineConfig()
    plat = Platform.from_json(str(opts["platform"])) if "platform" in opts else get_platform()
    for f in funcs:
        symbol = str(f.attrs["global_symbol"])
        comps = composite_names(f)
        if len(comps) != 1:  # annotate_codegen wraps exactly one composite per function
            raise MappingError(f"{symbol}: expected one Sextans composite, found {comps}")
        register_kernel(symbol, _EngineKernel(symbol, comps[0], cfg, plat))
    return []


def _register_codegen() -> None:
    import tvm_ffi

    tvm_ffi.register_global_func(f"relax.ext.{CODEGEN}", _codegen, override=True)


_register_codegen()


def partition_for_sextans(mod: Any, config: EngineConfig | dict | None = None,
                          platform: Platform | str | dict | None = None) -> Any:
    """Offload every sparse matmul of ``mod`` to the Sextans engine.

    Returns the module after RunCodegen: each SpMM is an
    ``R.call_dps_packed`` to a kernel registered in this process.
    """
    from tvm import relax

    cfg = resolve_config(config)
    plat = get_platform(platform)
    mod = relax.transform.FuseOpsByPattern(PATTERNS, bind_constants=False,
                                           annotate_codegen=True)(mod)
    mod = tag_symbols(mod, CODEGEN, config_tag(cfg, plat))
    options = {CODEGEN: {"config": cfg.to_json(), "platform": plat.to_json()}}
    mod = relax.transform.RunCodegen(options)(mod)
    return relax.transform.DeadCodeElimination()(mod)


def compile_relax(mod: Any, signature: Any = None, *, offload: bool = True,
                  config: EngineConfig | dict | None = None,
                  platform: Platform | str | dict | None = None, target: Any = None):
    """Build a Relax module (offloaded or on llvm) through the kernel cache; returns a VM.

    The cache key is ``signature`` (optional, e.g. the model's name), a hash
    of the module's TVMScript, and the configuration or ``"llvm"``.
    """
    from tvm import relax
    import tvm

    from tvm_ext.kernel_cache import get_or_build

    cfg = resolve_config(config)
    plat = get_platform(platform)
    tag = config_tag(cfg, plat) if offload else "llvm"
    script = hashlib.sha1(mod.script().encode()).hexdigest()[:16]

    def make():
        return partition_for_sextans(mod, cfg, plat) if offload else mod

    built = get_or_build(("spmm_engine.relax", signature, script, tag), make, target=target)
    return relax.VirtualMachine(built, tvm.cpu(0))
