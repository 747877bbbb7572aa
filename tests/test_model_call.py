"""``model(x)`` on numpy: equal to ONNX Runtime, no copy of inputs or outputs, and one clear error
for each kind of bad input (shape, dtype, layout, missing or extra input, a file that is no model)."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import tvm_ext.compile as tc  # noqa: E402
from tvm_ext.errors import InputError, ShapeError, TvmExtError  # noqa: E402
from tvm_ext.models.frontends import from_onnx, load_model  # noqa: E402
from tvm_ext.models.onnx_models import bottleneck_onnx, gcn_onnx, mlp_onnx  # noqa: E402
from tvm_ext.models.zoo import small_graph  # noqa: E402
from tvm_ext.zero_copy import empty_aligned, is_aligned  # noqa: E402

#: Small versions of the benchmark's graphs: (name, builder, compile options).
CONFIGS = {
    "mlp": (lambda: mlp_onnx([32, 64, 48, 10], batch=4), {}),
    "mlp-batch1-softmax": (lambda: mlp_onnx([24, 16, 8], batch=1, softmax=True), {}),
    "bottleneck": (lambda: bottleneck_onnx(16, 8, 6, c_out=32), {"tensorize": "never"}),
    "gcn": (lambda: gcn_onnx(small_graph(), 24, 16, 4), {}),
}


def _ort(proto, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 2, 1
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.fixture(scope="module")
def mlp():
    proto = mlp_onnx([32, 64, 10], batch=4)
    return proto, tc.compile(from_onnx(proto), tensorize="never")


class _Spy:
    """Wraps the VM function ``model(x)`` calls; remembers its arguments and result."""

    def __init__(self, fn):
        self.fn, self.args, self.result = fn, None, None

    def __call__(self, *args):
        self.args = args
        self.result = self.fn(*args)
        return self.result


def _address(arg) -> int:
    """Data address of an argument the VM function got: a numpy array (the hot path hands the caller's
    array itself to the FFI call, which takes its DLPack view) or a TVM tensor."""
    return arg.ctypes.data if isinstance(arg, np.ndarray) else arg.data_ptr()


def _spy(model) -> _Spy:
    spy = _Spy(model._call.function)
    model._call.function = spy
    return spy


@pytest.mark.parametrize("name", CONFIGS)
def test_model_call_equals_onnx_runtime(name):
    build, opts = CONFIGS[name]
    proto = build()
    model = tc.compile(from_onnx(proto), **opts)
    x = model.random_inputs(7)[0]
    out = model(x)
    assert len(out) == 1
    np.testing.assert_allclose(out[0], _ort(proto, x), rtol=1e-4, atol=1e-4)
    named = model(x=x)[0]  # by name, same result
    np.testing.assert_array_equal(named, out[0])


def test_outputs_are_the_buffers_the_vm_wrote_and_inputs_are_read_in_place(mlp):
    proto, model = mlp
    spy = _spy(model)
    x = model.random_inputs(1)[0]
    assert is_aligned(x)
    (y,) = model(x)
    (arg,) = spy.args
    assert _address(arg) == x.ctypes.data  # the kernels read the caller's array
    assert y.ctypes.data == spy.result.data_ptr()  # the output is the VM's tensor, not a copy
    base = y
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert not isinstance(base, np.ndarray)  # the chain ends in the DLPack capsule that holds the tensor
    spy.result = None  # the array alone keeps the VM's tensor alive
    np.testing.assert_allclose(y, _ort(proto, x), rtol=1e-4, atol=1e-4)
    assert model._call.aligned_copies == 0


def test_the_ffi_views_a_numpy_argument_without_a_copy():
    """A function returning its parameter gives back the caller's buffer: the numpy array handed to the
    VM function crossed the FFI as a DLPack view, not a copy."""
    import tvm
    from tvm import relax

    from tvm_ext.model_call import NumpyCall

    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((5, 3), "float32"))
    with bb.function("main", [a]):
        bb.emit_func_output(a)
    call = NumpyCall(relax.VirtualMachine(tvm.compile(bb.get(), "llvm"), tvm.cpu()), [("a", (5, 3), "float32")])
    x = np.arange(15, dtype="float32").reshape(5, 3)
    (y,) = call(x)
    assert y.ctypes.data == x.ctypes.data
    np.testing.assert_array_equal(y, x)


def test_read_only_input_works_without_a_copy(mlp):
    proto, model = mlp
    spy = _spy(model)
    x = model.random_inputs(2)[0]
    x.flags.writeable = False
    (y,) = model(x)
    assert _address(spy.args[0]) == x.ctypes.data
    np.testing.assert_allclose(y, _ort(proto, np.array(x)), rtol=1e-4, atol=1e-4)
    assert not x.flags.writeable


def _off_by_16(x: np.ndarray) -> np.ndarray:
    """A copy of ``x`` 16 bytes past a 64-byte boundary (where numpy often puts a fresh array)."""
    raw = empty_aligned(x.nbytes + 16, "uint8")
    off = raw[16:].view(x.dtype).reshape(x.shape)
    off[...] = x
    return off


def _add_mul_module():
    from tvm import relax

    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((64, 256), "float32"))
    b = relax.Var("b", relax.TensorType((64, 256), "float32"))
    with bb.function("main", [a, b]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.add(relax.op.multiply(a, b), a))
        bb.emit_func_output(out)
    return bb.get()


def test_misaligned_input_is_read_in_place_and_the_result_is_right():
    """The kernels declare element-aligned parameters: a 16-byte-aligned input is read where it lies
    (TVM's 64-byte declaration makes LLVM emit aligned moves that crash on it)."""
    model = tc.compile(_add_mul_module())
    assert model.input_alignment == 0
    spy = _spy(model)
    xa, xb = model.random_inputs(3)
    off = _off_by_16(xa)
    assert off.ctypes.data % 64 == 16
    (y,) = model(off, xb)
    np.testing.assert_allclose(y, xa * xb + xa, rtol=1e-5, atol=1e-6)  # FMA rounds once
    assert model._call.aligned_copies == 0
    assert _address(spy.args[0]) == off.ctypes.data and _address(spy.args[1]) == xb.ctypes.data


def test_misaligned_input_of_a_matmul_model_is_read_in_place(mlp):
    proto, model = mlp
    spy = _spy(model)
    x = _off_by_16(model.random_inputs(7)[0])
    (y,) = model(x)
    assert _address(spy.args[0]) == x.ctypes.data and model._call.aligned_copies == 0
    np.testing.assert_allclose(y, _ort(proto, np.array(x)), rtol=1e-4, atol=1e-4)


def test_a_module_with_tvms_alignment_copies_a_misaligned_input_once():
    """``llvm_only`` keeps TVM's 64-byte declarations: the misaligned input is copied, the aligned one is not."""
    model = tc.llvm_only(_add_mul_module())
    assert model.input_alignment == 64
    spy = _spy(model)
    xa, xb = model.random_inputs(3)
    off = _off_by_16(xa)
    (y,) = model(off, xb)
    np.testing.assert_allclose(y, xa * xb + xa, rtol=1e-5, atol=1e-6)
    assert model._call.aligned_copies == 1
    assert _address(spy.args[0]) != off.ctypes.data and _address(spy.args[1]) == xb.ctypes.data


def test_an_output_the_caller_keeps_is_never_overwritten(mlp):
    proto, model = mlp
    x1, x2 = model.random_inputs(1)[0], model.random_inputs(2)[0]
    (y1,) = model(x1)
    kept = y1.copy()
    for _ in range(3):
        (y2,) = model(x2)
        assert not np.shares_memory(y1, y2)
    np.testing.assert_array_equal(y1, kept)
    np.testing.assert_allclose(y2, _ort(proto, x2), rtol=1e-4, atol=1e-4)


def test_dropped_outputs_are_recycled_without_page_faults():
    """Output buffers come back from the VM's pool: steady-state calls reuse a few mapped buffers."""
    import resource

    from tvm import relax

    shape = (1024, 2048)  # 8 MiB: a fresh allocation would map (and fault) 2048 pages
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.relu(x))
        bb.emit_func_output(y)
    model = tc.compile(bb.get())
    (xs,) = model.random_inputs(0)
    for _ in range(3):
        model(xs)
    addresses = set()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        (y,) = model(xs)
        addresses.add(y.ctypes.data)
        del y
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    assert len(addresses) <= 3
    assert faults < 10 * 2048 // 8
    np.testing.assert_array_equal(model(xs)[0], np.maximum(xs, 0))


