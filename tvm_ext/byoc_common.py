"""Pieces every simulated BYOC target of the plugin shares.

A target built on a simulator lowers each offloaded Relax function to an
``R.call_dps_packed`` of one of the plugin's runtime functions
(:mod:`tvm_ext.runtime_functions`) whose first argument is the function's
*program*: everything the simulator needs (instruction stream, non-zero
stream, configuration), serialised into a ``uint8`` constant of the module.
The module therefore exports and loads like any TVM module.

* :func:`composite_names`: the ``Composite`` names inside an offloaded function;
* :func:`tag_symbols`: suffix the ``global_symbol`` of a codegen's functions
  with a configuration tag, so modules compiled for different hardware
  configurations never share a kernel;
* :func:`pack_program` / :func:`read_program`: a program as
  ``[16-byte digest][header length][JSON header][body]``;
* :class:`ProgramKernels`: the decoded kernels of the programs seen in this
  process, by digest (each kernel keeps its own call counters);
* :func:`lower_codegen_calls`: replace every call of a codegen's functions
  by what the codegen makes of it, then drop those functions.

>>> blob = pack_program({"symbol": "k"}, b"body")
>>> header, body = read_program(blob)
>>> header["symbol"], bytes(body)
('k', b'body')
"""
from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from tvm_ext.errors import InputError

__all__ = ["composite_names", "tag_symbols", "offloaded_symbols", "pack_program", "read_program",
           "program_digest", "KernelCounters", "ProgramKernels", "lower_codegen_calls", "runtime_programs"]

_DIGEST = 16


def composite_names(func: Any) -> list[str]:
    """``Composite`` attributes of the functions nested in ``func`` (post order)."""
    from tvm import relax

    names: list[str] = []

    def visit(e):
        if isinstance(e, relax.Function) and e.attrs is not None and "Composite" in e.attrs:
            names.append(str(e.attrs["Composite"]))

    relax.analysis.post_order_visit(func, visit)
    return names


def offloaded_symbols(mod: Any, codegen: str) -> list[str]:
    """``global_symbol`` of every function of ``mod`` marked ``Codegen=codegen``."""
    from tvm import relax

    out = []
    for _, func in mod.functions.items():
        if (isinstance(func, relax.Function) and func.attrs is not None
                and str(func.attrs.get("Codegen", "")) == codegen):
            out.append(str(func.attrs["global_symbol"]))
    return out


def tag_symbols(mod: Any, codegen: str, tag: str) -> Any:
    """Suffix ``_<tag>`` to the ``global_symbol`` of every ``Codegen=codegen`` function."""
    from tvm import relax

    for gv, func in list(mod.functions.items()):
        if (isinstance(func, relax.Function) and func.attrs is not None
                and str(func.attrs.get("Codegen", "")) == codegen):
            mod[gv] = func.with_attr("global_symbol", f"{func.attrs['global_symbol']}_{tag}")
    return mod


# ---------------------------------------------------------------------------
# Programs: what a runtime function receives as its first argument
# ---------------------------------------------------------------------------
def pack_program(header: dict[str, Any], body: bytes) -> np.ndarray:
    """``uint8`` array ``[digest][header length (uint32)][JSON header][body]``."""
    head = json.dumps(header, sort_keys=True).encode()
    payload = np.uint32(len(head)).tobytes() + head + bytes(body)
    digest = hashlib.blake2b(payload, digest_size=_DIGEST).digest()
    return np.frombuffer(digest + payload, dtype=np.uint8).copy()


def _as_bytes(program: Any) -> np.ndarray:
    if isinstance(program, np.ndarray):
        return program.view(np.uint8).reshape(-1)
    return np.from_dlpack(program).view(np.uint8).reshape(-1)  # a runtime tensor: zero copy


def program_digest(program: Any) -> bytes:
    """The digest that names a program (read from its first bytes)."""
    arr = _as_bytes(program)
    if arr.size < _DIGEST + 4:
        raise InputError(f"not a tvm_ext program ({arr.size} bytes)")
    return arr[:_DIGEST].tobytes()


def read_program(program: Any) -> tuple[dict[str, Any], memoryview]:
    """(header, body) of a program; its digest is checked."""
    arr = _as_bytes(program)
    digest = program_digest(arr)
    payload = arr[_DIGEST:]
    if hashlib.blake2b(payload.tobytes(), digest_size=_DIGEST).digest() != digest:
        raise InputError("tvm_ext program: the digest does not match its contents (corrupt module?)")
    n = int(payload[:4].view(np.uint32)[0])
    header = json.loads(payload[4:4 + n].tobytes())
    return header, memoryview(payload[4 + n:].tobytes())


