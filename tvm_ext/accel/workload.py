"""The programs the accelerator runs: a small graph of tensor ops, each an ISAMIR kernel (ISA Mapper §2.1).

A :class:`Workload` holds tensors (:class:`TensorSpec`: inputs, weights,
state, temporaries, outputs) and ops in program order.  Every op is written
as an ISAMIR program over *canonical* buffer names (``A``, ``B``, ``C``,
...), so identical ops share one mapping search; :class:`View` binds each
canonical buffer to a tensor, possibly shifted (``offset``: a column block of
a fused gate matrix, or a negative offset that zero-pads a convolution's
input).  Reads outside a tensor see zeros and writes outside it are dropped,
which is also how tiles padded by the mapper's ``pad`` transform behave.

:meth:`Workload.reference` evaluates the graph in float64 numpy, independently
of ISAMIR and the scheduler, as the ground truth for checks.

>>> wl = Workload("mlp")
>>> x = wl.input("x", (4, 8)); w = wl.weight("w", (8, 16)); b = wl.weight("b", (16,))
>>> y = wl.relu(wl.bias_add(wl.matmul(x, w), b), out="y")
>>> [op.kind for op in wl.ops], wl.outputs
(['matmul', 'bias_add', 'relu'], ['y'])
>>> import numpy as np
>>> ins = {n: np.ones(wl.tensors[n].shape) for n in wl.inputs}
>>> float(wl.reference(ins)["y"][0, 0])
9.0
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from tvm_ext.errors import InputError, ShapeError

__all__ = ["TensorSpec", "View", "Op", "Workload", "ROLES", "UNARY_FUNCTIONS"]

#: Tensor roles: ``input`` (changes every call), ``weight`` (constant input,
#: may stay resident), ``state`` (read and overwritten: a recurrent state),
#: ``temp`` (internal), ``output``.
ROLES = ("input", "weight", "state", "temp", "output")
UNARY_FUNCTIONS = ("exp", "tanh", "sigmoid")
_BINARY = {"add": "+=", "sub": "-=", "mul": "*="}


@dataclass(frozen=True)
class TensorSpec:
    """A named float32 tensor of the workload."""

    name: str
    shape: tuple[int, ...]
    role: str
    dtype: str = "float32"

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


@dataclass(frozen=True)
class View:
    """``tensor`` seen through an offset: tensor index = buffer index + ``offset``."""

    tensor: str
    offset: tuple[int, ...]


@dataclass(frozen=True)
class Ref:
    """A rectangular block of a tensor (what op builders accept besides a name)."""

    tensor: str
    offset: tuple[int, ...]
    shape: tuple[int, ...]


@dataclass(frozen=True)
class Op:
    """One kernel: ISAMIR ``text`` over canonical buffers, bound to tensors by ``views``."""

    name: str
    kind: str
    text: str
    extents: tuple[tuple[str, int], ...]
    views: tuple[tuple[str, View], ...]
    attrs: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> tuple:
        """Identity of the kernel (without tensor names): ops with equal keys share a mapping."""
        return (self.text, self.extents)

    def view(self, buffer: str) -> View:
        return dict(self.views)[buffer]

    def attr(self, name: str, default: Any = None) -> Any:
        return dict(self.attrs).get(name, default)

    @property
    def output(self) -> str:
        return dict(self.views)["C"].tensor

    @property
    def input_tensors(self) -> list[str]:
        return [v.tensor for b, v in self.views if b != "C"]


@dataclass
class Workload:
    """Tensors plus ops in program order (see the module docstring)."""

    name: str = "workload"
    tensors: dict[str, TensorSpec] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    returns: list[str] = field(default_factory=list)  # output order when set (else role order)

    # -- tensors ---------------------------------------------------------------
    def _add(self, name: str, shape: Sequence[int], role: str) -> str:
        if role not in ROLES:
            raise InputError(f"workload {self.name}: unknown tensor role {role!r} (have {ROLES})")
        if not name.isidentifier():
            raise InputError(f"workload {self.name}: tensor name {name!r} is not an identifier")
        if name in self.tensors:
            raise InputError(f"workload {self.name}: tensor {name!r} already exists")
        shape = tuple(int(s) for s in shape)
        if not shape or any(s < 1 for s in shape):
            raise ShapeError(f"workload {self.name}: tensor {name!r} needs a non-empty positive shape, got {shape}")
        self.tensors[name] = TensorSpec(name, shape, role)
        return name

    def input(self, name: str, shape: Sequence[int]) -> str:
        return self._add(name, shape, "input")

    def weight(self, name: str, shape: Sequence[int]) -> str:
        return self._add(name, shape, "weight")

    def state(self, name: str, shape: Sequence[int]) -> str:
        """A tensor read and later overwritten in place by an op (``out=name``)."""
        return self._add(name, shape, "state")

    def block(self, tensor: str, offset: Sequence[int], shape: Sequence[int]) -> Ref:
        """A block of ``tensor`` usable as an op input (e.g. one gate of a fused matrix)."""
        spec = self._spec(tensor)
        offset, shape = tuple(int(o) for o in offset), tuple(int(s) for s in shape)
        if len(offset) != len(spec.shape) or len(shape) != len(spec.shape):
            raise ShapeError(f"block of {tensor}: offset/shape rank must be {len(spec.shape)}")
        if any(o < 0 or s < 1 or o + s > n for o, s, n in zip(offset, shape, spec.shape)):
            raise ShapeError(f"block of {tensor}: offset {offset} + shape {shape} leaves {spec.shape}")
        return Ref(tensor, offset, shape)

    def _spec(self, name: str) -> TensorSpec:
        try:
            return self.tensors[name]
        except KeyError:
            raise InputError(f"workload {self.name}: no tensor {name!r}") from None

    def _ref(self, x: "str | Ref") -> Ref:
        if isinstance(x, Ref):
            return x
        spec = self._spec(x)
        return Ref(spec.name, (0,) * len(spec.shape), spec.shape)

    def _out(self, out: str | None, shape: tuple[int, ...], reads: Sequence[Ref]) -> str:
        if out is None:
            return self._add(f"t{len(self.tensors)}", shape, "temp")
        if out in self.tensors:
            spec = self.tensors[out]
            if spec.role != "state":
                raise InputError(f"workload {self.name}: op output {out!r} exists and is not a state tensor")
            if spec.shape != shape:
                raise ShapeError(f"workload {self.name}: state {out!r} has shape {spec.shape}, op gives {shape}")
            return out
        return self._add(out, shape, "output")

    @property
    def inputs(self) -> list[str]:
        """Tensors the caller provides: inputs, weights and states (initial values)."""
        return [n for n, t in self.tensors.items() if t.role in ("input", "weight", "state")]

    @property
    def outputs(self) -> list[str]:
        """Tensors the caller gets back: outputs and states (final values), in :attr:`returns` order if set."""
        if self.returns:
            return list(self.returns)
        return [n for n, t in self.tensors.items() if t.role in ("output", "state")]

    def mark_output(self, name: str) -> None:
        """Make tensor ``name`` (a temporary) an output, appended to :attr:`returns`."""
        spec = self._spec(name)
        if spec.role == "temp":
            self.tensors[name] = TensorSpec(spec.name, spec.shape, "output", spec.dtype)
        elif spec.role not in ("output", "state"):
            raise InputError(f"workload {self.name}: {spec.role} tensor {name!r} cannot be an output")
        if name not in self.returns:
            self.returns.append(name)

    # -- ops -------------------------------------------------------------------
    def _emit(self, kind: str, text: str, extents: Mapping[str, int], views: Mapping[str, Ref], out: str,
              **attrs: Any) -> str:
        vs = tuple((b, View(r.tensor, r.offset)) for b, r in views.items())
        vs += (("C", View(out, (0,) * len(self.tensors[out].shape))),)
        self.ops.append(Op(f"op{len(self.ops)}_{kind}", kind, text, tuple(extents.items()), vs,
                           tuple(sorted(attrs.items()))))
        return out

    def matmul(self, a: "str | Ref", b: "str | Ref", out: str | None = None, *, transpose_b: bool = False) -> str:
        """``C = A @ B`` (``A @ B.T`` with ``transpose_b``: a dense layer's weight layout)."""
        A, B = self._ref(a), self._ref(b)
        if len(A.shape) != 2 or len(B.shape) != 2:
            raise ShapeError(f"matmul: operands must be 2-D, got {A.shape} and {B.shape}")
        M, K = A.shape
        N, K2 = (B.shape if transpose_b else B.shape[::-1])
        if K != K2:
            raise ShapeError(f"matmul: inner dimensions differ ({A.tensor} {A.shape}, {B.tensor} {B.shape}"
                             f"{', transposed' if transpose_b else ''})")
        bacc = "B[j][k]" if transpose_b else "B[k][j]"
        text = ("forall i,j,k { C[i][j] := 0; tmp[i][j][k] := A[i][k]; "
                f"tmp[i][j][k] *= {bacc}; C[i][j] += tmp[i][j][k]; }}")
        o = self._out(out, (M, N), (A, B))
        return self._emit("matmul_nt" if transpose_b else "matmul", text, {"i": M, "j": N, "k": K},
                          {"A": A, "B": B}, o)

    def bias_add(self, a: "str | Ref", bias: "str | Ref", out: str | None = None) -> str:
        """``C[i, j] = A[i, j] + bias[j]``."""
        A, b = self._ref(a), self._ref(bias)
        if len(A.shape) != 2 or len(b.shape) != 1 or b.shape[0] != A.shape[1]:
            raise ShapeError(f"bias_add: need A (M, N) and bias (N,), got {A.shape} and {b.shape}")
        o = self._out(out, A.shape, (A, b))
        return self._emit("bias_add", "forall i,j { C[i][j] := A[i][j]; C[i][j] += b[j]; }",
                          {"i": A.shape[0], "j": A.shape[1]}, {"A": A, "b": b}, o)

    def channel_bias_add(self, a: "str | Ref", bias: "str | Ref", out: str | None = None, *,
                         layout: str = "NCHW") -> str:
        """``C = A + bias`` for a 4-D ``A`` and a per-channel ``bias`` broadcast over the rest:
        ``(1, C, 1, 1)`` for ``NCHW``, ``(1, 1, 1, C)`` for ``NHWC`` (a conv layer's bias, a folded batch norm).

        >>> wl = Workload(); y = wl.channel_bias_add(wl.input("x", (1, 3, 4, 4)), wl.weight("b", (1, 3, 1, 1)))
        >>> wl.ops[0].kind, wl.tensors[y].shape
        ('channel_bias_add', (1, 3, 4, 4))
        """
        A, b = self._ref(a), self._ref(bias)
        if layout not in ("NCHW", "NHWC"):
            raise InputError(f"channel_bias_add: layout must be NCHW or NHWC, got {layout!r}")
        ch = 1 if layout == "NCHW" else 3
        want = tuple(A.shape[ch] if d == ch else 1 for d in range(4)) if len(A.shape) == 4 else None
        if want is None or b.shape != want:
            raise ShapeError(f"channel_bias_add: need a 4-D A and a bias of shape (A's channels on axis {ch}, "
                             f"ones elsewhere), got {A.shape} and {b.shape}")
        bidx = "[0][a1][0][0]" if layout == "NCHW" else "[0][0][0][a3]"
        text = "forall a0,a1,a2,a3 { C[a0][a1][a2][a3] := A[a0][a1][a2][a3]; C[a0][a1][a2][a3] += b" + bidx + "; }"
        return self._emit("channel_bias_add", text, dict(zip(("a0", "a1", "a2", "a3"), A.shape)), {"A": A, "b": b},
                          self._out(out, A.shape, (A, b)), layout=layout)

    def _binary(self, kind: str, a, b, out) -> str:
        A, B = self._ref(a), self._ref(b)
        if A.shape != B.shape:
            raise ShapeError(f"{kind}: operand shapes differ: {A.shape} vs {B.shape}")
        axes, idx, ext = _axes(A.shape)
        text = f"forall {axes} {{ C{idx} := A{idx}; C{idx} {_BINARY[kind]} B{idx}; }}"
        return self._emit(kind, text, ext, {"A": A, "B": B}, self._out(out, A.shape, (A, B)))

    def add(self, a, b, out: str | None = None) -> str:
        return self._binary("add", a, b, out)

    def sub(self, a, b, out: str | None = None) -> str:
        return self._binary("sub", a, b, out)

    def mul(self, a, b, out: str | None = None) -> str:
        return self._binary("mul", a, b, out)

    def _unary(self, kind: str, body: str, a, out, **attrs) -> str:
        A = self._ref(a)
        axes, idx, ext = _axes(A.shape)
        text = f"forall {axes} {{ {body.format(i=idx)} }}"
        return self._emit(kind, text, ext, {"A": A}, self._out(out, A.shape, (A,)), **attrs)

    def relu(self, a, out: str | None = None) -> str:
        return self._unary("relu", "C{i} := A{i}; C{i} max= 0;", a, out)

    def unary(self, fn: str, a, out: str | None = None) -> str:
        """``C = fn(A)`` for ``fn`` in :data:`UNARY_FUNCTIONS`."""
        if fn not in UNARY_FUNCTIONS:
            raise InputError(f"unary: unknown function {fn!r} (have {UNARY_FUNCTIONS})")
        return self._unary(fn, "C{i} := " + fn + "(A{i});", a, out)

    def sigmoid(self, a, out: str | None = None) -> str:
        return self.unary("sigmoid", a, out)

    def tanh(self, a, out: str | None = None) -> str:
        return self.unary("tanh", a, out)

    def exp(self, a, out: str | None = None) -> str:
        return self.unary("exp", a, out)

    def rsub(self, s: float, a, out: str | None = None) -> str:
        """``C = s - A`` for a scalar constant ``s``."""
        s = float(s)
        return self._unary("rsub", "C{i} := " + repr(s) + "; C{i} -= A{i};", a, out, s=s)

    def scale(self, a, s: float, out: str | None = None) -> str:
        """``C = A * s`` for a scalar constant ``s``."""
        s = float(s)
        return self._unary("scale", "C{i} := A{i}; C{i} *= " + repr(s) + ";", a, out, s=s)

    def copy(self, a, out: str | None = None) -> str:
        """``C = A`` (materialises a block of a tensor as its own tensor)."""
        return self._unary("copy", "C{i} := A{i};", a, out)

    def transpose(self, a, out: str | None = None) -> str:
        """``C = A.T`` for a 2-D ``A``."""
        A = self._ref(a)
        if len(A.shape) != 2:
            raise ShapeError(f"transpose: need a 2-D operand, got {A.shape}")
        return self._emit("transpose", "forall i,j { C[j][i] := A[i][j]; }", {"i": A.shape[0], "j": A.shape[1]},
                          {"A": A}, self._out(out, A.shape[::-1], (A,)))

    def conv2d(self, x, w, out: str | None = None, *, strides: Sequence[int] = (1, 1),
               padding: Sequence[int] = (0, 0, 0, 0), layout: str = "NCHW") -> str:
        """2-D convolution, ``NCHW``/``OIHW`` or ``NHWC``/``HWIO``; ``padding`` = (top, left, bottom, right).

        Padding is a negative view offset: the input is read through a zero border.
        """
        X, W = self._ref(x), self._ref(w)
        sh, sw, pt, pl, pb, pr = _window_args("conv2d", X, W, strides, padding, layout)
        if layout == "NCHW":
            n, ci, h, wd = X.shape
            co, ci2, kh, kw = W.shape
        else:
            n, h, wd, ci = X.shape
            kh, kw, ci2, co = W.shape
        if ci != ci2:
            raise ShapeError(f"conv2d: input has {ci} channels, weight expects {ci2} (groups are not supported)")
        oh, ow, hi, wi = _output_window("conv2d", (h, wd), (kh, kw), (sh, sw), (pt, pl, pb, pr))
        if layout == "NCHW":
            c_idx, a_idx, w_idx, shape = "[n][co][oh][ow]", f"[n][ci][{hi}][{wi}]", "[co][ci][kh][kw]", (n, co, oh, ow)
            off = (X.offset[0], X.offset[1], X.offset[2] - pt, X.offset[3] - pl)
        else:
            c_idx, a_idx, w_idx, shape = "[n][oh][ow][co]", f"[n][{hi}][{wi}][ci]", "[kh][kw][ci][co]", (n, oh, ow, co)
            off = (X.offset[0], X.offset[1] - pt, X.offset[2] - pl, X.offset[3])
        all_idx = "[n][co][oh][ow][ci][kh][kw]"
        text = (f"forall n,co,oh,ow,ci,kh,kw {{ C{c_idx} := 0; tmp{all_idx} := A{a_idx}; "
                f"tmp{all_idx} *= W{w_idx}; C{c_idx} += tmp{all_idx}; }}")
        ext = {"n": n, "co": co, "oh": oh, "ow": ow, "ci": ci, "kh": kh, "kw": kw}
        o = self._out(out, shape, (X, W))
        self._emit("conv2d", text, ext, {"A": Ref(X.tensor, off, X.shape), "W": W}, o,
                   strides=(sh, sw), padding=(pt, pl, pb, pr), layout=layout)
        return o

    def depthwise_conv2d(self, x, w, out: str | None = None, *, strides: Sequence[int] = (1, 1),
                         padding: Sequence[int] = (0, 0, 0, 0), layout: str = "NCHW") -> str:
        """Depthwise 2-D convolution (one filter per channel, a grouped conv with groups = channels).

        ``NCHW`` takes the weight as ``(C, 1, KH, KW)`` (OIHW with one input
        channel per group: torch / ONNX), ``NHWC`` as ``(KH, KW, 1, C)`` (HWIO);
        ``padding`` = (top, left, bottom, right).

        >>> wl = Workload(); y = wl.depthwise_conv2d(wl.input("x", (1, 4, 8, 8)), wl.weight("w", (4, 1, 3, 3)),
        ...                                          padding=(1, 1, 1, 1), out="y")
        >>> wl.tensors[y].shape
        (1, 4, 8, 8)
        """
        X, W = self._ref(x), self._ref(w)
        sh, sw, pt, pl, pb, pr = _window_args("depthwise_conv2d", X, W, strides, padding, layout)
        if layout == "NCHW":
            n, c, h, wd = X.shape
            c2, one, kh, kw = W.shape
        else:
            n, h, wd, c = X.shape
            kh, kw, one, c2 = W.shape
        if c != c2 or one != 1:
            raise ShapeError(f"depthwise_conv2d: input has {c} channels, weight {W.shape} must be "
                             f"{'(C, 1, KH, KW)' if layout == 'NCHW' else '(KH, KW, 1, C)'} with C = {c}")
        oh, ow, hi, wi = _output_window("depthwise_conv2d", (h, wd), (kh, kw), (sh, sw), (pt, pl, pb, pr))
        if layout == "NCHW":
            c_idx, a_idx, w_idx, shape = "[n][c][oh][ow]", f"[n][c][{hi}][{wi}]", "[c][0][kh][kw]", (n, c, oh, ow)
            off = (X.offset[0], X.offset[1], X.offset[2] - pt, X.offset[3] - pl)
        else:
            c_idx, a_idx, w_idx, shape = "[n][oh][ow][c]", f"[n][{hi}][{wi}][c]", "[kh][kw][0][c]", (n, oh, ow, c)
            off = (X.offset[0], X.offset[1] - pt, X.offset[2] - pl, X.offset[3])
        all_idx = "[n][c][oh][ow][kh][kw]"
        text = (f"forall n,c,oh,ow,kh,kw {{ C{c_idx} := 0; tmp{all_idx} := A{a_idx}; "
                f"tmp{all_idx} *= W{w_idx}; C{c_idx} += tmp{all_idx}; }}")
        ext = {"n": n, "c": c, "oh": oh, "ow": ow, "kh": kh, "kw": kw}
        o = self._out(out, shape, (X, W))
        self._emit("depthwise_conv2d", text, ext, {"A": Ref(X.tensor, off, X.shape), "W": W}, o,
                   strides=(sh, sw), padding=(pt, pl, pb, pr), layout=layout)
        return o

    # -- reference -------------------------------------------------------------
    def reference(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Evaluate in float64 numpy (ground truth); returns :attr:`outputs`."""
        env = {n: np.array(inputs[n], dtype=np.float64) for n in self.inputs}
        for op in self.ops:
            env[op.output] = _reference_op(self, op, env)
        return {n: env[n] for n in self.outputs}

    def check_inputs(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Validated float32 copies of the caller's arrays (every input present, right shape, finite)."""
        out = {}
        for n in self.inputs:
            if n not in inputs:
                raise InputError(f"workload {self.name}: missing input {n!r}")
            a = np.asarray(inputs[n])
            if a.shape != self.tensors[n].shape:
                raise ShapeError(f"workload {self.name}: input {n!r} has shape {a.shape}, "
                                 f"expected {self.tensors[n].shape}")
            if not np.issubdtype(a.dtype, np.number):
                raise InputError(f"workload {self.name}: input {n!r} is not numeric ({a.dtype})")
            a = np.ascontiguousarray(a, dtype=np.float32)
            if not np.isfinite(a).all():
                raise InputError(f"workload {self.name}: input {n!r} holds NaN or infinity")
            out[n] = a
        return out

    @property
    def flops(self) -> int:
        """Multiply-adds x 2 of the matmul/conv ops plus one per element-wise output."""
        total = 0
        for op in self.ops:
            ext = dict(op.extents)
            pts = int(np.prod(list(ext.values()), dtype=np.int64))
            total += 2 * pts if op.kind in ("matmul", "matmul_nt", "conv2d", "depthwise_conv2d") else pts
        return total

    def random_inputs(self, seed: int = 0, scale: float = 1.0) -> dict[str, np.ndarray]:
        """Uniform(-scale, scale) float32 arrays for every input (weights scaled by 1/sqrt(fan-in))."""
        rng = np.random.default_rng(seed)
        out = {}
        for n in self.inputs:
            t = self.tensors[n]
            s = scale / np.sqrt(t.shape[0]) if t.role == "weight" and len(t.shape) == 2 else scale
            out[n] = rng.uniform(-s, s, t.shape).astype(np.float32)
        return out


def _window_args(name: str, X: Any, W: Any, strides: Sequence[int], padding: Sequence[int],
                 layout: str) -> tuple[int, int, int, int, int, int]:
    """A convolution's checked ``(sh, sw, top, left, bottom, right)``: 4-D operands, a known layout,
    strides >= 1 and padding >= 0, else one error naming ``name``."""
    if len(X.shape) != 4 or len(W.shape) != 4:
        raise ShapeError(f"{name}: input and weight must be 4-D, got {X.shape} and {W.shape}")
    if layout not in ("NCHW", "NHWC"):
        raise InputError(f"{name}: layout must be NCHW or NHWC, got {layout!r}")
    sh, sw = (int(s) for s in strides)
    pt, pl, pb, pr = (int(p) for p in padding)
    if sh < 1 or sw < 1 or min(pt, pl, pb, pr) < 0:
        raise InputError(f"{name}: strides must be >= 1 and padding >= 0, got {strides}, {padding}")
    return sh, sw, pt, pl, pb, pr


def _output_window(name: str, hw: tuple[int, int], khw: tuple[int, int], stride: tuple[int, int],
                   pad: tuple[int, int, int, int]) -> tuple[int, int, str, str]:
    """Output height and width of a strided window over the padded input, and the input row and
    column index expressions (``oh+kh``, ``2*oh+kh``, ...) in the ISAMIR text."""
    (h, wd), (kh, kw), (sh, sw), (pt, pl, pb, pr) = hw, khw, stride, pad
    oh, ow = (h + pt + pb - kh) // sh + 1, (wd + pl + pr - kw) // sw + 1
    if oh < 1 or ow < 1:
        raise ShapeError(f"{name}: kernel {kh}x{kw} does not fit the padded {h}x{wd} input")
    return oh, ow, f"{sh}*oh+kh" if sh > 1 else "oh+kh", f"{sw}*ow+kw" if sw > 1 else "ow+kw"


def _axes(shape: tuple[int, ...]) -> tuple[str, str, dict[str, int]]:
    names = ["i", "j"] if len(shape) == 2 else [f"a{d}" for d in range(len(shape))]
    return ",".join(names), "".join(f"[{a}]" for a in names), dict(zip(names, shape))


def _block(env: Mapping[str, np.ndarray], wl: Workload, view: View, shape: Sequence[int]) -> np.ndarray:
    """``shape`` elements of a tensor starting at ``view.offset`` (zeros outside the tensor)."""
    src = env[view.tensor]
    out = np.zeros(tuple(shape), dtype=np.float64)
    dst_sl, src_sl = [], []
    for o, n, full in zip(view.offset, shape, src.shape):
        lo, hi = max(o, 0), min(o + n, full)
        if hi <= lo:
            return out
        src_sl.append(slice(lo, hi))
        dst_sl.append(slice(lo - o, hi - o))
    out[tuple(dst_sl)] = src[tuple(src_sl)]
    return out


def _reference_op(wl: Workload, op: Op, env: Mapping[str, np.ndarray]) -> np.ndarray:
    ext = dict(op.extents)
    out_shape = wl.tensors[op.output].shape
    if op.kind in ("matmul", "matmul_nt"):
        a = _block(env, wl, op.view("A"), (ext["i"], ext["k"]))
        bshape = (ext["j"], ext["k"]) if op.kind == "matmul_nt" else (ext["k"], ext["j"])
        b = _block(env, wl, op.view("B"), bshape)
        return a @ (b.T if op.kind == "matmul_nt" else b)
    if op.kind == "conv2d":
        return _reference_conv(wl, op, env)
    if op.kind == "depthwise_conv2d":
        return _reference_depthwise(wl, op, env)
    if op.kind == "transpose":
        return _block(env, wl, op.view("A"), (ext["i"], ext["j"])).T
    a = _block(env, wl, op.view("A"), out_shape)
    if op.kind == "bias_add":
        return a + _block(env, wl, op.view("b"), (out_shape[1],))[None, :]
    if op.kind == "channel_bias_add":
        return a + _block(env, wl, op.view("b"), wl.tensors[op.view("b").tensor].shape)
    if op.kind in _BINARY:
        b = _block(env, wl, op.view("B"), out_shape)
        return {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op.kind](a, b)
    if op.kind == "relu":
        return np.maximum(a, 0.0)
    if op.kind == "copy":
        return a
    if op.kind == "sigmoid":
        return 1.0 / (1.0 + np.exp(-a))
    if op.kind in ("tanh", "exp"):
        return getattr(np, op.kind)(a)
    if op.kind == "rsub":
        return op.attr("s") - a
    if op.kind == "scale":
        return a * op.attr("s")
    raise InputError(f"reference: unknown op kind {op.kind!r}")


def _reference_conv(wl: Workload, op: Op, env: Mapping[str, np.ndarray]) -> np.ndarray:
    ext = dict(op.extents)
    sh, sw = op.attr("strides")
    layout = op.attr("layout")
    n, co, oh, ow, ci, kh, kw = (ext[a] for a in ("n", "co", "oh", "ow", "ci", "kh", "kw"))
    if layout == "NCHW":
        x = _block(env, wl, op.view("A"), (n, ci, (oh - 1) * sh + kh, (ow - 1) * sw + kw))
        w = env[op.view("W").tensor]
        out = np.zeros((n, co, oh, ow))
        for r in range(kh):
            for s in range(kw):
                patch = x[:, :, r:r + sh * (oh - 1) + 1:sh, s:s + sw * (ow - 1) + 1:sw]
                out += np.einsum("nchw,oc->nohw", patch, w[:, :, r, s])
        return out
    x = _block(env, wl, op.view("A"), (n, (oh - 1) * sh + kh, (ow - 1) * sw + kw, ci))
    w = env[op.view("W").tensor]
    out = np.zeros((n, oh, ow, co))
    for r in range(kh):
        for s in range(kw):
            patch = x[:, r:r + sh * (oh - 1) + 1:sh, s:s + sw * (ow - 1) + 1:sw, :]
            out += np.einsum("nhwc,co->nhwo", patch, w[r, s])
    return out


def _reference_depthwise(wl: Workload, op: Op, env: Mapping[str, np.ndarray]) -> np.ndarray:
    ext = dict(op.extents)
    sh, sw = op.attr("strides")
    n, c, oh, ow, kh, kw = (ext[a] for a in ("n", "c", "oh", "ow", "kh", "kw"))
    w = env[op.view("W").tensor]
    if op.attr("layout") == "NCHW":
        x = _block(env, wl, op.view("A"), (n, c, (oh - 1) * sh + kh, (ow - 1) * sw + kw))
        out = np.zeros((n, c, oh, ow))
        for r in range(kh):
            for s in range(kw):
                out += x[:, :, r:r + sh * (oh - 1) + 1:sh, s:s + sw * (ow - 1) + 1:sw] * w[None, :, 0, r, s, None, None]
        return out
    x = _block(env, wl, op.view("A"), (n, (oh - 1) * sh + kh, (ow - 1) * sw + kw, c))
    out = np.zeros((n, oh, ow, c))
    for r in range(kh):
        for s in range(kw):
            out += x[:, r:r + sh * (oh - 1) + 1:sh, s:s + sw * (ow - 1) + 1:sw, :] * w[r, s, 0, :]
    return out
