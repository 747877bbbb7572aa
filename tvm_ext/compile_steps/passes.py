"""The compile steps as TVM module passes: each one usable on its own in a ``tvm.transform.Sequential``.

In the order :func:`tvm_ext.pipeline.pipeline` runs them:

* :func:`PrepareForInference`: BN decomposed, repeated subexpressions merged,
  constants folded (weights transposed once, at compile time);
* :func:`AnnotateOpIds`: every op of ``main`` gets its id (see
  :mod:`~tvm_ext.compile_steps.placement`);
* :func:`OffloadSparseMatmuls`: constant mostly-zero matmul operands ->
  sparse executor / fused GCN layer (TIR functions of the module) / Sextans
  call (:mod:`.sparse_offload`);
* :func:`PartitionForAccel`: the matrix accelerator's BYOC;
* :func:`PartitionForSextans`: the Sextans engine's BYOC (tuned knobs applied);
* :func:`ConvertConvLayout`: convolutions left for llvm to NHWC;
* :func:`LegalizeAndFuse`: ``LegalizeOps`` + ``FuseOps`` + ``FuseTIR``, each
  fused kernel's member ops recorded on it;
* :func:`ApplyTuningRecords` (``MetaScheduleApplyDatabase``), then
  :func:`TensorizeOrDefault`: the llvm schedule rule chain, tuned record ->
  measured tensorize -> default, like dlight's ``ApplyDefaultSchedule``
  (:func:`ApplyScheduleRules` takes one's own :class:`ScheduleRule` too);
* :func:`PrepackWeights`: constant weights packed into the micro-kernels'
  panel layout at compile time (:mod:`.weight_prepack`).

Every pass keeps the module attributes that carry the placement.

>>> import numpy as np, tvm
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType((4, 8), "float32"))
>>> with bb.function("main", [x]):
...     with bb.dataflow():
...         y = bb.emit_output(relax.op.nn.relu(x))
...     _ = bb.emit_func_output(y)
>>> mod = tvm.transform.Sequential([AnnotateOpIds(), LegalizeAndFuse(), TensorizeOrDefault("never")])(bb.get())
>>> [str(f.attrs["tvm_ext.schedule"][0]) for _, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)]
['default']
"""
from __future__ import annotations

from typing import Any

from tvm_ext.compile_steps import placement as pl
from tvm_ext.errors import ConfigError, InputError

__all__ = ["PrepareForInference", "AnnotateOpIds", "OffloadSparseMatmuls", "PartitionForAccel",
           "PartitionForSextans", "ConvertConvLayout", "LegalizeAndFuse",
           "ApplyTuningRecords", "TensorizeOrDefault", "ApplyScheduleRules", "ScheduleRule", "MeasuredTensorize",
           "DefaultSchedule", "PrepackWeights", "CONV_LAYOUT"]

#: Layout of the convolutions left for llvm: NHWC makes the output channels the unit-stride
#: axis, which the x86 micro-kernels vectorise (NCHW leaves the image width, often 7/14/28).
CONV_LAYOUT = {"relax.nn.conv2d": ["NHWC", "OHWI"]}


def _module_pass(name: str):
    """``@tvm.transform.module_pass(opt_level=0, name=...)`` whose function keeps the module attributes."""
    import tvm

    def wrap(fn):
        def run(mod, ctx):
            out = fn(mod, ctx)
            for k, v in (mod.attrs or {}).items():
                if out.attrs is None or k not in out.attrs:
                    out = out.with_attr(k, v)
            return out

        return tvm.transform.module_pass(run, opt_level=0, name=name)

    return wrap


def _target(target: Any):
    import tvm

    from tvm_ext.target import resolve_target

    if target is None and tvm.target.Target.current(allow_none=True) is not None:
        return tvm.target.Target.current()
    return resolve_target(target)


def _main(mod, what: str):
    """``main`` of ``mod`` (the function the offloading passes rewrite), else one clear error."""
    from tvm import relax

    for gv in mod.get_global_vars():
        if gv.name_hint == "main" and isinstance(mod[gv], relax.Function):
            return mod[gv]
    raise InputError(f"{what}: the module has no Relax function 'main'")


