"""``tvm_ext.compile`` on hand-built Relax modules: tuning records, report contents,
the llvm-only baseline, bad input and bad configuration."""
from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

import tvm_ext.compile as tc
from tvm_ext.errors import ConfigError, InputError, ShapeError, TuningError


def _mlp_module(m=16, k=32, n=24, sparse_w=None):
    from tvm import relax

    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((k, n)).astype("float32")
    w2 = sparse_w if sparse_w is not None else rng.standard_normal((n, 8)).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((m, k), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.relu(relax.op.matmul(x, relax.const(w1))))
            y = bb.emit(relax.op.matmul(h, relax.const(w2)))
            out = bb.emit_output(relax.op.nn.softmax(y))
        bb.emit_func_output(out)
    ref = lambda xv: _softmax(np.maximum(xv @ w1, 0) @ w2)  # noqa: E731
    return bb.get(), ref


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_module_is_callable_and_report_serialises():
    mod, ref = _mlp_module()
    model = tc(mod, tensorize="never")  # the module itself is callable: tvm_ext.compile(mod)
    x = model.random_inputs(3)[0]
    np.testing.assert_allclose(model(x)[0], ref(x), rtol=1e-4, atol=1e-6)
    report = model.profile(x)
    data = json.loads(json.dumps(report.to_dict()))
    assert [e["target"] for e in data["offloaded"]] == ["llvm"] * 4
    assert [e["op"].split("#")[0] for e in data["offloaded"]] == ["matmul", "nn.relu", "matmul", "nn.softmax"]
    assert data["cycles"] == 0 and data["llvm_seconds"] > 0 and data["measured"]
    assert {k["name"] for k in data["kernels"]} >= {"fused_matmul_relu", "matmul1", "softmax"}
    assert all(k["calls"] == 1 and k["seconds"] > 0 for k in data["kernels"])
    md = report.markdown()
    assert "nn.softmax" in md and "measured llvm time" in md


def test_pruned_weight_on_the_right_runs_as_a_transposed_sparse_product():
    w2 = sp.random(256, 64, density=0.05, random_state=1, dtype=np.float32).toarray()
    mod, ref = _mlp_module(m=16, k=32, n=256, sparse_w=w2)
    model = tc.compile(mod, tensorize="never")
    placed = {p.label.split(" ")[0]: p.target for p in model.report.ops}
    assert placed == {"matmul#0": "llvm", "nn.relu#1": "llvm", "matmul#2": "llvm/sparse-executor",
                      "nn.softmax#3": "llvm"}
    x = model.random_inputs(0)[0]
    np.testing.assert_allclose(model(x)[0], ref(x), rtol=1e-4, atol=1e-6)
    small = tc.compile(_mlp_module(sparse_w=w2[:24, :8].copy())[0], tensorize="never")
    assert "llvm/sparse-executor" not in small.report.targets()  # 24 x 8: too small to pay off


def test_two_sparse_constants_of_one_shape_keep_their_own_kernels():
    from tvm import relax

    rng = np.random.default_rng(5)
    A1, A2 = (sp.random(128, 128, density=0.03, random_state=s, dtype=np.float32).toarray() for s in (1, 2))
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((128, 8), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.op.matmul(relax.const(A1), x), relax.op.matmul(relax.const(A2), x)))
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    model = tc.compile(bb.get(), tensorize="never")
    assert model.report.targets()["llvm/sparse-executor"] == 2
    xv = rng.standard_normal((128, 8)).astype("float32")
    np.testing.assert_allclose(model(xv)[0], np.maximum(A1 @ xv + A2 @ xv, 0), rtol=1e-4, atol=1e-5)


def test_llvm_only_baseline_matches_and_is_all_llvm():
    mod, ref = _mlp_module()
    base = tc.llvm_only(mod)
    ours = tc.compile(mod, tensorize="always")
    x = base.random_inputs(1)[0]
    assert tc.max_rel_err(ours(x), base(x)) < 1e-5
    assert tc.max_rel_err(base(x), [ref(x)]) < 1e-5
    assert {p.target for p in base.report.ops} == {"llvm"} and base.time(x, repeat=1, min_repeat_ms=1) > 0