def test_bad_inputs_are_one_clear_error_each(mlp):
    _, model = mlp
    x = model.random_inputs(0)[0]
    with pytest.raises(ShapeError, match=r"input 'x': expected shape \(4, 32\) float32, got shape \(4, 31\)"):
        model(np.zeros((4, 31), "float32"))
    with pytest.raises(InputError, match=r"input 'x': expected shape \(4, 32\) float32, got dtype float64"):
        model(x.astype("float64"))
    with pytest.raises(InputError, match="input 'x': not C-contiguous"):
        model(np.asfortranarray(x))
    with pytest.raises(InputError, match="input 'x': not C-contiguous"):
        model(np.zeros((4, 64), "float32")[:, ::2])
    with pytest.raises(InputError, match=r"takes 1 inputs \(x \(shape \(4, 32\) float32\)\), got 0: missing input 'x'"):
        model()
    with pytest.raises(InputError, match="takes 1 inputs.*got 2"):
        model(x, x)
    with pytest.raises(InputError, match="unknown input 'y'; the model's inputs are x"):
        model(x, y=x)
    with pytest.raises(InputError, match="'x' given both by position and by name"):
        model(x, x=x)


def test_missing_one_of_two_inputs_names_it():
    from tvm import relax

    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((2, 3), "float32"))
    b = relax.Var("b", relax.TensorType((3,), "int32"))
    with bb.function("main", [a, b]):
        bb.emit_func_output(bb.emit(relax.op.add(a, relax.op.astype(b, "float32"))))
    model = tc.compile(bb.get(), tensorize="never")
    with pytest.raises(InputError, match=r"missing input 'b' \(shape \(3,\) int32\)"):
        model(np.zeros((2, 3), "float32"))
    with pytest.raises(InputError, match="input 'b'.*got dtype int64"):
        model(a=np.zeros((2, 3), "float32"), b=np.arange(3))
    y = model(b=np.arange(3, dtype="int32"), a=np.ones((2, 3), "float32"))[0]
    np.testing.assert_array_equal(y, [[1, 2, 3], [1, 2, 3]])


