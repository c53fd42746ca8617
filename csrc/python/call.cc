// tensorplug's Function object and the call path:
//   resolve arguments -> pick the primary tensor -> set stream and allocator ->
//   call -> restore -> convert the result.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common.h"

#include <structmember.h>

namespace tensorplug::py {

PyTypeObject* FunctionType = nullptr;
extern PyObject* g_device_class;

// ============================================================ thread state ====
thread_local ThreadState* tls_thread_state __attribute__((tls_model("initial-exec"))) = nullptr;

ThreadState* NewThreadState() {
  // Owned by a thread_local so that it is destroyed when the thread ends.
  static thread_local std::unique_ptr<ThreadState> owner;
  owner.reset(new ThreadState);
  tls_thread_state = owner.get();
  return tls_thread_state;
}

// ================================================================= scratch ====
namespace {
constexpr int32_t kScratchBlock = 4096;  // int64 per block
}  // namespace

ScratchMark ScratchSave() {
  ThreadState& ts = TS();
  return {ts.scratch_block, ts.scratch_offset};
}
void ScratchRestore(ScratchMark mark) {
  ThreadState& ts = TS();
  ts.scratch_block = mark.block;
  ts.scratch_offset = mark.offset;
}
int64_t* ScratchAlloc(int32_t count) {
  // Callers check ndim <= TP_MAX_NDIM first (at most 2 * 64 values); a larger request
  // would not fit in a block, and is refused rather than written past it.
  if (count < 0 || count > kScratchBlock) return nullptr;
  ThreadState& s = TS();
  if (s.scratch_blocks.empty()) s.scratch_blocks.emplace_back(new int64_t[kScratchBlock]);
  if (s.scratch_offset + count > kScratchBlock) {
    ++s.scratch_block;
    s.scratch_offset = 0;
    if (s.scratch_block == int32_t(s.scratch_blocks.size())) s.scratch_blocks.emplace_back(new int64_t[kScratchBlock]);
  }
  int64_t* p = s.scratch_blocks[s.scratch_block].get() + s.scratch_offset;
  s.scratch_offset += count;
  return p;
}

// =============================================================== overrides ====
std::atomic<int64_t> g_live_overrides{0};

PyObject* OverrideVar() {
  static PyObject* var = PyContextVar_New("tensorplug.overrides", nullptr);  // never freed
  return var;
}

// What a call applies, packed once when a context is entered (a bytes object, the third
// item of the ContextVar's tuple): reading it costs no Python integer conversions.
struct PackedOverrides {
  AdapterTable* output;
  int32_t num_streams;
  struct {
    int32_t device_type, device_id;
    void* stream;
  } streams[1];  // num_streams of them
};

// _core.pack_overrides(streams, output) -> bytes, for tensorplug._context.
PyObject* PackOverrides(PyObject* streams, PyObject* output_capsule) {
  if (!PyTuple_Check(streams)) return PyErr_Format(PyExc_TypeError, "pack_overrides(): streams must be a tuple");
  Py_ssize_t n = PyTuple_GET_SIZE(streams);
  if (n > kMaxStreamOverrides) {
    return PyErr_Format(PyExc_ValueError, "more than %d devices have a stream override in this context",
                        kMaxStreamOverrides);
  }
  const size_t size = sizeof(PackedOverrides) + sizeof(PackedOverrides::streams[0]) * size_t(n);
  PyObject* bytes = PyBytes_FromStringAndSize(nullptr, Py_ssize_t(size));
  if (!bytes) return nullptr;
  auto* packed = reinterpret_cast<PackedOverrides*>(PyBytes_AS_STRING(bytes));
  std::memset(packed, 0, size);
  packed->num_streams = int32_t(n);
  if (output_capsule != Py_None) {
    packed->output = static_cast<AdapterTable*>(PyCapsule_GetPointer(output_capsule, "tensorplug.adapter_table"));
    if (!packed->output) return Py_DECREF(bytes), nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    int device_type = 0, device_id = 0;
    PyObject* handle = nullptr;
    if (!PyArg_ParseTuple(PyTuple_GET_ITEM(streams, i), "iiO", &device_type, &device_id, &handle)) {
      return Py_DECREF(bytes), nullptr;
    }
    void* stream = handle == Py_None ? nullptr : PyLong_AsVoidPtr(handle);
    if (PyErr_Occurred()) return Py_DECREF(bytes), nullptr;
    packed->streams[i] = {device_type, device_id, stream};
  }
  return bytes;
}

bool AppliedOverrides::Apply() {
  PyObject* state = nullptr;
  if (PyContextVar_Get(OverrideVar(), Py_None, &state) < 0) return false;
  if (state != Py_None) {
    // Built by tensorplug._context only: (streams, output, packed).
    const auto* packed = reinterpret_cast<const PackedOverrides*>(PyBytes_AS_STRING(PyTuple_GET_ITEM(state, 2)));
    output = packed->output;
    for (int32_t i = 0; i < packed->num_streams; ++i) {
      const auto& e = packed->streams[i];
      streams[num_streams++] = {e.device_type, e.device_id, TPEnvSetStream(e.device_type, e.device_id, e.stream)};
    }
  }
  Py_DECREF(state);
  return true;
}

void AppliedOverrides::Restore() {
  while (num_streams > 0) {
    --num_streams;
    TPEnvSetStream(streams[num_streams].device_type, streams[num_streams].device_id, streams[num_streams].previous);
  }
}

// ================================================================== errors ====
namespace {
PyObject* ExceptionForKind(const std::string& kind) {
  struct Entry {
    const char* name;
    PyObject** type;
  };
  static const Entry kTable[] = {
      {"ValueError", &PyExc_ValueError},         {"TypeError", &PyExc_TypeError},
      {"IndexError", &PyExc_IndexError},         {"KeyError", &PyExc_KeyError},
      {"AttributeError", &PyExc_AttributeError}, {"NotImplementedError", &PyExc_NotImplementedError},
      {"MemoryError", &PyExc_MemoryError},       {"OverflowError", &PyExc_OverflowError},
      {"ZeroDivisionError", &PyExc_ZeroDivisionError}, {"RuntimeError", &PyExc_RuntimeError},
      {"FileNotFoundError", &PyExc_FileNotFoundError}, {"BufferError", &PyExc_BufferError},
      {"AssertionError", &PyExc_AssertionError},
  };
  for (const auto& e : kTable) {
    if (kind == e.name) return *e.type;
  }
  return nullptr;
}
}  // namespace

void SetErrorViaTP(void*, const char* kind, const char* message) { TPErrorSet(kind, message); }

void SetErrorFromCxxException() noexcept {
  // Called from C code (exchange tables, deleters' callers) too: only with the GIL.
  if (!PythonUsable() || !PyGILState_Check()) return;
  try {
    throw;
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "tensorplug internal error (C++ exception): %s", e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "tensorplug internal error: unknown C++ exception");
  }
}

