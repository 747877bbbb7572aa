/*
 * model(x) on numpy arrays as one C call: the input checks, the DLPack views of the inputs, the
 * call of the VM function and the numpy views of its tensor results, with no Python frame between.
 *
 * Built and loaded by tvm_ext/native_call.py (privately, hash-checked, like every binary the plugin
 * loads); tvm_ext/model_call.py uses it as NumpyCall.call.  A call whose inputs fail a check goes to
 * the Python checked path (`checked(inputs, named)`).  A result that is a CPU tensor of a numpy dtype,
 * or a (nested) tuple of such tensors and None, becomes the flat list of arrays numpy_outputs makes
 * of it; any other result, and every error the VM function raises, goes through `relay`, a tvm_ffi
 * Function of this file whose C body hands back the stashed result (or the failed call's status, with
 * the error still in the FFI's thread-local slot), so that tvm_ffi's own Cython code turns it into the
 * Python object or exception a plain `function(*inputs)` call gives.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dlpack/dlpack.h>
#include <tvm/ffi/c_api.h>

#define EXPORT __attribute__((visibility("default")))
/* inputs whose views live on the C stack; a function with more takes a heap array per call */
#define STACK_INPUTS 8
/* numpy's flags an input needs to be read in place: C_CONTIGUOUS | ALIGNED (to its element) | WRITEABLE */
#define IN_PLACE (NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_WRITEABLE)
#define TENSOR_CAPSULE "tvm_ext.native_call.tensor"

_Static_assert(sizeof(npy_intp) == sizeof(int64_t), "numpy's dimensions must be 64-bit");

/* ------------------------------------------------------------------ the relay */
/* The result (or failed status) of this thread's last VM call, until `relay` hands it to tvm_ffi. */
static _Thread_local struct {
  int status;
  TVMFFIAny value;
} stash; /* zero: status 0, value None */

static void stash_clear(void) {
  if (stash.value.type_index >= kTVMFFIStaticObjectBegin) TVMFFIObjectDecRef(stash.value.v_obj);
  stash.value.type_index = kTVMFFINone;
  stash.value.v_int64 = 0;
  stash.status = 0;
}

/* TVMFFISafeCallType: the stashed status if nonzero (the error stays raised in the FFI's slot), else
 * the stashed value, moved into the caller's result. */
static int relay(void* self, const TVMFFIAny* args, int32_t num_args, TVMFFIAny* result) {
  (void)self, (void)args, (void)num_args;
  if (stash.status != 0) {
    int status = stash.status;
    stash.status = 0;
    return status;
  }
  *result = stash.value;
  stash.value.type_index = kTVMFFINone;
  stash.value.v_int64 = 0;
  return 0;
}

/* ------------------------------------------------------------------ the plan */
typedef struct {
  int ndim;
  npy_intp* shape;
  PyArray_Descr* dtype;
  DLDataType dl_dtype;
} Param;

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* function; /* the tvm_ffi.Function (keeps `handle` alive) */
  void* handle;
  int release_gil;
  Py_ssize_t alignment; /* bytes an input's address must be a multiple of; 0: its element's */
  Py_ssize_t arity;
  Param* params;
  PyObject* checked; /* checked(inputs: tuple, named: dict) -> list */
  PyObject* relay;   /* tvm_ffi.Function over `relay` */
  PyObject* outputs; /* outputs(value) -> list of arrays */
} NativeCall;

/* The DLPack dtype of a numpy dtype of native byte order; code < 0 for one DLPack has no name for. */
static DLDataType dl_dtype_of(PyArray_Descr* d) {
  DLDataType t = {0, (uint8_t)(PyDataType_ELSIZE(d) * 8), 1};
  int native = d->byteorder == '=' || d->byteorder == '|' || PyArray_ISNBO(d->byteorder);
  switch (native ? d->kind : 0) {
    case 'f': t.code = kDLFloat; break;
    case 'i': t.code = kDLInt; break;
    case 'u': t.code = kDLUInt; break;
    case 'b': t.code = kDLBool; break;
    case 'c': t.code = kDLComplex; break;
    default: t.code = 255; t.bits = 0;
  }
  return t;
}

