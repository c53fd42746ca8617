// The per-thread state of the extension and the environment of one call: the thread's
// scratch arena, the python-table side channel, the context-local overrides.
#pragma once
#include "common.h"

namespace tensorplug::py {

// ------------------------------------------------------------ thread state ----
// Everything the extension keeps per thread, behind one initial-exec TLS pointer: a call
// touches it several times, and each general-dynamic TLS access costs a function call.
struct ThreadState {
  // Scratch arena (see ScratchAlloc): blocks of int64, never freed while the thread lives.
  std::vector<std::unique_ptr<int64_t[]>> scratch_blocks;
  int32_t scratch_block = 0;
  int32_t scratch_offset = 0;
  int32_t call_depth = 0;                        // Function calls in progress on this thread
  AdapterTable* python_table = nullptr;          // see ActivePythonTable
  // The Python exception behind the thread's TPError, when a Python callback raised it.
  // Released when the outermost call returns, whether or not a kernel swallowed it.
  PyObject* pending_exception = nullptr;
  std::string pending_kind, pending_message;
  // libtensorplug's env allocator of this thread (TPEnvAllocatorSlot): every call sets and
  // restores it (ThreadBinding), a plain store instead of two calls into the library.
  DLPackManagedTensorAllocator* allocator_slot = TPEnvAllocatorSlot();
};
ThreadState* NewThreadState();
// __thread, not thread_local: a pointer with constant initialisation needs no C++ TLS
// wrapper, whose "initialised yet?" check would run on every access from another file.
extern __thread ThreadState* tls_thread_state __attribute__((tls_model("initial-exec")));
inline ThreadState& TS() {
  ThreadState* state = tls_thread_state;
  return state ? *state : *NewThreadState();
}

// The table the python trampolines use; set around each call into a python table.
inline AdapterTable*& ActivePythonTable() { return TS().python_table; }
// Scoped selection of the active python table (no-op for C tables).
struct PythonTableScope {
  AdapterTable* saved;
  bool active;
  explicit PythonTableScope(AdapterTable* table)
      : saved(nullptr), active(table && table->python) {
    if (active) {
      saved = ActivePythonTable();
      ActivePythonTable() = table;
    }
  }
  ~PythonTableScope() {
    if (active) ActivePythonTable() = saved;
  }
};

// ------------------------------------------------- per-thread call scratch ----
// Stack-like arena for data that must live until the current call returns (element
// strides an adapter converts from byte strides). The call frame records a mark and rewinds to it.
struct ScratchMark {
  int32_t block;
  int32_t offset;
};
ScratchMark ScratchSave();
void ScratchRestore(ScratchMark mark);
int64_t* ScratchAlloc(int32_t count);

// -------------------------------------------------- call overrides (context) ----
// use_stream / use_raw_stream / output_framework are context-local (contextvars): the
// ContextVar OverrideVar() holds None or a tuple (streams, output, packed): `streams` a
// tuple of (device_type, device_id, handle or None), one per device; `output` an adapter
// table capsule or None; `packed` the same as a PackedOverrides in a bytes object (made by
// _core.pack_overrides when a context is entered). Entering and leaving are Python code
// (tensorplug._context).
// g_live_overrides counts contexts entered and not yet left, in every thread and task:
// while it is 0 a call reads no ContextVar at all.
PyObject* OverrideVar();
extern std::atomic<int64_t> g_live_overrides;
constexpr int kMaxStreamOverrides = 16;  // devices overridden at once in one context
// The current context's overrides, applied to the thread's env for one call.
struct AppliedOverrides {
  AdapterTable* output = nullptr;
  int num_streams = 0;
  struct {
    int32_t device_type, device_id;
    void* previous;
  } streams[kMaxStreamOverrides];
  // Read the current context's overrides and set their streams; false with an error set
  // (only when the ContextVar cannot be read).
  bool Apply();
  // Put the streams back (in reverse order).
  void Restore();
  bool Overrides(int32_t device_type, int32_t device_id) const {
    for (int i = 0; i < num_streams; ++i) {
      if (streams[i].device_type == device_type && streams[i].device_id == device_id) return true;
    }
    return false;
  }
};
// ------------------------------------------------------------ call environment ----
// What every Function call sets on its thread and puts back: the env allocator (the output
// framework's; nullptr: the default CPU allocator), the python-table side channel (the
// allocator of a Python table finds its callables there) and the thread's call depth.
// Bind() sets them; Unbind() restores them. CallEnv binds it after the stream and the
// overrides; a no-argument call without a live context binds it alone (NoArgsVectorcall).
class ThreadBinding {
 public:
  __attribute__((always_inline)) void Bind(ThreadState& ts, AdapterTable* output) {
    previous_alloc_ = *ts.allocator_slot;
    *ts.allocator_slot = output ? output->api->managed_tensor_allocator : nullptr;
    previous_python_ = ts.python_table;
    ts.python_table = output;
    ++ts.call_depth;
  }
  __attribute__((always_inline)) void Unbind(ThreadState& ts) {
    --ts.call_depth;
    ts.python_table = previous_python_;
    *ts.allocator_slot = previous_alloc_;
  }

