"""Import models into Relax through TVM's own frontends (ONNX, PyTorch ``torch.export``).

Every path ends in a Relax ``IRModule`` whose ``main`` takes the model's
inputs; weights become constants (so :func:`tvm_ext.compile` can see, for
example, that a GCN's adjacency is mostly zeros).  Problems are reported as
plugin errors instead of protobuf or TVM tracebacks:

* a missing optional package (``onnx``, ``torch``) ->
  :class:`MissingDependencyError` (also an ``ImportError``) naming the extra to
  install;
* a file that does not exist, does not parse as ONNX, fails ``onnx.checker``
  or uses an operator the Relax frontend cannot import ->
  :class:`~tvm_ext.errors.InputError` naming the file and the problem.

>>> import pytest; _ = pytest.importorskip("onnx")
>>> from tvm_ext.models.onnx_models import mlp_onnx
>>> mod = from_onnx(mlp_onnx([8, 16, 4], batch=2))
>>> [p.name for p in mod["main"].params]
['x']
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from tvm_ext.errors import InputError, TvmExtError

__all__ = [
    "MissingDependencyError",
    "require",
    "from_onnx",
    "load_onnx",
    "from_torch",
    "from_exported_program_file",
    "load_model",
    "onnx_reference",
    "torch_reference",
]


class MissingDependencyError(TvmExtError, ImportError):
    """An optional package a frontend needs is not installed."""


_EXTRAS = {"onnx": "onnx", "torch": "torch"}


def _check_regular_file(path: Path, what: str) -> None:
    """``InputError`` unless ``path`` is a regular file (a FIFO or a device would block or never end)."""
    if not path.exists():
        raise InputError(f"{what}: no such file")
    if not path.is_file():
        raise InputError(f"{what}: not a regular file")


def require(package: str):
    """Import an optional package or raise :class:`MissingDependencyError` with the pip hint.

    >>> require("numpy").__name__
    'numpy'
    """
    import importlib

    try:
        return importlib.import_module(package)
    except ImportError as e:
        extra = _EXTRAS.get(package, package)
        raise MissingDependencyError(
            f"{package} is not installed ({e}); install it with: pip install {package} "
            f"(or pip install 'tvm-ext[{extra}]')") from None


# ---------------------------------------------------------------------------
# ONNX
# ---------------------------------------------------------------------------
def load_onnx(model: Any, *, check: bool = True):
    """An ``onnx.ModelProto`` from a path, raw bytes or a ModelProto, checked with ``onnx.checker``."""
    onnx = require("onnx")
    what = "ONNX model"
    if isinstance(model, onnx.ModelProto):
        proto = model
    else:
        if isinstance(model, (bytes, bytearray)):
            data = bytes(model)
        elif isinstance(model, (str, os.PathLike)):
            path = Path(model)
            what = f"ONNX file {str(path)!r}"
            _check_regular_file(path, what)
            data = path.read_bytes()
        else:
            raise InputError(f"ONNX model: expected a path, bytes or onnx.ModelProto, got {type(model).__name__}")
        if not data:
            raise InputError(f"{what}: the file is empty")
        try:
            proto = onnx.load_model_from_string(data)
        except Exception as e:  # protobuf DecodeError and friends
            raise InputError(f"{what}: not a valid ONNX protobuf ({type(e).__name__}: {e})") from None
        if not proto.graph.node and not proto.graph.output:
            raise InputError(f"{what}: parses, but holds no graph (is it an ONNX model?)")
    if check:
        try:
            onnx.checker.check_model(proto)
        except Exception as e:  # onnx.checker.ValidationError
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise InputError(f"{what}: fails onnx.checker: {first}") from None
    return proto


def _onnx_input_shapes(proto) -> dict[str, list[int]]:
    """Static shapes of the graph inputs that are not initializers (InputError if symbolic)."""
    inits = {t.name for t in proto.graph.initializer}
    shapes = {}
    for inp in proto.graph.input:
        if inp.name in inits:
            continue
        dims = inp.type.tensor_type.shape.dim
        shape = []
        for d in dims:
            if d.HasField("dim_value") and d.dim_value > 0:
                shape.append(int(d.dim_value))
            else:
                label = d.dim_param or "?"
                raise InputError(f"ONNX input {inp.name!r}: dimension {label!r} is not static; "
                                 "pass shapes={name: [...]}")
        shapes[inp.name] = shape
    return shapes


def from_onnx(model: Any, *, shapes: dict[str, Sequence[int]] | None = None, check: bool = True):
    """Import an ONNX model (path, bytes or ModelProto) with ``tvm.relax.frontend.onnx``.

    ``shapes`` fixes symbolic input dimensions.  Weights become constants.
    """
    proto = load_onnx(model, check=check)
    try:
        from tvm.relax.frontend.onnx import from_onnx as _from_onnx
    except ImportError as e:
        raise MissingDependencyError(f"the Relax ONNX frontend cannot load: {e}") from None
    shape_dict = {k: list(v) for k, v in (shapes or {}).items()}
    if not shape_dict:
        shape_dict = _onnx_input_shapes(proto)
    import tvm

    try:
        mod = _from_onnx(proto, shape_dict=shape_dict, keep_params_in_input=False)
    except tvm.error.OpNotImplemented as e:
        raise InputError(f"ONNX model: the Relax frontend cannot import it: {e}") from None
    except (NotImplementedError, ValueError, KeyError, TypeError) as e:
        raise InputError(f"ONNX model: the Relax frontend failed: {type(e).__name__}: {e}") from None
    return mod


def onnx_reference(model: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The outputs of ONNX's own reference runtime (``onnx.reference``) on ``inputs``."""
    proto = load_onnx(model, check=False)
    from onnx.reference import ReferenceEvaluator

    inits = {t.name for t in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in inits]
    if len(names) != len(inputs):
        raise InputError(f"ONNX model takes {len(names)} inputs ({names}), got {len(inputs)}")
    return [np.asarray(o) for o in ReferenceEvaluator(proto).run(None, dict(zip(names, inputs)))]


