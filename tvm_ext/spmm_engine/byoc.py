"""Sextans BYOC, compiler side: patterns, code generation, the runtime kernel and its reports.

Flow (guide §5): ``FuseOpsByPattern(PATTERNS, bind_constants=False,
annotate_codegen=True)`` wraps each ``sextans_spmm`` / ``sextans_spmm_axpby``
call (see :mod:`~tvm_ext.spmm_engine.relax_op`; the patterns are in TVM's
pattern registry under ``sextans``) in its own function marked
``Codegen="sextans"``; the symbols get a tag naming the engine/platform
configuration; :func:`lower_sextans`, the code generator, turns each call
site into ``R.call_dps_packed("tvm_ext.sextans.run", program, ...)``.

The program (a ``uint8`` constant of the module) holds the configuration,
the platform and, when the sparse operand is a constant, its preprocessed
non-zero stream (Q pointers + 64-bit words per pass; the CSR arguments are
then dropped).  A sparse operand passed at run time is preprocessed by the
runtime kernel instead (cached per matrix content, as a host driver would
keep the prepared stream of a constant weight).  The runtime function,
registered when ``tvm_ext`` is imported, decodes a program once per process
into a kernel that runs the functional simulator and the cycle/HBM model,
writes C and keeps its own counters and last :class:`OffloadReport`
(:func:`offload_reports`, :func:`kernel_counters`).

Every call is offloaded one by one (``annotate_codegen`` instead of
``MergeCompositeFunctions``), so two adjacent SpMMs stay two engine runs.

>>> from tvm_ext.spmm_engine.byoc import PATTERNS
>>> [name for name, _ in PATTERNS]
['sextans.spmm_axpby', 'sextans.spmm']
"""
from __future__ import annotations

import hashlib
import io
import itertools
import json
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tvm_ext.byoc_common import (KernelCounters, ProgramKernels, lower_codegen_calls, pack_program, tag_symbols)
from tvm_ext.errors import MappingError, ShapeError
from tvm_ext.spmm_engine.config import EngineConfig, Platform, get_platform
from tvm_ext.spmm_engine.encoding import EncodedPass, SextansProgram
from tvm_ext.spmm_engine.perf_model import model
from tvm_ext.spmm_engine.preprocess import preprocess, resolve_config
from tvm_ext.spmm_engine.relax_op import CODEGEN, sextans_patterns
from tvm_ext.spmm_engine.simulator import simulate

__all__ = ["CODEGEN", "PATTERNS", "OffloadReport", "offload_reports", "clear_offload_reports",
           "partition_for_sextans", "lower_sextans", "compile_relax", "config_tag", "run_program",
           "kernel_counters", "RUNTIME_FUNCTION"]

#: The runtime function every offloaded call goes through (:mod:`tvm_ext.runtime_functions`).
RUNTIME_FUNCTION = "tvm_ext.sextans.run"

PATTERNS = sextans_patterns()


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


_sequence = itertools.count()  # orders the kernels' last calls for offload_reports()


def offload_reports() -> list[OffloadReport]:
    """The last call's report of every engine kernel that ran since :func:`clear_offload_reports`
    (kernels in the order of those calls)."""
    last = [k.last for _, k in _KERNELS.items() if k.last is not None]
    return [r for _, r in sorted(last, key=lambda x: x[0])]


def clear_offload_reports() -> None:
    """Forget the kernels' last reports (their counters keep counting)."""
    for _, k in _KERNELS.items():
        k.last = None


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


# ---------------------------------------------------------------------------
# Programs: the engine program of a constant matrix, serialised
# ---------------------------------------------------------------------------
def _json_default(o: Any) -> Any:
    return o.item() if hasattr(o, "item") else list(o)


def _encode_matrix(prog: SextansProgram) -> tuple[dict[str, Any], bytes]:
    arrays = {}
    for p in prog.passes:
        arrays[f"q{p.index}"], arrays[f"w{p.index}"] = p.q, p.words
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    meta = {"shape": list(prog.shape), "nnz": int(prog.nnz), "config": prog.config.to_json(),
            "passes": [[p.index, p.row0, p.rows] for p in prog.passes],
            "stats": json.loads(json.dumps(prog.stats, default=_json_default))}
    return meta, buf.getvalue()


def _decode_matrix(meta: dict[str, Any], body: memoryview) -> SextansProgram:
    with np.load(io.BytesIO(bytes(body))) as z:
        passes = tuple(EncodedPass(index=int(i), row0=int(r0), rows=int(n), q=z[f"q{i}"], words=z[f"w{i}"])
                       for i, r0, n in meta["passes"])
    return SextansProgram(shape=tuple(meta["shape"]), nnz=int(meta["nnz"]),
                          config=EngineConfig.from_json(meta["config"]), passes=passes, stats=meta["stats"])


