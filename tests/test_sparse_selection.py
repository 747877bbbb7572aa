"""Format selection: analytic cost model, reasons, and the pluggable selector hook."""
from __future__ import annotations

import numpy as np
import pytest

from schedules.sparse.selection import (
    AnalyticCostModel, Candidate, Choice, _hyb_width, _sell_slots, get_default_selector,
    select_format, set_default_selector, sparse_features,
)
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


def test_scores_are_bytes_and_the_choice_is_their_minimum():
    model = AnalyticCostModel()
    feats = sparse_features(uniform_random(200, 150, 0.05, seed=2))
    scores, _ = model.scores(feats, 16)
    choice = model.choose(feats, 16)
    assert choice.scores[choice.candidate.label] == min(scores.values())
    csr = scores[Candidate("csr")]
    nnz, m = feats["nnz"], feats["rows"]
    # csr traffic: values + indices + indptr + B rows (cache-resident: 1/4) + C written once
    assert csr == pytest.approx(nnz * 8 + (m + 1) * 4 + nnz * 16 * 4 * 0.25 + m * 16 * 4)


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
