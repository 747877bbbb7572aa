"""ISA Mapper §2.1: import TE computes and TIR blocks into three-operand ISAMIR.

Each TE compute / TIR block becomes a few statements: ``C := init`` for a
reduction, then the expression broken into three-operand form through
temporaries (``tmp := A; tmp *= B; C += tmp``).  Sub-expressions that need
their own temporary are computed *before* the chain that consumes them, so a
chain such as ``A * (B + D)`` stays contiguous.  Every index must be affine in
the block's axes; anything else (``floordiv``, an indirect ``A[idx[i]]``)
raises :class:`NonAffineAccessError` naming the access.

>>> from tvm import te
>>> A = te.placeholder((4, 2), name="A"); B = te.placeholder((2, 3), name="B")
>>> k = te.reduce_axis((0, 2), name="k")
>>> C = te.compute((4, 3), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
>>> print(from_te(C))
forall i,j,k {
C[i][j] := 0;
tmp[i][j][k] := A[i][k];
tmp[i][j][k] *= B[k][j];
C[i][j] += tmp[i][j][k];
}
"""
from __future__ import annotations


from typing import Any, Iterable, Sequence

from tvm_ext.errors import InputError, MappingError

from .isamir import Access, Affine, Axis, Buffer, Const, Program, Statement

__all__ = ["NonAffineAccessError", "UnsupportedKernelError", "from_te", "from_prim_func", "to_isamir"]


class NonAffineAccessError(MappingError, InputError):
    """A buffer index is not an affine function of the loop axes."""


class UnsupportedKernelError(MappingError, InputError):
    """The kernel uses a construct ISAMIR cannot express (named in the message)."""


_FUNCS = {
    "tirx.exp": "exp",
    "tirx.tanh": "tanh",
    "tirx.sigmoid": "sigmoid",
    "tirx.sqrt": "sqrt",
    "tirx.log": "log",
    "tirx.fabs": "abs",
}


def _expr_types():
    from tvm import tirx

    return tirx


def _int(x, what: str) -> int:
    from tvm import tirx

    if isinstance(x, int):
        return x
    if isinstance(x, tirx.IntImm):
        return int(x.value)
    raise UnsupportedKernelError(f"{what}: symbolic extent {x} (ISAMIR needs static shapes)")


def _find(pairs: list[tuple[Any, str]], obj) -> str | None:
    for o, name in pairs:
        if o.same_as(obj):
            return name
    return None


class _Builder:
    """Collects axes, buffers and statements while lowering expressions."""

    def __init__(self, name: str):
        self.name = name
        self.axes: list[Axis] = []
        self.buffers: dict[str, Buffer] = {}
        self.statements: list[Statement] = []
        self.names: set[str] = set()

    # -- names ---------------------------------------------------------------
    def fresh(self, base: str) -> str:
        base = base or "t"
        if base not in self.names:
            self.names.add(base)
            return base
        n = 1
        while f"{base}{n}" in self.names:
            n += 1
        self.names.add(f"{base}{n}")
        return f"{base}{n}"

    def add_axis(self, hint: str, extent: int, origin: tuple[str, str]) -> str:
        if hint.startswith("v_") and len(hint) > 2:
            hint = hint[2:]
        name = self.fresh(hint)
        self.axes.append(Axis(name, extent, origin))
        return name

    def add_buffer(self, hint: str, shape: Sequence[int], dtype: str, role: str) -> str:
        name = self.fresh(hint)
        self.buffers[name] = Buffer(name, tuple(shape), str(dtype), role)
        return name

    def extent(self, axis: str) -> int:
        return next(a.extent for a in self.axes if a.name == axis)

    def new_temp(self, axes: Sequence[str], dtype: str) -> Access:
        name = self.add_buffer("tmp", [self.extent(a) for a in axes], dtype, "temp")
        return Access(name, tuple(Affine.axis(a) for a in axes))

    def emit(self, op: str, dst: Access, src, block: str, fn: str | None = None) -> None:
        self.statements.append(Statement(op, dst, src, fn, block))

    # -- expressions ---------------------------------------------------------
    def lower_value(self, ctx: "_Context", expr, target: Access) -> None:
        """Emit statements computing ``expr`` into ``target``."""
        leaf = ctx.leaf(expr)
        if leaf is not None:
            self.emit(":=", target, leaf, ctx.block)
            return
        kind, parts = ctx.classify(expr)
        if kind == "fn":
            fn, arg = parts
            inner = ctx.leaf(arg)
            if inner is None:  # the argument gets its own temporary: tmp := ...; C := f(tmp)
                inner = self.new_temp(ctx.axes, _dtype(arg))
                self.lower_value(ctx, arg, inner)
            self.emit(":=", target, inner, ctx.block, fn)
            return
        op, lhs, rhs = parts
        right = ctx.leaf(rhs)
        if right is None:  # compute the right operand first, into its own temp
            right = self.new_temp(ctx.axes, _dtype(rhs))
            self.lower_value(ctx, rhs, right)
        self.lower_value(ctx, lhs, target)
        self.emit(op, target, right, ctx.block)

    def lower_update(self, ctx: "_Context", op: str, dst: Access, expr) -> None:
        """Emit ``dst op= expr`` (through a temp when ``expr`` is composite)."""
        leaf = ctx.leaf(expr)
        if leaf is None:
            leaf = self.new_temp(ctx.axes, _dtype(expr))
            self.lower_value(ctx, expr, leaf)
        self.emit(op, dst, leaf, ctx.block)

    def program(self, params: Sequence[str]) -> Program:
        prog = Program(tuple(self.axes), tuple(self.buffers.values()), tuple(self.statements), tuple(params), self.name)
        return prog.validate()


