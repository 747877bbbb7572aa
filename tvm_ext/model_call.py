"""Calling a compiled Relax VM function on numpy arrays, with no copies either way.

:class:`NumpyCall` is what ``model(x)`` runs (:class:`tvm_ext.compile.CompiledModel`):

* **inputs** go to the VM as DLPack views of the caller's arrays: the kernels
  read the numpy buffers in place.  On the hot path the array itself is the
  argument of the VM function, and the FFI call takes its DLPack view (no
  Python-level tensor object per call); otherwise ``tvm_ffi.from_dlpack``
  builds the view.  Read-only arrays are viewed through a writable alias (a
  Relax function never writes its parameters).
* **outputs** come back as ``np.from_dlpack`` views of the tensors the VM
  allocated and wrote; each array's ``base`` chain holds the tensor alive.
* the checks on the hot path are O(1) per input (type, shape, dtype and one
  test of numpy's flags word: contiguous, aligned, writable), against a plan of the parameters built
  once; only a call that fails one of them takes the slow path, which either
  raises one :class:`~tvm_ext.errors.InputError` naming the input with its
  expected shape and dtype, or fixes alignment.

**Two hot paths.** :attr:`NumpyCall.call` is the C function of
:mod:`tvm_ext.native_call` when it can be built (a C compiler and the headers
of Python, numpy and tvm_ffi; ``call_path == "native"``): the same checks, the
input views, the FFI call and the output views (of one tensor or a tuple of
tensors) in one C call, no Python frame or temporary object between (what
counts when a long model has evicted the caches).  Without it (or for a function that is no ``tvm_ffi.Function``) it is
:func:`_hot_path`, the same steps in one Python frame (``call_path ==
"python"``).  Both give the same arrays and the same errors; each hands a call
it refuses to the same checked path.

**Alignment.** A module built by ``tvm_ext.compile`` declares its kernels'
parameters aligned to one element
(:mod:`tvm_ext.compile_steps.param_alignment`), so any C-contiguous input is
read in place, wherever numpy put it (``alignment=0``, the default).  A module
built with TVM's own declarations (64-byte aligned: LLVM may emit aligned
vector moves, and a misaligned input can crash a kernel) is called with
``alignment=64``: an input off a 64-byte boundary is then copied once into an
aligned buffer (counted in :attr:`NumpyCall.aligned_copies`).  A
non-contiguous input is an error, not a silent copy.

**Outputs** come from the VM's pooled allocator: the buffer of an output goes
back to the pool only when its last view (the numpy array included) is freed,
so an array the caller keeps is never overwritten, while steady-state calls
get buffers whose pages are already mapped.

>>> import numpy as np, tvm
>>> from tvm import relax
>>> bb = relax.BlockBuilder()
>>> x = relax.Var("x", relax.TensorType((2, 3), "float32"))
>>> with bb.function("main", [x]):
...     _ = bb.emit_func_output(bb.emit(relax.op.add(x, x)))
>>> vm = relax.VirtualMachine(tvm.compile(bb.get(), "llvm"), tvm.cpu())
>>> call = NumpyCall(vm, [("x", (2, 3), "float32")], alignment=64)
>>> call(np.ones((2, 3), "float32"))[0].tolist()
[[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from tvm_ext.errors import InputError, ShapeError
from tvm_ext.native_call import native_call
from tvm_ext.zero_copy import as_tvm_view, is_aligned

__all__ = ["NumpyCall", "numpy_outputs"]


def numpy_outputs(value: Any) -> list[np.ndarray]:
    """A VM result (tensor, or nested tuple of tensors) as a flat list of numpy views (no copy).

    >>> import tvm
    >>> t = tvm.runtime.tensor(np.arange(3, dtype="float32"))
    >>> [a.tolist() for a in numpy_outputs(t)]
    [[0.0, 1.0, 2.0]]
    """
    import tvm_ffi

    if isinstance(value, tvm_ffi.Tensor):
        return [np.from_dlpack(value)]
    if value is None:
        return []
    if isinstance(value, (tvm_ffi.Array, list, tuple)):
        out: list[np.ndarray] = []
        for v in value:
            out += numpy_outputs(v)
        return out
    return [np.asarray(value)]  # a shape or a scalar the function returns


#: numpy's array flags (``ndarray.flags.num``, NPY_ARRAY_* of numpy's C API) an input needs to go to the
#: VM function as it is: C_CONTIGUOUS (0x1) | ALIGNED (0x100, to its element) | WRITEABLE (0x400; numpy
#: exports a read-only array through no DLPack version the FFI reads).
_IN_PLACE = 0x1 | 0x100 | 0x400
#: "no positional input given" in the one-input hot path (an input may be None, so None cannot say it)
_MISSING = object()


def _describe(shape: tuple[int, ...], dtype: np.dtype) -> str:
    return f"shape {shape} {dtype.name}"


def _hot_path(function: Any, checks: list[tuple[tuple[int, ...], np.dtype]], tensor_type: type,
              checked_call: Any, *, in_place: bool) -> Any:
    """``call(*inputs, **named)`` for one VM function: the in-place fast path, else ``checked_call``.

    An input goes to ``function`` as it is (the FFI call takes its DLPack view) when it is an ndarray
    of the planned shape and dtype and its flags word says C-contiguous, element-aligned and
    writable; every other call, and every call when ``in_place`` is false (kernels that assume more
    than element alignment), goes to ``checked_call(inputs, named)``.

    The path is one Python frame whose names are closure cells, with a branch of its own for a
    one-input function (its input positional-only, so the call builds no argument tuple), and a
    dtype compared by identity first (numpy hands out one descriptor per builtin dtype): after a
    model's kernels have evicted the caches, every bytecode, attribute lookup and temporary object
    of this layer is a cache (and TLB) miss, microseconds in all (``bench.call_overhead`` times
    each step warm and after a cache sweep), so it does as little as the checks allow.  (Leaving
    shape and dtype to the VM function's own test of its parameters measured no faster after a
    cache sweep: the array's header is read by the DLPack export anyway.)

    >>> import tvm_ffi
    >>> t = type(tvm_ffi.from_dlpack(np.zeros(1, "float32")))
    >>> call = _hot_path(lambda x: tvm_ffi.from_dlpack(x), [((3,), np.dtype("float32"))], t,
    ...                  lambda inputs, named: "checked", in_place=True)
    >>> call(np.ones(3, "float32"))[0].tolist(), call(np.ones(4, "float32")), call(np.ones(6, "float32")[::2])
    ([1.0, 1.0, 1.0], 'checked', 'checked')
    """
    ndarray, to_numpy, flags_needed = np.ndarray, np.from_dlpack, _IN_PLACE
    if not in_place:
        def call(*inputs: Any, **named: Any) -> list[np.ndarray]:
            return checked_call(inputs, named)
    elif len(checks) == 1:
        ((shape, dtype),) = checks
        missing = _MISSING

        def call(x: Any = missing, /, *more: Any, **named: Any) -> list[np.ndarray]:
            # ``x`` positional-only: model(x) builds no argument tuple (``more`` is the empty singleton)
            if type(x) is ndarray and not more and not named and x.shape == shape \
                    and (x.dtype is dtype or x.dtype == dtype) and x.flags.num & flags_needed == flags_needed:
                out = function(x)
                return [to_numpy(out)] if type(out) is tensor_type else numpy_outputs(out)
            return checked_call(more if x is missing else (x, *more), named)
    else:
        arity = len(checks)

        def call(*inputs: Any, **named: Any) -> list[np.ndarray]:
            if len(inputs) == arity and not named:
                for (shape, dtype), x in zip(checks, inputs):
                    if not (type(x) is ndarray and x.shape == shape and (x.dtype is dtype or x.dtype == dtype)
                            and x.flags.num & flags_needed == flags_needed):
                        return checked_call(inputs, named)
                out = function(*inputs)
                return [to_numpy(out)] if type(out) is tensor_type else numpy_outputs(out)
            return checked_call(inputs, named)
    return call


class NumpyCall:
    """One VM function called on numpy arrays: DLPack views in, DLPack views out.

    ``specs``: ``(name, shape, dtype)`` of each parameter, in order.  Inputs are
    positional, or by name (``call(x=...)``).  ``alignment``: the bytes the
    kernels assume of an input's address (0: one element; see the module
    docstring).  ``native``: use the C call path when it can be built (see
    :attr:`call_path`).
    """

    def __init__(self, vm: Any, specs: Sequence[tuple[str, Sequence[int], Any]], function: str = "main", *,
                 alignment: int = 0, native: bool = True):
        import tvm_ffi

        self.specs = [(str(n), tuple(int(d) for d in s), np.dtype(dt)) for n, s, dt in specs]
        self.names = [n for n, _, _ in self.specs]
        self.alignment = int(alignment)
        self.native = native
        self._inputs = _CheckedInputs(self.specs, self.alignment)
        self._tensor_type = type(tvm_ffi.from_dlpack(np.zeros(1, "float32")))  # what the VM returns
        self.function = vm[function]  # looked up once, not at every call; builds :attr:`call`

    @property
    def function(self) -> Any:
        """The VM function this calls; setting it rebuilds :attr:`call` around the new one."""
        return self._function

    @function.setter
    def function(self, fn: Any) -> None:
        self._function = fn
        tensors, tensor_type = self._inputs.tensors, self._tensor_type

        def checked_call(inputs: Sequence[Any], named: dict[str, Any]) -> list[np.ndarray]:
            """Inputs the hot path did not take: checked views (one clear error, or a copy of a
            misaligned input), then the function.  (It holds no reference to this object, so a
            dropped model is freed at once, not by the cycle collector.)"""
            out = fn(*tensors(inputs, named))
            return [np.from_dlpack(out)] if type(out) is tensor_type else numpy_outputs(out)

        plan = [(s, d) for _, s, d in self.specs]
        native = native_call(fn, plan, checked_call, numpy_outputs, alignment=self.alignment) \
            if self.native else None
        #: ``call(*inputs, **named)``: what ``model(x)`` runs: the C path of :mod:`tvm_ext.native_call`
        #: when ``fn`` is a ``tvm_ffi.Function`` and the path could be built, else :func:`_hot_path`
        self.call = native if native is not None else _hot_path(fn, plan, tensor_type, checked_call,
                                                                in_place=not self.alignment)
        #: which of the two :attr:`call` is: ``"native"`` or ``"python"``
        self.call_path = "python" if native is None else "native"

    @property
    def aligned_copies(self) -> int:
        """Inputs copied because they were off the kernels' alignment (the only copies this path makes)."""
        return self._inputs.aligned_copies

    def __call__(self, *inputs: Any, **named: Any) -> list[np.ndarray]:
        """Run the function; the outputs as numpy arrays over the VM's own buffers (see :attr:`call`)."""
        return self.call(*inputs, **named)

    def tensors(self, inputs: Sequence[Any], named: dict[str, Any] | None = None) -> list:
        """The inputs as TVM tensors over the caller's memory (checked; no copy unless misaligned)."""
        return self._inputs.tensors(inputs, named)


