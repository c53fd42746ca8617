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
};
ThreadState* NewThreadState();
extern thread_local ThreadState* tls_thread_state __attribute__((tls_model("initial-exec")));
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
// strides of numpy views). The call frame records a mark and rewinds to it.
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
// _core.pack_overrides(streams, output) -> bytes, for tensorplug._context.
PyObject* PackOverrides(PyObject* streams, PyObject* output_capsule);

}  // namespace tensorplug::py
