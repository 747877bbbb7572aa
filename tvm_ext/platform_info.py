"""Facts about this machine and the TVM build, recorded with every result.

>>> info = platform_info()
>>> info["tvm_num_threads"] >= 1
True
"""
from __future__ import annotations

import os
import platform
from typing import Any

from tvm_ext.target import cpu_features, default_target, num_threads

__all__ = ["platform_info", "thread_settings"]

_SIMD_PREFIXES = ("avx", "fma", "sse4", "amx", "f16c")


def thread_settings() -> dict[str, Any]:
    """Thread-count variables that govern TVM and the peers (OpenMP, MKL, BLAS)."""
    keys = ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
    return {k: os.environ.get(k) for k in keys}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover
        pass
    return platform.processor() or "unknown"


def platform_info() -> dict[str, Any]:
    """TVM version, target, CPU model and features, cores and thread settings."""
    import tvm
    import tvm_ffi

    import tvm_ext

    target = default_target()
    feats = cpu_features()
    return {
        "tvm_ext_version": tvm_ext.__version__,
        "tvm_version": tvm.__version__,
        "tvm_ffi_version": getattr(tvm_ffi, "__version__", "unknown"),
        "python": platform.python_version(),
        "target": str(target),
        "mcpu": str(target.attrs.get("mcpu", "generic")),
        "cpu_model": _cpu_model(),
        "cpu_simd_features": [f for f in feats if f.startswith(_SIMD_PREFIXES)],
        "cores": os.cpu_count(),
        "tvm_num_threads": num_threads(),
        "thread_env": thread_settings(),
    }
