// tensorplug_adapters.numpy._exchange: numpy's exchange table. numpy has no DLPack C
// exchange API, and its __dlpack__ costs a capsule and a heap allocation per call. This
// table reads the array struct directly (numpy's stable C ABI) and is used exactly like a
// framework's own. Built with the plugin (plugins/CMakeLists.txt), against tensorplug's
// public headers and numpy's.
#define PY_ARRAY_UNIQUE_SYMBOL tensorplug_numpy_ARRAY_API
#define NPY_NO_DEPRECATED_API NPY_2_0_API_VERSION
#include <Python.h>

#include "tensorplug/dtype.h"
#include "tensorplug/python.h"

#include <numpy/arrayobject.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

static_assert(sizeof(npy_intp) == sizeof(int64_t), "DLPack shapes alias numpy's dims");

namespace {

using tensorplug::python::Guarded;
using tensorplug::python::GuardedMethod;
using tensorplug::python::PythonUsable;
using tensorplug::DataTypeToString;

const TPCallScratch* g_scratch = nullptr;  // the core's call scratch (element strides of views)

// "tensorplug_adapters.numpy.dtype_reader": the DLPack dtype of a numpy dtype object, for the
// importers of frameworks whose arrays carry numpy dtypes (jax).
constexpr char kDTypeReaderCapsule[] = "tensorplug_adapters.numpy.dtype_reader";
struct DTypeReader {
  bool (*dtype_of)(PyObject* descr, DLDataType* out);  // false: not a numpy dtype, or none in DLPack
};

// The dtypes ml_dtypes (used by jax) registers with numpy as user dtypes. Its type names
// are tensorplug's dtype names (DataTypeToString, from tensorplug/vocabulary.h).
constexpr DLDataType kMlDtypes[] = {
    {kDLBfloat, 16, 1},        {kDLFloat8_e4m3fn, 8, 1},   {kDLFloat8_e5m2, 8, 1},
    {kDLFloat8_e4m3fnuz, 8, 1}, {kDLFloat8_e5m2fnuz, 8, 1}, {kDLFloat8_e4m3b11fnuz, 8, 1},
    {kDLFloat8_e3m4, 8, 1},    {kDLFloat8_e4m3, 8, 1},     {kDLFloat8_e8m0fnu, 8, 1},
};

// The ml_dtypes descriptor for `dtype`, when ml_dtypes is already imported (a tensor of
// such a dtype can only come from code that imported it); nullptr without an error set.
PyArray_Descr* MlDtypesDescr(DLDataType dtype) {
  for (const DLDataType& entry : kMlDtypes) {
    if (entry.code != dtype.code || entry.bits != dtype.bits) continue;
    PyObject* module_name = PyUnicode_FromString("ml_dtypes");
    PyObject* module = module_name ? PyImport_GetModule(module_name) : nullptr;  // never imports
    Py_XDECREF(module_name);
    if (!module) {
      PyErr_Clear();
      return nullptr;
    }
    PyObject* type = PyObject_GetAttrString(module, DataTypeToString(entry).c_str());
    Py_DECREF(module);
    PyArray_Descr* descr = nullptr;
    if (!type || !PyArray_DescrConverter(type, &descr)) {
      PyErr_Clear();
      descr = nullptr;
    }
    Py_XDECREF(type);
    return descr;
  }
  return nullptr;
}

__attribute__((always_inline)) inline bool DTypeOfDescr(PyArray_Descr* descr, DLDataType* out) {
  if (!PyArray_ISNBO(descr->byteorder)) return false;
  switch (descr->type_num) {
    case NPY_BOOL: *out = {kDLBool, 8, 1}; return true;
    case NPY_INT8: *out = {kDLInt, 8, 1}; return true;
    case NPY_INT16: *out = {kDLInt, 16, 1}; return true;
    case NPY_INT32: *out = {kDLInt, 32, 1}; return true;
    case NPY_LONG: case NPY_LONGLONG: *out = {kDLInt, 64, 1}; return true;
    case NPY_UINT8: *out = {kDLUInt, 8, 1}; return true;
    case NPY_UINT16: *out = {kDLUInt, 16, 1}; return true;
    case NPY_UINT32: *out = {kDLUInt, 32, 1}; return true;
    case NPY_ULONG: case NPY_ULONGLONG: *out = {kDLUInt, 64, 1}; return true;
    case NPY_HALF: *out = {kDLFloat, 16, 1}; return true;
    case NPY_FLOAT: *out = {kDLFloat, 32, 1}; return true;
    case NPY_DOUBLE: *out = {kDLFloat, 64, 1}; return true;
    case NPY_CFLOAT: *out = {kDLComplex, 64, 1}; return true;
    case NPY_CDOUBLE: *out = {kDLComplex, 128, 1}; return true;
    default: break;
  }
  // ml_dtypes (used by jax) registers bfloat16 and the float8 types as user dtypes.
  if (descr->typeobj) {
    const char* dot = std::strrchr(descr->typeobj->tp_name, '.');
    const char* name = dot ? dot + 1 : descr->typeobj->tp_name;
    for (const DLDataType& entry : kMlDtypes) {
      if (DataTypeToString(entry) == name) {
        *out = entry;
        return true;
      }
    }
  }
  return false;
}

PyArray_Descr* DescrOfDType(DLDataType dtype) {
  if (dtype.lanes != 1) return nullptr;
  int type_num = -1;
  switch (dtype.code) {
    case kDLBool: type_num = NPY_BOOL; break;
    case kDLInt:
      type_num = dtype.bits == 8 ? NPY_INT8 : dtype.bits == 16 ? NPY_INT16 : dtype.bits == 32 ? NPY_INT32 : dtype.bits == 64 ? NPY_INT64 : -1;
      break;
    case kDLUInt:
      type_num = dtype.bits == 8 ? NPY_UINT8 : dtype.bits == 16 ? NPY_UINT16 : dtype.bits == 32 ? NPY_UINT32 : dtype.bits == 64 ? NPY_UINT64 : -1;
      break;
    case kDLFloat:
      type_num = dtype.bits == 16 ? NPY_HALF : dtype.bits == 32 ? NPY_FLOAT : dtype.bits == 64 ? NPY_DOUBLE : -1;
      break;
    case kDLComplex: type_num = dtype.bits == 64 ? NPY_CFLOAT : dtype.bits == 128 ? NPY_CDOUBLE : -1; break;
    default: return MlDtypesDescr(dtype);
  }
  return type_num < 0 ? nullptr : PyArray_DescrFromType(type_num);
}

int UnsupportedDType(PyArrayObject* arr) {
  PyErr_Format(PyExc_BufferError, "numpy dtype %R has no DLPack equivalent", reinterpret_cast<PyObject*>(PyArray_DESCR(arr)));
  return -1;
}

// The view of `arr`, its element strides written to `strides` (ndim of them). Inline: it is
// the whole of an argument's import.
__attribute__((always_inline)) inline int FillView(PyArrayObject* arr, DLTensor* out, int64_t* strides) {
  if (!DTypeOfDescr(PyArray_DESCR(arr), &out->dtype)) return UnsupportedDType(arr);
  const int ndim = PyArray_NDIM(arr);
  const npy_intp itemsize = PyArray_ITEMSIZE(arr);
  const npy_intp* byte_strides = PyArray_STRIDES(arr);
  // numpy strides are in bytes; DLPack's in elements. Item sizes are powers of two for
  // every dtype with a DLPack equivalent: shift, don't divide.
  const int shift = __builtin_ctzll(static_cast<unsigned long long>(itemsize));
  const npy_intp mask = itemsize - 1;
  for (int i = 0; i < ndim; ++i) {
    if (byte_strides[i] & mask) {
      PyErr_SetString(PyExc_BufferError, "numpy array strides are not a multiple of the item size");
      return -1;
    }
    strides[i] = byte_strides[i] >> shift;
  }
  out->data = PyArray_DATA(arr);
  out->device = {kDLCPU, 0};
  out->ndim = ndim;
  out->shape = reinterpret_cast<int64_t*>(PyArray_DIMS(arr));
  out->strides = ndim ? strides : nullptr;
  out->byte_offset = 0;
  return 0;
}

// A view for the call: its strides in the call's scratch arena, until the call returns.
int NumpyView(void* obj, DLTensor* out) {
  auto* arr = static_cast<PyArrayObject*>(obj);
  const int ndim = PyArray_NDIM(arr);
  int64_t* strides = ndim ? g_scratch->alloc(ndim) : nullptr;
  if (ndim && strides == nullptr) {
    PyErr_Format(PyExc_BufferError, "a numpy array of %d dimensions", ndim);
    return -1;
  }
  return FillView(arr, out, strides);
}

// Owning export: one allocation holds the header, shape and strides; the array is kept.
void NumpyDeleter(DLManagedTensorVersioned* self) {
  if (PythonUsable()) {  // after Py_Finalize the array is leaked, not touched
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(static_cast<PyObject*>(self->manager_ctx));
    PyGILState_Release(gil);
  }
  std::free(self);
}

int NumpyManaged(void* obj, DLManagedTensorVersioned** out) {
  auto* arr = static_cast<PyArrayObject*>(obj);
  const int ndim = PyArray_NDIM(arr);
  auto* managed = static_cast<DLManagedTensorVersioned*>(
      std::malloc(sizeof(DLManagedTensorVersioned) + sizeof(int64_t) * 2 * ndim));
  if (!managed) {
    PyErr_NoMemory();
    return -1;
  }
  auto* shape = reinterpret_cast<int64_t*>(managed + 1);
  int64_t* strides = shape + ndim;
  const int rc = FillView(arr, &managed->dl_tensor, strides);
  if (rc == 0) {
    for (int i = 0; i < ndim; ++i) shape[i] = managed->dl_tensor.shape[i];
    managed->dl_tensor.shape = ndim ? shape : nullptr;
    managed->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    managed->manager_ctx = Py_NewRef(static_cast<PyObject*>(obj));
    managed->deleter = Guarded<NumpyDeleter>;
    managed->flags = PyArray_ISWRITEABLE(arr) ? 0 : DLPACK_FLAG_BITMASK_READ_ONLY;
    *out = managed;
  } else {
    std::free(managed);
  }
  return rc;
}

void BaseCapsuleDestructor(PyObject* capsule) {
  auto* managed = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, "tensorplug.numpy_base"));
  if (managed && managed->deleter) managed->deleter(managed);
}

