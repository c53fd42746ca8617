/*
 * <tvm/ffi/extra/cuda/cubin_launcher.h> is not part of tensorplug's tvm-ffi compatibility layer: cubin embedding
 * and launch are not provided. docs/migration.md ("Not supported") says what to do instead.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_EXTRA_CUDA_CUBIN_LAUNCHER_H_
#define TENSORPLUG_COMPAT_TVM_FFI_EXTRA_CUDA_CUBIN_LAUNCHER_H_
#error "tvm/ffi/extra/cuda/cubin_launcher.h is not provided by tensorplug's tvm-ffi compatibility layer; see docs/migration.md (Not supported)"
#endif
