"""tvm-ext: a scheduling plugin for Apache TVM 0.27.

The base layer (:mod:`tvm_ext.errors`, :mod:`tvm_ext.target`,
:mod:`tvm_ext.kernel_cache`, :mod:`tvm_ext.workloads`) is imported by every
package of the plugin.  Heavier parts (hardware models, ``compile``, tuning)
load lazily on first attribute access, so ``import tvm_ext`` stays cheap and
``schedules``/``tensorize`` can use the base layer without import cycles.

>>> import tvm_ext
>>> tvm_ext.load_matrix("LFAT5").shape
(14, 14)
"""
from __future__ import annotations

from tvm_ext import errors
from tvm_ext import import_hooks as _import_hooks
from tvm_ext.lazy_exports import lazy_getattr
from tvm_ext.errors import (
    ConfigError,
    ConvergenceError,
    InputError,
    MappingError,
    MatrixFormatError,
    ScheduleError,
    ShapeError,
    TuningError,
    TvmExtError,
)
from tvm_ext.target import configure_threads, default_target, num_threads, resolve_target
from tvm_ext.workloads import list_matrices, load_matrix, matrix_stats, read_matrix_market

__version__ = "0.1.0"

# name -> module that defines it; loaded on first access (PEP 562).
_LAZY: dict[str, str] = {
    "workloads": "tvm_ext.workloads",
    "kernel_cache": "tvm_ext.kernel_cache",
    "spmm_engine": "tvm_ext.spmm_engine",
    "accel": "tvm_ext.accel",
    "tuning": "tvm_ext.tuning",
    "compile": "tvm_ext.compile",  # the module is callable: tvm_ext.compile(mod, ...)
    "CompileReport": "tvm_ext.compile",
    "CompiledModel": "tvm_ext.compile",
    "llvm_only": "tvm_ext.compile",
    "models": "tvm_ext.models",
    "pipeline": "tvm_ext.pipeline",  # the module is callable: tvm_ext.pipeline(accel=...) -> Pass
    "load": "tvm_ext.compile",
}

__all__ = [
    "errors",
    "TvmExtError", "InputError", "MatrixFormatError", "ShapeError", "MappingError",
    "ConfigError", "ScheduleError", "TuningError", "ConvergenceError",
    "configure_threads", "default_target", "num_threads", "resolve_target",
    "list_matrices", "load_matrix", "matrix_stats", "read_matrix_market",
    *_LAZY,
]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())

# runtime functions, the "tvm_ext" pipeline and the BYOC patterns: registered with TVM when it loads
_import_hooks.install()