int NumpyToObject(DLManagedTensorVersioned* managed, void** out) {
  if (managed->deleter == Guarded<NumpyDeleter>) {  // an array we exported or allocated: give it back
    *out = Py_NewRef(static_cast<PyObject*>(managed->manager_ctx));
    NumpyDeleter(managed);
    return 0;
  }
  const DLTensor& t = managed->dl_tensor;
  PyArray_Descr* descr = nullptr;
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
    PyErr_Format(PyExc_BufferError, "numpy cannot hold a tensor on device type %d", int(t.device.device_type));
  } else if (!(descr = DescrOfDType(t.dtype))) {
    PyErr_SetString(PyExc_BufferError, "numpy has no dtype for this tensor");
  }
  if (!descr) {
    if (managed->deleter) managed->deleter(managed);
    return -1;
  }
  static_assert(TP_MAX_NDIM <= NPY_MAXDIMS, "numpy must hold every tensor tensorplug accepts");
  if (static_cast<uint32_t>(t.ndim) > TP_MAX_NDIM) {  // ValueToPython checks first; C callers may not
    Py_DECREF(descr);
    PyErr_Format(PyExc_BufferError, "numpy supports at most %d dimensions, the tensor has %d", TP_MAX_NDIM, int(t.ndim));
    if (managed->deleter) managed->deleter(managed);
    return -1;
  }
  npy_intp byte_strides[TP_MAX_NDIM];
  const npy_intp itemsize = PyDataType_ELSIZE(descr);
  int64_t compact = 1;  // NULL strides: compact row-major (DLPack's meaning)
  for (int i = t.ndim - 1; i >= 0; --i) {
    const int64_t stride = t.strides ? t.strides[i] : compact;
    compact *= t.shape[i] > 1 ? t.shape[i] : 1;
    if (__builtin_mul_overflow(stride, itemsize, &byte_strides[i])) {
      Py_DECREF(descr);
      PyErr_Format(PyExc_BufferError, "stride %lld of dim %d overflows numpy's byte strides", (long long)stride, i);
      if (managed->deleter) managed->deleter(managed);
      return -1;
    }
  }
  int flags = (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) ? 0 : NPY_ARRAY_WRITEABLE;
  PyObject* arr = PyArray_NewFromDescr(&PyArray_Type, descr, t.ndim, reinterpret_cast<npy_intp*>(t.shape),
                                       byte_strides, static_cast<char*>(t.data) + t.byte_offset, flags, nullptr);
  PyObject* base = arr ? PyCapsule_New(managed, "tensorplug.numpy_base", Guarded<BaseCapsuleDestructor>) : nullptr;
  if (!base) {
    Py_XDECREF(arr);
    if (managed->deleter) managed->deleter(managed);
    return -1;
  }
  if (PyArray_SetBaseObject(reinterpret_cast<PyArrayObject*>(arr), base) < 0) {  // steals base
    Py_DECREF(arr);
    return -1;
  }
  *out = arr;
  return 0;
}

