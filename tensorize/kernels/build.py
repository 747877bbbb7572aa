"""The whole ISA Mapper flow for one kernel: map, plan, rebuild, emit, build (:func:`tensorized`).

:func:`tensorized` finds the mappings of every block onto the ISA's
instructions, plans one per block (:func:`tensorize.kernels.planning.plan_mappings`),
rebuilds the kernel when the plan needed IR transforms (:func:`rebuild`, the
transformed ISAMIR blocks exported into the kernel's PrimFunc), applies
:func:`tensorize.emit.apply` and builds through the kernel cache.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tvm_ext.errors import ShapeError

from .planning import Plan, compute_blocks, plan_mappings
from .zoo import Kernel, kernel_from_prim_func

__all__ = ["Tensorized", "tensorized", "first_fitting", "rebuild"]


def rebuild(kernel: Kernel, program) -> Any:
    """The kernel's PrimFunc with the blocks ``program`` (a transformed ISAMIR) computes replaced by
    its exported blocks (:func:`tensorize.exporters.replace_blocks`); loops are named like the
    ISAMIR axes, so a mapping's axis map names the rebuilt function's loops.

    >>> from tensorize.importers import from_te
    >>> from tensorize.kernels.zoo import matmul
    >>> k = matmul(8, 8, 8)
    >>> [p.name for p in rebuild(k, from_te(k.tensors)).params]
    ['A', 'B', 'C']
    """
    from tensorize.exporters import replace_blocks

    from tvm_ext.errors import InputError, MappingError

    try:
        return replace_blocks(kernel.prim_func(), program)
    except InputError as e:
        raise MappingError(f"rebuild {kernel.name}: {e}") from None

@dataclass
class Tensorized:
    """A kernel mapped, tensorized and built; call it on numpy arrays."""

    kernel: Kernel
    module: Any
    scheduled: Any
    plan: Plan
    emitted: dict[str, Any]
    impl: str
    isa: str

    def __call__(self, *inputs: np.ndarray) -> np.ndarray:
        import tvm

        *specs, (_, out_shape, out_dtype) = self.kernel.arg_specs()
        if len(inputs) != len(specs):
            raise ShapeError(f"{self.kernel.name}: expected {len(specs)} inputs, got {len(inputs)}")
        args = []
        for arr, (name, shape, dtype) in zip(inputs, specs):
            a = np.ascontiguousarray(arr, dtype=dtype)
            if a.shape != shape:
                raise ShapeError(f"{self.kernel.name}: input {name} has shape {a.shape}, expected {shape}")
            args.append(tvm.runtime.tensor(a))
        out = tvm.runtime.empty(out_shape, out_dtype)
        self.module["main"](*args, out)
        return out.numpy()

    @property
    def intrinsics(self) -> dict[str, str]:
        return {b: e.intrin for b, e in self.emitted.items()}

    def steps(self) -> list[str]:
        """Every schedule step, block by block."""
        return [f"{b}: {s}" for b, e in self.emitted.items() for s in e.steps]


def first_fitting(sch, block: str, candidates: Sequence[Any], impl: str):
    """The first of ``candidates`` the emitter accepts for ``block`` of schedule ``sch`` (its spec
    derives and implementation ``impl`` supports it), or ``None``."""
    from tensorize.binding import as_binding, drop_unit_axes
    from tensorize.intrin_spec import derive_spec
    from tensorize.tensor_intrin import get_implementation

    from tvm_ext.errors import MappingError, ScheduleError

    blk = sch.get_sblock(block)
    for m in candidates:
        try:
            binding = drop_unit_axes(sch, blk, as_binding(m), [])
            implementation = get_implementation(binding.isa, impl, binding.instruction)
            implementation.check(derive_spec(sch, blk, binding, accumulate_local=implementation.accumulate_local))
            return m
        except (MappingError, ScheduleError):
            continue
    return None


def tensorized(kernel: Kernel | Any, isa: str = "x86", *, impl: str = "micro", target: Any = None,
               tiles: dict[str, int] | None = None, pack: str = "auto", outer: str = "auto", call_rows: int = 1,
               mappings: Sequence[Any] | None = None, kinds: Sequence[str] | None = None,
               cost_model: Any = None) -> Tensorized:
    """Find mappings, select, (rebuild if transformed), apply and build ``kernel``.

    ``kernel`` is a :class:`Kernel` or a schedulable PrimFunc (wrapped with
    :func:`kernel_from_prim_func`).  ``tiles``/``pack``/``outer`` are the
    emission knobs of :func:`tensorize.emit.apply`, used for every tensorized
    block; ``cost_model`` goes to :func:`plan_mappings`.

    >>> from tensorize.kernels.zoo import matmul
    >>> t = tensorized(matmul(16, 32, 8))
    >>> a, b = np.ones((16, 8), "float32"), np.ones((8, 32), "float32")
    >>> float(t(a, b)[0, 0])
    8.0
    """
    from tvm import s_tir

    from tensorize.emit import apply
    from tensorize.schedule_steps import schedule_elementwise
    from tensorize.search import find_mappings
    from tvm_ext.kernel_cache import get_or_build
    from tvm_ext.target import resolve_target

    if not isinstance(kernel, Kernel):
        kernel = kernel_from_prim_func(kernel)
    func = kernel.prim_func()
    if mappings is None:
        mappings = find_mappings(func, isa, block=compute_blocks(func), kinds=kinds)
    plan = plan_mappings(func, mappings, cost_model)
    if plan.covers:
        from tvm_ext.errors import MappingError

        raise MappingError(f"{kernel.name}: block(s) {', '.join(plan.covers)} need several instructions "
                           f"together, which the TVM emitter does not emit (simulate_plan runs them)")
    if plan.program is not None:
        func = rebuild(kernel, plan.program)
    sch = s_tir.Schedule(func)
    others = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))
              if sch.get(b).name_hint not in plan.blocks]
    emitted = {}
    with resolve_target(target):  # tiles and vector widths follow the target (tvm_ext.target.hardware_facts)
        for name, cands in plan.candidates.items():
            m = first_fitting(sch, name, cands, impl)
            if m is None:
                continue
            plan.candidates[name] = [m] + [c for c in cands if c is not m]
            emitted[name] = apply(sch, sch.get_sblock(name), m, impl, tiles=tiles, pack=pack, outer=outer,
                                  call_rows=call_rows)
        others += [b for b in plan.candidates if b not in emitted]
        fused = {b for e in emitted.values() for b in e.epilogue}  # now part of a tensorized block
        for name in others:
            if name not in fused:
                schedule_elementwise(sch, sch.get_sblock(name))
    if not emitted:
        from tvm_ext.errors import MappingError

        raise MappingError(f"{kernel.name}: none of the selected mappings fits implementation {impl!r}")
    key = ("tensorized", kernel.signature(), isa, impl, tuple(sorted((tiles or {}).items())), pack, outer,
           call_rows, tuple((b, e.intrin) for b, e in emitted.items()))
    mod = get_or_build(key, lambda: sch.mod, target)
    return Tensorized(kernel, mod, sch.mod, plan, emitted, impl, isa)
