"""The row-tile lowering's block rules: the generated BCSR SpMM runs consecutive blocks of a block
row on independent partial-sum sets, a remainder block on set 0 (``row_tile.block_sets``), and
holds one ``B`` vector at a time when the tile has more vectors than the block rows
(``row_tile.vectors_outside_rows``); equal to scipy on block rows with odd and zero block counts
and edge blocks past M and K."""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.sparse.executors.spec import ExecParams
from schedules.sparse.recipes import build_recipe_executor
from schedules.sparse.recipes.library import bcsr_recipe
from schedules.sparse.recipes.row_tile import block_sets, vectors_outside_rows


def _loops(stmt) -> list:
    """Every ``For`` under ``stmt`` (blocks, branches and sequences walked)."""
    from tvm import tirx

    out, todo = [], [stmt]
    while todo:
        s = todo.pop()
        if s is None:
            continue
        if isinstance(s, tirx.For):
            out.append(s)
        if isinstance(s, tirx.SeqStmt):
            todo.extend(s.seq)
        for attr in ("body", "then_case", "else_case", "block"):
            child = getattr(s, attr, None)
            if child is not None and not isinstance(child, (list, tuple)):
                todo.append(child)
    return out


def _interleaved_rounds(func) -> list[int]:
    """The unrolled extents of the loops named ``c`` directly inside a loop ``q`` (a round of
    interleaved iterations)."""
    from tvm import tirx

    return [int(inner.extent) for q in _loops(func.body) if q.loop_var.name == "q"
            for inner in [q.body] if isinstance(inner, tirx.For) and inner.loop_var.name == "c"
            and inner.kind == tirx.ForKind.UNROLLED]


@st.composite
def _block_matrices(draw):
    R, C = draw(st.sampled_from([(2, 2), (1, 3)]))
    counts = draw(st.lists(st.integers(0, 5), min_size=1, max_size=6))       # blocks per block row
    kb = draw(st.integers(max(counts), 7)) if max(counts) else draw(st.integers(1, 7))
    M = len(counts) * R - draw(st.integers(0, R - 1))                        # a last block row past M
    K = kb * C - draw(st.integers(0, C - 1))                                 # a last block column past K
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    dense = np.zeros((len(counts) * R, kb * C), np.float32)
    for br, cnt in enumerate(counts):
        for bc in rng.choice(kb, size=cnt, replace=False):
            dense[br * R:(br + 1) * R, bc * C:(bc + 1) * C] = rng.random((R, C)) + 0.25
    return R, C, sp.csr_array(dense[:M, :K]), rng


@settings(max_examples=12, deadline=None)
@given(case=_block_matrices(), n=st.sampled_from([3, 8, 13, 16, 24, 70]), parallel=st.booleans(),
       unroll=st.sampled_from([1, 4]), beta=st.sampled_from([0.0, 0.5]))
def test_interleaved_blocks_equal_scipy(case, n, parallel, unroll, beta):
    R, C, A, rng = case
    exe = build_recipe_executor(bcsr_recipe(R, C), A, n, params=ExecParams(unroll=unroll, parallel=parallel))
    B = rng.random((A.shape[1], n)).astype(np.float32)
    C_in = rng.random((A.shape[0], n)).astype(np.float32)
    got = exe(B, C_in, alpha=1.5, beta=beta)
    np.testing.assert_allclose(got, 1.5 * (A @ B) + beta * C_in, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("R, C, sets", [(2, 2, 2), (1, 3, 4), (3, 3, 1)])
def test_spmm_block_loop_runs_in_rounds_of_the_partial_sum_sets(R, C, sets):
    """One accumulator row set per chain (``MIN_CHAINS // R`` with one vector per tile): every
    column tier's block loop runs ``sets`` blocks per round; a single set keeps the plain loop."""
    f = bcsr_recipe(R, C).executor(kind="spmm", params=ExecParams(unroll=1))
    rounds = _interleaved_rounds(f)
    if sets == 1:
        assert rounds == []
    else:
        assert rounds and set(rounds) == {sets}


def test_spmv_keeps_per_slot_sums_and_constant_loops_no_rounds():
    nest = bcsr_recipe(2, 2).nest("float32", "spmm")
    head = nest.levels[:2]                               # the block row, then its blocks
    assert block_sets("spmm", head, 2) == 2
    assert block_sets("spmv", head, 4) == 1
    assert block_sets("spmm", nest.levels[2:3], 2) == 1   # a constant loop: unrolled, no rounds
    assert _interleaved_rounds(bcsr_recipe(2, 2).executor(kind="spmv")) == []


def test_tile_vectors_loop_between_the_b_row_and_the_block_rows():
    """BCSR 3x3 with 8 vectors per tile: ``k`` (B's row) > ``u`` (the vector) > ``i`` (the
    block row) in the full tile; with one vector per tile the block rows stay inside ``k``."""
    from tvm import tirx

    def nested(func):
        return {(lp.loop_var.name, lp.body.loop_var.name) for lp in _loops(func.body)
                if isinstance(lp.body, tirx.For)}
    wide = nested(bcsr_recipe(3, 3).executor(kind="spmm", params=ExecParams(unroll=8)))
    assert {("k", "u"), ("u", "i")} <= wide
    narrow = nested(bcsr_recipe(3, 3).executor(kind="spmm", params=ExecParams(unroll=1)))
    assert ("k", "i") in narrow and ("k", "u") not in narrow
    assert vectors_outside_rows(8, 3) and not vectors_outside_rows(2, 2) and not vectors_outside_rows(8, 1)


@pytest.mark.parametrize("mcpu, registers", [("haswell", 12), ("skylake-avx512", 24)])
def test_accumulator_tile_fits_the_targets_register_file(mcpu, registers):
    """BCSR 3x3's vectors per tile come from the target's registers: 4 on AVX2, 8 on AVX-512."""
    from schedules.sparse.executors.spec import ExecParams

    params = ExecParams().resolve("float32", 1024, {"kind": "llvm", "mcpu": mcpu}, acc_rows=3)
    assert params.unroll * 3 <= registers
    assert params.unroll == min(8, registers // 3)
