"""Peer runtimes for one model, each called the way a user calls it: numpy arrays in, numpy arrays out.

Every ``*_runner`` returns a function ``run(*inputs) -> list[np.ndarray]`` (or
raises :class:`PeerUnavailable` saying why it cannot run here):

* :func:`ort_runner`: ONNX Runtime, CPU execution provider, ``intra_op`` threads, ``inter_op`` 1;
* :func:`openvino_runner`: OpenVINO on the CPU, f32 precision, the same thread count;
* :func:`torch_runner`: eager PyTorch (no grad), or ``torch.compile`` (inductor) with
  ``compile=True``; numpy <-> torch through ``torch.from_numpy`` / ``.numpy()`` (no copies);
* :func:`metaschedule_build`: TVM's own tuned build,
  ``relax.pipeline.static_shape_tuning_pipeline(total_trials=trials_per_task * n_tasks,
  cpu_weight_prepack=True)`` before ``tvm.compile``, tuned once per work directory
  (re-runs apply the stored database for free), called through the same zero-copy
  numpy path as ``tvm_ext.compile``'s models (:class:`tvm_ext.model_call.NumpyCall`).
  Candidates are compiled in-process (:func:`tvm_ext.tuning.measure.InProcessBuilder`),
  the same ``tune_relax`` call ``MetaScheduleTuneIRMod`` makes otherwise.

>>> import numpy as np, pytest; _ = pytest.importorskip("onnxruntime")
>>> from tvm_ext.models.onnx_models import mlp_onnx
>>> run = ort_runner(mlp_onnx([4, 3], batch=2))
>>> [o.shape for o in run(np.zeros((2, 4), "float32"))]
[(2, 3)]
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from tvm_ext.errors import TvmExtError

__all__ = ["PeerUnavailable", "ort_runner", "openvino_runner", "torch_runner", "onnx_input_names",
           "TunedBuild", "metaschedule_tasks", "metaschedule_build"]

Runner = Callable[..., list]


class PeerUnavailable(TvmExtError):
    """A peer runtime is not installed here, or cannot run this model."""


def onnx_input_names(proto: Any) -> list[str]:
    """The graph inputs of an ONNX model that are not initializers, in order."""
    inits = {t.name for t in proto.graph.initializer}
    return [i.name for i in proto.graph.input if i.name not in inits]


def ort_runner(proto: Any, threads: int = 2) -> Runner:
    """ONNX Runtime on the CPU provider: ``intra_op_num_threads=threads``, ``inter_op_num_threads=1``."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise PeerUnavailable(f"onnxruntime is not installed ({e})") from None
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = int(threads), 1
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = onnx_input_names(proto)

    def run(*inputs: np.ndarray) -> list:
        return sess.run(None, dict(zip(names, inputs)))

    return run


def openvino_runner(proto: Any, threads: int = 2) -> Runner:
    """OpenVINO's CPU plugin on the ONNX model, f32 inference precision, ``threads`` threads."""
    try:
        import openvino as ov
    except ImportError as e:
        raise PeerUnavailable(f"openvino is not installed ({e})") from None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        path.write_bytes(proto.SerializeToString())
        core = ov.Core()
        try:
            compiled = core.compile_model(core.read_model(str(path)), "CPU",
                                          {"INFERENCE_NUM_THREADS": int(threads), "INFERENCE_PRECISION_HINT": "f32",
                                           "PERFORMANCE_HINT": "LATENCY"})
        except Exception as e:  # noqa: BLE001 - any OpenVINO failure means "no peer", with the reason
            raise PeerUnavailable(f"OpenVINO cannot compile it: {type(e).__name__}: {e}") from None
    request = compiled.create_infer_request()
    outputs = list(compiled.outputs)

    def run(*inputs: np.ndarray) -> list:
        request.infer(list(inputs), share_inputs=True, share_outputs=True)
        return [request.get_tensor(o).data for o in outputs]

    return run


def torch_runner(module: Any, example_inputs: Sequence[np.ndarray], *, compile: bool = False,  # noqa: A002
                 threads: int = 2) -> Runner:
    """Eager PyTorch (``compile=False``) or ``torch.compile`` (inductor), no grad, ``threads`` threads."""
    try:
        import torch
    except ImportError as e:
        raise PeerUnavailable(f"torch is not installed ({e})") from None
    torch.set_num_threads(int(threads))
    module = module.eval()
    fn = module
    if compile:
        try:
            fn = torch.compile(module, backend="inductor")
            with torch.no_grad():
                fn(*[torch.from_numpy(a) for a in example_inputs])  # compiles now, not inside the timing
        except Exception as e:  # noqa: BLE001
            raise PeerUnavailable(f"torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0]}") from None

    def run(*inputs: np.ndarray) -> list:
        with torch.no_grad():
            out = fn(*[torch.from_numpy(a) for a in inputs])
        return [o.numpy() for o in (out if isinstance(out, (tuple, list)) else (out,))]

    return run


