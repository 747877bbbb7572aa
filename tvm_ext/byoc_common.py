"""Pieces every Python-simulated BYOC target of the plugin shares.

A target built on a simulator registers, per offloaded Relax function, a DPS
packed function under the function's ``global_symbol`` (the Relax VM looks
symbols up in the global registry), and keeps per-call reports.  This module
holds the generic parts:

* :func:`composite_names`: the ``Composite`` names inside an offloaded function;
* :func:`tag_symbols`: suffix the ``global_symbol`` of a codegen's functions
  with a configuration tag, so modules compiled for different hardware
  configurations never share a kernel;
* :func:`register_kernel`: register a Python callable as a packed function;
* :class:`ReportLog`: a bounded, thread-safe list of reports.

>>> log = ReportLog(max_len=2)
>>> for k in range(3): log.append(k)
>>> log.items()
[1, 2]
"""
from __future__ import annotations

import threading
from typing import Any, Callable

__all__ = ["composite_names", "tag_symbols", "register_kernel", "ReportLog", "offloaded_symbols"]


def composite_names(func: Any) -> list[str]:
    """``Composite`` attributes of the functions nested in ``func`` (post order)."""
    from tvm import relax

    names: list[str] = []

    def visit(e):
        if isinstance(e, relax.Function) and e.attrs is not None and "Composite" in e.attrs:
            names.append(str(e.attrs["Composite"]))

    relax.analysis.post_order_visit(func, visit)
    return names


def offloaded_symbols(mod: Any, codegen: str) -> list[str]:
    """``global_symbol`` of every function of ``mod`` marked ``Codegen=codegen``."""
    from tvm import relax

    out = []
    for _, func in mod.functions.items():
        if (isinstance(func, relax.Function) and func.attrs is not None
                and str(func.attrs.get("Codegen", "")) == codegen):
            out.append(str(func.attrs["global_symbol"]))
    return out


def tag_symbols(mod: Any, codegen: str, tag: str) -> Any:
    """Suffix ``_<tag>`` to the ``global_symbol`` of every ``Codegen=codegen`` function."""
    from tvm import relax

    for gv, func in list(mod.functions.items()):
        if (isinstance(func, relax.Function) and func.attrs is not None
                and str(func.attrs.get("Codegen", "")) == codegen):
            mod[gv] = func.with_attr("global_symbol", f"{func.attrs['global_symbol']}_{tag}")
    return mod


def register_kernel(symbol: str, kernel: Callable[..., None]) -> None:
    """Register ``kernel(*inputs, *outputs)`` (DPS) as the packed function ``symbol``."""
    import tvm_ffi

    tvm_ffi.register_global_func(symbol, kernel, override=True)


class ReportLog:
    """A bounded, thread-safe append-only list (the oldest entries drop beyond ``max_len``)."""

    def __init__(self, max_len: int = 10_000):
        self._lock = threading.Lock()
        self._items: list[Any] = []
        self.max_len = int(max_len)

    def append(self, item: Any) -> None:
        with self._lock:
            self._items.append(item)
            del self._items[:-self.max_len]

    def items(self) -> list[Any]:
        with self._lock:
            return list(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
