"""``exe(B)`` reuses its last numpy result only once nothing outside the executor refers to it."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from schedules.sparse import plan_spmm


@pytest.fixture(scope="module")
def case():
    A = sp.random(300, 200, density=0.03, format="csr", dtype=np.float64, random_state=3)
    rng = np.random.default_rng(0)
    return A, plan_spmm(A, n_cols=4).build(), rng.random((200, 4)), rng.random((200, 4))


def test_a_kept_result_is_never_overwritten(case):
    A, exe, B1, B2 = case
    c1 = exe(B1)
    c2 = exe(B2)
    assert not np.shares_memory(c1, c2)
    np.testing.assert_allclose(c1, A @ B1, rtol=1e-12)
    np.testing.assert_allclose(c2, A @ B2, rtol=1e-12)


@pytest.mark.parametrize("keep", ["slice", "transpose", "memoryview", "dlpack"])
def test_a_kept_view_of_a_dropped_result_is_never_overwritten(case, keep):
    A, exe, B1, B2 = case
    c = exe(B2)
    held = {"slice": lambda: c[5:], "transpose": lambda: c.T, "memoryview": lambda: memoryview(c),
            "dlpack": lambda: np.from_dlpack(c)}[keep]()
    del c
    exe(B1)
    np.testing.assert_allclose(np.asarray(held).reshape(-1)[:4],
                               np.asarray({"slice": (A @ B2)[5:], "transpose": (A @ B2).T,
                                           "memoryview": A @ B2, "dlpack": A @ B2}[keep]).reshape(-1)[:4])


def test_a_dropped_result_is_reused_and_rewritten(case):
    A, exe, B1, B2 = case
    c = exe(B1)
    address = c.ctypes.data
    del c
    again = exe(B2)
    assert again.ctypes.data == address
    np.testing.assert_allclose(again, A @ B2, rtol=1e-12)
