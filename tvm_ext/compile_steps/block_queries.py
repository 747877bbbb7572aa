"""Structural questions about a PrimFunc and the blocks of its schedule, shared by the schedule rules.

Every rule (:mod:`.llvm_schedule`, :mod:`.default_schedule`, :mod:`.depthwise_schedule`,
:mod:`.gemv_schedule`, :mod:`.conv_padding`, ...) asks the same things: the root blocks, each
block's spatial/reduction iters, a loop's extent, whether a block is a plain copy, whether it is
worth a parallel launch.  They live here, below all of them, so that no rule imports another
for them.

>>> from tvm import s_tir, te
>>> A = te.placeholder((8, 4), name="A")
>>> k = te.reduce_axis((0, 4), name="k")
>>> C = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="C")
>>> sch = s_tir.Schedule(te.create_prim_func([A, C]))
>>> [iter_kinds(sch, b) for b in root_blocks(sch)], [extent(sch, lp) for lp in sch.get_loops(sch.get_sblock("C"))]
([['S', 'R']], [8, 4])
"""
from __future__ import annotations

from typing import Any

__all__ = ["extent", "iter_kinds", "root_blocks", "is_copy", "calls_transcendental", "parallel_min_work",
           "param_buffers", "PARALLEL_MIN_WORK", "PARALLEL_MIN_WORK_TRANSCENDENTAL"]

#: Blocks with fewer loop iterations than this run on one thread (a parallel launch costs more).
PARALLEL_MIN_WORK = 1 << 14
#: The same for blocks that evaluate transcendental functions (tens of cycles per element).
PARALLEL_MIN_WORK_TRANSCENDENTAL = 1 << 11
_TRANSCENDENTAL = frozenset({"tirx.exp", "tirx.tanh", "tirx.sigmoid", "tirx.log", "tirx.erf", "tirx.pow",
                             "tirx.sqrt", "tirx.exp2"})
#: Fields a statement or expression holds its children in (TIR has no Python visitor in TVM 0.27).
_CHILDREN = ("value", "a", "b", "args", "condition", "true_value", "false_value", "body", "seq", "then_case",
             "else_case")


def param_buffers(func) -> list:
    """The buffers of a PrimFunc's parameters (TVM 0.27 params are buffers; older TVM maps handles)."""
    bmap = getattr(func, "buffer_map", None)
    return [bmap[p] if bmap else p for p in func.params]


def extent(sch, loop) -> int | None:
    """The constant extent of ``loop`` in ``sch``, None when it is symbolic."""
    try:
        return int(sch.get(loop).extent)
    except (TypeError, ValueError):
        return None


def iter_kinds(sch, block) -> list[str]:
    """``"S"`` (spatial) or ``"R"`` (reduction) per iter of ``block``."""
    return ["S" if int(iv.iter_type) == 0 else "R" for iv in sch.get(block).iter_vars]


def root_blocks(sch) -> list:
    """The blocks directly under the root block of ``sch``'s function, in order."""
    return list(sch.get_child_blocks(sch.get_sblock("root")))


def is_copy(sch, block) -> bool:
    """Whether ``block`` only copies one buffer into another (an index remap, no arithmetic)."""
    from tvm.ir.expr import TensorLoad  # TVM 0.27's BufferLoad node
    from tvm.tirx.stmt import BufferStore

    blk = sch.get(block)
    body = blk.body
    return ("R" not in iter_kinds(sch, block) and len(blk.reads) == 1 and len(blk.writes) == 1
            and isinstance(body, BufferStore) and isinstance(body.value, TensorLoad))


def calls_transcendental(node: Any) -> bool:
    """Whether a TIR statement or expression calls one of the :data:`_TRANSCENDENTAL` intrinsics."""
    import tvm

    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (list, tuple)) or type(n).__name__ == "Array":
            stack.extend(n)
            continue
        if isinstance(n, tvm.ir.expr.Call) and isinstance(n.op, tvm.ir.Op) and n.op.name in _TRANSCENDENTAL:
            return True
        for f in _CHILDREN:
            child = getattr(n, f, None)
            if child is not None and not isinstance(child, (int, float, str)):
                stack.append(child)
    return False


def parallel_min_work(sch, block) -> int:
    """The iteration count from which ``block`` is worth a parallel launch."""
    return (PARALLEL_MIN_WORK_TRANSCENDENTAL if calls_transcendental(sch.get(block).body)
            else PARALLEL_MIN_WORK)
