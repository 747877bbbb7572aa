"""``model(x)`` on numpy arrays as one C call, built at first use (``csrc/model_call.c``).

After a model of milliseconds has evicted the caches, every bytecode, attribute lookup and
temporary object of the Python layer between the caller and the VM is a cache (and TLB) miss:
the checks, numpy's ``__dlpack__`` capsule and tvm_ffi's argument conversion, ``np.from_dlpack``
of the result, the frames.  :class:`NativeCall` does all of it in one C function:

* it checks each input (an exact ``ndarray`` of the planned shape and dtype whose flags say
  C-contiguous, element-aligned, writable; its address a multiple of ``alignment`` when that is
  set) and hands every other call to the Python checked path, which raises the one clear error
  or views/copies the input;
* it wraps each input's buffer in a ``DLManagedTensorVersioned`` that holds a reference to the
  array (released by its deleter, under the GIL, whenever the last holder drops the tensor) and
  makes a tvm_ffi ``Tensor`` of it (``TVMFFITensorFromDLPackVersioned``);
* it calls the VM function through ``TVMFFIFunctionCall``, releasing the GIL around it when the
  ``tvm_ffi.Function`` does (its ``release_gil``, true by default);
* a result that is a CPU tensor of a numpy dtype, or an ffi ``Array`` (a Relax tuple, nested or
  not) of such tensors and None, becomes the flat list :func:`~tvm_ext.model_call.numpy_outputs`
  makes of it, depth first: one ``ndarray`` over each tensor's buffer whose ``base`` is a capsule
  owning a reference to the tensor; any other result (a shape, a scalar, a tensor on another
  device or of a dtype numpy lacks, an empty tensor without a buffer, anywhere in the tuple), and
  every error of the call, goes back through tvm_ffi's own Python conversion (a relay function of
  the same C file that returns the stashed result or status) and ``numpy_outputs``, so
  ``model(x)`` returns and raises exactly what the Python path does.

The library is compiled with the headers of Python (``sysconfig``), numpy
(``numpy.get_include()``) and tvm_ffi (``tvm_ffi.libinfo``) and loaded through
:func:`tvm_ext.kernel_cache.load_c_library`: private directory, size and SHA-256 checked before
``dlopen``, its name carrying the hash of the source, the command and the versions it was built
against.  Without a C compiler or those headers (or with ``TVM_EXT_NATIVE_CALL=0``),
:func:`native_call` returns None, :class:`~tvm_ext.model_call.NumpyCall` keeps its Python hot
path (its ``call_path`` says which one runs) and :func:`unavailable_reason` says why.

>>> import numpy as np, tvm_ffi
>>> echo = tvm_ffi.get_global_func("testing.echo")  # a C function returning its argument
>>> call = native_call(echo, [((3,), np.dtype("float32"))], lambda inputs, named: "checked", list)
>>> call is None or ((call(np.ones(3, "float32"))[0].tolist(), call(np.ones(4, "float32")))
...                  == ([1.0, 1.0, 1.0], "checked"))
True
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import sysconfig
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["native_call", "native_module", "unavailable_reason"]

_SOURCE = Path(__file__).with_name("csrc") / "model_call.c"
_FLAGS = ("-O2", "-std=c11", "-fPIC", "-shared", "-fvisibility=hidden")
_LOCK = threading.Lock()
#: the loaded module (or the reason there is none), and the CDLL and relay function it needs alive
_STATE: dict[str, Any] = {}


def _compile_command(cc: str) -> tuple[list[str], list[str]]:
    """(flags before the source, libraries after it) of the build; ConfigError when a header is missing."""
    import tvm_ffi.libinfo

    from tvm_ext.errors import ConfigError

    includes = [sysconfig.get_paths()["include"], np.get_include(), tvm_ffi.libinfo.find_include_path()]
    for inc, header in zip(includes, ("Python.h", "numpy/arrayobject.h", "tvm/ffi/c_api.h")):
        if not (Path(inc) / header).is_file():
            raise ConfigError(f"the native model call: {header} not found in {inc} (install the Python "
                              f"development headers); model(x) uses its Python path")
    lib_dir = str(Path(tvm_ffi.libinfo.find_libtvm_ffi()).parent)
    return [cc, *_FLAGS, *(f"-I{i}" for i in includes)], [f"-L{lib_dir}", "-ltvm_ffi", f"-Wl,-rpath,{lib_dir}"]


def _build() -> Any:
    """Compile (once per source, command and versions), check, load; the module object of the C file."""
    import tvm_ffi

    from tvm_ext.kernel_cache import c_compiler, load_c_library

    cc = c_compiler("the native model call", "model(x) uses its Python path")
    head, libs = _compile_command(cc)
    versions = f"{sysconfig.get_config_var('SOABI')} numpy {np.__version__} tvm_ffi {tvm_ffi.__version__}"
    tag = hashlib.sha256(_SOURCE.read_bytes() + " ".join((*head, *libs, versions)).encode()).hexdigest()[:16]
    lib = load_c_library(f"libtvmext_model_call_{tag}.so", lambda: [*head, str(_SOURCE), *libs, "-o"],
                         what=_SOURCE.name, subdir="native")
    make = ctypes.PYFUNCTYPE(ctypes.py_object)(("tvmext_model_call_module", lib))  # called with the GIL held
    module = make()
    relay = tvm_ffi.Function.__from_extern_c__(module.relay_address)
    relay.release_gil = False  # it only moves a stashed value
    _STATE.update(lib=lib, relay=relay)
    return module


def native_module() -> Any | None:
    """The compiled module (its ``NativeCall`` type), built at the first call; None when unavailable.

    >>> m = native_module()
    >>> m is None or m.NativeCall.__name__
    'NativeCall'
    """
    from tvm_ext.errors import TvmExtError

    with _LOCK:
        if "module" not in _STATE:
            if os.environ.get("TVM_EXT_NATIVE_CALL", "1").lower() in ("0", "off", "false", "no"):
                _STATE.update(module=None, reason="turned off by TVM_EXT_NATIVE_CALL")
            else:
                try:
                    _STATE.update(module=_build(), reason=None)
                except (TvmExtError, OSError, ImportError, RuntimeError, AttributeError, ValueError) as e:
                    # no compiler or headers, a cache that is not private, a numpy the build does not match
                    _STATE.update(module=None, reason=f"{type(e).__name__}: {e}")
        return _STATE["module"]


def unavailable_reason() -> str | None:
    """Why :func:`native_module` is None (a compiler, a header, the environment), else None.

    >>> native_module() is not None or unavailable_reason() is not None
    True
    """
    native_module()
    return _STATE.get("reason")


def native_call(function: Any, plan: Sequence[tuple[tuple[int, ...], np.dtype]],
                checked_call: Callable[[tuple, dict], Any], outputs: Callable[[Any], list], *,
                alignment: int = 0) -> Any | None:
    """``call(*inputs, **named)`` running ``function`` in C on inputs that match ``plan``; None if unavailable.

    ``plan``: ``(shape, dtype)`` of each parameter.  An input that is not an exact ``ndarray`` of its
    shape and dtype, C-contiguous, element-aligned and writable (and, with ``alignment``, at an
    address that is a multiple of it), a call with named inputs or another count, goes to
    ``checked_call(inputs, named)``.  ``outputs(value)`` turns a result other than a CPU tensor of a
    numpy dtype or a (nested) tuple of them into the list of arrays
    (:func:`tvm_ext.model_call.numpy_outputs`).  None when
    ``function`` is no ``tvm_ffi.Function``, a dtype has no DLPack type, or the module is unavailable.

    >>> import tvm_ffi
    >>> echo = tvm_ffi.get_global_func("testing.echo")
    >>> call = native_call(echo, [((2,), np.dtype("int64"))], lambda inputs, named: (inputs, named), list)
    >>> call is None or (call(np.arange(2))[0].tolist(), call(x=1)) == ([0, 1], ((), {"x": 1}))
    True
    """
    import tvm_ffi

    module = native_module()
    if module is None or not isinstance(function, tvm_ffi.Function):
        return None
    try:
        return module.NativeCall(function, function.__chandle__(), bool(function.release_gil),
                                 [(tuple(int(d) for d in s), np.dtype(dt)) for s, dt in plan], int(alignment),
                                 checked_call, _STATE["relay"], outputs)
    except ValueError:  # a dtype without a DLPack type code (the Python path handles it)
        return None