def PrepareForInference():  # noqa: N802 - TVM's pass naming
    """``DecomposeOpsForInference`` + ``EliminateCommonSubexpr`` + ``FoldConstant``."""
    from tvm import relax

    @_module_pass("tvm_ext.PrepareForInference")
    def run(mod, ctx):
        mod = relax.transform.DecomposeOpsForInference()(mod)
        mod = relax.transform.EliminateCommonSubexpr()(mod)
        return relax.transform.FoldConstant()(mod)

    return run


def AnnotateOpIds():  # noqa: N802
    """Give every op of ``main`` its id (placement travels with it through the later passes)."""

    @_module_pass("tvm_ext.AnnotateOpIds")
    def run(mod, ctx):
        return pl.annotate_op_ids(mod)

    return run


def OffloadSparseMatmuls(target: Any = None, *, to_sextans: bool = False, engine_name: str = "",  # noqa: N802
                         threshold: float = 0.1, fuse_gcn: bool = True):
    """Products with a constant operand at most ``threshold`` dense -> sparse kernels.

    With ``to_sextans`` they become ``sextans_spmm`` calls for :func:`PartitionForSextans`;
    otherwise the llvm sparse executor or the fused GCN layer: their PrimFuncs join the module
    (``R.call_tir``, the matrix's arrays as constants), so the model exports whole."""
    from tvm_ext.compile_steps.sparse_offload import offload_sparse_matmuls

    if not 0.0 <= float(threshold) <= 1.0:
        raise ConfigError(f"sparse_threshold={threshold!r}: must be a density in [0, 1]")

    @_module_pass("tvm_ext.OffloadSparseMatmuls")
    def run(mod, ctx):
        new, rewrites = offload_sparse_matmuls(mod, target=_target(target), engine=True if to_sextans else None,
                                               engine_name=engine_name, threshold=threshold, fuse_gcn=fuse_gcn)
        kernels: dict[str, dict] = {}  # by TIR function: a matrix used twice alike shares its kernel
        for rw in rewrites:
            where = "sextans" if rw.where == "sextans" else f"llvm/{rw.where}"
            detail = rw.detail + (f"; {rw.fallback}" if rw.fallback else "")
            new = pl.place(new, rw.op_ids, where, detail)
            if rw.kernel is not None:
                rec = kernels.setdefault(rw.symbol, {"name": rw.symbol, "target": where, "schedule": rw.where,
                                                     "detail": detail, "ops": []})
                rec["ops"] += rw.op_names
        return pl.add_kernels(new, list(kernels.values())) if kernels else new

    return run


def PartitionForAccel(system: Any = None, *, approach: Any = None, baseline: bool = False,  # noqa: N802
                      tuning: Any = None):
    """The matrix accelerator's BYOC (weights lifted to arguments for its patterns, bound back after).

    ``tuning``: the ``EngineTuning`` that chose ``approach`` (recorded for the report)."""
    from tvm import relax

    from tvm_ext.accel.byoc import partition_for_accel
    from tvm_ext.accel.system_graph import load_system
    from tvm_ext.compile_steps.constants import lift_constants

    sysg = load_system(system)

    @_module_pass("tvm_ext.PartitionForAccel")
    def run(mod, ctx):
        n_inputs = len(_main(mod, "PartitionForAccel").params)
        before = pl.live_op_ids(mod)
        lifted, weights = lift_constants(mod)
        part = partition_for_accel(lifted, sysg, approach=approach, baseline=baseline)
        if weights:  # constants again for llvm (folded, layout-converted)
            names = [p.name for p in part["main"].params[n_inputs:]]
            part = relax.transform.BindParams("main", dict(zip(names, weights)))(part)
        gone = before - pl.live_op_ids(part)
        part = pl.place(part, sorted(gone), "accel", f"accelerator {sysg.name}").with_attr(pl.ATTR_ACCEL, sysg.name)
        return pl.add_engine_tuning(part, [tuning]) if tuning is not None else part

    return run


