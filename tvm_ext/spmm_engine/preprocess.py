"""Sextans §3.1.2-3.4: the host preprocessing, from a user matrix to the engine's program.

``canonical_csr`` (the plugin's one validated entry) → partition into row
passes, windows and PE bins → PE-aware out-of-order scheduling → padding and
Q pointers → 64-bit words.  :func:`schedule` stops before encoding and
returns the stream itself, so small examples can be checked by hand.

>>> import scipy.sparse as sp
>>> from tvm_ext.workloads import lap2d
>>> prog = preprocess(lap2d(8), pes=8, window=16)
>>> prog.nnz, len(prog.passes), prog.passes[0].words.shape[1]
(288, 1, 8)
"""
from __future__ import annotations

from typing import Any

from tvm_ext.errors import ConfigError
from tvm_ext.spmm_engine.config import EngineConfig
from tvm_ext.spmm_engine.encoding import SextansProgram, encode_stream
from tvm_ext.spmm_engine.partition import partition
from tvm_ext.spmm_engine.scheduler import list_schedule
from tvm_ext.spmm_engine.stream import ScheduledStream, build_stream
from tvm_ext.workloads import canonical_csr

__all__ = ["resolve_config", "schedule", "preprocess"]

# Short names used by the CLI and the paper -> EngineConfig fields.
_ALIASES = {"P": "pes", "D": "raw_distance", "K0": "window", "N0": "n0"}


def paper_knobs(config: EngineConfig) -> dict[str, int]:
    """The paper's tunable parameters of ``config``: ``{"K0", "N0", "D", "P"}`` (inverse of the overrides).

    >>> paper_knobs(EngineConfig())
    {'K0': 4096, 'N0': 8, 'D': 10, 'P': 64}
    """
    return {k: getattr(config, _ALIASES[k]) for k in ("K0", "N0", "D", "P")}


def resolve_config(config: EngineConfig | dict | None = None, **overrides: Any) -> EngineConfig:
    """An :class:`EngineConfig` from a config/dict plus keyword overrides.

    Overrides may use the paper's names (``P``, ``D``, ``K0``, ``N0``);
    ``None`` values are ignored.

    >>> resolve_config(P=8, D=4).raw_distance
    4
    """
    if config is None:
        cfg = EngineConfig()
    elif isinstance(config, EngineConfig):
        cfg = config
    elif isinstance(config, dict):
        cfg = EngineConfig.from_dict(config)
    else:
        raise ConfigError(f"config: expected an EngineConfig or dict, got {type(config).__name__}")
    changes = {}
    for key, value in overrides.items():
        if value is None:
            continue
        name = _ALIASES.get(key, key)
        if name not in EngineConfig.__dataclass_fields__:
            raise ConfigError(f"unknown engine parameter {key!r}")
        changes[name] = value
    return cfg.replace(**changes) if changes else cfg


def schedule(A: Any, *, D: int | None = None, P: int | None = None, K0: int | None = None,
             config: EngineConfig | dict | None = None, **overrides: Any) -> ScheduledStream:
    """Partition and schedule ``A``; returns the (unencoded) stream.

    ``A`` is anything :func:`~tvm_ext.workloads.canonical_csr` accepts.
    ``D``, ``P``, ``K0`` (and any other :class:`EngineConfig` field) override
    ``config``.  ``stream.passes[i].q`` is the HFlex pointer list,
    ``stream.table()`` shows which non-zero each PE takes at each cycle.

    >>> import numpy as np, scipy.sparse as sp
    >>> s = schedule(sp.csr_array(np.ones((2, 2))), P=1, D=3, K0=2)
    >>> s.stream_length, s.stats()["bubbles"]
    (5, 1)
    """
    cfg = resolve_config(config, D=D, P=P, K0=K0, **overrides)
    csr = canonical_csr(A, what="A")
    part = partition(csr, cfg)
    slot = list_schedule(part.bin_ptr, part.row_key, cfg.raw_distance, cfg.policy, part.max_mult)
    return build_stream(part, slot)


def preprocess(A: Any, config: EngineConfig | dict | None = None, **overrides: Any) -> SextansProgram:
    """Everything the host does before launching Sextans: the encoded program.

    Field overflows raise :class:`~tvm_ext.errors.InputError`; rows beyond one
    invocation's scratchpads are split into passes instead.
    """
    return encode_stream(schedule(A, config=config, **overrides))
