"""Kernel-order candidates of the llvm schedule: offered when the B operand fits in the L2, and correct."""
import numpy as np
import pytest


def _conv1x1(h: int, w: int, c: int, o: int):
    from tvm import te

    x = te.placeholder((1, h, w, c), name="x")
    wt = te.placeholder((o, 1, 1, c), name="w")
    rc = te.reduce_axis((0, c), "rc")
    y = te.compute((1, h, w, o), lambda n, i, j, f: te.sum(x[n, i, j, rc] * wt[f, 0, 0, rc], axis=rc),
                   name="conv2d_nhwc")
    return te.create_prim_func([x, wt, y])


def _matmul(k: int, n: int):
    from tvm import te

    a = te.placeholder((64, k), name="a")
    b = te.placeholder((k, n), name="b")
    r = te.reduce_axis((0, k), "r")
    return te.create_prim_func([a, b, te.compute((64, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")])


@pytest.mark.parametrize("mcpu", ["skylake-avx512", "haswell"])
def test_kernel_order_is_offered_only_when_the_whole_b_operand_fits_in_the_l2(mcpu):
    from tvm_ext.compile_steps.kernel_variants import KERNEL_ORDER, loop_order_variants, register_file_rows
    from tvm_ext.target import hardware_facts, resolve_target

    tgt = resolve_target({"kind": "llvm", "mcpu": mcpu})
    facts = hardware_facts(tgt)
    small = loop_order_variants(_conv1x1(8, 8, 64, 256), tgt)  # 64 x 256 floats: 64 KiB
    assert small and all(v["outer"] == KERNEL_ORDER["outer"] for v in small)
    wide = [v for v in small if "tiles" in v]
    if register_file_rows(facts) > facts.accumulator_registers // 2:  # AVX-512: the full-register-file tile too
        assert wide == [{"tiles": {"rows": register_file_rows(facts), "vector": 2 * facts.lanes("float32")},
                         "outer": "kernel"}]
    else:
        assert wide == []
    side = int(np.sqrt(facts.l2_bytes // 4)) + 16  # a B of side x side floats: more than the whole L2
    assert loop_order_variants(_matmul(side, side), tgt) == ()


def test_kernel_order_convolution_equals_numpy():
    import tvm

    from tvm_ext.compile_steps.candidate_timing import tvm_ffi_hash
    from tvm_ext.compile_steps.llvm_schedule import loop_order_variants, tensorize_primfunc
    from tvm_ext.target import default_target

    func = _conv1x1(4, 28, 64, 128)
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((1, 4, 28, 64), "float32")
    wv = rng.standard_normal((128, 1, 1, 64), "float32")
    want = xv @ wv.reshape(128, 64).T
    variants = loop_order_variants(func, default_target())
    assert variants
    with default_target():
        panel = tensorize_primfunc(func, outer="panel")[0]
    for knobs in variants:
        with default_target():
            sch, emitted, why = tensorize_primfunc(func, **knobs)
        assert sch is not None, why
        assert tvm_ffi_hash(sch.mod["main"]) != tvm_ffi_hash(panel.mod["main"])  # the loops are ordered otherwise
        f = tvm.compile(sch.mod, target=default_target())
        out = tvm.runtime.empty((1, 4, 28, 128), "float32")
        f["main"](tvm.runtime.tensor(xv), tvm.runtime.tensor(wv), out)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-4)


def test_candidates_are_timed_with_their_weight_packing_split_out():
    """The timed form of a tensorized kernel takes its weight packed (no ``*_global`` copy left), as a model
    with constant weights runs it after weight prepacking; it still runs and is timed."""
    from tvm import s_tir

    from tvm_ext.compile_steps.candidate_timing import measure_candidates, param_buffers, prepacked_compute
    from tvm_ext.compile_steps.llvm_schedule import tensorize_primfunc
    from tvm_ext.target import default_target

    func = _conv1x1(4, 28, 64, 128)
    with default_target():
        sch, _, why = tensorize_primfunc(func)
    assert sch is not None, why
    shipped = sch.mod["main"]
    timed = prepacked_compute(shipped, default_target())

    def names(f):
        s = s_tir.Schedule(f)
        return {s.get(b).name_hint for b in s.get_child_blocks(s.get_sblock("root"))}

    assert any(n.endswith("_global") for n in names(shipped))
    assert not any(n.endswith("_global") for n in names(timed))
    shapes = [tuple(int(d) for d in b.shape) for b in param_buffers(timed)]
    assert shapes[0] == (1, 4, 28, 64) and shapes[-1] == (1, 4, 28, 128)
    assert shapes[1] != (128, 1, 1, 64) and int(np.prod(shapes[1])) >= 128 * 64  # the weight, in panels
    times = measure_candidates({"timed": timed}, default_target())
    assert 0 < times["timed"] < 1.0