void TPErrorFromPython() {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  if (traceback && value) PyException_SetTraceback(value, traceback);
  std::string kind = type ? reinterpret_cast<PyTypeObject*>(type)->tp_name : "RuntimeError";
  std::string message;
  if (PyObject* text = value ? PyObject_Str(value) : nullptr) {
    const char* utf8 = PyUnicode_AsUTF8(text);
    if (utf8) message = utf8;
    Py_DECREF(text);
  }
  PyErr_Clear();
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  ThreadState& ts = TS();
  Py_XSETREF(ts.pending_exception, value);
  ts.pending_kind = kind;
  ts.pending_message = message;
  TPErrorSet(kind.c_str(), message.c_str());
}

PyObject* RaiseFromTPError() {
  const char* kind = "RuntimeError";
  const char* message = "kernel failed without reporting an error";
  TPErrorGet(&kind, &message);
  std::string k(kind), m(message);
  TPErrorClear();
  ThreadState& ts = TS();
  PyObject* pending = ts.pending_exception;
  ts.pending_exception = nullptr;
  if (pending && k == ts.pending_kind && m == ts.pending_message) {  // a callback's own exception
    PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(pending)), pending);
    Py_DECREF(pending);
    return nullptr;
  }
  Py_XDECREF(pending);
  if (PyObject* type = ExceptionForKind(k)) {
    if (type == PyExc_KeyError) {  // KeyError would repr() its message
      PyObject* text = PyUnicode_FromString(m.c_str());
      if (text) PyErr_SetObject(type, Py_BuildValue("(N)", text));
    } else {
      PyErr_SetString(type, m.c_str());
    }
  } else {
    PyErr_Format(PyExc_RuntimeError, "%s: %s", k.c_str(), m.c_str());
  }
  return nullptr;
}

// =============================================================== signature ====
namespace {

enum class Kind : uint8_t { kAny, kView, kTensor, kInt, kFloat, kBool, kStr, kDevice, kDType, kFunc };

struct Param {
  Kind kind;
  bool optional;
  std::string name;
};

struct Signature {
  bool known = false;  // false: accept any arguments, tensors as views
  std::vector<Param> params;
  std::string result;
  std::string text;
};

bool ParseKind(const std::string& s, Kind* kind) {
  static const std::pair<const char*, Kind> kKinds[] = {
      {"view", Kind::kView},     {"tensor", Kind::kTensor}, {"int", Kind::kInt},   {"float", Kind::kFloat},
      {"bool", Kind::kBool},     {"str", Kind::kStr},       {"device", Kind::kDevice},
      {"dtype", Kind::kDType},   {"func", Kind::kFunc},     {"any", Kind::kAny},
  };
  for (const auto& [name, k] : kKinds) {
    if (s == name) {
      *kind = k;
      return true;
    }
  }
  return false;
}

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kView: case Kind::kTensor: return "a tensor";
    case Kind::kInt: return "an int";
    case Kind::kFloat: return "a float";
    case Kind::kBool: return "a bool";
    case Kind::kStr: return "a str";
    case Kind::kDevice: return "a device";
    case Kind::kDType: return "a dtype";
    case Kind::kFunc: return "a callable";
    default: return "a tensor, scalar, str, device, dtype, None or callable";
  }
}

// "x:view;y:?int->tensor"; returns false on a malformed string.
bool ParseSignature(const char* text, Signature* sig) {
  sig->text = text;
  std::string s(text);
  size_t arrow = s.find("->");
  if (arrow == std::string::npos) return false;
  sig->result = s.substr(arrow + 2);
  std::string params = s.substr(0, arrow);
  size_t start = 0;
  while (start < params.size()) {
    size_t end = params.find(';', start);
    if (end == std::string::npos) end = params.size();
    std::string item = params.substr(start, end - start);
    size_t colon = item.find(':');
    if (colon == std::string::npos) return false;
    Param p;
    p.name = item.substr(0, colon);
    std::string kind = item.substr(colon + 1);
    p.optional = !kind.empty() && kind[0] == '?';
    if (p.optional) kind = kind.substr(1);
    if (!ParseKind(kind, &p.kind)) return false;
    sig->params.push_back(std::move(p));
    start = end + 1;
  }
  sig->known = true;
  return true;
}

}  // namespace

