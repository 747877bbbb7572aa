"""ISA Mapper §4: ``Approach``, the one interface through which every scheduling choice is made.

The scheduler (:mod:`tvm_ext.accel.scheduler`) owns the mechanics (state,
capacities, coherence, recording); an :class:`Approach` makes the choices:

============== ===================================================== =========
choice         question                                              paper
============== ===================================================== =========
``tile_order`` in which order are the compute tiles unrolled?        §3.3
``home``       which memory holds a tensor before and after the run? §3.5
``device``     which compute unit runs this tile?                    §3.4
``destination``into which of the unit's memories goes an operand?    §3.5
``source``     from which valid copy is a piece fetched?             §3.5
``path``       over which edges (and intermediate memories)?         §3.5
``evict``      which resident piece leaves a full memory?            §3.5
============== ===================================================== =========

:class:`HeuristicApproach` is the default:

* tile order: consumer-first fused unrolling;
* homes: interleaved over the HBM modules;
* device: the unit where the tile would finish first by the scheduler's
  running time estimates (a list scheduler's earliest finish time, data
  movement included; an accumulation chain stays with the unit holding its
  accumulator), plus ``locality_weight`` x the cycles to bring its operands;
* destination: the memory with the most free space;
* source / path: the cheapest route (Dijkstra over the graph);
* eviction: Belady (furthest next use, known in a dry run), taking the least
  recently used of the ``evict_among`` pieces needed last, so the copy
  reusing the space rarely waits for the slot's last reader.

:class:`CostModelApproach` makes chosen decisions by a cost model's
``predict`` over per-candidate features (the hook the autotuning package
plugs a learned model into).  :class:`ApproachChoice` is a set of
approaches: the BYOC codegen schedules each offloaded function with every
one and keeps the fewest cycles (how tuning records reach compiled models).

>>> HeuristicApproach().name, sorted(CHOICES)[:3]
('heuristic', ['destination', 'device', 'evict'])
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from tvm_ext.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from .queries import ApproachQueries
    from .tiles import TileSet

__all__ = ["Approach", "HeuristicApproach", "CostModelApproach", "ApproachChoice", "CHOICES"]

#: The choice points of the interface.
CHOICES = ("tile_order", "home", "device", "destination", "source", "path", "evict")


class Approach:
    """Base class: every method is one §4 choice.  Subclass and override what you want to change.

    Methods get the running scheduler as its read-only view,
    :class:`~tvm_ext.accel.queries.ApproachQueries` (read its state, never mutate
    it), and return the chosen candidate.
    """

    name = "approach"

    def tile_order(self, tiles: "TileSet") -> np.ndarray:
        """A permutation of ``range(tiles.n)`` respecting ``tiles.dependencies()``."""
        raise NotImplementedError

    def home(self, sched: "ApproachQueries", tensor: int, candidates: Sequence[int]) -> "int | list[int]":
        """Memory index (or indices to interleave its tiles over) holding tensor ``tensor`` outside the run."""
        raise NotImplementedError

    def device(self, sched: "ApproachQueries", tile: int, candidates: Sequence[int]) -> int:
        """Device index (one of ``candidates``: the units running the tile's instruction)."""
        raise NotImplementedError

    def destination(self, sched: "ApproachQueries", piece: int, allowed: Sequence[int]) -> int:
        """Memory index (one of ``allowed``) to bring ``piece`` into for the current tile."""
        raise NotImplementedError

    def source(self, sched: "ApproachQueries", piece: int, sources: Sequence[int], dst: int) -> int:
        """Memory index (one of ``sources``, the memories holding valid data) to copy from."""
        raise NotImplementedError

    def path(self, sched: "ApproachQueries", piece: int, src: int, dst: int) -> list[int]:
        """Edge indices leading from memory ``src`` to memory ``dst``."""
        raise NotImplementedError

    def evict(self, sched: "ApproachQueries", memory: int, pinned: set[int]) -> int:
        """Slot (resident in ``memory``, not in ``pinned``) to evict."""
        raise NotImplementedError


class HeuristicApproach(Approach):
    """The default heuristics (module docstring).

    ``locality_weight`` scales the transfer term added to the estimated
    finish time in ``device``; ``evict_among`` is how many of the pieces
    needed last compete (least recently used wins) in ``evict``.
    """

    name = "heuristic"

    def __init__(self, locality_weight: float = 1.0, evict_among: int = 16):
        self.locality_weight = float(locality_weight)
        self.evict_among = int(evict_among)

    def tile_order(self, tiles: "TileSet") -> np.ndarray:
        from .tiles import fused_order

        return fused_order(tiles)

    def home(self, sched: "ApproachQueries", tensor: int, candidates: Sequence[int]) -> list[int]:
        # interleave every tensor over all memories of the best kind (like address interleaving over HBM stacks)
        best = sched.system.memories[candidates[0]].kind
        return [m for m in candidates if sched.system.memories[m].kind == best]

    def device(self, sched: "ApproachQueries", tile: int, candidates: Sequence[int]) -> int:
        cands = sched.accumulator_devices(tile, candidates) or candidates
        if len(cands) == 1:
            return cands[0]
        w = self.locality_weight
        best, best_score = cands[0], float("inf")
        for d in cands:
            score = sched.estimated_finish(tile, d) + 1e-9 * sched.load[d]
            if w:
                score += w * sched.transfer_estimate(tile, d)
            if score < best_score:
                best, best_score = d, score
        return best

    def destination(self, sched: "ApproachQueries", piece: int, allowed: Sequence[int]) -> int:
        return max(allowed, key=lambda m: (sched.state.free_bytes(m), -m))

    def source(self, sched: "ApproachQueries", piece: int, sources: Sequence[int], dst: int) -> int:
        nb = sched.pieces.valid_bytes[piece]
        return min(sources, key=lambda m: sched.system.path_cost(sched.memory_names[m], sched.memory_names[dst], nb))

    def path(self, sched: "ApproachQueries", piece: int, src: int, dst: int) -> list[int]:
        return sched.shortest_path(src, dst, sched.pieces.valid_bytes[piece])

    def evict(self, sched: "ApproachQueries", memory: int, pinned: set[int]) -> int:
        return sched.furthest_next_use(memory, pinned, self.evict_among)


class CostModelApproach(HeuristicApproach):
    """Choices made by ``model.predict(features)`` (lowest predicted cost wins).

    ``model`` is any object with ``predict(X: ndarray) -> ndarray`` (an
    XGBoost regressor, a linear model...).  ``choices`` says which decisions
    it makes; the others stay heuristic.  Features per candidate come from
    :meth:`~tvm_ext.accel.queries.ApproachQueries.features`: for ``device`` [unit load, cluster load per
    unit, transfer estimate, operands already local, unit cycles, estimated
    finish time]; for
    ``evict`` [next use distance, dirty, tile bytes, copies elsewhere];
    for ``destination`` [free bytes, resident pieces of the same tensor].

    >>> class Load:
    ...     def predict(self, X): return X[:, 0]
    >>> CostModelApproach(Load(), choices=("device",)).choices
    ('device',)
    """

    name = "cost-model"
    _SUPPORTED = ("device", "evict", "destination")

    def __init__(self, model: Any, choices: Sequence[str] = ("device",), locality_weight: float = 1.0):
        super().__init__(locality_weight)
        if not hasattr(model, "predict"):
            raise ConfigError("CostModelApproach: the model needs a predict(features) method")
        bad = [c for c in choices if c not in self._SUPPORTED]
        if bad:
            raise ConfigError(f"CostModelApproach: cannot decide {bad} by a model (supported: {self._SUPPORTED})")
        self.model = model
        self.choices = tuple(choices)
        self.decisions = 0

    def _pick(self, kind: str, sched, subject, candidates: Sequence[int]) -> int:
        X = np.asarray(sched.features(kind, subject, candidates), dtype=np.float64)
        scores = np.asarray(self.model.predict(X), dtype=np.float64).reshape(-1)
        if scores.shape[0] != len(candidates):
            raise ConfigError(f"CostModelApproach: model returned {scores.shape[0]} scores for "
                              f"{len(candidates)} candidates")
        self.decisions += 1
        return candidates[int(np.argmin(scores))]

    def device(self, sched, tile, candidates):
        if "device" not in self.choices:
            return super().device(sched, tile, candidates)
        return self._pick("device", sched, tile, list(candidates))

    def destination(self, sched, piece, allowed):
        if "destination" not in self.choices:
            return super().destination(sched, piece, allowed)
        return self._pick("destination", sched, piece, list(allowed))

    def evict(self, sched, memory, pinned):
        if "evict" not in self.choices:
            return super().evict(sched, memory, pinned)
        cands = [s for s in sched.state.resident[memory] if s not in pinned]
        return self._pick("evict", sched, memory, cands)


class ApproachChoice:
    """Alternative approaches for one compilation: each function keeps the one with the fewest cycles.

    ``None`` among the candidates stands for the default heuristics; put it
    first so that a tie keeps the default.  The schedule is static, so the
    comparison is exact (simulated cycles, not a prediction).

    >>> ApproachChoice([None, HeuristicApproach(0.5)]).name
    'choice(heuristic,heuristic)'
    """

    def __init__(self, candidates: Sequence["Approach | None"]):
        self.candidates = list(candidates)
        if not self.candidates:
            raise ConfigError("ApproachChoice: needs at least one candidate approach")
        for c in self.candidates:
            if c is not None and not isinstance(c, Approach):
                raise ConfigError(f"ApproachChoice: {c!r} is not an Approach")
        self.name = "choice(" + ",".join(approach_name(c) for c in self.candidates) + ")"


def approach_name(approach: "Approach | None") -> str:
    """The readable name of an approach (``None``: the default heuristics)."""
    return "heuristic" if approach is None else str(getattr(approach, "name", type(approach).__name__))