/* The numpy type number of a one-lane DLPack dtype; -1 for one this path leaves to numpy. */
static int numpy_type_of(DLDataType t) {
  if (t.lanes != 1) return -1;
  switch (t.code) {
    case kDLFloat: return t.bits == 16 ? NPY_HALF : t.bits == 32 ? NPY_FLOAT32 : t.bits == 64 ? NPY_FLOAT64 : -1;
    case kDLInt:
      return t.bits == 8 ? NPY_INT8 : t.bits == 16 ? NPY_INT16 : t.bits == 32 ? NPY_INT32 : t.bits == 64 ? NPY_INT64 : -1;
    case kDLUInt:
      return t.bits == 8 ? NPY_UINT8 : t.bits == 16 ? NPY_UINT16 : t.bits == 32 ? NPY_UINT32
             : t.bits == 64 ? NPY_UINT64 : -1;
    case kDLBool: return t.bits == 8 ? NPY_BOOL : -1;
    case kDLComplex: return t.bits == 64 ? NPY_COMPLEX64 : t.bits == 128 ? NPY_COMPLEX128 : -1;
    default: return -1;
  }
}

/* ------------------------------------------------------------------ inputs */
/* A DLPack view of a caller's array: owns one reference to the array, the shape and strides after it. */
typedef struct {
  DLManagedTensorVersioned managed;
  int64_t dims[];
} InputView;

static void input_view_delete(DLManagedTensorVersioned* managed) {
  PyObject* array = (PyObject*)managed->manager_ctx;
  /* the last holder of the tensor may be any thread, GIL or not; after Python is gone, leak the array */
  if (array != NULL && Py_IsInitialized()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(array);
    PyGILState_Release(gil);
  }
  free(managed);
}

static int input_is_planned(const NativeCall* self, const Param* p, PyObject* x) {
  if (!PyArray_CheckExact(x)) return 0;
  PyArrayObject* a = (PyArrayObject*)x;
  if (PyArray_NDIM(a) != p->ndim) return 0;
  const npy_intp* dims = PyArray_DIMS(a);
  for (int i = 0; i < p->ndim; ++i)
    if (dims[i] != p->shape[i]) return 0;
  PyArray_Descr* dtype = PyArray_DESCR(a);
  if (dtype != p->dtype && !PyArray_EquivTypes(dtype, p->dtype)) return 0;
  if ((PyArray_FLAGS(a) & IN_PLACE) != IN_PLACE) return 0;
  return self->alignment <= 1 || (uintptr_t)PyArray_DATA(a) % (uintptr_t)self->alignment == 0;
}

static void drop_raised_ffi_error(void) {
  TVMFFIObjectHandle error = NULL;
  TVMFFIErrorMoveFromRaised(&error);
  if (error != NULL) TVMFFIObjectDecRef(error);
}