// ================================================================ Function ====
namespace {

struct FunctionObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  TPFunctionHandle handle;
  TPPackedFunc entry;
  void* self;
  Signature* sig;
  PyObject* name;
  PyObject* py_signature;  // cached inspect.Signature
  bool release_gil;
};

constexpr int kMaxArgs = 64;
constexpr int kInlineArgs = 16;  // frames for up to this many arguments live on the stack
PyObject* g_signature_builder = nullptr;  // tensorplug._signature.build(name, text)

template <int N>
struct FrameStorage {
  TPAny packed[N];
  DLTensor views[N];
  DLManagedTensorVersioned* owned[N];
  TPFunctionHandle funcs[N];
};

// Everything a call must undo.
struct CallFrame {
  template <int N>
  explicit CallFrame(FrameStorage<N>& storage)
      : packed(storage.packed), views(storage.views), owned(storage.owned), funcs(storage.funcs) {}
  TPAny* packed;
  DLTensor* views;
  DLManagedTensorVersioned** owned;  // owning exports used as views: freed after the call
  int num_owned = 0;
  TPFunctionHandle* funcs;           // functions made for Python callables
  int num_funcs = 0;
  int primary = -1;
  DLDevice primary_device{kDLCPU, 0};
  AdapterTable* primary_table = nullptr;

  void Release(int upto) {
    for (int i = 0; i < num_owned; ++i) {
      if (owned[i]->deleter) owned[i]->deleter(owned[i]);
    }
    num_owned = 0;
    for (int i = 0; i < num_funcs; ++i) TPFunctionRelease(funcs[i]);
    num_funcs = 0;
    // Owning tensors not yet handed to the callee.
    for (int i = 0; i < upto; ++i) {
      if (packed[i].type_index == kTPTensor) TPAnyRelease(&packed[i]);
    }
  }
};

PyObject* ArgError(FunctionObject* f, int index, const Param* param, const char* expected, PyObject* obj) {
  if (param) {
    PyErr_Format(PyExc_TypeError, "%U() argument %d '%s': expected %s, got %s", f->name, index + 1,
                 param->name.c_str(), expected, Py_TYPE(obj)->tp_name);
  } else {
    PyErr_Format(PyExc_TypeError, "%U() argument %d: expected %s, got %s", f->name, index + 1, expected,
                 Py_TYPE(obj)->tp_name);
  }
  return nullptr;
}

// Prefix a conversion error (already set) with the argument it concerns.
void AnnotateError(FunctionObject* f, int index, const Param* param) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  PyObject* text = value ? PyObject_Str(value) : nullptr;
  if (text) {
    // torch appends its C++ backtrace ("\nException raised from ..."): keep the message.
    static PyObject* const marker = PyUnicode_InternFromString("\nException raised from");
    Py_ssize_t cut = PyUnicode_Find(text, marker, 0, PyUnicode_GET_LENGTH(text), 1);
    if (cut > 0) Py_SETREF(text, PyUnicode_Substring(text, 0, cut));
  }
  if (param) {
    PyErr_Format(type, "%U() argument %d '%s': %S", f->name, index + 1, param->name.c_str(), text);
  } else {
    PyErr_Format(type, "%U() argument %d: %S", f->name, index + 1, text);
  }
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
}

int CallPythonCallable(void* self, const TPAny* args, int32_t nargs, TPAny* result);
void DeletePythonCallable(void* self);

// 0: converted; -1: a specific error is set (an index out of range); -2: not a device
// (an error may be set, the caller replaces it).
int ToDevice(PyObject* obj, DLDevice* out) {
  if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 2) {  // (device_type, device_id)
    int type = 0, id = 0;
    if (!PyArg_ParseTuple(obj, "ii", &type, &id)) return PyErr_ExceptionMatches(PyExc_OverflowError) ? -1 : -2;
    *out = {static_cast<DLDeviceType>(type), id};
    return 0;
  }
  PyObject* text = PyObject_Str(obj);  // tensorplug.Device, "cuda:0", torch.device, ...
  if (!text) return -2;
  const char* s = PyUnicode_AsUTF8(text);
  int rc = s && DeviceFromString(s, out) ? 0 : -2;
  if (rc != 0 && s) {
    const char* colon = std::strchr(s, ':');
    size_t digits = colon ? std::strspn(colon + 1, "0123456789") : 0;
    if (digits > 0 && colon[1 + digits] == '\0') {  // "<type>:<digits>" whose index does not fit
      PyErr_Format(PyExc_ValueError, "device index %s of '%s' is out of range (at most %d)", colon + 1, s,
                   int(INT32_MAX));
      rc = -1;
    }
  }
  Py_DECREF(text);
  return rc;
}

int ToDType(PyObject* obj, DLDataType* out) {
  PyObject* text = PyObject_Str(obj);  // "float32", numpy.dtype, torch.float32, ...
  if (!text) return -1;
  const char* s = PyUnicode_AsUTF8(text);
  bool ok = s && DTypeFromString(s, out);
  Py_DECREF(text);
  return ok ? 0 : -1;
}

