/*
 * tensorplug's vocabularies, each listed once: the C, C++ and Python layers and the
 * conformance kit are generated from or checked against these lists (tests/test_vocabulary.py
 * fails when a copy drifts). Each list is an X-macro: define X, expand the list, undefine X.
 *
 * Plain C (no C++ needed): kernels in C may include it.
 */
#ifndef TENSORPLUG_VOCABULARY_H_
#define TENSORPLUG_VOCABULARY_H_

/*
 * Parameter kinds of a signature string ("x:view;n:?int->tensor", see c_api.h):
 * X(Id, "name"). Adding a kind: one entry here, one converter in csrc/python/arguments.cc
 * (docs/adapters.md, "Adding an argument kind").
 */
#define TP_PARAM_KINDS(X) \
  X(Any, "any")           \
  X(View, "view")         \
  X(Tensor, "tensor")     \
  X(Int, "int")           \
  X(Float, "float")       \
  X(Bool, "bool")         \
  X(Str, "str")           \
  X(Device, "device")     \
  X(DType, "dtype")       \
  X(Func, "func")

/* Result kinds of a signature string: X(Id, "name"). */
#define TP_RESULT_KINDS(X) \
  X(Void, "void")          \
  X(Int, "int")            \
  X(Float, "float")        \
  X(Bool, "bool")          \
  X(Str, "str")            \
  X(Device, "device")      \
  X(DType, "dtype")        \
  X(Tensor, "tensor")      \
  X(Tuple, "tuple")        \
  X(Func, "func")          \
  X(Any, "any")

#endif /* TENSORPLUG_VOCABULARY_H_ */
