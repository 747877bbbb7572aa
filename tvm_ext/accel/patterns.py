"""Relax patterns for the accelerator (BYOC): what may be offloaded, checked against the system graph.

Matched **before** ``LegalizeOps`` (on high-level Relax operators), in
priority order:

* ``accel.gru_cell``: a GRU step as :func:`~tvm_ext.accel.models.gru_cell_module`
  emits it (two matmuls + row biases, ``split`` into gates, sigmoid/tanh,
  ``h' = n + z * (h - n)``);
* ``accel.conv2d_bias_relu``, ``accel.conv2d_bias`` (a per-channel bias:
  a conv's own, or a batch norm folded into the conv), ``accel.conv2d_relu``,
  ``accel.conv2d`` (grouped convs with groups = channels are depthwise);
* ``accel.dense_bias_relu``, ``accel.dense_bias``, ``accel.dense``
  (``matmul(x, permute_dims(w))``: a linear layer as the frontends import it);
* ``accel.matmul_bias_relu``, ``accel.matmul_bias``, ``accel.matmul``.

The default system's table is in TVM's pattern registry (:func:`register`,
run when TVM loads after ``import tvm_ext``).  Each pattern carries a check: the matched subgraph is translated
(:mod:`~tvm_ext.accel.translate`) and mapped onto the system's instructions
(:mod:`~tvm_ext.accel.lowering`); when that fails (unsupported shape or
dtype, an instruction no unit runs) the subgraph stays on llvm and the
reason is kept in :func:`rejections`.

>>> [name for name, *_ in pattern_table()][:3]
['accel.gru_cell', 'accel.conv2d_bias_relu', 'accel.conv2d_bias']
"""
from __future__ import annotations

import threading
from typing import Any

from tvm_ext.errors import TvmExtError

__all__ = ["CODEGEN", "pattern_table", "register", "rejections", "clear_rejections"]

CODEGEN = "accel"
_lock = threading.Lock()
_REJECTED: list[tuple[str, str]] = []


def rejections() -> list[tuple[str, str]]:
    """(pattern, reason) of matches the check sent back to llvm, oldest first."""
    with _lock:
        return list(_REJECTED)


def clear_rejections() -> None:
    with _lock:
        _REJECTED.clear()


def _op(name: str):
    from tvm.relax.dpl import is_op

    return is_op(name)


def _gru():
    from tvm.relax.dpl import is_tuple_get_item, wildcard

    x, h, wi, wh, bi, bh = (wildcard() for _ in range(6))
    gi = _op("relax.add")(_op("relax.matmul")(x, wi), bi)
    gh = _op("relax.add")(_op("relax.matmul")(h, wh), bh)
    si, sh = _op("relax.split")(gi), _op("relax.split")(gh)
    r = _op("relax.sigmoid")(_op("relax.add")(is_tuple_get_item(si, 0), is_tuple_get_item(sh, 0)))
    z = _op("relax.sigmoid")(_op("relax.add")(is_tuple_get_item(si, 1), is_tuple_get_item(sh, 1)))
    n = _op("relax.tanh")(_op("relax.add")(is_tuple_get_item(si, 2),
                                           _op("relax.multiply")(r, is_tuple_get_item(sh, 2))))
    return _op("relax.add")(n, _op("relax.multiply")(z, _op("relax.subtract")(h, n)))


def _mm(dense: bool):
    from tvm.relax.dpl import wildcard

    b = _op("relax.permute_dims")(wildcard()) if dense else wildcard()
    return _op("relax.matmul")(wildcard(), b)


def _raw_patterns() -> list[tuple[str, Any]]:
    from tvm.relax.dpl import wildcard

    conv = _op("relax.nn.conv2d")(wildcard(), wildcard())
    conv_bias = _op("relax.add")(conv, wildcard())
    out = [("gru_cell", _gru()), ("conv2d_bias_relu", _op("relax.nn.relu")(conv_bias)), ("conv2d_bias", conv_bias),
           ("conv2d_relu", _op("relax.nn.relu")(conv)), ("conv2d", conv)]
    for kind, dense in (("dense", True), ("matmul", False)):
        mm = _mm(dense)
        bias = _op("relax.add")(mm, wildcard())
        out += [(f"{kind}_bias_relu", _op("relax.nn.relu")(bias)), (f"{kind}_bias", bias), (kind, mm)]
    return [(f"{CODEGEN}.{n}", p) for n, p in out]


def _check(system, name: str):
    from .lowering import legalize, lower_workload
    from .translate import translate_expr

    def check(ctx) -> bool:
        try:
            wl = translate_expr(ctx.matched_expr, dict(ctx.matched_bindings), name=name)
            lower_workload(legalize(wl, system), system)
        except TvmExtError as e:
            with _lock:
                _REJECTED.append((name, str(e)))
                del _REJECTED[:-1000]
            return False
        return True

    return check


def pattern_table(system: Any = None) -> list[tuple]:
    """``(name, pattern, annotations, check)`` tuples for ``FuseOpsByPattern`` (checks need a system)."""
    from .system_graph import load_system

    sysg = load_system(system)
    return [(name, pat, {}, _check(sysg, name)) for name, pat in _raw_patterns()]


def register() -> None:
    """Put the default system's checked patterns in TVM's pattern registry, so that
    ``tvm.relax.backend.pattern_registry.get_patterns_with_prefix("accel")`` finds them
    (highest priority first, as :func:`pattern_table` lists them)."""
    from tvm.relax.backend.pattern_registry import register_patterns

    register_patterns(list(reversed(pattern_table())))  # the registry puts later entries first
