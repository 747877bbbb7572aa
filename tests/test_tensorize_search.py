"""Transformations + feedback-driven search (ISA Mapper §2.3) and instruction selection (§2.4)."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import te

from tensorize import (
    CallCountModel,
    CycleCostModel,
    OpMismatch,
    Program,
    Transform,
    TransformError,
    TransformStep,
    apply_steps,
    evaluate,
    find_mappings,
    get_isa,
    get_transform,
    map_instruction,
    parse_isamir,
    rank_selections,
    register_transform,
    search_mappings,
    select_instructions,
    to_isamir,
    to_prim_func,
)
from tvm_ext.errors import ConfigError
from tvm_ext.kernel_cache import get_or_build

from tensorize_helpers import check_mappings, matmul_args, ph, random_inputs, tvm_auto_mappings

X86 = get_isa("x86")
ACCEL = get_isa("accel")
RNG = np.random.default_rng(11)


def inputs_of(p: Program) -> dict:
    return random_inputs(p, RNG)


def assert_sound(mappings, program: Program) -> None:
    """Transformed programs keep the kernel's meaning, and each mapping run as instruction calls agrees."""
    check_mappings(mappings, program, RNG, transformed=True)


# ----------------------------------------------------------------------------- all mappings


def test_matmul_has_exactly_two_mappings_plain_and_commuted():
    p = to_isamir(matmul_args(64, 64, 64))
    assert len(map_instruction(p, X86["matmul_16x16x16"]).mappings) == 1
    res = search_mappings(p, X86["matmul_16x16x16"])
    axis_maps = sorted((tuple(sorted(m.axis_map.items())), tuple(map(str, m.transforms))) for m in res.mappings)
    assert axis_maps == [
        ((("i", "i"), ("j", "j"), ("k", "k")), ()),
        ((("i", "j"), ("j", "i"), ("k", "k")), ("commutativity(stmt=1, swap=1)",)),  # C^T = B^T A^T
    ]
    assert_sound(res.mappings, to_isamir(matmul_args(32, 32, 16)) and p)


def test_symmetric_instructions_do_not_duplicate_commuted_mappings():
    p = parse_isamir("forall n:64 { y[n] := a[n]; y[n] += b[n]; }")
    res = search_mappings(p, X86["add_16"])
    assert len(res.mappings) == 1 and res.explored == 1  # a+b vs b+a is the same call


# ----------------------------------------------------------------------------- factorization


def separable_args(Cin=16, cm=2, K=16, H=16, s=1):
    A = ph((1, s * (H - 1) + 3, s * (H - 1) + 3, Cin), "A")
    D, P = ph((3, 3, Cin, cm), "D"), ph((Cin * cm, K), "P")
    di, dj = te.reduce_axis((0, 3), "di"), te.reduce_axis((0, 3), "dj")
    q, r = te.reduce_axis((0, Cin), "q"), te.reduce_axis((0, cm), "r")
    return [A, D, P, te.compute((1, H, H, K), lambda b, i, j, kk: te.sum(
        A[b, s * i + di, s * j + dj, q] * D[di, dj, q, r] * P[cm * q + r, kk], axis=[di, dj, q, r]), name="C")]


def test_separable_depthwise_conv_needs_factorization():
    args = separable_args()
    p = to_isamir(args)
    plain = map_instruction(p, X86["matmul_16x16x16"])
    assert not plain.mappings
    assert any(f.detail == OpMismatch("+=", "*=") and "is '+='" in f.message for f in plain.failures)
    res = search_mappings(p, X86["matmul_16x16x16"], max_depth=1)
    routes = {m.transforms[0].transform for m in res.mappings}
    # factorization; associativity gives a second, costlier route (weights D*P combined first)
    assert routes == {"factorization", "associativity"}
    best = min(res.mappings, key=lambda m: m.calls)
    assert best.transforms[0].transform == "factorization"
    # the P-factor route: C += T[b,i,j,q,r] * P[2q+r, kk], a matmul over q (stride 2 on P), r outer
    factor_p = TransformStep("factorization", (("stmt", 4), ("operand", 2)))
    viaP = [m for m in res.mappings if m.transforms[0] == factor_p]
    assert viaP and all(m.axis_map["k"] == "q" and m.dim_strides["B"][0] == 2 for m in viaP)
    assert tvm_auto_mappings(args, "C", X86["matmul_16x16x16"]) is None
    small = to_isamir(separable_args(Cin=16, cm=2, K=16, H=4))
    assert_sound(search_mappings(small, X86["matmul_16x16x16"], max_depth=1).mappings[:4], small)
    # after factorization the depthwise half maps onto the 1-D convolution unit (paper: "dot product")
    fac = viaP[0].program
    conv = map_instruction(fac, X86["conv1d_16xk"]).mappings
    assert conv and {m.statement_map for m in conv} == {(2, 3, 4)}  # tmp1 := A; tmp1 *= D; tmp2 += tmp1


