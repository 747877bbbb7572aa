"""``tvm-ext info``: TVM version, the host target, CPU features, threads."""
from __future__ import annotations

from tvm_ext.cli.output import Output
from tvm_ext.platform_info import platform_info


def register(subparsers, common) -> None:
    p = subparsers.add_parser("info", parents=[common], help="TVM version, target, CPU features, threads")
    p.set_defaults(func=run)


def run(args) -> Output:
    info = platform_info()
    lines = [
        f"tvm-ext       {info['tvm_ext_version']}",
        f"TVM           {info['tvm_version']} (tvm-ffi {info['tvm_ffi_version']})",
        f"target        {info['target']}",
        f"mcpu          {info['mcpu']}",
        f"threads       TVM_NUM_THREADS={info['tvm_num_threads']} (cores: {info['cores']})",
        f"CPU features  {', '.join(info['cpu_simd_features']) or '-'}",
    ]
    return Output(info, "\n".join(lines))
