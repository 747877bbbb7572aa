"""The fused SpMM + row consumer kernel built in TIR from the recipes' row-tile nest.

Every consumer the fusion package fuses into an SpMM (a reduction ``xᵀS`` that
reads the SpMM's own ``B``, a reduction ``Sᵀy``, a row map with an addend and a
sign, a row map of an SpMM whose product is not stored: GCN's ``Z·W``, and two
at once) is run on CSR and BCSR matrices of random shapes with empty rows, and
checked against numpy and against the TVMScript-text kernel it replaced
(``tests/sparse_oracles``).  Kernel sizes are symbolic in the rows and ``N``, so
each (consumer, format) compiles once.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules.fusion.einsum_dag import EinsumDAG
from schedules.fusion.row_forms import row_form
from schedules.fusion.spmm_consumer import spmm_consumer
from schedules.sparse.executors import BCSRParams, CSRParams, kernels_for
from schedules.sparse.inspectors import to_bcsr, to_csr, to_ell
from schedules.sparse.recipes.consumer import fused_row_tile_primfunc
from schedules.sparse.recipes.library import csr_recipe
from tests.sparse_oracles.fused_spmm_source import fused_spmm_primfunc
from tests.sparse_oracles.spmm_consumer_text import spmm_consumer as text_consumer
from tvm_ext.errors import ConfigError, ScheduleError

N, N2, O = 11, 6, 5       # columns of P (and S), of Y, of W: whole vectors, halves and a masked rest
LANES, UNROLL = 4, 2
DTYPE = "float64"

#: consumer case -> (consumer ops, whether S is stored)
CASES = {
    "PtS": (("D",), True),          # block CG's Δ = PᵀS: the other operand is the SpMM's B
    "StY": (("E",), True),          # Sᵀy with y a stored tensor
    "Q-SW": (("X",), True),         # row map with addend and sign -1
    "gcn": (("G",), False),         # GCN's X1 = Z·W: Z never stored
    "PtS+SW": (("D", "G"), True),   # a reduction and a row map on the same tiles
}


def _dag(m: int = 64) -> EinsumDAG:
    dag = EinsumDAG("fused_spmm_test")
    dag.add_tensor("A", ("m", "k"), (m, m), nnz=m, fmt="csr")
    dag.add_tensor("P", ("m", "n"), (m, N))
    dag.add_tensor("Y", ("m", "y"), (m, N2))
    dag.add_tensor("W", ("n", "o"), (N, O))
    dag.add_tensor("Q", ("m", "o"), (m, O))
    dag.add_op("S", "mk,kn->mn", ["A", "P"])
    dag.add_op("D", "ma,mb->ab", ["P", "S"])
    dag.add_op("E", "ma,mb->ab", ["S", "Y"])
    dag.add_op("X", "mj,jo->mo", ["S", "W"], addend="Q", sign=-1)
    dag.add_op("G", "mj,jo->mo", ["S", "W"])
    return dag


DAG = _dag()
FORMS = {o: row_form(DAG, DAG.op(o), "m") for o in ("S", "D", "E", "X", "G")}
STORAGE = {t: t for t in DAG.tensors}


def _consumer(case: str, make):
    ops, stores_s = CASES[case]
    stored = set(ops) | ({"S"} if stores_s else set())
    return make(FORMS["S"], [FORMS[o] for o in ops], STORAGE, stored, DAG, DTYPE, LANES)


_MODULES: dict = {}


def _module(case: str, fmt, text: bool):
    """The compiled fused kernel (TIR or the text oracle) of ``case`` for ``fmt``'s format, and its spec."""
    kernels = kernels_for(fmt)
    params = kernels.params_cls(lanes=LANES, unroll=UNROLL, parallel=True)
    consumer, spec = _consumer(case, text_consumer if text else spmm_consumer)
    key = (case, fmt.name, getattr(fmt, "R", 1), getattr(fmt, "C", 1), text)
    if key not in _MODULES:
        f = fused_spmm_primfunc(fmt, params, consumer) if text else kernels.fused_primfunc(fmt, params, consumer)
        _MODULES[key] = tvm.compile(tvm.IRModule({"main": f}), target="llvm")
    return _MODULES[key], params, consumer, list(spec)


def _run(case: str, fmt, env: dict, text: bool) -> dict:
    """Run the fused kernel on copies of ``env``; the tensors it wrote."""
    mod, params, consumer, spec = _module(case, fmt, text)
    kernels = kernels_for(fmt)
    arrays = kernels.arrays(fmt, params, "spmm", False, 2)
    out = {t: v.copy() for t, v in env.items()}
    args = [tvm.runtime.tensor(np.ascontiguousarray(a)) for a in arrays] + [tvm.runtime.tensor(out["P"])]
    views = {}
    if consumer.writes_c:
        views["S"] = tvm.runtime.tensor(out["S"])
        args += [views["S"], views["S"]]
    for kind, what in spec:
        if kind == "partial":
            args.append(tvm.runtime.tensor(np.zeros((arrays[-1].shape[0],) + tuple(what), DTYPE)))
        else:
            views[what] = tvm.runtime.tensor(out[what])
            args.append(views[what])
    mod["main"](*args, 1.0, 0.0)
    ops, stores_s = CASES[case]
    return {t: views[t].numpy() for t in ops + (("S",) if stores_s else ())}


