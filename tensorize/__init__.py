"""tensorize: what can compute what (ISA Mapper: ISAMIR, instruction library, mapper, transforms, selection).

Flow: kernel (TE / PrimFunc) -> :func:`to_isamir` -> :func:`find_mappings`
(deterministic mapper + feedback-driven transformation search) ->
:func:`select_instructions` -> emission (TensorIntrin + schedule, built on
:class:`Mapping`).

>>> from tensorize import find_mappings, get_isa
>>> from tvm import te
>>> A = te.placeholder((64, 64), name="A"); B = te.placeholder((64, 64), name="B")
>>> k = te.reduce_axis((0, 64), name="k")
>>> C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> [m.summary() for m in find_mappings(C, "x86", instructions=["matmul_16x16x16"])][0]
'matmul_16x16x16: i->i, j->j, k->k; outer -; 64 calls'
"""
from .exporters import export_groups, statement_blocks, to_prim_func
from .importers import NonAffineAccessError, UnsupportedKernelError, from_prim_func, from_te, to_isamir
from .binding import AxisBinding, as_binding
from .emit import Emitted, apply
from .intrin_spec import IntrinSpec, OperandSpec, derive_spec
from .tensor_intrin import (
    Implementation,
    desc_source,
    get_implementation,
    implementations,
    register_implementation,
    register_intrin,
)
from . import x86  # noqa: F401  (registers the x86 implementations with tensor_intrin)
from .feedback import (
    AxisMisfit,
    CompetingAxes,
    ExtentMisfit,
    FailureKind,
    LayoutMismatch,
    MissingAxisRole,
    OpMismatch,
)
from .instructions import ISA, Instruction, available_isas, get_isa, make_instruction, providers, register_isa
from .isamir import Access, Affine, Axis, Buffer, Const, Program, Statement, evaluate, parse_isamir
from .kernels import (
    KERNELS,
    Kernel,
    Plan,
    Tensorized,
    TuneResult,
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
    plan_mappings,
    quick_tune,
    separable_conv2d,
    tensorized,
)
from .mapper import Failure, MapResult, Mapping, NoMappingError, map_instruction
from .search import SearchResult, find_mappings, search_mappings
from .selection import CallCountModel, CostModel, CycleCostModel, Selection, rank_selections, select_instructions
from .transforms import (
    Transform,
    TransformError,
    TransformStep,
    apply_steps,
    available_transforms,
    get_transform,
    register_transform,
)

__all__ = [
    # IR
    "Affine", "Access", "Const", "Statement", "Axis", "Buffer", "Program", "parse_isamir", "evaluate",
    # import / export
    "to_isamir", "from_te", "from_prim_func", "to_prim_func", "export_groups", "statement_blocks",
    "NonAffineAccessError", "UnsupportedKernelError",
    # instructions
    "Instruction", "ISA", "make_instruction", "get_isa", "register_isa", "available_isas", "providers",
    # mapper
    "Mapping", "Failure", "MapResult", "NoMappingError", "map_instruction",
    # mapper feedback
    "FailureKind", "OpMismatch", "MissingAxisRole", "CompetingAxes", "AxisMisfit", "ExtentMisfit", "LayoutMismatch",
    # transforms + search
    "Transform", "TransformStep", "TransformError", "register_transform", "get_transform",
    "available_transforms", "apply_steps", "search_mappings", "SearchResult", "find_mappings",
    # selection
    "CostModel", "CallCountModel", "CycleCostModel", "Selection", "select_instructions", "rank_selections",
    # emitting TVM: TensorIntrins, schedule steps, implementations
    "apply", "AxisBinding", "Emitted", "Implementation", "IntrinSpec", "OperandSpec", "as_binding",
    "derive_spec", "desc_source", "get_implementation", "implementations", "register_implementation",
    "register_intrin",
    # end-to-end kernels
    "KERNELS", "Kernel", "Plan", "Tensorized", "TuneResult", "tensorized", "plan_mappings", "quick_tune",
    "make_kernel", "kernel_from_prim_func", "matmul", "batch_matmul", "dense_bias", "conv1d",
    "conv2d_nchw", "conv2d_nhwc", "depthwise_conv2d", "separable_conv2d", "gru_cell",
]
