"""Balanced parallel loops (tvm_ext.compile_steps.parallel_chunks): every thread gets the same iterations,
and the kernels scheduled that way still compute what numpy / torch compute."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

tvm = pytest.importorskip("tvm")
from tvm import s_tir, te  # noqa: E402

from tvm_ext.compile_steps.default_schedule import default_schedule  # noqa: E402
from tvm_ext.compile_steps.parallel_chunks import balanced_prefix, imbalance  # noqa: E402
from tvm_ext.target import resolve_target  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=4), st.integers(1, 8))
def test_the_prefix_balances_whenever_some_prefix_can(extents, threads):
    k = balanced_prefix(extents, threads)
    assert 1 <= k <= len(extents)
    span = int(np.prod(extents[:k]))
    balanced = [j for j in range(1, len(extents) + 1)
                if np.prod(extents[:j]) >= 4 * threads and imbalance(int(np.prod(extents[:j])), threads) <= 1 + 1 / 32]
    if balanced:
        assert k == balanced[0]  # the fewest loops that balance
        assert imbalance(span, threads) <= 1 + 1 / 32
    else:
        assert k == len(extents)  # nothing balances: everything fused, the finest split there is


def test_imbalance_is_the_busiest_threads_share():
    assert imbalance(8, 2) == 1.0
    assert imbalance(7, 2) == pytest.approx(8 / 7)
    with pytest.raises(ValueError):
        imbalance(0, 2)


def _parallel_extents(func) -> list[int]:
    """Extents of the distinct parallel loops of ``func`` (a loop shared by several blocks counted once)."""
    sch = s_tir.Schedule(func)
    loops: list = []
    for b in sch.get_child_blocks(sch.get_sblock("root")):
        for lp in sch.get_loops(b):
            stmt = sch.get(lp)
            if int(stmt.kind) == 1 and not any(stmt.same_as(o) for o in loops):  # 1: parallel
                loops.append(stmt)
    return [int(lp.extent) for lp in loops]


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_default_schedule_splits_an_odd_row_count_evenly_and_matches_numpy(threads):
    A = te.placeholder((7, 9, 5, 64), name="A")
    B = te.compute(A.shape, lambda a, b, c, d: A[a, b, c, d] * 2.0 + 1.0, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    steps = default_schedule(sch, sch.get_sblock("B"), threads=threads)
    assert any(s.startswith("parallel") for s in steps)
    (par,) = _parallel_extents(sch.mod["main"])
    assert par % threads == 0 or imbalance(par, threads) <= 1 + 1 / 32
    ex = tvm.compile(sch.mod["main"].with_attr("global_symbol", "main"), target=resolve_target(None))
    x = np.random.default_rng(0).standard_normal((7, 9, 5, 64)).astype("float32")
    out = tvm.runtime.tensor(np.zeros_like(x))
    ex["main"](tvm.runtime.tensor(x), out)
    np.testing.assert_allclose(out.numpy(), x * 2 + 1, rtol=1e-6)


def test_depthwise_rows_that_two_threads_cannot_share_fuse_the_row_pixels_and_match_torch():
    import torch

    from tvm_ext.compile_steps.depthwise_schedule import depthwise_schedule

    h = w = 14  # stride 2 -> 7 output rows: 4 against 3 rows on 2 threads when the rows alone run in parallel
    c = 384  # enough work for a parallel loop
    x = te.placeholder((1, h, w, c), name="x")
    wt = te.placeholder((c, 3, 3, 1), name="wt")
    pad = te.compute((1, h + 2, w + 2, c), lambda n, i, j, k: te.if_then_else(
        te.all(i >= 1, i <= h, j >= 1, j <= w), x[n, i - 1, j - 1, k], 0.0), name="pad_temp")
    ry, rx = te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
    conv = te.compute((1, 7, 7, c), lambda n, i, j, k: te.sum(
        pad[n, i * 2 + ry, j * 2 + rx, k] * wt[k, ry, rx, 0], axis=[ry, rx]), name="dw")
    func = te.create_prim_func([x, wt, conv])
    sch = depthwise_schedule(func, 8, 16, threads=2)  # 16 registers: one pixel per step
    assert sch is not None
    (par,) = _parallel_extents(sch.mod["main"])
    assert par > 7 and imbalance(par, 2) <= 1 + 1 / 32  # rows x pixel groups: 49 steps, not 7 rows
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((1, h, w, c)).astype("float32")
    ws = rng.standard_normal((c, 3, 3, 1)).astype("float32")
    ex = tvm.compile(sch.mod["main"].with_attr("global_symbol", "main"), target=resolve_target(None))
    out = tvm.runtime.tensor(np.zeros((1, 7, 7, c), "float32"))
    ex["main"](tvm.runtime.tensor(xs), tvm.runtime.tensor(ws), out)
    ref = torch.nn.functional.conv2d(torch.from_numpy(xs).permute(0, 3, 1, 2), torch.from_numpy(ws).permute(0, 3, 1, 2),
                                     stride=2, padding=1, groups=c).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)
