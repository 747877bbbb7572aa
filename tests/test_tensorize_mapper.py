"""Deterministic mapper (ISA Mapper §2.2): all mappings, failure reasons, and kernels TVM's matcher misses.

Every mapping found is also *run*: ``Mapping.simulate`` executes the covered
statements as real instruction calls on tiles gathered through the buffer,
dimension and axis maps, and must reproduce the reference result.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import tvm
from tvm import te

from tensorize import (
    FailureKind,
    ISA,
    LayoutMismatch,
    MissingAxisRole,
    NoMappingError,
    OpMismatch,
    Program,
    find_mappings,
    get_isa,
    make_instruction,
    map_instruction,
    parse_isamir,
    register_isa,
    to_isamir,
)
from tvm_ext.errors import ConfigError, MappingError

from tensorize_helpers import check_mappings, matmul_args, ph, random_inputs, tvm_auto_mappings

LISTING5 = """forall i,x,d,ki,ko {
tmp[i][x][d][ki][ko] := A[i][x+d][ki];
tmp[i][x][d][ki][ko] *= B[d][ki][ko];
C[i][x][ko] += tmp[i][x][d][ki][ko];
}"""

LISTING6 = """forall i,x,d,ki,ko {
transpose(A, (1, 0, 2));
transpose(C, (1, 0, 2));
matmul(A[x+d][:][:], B[d][:][:], C[x][:][:]);
transpose(C, (1, 0, 2));
}"""

X86 = get_isa("x86")
ACCEL = get_isa("accel")
RNG = np.random.default_rng(3)


def inputs_of(p: Program) -> dict:
    return random_inputs(p, RNG)


def assert_sound(mappings, program: Program) -> None:
    """Each mapping, run as instruction calls, equals the reference interpreter."""
    check_mappings(mappings, program, RNG)


def test_matmul_maps_once_with_identity_maps():
    p = to_isamir(matmul_args())
    res = map_instruction(p, X86["matmul_16x16x16"])
    assert len(res.mappings) == 1
    m = res.mappings[0]
    assert m.axis_map == {"i": "i", "j": "j", "k": "k"}
    assert m.buffer_map == {"A": "A", "B": "B", "C": "C", "tmp": "tmp"}
    assert m.statement_map == (1, 2, 3) and m.outer_axes == () and m.calls == 64
    assert m.blocks == ("C",) and m.required_transposes() == {}
    json.dumps(m.describe())
    assert_sound(res.mappings, p)
    assert tvm_auto_mappings(matmul_args(), "C", X86["matmul_16x16x16"])  # TVM finds it too


def test_batch_matmul_on_the_accelerator():
    A, B = ph((4, 32, 32), "A"), ph((4, 32, 32), "B")
    k = te.reduce_axis((0, 32), "k")
    C = te.compute((4, 32, 32), lambda b, i, j: te.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    p = to_isamir([A, B, C])
    (m,) = map_instruction(p, ACCEL["matmul_32x32x32"]).mappings
    assert m.outer_axes == ("b",) and m.calls == 4
    assert_sound([m], p)


def test_square_of_a_matrix_maps_one_buffer_twice_where_tvm_finds_none():
    A = ph((32, 32), "A")
    k = te.reduce_axis((0, 32), "k")
    C = te.compute((32, 32), lambda i, j: te.sum(A[i, k] * A[k, j], axis=k), name="C")
    p = to_isamir([A, C])
    (m,) = map_instruction(p, X86["matmul_16x16x16"]).mappings
    assert m.buffer_map["A"] == m.buffer_map["B"] == "A"
    assert_sound([m], p)
    assert tvm_auto_mappings([A, C], "C", X86["matmul_16x16x16"]) is None


def test_dense_with_bias_maps_matmul_with_transposed_weight_and_bias_add():
    X, W, b = ph((32, 64), "X"), ph((32, 64), "W"), ph((32,), "bias")
    k = te.reduce_axis((0, 64), "k")
    D = te.compute((32, 32), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="D")
    Y = te.compute((32, 32), lambda i, j: D[i, j] + b[j], name="Y")
    p = to_isamir([X, W, b, Y])
    (mm,) = map_instruction(p, X86["matmul_16x16x16"]).mappings
    assert mm.required_transposes() == {"W": (1, 0)} and mm.dim_map["B"] == (1, 0)
    assert "transpose(W, (1, 0));" in mm.listing()
    (add,) = map_instruction(p, X86["add_16"]).mappings
    assert add.statement_map == (4, 5) and add.axis_map == {"i": "j1"} and add.outer_axes == ("i1",)
    (bias,) = map_instruction(p, ACCEL["bias_add_32x32"]).mappings
    assert bias.calls == 1
    assert_sound([mm, add, bias], p)


def test_gru_gate_matmuls_are_found():
    B, I, H = 16, 32, 32
    x, h = ph((B, I), "x"), ph((B, H), "h")
    W, U, bias = ph((3, I, H), "W"), ph((3, H, H), "U"), ph((3, H), "bias")
    k, k2 = te.reduce_axis((0, I), "k"), te.reduce_axis((0, H), "k")
    xw = te.compute((3, B, H), lambda g, b, j: te.sum(x[b, k] * W[g, k, j], axis=k), name="xw")
    hu = te.compute((3, B, H), lambda g, b, j: te.sum(h[b, k2] * U[g, k2, j], axis=k2), name="hu")
    r = te.compute((B, H), lambda b, j: tvm.tirx.sigmoid(xw[0, b, j] + hu[0, b, j] + bias[0, j]), name="r")
    z = te.compute((B, H), lambda b, j: tvm.tirx.sigmoid(xw[1, b, j] + hu[1, b, j] + bias[1, j]), name="z")
    n = te.compute((B, H), lambda b, j: tvm.tirx.tanh(xw[2, b, j] + r[b, j] * hu[2, b, j] + bias[2, j]),
                   name="n")
    hn = te.compute((B, H), lambda b, j: (1.0 - z[b, j]) * n[b, j] + z[b, j] * h[b, j], name="hn")
    p = to_isamir([x, h, W, U, bias, hn])
    mms = map_instruction(p, X86["matmul_16x16x16"]).mappings
    assert sorted(m.buffer_map["C"] for m in mms) == ["hu", "xw"]
    assert all(len(m.outer_axes) == 1 and m.calls == 3 * 1 * 2 * 2 for m in mms)  # gate axis outer
    (rsub,) = [m for m in map_instruction(p, X86["rsub_16"]).mappings if m.axis_map["i"].startswith("j")]
    assert rsub.constants == {"s": 1.0}  # `hn := 1; hn -= z` binds the needle scalar to the constant
    sig = map_instruction(p, X86["sigmoid_16"]).mappings
    assert {m.buffer_map["C"] for m in sig} == {"r", "z"}
    assert_sound(mms + [rsub] + sig[:1], p)


# ----------------------------------------------------------------------------- convolutions


def test_conv1d_listing5_maps_to_listing6():
    p = parse_isamir(LISTING5, extents=dict(i=16, x=32, d=3, ki=16, ko=16))
    res = map_instruction(p, X86["matmul_16x16x16"])
    maps = {tuple(sorted(m.axis_map.items())): m for m in res.mappings}
    assert set(maps) == {(("i", "i"), ("j", "ko"), ("k", "ki")), (("i", "x"), ("j", "ko"), ("k", "ki"))}
    listing6 = maps[(("i", "i"), ("j", "ko"), ("k", "ki"))]
    assert listing6.listing() == LISTING6
    assert listing6.outer_axes == ("x", "d") and listing6.calls == 32 * 3
    assert any(f.kind is FailureKind.EXTENT and "d=3" in f.message for f in res.failures)  # k -> d does not fit
    small = parse_isamir(LISTING5, extents=dict(i=16, x=16, d=3, ki=16, ko=16))
    assert_sound(map_instruction(small, X86["matmul_16x16x16"]).mappings, small)


def conv2d_args(layout: str, stride: int, N=1, CI=16, CO=16, H=16, K=3):
    S = stride * (H - 1) + K
    rc, rh, rw = te.reduce_axis((0, CI), "rc"), te.reduce_axis((0, K), "rh"), te.reduce_axis((0, K), "rw")
    if layout == "NCHW":
        X, W = ph((N, CI, S, S), "X"), ph((CO, CI, K, K), "W")
        Y = te.compute((N, CO, H, H), lambda n, co, h, w: te.sum(
            X[n, rc, stride * h + rh, stride * w + rw] * W[co, rc, rh, rw], axis=[rc, rh, rw]), name="Y")
    else:
        X, W = ph((N, S, S, CI), "X"), ph((K, K, CI, CO), "W")
        Y = te.compute((N, H, H, CO), lambda n, h, w, co: te.sum(
            X[n, stride * h + rh, stride * w + rw, rc] * W[rh, rw, rc, co], axis=[rh, rw, rc]), name="Y")
    return [X, W, Y]


@pytest.mark.parametrize("layout,stride", [("NCHW", 1), ("NCHW", 2), ("NHWC", 2)])
def test_conv2d_maps_with_strided_tiles(layout, stride):
    p = to_isamir(conv2d_args(layout, stride))
    ms = map_instruction(p, X86["matmul_16x16x16"]).mappings
    assert {(m.axis_map["i"], m.axis_map["j"], m.axis_map["k"]) for m in ms} == {("h", "co", "rc"),
                                                                               ("w", "co", "rc")}
    for m in ms:
        hay_dim = m.dim_map["A"][0]  # the needle's row dim of A lands on an image dim of X ...
        assert m.dim_strides["A"][0] == stride  # ... read with the convolution's stride
        assert hay_dim in ((2, 3) if layout == "NCHW" else (1, 2))
    assert_sound(ms, p)
    # TVM's matcher only offers one fused (im2col-like) index map here
    assert len(tvm_auto_mappings(conv2d_args(layout, stride), "Y", X86["matmul_16x16x16"])) == 1


def depthwise_args(C=4, H=16, K=3):
    X, W = ph((1, C, H + K - 1, H + K - 1), "X"), ph((C, K, K), "W")
    rh, rw = te.reduce_axis((0, K), "rh"), te.reduce_axis((0, K), "rw")
    return [X, W, te.compute((1, C, H, H), lambda n, c, h, w: te.sum(
        X[n, c, h + rh, w + rw] * W[c, rh, rw], axis=[rh, rw]), name="Y")]


def test_depthwise_conv_maps_to_the_conv1d_instruction_where_tvm_finds_none():
    p = to_isamir(depthwise_args())
    ms = map_instruction(p, X86["conv1d_16xk"]).mappings
    assert {(m.axis_map["x"], m.axis_map["d"]) for m in ms} == {("w", "rw"), ("h", "rh")}
    assert all(m.tile["d"] == 3 for m in ms)  # flexible kernel width takes the haystack's
    assert_sound(ms, p)
    assert tvm_auto_mappings(depthwise_args(), "Y", X86["conv1d_16xk"], {"d": 3}) is None
    # no matmul mapping without transformations: no axis plays the matmul's j
    res = map_instruction(p, X86["matmul_16x16x16"])
    assert not res.mappings
    role = [f for f in res.failures if isinstance(f.detail, MissingAxisRole) and f.detail.needle_axis == "j"]
    assert role and all(f.kind is FailureKind.ROLE for f in role) and "but not X" in role[0].message
    assert tvm_auto_mappings(depthwise_args(), "Y", X86["matmul_16x16x16"]) is None


# ----------------------------------------------------------------------------- reasons and errors


def test_separable_conv_fails_with_the_papers_reason():
    p = parse_isamir("""forall b,i,j,k,di,dj,q,r {
        C[b][i][j][k] := 0;
        tmp[b][i][j][k][di][dj][q][r] := A[b][2*i + di][2*j + dj][q];
        tmp[b][i][j][k][di][dj][q][r] *= D[di][dj][q][r];
        tmp[b][i][j][k][di][dj][q][r] *= P[2*q + r][k];
        C[b][i][j][k] += tmp[b][i][j][k][di][dj][q][r]; }""",
                     extents=dict(b=1, i=16, j=16, k=16, di=3, dj=3, q=16, r=2))
    res = map_instruction(p, X86["matmul_16x16x16"])
    assert not res.mappings
    op = [f for f in res.failures if f.kind is FailureKind.OP and f.needle_stmt == 2 and f.hay_stmt == 3]
    assert op and op[0].detail == OpMismatch("+=", "*=")
    assert op and "needle `C[i][j] += tmp[i][j][k]` is '+='" in op[0].message and "is '*='" in op[0].message
    assert res.deepest(1)[0].kind is FailureKind.DATAFLOW  # skipping the extra factor breaks the temp's dataflow


def test_strict_layout_names_the_transpose_needed():
    X, W = ph((32, 32), "X"), ph((32, 32), "W")
    k = te.reduce_axis((0, 32), "k")
    D = te.compute((32, 32), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="D")
    res = map_instruction(to_isamir([X, W, D]), X86["matmul_16x16x16"], strict_layout=True)
    assert not res.mappings
    (lay,) = [f for f in res.failures if f.kind is FailureKind.LAYOUT]
    assert lay.detail == LayoutMismatch("W", (1, 0)) and "transpose(W, (1, 0))" in lay.message


def test_uncovered_kernel_raises_mapping_error_with_reasons():
    A = ph((64,), "A")
    L = te.compute((64,), lambda i: tvm.tirx.log(A[i]), name="L")
    with pytest.raises(NoMappingError, match="no mapping") as e:
        find_mappings(L, "x86")
    assert isinstance(e.value, MappingError) and e.value.reasons
    assert any(r.kind is FailureKind.OP and "log" in r.message for r in e.value.reasons)
    with pytest.raises(NoMappingError):
        find_mappings(matmul_args(), "x86", kinds=["conv1d"])
    with pytest.raises(ConfigError, match="unknown ISA"):
        find_mappings(L, "riscv")
    with pytest.raises(ConfigError, match="no instruction"):
        find_mappings(L, "x86", instructions=["vfmadd_bogus"])


def test_isa_registry_takes_new_instructions_and_implementations():
    isa = ISA("unit-test-isa")
    ins = isa.add(make_instruction("gemv_8xk", "forall i,k { tmp[i][k] := A[i][k]; tmp[i][k] *= x[k]; "
                                   "y[i] += tmp[i][k]; }", kind="gemv", sizes={"i": 8, "k": None}))
    isa.implement("gemv_8xk", "c-impl", backend="c")
    assert isa.implementation("gemv_8xk", "c") == "c-impl" and isa.implementation("gemv_8xk") is None
    assert ins.targets == ("unit-test-isa",)
    register_isa(isa, replace_existing=True)
    A, x = ph((32, 24), "A"), ph((24,), "x")
    k = te.reduce_axis((0, 24), "k")
    y = te.compute((32,), lambda i: te.sum(A[i, k] * x[k], axis=k), name="y")
    (m,) = find_mappings(y, "unit-test-isa")
    assert m.isa == "unit-test-isa" and m.tile == {"i": 8, "k": 24} and m.calls == 4
    with pytest.raises(ConfigError, match="already exists"):
        isa.add(ins)
    with pytest.raises(ConfigError, match="writes no output"):
        make_instruction("bad", "forall i:4 { tmp[i] := A[i]; }")
