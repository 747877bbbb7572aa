"""``tvm-ext map KERNEL|FILE --isa x86|accel``: a kernel's ISAMIR, its mappings, their transforms.

``KERNEL`` is one of the built-in kernels (``conv2d``, ``sepconv``, ``gru``,
``matmul``, ... see ``tensorize.kernels.KERNELS``; sizes via ``--size hw=32``)
or a Python file that defines ``kernel()`` returning one of

* a ``tensorize.kernels.Kernel``,
* a schedulable ``PrimFunc`` (``te.create_prim_func`` or ``@T.prim_func(s_tir=True)``),
* a list of ``te.Tensor`` (inputs then outputs, as for ``te.create_prim_func``).

Example file::

    from tvm import te
    def kernel():
        A = te.placeholder((64, 32), name="A"); B = te.placeholder((32, 48), name="B")
        k = te.reduce_axis((0, 32), name="k")
        return [A, B, te.compute((64, 48), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")]

``--json`` prints ``mappings`` (each with ``instruction``, ``axis_map``,
``transforms`` as text and their ``transform_names``, ...), ``selected`` (the
mapping chosen per block) and ``tvm_auto_tensorize_found`` (whether TVM's
``get_auto_tensorize_mapping_info`` finds a mapping of the same kernel onto
the selected instruction).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from tvm_ext.cli.args import count
from tvm_ext.cli.output import Output
from tvm_ext.errors import InputError, ResultError
from tvm_ext.limits import INT32_MAX

#: ``--build`` fails when max |error| exceeds this times max(1, max |reference|).
BUILD_TOLERANCE = 1e-3


def register(subparsers, common) -> None:
    p = subparsers.add_parser("map", parents=[common],
                              help="map a kernel onto an ISA's instructions (ISAMIR, mappings, transforms)")
    p.add_argument("kernel", metavar="KERNEL|FILE",
                   help="a built-in kernel (conv2d, sepconv, gru, matmul, ...) or a .py file defining kernel()")
    p.add_argument("--isa", default="x86", help="instruction set: x86 or accel (default x86)")
    p.add_argument("--size", action="append", default=[], metavar="NAME=INT",
                   help="override a built-in kernel's size, e.g. --size hw=32 (repeatable)")
    p.add_argument("--instruction", action="append", default=None, metavar="NAME",
                   help="only map these instructions (repeatable)")
    p.add_argument("--limit", type=count("--limit"), default=12, help="mappings listed in the text output (default 12)")
    p.add_argument("--build", action="store_true",
                   help="also tensorize with the selected mappings, build, and check against the reference "
                        "(exit 2 if the result is outside tolerance)")
    p.add_argument("--impl", default="micro", help="implementation for --build (x86: micro, blas, packed)")
    p.set_defaults(func=run)


def _sizes(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--size {item!r}: expected NAME=INT")
        try:
            out[name.strip()] = int(value)
        except ValueError:
            raise InputError(f"--size {item!r}: {value!r} is not an integer") from None
        if not 1 <= out[name.strip()] <= INT32_MAX:
            raise InputError(f"--size {item!r}: must be a positive integer below 2**31")
    return out


def load_kernel(spec: str, sizes: dict[str, int] | None = None):
    """A built-in kernel name or a Python file defining ``kernel()`` -> ``Kernel`` or PrimFunc."""
    from tensorize.kernels import KERNELS, make_kernel

    if spec in KERNELS:
        try:
            return make_kernel(spec, **(sizes or {}))
        except TypeError as e:
            raise InputError(f"kernel {spec!r}: bad --size ({e})") from None
    path = Path(spec)
    if path.suffix != ".py" or not path.is_file():
        raise InputError(f"{spec!r} is neither a built-in kernel ({', '.join(sorted(KERNELS))}) nor a .py file")
    if sizes:
        raise InputError("--size only applies to built-in kernels")
    mod_spec = importlib.util.spec_from_file_location(f"tvm_ext_map_{path.stem}", path)
    module = importlib.util.module_from_spec(mod_spec)
    try:
        mod_spec.loader.exec_module(module)
    except Exception as e:  # the user's file failed: report it as their input
        raise InputError(f"{path}: could not be executed: {type(e).__name__}: {e}") from None
    fn = getattr(module, "kernel", None)
    if not callable(fn):
        raise InputError(f"{path}: defines no function kernel() returning a PrimFunc, te tensors or a Kernel")
    result = fn()
    return _as_kernel_or_func(result, path)


def _as_kernel_or_func(result: Any, path: Path):
    from tvm import te, tirx

    from tensorize.kernels import Kernel

    if isinstance(result, (Kernel, tirx.PrimFunc)):
        return result
    if isinstance(result, te.Tensor):
        result = [result]
    if isinstance(result, (list, tuple)) and result and all(isinstance(t, te.Tensor) for t in result):
        return te.create_prim_func(list(result))
    raise InputError(f"{path}: kernel() returned {type(result).__name__}; expected a PrimFunc, "
                     "a list of te.Tensors or a tensorize.kernels.Kernel")


def tvm_auto_tensorize(func, blocks: list[str], instruction, tile: dict[str, int]) -> dict[str, bool]:
    """Block -> whether TVM's ``get_auto_tensorize_mapping_info`` maps ``instruction`` onto it."""
    from tvm import s_tir
    from tvm.s_tir.schedule.analysis import get_auto_tensorize_mapping_info

    desc = instruction.to_prim_func({a: int(tile.get(a) or e or 16) for a, e in instruction.sizes.items()})
    found = {}
    for b in blocks:
        sch = s_tir.Schedule(func)
        try:
            info = get_auto_tensorize_mapping_info(sch, sch.get_sblock(b), desc)
        except Exception:  # TVM rejects the pair outright: that is "not found"
            info = None
        found[b] = bool(info is not None and len(info.mappings) > 0)
    return found


