"""How MetaSchedule builds and measures the plugin's kernels: builder, real arguments, evaluator.

Three pieces every MetaSchedule run of :mod:`tvm_ext.tuning` shares:

* :class:`InProcessBuilder`, a MetaSchedule ``PyBuilder`` that compiles
  candidates in the tuning process with ``tvm.compile``.  MetaSchedule's
  ``LocalBuilder`` starts fresh worker processes for every batch and its
  default build function imports ``tvm.s_tir.tensor_intrin``, which parses
  hundreds of TVMScript intrinsics (about 25 s per batch on this machine with
  torch installed); the kernels tuned here never need them.
* :class:`ArgStore`: sparse executors and the fused CG kernels read index
  arrays, so random arguments (MetaSchedule's default) would read out of
  bounds.  The store writes each task's real arguments to ``.npz`` files keyed
  by the task's ``ArgInfo`` list; :func:`alloc_local` / :func:`alloc_rpc` are
  the runners' ``f_alloc_argument`` and load them (falling back to random
  data for dense kernels that stored none).
* :func:`lean_meta_schedule`: ``TuneContext`` imports the same intrinsic
  package on construction; inside this context that import is a no-op
  package stub (submodules still import on demand), restored afterwards.

Example::

    >>> import numpy as np, tempfile
    >>> store = ArgStore(tempfile.mkdtemp())
    >>> info = [["TENSOR", "float32", [2, 2]]]
    >>> key = store.put(info, [np.ones((2, 2), "float32")])
    >>> float(store.get(key)[0].sum())
    4.0
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from tvm_ext.atomic_file import atomic_write
from tvm_ext.errors import TuningError

__all__ = [
    "ArgStore",
    "InProcessBuilder",
    "alloc_local",
    "alloc_rpc",
    "args_info_of",
    "evaluator_config",
    "lean_meta_schedule",
    "local_runner",
    "measure_mods",
]

#: Repeats / minimum milliseconds of one measurement (MetaSchedule EvaluatorConfig).
REPEAT = 3
MIN_REPEAT_MS = 40


def _plain(obj: Any) -> Any:
    """TVM containers and numpy scalars -> plain JSON types (stable keys)."""
    if isinstance(obj, (str, bool)) or obj is None:
        return obj
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return float(obj)
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    try:
        return [_plain(x) for x in obj]
    except TypeError:
        return str(obj)


def args_key(args_info: Any) -> str:
    """Stable key of an ``ArgInfo`` JSON list (what a runner worker receives)."""
    return hashlib.sha1(json.dumps(_plain(args_info)).encode()).hexdigest()[:20]


def args_info_of(func) -> list:
    """The MetaSchedule ``ArgInfo`` JSON list of a PrimFunc (static shapes required)."""
    from tvm.s_tir import meta_schedule as ms

    return [_plain(a.as_json()) for a in ms.arg_info.ArgInfo.from_prim_func(func)]


def _digest(arrays: Sequence[np.ndarray]) -> str:
    h = hashlib.sha1()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


class ArgStore:
    """Real kernel arguments on disk, one ``<key>.npz`` per distinct ``ArgInfo`` list.

    Two tasks whose arguments have the same shapes but different contents
    cannot share a key: :meth:`put` raises :class:`TuningError` then.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def path(self, key: str) -> Path:
        return self.root / f"{key}.npz"

    def put(self, args_info: Any, arrays: Sequence[np.ndarray]) -> str:
        info = _plain(args_info)
        if len(info) != len(arrays):
            raise TuningError(f"argument store: {len(arrays)} arrays for {len(info)} arguments")
        for (kind, dtype, shape), a in zip(info, arrays):
            if kind != "TENSOR" or str(np.dtype(a.dtype)) != dtype or list(a.shape) != list(shape):
                raise TuningError(f"argument store: array {a.dtype}{list(a.shape)} does not match {dtype}{shape}")
        key = args_key(info)
        digest = _digest(arrays)
        path = self.path(key)
        if path.exists():
            with np.load(path) as z:
                old = str(z["__digest__"]) if "__digest__" in z.files else ""
            if old != digest:
                raise TuningError(f"argument store {self.root}: two tasks with argument shapes {info} need "
                                  "different data; tune them in separate databases")
            return key
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: np.savez_compressed(tmp, *[np.ascontiguousarray(a) for a in arrays],
                                                           __digest__=np.array(digest)))
        return key

    def get(self, key: str) -> list[np.ndarray] | None:
        path = self.path(key)
        if not path.exists():
            return None
        with np.load(path) as z:
            n = sum(1 for f in z.files if f.startswith("arr_"))
            return [z[f"arr_{i}"] for i in range(n)]


def _load_args(store_dir: str, args_info: Any) -> list[np.ndarray] | None:
    return ArgStore(store_dir).get(args_key(args_info))


def alloc_local(store_dir: str, device, args_info, alloc_repeat: int) -> list[list]:
    """``LocalRunner`` ``f_alloc_argument``: stored arrays, else MetaSchedule's random fill."""
    import tvm

    arrays = _load_args(store_dir, args_info)
    if arrays is None:
        from tvm.s_tir.meta_schedule.runner.local_runner import default_alloc_argument

        return default_alloc_argument(device, args_info, alloc_repeat)
    return [[tvm.runtime.tensor(a, device) for a in arrays] for _ in range(alloc_repeat)]


