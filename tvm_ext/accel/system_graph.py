"""ISA Mapper §3.2: the system description graph (compute nodes, memory nodes, movement edges).

The graph is the hardware abstraction the scheduler works against:

* **memory nodes** (:class:`MemoryNode`): capacity in bytes, an optional port
  bandwidth (bytes/cycle shared by every copy in or out), and the allocation
  rule ``max_operands`` (how many operands of one instruction may live in it;
  1 = "operands must be on different register files");
* **compute nodes** (:class:`ComputeNode`): the instructions they run, taken
  from the ``tensorize`` instruction library (ISA ``isa``), each with a cycle
  cost (``null`` = the library's nominal cost), and the memories they can
  read and write; ``distinct_operand_memories`` forbids two operands of one
  instruction on the same memory;
* **movement edges** (:class:`MoveEdge`): a directed copy channel between two
  memories with bandwidth (bytes/cycle), latency (cycles) and the device that
  issues the copy (a compute node or a :class:`CopyEngine`).

Graphs load from a plain dict or a JSON file (:func:`load_system`).  Any entry
may carry ``"foreach": {"c": 8, "r": 4}``: it is repeated for every
combination, with ``{c}``/``{r}`` substituted in its strings (only plain
``{name}`` fields: no attributes, indexing, conversions or format specs;
``{{``/``}}`` are literal braces); edge ``src`` / ``dst`` may be glob patterns
(``"c{c}.rf*"``), connecting every matching pair.  The expansion is counted
before it is built: more than ``max_nodes`` entries and edges (default
100,000, or ``$TVM_EXT_MAX_SYSTEM_NODES``) raise :class:`ConfigError`.
:meth:`SystemGraph.to_dict` writes the expanded form, which loads back equal.

>>> g = load_system("default")
>>> g.name, len(g.computes), g.memory("c0.rf0").capacity
('isam-default', 32, 262144)
>>> SystemGraph.from_dict(g.to_dict()) == g
True
>>> [e.issuer for e in g.path("hbm0", "c3.rf1")]
['c3.dma']
"""
from __future__ import annotations

import bisect
import fnmatch
import heapq
import itertools
import json
import math
import os
import string
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping

from tvm_ext.errors import ConfigError, positive_int
from tvm_ext.json_config import check_finite, parse_json, read_json_file

__all__ = [
    "MemoryNode",
    "ComputeNode",
    "CopyEngine",
    "MoveEdge",
    "SystemGraph",
    "load_system",
    "available_systems",
    "HOME_KINDS",
    "MAX_SYSTEM_NODES_ENV",
    "max_system_nodes",
]

#: Memory kinds that may hold a tensor's home copy (the data before and after a run).
HOME_KINDS = ("hbm", "host")
_CONFIG_DIR = Path(__file__).parent / "configs"
#: Environment variable overriding the default limit on expanded entries and edges of a config.
MAX_SYSTEM_NODES_ENV = "TVM_EXT_MAX_SYSTEM_NODES"
_DEFAULT_MAX_NODES = 100_000


@dataclass(frozen=True)
class MemoryNode:
    """An explicitly managed memory: a register file, an HBM module, host DRAM."""

    name: str
    kind: str
    capacity: int
    bandwidth: float | None = None  # port bytes/cycle shared by all copies (None: unlimited)
    max_operands: int | None = None  # operands of one instruction it may hold (None: any)

    def __post_init__(self) -> None:
        what = f"memory {self.name!r}"
        _check_str(self.name, "memory: name")
        _check_str(self.kind, f"{what}: kind")
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int) or self.capacity <= 0:
            raise ConfigError(f"{what}: capacity must be a positive number of bytes, got {self.capacity!r}")
        if self.bandwidth is not None and not _positive(self.bandwidth):
            raise ConfigError(f"{what}: port bandwidth must be > 0 bytes/cycle (or null), got {self.bandwidth!r}")
        if self.max_operands is not None:
            positive_int(self.max_operands, f"{what}: max_operands", ConfigError)