/* A tvm_ffi Tensor over the array's buffer, holding the array alive; NULL with MemoryError set. */
static TVMFFIObjectHandle input_tensor(PyArrayObject* array, const Param* p) {
  int ndim = p->ndim;
  InputView* view = (InputView*)malloc(sizeof(InputView) + 2 * (size_t)ndim * sizeof(int64_t));
  if (view == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  int64_t *shape = view->dims, *strides = view->dims + ndim, step = 1;
  for (int i = ndim - 1; i >= 0; --i) { /* the planned shape: the array's own may be reassigned */
    shape[i] = p->shape[i];
    strides[i] = step;
    step *= p->shape[i];
  }
  memset(&view->managed, 0, sizeof(view->managed));
  view->managed.version.major = DLPACK_MAJOR_VERSION;
  view->managed.version.minor = DLPACK_MINOR_VERSION;
  Py_INCREF(array);
  view->managed.manager_ctx = array;
  view->managed.deleter = input_view_delete;
  DLTensor* t = &view->managed.dl_tensor;
  t->data = PyArray_DATA(array);
  t->device.device_type = kDLCPU;
  t->device.device_id = 0;
  t->ndim = ndim;
  t->dtype = p->dl_dtype;
  t->shape = shape;
  t->strides = strides;
  t->byte_offset = 0;
  TVMFFIObjectHandle tensor = NULL;
  /* no alignment or contiguity asked: only an allocation can fail, and the view stays ours then */
  if (TVMFFITensorFromDLPackVersioned(&view->managed, 0, 0, &tensor) != 0) {
    drop_raised_ffi_error();
    input_view_delete(&view->managed);
    PyErr_NoMemory();
    return NULL;
  }
  return tensor;
}

/* ------------------------------------------------------------------ outputs */
static void tensor_capsule_delete(PyObject* capsule) {
  void* tensor = PyCapsule_GetPointer(capsule, TENSOR_CAPSULE);
  if (tensor != NULL) TVMFFIObjectDecRef(tensor);
}

/* `t` a CPU tensor of a numpy dtype with a buffer: what numpy can view in place (an empty tensor may
 * have no buffer: numpy's own from_dlpack, through the relay, handles that one). */
static int numpy_viewable(const DLTensor* t) {
  return numpy_type_of(t->dtype) >= 0 && t->device.device_type == kDLCPU && t->ndim <= NPY_MAXDIMS &&
         t->data != NULL;
}

/* A numpy array over the buffer of `tensor`, its base a capsule holding a new reference to the tensor;
 * NULL with the Python error set. */
static PyObject* tensor_array(TVMFFIObjectHandle tensor) {
  DLTensor* t = (DLTensor*)((char*)tensor + sizeof(TVMFFIObject));
  npy_intp dims[NPY_MAXDIMS], strides[NPY_MAXDIMS];
  for (int i = 0; i < t->ndim; ++i) {
    dims[i] = t->shape[i];
    if (t->strides != NULL) strides[i] = t->strides[i] * (t->dtype.bits / 8);
  }
  PyArray_Descr* descr = PyArray_DescrFromType(numpy_type_of(t->dtype));
  if (descr == NULL) return NULL;
  PyObject* array = PyArray_NewFromDescr(&PyArray_Type, descr, t->ndim, dims, t->strides ? strides : NULL,
                                         (char*)t->data + t->byte_offset, NPY_ARRAY_WRITEABLE, NULL);
  if (array == NULL) return NULL;
  PyObject* capsule = PyCapsule_New(tensor, TENSOR_CAPSULE, tensor_capsule_delete);
  if (capsule == NULL) {
    Py_DECREF(array);
    return NULL;
  }
  TVMFFIObjectIncRef(tensor); /* the capsule's own reference */
  if (PyArray_SetBaseObject((PyArrayObject*)array, capsule) < 0) { /* steals the capsule either way */
    Py_DECREF(array);
    return NULL;
  }
  return array;
}

/* Tuples nested deeper than this go through the relay (and numpy_outputs' recursion). */
#define MAX_NESTING 32

static TVMFFISeqCell* array_cell(TVMFFIObjectHandle array) {
  return (TVMFFISeqCell*)((char*)array + sizeof(TVMFFIObject));
}

/* 1 when every leaf of `value` (a tensor, None, or an ffi Array of those, nested) is a tensor numpy can
 * view in place, with `*count` raised by the number of tensors; else 0. */
static int all_viewable(const TVMFFIAny* value, int depth, Py_ssize_t* count) {
  switch (value->type_index) {
    case kTVMFFINone: return 1;
    case kTVMFFITensor:
      ++*count;
      return numpy_viewable((DLTensor*)((char*)value->v_obj + sizeof(TVMFFIObject)));
    case kTVMFFIArray: {
      if (depth >= MAX_NESTING) return 0;
      const TVMFFISeqCell* cell = array_cell(value->v_obj);
      const TVMFFIAny* items = (const TVMFFIAny*)cell->data;
      for (int64_t i = 0; i < cell->size; ++i)
        if (!all_viewable(&items[i], depth + 1, count)) return 0;
      return 1;
    }
    default: return 0;
  }
}

/* The arrays of the tensors of `value` (checked by all_viewable) into `list` from `*next` on, depth first:
 * numpy_outputs' order and flattening; -1 with the Python error set. */
static int fill_arrays(const TVMFFIAny* value, PyObject* list, Py_ssize_t* next) {
  if (value->type_index == kTVMFFITensor) {
    PyObject* array = tensor_array(value->v_obj);
    if (array == NULL) return -1;
    PyList_SET_ITEM(list, (*next)++, array);
  } else if (value->type_index == kTVMFFIArray) {
    const TVMFFISeqCell* cell = array_cell(value->v_obj);
    const TVMFFIAny* items = (const TVMFFIAny*)cell->data;
    for (int64_t i = 0; i < cell->size; ++i)
      if (fill_arrays(&items[i], list, next) < 0) return -1;
  }
  return 0;
}

/* `result` as the list numpy_outputs makes of it, when it is a CPU tensor of a numpy dtype, None, or a
 * (nested) tuple of those: 1, each array's base a capsule holding its own reference to its tensor
 * (`result` keeps its own, released by the caller); 0: another value (nothing made); -1: error. */
static int numpy_result(const TVMFFIAny* result, PyObject** out) {
  Py_ssize_t count = 0;
  if (!all_viewable(result, 0, &count)) return 0;
  PyObject* list = PyList_New(count);
  if (list == NULL) return -1;
  Py_ssize_t next = 0;
  if (fill_arrays(result, list, &next) < 0) {
    Py_DECREF(list); /* the slots not filled are NULL, which a list's dealloc skips */
    return -1;
  }
  *out = list;
  return 1;
}

/* Any other result, or the failed call's error, the way tvm_ffi's own call returns or raises it. */
static PyObject* through_relay(NativeCall* self, int status, TVMFFIAny* result) {
  if (status != 0 && PyErr_Occurred()) { /* a Python error raised inside the call: it is the error */
    drop_raised_ffi_error();
    return NULL;
  }
  stash_clear();
  stash.status = status;
  stash.value = *result;
  result->type_index = kTVMFFINone;
  PyObject* value = PyObject_CallNoArgs(self->relay);
  stash_clear(); /* nothing left unless the relay never ran */
  if (value == NULL) return NULL;
  PyObject* out = PyObject_CallOneArg(self->outputs, value);
  Py_DECREF(value);
  return out;
}

/* ------------------------------------------------------------------ the call */
static PyObject* checked_call(NativeCall* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* inputs = PyTuple_New(nargs);
  PyObject* named = PyDict_New();
  PyObject* out = NULL;
  if (inputs == NULL || named == NULL) goto done;
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    Py_INCREF(args[i]);
    PyTuple_SET_ITEM(inputs, i, args[i]);
  }
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; ++i)
    if (PyDict_SetItem(named, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) goto done;
  out = PyObject_CallFunctionObjArgs(self->checked, inputs, named, NULL);
done:
  Py_XDECREF(inputs);
  Py_XDECREF(named);
  return out;
}

