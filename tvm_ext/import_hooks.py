"""Register the plugin with TVM when TVM loads, without importing TVM from ``import tvm_ext``.

Importing ``tvm_ffi`` costs seconds; ``import tvm_ext`` must stay cheap.  So
:func:`install` runs each registration at once when its module is already
loaded, and otherwise right after that module's import finishes:

* after ``tvm_ffi``: the runtime functions (:mod:`tvm_ext.runtime_functions`);
* after ``tvm``: the ``"tvm_ext"`` Relax pipeline and the BYOC patterns
  (:func:`tvm_ext.pipeline.register_with_tvm`).

>>> import sys
>>> install()
>>> "tvm" in sys.modules or any(isinstance(f, _AfterImport) for f in sys.meta_path)
True
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any, Callable

__all__ = ["install", "after_import"]


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls ``callback(module)`` right after ``name`` is executed (once).

    A ``find_spec`` that is only a lookup (a library probing whether TVM is
    installed) does not use the hook up: it leaves ``sys.meta_path`` when the
    module actually runs."""

    def __init__(self, name: str, callback: Callable[[Any], None]):
        self.name, self.callback = name, callback
        self._looking = False

    def find_spec(self, name: str, path: Any = None, target: Any = None):
        if name != self.name or self._looking:
            return None
        self._looking = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._looking = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, hook = spec.loader, self
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            if hook in sys.meta_path:
                sys.meta_path.remove(hook)
                hook.callback(module)

        loader.exec_module = exec_module
        return spec


def after_import(name: str, callback: Callable[[Any], None]) -> None:
    """Run ``callback(module)`` now if ``name`` is loaded, else right after it is imported."""
    if name in sys.modules:
        callback(sys.modules[name])
    elif not any(isinstance(f, _AfterImport) and f.name == name and f.callback is callback for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, callback))


def _runtime(ffi: Any) -> None:
    from tvm_ext.runtime_functions import register_runtime_functions

    register_runtime_functions(ffi)


def _tvm(_: Any) -> None:
    from tvm_ext.pipeline import register_with_tvm

    register_with_tvm()


def install() -> None:
    """Register the runtime functions, the pipeline and the patterns when TVM is (or gets) loaded."""
    after_import("tvm_ffi", _runtime)
    after_import("tvm", _tvm)
