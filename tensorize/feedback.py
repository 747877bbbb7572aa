"""The deterministic mapper's feedback: why a branch of the search failed, as typed records.

Every :class:`Failure` has a :class:`FailureKind` (the search stage that
rejected the branch), a depth (how far the branch got), the statements it
concerns, and, where a transformation can repair it, a typed detail
(:class:`OpMismatch`, :class:`MissingAxisRole`, :class:`CompetingAxes`,
:class:`ExtentMisfit`, :class:`LayoutMismatch`), which the passes of
:mod:`tensorize.transforms` read to propose their steps (ISA Mapper §2.3).

>>> f = Failure(FailureKind.LAYOUT, "layout", 6, detail=LayoutMismatch("W", (1, 0)))
>>> f.kind is FailureKind.LAYOUT, f.detail.perm
(True, (1, 0))
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FailureKind",
    "Failure",
    "FailureLog",
    "OpMismatch",
    "MissingAxisRole",
    "CompetingAxes",
    "AxisMisfit",
    "ExtentMisfit",
    "LayoutMismatch",
]


class FailureKind(enum.Enum):
    """The search stage that rejected a branch; ``stage`` orders them (later = closer to a mapping)."""

    STATEMENTS = ("statements", 0)   # the kernel has fewer statements than the needle
    OP = ("op", 0)                   # operator or function differs
    OPERAND = ("operand", 0)         # constant vs tensor operand
    BUFFER = ("buffer", 1)           # buffer binding conflict
    DATAFLOW = ("dataflow", 2)       # an unmatched statement uses the match's buffers
    ROLE = ("role", 3)               # no (or too few) haystack axes with the needle axis' role
    ACCESS = ("access", 4)           # access matrices disagree under every axis map
    EXTENT = ("extent", 5)           # a haystack extent is no multiple of the needle's
    LAYOUT = ("layout", 6)           # mapped dims are not the buffer's innermost, in order

    def __init__(self, label: str, stage: int):
        self.label = label
        self.stage = stage

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class OpMismatch:
    """The needle's statement has operator ``needle_op`` where the haystack's has ``hay_op``."""

    needle_op: str
    hay_op: str


@dataclass(frozen=True)
class MissingAxisRole:
    """No haystack axis indexes what needle axis ``needle_axis`` indexes (``hay_buffers``)."""

    needle_axis: str
    hay_buffers: tuple[str, ...]


@dataclass(frozen=True)
class CompetingAxes:
    """Needle axes -> their candidate haystack axes, fewer haystack axes than needle axes."""

    candidates: dict[str, tuple[str, ...]] = field(hash=False)


@dataclass(frozen=True)
class AxisMisfit:
    """Needle axis ``needle_axis`` (extent ``needle_extent``) mapped on haystack axis
    ``hay_axis`` whose extent ``hay_extent`` is no multiple of it."""

    needle_axis: str
    hay_axis: str
    needle_extent: int
    hay_extent: int


@dataclass(frozen=True)
class ExtentMisfit:
    """The axes of one axis map whose extents do not fit."""

    axes: tuple[AxisMisfit, ...]
    axis_map: dict[str, str] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class LayoutMismatch:
    """Haystack buffer ``buffer`` needs ``transpose(buffer, perm)`` for the mapped dims to be innermost."""

    buffer: str
    perm: tuple[int, ...]


@dataclass(frozen=True)
class Failure:
    """Why one branch of the mapping search failed.

    ``depth`` grows with how far the branch got (10 per matched needle
    statement plus the kind's stage); ``statements`` are the haystack
    statements the branch had matched; ``detail`` carries what a
    transformation needs to repair it (one of this module's detail types).
    """

    kind: FailureKind
    text: Any  # the message, or a callable building it (rendered on first use)
    depth: int
    needle_stmt: int | None = None
    hay_stmt: int | None = None
    statements: tuple[int, ...] = ()
    detail: Any = field(default=None, compare=False, hash=False)

    @property
    def message(self) -> str:
        if callable(self.text):
            object.__setattr__(self, "text", self.text())
        return self.text

    def __str__(self) -> str:
        return self.message


class FailureLog:
    """Failures keyed by (kind, needle stmt, haystack stmt, key); messages are built lazily.

    ``limit`` caps the shallow failures (those of one statement pair), which
    a large kernel produces by the thousand.
    """

    def __init__(self, limit: int = 400):
        self._seen: dict[tuple, Failure] = {}
        self.limit = limit
        self._shallow = 0

    def add(self, kind: FailureKind, message, matched: int, k: int | None = None, h: int | None = None,
            key: Any = None, statements: tuple[int, ...] = (), detail: Any = None) -> None:
        """Record a failure after ``matched`` needle statements (first of its key only)."""
        key = (kind, k, h, key if key is not None else (message if isinstance(message, str) else None))
        if key in self._seen:
            return
        if kind.stage <= 1:
            if self._shallow >= self.limit:
                return
            self._shallow += 1
        self._seen[key] = Failure(kind, message, 10 * matched + kind.stage, k, h, tuple(statements), detail)

    def failures(self) -> list[Failure]:
        return list(self._seen.values())
