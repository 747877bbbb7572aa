"""Demo: the platform the plugin builds for."""
from __future__ import annotations

from tvm_ext.platform_info import platform_info

TITLE = "Platform"


def run():
    info = platform_info()
    lines = [
        f"TVM {info['tvm_version']}, target mcpu={info['mcpu']}, "
        f"TVM_NUM_THREADS={info['tvm_num_threads']} of {info['cores']} cores",
        f"SIMD: {', '.join(info['cpu_simd_features'][:12])}"
        + (" ..." if len(info["cpu_simd_features"]) > 12 else ""),
    ]
    return {"mcpu": info["mcpu"], "threads": info["tvm_num_threads"]}, lines