def _sextans_products(mod) -> list[tuple[Any, int]]:
    """(CSR matrix, columns of B) of every ``sextans_spmm`` call with a constant sparse operand."""
    import scipy.sparse as sp
    import tvm
    from tvm import relax

    from tvm_ext.spmm_engine.relax_op import SPMM_AXPBY_FUNC, SPMM_FUNC

    out = []

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir":
            gv = e.args[0]
            if isinstance(gv, relax.GlobalVar) and gv.name_hint in (SPMM_FUNC, SPMM_AXPBY_FUNC):
                args = list(e.args[1].fields)
                if all(isinstance(a, tvm.ir.expr.Constant) for a in args[:3]):
                    indptr, indices, data = (a.value.numpy() for a in args[:3])
                    m = int(e.ty.shape.values[0])
                    k = int(args[3].ty.shape.values[0])
                    out.append((sp.csr_array((data, indices, indptr), shape=(m, k)), int(e.ty.shape.values[1])))

    relax.analysis.post_order_visit(_main(mod, "PartitionForSextans"), visit)
    return out


def PartitionForSextans(engine: Any = "sextans", *, knobs: Any = None):  # noqa: N802
    """The Sextans engine's BYOC over the ``sextans_spmm`` calls (tuning-record knobs applied unless the
    configuration is explicit).  ``engine``: a platform name, ``{"platform", "config"}`` or a Platform."""
    from tvm_ext.compile_steps.engine_records import EngineTuning, tuned_sextans_config
    from tvm_ext.spmm_engine import paper_knobs
    from tvm_ext.spmm_engine.byoc import partition_for_sextans

    eng = resolve_engine(engine)

    @_module_pass("tvm_ext.PartitionForSextans")
    def run(mod, ctx):
        if eng.explicit:
            config, tuning = eng.config, EngineTuning("sextans", paper_knobs(eng.config), "explicit config")
        else:
            config, tuning = tuned_sextans_config(knobs, _sextans_products(mod), eng.config, eng.name)
        out = partition_for_sextans(mod, config, eng.platform)
        return pl.add_engine_tuning(out, [tuning])

    return run


def resolve_engine(spmm_engine: Any):
    """The Sextans engine from a platform name / a dict / a Platform / True (:class:`EngineChoice`)."""
    from typing import NamedTuple

    from tvm_ext.spmm_engine.config import Platform, get_platform
    from tvm_ext.spmm_engine.preprocess import resolve_config

    class EngineChoice(NamedTuple):
        config: Any
        platform: Any
        name: str
        explicit: bool  # the caller gave the config (tuning records do not replace it)

    config = None
    platform = spmm_engine
    if isinstance(spmm_engine, dict):
        unknown = set(spmm_engine) - {"platform", "config"}
        if unknown:
            raise ConfigError(f"spmm_engine: unknown keys {sorted(unknown)}; use 'platform' and 'config'")
        platform, config = spmm_engine.get("platform"), spmm_engine.get("config")
    elif spmm_engine is True:
        platform = None
    elif not isinstance(spmm_engine, (str, Platform)):
        raise ConfigError(f"spmm_engine: expected a platform name, dict or Platform, got {type(spmm_engine).__name__}")
    try:
        plat = get_platform(platform)
    except (KeyError, ValueError) as e:
        raise ConfigError(f"spmm_engine: {e}") from None
    return EngineChoice(resolve_config(config), plat, plat.name, config is not None)


def ConvertConvLayout(layout: dict | None = None):  # noqa: N802
    """``ConvertLayout`` of the convolutions left for llvm (default :data:`CONV_LAYOUT`, NHWC), then
    ``CanonicalizeBindings`` + ``EliminateCommonSubexpr``.

    First the per-channel affine steps after each convolution (an inference batch norm) are folded
    into its weights and one bias (:func:`.conv_affine.fold_conv_affine`).

    The clean-up lets ``FuseOps`` see through what the conversion leaves: the batch norm's
    ``(y, mean, var)[0]`` tuple and variable-to-variable bindings (which kept each ReLU out of
    its convolution's kernel), and a second ``permute_dims`` of an input the first convolution
    already converted (a residual add then reads that one copy, in the convolutions' layout,
    and joins the last convolution's kernel).  Last, the layout conversions at the ends go where
    they are free (:mod:`.conv_layout`): a residual add that converts the block's output back reads
    the skip input in its own layout, and a plain 1x1 convolution of a converted input reads the
    input itself, so no converted copy of the input is made; a last 1x1 convolution whose output is
    converted back, added to the skip input (and ReLU'd) writes NCHW itself with the add and the ReLU
    in its epilogue (:func:`.conv_layout.conv1x1_residual_to_nchw`).
    """
    import tvm
    from tvm import relax

    from tvm_ext.compile_steps.conv_affine import fold_conv_affine
    from tvm_ext.compile_steps.conv_layout import (conv1x1_read_nchw, conv1x1_residual_to_nchw,
                                                    residual_in_input_layout)

    @_module_pass("tvm_ext.ConvertConvLayout")
    def run(mod, ctx):
        mod = fold_conv_affine(mod)
        mod = tvm.transform.Sequential([relax.transform.ConvertLayout(layout or CONV_LAYOUT),
                                        relax.transform.CanonicalizeBindings(),
                                        relax.transform.EliminateCommonSubexpr()])(mod)
        dce = relax.transform.DeadCodeElimination()
        mod = conv1x1_residual_to_nchw(dce(residual_in_input_layout(mod)))
        return dce(conv1x1_read_nchw(mod))

    return run