// Convert argument i. Returns false with a Python error set.
bool ConvertArg(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  out.type_index = kTPNone;  // a failed conversion leaves nothing for the frame to release
  out.flags = 0;
  Kind kind = param ? param->kind : Kind::kAny;
  if (obj == Py_None && (kind == Kind::kAny || (param && param->optional))) {
    out.type_index = kTPNone;
    out.v_int64 = 0;
    return true;
  }
  PyTypeObject* type = Py_TYPE(obj);
  switch (kind) {
    case Kind::kInt:
      if (type == &PyBool_Type || !PyLong_Check(obj)) return ArgError(f, i, param, "an int", obj), false;
      out.type_index = kTPInt;
      out.v_int64 = PyLong_AsLongLong(obj);
      if (out.v_int64 == -1 && PyErr_Occurred()) return AnnotateError(f, i, param), false;
      return true;
    case Kind::kFloat:
      if (!PyFloat_Check(obj) && !(PyLong_Check(obj) && type != &PyBool_Type)) {
        return ArgError(f, i, param, "a float", obj), false;
      }
      out.type_index = kTPFloat;
      out.v_float64 = PyFloat_AsDouble(obj);
      if (out.v_float64 == -1.0 && PyErr_Occurred()) return AnnotateError(f, i, param), false;
      return true;
    case Kind::kBool:
      if (type != &PyBool_Type) return ArgError(f, i, param, "a bool", obj), false;
      out.type_index = kTPBool;
      out.v_int64 = obj == Py_True;
      return true;
    case Kind::kStr:
      if (!PyUnicode_Check(obj)) return ArgError(f, i, param, "a str", obj), false;
      out.type_index = kTPRawStr;
      out.v_c_str = PyUnicode_AsUTF8(obj);  // owned by obj, which outlives the call
      if (!out.v_c_str) return AnnotateError(f, i, param), false;
      return true;
    case Kind::kDevice:
      out.type_index = kTPDevice;
      if (int rc = ToDevice(obj, &out.v_device); rc != 0) {
        if (rc == -1) return AnnotateError(f, i, param), false;
        PyErr_Clear();
        return ArgError(f, i, param, "a device such as 'cpu', 'cuda:0' or (device_type, device_id)", obj), false;
      }
      return true;
    case Kind::kDType:
      out.type_index = kTPDataType;
      if (ToDType(obj, &out.v_dtype) != 0) {
        PyErr_Clear();
        return ArgError(f, i, param, "a dtype such as 'float32'", obj), false;
      }
      return true;
    case Kind::kFunc:
      break;
    case Kind::kAny:
      if (type == &PyBool_Type) {
        out.type_index = kTPBool;
        out.v_int64 = obj == Py_True;
        return true;
      }
      if (PyLong_CheckExact(obj)) {
        out.type_index = kTPInt;
        out.v_int64 = PyLong_AsLongLong(obj);
        if (out.v_int64 == -1 && PyErr_Occurred()) return AnnotateError(f, i, param), false;
        return true;
      }
      if (PyFloat_CheckExact(obj)) {
        out.type_index = kTPFloat;
        out.v_float64 = PyFloat_AS_DOUBLE(obj);
        return true;
      }
      if (PyUnicode_CheckExact(obj)) {
        out.type_index = kTPRawStr;
        out.v_c_str = PyUnicode_AsUTF8(obj);
        if (!out.v_c_str) return AnnotateError(f, i, param), false;
        return true;
      }
      if (g_device_class && PyObject_TypeCheck(obj, reinterpret_cast<PyTypeObject*>(g_device_class))) {
        out.type_index = kTPDevice;
        if (ToDevice(obj, &out.v_device) != 0) {
          if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "%R is not a device tensorplug knows", obj);
          return AnnotateError(f, i, param), false;
        }
        return true;
      }
      break;
    case Kind::kView:
    case Kind::kTensor:
      break;
  }

  // Functions: tensorplug functions pass their handle; Python callables get a wrapper.
  if (kind == Kind::kFunc || kind == Kind::kAny) {
    if (type == FunctionType) {
      out.type_index = kTPFunction;
      out.v_func = reinterpret_cast<FunctionObject*>(obj)->handle;  // lent for the call
      return true;
    }
  }

  // Tensors: through the adapter of the exact type.
  if (kind == Kind::kView || kind == Kind::kTensor || kind == Kind::kAny) {
    AdapterTable* table = LookupAdapter(type);
    if (table) {
      const DLPackExchangeAPI* api = table->api;
      PythonTableScope scope(table);
      DLTensor* view;
      if (kind != Kind::kTensor && api->dltensor_from_py_object_no_sync) {
        view = &frame.views[i];
        if (api->dltensor_from_py_object_no_sync(obj, view) != 0) return AnnotateError(f, i, param), false;
        bool read_only = table->read_only == ReadOnlyPolicy::kAlways ||
                         (table->read_only == ReadOnlyPolicy::kProbe && table->is_read_only(obj));
        out.type_index = kTPDLTensorPtr;
        out.flags = read_only ? TP_ANY_FLAG_READ_ONLY : 0;
        out.v_dltensor = view;
      } else {
        DLManagedTensorVersioned* managed = nullptr;
        if (api->managed_tensor_from_py_object_no_sync(obj, &managed) != 0) return AnnotateError(f, i, param), false;
        bool read_only = (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) || table->read_only == ReadOnlyPolicy::kAlways;
        view = &managed->dl_tensor;
        if (kind == Kind::kTensor) {
          if (read_only) managed->flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
          out.type_index = kTPTensor;  // moved to the callee
          out.v_tensor = managed;
        } else {
          frame.owned[frame.num_owned++] = managed;
          out.type_index = kTPDLTensorPtr;
          out.flags = read_only ? TP_ANY_FLAG_READ_ONLY : 0;
          out.v_dltensor = view;
        }
      }
      if (!CheckTensorLayout(*view, "tensor", PyExc_BufferError)) {
        return AnnotateError(f, i, param), false;  // the frame releases the export
      }
      if (table->complex_check && view->dtype.code == kDLComplex) {
        PyObject* ok = PyObject_CallOneArg(table->complex_check, obj);
        if (!ok) return AnnotateError(f, i, param), false;  // the frame releases the export
        Py_DECREF(ok);
      }
      // Primary: the first tensor on a non-CPU device, else the first tensor.
      if (frame.primary < 0 || (frame.primary_device.device_type == kDLCPU && view->device.device_type != kDLCPU)) {
        frame.primary = i;
        frame.primary_device = view->device;
        frame.primary_table = table;
      }
      return true;
    }
    if (PyErr_Occurred()) return AnnotateError(f, i, param), false;
    if (kind != Kind::kAny) return ArgError(f, i, param, "a tensor", obj), false;
  }

  if (PyCallable_Check(obj)) {
    TPFunctionHandle handle = nullptr;
    if (TPFunctionCreate(Py_NewRef(obj), Guarded<CallPythonCallable>, Guarded<DeletePythonCallable>, nullptr, &handle) != 0) {
      Py_DECREF(obj);
      return RaiseFromTPError(), false;
    }
    frame.funcs[frame.num_funcs++] = handle;
    out.type_index = kTPFunction;
    out.v_func = handle;
    return true;
  }
  return ArgError(f, i, param, KindName(kind), obj), false;
}