def test_tuning_records_schedule_the_matching_kernel(tmp_path):
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    from tvm_ext.compile_steps.llvm_schedule import _normalized
    from tvm_ext.target import default_target

    mod, ref = _mlp_module()
    legal = _legalized(mod)
    func = legal["fused_matmul_relu"]
    norm = _normalized(func)
    sch = s_tir.Schedule(norm)
    blk = sch.get_sblock("matmul")
    i, j, k = sch.get_loops(blk)
    sch.parallel(i)
    db = ms.database.JSONDatabase(work_dir=str(tmp_path))
    wl = db.commit_workload(norm)
    db.commit_tuning_record(ms.database.TuningRecord(sch.trace, wl, [1e-5], default_target(),
                                                     ms.arg_info.ArgInfo.from_prim_func(norm["main"])))
    model = tc.compile(mod, tuning_db=str(tmp_path))
    how = {k.name: k.schedule for k in model.report.kernels}
    assert how["fused_matmul_relu"] == "tuned" and how["matmul1"] != "tuned"
    x = model.random_inputs(2)[0]
    np.testing.assert_allclose(model(x)[0], ref(x), rtol=1e-4, atol=1e-6)
    with pytest.raises(TuningError, match="no such directory"):
        tc.compile(mod, tuning_db=str(tmp_path / "missing"))
    bad = tmp_path / "corrupt"
    bad.mkdir()
    (bad / "database_workload.json").write_text("{not json\n")
    (bad / "database_tuning_record.json").write_text("")
    with pytest.raises(TuningError, match="corrupt|cannot read"):
        tc.compile(mod, tuning_db=str(bad))
    assert (bad / "database_workload.json").read_text() == "{not json\n"  # nothing overwritten


def test_bad_input_and_configuration_are_clear_errors():
    mod, _ = _mlp_module()
    with pytest.raises(InputError, match="expected a Relax IRModule"):
        tc.compile("not a module")
    with pytest.raises(ConfigError, match="tensorize"):
        tc.compile(mod, tensorize="sometimes")
    with pytest.raises(ConfigError, match="sparse_threshold"):
        tc.compile(mod, sparse_threshold=2.0)
    with pytest.raises(ConfigError, match="spmm_engine"):
        tc.compile(mod, spmm_engine="sextans-q")
    with pytest.raises(ConfigError, match="not supported"):
        tc.compile(mod, {"kind": "c"})
    with pytest.raises(ConfigError):
        tc.compile(mod, accel="no-such-machine")
    model = tc.compile(mod, tensorize="never")
    with pytest.raises(ShapeError, match="expected shape"):
        model(np.zeros((3, 3), "float32"))
    with pytest.raises(InputError, match="got dtype float64"):
        model(np.zeros((16, 32)))
    with pytest.raises(InputError, match="takes 1 inputs"):
        model()


def test_transposing_elementwise_kernels_are_inlined_and_cache_tiled():
    """An NHWC->NCHW transpose + add + relu (what ConvertLayout leaves around a residual add)
    becomes one tiled loop nest, and still computes the same thing."""
    import tvm
    from tvm import te

    from tvm_ext.compile_steps.llvm_schedule import _default_all, _root_blocks
    from tvm_ext.target import default_target

    a = te.placeholder((1, 8, 8, 32), name="a")  # NHWC
    x = te.placeholder((1, 32, 8, 8), name="x")  # NCHW
    t = te.compute((1, 8, 8, 32), lambda n, h, w, c: x[n, c, h, w], name="T_transpose")
    s = te.compute((1, 8, 8, 32), lambda n, h, w, c: a[n, h, w, c] + t[n, h, w, c], name="T_add")
    r = te.compute((1, 8, 8, 32), lambda n, h, w, c: te.max(s[n, h, w, c], 0.0), name="relu")
    out = te.compute((1, 32, 8, 8), lambda n, c, h, w: r[n, h, w, c], name="T_transpose1")
    sch = _default_all(te.create_prim_func([a, x, out]))
    assert [sch.get(b).name_hint for b in _root_blocks(sch)] == ["T_transpose1"]
    text = sch.mod.script()
    assert "T.parallel" in text and "T.vectorized(8)" in text and "c_1 in range(16)" in text  # 16 x 8 tiles
    rng = np.random.default_rng(0)
    av, xv = rng.standard_normal((1, 8, 8, 32), "float32"), rng.standard_normal((1, 32, 8, 8), "float32")
    f = tvm.compile(sch.mod, target=default_target())
    o = tvm.runtime.empty((1, 32, 8, 8), "float32")
    f["main"](tvm.runtime.tensor(av), tvm.runtime.tensor(xv), o)
    np.testing.assert_allclose(o.numpy(), np.maximum(av.transpose(0, 3, 1, 2) + xv, 0), rtol=1e-6)


@pytest.mark.parametrize("shape, axes", [((1, 14, 14, 48), (0, 3, 1, 2)), ((1, 24, 12, 12), (0, 2, 3, 1))])
def test_a_pure_transpose_loads_vectors_along_its_read_and_tiles_extents_that_16_does_not_divide(shape, axes):
    """NHWC<->NCHW at a 14- or 12-wide row: vectors along the input's unit-stride axis, tiles that
    divide the extents, the same values as numpy."""
    import tvm
    from tvm import s_tir, te

    from tvm_ext.compile_steps.llvm_schedule import transpose_tiles
    from tvm_ext.target import default_target

    a = te.placeholder(shape, name="a")
    inv = [axes.index(i) for i in range(4)]
    out = te.compute([shape[i] for i in axes], lambda *o: a[tuple(o[inv[i]] for i in range(4))], name="T")
    sch = s_tir.Schedule(te.create_prim_func([a, out]))
    steps = transpose_tiles(sch, sch.get_sblock("T"))
    assert steps and "vectorize reads" in steps[0]
    assert "T.vectorized" in sch.mod.script() and "T.unroll" in sch.mod.script()
    av = np.random.default_rng(0).standard_normal(shape, "float32")
    f = tvm.compile(sch.mod, target=default_target())
    o = tvm.runtime.empty(tuple(shape[i] for i in axes), "float32")
    f["main"](tvm.runtime.tensor(av), o)
    np.testing.assert_array_equal(o.numpy(), av.transpose(axes))


