/*
 * tensorplug's vocabularies, each listed once: the C, C++ and Python layers and the
 * conformance kit are generated from or checked against these lists (tests/test_vocabulary.py
 * fails when a copy drifts). Each list is an X-macro: define X, expand the list, undefine X.
 *
 * Plain C (no C++ needed): kernels in C may include it. The error kinds are listed in
 * c_api.h (TP_ERROR_KINDS), next to TPErrorSet. Python reads every list from
 * tensorplug._core.VOCABULARY.
 */
#ifndef TENSORPLUG_VOCABULARY_H_
#define TENSORPLUG_VOCABULARY_H_

#include "tensorplug/dlpack.h"

/*
 * Device types by the names tensorplug uses ("cuda:1", Device("cuda", 1)): X(DLPack
 * DLDeviceType, "name"). A type not listed prints as "device<code>" and is not accepted
 * by name.
 */
#define TP_DEVICE_TYPES(X)       \
  X(kDLCPU, "cpu")               \
  X(kDLCUDA, "cuda")             \
  X(kDLCUDAHost, "cuda_host")    \
  X(kDLOpenCL, "opencl")         \
  X(kDLVulkan, "vulkan")         \
  X(kDLMetal, "metal")           \
  X(kDLVPI, "vpi")               \
  X(kDLROCM, "rocm")             \
  X(kDLROCMHost, "rocm_host")    \
  X(kDLExtDev, "ext_dev")        \
  X(kDLCUDAManaged, "cuda_managed") \
  X(kDLOneAPI, "oneapi")         \
  X(kDLWebGPU, "webgpu")         \
  X(kDLHexagon, "hexagon")       \
  X(kDLMAIA, "maia")             \
  X(kDLTrn, "trn")

/* Other device type names accepted on input only: X(DLDeviceType, "alias"). */
#define TP_DEVICE_ALIASES(X) \
  X(kDLCUDA, "gpu") /* paddle and jax spell CUDA devices "gpu" */

/*
 * How a dtype is named from its DLPack code: X(DLDataTypeCode, "stem", sized). Sized
 * names are the stem and the bits ("int32", "bfloat16"); the others are the stem alone
 * ("bool", "float8_e4m3fn"). Lanes > 1 append "x<lanes>" ("float32x4").
 */
#define TP_DTYPE_CODES(X)                        \
  X(kDLInt, "int", 1)                            \
  X(kDLUInt, "uint", 1)                          \
  X(kDLFloat, "float", 1)                        \
  X(kDLOpaqueHandle, "handle", 0)                \
  X(kDLBfloat, "bfloat", 1)                      \
  X(kDLComplex, "complex", 1)                    \
  X(kDLBool, "bool", 0)                          \
  X(kDLFloat8_e3m4, "float8_e3m4", 0)            \
  X(kDLFloat8_e4m3, "float8_e4m3", 0)            \
  X(kDLFloat8_e4m3b11fnuz, "float8_e4m3b11fnuz", 0) \
  X(kDLFloat8_e4m3fn, "float8_e4m3fn", 0)        \
  X(kDLFloat8_e4m3fnuz, "float8_e4m3fnuz", 0)    \
  X(kDLFloat8_e5m2, "float8_e5m2", 0)            \
  X(kDLFloat8_e5m2fnuz, "float8_e5m2fnuz", 0)    \
  X(kDLFloat8_e8m0fnu, "float8_e8m0fnu", 0)      \
  X(kDLFloat6_e2m3fn, "float6_e2m3fn", 0)        \
  X(kDLFloat6_e3m2fn, "float6_e3m2fn", 0)        \
  X(kDLFloat4_e2m1fn, "float4_e2m1fn", 0)

/*
 * The dtypes accepted by name where a dtype is expected ("float32", a framework dtype
 * whose str() ends in the name): X("name", DLDataTypeCode, bits). Each name is the one
 * TP_DTYPE_CODES gives that dtype.
 */
#define TP_DTYPES(X)                    \
  X("bool", kDLBool, 8)                 \
  X("int8", kDLInt, 8)                  \
  X("int16", kDLInt, 16)                \
  X("int32", kDLInt, 32)                \
  X("int64", kDLInt, 64)                \
  X("uint8", kDLUInt, 8)                \
  X("uint16", kDLUInt, 16)              \
  X("uint32", kDLUInt, 32)              \
  X("uint64", kDLUInt, 64)              \
  X("float16", kDLFloat, 16)            \
  X("float32", kDLFloat, 32)            \
  X("float64", kDLFloat, 64)            \
  X("bfloat16", kDLBfloat, 16)          \
  X("complex64", kDLComplex, 64)        \
  X("complex128", kDLComplex, 128)      \
  X("float8_e4m3fn", kDLFloat8_e4m3fn, 8) \
  X("float8_e5m2", kDLFloat8_e5m2, 8)

/* Other names accepted on input only (never printed): X("alias", DLDataTypeCode, bits). */
#define TP_DTYPE_ALIASES(X)     \
  X("half", kDLFloat, 16)       \
  X("float", kDLFloat, 32)      \
  X("double", kDLFloat, 64)     \
  X("int", kDLInt, 64)          \
  X("long", kDLInt, 64)         \
  X("cfloat", kDLComplex, 64)   \
  X("cdouble", kDLComplex, 128)

/*
 * Parameter kinds of a signature string ("x:view;n:?int->tensor", see c_api.h):
 * X(Id, "name"). Adding a kind: one entry here, one converter declared in csrc/python/converters.h
 * (docs/adapters.md, "Adding an argument kind").
 */
#define TP_PARAM_KINDS(X) \
  X(Any, "any")           \
  X(View, "view")         \
  X(MView, "mview")       \
  X(Tensor, "tensor")     \
  X(Int, "int")           \
  X(Float, "float")       \
  X(Bool, "bool")         \
  X(Str, "str")           \
  X(Device, "device")     \
  X(DType, "dtype")       \
  X(Func, "func")         \
  X(Views, "views")       \
  X(MViews, "mviews")     \
  X(Ints, "ints")         \
  X(Handle, "handle") /* "handle<T>": typed, T in the signature (c_api.h, "Signatures") */

/*
 * The characters of a handle's type name ("mylib.Plan", in "plan:handle<mylib.Plan>"): none
 * of the signature grammar's separators. A name is one or more of them.
 */
#define TP_HANDLE_TYPE_NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:"

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
  X(Any, "any")            \
  X(List, "list")          \
  X(Ints, "ints")          \
  X(Handle, "handle") /* and "handle<T>" */

#endif /* TENSORPLUG_VOCABULARY_H_ */