PyObject* TooManyArgs(FunctionObject* f, Py_ssize_t nargs) {
  return PyErr_Format(PyExc_TypeError, "%U() takes at most %d arguments, got %zd", f->name, kMaxArgs, nargs);
}

PyObject* ArityError(FunctionObject* f, Py_ssize_t nargs) {
  std::string names;
  for (const auto& p : f->sig->params) names += (names.empty() ? "" : ", ") + p.name;
  size_t n = f->sig->params.size();
  return PyErr_Format(PyExc_TypeError, "%U() takes %zu argument%s (%s), got %zd", f->name, n, n == 1 ? "" : "s",
                      names.c_str(), nargs);
}

PyObject* CallInFrame(FunctionObject* f, PyObject* const* args, Py_ssize_t nargs, CallFrame& frame);

PyObject* Call(FunctionObject* f, PyObject* const* args, Py_ssize_t nargs) {
  const Signature* sig = f->sig;
  if (sig->known && size_t(nargs) != sig->params.size()) return ArityError(f, nargs);
  if (nargs <= kInlineArgs) {
    FrameStorage<kInlineArgs> storage;
    CallFrame frame(storage);
    return CallInFrame(f, args, nargs, frame);
  }
  if (nargs > kMaxArgs) return TooManyArgs(f, nargs);
  auto storage = std::make_unique<FrameStorage<kMaxArgs>>();
  CallFrame frame(*storage);
  return CallInFrame(f, args, nargs, frame);
}

PyObject* CallInFrame(FunctionObject* f, PyObject* const* args, Py_ssize_t nargs, CallFrame& frame) {
  const Signature* sig = f->sig;
  ScratchMark mark = ScratchSave();
  for (Py_ssize_t i = 0; i < nargs; ++i) {
    if (!ConvertArg(f, frame, int(i), args[i], sig->known ? &sig->params[i] : nullptr)) {
      frame.Release(int(i) + 1);
      ScratchRestore(mark);
      return nullptr;
    }
  }

  // Stream, allocator and output type come from the primary tensor's adapter, unless an
  // explicit context overrides them. No context is live anywhere in the common case: then
  // no ContextVar is read.
  AppliedOverrides overrides;
  if (g_live_overrides.load(std::memory_order_relaxed) != 0 && !overrides.Apply()) {
    frame.Release(int(nargs));
    ScratchRestore(mark);
    return nullptr;
  }
  AdapterTable* output = overrides.output;
  if (!output) output = frame.primary_table;
  const DLDevice dev = frame.primary_device;
  bool stream_set = false;
  void* previous_stream = nullptr;
  if (frame.primary_table && dev.device_type != kDLCPU && !overrides.Overrides(dev.device_type, dev.device_id)) {
    void* stream = nullptr;
    auto query = frame.primary_table->api->current_work_stream;
    PythonTableScope scope(frame.primary_table);
    if (query && query(dev.device_type, dev.device_id, &stream) != 0) {
      overrides.Restore();
      frame.Release(int(nargs));
      ScratchRestore(mark);
      return nullptr;
    }
    previous_stream = TPEnvSetStream(dev.device_type, dev.device_id, stream);
    stream_set = true;
  }
  DLPackManagedTensorAllocator previous_alloc =
      TPEnvSetAllocator(output ? output->api->managed_tensor_allocator : nullptr);
  ThreadState& ts = TS();
  AdapterTable* previous_python = ts.python_table;
  ts.python_table = output;  // the allocator of a Python table finds its callables here
  ++ts.call_depth;

  TPAny result;
  result.type_index = kTPNone;
  result.flags = 0;
  result.v_int64 = 0;
  int rc;
  if (f->release_gil) {
    PyThreadState* state = PyEval_SaveThread();
    rc = f->entry(f->self, frame.packed, int32_t(nargs), &result);
    PyEval_RestoreThread(state);
  } else {
    rc = f->entry(f->self, frame.packed, int32_t(nargs), &result);
  }

  --ts.call_depth;
  ts.python_table = previous_python;
  TPEnvSetAllocator(previous_alloc);
  if (stream_set) TPEnvSetStream(dev.device_type, dev.device_id, previous_stream);
  overrides.Restore();
  frame.Release(0);  // owning tensor arguments now belong to the callee
  ScratchRestore(mark);

  if (rc != 0) {
    TPAnyRelease(&result);
    return RaiseFromTPError();
  }
  // A callback exception the kernel caught must not outlive the call (it holds frames).
  if (ts.pending_exception && ts.call_depth == 0) Py_CLEAR(ts.pending_exception);
  if (result.type_index == kTPNone) Py_RETURN_NONE;  // the common in-place kernel
  return ValueToPython(&result, output);
}

