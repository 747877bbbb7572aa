"""TensorIntrins from an intrinsic spec: the description text, pluggable implementations, registration.

:func:`register_intrin` registers a TVM ``TensorIntrin`` whose description is the
spec's loop nest (:func:`desc_source`) and whose implementation comes from an
:class:`Implementation` of the spec's ISA (``tensorize.x86`` registers the
register-blocked FMA micro-kernel, the BLAS-like extern call and a packed call;
other ISAs add their own with :func:`register_implementation`).  The name is
stable: instruction, implementation, dtype, tile and a hash of the generated text.

Example::

    >>> from tensorize.intrin_spec import IntrinSpec, OperandSpec
    >>> c = OperandSpec("C", "C", 1, (0,), ((("i", 1),),), True)
    >>> a = OperandSpec("A", "A", 1, (0,), ((("i", 1),),), True)
    >>> spec = IntrinSpec("axpy", "x86", "float32", ("i",), ("S",), (16,), c, (a,), "{C} + {A}")
    >>> print(desc_source(spec).splitlines()[-1].strip())
    C[v_i] = C[v_i] + A[v_i]
"""
from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from contextlib import contextmanager
from typing import Any, Iterator

from tvm_ext.errors import ScheduleError
from tvm_ext.tvmscript_text import Code, parse_prim_func

from .intrin_spec import IntrinSpec, OperandSpec

__all__ = ["Implementation", "register_intrin", "desc_source", "intrin_function", "signature",
           "register_implementation", "get_implementation", "implementations"]


def _buffer_decl(op: OperandSpec, ext: dict[str, int], dtype: str, strides: str | None) -> str:
    shape = op.shape(ext)
    parts = [f"{op.name}_h", repr(tuple(shape)), f'"{dtype}"', "offset_factor=1"]
    if strides is not None:
        parts.append(f"strides=[{strides}]")
    if op.scope != "global":
        parts.append(f'scope="{op.scope}"')
    return f"{op.name} = T.match_buffer({', '.join(parts)})"


def _region(op: OperandSpec, ext: dict[str, int]) -> str:
    shape = op.shape(ext)
    return f"{op.name}[{', '.join(f'0:{n}' for n in shape)}]"


def signature(spec: IntrinSpec) -> str:
    """``def f(C_h: T.handle, A_h: T.handle, ...)`` line shared by desc and impl.

    >>> from tensorize.intrin_spec import IntrinSpec, OperandSpec
    >>> c = OperandSpec("C", "C", 1, (0,), ((("i", 1),),), True)
    >>> a = OperandSpec("A", "A", 1, (0,), ((("i", 1),),), True)
    >>> signature(IntrinSpec("axpy", "x86", "float32", ("i",), ("S",), (16,), c, (a,), "{C} + {A}"))
    'def f(C_h: T.handle, A_h: T.handle) -> None:'
    """
    args = ", ".join(f"{op.name}_h: T.handle" for op in spec.operands)
    return f"def f({args}) -> None:"


def _declare_buffers(code: Code, spec: IntrinSpec, strided: bool) -> None:
    """``match_buffer`` declarations of the operands: compact, or (``strided``) with a symbolic
    stride ``s_<name>_<d>`` per dim, except a unit-stride last dim, declared ``1`` so LLVM sees
    contiguous vectors."""
    ext = spec.extent
    for op in spec.operands:
        strides = None
        if strided:
            dims = [f"s_{op.name}_{d}" for d in range(max(op.rank, 1))]
            if op.unit_stride:
                dims[op.dims[-1]] = "1"
            for s in dims:
                if s != "1":
                    code(f"{s} = T.int32()")
            strides = ", ".join(dims)
        code(_buffer_decl(op, ext, spec.dtype, strides))


@contextmanager
def intrin_function(code: Code, spec: IntrinSpec, *, strided: bool) -> Iterator[None]:
    """Write the intrinsic's ``prim_func`` into ``code``: the header, the operand buffers and
    the root block with its read/write regions; what the ``with`` body writes goes inside
    the root block.  ``strided``: buffers with symbolic strides (an implementation, which
    TVM's tensorize binds to the kernel's buffers), else compact (the description).

    >>> from tensorize.intrin_spec import IntrinSpec, OperandSpec
    >>> op = OperandSpec("C", "C", 1, (0,), ((("i", 1),),), True)
    >>> spec = IntrinSpec("axpy", "x86", "float32", ("i",), ("S",), (16,), op, (op,), "{C}")
    >>> code = Code()
    >>> with intrin_function(code, spec, strided=True):
    ...     code("T.evaluate(0)")
    >>> code.lines[-3:]
    ['        T.reads(C[0:16], C[0:16])', '        T.writes(C[0:16])', '        T.evaluate(0)']
    """
    ext = spec.extent
    code("# from tvm.script import tirx as T")
    code("@T.prim_func(s_tir=True)")
    with code.block(signature(spec)):
        _declare_buffers(code, spec, strided)
        with code.block('with T.sblock("root"):'):
            code(f"T.reads({', '.join(_region(op, ext) for op in spec.operands)})")
            code(f"T.writes({_region(spec.output, ext)})")
            yield


