"""``tvm-ext tune TASK ... --trials N --db DIR``: a resumable autotuning session.

TASK forms (see :mod:`tvm_ext.tuning.tasks`)::

    tvm-ext tune gemm --shape M N K --trials 64 --db tune.db
    tvm-ext tune conv --shape N C_IN C_OUT HW K [--stride S] [--pad P] [--layout nhwc|nchw] --trials 64 --db tune.db
    tvm-ext tune spmm NAME|FILE --n N --trials 64 --db tune.db
    tvm-ext tune cg NAME|FILE --n N --trials 32 --db tune.db
    tvm-ext tune sextans NAME|FILE --n N --trials 100 --db tune.db
    tvm-ext tune accel --workload matmul --shape M K N --trials 30 --db tune.db
    tvm-ext tune spmm cora --n 64 --trials 64 --db tune.db --rpc-tracker HOST:9190 --rpc-key cpu
    tvm-ext tune selector [--size tiny|small|medium|large] [--n 8 32 128] [--model PATH]

``conv`` tunes a square conv2d (batch N, HW x HW input, K x K kernel) tensorized
with the x86 micro-kernel: NHWC data with HWIO weights, or NCHW with OIHW.

``selector`` trains the learned sparse-format selector on a measured corpus
of generated matrices, prints its regret on held-out matrices next to the
analytic model's, and saves it where ``tvm_ext.tuning.load_default`` finds it.

A progress bar with the best-so-far goes to stderr; ``--json`` prints one
object with ``best_seconds`` (``best_cycles`` for simulated tasks),
``default_seconds`` / ``default_cycles`` and ``records``.  Running the same
command again continues an interrupted session from its database.
"""
from __future__ import annotations

import argparse

from tvm_ext.cli.args import count, seed, size
from tvm_ext.cli.output import Output, table
from tvm_ext.errors import InputError, TuningError


#: Every attribute :func:`run` reads, with its value when the task's subparser has no such option.
_UNSET = {"matrix": None, "shape": None, "stride": 1, "pad": 0, "layout": "nhwc", "n": None, "size": "small",
          "model": None, "workload": "matmul", "system": "default", "platform": "sextans", "trials": 64,
          "db": None, "plot": None, "seed": 0, "rpc_tracker": None, "rpc_key": None, "no_progress": False}

_TASKS = {
    "gemm": "tune a dense GEMM (M x K times K x N) on the x86 micro-kernel",
    "conv": "tune a square conv2d tensorized with the x86 micro-kernel",
    "spmm": "tune the sparse SpMM executor of a matrix",
    "cg": "tune the fused Block CG iteration of an SPD matrix",
    "sextans": "tune the Sextans SpMM engine model of a matrix",
    "accel": "tune the mapping of a workload onto the modelled accelerator",
    "selector": "train the learned sparse-format selector on a measured corpus",
}