def test_scaled_matmul_factors_the_scalar_out():
    s, A, B = ph((), "s"), ph((32, 32), "A"), ph((32, 32), "B")
    k = te.reduce_axis((0, 32), "k")
    C = te.compute((32, 32), lambda i, j: te.sum(s[()] * A[i, k] * B[k, j], axis=k), name="C")
    ms = find_mappings([s, A, B, C], "x86", instructions=["matmul_16x16x16", "scale_16"], max_depth=1)
    mm = [m for m in ms if m.instruction.name == "matmul_16x16x16"]
    assert [str(t) for t in mm[0].transforms] == ["factorization(stmt=4, operand=0)"]
    assert tvm_auto_mappings([s, A, B, C], "C", X86["matmul_16x16x16"]) is None
    sel = select_instructions(ms, program=to_isamir([s, A, B, C]))
    assert {m.instruction.name for m in sel.mappings} == {"matmul_16x16x16", "scale_16"}
    assert_sound(mm, to_isamir([s, A, B, C]))


# ----------------------------------------------------------------------------- sizes and layouts


def test_gemv_maps_to_matmul_after_a_unit_dim_and_padding():
    A, x = ph((64, 48), "A"), ph((48,), "x")
    k = te.reduce_axis((0, 48), "k")
    y = te.compute((64,), lambda i: te.sum(A[i, k] * x[k], axis=k), name="y")
    p = to_isamir([A, x, y])
    res = search_mappings(p, X86["matmul_16x16x16"])
    kinds = {tuple(t.transform for t in m.transforms) for m in res.mappings}
    assert ("insert_unit_dim", "pad") in kinds
    assert tvm_auto_mappings([A, x, y], "y", X86["matmul_16x16x16"]) is None
    assert_sound(res.mappings, p)


def test_padding_fits_odd_sizes_and_the_padded_kernel_builds():
    p = to_isamir(matmul_args(20, 24, 20))
    (m, *_) = [m for m in search_mappings(p, X86["matmul_16x16x16"]).mappings if len(m.transforms) == 1]
    assert str(m.transforms[0]) == "pad(sizes=(i:32,j:32,k:32))" and m.calls == 8
    assert_sound([m], p)
    ins = inputs_of(p)
    mod = get_or_build(("tensorize-test-padded-matmul",), lambda: to_prim_func(m.program))
    dev = tvm.cpu()
    out = tvm.runtime.empty((20, 24), "float32", dev)
    mod["main"](tvm.runtime.tensor(ins["A"], dev), tvm.runtime.tensor(ins["B"], dev), out)
    np.testing.assert_allclose(out.numpy(), ins["A"] @ ins["B"], rtol=1e-5)  # same interface, padded inside


def test_fuse_beats_padding_for_a_small_batch():
    p = parse_isamir("""forall b:4,i:8,j:32,k:32 { C[b][i][j] := 0; tmp[b][i][j][k] := A[b][i][k];
        tmp[b][i][j][k] *= B[k][j]; C[b][i][j] += tmp[b][i][j][k]; }""")
    ms = search_mappings(p, ACCEL["matmul_32x32x32"]).mappings
    fused = [m for m in ms if [t.transform for t in m.transforms] == ["fuse"]]
    assert fused and fused[0].calls == 1 and fused[0].axis_map["i"] == "bi"
    best = select_instructions(ms, program=p)
    assert [t.transform for t in best.transforms] == ["fuse"]
    assert_sound(fused, p)


def test_split_maps_a_vector_op_onto_a_2d_tile():
    p = parse_isamir("forall n:2048 { y[n] := a[n]; y[n] += b[n]; }")
    res = search_mappings(p, ACCEL["add_32x32"])
    assert res.mappings and all(m.transforms[-1].transform == "split" for m in res.mappings)
    assert min(m.calls for m in res.mappings) == 2
    assert_sound(res.mappings, p)


