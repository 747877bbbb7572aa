"""Turn the tensor constants of ``main`` (weights bound by a frontend) into parameters.

BYOC with ``bind_constants=False`` (the accelerator's partitioning) only
offloads subgraphs whose weights arrive as arguments.  :func:`lift_constants`
appends one parameter per distinct non-scalar constant to ``main`` and returns
the values to pass at run time; :class:`~tvm_ext.compile.CompiledModel`
appends them to the user's inputs.

>>> import numpy as np
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType((2, 3), "float32"))
>>> with bb.function("main", [x]):
...     _ = bb.emit_func_output(bb.emit(relax.op.add(x, relax.const(np.ones((2, 3), "float32")))))
>>> mod, values = lift_constants(bb.get())
>>> [p.name for p in mod["main"].params], [v.shape for v in values]
(['x', 'const_0'], [(2, 3)])
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["lift_constants"]


def _is_tensor_const(expr: Any) -> bool:
    from tvm import relax

    ty = getattr(expr, "ty", None)
    return (hasattr(getattr(expr, "value", None), "numpy") and isinstance(ty, relax.TensorType)
            and ty.shape is not None and len(ty.shape.values) >= 1)


def lift_constants(mod: Any, prefix: str = "const") -> tuple[Any, list[np.ndarray]]:
    """``main`` with its tensor constants as trailing parameters, and their values in order."""
    from tvm import relax

    @relax.expr_functor.mutator
    class _Lift(relax.PyExprMutator):
        def __init__(self):
            super().__init__()
            self.consts: list[Any] = []
            self.vars: list[Any] = []

        def visit_generic_const_(self, op):  # noqa: N802 - TVM's hook name
            if not _is_tensor_const(op):
                return op
            for c, v in zip(self.consts, self.vars):
                if c.same_as(op):
                    return v
            v = relax.Var(f"{prefix}_{len(self.vars)}", op.ty)
            self.consts.append(op)
            self.vars.append(v)
            return v

    func = mod["main"]
    lifter = _Lift()
    body = lifter.visit_expr(func.body)
    if not lifter.vars:
        return mod, []
    new = relax.Function(list(func.params) + lifter.vars, body, func.ret_ty, func.is_pure, func.attrs)
    out = mod.clone() if hasattr(mod, "clone") else mod
    out["main"] = new
    return out, [c.value.numpy() for c in lifter.consts]
