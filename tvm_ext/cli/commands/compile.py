"""``tvm-ext compile MODEL``: a user model through :func:`tvm_ext.compile`, with its placement report.

``MODEL`` is an ``.onnx`` file, a ``torch.export``-saved ``.pt2`` file, or the
name of a built-in model (``mlp``, ``gcn``, ``mobilenet``, ``gru``,
``bottleneck``; ``--size`` picks its size).  The model runs once on seeded
random inputs; the report lists where each op went, the simulated cycles and
traffic of the offloaded kernels and the measured time of the llvm ones.
``--check`` also builds the model with TVM alone (llvm, no extension) and
compares the outputs.

Security: a ``.pt2`` file is loaded with ``torch.export.load``, which
unpickles it and can run code it contains: compile trusted files only.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from tvm_ext.cli.args import real, seed
from tvm_ext.cli.output import Output
from tvm_ext.cli.selfcheck import require_close
from tvm_ext.errors import ConfigError, InputError
from tvm_ext.json_config import parse_json
from tvm_ext.limits import check_int32

_TARGET_EXAMPLE = '\'{"kind": "llvm", "mcpu": "znver4"}\''


def register(subparsers, common) -> None:
    p = subparsers.add_parser("compile", parents=[common], help="compile a model with every extension; "
                              "report where each op runs", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="MODEL.onnx, MODEL.pt2 or a built-in model name; "
                   ".pt2 files are unpickled (they can run code): trusted files only")
    p.add_argument("--accel", default=None, metavar="CONFIG",
                   help="offload to the matrix accelerator: 'default', a config name or a JSON file")
    p.add_argument("--spmm-engine", default=None, metavar="PLATFORM",
                   help="sparse products on the Sextans engine: 'sextans' or 'sextans-p'")
    p.add_argument("--tuning-db", default=None, metavar="DIR", help="apply the tuning records of DIR (tvm-ext tune): MetaSchedule records to "
                   "llvm kernels, Sextans and accelerator knob records to the offloaded parts")
    p.add_argument("--tensorize", default="measure", choices=("measure", "always", "never"),
                   help="x86 tensorization of llvm matmul/conv kernels (default: keep when faster)")
    p.add_argument("--sparse-threshold", type=real("--sparse-threshold", 0.0, 1.0), default=0.1, metavar="DENSITY",
                   help="a constant matmul operand at most this dense is sparse (default 0.1)")
    p.add_argument("--target", default=None, metavar="JSON", help='llvm target as JSON (default: host CPU)')
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2,...",
                   help="static shape of a symbolic ONNX input (repeatable)")
    p.add_argument("--size", default="small", choices=("tiny", "small", "full"),
                   help="size of a built-in model (default small)")
    p.add_argument("--check", action="store_true",
                   help="compare with the llvm-only TVM build on the same random inputs")
    p.add_argument("--seed", type=seed(), default=0, help="seed of the random inputs")
    p.set_defaults(func=run)


def _shapes(items: list[str]) -> dict[str, list[int]]:
    out = {}
    for item in items:
        name, _, dims = item.partition("=")
        try:
            out[name.strip()] = [int(d) for d in dims.split(",") if d.strip()]
        except ValueError:
            raise InputError(f"--shape {item!r}: expected NAME=D1,D2,...") from None
        if not name.strip() or not out[name.strip()]:
            raise InputError(f"--shape {item!r}: expected NAME=D1,D2,...")
        if min(out[name.strip()]) < 1:
            raise InputError(f"--shape {item!r}: dimensions must be positive integers")
        check_int32(f"--shape {item!r}", **{name.strip(): math.prod(out[name.strip()])})
    return out


def _target(text: str | None) -> Any:
    if text is None:
        return None
    if text.strip() == "llvm":
        return "llvm"
    try:
        target = parse_json(text, f"--target {text!r}")  # refuses NaN/Infinity too
    except ConfigError as e:
        raise ConfigError(f"{e}; expected a JSON dict such as " + _TARGET_EXAMPLE) from None
    if not isinstance(target, dict):
        raise ConfigError(f"--target {text!r}: expected a JSON dict such as " + _TARGET_EXAMPLE)
    if target.get("kind") != "llvm":  # refused before TVM builds (and logs about) a target of another kind
        raise ConfigError(f"--target {text!r}: compile builds for kind 'llvm' (offloaded parts run on simulators "
                          "hosted by the CPU), e.g. " + _TARGET_EXAMPLE)
    return target


def _accel(value: str | None) -> Any:
    if value is None:
        return None
    if value.endswith(".json"):
        if not Path(value).is_file():
            raise ConfigError(f"--accel {value!r}: no such file")
    return value


def load(args) -> tuple[Any, Any]:
    """(Relax module, the model case for built-in names or None)."""
    from tvm_ext.models import MODEL_NAMES, get_model
    from tvm_ext.models.frontends import load_model

    if args.model in MODEL_NAMES:
        from tvm_ext.models.frontends import require

        if args.shape:
            raise InputError(f"--shape applies to ONNX model files; the built-in model {args.model!r} "
                             "has static shapes (pick one with --size)")
        require("torch")  # the built-in models and their references are PyTorch modules
        case = get_model(args.model, args.size)
        return case.relax_module(), case
    path = Path(args.model)
    if path.is_dir():
        raise InputError(f"model {args.model!r} is a directory; expected MODEL.onnx, MODEL.pt2 or a built-in "
                         f"model ({', '.join(MODEL_NAMES)})")
    if not path.suffix and not path.exists():
        raise InputError(f"model {args.model!r} is neither a built-in model ({', '.join(MODEL_NAMES)}) "
                         "nor a model file (.onnx or .pt2)")
    return load_model(args.model, shapes=_shapes(args.shape) or None), None


def run(args) -> Output:
    import numpy as np

    import tvm_ext.compile as tc

    target, accel = _target(args.target), _accel(args.accel)  # bad options fail before the model loads
    mod, case = load(args)
    model = tc.compile(mod, target, accel=accel, spmm_engine=args.spmm_engine,
                       tuning_db=args.tuning_db, tensorize=args.tensorize,
                       sparse_threshold=args.sparse_threshold)
    inputs = case.inputs if case is not None else model.random_inputs(args.seed)
    report = model.profile(*inputs)
    outputs = model.last_outputs
    data: dict[str, Any] = {"model": args.model, **report.to_dict()}
    lines = [f"model {args.model}" + (f" ({case.description})" if case is not None else ""), report.markdown()]
    if case is not None:
        data["framework_rel_err"] = tc.max_rel_err(outputs, case.reference())
        require_close(f"compile {args.model}: outputs vs PyTorch", data["framework_rel_err"])
        lines.append(f"max relative error vs PyTorch: {data['framework_rel_err']:.2e}")
    if args.check:
        base = tc.llvm_only(mod, _target(args.target))
        ref = base(*inputs)
        data["max_rel_err"] = tc.max_rel_err(outputs, ref)
        require_close(f"compile {args.model} --check: outputs vs the llvm-only TVM build", data["max_rel_err"])
        data["llvm_only_seconds"] = base.time(*inputs, repeat=3, min_repeat_ms=20)
        lines.append(f"--check: max relative error vs the llvm-only TVM build {data['max_rel_err']:.2e} "
                     f"(llvm-only build: {data['llvm_only_seconds'] * 1e3:.3f} ms per inference, "
                     f"this build: {report.total_seconds * 1e3:.3f} ms measured + simulated)")
    data["output_shapes"] = [list(np.shape(o)) for o in outputs]
    return Output(data, "\n".join(lines))
