"""The transform pass interface: :class:`Transform`, one concrete :class:`TransformStep`, the registry.

>>> step = TransformStep("pad", (("sizes", (("i", 32),)),))
>>> step.transform, str(step)
('pad', 'pad(sizes=(i:32))')
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable

from tvm_ext.errors import ScheduleError

from ..isamir import Program

__all__ = ["TransformError", "TransformStep", "Transform", "register_transform", "get_transform",
           "available_transforms", "apply_steps"]


class TransformError(ScheduleError):
    """A transformation does not apply here (it would change the program's meaning)."""


@dataclass(frozen=True)
class TransformStep:
    """One concrete application: the pass name and its parameters."""

    transform: str
    params: tuple[tuple[str, Any], ...] = ()
    score: float = field(default=0.0, compare=False, hash=False)

    def apply(self, program: Program) -> Program:
        return get_transform(self.transform).apply(program, **dict(self.params))

    def __str__(self) -> str:
        args = ", ".join(f"{k}={_short(v)}" for k, v in self.params)
        return f"{self.transform}({args})"


def _short(v) -> str:
    if isinstance(v, (tuple, list)) and v and all(isinstance(x, (tuple, list)) and len(x) == 2 for x in v):
        return "(" + ",".join(f"{a}:{b}" for a, b in v) + ")"
    if isinstance(v, (tuple, list)):
        return "(" + ",".join(str(x) for x in v) + ")"
    return str(v)


class Transform:
    """Base class of the IR transformation passes (the interface others extend)."""

    name: ClassVar[str] = ""

    def apply(self, program: Program, **params) -> Program:
        raise NotImplementedError

    def propose(self, program: Program, result, instruction) -> list[TransformStep]:
        """Steps worth trying given the mapper's feedback (default: none)."""
        return []

    def step(self, score: float = 0.0, **params) -> TransformStep:
        return TransformStep(self.name, tuple(params.items()), score)


_REGISTRY: dict[str, Transform] = {}


def register_transform(transform: Transform, *, replace_existing: bool = False) -> Transform:
    """Make ``transform`` available to :func:`get_transform` and the search."""
    if not transform.name:
        raise TransformError("register_transform: the pass has no name")
    if transform.name in _REGISTRY and not replace_existing:
        raise TransformError(f"register_transform: {transform.name!r} is already registered")
    _REGISTRY[transform.name] = transform
    return transform


def get_transform(name: str) -> Transform:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise TransformError(f"unknown transformation {name!r} (have {sorted(_REGISTRY)})") from None


def available_transforms() -> list[str]:
    return list(_REGISTRY)


def apply_steps(program: Program, steps: Iterable[TransformStep]) -> Program:
    """Apply ``steps`` in order (each result is validated)."""
    for st in steps:
        program = st.apply(program).validate()
    return program
