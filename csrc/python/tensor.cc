// tensorplug.Tensor (the core's own owning tensor), DLPack capsules, devices and dtypes.
// Over 500 lines: the Tensor type is one Python type (slots, getters, DLPack protocol,
// lent-tensor invalidation) whose parts share private helpers; splitting it would only
// move those helpers into a header.
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "common.h"
#include "tensorplug/tensor.h"
#include "tensorplug/vocabulary.h"

#include <structmember.h>

namespace tensorplug::py {

PyTypeObject* TensorType = nullptr;
PyObject* g_device_class = nullptr;  // tensorplug.Device, set at import

namespace {

struct TensorObject {
  PyObject_HEAD
  DLManagedTensorVersioned* managed;
  PyObject* weakrefs;
  bool expired;  // a view lent to a callback that has returned: its data is gone
};

// ------------------------------------------------------------------ dtypes ----
struct DTypeName {
  const char* name;
  DLDataType dtype;
};
// The canonical names first (tensorplug/vocabulary.h), then the input-only aliases.
constexpr DTypeName kDTypeNames[] = {
#define TP_X(name, code, bits) {name, {code, bits, 1}},
    TP_DTYPES(TP_X) TP_DTYPE_ALIASES(TP_X)
#undef TP_X
};

struct DeviceName {
  int32_t type;
  const char* name;
};
constexpr DeviceName kDeviceNames[] = {
#define TP_X(type, name) {type, name},
    TP_DEVICE_TYPES(TP_X)
#undef TP_X
};

}  // namespace

const char* DeviceTypeName(int32_t device_type) {
  for (const auto& d : kDeviceNames) {
    if (d.type == device_type) return d.name;
  }
  return nullptr;
}

int32_t DeviceTypeFromName(const std::string& name) {
  for (const auto& d : kDeviceNames) {
    if (name == d.name) return d.type;
  }
#define TP_X(type, alias) \
  if (name == alias) return type;
  TP_DEVICE_ALIASES(TP_X)
#undef TP_X
  return -1;
}

bool DTypeFromString(const char* s, DLDataType* out) { return DataTypeFromString(s, out); }

PyObject* DTypeToPython(DLDataType dtype) {
  for (const auto& entry : kDTypeNames) {
    if (entry.dtype.code == dtype.code && entry.dtype.bits == dtype.bits) {
      if (dtype.lanes == 1) return PyUnicode_FromString(entry.name);
      return PyUnicode_FromFormat("%sx%d", entry.name, int(dtype.lanes));
    }
  }
  return PyUnicode_FromFormat("dtype(code=%d, bits=%d, lanes=%d)", int(dtype.code), int(dtype.bits), int(dtype.lanes));
}

bool DeviceFromString(const char* s, DLDevice* out) {
  std::string text(s);
  std::string type = text;
  int32_t id = 0;
  size_t colon = text.find(':');
  if (colon != std::string::npos) {
    type = text.substr(0, colon);
    std::string digits = text.substr(colon + 1);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return false;
    int64_t value = 0;  // DLPack device ids are int32: refuse larger ones, don't wrap or throw
    for (char c : digits) {
      value = value * 10 + (c - '0');
      if (value > INT32_MAX) return false;
    }
    id = static_cast<int32_t>(value);
  }
  int32_t code = DeviceTypeFromName(type);
  if (code < 0) return false;
  out->device_type = static_cast<DLDeviceType>(code);
  out->device_id = id;
  return true;
}

PyObject* DeviceToPython(DLDevice device) {
  const char* name = DeviceTypeName(device.device_type);
  PyObject* type = name ? PyUnicode_FromString(name) : PyUnicode_FromFormat("device%d", int(device.device_type));
  if (!type) return nullptr;
  PyObject* result = g_device_class ? PyObject_CallFunction(g_device_class, "Oi", type, int(device.device_id))
                                    : PyUnicode_FromFormat("%U:%d", type, int(device.device_id));
  Py_DECREF(type);
  return result;
}

// ---------------------------------------------------------------- capsules ----
namespace {

// Legacy (pre-1.0) tensors, versioned ones without strides, and borrowed views are
// wrapped into a versioned tensor that owns its own shape and strides.
struct LegacyCtx {
  DLManagedTensor* legacy;               // may be null for the versioned-without-strides case
  DLManagedTensorVersioned* versioned;   // the inner versioned tensor, or null
  int64_t dims[1];                       // shape then strides (2 * ndim), allocated inline
};
void DeleteLegacy(DLManagedTensorVersioned* self) {
  auto* ctx = static_cast<LegacyCtx*>(self->manager_ctx);
  if (ctx->legacy && ctx->legacy->deleter) ctx->legacy->deleter(ctx->legacy);
  if (ctx->versioned && ctx->versioned->deleter) ctx->versioned->deleter(ctx->versioned);
  std::free(ctx);
  delete self;
}

DLManagedTensorVersioned* WrapWithStrides(const DLTensor& src, uint64_t flags, DLManagedTensor* legacy,
                                          DLManagedTensorVersioned* versioned) {
  int32_t ndim = src.ndim;
  if (ndim < 0 || ndim > TP_MAX_NDIM || (ndim > 0 && !src.shape)) return nullptr;  // callers check layout first
  auto* ctx = static_cast<LegacyCtx*>(std::malloc(sizeof(LegacyCtx) + sizeof(int64_t) * 2 * (ndim > 0 ? ndim : 1)));
  auto* out = new (std::nothrow) DLManagedTensorVersioned;
  if (!ctx || !out) {
    std::free(ctx);
    delete out;
    return nullptr;
  }
  ctx->legacy = legacy;
  ctx->versioned = versioned;
  int64_t* shape = ctx->dims;
  int64_t* strides = ctx->dims + ndim;
  for (int32_t i = 0; i < ndim; ++i) shape[i] = src.shape[i];
  if (src.strides) {
    for (int32_t i = 0; i < ndim; ++i) strides[i] = src.strides[i];
  } else {
    tensorplug::detail::FillContiguousStrides(ndim, shape, strides);  // DLPack's meaning of NULL
  }
  out->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  out->manager_ctx = ctx;
  out->deleter = Guarded<DeleteLegacy>;
  out->flags = flags;
  out->dl_tensor = src;
  out->dl_tensor.shape = ndim ? shape : nullptr;
  out->dl_tensor.strides = ndim ? strides : nullptr;
  return out;
}

void VersionedCapsuleDestructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {  // never consumed
    auto* managed = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, "dltensor_versioned"));
    if (managed && managed->deleter) managed->deleter(managed);
  }
}

void LegacyCapsuleDestructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (managed && managed->deleter) managed->deleter(managed);
  }
}

}  // namespace

DLManagedTensorVersioned* DescribeWithoutOwning(const DLTensor& src, uint64_t flags) {
  return WrapWithStrides(src, flags, nullptr, nullptr);
}

DLManagedTensorVersioned* WithExplicitStrides(DLManagedTensorVersioned* managed) {
  DLManagedTensorVersioned* wrapped = WrapWithStrides(managed->dl_tensor, managed->flags, nullptr, managed);
  if (!wrapped) {
    if (managed->deleter) managed->deleter(managed);
    PyErr_NoMemory();
  }
  return wrapped;
}

bool TensorLayoutError(const DLTensor& t, const char* what, PyObject* exc_type) {
  if (t.ndim < 0) {
    PyErr_Format(exc_type, "%s has a negative number of dimensions (%d)", what, int(t.ndim));
  } else if (t.ndim > TP_MAX_NDIM) {
    PyErr_Format(exc_type, "%s has %d dimensions; tensorplug supports at most %d", what, int(t.ndim),
                 TP_MAX_NDIM);
  } else {
    PyErr_Format(exc_type, "%s has %d dimensions but a NULL shape", what, int(t.ndim));
  }
  return false;
}

int ManagedFromCapsule(PyObject* capsule, DLManagedTensorVersioned** out) {
  if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    auto* managed = static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, "dltensor_versioned"));
    if (!managed) return -1;
    if (managed->version.major != DLPACK_MAJOR_VERSION) {
      PyErr_Format(PyExc_BufferError, "DLPack major version %u is not supported (expected %d)",
                   managed->version.major, DLPACK_MAJOR_VERSION);
      return -1;
    }
    if (!CheckTensorLayout(managed->dl_tensor, "DLPack capsule", PyExc_BufferError)) return -1;
    if (managed->dl_tensor.ndim > 0 && managed->dl_tensor.strides == nullptr) {
      DLManagedTensorVersioned* wrapped = WrapWithStrides(managed->dl_tensor, managed->flags, nullptr, managed);
      if (!wrapped) {
        PyErr_NoMemory();
        return -1;
      }
      managed = wrapped;
    }
    PyCapsule_SetName(capsule, "used_dltensor_versioned");
    *out = managed;
    return 0;
  }
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* legacy = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (!legacy) return -1;
    if (!CheckTensorLayout(legacy->dl_tensor, "DLPack capsule", PyExc_BufferError)) return -1;
    DLManagedTensorVersioned* wrapped = WrapWithStrides(legacy->dl_tensor, 0, legacy, nullptr);
    if (!wrapped) {
      PyErr_NoMemory();
      return -1;
    }
    PyCapsule_SetName(capsule, "used_dltensor");
    *out = wrapped;
    return 0;
  }
  if (!PyCapsule_CheckExact(capsule)) {
    PyErr_Format(PyExc_TypeError, "__dlpack__() returned %s, expected a DLPack capsule", Py_TYPE(capsule)->tp_name);
  } else {
    PyErr_SetString(PyExc_ValueError,
                    "expected an unconsumed DLPack capsule ('dltensor_versioned' or 'dltensor'); "
                    "a DLPack capsule can be consumed only once");
  }
  return -1;
}