// Bind keyword arguments to positions using the signature's parameter names. Not inlined:
// it would make the positional call path (the common one) save registers it never uses.
__attribute__((noinline)) PyObject* CallWithKeywords(FunctionObject* f, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Signature* sig = f->sig;
  Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
  if (!sig->known) {
    return PyErr_Format(PyExc_TypeError, "%U() takes no keyword arguments (its library exports no signature)",
                        f->name);
  }
  size_t n = sig->params.size();
  if (size_t(nargs) > n) return ArityError(f, nargs);
  std::vector<PyObject*> bound(n, nullptr);
  for (Py_ssize_t i = 0; i < nargs; ++i) bound[i] = args[i];
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    const char* key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
    if (!key) return nullptr;
    size_t pos = 0;
    while (pos < n && sig->params[pos].name != key) ++pos;
    if (pos == n) return PyErr_Format(PyExc_TypeError, "%U() got an unexpected keyword argument '%s'", f->name, key);
    if (bound[pos]) return PyErr_Format(PyExc_TypeError, "%U() got multiple values for argument '%s'", f->name, key);
    bound[pos] = args[nargs + k];
  }
  for (size_t i = 0; i < n; ++i) {
    if (!bound[i]) return PyErr_Format(PyExc_TypeError, "%U() missing argument %zu '%s'", f->name, i + 1, sig->params[i].name.c_str());
  }
  return Call(f, bound.data(), Py_ssize_t(n));
}

PyObject* FunctionVectorcall(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* f = reinterpret_cast<FunctionObject*>(callable);
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (kwnames && PyTuple_GET_SIZE(kwnames)) return CallWithKeywords(f, args, nargs, kwnames);
  return Call(f, args, nargs);
}

void FunctionDealloc(PyObject* self) {
  auto* f = reinterpret_cast<FunctionObject*>(self);
  if (f->handle) TPFunctionRelease(f->handle);
  delete f->sig;
  Py_XDECREF(f->name);
  Py_XDECREF(f->py_signature);
  PyTypeObject* type = Py_TYPE(self);
  type->tp_free(self);
  Py_DECREF(type);
}

PyObject* FunctionRepr(PyObject* self) {
  auto* f = reinterpret_cast<FunctionObject*>(self);
  return PyUnicode_FromFormat("<tensorplug.Function %U>", f->name);
}

PyObject* FunctionGetName(PyObject* self, void*) { return Py_NewRef(reinterpret_cast<FunctionObject*>(self)->name); }
PyObject* FunctionGetSignatureText(PyObject* self, void*) {
  auto* f = reinterpret_cast<FunctionObject*>(self);
  if (!f->sig->known) Py_RETURN_NONE;
  return PyUnicode_FromString(f->sig->text.c_str());
}
// inspect.signature() reads __signature__; built once from the exported signature.
PyObject* FunctionGetPySignature(PyObject* self, void*) {
  auto* f = reinterpret_cast<FunctionObject*>(self);
  if (!f->py_signature) {
    if (!g_signature_builder) Py_RETURN_NONE;
    PyObject* text = FunctionGetSignatureText(self, nullptr);
    if (!text) return nullptr;
    f->py_signature = PyObject_CallFunctionObjArgs(g_signature_builder, f->name, text, nullptr);
    Py_DECREF(text);
    if (!f->py_signature) return nullptr;
  }
  return Py_NewRef(f->py_signature);
}
PyObject* FunctionGetReleasesGil(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<FunctionObject*>(self)->release_gil);
}

PyGetSetDef kFunctionGetSet[] = {
    {"__name__", Guarded<FunctionGetName>, nullptr, "The exported name.", nullptr},
    {"signature_text", Guarded<FunctionGetSignatureText>, nullptr, "The exported signature string, or None.", nullptr},
    {"__signature__", Guarded<FunctionGetPySignature>, nullptr, "inspect.Signature built from the exported signature.", nullptr},
    {"releases_gil", Guarded<FunctionGetReleasesGil>, nullptr, "Whether calls release the GIL.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMemberDef kFunctionMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FunctionObject, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot kFunctionSlots[] = {
    {Py_tp_dealloc, GuardedSlot<FunctionDealloc>()},
    {Py_tp_repr, GuardedSlot<FunctionRepr>()},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_getset, kFunctionGetSet},
    {Py_tp_members, kFunctionMembers},
    {Py_tp_doc, const_cast<char*>("A compiled function: call it with tensors of any framework.")},
    {0, nullptr},
};

PyType_Spec kFunctionSpec = {"tensorplug.Function", sizeof(FunctionObject), 0,
                             Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, kFunctionSlots};

}  // namespace

PyObject* FunctionFromHandle(TPFunctionHandle func, PyObject* name, bool release_gil) {
  auto* sig = new Signature;
  const char* text = TPFunctionGetSignature(func);
  if (text && !ParseSignature(text, sig)) {
    delete sig;
    return PyErr_Format(PyExc_ValueError, "function %U exports a malformed signature: '%s'", name, text);
  }
  auto* f = PyObject_New(FunctionObject, FunctionType);
  if (!f) {
    delete sig;
    return nullptr;
  }
  f->vectorcall = Guarded<FunctionVectorcall>;
  TPFunctionRetain(func);
  f->handle = func;
  f->entry = TPFunctionGetEntry(func, &f->self);
  f->sig = sig;
  f->name = Py_NewRef(name);
  f->py_signature = nullptr;
  f->release_gil = release_gil;
  return reinterpret_cast<PyObject*>(f);
}

