"""Benchmark: the fused SpMM + row consumer kernels built in TIR vs the TVMScript-text kernels they replaced.

The fusion package's SpMM steps (a GCN layer's ``Z = A·X0`` with ``X1 = Z·W``
fused, Z never stored; block CG's ``S = A·P`` with ``Δ = PᵀS`` fused) are built
as in :func:`schedules.fusion.kernels.build_step_kernels`: the recipe nest's
row tiles with the TIR consumer (:mod:`schedules.sparse.recipes.consumer`,
:mod:`schedules.fusion.spmm_consumer`).  The same step is also compiled from
the text generator kept as a test oracle (``tests/sparse_oracles``), with
identical arguments; both results are checked against each other and numpy,
then timed in interleaved rounds (best ``time_evaluator`` time of each, and
the median of the per-round ratios text / TIR: >= 1 means the TIR kernel is as
fast).

Run ``python -m bench.fused_spmm_nest [--quick] [--rounds 7]``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from bench.harness import BenchRun, bench_args, geomean


def _cases(quick: bool) -> list[tuple]:
    """(name, DAG builder args, matrix, format, step, dtype)."""
    from schedules.sparse.inspectors import to_bcsr, to_csr
    from tvm_ext.workloads import lap2d, load_matrix, make_spd

    cora = load_matrix("cora")
    lap = make_spd(lap2d(120 if quick else 300))
    out = [("gcn", "cora", cora, to_csr, 64, "float32")]
    if not quick:
        out.append(("gcn", "cora", cora, to_csr, 1433, "float32"))
    for N in ((8,) if quick else (8, 16)):
        out += [("block_cg", "lap2d", lap, to_csr, N, "float64"),
                ("block_cg", "lap2d", lap, lambda A: to_bcsr(A, 2, 2), N, "float64")]
    return out


def _step(kind: str, A, N: int, dtype: str):
    """The plan and the fused SpMM step of a GCN layer (O = 7) or a block CG iteration."""
    from schedules.fusion import block_cg_dag, gcn_layer_dag, plan_fusion
    from schedules.fusion.steps import iteration_ops, schedule_steps

    if kind == "gcn":
        plan = plan_fusion(gcn_layer_dag(A.shape[0], N, 7, A.nnz))
        return plan, [("Z", "X1")]
    plan = plan_fusion(block_cg_dag(2, A.shape[0], N, A.nnz, setup=False))
    return plan, schedule_steps(plan, iteration_ops(plan.dag, 1), True)[:1]


def _text_kernel(tir, plan, step, fmt, dtype: str, target):
    """The step's kernel from the text generator, with the TIR kernel's arguments."""
    import tvm

    from schedules.fusion.kernels import GroupKernel, _specialize
    from schedules.fusion.row_forms import row_form, streamed_rank
    from schedules.fusion.steps import assign_storage, stored_tensors
    from schedules.sparse.executors import kernels_for
    from schedules.sparse.executors.codegen import native_lanes
    from tests.sparse_oracles.fused_spmm_source import fused_spmm_primfunc
    from tests.sparse_oracles.spmm_consumer_text import spmm_consumer as text_consumer

    dag = plan.dag
    forms = {o: row_form(dag, dag.op(o), streamed_rank(plan, o)) for o in step}
    storage = assign_storage(dag, [step], forms)
    spmm, n = forms[step[0]], forms[step[0]].cols[0]
    kernels = kernels_for(fmt)
    params = kernels.resolve(fmt, kernels.params_cls(parallel=True), dtype, "spmm", n, target)
    consumer, spec = text_consumer(spmm, [forms[o] for o in step[1:]], storage, stored_tensors(dag, step), dag,
                                   dtype, native_lanes(dtype, target))
    func = _specialize(fused_spmm_primfunc(fmt, params, consumer), "B", (None, n), dtype)
    mod = tvm.compile(tvm.IRModule({"main": func}), target=target).mod
    tensors = [what for kind, what in spec if kind == "tensor"]
    if [w for w in tir.storage if w in tensors] != tensors:
        raise AssertionError(f"step {step}: the text kernel's parameters differ from the TIR kernel's")
    return GroupKernel(tir.ops, "spmm", mod, lambda: func, tir._spec, tir._fixed, tir._scalars, tir.arg_roles)


def _env(plan, storage: dict, dtype: str, rng) -> dict:
    import tvm

    env = {}
    for t, s in storage.items():
        if s not in env:
            env[s] = tvm.runtime.tensor(rng.standard_normal(plan.dag.tensors[t].shape).astype(dtype))
    return env


def _check(name: str, N: int, A, inputs: dict, got: dict, dtype: str) -> None:
    """The TIR kernel's outputs against numpy (GCN: ``X1 = (A·X0)·W``; block CG: ``S1 = A·P0``,
    ``Δ1 = P0ᵀS1``)."""
    A = A.astype(np.float64)
    if name == "gcn":
        refs = {"X1": (A @ inputs["X0"]) @ inputs["W"]}
    else:
        S = A @ inputs["P0"]
        refs = {"S1": S, "Delta1": inputs["P0"].T @ S}
    for t, ref in refs.items():
        err = float(np.abs(got[t] - ref).max() / max(1.0, np.abs(ref).max()))
        if err > (1e-4 if dtype == "float32" else 1e-10):
            raise AssertionError(f"{name} N={N}: the TIR kernel's {t} is off by {err}")


def case(run: BenchRun, name: str, mname: str, A, to_fmt, N: int, dtype: str, rounds: int) -> None:
    import tvm

    from schedules.fusion.kernels import build_step_kernels
    from tvm_ext.target import resolve_target

    target = resolve_target(None)
    fmt = to_fmt(A.astype(dtype))
    plan, steps = _step(name, A, N, dtype)
    storage, (tir,) = build_step_kernels(plan, steps, fmt=fmt, dtype=dtype)
    text = _text_kernel(tir, plan, steps[0], fmt, dtype, target)
    env0 = _env(plan, storage, dtype, np.random.default_rng(N))
    got = {}
    for who, k in (("tir", tir), ("text", text)):
        env = {s: tvm.runtime.tensor(v.numpy()) for s, v in env0.items()}
        k(env)
        got[who] = {s: env[s].numpy() for s in k.storage}
    _check(name, N, A, {t: env0[s].numpy().astype(np.float64) for t, s in storage.items()},
           {t: got["tir"][s] for t, s in storage.items() if s in got["tir"]}, dtype)
    for s in got["tir"]:
        scale = max(1.0, float(np.abs(got["text"][s]).max()))
        if not np.allclose(got["tir"][s], got["text"][s], rtol=1e-5, atol=1e-5 * scale):
            raise AssertionError(f"{name} N={N}: TIR and text kernels differ on {s}")
    tt, tg = [], []
    for _ in range(rounds):
        tt.append(text.time(env0, repeat=5).min)
        tg.append(tir.time(env0, repeat=5).min)
    run.add({"step": name, "matrix": mname, "format": fmt.name + (f"{fmt.R}x{fmt.C}" if fmt.name == "bcsr" else ""),
             "N": N, "nnz": int(A.nnz), "dtype": dtype, "text_ms": min(tt) * 1e3, "tir_ms": min(tg) * 1e3,
             "text_over_tir": float(np.median(np.array(tt) / np.array(tg)))})


def main(argv: Sequence[str] | None = None) -> None:
    args = bench_args(__doc__.splitlines()[0], argv, rounds={"type": int, "default": 7,
                                                             "help": "interleaved timing rounds"})
    run = BenchRun("fused_spmm_nest", out_dir=args.out)
    print(run.header())
    for name, mname, A, to_fmt, N, dtype in _cases(args.quick):
        case(run, name, mname, A, to_fmt, N, dtype, args.rounds)
    print(run.markdown(["step", "matrix", "format", "N", "nnz", "dtype", "text_ms", "tir_ms", "text_over_tir"]))
    xs = [r["text_over_tir"] for r in run.rows]
    print(f"\ntext time / TIR time (median of {args.rounds} interleaved rounds; >= 1: the TIR kernel is as fast): "
          f"geomean {geomean(xs):.2f}x, worst {min(xs):.2f}x")


if __name__ == "__main__":
    main()
