"""``model(x)``'s C path (:mod:`tvm_ext.native_call`): the same arrays and the same errors as the
Python hot path, no reference left behind, outputs and inputs kept alive as long as they are used,
and the Python path when the C one cannot be built."""
from __future__ import annotations

import gc
import sys
import threading

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import tvm_ext.compile as tc  # noqa: E402
from tvm_ext import native_call  # noqa: E402
from tvm_ext.errors import ConfigError, InputError  # noqa: E402
from tvm_ext.model_call import NumpyCall  # noqa: E402
from tvm_ext.models.frontends import from_onnx  # noqa: E402
from tvm_ext.models.onnx_models import mlp_onnx  # noqa: E402
from tvm_ext.zero_copy import empty_aligned  # noqa: E402

pytestmark = pytest.mark.skipif(native_call.native_module() is None,
                                reason=f"no C path here: {native_call.unavailable_reason()}")


def _ort(proto, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _python_path(model) -> NumpyCall:
    return NumpyCall(model.vm, model.specs, alignment=model.input_alignment, native=False)


def _outcome(call, *args, **named):
    """The arrays ``call`` returns, or (exception type, message) of what it raises."""
    try:
        return [np.array(a) for a in call(*args, **named)]
    except Exception as e:  # noqa: BLE001 - compared between the two paths
        return type(e), str(e)


def _relax_model(build):
    """A model compiled from the Relax function ``build(bb)`` emits into ``main``."""
    from tvm import relax

    bb = relax.BlockBuilder()
    build(bb, relax)
    return tc.compile(bb.get(), tensorize="never")


def _identity(bb, relax):
    a = relax.Var("a", relax.TensorType((5, 3), "float32"))
    with bb.function("main", [a]):
        bb.emit_func_output(a)


@pytest.fixture(scope="module")
def mlp():
    proto = mlp_onnx([32, 64, 10], batch=4)
    return proto, tc.compile(from_onnx(proto), tensorize="never")


@pytest.mark.parametrize("sizes, batch", [([32, 64, 10], 4), ([24, 16, 8], 1)])
def test_the_c_path_equals_the_python_path_and_onnx_runtime(sizes, batch):
    proto = mlp_onnx(sizes, batch=batch, softmax=batch == 1)
    model = tc.compile(from_onnx(proto), tensorize="never")
    assert model._call.call_path == "native" and type(model.__call__).__name__ == "NativeCall"
    x = model.random_inputs(3)[0]
    (y,) = model(x)
    np.testing.assert_allclose(y, _ort(proto, x), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(y, _python_path(model)(x)[0])
    assert y.flags.c_contiguous and y.flags.writeable and y.dtype == np.float32
    assert type(y.base).__name__ == "PyCapsule"  # the capsule owns the VM's tensor


def _two_outputs_onnx():
    """``x (4, 8)``: ``y = x @ w + b`` and ``relu(y)``, two graph outputs (a tuple from the VM)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((8, 6)).astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal(6).astype("float32"), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"]),
             helper.make_node("Relu", ["y"], ["r"])]
    graph = helper.make_graph(nodes, "two_outputs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 6]) for n in ("y", "r")],
                              initializer=[w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _nested(bb, relax):
    """``(a + b, (a * b, a + b), ())``: nested, one tensor twice, an empty tuple."""
    a = relax.Var("a", relax.TensorType((3, 4), "float32"))
    b = relax.Var("b", relax.TensorType((3, 4), "float32"))
    with bb.function("main", [a, b]):
        with bb.dataflow():
            s, p = bb.emit(relax.op.add(a, b)), bb.emit(relax.op.multiply(a, b))
            out = bb.emit_output(relax.Tuple([s, relax.Tuple([p, s]), relax.Tuple([])]))
        bb.emit_func_output(out)


def _tensor_and_shape(bb, relax):
    """``(a + a, shape (3, 4), (a,))``: a shape among the tensors (the Python conversion's case)."""
    a = relax.Var("a", relax.TensorType((3, 4), "float32"))
    with bb.function("main", [a]):
        bb.emit_func_output(relax.Tuple([bb.emit(relax.op.add(a, a)), relax.ShapeExpr([3, 4]), relax.Tuple([a])]))


def _spied(model):
    """The model's VM function on the C path, with a counter of the results handed to ``numpy_outputs``."""
    from tvm_ext.model_call import numpy_outputs

    relayed = []

    def outputs(value):
        relayed.append(value)
        return numpy_outputs(value)

    fn = model.vm["main"]
    call = native_call.native_call(fn, [(s, d) for _, s, d in model.specs], lambda i, n: None, outputs)
    return call, relayed


def test_a_tuple_of_tensors_is_converted_in_c_as_the_python_path_does():
    """Two ONNX outputs (a tuple) and a nested tuple with a tensor twice and an empty tuple: the same
    flat list, in the same order, as the Python path, ONNX Runtime and numpy; ``numpy_outputs`` never runs."""
    proto = _two_outputs_onnx()
    model = tc.compile(from_onnx(proto), tensorize="never")
    x = model.random_inputs(1)[0]
    y, r = model(x)
    expected = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for got, ref, python in zip((y, r), expected, _python_path(model)(x)):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got, python)
        assert type(got.base).__name__ == "PyCapsule" and got.flags.writeable and got.flags.c_contiguous

    nested = _relax_model(_nested)
    xa, xb = nested.random_inputs(2)
    outs = nested(xa, xb)
    assert len(outs) == 3
    for got, ref, python in zip(outs, (xa + xb, xa * xb, xa + xb), _python_path(nested)(xa, xb)):
        np.testing.assert_allclose(got, ref, rtol=1e-6)
        np.testing.assert_array_equal(got, python)
    assert outs[0].ctypes.data == outs[2].ctypes.data  # one tensor twice: two views of its buffer
    for got, expected_out in zip(nested(b=xb, a=xa), outs):  # by name: the checked path
        np.testing.assert_array_equal(got, expected_out)
    for m, args in ((model, (x,)), (nested, (xa, xb))):
        call, relayed = _spied(m)
        for got, expected_out in zip(call(*args), m(*args)):
            np.testing.assert_array_equal(got, expected_out)
        assert relayed == []


def test_a_tuple_with_a_non_tensor_goes_through_the_python_conversion():
    model = _relax_model(_tensor_and_shape)
    x = model.random_inputs(2)[0]
    got, expected = _outcome(model, x), _outcome(_python_path(model), x)
    assert len(got) == len(expected) and len(got) >= 2
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    np.testing.assert_allclose(got[0], x + x, rtol=1e-6)
    np.testing.assert_array_equal(got[-1], x)  # the input itself, last
    call, relayed = _spied(model)
    for g, e in zip(call(x), got):
        np.testing.assert_array_equal(g, e)
    assert len(relayed) == 1  # the whole result went to numpy_outputs, once


def test_tuple_results_leave_no_reference_behind_and_outlive_their_model():
    """1000 calls of a nested-tuple function: the inputs' and the call's reference counts and the pool's
    buffers back where they were; outputs (one of them viewing the caller's input) outlive the model."""
    model = _relax_model(_nested)
    xa, xb = model.random_inputs(3)
    call = model._call.call
    for _ in range(20):
        model(xa, xb)
    before = sys.getrefcount(xa), sys.getrefcount(xb), sys.getrefcount(call)
    addresses = set()
    for _ in range(1000):
        outs = model(xa, xb)
        addresses.update(o.ctypes.data for o in outs)
        del outs
    gc.collect()
    assert (sys.getrefcount(xa), sys.getrefcount(xb), sys.getrefcount(call)) == before
    assert len(addresses) <= 6  # each output's tensor went back to the VM's pool

    shape = _relax_model(_tensor_and_shape)
    x = np.arange(12, dtype="float32").reshape(3, 4)
    refs = sys.getrefcount(x)
    outs = model(xa, xb)
    kept = shape(x)
    assert sys.getrefcount(x) - refs == 1  # the last output views the input and holds it
    del model, shape, x
    gc.collect()
    np.testing.assert_allclose(outs[1], xa * xb, rtol=1e-6)
    np.testing.assert_array_equal(kept[-1], np.arange(12, dtype="float32").reshape(3, 4))
    np.testing.assert_array_equal(kept[0], 2 * kept[-1])


def test_bad_inputs_raise_what_the_python_path_raises(mlp):
    _, model = mlp
    python = _python_path(model)
    x = model.random_inputs(0)[0]
    cases = [((np.zeros((4, 31), "float32"),), {}), ((x.astype("float64"),), {}), ((x.astype(">f4"),), {}),
             ((np.asfortranarray(x),), {}), ((np.zeros((4, 64), "float32")[:, ::2],), {}), ((), {}),
             ((x, x), {}), ((x,), {"y": x}), ((x,), {"x": x}), ((x.tolist(),), {}), ((None,), {})]
    for args, named in cases:
        native, expected = _outcome(model, *args, **named), _outcome(python, *args, **named)
        assert isinstance(expected, tuple) and issubclass(expected[0], InputError), (args, named)
        assert native == expected, (args, named)


def test_refused_but_usable_inputs_take_the_checked_path_and_give_the_same_result(mlp):
    """Read-only (viewed through an alias), off a 64-byte boundary (read in place), off its element's
    alignment (copied once), a dtype equal to the planned one but another object: all as the Python path."""
    proto, model = mlp
    x = model.random_inputs(4)[0]
    expected = _ort(proto, x)
    ro = x.copy()
    ro.flags.writeable = False
    raw = empty_aligned(x.nbytes + 16, "uint8")
    off16 = raw[16:].view(x.dtype).reshape(x.shape)
    off16[...] = x
    raw1 = empty_aligned(x.nbytes + 1, "uint8")
    odd = raw1[1:].view(x.dtype).reshape(x.shape)
    odd[...] = x
    assert not odd.flags.aligned and off16.ctypes.data % 64 == 16
    copies = model._call.aligned_copies
    for a in (ro, off16, odd, x.view(np.dtype("float32", metadata={"unit": "m"}))):
        (y,) = model(a)
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(y, _python_path(model)(a)[0])
    assert model._call.aligned_copies == copies + 1  # the array off its element's alignment, copied once
    assert not ro.flags.writeable


def test_a_module_with_tvms_alignment_reads_aligned_inputs_in_place_and_copies_the_others():
    """``alignment=64`` (TVM's own declarations): the C path checks the address too; an input off the
    boundary goes to the checked path, which copies it once."""
    from tvm import relax

    from tvm_ext.zero_copy import is_aligned

    bb = relax.BlockBuilder()
    a = relax.Var("a", relax.TensorType((8, 32), "float32"))
    b = relax.Var("b", relax.TensorType((8, 32), "float32"))
    with bb.function("main", [a, b]):
        bb.emit_func_output(bb.emit(relax.op.add(relax.op.multiply(a, b), a)))
    model = tc.llvm_only(bb.get())
    assert model.input_alignment == 64 and model._call.call_path == "native"
    xa, xb = model.random_inputs(1)
    assert is_aligned(xa) and is_aligned(xb)
    (y,) = model(xa, xb)
    assert model._call.aligned_copies == 0
    raw = empty_aligned(xa.nbytes + 16, "uint8")
    off = raw[16:].view(xa.dtype).reshape(xa.shape)
    off[...] = xa
    (y_off,) = model(off, xb)
    assert model._call.aligned_copies == 1
    np.testing.assert_allclose(y, xa * xb + xa, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y_off, y)


def test_no_reference_or_buffer_is_left_behind_over_many_calls(mlp):
    _, model = mlp
    x = model.random_inputs(5)[0]
    call = model._call.call
    for _ in range(20):
        model(x)
    before = sys.getrefcount(x), sys.getrefcount(call)
    addresses = set()
    for _ in range(1000):
        (y,) = model(x)
        addresses.add(y.ctypes.data)
        del y
        model(x=x)  # the checked path builds the named dict and the inputs tuple in C
        with pytest.raises(InputError):
            model(x[:, :16])
    gc.collect()
    assert (sys.getrefcount(x), sys.getrefcount(call)) == before
    assert len(addresses) <= 3  # each output's tensor went back to the VM's pool


def test_outputs_and_inputs_live_as_long_as_an_array_uses_them():
    """An output outlives its model; a function that returns its input gives back the caller's buffer,
    and that array stays alive while the output views it, even when the caller drops it."""
    model = _relax_model(_identity)
    x = np.arange(15, dtype="float32").reshape(5, 3)
    refs = sys.getrefcount(x)
    (y,) = model(x)
    held = sys.getrefcount(x) - refs  # (pytest's assertion rewriting keeps an assert's operands alive)
    assert held == 1  # the output's view of the input holds the array
    assert y.ctypes.data == x.ctypes.data
    del model
    gc.collect()
    x_address = x.ctypes.data
    del x
    gc.collect()
    assert y.ctypes.data == x_address
    np.testing.assert_array_equal(y, np.arange(15, dtype="float32").reshape(5, 3))


def test_an_output_survives_its_model(mlp):
    proto, _ = mlp
    model = tc.compile(from_onnx(proto), tensorize="never")
    x = model.random_inputs(6)[0]
    (y,) = model(x)
    del model
    gc.collect()
    np.testing.assert_allclose(y, _ort(proto, x), rtol=1e-4, atol=1e-4)


def test_an_error_inside_the_function_is_the_one_a_plain_call_raises():
    """A plan that disagrees with the VM function's signature: the VM's own check raises, the same
    exception (type and message) as the Python path's call of the function."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    _identity(bb, relax)
    vm = relax.VirtualMachine(tvm.compile(bb.get(), "llvm"), tvm.cpu())
    wrong = [("a", (3, 5), "float32")]
    native, python = NumpyCall(vm, wrong), NumpyCall(vm, wrong, native=False)
    assert native.call_path == "native" and python.call_path == "python"
    x = np.zeros((3, 5), "float32")
    got, expected = _outcome(native, x), _outcome(python, x)
    assert isinstance(expected, tuple) and got == expected
    refs = sys.getrefcount(x)
    for _ in range(50):
        _outcome(native, x)
    assert sys.getrefcount(x) == refs


def test_a_python_function_behind_the_ffi_runs_with_the_gil_taken_back():
    """``release_gil``: the C path lets the GIL go around the call as tvm_ffi does; a Python function
    behind the FFI takes it back, and errors it raises come out as themselves."""
    import tvm_ffi

    plan = [((4,), np.dtype("float64"))]
    echo = native_call.native_call(tvm_ffi.convert(lambda a: a), plan, lambda i, n: None, list)
    x = np.arange(4.0)
    (y,) = echo(x)
    assert y.ctypes.data == x.ctypes.data

    def fail(a):
        raise KeyError("from Python")

    failing = native_call.native_call(tvm_ffi.convert(fail), plan, lambda i, n: None, list)
    with pytest.raises(KeyError, match="from Python"):
        failing(x)


def test_threads_share_a_model(mlp):
    proto, model = mlp
    xs = [model.random_inputs(s)[0] for s in range(4)]
    expected = [_ort(proto, x) for x in xs]
    errors = []

    def work(i):
        try:
            for _ in range(50):
                np.testing.assert_allclose(model(xs[i])[0], expected[i], rtol=1e-4, atol=1e-4)
        except AssertionError as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_without_pythons_headers_the_reason_names_the_missing_one(monkeypatch, tmp_path):
    """A machine without the Python development headers: no compile is tried, the reason says which."""
    monkeypatch.setattr(native_call, "_STATE", {})
    monkeypatch.setattr(native_call.sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    assert native_call.native_module() is None
    assert "Python.h not found" in native_call.unavailable_reason()


def test_without_the_c_path_model_calls_take_the_python_path(monkeypatch, mlp):
    """No C compiler (or no headers): the build's ConfigError is kept as the reason, and a model runs
    its Python hot path with the same results."""
    import tvm_ext.kernel_cache as kc

    proto, _ = mlp

    def no_compiler(user, alternative):
        raise ConfigError(f"{user}: no C compiler found; {alternative}")

    monkeypatch.setattr(native_call, "_STATE", {})
    monkeypatch.setattr(kc, "c_compiler", no_compiler)
    assert native_call.native_module() is None
    assert "no C compiler found" in native_call.unavailable_reason()
    model = tc.compile(from_onnx(proto), tensorize="never")
    assert model._call.call_path == "python"
    x = model.random_inputs(8)[0]
    np.testing.assert_allclose(model(x)[0], _ort(proto, x), rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(native_call, "_STATE", {})
    monkeypatch.setenv("TVM_EXT_NATIVE_CALL", "0")
    assert native_call.native_module() is None and "TVM_EXT_NATIVE_CALL" in native_call.unavailable_reason()
