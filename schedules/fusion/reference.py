"""Numpy reference executor for an einsum DAG (checks that a DAG computes what it claims).

GOGETA §2.2.1 validates its einsum form of Block CG against
``scipy.sparse.linalg.cg``; this executor lets the tests do the same.

>>> import numpy as np
>>> from schedules.fusion.einsum_dag import EinsumDAG
>>> dag = EinsumDAG()
>>> dag.add_tensor("A", ("m", "k"), (2, 2)); dag.add_tensor("B", ("k", "n"), (2, 1))
>>> _ = dag.einsum("Z", "mk,kn->mn", "A", "B")
>>> evaluate(dag, {"A": np.eye(2), "B": np.ones((2, 1))})["Z"].ravel().tolist()
[1.0, 1.0]
"""
from __future__ import annotations

import string
from typing import Any, Mapping

import numpy as np
import scipy.sparse as sp

from schedules.fusion.einsum_dag import EinsumDAG, Op
from tvm_ext.errors import InputError, ShapeError

__all__ = ["evaluate"]

_DENSIFY_LIMIT = 20_000_000  # elements; larger sparse operands must be plain SpMM


def _letters(op: Op) -> dict[str, str]:
    idx = op.indices
    if len(idx) > len(string.ascii_letters):
        raise InputError(f"op {op.name!r}: too many indices for numpy.einsum")
    return {i: string.ascii_letters[n] for n, i in enumerate(idx)}


def _subs(indices, letters) -> str:
    return "".join(letters[i] for i in indices)


def _mac(op: Op, arrays: list[Any]) -> np.ndarray:
    letters = _letters(op)
    out = _subs(op.output.indices, letters)
    if any(sp.issparse(a) for a in arrays):
        s = next(n for n, a in enumerate(arrays) if sp.issparse(a))
        a = arrays[s]
        if a.shape[0] * a.shape[1] <= _DENSIFY_LIMIT:
            arrays = [x.toarray() if sp.issparse(x) else x for x in arrays]
        elif len(arrays) == 2 and s == 0 and op.inputs[0].indices[1] == op.inputs[1].indices[0] \
                and op.output.indices == (op.inputs[0].indices[0], op.inputs[1].indices[1]):
            return np.asarray(a @ arrays[1])
        else:
            raise InputError(f"op {op.name!r}: sparse operand too large to densify and not a plain SpMM")
    subs = ",".join(_subs(o.indices, letters) for o in op.inputs)
    return np.einsum(f"{subs}->{out}", *arrays, optimize=True)


def _apply(op: Op, values: Mapping[str, Any]) -> np.ndarray:
    arrays = [values[o.tensor] for o in op.inputs]
    letters = _letters(op)
    out = _subs(op.output.indices, letters)
    if op.kind in ("add", "sub"):
        a, b = (np.einsum(f"{_subs(o.indices, letters)}->{out}", x) for o, x in zip(op.inputs, arrays))
        return a + b if op.kind == "add" else a - b
    if op.kind == "inv":
        first = arrays[0].toarray() if sp.issparse(arrays[0]) else np.asarray(arrays[0])
        arrays = [np.linalg.inv(first), *arrays[1:]]
    result = _mac(op, arrays)
    if op.addend is not None:
        add = np.einsum(f"{_subs(op.addend.indices, letters)}->{out}", values[op.addend.tensor])
        result = add + op.sign * result
    return result


def evaluate(dag: EinsumDAG, inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Run every op with numpy/scipy; returns all tensors (inputs included).

    Sparse inputs may be scipy sparse matrices; everything else numpy arrays
    whose shapes must match the DAG's declarations.
    """
    values: dict[str, Any] = {}
    for name in dag.inputs:
        if name not in inputs:
            raise InputError(f"evaluate: missing input tensor {name!r}")
        x = inputs[name]
        x = x if sp.issparse(x) else np.asarray(x, dtype=float)
        if tuple(x.shape) != dag.tensors[name].shape:
            raise ShapeError(f"evaluate: input {name!r} has shape {tuple(x.shape)}, "
                             f"expected {dag.tensors[name].shape}")
        values[name] = x
    for op in dag.ops:
        values[op.name] = _apply(op, values)
    return values