static PyObject* native_call_vectorcall(PyObject* callable, PyObject* const* args, size_t nargsf,
                                        PyObject* kwnames) {
  NativeCall* self = (NativeCall*)callable;
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (kwnames != NULL || n != self->arity) return checked_call(self, args, n, kwnames);
  for (Py_ssize_t i = 0; i < n; ++i)
    if (!input_is_planned(self, &self->params[i], args[i])) return checked_call(self, args, n, kwnames);

  TVMFFIAny stack_args[STACK_INPUTS];
  TVMFFIAny* packed = n <= STACK_INPUTS ? stack_args : (TVMFFIAny*)PyMem_Malloc(sizeof(TVMFFIAny) * (size_t)n);
  if (packed == NULL) return PyErr_NoMemory();
  PyObject* out = NULL;
  Py_ssize_t made = 0;
  for (; made < n; ++made) {
    TVMFFIObjectHandle tensor = input_tensor((PyArrayObject*)args[made], &self->params[made]);
    if (tensor == NULL) goto done;
    packed[made].type_index = kTVMFFITensor;
    packed[made].zero_padding = 0;
    packed[made].v_obj = (TVMFFIObject*)tensor;
  }
  TVMFFIAny result;
  result.type_index = kTVMFFINone;
  result.zero_padding = 0;
  result.v_int64 = 0;
  int status;
  if (self->release_gil) { /* as tvm_ffi.Function does for a function whose release_gil is set */
    Py_BEGIN_ALLOW_THREADS
    status = TVMFFIFunctionCall(self->handle, packed, (int32_t)n, &result);
    Py_END_ALLOW_THREADS
  } else {
    status = TVMFFIFunctionCall(self->handle, packed, (int32_t)n, &result);
  }
  int converted = status == 0 ? numpy_result(&result, &out) : 0;
  if (converted == 0) out = through_relay(self, status, &result);
  if (result.type_index >= kTVMFFIStaticObjectBegin) TVMFFIObjectDecRef(result.v_obj); /* the arrays hold their own */
done:
  for (Py_ssize_t i = 0; i < made; ++i) TVMFFIObjectDecRef(packed[i].v_obj);
  if (packed != stack_args) PyMem_Free(packed);
  return out;
}