PyObject* CapsuleFromManaged(DLManagedTensorVersioned* managed) {
  PyObject* capsule = PyCapsule_New(managed, "dltensor_versioned", Guarded<VersionedCapsuleDestructor>);
  if (!capsule && managed->deleter) managed->deleter(managed);
  return capsule;
}

// --------------------------------------------------------------- the Tensor ----
namespace {

// A managed tensor exported from a tensorplug.Tensor holds a reference to it.
void DeleteTensorRef(DLManagedTensorVersioned* self) {
  if (PythonUsable()) {  // after Py_Finalize the Tensor is leaked, not touched
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(static_cast<PyObject*>(self->manager_ctx));
    PyGILState_Release(gil);
  }
  delete self;
}
void DeleteTensorRefLegacy(DLManagedTensor* self) {
  if (PythonUsable()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(static_cast<PyObject*>(self->manager_ctx));
    PyGILState_Release(gil);
  }
  delete self;
}

DLManagedTensorVersioned* ExportRef(PyObject* tensor) {
  DLManagedTensorVersioned* source = reinterpret_cast<TensorObject*>(tensor)->managed;
  auto* managed = new (std::nothrow) DLManagedTensorVersioned;
  if (!managed) return nullptr;
  managed->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  managed->manager_ctx = Py_NewRef(tensor);
  managed->deleter = Guarded<DeleteTensorRef>;
  managed->flags = source->flags;
  managed->dl_tensor = source->dl_tensor;
  return managed;
}

void TensorDealloc(PyObject* self) {
  auto* t = reinterpret_cast<TensorObject*>(self);
  if (t->weakrefs) PyObject_ClearWeakRefs(self);
  if (t->managed && t->managed->deleter) t->managed->deleter(t->managed);
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

const DLTensor& DL(PyObject* self) { return reinterpret_cast<TensorObject*>(self)->managed->dl_tensor; }

// False with ValueError set when `self` is a view lent to a callback that has returned.
bool Usable(PyObject* self) {
  if (!reinterpret_cast<TensorObject*>(self)->expired) return true;
  PyErr_SetString(PyExc_ValueError,
                  "this tensorplug.Tensor was lent to a Python callback and is no longer valid: its data "
                  "belongs to the kernel's caller and may be freed once the callback returns; copy what you "
                  "need inside the callback");
  return false;
}

PyObject* IntTuple(const int64_t* values, int32_t n) {
  PyObject* tuple = PyTuple_New(n);
  for (int32_t i = 0; tuple && i < n; ++i) {
    PyObject* item = PyLong_FromLongLong(values[i]);
    if (!item) {
      Py_CLEAR(tuple);
      break;
    }
    PyTuple_SET_ITEM(tuple, i, item);
  }
  return tuple;
}

PyObject* TensorShape(PyObject* self, void*) {
  if (!Usable(self)) return nullptr;
  return IntTuple(DL(self).shape, DL(self).ndim);
}
PyObject* TensorStrides(PyObject* self, void*) {
  if (!Usable(self)) return nullptr;
  const DLTensor& t = DL(self);
  if (t.strides || t.ndim == 0) return IntTuple(t.strides, t.ndim);
  int64_t compact[TP_MAX_NDIM];  // NULL strides: compact row-major (DLPack's meaning)
  tensorplug::detail::FillContiguousStrides(t.ndim, t.shape, compact);
  return IntTuple(compact, t.ndim);
}
PyObject* TensorNDim(PyObject* self, void*) {
  if (!Usable(self)) return nullptr;
  return PyLong_FromLong(DL(self).ndim);
}
PyObject* TensorDType(PyObject* self, void*) {
  if (!Usable(self)) return nullptr;
  return DTypeToPython(DL(self).dtype);
}
PyObject* TensorDevice(PyObject* self, void*) {
  if (!Usable(self)) return nullptr;
  return DeviceToPython(DL(self).device);
}
PyObject* TensorDataPtr(PyObject* self, void*) {
  if (!Usable(self)) return nullptr;
  return PyLong_FromVoidPtr(static_cast<char*>(DL(self).data) + DL(self).byte_offset);
}
PyObject* TensorReadOnly(PyObject* self, void*) {
  if (!Usable(self)) return nullptr;
  return PyBool_FromLong(reinterpret_cast<TensorObject*>(self)->managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY);
}

PyObject* TensorDLPackDevice(PyObject* self, PyObject*) {
  if (!Usable(self)) return nullptr;
  return Py_BuildValue("(ii)", int(DL(self).device.device_type), int(DL(self).device.device_id));
}

// __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)
PyObject* TensorDLPack(PyObject* self, PyObject* args, PyObject* kwargs) {
  if (!Usable(self)) return nullptr;
  static const char* kwlist[] = {"stream", "max_version", "dl_device", "copy", nullptr};
  PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO", const_cast<char**>(kwlist), &stream, &max_version,
                                   &dl_device, &copy)) {
    return nullptr;
  }
  if (copy == Py_True) {
    PyErr_SetString(PyExc_BufferError, "tensorplug.Tensor cannot export a copy (copy=True)");
    return nullptr;
  }
  if (dl_device != Py_None) {
    int type = 0, id = 0;
    if (!PyArg_ParseTuple(dl_device, "ii", &type, &id)) return nullptr;
    if (type != DL(self).device.device_type || id != DL(self).device.device_id) {
      PyErr_SetString(PyExc_BufferError, "tensorplug.Tensor cannot export to another device");
      return nullptr;
    }
  }
  long major = 0;
  if (max_version != Py_None) {
    if (!PyTuple_Check(max_version) || PyTuple_GET_SIZE(max_version) < 1) {
      PyErr_SetString(PyExc_TypeError, "max_version must be a (major, minor) tuple");
      return nullptr;
    }
    major = PyLong_AsLong(PyTuple_GET_ITEM(max_version, 0));
    if (major == -1 && PyErr_Occurred()) return nullptr;
  }
  if (major >= 1) {
    DLManagedTensorVersioned* managed = ExportRef(self);
    if (!managed) return PyErr_NoMemory();
    return CapsuleFromManaged(managed);
  }
  // A consumer that only speaks pre-1.0 DLPack.
  auto* legacy = new (std::nothrow) DLManagedTensor;
  if (!legacy) return PyErr_NoMemory();
  legacy->dl_tensor = DL(self);
  legacy->manager_ctx = Py_NewRef(self);
  legacy->deleter = Guarded<DeleteTensorRefLegacy>;
  PyObject* capsule = PyCapsule_New(legacy, "dltensor", Guarded<LegacyCapsuleDestructor>);
  if (!capsule) DeleteTensorRefLegacy(legacy);
  return capsule;
}

