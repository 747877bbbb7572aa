"""Kernels that take element-aligned parameters, so ``model(x)`` never copies an input for alignment.

TVM declares every PrimFunc parameter 64-byte aligned; MakePackedAPI turns
that into an alignment promise to LLVM, which may then emit aligned vector
moves (``vmovaps``) that fault on an array numpy placed 16 bytes off a 64-byte
boundary.  :func:`ElementAlignedParams` re-declares the parameters of every
PrimFunc of the module (and the buffers its blocks match to regions of them)
with the alignment of one element, so a kernel may read any C-contiguous
numpy array in place.  Intermediates stay 64-byte aligned
(the VM allocates them); with AVX the unaligned forms of the vector moves cost
the same on aligned data.

``specialize`` refuses to change a buffer's alignment and TIR has no Python
substitution functor in 0.27, so the rewrite edits the ``data_alignment``
field of the parameters' ``BufferType`` nodes in the function's serialized
object graph (``tvm.ir.save_json`` / ``load_json``): the body refers to the
same parameter nodes, so every access sees the new declaration.

>>> import numpy as np, tvm
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType((4, 16), "float32"))
>>> with bb.function("main", [x]):
...     _ = bb.emit_func_output(bb.emit(relax.op.add(x, x)))
>>> mod = ElementAlignedParams()(relax.transform.LegalizeOps()(bb.get()))
>>> [int(p.data_alignment) for p in mod["add"].params]
[4, 4, 4]
>>> bool(mod.attrs[ATTR])
True
"""
from __future__ import annotations

import json
from typing import Any

import numpy as np

__all__ = ["ElementAlignedParams", "element_aligned", "accepts_element_aligned", "ATTR"]

#: IRModule attribute set once the rewrite ran (the module's kernels accept element-aligned inputs).
ATTR = "tvm_ext.element_aligned_params"


def element_aligned(func: Any) -> Any:
    """``func`` (a ``tirx.PrimFunc``) with each buffer parameter declared aligned to one element.

    >>> from tvm import te
    >>> A = te.placeholder((8,), "float64", name="A")
    >>> f = te.create_prim_func([A, te.compute((8,), lambda i: A[i] * 2, name="B")])
    >>> [int(p.data_alignment) for p in element_aligned(f).params]
    [8, 8]
    """
    import tvm

    graph = json.loads(tvm.ir.save_json(func))
    nodes = graph["nodes"]
    views = list(nodes[nodes[graph["root_index"]]["data"]["params"]]["data"])
    # buffers matched to regions of others (tensorized blocks) must not promise more than their source
    views += [n["data"]["buffer"] for n in nodes if n["type"] == "s_tir.MatchBufferRegion"]
    changed = False
    for var_index in views:
        ty = nodes[nodes[var_index]["data"]["ty"]]
        if ty["type"] != "tirx.BufferType":
            continue
        itemsize = _itemsize(nodes[ty["data"]["dtype"]]["data"]["dtype"])
        if itemsize and int(ty["data"]["data_alignment"]) > itemsize:
            ty["data"]["data_alignment"] = itemsize
            changed = True
    return tvm.ir.load_json(json.dumps(graph)) if changed else func


def _itemsize(dtype: str) -> int:
    """Bytes of one element (0 for a dtype numpy does not know, e.g. ``handle``: left as declared)."""
    try:
        return max(1, np.dtype(dtype).itemsize)
    except TypeError:
        return 0


def accepts_element_aligned(mod: Any) -> bool:
    """Whether :func:`ElementAlignedParams` ran on ``mod`` (an IRModule)."""
    attrs = mod.attrs
    return bool(attrs is not None and ATTR in attrs and attrs[ATTR])


def ElementAlignedParams():  # noqa: N802 - TVM's pass naming
    """Module pass: every PrimFunc's parameters element-aligned; marks the module with :data:`ATTR`."""
    import tvm
    from tvm import tirx

    @tvm.transform.module_pass(opt_level=0, name="tvm_ext.ElementAlignedParams")
    def run(mod, ctx):
        out = mod.clone()  # the caller's module is left as it was
        for gv, f in mod.functions.items():
            if isinstance(f, tirx.PrimFunc):
                out[gv] = element_aligned(f)
        return out.with_attr(ATTR, True)

    return run
