"""A system graph's plain-dict / JSON form: reading it, ``foreach`` expansion, edge globs, the size limit.

:func:`system_fields` turns the dict form into the keyword arguments of
:class:`~tvm_ext.accel.system_graph.SystemGraph`.  Any entry may carry
``"foreach": {"c": 8, "r": 4}``: it is repeated for every combination, with
``{c}``/``{r}`` substituted in its strings (only plain ``{name}`` fields: no
attributes, indexing, conversions or format specs; ``{{``/``}}`` are literal
braces); edge ``src`` / ``dst`` may be glob patterns (``"c{c}.rf*"``),
connecting every matching pair.  The expansion is counted before it is built:
more than ``max_nodes`` entries and edges (default 100,000, or
``$TVM_EXT_MAX_SYSTEM_NODES``) raise :class:`ConfigError`.  A compute node's
``instructions`` is a list of names or a ``{name: cycles}`` object (``null``
= the library's nominal cost); names may be glob patterns over the ``isa``'s
instruction library.

>>> f = system_fields({"name": "tiny", "memories": [{"name": "hbm0", "kind": "hbm", "capacity": 1 << 20},
...     {"foreach": {"r": 2}, "name": "rf{r}", "kind": "rf", "capacity": 4096}],
...     "computes": [{"name": "pe", "kind": "pe", "memories": ["rf0", "rf1"], "instructions": ["*"]}],
...     "edges": [{"src": "hbm0", "dst": "rf*", "bandwidth": 64, "latency": 10, "issuer": "pe",
...                "bidirectional": True}]})
>>> [m.name for m in f["memories"]], len(f["edges"])
(['hbm0', 'rf0', 'rf1'], 4)
"""
from __future__ import annotations

import bisect
import fnmatch
import itertools
import math
import os
import string
from dataclasses import fields
from pathlib import Path
from typing import Any, Iterable, Mapping

from tvm_ext.errors import ConfigError
from tvm_ext.json_config import check_finite

from .system_nodes import ComputeNode, CopyEngine, MemoryNode, MoveEdge, check_name, is_positive_number

__all__ = ["CONFIG_DIR", "MAX_SYSTEM_NODES_ENV", "available_systems", "max_system_nodes", "system_fields"]

#: The bundled system configurations (``<name>.json``).
CONFIG_DIR = Path(__file__).parent / "configs"
#: Environment variable overriding the default limit on expanded entries and edges of a config.
MAX_SYSTEM_NODES_ENV = "TVM_EXT_MAX_SYSTEM_NODES"
_DEFAULT_MAX_NODES = 100_000


def available_systems() -> list[str]:
    """Names of the bundled configurations (``configs/*.json``).

    >>> "default" in available_systems()
    True
    """
    return sorted(p.stem for p in CONFIG_DIR.glob("*.json"))


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


# --------------------------------------------------------------------------- the graph's fields


def system_fields(data: Mapping[str, Any], *, max_nodes: int | None = None) -> dict[str, Any]:
    """The keyword arguments of ``SystemGraph(...)`` read from its plain-dict form (``foreach`` expanded).

    ``max_nodes`` caps the expanded entries plus edges (default 100,000 or
    ``$TVM_EXT_MAX_SYSTEM_NODES``); a larger expansion raises :class:`ConfigError`
    with its count before anything is built.  Each node is checked as it is
    built; the graph as a whole is checked by ``SystemGraph`` itself.
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
    name = check_name(data["name"], "system config: name")
    isa_name = check_name(data.get("isa", "accel"), "system config: isa")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ConfigError(f"system config: description must be a string, got {description!r}")
    clock = data.get("clock_ghz", 1.0)
    if not is_positive_number(clock):
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
    computes = [_compute_node(c, isa_name) for c in _expand(data["computes"], "computes")]
    index = _NameIndex([m.name for m in memories], max_scan=100 * limit)
    edges: list[MoveEdge] = []
    budget = limit - len(memories) - len(engines) - len(computes)
    for e in _expand(data["edges"], "edges"):
        edges += _edges(e, index, budget - len(edges), limit)
    return dict(name=name, memories=tuple(memories), computes=tuple(computes), edges=tuple(edges),
                copy_engines=tuple(engines), isa=isa_name, clock_ghz=float(clock),
                transposing_copies=transposing, description=description)


def _compute_node(c: dict, isa_name: str) -> ComputeNode:
    """A compute node from its dict entry; instruction names may be globs over the ISA's library."""
    from tensorize.instructions import get_isa

    _need(c, ("name", "kind", "memories", "instructions"), f"compute node {c.get('name', '?')!r}")
    check_name(c["name"], "compute node: name")
    what = f"compute node {c['name']!r}"
    _fields_of(ComputeNode, c, what)
    check_name(c["kind"], f"{what}: kind")
    isa = get_isa(isa_name)
    spec = c["instructions"]
    if isinstance(spec, list):
        for n in spec:
            check_name(n, f"{what}: each instruction")
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
        if cycles is not None and not is_positive_number(cycles):
            raise ConfigError(f"{what}: cycles of {pattern!r} must be > 0 (or null), got {cycles!r}")
        for n in names:
            chosen[n] = None if cycles is None else float(cycles)
    mems = c["memories"]
    if isinstance(mems, str) or not isinstance(mems, list) or not mems:
        raise ConfigError(f"{what}: memories must be a non-empty list of memory names")
    for m in mems:
        check_name(m, f"{what}: each of memories")
    return ComputeNode(c["name"], c["kind"], tuple(mems), tuple(chosen.items()), distinct)


def _edges(e: dict, index: _NameIndex, budget: int, limit: int) -> list[MoveEdge]:
    """The copy edges of one edge entry: every (src, dst) pair its globs match, both ways if bidirectional."""
    label = "->".join(v if isinstance(v, str) and v.isprintable() else repr(v)
                      for v in (e.get("src", "?"), e.get("dst", "?")))
    _need(e, ("src", "dst", "bandwidth", "latency", "issuer"), f"edge {label}")
    what = f"edge {label}"
    extra = sorted(set(e) - {"src", "dst", "bandwidth", "latency", "issuer", "bidirectional"}, key=str)
    if extra:
        raise ConfigError(f"{what}: unknown field(s) {extra}")
    for key in ("src", "dst", "issuer"):
        check_name(e[key], f"{what}: {key}")
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
