"""A padded convolution's input is padded per thread inside the tensorized kernel's chunk loop."""
import numpy as np
import pytest


def _conv3x3(h: int, c: int, o: int):
    from tvm import te, tirx

    x = te.placeholder((1, h, h, c), name="x")
    w = te.placeholder((o, 3, 3, c), name="w")
    xp = te.compute((1, h + 2, h + 2, c), lambda n, i, j, k: tirx.if_then_else(
        tirx.all(i >= 1, i <= h, j >= 1, j <= h), x[n, i - 1, j - 1, k], 0.0), name="pad_temp")
    ry, rx, rc = te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx"), te.reduce_axis((0, c), "rc")
    y = te.compute((1, h, h, o), lambda n, i, j, f: te.sum(xp[n, i + ry, j + rx, rc] * w[f, ry, rx, rc],
                                                             axis=[ry, rx, rc]), name="conv2d_nhwc")
    return te.create_prim_func([x, w, y])


def _reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    h = x.shape[1]
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((1, h, h, w.shape[0]), np.float64)
    for dy in range(3):
        for dx in range(3):
            out += np.einsum("nijc,oc->nijo", xp[:, dy:dy + h, dx:dx + h, :], w[:, dy, dx, :])
    return out


def test_pad_blocks_finds_the_padding_only():
    from tvm import te

    from tvm_ext.compile_steps.conv_padding import pad_blocks

    assert pad_blocks(_conv3x3(6, 8, 16)) == ["pad_temp"]
    a = te.placeholder((4, 4), name="a")
    assert pad_blocks(te.create_prim_func([a, te.compute((4, 4), lambda i, j: a[i, j] * 2, name="b")])) == []


def test_padding_per_thread_equals_numpy_and_runs_inside_the_chunk_loop():
    import tvm
    from tvm import s_tir

    from tvm_ext.compile_steps.llvm_schedule import PAD_PER_THREAD, loop_order_variants, tensorize_primfunc
    from tvm_ext.target import default_target, hardware_facts, num_threads

    threads = num_threads()
    if threads < 2:
        pytest.skip("one thread: the kernel has no chunk loop to pad in")
    lanes = hardware_facts(default_target()).lanes("float32")
    h, c, o = 4 * threads, 16, 2 * lanes
    func = _conv3x3(h, c, o)
    assert any(v.get("pad") == PAD_PER_THREAD for v in loop_order_variants(func, default_target()))
    with default_target():
        sch, emitted, why = tensorize_primfunc(func, outer="kernel", pad=PAD_PER_THREAD)
    assert sch is not None, why
    assert any("per thread" in e for e in emitted)
    fresh = s_tir.Schedule(sch.mod["main"])
    chunk = fresh.get(fresh.get_loops(fresh.get_sblock("pad_temp"))[0])
    assert int(chunk.extent) == threads and int(chunk.kind) == 1  # under the parallel chunk loop
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, h, h, c), "float32")
    w = rng.standard_normal((o, 3, 3, c), "float32")
    f = tvm.compile(sch.mod, target=default_target())
    out = tvm.runtime.empty((1, h, h, o), "float32")
    f["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    np.testing.assert_allclose(out.numpy(), _reference(x, w), rtol=1e-4, atol=1e-4)


def test_an_unknown_padding_schedule_is_a_config_error():
    from tvm_ext.compile_steps.llvm_schedule import tensorize_primfunc
    from tvm_ext.errors import ConfigError

    with pytest.raises(ConfigError, match="pad="):
        tensorize_primfunc(_conv3x3(4, 8, 16), pad="everywhere")
