"""Fuzzing the file loaders: one TvmExtError or a correct result, and bounded memory.

Matrix Market: random bytes, random and hostile headers (huge declared sizes,
wrong fields), truncations and byte mutations of valid files.  A file the
loader accepts must equal what ``scipy.io.mmread`` reads, whenever scipy reads
it too.  JSON configs: random JSON and mutations of the bundled accelerator
config (and the SpMM engine's dataclass configs); an accepted config must
round-trip.  Every property runs under tracemalloc with a peak limit.
"""
from __future__ import annotations

import json
import tempfile
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tvm_ext.accel import SystemGraph, load_system
from tvm_ext.accel.system_config import CONFIG_DIR
from tvm_ext.errors import TvmExtError
from tvm_ext.spmm_engine.config import EngineConfig, Platform
from tvm_ext.workloads import read_matrix_market
from tvm_ext.workloads.validation import canonical_csr

PEAK_LIMIT = 200 << 20  # bytes traced per example; the hostile headers declare terabytes
BUDGET = 64 << 20  # the loader's memory budget in these tests: accepted matrices stay small
FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_DIR = tempfile.TemporaryDirectory(prefix="tvm-ext-fuzz-")


def _file(data: bytes, name: str = "fuzz.mtx") -> Path:
    path = Path(_DIR.name) / name
    path.write_bytes(data)
    return path


@contextmanager
def bounded_memory():
    tracemalloc.start()
    try:
        yield
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_LIMIT, f"peak {peak:,} bytes"


def _scipy_reference(path: Path):
    """scipy's reading as canonical CSR, or None where scipy refuses the file."""
    try:
        raw = scipy.io.mmread(str(path))
    except Exception:
        return None
    if isinstance(raw, np.ndarray):
        raw = sp.coo_array(raw)
    if np.iscomplexobj(raw.data):
        return None
    return canonical_csr(raw, dtype="float64", allow_nan=True)


def check_matrix_market(data: bytes) -> None:
    """The loader's contract on ``data``: one TvmExtError, or the matrix scipy reads."""
    path = _file(data)
    with bounded_memory():
        try:
            A = read_matrix_market(path, max_bytes=BUDGET)
        except TvmExtError as e:
            assert str(e) and "\n" not in str(e)
            return
    assert isinstance(A, sp.csr_array) and A.has_canonical_format
    assert A.indices.dtype == np.int32 and np.isfinite(A.data).all()
    if 0 in A.shape:  # scipy 1.17's mmread dies with SIGFPE on an array file with zero rows: no oracle
        assert A.nnz == 0
        return
    ref = _scipy_reference(path)
    if ref is not None:
        assert A.shape == ref.shape
        assert (A != ref).nnz == 0, (data[:300], A.toarray(), ref.toarray())


# --------------------------------------------------------------------------- Matrix Market

# valid choices weighted up, so that a good share of the files is accepted and compared with scipy
FORMATS = st.sampled_from(["coordinate"] * 6 + ["array"] * 3 + ["Coordinate", "arrays", ""])
FIELDS = st.sampled_from(["real"] * 4 + ["integer"] * 2 + ["pattern"] * 2 + ["double", "complex", "REAL", "float"])
SYMMETRIES = st.sampled_from(["general"] * 6 + ["symmetric"] * 2 + ["skew-symmetric", "hermitian", "Symmetric",
                                                                    "lower"])
SIZES = st.one_of(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6),
                  st.sampled_from([10**9, 10**12, 2**31, 2**31 - 1, 3 * 10**9, -1]))
NUMBERS = st.one_of(
    st.integers(-5, 8).map(str),
    st.integers(-5, 8).map(str),
    st.floats(allow_nan=True, allow_infinity=True, width=32).map(repr),
    st.sampled_from(["1.5", ".5", "5.", "1e3", "-0", "+1", "0x10", "1_0", "nan", "inf", "1e400", "x", "1d5",
                     "", "1 2", "%", "\t", "01"]),
)


