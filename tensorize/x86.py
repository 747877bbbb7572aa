"""ISA Mapper §7 ("ISAM-TVM") and §6.1: x86 implementations of mapped instructions.

Three implementations of an :class:`~tensorize.intrin_spec.IntrinSpec` on x86, registered
for ISA ``"x86"``:

* ``"micro"`` — a register-blocked FMA micro-kernel.  The output tile lives in a
  ``local`` buffer that LLVM promotes to vector registers; the reduction axes run
  outermost, the non-vector spatial axes are unrolled and the unit-stride axis is
  vectorised, so each k step is ``MR x NR/lanes`` vector FMAs (``vfmadd231ps zmm``
  with AVX-512, ``ymm`` with AVX2).  The tile comes from the target's
  :func:`~tvm_ext.target.hardware_facts` (the target in scope, ``with target:``,
  else the host): lanes from its vector width, rows from its register file.
* ``"blas"`` — a BLAS-like pseudo-instruction: one ``call_extern`` of
  ``tvmext_sgemm_acc`` (``csrc/tvmext_gemm.c``, built at run time by TVM's
  ``cc.create_shared`` into the kernel cache directory) per tile, with every operand passed
  as a pointer plus a row and a column stride.
* ``"packed"`` — a packed call to a Python function that runs the tile's
  contraction with ``numpy.einsum`` (OpenBLAS for matmul-shaped tiles).

Example::

    >>> from tensorize.tensor_intrin import get_implementation
    >>> impl = get_implementation("x86", "micro")
    >>> impl.accumulate_local
    True
"""
from __future__ import annotations

import ctypes
import hashlib
import re
import threading
from contextlib import ExitStack
from pathlib import Path

from tvm_ext.errors import ScheduleError
from tvm_ext.tvmscript_text import Code

from .intrin_spec import IntrinSpec, OperandSpec
from .tensor_intrin import Implementation, intrin_function, register_implementation

__all__ = [
    "attach_to_isa",
    "IMPLEMENTS",
    "MicroKernel",
    "BlasCall",
    "PackedCall",
    "build_gemm_library",
    "count_vector_fma",
]


def _facts():
    from tvm_ext.target import hardware_facts

    return hardware_facts()


def _lanes(dtype: str) -> int:
    return _facts().lanes(dtype)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _pick(extent: int, prefs: list[int], fixed: int | None) -> int:
    """``fixed`` if given (clamped), else the first preference dividing ``extent``,
    else the whole extent when it is small, else the first preference (padded)."""
    if fixed:
        return min(int(fixed), extent)
    for p in prefs:
        if p <= extent and extent % p == 0:
            return p
    return extent if extent <= max(prefs) else prefs[0]


def _rows(extent: int, budget: int) -> int:
    """Rows of the register tile: the largest divisor of ``extent`` within ``budget``
    (at least 4 unless the extent is smaller), else ``min(8, budget)`` with padding."""
    if extent <= budget:
        return extent
    divs = [d for d in _divisors(extent) if d <= budget]
    best = max(divs)
    return best if best >= min(4, budget) else min(8, budget)


