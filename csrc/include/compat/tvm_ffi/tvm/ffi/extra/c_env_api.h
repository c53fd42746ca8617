/*
 * <tvm/ffi/extra/c_env_api.h> (compatibility layer): the calling environment under the
 * names tvm-ffi sources use, each a thin inline forward to tensorplug's env ABI
 * (TPEnvGetStream, TPEnvSetStream, TPEnvAllocTensor). During a call from Python the
 * stream is the primary argument's framework's current stream and the allocator is that
 * framework's (numpy and jax included), exactly as for native tensorplug kernels.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_EXTRA_C_ENV_API_H_
#define TENSORPLUG_COMPAT_TVM_FFI_EXTRA_C_ENV_API_H_

#include <stdint.h>

#include "tvm/ffi/c_api.h"

/*! \brief The calling thread's current stream of a device (NULL: its default stream). */
static inline TVMFFIStreamHandle TVMFFIEnvGetStream(int32_t device_type, int32_t device_id) {
  return TPEnvGetStream(device_type, device_id);
}

/*!
 * \brief Set the calling thread's current stream of a device; the previous one is stored
 * in `opt_out_original_stream` when it is not NULL. Returns 0 (it cannot fail).
 */
static inline int TVMFFIEnvSetStream(int32_t device_type, int32_t device_id, TVMFFIStreamHandle stream,
                                     TVMFFIStreamHandle* opt_out_original_stream) {
  TVMFFIStreamHandle previous = TPEnvSetStream(device_type, device_id, stream);
  if (opt_out_original_stream != NULL) *opt_out_original_stream = previous;
  return 0;
}

/*!
 * \brief Allocate a tensor shaped like `prototype` (its data is ignored) with the calling
 * thread's env allocator. On success *out is a DLManagedTensorVersioned* the caller owns
 * and 0 is returned; on failure -1, with the error recorded (TPErrorGet).
 * Used as `Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, shape, dtype, device)`.
 */
static inline int TVMFFIEnvTensorAlloc(DLTensor* prototype, TVMFFIObjectHandle* out) {
  return TPEnvAllocTensor(prototype, (DLManagedTensorVersioned**)out);  // NOLINT: C header
}

#endif  // TENSORPLUG_COMPAT_TVM_FFI_EXTRA_C_ENV_API_H_