@dataclass
class KernelCounters:
    """Calls of one offloaded kernel and what the simulator reported for them (totals)."""

    calls: int = 0
    cycles: int = 0
    seconds: float = 0.0
    traffic: dict[str, int] = field(default_factory=dict)

    def copy(self) -> "KernelCounters":
        return KernelCounters(self.calls, self.cycles, self.seconds, dict(self.traffic))

    def minus(self, before: "KernelCounters") -> "KernelCounters":
        return KernelCounters(self.calls - before.calls, self.cycles - before.cycles,
                              self.seconds - before.seconds,
                              {k: v - before.traffic.get(k, 0) for k, v in self.traffic.items()})


class ProgramKernels:
    """Decoded kernels by program digest: a program is decoded once per process.

    ``make(header, body)`` builds the kernel; kernels are kept for the life of
    the process (one per distinct compiled program, like compiled kernels).
    """

    def __init__(self, make: Callable[[dict, memoryview], Any]):
        self._make = make
        self._lock = threading.Lock()
        self._kernels: dict[bytes, Any] = {}

    def get(self, program: Any) -> Any:
        digest = program_digest(program)
        with self._lock:
            k = self._kernels.get(digest)
        if k is not None:
            return k
        header, body = read_program(program)
        k = self._make(header, body)
        with self._lock:
            return self._kernels.setdefault(digest, k)

    def put(self, program: Any, kernel: Any) -> Any:
        """Register the kernel a code generator built with its program (no decoding); returns the kept one."""
        with self._lock:
            return self._kernels.setdefault(program_digest(program), kernel)

    def find(self, digest: bytes) -> Any:
        """The kernel of ``digest`` if its program was decoded in this process, else None."""
        with self._lock:
            return self._kernels.get(digest)

    def items(self) -> list[tuple[bytes, Any]]:
        with self._lock:
            return list(self._kernels.items())

    def counters(self, digest: bytes) -> KernelCounters | None:
        """A copy of the counters of the kernel of ``digest`` (None when it never ran here).

        The kernel keeps its totals in ``counters`` under its own ``_lock``.
        """
        k = self.find(digest)
        if k is None:
            return None
        with k._lock:
            return k.counters.copy()


def lower_codegen_calls(mod: Any, codegen: str, lower: Callable[[Any, Any, Any], Any]) -> Any:
    """Replace every call of a ``Codegen=codegen`` function by ``lower(gv, func, call)``; drop those functions."""
    import tvm
    from tvm import relax

    targets = {gv: f for gv, f in mod.functions.items()
               if isinstance(f, relax.Function) and f.attrs is not None
               and str(f.attrs.get("Codegen", "")) == codegen}
    if not targets:
        return mod

    @relax.expr_functor.mutator
    class _Lower(relax.PyExprMutator):
        def visit_call_(self, op):  # noqa: N802 - TVM's hook name
            call = super().visit_call_(op)
            if isinstance(call.op, relax.GlobalVar):
                for gv, f in targets.items():
                    if gv.same_as(call.op):
                        return lower(gv, f, call)
            return call

    mutator = _Lower()
    funcs = {}
    for gv, f in mod.functions.items():
        if any(gv.same_as(t) for t in targets):
            continue
        funcs[gv] = mutator.visit_expr(f) if isinstance(f, relax.Function) else f
    out = tvm.IRModule(funcs, attrs=mod.attrs)
    return relax.transform.DeadCodeElimination()(out)


def runtime_programs(mod: Any) -> list[tuple[str, Any]]:
    """(runtime function, program constant) of every runtime-function call in the Relax functions of ``mod``."""
    import tvm
    from tvm import relax

    from tvm_ext.runtime_functions import RUNTIME_FUNCTIONS

    out: list[tuple[str, Any]] = []

    def visit(e):
        if isinstance(e, relax.Call) and getattr(e.op, "name", "") == "relax.call_dps_packed":
            f = e.args[0]
            if isinstance(f, relax.ExternFunc) and str(f.global_symbol) in RUNTIME_FUNCTIONS:
                prog = e.args[1].fields[0] if len(e.args[1].fields) else None
                if isinstance(prog, tvm.ir.expr.Constant):
                    out.append((str(f.global_symbol), prog.value))

    for _, func in mod.functions.items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return out