@dataclass(frozen=True)
class ComputeNode:
    """A unit that executes instructions on operands in the memories it can access."""

    name: str
    kind: str
    memories: tuple[str, ...]
    instructions: tuple[tuple[str, float | None], ...]  # (instruction name, cycles or None)
    distinct_operand_memories: bool = False

    @property
    def instruction_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.instructions)


@dataclass(frozen=True)
class CopyEngine:
    """A DMA engine: issues copies and runs them beside the compute units.

    ``channels`` independent queues: a copy waiting for its data blocks only
    its own channel.
    """

    name: str
    channels: int = 1

    def __post_init__(self) -> None:
        _check_str(self.name, "copy engine: name")
        positive_int(self.channels, f"copy engine {self.name!r}: channels", ConfigError)


@dataclass(frozen=True)
class MoveEdge:
    """A directed copy channel ``src -> dst`` issued by ``issuer``."""

    src: str
    dst: str
    bandwidth: float  # bytes/cycle
    latency: float  # cycles from issue to the first byte landing
    issuer: str

    def cycles(self, nbytes: int) -> float:
        """Issue-to-arrival time of one ``nbytes`` copy on an idle channel."""
        return self.latency + nbytes / self.bandwidth


def _positive(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, (int, float)) and 0 < x < math.inf


def _check_str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or not value.isprintable():
        raise ConfigError(f"{what} must be a non-empty printable string, got {value!r}")
    return value


def max_system_nodes(max_nodes: int | None = None) -> int:
    """The expansion limit: ``max_nodes``, else ``$TVM_EXT_MAX_SYSTEM_NODES``, else 100,000.

    >>> max_system_nodes(), max_system_nodes(5)
    (100000, 5)
    """
    if max_nodes is None:
        env = os.environ.get(MAX_SYSTEM_NODES_ENV, "").strip()
        if not env:
            return _DEFAULT_MAX_NODES
        if not env.isdigit() or int(env) < 1:
            raise ConfigError(f"${MAX_SYSTEM_NODES_ENV}: expected a positive integer, got {env!r}")
        return int(env)
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, int) or max_nodes < 1:
        raise ConfigError(f"max_nodes: expected a positive integer, got {max_nodes!r}")
    return max_nodes


# --------------------------------------------------------------------------- dict expansion


def _template(text: str, names: Iterable[str], what: str) -> list[tuple[str, str | None]]:
    """Split a name template into (literal, field) pieces; only plain ``{name}`` fields are allowed."""
    try:
        pieces = list(string.Formatter().parse(text))
    except ValueError as e:
        raise ConfigError(f"{what}: bad template {text!r} ({e})") from None
    out = []
    for literal, name, spec, conversion in pieces:
        if name is not None:
            if conversion is not None or spec or not name.isidentifier():
                shown = "{" + name + ("!" + conversion if conversion else "") + (":" + spec if spec else "") + "}"
                raise ConfigError(f"{what}: template field {shown!r} in {text!r} is not allowed; "
                                  "only plain {name} substitution of a foreach variable is")
            if name not in names:
                raise ConfigError(f"{what}: template {text!r} uses {{{name}}}, which is not a foreach "
                                  f"variable (have {sorted(names)})")
        out.append((literal, name))
    return out


def _subst(value: Any, env: Mapping[str, int], what: str) -> Any:
    if isinstance(value, str):
        return "".join(lit + ("" if name is None else str(env[name])) for lit, name in _template(value, env, what))
    if isinstance(value, list):
        return [_subst(v, env, what) for v in value]
    if isinstance(value, dict):
        return {_subst(k, env, what): _subst(v, env, what) for k, v in value.items()}
    return value


def _repeats(e: dict, what: str) -> int:
    """How many entries ``e`` expands to (checking its ``foreach``)."""
    loop = e.get("foreach")
    if loop is None:
        return 1
    if (not isinstance(loop, dict) or not loop
            or not all(isinstance(k, str) and k.isidentifier() for k in loop)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in loop.values())):
        raise ConfigError(f"system config: {what} foreach must map variable names to positive counts, "
                          f"got {loop!r}")
    return math.prod(loop.values())


