"""MetaSchedule search spaces built from the plugin's own schedules.

Each space is a list of :class:`SpaceTask` s: one MetaSchedule task (a
``TuneContext``) per PrimFunc the plugin generates, with a ``ScheduleFn``
design-space generator whose knobs are ``sample_perfect_tile`` /
``sample_categorical`` decisions.  Knobs that change the *generated code*
rather than a schedule of it (a sparse executor's vector width and tile, a
BCSR block, a HYB split, a CG kernel's row parts) are separate tasks: one
PrimFunc per setting, all tuned together by MetaSchedule's task scheduler,
one shared ``XGBModel`` and one JSON database.

* :func:`gemm_tasks`: a matmul tensorized with :mod:`tensorize.emit`'s x86
  micro-kernel intrinsics.  Design spaces: the emitter's own schedules for
  several register tiles (MR x NR) and outer orders, each with B packed as
  the emitter decides, plus cache-blocked variants whose outer tiles around
  the instruction (and so the parallel grain of the fused parallel loop) are
  ``sample_perfect_tile`` knobs; every design space samples the unroll
  budget (``meta_schedule.unroll_explicit``).  The first design space *is* the
  untuned default, so a run never ends worse than the default it measured.
* :func:`conv_tasks` (in :mod:`.conv_space`, re-exported here): a conv2d
  (NHWC or NCHW) tensorized the same way: the mapping found once, emitted
  under register tiles, loop orders, ``pack`` and ``call_rows``, each with the
  parallel grain and the unroll budget as sampled knobs; the untuned default
  is a one-point task measured first.
* :func:`spmm_tasks`: the executors of :mod:`schedules.sparse.executors` for
  the formats the analytic model ranks best (BCSR R x C, ELL, HYB thresholds,
  ...), each with vector widths over N and either the library's work-balanced
  parts or a static row split whose row tile (= parallel chunk) is a
  ``sample_perfect_tile`` knob; all sample the unroll budget.
* :func:`cg_tasks`: the fused block-CG step kernels of
  :mod:`schedules.fusion.kernels`; the tile of the dominant (streamed) rank is
  the number of row parts, one task per setting.

Shapes, alpha/beta and the format's compile-time sizes are specialised to
the concrete problem (MetaSchedule needs static argument shapes) and each
task carries its real arguments for the runner (:class:`~.measure.ArgStore`).

>>> tasks = gemm_tasks(64, 64, 32)
>>> tasks[0].name, tasks[0].max_trials > 1
('gemm_64x64x32', True)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from tvm_ext.errors import InputError, ScheduleError, positive_int
from tvm_ext.lazy_exports import lazy_getattr

__all__ = [
    "SpaceTask",
    "specialize",
    "schedule_summary",
    "gemm_tasks",
    "gemm_default",
    "gemm_reference",
    "conv_tasks",
    "conv_default",
    "conv_reference",
    "spmm_tasks",
    "spmm_default",
    "spmm_reference",
    "cg_tasks",
    "cg_defaults",
    "UNROLL_STEPS",
]

#: Names defined in :mod:`.conv_space` (which builds on this module), resolved on first use.
_CONV_NAMES = {"conv_tasks": "tvm_ext.tuning.conv_space", "conv_default": "tvm_ext.tuning.conv_space",
               "conv_reference": "tvm_ext.tuning.conv_space"}
__getattr__ = lazy_getattr(__name__, _CONV_NAMES, globals())

#: Root-block annotation naming the design space a schedule came from.
DESIGN_SPACE_KEY = "tvm_ext.design_space"
#: Candidate ``meta_schedule.unroll_explicit`` budgets (MetaSchedule's CPU defaults).
UNROLL_STEPS = (0, 16, 64, 512)


@dataclass
class SpaceTask:
    """One MetaSchedule task: a workload, its design space and its real arguments.

    ``group`` ties tasks that are alternatives for the same kernel (the CG
    step they implement; ``""`` for a space whose tasks are all alternatives).
    ``knobs`` describes the code-generation setting of this task.
    ``arg_roles``: one ``schedules.fusion.arg_roles.ArgRole`` per parameter of
    ``mod["main"]`` for generated step kernels (empty for other spaces).
    """

    name: str
    mod: Any
    space_fn: Callable
    args: list[np.ndarray] | None
    max_trials: int
    group: str = ""
    knobs: dict = field(default_factory=dict)
    postprocs: str = "unroll"
    arg_roles: tuple = ()

    def space(self):
        """The ``ScheduleFn`` design-space generator of this task."""
        from tvm.s_tir import meta_schedule as ms

        post = [ms.postproc.RewriteParallelVectorizeUnroll()]
        mutators = {ms.mutator.MutateTileSize(): 0.6, ms.mutator.MutateUnroll(): 0.4}
        return ms.space_generator.ScheduleFn(self.space_fn, sch_rules=[], postprocs=post,
                                             mutator_probs=mutators)

    def design_spaces(self) -> list:
        """The design-space schedules of this task (for replaying records)."""
        from tvm import s_tir

        sch = s_tir.Schedule(self.mod)
        out = self.space_fn(sch)
        return [sch] if out is None else (out if isinstance(out, list) else [out])


# --------------------------------------------------------------------------- helpers
def schedule_summary(sch) -> dict:
    """The design space (gemm) and the sampled decisions of a (replayed) schedule.

    >>> from tvm import s_tir
    >>> t = gemm_tasks(32, 32, 16)[0]
    >>> schedule_summary(t.design_spaces()[0])["design_space"]
    'emit default'
    """
    root = sch.get(sch.get_sblock("root", func_name="main"))
    label = root.annotations.get(DESIGN_SPACE_KEY)
    decisions = []
    for inst, value in sch.trace.decisions.items():
        v = [int(x) for x in value] if hasattr(value, "__len__") else int(value)
        if inst.kind.name == "SampleCategorical":
            v = int(inst.attrs[0][int(value)])
        decisions.append([inst.kind.name, v])
    return {"design_space": str(label) if label is not None else None, "decisions": decisions}



def _unroll_knob(sch) -> None:
    root = sch.get_sblock("root", func_name="main")
    n = len(UNROLL_STEPS)
    sch.annotate(root, "meta_schedule.unroll_explicit",
                 sch.sample_categorical(list(UNROLL_STEPS), [1.0 / n] * n))


def _divisor_splits(n: int, parts: int = 2, max_inner: int | None = None) -> int:
    """Number of ways ``sample_perfect_tile`` can split extent ``n`` into ``parts``."""
    if parts == 1:
        return 1
    count = 0
    for d in range(1, n + 1):
        if n % d == 0 and (max_inner is None or parts > 2 or d <= max_inner):
            count += _divisor_splits(n // d, parts - 1) if parts > 2 else 1
    return count


def specialize(func, args: Sequence[Any]):
    """Bind a PrimFunc's symbolic shapes and scalars to ``args`` (arrays and numbers), in order.

    Buffer parameters whose dims are all variables get the array's shape;
    scalar parameters get the value.  Raises :class:`ScheduleError` if a shape
    stays symbolic.
    """
    from tvm import tirx

    params = list(func.params)
    if len(params) != len(args):
        raise ScheduleError(f"specialize: function has {len(params)} parameters, {len(args)} arguments given")
    binding = {}
    for p, a in zip(params, args):
        if type(p.ty).__name__ == "BufferType":
            if all(type(d).__name__ in ("Var", "SizeVar", "IntImm") for d in p.shape):
                align = int(p.data_alignment)  # keep the declared alignment
                binding[p] = tirx.decl_buffer(tuple(int(s) for s in np.shape(a)), str(p.dtype), name=p.name,
                                              data_alignment=align)
        else:
            dt = str(p.ty.dtype)
            binding[p] = tirx.FloatImm(dt, float(a)) if dt.startswith("float") else tirx.IntImm(dt, int(a))
    out = func.specialize(binding)
    for p in out.params:
        shape = p.shape if type(p.ty).__name__ == "BufferType" else []
        if any(type(d).__name__ != "IntImm" for d in shape):
            raise ScheduleError(f"specialize: parameter {p.name} keeps a symbolic shape {list(shape)}")
    return out.with_attr("global_symbol", "main")


def _module(func):
    import tvm

    return tvm.IRModule({"main": func})


# --------------------------------------------------------------------------- GEMM
#: Register tiles (rows x vector lanes) and outer orders of the emitter's design spaces.
GEMM_EMIT_KNOBS = (
    {"tiles": {"rows": 8, "vector": 32}, "outer": "panel"},
    {"tiles": {"rows": 12, "vector": 32}, "outer": "panel"},
    {"tiles": {"rows": 4, "vector": 64}, "outer": "panel"},
    {"tiles": {"rows": 16, "vector": 16}, "outer": "kernel"},
    {"tiles": {"rows": 6, "vector": 64}, "outer": "kernel"},
)
#: (MR, NR) of the cache-blocked design spaces.
GEMM_BLOCKED_TILES = ((8, 32), (12, 32), (4, 64), (16, 16))


def _gemm_binding():
    from tensorize.binding import AxisBinding

    return AxisBinding("matmul", {"i": "i", "j": "j", "k": "k"})


def _emit_space(sch, knobs: dict | None) -> None:
    """The emitter's schedule (``knobs=None``: its defaults) + the unroll knob."""
    from tensorize.emit import apply

    kw = dict(knobs or {})
    apply(sch, sch.get_sblock("C", func_name="main"), _gemm_binding(), "micro", **kw)
    _unroll_knob(sch)