/* ------------------------------------------------------------------ the type */
static int native_call_traverse(NativeCall* self, visitproc visit, void* arg) {
  Py_VISIT(self->function);
  Py_VISIT(self->checked);
  Py_VISIT(self->relay);
  Py_VISIT(self->outputs);
  return 0;
}

static int native_call_clear(NativeCall* self) {
  Py_CLEAR(self->function);
  Py_CLEAR(self->checked);
  Py_CLEAR(self->relay);
  Py_CLEAR(self->outputs);
  return 0;
}

static void free_params(Param* params, Py_ssize_t n) {
  if (params == NULL) return;
  for (Py_ssize_t i = 0; i < n; ++i) {
    Py_XDECREF(params[i].dtype);
    PyMem_Free(params[i].shape);
  }
  PyMem_Free(params);
}

static void native_call_dealloc(NativeCall* self) {
  PyObject_GC_UnTrack(self);
  native_call_clear(self);
  free_params(self->params, self->arity);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

/* One (shape tuple, numpy dtype) of the plan into `p`; -1 with TypeError/ValueError set. */
static int parse_param(PyObject* item, Param* p) {
  PyObject *shape, *dtype;
  if (!PyArg_ParseTuple(item, "O!O!", &PyTuple_Type, &shape, &PyArrayDescr_Type, &dtype)) return -1;
  Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
  if (ndim > NPY_MAXDIMS) {
    PyErr_SetString(PyExc_ValueError, "too many dimensions");
    return -1;
  }
  p->dl_dtype = dl_dtype_of((PyArray_Descr*)dtype);
  if (p->dl_dtype.code == 255) {
    PyErr_Format(PyExc_ValueError, "no DLPack type for dtype %R", dtype);
    return -1;
  }
  p->shape = (npy_intp*)PyMem_Malloc(sizeof(npy_intp) * (size_t)(ndim ? ndim : 1));
  if (p->shape == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  p->ndim = (int)ndim;
  for (Py_ssize_t i = 0; i < ndim; ++i) {
    p->shape[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
    if (p->shape[i] < 0) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "negative dimension");
      return -1;
    }
  }
  Py_INCREF(dtype);
  p->dtype = (PyArray_Descr*)dtype;
  return 0;
}

static PyObject* native_call_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static char* names[] = {"function", "handle", "release_gil", "plan", "alignment", "checked", "relay", "outputs",
                          NULL};
  PyObject *function, *handle, *plan, *checked, *relay_fn, *outputs;
  int release_gil;
  Py_ssize_t alignment;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOpOnOOO", names, &function, &handle, &release_gil, &plan,
                                   &alignment, &checked, &relay_fn, &outputs))
    return NULL;
  void* h = PyLong_AsVoidPtr(handle);
  if (h == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a null function handle");
    return NULL;
  }
  PyObject* seq = PySequence_Fast(plan, "the plan must be a sequence of (shape, dtype)");
  if (seq == NULL) return NULL;
  NativeCall* self = (NativeCall*)type->tp_alloc(type, 0);
  if (self == NULL) {
    Py_DECREF(seq);
    return NULL;
  }
  self->vectorcall = native_call_vectorcall;
  self->handle = h;
  self->release_gil = release_gil;
  self->alignment = alignment;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  self->params = (Param*)PyMem_Calloc((size_t)(n ? n : 1), sizeof(Param));
  if (self->params == NULL) {
    Py_DECREF(seq);
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  self->arity = n;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (parse_param(PySequence_Fast_GET_ITEM(seq, i), &self->params[i]) < 0) {
      Py_DECREF(seq);
      Py_DECREF(self);
      return NULL;
    }
  }
  Py_DECREF(seq);
  Py_INCREF(function);
  self->function = function;
  Py_INCREF(checked);
  self->checked = checked;
  Py_INCREF(relay_fn);
  self->relay = relay_fn;
  Py_INCREF(outputs);
  self->outputs = outputs;
  return (PyObject*)self;
}

