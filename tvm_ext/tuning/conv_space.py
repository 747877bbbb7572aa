"""MetaSchedule search spaces for tensorized convolutions (ISA Mapper §7 schedules).

A conv2d (NHWC with HWIO weights, or NCHW with OIHW weights) is mapped once
with :func:`tensorize.search.find_mappings` and the mapping plan of
:func:`tensorize.kernels.plan_mappings` (rebuilt from the transformed program
when the plan needs structural transforms, as :func:`tensorize.kernels.tensorized`
does).  The search space is then the emitter's schedule
(:func:`tensorize.emit.apply`) under several **code-generation settings**, one
design space each:

* the register tile around the instruction (rows x vector lanes),
* the outer loop order (``panel``: vector tiles outermost; ``kernel``: as written),
* ``pack`` (layout-transform the panel operand, or gather),
* ``call_rows`` (batch instruction calls along the next spatial axis, for
  the short rows of a 7x7 map),

deduplicated by what the emitter actually produced for these sizes.  Every
design space samples what MetaSchedule tunes:

* the **parallel grain**: the outermost (non-unit) spatial loop is split by
  ``sample_perfect_tile`` into ``[outer, grain]``, the grain part moves inside
  the other outer loops and the rest is fused into the parallel loop, so each
  parallel iteration runs ``grain`` tiles (grain 1 is the emitter's schedule);
* the unroll budget (``meta_schedule.unroll_explicit``).

The first design space is the emitter's default.  The untuned default itself
(``tensorized(kernel)``'s scheduled module) is also a one-point task of the
same group, measured first by the session, so a run's best record is never
slower than the default's record of that run.

The same machinery works for any :class:`tensorize.kernels.Kernel`
(:func:`kernel_tasks`), e.g. a depthwise conv (a ``conv1d`` instruction) or a
separable conv (factorised, rebuilt, two tensorized blocks).

>>> tasks = conv_tasks(1, 16, 32, 8, 3, pad=1)
>>> [t.name for t in tasks]
['conv_nhwc_1x16x32x8_k3s1p1_default', 'conv_nhwc_1x16x32x8_k3s1p1']
>>> spaces = tasks[1].knobs["design_spaces"]  # label -> tile of each tensorized block
>>> next(iter(spaces)), spaces["emit default"], tasks[1].max_trials > 1
('emit default', {'conv': {'j': 32, 'i': 8, 'k': 16}}, True)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from tvm_ext.errors import InputError, MappingError, ScheduleError, positive_int
from tvm_ext.tuning.spaces import (DESIGN_SPACE_KEY, UNROLL_STEPS, SpaceTask, _divisor_splits, _module,
                                   _unroll_knob)

__all__ = [
    "EmitKnobs",
    "CONV_TILES",
    "CONV_CALL_ROWS",
    "MAX_GRAIN",
    "LAYOUTS",
    "check_conv",
    "conv_kernel",
    "conv_tasks",
    "conv_default",
    "conv_reference",
    "kernel_tasks",
    "kernel_default",
    "kernel_reference",
]

#: Register tiles (rows x vector lanes) of the design spaces (those of ``tensorize.kernels.DEFAULT_KNOBS``).
CONV_TILES = ((8, 32), (12, 32), (4, 64), (6, 64), (16, 16), (24, 16))
#: Instruction calls batched along the next spatial axis (short rows: 7x7 maps).
CONV_CALL_ROWS = (2, 4)
#: Largest sampled grain (serial tiles per parallel iteration).
MAX_GRAIN = 64
#: Data layouts of :func:`conv_kernel`.
LAYOUTS = ("nhwc", "nchw")
#: Label of the one-point task that is the untuned default.
DEFAULT_LABEL = "untuned default"


@dataclass(frozen=True)
class EmitKnobs:
    """One code-generation setting of :func:`tensorize.emit.apply` (a design space).

    >>> EmitKnobs((8, 32), "panel").label
    'emit 8x32 panel'
    """

    tiles: tuple[int, int] | None = None
    outer: str = "auto"
    pack: str = "auto"
    call_rows: int = 1

    @property
    def label(self) -> str:
        if self == EmitKnobs():
            return "emit default"
        parts = ["emit", f"{self.tiles[0]}x{self.tiles[1]}" if self.tiles else "auto-tile", self.outer]
        if self.pack != "auto":
            parts.append(f"pack={self.pack}")
        if self.call_rows > 1:
            parts.append(f"calls={self.call_rows}")
        return " ".join(parts)

    def kwargs(self) -> dict:
        tiles = {"rows": self.tiles[0], "vector": self.tiles[1]} if self.tiles else None
        return {"tiles": tiles, "outer": self.outer, "pack": self.pack, "call_rows": self.call_rows}


def candidate_knobs() -> list[EmitKnobs]:
    """Every setting tried, the emitter's default first (duplicates are dropped per kernel)."""
    out = [EmitKnobs()]
    for t in CONV_TILES:
        out += [EmitKnobs(t, "panel"), EmitKnobs(t, "kernel"), EmitKnobs(t, "kernel", "never")]
    for rows_vec in (None, (4, 32), (4, 64), (8, 32)):
        out += [EmitKnobs(rows_vec, "auto", "auto", c) for c in CONV_CALL_ROWS]
    return out