def LegalizeAndFuse():  # noqa: N802
    """``LegalizeOps`` + ``FuseOps`` + ``FuseTIR``; each fused PrimFunc records its member ops
    (``tvm_ext.members``)."""
    import re

    import tvm
    from tvm import relax

    @_module_pass("tvm_ext.LegalizeAndFuse")
    def run(mod, ctx):
        mod = tvm.transform.Sequential([relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                                        relax.transform.FoldConstant(), relax.transform.FuseOps()])(mod)
        members: dict[str, list[str]] = {}
        for gv, func in mod.functions.items():
            if isinstance(func, relax.Function) and func.attrs is not None and "Primitive" in func.attrs:
                names: list[str] = []

                def visit(e, names=names):
                    if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_tir":
                        names.append(e.args[0].name_hint)

                relax.analysis.post_order_visit(func, visit)
                members[gv.name_hint] = names
        mod = relax.transform.DeadCodeElimination()(relax.transform.FuseTIR()(mod))
        for gv, func in list(mod.functions.items()):
            if isinstance(func, tvm.tirx.PrimFunc) and (func.attrs is None or pl.ATTR_MEMBERS not in func.attrs):
                names = members.get(gv.name_hint, [gv.name_hint])
                mod[gv] = func.with_attr(pl.ATTR_MEMBERS, [re.sub(r"\d+$", "", m) for m in names])
        return mod

    return run


def _scheduled(func) -> bool:
    return bool(func.attrs is not None and func.attrs.get("tirx.is_scheduled", False))


def ApplyTuningRecords(db: Any = None, target: Any = None):  # noqa: N802
    """Rule 1 of the llvm chain: ``MetaScheduleApplyDatabase`` with ``db`` (a tuning directory, a
    ``TuningDatabase`` or a MetaSchedule database); kernels it schedules are marked ``tuned``."""
    import tvm
    from tvm import relax

    from tvm_ext.compile_steps.llvm_schedule import tuning_database

    database = tuning_database(db)

    @_module_pass("tvm_ext.ApplyTuningRecords")
    def run(mod, ctx):
        if database is None:
            return mod
        before = {gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc) and _scheduled(f)}
        with _target(target), database:
            out = relax.transform.MetaScheduleApplyDatabase()(mod)
        for gv, f in list(out.functions.items()):
            if isinstance(f, tvm.tirx.PrimFunc) and _scheduled(f) and gv.name_hint not in before:
                out[gv] = f.with_attr(pl.ATTR_SCHEDULE, ["tuned", "MetaSchedule record from tuning_db", ""])
        return out

    return run


class ScheduleRule:
    """One rule of the llvm schedule chain (as a dlight rule): ``apply`` returns the scheduled
    PrimFunc (``tirx.is_scheduled`` set) and how, or ``(None, why not)`` to let the next rule try."""

    def apply(self, func, name: str, target, declined=None):  # pragma: no cover - interface
        raise NotImplementedError


class MeasuredTensorize(ScheduleRule):
    """The ``tensorize`` mapping onto x86 instructions; with ``mode="measure"`` kept only when it
    measures faster than the default schedule (:func:`.llvm_schedule.schedule_primfunc`)."""

    def __init__(self, mode: str = "measure"):
        if mode not in ("measure", "always", "never"):
            raise ConfigError(f"tensorize={mode!r}: choose 'measure', 'always' or 'never'")
        self.mode = mode

    def apply(self, func, name: str, target, declined=None):
        from tvm_ext.compile_steps.llvm_schedule import KernelSchedule, schedule_primfunc

        if self.mode == "never":
            return None, KernelSchedule(name, "default", reason="tensorize='never'")
        new, how = schedule_primfunc(func, name, target=target, db=None, tensorize=self.mode)
        return (new, how) if how.how in ("tensorized", "depthwise", "gemv") else (None, how)