def test_constant_weights_are_packed_at_compile_time():
    from tvm_ext.compile_steps.weight_prepack import PREPROC_KEY, mark_weight_packing

    mod, ref = _mlp_module(m=16, k=64, n=96)
    model = tc.compile(mod, tensorize="always")
    prepacked = [k for k in model.report.kernels if k.name.endswith("_prepacked")]
    weights = [k for k in prepacked if "matmul" in k.ops]
    assert weights and all("packed at compile time" in k.detail for k in weights)
    # the softmax packs a run-time tensor, by a call on every run: not called compile-time packing
    assert not any("packed at compile time" in k.detail for k in prepacked if "softmax" in k.ops)
    x = model.random_inputs(4)[0]
    np.testing.assert_allclose(model(x)[0], ref(x), rtol=1e-4, atol=1e-6)
    # the kernel left in the module reads the packed weight; no packing block runs per call
    from tvm_ext.compile_steps.llvm_schedule import schedule_module

    legal = _legalized(mod)
    legal, _ = schedule_module(legal, tensorize="always")
    func = legal["fused_matmul_relu"]
    marked, names = mark_weight_packing(func)
    assert names == ["param_0"] and PREPROC_KEY in marked.script()


def test_transcendental_elementwise_kernels_parallelise_from_a_smaller_size():
    from tvm import te

    from tvm_ext.compile_steps.llvm_schedule import PARALLEL_MIN_WORK, _default_all

    a = te.placeholder((16, 512), name="a")  # 8192 < PARALLEL_MIN_WORK iterations
    plain = te.compute((16, 512), lambda i, j: a[i, j] + 1.0, name="o")
    tanh = te.compute((16, 512), lambda i, j: te.tanh(a[i, j]), name="o")
    assert 16 * 512 < PARALLEL_MIN_WORK
    assert "T.parallel" not in _default_all(te.create_prim_func([a, plain])).mod.script()
    assert "T.parallel" in _default_all(te.create_prim_func([a, tanh])).mod.script()


def _legalized(mod):
    """The module as the pipeline hands it to the llvm schedule (prepared, NHWC, legalized, fused)."""
    import tvm

    from tvm_ext.compile_steps import passes as P

    return tvm.transform.Sequential([P.PrepareForInference(), P.ConvertConvLayout(), P.LegalizeAndFuse()])(mod)


def test_register_file_tile_is_a_candidate_on_avx512_only_and_computes_the_same_product():
    """AVX-512 (32 registers) offers a 14-row x 2-vector tile beside the default 7 rows of a 28-wide
    row; AVX2 (16 registers) has no room beyond its default.  The 14-row kernel equals numpy."""
    import tvm
    from tvm import te

    from tvm_ext.compile_steps.llvm_schedule import target_variants, tensorize_primfunc
    from tvm_ext.target import default_target, hardware_facts, resolve_target

    avx512 = target_variants(resolve_target({"kind": "llvm", "mcpu": "skylake-avx512"}))
    assert {"tiles": {"rows": 14, "vector": 32}} in avx512
    assert not [v for v in target_variants(resolve_target({"kind": "llvm", "mcpu": "haswell"})) if "rows" in
                v.get("tiles", {}) and v["tiles"]["rows"] > 4]
    lanes = hardware_facts(default_target()).lanes("float32")
    x = te.placeholder((1, 4, 28, 32), name="x")
    w = te.placeholder((2 * lanes, 1, 1, 32), name="w")
    rc = te.reduce_axis((0, 32), "rc")
    y = te.compute((1, 4, 28, 2 * lanes), lambda n, i, j, f: te.sum(x[n, i, j, rc] * w[f, 0, 0, rc], axis=rc),
                   name="conv2d_nhwc")
    with default_target():
        sch, emitted, why = tensorize_primfunc(te.create_prim_func([x, w, y]),
                                               tiles={"rows": 14, "vector": 2 * lanes})
    assert sch is not None, why
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((1, 4, 28, 32), "float32"), rng.standard_normal((2 * lanes, 1, 1, 32), "float32")
    f = tvm.compile(sch.mod, target=default_target())
    o = tvm.runtime.empty((1, 4, 28, 2 * lanes), "float32")
    f["main"](tvm.runtime.tensor(xv), tvm.runtime.tensor(wv), o)
    np.testing.assert_allclose(o.numpy(), xv @ wv.reshape(2 * lanes, 32).T, rtol=1e-4, atol=1e-4)
