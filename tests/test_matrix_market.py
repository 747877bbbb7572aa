"""Matrix Market loading: every symmetry kind, canonical CSR, clear errors."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from tvm_ext.errors import InputError, MatrixFormatError, TvmExtError
from tvm_ext.workloads import matrix_market_header, read_matrix_market

HDR = "%%MatrixMarket matrix coordinate {field} {sym}\n"


def _dense(path, **kw):
    return read_matrix_market(path, **kw).toarray()


def test_general_file_roundtrips_through_scipy_writer(tmp_path):
    A = sp.random_array((7, 5), density=0.4, rng=1, format="coo")
    path = tmp_path / "g.mtx"
    scipy.io.mmwrite(str(path), A)
    np.testing.assert_allclose(_dense(path), A.toarray())


def test_symmetric_file_is_expanded(mtx_file):
    p = mtx_file(HDR.format(field="real", sym="symmetric") + "3 3 3\n1 1 2.0\n2 1 -1.0\n3 2 4.0\n")
    expect = np.array([[2.0, -1.0, 0.0], [-1.0, 0.0, 4.0], [0.0, 4.0, 0.0]])
    np.testing.assert_array_equal(_dense(p), expect)


def test_skew_symmetric_file_is_expanded_with_sign(mtx_file):
    p = mtx_file(HDR.format(field="real", sym="skew-symmetric") + "3 3 1\n2 1 5.0\n")
    np.testing.assert_array_equal(_dense(p), [[0, -5, 0], [5, 0, 0], [0, 0, 0]])


def test_pattern_file_loads_ones(mtx_file):
    p = mtx_file(HDR.format(field="pattern", sym="general") + "2 3 2\n1 3\n2 1\n")
    np.testing.assert_array_equal(_dense(p), [[0, 0, 1], [1, 0, 0]])


def test_result_is_canonical_csr_in_requested_dtype(mtx_file):
    # out-of-order entries and a duplicate (summed, per the format's convention)
    p = mtx_file(HDR.format(field="real", sym="general") + "2 3 4\n2 3 1.0\n1 2 2.0\n1 1 3.0\n1 2 0.5\n")
    A = read_matrix_market(p, dtype="float32")
    assert isinstance(A, sp.csr_array)
    assert A.dtype == np.float32 and A.indices.dtype == np.int32
    assert A.has_sorted_indices and A.nnz == 3
    np.testing.assert_array_equal(A.toarray(), [[3, 2.5, 0], [0, 0, 1]])


def test_integer_field_converts_to_float(mtx_file):
    p = mtx_file(HDR.format(field="integer", sym="general") + "1 1 1\n1 1 7\n")
    assert read_matrix_market(p).dtype == np.float64


@pytest.mark.parametrize(
    "text, needle",
    [
        ("", "empty file"),
        ("%%MatrixMarket matrix coordinate real wobbly\n1 1 1\n1 1 1\n", "symmetry 'wobbly'"),
        ("%%MatrixMarket matrix foo real general\n1 1 1\n1 1 1\n", "format 'foo'"),
        ("just some text\n1 1 1\n", "not a Matrix Market file"),
        (HDR.format(field="real", sym="general") + "2 2 1\n3 1 1.0\n", "out of bounds"),
        (HDR.format(field="real", sym="general") + "2 2 1\n0 1 1.0\n", "out of bounds"),
        (HDR.format(field="real", sym="general") + "3 3 4\n1 1 1.0\n2 2 1.0\n", "truncated"),
        (HDR.format(field="real", sym="general") + "2 2 1\n1 x 1.0\n", "invalid"),
        (HDR.format(field="complex", sym="general") + "1 1 1\n1 1 1.0 2.0\n", "complex"),
        (HDR.format(field="real", sym="general") + "2 2 1\n1 1 nan\n", "non-finite"),
    ],
    ids=["empty", "bad-symmetry", "bad-format", "no-banner", "row-too-big", "row-zero",
         "truncated", "garbage", "complex", "nan"],
)
def test_bad_files_give_one_clear_error_naming_the_file(mtx_file, text, needle):
    p = mtx_file(text, name="broken.mtx")
    with pytest.raises(MatrixFormatError) as info:
        read_matrix_market(p)
    msg = str(info.value)
    assert "broken.mtx" in msg
    assert needle.lower() in msg.lower()
    assert "\n" not in msg


def test_nan_allowed_when_asked(mtx_file):
    p = mtx_file(HDR.format(field="real", sym="general") + "2 2 1\n1 1 nan\n")
    assert np.isnan(read_matrix_market(p, allow_nan=True).data[0])


def test_missing_file(tmp_path):
    with pytest.raises(MatrixFormatError, match="cannot open"):
        read_matrix_market(tmp_path / "nope.mtx")


def test_errors_are_input_errors(mtx_file):
    assert issubclass(MatrixFormatError, InputError)


# --------------------------------------------------------------------------- strictness and resource bounds


def test_real_hermitian_is_symmetric(mtx_file):
    p = mtx_file(HDR.format(field="real", sym="hermitian") + "2 2 2\n1 1 1.0\n2 1 3.0\n")
    np.testing.assert_array_equal(_dense(p), [[1.0, 3.0], [3.0, 0.0]])


def test_complex_hermitian_stays_refused(mtx_file):
    p = mtx_file(HDR.format(field="complex", sym="hermitian") + "1 1 1\n1 1 1.0 0.0\n")
    with pytest.raises(MatrixFormatError, match="complex"):
        read_matrix_market(p)


def test_array_formats_match_scipy(mtx_file):
    for sym, body in [("general", "2 3\n1\n0\n2\n3\n0\n4\n"), ("symmetric", "3 3\n1\n2\n0\n4\n5\n6\n"),
                      ("skew-symmetric", "3 3\n1\n2\n3\n")]:
        p = mtx_file(f"%%MatrixMarket matrix array real {sym}\n% a comment\n" + body, name=f"{sym}.mtx")
        np.testing.assert_array_equal(_dense(p), scipy.io.mmread(str(p)))


def test_integer_pattern_and_duplicates_match_scipy(mtx_file):
    p = mtx_file(HDR.format(field="integer", sym="symmetric") + "3 3 4\n1 1 7\n3 1 -2\n3 1 5\n2 2 1\n")
    np.testing.assert_array_equal(_dense(p), scipy.io.mmread(str(p)).toarray())
    p = mtx_file(HDR.format(field="pattern", sym="symmetric") + "3 3 2\n2 1\n3 3\n", name="pat.mtx")
    np.testing.assert_array_equal(_dense(p), scipy.io.mmread(str(p)).toarray())


@pytest.mark.parametrize(
    "text, needle",
    [
        (HDR.format(field="real", sym="general") + "2 2 1\n1 1 1.0 5\n", "line 3: extra tokens"),
        (HDR.format(field="pattern", sym="general") + "2 2 2\n1 1\n2 2 1\n", "line 4: extra tokens"),
        (HDR.format(field="real", sym="general") + "2 2 2\n1 1 1.0\n2 2\n", "line 4: too few tokens"),
        (HDR.format(field="real", sym="general") + "2 2 1\n1 1 1.0\n2 2 1.0\n", "line 4: more entries"),
        (HDR.format(field="integer", sym="general") + "2 2 1\n1 1 1.5\n", "line 3: invalid token '1.5'"),
        (HDR.format(field="real", sym="general") + "2 2 1\n1 1 0x10\n", "line 3: invalid token '0x10'"),
        (HDR.format(field="real", sym="general") + "2 2 1\n1.0 1 2\n", "line 3: invalid token '1.0'"),
        (HDR.format(field="real", sym="general") + "2 2 1\n1 1 1_0\n", "line 3: invalid token"),
        (HDR.format(field="real", sym="general") + "2 2 1\n1 1 1-2\n", "line 3: invalid number '1-2'"),
        (HDR.format(field="real", sym="general") + "2 2 1\n1 1 inf\n", "line 3: non-finite"),
        (HDR.format(field="real", sym="skew-symmetric") + "2 2 1\n1 1 3\n", "zero diagonal"),
        (HDR.format(field="real", sym="symmetric") + "2 3 1\n1 1 3\n", "must be square"),
        (HDR.format(field="real", sym="general") + "2 2\n1 1 3\n", "size line"),
        (HDR.format(field="real", sym="general") + "2 2 1 1\n1 1 3\n", "size line"),
        ("%%MatrixMarket matrix array pattern general\n1 1\n1\n", "coordinate format"),
        (HDR.format(field="real", sym="general") + "2 2 1\n1 1 1\n\x0b", "line 4: invalid token '\\x0b'"),
    ],
    ids=["extra-token", "extra-token-pattern", "too-few-tokens", "too-many-entries", "int-field-float",
         "hex", "float-index", "underscore", "garbage-number", "inf", "skew-diagonal", "nonsquare-symmetric",
         "short-size-line", "long-size-line", "array-pattern", "vertical-tab"],
)
def test_malformed_entries_name_file_and_line(mtx_file, text, needle):
    p = mtx_file(text, name="bad.mtx")
    with pytest.raises(MatrixFormatError) as info:
        read_matrix_market(p)
    assert "bad.mtx" in str(info.value) and needle in str(info.value)


@pytest.mark.parametrize(
    "size_line, fmt, needle",
    [
        ("1000000 1000000 1000000000000", "coordinate", "need at least"),
        ("1000 1000 100000000", "coordinate", "need at least"),
        ("100000 100000", "array", "need at least"),
        ("1000000000 1000000000 1", "coordinate", "memory budget"),
        ("3000000000 1 1", "coordinate", "int32"),
    ],
    ids=["nnz-1e12", "nnz-1e8", "array-1e5-squared", "rows-1e9", "rows-int32"],
)
def test_declared_sizes_are_checked_before_allocating(mtx_file, size_line, fmt, needle):
    p = mtx_file(f"%%MatrixMarket matrix {fmt} real general\n{size_line}\n1 1 1\n", name="bomb.mtx")
    with pytest.raises(MatrixFormatError) as info:
        read_matrix_market(p)
    assert "bomb.mtx" in str(info.value) and needle in str(info.value)


def test_memory_budget_keyword_and_environment(mtx_file, monkeypatch):
    p = mtx_file(HDR.format(field="real", sym="general") + "1000 1000 2\n1 1 1.0\n1000 1000 2.0\n")
    assert read_matrix_market(p).nnz == 2  # default budget: GiBs
    with pytest.raises(MatrixFormatError, match="memory budget is 1,000 bytes"):
        read_matrix_market(p, max_bytes=1000)
    monkeypatch.setenv("TVM_EXT_MAX_MATRIX_BYTES", "1K")
    with pytest.raises(MatrixFormatError, match="memory budget is 1,024 bytes"):
        read_matrix_market(p)
    assert read_matrix_market(p, max_bytes="1M").nnz == 2  # the keyword wins over the environment
    from tvm_ext.workloads import matrix_memory_budget  # the budget in force, public beside the reader

    assert matrix_memory_budget() == 1024 and matrix_memory_budget("1M") == 1 << 20
    monkeypatch.setenv("TVM_EXT_MAX_MATRIX_BYTES", "lots")
    with pytest.raises(TvmExtError, match="TVM_EXT_MAX_MATRIX_BYTES"):
        read_matrix_market(p)


def test_non_regular_files_are_refused_without_blocking(tmp_path):
    fifo = tmp_path / "pipe.mtx"
    os.mkfifo(fifo)  # opening it for reading would block until a writer came
    for path, needle in [(fifo, "FIFO"), (Path("/dev/zero"), "device"), (tmp_path, "directory")]:
        with pytest.raises(MatrixFormatError) as info:
            read_matrix_market(path)
        assert str(path) in str(info.value) and needle in str(info.value)
    with pytest.raises(MatrixFormatError, match="FIFO"):
        matrix_market_header(fifo)


def test_long_comments_and_crlf_lines_are_read(mtx_file):
    p = mtx_file(HDR.format(field="real", sym="general") + "%" + "x" * 3_000_000 + "\n2 2 1\r\n2 1 5\r\n")
    np.testing.assert_array_equal(_dense(p), [[0, 0], [5, 0]])


def test_multi_block_file_matches_scipy(tmp_path):
    A = sp.random_array((3000, 2000), density=0.02, rng=3, format="coo")  # ~120k entries, > 1 MiB of text
    path = tmp_path / "big.mtx"
    scipy.io.mmwrite(str(path), A)
    assert path.stat().st_size > 2 << 20
    B = read_matrix_market(path)
    ref = scipy.io.mmread(str(path)).tocsr()
    assert (B != ref).nnz == 0 and B.nnz == ref.nnz


def test_empty_array_file_reads_as_an_empty_matrix(mtx_file):
    # scipy.io.mmread (1.17) kills the process with SIGFPE on this two-line file
    A = read_matrix_market(mtx_file("%%MatrixMarket matrix array real general\n0 3\n"))
    assert A.shape == (0, 3) and A.nnz == 0