class _Context:
    """Per-block view: which tvm Vars are which axes, how loads read buffers."""

    def __init__(self, block: str, axis_vars: list[tuple[Any, str]], axes: list[str], load,
                 offsets: dict[str, int] | None = None):
        self.block = block
        self.axis_vars = axis_vars
        self.axes = axes
        self.offsets = offsets or {}  # iterator = axis + offset (TIR iter domains not at 0)
        self._load = load  # expr -> (buffer name, indices) | None

    def affine(self, expr, access_text) -> Affine:
        tirx = _expr_types()

        def walk(e) -> Affine:
            if isinstance(e, tirx.IntImm):
                return Affine.of({}, int(e.value))
            if isinstance(e, tirx.Var):
                name = _find(self.axis_vars, e)
                if name is None:
                    raise NonAffineAccessError(
                        f"non-affine access {access_text()} in block {self.block!r}: "
                        f"{e.name} is not a loop axis of the block"
                    )
                return Affine.of({name: 1}, self.offsets.get(name, 0))
            if isinstance(e, tirx.Add):
                return _add(walk(e.a), walk(e.b), 1)
            if isinstance(e, tirx.Sub):
                return _add(walk(e.a), walk(e.b), -1)
            if isinstance(e, tirx.Mul):
                a, b = walk(e.a), walk(e.b)
                if not a.terms:
                    return _scale(b, a.const)
                if not b.terms:
                    return _scale(a, b.const)
            if isinstance(e, tirx.Cast) and "int" in _dtype(e):
                return walk(e.value)
            raise NonAffineAccessError(
                f"non-affine access {access_text()} in block {self.block!r}: index {_expr_text(e)} is not "
                f"affine in the axes {self.axes}"
            )

        return walk(expr)

    def leaf(self, expr):
        tirx = _expr_types()
        if isinstance(expr, (tirx.FloatImm, tirx.IntImm)):
            return Const(float(expr.value))
        if isinstance(expr, tirx.Cast) and isinstance(expr.value, (tirx.FloatImm, tirx.IntImm)):
            return Const(float(expr.value.value))
        loaded = self._load(expr)
        if loaded is None:
            return None
        return self.access(*loaded)

    def access(self, buf: str, indices) -> Access:
        text = lambda: f"{buf}[{', '.join(_expr_text(i) for i in indices)}]"  # noqa: E731
        return Access(buf, tuple(self.affine(i, text) for i in indices))

    def classify(self, expr):
        tirx = _expr_types()
        binops = ((tirx.Add, "+="), (tirx.Sub, "-="), (tirx.Mul, "*="), (tirx.Div, "/="),
                  (tirx.Max, "max="), (tirx.Min, "min="))
        for cls, op in binops:
            if isinstance(expr, cls):
                return "bin", (op, expr.a, expr.b)
        if isinstance(expr, tirx.Cast):
            inner = expr.value
            if _dtype(inner) == _dtype(expr):
                return self.classify(inner)
        op = getattr(expr, "op", None)
        name = getattr(op, "name", None)
        if name in _FUNCS and len(expr.args) == 1:
            return "fn", (_FUNCS[name], expr.args[0])
        raise UnsupportedKernelError(
            f"block {self.block!r}: expression {_expr_text(expr)} ({type(expr).__name__}) is not expressible "
            f"in ISAMIR (supported: + - * / max min, {sorted(_FUNCS.values())}, loads, constants)"
        )