static PyObject* native_call_get_function(NativeCall* self, void* closure) {
  (void)closure;
  Py_INCREF(self->function);
  return self->function;
}

static PyGetSetDef native_call_getset[] = {
    {"function", (getter)native_call_get_function, NULL, "the tvm_ffi.Function this calls", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject NativeCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tvm_ext.native_call.NativeCall",
    .tp_doc = "model(x) on numpy arrays as one C call (see tvm_ext.native_call)",
    .tp_basicsize = sizeof(NativeCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = native_call_new,
    .tp_dealloc = (destructor)native_call_dealloc,
    .tp_traverse = (traverseproc)native_call_traverse,
    .tp_clear = (inquiry)native_call_clear,
    .tp_vectorcall_offset = offsetof(NativeCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_getset = native_call_getset,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "tvm_ext.native_call._c", "model(x) as one C call", -1, NULL, NULL, NULL, NULL, NULL,
};

/* The module object: NativeCall and relay_address (the address of `relay`, for
 * tvm_ffi.Function.__from_extern_c__).  Called once, with the GIL held, through ctypes.pythonapi-style
 * PYFUNCTYPE. */
EXPORT PyObject* tvmext_model_call_module(void) {
  if (PyArray_ImportNumPyAPI() < 0) return NULL;
  if (PyType_Ready(&NativeCallType) < 0) return NULL;
  PyObject* module = PyModule_Create(&module_def);
  if (module == NULL) return NULL;
  Py_INCREF(&NativeCallType);
  if (PyModule_AddObject(module, "NativeCall", (PyObject*)&NativeCallType) < 0) {
    Py_DECREF(&NativeCallType);
    Py_DECREF(module);
    return NULL;
  }
  if (PyModule_AddObject(module, "relay_address", PyLong_FromVoidPtr((void*)relay)) < 0) {
    Py_DECREF(module);
    return NULL;
  }
  return module;
}
