"""The fused GRU layer kernel: every chain of unrolled cells becomes one call (a barrier per step),
and the layer still equals PyTorch and ONNX Runtime."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

import tvm_ext.compile as tc  # noqa: E402
from tvm_ext.compile_steps.gru_cell import (  # noqa: E402
    TARGET, fuse_gru_cells, gru_layer_primfunc, hidden_block, layer_tasks, pack_weight)
from tvm_ext.models.frontends import from_torch  # noqa: E402
from tvm_ext.models.torch_models import GRUModel  # noqa: E402


def _gru(steps: int, batch: int, hidden: int, seed: int = 0):
    torch.manual_seed(seed)
    module = GRUModel(hidden, hidden).eval()
    x = np.random.default_rng(seed).standard_normal((steps, batch, hidden)).astype(np.float32)
    return module, x


def _ort(module, x: np.ndarray) -> np.ndarray:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.from_numpy(x),), buf, dynamo=False, input_names=["x"])
    sess = ort.InferenceSession(buf.getvalue(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("steps,batch,hidden", [(5, 1, 32), (4, 2, 48), (3, 1, 16), (3, 1, 96)])
def test_the_steps_after_the_first_are_one_layer_kernel_and_equal_ort(steps, batch, hidden):
    from tvm import relax

    module, x = _gru(steps, batch, hidden)
    mod = from_torch(module, [x])
    model = tc.compile(mod, tensorize="never")
    # step 0 starts from h = 0: constant folding already removed its GEMV, so it is not a cell
    new, found = fuse_gru_cells(_prepared(mod))
    assert len(found) == 1 and [c.step for c in found[0].cells] == list(range(1, steps))
    assert found[0].concat is not None  # the output sequence is the kernel's own output
    ops = []
    relax.analysis.post_order_visit(new["main"].body, lambda e: ops.append(e.op.name) if isinstance(e, relax.Call)
                                    and hasattr(e.op, "name") else None)
    assert "relax.concat" not in ops and "relax.matmul" in ops  # the input projection stays one GEMM
    assert TARGET in model.report.targets()
    assert [k.name for k in model.report.kernels if k.name.startswith("gru_")] == ["gru_layer"]
    (y,) = model(x)
    with torch.no_grad():
        ref = module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y, _ort(module, x), rtol=1e-5, atol=1e-5)


def _prepared(mod):
    from tvm_ext.compile_steps.passes import AnnotateOpIds, PrepareForInference

    return AnnotateOpIds()(PrepareForInference()(mod))


def test_a_graph_without_the_cell_data_flow_is_left_alone():
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8), "float32"))
    w = relax.const(np.ones((8, 24), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            parts = bb.emit(relax.op.split(relax.op.matmul(x, w), 3, axis=1))
            y = bb.emit_output(relax.op.sigmoid(relax.op.add(relax.TupleGetItem(parts, 0),
                                                             relax.TupleGetItem(parts, 1))))
        bb.emit_func_output(y)
    mod = _prepared(bb.get())
    new, cells = fuse_gru_cells(mod)
    assert cells == [] and new.same_as(mod)


def test_packed_weight_holds_each_blocks_three_gate_columns_in_order():
    H = 48
    w = np.random.default_rng(1).standard_normal((H, 3 * H)).astype(np.float32)
    jb = hidden_block(H)
    p = pack_weight(w)
    assert p.shape == (H // jb, H, 3, jb) and p.flags.c_contiguous
    for jo in range(H // jb):
        for g in range(3):
            np.testing.assert_array_equal(p[jo, :, g, :], w[:, g * H + jo * jb: g * H + (jo + 1) * jb])


def _numpy_layer(h0, gi, w, bias, t0, cells):
    H = w.shape[0]
    out = [h0[0]]
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    for s in range(1, cells + 1):
        gh, g = out[-1] @ w + bias, gi[t0 + s - 1]
        r, z = sig(gh[:, :H] + g[:, :H]), sig(gh[:, H:2 * H] + g[:, H:2 * H])
        n = np.tanh(g[:, 2 * H:] + gh[:, 2 * H:] * r)
        out.append((out[-1] - n) * z + n)
    return np.stack(out)


def _layer_run(B: int, H: int, S: int, N: int, t0: int, seed: int, tasks: int | None = None):
    """(kernel output, numpy reference) of a random layer."""
    import tvm

    from tvm_ext.target import default_target

    rng = np.random.default_rng(seed)
    w = (0.2 * rng.standard_normal((H, 3 * H))).astype(np.float32)
    bias, gi = rng.standard_normal(3 * H).astype(np.float32), rng.standard_normal((S, B, 3 * H)).astype(np.float32)
    h0 = rng.standard_normal((1, B, H)).astype(np.float32)
    f = gru_layer_primfunc(B, H, S, N, tasks=tasks).with_attr("global_symbol", "main")
    ex = tvm.compile(tvm.IRModule({"main": f}), target=default_target())
    out = tvm.runtime.empty((N + 1, B, H), "float32", tvm.cpu())
    ex["main"](*[tvm.runtime.tensor(a) for a in (h0, gi, pack_weight(w), bias)], t0, out)
    return out.numpy(), _numpy_layer(h0, gi, w, bias, t0, N)


def _layer_error(B: int, H: int, S: int, N: int, t0: int, seed: int) -> float:
    out, ref = _layer_run(B, H, S, N, t0, seed)
    return float(np.max(np.abs(out - ref)))  # the states lie in (-1, 1)


def test_layer_kernel_equals_numpy():
    assert _layer_error(2, 48, 6, 4, 2, seed=0) < 1e-5


def test_serpentine_sweep_gives_the_bits_of_the_plain_order():
    """Two tasks walking their blocks back and forth sum each unit's k terms in the same order as one block
    per task: the results are identical, not just close."""
    two, ref = _layer_run(1, 128, 5, 4, 1, seed=5, tasks=2)
    four, _ = _layer_run(1, 128, 5, 4, 1, seed=5, tasks=4)
    np.testing.assert_array_equal(two, four)
    np.testing.assert_allclose(two, ref, rtol=1e-5, atol=1e-5)


def test_layer_kernel_with_three_threads_meets_every_barrier():
    """An odd pool size splits the blocks unevenly; every task still meets each step's barrier once."""
    import os
    import subprocess
    import sys

    code = "from tests.test_gru_cell import _layer_error; print(_layer_error(1, 96, 5, 4, 1, seed=3))"
    env = dict(os.environ, TVM_NUM_THREADS="3")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert res.returncode == 0, res.stderr[-2000:]
    assert float(res.stdout.strip().splitlines()[-1]) < 1e-5


def test_hidden_block_and_tasks_leave_a_parallel_loop():
    assert [hidden_block(h) for h in (512, 48, 16, 6, 2)] == [32, 16, 8, 2, 1]
    assert all(h // hidden_block(h) >= 2 for h in range(2, 200))
    assert all(layer_tasks(e, t) >= 2 and e % layer_tasks(e, t) == 0 for e in range(2, 40) for t in (1, 2, 3, 16))


def test_small_layers_run_on_the_calling_thread_and_large_ones_in_one_launch():
    small, large = gru_layer_primfunc(1, 32, 4, 3).script(), gru_layer_primfunc(1, 512, 4, 3).script()
    assert "pragma_parallel_launch_point" not in small and "T.parallel" not in small
    assert "pragma_parallel_launch_point" in large and "pragma_parallel_barrier_when_finish" in large