def _env(A, rng) -> dict:
    m = A.shape[0]
    shapes = {"P": (m, N), "Y": (m, N2), "W": (N, O), "Q": (m, O), "S": (m, N), "D": (N, N), "E": (N, N2),
              "X": (m, O), "G": (m, O)}
    return {t: rng.standard_normal(s) for t, s in shapes.items()}


def _reference(A, env: dict) -> dict:
    S = A @ env["P"]
    return {"S": S, "D": env["P"].T @ S, "E": S.T @ env["Y"], "X": env["Q"] - S @ env["W"], "G": S @ env["W"]}


@st.composite
def _matrices(draw):
    m = draw(st.integers(1, 40))
    density = draw(st.sampled_from([0.0, 0.05, 0.2, 0.6]))
    seed = draw(st.integers(0, 2**16))
    A = sp.random(m, m, density, format="csr", random_state=seed, dtype=np.float64).toarray()
    empty = draw(st.lists(st.integers(0, m - 1), max_size=m // 2))
    A[empty, :] = 0.0                       # whole empty rows (and, in BCSR, empty block rows)
    return sp.csr_array(A), seed


@pytest.mark.parametrize("fmt_name", ["csr", "bcsr"])
@pytest.mark.parametrize("case", list(CASES))
@settings(max_examples=6, deadline=None)
@given(drawn=_matrices())
def test_fused_kernel_matches_numpy_and_the_text_kernel(case, fmt_name, drawn):
    A, seed = drawn
    fmt = to_csr(A) if fmt_name == "csr" else to_bcsr(A, 2, 3)
    env = _env(A, np.random.default_rng(seed))
    got, oracle = _run(case, fmt, env, text=False), _run(case, fmt, env, text=True)
    ref = _reference(A, env)
    assert set(got) == set(oracle) and ("S" in got) == CASES[case][1]
    for t, value in got.items():
        np.testing.assert_allclose(value, ref[t], rtol=1e-10, atol=1e-10 * (1 + np.abs(ref[t]).max()), err_msg=t)
        np.testing.assert_allclose(value, oracle[t], rtol=1e-12, atol=1e-12 * (1 + np.abs(ref[t]).max()),
                                   err_msg=t)


def test_the_fused_kernel_is_built_in_tir_with_the_consumers_parameters():
    consumer, spec = _consumer("PtS+SW", spmm_consumer)
    f = kernels_for(to_csr(sp.eye(4, format="csr"))).fused_primfunc(
        to_csr(sp.eye(4, format="csr")), CSRParams(lanes=LANES, unroll=UNROLL, parallel=True), consumer)
    names = [p.name for p in f.params]
    assert names[:4] == ["offset", "explicit_k", "a_data", "part"] and names[-2:] == ["alpha", "beta"]
    assert spec == [("partial", (N, N)), ("tensor", "D"), ("tensor", "W"), ("tensor", "G")]
    assert names[4:-2] == ["B", "C_in", "C_out", "w_D", "g_D", "g_W", "g_G"]
    gcn, _ = _consumer("gcn", spmm_consumer)
    assert not gcn.writes_c and gcn.key != consumer.key


def test_the_consumer_needs_a_parallel_row_tile_spmm():
    consumer, _ = _consumer("PtS", spmm_consumer)
    nest = csr_recipe().nest(DTYPE)
    with pytest.raises(ConfigError, match="parallel"):
        fused_row_tile_primfunc(nest, CSRParams(lanes=4, unroll=1, parallel=False), consumer)
    with pytest.raises(ConfigError, match="spmm"):
        fused_row_tile_primfunc(csr_recipe().nest(DTYPE, "spmv"), CSRParams(lanes=4, unroll=1, parallel=True),
                                consumer)
    ell = to_ell(sp.eye(4, format="csr"))
    with pytest.raises(ConfigError, match="row-tile"):
        kernels_for(ell).fused_primfunc(ell, BCSRParams(), consumer)


def test_ops_that_cannot_consume_the_tile_are_refused():
    dag = _dag()
    dag.add_op("F", "ma,mb->ab", ["P", "Y"])          # a reduction that does not read S
    with pytest.raises(ScheduleError, match="does not read"):
        spmm_consumer(FORMS["S"], [row_form(dag, dag.op("F"), "m")], STORAGE | {"F": "F"}, {"S", "F"}, dag,
                      DTYPE, LANES)
    with pytest.raises(ScheduleError, match="must read"):
        spmm_consumer(FORMS["S"], [FORMS["X"]], STORAGE, {"S"}, DAG, DTYPE, LANES)   # X not stored