@st.composite
def matrix_market_texts(draw) -> bytes:
    fmt, field, sym = draw(FORMATS), draw(FIELDS), draw(SYMMETRIES)
    lines = [f"%%MatrixMarket matrix {fmt} {field} {sym}"]
    lines += draw(st.lists(st.sampled_from(["% comment", "", "%"]), max_size=2))
    rows = draw(SIZES)
    cols = rows if sym.lower() != "general" and draw(st.integers(0, 4)) else draw(SIZES)
    size = [rows, cols] + ([draw(SIZES)] if fmt.lower() == "coordinate" else [])
    if draw(st.integers(0, 9)) == 0:
        size.append(draw(SIZES))  # one number too many
    lines.append(" ".join(map(str, size)))
    n = size[2] if fmt == "coordinate" and size[2] <= 12 and draw(st.booleans()) else draw(st.integers(0, 10))
    values = 0 if field == "pattern" else 1
    for _ in range(n):
        if fmt.lower() == "array":
            lines.append(draw(NUMBERS))
        else:
            entry = [str(draw(st.integers(0, 7))), str(draw(st.integers(0, 7)))]
            count = values if draw(st.integers(0, 4)) else draw(st.integers(0, 3))
            entry += [draw(NUMBERS) for _ in range(count)]
            lines.append(" ".join(entry))
    sep = draw(st.sampled_from(["\n", "\r\n"]))
    end = draw(st.sampled_from(["", sep]))
    return (sep.join(lines) + end).encode()


@st.composite
def valid_matrix_files(draw) -> bytes:
    m, n = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    sym = draw(st.sampled_from(["general", "symmetric", "skew-symmetric"]))
    if sym != "general":
        n = m
    seed = draw(st.integers(0, 2**16))
    A = sp.random_array((m, n), density=draw(st.sampled_from([0.2, 0.6, 1.0])), rng=seed, format="csr")
    A.data = np.round(A.data * 100 - 50, 2)
    if sym == "symmetric":
        A = A + A.T
    elif sym == "skew-symmetric":
        A = A - A.T
    dense = draw(st.booleans())
    field = draw(st.sampled_from(["real", "integer"]))
    if field == "integer":
        A.data = np.round(A.data)
    out = Path(_DIR.name) / "valid.mtx"
    scipy.io.mmwrite(str(out), A.toarray() if dense else A, symmetry=sym, field=field)
    return out.read_bytes()


def _body_start(data: bytes) -> int:
    """Offset of the first entry line of a valid file (after banner, comments and size line)."""
    pos = 0
    for line in data.splitlines(keepends=True):
        pos += len(line)
        if not line.startswith(b"%") and line.strip():
            return pos
    return 0


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes(data):
    check_matrix_market(data)


@FUZZ
@given(st.sampled_from([b"%%MatrixMarket matrix coordinate real general\n",
                        b"%%MatrixMarket matrix array real general\n",
                        b"%%MatrixMarket matrix coordinate pattern symmetric\n"]), st.binary(max_size=400))
def test_valid_banner_then_random_bytes(banner, rest):
    check_matrix_market(banner + rest)


@FUZZ
@given(matrix_market_texts())
def test_random_headers_and_entries(data):
    check_matrix_market(data)


@FUZZ
@given(valid_matrix_files(), st.data())
def test_truncations_of_valid_files(data, draw):
    check_matrix_market(data)  # the whole file reads as scipy reads it
    cut = draw.draw(st.one_of(st.integers(0, len(data)), st.integers(_body_start(data), len(data))))
    check_matrix_market(data[:cut])


@FUZZ
@given(valid_matrix_files(), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255),
                                                st.sampled_from(["set", "insert", "delete"])),
                                      min_size=1, max_size=4))
def test_byte_mutations_of_valid_files(data, edits):
    buf = bytearray(data)
    for pos, byte, how in edits:
        body = min(_body_start(data), len(buf))
        pos = body + pos % (len(buf) + 1 - body) if pos % 4 else pos % (len(buf) + 1)  # 3 in 4 in the entries
        if how == "insert":
            buf[pos:pos] = bytes([byte])
        elif pos < len(buf):
            if how == "set":
                buf[pos] = byte
            else:
                del buf[pos]
    check_matrix_market(bytes(buf))


def test_valid_files_read_exactly_as_scipy_reads_them():
    """The fuzz oracle is not vacuous: valid files are accepted and compared."""
    for sym in ["general", "symmetric", "skew-symmetric"]:
        A = sp.random_array((6, 6), density=0.5, rng=1, format="csr")
        A = A + A.T if sym == "symmetric" else A - A.T if sym == "skew-symmetric" else A
        path = _file(b"", "oracle.mtx")
        scipy.io.mmwrite(str(path), A, symmetry=sym)
        B = read_matrix_market(path)
        assert (B != canonical_csr(scipy.io.mmread(str(path)))).nnz == 0 and B.nnz == A.nnz


