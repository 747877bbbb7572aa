"""End to end (ISA Mapper §7): every kernel maps, tensorizes, builds and matches
numpy/torch; plus the ``tvm-ext map`` CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tensorize import kernels as K
from tvm_ext.cli.main import main as cli_main
from tvm_ext.errors import InputError, MappingError, ShapeError

torch = pytest.importorskip("torch")


def check(kernel, impl="micro", rtol=1e-4, atol=1e-4, **kw):
    t = K.tensorized(kernel, "x86", impl=impl, **kw)
    ins = kernel.random_inputs(seed=1)
    np.testing.assert_allclose(t(*ins), kernel.reference(*ins), rtol=rtol, atol=atol)
    assert t.emitted, "nothing was tensorized"
    for e in t.emitted.values():
        assert e.intrin.startswith("tvmext.x86.") and any(s.startswith("tensorize") for s in e.steps)
    return t, ins


def test_matmul_uses_the_biggest_register_tile_instruction():
    t, _ = check(K.matmul(48, 64, 40))
    m = t.plan.blocks["C"]
    assert m.instruction.name == "matmul_8x32xk" and dict(m.axis_map) == {"i": "i", "j": "j", "k": "k"}


def test_batch_matmul_keeps_the_batch_axis_outer():
    t, _ = check(K.batch_matmul(3, 16, 32, 24))
    m = t.plan.blocks["C"]
    assert "b" in m.outer_axes and m.instruction.kind == "matmul"


def test_dense_with_bias_against_torch_linear():
    k = K.dense_bias(24, 64, 40)
    t = K.tensorized(k)
    x, w, b = k.random_inputs(seed=2)
    ref = torch.nn.functional.linear(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b)).numpy()
    np.testing.assert_allclose(t(x, w, b), ref, rtol=1e-4, atol=1e-4)
    assert t.emitted["dense"].packed == ["W"]


def test_conv1d_listing5_maps_to_matmul_with_x_and_d_outer_or_inner():
    t, (a, b) = check(K.conv1d(2, 20, 3, 16, 32))
    m = t.plan.blocks["C"]
    assert m.instruction.kind == "matmul" and m.axis_map["k"] == "ki" and m.axis_map["j"] == "ko"
    ref = torch.nn.functional.conv1d(torch.from_numpy(a).permute(0, 2, 1),
                                     torch.from_numpy(b).permute(2, 1, 0)).permute(0, 2, 1).numpy()
    np.testing.assert_allclose(t(a, b), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride,pad", [(1, 1), (2, 1), (2, 0)])
def test_conv2d_nchw_against_torch(stride, pad):
    k = K.conv2d_nchw(1, 16, 32, 12, 3, stride=stride, pad=pad)
    t = K.tensorized(k)
    x, w = k.random_inputs(seed=3)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=stride, padding=pad).numpy()
    np.testing.assert_allclose(t(x, w), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride,kernel", [(1, 3), (2, 3), (2, 1)])
def test_conv2d_nhwc_against_torch(stride, kernel):
    pad = kernel // 2
    k = K.conv2d_nhwc(1, 16, 32, 12, kernel, stride=stride, pad=pad)
    t = K.tensorized(k)
    x, w = k.random_inputs(seed=4)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(w).permute(3, 2, 0, 1),
                                     stride=stride, padding=pad).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(t(x, w), ref, rtol=1e-4, atol=1e-4)
    m = t.plan.blocks["conv"]
    assert m.instruction.kind == "matmul" and m.axis_map["j"] == "co" and m.axis_map["k"] == "rc"


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_conv2d_against_torch(stride):
    k = K.depthwise_conv2d(1, 32, 12, 3, stride=stride, pad=1)
    t = K.tensorized(k)
    x, w = k.random_inputs(seed=5)
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2),
                                     torch.from_numpy(w).permute(2, 0, 1)[:, None], stride=stride, padding=1,
                                     groups=32).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(t(x, w), ref, rtol=1e-4, atol=1e-4)


def test_separable_conv_needs_factorization_then_tensorizes_both_stages():
    k = K.separable_conv2d(1, 16, 32, 10, 3, stride=1, pad=1)
    t, (a, d, p) = check(k)
    assert t.plan.program is not None  # rebuilt from the transformed ISAMIR
    assert any(s.startswith("factorization") for s in t.plan.structural)
    assert len(t.emitted) == 2  # depthwise stage and pointwise matmul stage
    dw = torch.nn.functional.conv2d(torch.from_numpy(a).permute(0, 3, 1, 2),
                                    torch.from_numpy(d).permute(2, 3, 0, 1).reshape(16, 1, 3, 3), padding=1, groups=16)
    ref = torch.nn.functional.conv2d(dw, torch.from_numpy(p).T[:, :, None, None]).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(t(a, d, p), ref, rtol=1e-4, atol=1e-4)


def test_separable_conv_with_few_channels_shrinks_the_instruction_tile():
    # c_in=8: the kernel cannot fill the depthwise stage's 16x16 instruction; the emitter
    # picks a tile within the target's register file instead.
    from tvm_ext.target import hardware_facts

    k = K.separable_conv2d(1, 8, 16, 8, 3, pad=1)
    t, _ = check(k)
    facts = hardware_facts()
    for e in t.emitted.values():
        vec = e.spec.vector_axis
        vecs = -(-e.tiles[vec] // facts.lanes("float32")) if vec else 1
        assert vecs * int(np.prod([e.tiles[a] for a in e.spec.spatial if a != vec])) <= facts.vector_registers


def test_gru_cell_gate_matmuls_against_torch_grucell():
    k = K.gru_cell(4, 24, 32)
    t = K.tensorized(k)
    assert set(t.emitted) == {"gate_x", "gate_h"}
    x, h, w_ih, w_hh, b_ih, b_hh = k.random_inputs(seed=6)
    cell = torch.nn.GRUCell(24, 32)
    with torch.no_grad():
        for name, v in (("weight_ih", w_ih), ("weight_hh", w_hh), ("bias_ih", b_ih), ("bias_hh", b_hh)):
            getattr(cell, name).copy_(torch.from_numpy(v))
        ref = cell(torch.from_numpy(x), torch.from_numpy(h)).numpy()
    np.testing.assert_allclose(t(x, h, w_ih, w_hh, b_ih, b_hh), ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("impl", ["blas", "packed"])
def test_other_implementations_end_to_end(impl):
    check(K.conv2d_nhwc(1, 16, 32, 8, 3, pad=1), impl=impl)


def test_blas_library_is_keyed_by_the_host_cpu_features(monkeypatch, tmp_path):
    import shutil

    import tvm_ext.target
    from tensorize import x86
    from tvm_ext.errors import ConfigError

    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(x86, "_LIB", {})
    first = x86.build_gemm_library()
    assert first.parent == tmp_path and first.stat().st_size > 0
    # the same CPU name with other features (a VM masking AVX-512, say): -march=native differs
    monkeypatch.setattr(tvm_ext.target, "cpu_features", lambda: ["sse2"])
    monkeypatch.setattr(x86, "_compiler", lambda: "false")  # compiling the other library fails
    with pytest.raises(ConfigError, match="compiling tvmext_gemm.c"):
        x86.build_gemm_library()
    assert sorted(p.name for p in tmp_path.glob("*.so")) == [first.name]


def test_rebuilt_loops_are_named_after_the_isamir_axes_even_python_keywords():
    import tvm
    from tvm import te

    from tensorize.isamir import parse_isamir

    p = parse_isamir("forall lambda:4,for:3 { C[lambda] := 0; C[lambda] += A[lambda][for]; }")
    A = te.placeholder((4, 3), name="A")
    r = te.reduce_axis((0, 3), name="r")
    C = te.compute((4,), lambda i: te.max(A[i, r], axis=r), name="C")  # replaced by the program's sum
    func = K.rebuild(K.Kernel("rowsum", [A, C], None, 12), p)
    loop = func.body.block.body
    assert [p.name for p in func.params] == ["A", "C"]
    assert (loop.loop_var.name, loop.body.loop_var.name) == ("lambda", "for")
    f = tvm.compile(func, target="llvm")
    a = np.random.default_rng(0).uniform(-1, 1, (4, 3)).astype("float32")
    c = tvm.runtime.empty((4,), "float32")
    f(tvm.runtime.tensor(a), c)
    np.testing.assert_allclose(c.numpy(), a.sum(axis=1), rtol=1e-6, atol=1e-6)


def test_rebuild_keeps_the_blocks_the_program_does_not_compute_and_checks_its_buffers():
    import tvm
    from tvm import s_tir

    from tensorize.exporters import replace_blocks
    from tensorize.isamir import parse_isamir
    from tensorize.search import find_mappings

    k = K.separable_conv2d(1, 8, 16, 6, 3, stride=1, pad=1)
    func = k.prim_func()
    plan = K.plan_mappings(func, find_mappings(func, "x86", block=K.compute_blocks(func)))
    rebuilt = K.rebuild(k, plan.program)
    sch = s_tir.Schedule(rebuilt)
    names = [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
    assert names[0] == "pad" and len(names) == 3  # the padding producer kept, the product factorized in two
    assert [p.name for p in rebuilt.params] == [p.name for p in func.params]
    got = tvm.compile(rebuilt, target="llvm")
    ins = k.random_inputs(1)
    out = tvm.runtime.empty(tuple(int(s) for s in k.output.shape), "float32")
    got(*[tvm.runtime.tensor(a) for a in ins], out)
    np.testing.assert_allclose(out.numpy(), k.reference(*ins), rtol=1e-4, atol=1e-4)
    with pytest.raises(InputError, match="Z are not buffers of the function"):
        replace_blocks(func, parse_isamir("forall i:4 { C[i] := Z[i]; }"))
    with pytest.raises(InputError, match="shape"):
        replace_blocks(func, parse_isamir("forall i:4 { C[i] := P[i]; }"))


def test_rebuild_refuses_to_move_blocks_past_one_that_depends_on_them():
    from tvm import te

    from tensorize.exporters import replace_blocks
    from tensorize.isamir import parse_isamir

    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * 2.0, name="B")
    D = te.compute((4,), lambda i: B[i] + 1.0, name="D")  # kept, between the two replaced blocks
    C = te.compute((4,), lambda i: B[i] * 3.0, name="C")
    func = te.create_prim_func([A, D, C])
    with pytest.raises(InputError, match=r"a block kept between the replaced ones \(D\) depends on them"):
        replace_blocks(func, parse_isamir("forall i:4 { B[i] := A[i]; B[i] *= 2; C[i] := A[i]; C[i] *= 6; }"))


def test_rebuild_refuses_to_drop_a_buffer_a_replaced_loop_also_writes():
    from tvm.script import tirx as T

    from tensorize.exporters import replace_blocks
    from tensorize.isamir import parse_isamir

    @T.prim_func(s_tir=True)
    def two(A: T.Buffer((4,), "float32"), X: T.Buffer((4,), "float32"), Y: T.Buffer((4,), "float32")):
        for i in range(4):
            with T.sblock("X"):
                v = T.axis.spatial(4, i)
                X[v] = A[v] * T.float32(2)
            with T.sblock("Y"):
                v = T.axis.spatial(4, i)
                Y[v] = A[v] + T.float32(1)

    with pytest.raises(InputError, match="the replaced blocks also write Y, which the program does not compute"):
        replace_blocks(two, parse_isamir("forall i:4 { X[i] := A[i]; X[i] *= 2; }"))


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ShapeError, match="must be a positive int"):
        K.matmul(0, 4, 4)
    with pytest.raises(ShapeError, match="has no output"):
        K.conv2d_nhwc(1, 4, 4, 2, 5)
    with pytest.raises(InputError, match="unknown kernel"):
        K.make_kernel("nope")
    t = K.tensorized(K.matmul(16, 32, 8))
    with pytest.raises(ShapeError, match="expected \\(16, 8\\)"):
        t(np.ones((8, 16), "float32"), np.ones((8, 32), "float32"))
    with pytest.raises(MappingError):
        K.tensorized(K.matmul(16, 32, 8), kinds=["transpose"])


# --------------------------------------------------------------------------- CLI


def _map_json(capsys, *argv):
    code = cli_main(["map", *argv, "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


def test_map_cli_json_keys_for_conv2d(capsys):
    code, data, _ = _map_json(capsys, "conv2d", "--size", "hw=8")
    assert code == 0
    assert data["mappings"] and {"instruction", "axis_map", "transforms"} <= set(data["mappings"][0])
    assert data["tvm_auto_tensorize_found"] is True
    assert "forall" in data["isamir"] and data["selected"]["conv"]["instruction"].startswith("matmul")


def test_map_cli_sepconv_needs_factorization_and_tvm_finds_none(capsys):
    code, data, _ = _map_json(capsys, "sepconv", "--size", "hw=8")
    assert code == 0 and data["tvm_auto_tensorize_found"] is False
    assert data["rebuilt_from_transformed_program"] is True
    assert any("factorization" in e["transform_names"] for e in data["selected"].values())


def test_map_cli_gru_and_build(capsys):
    code, data, _ = _map_json(capsys, "gru", "--build")
    assert code == 0 and set(data["selected"]) == {"gate_x", "gate_h"}
    assert data["build"]["max_abs_error"] < 1e-4


def test_map_cli_reads_a_python_file(capsys, tmp_path):
    src = tmp_path / "k.py"
    src.write_text(
        "from tvm import te\n"
        "def kernel():\n"
        "    A = te.placeholder((32, 16), name='A'); B = te.placeholder((16, 64), name='B')\n"
        "    k = te.reduce_axis((0, 16), name='k')\n"
        "    return [A, B, te.compute((32, 64), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name='C')]\n")
    code, data, _ = _map_json(capsys, str(src), "--isa", "accel")
    assert code == 0 and data["isa"] == "accel"
    assert {m["instruction"] for m in data["mappings"]} >= {"matmul_16x16x16"}


def test_map_cli_errors_are_one_line(capsys, tmp_path):
    code = cli_main(["map", "nope"])
    _, err = capsys.readouterr()
    assert code == 2 and "neither a built-in kernel" in err and err.count("\n") == 1
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    code = cli_main(["map", str(bad)])
    _, err = capsys.readouterr()
    assert code == 2 and "defines no function kernel()" in err
    code = cli_main(["map", "conv2d", "--size", "hw"])
    _, err = capsys.readouterr()
    assert code == 2 and "NAME=INT" in err


def test_a_cost_model_steers_instruction_selection():
    class Prefer16:
        def cost(self, instruction, mapping):
            return 0.0 if instruction.name == "matmul_16x16x16" else 1.0

    t = K.tensorized(K.matmul(32, 32, 32), cost_model=Prefer16())
    assert t.plan.blocks["C"].instruction.name == "matmul_16x16x16"
    assert t.emitted["C"].tiles == {"i": 16, "j": 16, "k": 16}  # the instruction's own extents


def test_quick_tune_measures_each_distinct_knob_setting_once():
    knobs = ({"tiles": {"rows": 8, "vector": 32}}, {"tiles": {"rows": 8, "vector": 64}},
             {"tiles": {"rows": 4, "vector": 16}})
    r = K.quick_tune(K.matmul(32, 32, 16), knobs=knobs, repeat=1, min_repeat_ms=1)
    # vector 64 clamps to the 32 columns: same tiles as the first setting, measured once
    assert len(r.trials) == 2 and r.seconds_per_call > 0 and r.search_seconds > 0
    a, b = K.matmul(32, 32, 16).random_inputs()
    np.testing.assert_allclose(r.best(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_tensorized_takes_a_tvmscript_primfunc():
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def mm_bt(A: T.Buffer((32, 24), "float32"), B: T.Buffer((48, 24), "float32"), C: T.Buffer((32, 48), "float32")):
        for i, j, k in T.grid(32, 48, 24):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vj, vk]

    t = K.tensorized(mm_bt)
    a, b = K.kernel_from_prim_func(mm_bt).random_inputs(seed=7)
    np.testing.assert_allclose(t(a, b), a @ b.T, rtol=1e-4, atol=1e-4)
    assert [p[0] for p in t.emitted["C"].packed] == ["B"]  # B[j, k] (or its padded copy) packed into panels


def test_map_cli_build_checks_a_file_kernel_against_its_untuned_build(capsys, tmp_path):
    src = tmp_path / "dw.py"
    src.write_text(
        "from tensorize.kernels import depthwise_conv2d\n"
        "def kernel():\n"
        "    return depthwise_conv2d(1, 16, 8, 3, 1, 1).prim_func()\n")
    code, data, _ = _map_json(capsys, str(src), "--build")
    assert code == 0 and data["build"]["reference"] == "the PrimFunc built untuned"
    assert data["build"]["max_abs_error"] < 1e-4


def test_map_cli_sepconv_on_the_accelerator_pads_and_factorizes(capsys):
    # fixed 32x32x32 / 16x16x16 matmul units: every mapping also pads, so the plan is
    # assembled on the program the structural steps alone reach
    code, data, _ = _map_json(capsys, "sepconv", "--isa", "accel", "--size", "hw=6", "--size", "c_in=4",
                              "--size", "c_out=8")
    assert code == 0 and data["rebuilt_from_transformed_program"] is True
    sel = data["selected"]
    assert set(sel) == {"tmp2", "C"}
    assert all(e["instruction"].startswith("matmul") for e in sel.values())
    for e in sel.values():
        assert {"factorization", "pad"} <= set(e["transform_names"])


def test_map_cli_depthwise_on_the_accelerator_is_covered_by_several_instructions(capsys):
    code, data, _ = _map_json(capsys, "depthwise", "--isa", "accel", "--size", "hw=6", "--size", "c=8")
    assert code == 0
    cover = data["selected"]["depthwise"]["cover"]
    assert [e["instruction"] for e in cover][0] == "fill_32x32" and len(cover) >= 2
    stmts = [s for e in cover for s in e["statements"]]
    assert len(stmts) == len(set(stmts))  # disjoint statements
    assert data["selected"]["depthwise"]["instruction"] == cover[-1]["instruction"]


def test_depthwise_plan_on_the_accelerator_computes_torch_depthwise_conv():
    import torch

    from tensorize.search import find_mappings

    k = K.depthwise_conv2d(1, 8, 7, 3, pad=1)
    func = k.prim_func()
    plan = K.plan_mappings(func, find_mappings(func, "accel", block=K.compute_blocks(func)))
    x, w = k.random_inputs(seed=3)
    out = K.simulate_plan(plan, {"pad": np.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)]), "W": w})["depthwise"]
    ref = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2),
                                     torch.from_numpy(w).permute(2, 0, 1)[:, None], padding=1, groups=8)
    np.testing.assert_allclose(out, ref.permute(0, 2, 3, 1).numpy(), rtol=1e-5, atol=1e-5)
    assert K.plan_cycles(plan) > 0
    with pytest.raises(MappingError, match="several instructions"):
        K.tensorized(k, "accel")


def test_sepconv_plan_on_the_accelerator_computes_torch_separable_conv():
    from bench.isa_map_accel import program_inputs, torch_reference
    from tensorize.search import find_mappings
    from tensorize.selection import CycleCostModel

    k = K.separable_conv2d(1, 8, 16, 6, 3, pad=1)
    func = k.prim_func()
    model = CycleCostModel()
    maps = find_mappings(func, "accel", block=K.compute_blocks(func))
    plan = K.plan_mappings(func, maps, model).on_one_program(model)
    assert len({m.program.key for m in plan.blocks.values()}) == 1
    assert {m.instruction.kind for m in plan.blocks.values()} == {"matmul"}
    assert K.plan_cycles(plan) < K.plan_cycles(K.plan_mappings(func, maps))  # cycles beat call counts here
    ins = k.random_inputs(seed=4)
    out = K.simulate_plan(plan, program_inputs(k, ins))["C"]
    np.testing.assert_allclose(out, k.reference(*ins), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out, torch_reference(k, ins), rtol=1e-4, atol=1e-4)
