"""The fused GRU step kernel: every unrolled cell becomes one call, and the layer still equals
PyTorch and ONNX Runtime."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

import tvm_ext.compile as tc  # noqa: E402
from tvm_ext.compile_steps.gru_cell import fuse_gru_cells, hidden_block, pack_weight  # noqa: E402
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


@pytest.mark.parametrize("steps,batch,hidden", [(5, 1, 32), (4, 2, 48)])
def test_every_step_after_the_first_is_one_fused_kernel_and_equals_ort(steps, batch, hidden):
    module, x = _gru(steps, batch, hidden)
    mod = from_torch(module, [x])
    model = tc.compile(mod, tensorize="never")
    # step 0 starts from h = 0: constant folding already removed its GEMV, so it is not a cell
    _, cells = fuse_gru_cells(_prepared(mod))
    assert [c.step for c in cells] == list(range(1, steps))
    assert "llvm/gru-cell" in model.report.targets()
    assert [k.name for k in model.report.kernels if k.name.startswith("gru_cell")] == ["gru_cell"]
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
