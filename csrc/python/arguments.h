// Converting a call's Python arguments to TPAny, and what the call must undo afterwards.
#pragma once
#include "function_object.h"

namespace tensorplug::py {

constexpr int kMaxArgs = 64;
constexpr int kInlineArgs = 16;  // frames for up to this many arguments live on the stack

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

// Convert argument i. Returns false with a Python error set.
bool ConvertArg(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param);

}  // namespace tensorplug::py
