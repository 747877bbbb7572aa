"""Format selection: analytic cost model, reasons, and the pluggable selector hook."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from schedules.sparse.features import DIAGONAL_COUNT_LIMIT
from schedules.sparse.selection import (
    FETCH_FROM_L1, FETCH_FROM_L2, LANE_COST, AnalyticCostModel, Candidate, Choice,
    _hyb_width, _sell_slots, get_default_selector, repeat_share, select_format, set_default_selector,
    sparse_features,
)
from schedules.sparse.timed_choice import _close_candidates, _row_block, measure_close_candidates
from tvm_ext.workloads import block_fem, lap2d, rmat, uniform_random


def test_dense_blocks_choose_bcsr_with_the_block_size():
    choice = select_format(block_fem(300, 4, 4, seed=1), n_cols=32)
    assert choice.format == "bcsr"
    assert (choice.args["R"], choice.args["C"]) == (4, 4)
    assert "bcsr(R=4,C=4)" in choice.reason and "csr" in choice.reason


def test_stencil_spmv_prefers_dia():
    assert select_format(lap2d(100), n_cols=1).format == "dia"


def test_power_law_graph_excludes_padded_formats_with_reasons():
    choice = select_format(rmat(12), n_cols=8)
    assert choice.format in {"csr", "hyb", "sell"}
    assert "dia" in choice.excluded and "ell" in choice.excluded
    assert "padding" in choice.excluded["ell"]


@pytest.mark.parametrize("dtype, vb", [("float32", 4), ("float64", 8)])
def test_scores_are_bytes_and_the_choice_is_their_minimum(dtype, vb):
    model = AnalyticCostModel()
    feats = sparse_features(uniform_random(200, 150, 0.05, seed=2).astype(dtype))
    scores, _ = model.scores(feats, 16)
    choice = model.choose(feats, 16)
    assert choice.scores[choice.candidate.label] == min(scores.values())
    csr = scores[Candidate("csr")]
    nnz, m = feats["nnz"], feats["rows"]
    # csr traffic: values + indices + indptr + B rows (all of B, 150 x 16 values, fits in L2; the
    # share repeating the row before's columns from L1) + one multiply-add lane per non-zero and
    # column + C written once, every value ``vb`` bytes (the matrix's dtype)
    rep = repeat_share(feats)
    fetch = (1 - rep) * FETCH_FROM_L2 + rep * FETCH_FROM_L1
    assert csr == pytest.approx(nnz * (4 + vb) + (m + 1) * 4 + nnz * 16 * vb * (fetch + LANE_COST) + m * 16 * vb)


def test_the_value_bytes_come_from_the_matrix_dtype():
    """A float64 matrix is priced with 8-byte values (A's values, B's rows, C), a float32 one with 4."""
    facts = dict(l1_bytes=32 << 10, l2_bytes=1 << 20, llc_bytes=16 << 20, vector_bytes=32)
    A = block_fem(300, 3, 3, seed=1)
    f32, f64 = sparse_features(A.astype(np.float32)), sparse_features(A.astype(np.float64))
    assert (f32["dtype"], f64["dtype"]) == ("float32", "float64")
    model = AnalyticCostModel(**facts)
    assert (model.value_bytes_for(f32), model.value_bytes_for(f64)) == (4, 8)
    est32, _ = model._estimates(f32, 8)
    est64, _ = model._estimates(f64, 8)
    nnz, m = f64["nnz"], f64["rows"]
    assert est32[Candidate("csr")][0] == nnz * (4 + 4) + (m + 1) * 4   # values + column indices + row pointers
    assert est64[Candidate("csr")][0] == nnz * (4 + 8) + (m + 1) * 4
    s32, s64 = model.scores(f32, 8)[0], model.scores(f64, 8)[0]
    assert all(s64[c] > s32[c] for c in s32)
    # the float64 matrix's choice is the one priced at 8 bytes, not at the old fixed 4
    choice = select_format(A, 8, selector=model)
    assert choice.scores == AnalyticCostModel(value_bytes=8, **facts).choose(f64, 8).scores
    assert choice.scores != AnalyticCostModel(value_bytes=4, **facts).choose(f64, 8).scores
    assert choice.scores[choice.candidate.label] == min(s64.values())


def test_the_value_bytes_need_a_priced_dtype():
    from tvm_ext.errors import InputError

    f = sparse_features(lap2d(8))
    with pytest.raises(InputError, match="float16 is not priced"):
        AnalyticCostModel().scores(dict(f, dtype="float16"), 8)
    with pytest.raises(InputError, match="no value dtype"):
        AnalyticCostModel().scores({k: v for k, v in f.items() if k != "dtype"}, 8)
    assert AnalyticCostModel(value_bytes=2).scores(dict(f, dtype="float16"), 8)[0]  # an explicit size prices any


def test_hyb_width_minimises_modelled_bytes():
    lengths = np.array([1, 1, 1, 1, 2, 2, 50])
    w, ell_slots, coo = _hyb_width(lengths, 4)
    assert ell_slots == w * lengths.size
    assert coo == int(np.maximum(lengths - w, 0).sum())
    brute = min(range(51), key=lambda x: x * 7 * 8 + np.maximum(lengths - x, 0).sum() * 12)
    assert w == brute


def test_sell_slots_counts_padding_exactly():
    lengths = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    # sigma=4 windows sorted descending: [4,3,1,1], [9,6,5,2]; C=2 slices -> max per pair
    assert _sell_slots(lengths, 2, 4) == 2 * (4 + 1 + 9 + 5)


class _Fixed:
    name = "fixed"

    def choose(self, features, n_cols):
        return Choice(Candidate.of("ell", width=features["row_length"]["max"]), {}, {}, "always ell", self.name)


class _Broken:
    name = "broken"

    def choose(self, features, n_cols):
        raise RuntimeError("model not trained")


def test_selector_hook_and_fallback():
    A = lap2d(20)
    try:
        set_default_selector(_Fixed())
        assert select_format(A, 4).format == "ell"
        set_default_selector(_Broken())
        choice = select_format(A, 4)
        assert choice.selector == "analytic" and "fallback" in choice.reason
    finally:
        set_default_selector(None)
    assert isinstance(get_default_selector(), AnalyticCostModel)


def test_trained_selector_is_loaded_by_name(monkeypatch):
    import schedules.sparse.selection as sel

    monkeypatch.setattr(sel, "_default_selector", None)
    monkeypatch.setenv("TVM_EXT_SELECTOR", f"{__name__}:_fixed_loader")
    try:
        assert sel.get_default_selector().name == "fixed"
        monkeypatch.setattr(sel, "_default_selector", None)
        monkeypatch.setenv("TVM_EXT_SELECTOR", "no.such.module:load")
        assert isinstance(sel.get_default_selector(), AnalyticCostModel)
    finally:
        set_default_selector(None)


def _fixed_loader(install=False):
    return _Fixed()


class _Close:
    """Scores csr and ELL 5% apart, BCSR 2x2 far behind: only the first two are worth timing."""

    name = "close"

    def choose(self, features, n_cols):
        scored = ((Candidate("csr"), 1.0), (Candidate.of("ell", width=features["row_length"]["max"]), 1.05),
                  (Candidate.of("bcsr", R=2, C=2), 3.0))
        return Choice(scored[0][0], {c.label: v for c, v in scored}, {}, "csr by fiat", self.name, scored=scored)


def test_close_candidates_are_timed_and_the_measurement_is_in_explain():
    from schedules.sparse import inspect

    A = lap2d(40)
    plan = inspect(A, 8, selector=_Close(), measure=True)
    meas = plan.choice.measurement
    assert meas is not None and set(meas.seconds) == {"csr", "ell(width=5)"}
    assert all(t > 0 for t in meas.seconds.values()) and not meas.failed
    assert plan.label == meas.chosen and meas.model_choice == "csr"
    assert (meas.row_start, meas.row_stop, meas.nnz) == (0, A.shape[0], A.nnz)
    text = plan.explain()
    assert "measured N=8" in text and "ell(width=5)" in text and "csr" in text
    B = np.random.default_rng(0).uniform(-1, 1, (A.shape[1], 8)).astype(plan.format.dtype)
    np.testing.assert_allclose(plan.build()(B), A @ B, rtol=1e-4, atol=1e-4)
    # measure=False, or nothing close: the model's word stands, nothing is timed
    assert inspect(A, 8, selector=_Close(), measure=False).choice.measurement is None
    lone = measure_close_candidates(A, 8, _Close().choose(sparse_features(A), 8), margin=0.01)
    assert lone.measurement is None and lone.candidate.label == "csr"


def test_close_candidates_and_the_timed_row_block():
    choice = _Close().choose(sparse_features(lap2d(10)), 8)
    assert [c.label for c in _close_candidates(choice, 0.15, 3)] == ["csr", "ell(width=5)"]
    assert [c.label for c in _close_candidates(choice, 5.0, 2)] == ["csr", "ell(width=5)"]
    assert len(_close_candidates(choice, 5.0, 3)) == 3
    A = lap2d(100)  # 49600 nnz
    a, b = _row_block(A, 10_000)
    assert 0 < a < b < A.shape[0] and abs(int(A.indptr[b] - A.indptr[a]) - 10_000) <= 5
    assert _row_block(A, 10**6) == (0, A.shape[0])


class _FarBlocks:
    """Picks BCSR 2x2, every other candidate far behind: only the CSR baseline is worth a check."""

    name = "far"

    def choose(self, features, n_cols):
        scored = ((Candidate.of("bcsr", R=2, C=2), 1.0), (Candidate.of("bcsr", R=4, C=4), 1.02),
                  (Candidate("dia"), 2.0), (Candidate("csr"), 2.5), (Candidate.of("sell", C=8, sigma=256), 2.6))
        return Choice(scored[0][0], {c.label: v for c, v in scored}, {}, "2x2 by fiat", self.name, scored=scored)


def test_a_non_baseline_choice_is_timed_against_the_best_baseline():
    choice = _FarBlocks().choose({}, 8)
    labels = [c.label for c in _close_candidates(choice, 0.15, 3)]
    assert labels == ["bcsr(R=2,C=2)", "bcsr(R=4,C=4)", "csr"]
    assert [c.label for c in _close_candidates(choice, 0.15, 2)] == ["bcsr(R=2,C=2)", "csr"]
    A = block_fem(3000, 2, 2, seed=3)  # 108K nnz: the timed block is a 20K-nnz row window
    timed = measure_close_candidates(A, 8, choice, max_nnz=20_000)
    meas = timed.measurement
    assert set(meas.seconds) == set(labels) and timed.candidate.label == meas.chosen
    assert 0 < meas.row_start < meas.row_stop < A.shape[0] and abs(meas.nnz - 20_000) < 100


def test_registered_loader_supplies_the_default_selector(monkeypatch):
    import schedules.sparse.selection as sel
    import tvm_ext.tuning

    assert tvm_ext.tuning.trained_selector in sel._selector_loaders  # the tuning package registered itself
    monkeypatch.setattr(sel, "_default_selector", None)
    monkeypatch.setattr(sel, "_selector_loaders", [lambda: None, lambda: _Fixed()])
    monkeypatch.setenv("TVM_EXT_SELECTOR", "")
    try:
        assert sel.get_default_selector().name == "fixed"
        assert select_format(lap2d(20), 4).format == "ell"
    finally:
        set_default_selector(None)


def test_dia_is_excluded_past_the_prefetch_stream_count():
    from tvm_ext.workloads import lap3d

    A = lap3d(12, points=27)
    choice = select_format(A, n_cols=1, selector=AnalyticCostModel())
    # the count stops past the stream count: "more than N" with N > 16
    assert choice.format != "dia" and "occupied diagonals" in choice.excluded["dia"]
    assert choice.excluded["dia"].startswith("more than ")
    counted = sparse_features(A, diagonal_limit=64)  # a larger limit counts them all
    assert counted["diagonals"] == 27 and counted["diagonals_exact"]
    wide = AnalyticCostModel(max_dia_streams=32).choose(counted, 1)
    assert "dia" not in wide.excluded or "27 occupied diagonals" not in wide.excluded["dia"]
    assert select_format(lap2d(60), n_cols=1, selector=AnalyticCostModel()).format == "dia"  # 5 diagonals


def test_the_timed_row_block_is_capped_in_rows():
    A = lap2d(100)  # 10,000 rows, 49,600 nnz
    a, b = _row_block(A, 10**6, 500)
    middle = (A.shape[0] - 500) // 2
    assert b - a == 500 and a == middle - middle % 24
    a, b = _row_block(A, 10_000, 100)
    assert b - a == 100 and int(A.indptr[b] - A.indptr[a]) < 10_000


def test_low_fill_blocks_lose_to_csr_once_b_is_cache_resident():
    # a 5-point Laplacian's 3x1 blocks are 45% full: they save B loads (hits in L2, the
    # band of B fits there) but more than double the multiply-adds and the stored values
    model = AnalyticCostModel()
    for grid in (30, 100):
        feats = sparse_features(lap2d(grid))
        scores, _ = model.scores(feats, 32)
        assert scores[Candidate("csr")] < scores[Candidate.of("bcsr", R=3, C=1)]
        assert model.choose(feats, 32).format != "bcsr"
    # dense 3x3 blocks keep winning: same multiply-adds, 45% fewer bytes of A
    feats = sparse_features(block_fem(2000, 3, 3, seed=0))
    for n in (1, 8, 32):
        assert model.choose(feats, n).candidate == Candidate.of("bcsr", R=3, C=3)


def test_sell_pays_its_row_permutation_and_is_no_spmm_candidate():
    # equal slots (a 5-point stencil sorts into full slices): SELL's perm makes it heavier than CSR
    feats = sparse_features(lap2d(100))
    est, _ = AnalyticCostModel()._estimates(feats)
    a_sell, a_csr = est[Candidate.of("sell", C=8, sigma=256)][0], est[Candidate("csr")][0]
    # equal slots; perm (4 bytes a row) + slice pointers and widths outweigh CSR's row pointers
    assert a_sell - a_csr >= feats["rows"]
    # for N > 1 its executor is CSR's row loop over padded, permuted rows
    scores, excluded = AnalyticCostModel().scores(feats, 8)
    assert Candidate.of("sell", C=8, sigma=256) not in scores
    assert "never lighter than CSR" in excluded["sell(C=8,sigma=256)"]


def test_a_dia_choice_is_timed_against_csr():
    A = lap2d(60)  # DIA by the model for SpMV
    choice = select_format(A, 1, selector=AnalyticCostModel())
    assert choice.format == "dia"
    assert Candidate("csr") in _close_candidates(choice, 0.15, 3)


def test_dia_spmm_pays_its_slot_reads():
    # fewer bytes than CSR on a stencil, but the SpMM executor reads an offset and a value
    # from its own diagonal stream per slot: at N=8 it is not the choice and scores above CSR
    import scipy.sparse as sp
    from pyamg.gallery import diffusion_stencil_2d, stencil_grid

    nine_point = sp.csr_array(stencil_grid(diffusion_stencil_2d(epsilon=0.1, theta=0.5, type="FE"),
                                           (150, 150), format="csr"))
    model = AnalyticCostModel()
    for A in (lap2d(100), nine_point):
        feats = sparse_features(A)
        assert model.choose(feats, 1).format == "dia"
        choice = model.choose(feats, 8)
        assert choice.format != "dia"
        assert choice.scores["dia"] > choice.scores["csr"]


def test_the_model_choice_stays_unless_beaten_by_the_override_margin():
    from schedules.sparse.choice import Measurement

    def meas(seconds, override=0.05):
        return Measurement(seconds, 8, 0, 10, 100, 0.15, "dia", override=override)

    assert meas({"dia": 1.04, "csr": 1.0}).chosen == "dia"       # within 5%: the model's word
    assert meas({"dia": 1.06, "csr": 1.0}).chosen == "csr"       # beaten by more
    assert meas({"dia": 1.04, "csr": 1.0}, 0.0).chosen == "csr"
    assert meas({"csr": 1.0}).chosen == "csr"                    # the choice could not be timed
    # with paired ratios (rounds taken in turns), the ratios decide, not the single fastest runs
    paired = Measurement({"dia": 1.0, "csr": 0.5}, 8, 0, 10, 100, 0.15, "dia", override=0.05,
                         ratios={"dia": 1.0, "csr": 0.97})        # csr's one lucky run
    assert paired.fastest == "csr" and paired.chosen == "dia"
    assert replace(paired, ratios={"dia": 1.0, "csr": 0.9}).chosen == "csr"
    # the median says csr, the fastest runs say dia: no clear winner, the model's word
    assert replace(paired, seconds={"dia": 0.9, "csr": 1.0}, ratios={"dia": 1.0, "csr": 0.9}).chosen == "dia"
    assert "x0.97" in paired.describe()
    # a baseline the model scored far behind must beat its choice by more than the margin
    far = replace(paired, ratios={"dia": 1.0, "csr": 0.9}, far=("csr",))
    assert far.chosen == "dia"
    assert replace(far, ratios={"dia": 1.0, "csr": 0.8}).chosen == "csr"


def test_compiled_structure_features_equal_matrix_stats():
    from schedules.sparse.features import _structure_stats
    from tvm_ext.workloads import canonical_csr, matrix_stats

    for A in (lap2d(30), rmat(9), block_fem(200, 3, 3, seed=0), uniform_random(50, 80, 0.1, seed=1),
              rmat(15)):  # two threads' ranges past 200K non-zeros
        A = canonical_csr(A)
        got = _structure_stats(A)
        if got is None:
            pytest.skip("no C compiler: sparse_features uses matrix_stats")
        want = matrix_stats(A, block_sizes=(1,), symmetry=False)
        exact = got.pop("diagonals_exact")
        assert exact == (want["diagonals"] <= DIAGONAL_COUNT_LIMIT)
        if not exact:  # the count stopped past the limit: a lower bound, and DIA's fill an upper one
            assert DIAGONAL_COUNT_LIMIT < got.pop("diagonals") <= want["diagonals"]
            assert got.pop("dia_fill") >= want["dia_fill"]
        # the row lengths' spread from their integer sums, rounded once (numpy's two passes round more)
        assert got["row_length"].pop("std") == pytest.approx(want["row_length"].pop("std"), rel=1e-12)
        assert {k: want[k] for k in got} == got


def test_a_stopped_diagonal_count_excludes_dia():
    f = sparse_features(rmat(9))
    assert not f["diagonals_exact"] and f["diagonals"] > DIAGONAL_COUNT_LIMIT
    _, excluded = AnalyticCostModel(max_dia_streams=10**6).scores(f, 1)
    assert excluded["dia"].startswith("more than ")


def test_a_close_baseline_leaves_its_place_to_the_next_close_candidate():
    scored = ((Candidate.of("bcsr", R=2, C=1), 1.0), (Candidate("csr"), 1.03),
              (Candidate.of("sell", C=8, sigma=256), 1.04), (Candidate("dia"), 3.0))
    choice = Choice(scored[0][0], {c.label: v for c, v in scored}, {}, "by fiat", "fixed", scored=scored)
    assert [c.label for c in _close_candidates(choice, 0.15, 3)] == [
        "bcsr(R=2,C=1)", "csr", "sell(C=8,sigma=256)"]


def test_row_vectorised_spmv_and_blocks_agree_with_measurement():
    # measured (one thread, N=1): on a 27-point stencil SELL ran 1.3x faster than CSR, 1.7x
    # faster than BCSR 2x1 (a half-empty block costs a whole scalar multiply-add per slot); on
    # dense 3x3 blocks BCSR 3x3 ran 1.5x faster than CSR
    from tvm_ext.workloads import lap3d

    model = AnalyticCostModel(vector_bytes=64)
    assert model.choose(sparse_features(lap3d(20, points=27)), 1).format == "sell"
    assert model.choose(sparse_features(block_fem(2000, 3, 3, seed=0)), 1).candidate == \
        Candidate.of("bcsr", R=3, C=3)


def test_the_timed_block_keeps_the_matrix_block_alignment():
    from schedules.sparse.inspectors import to_bcsr
    from schedules.sparse.timed_choice import BLOCK_ALIGN, _window

    A = block_fem(3000, 3, 3, seed=4)  # dense 3 x 3 blocks
    a, b = _row_block(A, 20_000, 1000)
    assert a % BLOCK_ALIGN == 0 and BLOCK_ALIGN % 3 == 0 and BLOCK_ALIGN % 8 == 0
    block = _window(A, a, b)
    c0 = int(A.indices[A.indptr[a]:A.indptr[b]].min())
    c0 -= c0 % BLOCK_ALIGN
    np.testing.assert_array_equal(block.toarray(), A[a:b].toarray()[:, c0:c0 + block.shape[1]])
    # the block's 3 x 3 blocks are whole: fill 1, as on the whole matrix
    blocks = to_bcsr(block, 3, 3)
    assert blocks.bcol.size * 9 == block.nnz


@pytest.mark.parametrize("facts", [
    dict(),
    dict(l2_bytes=256 << 10, llc_bytes=4 << 20, vector_bytes=32, l1_bytes=32 << 10),
    dict(l2_bytes=2 << 20, llc_bytes=32 << 20, vector_bytes=64, l1_bytes=48 << 10)])
def test_no_bcsr_for_a_five_point_laplacian_and_bcsr_for_dense_blocks(facts):
    """§5.4: register blocks give no benefit at low non-zeros per row.  A 5-point row shares 2 of
    its 5 columns with the row before, so the B fetches 2x1 / 3x1 blocks save are L1 hits, while
    their padded slots (45-63% full) cost multiply-adds; dense 3x3 FEM blocks still win."""
    from tvm_ext.workloads import block_fem

    model = AnalyticCostModel(**facts)
    for grid in (30, 100, 300):
        f = sparse_features(lap2d(grid))
        assert 0.35 < repeat_share(f) < 0.45  # 2 of 5 columns
        for n in (1, 8, 32, 128):
            choice = model.choose(f, n)
            assert choice.format != "bcsr", (grid, n, choice.reason)
    dense = sparse_features(block_fem(2000, 3, 3, seed=1))
    for n in (1, 8, 32, 128):
        assert model.choose(dense, n).candidate.label == "bcsr(R=3,C=3)"


def test_the_l1_discount_needs_both_rows_b_rows_in_l1():
    f = sparse_features(lap2d(100))
    tiny_l1 = AnalyticCostModel(l1_bytes=64).scores(f, 32)[0]
    roomy = AnalyticCostModel(l1_bytes=1 << 20).scores(f, 32)[0]
    csr = Candidate("csr")
    assert roomy[csr] < tiny_l1[csr]  # the repeated fetches are priced at L1 only when they fit


def test_a_faster_candidate_replaces_the_built_choice_only_when_its_construction_pays():
    from schedules.sparse.choice import Measurement

    def meas(expected_runs, built="csr", build=None):
        # bcsr 10% faster per run (0.1 ms of the block's 1 ms), its inspector 3 ms on the block
        return Measurement({"csr": 1e-3, "bcsr(R=2,C=1)": 0.9e-3}, 8, 0, 10, 100, 0.15, "csr", override=0.05,
                           ratios={"csr": 1.0, "bcsr(R=2,C=1)": 0.9},
                           build_seconds=build or {"csr": 0.0, "bcsr(R=2,C=1)": 3e-3},
                           expected_runs=expected_runs, built=built)

    assert meas(None).chosen == "bcsr(R=2,C=1)"   # no rule: the clear winner
    assert meas(100).chosen == "bcsr(R=2,C=1)"    # 0.1 ms x 100 runs = 10 ms > 3 ms
    assert meas(100).unpaid == ()
    assert meas(20).chosen == "csr" and meas(20).unpaid == ("bcsr(R=2,C=1)",)  # 2 ms < 3 ms
    assert "not worth building for 20 runs" in meas(20).describe()
    # the model's choice not built yet: only the difference of the two constructions counts
    unbuilt = meas(20, built=None, build={"csr": 2e-3, "bcsr(R=2,C=1)": 3e-3})
    assert unbuilt.pays("bcsr(R=2,C=1)") and unbuilt.chosen == "bcsr(R=2,C=1)"  # 2 ms > 1 ms


def test_a_switch_needs_the_margin_in_the_paired_median_and_in_the_fastest_runs():
    from schedules.sparse.choice import Measurement

    m = Measurement({"csr": 1.0, "ell": 0.98}, 8, 0, 10, 100, 0.15, "csr", override=0.05,
                    ratios={"csr": 1.0, "ell": 0.9})  # the median says 10%, the clean runs 2%
    assert m.chosen == "csr"
    assert replace(m, seconds={"csr": 1.0, "ell": 0.9}).chosen == "ell"


@pytest.mark.parametrize("n", [1, 8])
def test_a_power_law_plan_claims_many_parts_and_matches_scipy(n):
    from schedules.sparse import inspect
    from schedules.sparse.selection import DYNAMIC_PARTS_PER_THREAD
    from tvm_ext.target import num_threads

    A = rmat(13, seed=1).astype(np.float32)  # above the executors' serial size
    exe = inspect(A, n_cols=n, format="csr").build()
    assert exe.params.dynamic and exe.params.parts_per_thread == DYNAMIC_PARTS_PER_THREAD
    part = exe._arrays[-1].numpy()  # the claimed parts' row boundaries
    assert part[0] == 0 and part[-1] == A.shape[0] and np.all(np.diff(part) > 0)
    assert part.size - 1 > 4 * num_threads() or part.size - 1 >= A.nnz // 4096
    rng = np.random.default_rng(0)
    B = rng.uniform(-1, 1, A.shape[1] if n == 1 else (A.shape[1], n)).astype(np.float32)
    np.testing.assert_allclose(exe(B), A @ B, rtol=1e-4, atol=1e-4)
    # an even stencil keeps the fixed shares of the executor's defaults
    assert inspect(lap2d(30), n_cols=n, format="csr").build().params.parts_per_thread == 4
