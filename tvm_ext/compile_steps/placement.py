"""Where each op of the model went, carried in the IR from pass to pass.

* **Op identity**: :func:`annotate_op_ids` gives every op call of ``main`` a
  span whose source is ``tvm_ext.op`` and whose line is the op's id (its
  index in program order).  Relax passes keep a call's span when they rebuild
  it, so an op keeps its id through constant folding, pattern partitioning
  and lifting; two ops of the same kind and shape stay two ops.
* **Module attributes** (read back by :func:`report_parts`):

  - ``tvm_ext.ops``: ``[op name, shapes]`` of each op id;
  - ``tvm_ext.placement``: op id -> ``[target, note]`` for every op a pass
    moved off the default llvm path;
  - ``tvm_ext.kernels``: kernels registered by a pass (sparse executors,
    fused GCN layers) as JSON records;
  - ``tvm_ext.engine_tuning``: what the engines' tuning records did.
* **PrimFunc attributes**: ``tvm_ext.schedule`` (``[how, detail, reason]``)
  and ``tvm_ext.members`` (the ops fused into the kernel).

>>> import numpy as np
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType((4, 8), "float32"))
>>> with bb.function("main", [x]):
...     with bb.dataflow():
...         y = bb.emit_output(relax.op.nn.relu(relax.op.nn.relu(x)))
...     _ = bb.emit_func_output(y)
>>> mod = annotate_op_ids(bb.get())
>>> sorted(live_op_ids(mod)), [list(o) for o in mod.attrs[ATTR_OPS]]
([0, 1], [['nn.relu', '(4x8) -> 4x8'], ['nn.relu', '(4x8) -> 4x8']])
"""
from __future__ import annotations

import json
from typing import Any

__all__ = ["OP_SOURCE", "ATTR_OPS", "ATTR_PLACEMENT", "ATTR_KERNELS", "ATTR_ENGINE_TUNING", "ATTR_SCHEDULE",
           "ATTR_MEMBERS", "ATTR_ACCEL", "op_id", "annotate_op_ids", "live_op_ids", "placement", "place", "add_kernels",
           "add_engine_tuning", "keep_attrs", "module_json", "report_parts"]

OP_SOURCE = "tvm_ext.op"
ATTR_OPS = "tvm_ext.ops"
ATTR_PLACEMENT = "tvm_ext.placement"
ATTR_KERNELS = "tvm_ext.kernels"
ATTR_ENGINE_TUNING = "tvm_ext.engine_tuning"
ATTR_SCHEDULE = "tvm_ext.schedule"
ATTR_MEMBERS = "tvm_ext.members"
ATTR_ACCEL = "tvm_ext.accel"  # name of the system graph the accelerator pass offloaded to


def _source():
    import tvm

    return tvm.ir.SourceName(OP_SOURCE)  # interned: same_as compares identity


def op_id(call: Any) -> int | None:
    """The op id of a call annotated by :func:`annotate_op_ids`, else None."""
    span = getattr(call, "span", None)
    if span is None or not span.source_name.same_as(_source()):
        return None
    return int(span.line)


def annotate_op_ids(mod: Any) -> Any:
    """Give every op call of ``main`` its id (a ``tvm_ext.op`` span); records ``tvm_ext.ops``.

    A module already annotated is returned unchanged."""
    import tvm
    from tvm import relax

    from tvm_ext.compile_steps.ops import op_key

    if mod.attrs is not None and ATTR_OPS in mod.attrs:
        return mod
    if not _has_main(mod):
        return mod.with_attr(ATTR_OPS, []).with_attr(ATTR_PLACEMENT, {})
    ops: list[list[str]] = []
    source = _source()

    @relax.expr_functor.mutator
    class _Ids(relax.PyExprMutator):
        def visit_call_(self, op):  # noqa: N802 - TVM's hook name
            call = super().visit_call_(op)
            if not isinstance(call.op, tvm.ir.Op):
                return call
            i = len(ops)
            ops.append(list(op_key(op)))
            return relax.Call(call.op, call.args, call.attrs, call.ty_args, tvm.ir.Span(source, i, i, 0, 0))

    out = mod.clone() if hasattr(mod, "clone") else mod
    out["main"] = _Ids().visit_expr(mod["main"])
    return out.with_attr(ATTR_OPS, ops).with_attr(ATTR_PLACEMENT, {})


def _has_main(mod: Any) -> bool:
    from tvm import relax

    return any(gv.name_hint == "main" and isinstance(mod[gv], relax.Function) for gv in mod.get_global_vars())


def live_op_ids(mod: Any) -> set[int]:
    """Ids of the annotated op calls still in the module's Relax functions (offloaded functions excluded)."""
    from tvm import relax

    ids: set[int] = set()

    def visit(e):
        if isinstance(e, relax.Call):
            i = op_id(e)
            if i is not None:
                ids.add(i)

    for _, f in mod.functions.items():
        if isinstance(f, relax.Function) and not (f.attrs is not None and "Codegen" in f.attrs):
            relax.analysis.post_order_visit(f, visit)
    return ids