class DefaultSchedule(ScheduleRule):
    """Outer spatial loops in parallel when big enough, inner loops vectorised, transposes
    cache-tiled (:mod:`.llvm_schedule`); applies to every kernel but a plain reshape, which is left
    unscheduled for TVM's ``RewriteDataflowReshape`` to turn into a view of its input."""

    def apply(self, func, name: str, target, declined=None):
        from tvm import relax

        from tvm_ext.compile_steps.default_schedule import default_all
        from tvm_ext.compile_steps.llvm_schedule import KernelSchedule

        if relax.analysis.has_reshape_pattern(func):  # TVM's RewriteDataflowReshape makes it a view
            return None, KernelSchedule(name, "default", reason="a reshape: a view at run time, no kernel")
        how = KernelSchedule(name, "default", declined.detail if declined else "",
                             declined.reason if declined else "", dict(declined.candidates) if declined else {})
        return default_all(func).mod["main"].with_attr("tirx.is_scheduled", True), how


def ApplyScheduleRules(*rules: ScheduleRule, target: Any = None,  # noqa: N802
                       name: str = "tvm_ext.ApplyScheduleRules"):
    """Every PrimFunc not scheduled yet gets the first rule that applies (like dlight's
    ``ApplyDefaultSchedule``); the decision is recorded on it (``tvm_ext.schedule``)."""
    import tvm

    @_module_pass(name)
    def run(mod, ctx):
        tgt = _target(target)
        for gv, func in list(mod.functions.items()):
            if not isinstance(func, tvm.tirx.PrimFunc) or _scheduled(func):
                continue
            declined = None
            for rule in rules:
                new, how = rule.apply(func, gv.name_hint, tgt, declined)
                if new is not None:
                    break
                declined = how
            else:
                continue  # no rule applied: left for TVM's own pipeline
            if func.attrs is not None and pl.ATTR_MEMBERS in func.attrs:
                new = new.with_attr(pl.ATTR_MEMBERS, func.attrs[pl.ATTR_MEMBERS])
            mod[gv] = new.with_attr(pl.ATTR_SCHEDULE, [how.how, how.detail, how.reason])
        return mod

    return run


def TensorizeOrDefault(tensorize: str = "measure", target: Any = None):  # noqa: N802
    """Rules 2 and 3 of the llvm chain (rule 1 is :func:`ApplyTuningRecords`):
    ``ApplyScheduleRules(MeasuredTensorize(tensorize), DefaultSchedule())``."""
    return ApplyScheduleRules(MeasuredTensorize(tensorize), DefaultSchedule(), target=target,
                              name="tvm_ext.TensorizeOrDefault")


def PrepackWeights(target: Any = None):  # noqa: N802
    """Constant weights the micro-kernels read in panels are packed at compile time
    (kernels renamed ``*_prepacked``, their schedule and member records kept)."""
    import tvm

    from tvm_ext.compile_steps.weight_prepack import PREPACKED_SUFFIX, prepack_weights

    @_module_pass("tvm_ext.PrepackWeights")
    def run(mod, ctx):
        attrs = {gv.name_hint: f.attrs for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
        out, marked = prepack_weights(mod, _target(target))
        for name, params in marked.items():
            gv = out.get_global_var(name + PREPACKED_SUFFIX) if any(
                g.name_hint == name + PREPACKED_SUFFIX for g in out.get_global_vars()) else None
            if gv is None or attrs.get(name) is None:
                continue
            f = out[gv]
            old = attrs[name]
            note = f"weights {', '.join(params)} packed at compile time"
            if pl.ATTR_SCHEDULE in old:
                how, detail, reason = (str(x) for x in old[pl.ATTR_SCHEDULE])
                f = f.with_attr(pl.ATTR_SCHEDULE, [how, "; ".join(x for x in (detail, note) if x), reason])
            if pl.ATTR_MEMBERS in old:
                f = f.with_attr(pl.ATTR_MEMBERS, old[pl.ATTR_MEMBERS])
            out[gv] = f
        return out

    return run
