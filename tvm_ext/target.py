"""The one place that decides the default TVM target and thread count.

Everything in the plugin that builds or runs a kernel asks this module:

* :func:`default_target` is ``Target.from_device(tvm.cpu())`` (the host CPU's
  real ``mcpu``, never generic x86-64) plus ``num-cores`` for MetaSchedule.
* :func:`configure_threads` sets ``TVM_NUM_THREADS`` to all cores unless the
  user already set it.  TVM reads the variable when its thread pool first
  starts, so this runs when :mod:`tvm_ext.target` is imported.

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
from typing import Any

__all__ = [
    "configure_threads",
    "num_threads",
    "default_target",
    "resolve_target",
    "target_key",
    "cpu_features",
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


def default_target():
    """The host CPU target: ``Target.from_device(tvm.cpu())`` + ``num-cores``.

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
            return Target(merged)
        return Target(dict(target))
    from tvm_ext.errors import ConfigError

    raise ConfigError(f"target: expected None, a dict or a tvm Target, got {type(target).__name__}")


def target_key(target: Any = None) -> str:
    """A stable string naming a target, for cache keys and result records."""
    return str(resolve_target(target))


def cpu_features() -> list[str]:
    """CPU SIMD features LLVM reports for the host (e.g. ``avx512f``, ``fma``)."""
    import tvm

    f = tvm.get_global_func("target.llvm_get_cpu_features", allow_missing=True)
    if f is not None:
        try:
            feats = f(resolve_target(None))
            return sorted(str(k) for k in feats)
        except Exception:  # pragma: no cover - depends on TVM build
            pass
    flags: set[str] = set()
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