# ---------------------------------------------------------------------------
# PyTorch (torch.export)
# ---------------------------------------------------------------------------
def from_torch(module: Any, example_inputs: Sequence[Any]):
    """``torch.export.export(module.eval(), inputs)`` then ``from_exported_program``.

    Parameters and buffers become Relax constants.
    """
    torch = require("torch")
    if not isinstance(module, torch.nn.Module):
        raise InputError(f"from_torch: expected a torch.nn.Module, got {type(module).__name__}")
    args = tuple(torch.as_tensor(np.asarray(a)) if not isinstance(a, torch.Tensor) else a
                 for a in example_inputs)
    try:
        exported = torch.export.export(module.eval(), args)
    except Exception as e:
        raise InputError(f"torch.export failed for {type(module).__name__}: {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}") from None
    return _from_exported(exported, type(module).__name__)


def _from_exported(exported: Any, what: str):
    from tvm.relax.frontend.torch import from_exported_program

    try:
        return from_exported_program(exported)
    except (AssertionError, NotImplementedError, ValueError, KeyError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise InputError(f"{what}: the Relax torch frontend cannot import it: {msg}") from None


def from_exported_program_file(path: str | os.PathLike):
    """Import a ``torch.export.save``-d program (``.pt2``).

    ``torch.export.load`` unpickles the archive, which can run code it
    contains: pass trusted files only.  Nothing in the plugin loads a ``.pt2``
    it did not get from the caller (never from a cache or a tuning database).
    """
    torch = require("torch")
    p = Path(path)
    _check_regular_file(p, f"exported program {str(p)!r}")
    with open(p, "rb") as fh:  # a .pt2 is a zip archive; checked first, torch logs a traceback otherwise
        if fh.read(4) != b"PK\x03\x04":
            raise InputError(f"exported program {str(p)!r}: not a torch.export archive (a .pt2 file is a zip "
                             "archive written by torch.export.save)")
    log = logging.getLogger("torch.export")  # it logs a traceback before raising on a bad archive
    level = log.level
    log.setLevel(logging.CRITICAL + 1)
    try:
        exported = torch.export.load(str(p))
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e) else ""
        raise InputError(f"exported program {str(p)!r}: cannot load ({type(e).__name__}: {msg})") from None
    finally:
        log.setLevel(level)
    return _from_exported(exported, f"exported program {str(p)!r}")


def torch_reference(module: Any, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The module's own outputs (eval mode, no grad) as a list of numpy arrays."""
    torch = require("torch")
    with torch.no_grad():
        out = module.eval()(*[torch.from_numpy(np.ascontiguousarray(a)) for a in inputs])
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().numpy() for o in outs]


def load_model(path: str | os.PathLike, *, shapes: dict[str, Sequence[int]] | None = None):
    """A Relax module from a model file: ``.onnx`` (ONNX) or ``.pt2`` (torch.export).

    >>> load_model("model.h5")
    Traceback (most recent call last):
    ...
    tvm_ext.errors.InputError: model file 'model.h5': unknown format '.h5'; expected .onnx or .pt2
    """
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix == ".onnx":
        return from_onnx(p, shapes=shapes)
    if suffix == ".pt2":
        return from_exported_program_file(p)
    raise InputError(f"model file {str(p)!r}: unknown format {suffix or '(none)'!r}; expected .onnx or .pt2")
