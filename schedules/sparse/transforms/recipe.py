"""Transformation recipes: named steps applied in order to a CSR matrix (CHiLL's scripts, Venkat 2016 §5.1.6).

BCSR, for instance, is ``make_dense -> tile(i, R) -> tile(k, C) -> permute ->
compact_and_pad(kk)``.

>>> from schedules.sparse.transforms import compact_and_pad, make_dense
>>> str(Recipe("csr", (step(make_dense), step(compact_and_pad, "k", identity=0.0))))
'csr: make_dense() -> compact_and_pad(k, identity=0.0)'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

__all__ = ["Step", "Recipe", "step"]


@dataclass(frozen=True)
class Step:
    """One named transformation of a :class:`Recipe`."""

    label: str
    apply: Callable[[Any], Any]

    def __call__(self, x: Any) -> Any:
        return self.apply(x)


def _fmt(v: Any) -> str:
    if isinstance(v, (tuple, list)):
        return "[" + ", ".join(map(_fmt, v)) + "]"
    if isinstance(v, np.ndarray):
        return f"<{v.size}>"
    if callable(v):
        return getattr(v, "__name__", "fn")
    return str(v)


def step(fn: Callable[..., Any], *args: Any, label: str | None = None, **kwargs: Any) -> Step:
    """Bind a transformation's arguments: ``step(tile, "i", 4)`` is ``tile(space, "i", 4)``.

    >>> from schedules.sparse.transforms import tile
    >>> step(tile, "i", 4).label
    'tile(i, 4)'
    """
    if label is None:
        parts = [_fmt(a) for a in args] + [f"{k}={_fmt(v)}" for k, v in kwargs.items()]
        label = f"{fn.__name__}({', '.join(parts)})"
    return Step(label, lambda x: fn(x, *args, **kwargs))


@dataclass(frozen=True)
class Recipe:
    """A transformation script: steps applied in order to a CSR (CHiLL's recipes, §5.1.6).

    >>> import scipy.sparse as sp
    >>> from schedules.sparse.transforms import compact_and_pad, make_dense
    >>> r = Recipe("csr", (step(make_dense), step(compact_and_pad, "k", identity=0.0)))
    >>> str(r)
    'csr: make_dense() -> compact_and_pad(k, identity=0.0)'
    >>> r.run(sp.csr_array([[0.0, 4.0]])).explicit_index["k"].tolist()
    [1]
    """

    name: str
    steps: tuple[Step, ...]

    def run(self, source: Any) -> Any:
        """Apply every step to ``source`` (a canonical CSR) and return the last result."""
        out = source
        for s in self.steps:
            out = s(out)
        return out

    def __str__(self) -> str:
        return f"{self.name}: " + " -> ".join(s.label for s in self.steps)
