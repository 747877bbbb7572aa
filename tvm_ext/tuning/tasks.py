"""Tuning tasks: what ``tvm-ext tune TASK ...`` names, as objects a session can run.

====================================  ===========  ======================================
TASK form                             engine       cost
====================================  ===========  ======================================
``gemm --shape M N K``                MetaSchedule seconds (tensorized matmul)
``conv --shape N C_IN C_OUT HW K``    MetaSchedule seconds (tensorized conv2d, NHWC or NCHW)
``spmm NAME|FILE --n N``              MetaSchedule seconds (sparse executors x formats)
``cg NAME|FILE --n N``                MetaSchedule seconds (one fused block-CG iteration)
``sextans NAME|FILE --n N``           knob loop    simulated cycles (Sextans K0/N0/D/P)
``accel --workload W --shape ...``    knob loop    simulated cycles (accelerator Approach)
====================================  ===========  ======================================

Every task has a stable :attr:`Task.key` (kind, sizes, a hash of the matrix
contents, dtype, target), so records of different problems never mix in one
database and a resumed session finds its own.

>>> t = make_task("gemm", shape=(64, 64, 32))
>>> t.kind, t.unit, t.engine, t.key.startswith("gemm:")
('gemm', 'seconds', 'metaschedule', True)
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

import numpy as np

from tvm_ext.errors import InputError, TuningError, positive_int

__all__ = ["Task", "GemmTask", "ConvTask", "SpmmTask", "CGTask", "SextansTask", "AccelTask", "TASK_KINDS",
           "make_task", "matrix_digest"]


def matrix_digest(A) -> str:
    """A short hash of a sparse matrix's shape, pattern and values."""
    from tvm_ext.workloads import canonical_csr

    csr = canonical_csr(A, allow_nan=True)
    h = hashlib.sha1(str(csr.shape).encode())
    for a in (csr.indptr, csr.indices, csr.data.astype(np.float64)):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:12]


class Task:
    """Base class.  ``engine`` is ``"metaschedule"`` or ``"knobs"``; ``unit`` the cost unit."""

    kind = "task"
    unit = "seconds"
    engine = "metaschedule"

    def spec(self) -> dict:
        raise NotImplementedError

    @property
    def key(self) -> str:
        from tvm_ext.target import target_key

        spec = dict(self.spec())
        if self.unit == "seconds":
            spec["target"] = target_key(None)
        digest = hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.kind}:{digest}"

    def describe(self) -> str:
        s = self.spec()
        return f"{self.kind} " + " ".join(f"{k}={v}" for k, v in s.items() if k != "kind")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


# --------------------------------------------------------------------------- MetaSchedule tasks
class MSTask(Task):
    """A task tuned by MetaSchedule over :mod:`.spaces` (subclasses give the tasks and defaults)."""

    engine = "metaschedule"

    def space_tasks(self, budget: int):
        raise NotImplementedError

    def default_tasks(self):
        raise NotImplementedError

    def combine(self, by_group: dict[str, float]) -> float:
        """Total cost from the best cost of each group (alternatives compete within a group)."""
        return float(sum(by_group.values()))

    def check(self, space_task, module) -> float:
        """Run a replayed kernel on the task's stored arguments; return the max relative error."""
        raise NotImplementedError


def _run(module, arrays: Sequence[np.ndarray]) -> list:
    """Run ``module["main"]`` once on copies of ``arrays``; the TVM tensors it ran on."""
    import tvm

    dev = tvm.cpu(0)
    ts = [tvm.runtime.tensor(np.ascontiguousarray(a), dev) for a in arrays]
    module["main"](*ts)
    return ts


def _run_module(module, arrays: Sequence[np.ndarray], out_index: int) -> np.ndarray:
    """Run ``module["main"]`` once on copies of ``arrays``; argument ``out_index``'s contents afterwards."""
    return _run(module, arrays)[out_index].numpy()


