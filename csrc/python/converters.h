// The argument converters of the binding, one per parameter kind (TP_PARAM_KINDS), and
// the helpers they share. Split by concept: arguments.cc (labels and errors, strings,
// devices, dtypes, callables, handles, the untyped "any" kind and the table),
// number_arguments.cc (scalars and int arrays), tensor_arguments.cc (tensors and lists of
// tensors, the checks of written ones).
#pragma once
#include <string>

#include "arguments.h"

namespace tensorplug::py {

// Convert<Id> for every parameter kind: fill frame.packed[i] from `obj`, or leave a Python
// error naming the function and the argument (ArgError / AnnotateError) and return false.
#define TP_X(id, name) bool Convert##id(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param);
TP_PARAM_KINDS(TP_X)
#undef TP_X

// "argument 2 'y'" or "argument 1 'xs' item 3" (items of lists counted from 0, like Python's own messages).
std::string ArgLabel(int index, const Param* param, int item);

// ------------------------------------------------------------------ numbers ----
enum class ScalarKind { kInt, kFloat, kBool };
// numbers.Integral / numbers.Real (stdlib; imported on the first non-builtin number); a
// borrowed reference, nullptr with an error set when the import fails.
PyObject* NumbersAbc(ScalarKind kind);
// A scalar an adapter declares a bool (tensorplug_scalar_kind), asked once per type.
bool IsDeclaredBool(PyObject* obj);
// The registry's tensorplug_scalar_kind (set once, at import).
void SetScalarResolver(PyObject* resolver);
// What a scalar parameter accepts beyond Python's own numbers (docs/calling.md, "Numbers").
bool ConvertNumberSlow(FunctionObject* f, CallFrame& frame, int i, PyObject* obj, const Param* param,
                       ScalarKind kind);

// ------------------------------------------------------------------ tensors ----
// A tensor through the adapter of its exact type: a view (kTPDLTensorPtr) unless `owning`.
bool ConvertTensorWith(AdapterTable* table, bool owning, FunctionObject* f, CallFrame& frame, int i, PyObject* obj,
                       const Param* param);

}  // namespace tensorplug::py