def test_strict_layout_search_inserts_the_transpose():
    X, W = ph((32, 32), "X"), ph((32, 32), "W")
    k = te.reduce_axis((0, 32), "k")
    D = te.compute((32, 32), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="D")
    p = to_isamir([X, W, D])
    ms = search_mappings(p, X86["matmul_16x16x16"], strict_layout=True).mappings
    assert [str(t) for t in ms[0].transforms] == ["transpose(buffer=W, perm=(1,0))"]
    assert ms[0].required_transposes() == {}
    assert_sound(ms, p)


# ----------------------------------------------------------------------------- semantics of every explored program


def conv1d_args(I=2, X=16, D=3, KI=16, KO=16):
    A, B = ph((I, X + D - 1, KI), "A"), ph((D, KI, KO), "B")
    d, ki = te.reduce_axis((0, D), "d"), te.reduce_axis((0, KI), "ki")
    return [A, B, te.compute((I, X, KO), lambda i, x, ko: te.sum(A[i, x + d, ki] * B[d, ki, ko], axis=[d, ki]),
                             name="C")]


@pytest.mark.parametrize("case", ["conv1d", "separable"])
def test_every_explored_program_keeps_the_kernels_meaning(case):
    args = conv1d_args() if case == "conv1d" else separable_args(Cin=4, cm=2, K=8, H=4, s=2)
    p = to_isamir(args)
    ins = inputs_of(p)
    ref = evaluate(p, ins)
    seen = 0
    for ins_name in ("matmul_16x16x16", "conv1d_16xk", "mul_16"):
        for steps, prog in search_mappings(p, X86[ins_name]).programs:
            got = evaluate(prog, ins)
            seen += 1
            for name, want in ref.items():
                np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-4, err_msg=str(steps))
    assert seen > 5


def _candidate_steps(p: Program, draw) -> list[TransformStep]:
    axes = list(p.axis_names)
    steps = [TransformStep("factorization", (("stmt", k), ("operand", n)))
             for k in range(len(p.statements)) for n in range(4)]
    steps += [TransformStep("commutativity", (("stmt", k), ("swap", b))) for k in range(4) for b in (1, 2)]
    steps += [TransformStep("associativity", (("stmt", k), ("split", 1))) for k in range(4)]
    steps += [TransformStep("pad", (("sizes", ((a, p.extent(a) + draw(st.integers(1, 3))),)),)) for a in axes]
    steps += [TransformStep("fuse", (("outer", a), ("inner", b))) for a in axes for b in axes if a != b]
    steps += [TransformStep("split", (("axis", a), ("factor", 2))) for a in axes]
    steps += [TransformStep("transpose", (("buffer", b.name), ("perm", tuple(reversed(range(b.rank))))))
              for b in p.buffers if b.rank > 1]
    steps.append(TransformStep("insert_unit_dim", (("buffers", (p.buffers[-1].name, "C")),)))
    return steps


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_random_product_reductions_survive_every_legal_rewrite(data):
    axes = ["i", "j", "k", "l"]
    ext = {a: data.draw(st.integers(1, 4), label=a) for a in axes}
    out = data.draw(st.lists(st.sampled_from(axes), min_size=1, max_size=2, unique=True), label="out")
    ops = [data.draw(st.lists(st.sampled_from(axes), min_size=1, max_size=3, unique=True), label=f"X{m}")
           for m in range(data.draw(st.integers(2, 3), label="n"))]
    used = [a for a in axes if a in set(out).union(*ops)]
    idx = lambda names: "".join(f"[{a}]" for a in names)  # noqa: E731
    body = [f"C{idx(out)} := 0;", f"tmp{idx(used)} := X0{idx(ops[0])};"]
    body += [f"tmp{idx(used)} *= X{m}{idx(o)};" for m, o in enumerate(ops) if m]
    body.append(f"C{idx(out)} += tmp{idx(used)};")
    p = parse_isamir(f"forall {', '.join(f'{a}:{ext[a]}' for a in used)} {{ {' '.join(body)} }}")
    ins = inputs_of(p)
    ref = evaluate(p, ins)["C"]
    applied = 0
    for step in _candidate_steps(p, data.draw):
        try:
            q = apply_steps(p, [step])
        except TransformError:
            continue
        applied += 1
        np.testing.assert_allclose(evaluate(q, ins)["C"], ref, rtol=1e-4, atol=1e-5, err_msg=str(step))
    assert applied >= 1


