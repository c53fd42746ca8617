// Argument conversion of tensors: "view", "tensor" and "mview" parameters, and lists of
// tensors ("views", "mviews"), through the adapter table of the object's type; written
// tensors ("mview", "mviews") are checked before the call.
#include <algorithm>
#include <string>
#include <vector>

#include "call_env.h"
#include "converters.h"
#include "../runtime/overlap.h"
#include "tensorplug/dtype.h"

namespace tensorplug::py {

namespace {

// ConvertTensorWith's body, inlined into each tensor converter of this file (a written
// call measured 70 instructions more when ConvertMView called it out of line).
[[gnu::always_inline]] inline bool ConvertTensorInline(AdapterTable* table, bool owning, FunctionObject* f,
                                                       CallFrame& frame, int i, PyObject* obj, const Param* param) {
  TPAny& out = frame.packed[i];
  if (!HoldsItsValues(table, obj)) return AnnotateError(f, i, param), false;
  const DLPackExchangeAPI* api = table->api;
  PythonTableScope scope(table);
  DLTensor* view;
  if (!owning && api->dltensor_from_py_object_no_sync) {
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
    if (owning) {
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
  // Primary: the first tensor on a non-CPU device, else the first tensor.
  if (frame.primary < 0 || (frame.primary_device.device_type == kDLCPU && view->device.device_type != kDLCPU)) {
    frame.primary = i;
    frame.primary_device = view->device;
    frame.primary_table = table;
  }
  return true;
}

}  // namespace

bool ConvertTensorWith(AdapterTable* table, bool owning, FunctionObject* f, CallFrame& frame, int i, PyObject* obj,
                       const Param* param) {
  return ConvertTensorInline(table, owning, f, frame, i, obj, param);
}

namespace {

template <bool kOwning>
bool ConvertTensorKind(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  if (AdapterTable* table = LookupAdapter(Py_TYPE(obj))) return ConvertTensorInline(table, kOwning, f, frame, i, obj, param);
  if (PyErr_Occurred()) return AnnotateError(f, i, param), false;
  return ArgError(f, i, param, "a tensor", obj), false;
}

}  // namespace

bool ConvertView(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  return ConvertTensorKind<false>(f, frame, i, obj, param);
}

bool ConvertTensor(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  return ConvertTensorKind<true>(f, frame, i, obj, param);
}

namespace {

// "axpy() argument 3 'out': expected a writable tensor (the kernel writes it), got a
// read-only <adapter> array" (the adapter's name, when the table has one).
bool RefuseReadOnly(FunctionObject* f, int i, const Param* param, int item, const AdapterTable* table) {
  const std::string label = ArgLabel(i, param, item);
  if (table && table->name) {
    PyErr_Format(PyExc_ValueError, "%U() %s: expected a writable tensor (the kernel writes it), got a read-only %U array",
                 f->name, label.c_str(), table->name);
  } else {
    PyErr_Format(PyExc_ValueError, "%U() %s: expected a writable tensor (the kernel writes it), got a read-only tensor",
                 f->name, label.c_str());
  }
  return false;
}

}  // namespace

// Written tensors whose elements overlap are refused (runtime/overlap.h).
using runtime::ElementsOverlap;
using runtime::Overlap;
using runtime::OverlapRefusal;

namespace {

// "fill() argument 1 'out': expected a tensor whose elements do not overlap (the kernel
// writes it), got shape [2, 3] strides [0, 1]: ..."
[[gnu::noinline]] bool RefuseOverlap(FunctionObject* f, int i, const Param* param, int item, const DLTensor& t,
                                     Overlap overlap) {
  PyErr_Format(PyExc_ValueError, "%U() %s: %s", f->name, ArgLabel(i, param, item).c_str(),
               OverlapRefusal(t, overlap).c_str());
  return false;
}

}  // namespace

// A tensor the kernel writes ("mview"): a view, refused before the call when the caller
// lent it read-only (an immutable framework's array, one its probe reports read-only) or its elements overlap;
// once accepted, its adapter's write hook is told (a framework may bump a version counter).
// The frame releases the export on failure.
bool ConvertMView(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  AdapterTable* table = LookupAdapter(Py_TYPE(obj));
  if (!table) {
    if (PyErr_Occurred()) return AnnotateError(f, i, param), false;
    return ArgError(f, i, param, "a tensor", obj), false;
  }
  if (!ConvertTensorInline(table, false, f, frame, i, obj, param)) return false;
  if (frame.packed[i].flags & TP_ANY_FLAG_READ_ONLY) return RefuseReadOnly(f, i, param, -1, table);
  const DLTensor& view = *frame.packed[i].v_dltensor;
  if (Overlap overlap = ElementsOverlap(view); overlap != Overlap::kNone) {
    return RefuseOverlap(f, i, param, -1, view, overlap);
  }
  // Last, once the tensor is accepted: the adapter's write hook (common.h, WriteHook).
  if (table->writes && table->writes->will_write(table->writes, obj) != 0) return AnnotateError(f, i, param), false;
  return true;
}

// A list or tuple of tensors ("views"): each item exported as a view into the call's
// scratch arena (no allocation per item), passed as one kTPArray.
bool ConvertViews(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  if (!PyList_Check(obj) && !PyTuple_Check(obj)) return ArgError(f, i, param, "a list of tensors", obj), false;
  PyObject* seq = obj;
  if (PyList_Check(obj)) {  // a snapshot: code run during the call may change the list
    seq = PyList_AsTuple(obj);
    if (!seq) return AnnotateError(f, i, param), false;
    frame.kept[frame.num_kept++] = seq;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(seq);
  if (n > kMaxListItems) {
    PyErr_Format(PyExc_ValueError, "a list of %zd tensors is longer than the limit of %d", n, kMaxListItems);
    return AnnotateError(f, i, param), false;
  }
  constexpr int32_t kAnyWords = sizeof(TPAny) / sizeof(int64_t), kViewWords = sizeof(DLTensor) / sizeof(int64_t);
  static_assert(sizeof(TPArray) == 2 * sizeof(int64_t) && sizeof(TPAny) % 8 == 0 && sizeof(DLTensor) % 8 == 0);
  int64_t* head = ScratchAlloc(int32_t(2 + kAnyWords * n));
  int64_t* view_words = n ? ScratchAlloc(int32_t(kViewWords * n)) : head;
  if (!head || !view_words) return PyErr_NoMemory(), AnnotateError(f, i, param), false;
  auto* array = reinterpret_cast<TPArray*>(head);
  auto* items = reinterpret_cast<TPAny*>(head + 2);
  auto* views = reinterpret_cast<DLTensor*>(view_words);
  for (Py_ssize_t k = 0; k < n; ++k) {
    const int item = int(k);
    PyObject* e = PyTuple_GET_ITEM(seq, k);
    items[k].type_index = kTPNone;
    items[k].flags = 0;
    AdapterTable* table = LookupAdapter(Py_TYPE(e));
    if (!table) {
      if (PyErr_Occurred()) return AnnotateError(f, i, param, item), false;
      return ArgError(f, i, param, "a tensor", e, item), false;
    }
    if (!HoldsItsValues(table, e)) return AnnotateError(f, i, param, item), false;
    const DLPackExchangeAPI* api = table->api;
    PythonTableScope scope(table);
    DLTensor* view = &views[k];
    bool read_only;
    if (api->dltensor_from_py_object_no_sync) {
      if (api->dltensor_from_py_object_no_sync(e, view) != 0) return AnnotateError(f, i, param, item), false;
      read_only = table->read_only == ReadOnlyPolicy::kAlways ||
                  (table->read_only == ReadOnlyPolicy::kProbe && table->is_read_only(e));
    } else {
      DLManagedTensorVersioned* managed = nullptr;
      if (api->managed_tensor_from_py_object_no_sync(e, &managed) != 0) return AnnotateError(f, i, param, item), false;
      if (!frame.item_owned) frame.item_owned = new std::vector<DLManagedTensorVersioned*>;
      frame.item_owned->push_back(managed);
      read_only = (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) || table->read_only == ReadOnlyPolicy::kAlways;
      view = &managed->dl_tensor;
    }
    if (!CheckTensorLayout(*view, "tensor", PyExc_BufferError)) return AnnotateError(f, i, param, item), false;
    items[k].type_index = kTPDLTensorPtr;
    items[k].flags = read_only ? TP_ANY_FLAG_READ_ONLY : 0;
    items[k].v_dltensor = view;
    // The primary rule looks inside lists, in order (the same rule as for single tensors).
    if (frame.primary < 0 || (view->device.device_type != kDLCPU && frame.primary_device.device_type == kDLCPU)) {
      frame.primary = i;
      frame.primary_device = view->device;
      frame.primary_table = table;
    }
  }
  array->size = n;
  array->items = items;
  frame.packed[i].type_index = kTPArray;
  frame.packed[i].v_array = array;
  return true;
}

// A list of tensors the kernel writes ("mviews"): as "views", each read-only item, or one
// whose elements overlap, refused; each accepted item's write hook told.
bool ConvertMViews(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param) {
  if (!ConvertViews(f, frame, i, obj, param)) return false;
  const TPArray* array = frame.packed[i].v_array;
  PyObject* seq = PyList_Check(obj) ? frame.kept[frame.num_kept - 1] : obj;  // the snapshot ConvertViews took
  for (int64_t k = 0; k < array->size; ++k) {
    PyObject* item = PyTuple_GET_ITEM(seq, k);
    const AdapterTable* table = LookupAdapter(Py_TYPE(item));  // found (and cached) by ConvertViews
    if (array->items[k].flags & TP_ANY_FLAG_READ_ONLY) return RefuseReadOnly(f, i, param, int(k), table);
    const DLTensor& view = *array->items[k].v_dltensor;
    if (Overlap overlap = ElementsOverlap(view); overlap != Overlap::kNone) {
      return RefuseOverlap(f, i, param, int(k), view, overlap);
    }
    // Accepted: the adapter's write hook (common.h, WriteHook).
    if (table && table->writes && table->writes->will_write(table->writes, item) != 0) return AnnotateError(f, i, param, int(k)), false;
  }
  return true;
}

}  // namespace tensorplug::py
