"""ISA Mapper §2.1: export ISAMIR back to a schedulable TIR PrimFunc.

Statements are regrouped into TE-like blocks before export: a temporary
written by a chain (``tmp := A; tmp *= B``) and read once, at the same index,
is inlined into its reader, and ``C := 0`` followed by a reduction into ``C``
becomes one block with ``T.init()``.  So an imported kernel exports to the
blocks it came from, and an instruction needle exports to a TensorIntrin-style
description (one block, no init)::

    >>> from tensorize.isamir import parse_isamir
    >>> p = parse_isamir('''forall i:4, j:4, k:4 {
    ... C[i][j] := 0; tmp[i][j][k] := A[i][k]; tmp[i][j][k] *= B[k][j]; C[i][j] += tmp[i][j][k]; }''')
    >>> export_groups(p)
    [('C', (0, 1, 2, 3))]
    >>> f = to_prim_func(p)   # one block "C": C[i, j] = C[i, j] + A[i, k] * B[k, j] with init 0

Buffers whose ``layout`` was changed by a transformation (transpose, reshape,
pad) keep the caller's interface: the function copies them into the internal
layout (zero-filling padding) and copies outputs back.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from tvm_ext.errors import InputError

from .isamir import Access, Affine, Buffer, Const, Program, Statement

__all__ = ["export_groups", "replace_blocks", "statement_blocks", "to_prim_func"]


# --------------------------------------------------------------------------- grouping


@dataclass
class _Group:
    """Statements that become one block: ``dst = init?; dst = expr``."""

    dst: Access
    statements: list[int]
    expr: tuple  # expression tree (see _tree)
    init: Const | None = None
    update: bool = False  # dst = dst op expr
    name: str = ""


def _leaf(op) -> tuple:
    return ("const", op.value) if isinstance(op, Const) else ("load", op)


def _tree_axes(tree) -> set[str]:
    kind = tree[0]
    if kind == "load":
        return set(tree[1].axes)
    if kind == "bin":
        return _tree_axes(tree[2]) | _tree_axes(tree[3])
    if kind == "fn":
        return _tree_axes(tree[2])
    return set()


def _tree_buffers(tree) -> set[str]:
    kind = tree[0]
    if kind == "load":
        return {tree[1].buffer}
    if kind == "bin":
        return _tree_buffers(tree[2]) | _tree_buffers(tree[3])
    if kind == "fn":
        return _tree_buffers(tree[2])
    return set()


def _substitute(tree, buffer: str, access: Access, by) -> tuple:
    kind = tree[0]
    if kind == "load" and tree[1] == access:
        return by
    if kind == "bin":
        return ("bin", tree[1], _substitute(tree[2], buffer, access, by), _substitute(tree[3], buffer, access, by))
    if kind == "fn":
        return ("fn", tree[1], _substitute(tree[2], buffer, access, by))
    return tree


def _init_partner(stmts: Sequence[Statement], k: int) -> int | None:
    """Index of the reduction that statement ``k`` (``C := const``) initialises, if any."""
    s = stmts[k]
    if not (s.op == ":=" and isinstance(s.src, Const) and s.fn is None):
        return None
    for m in range(k + 1, len(stmts)):
        t = stmts[m]
        touches = s.dst.buffer in t.reads or s.dst.buffer in t.writes
        if not touches:
            continue
        if t.dst == s.dst and t.op != ":=" and t.reduced_axes and not (
            isinstance(t.src, Access) and t.src.buffer == s.dst.buffer
        ):
            return m
        return None
    return None


def _chains(program: Program) -> list[_Group]:
    """Group statements: elementwise chains, init+reduction pairs, lone updates."""
    groups: list[tuple[int, _Group]] = []  # (position, group)
    stmts = program.statements
    partner_of: dict[int, int] = {}
    for k in range(len(stmts)):
        m = _init_partner(stmts, k)
        if m is not None and m not in partner_of:
            partner_of[m] = k
    inits = set(partner_of.values())
    k = 0
    while k < len(stmts):
        s = stmts[k]
        if k in inits:
            k += 1
            continue
        if k in partner_of:
            init = stmts[partner_of[k]]
            groups.append((k, _Group(s.dst, [partner_of[k], k], _leaf(s.src), init.src, True)))
            k += 1
            continue
        if s.reduced_axes or s.op != ":=":
            groups.append((k, _Group(s.dst, [k], _leaf(s.src), None, True)))
            k += 1
            continue
        tree = _leaf(s.src) if s.fn is None else ("fn", s.fn, _leaf(s.src))
        members = [k]
        k += 1
        while k < len(stmts) and k not in inits and k not in partner_of and stmts[k].dst == s.dst \
                and not stmts[k].reduced_axes:
            t = stmts[k]
            if t.op == ":=":
                if t.fn is None or t.src != s.dst:
                    break
                tree = ("fn", t.fn, tree)
            else:
                if isinstance(t.src, Access) and t.src.buffer == s.dst.buffer:
                    break
                tree = ("bin", t.op, tree, _leaf(t.src))
            members.append(k)
            k += 1
        if any(b == s.dst.buffer for b in _tree_buffers(tree)):
            # the chain reads its own destination (e.g. C := f(C)): keep statements apart
            for m in members:
                st = stmts[m]
                groups.append((m, _Group(st.dst, [m], _single(st), None, st.op != ":=")))
            continue
        groups.append((members[0], _Group(s.dst, members, tree)))
    return [g for _, g in sorted(groups, key=lambda t: t[0])]


def _single(st: Statement) -> tuple:
    if st.op == ":=":
        return _leaf(st.src) if st.fn is None else ("fn", st.fn, _leaf(st.src))
    return _leaf(st.src)


def _inline(program: Program, groups: list[_Group]) -> list[_Group]:
    """Inline temporaries read exactly once at their written index."""
    changed = True
    while changed:
        changed = False
        for gi, g in enumerate(groups):
            buf = program.buffer(g.dst.buffer)
            if buf.role != "temp" or g.update or g.init is not None:
                continue
            writers = [x for x in groups if x.dst.buffer == g.dst.buffer]
            readers = [x for x in groups if x is not g and g.dst.buffer in _tree_buffers(x.expr)]
            if len(writers) != 1 or len(readers) != 1:
                continue
            reader = readers[0]
            ri = groups.index(reader)
            if ri < gi or _count_loads(reader.expr, g.dst.buffer) != 1 or not _has_load(reader.expr, g.dst):
                continue
            read_bufs = _tree_buffers(g.expr)
            between = groups[gi + 1:ri]
            if any(x.dst.buffer in read_bufs for x in between):
                continue
            reader.expr = _substitute(reader.expr, g.dst.buffer, g.dst, g.expr)
            reader.statements = sorted(reader.statements + g.statements)
            groups.pop(gi)
            changed = True
            break
    return groups


def _count_loads(tree, buffer: str) -> int:
    kind = tree[0]
    if kind == "load":
        return int(tree[1].buffer == buffer)
    if kind == "bin":
        return _count_loads(tree[2], buffer) + _count_loads(tree[3], buffer)
    if kind == "fn":
        return _count_loads(tree[2], buffer)
    return 0


def _has_load(tree, access: Access) -> bool:
    kind = tree[0]
    if kind == "load":
        return tree[1] == access
    if kind == "bin":
        return _has_load(tree[2], access) or _has_load(tree[3], access)
    if kind == "fn":
        return _has_load(tree[2], access)
    return False


def _groups(program: Program, inline: bool) -> list[_Group]:
    groups = _chains(program)
    if inline:
        groups = _inline(program, groups)
    used: dict[str, int] = {}
    for g in groups:
        base = g.dst.buffer
        n = used.get(base, 0)
        g.name = base if n == 0 else f"{base}_{n}"
        used[base] = n + 1
    return groups


def export_groups(program: Program, inline: bool = True) -> list[tuple[str, tuple[int, ...]]]:
    """The blocks :func:`to_prim_func` emits, as (block name, statement indices)."""
    return [(g.name, tuple(g.statements)) for g in _groups(program, inline)]


def statement_blocks(program: Program, inline: bool = True) -> dict[int, str]:
    """Statement index -> name of the exported block that computes it."""
    return {k: name for name, ks in export_groups(program, inline) for k in ks}


# --------------------------------------------------------------------------- TIR


def to_prim_func(program: Program, *, name: str | None = None, inline: bool = True, keep_interface: bool = True):
    """Build a schedulable PrimFunc (``s_tir=True``) computing ``program``.

    Parameters follow ``program.params`` (every input and output buffer when
    empty).  With ``keep_interface`` a buffer whose ``layout`` a transformation
    changed is taken in the caller's shape and converted inside the function.
    """
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    _check_static(program, "to_prim_func")
    params = list(program.params) or [b.name for b in program.buffers if b.role != "temp"]
    groups = _groups(program, inline)
    with IRBuilder() as ib:
        with T.prim_func(s_tir=True):
            T.func_name(name or program.name)
            T.func_attr({"tirx.noalias": True})
            given: dict[str, object] = {}
            for p in params:
                b = program.buffer(p)
                shape = b.interface_shape if (keep_interface and b.layout) else b.shape
                handle = T.arg(p, T.handle())
                buf = T.match_buffer(handle, list(shape), b.dtype)
                IRBuilder.name(p, buf)
                given[p] = buf
            with T.sblock("root"):
                _emit_program(program, groups, given, keep_interface)
    return ib.get()


def replace_blocks(func, program: Program, *, inline: bool = True):
    """``func`` with the blocks that write ``program``'s buffers replaced by the program's blocks.

    The function keeps its parameters, attributes and every other block (a
    padding producer, an element-wise consumer); the program's buffers are the
    function's buffers of the same name (parameters or root allocations), its
    temporaries are allocated anew, and its blocks are emitted as
    :func:`to_prim_func` emits them, where the first replaced block was.  This
    is how a kernel is rebuilt after structural transforms (factorization).

    >>> from tvm import te
    >>> from tensorize.importers import from_te
    >>> A = te.placeholder((4, 3), name="A"); k = te.reduce_axis((0, 3), name="k")
    >>> C = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="C")
    >>> f = replace_blocks(te.create_prim_func([A, C]), from_te(C))
    >>> [p.name for p in f.params], f.body.block.body.loop_var.name
    (['A', 'C'], 'i')
    """
    from tvm import tirx
    from tvm.s_tir import SBlock, SBlockRealize
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    _check_static(program, "replace_blocks")
    realize = func.body
    root = realize.block
    children = list(root.body.seq) if isinstance(root.body, tirx.SeqStmt) else [root.body]
    known = {b.name: b for b in (*func.params, *root.alloc_buffers)}
    groups = _groups(program, inline)
    _check_buffers(program, groups, known)
    accessed = [_block_buffers(c) for c in children]
    replaced = _replaced(program, groups, children, accessed)
    given = {b.name: known[b.name] for b in program.buffers if b.name in known}
    with IRBuilder() as ib:
        with T.prim_func(s_tir=True):  # a scaffold: its root block's content moves into ``func``
            for p, buf in given.items():
                T.arg(p, buf)  # the buffers in scope, so the blocks' reads and writes are inferred
            with T.sblock("root"):
                _emit_program(program, groups, given, True)
    fragment = ib.get().body.block
    new = list(fragment.body.seq) if isinstance(fragment.body, tirx.SeqStmt) else [fragment.body]
    kept = [c for n, c in enumerate(children) if n not in replaced]
    body = kept[:replaced[0]] + new + kept[replaced[0]:]
    still = set(known) & {b.name for b in program.buffers}
    still = still.union(*(r | w for n, (r, w) in enumerate(accessed) if n not in replaced))
    allocs = [b for b in root.alloc_buffers if b.name in still] + list(fragment.alloc_buffers)
    block = SBlock(root.iter_vars, root.reads, root.writes, root.name_hint,
                   tirx.SeqStmt(body) if len(body) > 1 else body[0], root.init, allocs, root.match_buffers,
                   root.annotations)
    return tirx.PrimFunc(func.params, SBlockRealize(realize.iter_values, realize.predicate, block),
                         func.ret_type, func.attrs)


def _check_static(program: Program, who: str) -> None:
    program.validate()
    for b in program.buffers:
        if any(s is None for s in b.shape):
            raise InputError(f"{who}: buffer {b.name} has a flexible shape; call program.instantiate() first")


def _check_buffers(program: Program, groups: list[_Group], known: dict) -> None:
    """Every non-temporary buffer the program touches is a buffer of the function, of the same shape."""
    used = {g.dst.buffer for g in groups} | {x for g in groups for x in _tree_buffers(g.expr)}
    used = sorted(n for n in used if program.buffer(n).role != "temp")
    missing = [n for n in used if n not in known]
    if missing:
        raise InputError(f"replace_blocks: the program's buffer(s) {', '.join(missing)} are not buffers of the "
                         f"function (it has {', '.join(known)})")
    for name in used:
        shape = tuple(int(n) for n in known[name].shape)
        if shape != tuple(program.buffer(name).interface_shape):
            raise InputError(f"replace_blocks: buffer {name} has shape {shape} in the function but "
                             f"{tuple(program.buffer(name).interface_shape)} in the program")


def _replaced(program: Program, groups: list[_Group], children, accessed) -> list[int]:
    """Indices of the root children (their buffers ``accessed``) whose blocks the program computes."""
    written = {g.dst.buffer for g in groups}
    replaced = [n for n, (_, writes) in enumerate(accessed) if writes & written]
    if not replaced:
        raise InputError(f"replace_blocks: no block of the function writes {sorted(written)}")
    lost = sorted(set().union(*(accessed[n][1] for n in replaced)) - written)
    if lost:
        raise InputError(f"replace_blocks: the replaced blocks also write {', '.join(lost)}, which the program "
                         f"does not compute")
    _check_order(groups, children, accessed, replaced)
    return replaced


def _check_order(groups: list[_Group], children, accessed, replaced) -> None:
    """The program's blocks can all run where the first replaced block was: no block kept between the
    replaced ones reads what the program writes or writes what it reads."""
    writes = {g.dst.buffer for g in groups}
    reads = {x for g in groups for x in _tree_buffers(g.expr)}
    for n in range(replaced[0] + 1, replaced[-1]):
        r, w = accessed[n]
        if n not in replaced and (r & writes or w & reads):
            raise InputError(f"replace_blocks: a block kept between the replaced ones ({_names(children[n])}) "
                             f"depends on them or they on it")


def _block_buffers(stmt) -> tuple[set[str], set[str]]:
    """Names of the buffers the blocks under ``stmt`` read, and write."""
    from .importers import leaf_blocks
    from .intrin_spec import region_buffer

    found: list = []
    leaf_blocks(stmt, found)
    reads = {region_buffer(r).name for x in found for r in x.block.reads}
    return reads, {region_buffer(w).name for x in found for w in x.block.writes}


def _names(stmt) -> str:
    from .importers import leaf_blocks

    found: list = []
    leaf_blocks(stmt, found)
    return ", ".join(x.block.name_hint for x in found)


def _emit_program(program: Program, groups: list[_Group], given: dict, keep_interface: bool) -> None:
    """Emit ``program``'s blocks into the current root block: ``given`` maps buffer names to the
    buffers the caller already has (parameters); the other buffers it uses are allocated, and a
    given buffer with a ``layout`` is copied into its internal layout and back (``keep_interface``)."""
    from tvm import tirx
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as T

    outer = {p: buf for p, buf in given.items() if keep_interface and program.buffer(p).layout}
    bufs = {p: buf for p, buf in given.items() if p not in outer}
    used = {g.dst.buffer for g in groups} | {x for g in groups for x in _tree_buffers(g.expr)}
    for b in program.buffers:
        if b.name in bufs or (b.name not in used and b.name not in outer):
            continue
        internal = f"{b.name}_v" if b.name in outer else b.name
        buf = T.sblock_alloc_buffer(list(b.shape), b.dtype)
        IRBuilder.name(internal, buf)
        bufs[b.name] = buf
    for p, ext in outer.items():
        if _needs_copy_in(program, p):
            _emit_copy_in(T, IRBuilder, program.buffer(p), ext, bufs[p])
    for g in groups:
        _emit_group(T, IRBuilder, tirx, program, g, bufs)
    for p, ext in outer.items():
        if program.buffer(p).role == "output":
            _emit_copy_out(T, IRBuilder, program.buffer(p), ext, bufs[p])


def _needs_copy_in(program: Program, buffer: str) -> bool:
    b = program.buffer(buffer)
    if b.role == "input":
        return True
    for s in program.statements:
        if buffer in s.reads:
            return True
        if buffer in s.writes:
            return s.op != ":="
    return False


def _emit_group(T, IRBuilder, tirx, program: Program, g: _Group, bufs) -> None:
    dst_axes = program.ordered(g.dst.axes)
    all_axes = set(g.dst.axes) | _tree_axes(g.expr)
    red_axes = [a for a in program.ordered(all_axes) if a not in g.dst.axes]
    axes = list(dst_axes) + red_axes
    extents = [program.extent(a) for a in axes]
    dtype = program.buffer(g.dst.buffer).dtype

    def body(vmap):
        idx = [_index(tirx, r, vmap) for r in g.dst.rows]
        dst_buf = bufs[g.dst.buffer]
        value = _tir_expr(tirx, g.expr, vmap, bufs, program, dtype)
        if g.update:
            if g.init is not None:
                with T.init():
                    T.buffer_store(dst_buf, tirx.const(float(g.init.value), dtype), idx)
            op = program.statements[g.statements[-1]].op
            value = _combine(tirx, op, tirx.BufferLoad(dst_buf, idx), value)
        T.buffer_store(dst_buf, value, idx)

    _block(T, IRBuilder, g.name, axes, extents, set(red_axes), body)


def _block(T, IRBuilder, name: str, axes: Sequence[str], extents: Sequence[int], reduced: set, body) -> None:
    if not axes:
        with T.sblock(name):
            body({})
        return
    with T.grid(*extents) as loops:
        loops = [loops] if len(axes) == 1 else list(loops)
        for a, lv in zip(axes, loops):
            IRBuilder.name(a, lv)
        with T.sblock(name):
            vmap = {}
            for a, e, lv in zip(axes, extents, loops):
                v = T.axis.reduce(e, lv) if a in reduced else T.axis.spatial(e, lv)
                IRBuilder.name(f"v_{a}", v)
                vmap[a] = v
            body(vmap)


def _index(tirx, row: Affine, vmap):
    terms = [vmap[a] if c == 1 else vmap[a] * c for a, c in row.terms]
    if not terms:
        return tirx.const(row.const, "int32")
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out + row.const if row.const else out


def _combine(tirx, op: str, cur, val):
    if op == "+=":
        return cur + val
    if op == "-=":
        return cur - val
    if op == "*=":
        return cur * val
    if op == "/=":
        return cur / val
    if op == "max=":
        return tirx.max(cur, val)
    if op == "min=":
        return tirx.min(cur, val)
    raise InputError(f"to_prim_func: operator {op!r} cannot update")


_TIR_FN = {"exp": "exp", "tanh": "tanh", "sigmoid": "sigmoid", "sqrt": "sqrt", "log": "log", "abs": "fabs"}


def _tir_expr(tirx, tree, vmap, bufs, program: Program, dtype: str):
    kind = tree[0]
    if kind == "const":
        return tirx.const(float(tree[1]), dtype)
    if kind == "load":
        acc: Access = tree[1]
        return tirx.BufferLoad(bufs[acc.buffer], [_index(tirx, r, vmap) for r in acc.rows])
    if kind == "bin":
        return _combine(tirx, tree[1], _tir_expr(tirx, tree[2], vmap, bufs, program, dtype),
                        _tir_expr(tirx, tree[3], vmap, bufs, program, dtype))
    if kind == "fn":
        inner = _tir_expr(tirx, tree[2], vmap, bufs, program, dtype)
        if tree[1] == "neg":
            return tirx.const(0.0, dtype) - inner
        return getattr(tirx, _TIR_FN[tree[1]])(inner)
    raise InputError(f"to_prim_func: bad expression node {kind!r}")


# --------------------------------------------------------------------------- layouts


def _strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return list(reversed(out))


def _emit_copy_in(T, IRBuilder, buf: Buffer, outer, inner) -> None:
    """inner[idx] = caller[f(idx)] (zero where idx falls in padding)."""
    from tvm import tirx

    axes = [f"d{n}" for n in range(buf.rank)]

    def body(vmap):
        cur = [vmap[a] for a in axes]
        conds = []
        for op in reversed(buf.layout):
            if op[0] == "pad":
                conds += [cur[d] < o for d, (o, n) in enumerate(zip(op[1], op[2])) if o < n]
            elif op[0] == "transpose":
                old = [None] * len(op[1])
                for d, p in enumerate(op[1]):
                    old[p] = cur[d]
                cur = old
            else:
                lin = _linear(cur, op[2])
                cur = [tirx.floormod(tirx.floordiv(lin, s), n) if s > 1 else tirx.floormod(lin, n)
                       for s, n in zip(_strides(op[1]), op[1])]
        value = tirx.BufferLoad(outer, cur)
        if conds:
            cond = conds[0]
            for c in conds[1:]:
                cond = tirx.all(cond, c)
            value = tirx.if_then_else(cond, value, tirx.const(0.0, buf.dtype))
        T.buffer_store(inner, value, [vmap[a] for a in axes])

    _block(T, IRBuilder, f"{buf.name}_in", axes, list(buf.shape), set(), body)


def _emit_copy_out(T, IRBuilder, buf: Buffer, outer, inner) -> None:
    """caller[idx] = inner[g(idx)]."""
    from tvm import tirx

    shape = list(buf.interface_shape)
    axes = [f"d{n}" for n in range(len(shape))]

    def body(vmap):
        cur = [vmap[a] for a in axes]
        for op in buf.layout:
            if op[0] == "transpose":
                cur = [cur[p] for p in op[1]]
            elif op[0] == "reshape":
                lin = _linear(cur, op[1])
                cur = [tirx.floormod(tirx.floordiv(lin, s), n) if s > 1 else tirx.floormod(lin, n)
                       for s, n in zip(_strides(op[2]), op[2])]
        T.buffer_store(outer, tirx.BufferLoad(inner, cur), [vmap[a] for a in axes])

    _block(T, IRBuilder, f"{buf.name}_out", axes, shape, set(), body)


def _linear(idx, shape):
    out = None
    for i, s in zip(idx, _strides(shape)):
        term = i if s == 1 else i * s
        out = term if out is None else out + term
    return out