_BIN_TEXT = (("Add", "+"), ("Sub", "-"), ("Mul", "*"), ("FloorDiv", "//"), ("FloorMod", "%"), ("Div", "/"))


def _expr_text(e) -> str:
    """Compact text of an index/value expression (loads as ``name[...]``)."""
    tirx = _expr_types()
    if isinstance(e, (tirx.IntImm, tirx.FloatImm)):
        return str(e.value)
    if isinstance(e, tirx.Var):
        return e.name
    op = getattr(e, "op", None)
    if getattr(op, "name", None) == "te.tensor_load":
        return f"{e.args[0].op.name}[{', '.join(_expr_text(i) for i in e.args[1:])}]"
    if isinstance(e, _tensor_load_type()):
        return f"{e.source.name}[{', '.join(_expr_text(i) for i in e.indices)}]"
    for cls, sym in _BIN_TEXT:
        if isinstance(e, getattr(tirx, cls)):
            return f"({_expr_text(e.a)} {sym} {_expr_text(e.b)})"
    if getattr(op, "name", None):
        return f"{op.name.split('.')[-1]}({', '.join(_expr_text(a) for a in e.args)})"
    return _short(e)


def _dtype(e) -> str:
    dt = getattr(e, "dtype", None)
    return str(dt) if dt is not None else str(e.ty)


def _short(e) -> str:
    s = str(e).split("\n")[0]
    return s if len(s) < 120 else s[:117] + "..."


def _add(a: Affine, b: Affine, sign: int) -> Affine:
    d = dict(a.as_dict)
    for k, c in b.terms:
        d[k] = d.get(k, 0) + sign * c
    return Affine.of(d, a.const + sign * b.const)


def _scale(a: Affine, c: int) -> Affine:
    return Affine.of({k: v * c for k, v in a.terms}, a.const * c)


def _reduce_op(reduce_expr, where: str) -> tuple[str, float]:
    tirx = _expr_types()
    comb = reduce_expr.combiner
    res = comb.result[0]
    table = ((tirx.Add, "+="), (tirx.Mul, "*="), (tirx.Max, "max="), (tirx.Min, "min="))
    for cls, op in table:
        if isinstance(res, cls):
            ident = comb.identity_element[0]
            return op, float(ident.value)
    raise UnsupportedKernelError(f"{where}: reduction combiner {comb} is not sum/prod/max/min")


# --------------------------------------------------------------------------- TE


def _te_ops(outputs) -> list:
    """Compute ops reachable from ``outputs`` in topological order."""
    from tvm import te

    order: list = []

    def visit(t):
        op = t.op
        if any(op.same_as(o) for o in order):
            return
        if isinstance(op, te.ComputeOp):
            for inp in op.input_tensors:
                visit(inp)
            order.append(op)
        elif isinstance(op, te.PlaceholderOp):
            order.append(op)
        else:
            raise UnsupportedKernelError(f"TE op {op.name!r} ({type(op).__name__}) is not a te.compute")

    for t in outputs:
        visit(t)
    return order


def from_te(tensors, *, name: str = "main") -> Program:
    """Import a TE compute (a ``te.Tensor``) or a list of tensors (``create_prim_func`` args).

    Placeholders become inputs, the given computes outputs, other computes temporaries.
    """
    from tvm import te

    args = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    if not args or not all(isinstance(t, te.Tensor) for t in args):
        raise InputError("from_te: expected a te.Tensor or a list of te.Tensors")
    outputs = [t for t in args if isinstance(t.op, te.ComputeOp)]
    if not outputs:
        raise InputError("from_te: no te.compute among the tensors")
    ops = _te_ops(outputs)
    b = _Builder(name)
    buf_of: list[tuple[Any, str]] = []
    for op in ops:
        t = op.output(0)
        if isinstance(op, te.PlaceholderOp):
            role = "input"
        else:
            role = "output" if any(o.op.same_as(op) for o in outputs) else "temp"
        shape = [_int(s, f"tensor {op.name}") for s in t.shape]
        buf_of.append((op, b.add_buffer(op.name, shape, str(t.dtype), role)))

    def load(expr):
        name_ = getattr(getattr(expr, "op", None), "name", None)
        if name_ != "te.tensor_load":
            return None
        tensor = expr.args[0]
        return _find(buf_of, tensor.op), list(expr.args[1:])

    for op in ops:
        if isinstance(op, te.ComputeOp):
            _lower_te_compute(b, op, _find(buf_of, op), load)
    given = [_find(buf_of, t.op) for t in args]
    inputs = [n for o, n in buf_of if b.buffers[n].role == "input"]
    params = given if any(isinstance(t.op, te.PlaceholderOp) for t in args) else inputs + given
    return b.program(params)