PyObject* TensorRepr(PyObject* self) {
  if (reinterpret_cast<TensorObject*>(self)->expired) return PyUnicode_FromString("tensorplug.Tensor(<expired view>)");
  PyObject* shape = TensorShape(self, nullptr);
  PyObject* dtype = TensorDType(self, nullptr);
  PyObject* device = TensorDevice(self, nullptr);
  PyObject* r = (shape && dtype && device)
                    ? PyUnicode_FromFormat("tensorplug.Tensor(shape=%R, dtype=%U, device=%S)", shape, dtype, device)
                    : nullptr;
  Py_XDECREF(shape);
  Py_XDECREF(dtype);
  Py_XDECREF(device);
  return r;
}

PyGetSetDef kTensorGetSet[] = {
    {"shape", Guarded<TensorShape>, nullptr, "Extents, a tuple of ints.", nullptr},
    {"strides", Guarded<TensorStrides>, nullptr, "Strides in elements, a tuple of ints.", nullptr},
    {"ndim", Guarded<TensorNDim>, nullptr, "Number of dimensions.", nullptr},
    {"dtype", Guarded<TensorDType>, nullptr, "Element type name, e.g. 'float32'.", nullptr},
    {"device", Guarded<TensorDevice>, nullptr, "The tensorplug.Device holding the data.", nullptr},
    {"data_ptr", Guarded<TensorDataPtr>, nullptr, "Address of element 0.", nullptr},
    {"is_read_only", Guarded<TensorReadOnly>, nullptr, "Whether the data must not be written.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMethodDef kTensorMethods[] = {
    {"__dlpack__", GuardedMethod<TensorDLPack>(),
     METH_VARARGS | METH_KEYWORDS, "Export as a DLPack capsule (Python array API standard)."},
    {"__dlpack_device__", Guarded<TensorDLPackDevice>, METH_NOARGS, "(device_type, device_id) of the data."},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef kTensorMembers[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(TensorObject, weakrefs), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyObject* TensorNew(PyTypeObject*, PyObject*, PyObject*) {
  PyErr_SetString(PyExc_TypeError,
                  "tensorplug.Tensor cannot be created directly: use tensorplug.from_dlpack(obj) "
                  "or call a kernel");
  return nullptr;
}

PyType_Slot kTensorSlots[] = {
    {Py_tp_dealloc, GuardedSlot<TensorDealloc>()},
    {Py_tp_repr, GuardedSlot<TensorRepr>()},
    {Py_tp_getset, kTensorGetSet},
    {Py_tp_methods, kTensorMethods},
    {Py_tp_members, kTensorMembers},
    {Py_tp_new, GuardedSlot<TensorNew>()},
    {Py_tp_doc, const_cast<char*>("The core's own owning tensor: the result type of kernels called with "
                                  "no framework tensor. Every framework imports it through DLPack.")},
    {0, nullptr},
};

PyType_Spec kTensorSpec = {"tensorplug.Tensor", sizeof(TensorObject), 0, Py_TPFLAGS_DEFAULT, kTensorSlots};

// ------------------------------------------------------ the core's own table ----
int CoreViewFromObject(void* obj, DLTensor* out) {
  if (!Usable(static_cast<PyObject*>(obj))) return -1;
  *out = DL(static_cast<PyObject*>(obj));
  return 0;
}
int CoreManagedFromObject(void* obj, DLManagedTensorVersioned** out) {
  if (!Usable(static_cast<PyObject*>(obj))) return -1;
  *out = ExportRef(static_cast<PyObject*>(obj));
  if (!*out) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}
int CoreToObject(DLManagedTensorVersioned* managed, void** out) {
  PyObject* t = TensorFromManaged(managed);
  *out = t;
  return t ? 0 : -1;
}
int CoreCurrentStream(DLDeviceType, int32_t, void** out) {
  *out = nullptr;
  return 0;
}

DLPackExchangeAPI g_core_api = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, nullptr},
    nullptr,  // allocation falls back to libtensorplug's default CPU allocator
    Guarded<CoreManagedFromObject>,
    Guarded<CoreToObject>,
    Guarded<CoreViewFromObject>,
    Guarded<CoreCurrentStream>,
};
AdapterTable g_core_table;

}  // namespace