# --------------------------------------------------------------------------- the kernel
def check_conv(n: Any, c_in: Any, c_out: Any, hw: Any, kernel: Any, stride: Any, pad: Any, layout: Any,
                dtype: Any, what: str = "conv") -> tuple:
    """Validated sizes (InputError naming the bad one, prefixed by ``what``)."""
    sizes = {"N": n, "C_IN": c_in, "C_OUT": c_out, "HW": hw, "K": kernel, "stride": stride}
    for name, v in sizes.items():
        positive_int(v, f"{what}: {name}")
    if isinstance(pad, bool) or not isinstance(pad, (int, np.integer)) or int(pad) < 0:
        raise InputError(f"{what}: pad must be a non-negative integer, got {pad!r}")
    if int(kernel) > int(hw) + 2 * int(pad):
        raise InputError(f"{what}: kernel {kernel} is larger than the padded input {hw} + 2*{pad}")
    if layout not in LAYOUTS:
        raise InputError(f"{what}: layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if dtype not in ("float32", "float64"):
        raise InputError(f"{what}: dtype must be float32 or float64, got {dtype!r}")
    return (int(n), int(c_in), int(c_out), int(hw), int(kernel), int(stride), int(pad), str(layout), str(dtype))


def conv_kernel(n: int, c_in: int, c_out: int, hw: int, kernel: int, stride: int = 1, pad: int = 0,
                layout: str = "nhwc", dtype: str = "float32"):
    """The :class:`tensorize.kernels.Kernel` of a conv2d in ``layout`` (sizes validated).

    >>> conv_kernel(1, 8, 8, 6, 3, layout="nchw").name
    'conv2d_nchw'
    """
    from tensorize.kernels import conv2d_nchw, conv2d_nhwc

    n, c_in, c_out, hw, kernel, stride, pad, layout, dtype = check_conv(
        n, c_in, c_out, hw, kernel, stride, pad, layout, dtype)
    make = conv2d_nhwc if layout == "nhwc" else conv2d_nchw
    return make(n, c_in, c_out, hw, kernel, stride, pad, dtype)


def _conv_name(n, c_in, c_out, hw, kernel, stride, pad, layout) -> str:
    return f"conv_{layout}_{n}x{c_in}x{c_out}x{hw}_k{kernel}s{stride}p{pad}"


# --------------------------------------------------------------------------- mapping, once
@dataclass
class _Prepared:
    """A kernel mapped once: the PrimFunc to schedule, the mapping per block, the other blocks."""

    mappings: list
    func: Any
    chosen: dict[str, Any]
    others: list[str]
    structural: list[str]
    impl: str
    variants: list | None = None  # the design spaces that apply, found on first use


_PREPARED: dict[tuple, _Prepared] = {}


def _prepare(kernel, isa: str, impl: str) -> _Prepared:
    """Map ``kernel`` (cached per signature): the plan of ``tensorized``, rebuilt if transformed."""
    key = (kernel.signature(), isa, impl)
    if key not in _PREPARED:
        _PREPARED[key] = _map(kernel, isa, impl)
    return _PREPARED[key]


def _map(kernel, isa: str, impl: str) -> _Prepared:
    from tvm import s_tir

    from tensorize.kernels import compute_blocks, first_fitting, plan_mappings, rebuild
    from tensorize.search import find_mappings

    func = kernel.prim_func()
    try:
        mappings = find_mappings(func, isa, block=compute_blocks(func))
        plan = plan_mappings(func, mappings)
    except MappingError as err:
        raise ScheduleError(f"{kernel.name}: no tensorizable mapping for a search space: {err}") from err
    if plan.program is not None:
        try:
            func = rebuild(kernel, plan.program)
        except MappingError as err:
            raise ScheduleError(f"{kernel.name}: the mapping needs structural transforms {plan.structural}, and "
                                f"the kernel cannot be rebuilt from the transformed program: {err}") from err
    sch = s_tir.Schedule(func)
    blocks = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
    chosen = {}
    for name, cands in plan.candidates.items():
        m = first_fitting(sch, name, cands, impl)
        if m is not None:
            chosen[name] = m
    if not chosen:
        raise ScheduleError(f"{kernel.name}: none of the selected mappings fits implementation {impl!r}")
    others = [b for b in blocks if b not in chosen]
    return _Prepared(list(mappings), func.with_attr("global_symbol", "main"), chosen, others, plan.structural, impl)


# --------------------------------------------------------------------------- design spaces
def _grain_knob(record: list | None) -> Callable:
    """``parallel_loops`` of :func:`tensorize.emit.apply`: split the outermost non-unit spatial loop
    by a sampled grain, move the grain part innermost and fuse the rest into the parallel loop.

    Each parallel iteration then runs ``grain`` tiles one after the other (with
    the same weights panel); grain 1 is the emitter's own schedule.
    """

    def choose(sch, loops):
        extents = [int(sch.get(lp).extent) for lp in loops]
        k = next((i for i, e in enumerate(extents) if e > 1), None)
        if k is None:
            return sch.fuse(*loops) if len(loops) > 1 else loops[0]
        if record is not None:
            record.append(extents[k])
        outer, grain = sch.split(loops[k], sch.sample_perfect_tile(loops[k], n=2, max_innermost_factor=MAX_GRAIN))
        par = [*loops[:k], outer, *loops[k + 1:]]
        if len(loops) > k + 1:
            sch.reorder(*par[k:], grain)
        return sch.fuse(*par) if len(par) > 1 else par[0]

    return choose


def _emit_space(sch, prep: _Prepared, knobs: EmitKnobs, record: list | None = None) -> dict:
    """Emit every mapped block under ``knobs`` with the grain knob; the other blocks as
    ``tensorized`` schedules them; then the unroll knob.  Returns the emitted blocks."""
    from tensorize.emit import apply
    from tensorize.schedule_steps import schedule_elementwise

    emitted = {}
    for name, mapping in prep.chosen.items():
        emitted[name] = apply(sch, sch.get_sblock(name, func_name="main"), mapping, prep.impl,
                              parallel_loops=_grain_knob(record), **knobs.kwargs())
    for name in prep.others:
        schedule_elementwise(sch, sch.get_sblock(name, func_name="main"))
    _unroll_knob(sch)
    sch.annotate(sch.get_sblock("root", func_name="main"), DESIGN_SPACE_KEY, knobs.label)
    return emitted


def _outcome(knobs: EmitKnobs, emitted: dict) -> tuple:
    """What a setting produced (tiles, packed operands, loop order), to drop duplicates."""
    out = []
    for name, e in emitted.items():
        order = knobs.outer if knobs.outer != "auto" else ("panel" if e.packed else "kernel")
        out.append((name, tuple(sorted(e.tiles.items())), tuple(e.packed), order))
    return tuple(out)


@dataclass
class _Variant:
    knobs: EmitKnobs
    grains: list[int]
    tiles: dict


def _variants(prep: _Prepared, mod, name: str) -> list[_Variant]:
    """The settings that apply to this kernel, each once (first occurrence kept; cached)."""
    from tvm import s_tir

    if prep.variants is not None:
        return prep.variants
    seen, out = set(), []
    for knobs in candidate_knobs():
        sch = s_tir.Schedule(mod)
        grains: list[int] = []
        try:
            emitted = _emit_space(sch, prep, knobs, grains)
        except Exception as err:  # noqa: BLE001 - a setting these sizes cannot take (register budget, ...)
            if knobs == EmitKnobs():
                raise ScheduleError(f"{name}: the emitter's default schedule does not apply "
                                    f"({type(err).__name__}: {str(err).splitlines()[0]})") from err
            continue
        key = _outcome(knobs, emitted)
        if key not in seen:
            seen.add(key)
            out.append(_Variant(knobs, grains, {b: dict(e.tiles) for b, e in emitted.items()}))
    prep.variants = out
    return out


def _variant_trials(v: _Variant) -> int:
    n = 1
    for extent in v.grains:
        n *= _divisor_splits(extent, 2, MAX_GRAIN)
    return len(UNROLL_STEPS) * n


def _one_point(label: str) -> Callable:
    def space(sch):
        sch.annotate(sch.get_sblock("root", func_name="main"), DESIGN_SPACE_KEY, label)

    return space


def kernel_tasks(kernel, name: str | None = None, *, isa: str = "x86", impl: str = "micro") -> list[SpaceTask]:
    """Tasks for a tensorized ``kernel``: the untuned default (one point), then the searched space.

    Both are alternatives of one group (``""``).  Raises :class:`ScheduleError`
    when the kernel has no mapping the implementation can emit.

    >>> from tensorize.kernels import depthwise_conv2d
    >>> ts = kernel_tasks(depthwise_conv2d(1, 16, 6, 3, pad=1))
    >>> ts[1].knobs["instructions"]
    {'depthwise': 'conv1d_16xk'}
    """
    from tensorize.kernels import Kernel, kernel_from_prim_func

    if not isinstance(kernel, Kernel):
        kernel = kernel_from_prim_func(kernel)
    name = name or kernel.name
    prep = _prepare(kernel, isa, impl)
    mod = _module(prep.func)
    variants = _variants(prep, mod, name)
    by_label = {v.knobs.label: v for v in variants}

    def space_fn(sch):
        out = []
        for v in variants:
            s = sch.copy()
            _emit_space(s, prep, v.knobs)
            out.append(s)
        return out

    info = {"instructions": {b: m.instruction.name for b, m in prep.chosen.items()},
            "structural_transforms": prep.structural}
    # design_spaces: label -> the tile each block got (what the emitter made of the requested knobs)
    searched = SpaceTask(name, mod, space_fn, None, sum(_variant_trials(v) for v in variants),
                         knobs=dict(info, design_spaces={label: v.tiles for label, v in by_label.items()}))
    default = SpaceTask(f"{name}_default", kernel_default(kernel, isa=isa, impl=impl), _one_point(DEFAULT_LABEL),
                        None, 1, knobs=dict(info, design_space=DEFAULT_LABEL, library_default=True))
    return [default, searched]


def kernel_default(kernel, *, isa: str = "x86", impl: str = "micro"):
    """The untuned default: :func:`tensorize.kernels.tensorized`'s scheduled IRModule
    (from the mappings the search space uses)."""
    from tensorize.kernels import Kernel, kernel_from_prim_func, tensorized

    if not isinstance(kernel, Kernel):
        kernel = kernel_from_prim_func(kernel)
    return tensorized(kernel, isa, impl=impl, mappings=_prepare(kernel, isa, impl).mappings).scheduled


def kernel_reference(kernel, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """``(inputs, expected)``: random inputs and the kernel's reference computed in float64."""
    inputs = kernel.random_inputs(seed)
    if kernel.reference is None:
        raise ScheduleError(f"{kernel.name}: no reference to check a tuned record against")
    return inputs, np.asarray(kernel.reference(*[a.astype(np.float64) for a in inputs]), dtype=np.float64)


# --------------------------------------------------------------------------- conv2d
def conv_tasks(n: int, c_in: int, c_out: int, hw: int, kernel: int, stride: int = 1, pad: int = 0,
               layout: str = "nhwc", dtype: str = "float32") -> list[SpaceTask]:
    """Tasks for the tensorized conv2d: its untuned default, then the searched design spaces."""
    k = conv_kernel(n, c_in, c_out, hw, kernel, stride, pad, layout, dtype)
    p = k.params
    return kernel_tasks(k, _conv_name(p["n"], p["c_in"], p["c_out"], p["hw"], p["kernel"], p["stride"], p["pad"],
                                      layout))


def conv_default(n: int, c_in: int, c_out: int, hw: int, kernel: int, stride: int = 1, pad: int = 0,
                 layout: str = "nhwc", dtype: str = "float32"):
    """The untuned default: ``tensorized(conv2d)``'s scheduled IRModule (like ``gemm_default``)."""
    return kernel_default(conv_kernel(n, c_in, c_out, hw, kernel, stride, pad, layout, dtype))


def conv_reference(n: int, c_in: int, c_out: int, hw: int, kernel: int, stride: int = 1, pad: int = 0,
                   layout: str = "nhwc", dtype: str = "float32", seed: int = 0):
    """``([x, w], expected)`` for checking a replayed conv record (numpy, float64).

    >>> (x, w), y = conv_reference(1, 4, 8, 5, 3, pad=1, layout="nchw")
    >>> x.shape, w.shape, y.shape
    ((1, 4, 5, 5), (8, 4, 3, 3), (1, 8, 5, 5))
    """
    return kernel_reference(conv_kernel(n, c_in, c_out, hw, kernel, stride, pad, layout, dtype), seed)
