"""ISAMIR's reference semantics: a numpy interpreter every transformation is checked against.

>>> import numpy as np
>>> from tensorize.isamir import parse_isamir
>>> p = parse_isamir("forall i:3,k:2 { c[i] += A[i][k]; }")
>>> evaluate(p, {"A": np.ones((3, 2), "float32"), "c": np.zeros(3, "float32")})["c"].tolist()
[2.0, 2.0, 2.0]
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from tvm_ext.errors import InputError

from .ir import FUNCTIONS, Buffer, Const, Operand, Program

__all__ = ["to_internal", "to_interface", "prepare_arrays", "run_statement", "collect_outputs", "evaluate"]

_UFUNC = {
    "+=": np.add,
    "-=": np.subtract,
    "*=": np.multiply,
    "/=": np.divide,
    "max=": np.maximum,
    "min=": np.minimum,
}


def to_internal(buf: Buffer, array: np.ndarray) -> np.ndarray:
    """Apply ``buf.layout`` to a caller array (zero padding for ``pad``)."""
    out = np.asarray(array)
    for op in buf.layout:
        if op[0] == "transpose":
            out = out.transpose(op[1])
        elif op[0] == "reshape":
            out = out.reshape(op[2])
        elif op[0] == "pad":
            out = np.pad(out, [(0, n - o) for o, n in zip(op[1], op[2])])
    return np.array(out, order="C")


def to_interface(buf: Buffer, array: np.ndarray) -> np.ndarray:
    """Undo ``buf.layout`` (crop, reshape back, transpose back)."""
    out = np.asarray(array)
    for op in reversed(buf.layout):
        if op[0] == "transpose":
            out = out.transpose(np.argsort(op[1]))
        elif op[0] == "reshape":
            out = out.reshape(op[1])
        elif op[0] == "pad":
            out = out[tuple(slice(0, o) for o in op[1])]
    return np.array(out, order="C")


def _operand_values(acc: Operand, arrays: Mapping[str, np.ndarray], env, shape):
    if isinstance(acc, Const):
        return np.full(shape, acc.value)
    idx = tuple(np.broadcast_to(np.asarray(r.evaluate(env)), shape) for r in acc.rows)
    return np.broadcast_to(arrays[acc.buffer][idx] if idx else arrays[acc.buffer][()], shape)


def _scalar_update(op: str, cur, vals: np.ndarray):
    """``cur op= vals`` reduced over every element of ``vals``."""
    with np.errstate(all="ignore"):
        if op == "+=":
            return cur + vals.sum()
        if op == "-=":
            return cur - vals.sum()
        if op == "*=":
            return cur * vals.prod()
        if op == "/=":
            return cur / vals.prod()
        return _UFUNC[op](cur, _UFUNC[op].reduce(vals.ravel()) if vals.size else cur)


def prepare_arrays(program: Program, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Internal-layout arrays for every buffer: inputs (and given outputs) converted, the rest zeros."""
    arrays: dict[str, np.ndarray] = {}
    for b in program.buffers:
        if any(s is None for s in b.shape):
            raise InputError(f"evaluate: buffer {b.name} has a flexible shape; instantiate() first")
        if b.name in inputs:
            arr = np.asarray(inputs[b.name], dtype=b.dtype)
            if arr.shape != tuple(b.interface_shape):
                raise InputError(f"evaluate: {b.name} has shape {arr.shape}, expected {b.interface_shape}")
            arrays[b.name] = to_internal(b, arr).astype(b.dtype, copy=True)
        elif b.role == "input":
            raise InputError(f"evaluate: missing input {b.name!r}")
        else:
            arrays[b.name] = np.zeros(b.shape, dtype=b.dtype)
    return arrays


def run_statement(program: Program, k: int, arrays: dict[str, np.ndarray]) -> None:
    """Execute statement ``k`` over its whole domain, updating ``arrays`` in place."""
    s = program.statements[k]
    axes = program.statement_axes(k)
    shape = tuple(program.extent(a) for a in axes)
    grids = np.indices(shape, sparse=True) if axes else []
    env = dict(zip(axes, grids))
    vals = _operand_values(s.src, arrays, env, shape)
    if s.fn:
        with np.errstate(all="ignore"):
            vals = FUNCTIONS[s.fn](vals.astype(np.float64))
    dst = arrays[s.dst.buffer]
    idx = tuple(np.broadcast_to(np.asarray(r.evaluate(env)), shape) for r in s.dst.rows)
    if s.op == ":=":
        dst[idx] = vals
    elif dst.ndim == 0:
        dst[()] = _scalar_update(s.op, dst[()], np.asarray(vals, dtype=dst.dtype))
    else:
        with np.errstate(all="ignore"):
            _UFUNC[s.op].at(dst, idx, np.asarray(vals, dtype=dst.dtype))


def collect_outputs(program: Program, arrays: Mapping[str, np.ndarray], return_all: bool = False) -> dict:
    """Outputs (or every buffer) in the caller's layout."""
    out = {}
    for b in program.buffers:
        if return_all or b.role == "output":
            out[b.name] = to_interface(b, arrays[b.name]) if b.role != "temp" else arrays[b.name]
    return out


def evaluate(
    program: Program, inputs: Mapping[str, np.ndarray], *, return_all: bool = False
) -> dict[str, np.ndarray]:
    """Run ``program`` with numpy (the reference semantics of ISAMIR).

    ``inputs`` holds every input buffer and, optionally, initial values of
    outputs (default zeros), in the caller's layout.  Returns the outputs (or
    every buffer with ``return_all``), in the caller's layout.
    """
    arrays = prepare_arrays(program, inputs)
    for k in range(len(program.statements)):
        run_statement(program, k, arrays)
    return collect_outputs(program, arrays, return_all)