bool InitFunctionType(PyObject* module) {
  FunctionType = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kFunctionSpec));
  if (!FunctionType) return false;
  return PyModule_AddObjectRef(module, "Function", reinterpret_cast<PyObject*>(FunctionType)) == 0;
}

void SetSignatureBuilder(PyObject* builder) {
  Py_XINCREF(builder);
  Py_XSETREF(g_signature_builder, builder);
}

TPFunctionHandle FunctionHandleOf(PyObject* obj) {
  return Py_TYPE(obj) == FunctionType ? reinterpret_cast<FunctionObject*>(obj)->handle : nullptr;
}

// ================================================================== values ====
PyObject* ValueToPython(TPAny* value, AdapterTable* output) {
  switch (value->type_index) {
    case kTPNone: Py_RETURN_NONE;
    case kTPInt: return PyLong_FromLongLong(value->v_int64);
    case kTPFloat: return PyFloat_FromDouble(value->v_float64);
    case kTPBool: return PyBool_FromLong(value->v_int64 != 0);
    case kTPDevice: return DeviceToPython(value->v_device);
    case kTPDataType: return DTypeToPython(value->v_dtype);
    case kTPOpaquePtr: return PyLong_FromVoidPtr(value->v_ptr);
    case kTPRawStr: return PyUnicode_FromString(value->v_c_str);
    case kTPStr: {
      PyObject* s = PyUnicode_FromStringAndSize(value->v_str->data, Py_ssize_t(value->v_str->size));
      TPAnyRelease(value);
      return s;
    }
    case kTPTensor: {
      DLManagedTensorVersioned* managed = value->v_tensor;
      value->type_index = kTPNone;
      if (!managed) return PyErr_Format(PyExc_RuntimeError, "a kernel returned a NULL tensor");
      if (!CheckTensorLayout(managed->dl_tensor, "the returned tensor", PyExc_ValueError)) {
        if (managed->deleter) managed->deleter(managed);
        return nullptr;
      }
      // DLPack lets compact tensors leave strides NULL; every consumer below reads them.
      if (managed->dl_tensor.ndim > 0 && !managed->dl_tensor.strides) {
        managed = WithExplicitStrides(managed);
        if (!managed) return nullptr;
      }
      if (!output) return TensorFromManaged(managed);
      if (!output->negative_strides) {
        const DLTensor& t = managed->dl_tensor;
        for (int32_t i = 0; i < t.ndim; ++i) {
          if (t.strides[i] < 0) {
            const long long stride = static_cast<long long>(t.strides[i]);  // read before the deleter frees it
            if (managed->deleter) managed->deleter(managed);
            return PyErr_Format(PyExc_ValueError,
                                "%U cannot import a tensor with negative strides (stride %lld of dim %d); "
                                "return a contiguous tensor or use output_framework() with another framework",
                                output->name, stride, int(i));
          }
        }
      }
      PythonTableScope scope(output);
      void* obj = nullptr;
      if (output->api->managed_tensor_to_py_object_no_sync(managed, &obj) != 0) return nullptr;
      return static_cast<PyObject*>(obj);
    }
    case kTPTuple: {
      TPTuple* t = value->v_tuple;
      PyObject* tuple = PyTuple_New(t->size);
      for (int32_t i = 0; i < t->size; ++i) {
        PyObject* item = tuple ? ValueToPython(&t->items[i], output) : nullptr;
        if (!item) {
          Py_CLEAR(tuple);
          continue;  // keep releasing the remaining items
        }
        PyTuple_SET_ITEM(tuple, i, item);
      }
      TPAnyRelease(value);
      return tuple;
    }
    case kTPFunction: {
      PyObject* name = PyUnicode_FromString("<function>");
      PyObject* f = name ? FunctionFromHandle(value->v_func, name, true) : nullptr;
      Py_XDECREF(name);
      TPAnyRelease(value);
      return f;
    }
    case kTPDLTensorPtr: {
      TPAnyRelease(value);
      return PyErr_Format(PyExc_TypeError, "a function may not return a borrowed tensor view");
    }
    default: {
      int kind = value->type_index;
      TPAnyRelease(value);
      return PyErr_Format(PyExc_TypeError, "unknown result type index %d", kind);
    }
  }
}