@dataclass
class TunedBuild:
    """TVM's MetaSchedule-tuned build of one model."""

    run: Runner
    vm_seconds: Callable[..., float]
    tuning_seconds: float
    tasks: int
    trials_per_task: int
    cached: bool


def _ms_prelude(mod: Any, target: Any):
    """The module as ``static_shape_tuning_pipeline`` hands it to MetaSchedule (before tuning)."""
    import tvm
    from tvm import relax

    with target:
        return tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                         relax.transform.CanonicalizeBindings(),
                                         relax.get_pipeline("zero"),
                                         relax.transform.AttachAttrLayoutFreeBuffers()])(mod)


def metaschedule_tasks(mod: Any, target: Any) -> int:
    """How many tuning tasks MetaSchedule extracts from ``mod`` (after the zero pipeline)."""
    from tvm.s_tir import meta_schedule as ms

    return len(ms.relax_integration.extract_tasks(_ms_prelude(mod, target), target))


def _tune(prepared: Any, target: Any, work: Path, total: int, per_task: int) -> None:
    """What ``MetaScheduleTuneIRMod`` runs inside the pipeline (``tune_relax``), with candidates compiled
    in this process: the default ``LocalBuilder`` workers import every TVMScript intrinsic per batch
    (about 25 s with torch installed) and time out on a loaded 2-core machine."""
    from tvm.s_tir import meta_schedule as ms

    from tvm_ext.tuning.measure import InProcessBuilder, lean_meta_schedule

    from tvm.ir.utils import derived_object
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    @derived_object
    class _Builder(ms.builder.PyBuilder):
        """LocalBuilder's ``default_build`` in this process: measure kernels without their weight re-layout."""

        def __init__(self):
            super().__init__()
            self.inner = InProcessBuilder(str(work / "builds"))

        def build(self, build_inputs):
            strip = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)
            return self.inner.build([ms.builder.BuilderInput(strip(bi.mod), bi.target, bi.params)
                                     for bi in build_inputs])

    with lean_meta_schedule():
        ms.relax_integration.tune_relax(mod=prepared, params={}, target=target, work_dir=str(work),
                                        max_trials_global=total, max_trials_per_task=per_task, builder=_Builder())


def metaschedule_build(mod: Any, specs: Sequence[tuple[str, Sequence[int], Any]], work_dir: str | os.PathLike, *,
                       trials_per_task: int = 64, target: Any = None) -> TunedBuild:
    """Tune ``mod`` with ``static_shape_tuning_pipeline`` (about ``trials_per_task`` trials per task), build it.

    The database and a ``tuning.json`` record (seconds, tasks, trials) live in
    ``work_dir``; when that record exists for the same budget, the stored
    database is applied without tuning again.
    """
    import tvm
    from tvm import relax

    from tvm_ext.model_call import NumpyCall
    from tvm_ext.target import default_target

    target = tvm.target.Target(target) if target is not None else default_target()
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    record_path = work / "tuning.json"
    record = json.loads(record_path.read_text()) if record_path.is_file() else None
    cached = bool(record) and record.get("trials_per_task") == trials_per_task
    if cached:
        tasks, seconds, total = record["tasks"], record["tuning_seconds"], 0
    else:
        tasks = metaschedule_tasks(mod, target)
        total = trials_per_task * tasks
    if not cached:
        t0 = time.perf_counter()
        _tune(_ms_prelude(mod, target), target, work, total, trials_per_task)
        seconds = time.perf_counter() - t0
        record_path.write_text(json.dumps({"tasks": tasks, "trials_per_task": trials_per_task,
                                           "total_trials": total, "tuning_seconds": seconds}))
    # total_trials=0: the pipeline applies the database of work_dir (the tuning it would run is _tune's)
    tuned = relax.pipeline.static_shape_tuning_pipeline(total_trials=0, target=target, work_dir=str(work),
                                                         cpu_weight_prepack=True)(mod)
    vm = relax.VirtualMachine(tvm.compile(tuned, target=target), tvm.cpu(0))
    if len(tuned["main"].params) != len(specs):
        raise PeerUnavailable(f"the tuned module's main takes {len(tuned['main'].params)} arguments "
                              f"(lifted weights), not the model's {len(specs)} inputs")
    call = NumpyCall(vm, specs, alignment=64)  # TVM's own kernels assume 64-byte-aligned arguments

    def vm_seconds(*inputs: np.ndarray, repeat: int = 5, min_repeat_ms: int = 100) -> float:
        res = vm.time_evaluator("main", tvm.cpu(0), number=1, repeat=repeat,
                                min_repeat_ms=min_repeat_ms)(*call.tensors(inputs))
        return float(min(res.results))

    return TunedBuild(call, vm_seconds, seconds, tasks, trials_per_task, cached)