def _entry(m) -> dict[str, Any]:
    from tensorize.kernels import real_calls

    return {
        "instruction": m.instruction.name,
        "axis_map": dict(m.axis_map),
        "transforms": [str(t) for t in m.transforms],
        "transform_names": [t.transform for t in m.transforms],
        "outer_axes": list(m.outer_axes),
        "tile": {k: int(v) for k, v in m.tile.items()},
        "calls": real_calls(m),
        "statements": list(m.statement_map),
    }


def run(args) -> Output:
    from tensorize.importers import to_isamir
    from tensorize.instructions import get_isa
    from tensorize.kernels import Kernel, compute_blocks, mapping_rank, plan_mappings
    from tensorize.search import find_mappings

    target = get_isa(args.isa)
    obj = load_kernel(args.kernel, _sizes(args.size))
    func = obj.prim_func() if isinstance(obj, Kernel) else obj
    blocks = compute_blocks(func) or None
    program = to_isamir(func, block=blocks)
    mappings = sorted(find_mappings(func, target, block=blocks, instructions=args.instruction), key=mapping_rank)
    plan = plan_mappings(func, mappings)
    selected = {b: _entry(m) | {"rank": mappings.index(m)} for b, m in plan.blocks.items()}
    for b, cover in plan.covers.items():  # several instructions compute this block together
        selected[b]["cover"] = [_entry(m) | {"rank": mappings.index(m)} for m in cover]
    auto: dict[str, dict[str, bool]] = {}
    for m in plan.blocks.values():
        if m.instruction.name not in auto:
            auto[m.instruction.name] = tvm_auto_tensorize(func, blocks or [], m.instruction, m.tile)
    data: dict[str, Any] = {
        "kernel": args.kernel,
        "isa": target.name,
        "isamir": str(program),
        "mappings": [_entry(m) for m in mappings],
        "selected": selected,
        "rebuilt_from_transformed_program": plan.program is not None,
        "tvm_auto_tensorize_found": any(v for per in auto.values() for v in per.values()),
        "tvm_auto_tensorize": auto,
    }
    if args.build:
        check_build_size(args.kernel, func, obj.flops if isinstance(obj, Kernel) else 0)
        data["build"] = _build(obj, target.name, args.impl, mappings)
    return Output(data, _render(data, mappings, plan, args.limit))


