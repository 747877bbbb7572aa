"""Autotuning for the plugin: MetaSchedule where the knob lives in TIR, an XGBoost loop elsewhere.

* :mod:`.spaces`: MetaSchedule design spaces from the plugin's own schedules
  (tensorized GEMM, sparse executors x formats, fused block-CG kernels);
  :mod:`.conv_space`: tensorized convolutions (and any tensorized kernel);
* :mod:`.knob_tuner`: the XGBoost-model loop for knobs outside TIR;
  :mod:`.model_knobs`: Sextans K0/N0/D/P and the accelerator's Approach
  choices, costed in simulated cycles;
* :mod:`.selector`: the learned sparse-format selector (corpus, training,
  regret, installation into :mod:`schedules.sparse`);
* :mod:`.tasks`, :mod:`.session`, :mod:`.database`, :mod:`.progress`:
  ``tvm-ext tune`` sessions, resumable from their JSON-lines database;
* :mod:`.rpc`: measuring through a TVM RPC tracker; :mod:`.measure`: the
  builder, runner arguments and evaluator every MetaSchedule run shares.

Names load lazily; importing the package registers :func:`trained_selector`
with :func:`schedules.sparse.selection.register_selector_loader` (it is also
the package's ``tvm_ext.selectors`` entry point).

>>> from tvm_ext import tuning
>>> tuning.make_task("gemm", shape=(32, 32, 32)).kind
'gemm'
"""
from __future__ import annotations

from tvm_ext.lazy_exports import lazy_getattr


_LAZY = {
    # tasks and sessions
    "make_task": "tvm_ext.tuning.tasks",
    "TASK_KINDS": "tvm_ext.tuning.tasks",
    "Task": "tvm_ext.tuning.tasks",
    "ConvTask": "tvm_ext.tuning.tasks",
    "run_session": "tvm_ext.tuning.session",
    "SessionResult": "tvm_ext.tuning.session",
    "best_schedule": "tvm_ext.tuning.session",
    "apply_best": "tvm_ext.tuning.session",
    "TuningDatabase": "tvm_ext.tuning.database",
    "check_database": "tvm_ext.tuning.database",
    "ProgressBar": "tvm_ext.tuning.progress",
    # search spaces
    "SpaceTask": "tvm_ext.tuning.spaces",
    "gemm_tasks": "tvm_ext.tuning.spaces",
    "spmm_tasks": "tvm_ext.tuning.spaces",
    "cg_tasks": "tvm_ext.tuning.spaces",
    "conv_tasks": "tvm_ext.tuning.conv_space",
    "conv_default": "tvm_ext.tuning.conv_space",
    "conv_reference": "tvm_ext.tuning.conv_space",
    "kernel_tasks": "tvm_ext.tuning.conv_space",
    # non-TIR knobs
    "Knob": "tvm_ext.tuning.knob_tuner",
    "KnobSpace": "tvm_ext.tuning.knob_tuner",
    "tune_knobs": "tvm_ext.tuning.knob_tuner",
    "KnobApproach": "tvm_ext.tuning.model_knobs",
    # learned selector
    "LearnedSelector": "tvm_ext.tuning.selector",
    "build_corpus": "tvm_ext.tuning.selector",
    "train_selector": "tvm_ext.tuning.selector",
    "regret_report": "tvm_ext.tuning.selector",
    "load_default": "tvm_ext.tuning.selector",
    # RPC
    "RPCSettings": "tvm_ext.tuning.rpc",
    "LocalCluster": "tvm_ext.tuning.rpc",
    "check_tracker": "tvm_ext.tuning.rpc",
}

__all__ = sorted(_LAZY)


__getattr__ = lazy_getattr(__name__, _LAZY, globals())


def trained_selector():
    """The learned format selector saved by ``tvm-ext tune selector``, or None if there is none.

    >>> from schedules.sparse.selection import _selector_loaders
    >>> trained_selector in _selector_loaders  # registered when the package was imported
    True
    """
    from tvm_ext.tuning.selector import load_default

    return load_default(install=False)


def _register() -> None:
    from schedules.sparse.selection import register_selector_loader

    register_selector_loader(trained_selector)


_register()
