"""ISA Mapper §6.1/§7: the kernels mapped end to end, and ``tensorized()`` to build them.

One module per idea:

* :mod:`~tensorize.kernels.zoo`: the TE kernels with numpy references (:class:`Kernel`);
* :mod:`~tensorize.kernels.planning`: which mappings to run per block (:func:`plan_mappings`,
  :func:`simulate_plan`, :func:`plan_cycles`);
* :mod:`~tensorize.kernels.build`: the whole flow, map -> plan -> rebuild -> emit -> build (:func:`tensorized`);
* :mod:`~tensorize.kernels.knob_search`: emission knobs measured (:func:`quick_tune`).

>>> k = matmul(32, 32, 16)
>>> [t.name for t in k.tensors], k.flops
(['A', 'B', 'C'], 32768)
"""
from __future__ import annotations

from .build import Tensorized, first_fitting, rebuild, tensorized
from .knob_search import DEFAULT_KNOBS, TuneResult, quick_tune
from .planning import (
    SCHEDULE_LEVEL_TRANSFORMS,
    Plan,
    compute_blocks,
    covers,
    mapping_rank,
    origin_block,
    plan_cycles,
    plan_mappings,
    real_calls,
    simulate_plan,
    structural_transforms,
    transform_names,
)
from .zoo import (
    DEFAULT_SIZES,
    KERNELS,
    Kernel,
    batch_matmul,
    conv1d,
    conv2d_nchw,
    conv2d_nhwc,
    dense_bias,
    depthwise_conv2d,
    gru_cell,
    kernel_from_prim_func,
    make_kernel,
    matmul,
    separable_conv2d,
)

__all__ = [
    "Kernel", "matmul", "batch_matmul", "dense_bias", "conv1d", "conv2d_nchw", "conv2d_nhwc",
    "depthwise_conv2d", "separable_conv2d", "gru_cell", "kernel_from_prim_func", "KERNELS", "DEFAULT_SIZES",
    "make_kernel",
    "Plan", "plan_mappings", "simulate_plan", "plan_cycles", "mapping_rank", "real_calls", "compute_blocks",
    "covers", "origin_block", "transform_names", "structural_transforms", "SCHEDULE_LEVEL_TRANSFORMS",
    "Tensorized", "tensorized", "first_fitting", "rebuild",
    "DEFAULT_KNOBS", "TuneResult", "quick_tune",
]
