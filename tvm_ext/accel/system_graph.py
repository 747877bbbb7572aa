"""ISA Mapper §3.2: the system description graph (compute nodes, memory nodes, movement edges).

The graph is the hardware abstraction the scheduler works against: its nodes
and edges (:mod:`~tvm_ext.accel.system_nodes`) are memories with a capacity,
port bandwidth and allocation rule, compute units running instructions from
the ``tensorize`` instruction library, copy engines, and directed copy edges
with bandwidth, latency and issuer.  :class:`SystemGraph` checks the graph as
a whole (unique names, known memories and issuers, every used memory reachable
from a home memory and back) and answers the scheduler's questions (units for
an instruction, cycle costs, locality domains, cheapest copy paths).

Graphs load from a plain dict or a JSON file (:func:`load_system`); the dict
form, its ``foreach`` repetition and edge globs are read by
:mod:`~tvm_ext.accel.system_config`.  :meth:`SystemGraph.to_dict` writes the
expanded form, which loads back equal.

>>> g = load_system("default")
>>> g.name, len(g.computes), g.memory("c0.rf0").capacity
('isam-default', 32, 262144)
>>> SystemGraph.from_dict(g.to_dict()) == g
True
>>> [e.issuer for e in g.path("hbm0", "c3.rf1")]
['c3.dma']
"""
from __future__ import annotations

import heapq
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tvm_ext.errors import ConfigError
from tvm_ext.json_config import parse_json, read_json_file

from .system_config import CONFIG_DIR, MAX_SYSTEM_NODES_ENV, available_systems, max_system_nodes, system_fields
from .system_nodes import HOME_KINDS, ComputeNode, CopyEngine, MemoryNode, MoveEdge, is_positive_number

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
        """Build (and validate) a graph from its plain-dict form (:mod:`~tvm_ext.accel.system_config`).

        ``max_nodes`` caps the expanded entries plus edges (default 100,000 or
        ``$TVM_EXT_MAX_SYSTEM_NODES``); a larger expansion raises :class:`ConfigError`
        with its count before anything is built.
        """
        return cls(**system_fields(data, max_nodes=max_nodes))

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
        if not is_positive_number(self.clock_ghz):
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
            if not is_positive_number(e.bandwidth):
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
            path = CONFIG_DIR / f"{key}.json"
        if not path.exists():
            raise ConfigError(f"system config {key!r}: no such file or bundled config "
                              f"(bundled: {available_systems()})")
        data = read_json_file(path)
        try:
            graph = SystemGraph.from_dict(data, max_nodes=max_nodes)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None
        if path.parent == CONFIG_DIR:  # bundled configs never change; user files are re-read
            _LOADED[key] = graph
        return graph
    raise ConfigError(f"system config: expected a name, path, dict or SystemGraph, got {type(spec).__name__}")
