"""ISA Mapper §2.2: the deterministic mapper (VF2-style backtracking over access matrices).

A mapping of an instruction's *needle* program into a kernel's *haystack*
program consists of

* a **statement map** (needle statement k -> haystack statement, in order,
  same operator / function / operand kinds),
* a **buffer map** (needle buffer -> haystack buffer; a needle scalar operand
  may bind a haystack constant),
* an **axis map** (needle axis -> haystack axis, injective), and
* a **dimension map** per buffer (needle dim -> haystack dim, with a positive
  stride), such that every needle access matrix equals the haystack access
  matrix restricted to the mapped rows and columns (up to the per-dimension
  stride) and the unmapped haystack rows are zero on the mapped columns.

Haystack axes that are not mapped stay *outer*: each instruction call runs at
fixed outer values, and a haystack axis mapped to a needle axis of size ``n``
is tiled by ``n`` (so its extent must be a multiple of ``n``).  The search
follows VF2 (Cordella et al. 2004): it extends a partial map one statement,
then one axis at a time, with feasibility rules (operators, buffer roles, axis
role signatures, row compatibility) that prune a branch as soon as it fails.
It enumerates *all* mappings and records *why* each branch failed
(:class:`~tensorize.feedback.Failure`), which is the feedback :mod:`tensorize.search` uses.

>>> from tensorize.isamir import parse_isamir
>>> from tensorize.instructions import get_isa
>>> conv1d = parse_isamir('''forall i,x,d,ki,ko {
... tmp[i][x][d][ki][ko] := A[i][x+d][ki];
... tmp[i][x][d][ki][ko] *= B[d][ki][ko];
... C[i][x][ko] += tmp[i][x][d][ki][ko];
... }''', extents=dict(i=16, x=32, d=3, ki=16, ko=16))
>>> res = map_instruction(conv1d, get_isa("x86")["matmul_16x16x16"])
>>> sorted(sorted(m.axis_map.items()) for m in res.mappings)
[[('i', 'i'), ('j', 'ko'), ('k', 'ki')], [('i', 'x'), ('j', 'ko'), ('k', 'ki')]]
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Mapping as TMapping, Sequence

from tvm_ext.errors import MappingError

from .feedback import (
    AxisMisfit,
    CompetingAxes,
    ExtentMisfit,
    Failure,
    FailureKind,
    FailureLog,
    LayoutMismatch,
    MissingAxisRole,
    OpMismatch,
)
from .instructions import Instruction
from .isamir import Access, Affine, Const, Program, Statement

__all__ = ["Failure", "Mapping", "MapResult", "NoMappingError", "map_instruction"]

class NoMappingError(MappingError):
    """No mapping exists; ``reasons`` holds the mapper's :class:`Failure` s."""

    def __init__(self, message: str, reasons: Sequence[Failure] = ()):
        super().__init__(message)
        self.reasons = list(reasons)