def test_a_file_that_is_not_a_model_is_one_input_error(tmp_path):
    text = "layer sizes: 784 512 10\n"
    for name, match in [("notes.onnx", "not a valid ONNX protobuf"),
                        ("notes.pt2", "not a torch.export archive"),
                        ("notes.txt", "unknown format '.txt'; expected .onnx or .pt2")]:
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(TvmExtError, match=match) as info:
            load_model(path)
        assert isinstance(info.value, InputError) and name in str(info.value)


def test_tuple_outputs_come_back_as_views_too():
    from tvm import relax

    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((3, 4), "float32"))
    with bb.function("main", [a]):
        with bb.dataflow():
            s = bb.emit(relax.op.add(a, a))
            p = bb.emit(relax.op.multiply(a, a))
            out = bb.emit_output(relax.Tuple([s, p]))
        bb.emit_func_output(out)
    model = tc.compile(bb.get(), tensorize="never")
    spy = _spy(model)
    (x,) = model.random_inputs(5)
    s, p = model(x)
    np.testing.assert_allclose(s, x + x, rtol=1e-6)
    np.testing.assert_allclose(p, x * x, rtol=1e-6)
    assert [s.ctypes.data, p.ctypes.data] == [t.data_ptr() for t in spy.result]


@pytest.mark.parametrize("suffix", [".onnx", ".pt2"])
def test_a_model_path_that_is_a_fifo_is_not_a_regular_file(tmp_path, suffix):
    """A FIFO would block the reader forever: it is refused by name, not read."""
    import os

    from tvm_ext.errors import InputError
    from tvm_ext.models import frontends

    fifo = tmp_path / f"model{suffix}"
    os.mkfifo(fifo)
    load = frontends.load_onnx if suffix == ".onnx" else frontends.from_exported_program_file
    with pytest.raises(InputError, match="not a regular file"):
        load(str(fifo))
    with pytest.raises(InputError, match="no such file"):
        load(str(tmp_path / f"missing{suffix}"))


