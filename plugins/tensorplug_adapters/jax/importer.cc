// The jax importer (a "tensorplug.importer" capsule, tensorplug/python.h): jax arrays read
// without __dlpack__ (which costs about 2 us per array): the buffer pointer, shape, dtype and
// device straight off the array. jax arrays are row-major and immutable; the jax adapter
// marks them read-only.
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "native.h"

namespace tensorplug_adapters::jax {

namespace {

using tensorplug::python::Guarded;
using tensorplug::python::PythonUsable;

// Bound by InitImporter: numpy's dtype reader (jax arrays carry numpy dtypes) and the core's
// call scratch (the shape and strides of a view live there until the call returns).
struct DTypeReader {
  bool (*dtype_of)(PyObject* descr, DLDataType* out);
};
const DTypeReader* g_dtype_reader = nullptr;
const TPCallScratch* g_scratch = nullptr;

PyObject* Intern(const char* s) { return PyUnicode_InternFromString(s); }

struct Names {
  PyObject *block_until_ready, *unsafe_buffer_pointer, *aval, *shape, *dtype, *private_sharding, *sharding,
      *device, *platform, *id, *local_hardware_id;
  Names()
      : block_until_ready(Intern("block_until_ready")), unsafe_buffer_pointer(Intern("unsafe_buffer_pointer")),
        aval(Intern("aval")), shape(Intern("shape")), dtype(Intern("dtype")), private_sharding(Intern("_sharding")),
        sharding(Intern("sharding")), device(Intern("_device")), platform(Intern("platform")), id(Intern("id")),
        local_hardware_id(Intern("local_hardware_id")) {}
};

// The public `shape`, `dtype` and `sharding` of jax.Array are Python properties (about 1,100
// instructions each); `aval` and `_sharding` hold the same facts and cost a third. The
// public names remain the fallback should a jax release drop the private ones.
PyObject* GetAttrPreferring(PyObject* obj, PyObject* fast, PyObject* public_name) {
  PyObject* value = PyObject_GetAttr(obj, fast);
  if (value || !PyErr_ExceptionMatches(PyExc_AttributeError)) return value;
  PyErr_Clear();
  return PyObject_GetAttr(obj, public_name);
}

// Arrays already seen ready. jax arrays are immutable, so once ready an array stays ready
// (a deleted one makes unsafe_buffer_pointer() raise); block_until_ready() costs about
// 0.2 us, so repeated arguments skip it. Keyed by address, verified through a weak
// reference (a dead entry's address may be reused); cleared when it grows past a bound.
struct ReadyCache {
  std::unordered_map<PyObject*, PyObject*> refs;  // array -> weakref to it
  bool Contains(PyObject* array) const {
    auto it = refs.find(array);
    return it != refs.end() && PyWeakref_GetObject(it->second) == array;
  }
  void Add(PyObject* array) {
    if (refs.size() >= 4096) Clear();
    PyObject* ref = PyWeakref_NewRef(array, nullptr);
    if (!ref) {
      PyErr_Clear();  // not weak-referenceable: just not cached
      return;
    }
    auto [it, inserted] = refs.emplace(array, ref);
    if (!inserted) Py_SETREF(it->second, ref);
  }
  void Clear() {
    for (auto& entry : refs) Py_DECREF(entry.second);
    refs.clear();
  }
};
ReadyCache& Ready() {
  static auto* cache = new ReadyCache;
  return *cache;
}
const Names& N() {
  static const Names* names = new Names;
  return *names;
}

// jax Device objects are unique per device: cache their DLPack device by identity.
struct DeviceCacheEntry {
  PyObject* device;  // a strong reference
  DLDevice dl;
};
constexpr int kDeviceCacheSize = 16;
DeviceCacheEntry g_devices[kDeviceCacheSize];
int g_device_next = 0;

bool DeviceOf(PyObject* array, DLDevice* out) {
  PyObject* sharding = GetAttrPreferring(array, N().private_sharding, N().sharding);
  if (!sharding) return false;
  PyObject* device = PyObject_GetAttr(sharding, N().device);
  Py_DECREF(sharding);
  if (!device) {
    PyErr_SetString(PyExc_BufferError,
                    "a jax array sharded over several devices cannot be passed to a kernel; "
                    "move it to one device with jax.device_put");
    return false;
  }
  for (const auto& entry : g_devices) {
    if (entry.device == device) {
      *out = entry.dl;
      Py_DECREF(device);
      return true;
    }
  }
  bool ok = false;
  PyObject* platform = PyObject_GetAttr(device, N().platform);
  PyObject* id = platform ? PyObject_GetAttr(device, N().local_hardware_id) : nullptr;
  if (id == Py_None) {
    Py_DECREF(id);
    id = PyObject_GetAttr(device, N().id);
  } else if (!id && platform) {
    PyErr_Clear();
    id = PyObject_GetAttr(device, N().id);
  }
  const char* name = platform ? PyUnicode_AsUTF8(platform) : nullptr;
  long index = id ? PyLong_AsLong(id) : -1;
  if (name && !(index == -1 && PyErr_Occurred())) {
    int32_t type = std::strcmp(name, "cpu") == 0                                    ? kDLCPU
                   : (std::strcmp(name, "gpu") == 0 || std::strcmp(name, "cuda") == 0) ? kDLCUDA
                   : std::strcmp(name, "rocm") == 0                                  ? kDLROCM
                                                                                     : -1;
    if (type < 0) {
      PyErr_Format(PyExc_BufferError, "jax platform '%s' has no DLPack device type", name);
    } else {
      *out = {static_cast<DLDeviceType>(type), int32_t(index)};
      DeviceCacheEntry& slot = g_devices[g_device_next];
      g_device_next = (g_device_next + 1) % kDeviceCacheSize;
      Py_XDECREF(slot.device);
      slot = {Py_NewRef(device), *out};
      ok = true;
    }
  }
  Py_XDECREF(platform);
  Py_XDECREF(id);
  Py_DECREF(device);
  return ok;
}

// Fill everything but shape/strides storage; returns ndim, or -1 with an error set.
int Describe(PyObject* array, DLTensor* out, PyObject** shape_out) {
  // The buffer pointer is known before the computation producing it has finished.
  ReadyCache& ready_cache = Ready();
  if (!ready_cache.Contains(array)) {
    PyObject* ready = PyObject_CallMethodNoArgs(array, N().block_until_ready);
    if (!ready) return -1;
    Py_DECREF(ready);
    ready_cache.Add(array);
  }
  PyObject* pointer = PyObject_CallMethodNoArgs(array, N().unsafe_buffer_pointer);
  if (!pointer) return -1;
  out->data = PyLong_AsVoidPtr(pointer);
  Py_DECREF(pointer);
  if (!out->data && PyErr_Occurred()) return -1;
  PyObject* aval = PyObject_GetAttr(array, N().aval);  // a ShapedArray: shape and dtype
  if (!aval) {  // not there: the array's own (slower) properties
    PyErr_Clear();
    aval = Py_NewRef(array);
  }
  PyObject* dtype = PyObject_GetAttr(aval, N().dtype);
  if (!dtype) {
    Py_DECREF(aval);
    return -1;
  }
  bool known = g_dtype_reader->dtype_of(dtype, &out->dtype);
  if (!known) PyErr_Format(PyExc_BufferError, "jax dtype %R has no DLPack equivalent", dtype);
  Py_DECREF(dtype);
  if (!known || !DeviceOf(array, &out->device)) {
    Py_DECREF(aval);
    return -1;
  }
  PyObject* shape = PyObject_GetAttr(aval, N().shape);
  Py_DECREF(aval);
  if (!shape) return -1;
  if (!PyTuple_Check(shape)) {
    Py_DECREF(shape);
    PyErr_SetString(PyExc_BufferError, "jax array shape is not a tuple");
    return -1;
  }
  if (PyTuple_GET_SIZE(shape) > TP_MAX_NDIM) {  // before any shape storage is sized from it
    PyErr_Format(PyExc_BufferError, "jax array has %zd dimensions; tensorplug supports at most %d",
                 PyTuple_GET_SIZE(shape), TP_MAX_NDIM);
    Py_DECREF(shape);
    return -1;
  }
  out->byte_offset = 0;
  out->ndim = int32_t(PyTuple_GET_SIZE(shape));
  *shape_out = shape;
  return out->ndim;
}

// Row-major extents and strides from a shape tuple into dims[0:ndim] and dims[ndim:2*ndim].
bool FillDims(PyObject* shape, int32_t ndim, int64_t* dims) {
  int64_t stride = 1;
  for (int32_t i = ndim - 1; i >= 0; --i) {
    dims[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    if (dims[i] == -1 && PyErr_Occurred()) return false;
    if (dims[i] < 0) {
      PyErr_Format(PyExc_BufferError, "jax array shape has a negative extent (%lld)", (long long)dims[i]);
      return false;
    }
    dims[ndim + i] = stride;
    stride *= dims[i] > 1 ? dims[i] : 1;
  }
  return true;
}

void DeleteJaxManaged(DLManagedTensorVersioned* self) {
  if (PythonUsable()) {  // after Py_Finalize the array is leaked, not touched
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(static_cast<PyObject*>(self->manager_ctx));
    PyGILState_Release(gil);
  }
  std::free(self);
}

int JaxView(void* obj, DLTensor* out) {
  PyObject* shape = nullptr;
  int32_t ndim = Describe(static_cast<PyObject*>(obj), out, &shape);
  if (ndim < 0) return -1;
  int64_t* dims = ndim ? g_scratch->alloc(2 * ndim) : nullptr;  // lives until the call returns
  if (ndim && !dims) {
    Py_DECREF(shape);
    PyErr_NoMemory();
    return -1;
  }
  bool ok = FillDims(shape, ndim, dims);
  Py_DECREF(shape);
  out->shape = dims;
  out->strides = ndim ? dims + ndim : nullptr;
  return ok ? 0 : -1;
}

int JaxManaged(void* obj, DLManagedTensorVersioned** out) {
  DLTensor t;
  PyObject* shape = nullptr;
  int32_t ndim = Describe(static_cast<PyObject*>(obj), &t, &shape);
  if (ndim < 0) return -1;
  auto* managed = static_cast<DLManagedTensorVersioned*>(
      std::malloc(sizeof(DLManagedTensorVersioned) + sizeof(int64_t) * 2 * size_t(ndim)));
  if (!managed) {
    Py_DECREF(shape);
    PyErr_NoMemory();
    return -1;
  }
  auto* dims = reinterpret_cast<int64_t*>(managed + 1);
  bool ok = FillDims(shape, ndim, dims);
  Py_DECREF(shape);
  if (!ok) {
    std::free(managed);
    return -1;
  }
  t.shape = ndim ? dims : nullptr;
  t.strides = ndim ? dims + ndim : nullptr;
  managed->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  managed->manager_ctx = Py_NewRef(static_cast<PyObject*>(obj));  // keeps the buffer alive
  managed->deleter = Guarded<DeleteJaxManaged>;
  managed->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  managed->dl_tensor = t;
  *out = managed;
  return 0;
}

// A capsule's pointer, from module `module`'s function `function`; nullptr with an error set.
const void* CapsuleFrom(const char* module, const char* function, const char* name) {
  PyObject* mod = PyImport_ImportModule(module);
  PyObject* capsule = mod ? PyObject_CallMethod(mod, function, nullptr) : nullptr;
  Py_XDECREF(mod);
  const void* pointer = capsule ? PyCapsule_GetPointer(capsule, name) : nullptr;
  Py_XDECREF(capsule);  // both capsules point at statics their modules keep
  return pointer;
}

}  // namespace

const TPImporter kImporter{Guarded<JaxManaged>, Guarded<JaxView>};  // C code calls them

bool InitImporter() {
  g_dtype_reader = static_cast<const DTypeReader*>(
      CapsuleFrom("tensorplug_adapters.numpy._exchange", "dtype_reader", "tensorplug_adapters.numpy.dtype_reader"));
  g_scratch = static_cast<const TPCallScratch*>(CapsuleFrom("tensorplug", "call_scratch", TP_CALL_SCRATCH_CAPSULE));
  return g_dtype_reader != nullptr && g_scratch != nullptr;
}

}  // namespace tensorplug_adapters::jax
