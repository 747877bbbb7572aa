"""ISAMIR (ISA Mapper §2.1): the listings, affine access matrices, TE/TIR import, export and round trips."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import te
from tvm.script import tirx as T

from tensorize import (
    Access,
    Affine,
    NonAffineAccessError,
    Program,
    TransformStep,
    UnsupportedKernelError,
    apply_steps,
    evaluate,
    export_groups,
    from_prim_func,
    from_te,
    parse_isamir,
    to_isamir,
    to_prim_func,
)
from tvm_ext.errors import InputError, MappingError
from tvm_ext.kernel_cache import get_or_build

LISTING4 = """forall i,j,k {
tmp[i][j][k] := A[i][k];
tmp[i][j][k] *= B[k][j];
C[i][j] += tmp[i][j][k];
}"""

LISTING5 = """forall i,x,d,ki,ko {
tmp[i][x][d][ki][ko] := A[i][x+d][ki];
tmp[i][x][d][ki][ko] *= B[d][ki][ko];
C[i][x][ko] += tmp[i][x][d][ki][ko];
}"""

RNG = np.random.default_rng(7)


def rand(shape):
    return RNG.standard_normal(shape).astype("float32")


def inputs_of(p: Program) -> dict:
    return {b.name: rand(b.interface_shape) for b in p.buffers if b.role == "input"}


# ----------------------------------------------------------------------------- listings


def test_listing4_and_5_print_exactly_as_in_the_paper():
    p4 = parse_isamir(LISTING4, extents=dict(i=4, j=3, k=2))
    p5 = parse_isamir(LISTING5, extents=dict(i=2, x=5, d=3, ki=4, ko=3))
    assert str(p4) == LISTING4
    assert str(p5) == LISTING5
    assert {b.name: b.role for b in p5.buffers} == {"tmp": "temp", "A": "input", "B": "input", "C": "output"}
    assert p5.params == ("A", "B", "C")
    assert p5.buffer("A").shape == (2, 7, 4)  # x+d spans 0..6


def test_te_matmul_imports_as_listing4_plus_its_init():
    A = te.placeholder((8, 4), name="A")
    B = te.placeholder((4, 6), name="B")
    k = te.reduce_axis((0, 4), name="k")
    C = te.compute((8, 6), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    lines = str(from_te(C)).splitlines()
    assert lines[1] == "C[i][j] := 0;"
    assert "\n".join(lines[:1] + lines[2:]) == LISTING4


@T.prim_func(s_tir=True)
def _conv1d_tir(a: T.handle, b: T.handle, c: T.handle):
    A = T.match_buffer(a, (2, 7, 4), "float32")
    B = T.match_buffer(b, (3, 4, 3), "float32")
    C = T.match_buffer(c, (2, 5, 3), "float32")
    for i, x, d, ki, ko in T.grid(2, 5, 3, 4, 3):
        with T.sblock("C"):
            vi, vx, vd, vki, vko = T.axis.remap("SSRRS", [i, x, d, ki, ko])
            with T.init():
                C[vi, vx, vko] = T.float32(0)
            C[vi, vx, vko] = C[vi, vx, vko] + A[vi, vx + vd, vki] * B[vd, vki, vko]


def test_tir_block_imports_as_listing5():
    p = from_prim_func(_conv1d_tir)
    lines = str(p).splitlines()
    assert lines[1] == "C[i][x][ko] := 0;"
    assert "\n".join(lines[:1] + lines[2:]) == LISTING5
    assert p.axes[0].origin == ("C", "vi")


def test_access_matrix_rows_are_dims_columns_are_axes():
    p = parse_isamir(LISTING5, extents=dict(i=2, x=5, d=3, ki=4, ko=3))
    a = p.statements[0].src
    assert a.matrix(p.axis_names).tolist() == [[1, 0, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 0, 1, 0]]
    strided = parse_isamir("forall i:4, di:3 { C[i] += A[2*i + di]; }")
    assert str(strided).splitlines()[1] == "C[i] += A[2*i + di];"  # Listing 3's spacing


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(st.sampled_from(["i", "x", "d"]), st.integers(-3, 3)), st.integers(10, 20))
def test_affine_text_round_trips(coeffs, const):
    row = Affine.of(coeffs, const)
    text = row.format(["i", "x", "d"])
    p = parse_isamir(f"forall i:2, x:2, d:2 {{ C[i][x][d] += A[{text}]; }}", shapes={"A": (40,)})
    assert p.statements[0].src.rows[0] == row
    assert f"A[{text}]" in str(p)


# ----------------------------------------------------------------------------- semantics


def test_evaluate_matches_numpy_for_listing_programs():
    p4 = parse_isamir(LISTING4, extents=dict(i=4, j=3, k=5))
    a, b = rand((4, 5)), rand((5, 3))
    np.testing.assert_allclose(evaluate(p4, {"A": a, "B": b})["C"], a @ b, rtol=1e-5)
    p5 = parse_isamir(LISTING5, extents=dict(i=2, x=5, d=3, ki=4, ko=3))
    a, b = rand((2, 7, 4)), rand((3, 4, 3))
    ref = sum(np.einsum("ixk,kc->ixc", a[:, d:d + 5, :], b[d]) for d in range(3))
    np.testing.assert_allclose(evaluate(p5, {"A": a, "B": b})["C"], ref, rtol=1e-5)


def _gru(B=4, I=8, H=8):
    x = te.placeholder((B, I), name="x")
    h = te.placeholder((B, H), name="h")
    W = te.placeholder((3, I, H), name="W")
    U = te.placeholder((3, H, H), name="U")
    bias = te.placeholder((3, H), name="bias")
    k = te.reduce_axis((0, I), name="k")
    k2 = te.reduce_axis((0, H), name="k")
    xw = te.compute((3, B, H), lambda g, b, j: te.sum(x[b, k] * W[g, k, j], axis=k), name="xw")
    hu = te.compute((3, B, H), lambda g, b, j: te.sum(h[b, k2] * U[g, k2, j], axis=k2), name="hu")
    r = te.compute((B, H), lambda b, j: tvm.tirx.sigmoid(xw[0, b, j] + hu[0, b, j] + bias[0, j]), name="r")
    z = te.compute((B, H), lambda b, j: tvm.tirx.sigmoid(xw[1, b, j] + hu[1, b, j] + bias[1, j]), name="z")
    n = te.compute((B, H), lambda b, j: tvm.tirx.tanh(xw[2, b, j] + r[b, j] * hu[2, b, j] + bias[2, j]), name="n")
    hn = te.compute((B, H), lambda b, j: (1.0 - z[b, j]) * n[b, j] + z[b, j] * h[b, j], name="hn")
    return [x, h, W, U, bias, hn]


def _gru_numpy(x, h, W, U, bias):
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    xw = np.einsum("bk,gkj->gbj", x, W)
    hu = np.einsum("bk,gkj->gbj", h, U)
    r = sig(xw[0] + hu[0] + bias[0])
    z = sig(xw[1] + hu[1] + bias[1])
    n = np.tanh(xw[2] + r * hu[2] + bias[2])
    return (1 - z) * n + z * h


def test_te_and_tir_imports_agree_and_evaluate_gru():
    args = _gru()
    p_te = to_isamir(args)
    p_tir = to_isamir(te.create_prim_func(args))
    assert {str(s.format()) for s in p_te.statements} == {str(s.format()) for s in p_tir.statements}
    ins = inputs_of(p_te)
    ref = _gru_numpy(*(ins[n] for n in ("x", "h", "W", "U", "bias")))
    np.testing.assert_allclose(evaluate(p_te, ins)["hn"], ref, rtol=1e-4, atol=1e-5)
    fn_stmts = [s for s in p_te.statements if s.fn]
    assert {s.fn for s in fn_stmts} == {"sigmoid", "tanh"}
    assert all(s.src.buffer.startswith("tmp") for s in fn_stmts)  # f(composite) reads its own temp


# ----------------------------------------------------------------------------- export + build


def _build_and_run(sig, func, p: Program, ins: dict) -> dict:
    mod = get_or_build(sig, lambda: func)
    dev = tvm.cpu()
    arrs = []
    for name in p.params:
        b = p.buffer(name)
        arrs.append(tvm.runtime.tensor(ins[name], dev) if name in ins
                    else tvm.runtime.empty(b.interface_shape, b.dtype, dev))
    mod["main"](*arrs)
    return {n: a.numpy() for n, a in zip(p.params, arrs)}


def _separable(Cin=4, cm=2, K=8, H=4, s=2):
    A = te.placeholder((1, s * (H - 1) + 3, s * (H - 1) + 3, Cin), name="A")
    D = te.placeholder((3, 3, Cin, cm), name="D")
    P = te.placeholder((Cin * cm, K), name="P")
    di, dj = te.reduce_axis((0, 3), "di"), te.reduce_axis((0, 3), "dj")
    q, r = te.reduce_axis((0, Cin), "q"), te.reduce_axis((0, cm), "r")
    C = te.compute((1, H, H, K), lambda b, i, j, kk: te.sum(
        A[b, s * i + di, s * j + dj, q] * D[di, dj, q, r] * P[cm * q + r, kk], axis=[di, dj, q, r]), name="C")
    return [A, D, P, C]


@pytest.mark.parametrize("case", ["gru", "separable"])
def test_import_export_build_matches_original(case):
    args = _gru() if case == "gru" else _separable()
    p = to_isamir(args)
    assert len(export_groups(p)) == (6 if case == "gru" else 1)  # the TE blocks come back
    ins = inputs_of(p)
    out_name = args[-1].op.name
    got = _build_and_run(("tensorize-rt-export", case), to_prim_func(p), p, ins)[out_name]
    orig = _build_and_run(("tensorize-rt-te", case), te.create_prim_func(args), p, ins)[out_name]
    np.testing.assert_allclose(got, orig, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(evaluate(p, ins)[out_name], orig, rtol=1e-4, atol=1e-5)


def test_export_keeps_interface_through_layout_transforms():
    p = parse_isamir("""forall i:6, j:8, k:5 { C[i][j] := 0; tmp[i][j][k] := A[i][k];
        tmp[i][j][k] *= B[k][j]; C[i][j] += tmp[i][j][k]; }""")
    steps = [TransformStep("pad", (("sizes", (("i", 8), ("k", 8))),)),
             TransformStep("transpose", (("buffer", "B"), ("perm", (1, 0)))),
             TransformStep("split", (("axis", "j"), ("factor", 4)))]
    q = apply_steps(p, steps)
    assert q.buffer("A").layout[0][0] == "pad" and q.buffer("C").layout  # C padded and reshaped
    ins = {"A": rand((6, 5)), "B": rand((5, 8))}
    got = _build_and_run(("tensorize-rt-layout",), to_prim_func(q), q, ins)["C"]
    np.testing.assert_allclose(got, ins["A"] @ ins["B"], rtol=1e-5)
    np.testing.assert_allclose(evaluate(q, ins)["C"], ins["A"] @ ins["B"], rtol=1e-5)


# ----------------------------------------------------------------------------- bad input


def test_non_affine_access_is_rejected_naming_it():
    A = te.placeholder((16,), name="A")
    B = te.compute((8,), lambda i: A[i // 2 + i * i] * 2.0, name="B")
    with pytest.raises(NonAffineAccessError, match=r"non-affine access A\[.*in block 'B'") as e:
        to_isamir(B)
    assert isinstance(e.value, MappingError) and isinstance(e.value, InputError)
    idx = te.placeholder((8,), "int32", name="idx")
    G = te.compute((8,), lambda i: A[idx[i]], name="G")
    with pytest.raises(NonAffineAccessError, match=r"A\[idx"):
        to_isamir(G)


def test_unsupported_constructs_name_the_block():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: tvm.tirx.if_then_else(i > 2, A[i], 0.0), name="guarded")
    with pytest.raises(UnsupportedKernelError, match="block 'guarded'"):
        to_isamir(B)
    n = tvm.tirx.Var("n", "int32")
    S = te.placeholder((n,), name="S")
    with pytest.raises(UnsupportedKernelError, match="symbolic"):
        to_isamir(te.compute((n,), lambda i: S[i] + 1.0, name="dyn"))
    with pytest.raises(InputError):
        to_isamir(42)


def test_block_selection_skips_an_unsupported_pad_block():
    X = te.placeholder((1, 6, 6, 4), name="X")
    W = te.placeholder((3, 3, 4, 8), name="W")
    Xp = te.compute((1, 8, 8, 4), lambda n, h, w, c: tvm.tirx.if_then_else(
        tvm.tirx.all(h >= 1, h < 7, w >= 1, w < 7), X[n, h - 1, w - 1, c], 0.0), name="pad")
    rh, rw, rc = te.reduce_axis((0, 3), "rh"), te.reduce_axis((0, 3), "rw"), te.reduce_axis((0, 4), "rc")
    Y = te.compute((1, 6, 6, 8), lambda n, h, w, co: te.sum(Xp[n, h + rh, w + rw, rc] * W[rh, rw, rc, co],
                                                            axis=[rh, rw, rc]), name="conv")
    f = te.create_prim_func([X, W, Y])
    with pytest.raises(UnsupportedKernelError, match="block 'pad'"):
        from_prim_func(f)
    p = from_prim_func(f, blocks="conv")
    assert p.buffer("pad").role == "input" and p.buffer("conv").role == "output"
    with pytest.raises(InputError, match="no block named"):
        from_prim_func(f, blocks="nope")


def test_invalid_programs_are_rejected():
    with pytest.raises(InputError, match="outside"):
        parse_isamir("forall i:4 { C[i] := A[i+1]; }", shapes={"A": (4,)})
    with pytest.raises(InputError, match="cannot reduce"):
        parse_isamir("forall i:4, k:3 { C[i] := A[i][k]; }")
    with pytest.raises(InputError, match="expected 'forall"):
        parse_isamir("C[i] += A[i];")
    with pytest.raises(InputError, match="non-affine"):
        parse_isamir("forall i:4, j:4 { C[i] += A[i*j]; }")
    with pytest.raises(InputError, match="missing input"):
        evaluate(parse_isamir("forall i:4 { C[i] := A[i]; }"), {})
