/*
 * tensorplug/tensorplug.h -- the C++ kernel API of tensorplug (header-only, C++17).
 *
 *   #include <tensorplug/tensorplug.h>
 *   namespace tp = tensorplug;
 *
 *   void AddOne(tp::TensorView x, tp::MutableView out) { ... }  // reads x, writes out
 *   TENSORPLUG_EXPORT(add_one, AddOne, "x", "out");
 *
 * Contents:
 *   error.h     Error, TENSORPLUG_THROW / TENSORPLUG_CHECK / TENSORPLUG_ICHECK
 *   dtype.h     dtype and device constants and helpers, Half / BFloat16, dispatch macros
 *   tensor.h    IntArrayView, TensorView / MutableView (non-owning: read / written),
 *               Tensor (owning, reference counted), ArgName
 *   env.h       current streams, Storage
 *   vocabulary.h  the lists of signature kinds, device types, dtypes, error kinds
 *   handle.h    Handle<T>: typed opaque handles, TENSORPLUG_HANDLE_TYPE
 *   caster.h    TypeCaster<T>: C++ types <-> TPAny (the extension point for new types)
 *   function.h  Any, Function, Function::FromTyped
 *   export.h    TENSORPLUG_EXPORT, TENSORPLUG_REGISTER_GLOBAL
 *   storage.h   SetStorage / GetStorage / GetOrCreateStorage, GetWorkspace
 *   cuda.h      CUDADeviceGuard, GetCurrentCUDAStream (included when compiling with CUDA:
 *               under nvcc, or with TENSORPLUG_WITH_CUDA defined)
 *
 * Kernel libraries link against libtensorplug, which implements c_api.h.
 */
#ifndef TENSORPLUG_TENSORPLUG_H_
#define TENSORPLUG_TENSORPLUG_H_

#include "tensorplug/c_api.h"
#include "tensorplug/dtype.h"
#include "tensorplug/env.h"
#include "tensorplug/error.h"
#include "tensorplug/caster.h"
#include "tensorplug/export.h"
#include "tensorplug/function.h"
#include "tensorplug/handle.h"
#include "tensorplug/storage.h"
#include "tensorplug/tensor.h"
#include "tensorplug/vocabulary.h"

#if defined(__CUDACC__) || defined(TENSORPLUG_WITH_CUDA)
#include "tensorplug/cuda.h"
#endif

#endif  // TENSORPLUG_TENSORPLUG_H_