def check_build_size(name: str, func, flops: int) -> None:
    """Refuse a ``--build`` whose buffers overflow int32 indices (``InputError``) or exceed the work limits.

    The build allocates every argument, a reference result and the tensorized
    result; ``flops`` (0 if unknown) is run twice (kernel and reference).
    """
    import math

    from tvm import DataType

    from tvm_ext.limits import check_int32, check_work

    total = 0
    for p in func.params:
        shape = getattr(p, "shape", None)
        if shape is None:
            continue
        try:
            elems = math.prod(int(d) for d in shape)
        except TypeError:
            raise InputError(f"map --build {name}: argument {p.name} has a symbolic shape {list(shape)}") from None
        check_int32(f"map --build {name}", **{str(p.name): elems})
        total += elems * max(DataType(str(p.dtype)).bits // 8, 1)
    check_work(f"map --build {name}", bytes=2 * total, flop=2 * flops)


def _build(kernel, isa: str, impl: str, mappings) -> dict[str, Any]:
    """Tensorize and build; compare with the kernel's reference, or with the PrimFunc built as is."""
    import numpy as np

    from tensorize.kernels import Kernel, kernel_from_prim_func, tensorized

    if not isinstance(kernel, Kernel):
        kernel = kernel_from_prim_func(kernel)
    t = tensorized(kernel, isa, impl=impl, mappings=mappings)
    ins = kernel.random_inputs()
    ref = kernel.reference(*ins) if kernel.reference is not None else _untuned(kernel, ins)
    err = float(np.max(np.abs(t(*ins) - ref)))
    against = "numpy" if kernel.reference is not None else "the PrimFunc built untuned"
    tol = BUILD_TOLERANCE * max(1.0, float(np.max(np.abs(ref))))
    if not err <= tol:  # also NaN
        raise ResultError(f"map --build: {kernel.name} tensorized with impl={impl} is wrong: max |error| {err:.3g} "
                          f"vs {against} exceeds the tolerance {tol:.3g}")
    return {"impl": impl, "intrinsics": t.intrinsics, "steps": t.steps(), "max_abs_error": err,
            "reference": against}


def _untuned(kernel, inputs):
    import tvm

    from tvm_ext.target import resolve_target

    ex = tvm.compile(tvm.IRModule({"main": kernel.prim_func()}), target=resolve_target(None))
    _, shape, dtype = kernel.arg_specs()[-1]
    out = tvm.runtime.empty(shape, dtype)
    ex["main"](*[tvm.runtime.tensor(a) for a in inputs], out)
    return out.numpy()


def _render(data: dict, mappings, plan, limit: int) -> str:
    lines = [f"kernel {data['kernel']} on ISA {data['isa']}", "", "ISAMIR:", data["isamir"], ""]
    lines.append(f"{len(mappings)} mappings (best {min(limit, len(mappings))} by rank):")
    for n, m in enumerate(mappings[:limit]):
        lines.append(f"  [{n}] {m.summary()}")
    lines += ["", "selected (per block) and its transform sequence:"]
    for b in plan.blocks:
        for m in plan.cover(b):
            seq = " > ".join(str(t) for t in m.transforms) or "(none)"
            lines.append(f"  {b}: {m.instruction.name} {dict(m.axis_map)}; transforms: {seq}")
            lines += ["    " + ln for ln in m.listing().splitlines()]
    if data["rebuilt_from_transformed_program"]:
        lines.append("  (the kernel is rebuilt from the transformed ISAMIR program before tensorizing)")
    lines.append("")
    for ins, per in data["tvm_auto_tensorize"].items():
        res = ", ".join(f"{b}: {'found' if ok else 'none'}" for b, ok in per.items()) or "no blocks"
        lines.append(f"TVM get_auto_tensorize_mapping_info with {ins}: {res}")
    if "build" in data:
        b = data["build"]
        lines += ["", f"built with impl={b['impl']}: max |error| vs {b['reference']} {b['max_abs_error']:.3g}"]
        lines += ["  " + s for s in b["steps"]]
    return "\n".join(lines)
