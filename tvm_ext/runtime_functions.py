"""The plugin's runtime functions: registered by name in TVM's global function registry.

A compiled module calls its offloaded parts through ``R.call_dps_packed`` with
the part's serialised program as the first argument (a ``uint8`` constant of
the module), so an exported library needs only these functions in the
process that loads it:

* ``tvm_ext.accel.run(program, *inputs, *outputs)``: the matrix
  accelerator's functional simulator (:mod:`tvm_ext.accel.byoc`);
* ``tvm_ext.sextans.run(program, *inputs, out)``: the Sextans SpMM engine's
  simulator and cycle model (:mod:`tvm_ext.spmm_engine.byoc`).

``import tvm_ext`` registers them as soon as ``tvm_ffi`` is loaded (at once
when it already is, otherwise right after its import: :mod:`tvm_ext.import_hooks`),
without importing TVM itself; the simulators load on the first call.

>>> sorted(RUNTIME_FUNCTIONS)
['tvm_ext.accel.run', 'tvm_ext.sextans.run']
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

__all__ = ["RUNTIME_FUNCTIONS", "register_runtime_functions"]

#: runtime function name -> (module, attribute) of its implementation.
RUNTIME_FUNCTIONS: dict[str, tuple[str, str]] = {
    "tvm_ext.accel.run": ("tvm_ext.accel.byoc", "run_program"),
    "tvm_ext.sextans.run": ("tvm_ext.spmm_engine.byoc", "run_program"),
}


def _lazy(module: str, attr: str) -> Callable[..., None]:
    impl: list[Callable[..., None]] = []

    def call(*args: Any) -> None:
        if not impl:
            impl.append(getattr(importlib.import_module(module), attr))
        impl[0](*args)

    return call


def register_runtime_functions(ffi: Any = None) -> None:
    """Register every runtime function in TVM's global registry (idempotent), and the plugin's
    error classes with the FFI, so an error raised inside a pass or a runtime function reaches
    the caller as itself (a ``ShapeError``, not a ``RuntimeError``)."""
    ffi = ffi if ffi is not None else importlib.import_module("tvm_ffi")
    for name, (module, attr) in RUNTIME_FUNCTIONS.items():
        ffi.register_global_func(name, _lazy(module, attr), override=True)
    from tvm_ext import errors

    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.TvmExtError):
            # a qualified kind: TVM's own error kinds (its ScheduleError) keep their classes
            ffi.register_error(f"tvm_ext.{cls.__name__}", cls)