PyObject* TensorFromManaged(DLManagedTensorVersioned* managed) {
  if (managed->deleter == Guarded<DeleteTensorRef>) {  // a round trip: hand back the original
    PyObject* original = Py_NewRef(static_cast<PyObject*>(managed->manager_ctx));
    DeleteTensorRef(managed);
    return original;
  }
  auto* t = PyObject_New(TensorObject, TensorType);
  if (!t) {
    if (managed->deleter) managed->deleter(managed);
    return nullptr;
  }
  t->managed = managed;
  t->weakrefs = nullptr;
  t->expired = false;
  return reinterpret_cast<PyObject*>(t);
}

void InvalidateLentTensor(PyObject* tensor) {
  // Only the flag: shape and strides stay allocated until the object goes, since DLPack
  // exports made during the callback still point at them.
  if (Py_TYPE(tensor) == TensorType) reinterpret_cast<TensorObject*>(tensor)->expired = true;
}

DLManagedTensorVersioned* TensorManaged(PyObject* tensor) {
  return reinterpret_cast<TensorObject*>(tensor)->managed;
}

AdapterTable* CoreTensorTable() { return &g_core_table; }

bool InitTensorType(PyObject* module) {
  TensorType = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kTensorSpec));
  if (!TensorType) return false;
  PyObject* capsule = PyCapsule_New(&g_core_api, "dlpack_exchange_api", nullptr);
  if (!capsule) return false;
  // Other consumers of the DLPack C exchange API can use the core's table too.
  if (PyObject_SetAttrString(reinterpret_cast<PyObject*>(TensorType), "__dlpack_c_exchange_api__", capsule) < 0) {
    return false;
  }
  g_core_table.api = &g_core_api;
  g_core_table.owner = capsule;
  g_core_table.read_only = ReadOnlyPolicy::kProbe;  // a Tensor carries its producer's flag
  g_core_table.is_read_only = [](PyObject* obj) -> int {  // only after a successful import
    return (TensorManaged(obj)->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  };
  g_core_table.name = PyUnicode_InternFromString("tensorplug");
  return PyModule_AddObjectRef(module, "Tensor", reinterpret_cast<PyObject*>(TensorType)) == 0;
}

}  // namespace tensorplug::py