def _blocked_space(sch, mr: int, nr: int, order: str) -> None:
    """Cache-blocked micro-kernel tiling: ``i -> [i0, i1, MR]``, ``j -> [j0, j1, NR]``.

    ``i1``/``j1`` (sampled) are the register tiles each parallel iteration of
    the fused ``(i0, j0)`` loop runs, i.e. both the tile around the instruction
    and the parallel grain.
    """
    from tensorize.intrin_spec import derive_spec
    from tensorize.tensor_intrin import get_implementation, register_intrin

    blk = sch.get_sblock("C", func_name="main")
    impl = get_implementation("x86", "micro")
    spec = derive_spec(sch, blk, _gemm_binding(), accumulate_local=True)
    K = spec.extent["k"]
    name = register_intrin(spec.with_extents({"i": mr, "j": nr, "k": K}), impl)
    i, j, k = sch.get_loops(blk)
    i_o, i_t = sch.split(i, [None, mr])
    j_o, j_t = sch.split(j, [None, nr])
    k_o, k_t = sch.split(k, [None, K])
    i0, i1 = sch.split(i_o, sch.sample_perfect_tile(i_o, n=2, max_innermost_factor=16))
    j0, j1 = sch.split(j_o, sch.sample_perfect_tile(j_o, n=2, max_innermost_factor=16))
    outer, inner = ([i0, j0], [i1, j1]) if order == "ij" else ([j0, i0], [j1, i1])
    sch.reorder(*outer, *inner, k_o, i_t, j_t, k_t)
    cl = sch.cache_write(blk, 0, "local")
    sch.reverse_compute_at(cl, inner[-1])
    sch.vectorize(sch.get_loops(cl)[-1])
    sch.parallel(sch.fuse(*outer))
    init = sch.decompose_reduction(blk, k_o)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(i_t, name)
    _unroll_knob(sch)