def _lower_te_compute(b: _Builder, op, out_name: str, load) -> None:
    if len(op.body) != 1:
        raise UnsupportedKernelError(f"te.compute {op.name!r}: multiple outputs are not supported")
    tirx = _expr_types()
    pairs: list[tuple[Any, str]] = []
    axes: list[str] = []
    for iv in list(op.axis) + list(op.reduce_axis):
        if _int(iv.dom.min, f"compute {op.name}") != 0:
            raise UnsupportedKernelError(f"te.compute {op.name!r}: axis {iv.var} does not start at 0")
        ext = _int(iv.dom.extent, f"compute {op.name}")
        name = b.add_axis(iv.var.name, ext, (op.name, iv.var.name))
        pairs.append((iv.var, name))
        axes.append(name)
    ctx = _Context(op.name, pairs, axes, load)
    dst = Access(out_name, tuple(Affine.axis(n) for n in axes[: len(op.axis)]))
    body = op.body[0]
    if isinstance(body, tirx.Reduce):
        if not (isinstance(body.condition, tirx.IntImm) and int(body.condition.value) == 1):
            raise UnsupportedKernelError(f"te.compute {op.name!r}: reductions with a where-condition are not supported")
        if len(body.source) != 1 or len(body.init):
            raise UnsupportedKernelError(f"te.compute {op.name!r}: tuple reductions / custom init not supported")
        rop, ident = _reduce_op(body, f"te.compute {op.name!r}")
        b.emit(":=", dst, Const(ident), op.name)
        b.lower_update(ctx, rop, dst, body.source[0])
    else:
        b.lower_value(ctx, body, dst)


# --------------------------------------------------------------------------- TIR


def leaf_blocks(stmt, out: list) -> None:
    """Append to ``out`` every innermost block realize under ``stmt`` (loops, sequences, the root).

    >>> from tvm import te
    >>> A = te.placeholder((4,), name="A")
    >>> found = []
    >>> leaf_blocks(te.create_prim_func([A, te.compute((4,), lambda i: A[i] + 1.0, name="B")]).body, found)
    >>> [r.block.name_hint for r in found]
    ['B']
    """
    from tvm import s_tir, tirx

    if isinstance(stmt, s_tir.SBlockRealize):
        blk = stmt.block
        if _contains_block(blk.body):
            if blk.name_hint != "root":
                raise UnsupportedKernelError(f"block {blk.name_hint!r} nests other blocks (not supported)")
            leaf_blocks(blk.body, out)
        else:
            out.append(stmt)
    elif isinstance(stmt, tirx.SeqStmt):
        for s in stmt.seq:
            leaf_blocks(s, out)
    elif isinstance(stmt, tirx.For):
        leaf_blocks(stmt.body, out)
    else:
        raise UnsupportedKernelError(f"statement {type(stmt).__name__} outside a block is not supported")


def _contains_block(stmt) -> bool:
    from tvm import s_tir, tirx

    if isinstance(stmt, s_tir.SBlockRealize):
        return True
    if isinstance(stmt, tirx.SeqStmt):
        return any(_contains_block(s) for s in stmt.seq)
    if isinstance(stmt, tirx.For):
        return _contains_block(stmt.body)
    return False


def _root_allocs(func) -> list:
    from tvm import s_tir

    body = func.body
    if isinstance(body, s_tir.SBlockRealize):
        return list(body.block.alloc_buffers)
    return []


