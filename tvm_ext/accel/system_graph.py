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
combination, with ``{c}``/``{r}`` substituted in its strings; edge ``src`` /
``dst`` may be glob patterns (``"c{c}.rf*"``), connecting every matching pair.
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

import fnmatch
import heapq
import itertools
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping

from tvm_ext.errors import ConfigError

__all__ = [
    "MemoryNode",
    "ComputeNode",
    "CopyEngine",
    "MoveEdge",
    "SystemGraph",
    "load_system",
    "available_systems",
    "HOME_KINDS",
]

#: Memory kinds that may hold a tensor's home copy (the data before and after a run).
HOME_KINDS = ("hbm", "host")
_CONFIG_DIR = Path(__file__).parent / "configs"


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
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int) or self.capacity <= 0:
            raise ConfigError(f"{what}: capacity must be a positive number of bytes, got {self.capacity!r}")
        if self.bandwidth is not None and not _positive(self.bandwidth):
            raise ConfigError(f"{what}: port bandwidth must be > 0 bytes/cycle (or null), got {self.bandwidth!r}")
        if self.max_operands is not None and (not isinstance(self.max_operands, int) or self.max_operands < 1):
            raise ConfigError(f"{what}: max_operands must be a positive integer, got {self.max_operands!r}")


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
        if isinstance(self.channels, bool) or not isinstance(self.channels, int) or self.channels < 1:
            raise ConfigError(f"copy engine {self.name!r}: channels must be a positive integer, got {self.channels!r}")


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
    return not isinstance(x, bool) and isinstance(x, (int, float)) and x > 0


# --------------------------------------------------------------------------- dict expansion


def _subst(value: Any, env: Mapping[str, int]) -> Any:
    if isinstance(value, str):
        try:
            return value.format(**env)
        except (KeyError, IndexError, ValueError) as e:
            raise ConfigError(f"system config: cannot substitute {value!r} with {dict(env)} ({e})") from None
    if isinstance(value, list):
        return [_subst(v, env) for v in value]
    if isinstance(value, dict):
        return {_subst(k, env): _subst(v, env) for k, v in value.items()}
    return value