def _entries(entries: Any, what: str) -> list[dict]:
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(f"system config: {what} must be a list, got {type(entries).__name__}")
    for e in entries:
        if not isinstance(e, dict):
            raise ConfigError(f"system config: each of {what} must be an object, got {e!r}")
    return entries


def _count_expansion(data: Mapping[str, Any], limit: int) -> None:
    """Refuse a config whose ``foreach`` expansion exceeds ``limit`` entries, before expanding it."""
    total = 0
    for section in ("memories", "copy_engines", "computes", "edges"):
        for e in _entries(data.get(section), section):
            total += _repeats(e, section)
    if total > limit:
        raise ConfigError(f"system config: foreach expands to {total:,} entries, above the limit of {limit:,} "
                          f"(raise it with max_nodes= or ${MAX_SYSTEM_NODES_ENV})")


def _expand(entries: Any, what: str) -> list[dict]:
    """Apply ``foreach`` repetition to a list of entry dicts (sizes already checked)."""
    out = []
    for e in _entries(entries, what):
        _repeats(e, what)
        e = dict(e)
        loop = e.pop("foreach", None)
        if loop is None:
            out.append(e)
            continue
        names = list(loop)
        for combo in itertools.product(*(range(loop[k]) for k in names)):
            out.append(_subst(e, dict(zip(names, combo)), f"system config: {what}"))
    return out


class _NameIndex:
    """Memory names sorted for glob lookups: a pattern only scans the names sharing its literal prefix."""

    def __init__(self, names: list[str], max_scan: int) -> None:
        self.names = names
        self.scanned, self.max_scan = 0, max_scan
        self.exact = set(names)
        self.order = sorted(range(len(names)), key=names.__getitem__)
        self.sorted = [names[i] for i in self.order]

    def match(self, pattern: str) -> list[str]:
        cut = min((i for i, ch in enumerate(pattern) if ch in "*?["), default=None)
        if cut is None:
            return [pattern] if pattern in self.exact else []
        prefix = pattern[:cut]
        lo = bisect.bisect_left(self.sorted, prefix)
        hi = bisect.bisect_left(self.sorted, prefix + "\U0010ffff") if prefix else len(self.sorted)
        self.scanned += hi - lo
        if self.scanned > self.max_scan:
            raise ConfigError(f"system config: edge glob patterns compare more than {self.max_scan:,} memory "
                              f"names (raise the limit with max_nodes= or ${MAX_SYSTEM_NODES_ENV})")
        hits = sorted(self.order[k] for k in range(lo, hi) if fnmatch.fnmatchcase(self.sorted[k], pattern))
        return [self.names[i] for i in hits]


def _fields_of(cls, data: dict, what: str) -> dict:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{what}: unknown field(s) {unknown}; known: {sorted(known)}")
    return data


def _need(data: dict, keys: Iterable[str], what: str) -> None:
    missing = [k for k in keys if k not in data]
    if missing:
        raise ConfigError(f"{what}: missing field(s) {missing}")


# --------------------------------------------------------------------------- the graph


