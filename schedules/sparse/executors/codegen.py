"""TVMScript text for the sparse executors (Venkat 2016, ch. 5 executors).

Executors are generated as TVMScript *source text* from Python, so that the
tuning knobs (vector width, unroll, block shape...) become literal constants in
the kernel while every size (M, N, K, nnz) stays a symbolic ``T.int32()``.
They write it with the project's one builder, :class:`tvm_ext.tvmscript_text.Code`,
and parse it with :func:`tvm_ext.tvmscript_text.parse_prim_func` (both part of this
module's API, so an executor imports its toolkit from one place); this module adds
the executors' parameters (:class:`Buffer`, :func:`prim_func_source`) and dtypes.

>>> body = Code()
>>> body("C[0] = T.float32(0)")
>>> print(prim_func_source("zero", [Buffer("c", "C", ("n",), "float32")], [], ["n"], body))
@T.prim_func(s_tir=True)
def zero(c: T.handle):
    T.func_attr({"global_symbol": "main", "tirx.noalias": True})
    n = T.int32()
    C = T.match_buffer(c, (n,), "float32")
    C[0] = T.float32(0)
<BLANKLINE>
"""
from __future__ import annotations

import functools
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from tvm_ext.errors import ConfigError, InputError
from tvm_ext.tvmscript_text import Code, parse_prim_func

__all__ = ["Code", "Buffer", "parallel_items", "dynamic_parts", "resolve_dynamic",
           "DYNAMIC_PART_WORK", "dense_alignment", "dense_buffers", "prim_func_source", "parse_prim_func", "check_dtype",
           "native_lanes", "SUPPORTED_DTYPES"]

#: Value dtypes the executors are generated for.
SUPPORTED_DTYPES = ("float32", "float64")

@dataclass(frozen=True)
class Buffer:
    """One buffer parameter: handle name, buffer name, shape expressions, dtype.

    ``align``: the data alignment (bytes) the kernel may assume; ``0`` keeps
    TVM's default (64 bytes), right for arrays the executor allocates itself.
    """

    handle: str
    name: str
    shape: tuple[str, ...]
    dtype: str
    align: int = 0


def prim_func_source(name: str, buffers: Sequence[Buffer], scalars: Sequence[tuple[str, str]],
                     size_vars: Sequence[str], body: Code) -> str:
    """Assemble a ``@T.prim_func(s_tir=True)`` source text.

    ``scalars`` are ``(name, dtype)`` runtime scalar parameters; ``size_vars``
    the symbolic ``T.int32()`` sizes bound by the buffers' shapes.
    """
    params = [f"{b.handle}: T.handle" for b in buffers] + [f"{n}: T.{d}" for n, d in scalars]
    out = Code()
    out("@T.prim_func(s_tir=True)")
    with out.block(f"def {name}({', '.join(params)}):"):
        out('T.func_attr({"global_symbol": "main", "tirx.noalias": True})')
        for v in size_vars:
            out(f"{v} = T.int32()")
        for b in buffers:
            shape = ", ".join(b.shape) + ("," if len(b.shape) == 1 else "")
            align = f", align={b.align}" if b.align else ""
            out(f'{b.name} = T.match_buffer({b.handle}, ({shape}), "{b.dtype}"{align})')
        out.extend(body)
    return out.text() + "\n"


def check_dtype(dtype, what: str = "dtype") -> str:
    """Normalise a value dtype to ``"float32"``/``"float64"`` or raise :class:`InputError`."""
    try:
        name = np.dtype(dtype).name
    except TypeError as exc:
        raise InputError(f"{what}: not a dtype: {dtype!r}") from exc
    if name not in SUPPORTED_DTYPES:
        raise InputError(f"{what}: executors support {', '.join(SUPPORTED_DTYPES)}, got {name}")
    return name