def _expand(entries: Any, what: str) -> list[dict]:
    """Apply ``foreach`` repetition to a list of entry dicts."""
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ConfigError(f"system config: {what} must be a list, got {type(entries).__name__}")
    out = []
    for e in entries:
        if not isinstance(e, dict):
            raise ConfigError(f"system config: each of {what} must be an object, got {e!r}")
        e = dict(e)
        loop = e.pop("foreach", None)
        if loop is None:
            out.append(e)
            continue
        if not isinstance(loop, dict) or not all(isinstance(n, int) and n >= 1 for n in loop.values()):
            raise ConfigError(f"system config: {what} foreach must map names to positive counts, got {loop!r}")
        names = list(loop)
        for combo in itertools.product(*(range(loop[n]) for n in names)):
            out.append(_subst(e, dict(zip(names, combo))))
    return out


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
    def from_dict(cls, data: Mapping[str, Any]) -> "SystemGraph":
        """Build (and validate) a graph from a plain dict; see the module docstring for ``foreach``."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"system config: expected a JSON object, got {type(data).__name__}")
        data = dict(data)
        known = {"name", "description", "isa", "clock_ghz", "transposing_copies", "memories", "computes",
                 "copy_engines", "edges"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"system config: unknown field(s) {unknown}; known: {sorted(known)}")
        _need(data, ("name", "memories", "computes", "edges"), "system config")
        memories = []
        for m in _expand(data["memories"], "memories"):
            _need(m, ("name", "kind", "capacity"), f"memory {m.get('name', '?')!r}")
            memories.append(MemoryNode(**_fields_of(MemoryNode, m, f"memory {m['name']!r}")))
        engines = []
        for e in _expand(data.get("copy_engines"), "copy_engines"):
            _need(e, ("name",), "copy engine")
            engines.append(CopyEngine(**_fields_of(CopyEngine, e, f"copy engine {e['name']!r}")))
        computes = [cls._compute(c, data.get("isa", "accel")) for c in _expand(data["computes"], "computes")]
        mem_names = [m.name for m in memories]
        edges = []
        for e in _expand(data["edges"], "edges"):
            edges += cls._edges(e, mem_names)
        return cls(
            name=str(data["name"]), memories=tuple(memories), computes=tuple(computes), edges=tuple(edges),
            copy_engines=tuple(engines), isa=str(data.get("isa", "accel")),
            clock_ghz=float(data.get("clock_ghz", 1.0)),
            transposing_copies=bool(data.get("transposing_copies", True)),
            description=str(data.get("description", "")),
        )

    @staticmethod
    def _compute(c: dict, isa_name: str) -> ComputeNode:
        from tensorize import get_isa

        _need(c, ("name", "kind", "memories", "instructions"), f"compute node {c.get('name', '?')!r}")
        what = f"compute node {c['name']!r}"
        _fields_of(ComputeNode, c, what)
        isa = get_isa(isa_name)
        spec = c["instructions"]
        if isinstance(spec, list):
            spec = {n: None for n in spec}
        if not isinstance(spec, dict) or not spec:
            raise ConfigError(f"{what}: instructions must be a non-empty list or {{name: cycles}} object")
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
        return ComputeNode(str(c["name"]), str(c["kind"]), tuple(str(m) for m in mems),
                           tuple(chosen.items()), bool(c.get("distinct_operand_memories", False)))

    @staticmethod
    def _edges(e: dict, mem_names: list[str]) -> list[MoveEdge]:
        _need(e, ("src", "dst", "bandwidth", "latency", "issuer"), f"edge {e.get('src', '?')}->{e.get('dst', '?')}")
        extra = sorted(set(e) - {"src", "dst", "bandwidth", "latency", "issuer", "bidirectional"})
        if extra:
            raise ConfigError(f"edge {e['src']}->{e['dst']}: unknown field(s) {extra}")
        srcs = [m for m in mem_names if fnmatch.fnmatchcase(m, str(e["src"]))]
        dsts = [m for m in mem_names if fnmatch.fnmatchcase(m, str(e["dst"]))]
        if not srcs or not dsts:
            side, pat = ("src", e["src"]) if not srcs else ("dst", e["dst"])
            raise ConfigError(f"edge {e['src']}->{e['dst']}: {side} {pat!r} names no memory (have {mem_names})")
        out = []
        for s, d in itertools.product(srcs, dsts):
            if s == d:
                continue
            out.append(MoveEdge(s, d, e["bandwidth"], e["latency"], str(e["issuer"])))
            if e.get("bidirectional", False):
                out.append(MoveEdge(d, s, e["bandwidth"], e["latency"], str(e["issuer"])))
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
    def from_json(cls, text: str) -> "SystemGraph":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"system config: invalid JSON ({e})") from None
        return cls.from_dict(data)

    # -- validation ------------------------------------------------------------
    def _validate(self) -> None:
        from tensorize import get_isa

        get_isa(self.isa)  # ConfigError for unknown ISAs
        if not _positive(self.clock_ghz):
            raise ConfigError(f"system {self.name!r}: clock_ghz must be > 0, got {self.clock_ghz!r}")
        names = [m.name for m in self.memories] + [c.name for c in self.computes] + [e.name for e in self.copy_engines]
        dup = sorted({n for n in names if names.count(n) > 1})
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
        for h in homes:
            fwd, back = self._reach(h, forward=True), self._reach(h, forward=False)
            for m in used:
                if m not in fwd:
                    raise ConfigError(f"system {self.name!r}: memory {m!r} is unreachable from {h!r} "
                                      "(no chain of edges copies data there)")
                if m not in back:
                    raise ConfigError(f"system {self.name!r}: {h!r} is unreachable from memory {m!r} "
                                      "(results there could never be written back)")

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
        from tensorize import get_isa

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
        from tensorize import get_isa

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


def load_system(spec: "SystemGraph | str | Path | Mapping | None" = None) -> SystemGraph:
    """A :class:`SystemGraph` from a bundled name, a JSON path, a dict or a graph (None: ``"default"``).

    >>> load_system("mini").name
    'isam-mini'
    """
    if isinstance(spec, SystemGraph):
        return spec
    if spec is None:
        spec = "default"
    if isinstance(spec, Mapping):
        return SystemGraph.from_dict(spec)
    if isinstance(spec, (str, Path)):
        key = str(spec)
        if key in _LOADED:
            return _LOADED[key]
        path = Path(spec)
        if not path.suffix and (_CONFIG_DIR / f"{key}.json").exists():
            path = _CONFIG_DIR / f"{key}.json"
        if not path.exists():
            raise ConfigError(f"system config {key!r}: no such file or bundled config "
                              f"(bundled: {available_systems()})")
        graph = SystemGraph.from_json(path.read_text())
        if path.parent == _CONFIG_DIR:  # bundled configs never change; user files are re-read
            _LOADED[key] = graph
        return graph
    raise ConfigError(f"system config: expected a name, path, dict or SystemGraph, got {type(spec).__name__}")
