"""Sextans §3.2: 64-bit words, overflow detection, configuration round trips."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from tvm_ext.errors import ConfigError, InputError
from tvm_ext.spmm_engine import (
    SEXTANS,
    SEXTANS_P,
    EngineConfig,
    Platform,
    bubble_word,
    decode_words,
    encode_words,
    get_platform,
    preprocess,
)

CFG = EngineConfig()


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.integers(0, (1 << 18) - 2), min_size=1, max_size=50),
       data=st.data())
def test_encode_decode_round_trip(rows, data):
    n = len(rows)
    cols = data.draw(st.lists(st.integers(0, (1 << 14) - 1), min_size=n, max_size=n))
    finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
    vals = data.draw(st.lists(finite32, min_size=n, max_size=n))
    words = encode_words(np.array(rows), np.array(cols), np.array(vals, np.float32), CFG)
    r, c, v, ok = decode_words(words, CFG)
    assert r.tolist() == rows and c.tolist() == cols and ok.all()
    assert v.view(np.uint32).tolist() == np.array(vals, np.float32).view(np.uint32).tolist()


def test_word_layout_matches_the_released_host():
    # col (14) | row (18) | fp32 value (32), most significant first
    w = int(encode_words(np.array([3]), np.array([7]), np.array([-2.0]), CFG)[0])
    assert w >> 50 == 7 and (w >> 32) & 0x3FFFF == 3
    assert w & 0xFFFFFFFF == int(np.float32(-2.0).view(np.uint32))
    assert int(bubble_word(CFG)) == 0x3FFFF << 32
    assert decode_words(np.array([bubble_word(CFG)]), CFG)[3].tolist() == [False]


def test_other_field_widths_round_trip():
    cfg = EngineConfig(col_bits=12, row_bits=20, window=4096)
    words = encode_words(np.array([(1 << 20) - 2]), np.array([4095]), np.array([1.0]), cfg)
    r, c, v, ok = decode_words(words, cfg)
    assert (r[0], c[0], v[0], ok[0]) == ((1 << 20) - 2, 4095, 1.0, True)


def test_field_overflows_are_detected():
    with pytest.raises(InputError, match="row field"):
        encode_words(np.array([(1 << 18) - 1]), np.array([0]), np.array([1.0]), CFG)
    with pytest.raises(InputError, match="column field"):
        encode_words(np.array([0]), np.array([1 << 14]), np.array([1.0]), CFG)
    with pytest.raises(InputError, match="fp32"):
        encode_words(np.array([0]), np.array([0]), np.array([1e39]), CFG)
    with pytest.raises(ConfigError, match="column field"):
        EngineConfig(window=1 << 15)
    with pytest.raises(InputError, match="fp32"):
        preprocess(sp.csr_array(np.array([[1e300, 0.0], [0.0, 1.0]])), pes=2, window=2)


def test_rows_beyond_the_scratchpad_are_split_not_wrapped():
    # 2 PEs x 3 scratchpad rows = 6 rows per invocation: a 14-row A needs 3 passes
    A = sp.csr_array(np.tril(np.ones((14, 5))))
    prog = preprocess(A, pes=2, window=4, scratchpad_depth=3)
    assert [(p.row0, p.rows) for p in prog.passes] == [(0, 6), (6, 6), (12, 2)]
    for p in prog.passes:
        r, _, _, ok = decode_words(p.words, prog.config)
        assert r[ok].max() < 3
    # a scratchpad deeper than the row field allows is capped at 2^18 - 1 rows
    assert EngineConfig(scratchpad_depth=1 << 20).rows_per_pe == (1 << 18) - 1


def test_program_words_hold_every_non_zero_once():
    A = sp.random_array((300, 200), density=0.05, rng=3, format="csr")
    prog = preprocess(A, pes=8, window=64)
    words = np.concatenate([p.words.ravel() for p in prog.passes])
    r, c, v, ok = decode_words(words, prog.config)
    assert ok.sum() == A.nnz == prog.nnz
    assert np.isclose(np.sort(v[ok]), np.sort(A.data.astype(np.float32))).all()
    p0 = prog.passes[0]
    assert p0.words.shape == (p0.length, 8) and p0.q.dtype == np.uint32
    assert p0.channel(0).shape == (p0.length, 8)
    assert prog.nbytes == p0.words.nbytes + p0.q.nbytes


def test_config_and_platform_json_round_trip():
    cfg = EngineConfig(pes=32, n0=4, window=2048, raw_distance=7, policy="in-order")
    assert EngineConfig.from_json(cfg.to_json()) == cfg
    for plat in (SEXTANS, SEXTANS_P):
        assert Platform.from_json(plat.to_json()) == plat
        assert json.loads(plat.to_json())["name"] == plat.name
    assert (SEXTANS.freq_mhz, SEXTANS.bandwidth_gbs, SEXTANS.power_w) == (189.0, 460.0, 52.0)
    assert (SEXTANS_P.freq_mhz, SEXTANS_P.bandwidth_gbs, SEXTANS_P.power_w) == (350.0, 900.0, 96.0)
    assert get_platform("Sextans_P") is SEXTANS_P


@pytest.mark.parametrize("bad", [
    dict(pes=0), dict(window=-4), dict(raw_distance=0), dict(col_bits=10),
    dict(policy="greedy"), dict(nz_order="diagonal"), dict(n0=2.5),
])
def test_invalid_engine_configs_raise(bad):
    with pytest.raises(ConfigError):
        EngineConfig(**bad)


def test_invalid_platforms_and_json_raise():
    with pytest.raises(ConfigError, match="channel"):
        Platform("tiny", freq_mhz=100, hbm_channels=8)
    with pytest.raises(ConfigError):
        Platform("x", freq_mhz=0)
    with pytest.raises(ConfigError, match="unknown field"):
        EngineConfig.from_dict({"pes": 4, "lanes": 2})
    with pytest.raises(ConfigError, match="invalid JSON"):
        Platform.from_json("{nope")
    with pytest.raises(ConfigError, match="unknown platform"):
        get_platform("v100")
