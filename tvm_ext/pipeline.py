"""The plugin as a Relax pipeline: ``tvm.compile(mod, target, relax_pipeline="tvm_ext")``.

:func:`pipeline` returns one ``tvm.transform.Pass``: the plugin's module
passes (:mod:`tvm_ext.compile_steps.passes`), then TVM's default build
pipeline (memory planning, VM lowering).  ``import tvm_ext`` registers it
with TVM under the name ``"tvm_ext"`` as soon as TVM loads, so

* ``tvm.compile(mod, target, relax_pipeline="tvm_ext")`` runs it with the
  defaults (llvm only: sparse products, tensorize, weight prepacking);
* ``tvm.compile(mod, target, relax_pipeline=tvm_ext.pipeline(accel="default"))``
  or ``relax.get_pipeline("tvm_ext", accel="default", spmm_engine="sextans")``
  configures it;
* :func:`optimization_passes` lists the plugin's passes alone, to mix with
  one's own in a ``Sequential``.

The same registration puts the BYOC patterns in TVM's pattern registry
(``get_patterns_with_prefix("accel")`` / ``("sextans")``).

>>> import numpy as np, tvm
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType((4, 8), "float32"))
>>> with bb.function("main", [x]):
...     with bb.dataflow():
...         y = bb.emit_output(relax.op.nn.relu(x))
...     _ = bb.emit_func_output(y)
>>> ex = tvm.compile(bb.get(), "llvm", relax_pipeline="tvm_ext")
>>> vm = relax.VirtualMachine(ex, tvm.cpu())
>>> xs = np.linspace(-1, 1, 32, dtype="float32").reshape(4, 8)
>>> bool(np.array_equal(vm["main"](tvm.runtime.tensor(xs)).numpy(), np.maximum(xs, 0)))
True
"""
from __future__ import annotations

import json
from typing import Any

__all__ = ["pipeline", "optimization_passes", "register_with_tvm", "REPORT_FUNCTION", "AttachReport"]

#: Relax function of a compiled module that returns its report (JSON bytes), so it travels with exports.
REPORT_FUNCTION = "tvm_ext_report"


def optimization_passes(*, accel: Any = None, spmm_engine: Any = None, tuning_db: Any = None,
                        tensorize: str = "measure", sparse_threshold: float = 0.1, fuse_gcn: bool = True,
                        target: Any = None) -> list:
    """The plugin's passes in order, configured (see :func:`tvm_ext.compile` for the options).

    ``target``: the llvm target to schedule for; by default the one ``tvm.compile`` enters.
    """
    from tvm_ext.compile_steps import passes as P
    from tvm_ext.compile_steps.depthwise_pointwise import FuseSeparableBlocks
    from tvm_ext.compile_steps.engine_records import knob_report, tuned_accel_approach
    from tvm_ext.compile_steps.gru_cell import FuseGRUCells
    from tvm_ext.compile_steps.param_alignment import ElementAlignedParams

    knobs = knob_report(tuning_db) if tuning_db is not None else None
    engine = P.resolve_engine(spmm_engine) if spmm_engine not in (None, False) else None
    seq = [P.PrepareForInference(), P.AnnotateOpIds(),
           P.OffloadSparseMatmuls(target, to_sextans=engine is not None, engine_name=engine.name if engine else "",
                                  threshold=sparse_threshold, fuse_gcn=fuse_gcn)]
    if accel not in (None, False):
        system = _accel_system(accel)
        approach, tuning = tuned_accel_approach(knobs, system)
        seq.append(P.PartitionForAccel(system, approach=approach, tuning=tuning))
    if engine is not None:
        seq.append(P.PartitionForSextans(spmm_engine, knobs=knobs))
    seq += [FuseGRUCells(), P.ConvertConvLayout(), P.LegalizeAndFuse(),
            P.ApplyTuningRecords(tuning_db, target), FuseSeparableBlocks(tensorize, target),
            P.TensorizeOrDefault(tensorize, target),
            P.PrepackWeights(target), ElementAlignedParams()]
    return seq


def _accel_system(accel: Any):
    from tvm_ext.errors import ConfigError

    try:
        from tvm_ext.accel.system_graph import load_system
    except ImportError as e:
        raise ConfigError(f"accel={accel!r}: the accelerator BYOC is not available ({e})") from None
    return load_system(None if accel is True else accel)


def AttachReport():  # noqa: N802 - TVM's pass naming
    """Add ``tvm_ext_report()`` to the module: the placement and kernels as JSON bytes (a ``uint8`` tensor)."""
    import numpy as np
    import tvm
    from tvm import relax

    from tvm_ext.compile_steps.param_alignment import accepts_element_aligned
    from tvm_ext.compile_steps.placement import report_parts

    @tvm.transform.module_pass(opt_level=0, name="tvm_ext.AttachReport")
    def run(mod, ctx):
        if any(gv.name_hint == REPORT_FUNCTION for gv in mod.get_global_vars()):
            return mod
        parts = report_parts(mod) | {"element_aligned_params": accepts_element_aligned(mod)}
        data = np.frombuffer(json.dumps(parts).encode(), dtype=np.uint8).copy()
        bb = relax.BlockBuilder(mod)
        with bb.function(REPORT_FUNCTION, []):
            bb.emit_func_output(relax.const(data))
        return bb.get()

    return run


def pipeline(*, accel: Any = None, spmm_engine: Any = None, tuning_db: Any = None, tensorize: str = "measure",
             sparse_threshold: float = 0.1, fuse_gcn: bool = True, target: Any = None):
    """The whole Relax pipeline as one pass: the plugin's passes, the report, TVM's default build pipeline.

    >>> type(pipeline()).__name__
    'ModulePass'
    """
    import tvm
    from tvm import relax

    inner = tvm.transform.Sequential(
        optimization_passes(accel=accel, spmm_engine=spmm_engine, tuning_db=tuning_db, tensorize=tensorize,
                            sparse_threshold=sparse_threshold, fuse_gcn=fuse_gcn, target=target)
        + [AttachReport(), relax.pipeline.default_build_pipeline()], name="tvm_ext")

    @tvm.transform.module_pass(opt_level=0, name="tvm_ext.pipeline")
    def run(mod, ctx):
        return inner(mod)

    return run


def register_with_tvm() -> None:
    """Register the ``"tvm_ext"`` Relax pipeline and the BYOC patterns with TVM (idempotent)."""
    from tvm.relax import pipeline as relax_pipeline

    if "tvm_ext" not in relax_pipeline.PIPELINE_MAP:
        relax_pipeline.register_pipeline("tvm_ext")(pipeline)
    from tvm_ext.accel.patterns import register as register_accel
    from tvm_ext.spmm_engine.relax_op import register_patterns as register_sextans

    register_accel()
    register_sextans()


# ``tvm_ext.pipeline`` is this module once imported; make it callable so that
# ``tvm_ext.pipeline(accel=...)`` works whichever the package attribute resolves to.
class _CallableModule(__import__("types").ModuleType):
    def __call__(self, **options: Any):
        return pipeline(**options)


__import__("sys").modules[__name__].__class__ = _CallableModule
