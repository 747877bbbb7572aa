"""How the report names an op of the model: ``(op, "(in shapes) -> out")``.

A readable label only; ops are identified by their ids in the IR
(:mod:`tvm_ext.compile_steps.placement`), so two ops with one label stay two ops.

>>> import numpy as np
>>> from tvm import relax
>>> x = relax.Var("x", relax.TensorType((4, 8), "float32"))
>>> op_key(relax.op.nn.relu(x), relax.TensorType((4, 8), "float32"))
('nn.relu', '(4x8) -> 4x8')
"""
from __future__ import annotations

from typing import Any

__all__ = ["shape_str", "op_key", "op_calls"]


def shape_str(sinfo_or_expr: Any) -> str:
    """``"4x8"`` for a static tensor shape, ``"?"`` otherwise."""
    sinfo = getattr(sinfo_or_expr, "ty", sinfo_or_expr)
    try:
        return "x".join(str(int(d)) for d in sinfo.shape.values)
    except (AttributeError, TypeError, ValueError):
        return "?"


def op_key(call: Any, out: Any = None) -> tuple[str, str]:
    """(op name without ``relax.``, ``"(in shapes) -> out shape"``) of an op call."""
    from tvm import relax

    ins = ", ".join(shape_str(a) for a in call.args
                    if isinstance(getattr(a, "ty", None), relax.TensorType))
    out_shape = shape_str(out if out is not None else call)
    return str(call.op.name).removeprefix("relax."), f"({ins}) -> {out_shape}"


def op_calls(func: Any) -> list[tuple[str, str]]:
    """:func:`op_key` of every op binding of a Relax function, in program order."""
    import tvm
    from tvm import relax

    out = []
    for block in func.body.blocks:
        for b in block.bindings:
            v = getattr(b, "value", None)
            if isinstance(v, relax.Call) and isinstance(v.op, tvm.ir.Op):
                out.append(op_key(v, b.var))
    return out
