/*
 * <tvm/ffi/c_api.h> (compatibility layer): the handle typedefs and export attributes that
 * tvm-ffi sources name, over tensorplug's C ABI (tensorplug/c_api.h). In this layer an
 * object handle returned by TVMFFIEnvTensorAlloc is a DLManagedTensorVersioned* that the
 * receiver owns; no tvm-ffi object system exists behind it.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_C_API_H_
#define TENSORPLUG_COMPAT_TVM_FFI_C_API_H_

#include "tensorplug/c_api.h"

/*! \brief Marks a symbol exported from the shared library (tensorplug's TP_EXPORT). */
#define TVM_FFI_DLL TP_EXPORT
#define TVM_FFI_DLL_EXPORT TP_EXPORT

/*! \brief An opaque object handle; in this layer, a DLManagedTensorVersioned* (see above). */
typedef void* TVMFFIObjectHandle;
/*! \brief A device stream (cudaStream_t on CUDA); NULL is the device's default stream. */
typedef void* TVMFFIStreamHandle;

#endif  // TENSORPLUG_COMPAT_TVM_FFI_C_API_H_
