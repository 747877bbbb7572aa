"""Which inspector runs a recipe: the compiled TIR kernels or vectorised numpy, chosen by measurement.

Both give identical arrays (:mod:`.inspector_tir` is tested against the numpy
inspector array for array), so the choice is about time only.  With
``kind="auto"`` the first matrix of a (recipe, dtype, size class) runs both
inspectors, times each twice (taking turns, :data:`MEASURE_ROUNDS`) and keeps the faster; later matrices of the same
class reuse that decision (:data:`DECISIONS`).  The size class is the bit
length of the non-zero count, so a decision taken on 1.6M non-zeros serves
1M to 2M.  Every call records what ran and why (:attr:`RecipeInspector.last`).

>>> import scipy.sparse as sp
>>> from schedules.sparse.recipes.library import csr_recipe
>>> insp = RecipeInspector(csr_recipe(), "numpy")
>>> insp(sp.csr_array([[1.0, 0.0], [2.0, 3.0]])).arrays["offset"].tolist()
[0, 1, 3]
>>> insp.last.chosen, insp.last.measured
('numpy', False)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from tvm_ext.errors import InputError

__all__ = ["INSPECTOR_KINDS", "MEASURE_ROUNDS", "InspectorChoice", "RecipeInspector", "DECISIONS", "size_class"]

#: What ``kind`` may name.
INSPECTOR_KINDS = ("auto", "tir", "numpy")
#: Calls of each inspector when ``kind="auto"`` measures (taking turns; the fastest of each is kept):
#: one call each misjudged a 2x difference on a loaded machine.
MEASURE_ROUNDS = 2
#: Decisions of ``kind="auto"``: (recipe key, dtype, size class, target) -> the InspectorChoice measured.
DECISIONS: dict = {}


def size_class(nnz: int) -> int:
    """The size class of a matrix with ``nnz`` stored entries: ``nnz``'s bit length.

    >>> size_class(1_643_032), size_class(0)
    (21, 0)
    """
    return int(nnz).bit_length()


@dataclass(frozen=True)
class InspectorChoice:
    """Which inspector ran (``chosen``), the seconds each took where timed (``times``),
    whether this call measured (``measured``) and the decision's origin (``reason``)."""

    recipe: str
    chosen: str
    times: Mapping[str, float] = field(default_factory=dict)
    measured: bool = False
    reason: str = ""

    def explain(self) -> str:
        """One line: the recipe, the chosen inspector, the times and why.

        >>> InspectorChoice("dia", "tir", {"tir": 0.09, "numpy": 0.19}, True, "faster on this matrix").explain()
        'dia: tir inspector (tir 90.0 ms, numpy 190.0 ms; faster on this matrix)'
        """
        times = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in sorted(self.times.items(), reverse=True))
        why = "; ".join(x for x in (times, self.reason) if x)
        return f"{self.recipe}: {self.chosen} inspector ({why})"


class RecipeInspector:
    """A recipe's inspector: ``insp(A)`` is the :class:`~.recipe.GeneratedFormat` of ``A``.

    ``kind``: ``"tir"`` (the compiled kernels of :mod:`.inspector_tir`),
    ``"numpy"`` (the vectorised numpy inspector), or ``"auto"`` (the faster of
    the two, measured once per recipe, dtype and size class).

    >>> import scipy.sparse as sp
    >>> from schedules.sparse.recipes.library import dia_recipe
    >>> RecipeInspector(dia_recipe(), "tir")(sp.csr_array([[1.0, 2.0], [0.0, 3.0]])).arrays["explicit_d"].tolist()
    [1, 2]
    """

    def __init__(self, recipe: Any, kind: str = "auto", *, target: Any = None):
        if kind not in INSPECTOR_KINDS:
            raise InputError(f"inspector kind must be one of {INSPECTOR_KINDS}, got {kind!r}")
        from schedules.sparse.recipes.inspector_tir import compiled_recipe

        self.recipe, self.kind, self.target = recipe, kind, target
        self._by_kind = {"numpy": recipe, "tir": compiled_recipe(recipe, target)}
        #: The :class:`InspectorChoice` of the latest call (None before the first).
        self.last: InspectorChoice | None = None

    def __call__(self, A: Any, *, dtype: Any = None):
        from tvm_ext.workloads.validation import canonical_csr

        csr = canonical_csr(A, dtype=dtype)
        if self.kind != "auto":
            t0 = time.perf_counter()
            fmt = self._by_kind[self.kind].inspect(csr)
            self.last = InspectorChoice(self.recipe.name, self.kind, {self.kind: time.perf_counter() - t0},
                                        False, "asked for")
            return fmt
        key = (self.recipe.key(), csr.dtype.name, size_class(csr.nnz), str(self.target))
        known = DECISIONS.get(key)
        if known is not None:
            t0 = time.perf_counter()
            fmt = self._by_kind[known.chosen].inspect(csr)
            self.last = InspectorChoice(self.recipe.name, known.chosen,
                                        {known.chosen: time.perf_counter() - t0}, False,
                                        f"decided on an earlier matrix of {csr.nnz.bit_length()}-bit nnz: "
                                        + known.explain())
            return fmt
        fmt, choice = self._measure(csr)
        DECISIONS[key] = choice
        self.last = choice
        return fmt

    def _measure(self, csr) -> tuple:
        """Both inspectors on ``csr`` taking turns, :data:`MEASURE_ROUNDS` calls each, the fastest
        call of each kept (the compiled kernels are built or loaded first, the loop nest made)."""
        from schedules.sparse.recipes.inspector_kernels import build_kernels

        build_kernels(csr.dtype.name, self.target)
        self.recipe.inspect(csr[:1])                   # the recipe's loop nest and its caches
        times, out = {"numpy": float("inf"), "tir": float("inf")}, {}
        for _ in range(MEASURE_ROUNDS):
            for kind in ("numpy", "tir"):
                t0 = time.perf_counter()
                out[kind] = self._by_kind[kind].inspect(csr)
                times[kind] = min(times[kind], time.perf_counter() - t0)
        chosen = min(times, key=times.get)
        return out[chosen], InspectorChoice(self.recipe.name, chosen, times, True,
                                            f"faster on this matrix ({csr.nnz} nnz)")