def placement(mod: Any) -> dict[int, tuple[str, str]]:
    """op id -> (target, note) of the ops a pass placed."""
    raw = mod.attrs.get(ATTR_PLACEMENT) if mod.attrs is not None else None
    return {int(k): (str(v[0]), str(v[1])) for k, v in (raw or {}).items()}


def place(mod: Any, ids: Any, target: str, note: str) -> Any:
    """``mod`` with the ops ``ids`` placed on ``target`` (ops placed earlier keep their place)."""
    cur = placement(mod)
    for i in ids:
        if i is not None and i not in cur:
            cur[int(i)] = (target, note)
    return mod.with_attr(ATTR_PLACEMENT, {k: list(v) for k, v in cur.items()})


def _append(mod: Any, attr: str, records: list[dict]) -> Any:
    old = [str(r) for r in (mod.attrs.get(attr) if mod.attrs is not None else None) or []]
    return mod.with_attr(attr, old + [json.dumps(r, sort_keys=True) for r in records])


def add_kernels(mod: Any, records: list[dict]) -> Any:
    """Record kernels a pass registered: ``{"name", "target", "schedule", "detail", "ops"}``."""
    return _append(mod, ATTR_KERNELS, records)


def add_engine_tuning(mod: Any, tunings: list[Any]) -> Any:
    """Record what the engines' tuning records did (``EngineTuning`` objects)."""
    from dataclasses import asdict

    return _append(mod, ATTR_ENGINE_TUNING, [asdict(t) for t in tunings])


def module_json(mod: Any, attr: str) -> list[dict]:
    """The JSON records of a list attribute written by :func:`add_kernels` / :func:`add_engine_tuning`."""
    raw = mod.attrs.get(attr) if mod.attrs is not None else None
    return [json.loads(str(r)) for r in raw or []]


def keep_attrs(inner: Any, name: str) -> Any:
    """A module pass running ``inner`` and keeping the module attributes it drops."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name=name)
    def _keep(mod, ctx):
        out = inner(mod)
        for k, v in (mod.attrs or {}).items():
            if out.attrs is None or k not in out.attrs:
                out = out.with_attr(k, v)
        return out

    return _keep


def report_parts(mod: Any) -> dict[str, Any]:
    """What the report needs, read from a compiled module (before build): ops with their placement,
    kernels (llvm PrimFuncs, kernels registered by passes, offloaded programs), engine tuning."""
    import tvm

    from tvm_ext.byoc_common import program_digest, read_program, runtime_programs

    attrs = mod.attrs if mod.attrs is not None else {}
    placed = placement(mod)
    ops = []
    for i, (op, shapes) in enumerate(attrs.get(ATTR_OPS) or []):
        target, note = placed.get(i, ("llvm", ""))
        ops.append({"index": i, "op": str(op), "shapes": str(shapes), "target": target, "note": note})
    kernels = []
    for gv, f in mod.functions.items():
        if isinstance(f, tvm.tirx.PrimFunc) and f.attrs is not None and ATTR_SCHEDULE in f.attrs:
            how, detail, reason = (str(x) for x in f.attrs[ATTR_SCHEDULE])
            members = [str(m) for m in f.attrs.get(ATTR_MEMBERS) or [gv.name_hint]]
            kernels.append({"name": gv.name_hint, "target": "llvm", "schedule": how,
                            "detail": "; ".join(x for x in (detail, reason) if x), "ops": members})
    kernels += module_json(mod, ATTR_KERNELS)
    seen: set[bytes] = set()
    for runtime, prog in runtime_programs(mod):
        digest = program_digest(prog)
        if digest in seen:
            continue
        seen.add(digest)
        header, _ = read_program(prog)
        kernels.append({"name": str(header["symbol"]), "target": str(header["codegen"]), "schedule": "simulated",
                        "detail": str(header.get("detail", "")), "ops": list(header.get("ops", [])),
                        "runtime": runtime, "digest": digest.hex()})
    inputs = []
    for p in mod["main"].params if _has_main(mod) else []:
        try:
            inputs.append([p.name, [int(d) for d in p.ty.shape.values], str(p.ty.dtype)])
        except (AttributeError, TypeError, ValueError):
            inputs.append([p.name, None, str(getattr(p.ty, "dtype", ""))])
    tgt = tvm.target.Target.current(allow_none=True)
    return {"ops": ops, "kernels": kernels, "engine_tuning": module_json(mod, ATTR_ENGINE_TUNING),
            "accel": str(attrs[ATTR_ACCEL]) if ATTR_ACCEL in attrs else None, "inputs": inputs,
            "target": str(tgt.attrs.get("mcpu", tgt.kind.name)) if tgt is not None else None}
