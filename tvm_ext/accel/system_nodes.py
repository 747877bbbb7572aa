"""The nodes and edges of a system graph (ISA Mapper §3.2): memories, compute units, copy engines, copy edges.

* **memory nodes** (:class:`MemoryNode`): capacity in bytes, an optional port
  bandwidth (bytes/cycle shared by every copy in or out), and the allocation
  rule ``max_operands`` (how many operands of one instruction may live in it;
  1 = "operands must be on different register files");
* **compute nodes** (:class:`ComputeNode`): the instructions they run, taken
  from the ``tensorize`` instruction library, each with a cycle cost
  (``None`` = the library's nominal cost), and the memories they can read and
  write; ``distinct_operand_memories`` forbids two operands of one
  instruction on the same memory;
* **movement edges** (:class:`MoveEdge`): a directed copy channel between two
  memories with bandwidth (bytes/cycle), latency (cycles) and the device that
  issues the copy (a compute node or a :class:`CopyEngine`).

>>> MoveEdge("hbm0", "c0.rf0", bandwidth=64.0, latency=10.0, issuer="c0.dma").cycles(640)
20.0
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from tvm_ext.errors import ConfigError, positive_int

__all__ = ["HOME_KINDS", "MemoryNode", "ComputeNode", "CopyEngine", "MoveEdge", "is_positive_number", "check_name"]

#: Memory kinds that may hold a tensor's home copy (the data before and after a run).
HOME_KINDS = ("hbm", "host")


def is_positive_number(x: Any) -> bool:
    """Whether ``x`` is a finite number > 0 (a bool is not a number here).

    >>> is_positive_number(2.5), is_positive_number(0), is_positive_number(True)
    (True, False, False)
    """
    return not isinstance(x, bool) and isinstance(x, (int, float)) and 0 < x < math.inf


def check_name(value: Any, what: str) -> str:
    """``value`` if it is a non-empty printable string, else :class:`ConfigError` naming ``what``.

    >>> check_name("c0.rf0", "memory: name")
    'c0.rf0'
    """
    if not isinstance(value, str) or not value or not value.isprintable():
        raise ConfigError(f"{what} must be a non-empty printable string, got {value!r}")
    return value


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
        check_name(self.name, "memory: name")
        check_name(self.kind, f"{what}: kind")
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int) or self.capacity <= 0:
            raise ConfigError(f"{what}: capacity must be a positive number of bytes, got {self.capacity!r}")
        if self.bandwidth is not None and not is_positive_number(self.bandwidth):
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
        check_name(self.name, "copy engine: name")
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

