"""Rebuild a kernel from a transformed ISAMIR program: one TE compute per exported block.

When the chosen mappings needed structural transforms (factorization, split,
...), the kernel's compute blocks are replaced by the transformed program's
blocks (:func:`rebuild`); :func:`program_to_te` builds them, with loops named
like the ISAMIR axes so a mapping's axis map names the built PrimFunc's loops.

>>> from tensorize.importers import from_te
>>> from tensorize.kernels.zoo import matmul
>>> k = matmul(8, 8, 8)
>>> rebuild(k, from_te(k.tensors)).params[-1].name
'C'
"""
from __future__ import annotations

from typing import Any

from .zoo import Kernel

__all__ = ["program_to_te", "rebuild"]


def program_to_te(program, known: dict[str, Any]) -> dict[str, Any]:
    """Build TE computes for an ISAMIR program, given TE tensors for its inputs.

    Each exported block (see :func:`tensorize.exporters.export_groups`) becomes
    one ``te.compute`` named like the block, with loops named like the ISAMIR
    axes, so a mapping's axis map names the loops of the built PrimFunc.
    """
    from tvm import te
    from tensorize.exporters import _groups, _tree_axes

    from tvm_ext.errors import MappingError

    tensors = dict(known)
    for g in _groups(program, True):
        dims = []
        for row in g.dst.rows:
            if len(row.terms) != 1 or row.terms[0][1] != 1 or row.const:
                raise MappingError(f"program_to_te: block {g.name} writes {g.dst.format()} (not a plain index)")
            dims.append(row.terms[0][0])
        red = [a for a in program.ordered(_tree_axes(g.expr)) if a not in dims]
        raxes = {a: te.reduce_axis((0, program.extent(a)), name=a) for a in red}
        op = program.statements[g.statements[-1]].op if g.update else None
        body = _te_body(program, g, dims, raxes, op, tensors)
        tensors[g.dst.buffer] = te.compute([program.extent(a) for a in dims], lambda *ivs: body(ivs),
                                           name=g.name, varargs_names=list(dims))
    return tensors


def _te_body(program, g, dims, raxes, op, tensors):
    from tvm import te, tirx

    from tvm_ext.errors import MappingError

    reducers = {"+=": (te.sum, 0.0), "max=": (te.max, None), "min=": (te.min, None)}
    dtype = program.buffer(g.dst.buffer).dtype

    def value(tree, env):
        kind = tree[0]
        if kind == "const":
            return tirx.const(float(tree[1]), dtype)
        if kind == "load":
            acc = tree[1]
            idx = [sum((env[a] * c if c != 1 else env[a] for a, c in row.terms), row.const) if row.terms
                   else row.const for row in acc.rows]
            return tensors[acc.buffer][tuple(idx)]
        if kind == "bin":
            a, b = value(tree[2], env), value(tree[3], env)
            return {"+=": lambda: a + b, "-=": lambda: a - b, "*=": lambda: a * b, "/=": lambda: a / b,
                    "max=": lambda: tirx.max(a, b), "min=": lambda: tirx.min(a, b)}[tree[1]]()
        if kind == "fn":
            inner = value(tree[2], env)
            return {"exp": te.exp, "tanh": te.tanh, "sigmoid": te.sigmoid, "sqrt": te.sqrt, "log": te.log,
                    "abs": te.abs, "neg": lambda x: -x}[tree[1]](inner)
        raise MappingError(f"program_to_te: expression node {kind!r}")

    def body(ivs):
        env = dict(zip(dims, ivs))
        env.update(raxes)
        val = value(g.expr, env)
        if not g.update:
            return val
        if op not in reducers or g.init is None:
            raise MappingError(f"program_to_te: block {g.name} updates with {op!r} without an init")
        if not raxes:
            return {"+=": lambda: g.init.value + val}.get(op, lambda: val)()
        fn, ident = reducers[op]
        if ident is not None and float(g.init.value) != ident:
            raise MappingError(f"program_to_te: block {g.name} starts a {op} reduction at {g.init.value}")
        return fn(val, axis=list(raxes.values()))

    return body


def _te_tensors(kernel: Kernel) -> dict[str, Any]:
    """Every TE tensor of the kernel by op name (placeholders, pads, computes)."""
    out: dict[str, Any] = {}
    stack = list(kernel.tensors)
    while stack:
        t = stack.pop()
        if t.op.name in out:
            continue
        out[t.op.name] = t
        stack += list(getattr(t.op, "input_tensors", []))
    return out


def rebuild(kernel: Kernel, program) -> Any:
    """The kernel with its compute blocks replaced by ``program`` (a transformed ISAMIR)."""
    from tvm import te

    from tvm_ext.errors import MappingError

    if kernel.func is not None:
        return _rebuild_func(kernel, program)
    known = _te_tensors(kernel)
    inputs = {b.name: known[b.name] for b in program.buffers if b.role == "input" and b.name in known}
    missing = [b.name for b in program.buffers if b.role == "input" and b.name not in known]
    if missing:
        raise MappingError(f"rebuild: program inputs {missing} are not tensors of kernel {kernel.name}")
    built = program_to_te(program, inputs)
    out_name = kernel.output.op.name
    if out_name not in built or out_name in inputs:
        raise MappingError(f"rebuild: the transformed program does not compute the output {out_name}")
    return te.create_prim_func([*kernel.inputs, built[out_name]])


def _rebuild_func(kernel: Kernel, program) -> Any:
    """A PrimFunc kernel rebuilt from ``program`` with the mapper's exporter (whole kernel only)."""
    from tensorize.exporters import to_prim_func

    from tvm_ext.errors import MappingError

    names = [n for n, _, _ in kernel.arg_specs()]
    if list(program.params) != names:
        raise MappingError(f"rebuild: the transformed program covers {list(program.params)}, not the whole "
                           f"PrimFunc {names}; pass a TE kernel (tensorize.kernels.Kernel) instead")
    return to_prim_func(program, name="main")