def alloc_rpc(store_dir: str, session, device, args_info, alloc_repeat: int) -> list[list]:
    """``RPCRunner`` ``f_alloc_argument``: stored arrays copied to the remote device."""
    import tvm

    arrays = _load_args(store_dir, args_info)
    if arrays is None:
        from tvm.s_tir.meta_schedule.runner.rpc_runner import default_alloc_argument

        return default_alloc_argument(session, device, args_info, alloc_repeat)
    out = []
    for _ in range(alloc_repeat):
        row = []
        for a in arrays:
            t = tvm.runtime.empty(a.shape, str(a.dtype), device)
            t.copyfrom(a)
            row.append(t)
        out.append(row)
    return out


def evaluator_config():
    """The evaluator every measurement of a session uses (trials and defaults alike)."""
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.EvaluatorConfig(number=1, repeat=REPEAT, min_repeat_ms=MIN_REPEAT_MS,
                                     enable_cpu_cache_flush=False)


def local_runner(store_dir: str | os.PathLike, timeout_sec: float = 60.0):
    """A MetaSchedule ``LocalRunner`` that feeds stored arguments."""
    import functools

    from tvm.s_tir import meta_schedule as ms

    return ms.runner.LocalRunner(timeout_sec=timeout_sec, evaluator_config=evaluator_config(),
                                 f_alloc_argument=functools.partial(alloc_local, str(store_dir)))


def _make_builder_class():
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class _InProcessBuilder(ms.builder.PyBuilder):
        """Compile candidates with ``tvm.compile`` in this process; export a ``.tar`` per candidate."""

        def __init__(self, scratch: str | None = None):
            super().__init__()
            self.scratch = scratch

        def build(self, build_inputs):
            import tvm
            from tvm.support.tar import tar

            results = []
            for bi in build_inputs:
                try:
                    ex = tvm.compile(bi.mod, target=bi.target)
                    if self.scratch:
                        os.makedirs(self.scratch, exist_ok=True)
                    folder = tempfile.mkdtemp(prefix="tvmext-build-", dir=self.scratch)
                    path = os.path.join(folder, "kernel." + tar.output_format)
                    ex.export_library(path, fcompile=tar)
                    results.append(ms.builder.BuilderResult(path, None))
                except Exception as err:  # noqa: BLE001 - a failed candidate is a tuning result
                    results.append(ms.builder.BuilderResult(None, f"InProcessBuilder: {type(err).__name__}: {err}"))
            return results

    return _InProcessBuilder


_BUILDER_CLS = None


def InProcessBuilder(scratch: str | None = None):  # noqa: N802 - reads as a class
    """A MetaSchedule builder compiling in this process (see the module docstring)."""
    global _BUILDER_CLS
    if _BUILDER_CLS is None:
        _BUILDER_CLS = _make_builder_class()
    return _BUILDER_CLS(scratch)


@contextlib.contextmanager
def lean_meta_schedule() -> Iterator[None]:
    """Skip the eager ``tvm.s_tir.tensor_intrin`` import of ``TuneContext`` (see module docstring).

    Only when nothing imported it yet; the stub keeps the real package path, so
    ``import tvm.s_tir.tensor_intrin.x86`` still works, and it is removed on exit
    so a later plain import loads the real package.  The x86 intrinsics are
    imported (0.2 s): MetaSchedule's default x86 rules on a VNNI CPU name
    ``dot_16x4_vnni`` and fail without it.
    """
    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        yield
        return
    spec = importlib.util.find_spec(name)
    stub = types.ModuleType(name)
    stub.__path__ = list(spec.submodule_search_locations or [])
    stub.__tvm_ext_stub__ = True
    sys.modules[name] = stub
    try:
        importlib.import_module(name + ".x86")
        yield
    finally:
        if getattr(sys.modules.get(name), "__tvm_ext_stub__", False):
            del sys.modules[name]


def measure_mods(mods: Sequence[Any], target, builder, runner) -> list[float | str]:
    """Build and run already-scheduled IRModules the way trials are measured.

    Returns the mean seconds of each, or the error text where building or running failed.
    Used for the untuned defaults, so both sides of "tuned vs default" are
    measured by the same builder, runner and evaluator.
    """
    from tvm.s_tir import meta_schedule as ms

    built = builder.build([ms.builder.BuilderInput(m, target) for m in mods])
    inputs, where = [], []
    out: list[float | str] = [str(b.error_msg) for b in built]
    for i, (m, b) in enumerate(zip(mods, built)):
        if b.error_msg is None:
            func = m["main"] if hasattr(m, "__getitem__") else m
            device = "cpu" if target.kind.name == "llvm" else str(target.kind.name)
            inputs.append(ms.runner.RunnerInput(b.artifact_path, device,
                                                ms.arg_info.ArgInfo.from_prim_func(func)))
            where.append(i)
    futures = runner.run(inputs)
    for i, fut in zip(where, futures):
        res = fut.result()
        if res.error_msg is None and res.run_secs:
            out[i] = float(np.mean([float(s) for s in res.run_secs]))
        else:
            out[i] = str(res.error_msg)
    for b in built:
        if b.artifact_path:
            from tvm.s_tir.meta_schedule.utils import remove_build_dir

            remove_build_dir(b.artifact_path)
    return out