int PythonToValue(PyObject* obj, TPAny* out) {
  out->flags = 0;
  out->v_int64 = 0;
  if (obj == Py_None) {
    out->type_index = kTPNone;
  } else if (PyBool_Check(obj)) {
    out->type_index = kTPBool;
    out->v_int64 = obj == Py_True;
  } else if (PyLong_Check(obj)) {
    out->type_index = kTPInt;
    out->v_int64 = PyLong_AsLongLong(obj);
    if (out->v_int64 == -1 && PyErr_Occurred()) return -1;
  } else if (PyFloat_Check(obj)) {
    out->type_index = kTPFloat;
    out->v_float64 = PyFloat_AsDouble(obj);
  } else if (PyUnicode_Check(obj)) {
    Py_ssize_t size = 0;
    const char* data = PyUnicode_AsUTF8AndSize(obj, &size);
    if (!data) return -1;
    out->type_index = kTPStr;
    out->v_str = TPStringCreate(data, size_t(size));
    if (!out->v_str) return PyErr_NoMemory(), -1;
  } else if (PyTuple_Check(obj)) {
    Py_ssize_t n = PyTuple_GET_SIZE(obj);
    if (n > INT32_MAX) {
      PyErr_Format(PyExc_OverflowError, "a Python callback returned a tuple of %zd items; at most %d fit", n,
                   int(INT32_MAX));
      return -1;
    }
    TPTuple* t = TPTupleCreate(int32_t(n));
    if (!t) return PyErr_NoMemory(), -1;
    out->type_index = kTPTuple;
    out->v_tuple = t;
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (PythonToValue(PyTuple_GET_ITEM(obj, i), &t->items[i]) != 0) {
        TPAnyRelease(out);
        return -1;
      }
    }
  } else if (Py_TYPE(obj) == FunctionType) {
    out->type_index = kTPFunction;
    out->v_func = reinterpret_cast<FunctionObject*>(obj)->handle;
    TPFunctionRetain(out->v_func);
  } else if (AdapterTable* table = LookupAdapter(Py_TYPE(obj))) {
    PythonTableScope scope(table);
    DLManagedTensorVersioned* managed = nullptr;
    if (table->api->managed_tensor_from_py_object_no_sync(obj, &managed) != 0) return -1;
    if (!CheckTensorLayout(managed->dl_tensor, "a tensor returned by a Python callback", PyExc_BufferError)) {
      if (managed->deleter) managed->deleter(managed);
      return -1;
    }
    out->type_index = kTPTensor;
    out->v_tensor = managed;
  } else {
    if (PyErr_Occurred()) return -1;
    if (PyCallable_Check(obj)) {
      TPFunctionHandle handle = nullptr;
      if (TPFunctionCreate(Py_NewRef(obj), Guarded<CallPythonCallable>, Guarded<DeletePythonCallable>, nullptr, &handle) != 0) {
        Py_DECREF(obj);
        return -1;
      }
      out->type_index = kTPFunction;
      out->v_func = handle;
      return 0;
    }
    PyErr_Format(PyExc_TypeError, "a Python callback returned %s, which has no tensorplug value kind",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  return 0;
}

// ====================================================== Python callables ====
namespace {

// A borrowed view becomes a tensorplug.Tensor that does not own the data: valid for the
// duration of the callback only. CallPythonCallable invalidates it when the callback
// returns, so a view the callback kept raises instead of reading freed memory.
PyObject* ArgToPython(const TPAny& arg, bool* lent) {
  *lent = false;
  if (arg.type_index == kTPDLTensorPtr) {
    if (!CheckTensorLayout(*arg.v_dltensor, "a tensor passed to a Python callback", PyExc_BufferError)) return nullptr;
    uint64_t flags = (arg.flags & TP_ANY_FLAG_READ_ONLY) ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
    DLManagedTensorVersioned* managed = DescribeWithoutOwning(*arg.v_dltensor, flags);
    if (!managed) return PyErr_NoMemory();
    *lent = true;
    return TensorFromManaged(managed);
  }
  if (arg.type_index == kTPFunction) {
    PyObject* name = PyUnicode_FromString("<function>");
    PyObject* f = name ? FunctionFromHandle(arg.v_func, name, true) : nullptr;
    Py_XDECREF(name);
    return f;
  }
  if (arg.type_index == kTPStr) return PyUnicode_FromStringAndSize(arg.v_str->data, Py_ssize_t(arg.v_str->size));
  if (arg.type_index == kTPTuple) {
    PyErr_SetString(PyExc_TypeError, "tuples cannot be passed as arguments");
    return nullptr;
  }
  TPAny copy = arg;  // scalars; a moved kTPTensor becomes an owning tensorplug.Tensor
  return ValueToPython(&copy, nullptr);
}

int CallPythonCallable(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  if (!PythonUsable()) {
    TPErrorSet("RuntimeError", "a Python callback was called after the interpreter shut down");
    return -1;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1;
  PyObject* tuple = PyTuple_New(nargs);
  int32_t converted = 0;
  bool any_lent = false;
  for (; tuple && converted < nargs; ++converted) {
    bool lent = false;
    PyObject* item = ArgToPython(args[converted], &lent);
    if (!item) break;
    any_lent |= lent;
    PyTuple_SET_ITEM(tuple, converted, item);
  }
  // Owning tensor arguments are ours even when conversion stopped early.
  for (int32_t i = converted + 1; i < nargs; ++i) {
    if (args[i].type_index == kTPTensor) TPAnyRelease(const_cast<TPAny*>(&args[i]));
  }
  if (tuple && converted == nargs) {
    PyObject* r = PyObject_Call(static_cast<PyObject*>(self), tuple, nullptr);
    if (r) {
      rc = PythonToValue(r, result);
      Py_DECREF(r);
    }
  }
  if (tuple && any_lent) {
    for (int32_t i = 0; i < converted; ++i) {
      if (args[i].type_index == kTPDLTensorPtr) InvalidateLentTensor(PyTuple_GET_ITEM(tuple, i));
    }
  }
  Py_XDECREF(tuple);
  if (rc != 0) TPErrorFromPython();
  PyGILState_Release(gil);
  return rc;
}

void DeletePythonCallable(void* self) {
  if (!PythonUsable()) return;  // a static Function destroyed after Py_Finalize: leak the callable
  PyGILState_STATE gil = PyGILState_Ensure();
  Py_DECREF(static_cast<PyObject*>(self));
  PyGILState_Release(gil);
}

}  // namespace

// A packed function calling a Python callable (for the global registry).
int MakePythonFunction(PyObject* callable, TPFunctionHandle* out) {
  if (TPFunctionCreate(Py_NewRef(callable), Guarded<CallPythonCallable>, Guarded<DeletePythonCallable>, nullptr, out) != 0) {
    Py_DECREF(callable);
    return -1;
  }
  return 0;
}

}  // namespace tensorplug::py
