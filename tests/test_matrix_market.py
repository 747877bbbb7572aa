"""Matrix Market loading: every symmetry kind, canonical CSR, clear errors."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

from tvm_ext.errors import InputError, MatrixFormatError
from tvm_ext.workloads import read_matrix_market

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
