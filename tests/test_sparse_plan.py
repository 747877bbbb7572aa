"""inspect(A, N) -> Plan -> build() -> exe(B): the public inspector/executor path."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
import tvm

from schedules.sparse import Choice, Candidate, inspect, set_default_selector
from tvm_ext.cli.main import main
from tvm_ext.errors import ConfigError, InputError, ShapeError
from tvm_ext.workloads import block_fem, lap2d, load_matrix

RNG = np.random.default_rng(7)


def _b(k, n, dtype="float64"):  # the matrices below are float64, and inspect keeps that
    return RNG.standard_normal((k, n)).astype(dtype)


def test_plan_chooses_and_explains():
    A = block_fem(40, 3, 3, seed=2)
    plan = inspect(A, n_cols=16)
    assert plan.format_name == "bcsr" and plan.args == {"R": 3, "C": 3}
    text = plan.explain()
    assert "bcsr(R=3,C=3)" in text and "modelled bytes" in text and "inspector" in text
    B = _b(A.shape[1], 16)
    np.testing.assert_allclose(plan.build()(B), A @ B, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("fmt, args", [("csr", {}), ("ell", {}), ("dia", {}), ("sell", {"C": 8}),
                                       ("bcsr", {"R": 2, "C": 2}), ("hyb", {}), ("coo", {})])
def test_forced_formats_agree_with_scipy(fmt, args):
    A = lap2d(9)
    plan = inspect(A, n_cols=5, format=fmt, **args)
    assert plan.format_name == fmt and plan.choice.selector == "user"
    B = _b(A.shape[1], 5)
    np.testing.assert_allclose(plan.build()(B), A @ B, rtol=1e-5, atol=1e-5)


def test_spmv_plan_takes_vectors_and_tvm_tensors():
    A = load_matrix("LFAT5")
    plan = inspect(A, n_cols=1)
    exe = plan.build()
    x = RNG.standard_normal(14)
    np.testing.assert_allclose(exe(x), A @ x, rtol=1e-5)
    y = exe(tvm.runtime.tensor(x))
    assert isinstance(y, tvm.runtime.Tensor)
    np.testing.assert_allclose(y.numpy(), A @ x, rtol=1e-5)


def test_alpha_beta_through_the_plan():
    A = load_matrix("cora")
    exe = inspect(A, n_cols=4).build()
    B, C = _b(A.shape[1], 4), _b(A.shape[0], 4)
    np.testing.assert_allclose(exe(B, C, alpha=2.0, beta=-0.5), 2 * (A @ B) - 0.5 * C, rtol=1e-4, atol=1e-4)


def test_unsorted_duplicate_and_int64_indices_are_canonicalised():
    rows = np.array([2, 0, 0, 1, 2], dtype=np.int64)
    cols = np.array([1, 2, 2, 0, 0], dtype=np.int64)
    vals = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    A = sp.coo_array((vals, (rows, cols)), shape=(3, 3))
    plan = inspect(A, n_cols=2, format="csr")
    B = _b(3, 2)
    np.testing.assert_allclose(plan.build()(B), A.toarray() @ B, rtol=1e-5)
    assert plan.matrix.nnz == 4


def test_empty_rows_and_empty_matrix():
    A = sp.csr_array(np.array([[0.0, 0.0], [1.0, 2.0], [0.0, 0.0]]))
    B = _b(2, 3)
    np.testing.assert_allclose(inspect(A, 3).build()(B), A @ B, rtol=1e-6)
    Z = sp.csr_array((4, 3))
    out = inspect(Z, 2).build()(_b(3, 2))
    assert out.shape == (4, 2) and not out.any()


def test_bad_input_gives_clear_errors():
    with pytest.raises(InputError, match="non-finite"):
        inspect(sp.csr_array(np.array([[np.nan, 1.0]])), 1)
    with pytest.raises(InputError, match="n_cols"):
        inspect(lap2d(3), 0)
    with pytest.raises(ConfigError, match="unknown format"):
        inspect(lap2d(3), 2, format="jagged")
    exe = inspect(lap2d(3), 2).build()
    with pytest.raises(InputError, match="dtype"):
        exe(np.ones((9, 2), dtype="float32"))
    with pytest.raises(ShapeError, match="rows"):
        exe(np.ones((8, 2), dtype="float64"))
    B = np.ones((9, 2))
    B[4, 1] = np.nan  # NaN propagates into the rows that read it, as in scipy
    np.testing.assert_array_equal(np.isnan(exe(B)), np.isnan(lap2d(3) @ B))


def test_a_learned_selector_plugs_in():
    class AlwaysELL:
        name = "always-ell"

        def choose(self, features, n_cols):
            return Choice(Candidate.of("ell"), {}, {}, "test selector", self.name)

    try:
        set_default_selector(AlwaysELL())
        plan = inspect(lap2d(5), 3)
    finally:
        set_default_selector(None)
    assert plan.format_name == "ell" and plan.choice.selector == "always-ell"


def test_cli_spmm_json(capsys):
    assert main(["spmm", "LFAT5", "--n", "4", "--repeat", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("format", "gflops", "scipy_gflops", "torch_gflops", "max_rel_err"):
        assert key in data
    assert data["max_rel_err"] < 1e-5 and data["gflops"] > 0


def test_cli_spmm_text_names_the_peers(capsys):
    assert main(["spmm", "LFAT5", "--n", "1", "--repeat", "2", "--format", "csr"]) == 0
    out = capsys.readouterr().out
    assert "scipy.sparse" in out and "csr" in out


def test_explain_puts_whole_formats_before_block_shapes_in_the_exclusions():
    from schedules.sparse import inspect
    from schedules.sparse.selection import AnalyticCostModel
    from tvm_ext.workloads import lap3d

    plan = inspect(lap3d(12, points=27), 8, selector=AnalyticCostModel(), measure=False)
    text = plan.explain()
    lines = [ln for ln in text.splitlines() if ln.startswith("  excluded")]
    assert lines[0].startswith("  excluded dia:") and "occupied diagonals" in lines[0]
    assert any(ln.startswith("  excluded sell") and "never lighter than CSR" in ln for ln in lines)
    assert len(lines) <= 6 and ("more excluded" in text) == (len(plan.choice.excluded) > 6)


def test_a_measured_plan_builds_the_kept_candidate_on_the_whole_matrix():
    # the candidates are timed on a block; only the kept one is built on the whole matrix
    from schedules.sparse.inspectors import INSPECTORS

    A = block_fem(400, 3, 3, seed=3)
    plan = inspect(A, n_cols=8, measure=True, dtype="float64")
    assert plan.format.shape == A.shape and plan.inspect_seconds > 0
    if plan.choice.measurement is not None:
        assert plan.label == plan.choice.measurement.chosen
    want = INSPECTORS[plan.format_name](A, **plan.args)
    for name, arr in vars(want).items():
        if isinstance(arr, np.ndarray):
            np.testing.assert_array_equal(getattr(plan.format, name), arr)
    B = np.random.default_rng(0).standard_normal((A.shape[1], 8))
    np.testing.assert_allclose(plan.build()(B), A @ B, rtol=1e-10)


class _DiaEverywhere:
    """A selector that always names DIA, which a graph's scattered diagonals refuse."""

    name = "dia-everywhere"

    def choose(self, features, n_cols):
        return Choice(Candidate("dia"), {"dia": 1.0, "csr": 2.0}, {}, "always DIA", self.name,
                      scored=((Candidate("dia"), 1.0), (Candidate("csr"), 2.0)))