def _gemm_variants(M: int, N: int, K: int) -> list[tuple[str, Callable]]:
    """(label, schedule function) of every design space that applies to these sizes."""
    out: list[tuple[str, Callable]] = [("emit default", lambda s: _emit_space(s, None))]
    for kn in GEMM_EMIT_KNOBS:
        t = kn["tiles"]
        if t["rows"] <= M and t["vector"] <= N:
            out.append((f"emit {t['rows']}x{t['vector']} {kn['outer']}", lambda s, kn=kn: _emit_space(s, kn)))
    for mr, nr in GEMM_BLOCKED_TILES:
        if M % mr == 0 and N % nr == 0:
            for order in ("ij", "ji"):
                out.append((f"blocked {mr}x{nr} {order}",
                            lambda s, mr=mr, nr=nr, order=order: _blocked_space(s, mr, nr, order)))
    return out


def gemm_tasks(M: int, N: int, K: int, dtype: str = "float32") -> list[SpaceTask]:
    """One task: the tensorized matmul ``C[M, N] = A[M, K] @ B[K, N]`` and its design spaces.

    Design spaces that fail to apply (a tile the emitter rejects for these
    sizes) are dropped when the space is generated.
    """
    from tensorize.kernels import matmul

    for name, v in (("M", M), ("N", N), ("K", K)):
        positive_int(v, f"gemm: {name}")
    kernel = matmul(int(M), int(N), int(K), dtype)
    mod = _module(kernel.prim_func())
    variants = _gemm_variants(M, N, K)

    def space_fn(sch):
        out = []
        for label, fn in variants:
            s = sch.copy()
            try:
                fn(s)
                s.annotate(s.get_sblock("root", func_name="main"), DESIGN_SPACE_KEY, label)
            except Exception:  # noqa: BLE001 - a tile these sizes cannot take
                continue
            out.append(s)
        if not out:
            raise ScheduleError(f"gemm {M}x{N}x{K}: no design space applies")
        return out

    trials = 0
    for _, fn in variants:
        trials += len(UNROLL_STEPS)
    for mr, nr in GEMM_BLOCKED_TILES:
        if M % mr == 0 and N % nr == 0:
            trials += 2 * len(UNROLL_STEPS) * _divisor_splits(M // mr, 2, 16) * _divisor_splits(N // nr, 2, 16)
    return [SpaceTask(f"gemm_{M}x{N}x{K}", mod, space_fn, None, trials,
                      knobs={"design_spaces": [label for label, _ in variants]})]


def gemm_default(M: int, N: int, K: int, dtype: str = "float32"):
    """The untuned default: :func:`tensorize.kernels.tensorized` of the matmul, as an IRModule."""
    from tensorize.kernels import matmul, tensorized

    return tensorized(matmul(int(M), int(N), int(K), dtype)).scheduled


def gemm_reference(M: int, N: int, K: int, dtype: str = "float32", seed: int = 0):
    """``(inputs, expected)`` for checking a replayed GEMM record."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (M, K)).astype(dtype)
    b = rng.uniform(-1, 1, (K, N)).astype(dtype)
    return [a, b], a.astype(np.float64) @ b.astype(np.float64)


# --------------------------------------------------------------------------- sparse executors
#: Formats whose rows are independent outputs, so a static parallel row split is safe.
ROW_FORMATS = ("csr", "bcsr", "ell", "sell")
#: Work-balanced parts per thread of the library partition (its default is 4).
PARTS_PER_THREAD = (4, 16)


def _static_row_space(sch) -> None:
    """Row tile = parallel chunk: ``rows -> [chunks (parallel), rows per chunk]``.

    (No unroll knob: the executors' inner loops have data-dependent bounds or
    are unrolled by the generator already, so the pragma changes nothing.)
    """
    blocks = sch.get_child_blocks(sch.get_sblock("root", func_name="main"))
    row = sch.get_loops(blocks[0])[0]
    o, _ = sch.split(row, sch.sample_perfect_tile(row, n=2, max_innermost_factor=256))
    sch.parallel(o)


def _as_generated(sch) -> None:
    """A one-point space: the generated kernel as is (its knobs are code-generation settings).

    The design-space annotation makes the trace non-empty: MetaSchedule's
    databases skip records with an empty trace.
    """
    sch.annotate(sch.get_sblock("root", func_name="main"), DESIGN_SPACE_KEY, "generated")


def _spmm_candidates(csr, n: int, limit: int) -> list:
    """Format candidates by the analytic model's modelled bytes (csr always included)."""
    from schedules.sparse.selection import AnalyticCostModel, Candidate, sparse_features

    feats = sparse_features(csr)
    scores, _ = AnalyticCostModel().scores(feats, n)
    ranked = sorted(scores, key=scores.get)
    out = ranked[:limit]
    if Candidate("csr") not in out:
        out.append(Candidate("csr"))
    hyb = [c for c in ranked if c.format == "hyb"]
    if hyb:  # ELL/HYB threshold: the modelled optimum and a wider split
        w = hyb[0].args["width"]
        wide = Candidate.of("hyb", width=int(min(feats["row_length"]["max"] - 1, max(w + 1, round(1.5 * w)))))
        if wide.args["width"] > w and wide not in out:
            out.append(wide)
    return out


def _executor_arrays(kernels, fmt, params, csr, B: np.ndarray) -> list:
    from tvm_ext.target import num_threads

    m = fmt.shape[0]
    n = B.shape[1]
    arrays = [np.ascontiguousarray(a) for a in kernels.arrays(fmt, params, "spmm", False, num_threads())]
    zeros = np.zeros((m, n), dtype=B.dtype)
    return arrays + [B, zeros, zeros.copy()] + [int(s) for s in kernels.scalars(fmt, False)] + [1.0, 0.0]


def _sparse_task(label: str, cand, fmt, kernels, params, csr, B, space_fn, trials: int, knobs: dict) -> SpaceTask:
    args = _executor_arrays(kernels, fmt, params, csr, B)
    func = specialize(kernels.primfunc(fmt, params, "spmm", False), args)
    tensors = [a for a in args if isinstance(a, np.ndarray)]
    return SpaceTask(label, _module(func), space_fn, tensors, trials, knobs=knobs)


def spmm_tasks(A: Any, n: int, *, dtype: str = "float32", formats: int = 3, seed: int = 0,
               max_tasks: int | None = None) -> list[SpaceTask]:
    """Tasks for ``A @ B`` with ``B`` of ``n`` columns: formats x code-generation variants.

    ``formats``: how many of the analytic model's best candidates to include
    (CSR and a wider HYB split are added).  ``max_tasks`` keeps the first
    tasks in order of the model's ranking (each has the library default
    variant first).
    """
    from schedules.sparse.executors import kernels_for
    from schedules.sparse.inspectors import INSPECTORS
    from tvm_ext.workloads import canonical_csr

    csr = canonical_csr(A, dtype=dtype, what="spmm task matrix")
    n = _positive_n(n)
    if csr.nnz == 0 or min(csr.shape) == 0:
        raise InputError(f"spmm task: matrix {csr.shape[0]}x{csr.shape[1]} has no non-zeros to tune")
    B = np.random.default_rng(seed).uniform(-1, 1, (csr.shape[1], n)).astype(dtype)
    tasks: list[SpaceTask] = []
    for cand in _spmm_candidates(csr, n, formats):
        fmt = INSPECTORS[cand.format](csr, **cand.args)
        kernels = kernels_for(fmt)
        base = kernels.params_cls()
        default = kernels.resolve(fmt, base, dtype, "spmm", n, None)
        for p, part in _exec_variants(kernels, fmt, base, default, cand.format, dtype, n):
            ppt = p.parts_per_thread if part == "balanced" else None
            label = (f"{cand.label}_l{p.lanes}_u{p.unroll}_{'bal' + str(ppt) if ppt else 'static'}"
                     .replace("(", "_").replace(")", "").replace(",", "_").replace("=", ""))
            is_default = (p.lanes, p.unroll, part, ppt) == (default.lanes, default.unroll, "balanced",
                                                             default.parts_per_thread)
            knobs = {"format": cand.format, "args": cand.args, "lanes": p.lanes, "unroll": p.unroll,
                     "partition": part, "parts_per_thread": ppt, "library_default": is_default}
            space = _static_row_space if part == "static" else _as_generated
            t = _sparse_task(label, cand, fmt, kernels, p, csr, B, space, 1, knobs)
            if part == "static":
                t.max_trials = _divisor_splits(_row_extent(t.mod), 2, 256)
            if not _applies(t):
                continue
            n_defaults = len([x for x in tasks if x.knobs.get("library_default")])
            tasks.insert(n_defaults, t) if is_default else tasks.append(t)
    if max_tasks is not None:
        tasks = tasks[:max(1, int(max_tasks))]
    return tasks


def _row_extent(mod) -> int:
    """Extent of the outer row loop of a (specialised) executor."""
    from tvm import s_tir

    sch = s_tir.Schedule(mod)
    blocks = sch.get_child_blocks(sch.get_sblock("root", func_name="main"))
    return int(sch.get(sch.get_loops(blocks[0])[0]).extent)


def _exec_variants(kernels, fmt, base, default, format: str, dtype: str, n: int):
    """(params, partition) settings of one format: the library default, another row-tile
    width over N, finer work-balanced parts, and (row formats) a static row split."""
    import dataclasses

    wide = min(8, default.unroll * 2) if default.lanes * default.unroll < n else max(1, default.unroll // 2)
    settings = [(default.unroll, "balanced", base.parts_per_thread),
                (wide, "balanced", base.parts_per_thread),
                (default.unroll, "balanced", PARTS_PER_THREAD[-1])]
    if format in ROW_FORMATS:
        settings.append((default.unroll, "static", base.parts_per_thread))
    seen = set()
    for unroll, part, ppt in settings:
        p = dataclasses.replace(base, lanes=default.lanes, unroll=unroll, parallel=(part == "balanced"),
                                parts_per_thread=ppt)
        try:
            p = kernels.resolve(fmt, p, dtype, "spmm", n, None)
        except Exception:  # noqa: BLE001 - a setting this format rejects
            continue
        key = (p.kernel_key(), part, ppt if part == "balanced" else None)
        if key not in seen:
            seen.add(key)
            yield p, part


def _applies(task: SpaceTask) -> bool:
    try:
        task.design_spaces()
        return True
    except Exception:  # noqa: BLE001 - e.g. a row loop this format's kernel does not have
        return False


def _positive_n(n: Any) -> int:
    return positive_int(n, "n (columns of B)")


def spmm_default(A: Any, n: int, *, dtype: str = "float32", seed: int = 0) -> SpaceTask:
    """The untuned default: the format :func:`schedules.sparse.inspect` picks, default params.

    Returned as a :class:`SpaceTask` whose module is measured as is.
    """
    from schedules.sparse import inspect
    from schedules.sparse.executors import kernels_for
    from tvm_ext.workloads import canonical_csr

    csr = canonical_csr(A, dtype=dtype, what="spmm task matrix")
    n = _positive_n(n)
    plan = inspect(csr, n, dtype=dtype)
    kernels = kernels_for(plan.format)
    params = kernels.resolve(plan.format, kernels.params_cls(), dtype, "spmm", n, None)
    B = np.random.default_rng(seed).uniform(-1, 1, (csr.shape[1], n)).astype(dtype)
    return _sparse_task(f"default_{plan.format_name}", plan.choice.candidate, plan.format, kernels, params, csr, B,
                        _as_generated, 1, {"format": plan.format_name, "args": plan.args,
                                           "lanes": params.lanes, "unroll": params.unroll,
                                           "selector": plan.choice.selector})


def spmm_reference(A: Any, task: SpaceTask, dtype: str = "float32"):
    """Expected ``C`` of a sparse task's stored arguments: ``A @ B`` with scipy, in float64."""
    from tvm_ext.workloads import canonical_csr

    csr = canonical_csr(A, dtype=dtype)
    B = next(a for a in task.args if a.ndim == 2 and a.shape[0] == csr.shape[1])
    return csr.astype(np.float64) @ B.astype(np.float64)


# --------------------------------------------------------------------------- fused block CG
#: Row parts per thread of the CG step kernels (the dominant rank's tile); the library uses 4.
CG_PARTS_PER_THREAD = (1, 4, 16, 64)


def _cg_env(solver, seed: int) -> dict:
    import tvm

    rng = np.random.default_rng(seed)
    env = {}
    for t, s in solver.storage.items():
        if s not in env:
            shape = solver.plan.dag.tensors[t].shape
            env[s] = tvm.runtime.tensor(rng.uniform(-1, 1, shape).astype(solver.dtype))
    return env


def _replace_parts(roles: Sequence[Any], args: list, n_parts: int, n_rows: int, indptr) -> list:
    """Arguments of a step kernel with ``n_parts`` row parts: new part bounds, resized workspaces.

    ``roles`` is the kernel's ``GroupKernel.arg_roles`` (one ``ArgRole`` per argument).
    """
    from schedules.fusion.arg_roles import ArgRole
    from schedules.sparse.executors.partition import balanced_parts, uniform_parts

    if len(roles) != len(args):
        raise ScheduleError(f"step kernel: {len(roles)} argument roles for {len(args)} arguments")
    if ArgRole.PARTS not in roles:
        return args
    parts = balanced_parts(indptr, n_parts, item_cost=1.0) if indptr is not None else uniform_parts(n_rows, n_parts)
    out = list(args)
    for i, (role, a) in enumerate(zip(roles, args)):
        if role is ArgRole.PARTS:
            out[i] = parts.astype(np.int32)
        elif role is ArgRole.WORKSPACE:
            out[i] = np.zeros((parts.size,) + np.shape(a)[1:], a.dtype)
    return out


def _array_args(args: list, roles: Sequence[Any]) -> tuple[list, tuple]:
    """The array arguments and their roles (scalars are bound into the specialized PrimFunc)."""
    kept = [(a, r) for a, r in zip(args, roles) if isinstance(a, np.ndarray)]
    return [a for a, _ in kept], tuple(r for _, r in kept)


def _cg_solver(A: Any, n: int, dtype: str):
    from schedules.fusion.block_cg import BlockCG

    return BlockCG(A, _positive_n(n), fused=True, dtype=dtype, format="csr")


def cg_tasks(A: Any, n: int, *, dtype: str = "float64", seed: int = 0) -> list[SpaceTask]:
    """Tasks for one fused block-CG iteration with ``n`` right-hand sides.

    One group per compiled step of :class:`schedules.fusion.block_cg.BlockCG`
    (``S1+Delta1``, ``X1+R1+Gamma1``, ``P1``), one task per row-part setting
    (:data:`CG_PARTS_PER_THREAD`), each with the unroll knob.
    """
    from tvm_ext.target import num_threads

    solver = _cg_solver(A, n, dtype)
    env = _cg_env(solver, seed)
    threads = num_threads()
    steps = [(step, kern) for step, kern in zip(solver.steps, solver.kernels) if kern is not None]
    base = {id(k): [a.numpy() if hasattr(a, "numpy") else a for a in k.args(env)] for _, k in steps}
    tasks = []
    # the library's setting of every step first, then the others step by step: a small budget
    # still measures each step once
    for ppt in sorted(CG_PARTS_PER_THREAD, key=lambda p: (p != 4, p)):
        for step, kern in steps:
            indptr = solver.A.indptr if kern.kind == "spmm" else None
            args = _replace_parts(kern.arg_roles, base[id(kern)], threads * ppt, solver.n, indptr)
            try:
                func = specialize(kern.prim_func, args)
            except Exception:  # noqa: BLE001 - a kernel whose part arrays this setting cannot rebuild
                if ppt == 4:
                    raise
                continue
            tensors, roles = _array_args(args, kern.arg_roles)
            group = "+".join(step)
            tasks.append(SpaceTask(f"cg_{group.replace('+', '_')}_ppt{ppt}", _module(func), _as_generated, tensors,
                                   1, group=group,
                                   knobs={"step": group, "parts_per_thread": ppt, "library_default": ppt == 4},
                                   arg_roles=roles))
    return tasks


def cg_defaults(A: Any, n: int, *, dtype: str = "float64", seed: int = 0) -> list[SpaceTask]:
    """The untuned steps: the library's kernels with their own part arrays, one task per step."""
    solver = _cg_solver(A, n, dtype)
    env = _cg_env(solver, seed)
    out = []
    for step, kern in zip(solver.steps, solver.kernels):
        if kern is None:
            continue
        args = [a.numpy() if hasattr(a, "numpy") else a for a in kern.args(env)]
        func = specialize(kern.prim_func, args)
        group = "+".join(step)
        tensors, roles = _array_args(args, kern.arg_roles)
        out.append(SpaceTask(f"cg_default_{group.replace('+', '_')}", _module(func), _as_generated,
                             tensors, 1, group=group, knobs={"step": group}, arg_roles=roles))
    return out