def desc_source(spec: IntrinSpec) -> str:
    """TVMScript of the intrinsic's description: the spec's loop nest, one block."""
    ext = spec.extent
    loops = ", ".join(f"l_{a}" for a in spec.axes)
    code = Code()
    with intrin_function(code, spec, strided=False):
        with code.block(f"for {loops} in T.grid({', '.join(str(ext[a]) for a in spec.axes)}):"):
            with code.block('with T.sblock("update"):'):
                code(f"{', '.join(f'v_{a}' for a in spec.axes)} = "
                     f'T.axis.remap("{"".join(spec.kinds)}", [{loops}])')
                code(f"{spec.output.ref()} = {spec.expr}")
    return code.text() + "\n"


def register_intrin(spec: IntrinSpec, impl: "Implementation") -> str:
    """Register the TensorIntrin (desc from the spec, impl from ``impl``); return its name.

    The name is stable: ``tvmext.<isa>.<instruction>.<impl>.<dtype>.<tile>.<hash>``
    where the hash covers the generated desc and impl text, so equal structures
    share one registration and different ones never collide.
    """
    from tvm import s_tir

    d_src, i_src = desc_source(spec), impl.impl_source(spec)
    digest = hashlib.sha1((d_src + i_src).encode()).hexdigest()[:10]
    tile = "x".join(str(n) for n in spec.extents)
    name = f"tvmext.{spec.isa}.{spec.instruction}.{impl.name}.{spec.dtype}.{tile}.{digest}"
    if s_tir.TensorIntrin.get(name, allow_missing=True) is None:
        s_tir.TensorIntrin.register(name, parse_prim_func(d_src), parse_prim_func(i_src), override=True)
    return name


# ---------------------------------------------------------------------------
# Implementations (pluggable per ISA / backend)
# ---------------------------------------------------------------------------
class Implementation(ABC):
    """How one ISA/backend executes an intrinsic.  Subclass and register.

    * ``accumulate_local``: the output tile lives in a ``local`` buffer (registers)
      across all reduction loops; otherwise the intrinsic updates global memory.
    * :meth:`check` raises :class:`ScheduleError` when the spec is out of reach.
    * :meth:`impl_source` returns the TVMScript implementation (its body written inside
      :func:`intrin_function`).
    * :meth:`tiles` picks the tile (instruction extents) for a kernel's full extents.
    * :meth:`prepare` builds/loads whatever the code calls (e.g. a C library).
    * ``honors_instruction_sizes``: a fixed-size instruction's extents are the tile
      (a BLAS-like call instead takes whatever tile :meth:`tiles` picks).
    """

    name = "base"
    isa = "x86"
    accumulate_local = False
    parallel = True
    honors_instruction_sizes = True  # fixed instruction extents become the tile (else: implementation's choice)

    def check(self, spec: IntrinSpec) -> None:  # pragma: no cover - interface
        return None

    @abstractmethod
    def impl_source(self, spec: IntrinSpec) -> str:
        """The TVMScript implementation of the intrinsic for ``spec``."""

    def tiles(self, spec: IntrinSpec, fixed: dict[str, int | None]) -> dict[str, int]:
        return {a: int(fixed.get(a) or n) for a, n in zip(spec.axes, spec.extents)}

    def prepare(self) -> None:
        return None

    def schedule_hints(self) -> dict[str, Any]:
        return {}


_IMPLS: dict[tuple[str, str], Implementation] = {}


def register_implementation(impl: Implementation, *, override: bool = False) -> Implementation:
    """Add an implementation under ``(impl.isa, impl.name)`` (:class:`ScheduleError` if taken and
    not ``override``).

    >>> from tensorize.x86 import PackedCall
    >>> register_implementation(PackedCall())
    Traceback (most recent call last):
    ...
    tvm_ext.errors.ScheduleError: implementation 'packed' for ISA 'x86' is already registered
    """
    key = (impl.isa, impl.name)
    if key in _IMPLS and not override:
        raise ScheduleError(f"implementation {impl.name!r} for ISA {impl.isa!r} is already registered")
    _IMPLS[key] = impl
    return impl


def get_implementation(isa: str, name: str, instruction: str | None = None) -> Implementation:
    """The implementation ``name`` of ``isa`` (ScheduleError if none).

    With ``instruction``, an implementation attached to that instruction in the
    ISA registry (``get_isa(isa).implement(instruction, impl, backend="tvm.<name>")``)
    takes precedence over the ISA-wide one.

    >>> get_implementation("x86", "blas").accumulate_local
    False
    """
    if instruction is not None:
        attached = _attached(isa, instruction, name)
        if attached is not None:
            return attached
    impl = _IMPLS.get((isa, name))
    if impl is None:
        have = sorted(n for i, n in _IMPLS if i == isa)
        raise ScheduleError(f"no implementation {name!r} for ISA {isa!r} (registered: {have or 'none'})")
    return impl


def _attached(isa: str, instruction: str, name: str) -> Implementation | None:
    from tensorize.instructions import get_isa

    from tvm_ext.errors import ConfigError

    try:
        target = get_isa(isa)
        impl = target.implementation(instruction, backend=f"tvm.{name}") if instruction in target else None
    except ConfigError:
        return None
    return impl if isinstance(impl, Implementation) else None


def implementations(isa: str) -> list[str]:
    """Names of the implementations registered for ``isa``.

    >>> implementations("x86")
    ['blas', 'micro', 'packed']
    """
    return sorted(n for i, n in _IMPLS if i == isa)