def test_hostile_header_allocates_nothing():
    with bounded_memory():
        for size in ["1000000 1000000 1000000000000", "100000 100000", "1000000000 1000000000 1"]:
            fmt = "array" if size.count(" ") == 1 else "coordinate"
            path = _file(f"%%MatrixMarket matrix {fmt} real general\n{size}\n1 1 1\n".encode(), "hostile.mtx")
            with pytest.raises(TvmExtError):
                read_matrix_market(path)  # the default budget (GiBs): refused by the file-size check


# --------------------------------------------------------------------------- JSON configs

JSON_LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 2**40), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["c{c}", "c{c.__class__}", "{x[0]}", "{c!r}", "{}", "{{", "hbm*", "*"]),
)
JSON_VALUES = st.recursive(JSON_LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)
MINI = json.loads((CONFIG_DIR / "mini.json").read_text())
SECTIONS = ["memories", "copy_engines", "computes", "edges"]


def _leaf_paths(value, path=()):
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaf_paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaf_paths(v, path + (i,))


MINI_PATHS = list(_leaf_paths(MINI))[1:]


@st.composite
def mutated_configs(draw) -> dict:
    cfg = json.loads(json.dumps(MINI))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(MINI_PATHS))
        parent = cfg
        try:
            for k in path[:-1]:
                parent = parent[k]
            key = path[-1]
            how = draw(st.sampled_from(["replace", "delete", "foreach"]))
            if how == "replace":
                parent[key] = draw(JSON_VALUES)
            elif how == "delete":
                del parent[key]
            elif isinstance(parent, dict):
                parent["foreach"] = draw(st.dictionaries(
                    st.sampled_from(["c", "r", "x", "1", ""]),
                    st.one_of(st.integers(-1, 4), st.sampled_from([10**6, 10**9, "2", 2.0, True])),
                    max_size=2))
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation removed the path
    return cfg


def check_system_config(text: str) -> None:
    path = Path(_DIR.name) / "sys.json"
    path.write_text(text)
    with bounded_memory():
        try:
            g = load_system(str(path))
        except TvmExtError as e:
            assert str(e) and "\n" not in str(e)
            return
    assert SystemGraph.from_dict(g.to_dict()) == g
    assert {m.name for m in g.memories} >= {m for c in g.computes for m in c.memories}


@FUZZ
@given(mutated_configs())
def test_mutated_accelerator_configs(cfg):
    check_system_config(json.dumps(cfg))  # json.dumps writes NaN / Infinity literals for non-finite floats


@FUZZ
@given(st.one_of(JSON_VALUES, st.dictionaries(st.sampled_from(["name", "isa", "clock_ghz", *SECTIONS]),
                                              JSON_VALUES, max_size=6)))
def test_random_accelerator_configs(cfg):
    check_system_config(json.dumps(cfg))


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_as_accelerator_config(data):
    path = Path(_DIR.name) / "bytes.json"
    path.write_bytes(data)
    with pytest.raises(TvmExtError):
        load_system(str(path))


ENGINE_KEYS = st.sampled_from(["pes", "n0", "window", "raw_distance", "col_bits", "row_bits", "policy",
                               "nz_order", "scratchpad_depth", "b_partition", "bogus"])
PLATFORM_KEYS = st.sampled_from(["name", "freq_mhz", "hbm_channels", "channel_gbs", "power_w", "channels_q",
                                 "channels_a", "bogus"])


@FUZZ
@given(st.one_of(st.dictionaries(ENGINE_KEYS, JSON_VALUES, max_size=4), JSON_VALUES),
       st.one_of(st.dictionaries(PLATFORM_KEYS, JSON_VALUES, max_size=5), JSON_VALUES))
def test_random_engine_and_platform_configs(engine, platform):
    for cls, data in [(EngineConfig, engine), (Platform, platform)]:
        try:
            cfg = cls.from_json(json.dumps(data))
        except TvmExtError as e:
            assert str(e) and "\n" not in str(e)
            continue
        assert cls.from_json(cfg.to_json()) == cfg