def test_the_hot_path_hands_over_the_arrays_and_a_refused_input_takes_the_checked_path():
    """Two inputs: arrays that pass the checks go to the VM function themselves; a dtype equal to the
    planned one but another descriptor object still does; a read-only second input is viewed by the
    checked path (a TVM tensor over the same memory); a non-contiguous one is an error naming it."""
    model = tc.compile(_add_mul_module())
    spy = _spy(model)
    xa, xb = model.random_inputs(4)
    (y,) = model(xa, xb)
    assert all(type(a) is np.ndarray for a in spy.args)
    assert [_address(a) for a in spy.args] == [xa.ctypes.data, xb.ctypes.data]
    np.testing.assert_allclose(y, xa * xb + xa, rtol=1e-5, atol=1e-6)
    tagged = np.dtype("float32", metadata={"unit": "m"})  # == float32, not the same object
    assert tagged == xa.dtype and tagged is not xa.dtype
    (y2,) = model(xa.view(tagged), xb)
    assert type(spy.args[0]) is np.ndarray
    np.testing.assert_array_equal(y2, y)
    ro = xb.copy()
    ro.flags.writeable = False
    (y3,) = model(xa, ro)
    assert type(spy.args[1]) is not np.ndarray and _address(spy.args[1]) == ro.ctypes.data
    np.testing.assert_array_equal(y3, y)
    with pytest.raises(InputError, match="input 'b': not C-contiguous"):
        model(xa, np.asfortranarray(xb))


def test_replacing_the_function_rebuilds_the_hot_path(mlp):
    """``NumpyCall.function`` is what both paths call: setting it is seen by the next call."""
    _, model = mlp
    x = model.random_inputs(3)[0]
    calls = []
    original = model._call.function
    model._call.function = lambda *args: calls.append(len(args)) or original(*args)
    try:
        (y,) = model(x)
        model(x=x)  # by name: the checked path
    finally:
        model._call.function = original
    assert calls == [1, 1]
    np.testing.assert_array_equal(y, model(x)[0])


def test_prepared_tensors_view_the_callers_arrays(mlp):
    """What ``bench.models.call_overhead_us`` compares ``model(x)`` against, the VM function on
    ``model._tensors(xs)``, reads the same memory as ``model(x)``: the tensors are views, not copies."""
    _, model = mlp
    x = model.random_inputs(5)[0]
    ro = x.copy()
    ro.flags.writeable = False
    for a in (x, ro):
        (t,) = model._tensors([a])
        assert t.data_ptr() == a.ctypes.data and tuple(t.shape) == a.shape
    np.testing.assert_array_equal(np.from_dlpack(model.vm["main"](*model._tensors([x]))), model(x)[0])


def test_a_dropped_model_is_freed_without_the_cycle_collector():
    """The call path holds no reference cycle: the VM (and its weights) go when the last reference does."""
    import gc
    import weakref

    model = tc.compile(_add_mul_module())
    model(*model.random_inputs(0))
    refs = [weakref.ref(model), weakref.ref(model._call)]
    gc.disable()
    try:
        del model
        assert [r() for r in refs] == [None, None]
    finally:
        gc.enable()


def test_an_error_of_the_vm_function_on_right_inputs_is_raised_as_it_is(mlp):
    """A failure inside the VM function on inputs that match the plan is not blamed on the input."""
    _, model = mlp
    x = model.random_inputs(0)[0]
    original = model._call.function

    def failing(*args):
        raise RuntimeError("kernel failed")

    model._call.function = failing
    try:
        with pytest.raises(RuntimeError, match="kernel failed"):
            model(x)
    finally:
        model._call.function = original
    np.testing.assert_array_equal(model(x)[0], model(x.copy())[0])