def test_a_measured_plan_drops_a_model_choice_that_cannot_be_built():
    from tvm_ext.workloads import rmat

    A = sp.csr_array(rmat(9), dtype=np.float64)  # DIA's fill limit refuses it
    plan = inspect(A, n_cols=4, measure=True, selector=_DiaEverywhere())
    assert plan.format_name == "csr" and "dia" in plan.choice.measurement.failed
    B = np.random.default_rng(1).standard_normal((A.shape[1], 4))
    np.testing.assert_allclose(plan.build()(B), A @ B, rtol=1e-10)


def test_a_timed_choice_the_whole_matrix_refuses_gives_way_to_the_next_fastest():
    from schedules.sparse.choice import Measurement
    from schedules.sparse.plan import _build_kept
    from tvm_ext.workloads import canonical_csr, rmat

    A = canonical_csr(rmat(9))  # DIA's fill limit refuses the whole matrix
    scored = ((Candidate("dia"), 1.0), (Candidate("ell"), 1.5), (Candidate("csr"), 2.0))
    meas = Measurement({"dia": 1e-4, "csr": 2e-4, "ell": 3e-4}, 4, 0, 10, 100, 0.15, "dia")
    choice = Choice(Candidate("dia"), {c.label: v for c, v in scored}, {}, "always DIA", "test",
                    measurement=meas, scored=scored)
    kept, fmt = _build_kept(A, choice)
    assert kept.candidate == Candidate("csr") and fmt.name == "csr"
    assert "could not be built on the whole matrix" in kept.reason and "dia" in kept.reason
    with pytest.raises(InputError):  # an untimed choice has no alternative: the inspector's error
        _build_kept(A, Choice(Candidate("dia"), {}, {}, "always DIA", "test"))


def test_explain_shows_the_runs_construction_is_priced_over():
    A = block_fem(400, 3, 3, seed=3)
    plan = inspect(A, n_cols=8, measure=True, expected_runs=250)
    assert plan.choice.measurement is not None and plan.choice.measurement.expected_runs == 250
    assert "priced over 250 expected runs" in plan.explain()
    meas = plan.choice.measurement
    for label in meas.seconds:  # each timed format's construction, in runs of the model's choice
        assert f"{label} {meas.build_seconds[label] / meas.seconds[meas.model_choice]:.1f}" in plan.explain()
    assert "not priced" in inspect(A, n_cols=8, measure=True, expected_runs=None).explain()
    for bad in (0, -3, float("nan"), "100", True):
        with pytest.raises(InputError, match="expected_runs"):
            inspect(A, n_cols=8, expected_runs=bad)


def test_power_law_rows_claim_their_parts_at_run_time():
    from tvm_ext.workloads import rmat

    A = sp.csr_array(rmat(13), dtype=np.float64)  # rows spread several times their mean; parallel
    plan = inspect(A, n_cols=1, format="csr")
    exe = plan.build()
    assert exe.params.dynamic and "dynamic=True" in plan.explain()
    x = RNG.standard_normal(A.shape[1])
    np.testing.assert_allclose(exe(x), A @ x, rtol=1e-10)
    assert inspect(A, n_cols=4, format="csr").build().params.dynamic  # SpMM claims its parts too
    assert not inspect(lap2d(30), n_cols=1, format="csr").build().params.dynamic