class _CheckedInputs:
    """The inputs of one VM function, checked against a plan built once, as TVM tensors (DLPack
    views; an aligned copy of an input off the kernels' alignment, counted)."""

    def __init__(self, specs: list[tuple[str, tuple[int, ...], np.dtype]], alignment: int):
        import tvm_ffi

        self.specs, self.alignment = specs, alignment
        self.names = [n for n, _, _ in specs]
        #: per parameter: (shape, dtype, the address alignment DLPack must check), built once
        self._plan = [(s, d, alignment or d.itemsize) for _, s, d in specs]
        self.aligned_copies = 0
        self._from_dlpack = tvm_ffi.from_dlpack

    def tensors(self, inputs: Sequence[Any], named: dict[str, Any] | None = None) -> list:
        """The inputs as TVM tensors over the caller's memory (checked; no copy unless misaligned)."""
        if named or len(inputs) != len(self._plan):
            inputs = self._arrange(inputs, named or {})
        from_dlpack, out = self._from_dlpack, []
        for (shape, dtype, align), a in zip(self._plan, inputs):
            if type(a) is np.ndarray and a.shape == shape and a.dtype == dtype:
                try:  # from_dlpack checks contiguity and alignment; read-only arrays raise BufferError
                    out.append(from_dlpack(a, require_alignment=align, require_contiguous=True))
                    continue
                except (ValueError, BufferError, RuntimeError):
                    pass
            out.append(self._slow_input(len(out), a))
        return out

    def _arrange(self, inputs: Sequence[Any], named: dict[str, Any]) -> list[Any]:
        """Positional + named inputs in parameter order; one error for a missing or extra one."""
        specs = self.specs
        expected = ", ".join(f"{n} ({_describe(s, d)})" for n, s, d in specs)
        if len(inputs) > len(specs):
            raise InputError(f"the model takes {len(specs)} inputs ({expected}), got {len(inputs)}")
        unknown = [k for k in named if k not in self.names]
        if unknown:
            raise InputError(f"unknown input {unknown[0]!r}; the model's inputs are {expected}")
        given = dict(zip(self.names, inputs))
        twice = [k for k in named if k in given]
        if twice:
            raise InputError(f"input {twice[0]!r} given both by position and by name")
        given.update(named)
        for n, s, d in specs:
            if n not in given:
                raise InputError(f"the model takes {len(specs)} inputs ({expected}), got {len(given)}: "
                                 f"missing input {n!r} ({_describe(s, d)})")
        return [given[n] for n in self.names]

    def _slow_input(self, index: int, a: Any):
        """Input ``index`` the fast path refused: one clear error, or a view (read-only) / aligned copy."""
        name, shape, dtype = self.specs[index]
        what = f"input {name!r}"
        arr = a if isinstance(a, np.ndarray) else np.asarray(a)
        if arr.shape != shape:
            raise ShapeError(f"{what}: expected {_describe(shape, dtype)}, got shape {arr.shape}")
        if arr.dtype != dtype:
            raise InputError(f"{what}: expected {_describe(shape, dtype)}, got dtype {arr.dtype.name}; "
                             f"convert it with .astype({dtype.name!r})")
        if not arr.flags.c_contiguous:
            raise InputError(f"{what}: not C-contiguous (strides {arr.strides}); the model reads its inputs "
                             f"in place: pass np.ascontiguousarray({name})")
        if not arr.flags.aligned or (self.alignment and not is_aligned(arr, self.alignment)):
            self.aligned_copies += 1
        return as_tvm_view(arr, alignment=self.alignment, copy_misaligned=True, name=what)