def register(subparsers, common) -> None:
    p = subparsers.add_parser("tune", parents=[common], help="autotune a kernel or a hardware model (resumable)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tasks = p.add_subparsers(dest="task", metavar="TASK")
    tasks.required = True
    for task, what in _TASKS.items():
        t = tasks.add_parser(task, parents=[common], help=what, description=f"tvm-ext tune {task}: {what}.")
        _task_options(t, task)
        t.set_defaults(func=run, **{k: v for k, v in _UNSET.items()
                                    if not any(a.dest == k for a in t._actions)})


def _task_options(p, task: str) -> None:
    """The options of one task (only those it reads)."""
    if task in ("spmm", "cg", "sextans"):
        p.add_argument("matrix", metavar="NAME|FILE", nargs="?", help="the matrix (bundled name or .mtx)")
        p.add_argument("--n", type=size("--n"), nargs="+",
                       help="right-hand sides" if task == "cg" else "columns of B")
    if task == "sextans":
        p.add_argument("--platform", default="sextans", help="platform (sextans, sextans-p)")
    if task in ("gemm", "conv", "accel"):
        shape = {"gemm": "M N K", "conv": "N C_IN C_OUT HW K", "accel": "M K N (matmul) or BATCH HIDDEN (gru)"}
        p.add_argument("--shape", type=size("--shape"), nargs="+", metavar="SIZE", help=shape[task])
    if task == "conv":
        p.add_argument("--stride", type=size("--stride"), default=1, help="stride (default 1)")
        p.add_argument("--pad", type=count("--pad", 0, 2 ** 31 - 1), default=0,
                       help="zero padding on each side (default 0)")
        p.add_argument("--layout", default="nhwc", help="nhwc (HWIO weights) or nchw (OIHW weights); default nhwc")
    if task == "accel":
        p.add_argument("--workload", default="matmul", help="matmul or gru (default matmul)")
        p.add_argument("--system", default="default", help="system graph name (default 'default')")
    if task == "selector":
        p.add_argument("--n", type=size("--n"), nargs="+", help="the N values of the corpus (default 8 32 128)")
        p.add_argument("--size", default="small",
                       help="corpus size tiny, small, medium or large (medium + 1M+ nnz matrices; default small)")
        p.add_argument("--model", metavar="PATH",
                       help="where to save the model (default: $TVM_EXT_SELECTOR_MODEL, else the user cache)")
    else:
        p.add_argument("--trials", type=count("--trials"), default=64,
                       help="total trials of the task in the database (default 64)")
        p.add_argument("--db", metavar="DIR", help="database directory (created; resumed if present)")
        p.add_argument("--rpc-tracker", metavar="HOST:PORT", help="measure on servers registered with this tracker")
        p.add_argument("--rpc-key", metavar="KEY", help="server key to request from the tracker")
        p.add_argument("--plot", metavar="PNG", help="also write the best cost so far against the trial, "
                       "next to the default schedule's (needs matplotlib)")
    p.add_argument("--seed", type=seed(), default=0, help="search seed (default 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _check_shape(args) -> None:
    """Refuse shapes whose arrays overflow int32 indices, or whose one run is above :mod:`tvm_ext.limits`."""
    from tvm_ext.limits import check_int32, check_work

    shape = list(args.shape or [])
    what = f"tune {args.task} --shape {' '.join(map(str, shape))}"
    if args.task == "gemm" and len(shape) == 3:
        M, N, K = shape
        check_int32(what, A=M * K, B=K * N, C=M * N)
        check_work(what, bytes=(M * K + K * N + M * N) * 8 * 3, flop=2 * M * N * K)
    elif args.task == "conv" and len(shape) == 5:
        n, c_in, c_out, hw, k = shape
        padded = hw + 2 * args.pad
        check_int32(what, data=n * c_in * padded * padded, weights=c_out * c_in * k * k, out=n * c_out * hw * hw)
        check_work(what, bytes=(n * c_in * padded ** 2 + c_out * c_in * k * k + n * c_out * hw * hw) * 8 * 3,
                   flop=2 * n * c_out * hw * hw * c_in * k * k)
    elif args.task == "accel" and args.workload == "matmul" and len(shape) == 3:
        M, K, N = shape
        check_work(what + " (simulated per trial)", flop=2 * M * N * K)
    elif args.task == "accel" and len(shape) == 2:
        batch, hidden = shape
        check_work(what + " (simulated per trial)", flop=2 * batch * 6 * hidden * hidden)


def _make(args):
    from tvm_ext.tuning.tasks import make_task

    _check_shape(args)
    kind = args.task
    if kind == "gemm":
        return make_task("gemm", shape=args.shape)
    if kind == "conv":
        return make_task("conv", shape=args.shape, stride=args.stride, pad=args.pad, layout=args.layout)
    if kind == "accel":
        kw = {"workload": args.workload, "system": args.system}
        return make_task("accel", shape=args.shape, **kw)
    extra = {"platform": args.platform} if kind == "sextans" else {}
    if args.n is not None and len(args.n) != 1:
        raise InputError(f"{kind} task: --n takes one value, got {args.n}")
    n = args.n[0] if args.n else None
    matrix = args.matrix
    if kind in ("spmm", "cg", "sextans") and isinstance(matrix, str) and n is not None:
        from tvm_ext.limits import check_work
        from tvm_ext.workloads import resolve_matrix

        A = resolve_matrix(matrix)
        rows, cols = A.shape
        if kind == "cg":   # Block CG iterates on an SPD matrix: say so before building its kernels
            from schedules.sparse.solvers import spd_precheck

            problem = ("it is empty" if rows == 0 or A.nnz == 0 else
                       f"it is {rows} x {cols}, not square" if rows != cols else spd_precheck(A))
            if problem is not None:
                raise InputError(f"tune cg {matrix}: needs a non-empty SPD matrix: {problem}")
        check_work(f"tune {kind} {matrix} ({rows}x{cols}) --n {n}", bytes=(rows + cols) * n * 8 * 4 + 24 * A.nnz)
        matrix, extra["name"] = A, args.matrix
    return make_task(kind, matrix=matrix, n=n, **extra)


def run(args) -> Output:
    from tvm_ext.tuning.rpc import RPCSettings
    from tvm_ext.tuning.session import run_session

    if args.task == "selector":
        return _run_selector(args)
    if not args.db:
        raise TuningError("tvm-ext tune: --db DIR is required (the database the session writes and resumes)")
    task = _make(args)
    rpc = RPCSettings.parse(args.rpc_tracker, args.rpc_key) if (args.rpc_tracker or args.rpc_key) else None
    if rpc is not None and not args.rpc_tracker:
        raise TuningError("--rpc-key needs --rpc-tracker HOST:PORT")
    result = run_session(task, args.db, args.trials, rpc=rpc, seed=args.seed, progress=not args.no_progress)
    data = result.to_dict()
    text = render(result)
    if args.plot:
        from tvm_ext.tuning.plot import plot_best_so_far, session_costs

        costs = session_costs(args.db, result.task, result.engine)
        data["plot"] = str(plot_best_so_far(costs, result.default, result.unit, args.plot,
                                            title=f"tune {args.task} {args.matrix or ''}".strip()))
        text += f"\n\nplot written to {data['plot']}"
    return Output(data, text)


def _run_selector(args) -> Output:
    import sys

    from tvm_ext.tuning.selector import train_default

    n_values = tuple(args.n) if args.n else (8, 32, 128)
    say = None if args.no_progress else (lambda line: sys.stderr.write(f"selector: {line}\n"))
    rep = train_default(args.size, n_values, path=args.model, seed=args.seed, progress=say)
    rows = [[who, rep[who]["mean_regret"], rep[who]["geomean_slowdown"], rep[who]["max_regret"],
             rep[who]["hit_rate"]] for who in ("learned", "analytic")]
    text = "\n".join([
        f"corpus      {rep['matrices']} matrices, {rep['corpus_cases']} (matrix, N) cases, measured in "
        f"{rep['measure_seconds']:.0f} s",
        f"held out    {', '.join(rep['held_out'])} ({rep['held_out_cases']} cases, never trained on)", "",
        table(["selector", "mean regret", "geomean slowdown", "max regret", "hit rate"], rows), "",
        f"model saved to {rep['model']} (installed for this process; tvm_ext.tuning.load_default() installs it)"])
    data = {k: v for k, v in rep.items() if k != "rows"}
    return Output(data, text)


def render(result) -> str:
    """Human-readable summary of a :class:`~tvm_ext.tuning.session.SessionResult`."""
    from tvm_ext.tuning.progress import format_cost

    speed = f"{result.speedup:.2f}x" if result.speedup else "-"
    rows = [["default (untuned)", format_cost(result.default, result.unit), "1.00x"],
            ["best tuned", format_cost(result.best, result.unit), speed]]
    lines = [f"task        {result.description}",
             f"engine      {result.engine}" + (f" over RPC {result.rpc}" if result.rpc else ""),
             f"records     {result.records} ({result.new_records} new this session, budget {result.trials})",
             f"time        {result.seconds:.1f} s", "",
             table(["", "cost", "speed-up"], rows), ""]
    for group, cfg in result.best_config.items():
        shown = {k: v for k, v in cfg.items() if k not in ("decisions",)}
        lines.append(f"best {group}: " + ", ".join(f"{k}={v}" for k, v in shown.items()))
        if cfg.get("decisions"):
            lines.append("  decisions: " + ", ".join(f"{k}={v}" for k, v in cfg["decisions"]))
    if result.verified is not None:
        err = f" (max rel err {result.max_rel_err:.2g})" if result.max_rel_err is not None else ""
        lines.append(f"replayed best record checked: {'ok' if result.verified else 'MISMATCH'}{err}")
    for note in result.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)