@dataclass(frozen=True)
class SystemGraph:
    """The machine: memories, compute units, copy engines and copy edges (§3.2).

    ``isa`` names the ``tensorize`` instruction library the compute nodes draw
    from; ``transposing_copies`` says whether copies into a tile may permute
    its dimensions (a transposing DMA), which lets the mapper's transposed
    operand maps run without a separate transpose instruction.
    """

    name: str
    memories: tuple[MemoryNode, ...]
    computes: tuple[ComputeNode, ...]
    edges: tuple[MoveEdge, ...]
    copy_engines: tuple[CopyEngine, ...] = ()
    isa: str = "accel"
    clock_ghz: float = 1.0
    transposing_copies: bool = True
    description: str = ""
    _derived: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        self._validate()

    # -- construction ----------------------------------------------------------
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, max_nodes: int | None = None) -> "SystemGraph":
        """Build (and validate) a graph from a plain dict; see the module docstring for ``foreach``.

        ``max_nodes`` caps the expanded entries plus edges (default 100,000 or
        ``$TVM_EXT_MAX_SYSTEM_NODES``); a larger expansion raises :class:`ConfigError`
        with its count before anything is built.
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"system config: expected a JSON object, got {type(data).__name__}")
        data = dict(data)
        known = {"name", "description", "isa", "clock_ghz", "transposing_copies", "memories", "computes",
                 "copy_engines", "edges"}
        unknown = sorted(set(data) - known, key=str)
        if unknown:
            raise ConfigError(f"system config: unknown field(s) {unknown}; known: {sorted(known)}")
        _need(data, ("name", "memories", "computes", "edges"), "system config")
        check_finite(data, "system config")
        name = _check_str(data["name"], "system config: name")
        isa_name = _check_str(data.get("isa", "accel"), "system config: isa")
        description = data.get("description", "")
        if not isinstance(description, str):
            raise ConfigError(f"system config: description must be a string, got {description!r}")
        clock = data.get("clock_ghz", 1.0)
        if not _positive(clock):
            raise ConfigError(f"system config: clock_ghz must be a positive number, got {clock!r}")
        transposing = data.get("transposing_copies", True)
        if not isinstance(transposing, bool):
            raise ConfigError(f"system config: transposing_copies must be true or false, got {transposing!r}")
        limit = max_system_nodes(max_nodes)
        _count_expansion(data, limit)
        memories = []
        for m in _expand(data["memories"], "memories"):
            _need(m, ("name", "kind", "capacity"), f"memory {m.get('name', '?')!r}")
            memories.append(MemoryNode(**_fields_of(MemoryNode, m, f"memory {m['name']!r}")))
        engines = []
        for e in _expand(data.get("copy_engines"), "copy_engines"):
            _need(e, ("name",), "copy engine")
            engines.append(CopyEngine(**_fields_of(CopyEngine, e, f"copy engine {e['name']!r}")))
        computes = [cls._compute(c, isa_name) for c in _expand(data["computes"], "computes")]
        index = _NameIndex([m.name for m in memories], max_scan=100 * limit)
        edges: list[MoveEdge] = []
        budget = limit - len(memories) - len(engines) - len(computes)
        for e in _expand(data["edges"], "edges"):
            edges += cls._edges(e, index, budget - len(edges), limit)
        return cls(
            name=name, memories=tuple(memories), computes=tuple(computes), edges=tuple(edges),
            copy_engines=tuple(engines), isa=isa_name, clock_ghz=float(clock),
            transposing_copies=transposing, description=description,
        )

    @staticmethod
    def _compute(c: dict, isa_name: str) -> ComputeNode:
        from tensorize.instructions import get_isa

        _need(c, ("name", "kind", "memories", "instructions"), f"compute node {c.get('name', '?')!r}")
        _check_str(c["name"], "compute node: name")
        what = f"compute node {c['name']!r}"
        _fields_of(ComputeNode, c, what)
        _check_str(c["kind"], f"{what}: kind")
        isa = get_isa(isa_name)
        spec = c["instructions"]
        if isinstance(spec, list):
            for n in spec:
                _check_str(n, f"{what}: each instruction")
            spec = {n: None for n in spec}
        if not isinstance(spec, dict) or not spec:
            raise ConfigError(f"{what}: instructions must be a non-empty list or {{name: cycles}} object")
        distinct = c.get("distinct_operand_memories", False)
        if not isinstance(distinct, bool):
            raise ConfigError(f"{what}: distinct_operand_memories must be true or false, got {distinct!r}")
        chosen: dict[str, float | None] = {}
        for pattern, cycles in spec.items():
            names = [n for n in isa.names if fnmatch.fnmatchcase(n, pattern)]
            if not names:
                raise ConfigError(
                    f"{what}: instruction {pattern!r} is not in the {isa.name!r} instruction library "
                    f"(have {isa.names})")
            if cycles is not None and not _positive(cycles):
                raise ConfigError(f"{what}: cycles of {pattern!r} must be > 0 (or null), got {cycles!r}")
            for n in names:
                chosen[n] = None if cycles is None else float(cycles)
        mems = c["memories"]
        if isinstance(mems, str) or not isinstance(mems, list) or not mems:
            raise ConfigError(f"{what}: memories must be a non-empty list of memory names")
        for m in mems:
            _check_str(m, f"{what}: each of memories")
        return ComputeNode(c["name"], c["kind"], tuple(mems), tuple(chosen.items()), distinct)

    @staticmethod
    def _edges(e: dict, index: _NameIndex, budget: int, limit: int) -> list[MoveEdge]:
        label = "->".join(v if isinstance(v, str) and v.isprintable() else repr(v)
                          for v in (e.get("src", "?"), e.get("dst", "?")))
        _need(e, ("src", "dst", "bandwidth", "latency", "issuer"), f"edge {label}")
        what = f"edge {label}"
        extra = sorted(set(e) - {"src", "dst", "bandwidth", "latency", "issuer", "bidirectional"}, key=str)
        if extra:
            raise ConfigError(f"{what}: unknown field(s) {extra}")
        for key in ("src", "dst", "issuer"):
            _check_str(e[key], f"{what}: {key}")
        both = e.get("bidirectional", False)
        if not isinstance(both, bool):
            raise ConfigError(f"{what}: bidirectional must be true or false, got {both!r}")
        srcs, dsts = index.match(e["src"]), index.match(e["dst"])
        if not srcs or not dsts:
            side, pat = ("src", e["src"]) if not srcs else ("dst", e["dst"])
            have = index.names if len(index.names) <= 20 else index.names[:20] + ["..."]
            raise ConfigError(f"{what}: {side} {pat!r} names no memory (have {have})")
        pairs = len(srcs) * len(dsts) * (2 if both else 1)
        if pairs > budget:
            raise ConfigError(f"{what}: its {pairs:,} edges take the config past its limit of {limit:,} "
                              f"entries and edges (raise it with max_nodes= or ${MAX_SYSTEM_NODES_ENV})")
        out = []
        for s, d in itertools.product(srcs, dsts):
            if s == d:
                continue
            out.append(MoveEdge(s, d, e["bandwidth"], e["latency"], e["issuer"]))
            if both:
                out.append(MoveEdge(d, s, e["bandwidth"], e["latency"], e["issuer"]))
        return out

    def to_dict(self) -> dict[str, Any]:
        """The expanded plain-dict form (loads back equal with :meth:`from_dict`)."""
        return {
            "name": self.name,
            "description": self.description,
            "isa": self.isa,
            "clock_ghz": self.clock_ghz,
            "transposing_copies": self.transposing_copies,
            "memories": [{k: v for k, v in asdict(m).items() if v is not None} for m in self.memories],
            "copy_engines": [asdict(e) for e in self.copy_engines],
            "computes": [{"name": c.name, "kind": c.kind, "memories": list(c.memories),
                          "instructions": dict(c.instructions),
                          "distinct_operand_memories": c.distinct_operand_memories} for c in self.computes],
            "edges": [asdict(e) for e in self.edges],
        }

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str, *, max_nodes: int | None = None) -> "SystemGraph":
        """Parse JSON text (NaN/Infinity refused, naming the key) and build the graph."""
        return cls.from_dict(parse_json(text, "system config"), max_nodes=max_nodes)

    # -- validation ------------------------------------------------------------
    def _validate(self) -> None:
        from tensorize.instructions import get_isa

        get_isa(self.isa)  # ConfigError for unknown ISAs
        if not _positive(self.clock_ghz):
            raise ConfigError(f"system {self.name!r}: clock_ghz must be > 0, got {self.clock_ghz!r}")
        names = [m.name for m in self.memories] + [c.name for c in self.computes] + [e.name for e in self.copy_engines]
        dup = sorted(n for n, k in Counter(names).items() if k > 1)
        if dup:
            raise ConfigError(f"system {self.name!r}: duplicate node name(s) {dup}")
        if not self.memories or not self.computes:
            raise ConfigError(f"system {self.name!r}: needs at least one memory and one compute node")
        mems = {m.name for m in self.memories}
        issuers = {c.name for c in self.computes} | {e.name for e in self.copy_engines}
        for c in self.computes:
            bad = [m for m in c.memories if m not in mems]
            if bad:
                raise ConfigError(f"compute node {c.name!r}: unknown memory {bad[0]!r}")
        seen = set()
        for e in self.edges:
            what = f"edge {e.src}->{e.dst}"
            if e.src not in mems or e.dst not in mems:
                raise ConfigError(f"{what}: unknown memory {e.src if e.src not in mems else e.dst!r}")
            if e.src == e.dst:
                raise ConfigError(f"{what}: an edge must join two different memories")
            if not _positive(e.bandwidth):
                raise ConfigError(f"{what}: bandwidth must be > 0 bytes/cycle, got {e.bandwidth!r} "
                                  "(a zero-bandwidth edge can never move data)")
            if isinstance(e.latency, bool) or not isinstance(e.latency, (int, float)) or e.latency < 0:
                raise ConfigError(f"{what}: latency must be >= 0 cycles, got {e.latency!r}")
            if e.issuer not in issuers:
                raise ConfigError(f"{what}: issuer {e.issuer!r} is neither a compute node nor a copy engine")
            if (e.src, e.dst) in seen:
                raise ConfigError(f"{what}: declared twice")
            seen.add((e.src, e.dst))
        homes = [m.name for m in self.memories if m.kind in HOME_KINDS]
        if not homes:
            raise ConfigError(f"system {self.name!r}: no memory of kind {HOME_KINDS} to hold tensors")
        used = sorted({m for c in self.computes for m in c.memories})
        # Every home must reach every used memory and back.  Checking the first home against all of
        # them, then every other home against the first used memory only, is equivalent (h -> m0 -> h0
        # -> m and back) and takes four graph searches instead of one pair per home.
        def unreachable(m: str, h: str, forward: bool) -> ConfigError:
            if forward:
                return ConfigError(f"system {self.name!r}: memory {m!r} is unreachable from {h!r} "
                                   "(no chain of edges copies data there)")
            return ConfigError(f"system {self.name!r}: {h!r} is unreachable from memory {m!r} "
                               "(results there could never be written back)")

        if not used:
            return
        h0, m0 = homes[0], used[0]
        fwd, back = self._reach(h0, forward=True), self._reach(h0, forward=False)
        for m in used:
            if m not in fwd:
                raise unreachable(m, h0, True)
            if m not in back:
                raise unreachable(m, h0, False)
        to_m0, from_m0 = self._reach(m0, forward=False), self._reach(m0, forward=True)
        for h in homes[1:]:
            if h not in to_m0:
                raise unreachable(m0, h, True)
            if h not in from_m0:
                raise unreachable(m0, h, False)

    def _reach(self, start: str, forward: bool) -> set[str]:
        adj: dict[str, list[str]] = {}
        for e in self.edges:
            a, b = (e.src, e.dst) if forward else (e.dst, e.src)
            adj.setdefault(a, []).append(b)
        seen, todo = {start}, [start]
        while todo:
            for nxt in adj.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    # -- lookups -----------------------------------------------------------------
    def _index(self, key: str, build):
        d = self._derived
        if key not in d:
            d[key] = build()
        return d[key]

    @property
    def memory_index(self) -> dict[str, int]:
        return self._index("mem", lambda: {m.name: i for i, m in enumerate(self.memories)})

    @property
    def devices(self) -> tuple[str, ...]:
        """Everything that runs instructions: compute nodes, then copy engines."""
        return self._index("dev", lambda: tuple(c.name for c in self.computes)
                           + tuple(e.name for e in self.copy_engines))

    @property
    def device_index(self) -> dict[str, int]:
        return self._index("devi", lambda: {n: i for i, n in enumerate(self.devices)})

    def memory(self, name: str) -> MemoryNode:
        try:
            return self.memories[self.memory_index[name]]
        except KeyError:
            raise ConfigError(f"system {self.name!r}: no memory {name!r}") from None

    def compute(self, name: str) -> ComputeNode:
        for c in self.computes:
            if c.name == name:
                return c
        raise ConfigError(f"system {self.name!r}: no compute node {name!r}")

    @property
    def home_memories(self) -> list[str]:
        """Memories that may hold home copies, HBM first."""
        homes = [m for m in self.memories if m.kind in HOME_KINDS]
        return [m.name for m in sorted(homes, key=lambda m: HOME_KINDS.index(m.kind))]

    def supported_instructions(self) -> list[str]:
        """Instructions at least one compute node runs (ISA order)."""
        from tensorize.instructions import get_isa

        have = {n for c in self.computes for n in c.instruction_names}
        return [n for n in get_isa(self.isa).names if n in have]

    def units_for(self, instruction: str) -> list[int]:
        """Device indices of the compute nodes that run ``instruction``."""
        table = self._index("units", self._units_table)
        return table.get(instruction, [])

    def _units_table(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, c in enumerate(self.computes):
            for n in c.instruction_names:
                out.setdefault(n, []).append(i)
        return out

    def cycles(self, device: int | str, instruction: str) -> float:
        """Cycle cost of one ``instruction`` call on a compute node (config value or the library's)."""
        from tensorize.instructions import get_isa

        c = self.computes[device] if isinstance(device, int) else self.compute(device)
        for n, cyc in c.instructions:
            if n == instruction:
                return float(cyc) if cyc is not None else get_isa(self.isa)[n].call_cost()
        raise ConfigError(f"compute node {c.name!r} does not run {instruction!r}")

    def channels(self, device: int) -> int:
        """Independent queues of a device (1 for compute nodes)."""
        n = len(self.computes)
        return 1 if device < n else self.copy_engines[device - n].channels

    def domain(self, device: int) -> int:
        """Locality domain of a compute node: nodes sharing the same memories share a domain (a cluster)."""
        table = self._index("domain", self._domains)
        return table[0][device]

    @property
    def domains(self) -> list[tuple[str, ...]]:
        """Memory sets of the locality domains (index = :meth:`domain`)."""
        return self._index("domain", self._domains)[1]

    def _domains(self):
        keys: dict[tuple[str, ...], int] = {}
        dom = []
        for c in self.computes:
            k = tuple(sorted(c.memories))
            dom.append(keys.setdefault(k, len(keys)))
        return dom, list(keys)

    # -- paths ---------------------------------------------------------------
    @property
    def edge_index(self) -> dict[tuple[str, str], int]:
        return self._index("edge", lambda: {(e.src, e.dst): i for i, e in enumerate(self.edges)})

    def shortest_path(self, src: str, dst: str, nbytes: int = 4096) -> list[int]:
        """Edge indices of the cheapest ``src -> dst`` route for an ``nbytes`` copy (Dijkstra).

        The cost of a hop is ``latency + nbytes / bandwidth``.  Raises
        :class:`ConfigError` when ``dst`` is unreachable.
        """
        return list(self._path_cached(src, dst, int(nbytes)))

    def path(self, src: str, dst: str, nbytes: int = 4096) -> list[MoveEdge]:
        """The edges of :meth:`shortest_path`."""
        return [self.edges[i] for i in self.shortest_path(src, dst, nbytes)]

    def path_cost(self, src: str, dst: str, nbytes: int = 4096) -> float:
        """Unloaded cycles of the cheapest route (0 when ``src == dst``)."""
        return sum(self.edges[i].cycles(nbytes) for i in self._path_cached(src, dst, int(nbytes)))

    def _path_cached(self, src: str, dst: str, nbytes: int) -> tuple[int, ...]:
        cache = self._index("paths", dict)
        key = (src, dst, nbytes)
        if key not in cache:
            cache[key] = self._dijkstra(src, dst, nbytes)
        return cache[key]

    def _dijkstra(self, src: str, dst: str, nbytes: int) -> tuple[int, ...]:
        idx = self.memory_index
        if src not in idx or dst not in idx:
            raise ConfigError(f"system {self.name!r}: no memory {src if src not in idx else dst!r}")
        if src == dst:
            return ()
        out_edges: dict[str, list[int]] = {}
        for i, e in enumerate(self.edges):
            out_edges.setdefault(e.src, []).append(i)
        best = {src: 0.0}
        prev: dict[str, int] = {}
        heap = [(0.0, src)]
        while heap:
            d, m = heapq.heappop(heap)
            if m == dst:
                break
            if d > best.get(m, float("inf")):
                continue
            for i in out_edges.get(m, ()):
                e = self.edges[i]
                nd = d + e.cycles(nbytes)
                if nd < best.get(e.dst, float("inf")) - 1e-12:
                    best[e.dst] = nd
                    prev[e.dst] = i
                    heapq.heappush(heap, (nd, e.dst))
        if dst not in prev:
            raise ConfigError(f"system {self.name!r}: memory {dst!r} is unreachable from {src!r}")
        out = []
        m = dst
        while m != src:
            i = prev[m]
            out.append(i)
            m = self.edges[i].src
        return tuple(reversed(out))

    def __hash__(self) -> int:
        return hash((self.name, self.memories, self.computes, self.edges, self.copy_engines, self.isa))

    def summary(self) -> str:
        """One line: units by kind, memories by kind, edges."""
        kinds: dict[str, int] = {}
        for c in self.computes:
            kinds[c.kind] = kinds.get(c.kind, 0) + 1
        mk: dict[str, int] = {}
        for m in self.memories:
            mk[m.kind] = mk.get(m.kind, 0) + 1
        units = ", ".join(f"{n} {k}" for k, n in kinds.items())
        mems = ", ".join(f"{n} {k}" for k, n in mk.items())
        return (f"{self.name}: {units}; {mems}; {len(self.copy_engines)} copy engines, "
                f"{len(self.edges)} edges")


# --------------------------------------------------------------------------- loading


def available_systems() -> list[str]:
    """Names of the bundled configurations (``configs/*.json``)."""
    return sorted(p.stem for p in _CONFIG_DIR.glob("*.json"))


_LOADED: dict[str, SystemGraph] = {}


def load_system(spec: "SystemGraph | str | Path | Mapping | None" = None, *,
                max_nodes: int | None = None) -> SystemGraph:
    """A :class:`SystemGraph` from a bundled name, a JSON path, a dict or a graph (None: ``"default"``).

    Errors in a JSON file name the file and the key; ``max_nodes`` is the
    ``foreach`` expansion limit of :meth:`SystemGraph.from_dict`.

    >>> load_system("mini").name
    'isam-mini'
    """
    if isinstance(spec, SystemGraph):
        return spec
    if spec is None:
        spec = "default"
    if isinstance(spec, Mapping):
        return SystemGraph.from_dict(spec, max_nodes=max_nodes)
    if isinstance(spec, (str, Path)):
        key = str(spec)
        if key in _LOADED:
            return _LOADED[key]
        path = Path(spec)
        if not path.suffix and key in available_systems():
            path = _CONFIG_DIR / f"{key}.json"
        if not path.exists():
            raise ConfigError(f"system config {key!r}: no such file or bundled config "
                              f"(bundled: {available_systems()})")
        data = read_json_file(path)
        try:
            graph = SystemGraph.from_dict(data, max_nodes=max_nodes)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None
        if path.parent == _CONFIG_DIR:  # bundled configs never change; user files are re-read
            _LOADED[key] = graph
        return graph
    raise ConfigError(f"system config: expected a name, path, dict or SystemGraph, got {type(spec).__name__}")
