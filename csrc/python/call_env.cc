// Thread state, the per-call scratch arena and the context-local overrides.
#include <cstring>
#include <memory>

#include "call_env.h"

namespace tensorplug::py {

// ============================================================ thread state ====
__thread ThreadState* tls_thread_state __attribute__((tls_model("initial-exec"))) = nullptr;

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
}  // namespace tensorplug::py