int NumpyAllocate(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                  void (*set_error)(void*, const char*, const char*)) {
  if (prototype->device.device_type != kDLCPU) {
    set_error(error_ctx, "ValueError", "numpy can only allocate tensors on the cpu");
    return -1;
  }
  if (static_cast<uint32_t>(prototype->ndim) > TP_MAX_NDIM) {
    // Not "out of memory": TPEnvAllocTensor keeps a ValueError's kind (the request is wrong).
    char message[96];
    std::snprintf(message, sizeof message, "numpy supports at most %d dimensions, the tensor has %d", TP_MAX_NDIM,
                  int(prototype->ndim));
    set_error(error_ctx, "ValueError", message);
    return -1;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1;
  PyArray_Descr* descr = DescrOfDType(prototype->dtype);
  if (!descr) {
    set_error(error_ctx, "TypeError", "numpy has no dtype for the requested tensor");
  } else {
    PyObject* arr = PyArray_Empty(prototype->ndim, reinterpret_cast<npy_intp*>(prototype->shape), descr, 0);
    if (arr) {
      rc = NumpyManaged(arr, out);
      Py_DECREF(arr);
    }
    if (rc != 0) {
      // TPEnvAllocTensor names the requested size (the request itself was checked there:
      // numpy's "array is too big" ValueError is out-of-memory too).
      PyErr_Clear();
      set_error(error_ctx, "MemoryError", "numpy could not allocate it");
    }
  }
  PyGILState_Release(gil);
  return rc;
}

int NumpyCurrentStream(DLDeviceType, int32_t, void** out) {
  *out = nullptr;
  return 0;
}

DLPackExchangeAPI g_numpy_api = {  // the exchange API of numpy.ndarray
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, nullptr},
    Guarded<NumpyAllocate>, Guarded<NumpyManaged>, Guarded<NumpyToObject>, Guarded<NumpyView>,
    Guarded<NumpyCurrentStream>,
};