def from_prim_func(func, *, blocks: str | Iterable[str] | None = None, name: str | None = None) -> Program:
    """Import the blocks of a schedulable PrimFunc (``@T.prim_func(s_tir=True)``).

    ``blocks`` restricts the import to the named block(s); buffers they read
    but do not write become inputs.
    """
    from tvm import tirx

    if not isinstance(func, tirx.PrimFunc):
        raise InputError(f"from_prim_func: expected a tvm PrimFunc, got {type(func).__name__}")
    realizes: list = []
    leaf_blocks(func.body, realizes)
    leaves = [r.block for r in realizes]
    if blocks is not None:
        wanted = [blocks] if isinstance(blocks, str) else list(blocks)
        known = [blk.name_hint for blk in leaves]
        missing = [w for w in wanted if w not in known]
        if missing:
            raise InputError(f"from_prim_func: no block named {missing} (blocks: {known})")
        realizes = [r for r in realizes if r.block.name_hint in wanted]
        leaves = [r.block for r in realizes]
    if not leaves:
        raise InputError("from_prim_func: the function has no blocks to import")
    fname = name
    if fname is None:
        fname = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs else "main"
    b = _Builder(fname)
    written = [blk.body.buffer for blk in leaves if _is_store(blk.body)]
    buf_of: list[tuple[Any, str]] = []
    params = [p for p in func.params if _is_buffer(p)]
    for p in params:
        role = "output" if _member(p, written) else "input"
        buf_of.append((p, b.add_buffer(p.name, [_int(s, f"buffer {p.name}") for s in p.shape], str(p.dtype), role)))
    for a in _root_allocs(func):
        buf_of.append((a, None))  # registered lazily below
    read_outside = _buffers_read_outside(func, leaves)

    def name_of(buf) -> str:
        n = _find([(o, m) for o, m in buf_of if m is not None], buf)
        if n is not None:
            return n
        role = "temp"
        if _member(buf, written) and _member(buf, read_outside):
            role = "output"
        elif not _member(buf, written):
            role = "input"
        n = b.add_buffer(buf.name, [_int(s, f"buffer {buf.name}") for s in buf.shape], str(buf.dtype), role)
        buf_of.append((buf, n))
        return n

    def load(expr):
        if isinstance(expr, _tensor_load_type()):
            return name_of(expr.source), list(expr.indices)
        return None

    for realize in realizes:
        _lower_block(b, realize, name_of, load)
    used = {s.dst.buffer for s in b.statements} | {
        s.src.buffer for s in b.statements if isinstance(s.src, Access)
    }
    order = [n for _, n in buf_of if n is not None]
    param_names = [n for n in order[: len(params)] if n in used]
    param_names += [n for n in order[len(params):] if n in used and b.buffers[n].role != "temp"]
    b.buffers = {n: buf for n, buf in b.buffers.items() if n in used}
    return b.program(param_names)


def _is_buffer(p) -> bool:
    return hasattr(p, "shape") and hasattr(p, "dtype") and hasattr(p, "strides")


def _member(buf, bufs: list) -> bool:
    return any(buf.same_as(o) for o in bufs)


def _is_store(stmt) -> bool:
    from tvm import tirx

    return isinstance(stmt, tirx.BufferStore)


def _buffers_read_outside(func, leaves) -> list:
    """Buffers read by blocks that are not imported."""
    all_blocks: list = []
    leaf_blocks(func.body, all_blocks)
    names = {blk.name_hint for blk in leaves}
    out: list = []
    for realize in all_blocks:
        if realize.block.name_hint not in names:
            out += _loaded_buffers(realize.block.body)
    return out


def _tensor_load_type():
    import tvm

    return tvm.ir.expr.TensorLoad


_CHILDREN = ("a", "b", "value", "args", "indices", "body", "seq", "block", "init", "then_case",
             "else_case", "condition", "source")


def _loaded_buffers(node) -> list:
    """Buffers read (by buffer loads) anywhere inside a TIR expression or statement."""
    import tvm

    load_t = _tensor_load_type()
    out: list = []
    stack = [node]
    while stack:
        n = stack.pop()
        if n is None or isinstance(n, (int, float, str)):
            continue
        if isinstance(n, load_t):
            out.append(n.source)
            stack.extend(n.indices)
            continue
        if isinstance(n, (list, tuple)) or type(n).__name__ == "Array":
            stack.extend(n)
            continue
        if not isinstance(n, tvm.ir.Node) and not hasattr(n, "same_as"):
            continue
        for attr in _CHILDREN:
            try:
                child = getattr(n, attr)
            except Exception:
                continue
            if child is not None and not callable(child):
                stack.append(child)
    return out


