"""Sextans §3 / Table 3: engine parameters and platform configurations.

Two dataclasses, both round-tripping to JSON:

* :class:`EngineConfig`: the accelerator's structure and the host
  preprocessing knobs (P PEs, N0 PUs per PE, K0 window, RAW distance D,
  scratchpad depth, 64-bit field widths, F_B, F_C, scheduling policy).
  Defaults are the paper's U280 prototype; D = 10 is the
  ``DEP_DIST_LOAD_STORE`` the released Sextans kernel uses (the paper only
  says a float add takes "7 to 10 cycles").
* :class:`Platform`: clock, HBM channels and their bandwidth, the channel
  assignment of §3.1.1 (1 for Q, 4 for B, 8 for A, 8 for C_in, 8 for C_out)
  board power, and the fixed costs of one SpMM: the host's OpenCL kernel
  launch (§1: "around 0.15ms"), the HBM access latency that every stage's
  first burst waits for (§1 C2: "up to 100 cycles") and the depth of the PE
  pipeline that drains at the end of a window (§3.5 (3): "15 cycles on a
  Xilinx U280").  :data:`SEXTANS` and :data:`SEXTANS_P` are Table 3.

>>> cfg = EngineConfig(pes=8, window=16)
>>> EngineConfig.from_json(cfg.to_json()) == cfg
True
>>> round(SEXTANS.bandwidth_gbs), SEXTANS_P.freq_mhz
(460, 350.0)
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tvm_ext.errors import ConfigError, positive_int
from tvm_ext.json_config import JsonConfig

__all__ = [
    "EngineConfig",
    "Platform",
    "SEXTANS",
    "SEXTANS_P",
    "PLATFORMS",
    "get_platform",
    "POLICIES",
    "NZ_ORDERS",
]

#: Scheduling policies: Sextans' out-of-order list scheduling (§3.3) or
#: in-order issue (the baselines of Fig. 5 and Table 1).
POLICIES = ("ooo", "in-order")
#: Order in which a PE's non-zeros are offered to the scheduler.
NZ_ORDERS = ("column", "row")

_VALUE_BITS = 32  # fp32 value field of the 64-bit word (§3.2)


@dataclass(frozen=True)
class EngineConfig(JsonConfig):
    """Structure of one Sextans engine (defaults: the U280 prototype).

    * ``pes``: P processing engines (8 PEGs x 8 PEs); A's rows go to PE ``row mod P``.
    * ``n0``: N0 PUs per PE, i.e. columns of B/C processed per pass over A.
    * ``window``: K0, columns of A (rows of B) per window (Eq. 3).
    * ``raw_distance``: D, cycles between two updates of one C row (§3.3).
    * ``scratchpad_depth``: C rows each PE's URAM scratchpad holds (12,288).
    * ``col_bits`` / ``row_bits``: field widths of the 64-bit word (14 / 18;
      the value takes the other 32 bits).
    * ``b_partition``: F_B of Eq. 7; ``c_parallel``: F_C of Eq. 9.
    * ``pes_per_peg``: PEs sharing one A channel (8).
    * ``policy`` / ``nz_order``: ``"ooo"`` + ``"column"`` is Sextans;
      ``"in-order"`` with ``"column"`` or ``"row"`` are Fig. 5's baselines.
    """

    pes: int = 64
    n0: int = 8
    window: int = 4096
    raw_distance: int = 10
    scratchpad_depth: int = 12288
    col_bits: int = 14
    row_bits: int = 18
    b_partition: int = 4
    c_parallel: int = 16
    pes_per_peg: int = 8
    policy: str = "ooo"
    nz_order: str = "column"

    def __post_init__(self) -> None:
        what = "EngineConfig"
        for name in ("pes", "n0", "window", "raw_distance", "scratchpad_depth", "col_bits",
                     "row_bits", "b_partition", "c_parallel", "pes_per_peg"):
            positive_int(getattr(self, name), f"{what}: {name}", ConfigError)
        if self.col_bits + self.row_bits + _VALUE_BITS != 64:
            raise ConfigError(
                f"{what}: col_bits ({self.col_bits}) + row_bits ({self.row_bits}) + 32 value bits "
                f"must make the 64-bit non-zero word")
        if self.window > (1 << self.col_bits):
            raise ConfigError(
                f"{what}: window K0={self.window} needs column indices up to {self.window - 1}, "
                f"which overflow the {self.col_bits}-bit column field (max K0 {1 << self.col_bits})")
        if self.policy not in POLICIES:
            raise ConfigError(f"{what}: policy must be one of {POLICIES}, got {self.policy!r}")
        if self.nz_order not in NZ_ORDERS:
            raise ConfigError(f"{what}: nz_order must be one of {NZ_ORDERS}, got {self.nz_order!r}")

    @property
    def rows_per_pe(self) -> int:
        """C rows a PE can hold: the scratchpad depth, capped so the compressed
        row index never reaches the all-ones bubble marker of the row field."""
        return min(self.scratchpad_depth, (1 << self.row_bits) - 1)

    @property
    def rows_per_pass(self) -> int:
        """Rows of A one engine invocation covers (larger A is split by rows)."""
        return self.pes * self.rows_per_pe

    @property
    def pegs(self) -> int:
        """Processing engine groups (one A channel each)."""
        return -(-self.pes // self.pes_per_peg)



@dataclass(frozen=True)
class Platform(JsonConfig):
    """Clock, HBM and power of one Sextans platform (Table 3, §2.3, §3.1.1).

    Each matrix class streams over its own HBM pseudo-channels, each of
    ``channel_gbs`` GB/s; total bandwidth is ``hbm_channels * channel_gbs``.
    ``launch_us`` is the host-side kernel launch, paid once per SpMM;
    ``hbm_latency_cycles`` and ``pe_latency_cycles`` are the pipeline fill and
    drain each stage instance pays (see :mod:`~tvm_ext.spmm_engine.perf_model`).
    Zero for all three gives the steady-state model of Eqs. 6-10.
    """

    name: str
    freq_mhz: float
    hbm_channels: int = 32
    channel_gbs: float = 14.375
    power_w: float = 52.0
    channels_q: int = 1
    channels_b: int = 4
    channels_a: int = 8
    channels_c_in: int = 8
    channels_c_out: int = 8
    launch_us: float = 150.0
    hbm_latency_cycles: int = 100
    pe_latency_cycles: int = 15

    def __post_init__(self) -> None:
        what = f"Platform {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError("Platform: name must be a non-empty string")
        v = self.launch_us
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
            raise ConfigError(f"{what}: launch_us must be a finite number >= 0, got {v!r}")
        for name in ("hbm_latency_cycles", "pe_latency_cycles"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise ConfigError(f"{what}: {name} must be an integer >= 0, got {v!r}")
        for name in ("freq_mhz", "channel_gbs", "power_w"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < float("inf"):
                raise ConfigError(f"{what}: {name} must be a positive finite number, got {v!r}")
        for name in ("hbm_channels", "channels_q", "channels_b", "channels_a", "channels_c_in",
                     "channels_c_out"):
            positive_int(getattr(self, name), f"{what}: {name}", ConfigError)
        used = (self.channels_q + self.channels_b + self.channels_a + self.channels_c_in
                + self.channels_c_out)
        if used > self.hbm_channels:
            raise ConfigError(f"{what}: the channel assignment uses {used} channels, "
                              f"the HBM has {self.hbm_channels}")

    @property
    def freq_hz(self) -> float:
        """Clock in Hz."""
        return self.freq_mhz * 1e6

    @property
    def launch_s(self) -> float:
        """Host-side kernel launch in seconds."""
        return self.launch_us * 1e-6

    @property
    def bandwidth_gbs(self) -> float:
        """Total HBM bandwidth (GB/s), the ``Bdw`` of §4.2.3."""
        return self.hbm_channels * self.channel_gbs

    def class_bandwidth(self, cls: str) -> float:
        """Bytes/s available to one matrix class: ``q``, ``a``, ``b``, ``c_in``, ``c_out``."""
        channels = getattr(self, f"channels_{cls}", None)
        if channels is None:
            raise ConfigError(f"{self.name}: unknown matrix class {cls!r}")
        return channels * self.channel_gbs * 1e9



# Table 3: the U280 prototype (32 pseudo-channels x 14.375 GB/s = 460 GB/s).
SEXTANS = Platform("sextans", freq_mhz=189.0, hbm_channels=32, channel_gbs=14.375, power_w=52.0)
# Table 3: the projected Sextans-P (V100's 900 GB/s over the same 32 channels, 350 MHz).
SEXTANS_P = Platform("sextans-p", freq_mhz=350.0, hbm_channels=32, channel_gbs=900.0 / 32,
                     power_w=96.0)

PLATFORMS: dict[str, Platform] = {p.name: p for p in (SEXTANS, SEXTANS_P)}


def get_platform(platform: "str | Platform | dict | None" = None) -> Platform:
    """A :class:`Platform` from a name (``sextans``, ``sextans-p``), dict or instance.

    >>> get_platform("sextans-p").power_w
    96.0
    """
    if platform is None:
        return SEXTANS
    if isinstance(platform, Platform):
        return platform
    if isinstance(platform, dict):
        return Platform.from_dict(platform)
    if isinstance(platform, str):
        key = platform.strip().lower().replace("_", "-")
        if key in PLATFORMS:
            return PLATFORMS[key]
        raise ConfigError(f"unknown platform {platform!r}; known: {sorted(PLATFORMS)}")
    raise ConfigError(f"platform: expected a name, dict or Platform, got {type(platform).__name__}")
