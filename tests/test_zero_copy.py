"""numpy <-> TVM through DLPack: shared memory both ways, aligned allocation, read-only and bad arrays."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

from tvm_ext.errors import InputError
from tvm_ext.zero_copy import (ALIGNMENT, aligned_copy, as_numpy_view, as_tvm_view, empty_aligned, is_aligned,
                               writable_alias)


@pytest.mark.parametrize("shape,dtype", [((7,), "float32"), ((3, 5), "float64"), ((2, 3, 4), "int8"), ((), "int32")])
def test_empty_aligned_is_aligned_contiguous_and_sized(shape, dtype):
    for _ in range(8):  # several allocations: numpy alone lands on 16-byte boundaries
        a = empty_aligned(shape, dtype)
        assert a.__array_interface__["data"][0] % ALIGNMENT == 0 and is_aligned(a)
        assert a.shape == shape and a.dtype == np.dtype(dtype) and a.flags.c_contiguous and a.flags.writeable


def test_tvm_view_and_numpy_view_share_the_buffer():
    x = empty_aligned((4, 6), "float32")
    x[:] = np.arange(24, dtype="float32").reshape(4, 6)
    t = as_tvm_view(x)
    assert t.shape == (4, 6) and str(t.dtype) == "float32"
    back = as_numpy_view(t)
    assert np.shares_memory(back, x)
    x[1, 2] = -5.0  # a write through numpy is seen through the tensor
    np.testing.assert_array_equal(t.numpy(), x)
    out = tvm.runtime.tensor(np.arange(3, dtype="float32"))
    view = as_numpy_view(out)
    del out  # the numpy view keeps the tensor alive
    np.testing.assert_array_equal(view, [0, 1, 2])


def test_misaligned_arrays_are_copied_aligned_or_refused():
    raw = empty_aligned(68, "uint8")
    x = raw[4:].view("float32")  # 4 bytes past a 64-byte boundary
    x[:] = np.arange(16, dtype="float32")
    assert not is_aligned(x)
    t = as_tvm_view(x)
    got = as_numpy_view(t)
    assert not np.shares_memory(got, x) and is_aligned(got)
    np.testing.assert_array_equal(got, x)
    with pytest.raises(InputError, match="not 64-byte aligned"):
        as_tvm_view(x, copy_misaligned=False, name="x")
    y = aligned_copy(np.arange(12.0).reshape(3, 4)[:, ::2])
    assert is_aligned(y) and y.flags.c_contiguous and y.tolist() == [[0, 2], [4, 6], [8, 10]]


def test_read_only_arrays_are_viewed_not_copied():
    x = empty_aligned(8, "float32")
    x[:] = 3.0
    x.flags.writeable = False
    t = as_tvm_view(x)
    assert np.shares_memory(as_numpy_view(t), x)
    alias = writable_alias(x)
    assert alias.flags.writeable and np.shares_memory(alias, x)


def test_bad_arrays_are_input_errors():
    with pytest.raises(InputError, match="not C-contiguous"):
        as_tvm_view(np.zeros((4, 4), "float32").T, name="w")
    with pytest.raises(InputError, match="expected a numpy array, got list"):
        as_tvm_view([1.0, 2.0])