 private:
  AdapterTable* previous_python_;
  DLPackManagedTensorAllocator previous_alloc_;
};

// Everything a Function call sets for its callee and must put back: the current stream of
// the primary tensor's device, the thread binding (allocator, python table, call depth:
// ThreadBinding), the output table (results are converted to its framework), the
// context-local overrides. Enter() sets them; the destructor restores, in reverse order,
// exactly what was set, on every exit. A new env hook is added here (or, when every call
// sets it on its thread whatever its arguments, in ThreadBinding), and only here
// (docs/adapters.md, "Adding an env hook").
class CallEnv {
 public:
  CallEnv() noexcept {}  // only ts_ and stream_set_ are read before being set
  CallEnv(const CallEnv&) = delete;
  CallEnv& operator=(const CallEnv&) = delete;

  // Stream, allocator and output come from the primary tensor's adapter (nullptr: no
  // tensor argument), unless a context overrides them. False with a Python error set.
  __attribute__((always_inline)) bool Enter(ThreadState& ts, AdapterTable* primary, DLDevice device) {
    // No context is live anywhere in the common case: then no ContextVar is read.
    if (g_live_overrides.load(std::memory_order_relaxed) != 0 && !overrides_.Apply()) return false;
    output_ = overrides_.output ? overrides_.output : primary;
    if (primary && device.device_type != kDLCPU && !overrides_.Overrides(device.device_type, device.device_id)) {
      if (!SetPrimaryStream(primary, device)) return false;
    }
    binding_.Bind(ts, output_);
    ts_ = &ts;
    return true;
  }

  __attribute__((always_inline)) ~CallEnv() {
    if (ts_) binding_.Unbind(*ts_);
    if (stream_set_) TPEnvSetStream(stream_device_.device_type, stream_device_.device_id, previous_stream_);
    if (overrides_.num_streams) overrides_.Restore();
  }

  // The table results are converted with (nullptr: tensorplug.Tensor).
  AdapterTable* output() const { return output_; }

 private:
  // The primary table's current stream for `device` becomes the env's (not on CPU: cold).
  __attribute__((noinline)) bool SetPrimaryStream(AdapterTable* primary, DLDevice device) {
    void* stream = nullptr;
    auto query = primary->api->current_work_stream;
    PythonTableScope scope(primary);
    if (query && query(device.device_type, device.device_id, &stream) != 0) return false;
    previous_stream_ = TPEnvSetStream(device.device_type, device.device_id, stream);
    stream_device_ = device;
    stream_set_ = true;
    return true;
  }

  AppliedOverrides overrides_;
  AdapterTable* output_;
  ThreadState* ts_ = nullptr;  // set once the thread binding is
  ThreadBinding binding_;
  bool stream_set_ = false;
  DLDevice stream_device_;
  void* previous_stream_;
};

// _core.pack_overrides(streams, output) -> bytes, for tensorplug._context.
PyObject* PackOverrides(PyObject* streams, PyObject* output_capsule);

}  // namespace tensorplug::py
