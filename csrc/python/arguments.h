// Converting a call's Python arguments to TPAny, and what the call must undo afterwards.
#pragma once
#include <vector>

#include "function_object.h"

namespace tensorplug::py {

constexpr int kMaxArgs = 64;
constexpr int kInlineArgs = 16;
constexpr int kMaxListItems = 512;  // tensors in one list argument (docs/calling.md, "Limits")
constexpr int kScratchInts = 4096;  // ints in one int-array argument (one scratch block)  // frames for up to this many arguments live on the stack

template <int N>
struct FrameStorage {
  TPAny packed[N];
  DLTensor views[N];
  DLManagedTensorVersioned* owned[N];
  TPFunctionHandle funcs[N];
  PyObject* kept[N];
  TPHandleRef handles[N];
};

// Everything a call must undo.
struct CallFrame {
  template <int N>
  explicit CallFrame(FrameStorage<N>& storage)
      : packed(storage.packed), views(storage.views), owned(storage.owned), funcs(storage.funcs), kept(storage.kept),
        handles(storage.handles) {}
  TPAny* packed;
  DLTensor* views;
  DLManagedTensorVersioned** owned;  // owning exports used as views: freed after the call
  int num_owned = 0;
  TPFunctionHandle* funcs;           // functions made for Python callables
  int num_funcs = 0;
  PyObject** kept;                   // snapshots of list arguments (tuples), held for the call
  int num_kept = 0;
  TPHandleRef* handles;              // handle arguments, retained for the call (a close() meanwhile frees nothing)
  int num_handles = 0;
  // Owning exports of list items used as views (adapters without a view export): freed
  // after the call; allocated only when a list has such items.
  std::vector<DLManagedTensorVersioned*>* item_owned = nullptr;
  int primary = -1;
  DLDevice primary_device{kDLCPU, 0};
  AdapterTable* primary_table = nullptr;

  void Release(int upto) {
    for (int i = 0; i < num_owned; ++i) {
      if (owned[i]->deleter) owned[i]->deleter(owned[i]);
    }
    num_owned = 0;
    if (item_owned) {
      for (DLManagedTensorVersioned* m : *item_owned) {
        if (m->deleter) m->deleter(m);
      }
      delete item_owned;
      item_owned = nullptr;
    }
    for (int i = 0; i < num_funcs; ++i) TPFunctionRelease(funcs[i]);
    num_funcs = 0;
    for (int i = 0; i < num_kept; ++i) Py_DECREF(kept[i]);
    num_kept = 0;
    for (int i = 0; i < num_handles; ++i) TPHandleRelease(handles[i]);
    num_handles = 0;
    // Owning tensors not yet handed to the callee.
    for (int i = 0; i < upto; ++i) {
      if (packed[i].type_index == kTPTensor) TPAnyRelease(&packed[i]);
    }
  }
};

// ------------------------------------------------------------ converter table ----
// Argument conversion is a table of small converters, one per parameter kind (ArgConverter,
// signature.h), chosen once per parameter when the signature is parsed. Adding a kind:
// an entry in TP_PARAM_KINDS (tensorplug/vocabulary.h) and its Convert<Id> function
// (converters.h; docs/adapters.md, "Adding an argument kind").
ArgConverter ConverterFor(Kind kind, bool optional);
// The "any" converter (every parameter of a function without a signature): picks the
// converter by the object's Python type; tensors are passed as views.
bool ConvertAny(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param);

// Helpers for converters. Each returns/leaves a Python error set naming the function and
// the argument ("scale() argument 2 'y': expected an int, got str").
// `item` >= 0: the error concerns that item of a list argument ("argument 1 'xs' item 3").
PyObject* ArgError(FunctionObject* f, int index, const Param* param, const char* expected, PyObject* obj,
                   int item = -1);
// "scale() argument 2 'y'" (the parameter's name from the signature when `param` is null
// and the signature is known); nullptr with an error set when out of memory.
PyObject* ArgumentLabel(FunctionObject* f, int index, const Param* param);
// Prefix the Python error already set with the argument it concerns.
void AnnotateError(FunctionObject* f, int index, const Param* param, int item = -1);
// 0: converted; -1: a specific error is set (an index out of range); -2: not a device
// (an error may be set, the caller replaces it).
int ToDevice(PyObject* obj, DLDevice* out);
// 0: converted; -1: not a dtype (an error may be set).
int ToDType(PyObject* obj, DLDataType* out);

}  // namespace tensorplug::py