bool DTypeOf(PyObject* descr, DLDataType* out) {
  return PyArray_DescrCheck(descr) && DTypeOfDescr(reinterpret_cast<PyArray_Descr*>(descr), out);
}

int IsReadOnly(PyObject* obj) { return !PyArray_ISWRITEABLE(reinterpret_cast<PyArrayObject*>(obj)); }

const TPReadOnlyProbe kReadOnlyProbe{IsReadOnly};
const DTypeReader kDTypeReader{DTypeOf};

PyObject* ExchangeApiPy(PyObject*, PyObject*) {
  return PyCapsule_New(&g_numpy_api, "dlpack_exchange_api", nullptr);
}

PyObject* ReadOnlyProbePy(PyObject*, PyObject*) {
  return PyCapsule_New(const_cast<TPReadOnlyProbe*>(&kReadOnlyProbe), TP_READ_ONLY_PROBE_CAPSULE, nullptr);
}

PyObject* DTypeReaderPy(PyObject*, PyObject*) {
  return PyCapsule_New(const_cast<DTypeReader*>(&kDTypeReader), kDTypeReaderCapsule, nullptr);
}

PyMethodDef kMethods[] = {
    {"exchange_api", GuardedMethod<ExchangeApiPy>(), METH_NOARGS,
     "exchange_api() -> the 'dlpack_exchange_api' capsule of numpy.ndarray (reads the array struct directly)"},
    {"read_only_probe", GuardedMethod<ReadOnlyProbePy>(), METH_NOARGS,
     "read_only_probe() -> a 'tensorplug.read_only_probe' capsule reading numpy's WRITEABLE flag"},
    {"dtype_reader", GuardedMethod<DTypeReaderPy>(), METH_NOARGS,
     "dtype_reader() -> a capsule of bool(PyObject* numpy dtype, DLDataType*) for other adapters' importers"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_exchange", "numpy's exchange table for tensorplug", -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__exchange(void) {
  if (_import_array() < 0) return nullptr;  // imported with the plugin, when a numpy array is in hand
  PyObject* core = PyImport_ImportModule("tensorplug");
  PyObject* scratch = core ? PyObject_CallMethod(core, "call_scratch", nullptr) : nullptr;
  Py_XDECREF(core);
  if (scratch == nullptr) return nullptr;
  g_scratch = static_cast<const TPCallScratch*>(PyCapsule_GetPointer(scratch, TP_CALL_SCRATCH_CAPSULE));
  Py_DECREF(scratch);  // the core's capsule points at a static it keeps
  if (g_scratch == nullptr) return nullptr;
  return PyModule_Create(&kModule);
}