def test_illegal_rewrites_are_refused():
    p = parse_isamir("forall i:3,k:5 { c[i] := 0; t[i][k] := exp(A[i][k]); c[i] += t[i][k]; }", temps={"t"})
    with pytest.raises(TransformError, match="not zero in the padding"):
        apply_steps(p, [TransformStep("pad", (("sizes", (("k", 8),)),))])
    bmm = parse_isamir("""forall b:2,i:3,j:4,k:5 { C[b][i][j] := 0; tmp[b][i][j][k] := A[b][i][k];
        tmp[b][i][j][k] *= B[b][k][j]; C[b][i][j] += tmp[b][i][j][k]; }""")
    with pytest.raises(TransformError, match="does not use b,i as one index"):
        apply_steps(bmm, [TransformStep("fuse", (("outer", "b"), ("inner", "i")))])
    with pytest.raises(TransformError, match="depends on every reduced axis"):
        apply_steps(bmm, [TransformStep("factorization", (("stmt", 3), ("operand", 0)))])
    with pytest.raises(TransformError, match="unknown transformation"):
        get_transform("loop_unroll")


# ----------------------------------------------------------------------------- extensibility and bounds


class _AlwaysCommute(Transform):
    """A user pass: try every operand swap, ignoring feedback (shows the extension interface)."""

    name = "test_always_commute"

    def apply(self, program, stmt, swap):
        return get_transform("commutativity").apply(program, stmt=stmt, swap=swap)

    def propose(self, program, result, instruction):
        from tensorize.transforms import find_chains

        return [self.step(1.0, stmt=c.start, swap=b) for c in find_chains(program) for b in range(1, len(c.operands))]


def test_user_transforms_plug_into_the_search():
    register_transform(_AlwaysCommute(), replace_existing=True)
    p = to_isamir(matmul_args(32, 32, 32))
    ms = search_mappings(p, X86["matmul_16x16x16"], transforms=["test_always_commute"]).mappings
    assert {tuple(t.transform for t in m.transforms) for m in ms} == {(), ("test_always_commute",)}


def test_search_is_bounded():
    p = to_isamir(separable_args(Cin=4, cm=2, K=8, H=4))
    assert not search_mappings(p, X86["matmul_16x16x16"], max_depth=0).mappings
    res = search_mappings(p, X86["matmul_16x16x16"], max_depth=3, max_programs=5)
    assert res.explored <= 5
    with pytest.raises(ConfigError):
        search_mappings(p, X86["matmul_16x16x16"], max_depth=-1)


# ----------------------------------------------------------------------------- selection


def test_selection_picks_fewest_calls_and_honours_a_cost_model():
    p = to_isamir(matmul_args(32, 32, 32))
    ms = find_mappings(p, "x86")
    sel = select_instructions(ms, program=p)
    assert [m.instruction.name for m in sel.mappings] == ["fill_16", "matmul_8x32xk"]
    assert sel.uncovered == [] and sel.cost == 64 + 4
    covered = [set(m.statement_map) for m in sel.mappings]
    assert not set.intersection(*covered)  # non-overlapping

    class NoWideTiles(CallCountModel):
        def cost(self, instruction, mapping):
            return 1e9 if instruction.name == "matmul_8x32xk" else mapping.calls

    alt = select_instructions(ms, NoWideTiles(), program=p)
    assert "matmul_8x32xk" not in {m.instruction.name for m in alt.mappings}
    assert "matmul_16x16x16" in {m.instruction.name for m in alt.mappings}
    cyc = select_instructions(ms, CycleCostModel(), program=p)
    assert cyc.cost == pytest.approx(sum(m.calls * m.instruction.call_cost(m.tile) for m in cyc.mappings))


def test_selection_falls_back_to_scalar_code_and_covers_every_statement():
    p = parse_isamir("forall i:64 { C[i] := A[i]; C[i] /= B[i]; }")
    sel = select_instructions(find_mappings(p, "x86"), program=p)
    assert [m.instruction.name for m in sel.mappings] == ["copy_16"] and sel.uncovered == [1]
    assert sel.cost == 4 + 64
    assert "scalar `C[i] /= B[i];`" in str(sel)


def gru_args(B=16, I=32, H=32):
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
    return [x, h, W, U, bias, hn]


@pytest.mark.parametrize("isa", ["x86", "accel"])
def test_gru_cell_is_covered_by_instructions(isa):
    p = to_isamir(gru_args())
    ranked = rank_selections(find_mappings(p, isa), program=p)
    best = ranked[0]
    assert best.uncovered == []
    mm = [m for m in best.mappings if m.instruction.kind == "matmul"]
    assert sorted(m.buffer_map["C"] for m in mm) == ["hu", "xw"]  # the gate matmuls
    all_scalar = sum(p.points(k) for k in range(len(p.statements)))
    assert best.cost < all_scalar / 20
    assert_sound(best.mappings[:4], p)
