"""The small-M matmul (GEMV / row-tile panel) schedule rule (tvm_ext.compile_steps.gemv_schedule) against numpy and ORT."""
import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import te  # noqa: E402

from tvm_ext.compile_steps.gemv_schedule import (  # noqa: E402
    column_block, gemv_candidate, gemv_schedule, gemv_shape)
from tvm_ext.target import resolve_target  # noqa: E402


def _dense(m: int, k: int, n: int, transposed: bool = False, relu: bool = True):
    """``relu(x @ W + b)`` (``W`` stored ``[K, N]``, or ``[N, K]`` when ``transposed``), as legalization writes it."""
    x = te.placeholder((m, k), name="x")
    w = te.placeholder((n, k) if transposed else (k, n), name="w")
    b = te.placeholder((n,), name="b")
    r = te.reduce_axis((0, k), "r")
    mm = te.compute((m, n), lambda i, j: te.sum(x[i, r] * (w[j, r] if transposed else w[r, j]), axis=r),
                    name="matmul")
    add = te.compute((m, n), lambda i, j: mm[i, j] + b[j], name="T_add")
    out = te.compute((m, n), lambda i, j: te.max(add[i, j], 0.0), name="relu") if relu else add
    return te.create_prim_func([x, w, b, out])


def _run(func, *arrays, out_shape):
    mod = tvm.compile(func.with_attr("global_symbol", "main"), target=resolve_target(None))
    args = [tvm.runtime.tensor(a) for a in arrays] + [tvm.runtime.tensor(np.zeros(out_shape, "float32"))]
    mod["main"](*args)
    return args[-1].numpy()


def _inputs(m, k, n, transposed, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)).astype("float32")
    w = rng.standard_normal((n, k) if transposed else (k, n)).astype("float32")
    b = rng.standard_normal(n).astype("float32")
    ref = np.maximum(x @ (w.T if transposed else w) + b, 0.0)
    return x, w, b, ref


@pytest.mark.parametrize("m,k,n,transposed,lanes,registers", [
    (1, 96, 64, False, 16, 32), (1, 100, 128, True, 8, 16), (3, 64, 96, False, 8, 16), (4, 36, 256, True, 16, 32),
    (32, 64, 192, False, 16, 32), (6, 20, 48, True, 8, 16)])
def test_gemv_schedule_matches_numpy(m, k, n, transposed, lanes, registers):
    func = _dense(m, k, n, transposed)
    x, w, b, ref = _inputs(m, k, n, transposed)
    sch = gemv_schedule(func, lanes, registers, threads=2)
    assert sch is not None
    np.testing.assert_allclose(_run(sch.mod["main"], x, w, b, out_shape=(m, n)), ref, rtol=1e-4, atol=1e-4)


def test_timed_form_reads_the_weight_packed_per_column_block():
    """``pack="param"`` takes W as ``[N / JB, K, JB]`` and computes the same as the copy-packing kernel."""
    m, k, n, lanes = 1, 48, 64, 8
    func = _dense(m, k, n)
    x, w, b, ref = _inputs(m, k, n, False, seed=1)
    copy = gemv_schedule(func, lanes, 16, threads=2, pack="copy").mod["main"]
    timed = gemv_schedule(func, lanes, 16, threads=2, pack="param").mod["main"]
    jb = column_block(n, m, lanes, 16, 2) * lanes
    packed = np.ascontiguousarray(w.reshape(k, n // jb, jb).transpose(1, 0, 2))
    assert [int(d) for d in timed.params[1].shape] == [n // jb, k, jb]
    np.testing.assert_allclose(_run(timed, x, packed, b, out_shape=(m, n)), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(_run(copy, x, w, b, out_shape=(m, n)), ref, rtol=1e-4, atol=1e-4)


def test_shapes_it_declines():
    from tvm import s_tir

    from tvm_ext.compile_steps.llvm_schedule import _root_blocks

    def shape_of(func):
        sch = s_tir.Schedule(func)
        return gemv_shape(sch, _root_blocks(sch)[0])

    assert shape_of(_dense(1, 64, 32)) is not None and shape_of(_dense(1, 64, 32, True)).transposed
    assert shape_of(_dense(32, 64, 32)).rows == 32
    assert shape_of(_dense(64, 64, 32)) is None  # 64 rows: a GEMM micro-kernel's job
    assert gemv_schedule(_dense(1, 64, 10), 16) is None  # 10 columns: no whole vector
    x = te.placeholder((1, 8, 8, 4), name="x")  # a 2-D convolution is no matmul
    wt = te.placeholder((4, 4, 3, 3), name="wt")
    rc, ry, rx = te.reduce_axis((0, 4), "rc"), te.reduce_axis((0, 3), "ry"), te.reduce_axis((0, 3), "rx")
    conv = te.compute((1, 4, 6, 6), lambda n, f, i, j: te.sum(x[n, i + ry, j + rx, rc] * wt[f, rc, ry, rx],
                                                             axis=[rc, ry, rx]), name="conv")
    assert gemv_schedule(te.create_prim_func([x, wt, conv]), 8) is None


def test_column_block_fits_the_registers_and_feeds_every_thread():
    for lanes, regs in ((8, 16), (16, 32)):
        for rows in (1, 2, 4):
            for n in (lanes * v for v in (1, 2, 4, 8, 32, 64)):
                u = column_block(n, rows, lanes, regs, threads=2)
                assert u >= 1 and (n // lanes) % u == 0
                assert rows * u + 2 * rows <= regs or u == 1
                assert n // (u * lanes) >= 4 or u == 1


def test_batch_one_mlp_offers_the_gemv_candidate_and_equals_ort():
    pytest.importorskip("onnxruntime")
    from bench.models import cases
    from tvm_ext.compile import compile as compile_model, max_rel_err
    from tvm_ext.compile_steps.llvm_schedule import schedule_primfunc
    from tvm_ext.models.peers import ort_runner

    case = cases(True, "tiny")["mlp-512"]()  # 24-16-16-4 at batch 1
    model = compile_model(case.relax_module())
    got = model(*case.inputs)
    assert max_rel_err(got, ort_runner(case.onnx, 2)(*case.inputs)) < 1e-5
    func = _dense(1, 64, 128)
    assert gemv_candidate(func, resolve_target(None)) is not None
    _, how = schedule_primfunc(func, "dense", target=resolve_target(None))
    assert "gemv" in how.candidates  # measured beside the tensorized and default schedules