def _lower_block(b: _Builder, realize, name_of, load) -> None:  # noqa: C901
    from tvm import tirx

    blk = realize.block
    where = f"block {blk.name_hint!r}"
    body = blk.body
    if not isinstance(body, tirx.BufferStore):
        raise UnsupportedKernelError(f"{where}: body is {type(body).__name__}, expected one buffer store")
    pairs: list[tuple[Any, str]] = []
    axes: list[str] = []
    offsets: dict[str, int] = {}
    for iv, bound in zip(blk.iter_vars, realize.iter_values):
        kind = int(iv.iter_type)
        if kind not in (0, 2):
            raise UnsupportedKernelError(f"{where}: iterator {iv.var} is neither spatial nor reduction")
        # name the axis after the loop bound to it (what the author wrote), else the iterator
        hint = bound.name if isinstance(bound, tirx.Var) else iv.var.name
        name = b.add_axis(hint, _int(iv.dom.extent, where), (blk.name_hint, iv.var.name))
        offsets[name] = _int(iv.dom.min, where)
        pairs.append((iv.var, name))
        axes.append(name)
    ctx = _Context(blk.name_hint, pairs, axes, load, offsets)
    dst = ctx.access(name_of(body.buffer), list(body.indices))
    if blk.init is not None:
        init = blk.init
        if not (isinstance(init, tirx.BufferStore) and init.buffer.same_as(body.buffer)):
            raise UnsupportedKernelError(f"{where}: init must store to the block's output")
        val = ctx.leaf(init.value)
        if not isinstance(val, Const):
            raise UnsupportedKernelError(f"{where}: init value {init.value} is not a constant")
        b.emit(":=", dst, val, blk.name_hint)
    op, expr = _update_pattern(body)
    if op is None:
        if _reads(expr, body.buffer):
            tmp = b.new_temp(axes, _dtype(expr))
            b.lower_value(ctx, expr, tmp)
            b.emit(":=", dst, tmp, blk.name_hint)
        else:
            b.lower_value(ctx, expr, dst)
    else:
        b.lower_update(ctx, op, dst, expr)


def _update_pattern(store):
    """``C = C op e`` -> (op, e); otherwise (None, value)."""
    from tvm import tirx

    v = store.value

    def is_self(e) -> bool:
        return (
            isinstance(e, _tensor_load_type())
            and e.source.same_as(store.buffer)
            and len(e.indices) == len(store.indices)
            and all(_same_index(a, c) for a, c in zip(e.indices, store.indices))
        )

    for cls, op, commutative in ((tirx.Add, "+=", True), (tirx.Mul, "*=", True), (tirx.Max, "max=", True),
                                 (tirx.Min, "min=", True), (tirx.Sub, "-=", False), (tirx.Div, "/=", False)):
        if isinstance(v, cls):
            if is_self(v.a) and not _reads(v.b, store.buffer):
                return op, v.b
            if commutative and is_self(v.b) and not _reads(v.a, store.buffer):
                return op, v.a
    return None, v


def _same_index(a, b) -> bool:
    import tvm

    try:
        tvm.ir.assert_structural_equal(a, b, map_free_vars=False)
        return True
    except (ValueError, AssertionError, Exception):
        return False


def _reads(expr, buffer) -> bool:
    return any(buf.same_as(buffer) for buf in _loaded_buffers(expr))


# --------------------------------------------------------------------------- dispatch


def to_isamir(kernel, *, block: str | Iterable[str] | None = None) -> Program:
    """Turn a Program, PrimFunc, IRModule, te.Tensor or list of te.Tensors into ISAMIR.

    >>> from tvm import te
    >>> A = te.placeholder((8,), name="A")
    >>> B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    >>> print(to_isamir(B))
    forall i {
    B[i] := A[i];
    B[i] *= 2;
    }
    """
    import tvm
    from tvm import te, tirx

    if isinstance(kernel, Program):
        return kernel.validate()
    if isinstance(kernel, tvm.IRModule):
        funcs = [(gv.name_hint, f) for gv, f in kernel.functions.items() if isinstance(f, tirx.PrimFunc)]
        if not funcs:
            raise InputError("to_isamir: the IRModule has no PrimFunc")
        chosen = dict(funcs).get("main", funcs[0][1]) if len(funcs) > 1 else funcs[0][1]
        return from_prim_func(chosen, blocks=block)
    if isinstance(kernel, tirx.PrimFunc):
        return from_prim_func(kernel, blocks=block)
    if isinstance(kernel, te.Tensor) or (
        isinstance(kernel, (list, tuple)) and kernel and all(isinstance(t, te.Tensor) for t in kernel)
    ):
        return from_te(kernel)
    raise InputError(
        f"to_isamir: cannot import {type(kernel).__name__}; pass a PrimFunc, IRModule, te.Tensor, "
        "list of te.Tensors or an ISAMIR Program"
    )