def native_lanes(dtype: str, target=None) -> int:
    """SIMD lanes of ``dtype`` on the target: 16 fp32 with AVX-512, 8 with AVX2, else 4.

    >>> native_lanes("float64") in (2, 4, 8)
    True
    """
    width = _vector_bytes(target)
    return max(1, width // np.dtype(dtype).itemsize)


def _vector_bytes(target) -> int:
    return target_facts(target).vector_bytes


def accumulator_registers(target=None) -> int:
    """Vector registers an executor's accumulator tile may take on the target (24 of AVX-512's 32, 12 of AVX2's 16).

    >>> accumulator_registers({"kind": "llvm", "mcpu": "haswell"})
    12
    """
    return target_facts(target).accumulator_registers


def target_facts(target=None):
    """The :class:`tvm_ext.target.HardwareFacts` of an llvm ``target`` (None: the host's, cached)."""
    if target is None:  # the host's: asked on every executor build, and a Target costs ~50 us to make
        return _host_facts()
    return _llvm_facts(target)


@functools.lru_cache(maxsize=1)
def _host_facts():
    return _llvm_facts(None)


def _llvm_facts(target):
    from tvm_ext.target import hardware_facts, resolve_target

    tgt = resolve_target(target)
    if tgt.kind.name != "llvm":
        raise ConfigError(f"target {tgt.kind.name!r}: the sparse executors are built for llvm (CPU)")
    return hardware_facts(tgt)


@contextmanager
def parallel_items(code: Code, var: str, extent: str, parallel: bool,
                   part: str = "part", count: str = "NP",
                   prologue: Callable[[Code], None] | None = None,
                   epilogue: Callable[[Code], None] | None = None,
                   dynamic: bool = False) -> Iterator[None]:
    """Loop ``var`` over items: ``T.parallel`` over the parts of the ``part``
    boundary array (``count`` entries), or a plain serial ``range(extent)``.
    ``prologue(code)`` / ``epilogue(code)`` are emitted in each part before /
    after its items (parallel only).

    ``dynamic``: the threads claim parts at run time (``tvmext_atomic_add`` of
    ``csrc/tvmext_p2p.c``, which must be loaded; OpenMP's dynamic schedule)
    instead of each running a fixed share, so a thread the OS holds back
    leaves its parts to the others.  The iterations of the first half of the
    parallel loop claim parts from the front, the others from the back (a
    shared count of claimed parts keeps the two ends from crossing): with two
    threads each sweeps contiguous rows, as in the fixed shares, and keeps the
    band of ``B`` its neighbouring parts reuse in its cache.  Each iteration
    claims until none is left (the first per thread drains its end, the rest
    find nothing).  No prologue or epilogue: a part has no fixed thread.
    """
    if parallel and dynamic:
        if prologue is not None or epilogue is not None:
            raise ConfigError("parallel_items: a dynamic schedule has no per-part prologue or epilogue")

        def claim() -> None:  # part_claim[t]: the next part from this iteration's end, or -1
            add = 'T.call_extern("int32", "tvmext_atomic_add", T.address_of(part_next[0]), {}, 1)'
            code("part_claim[t] = -1")
            with code.block(f"if {add.format(0)} < {count} - 1:"):
                with code.block(f"if t * 2 < {count} - 1:"):
                    code(f"part_claim[t] = {add.format(1)}")
                with code.block("else:"):
                    code(f"part_claim[t] = {count} - 2 - {add.format(2)}")

        code('part_next = T.alloc_buffer((3,), "int32")')
        code(f'part_claim = T.alloc_buffer(({count},), "int32")')
        with code.block("for c in range(3):"):
            code("part_next[c] = 0")
        with code.block(f"for t in T.parallel({count} - 1):"):
            claim()
            with code.block("while part_claim[t] >= 0:"):
                with code.block(f"for {var} in range({part}[part_claim[t]], {part}[part_claim[t] + 1]):"):
                    yield
                claim()
    elif parallel:
        with code.block(f"for t in T.parallel({count} - 1):"):
            if prologue is not None:
                prologue(code)
            with code.block(f"for {var} in range({part}[t], {part}[t + 1]):"):
                yield
            if epilogue is not None:
                epilogue(code)
    else:
        with code.block(f"for {var} in range({extent}):"):
            yield


#: A dynamically scheduled kernel gets at least this many stored entries per part (a claim is
#: one atomic on a shared line, ~0.1 us), and at most ``parts_per_thread`` parts per thread.
DYNAMIC_PART_WORK = 4096


def dynamic_parts(params, threads: int, work: int) -> int:
    """Parts of a parallel kernel: ``params.n_parts(threads)``, fewer for a dynamic schedule
    on little ``work`` (at least :data:`DYNAMIC_PART_WORK` entries each, one per thread).

    >>> from schedules.sparse.executors.spec import ExecParams
    >>> dynamic_parts(ExecParams(parallel=True, parts_per_thread=16), 2, 10**6)
    32
    """
    parts = params.n_parts(threads)
    if not getattr(params, "dynamic", False):
        return parts
    return int(min(parts, max(int(threads), int(work) // DYNAMIC_PART_WORK, 1)))


def resolve_dynamic(params):
    """``params`` with ``dynamic`` decided: a parallel kernel claims its parts at run time
    when ``dynamic`` is True, or None and the atomics helper (``csrc/tvmext_p2p.c``) loads (no
    C compiler: the fixed shares); it is loaded here, before any such kernel is built or
    loaded."""
    import dataclasses

    want = params.parallel and params.dynamic is not False
    if want:
        from schedules.sparse.native import load_native

        try:
            load_native("tvmext_p2p.c", user="the dynamically scheduled sparse executors",
                        alternative="the executors keep fixed shares (dynamic=False)")
        except ConfigError:
            if params.dynamic:
                raise
            want = False
    return dataclasses.replace(params, dynamic=bool(want))


def dense_alignment(dtype: str) -> int:
    """Byte alignment the kernels declare for dense operands: one element of ``dtype``.

    >>> dense_alignment("float32")
    4
    """
    return np.dtype(dtype).itemsize


def dense_buffers(kind: str, dtype: str, in_rows: str = "K", out_rows: str = "M") -> list[Buffer]:
    """``B``, ``C_in``, ``C_out`` buffers (2-D for SpMM, 1-D for SpMV).

    They are declared with one element's alignment, not TVM's default 64
    bytes: the executors view the caller's numpy arrays through DLPack without
    copying, numpy only guarantees element alignment (``B[1:]`` starts
    anywhere), and the 64-byte promise lets LLVM emit aligned vector moves that
    fault on such arrays (DIA's did).  Unaligned moves on aligned data cost
    nothing measurable: over CSR/BCSR/SELL/DIA/ELL/COO at N = 1, 8, 32 on
    3.2 M-nnz and 1.2 M-nnz matrices, element-aligned kernels ran at a geomean
    of 0.98x the time of 64-byte-aligned ones (every case within noise).
    """
    b = (in_rows, "N") if kind == "spmm" else (in_rows,)
    c = (out_rows, "N") if kind == "spmm" else (out_rows,)
    align = dense_alignment(dtype)
    return [Buffer("b", "B", b, dtype, align), Buffer("c_in", "C_in", c, dtype, align),
            Buffer("c_out", "C_out", c, dtype, align)]
