"""The emission knobs the llvm schedule measures for one tensorizable kernel.

:func:`target_variants` follow the target (tiles that fill its register file);
:func:`loop_order_variants` follow the kernel's weight against the target's L2
(kernel order, and padding per thread for a padded convolution).  The first
candidate, the emitter's defaults, is not listed: :mod:`.llvm_schedule` tries it first.

>>> from tvm_ext.target import resolve_target
>>> {"pack": "never"} in target_variants(resolve_target({"kind": "llvm", "mcpu": "haswell"}))
True
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["VARIANTS", "KERNEL_ORDER", "PAD_PER_THREAD", "PACK_IN_PANEL", "register_file_rows", "target_variants",
           "loop_order_variants"]

#: Emission knobs tried with ``tensorize="measure"`` (first: the emitter's defaults).  ``pack="never"``
#: reads weights in place (packing a weight inside the kernel on every call can cost more than it
#: saves); the short-row / panel-order setting suits tall-skinny products (a GCN's ``X @ W``).
VARIANTS: tuple[dict[str, Any], ...] = (
    {},
    {"pack": "never"},
    {"tiles": {"rows": 4, "vector": 64}, "outer": "panel"},
)


def register_file_rows(facts) -> int:
    """Rows of a two-vector micro-kernel tile whose accumulators fill the whole register file.

    Beside ``rows x 2`` accumulators the kernel keeps the two B vectors, the A broadcast and one
    spare.  The emitter's default keeps to three quarters of the file (``accumulator_registers``,
    7 rows of a 28-wide convolution row on AVX-512); the full file takes 14 there, one broadcast
    and two vector loads per 28 FMAs instead of per 14.

    >>> from tvm_ext.target import hardware_facts
    >>> register_file_rows(hardware_facts({"kind": "llvm", "mcpu": "skylake-avx512"}))
    14
    >>> register_file_rows(hardware_facts({"kind": "llvm", "mcpu": "haswell"}))
    6
    """
    return max((facts.vector_registers - 4) // 2, 1)


def target_variants(tgt) -> tuple[dict[str, Any], ...]:
    """:data:`VARIANTS` after the first, plus a register-file-filling tile where the target has room
    for more rows than the emitter's default (AVX-512: 32 registers)."""
    from tvm_ext.target import hardware_facts

    facts = hardware_facts(tgt)
    rows = register_file_rows(facts)
    extra: tuple[dict[str, Any], ...] = ()
    if rows > facts.accumulator_registers // 2:
        extra = ({"tiles": {"rows": rows, "vector": 2 * facts.lanes("float32")}},)
    return VARIANTS[1:] + extra


#: Loop order that keeps a micro-kernel's A tile in L1 and walks every panel of B under it (``outer="kernel"``).
KERNEL_ORDER: dict[str, Any] = {"outer": "kernel"}
#: Pack a run-time operand one panel at a time inside the parallel loop over the vector axis' tiles.
PACK_IN_PANEL: dict[str, Any] = {"pack_at": "panel"}
#: ``tensorize_primfunc(pad=...)``: output rows in one chunk per thread, the input padded per chunk
#: (:mod:`.conv_padding`).
PAD_PER_THREAD = "per_thread"


def _reduction_operand_bytes(func) -> int | None:
    """Bytes of the B operand (``K x N``) of ``func``'s first reduction block, or None when it has none.

    ``K`` is the product of the block's reduction extents (a convolution's window times its input
    channels), ``N`` the extent of its last spatial iter (the unit-stride output axis the micro-kernel
    vectorises: a convolution's output channels, a matmul's columns).
    """
    from tvm import s_tir

    from tvm_ext.compile_steps.block_queries import iter_kinds as _iter_kinds
    from tvm_ext.compile_steps.block_queries import root_blocks as _root_blocks

    sch = s_tir.Schedule(func)
    for b in _root_blocks(sch):
        blk = sch.get(b)
        kinds = _iter_kinds(sch, b)
        if "R" not in kinds or "S" not in kinds:
            continue
        try:
            k = int(np.prod([int(iv.dom.extent) for iv, t in zip(blk.iter_vars, kinds) if t == "R"]))
            n = int([iv.dom.extent for iv, t in zip(blk.iter_vars, kinds) if t == "S"][-1])
        except (TypeError, ValueError):
            return None
        return k * n * np.dtype(str(blk.writes[0].source.dtype)).itemsize
    return None


def loop_order_variants(func, tgt) -> tuple[dict[str, Any], ...]:
    """Kernel-order variants of the default and the register-file tile where ``func``'s whole B operand
    fits in three quarters of one core's L2 (the rest holds the A rows and output rows streaming through);
    first, :data:`PACK_IN_PANEL` where ``func`` has run-time parameters
    (:data:`.weight_prepack.RUN_TIME_PARAMS`: an activation it packs costs a copy on every call), with the
    default tile and with a one-vector tile of two thirds of the accumulator registers in rows (16 x 16 on
    AVX-512: a ResNet 28 x 28 stage's 784 pixels fill 49 panels, where 32-pixel panels pad to 800).

    The packed-panel order (the default once B is packed) sweeps all of A once per panel of B: right
    when B is too big to stay in cache.  When all of B stays in L2 (a ResNet 1x1 convolution's
    64 x 256 weight), walking every panel under one A tile reads A once and writes whole output rows;
    on a short reduction (K = 64) this is what keeps the stores from dominating.  A convolution whose
    B is a good part of the L2 (a 3x3 over 128 channels: 576 KiB) gains a little too: each thread
    then computes whole output rows from its share of the input.

    >>> from tvm import te
    >>> from tvm_ext.target import resolve_target
    >>> x = te.placeholder((64, 64), name="x"); w = te.placeholder((64, 256), name="w")
    >>> k = te.reduce_axis((0, 64), "k")
    >>> y = te.compute((64, 256), lambda i, j: te.sum(x[i, k] * w[k, j], axis=k), name="y")
    >>> loop_order_variants(te.create_prim_func([x, w, y]), resolve_target({"kind": "llvm", "mcpu": "haswell"}))
    ({'outer': 'kernel'},)
    """
    from tvm_ext.compile_steps.weight_prepack import run_time_params
    from tvm_ext.target import hardware_facts

    facts = hardware_facts(tgt)
    panel: tuple[dict[str, Any], ...] = ()
    if run_time_params(func):  # also one-vector panels: no padding where the pixels are 16 * odd (28 x 28)
        one_vector = {"rows": facts.accumulator_registers * 2 // 3, "vector": facts.lanes("float32")}
        panel = (dict(PACK_IN_PANEL), {**PACK_IN_PANEL, "tiles": one_vector})
    size = _reduction_operand_bytes(func)
    if size is None or size > facts.l2_bytes * 3 // 4:
        return panel
    out: tuple[dict[str, Any], ...] = panel + (dict(KERNEL_ORDER),)
    rows = register_file_rows(facts)
    if rows > facts.accumulator_registers // 2:
        out += ({"tiles": {"rows": rows, "vector": 2 * facts.lanes("float32")}, **KERNEL_ORDER},)
    from tvm_ext.compile_steps.conv_padding import pad_blocks
    from tvm_ext.target import num_threads

    if num_threads() > 1 and pad_blocks(func):  # the last kernel-order tile with its padding done per thread
        out += ({**out[-1], "pad": PAD_PER_THREAD},)
    return out