class _EngineKernel:
    """The simulator of one offloaded call site: ``kernel([csr...,] B, [C_in, alpha_beta,] out)``."""

    def __init__(self, symbol: str, composite: str, config: EngineConfig, platform: Platform,
                 matrix: SextansProgram | None = None):
        self.symbol, self.composite = symbol, composite
        self.config, self.platform = config, platform
        self.matrix = matrix  # prepared at compile time (constant operand), else None
        self._lock = threading.Lock()
        self.counters = KernelCounters()
        self.last: tuple[int, OffloadReport] | None = None

    def __call__(self, *args: Any) -> None:
        *inputs, out = args
        arrays = [t.numpy() for t in inputs]
        M, N = (int(x) for x in out.shape)
        if self.matrix is None:
            indptr, indices, data, B = arrays[:4]
            rest = arrays[4:]
            if indptr.shape[0] != M + 1:
                raise ShapeError(f"{self.symbol}: indptr has {indptr.shape[0]} entries, C has {M} rows")
            program, fresh = _program(self.config, indptr, indices, data, (M, B.shape[0]))
        else:
            B, rest = arrays[0], arrays[1:]
            program, fresh = self.matrix, False
            if program.shape != (M, B.shape[0]):
                raise ShapeError(f"{self.symbol}: A is {program.shape}, B has {B.shape[0]} rows, C {M}")
        C, alpha, beta = None, 1.0, 0.0
        if self.composite.endswith("spmm_axpby"):
            C, (alpha, beta) = rest[0], (float(rest[1][0]), float(rest[1][1]))
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
        with self._lock:
            c = self.counters
            c.calls += 1
            c.cycles += int(perf.cycles)
            c.seconds += float(perf.seconds)
            for k, v in perf.traffic.items():
                c.traffic[f"hbm.{k}"] = c.traffic.get(f"hbm.{k}", 0) + int(v)
            self.last = (next(_sequence), report)
        out.copyfrom(result)


def _kernel_from_program(header: dict[str, Any], body: memoryview) -> _EngineKernel:
    matrix = _decode_matrix(header["matrix"], body) if header.get("matrix") else None
    return _EngineKernel(str(header["symbol"]), str(header["composite"]), EngineConfig.from_json(header["config"]),
                         Platform.from_json(header["platform"]), matrix)


_KERNELS = ProgramKernels(_kernel_from_program)


def run_program(program: Any, *args: Any) -> None:
    """The runtime function ``tvm_ext.sextans.run``: one engine run of the program's SpMM on ``args``."""
    _KERNELS.get(program)(*args)


def kernel_counters(digest: bytes) -> KernelCounters | None:
    """Calls and simulated cost of the kernel of ``digest`` so far (None when it never ran here)."""
    return _KERNELS.counters(digest)


def _constant_csr(args: list) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    import tvm

    if all(isinstance(a, tvm.ir.expr.Constant) for a in args[:3]):
        return tuple(a.value.numpy() for a in args[:3])
    return None


def lower_sextans(mod: Any, config: EngineConfig, platform: Platform) -> Any:
    """The engine's code generator: each call of a ``Codegen="sextans"`` function -> a program constant and
    ``R.call_dps_packed("tvm_ext.sextans.run", program, ...)``; a constant sparse operand is preprocessed
    here and travels in the program."""
    from tvm import relax

    from tvm_ext.byoc_common import composite_names

    used: dict[str, int] = {}

    def lower(gv, func, call):
        symbol = str(func.attrs["global_symbol"])
        used[symbol] = used.get(symbol, 0) + 1
        if used[symbol] > 1:  # one function serves several call sites: one kernel (and name) per site
            symbol = f"{symbol}_{used[symbol] - 1}"
        comps = composite_names(func)
        if len(comps) != 1:  # annotate_codegen wraps exactly one composite per function
            raise MappingError(f"{symbol}: expected one Sextans composite, found {comps}")
        header = {"codegen": CODEGEN, "symbol": symbol, "composite": comps[0], "config": config.to_json(),
                  "platform": platform.to_json(), "matrix": None, "ops": ["matmul"],
                  "detail": f"Sextans HBM engine, platform {platform.name}"}
        args, body, matrix = list(call.args), b"", None
        csr = _constant_csr(args)
        if csr is not None:
            M = int(call.ty.shape.values[0])
            K = int(args[3].ty.shape.values[0])
            matrix = preprocess(_csr(csr, (M, K)), config)
            header["matrix"], body = _encode_matrix(matrix)
            args = args[3:]
        program = pack_program(header, body)
        _KERNELS.put(program, _EngineKernel(symbol, comps[0], config, platform, matrix))
        return relax.call_dps_packed(RUNTIME_FUNCTION, [relax.const(program), *args], out_ty=call.ty)

    return lower_codegen_calls(mod, CODEGEN, lower)


def _csr(arrays, shape):
    import scipy.sparse as sp

    indptr, indices, data = arrays
    return sp.csr_array((data, indices, indptr), shape=shape)


def partition_for_sextans(mod: Any, config: EngineConfig | dict | None = None,
                          platform: Platform | str | dict | None = None) -> Any:
    """Offload every sparse matmul of ``mod`` to the Sextans engine.

    Returns the module after code generation: each SpMM is an
    ``R.call_dps_packed("tvm_ext.sextans.run", program, ...)`` whose program
    is a constant of the module (it exports and loads with it).
    """
    from tvm import relax

    cfg = resolve_config(config)
    plat = get_platform(platform)
    mod = relax.transform.FuseOpsByPattern(PATTERNS, bind_constants=False,
                                           annotate_codegen=True)(mod)
    mod = tag_symbols(mod, CODEGEN, config_tag(cfg, plat))
    return lower_sextans(mod, cfg, plat)


def compile_relax(mod: Any, signature: Any = None, *, offload: bool = True,
                  config: EngineConfig | dict | None = None,
                  platform: Platform | str | dict | None = None, target: Any = None):
    """Build a Relax module (offloaded or on llvm) through the kernel cache; returns a VM.

    The cache key is ``signature`` (optional, e.g. the model's name), the
    module's structural hash, and the configuration or ``"llvm"``.
    """
    import tvm
    import tvm_ffi
    from tvm import relax

    from tvm_ext.kernel_cache import get_or_build

    cfg = resolve_config(config)
    plat = get_platform(platform)
    tag = config_tag(cfg, plat) if offload else "llvm"

    def make():
        return partition_for_sextans(mod, cfg, plat) if offload else mod

    built = get_or_build(("spmm_engine.relax", signature, tvm_ffi.structural_hash(mod), tag), make, target=target)
    return relax.VirtualMachine(built, tvm.cpu(0))