@dataclass(eq=False)
class Mapping:
    """One way to compute some haystack statements with one instruction.

    Everything needed to emit a TensorIntrin + schedule: the instruction and
    its tile sizes, the buffer / dimension / axis maps, which haystack axes
    stay outer, and the transformation sequence that produced ``program``
    from ``source`` (the kernel as imported).
    """

    instruction: Instruction
    program: Program
    statement_map: tuple[int, ...]
    buffer_map: dict[str, str]
    constants: dict[str, float]
    dim_map: dict[str, tuple[int, ...]]
    dim_strides: dict[str, tuple[int, ...]]
    axis_map: dict[str, str]
    tile: dict[str, int]
    transforms: tuple = ()
    source: Program | None = None
    isa: str | None = None

    # -- derived ---------------------------------------------------------------
    @property
    def covered(self) -> frozenset[int]:
        """Haystack statements computed by the instruction."""
        return frozenset(self.statement_map)

    @property
    def hay_axes(self) -> tuple[str, ...]:
        axes: set[str] = set()
        for h in self.statement_map:
            axes |= self.program.statements[h].axes
        return self.program.ordered(axes)

    @property
    def inner_axes(self) -> tuple[str, ...]:
        """Haystack axes computed inside one call, in needle axis order."""
        return tuple(self.axis_map[a] for a in self.instruction.needle.axis_names)

    @property
    def outer_axes(self) -> tuple[str, ...]:
        """Haystack axes of the covered statements that the instruction does not map."""
        inner = set(self.axis_map.values())
        return tuple(a for a in self.hay_axes if a not in inner)

    @property
    def tiles(self) -> dict[str, int]:
        """Haystack axis -> number of instruction tiles along it."""
        return {h: self.program.extent(h) // self.tile[n] for n, h in self.axis_map.items()}

    @property
    def calls(self) -> int:
        """Instruction calls needed: outer trip counts times tiles per mapped axis."""
        n = 1
        for a in self.outer_axes:
            n *= self.program.extent(a)
        for t in self.tiles.values():
            n *= t
        return n

    @property
    def blocks(self) -> tuple[str, ...]:
        """Names of the exported blocks (``to_prim_func(program)``) the mapping covers."""
        from .exporters import statement_blocks

        sb = statement_blocks(self.program)
        return tuple(dict.fromkeys(sb[h] for h in sorted(self.statement_map)))

    def required_transposes(self) -> dict[str, tuple[int, ...]]:
        """Haystack parameter -> permutation making the mapped dims innermost in needle order."""
        out = {}
        for nb, hb in self.buffer_map.items():
            if self.program.buffer(hb).role == "temp":
                continue
            perm = self._perm(nb, hb)
            if perm != tuple(range(len(perm))):
                out[hb] = perm
        return out

    def _perm(self, nb: str, hb: str) -> tuple[int, ...]:
        mapped = list(self.dim_map[nb])
        rank = self.program.buffer(hb).rank
        return tuple([d for d in range(rank) if d not in mapped] + mapped)

    # -- text ------------------------------------------------------------------
    def operand_text(self, nb: str) -> str:
        """Haystack view of needle buffer ``nb`` (after the transposes), e.g. ``A[x+d][:][:]``."""
        if nb in self.constants:
            from .isamir import Const as _C

            return _C(self.constants[nb]).format()
        hb = self.buffer_map[nb]
        access = self._some_access(nb)
        order = self.program.axis_names
        inner = set(self.axis_map.values())
        parts = []
        strides = dict(zip(self.dim_map[nb], self.dim_strides[nb]))
        for d in self._perm(nb, hb):
            row = access.rows[d]
            if d in strides:
                base = Affine.of({a: c for a, c in row.terms if a not in inner}, row.const)
                b = "" if (not base.terms and base.const == 0) else base.format(order)
                parts.append(f"[{b}:]" if strides[d] == 1 else f"[{b}::{strides[d]}]")
            else:
                parts.append(f"[{row.format(order)}]")
        return hb + "".join(parts)

    def _some_access(self, nb: str) -> Access:
        for k, h in enumerate(self.statement_map):
            ns, hs = self.instruction.needle.statements[k], self.program.statements[h]
            for na, ha in zip(ns.accesses, hs.accesses):
                if isinstance(na, Access) and na.buffer == nb and isinstance(ha, Access):
                    return ha
        raise MappingError(f"mapping: needle buffer {nb} has no haystack access")

    def listing(self) -> str:
        """The mapped program in the paper's Listing 6 style."""
        needle = self.instruction.needle
        trans = self.required_transposes()
        outputs = {self.buffer_map.get(b.name) for b in needle.buffers if b.role == "output"}
        lines = [f"forall {','.join(self.hay_axes)} {{"]
        for hb, perm in trans.items():
            lines.append(f"transpose({hb}, {_tuple_text(perm)});")
        ops = ", ".join(self.operand_text(p) for p in needle.params)
        lines.append(f"{self.instruction.mnemonic}({ops});")
        for hb, perm in trans.items():
            if hb in outputs:
                inv = tuple(sorted(range(len(perm)), key=lambda d: perm[d]))
                lines.append(f"transpose({hb}, {_tuple_text(inv)});")
        lines.append("}")
        return "\n".join(lines)

    def summary(self) -> str:
        maps = ", ".join(f"{n}->{h}" for n, h in self.axis_map.items())
        tr = " after " + " > ".join(str(t) for t in self.transforms) if self.transforms else ""
        outer = ",".join(self.outer_axes) or "-"
        return f"{self.instruction.name}: {maps}; outer {outer}; {self.calls} calls{tr}"

    def __repr__(self) -> str:
        return f"<Mapping {self.summary()}>"

    def key(self) -> tuple:
        """Identity for de-duplication."""
        return (
            self.instruction.name,
            self.program.key,
            self.statement_map,
            tuple(sorted(self.buffer_map.items())),
            tuple(sorted(self.constants.items())),
            tuple(sorted(self.dim_map.items())),
            tuple(sorted(self.axis_map.items())),
        )

    def describe(self) -> dict[str, Any]:
        """JSON-friendly description (for the CLI and reports)."""
        return {
            "instruction": self.instruction.name,
            "isa": self.isa,
            "statements": list(self.statement_map),
            "blocks": list(self.blocks),
            "buffer_map": dict(self.buffer_map),
            "constants": dict(self.constants),
            "dim_map": {k: list(v) for k, v in self.dim_map.items()},
            "dim_strides": {k: list(v) for k, v in self.dim_strides.items()},
            "axis_map": dict(self.axis_map),
            "tile": dict(self.tile),
            "outer_axes": list(self.outer_axes),
            "calls": self.calls,
            "transposes": {k: list(v) for k, v in self.required_transposes().items()},
            "transforms": [str(t) for t in self.transforms],
        }

    # -- reference execution ------------------------------------------------------
    def simulate(self, inputs: TMapping[str, Any]) -> dict[str, Any]:
        """Run ``program`` on numpy inputs with the covered statements done as instruction calls.

        Each call gathers the needle's operand tiles through the buffer,
        dimension and axis maps (at fixed outer-axis values and tile offsets),
        runs the needle, and scatters its outputs back: a reference for what
        the emitted TensorIntrin must compute.  Equal to
        :func:`tensorize.isamir.evaluate` exactly when the mapping is sound.
        """
        from .isamir import collect_outputs, prepare_arrays, run_statement

        arrays = prepare_arrays(self.program, inputs)
        first = min(self.statement_map)
        for k in range(len(self.program.statements)):
            if k == first:
                self._run_calls(arrays)
            elif k not in self.statement_map:
                run_statement(self.program, k, arrays)
        return collect_outputs(self.program, arrays)

    def _run_calls(self, arrays: dict) -> None:
        import numpy as np

        from .isamir import evaluate

        needle = self.instruction.program_for(self.tile)
        outer = list(self.outer_axes)
        mapped = list(self.axis_map.items())
        ranges = [range(self.program.extent(a)) for a in outer]
        ranges += [range(self.tiles[h]) for _, h in mapped]
        for point in itertools.product(*ranges):
            env = dict(zip(outer, point[: len(outer)]))
            for (x, h), t in zip(mapped, point[len(outer):]):
                env[h] = t * self.tile[x]
            views, feeds = {}, {}
            for b in needle.buffers:
                if b.role == "temp":
                    continue
                if b.name in self.constants:
                    feeds[b.name] = np.asarray(self.constants[b.name], dtype=b.dtype)
                    continue
                views[b.name] = self._tile_index(b.name, b.shape, env)
                feeds[b.name] = arrays[self.buffer_map[b.name]][views[b.name]]
            for name, val in evaluate(needle, feeds).items():
                arrays[self.buffer_map[name]][views[name]] = val

    def _tile_index(self, nb: str, shape, env: dict) -> tuple:
        import numpy as np

        access = self._some_access(nb)
        inner = set(self.axis_map.values())
        dims = dict(zip(self.dim_map[nb], range(len(self.dim_map[nb]))))
        idx = []
        for e, row in enumerate(access.rows):
            base = row.const + sum(c * env[a] for a, c in row.terms if a in env)
            if e in dims:
                d = dims[e]
                view = [1] * len(shape)
                view[d] = shape[d]
                idx.append(base + self.dim_strides[nb][d] * np.arange(shape[d]).reshape(view))
            else:
                if any(a in inner for a in row.axes):
                    raise MappingError(f"mapping: unmapped dim {e} of {access.buffer} uses a mapped axis")
                idx.append(np.full([1] * len(shape), base))
        return tuple(np.broadcast_arrays(*idx)) if idx else ()

    def with_transforms(self, steps: tuple, source: Program | None, isa: str | None = None) -> "Mapping":
        self.transforms = tuple(steps)
        self.source = source
        if isa is not None:
            self.isa = isa
        return self


def _tuple_text(t: Sequence[int]) -> str:
    return "(" + ", ".join(str(x) for x in t) + ("," if len(t) == 1 else "") + ")"


@dataclass
class MapResult:
    """All mappings found plus the failures seen on the way."""

    mappings: list[Mapping]
    failures: list[Failure]

    @property
    def ok(self) -> bool:
        return bool(self.mappings)

    def deepest(self, n: int = 5) -> list[Failure]:
        """The ``n`` failures that got closest to a mapping (deepest first)."""
        return sorted(self.failures, key=lambda f: -f.depth)[:n]


# --------------------------------------------------------------------------- the mapper


def map_instruction(program: Program, instruction: Instruction, *, strict_layout: bool = False,
                    max_mappings: int = 10_000) -> MapResult:
    """Find every mapping of ``instruction`` into ``program`` (§2.2).

    With ``strict_layout`` the mapped dims of every haystack parameter must
    already be its innermost dims, in the needle's order, with unit stride
    (a contiguous tile); otherwise a ``layout`` failure names the transpose
    needed.
    """
    m = _Mapper(program, instruction, strict_layout, max_mappings)
    m.run()
    return MapResult(m.mappings, m.log.failures())


def _fmt(program: Program, s: Statement) -> str:
    return s.format(program.axis_names).rstrip(";")


class _Mapper:
    def __init__(self, hay: Program, instruction: Instruction, strict: bool, limit: int):
        self.hay = hay
        self.instr = instruction
        self.needle = instruction.needle
        self.strict = strict
        self.limit = limit
        self.log = FailureLog()
        self.mappings: list[Mapping] = []

    # -- stage 1: statements and buffers ---------------------------------------
    def run(self) -> None:
        n, H = len(self.needle.statements), len(self.hay.statements)
        if n > H:
            self.log.add(FailureKind.STATEMENTS, f"the kernel has {H} statements, instruction "
                         f"{self.instr.name} needs {n}", 0)
            return
        self._match(0, -1, (), {}, {})

    def _match(self, k: int, last: int, smap: tuple, bmap: dict, consts: dict) -> None:
        if len(self.mappings) >= self.limit:
            return
        n, H = len(self.needle.statements), len(self.hay.statements)
        if k == n:
            self._complete(smap, bmap, consts)
            return
        ns = self.needle.statements[k]
        for h in range(last + 1, H - (n - k - 1)):
            hs = self.hay.statements[h]
            if not self._ops_agree(k, ns, h, hs):
                continue
            bound = self._bind(k, ns, h, hs, bmap, consts)
            if bound is not None:
                self._match(k + 1, h, smap + (h,), *bound)

    def _ops_agree(self, k: int, ns: Statement, h: int, hs: Statement) -> bool:
        if ns.op != hs.op or ns.fn != hs.fn:
            nop = ns.op if not ns.fn else f"{ns.op} {ns.fn}"
            hop = hs.op if not hs.fn else f"{hs.op} {hs.fn}"
            self.log.add(FailureKind.OP, lambda: f"op mismatch at statement {k}: needle `{_fmt(self.needle, ns)}` is "
                         f"'{nop}', haystack statement {h} `{_fmt(self.hay, hs)}` is '{hop}'", k, k, h,
                         key="op", detail=OpMismatch(ns.op, hs.op))
            return False
        nsrc, hsrc = ns.src, hs.src
        if isinstance(nsrc, Const):
            if not (isinstance(hsrc, Const) and _close(nsrc.value, hsrc.value)):
                self.log.add(FailureKind.OPERAND, lambda: f"operand mismatch at statement {k}: needle source "
                             f"{nsrc.format()} vs haystack statement {h} source "
                             f"{hsrc.format(self.hay.axis_names)}", k, k, h, key="operand")
                return False
        elif isinstance(hsrc, Const) and not self._is_scalar_input(nsrc.buffer):
            self.log.add(FailureKind.OPERAND, lambda: f"operand mismatch at statement {k}: needle source "
                         f"{nsrc.format()} is a tensor, haystack statement {h} source is the "
                         f"constant {hsrc.format()}", k, k, h, key="operand")
            return False
        return True

    def _is_scalar_input(self, nb: str) -> bool:
        b = self.needle.buffer(nb)
        return b.rank == 0 and b.role == "input"

    def _bind(self, k, ns, h, hs, bmap, consts):
        bmap, consts = dict(bmap), dict(consts)
        for na, ha in zip(ns.accesses, hs.accesses):
            if isinstance(na, Const):
                continue
            nb = na.buffer
            if isinstance(ha, Const):
                if nb in bmap or (nb in consts and not _close(consts[nb], ha.value)):
                    self._buffer_fail(k, h, f"needle scalar {nb} cannot bind constant {ha.format()}")
                    return None
                consts[nb] = ha.value
                continue
            hb = ha.buffer
            if nb in consts:
                self._buffer_fail(k, h, f"needle scalar {nb} is a constant elsewhere, here {hb}")
                return None
            if nb in bmap:
                if bmap[nb] != hb:
                    self._buffer_fail(k, h, f"needle buffer {nb} is mapped to {bmap[nb]}, statement {h} uses {hb}")
                    return None
                continue
            nrole = self.needle.buffer(nb).role
            sharing = [o for o, x in bmap.items() if x == hb]
            if sharing and (nrole != "input" or any(self.needle.buffer(o).role != "input" for o in sharing)):
                self._buffer_fail(k, h, f"haystack buffer {hb} already plays needle buffer {sharing[0]}, "
                                  f"cannot also play {nb}")
                return None
            if nrole == "temp" and self.hay.buffer(hb).role != "temp":
                self._buffer_fail(k, h, f"needle temporary {nb} cannot map to haystack {self.hay.buffer(hb).role} {hb}")
                return None
            bmap[nb] = hb
        return bmap, consts

    def _buffer_fail(self, k, h, why: str) -> None:
        self.log.add(FailureKind.BUFFER, f"buffer conflict at statement {k} (haystack {h}): {why}", k, k, h)

    # -- stage 2: dataflow ----------------------------------------------------
    def _dataflow(self, smap: tuple, bmap: dict) -> tuple[str, int] | None:
        hay = self.hay
        covered = set(smap)
        for nb, hb in bmap.items():
            role = self.needle.buffer(nb).role
            if role == "temp":
                users = [u for u in range(len(hay.statements)) if u not in covered and (
                    hb in hay.statements[u].reads or hb in hay.statements[u].writes)]
                if users:
                    return (f"needle temporary {nb} -> {hb} is also used by haystack statement {users[0]} "
                            f"`{_fmt(hay, hay.statements[users[0]])}` outside the match", users[0])
            if role == "input":
                writers = [h for h in smap if hb in hay.statements[h].writes]
                if writers:
                    return f"needle input {nb} -> {hb} is written by matched statement {writers[0]}", writers[0]
        reads = set().union(*(hay.statements[h].reads for h in smap))
        writes = set().union(*(hay.statements[h].writes for h in smap))
        for u in range(min(smap), max(smap)):
            if u in covered:
                continue
            s = hay.statements[u]
            if (s.writes & (reads | writes)) or (s.reads & writes):
                return (f"haystack statement {u} `{_fmt(hay, s)}` sits between matched statements and "
                        f"touches their buffers", u)
        return None

    # -- stage 3-6: axes, dims, extents, layout ----------------------------------
    def _complete(self, smap: tuple, bmap: dict, consts: dict) -> None:
        n = len(smap)
        why = self._dataflow(smap, bmap)
        if why:
            self.log.add(FailureKind.DATAFLOW, f"dataflow: {why[0]}", n, None, why[1], statements=smap)
            return
        pairs = self._pairs(smap, consts)
        cands = self._candidates(smap, bmap, pairs)
        if cands is None:
            return
        order = sorted(self.needle.axis_names, key=lambda a: (len(cands[a]), self.needle.axis_names.index(a)))
        ctx = (smap, bmap, consts, pairs)
        self._complete_assignments = 0
        self._assign(ctx, order, 0, {}, cands)
        if not self._complete_assignments:
            self._dead_end(smap, bmap, pairs, cands)

    def _dead_end(self, smap, bmap, pairs, cands) -> None:
        """Every axis has candidates but no consistent injective assignment exists."""
        pool = sorted({y for ys in cands.values() for y in ys})
        short = len(pool) < len(cands)
        text = ", ".join(f"{x}->{{{','.join(ys)}}}" for x, ys in cands.items())
        if short:
            self.log.add(FailureKind.ROLE, f"needle axes {sorted(cands)} of {self.instr.name} compete for fewer haystack "
                         f"axes {pool} (candidates {text})", len(smap), None, None, statements=smap,
                         detail=CompetingAxes({x: tuple(ys) for x, ys in cands.items()}))
        else:
            acc = "; ".join(f"{na.format(self.needle.axis_names)} ~ {ha.format(self.hay.axis_names)}"
                            for na, ha in pairs)
            self.log.add(FailureKind.ACCESS, f"access matrices do not match under any axis map (candidates "
                         f"{text}): {acc}", len(smap), None, None, statements=smap)

    def _pairs(self, smap: tuple, consts: dict) -> list[tuple[Access, Access]]:
        out = []
        for k, h in enumerate(smap):
            ns, hs = self.needle.statements[k], self.hay.statements[h]
            for na, ha in zip(ns.accesses, hs.accesses):
                if isinstance(na, Access) and isinstance(ha, Access):
                    out.append((na, ha))
        return out

    def _candidates(self, smap, bmap, pairs) -> dict[str, list[str]] | None:
        hay_axes: set[str] = set()
        for _, ha in pairs:
            hay_axes |= ha.axes
        sig_h = {y: tuple(y in ha.axes for _, ha in pairs) for y in self.hay.ordered(hay_axes)}
        cands: dict[str, list[str]] = {}
        ok = True
        for x in self.needle.axis_names:
            sig = tuple(x in na.axes for na, _ in pairs)
            cands[x] = [y for y, s in sig_h.items() if s == sig]
            if not cands[x]:
                ok = False
                nbufs = sorted({na.buffer for na, _ in pairs if x in na.axes})
                nots = sorted({na.buffer for na, _ in pairs if x not in na.axes})
                hbufs = sorted({bmap[b] for b in nbufs if b in bmap})
                self.log.add(
                    FailureKind.ROLE, f"no haystack axis plays needle axis {x!r} of {self.instr.name}: it must index "
                    f"{', '.join(bmap.get(b, b) for b in nbufs)}"
                    + (f" but not {', '.join(bmap.get(b, b) for b in nots)}" if nots else ""),
                    len(smap), None, None, statements=smap, detail=MissingAxisRole(x, tuple(hbufs)))
        return cands if ok else None

    def _assign(self, ctx, order, i, amap: dict, cands) -> None:
        if len(self.mappings) >= self.limit:
            return
        if i == len(order):
            self._complete_assignments += 1
            self._finish(ctx, dict(amap))
            return
        x = order[i]
        used = set(amap.values())
        for y in cands[x]:
            if y in used:
                continue
            amap[x] = y
            if self._feasible(ctx[3], amap):
                self._assign(ctx, order, i + 1, amap, cands)
            del amap[x]

    def _feasible(self, pairs, amap: dict) -> bool:
        """Every needle row has a compatible haystack row on the assigned columns, and vice versa."""
        mapped_h = set(amap.values())
        for na, ha in pairs:
            for rn in na.rows:
                if not any(_stride(rn, rh, amap) is not None for rh in ha.rows):
                    return False
            for rh in ha.rows:
                if any(rh.coeff(y) for y in mapped_h) and not any(_stride(rn, rh, amap) is not None for rn in na.rows):
                    return False
        return True

    def _finish(self, ctx, amap: dict) -> None:
        smap, bmap, consts, pairs = ctx
        n = len(smap)
        solutions = self._dim_maps(pairs, amap, smap)
        if not solutions:
            return
        tile, bad = {}, []
        for x, y in amap.items():
            ne, he = self.needle.extent(x), self.hay.extent(y)
            if ne is None:
                tile[x] = he
            elif he % ne:
                bad.append(AxisMisfit(x, y, ne, he))
            else:
                tile[x] = ne
        if bad:
            text = ", ".join(f"needle {b.needle_axis}={b.needle_extent} vs haystack {b.hay_axis}={b.hay_extent}"
                             for b in bad)
            self.log.add(FailureKind.EXTENT, f"axis extents do not fit ({text}; haystack extent must be a "
                         f"multiple) for axis map {_amap_text(amap)}", n, None, None, statements=smap,
                         detail=ExtentMisfit(tuple(bad), dict(amap)))
            return
        for dims, strides in solutions:
            if self.strict and not self._layout_ok(bmap, dims, strides, amap, n):
                continue
            self.mappings.append(Mapping(self.instr, self.hay, smap, dict(bmap), dict(consts), dims, strides,
                                         dict(amap), dict(tile)))

    def _dim_maps(self, pairs, amap, smap) -> list[tuple[dict, dict]]:
        by_buf: dict[str, list[tuple[Access, Access]]] = {}
        for na, ha in pairs:
            by_buf.setdefault(na.buffer, []).append((na, ha))
        per_buf = []
        for nb, plist in by_buf.items():
            sols = self._buffer_dims(nb, plist, amap)
            if not sols:
                na, ha = plist[0]
                self.log.add(FailureKind.ACCESS, f"access mismatch: needle {na.format(self.needle.axis_names)} cannot be "
                             f"matched to haystack {ha.format(self.hay.axis_names)} under axis map "
                             f"{_amap_text(amap)}", len(smap), None, None, statements=smap)
                return []
            per_buf.append((nb, sols))
        out = []
        for combo in itertools.product(*(s for _, s in per_buf)):
            dims = {nb: c[0] for (nb, _), c in zip(per_buf, combo)}
            strides = {nb: c[1] for (nb, _), c in zip(per_buf, combo)}
            out.append((dims, strides))
        return out

    def _buffer_dims(self, nb: str, plist, amap) -> list[tuple[tuple, tuple]]:
        rank_n = len(plist[0][0].rows)
        rank_h = len(plist[0][1].rows)
        mapped_h = set(amap.values())
        sols = []
        for perm in itertools.permutations(range(rank_h), rank_n):
            strides = []
            for d, e in enumerate(perm):
                vals = [_stride(na.rows[d], ha.rows[e], amap) for na, ha in plist]
                nonzero = {v for v in vals if v}
                if any(v is None for v in vals) or len(nonzero) > 1:
                    break
                strides.append(nonzero.pop() if nonzero else 1)
            if len(strides) < rank_n:
                continue
            rest = [e for e in range(rank_h) if e not in perm]
            if all(not ha.rows[e].coeff(y) for _, ha in plist for e in rest for y in mapped_h):
                sols.append((tuple(perm), tuple(strides)))
        return sols

    def _layout_ok(self, bmap, dims, strides, amap, n) -> bool:
        for nb, hb in bmap.items():
            hbuf = self.hay.buffer(hb)
            if hbuf.role == "temp" or nb not in dims:
                continue
            perm = list(dims[nb])
            rank_n, rank_h = len(perm), hbuf.rank
            want = list(range(rank_h - rank_n, rank_h))
            if perm != want or (rank_n and strides[nb][-1] != 1):
                full = tuple([d for d in range(rank_h) if d not in perm] + perm)
                self.log.add(FailureKind.LAYOUT, f"layout: mapped dims {perm} of {hb} are not its innermost dims "
                             f"{want} in needle order (needs transpose({hb}, {_tuple_text(full)}))", n,
                             None, None, detail=LayoutMismatch(hb, full))
                return False
        return True


def _stride(rn: Affine, rh: Affine, amap: dict) -> int | None:
    """Positive integer s with rh[amap[x]] == s * rn[x] for the assigned needle axes
    (0 when the needle row is zero there and so is the haystack row), else None."""
    s = 0
    for x, y in amap.items():
        cn, ch = rn.coeff(x), rh.coeff(y)
        if cn == 0:
            if ch != 0:
                return None
            continue
        if ch == 0 or ch % cn or ch // cn <= 0:
            return None
        q = ch // cn
        if s and q != s:
            return None
        s = q
    return s


def _close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _amap_text(amap: TMapping[str, str]) -> str:
    return "{" + ", ".join(f"{x}->{y}" for x, y in amap.items()) + "}"