# ---------------------------------------------------------------------------
# micro: register-blocked FMA micro-kernel
# ---------------------------------------------------------------------------
class MicroKernel(Implementation):
    """MR x NR accumulator tile in registers, updated once per reduction step.

    >>> MicroKernel().name
    'micro'
    """

    name = "micro"
    isa = "x86"
    accumulate_local = True

    def check(self, spec: IntrinSpec) -> None:
        if not spec.dtype.startswith("float"):
            raise ScheduleError(f"micro-kernel: dtype {spec.dtype} is not a float type")

    def tiles(self, spec: IntrinSpec, fixed: dict[str, int | None]) -> dict[str, int]:
        """NR on the vector axis (2 or 1 vectors), MR on the row axis (as many rows as the
        accumulator registers allow), 1 on other spatial axes, the whole reduction.

        Extents without a fitting divisor get the preferred size and are padded.  With
        fewer rows than the register tile has (a recurrent ``h @ U`` at batch 1-4), the
        vector tile widens until there are enough independent accumulators to hide the FMA
        latency (``rows x vectors >= FMA units x latency``, Low et al. 2016).
        """
        from tvm_ext.target import gemm_blocking

        ext = spec.extent
        facts = _facts()
        lanes = facts.lanes(spec.dtype)
        nr = gemm_blocking(facts, spec.dtype).nr
        vec, row = spec.vector_axis, spec.row_axis
        tile: dict[str, int] = {}
        if vec is not None:
            prefs = [nr, lanes, 2 * lanes, 4 * lanes, 3 * lanes]
            rows = min(int(fixed.get(row) or ext[row]), ext[row]) if row is not None else 1
            need = -(-facts.fma_per_cycle * facts.fma_latency // rows)  # vectors per row to hide latency
            if need * lanes > nr:
                wide = min(need, max(facts.accumulator_registers // rows, 1))
                prefs = [wide * lanes, *range((wide - 1) * lanes, nr, -lanes), *prefs]
            tile[vec] = _pick(ext[vec], list(dict.fromkeys(prefs)), fixed.get(vec))
        nvec = -(-tile.get(vec, 1) // lanes) if vec else 1
        for a in spec.spatial:
            if a not in (vec, row):
                tile[a] = min(int(fixed.get(a) or 1), ext[a])
        others = _prod(tile[a] for a in spec.spatial if a not in (vec, row))
        budget = max(facts.accumulator_registers // (nvec * others), 1)  # MR: what the other axes leave
        if row is not None:
            tile[row] = int(fixed.get(row) or _rows(ext[row], budget))
            tile[row] = min(tile[row], ext[row])
        for a in spec.reduction:
            tile[a] = min(int(fixed.get(a) or ext[a]), ext[a])
        regs = nvec * _prod(tile[a] for a in spec.spatial if a != vec)
        if regs > facts.vector_registers:  # beyond the register file the accumulators would spill
            raise ScheduleError(f"micro-kernel: tile {tile} needs {regs} accumulator registers "
                                f"(the target has {facts.vector_registers} {facts.vector_bits}-bit registers)")
        return tile

    def impl_source(self, spec: IntrinSpec) -> str:
        ext = spec.extent
        vec = spec.vector_axis
        unroll_budget = _prod(ext[a] for a in spec.spatial if a != vec)
        order = [(a, "range", ext[a]) for a in spec.reduction]
        expr, out = spec.expr, spec.output.ref()
        ku = self._k_unroll(spec)
        if ku > 1:  # the innermost reduction axis in steps of ku, the ku FMA rows unrolled
            a = spec.reduction[-1]
            order[-1] = (f"{a}_o", "range", ext[a] // ku)
            order.append((f"{a}_u", "T.unroll", ku))
            expr = re.sub(rf"\bv_{a}\b", f"(v_{a}_o * {ku} + v_{a}_u)", expr)
        kind = "T.unroll" if unroll_budget <= 64 else "range"
        order += [(a, kind, ext[a]) for a in spec.spatial if a != vec]
        if vec is not None:
            order.append((vec, "T.vectorized", ext[vec]))
        code = Code()
        with intrin_function(code, spec, strided=True), ExitStack() as loops:
            for a, k, n in order:
                loops.enter_context(code.block(f"for v_{a} in {k}({n}):"))
            code(f"{out} = {expr}")
        return code.text() + "\n"

    #: Unroll of the reduction loop (None: the target's :func:`~tvm_ext.target.gemm_blocking`).
    k_unroll: int | None = None

    def _k_unroll(self, spec: IntrinSpec) -> int:
        """The K unroll that divides the innermost reduction extent (1 when none does or no reduction)."""
        from tvm_ext.target import gemm_blocking

        if not spec.reduction:
            return 1
        want = self.k_unroll if self.k_unroll is not None else gemm_blocking(_facts(), spec.dtype).k_unroll
        n = spec.extent[spec.reduction[-1]]
        return want if 1 < want < n and n % want == 0 else 1


def _prod(xs) -> int:
    out = 1
    for x in xs:
        out *= int(x)
    return out


# ---------------------------------------------------------------------------
# blas: BLAS-like pseudo-instruction through call_extern
# ---------------------------------------------------------------------------
def _contraction_roles(spec: IntrinSpec) -> tuple[str, str, str, OperandSpec, OperandSpec]:
    """(i, j, k, A, B) for ``C[i,j] += A[i,k] * B[k,j]`` in any dim order, or ScheduleError."""
    why = None
    if len(spec.spatial) != 2 or len(spec.reduction) != 1 or len(spec.inputs) != 2:
        why = (f"needs 2 spatial + 1 reduction axes and 2 inputs, got axes "
               f"{dict(zip(spec.axes, spec.kinds))} and {len(spec.inputs)} inputs")
    elif not spec.is_product_update():
        why = f"update is not C + A * B: {spec.expr}"
    else:
        x, y = spec.inputs
        k = spec.reduction[0]
        s0, s1 = spec.spatial
        if spec.vector_axis == s0:
            s0, s1 = s1, s0
        a = next((op for op in (x, y) if op.single and set(op.axes) == {s0, k}), None)
        b = next((op for op in (x, y) if op.single and set(op.axes) == {s1, k}), None)
        if a is None or b is None or a is b or not spec.output.single:
            why = f"operands do not index (i,k) and (k,j): {x.axes}, {y.axes}"
        else:
            return s0, s1, k, a, b
    raise ScheduleError(f"blas pseudo-instruction: {why}")


def _stride_expr(op: OperandSpec, axis: str) -> str:
    """Element stride of ``axis`` in ``op``: the dim's stride times the axis' coefficient."""
    d = op.dim_of(axis)
    base = "1" if (op.unit_stride and d == op.dims[-1]) else f"s_{op.name}_{d}"
    c = op.coef_of(axis)
    return base if c == 1 else f"{base} * {c}"


class BlasCall(Implementation):
    """One ``tvmext_sgemm_acc(M, N, K, C, rs, cs, A, rs, cs, B, rs, cs)`` call per tile.

    >>> BlasCall().accumulate_local
    False
    """

    name = "blas"
    isa = "x86"
    accumulate_local = False
    honors_instruction_sizes = False  # one call covers a whole (row-split) GEMM, whatever the register tile
    symbol = "tvmext_sgemm_acc"

    def check(self, spec: IntrinSpec) -> None:
        if spec.dtype != "float32":
            raise ScheduleError(f"blas pseudo-instruction: float32 only, got {spec.dtype}")
        _contraction_roles(spec)

    def tiles(self, spec: IntrinSpec, fixed: dict[str, int | None]) -> dict[str, int]:
        from tvm_ext.target import num_threads

        i, j, k, _, _ = _contraction_roles(spec)
        ext = spec.extent
        tile = {j: _pick(ext[j], [ext[j]], fixed.get(j)), k: _pick(ext[k], [ext[k]], fixed.get(k))}
        # split the row axis so every thread gets tiles even when nothing else is outer
        want = max(ext[i] // (2 * num_threads()), 1)
        divs = [d for d in _divisors(ext[i]) if d <= max(want, 1)]
        tile[i] = int(fixed.get(i) or (max(divs) if ext[i] >= 64 else ext[i]))
        return tile

    def impl_source(self, spec: IntrinSpec) -> str:
        i, j, k, a, b = _contraction_roles(spec)
        c = spec.output
        ext = spec.extent
        args = [str(ext[i]), str(ext[j]), str(ext[k]),
                f'{c.name}.access_ptr("rw")', _stride_expr(c, i), _stride_expr(c, j),
                f'{a.name}.access_ptr("r")', _stride_expr(a, i), _stride_expr(a, k),
                f'{b.name}.access_ptr("r")', _stride_expr(b, k), _stride_expr(b, j)]
        code = Code()
        with intrin_function(code, spec, strided=True):
            code(f'T.evaluate(T.call_extern("int32", "{self.symbol}", {", ".join(args)}))')
        return code.text() + "\n"

    def prepare(self) -> None:
        build_gemm_library()


_LIB_LOCK = threading.Lock()
_LIB: dict[str, ctypes.CDLL] = {}


def _compiler() -> str:
    from tvm_ext.kernel_cache import c_compiler

    return c_compiler("tensorize 'blas' implementation", "use impl='micro'")


def _arch_flags() -> list[str]:
    """``-march`` and ``-mprefer-vector-width`` for the target in scope: ``native`` when it is the
    host CPU, else its ``mcpu`` (LLVM's x86 CPU names are GCC's and Clang's too)."""
    from tvm_ext.target import default_target

    facts = _facts()
    host = str(default_target().attrs.get("mcpu", ""))
    march = "native" if facts.mcpu == host else facts.mcpu
    return [f"-march={march}", f"-mprefer-vector-width={facts.vector_bits}"]


def build_gemm_library() -> Path:
    """Compile ``csrc/tvmext_gemm.c`` once (per source, flags and host CPU) and load it RTLD_GLOBAL.

    The shared object goes to the checked kernel cache directory, or to this
    process's private ``mkdtemp`` directory when the disk cache is off or cannot
    be created (:func:`tvm_ext.kernel_cache.binary_dir`).  It is written
    atomically with a SHA-256 sidecar, and a library already there is loaded
    only if :func:`tvm_ext.kernel_cache.check_binary` accepts it; otherwise it
    is rebuilt and replaced.  Loading it globally lets JIT-compiled TVM modules
    and cached ``.so`` kernels resolve ``tvmext_sgemm_acc``.

    >>> build_gemm_library().name.startswith("libtvmext_gemm_")
    True
    """
    from tvm_ext.kernel_cache import load_c_library
    from tvm_ext.target import cpu_features, target_key

    src = Path(__file__).with_name("csrc") / "tvmext_gemm.c"
    flags = ["-O3", *_arch_flags()]
    # -march=native: a library built on another CPU (a shared home, or a VM showing the same
    # CPU name with other features) must not be reused, so the host's features are in the key
    key = b"\0".join([src.read_bytes(), " ".join(flags).encode(), target_key(None).encode(),
                      " ".join(cpu_features()).encode()])
    digest = hashlib.sha256(key).hexdigest()[:16]

    def build(out: str) -> None:
        from tvm.support import cc

        cc.create_shared(out, [str(src)], options=flags, cc=_compiler())  # adds -shared -fPIC

    with _LIB_LOCK:
        if digest in _LIB:
            return Path(_LIB[digest]._name)
        _LIB[digest] = load_c_library(f"libtvmext_gemm_{digest}.so", build=build,
                                      what=f"{src.name} (tensorize 'blas')")
        return Path(_LIB[digest]._name)


# ---------------------------------------------------------------------------
# packed: a Python packed function (numpy.einsum, OpenBLAS for matmul tiles)
# ---------------------------------------------------------------------------
PACKED_FUNC = "tvm_ext.tensorize.einsum_acc"
_LETTERS = "ijklmnopqrstuvwxyzabcdefgh"


def _einsum_code(spec: IntrinSpec) -> str:
    """``"_ij:1,1,1|..."``: per operand (output first) one letter per dim (``_`` where no
    axis indexes it) and the step of each dim (the axis' coefficient)."""
    letter = {a: _LETTERS[n] for n, a in enumerate(spec.axes)}
    parts = []
    for op in spec.operands:
        terms = dict(zip(op.dims, op.terms))
        subs = "".join(letter[terms[d][0][0]] if d in terms else "_" for d in range(op.rank))
        steps = [terms[d][0][1] if d in terms else 1 for d in range(op.rank)]
        parts.append(f"{subs}:{','.join(map(str, steps))}")
    return "|".join(parts)


def _tensor_view(t):
    """Writable numpy view of a strided DLTensor argument (``t.numpy()`` is wrong for views)."""
    import numpy as np

    dt = np.dtype(str(t.dtype))
    shape = tuple(int(n) for n in t.shape)
    strides = tuple(int(s) for s in t.strides) if t.strides is not None else None
    if strides is None:
        strides, acc = [], 1
        for n in reversed(shape):
            strides.insert(0, acc)
            acc *= n
        strides = tuple(strides)
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides))
    raw = (ctypes.c_byte * (span * dt.itemsize)).from_address(t.data_ptr())
    flat = np.ctypeslib.as_array(raw).view(dt)
    return np.lib.stride_tricks.as_strided(flat, shape, tuple(s * dt.itemsize for s in strides))


def _einsum_acc(*args):
    import numpy as np

    *tensors, code = args
    specs = [p.split(":") for p in str(code).split("|")]
    views, subs_all = [], []
    for t, (subs, steps) in zip(tensors, specs):
        v = _tensor_view(t)
        st = [int(x) for x in steps.split(",")]
        v = v[tuple(0 if ch == "_" else slice(None, None, step) for ch, step in zip(subs, st))]
        views.append(v)
        subs_all.append(subs.replace("_", ""))
    out, *ins = views
    eq = ",".join(subs_all[1:]) + "->" + subs_all[0]
    out += np.einsum(eq, *ins, optimize=len(ins) > 2)
    return 0


class PackedCall(Implementation):
    """One packed call per tile: ``C += einsum(A, B, ...)`` in numpy.

    >>> PackedCall().name
    'packed'
    """

    name = "packed"
    isa = "x86"
    accumulate_local = False
    honors_instruction_sizes = False
    parallel = False  # the Python callee holds the GIL

    def check(self, spec: IntrinSpec) -> None:
        if not all(op.single for op in spec.operands):
            raise ScheduleError("packed einsum instruction: an operand dim is indexed by several axes "
                                f"({spec.expr}); numpy.einsum cannot express it")
        if not spec.is_product_update():
            raise ScheduleError(f"packed einsum instruction: update is not C + product of inputs: {spec.expr}")

    def tiles(self, spec: IntrinSpec, fixed: dict[str, int | None]) -> dict[str, int]:
        return {a: _pick(n, [n], fixed.get(a)) for a, n in zip(spec.axes, spec.extents)}

    def impl_source(self, spec: IntrinSpec) -> str:
        names = ", ".join(op.name for op in spec.operands)
        code = Code()
        with intrin_function(code, spec, strided=True):
            code(f'T.evaluate(T.call_packed("{PACKED_FUNC}", {names}, "{_einsum_code(spec)}"))')
        return code.text() + "\n"

    def prepare(self) -> None:
        import tvm_ffi

        if tvm_ffi.get_global_func(PACKED_FUNC, allow_missing=True) is None:
            tvm_ffi.register_global_func(PACKED_FUNC, _einsum_acc, override=True)


def count_vector_fma(module, reg: str = "zmm") -> int:
    """Number of ``vfmadd...ps`` instructions on ``reg`` registers in a built module's asm.

    >>> count_vector_fma.__name__
    'count_vector_fma'
    """
    asm = module.inspect_source("asm") if hasattr(module, "inspect_source") else str(module)
    return len(re.findall(rf"vfmadd\w*p[sd]\s+[^\n]*%{reg}", asm))


#: Instruction kinds of the x86 ISA each implementation can execute.
IMPLEMENTS = {"micro": ("matmul", "conv1d", "axpy", "dot"), "blas": ("matmul",),
              "packed": ("matmul", "conv1d", "axpy", "dot")}


def attach_to_isa(isa_name: str = "x86") -> None:
    """Attach the implementations to the ISA registry's instructions (backend ``tvm.<name>``),
    so ``get_isa("x86").backends("matmul_8x32xk")`` lists them."""
    from tensorize.instructions import get_isa

    isa = get_isa(isa_name)
    for impl in (MICRO, BLAS, PACKED):
        for ins in isa:
            if ins.kind in IMPLEMENTS[impl.name]:
                isa.implement(ins.name, impl, backend=f"tvm.{impl.name}")


MICRO, BLAS, PACKED = MicroKernel(), BlasCall(), PackedCall()
for _impl in (MICRO, BLAS, PACKED):
    register_implementation(_impl, override=True)
attach_to_isa()