def _run_all(module, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run ``module["main"]`` once on copies of ``arrays``; every argument's contents afterwards."""
    return [t.numpy() for t in _run(module, arrays)]


def _rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    err = float(np.max(np.abs(got.astype(np.float64) - ref))) if ref.size else 0.0
    return err / scale if scale else err


class GemmTask(MSTask):
    """``C[M, N] = A[M, K] @ B[K, N]`` tensorized with the x86 micro-kernel intrinsics."""

    kind = "gemm"

    def __init__(self, M: int, N: int, K: int, dtype: str = "float32"):
        what = "gemm task"
        self.M, self.N, self.K = (positive_int(v, f"{what}: {n}") for n, v in (("M", M), ("N", N), ("K", K)))
        if dtype not in ("float32", "float64"):
            raise InputError(f"{what}: dtype must be float32 or float64, got {dtype!r}")
        self.dtype = dtype

    def spec(self) -> dict:
        return {"kind": "gemm", "shape": [self.M, self.N, self.K], "dtype": self.dtype}

    def space_tasks(self, budget: int):
        from tvm_ext.tuning.spaces import gemm_tasks

        return gemm_tasks(self.M, self.N, self.K, self.dtype)

    def default_tasks(self):
        from tvm_ext.tuning.spaces import SpaceTask, gemm_default

        return [SpaceTask("gemm_default", gemm_default(self.M, self.N, self.K, self.dtype), None, None, 1)]

    def check(self, space_task, module) -> float:
        from tvm_ext.tuning.spaces import gemm_reference

        (a, b), ref = gemm_reference(self.M, self.N, self.K, self.dtype)
        c = np.zeros((self.M, self.N), self.dtype)
        return _rel_err(_run_module(module, [a, b, c], 2), ref)


class ConvTask(MSTask):
    """A conv2d (``layout`` NHWC with HWIO weights or NCHW with OIHW weights) tensorized with the
    x86 micro-kernel intrinsics; ``shape`` is ``N C_IN C_OUT HW K`` (square input and kernel).

    >>> ConvTask(1, 16, 32, 8, 3, pad=1).spec()["shape"]
    [1, 16, 32, 8, 3]
    """

    kind = "conv"

    def __init__(self, n: int, c_in: int, c_out: int, hw: int, kernel: int, *, stride: int = 1, pad: int = 0,
                 layout: str = "nhwc", dtype: str = "float32"):
        from tvm_ext.tuning.conv_space import check_conv

        sizes = check_conv(n, c_in, c_out, hw, kernel, stride, pad, layout, dtype, what="conv task")
        (self.n, self.c_in, self.c_out, self.hw, self.kernel, self.stride, self.pad, self.layout,
         self.dtype) = sizes

    @property
    def sizes(self) -> tuple:
        """Positional arguments of :func:`~.conv_space.conv_tasks` and friends."""
        return (self.n, self.c_in, self.c_out, self.hw, self.kernel, self.stride, self.pad, self.layout, self.dtype)

    def spec(self) -> dict:
        return {"kind": "conv", "shape": [self.n, self.c_in, self.c_out, self.hw, self.kernel],
                "stride": self.stride, "pad": self.pad, "layout": self.layout, "dtype": self.dtype}

    def space_tasks(self, budget: int):
        from tvm_ext.tuning.conv_space import conv_tasks

        return conv_tasks(*self.sizes)

    def default_tasks(self):
        from tvm_ext.tuning.conv_space import conv_default
        from tvm_ext.tuning.spaces import SpaceTask

        return [SpaceTask("conv_default", conv_default(*self.sizes), None, None, 1)]

    def check(self, space_task, module) -> float:
        from tvm_ext.tuning.conv_space import conv_reference

        (x, w), ref = conv_reference(*self.sizes)
        y = np.zeros(ref.shape, self.dtype)
        return _rel_err(_run_module(module, [x, w, y], 2), ref)


class _MatrixTask(Task):
    def __init__(self, matrix: Any, n: int, *, name: str | None = None, dtype: str = "float32"):
        from tvm_ext.workloads import canonical_csr, resolve_matrix

        self.name = str(matrix) if name is None and isinstance(matrix, str) else (name or "matrix")
        A = resolve_matrix(matrix) if isinstance(matrix, str) else matrix
        self.A = canonical_csr(A, dtype=dtype, what=f"{self.kind} task matrix")
        self.n = positive_int(n, f"{self.kind} task: n")
        self.dtype = dtype
        self.digest = matrix_digest(self.A)

    def spec(self) -> dict:
        return {"kind": self.kind, "matrix": self.name, "digest": self.digest,
                "shape": list(self.A.shape), "nnz": int(self.A.nnz), "n": self.n, "dtype": self.dtype}


class SpmmTask(_MatrixTask, MSTask):
    """``A @ B`` (``B`` with ``n`` columns) over the sparse executors and the best-ranked formats."""

    kind = "spmm"
    #: Format candidates from the analytic ranking.
    formats = 3

    def space_tasks(self, budget: int):
        from tvm_ext.tuning.spaces import spmm_tasks

        return spmm_tasks(self.A, self.n, dtype=self.dtype, formats=self.formats)

    def default_tasks(self):
        from tvm_ext.tuning.spaces import spmm_default

        return [spmm_default(self.A, self.n, dtype=self.dtype)]

    def combine(self, by_group: dict[str, float]) -> float:
        return float(min(by_group.values()))

    def check(self, space_task, module) -> float:
        from tvm_ext.tuning.spaces import spmm_reference

        ref = spmm_reference(self.A, space_task, self.dtype)
        arrays = space_task.args
        return _rel_err(_run_module(module, arrays, len(arrays) - 1), ref)


class CGTask(_MatrixTask, MSTask):
    """One iteration of fused block CG (``n`` right-hand sides) on the SPD matrix ``A``."""

    kind = "cg"

    def __init__(self, matrix: Any, n: int, *, name: str | None = None, dtype: str = "float64"):
        super().__init__(matrix, n, name=name, dtype=dtype)
        if self.A.shape[0] != self.A.shape[1]:
            raise InputError(f"cg task: matrix {self.name} is {self.A.shape[0]}x{self.A.shape[1]}, CG needs square")

    def space_tasks(self, budget: int):
        from tvm_ext.tuning.spaces import cg_tasks

        return cg_tasks(self.A, self.n, dtype=self.dtype)

    def default_tasks(self):
        from tvm_ext.tuning.spaces import cg_defaults

        return cg_defaults(self.A, self.n, dtype=self.dtype)

    def check(self, space_task, module) -> float:
        """The tuned step must write what the library's kernel writes on the same inputs."""
        import tvm

        from schedules.fusion.arg_roles import ArgRole

        ref_task = {t.group: t for t in self.default_tasks()}[space_task.group]
        ref_mod = tvm.compile(ref_task.mod, target=_target())
        got, ref = _run_all(module, space_task.args), _run_all(ref_mod, ref_task.args)
        worst = 0.0
        # environment tensors do not depend on the part count; parts and workspaces do
        for i, role in enumerate(space_task.arg_roles):
            if role is ArgRole.TENSOR:
                worst = max(worst, _rel_err(got[i], ref[i].astype(np.float64)))
        return worst


def _target():
    from tvm_ext.target import resolve_target

    return resolve_target(None)


# --------------------------------------------------------------------------- knob tasks (simulated)
class KnobTask(Task):
    """A task tuned by :func:`~.knob_tuner.tune_knobs` (cost from a simulator/model)."""

    engine = "knobs"
    unit = "cycles"

    def knob_space(self):
        raise NotImplementedError

    def default_knobs(self) -> dict:
        raise NotImplementedError

    def evaluate(self, knobs: dict) -> float:
        raise NotImplementedError


class SextansTask(_MatrixTask, KnobTask):
    """Sextans engine parameters for one SpMM; cost = modelled cycles of the real scheduled stream."""

    kind = "sextans"
    unit = "cycles"
    engine = "knobs"

    def __init__(self, matrix: Any, n: int, *, name: str | None = None, platform: str = "sextans"):
        super().__init__(matrix, n, name=name, dtype="float32")
        from tvm_ext.spmm_engine import get_platform

        self.platform = get_platform(platform).name

    def spec(self) -> dict:
        return dict(super().spec(), platform=self.platform)

    def knob_space(self):
        from tvm_ext.tuning.model_knobs import sextans_space

        return sextans_space(self.A)

    def default_knobs(self) -> dict:
        from tvm_ext.tuning.model_knobs import sextans_default

        return sextans_default()

    def evaluate(self, knobs: dict) -> float:
        from tvm_ext.tuning.model_knobs import sextans_cycles

        return sextans_cycles(self.A, self.n, knobs, self.platform)


class AccelTask(KnobTask):
    """The accelerator's ``Approach`` choices (tile order, device allocation); cost = simulated cycles."""

    kind = "accel"
    unit = "cycles"
    engine = "knobs"

    def __init__(self, workload: str = "matmul", shape: Sequence[int] = (128, 128, 128), system: str = "default"):
        from tvm_ext.tuning.model_knobs import accel_workload

        self.workload_name, self.shape, self.system = str(workload), tuple(int(s) for s in shape), str(system)
        self.workload = accel_workload(self.workload_name, self.shape)

    def spec(self) -> dict:
        return {"kind": "accel", "workload": self.workload_name, "shape": list(self.shape), "system": self.system}

    def knob_space(self):
        from tvm_ext.tuning.model_knobs import accel_space

        return accel_space()

    def default_knobs(self) -> dict:
        from tvm_ext.tuning.model_knobs import accel_default

        return accel_default()

    def evaluate(self, knobs: dict) -> float:
        from tvm_ext.tuning.model_knobs import accel_cycles

        return accel_cycles(self.workload, self.system, knobs)


TASK_KINDS = {"gemm": GemmTask, "conv": ConvTask, "spmm": SpmmTask, "cg": CGTask, "sextans": SextansTask,
              "accel": AccelTask}


def make_task(kind: str, *, matrix: Any = None, n: int | None = None, shape: Sequence[int] | None = None,
              **options: Any) -> Task:
    """Build a task from the CLI's TASK form (``kind`` plus its arguments).

    >>> make_task("fft")
    Traceback (most recent call last):
    ...
    tvm_ext.errors.TuningError: unknown tuning task 'fft'; tasks: accel, cg, conv, gemm, sextans, spmm
    >>> make_task("conv", shape=[1, 16, 32, 8, 3], pad=1).describe()
    'conv shape=[1, 16, 32, 8, 3] stride=1 pad=1 layout=nhwc dtype=float32'
    """
    if kind not in TASK_KINDS:
        raise TuningError(f"unknown tuning task {kind!r}; tasks: {', '.join(sorted(TASK_KINDS))}")
    if kind == "gemm":
        if shape is None or len(shape) != 3:
            raise InputError(f"gemm task: --shape needs three sizes M N K, got {shape!r}")
        return GemmTask(*shape, **options)
    if kind == "conv":
        if shape is None or isinstance(shape, (str, bytes)) or len(shape) != 5:
            raise InputError(f"conv task: --shape needs five sizes N C_IN C_OUT HW K, got {shape!r}")
        return ConvTask(*shape, **options)
    if kind == "accel":
        kw = dict(options)
        if shape is not None:
            kw["shape"] = shape
        return AccelTask(**kw)
    if matrix is None:
        raise InputError(f"{kind} task: needs a matrix (a bundled name or a .mtx file)")
    if n is None:
        raise InputError(f"{kind} task: needs --n (columns of B / right-hand sides)")
    return TASK_KINDS[kind](matrix, n, **options)
