/*
 * <tvm/ffi/extra/cuda/cubin_launcher.h> is not part of tensorplug's tvm-ffi compatibility layer: cubin embedding
 * and launch are not provided. docs/migration.md ("Not supported") says what to do instead. Its
 * names are declared so that a source including it compiles; using one fails with a message
 * (tensorplug_not_provided.h).
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_EXTRA_CUDA_CUBIN_LAUNCHER_H_
#define TENSORPLUG_COMPAT_TVM_FFI_EXTRA_CUDA_CUBIN_LAUNCHER_H_

#include <tvm/ffi/tensorplug_not_provided.h>

namespace tvm {
namespace ffi {
TENSORPLUG_COMPAT_NOT_PROVIDED_CLASS(CubinModule, "tvm::ffi::CubinModule", "extra/cuda/cubin_launcher.h");
TENSORPLUG_COMPAT_NOT_PROVIDED_CLASS(CubinKernel, "tvm::ffi::CubinKernel", "extra/cuda/cubin_launcher.h");
}  // namespace ffi
}  // namespace tvm

#define TVM_FFI_EMBED_CUBIN(...) \
  TENSORPLUG_COMPAT_NOT_PROVIDED_MACRO("TVM_FFI_EMBED_CUBIN", "extra/cuda/cubin_launcher.h")
#define TVM_FFI_EMBED_CUBIN_GET_KERNEL(...) \
  TENSORPLUG_COMPAT_NOT_PROVIDED_MACRO("TVM_FFI_EMBED_CUBIN_GET_KERNEL", "extra/cuda/cubin_launcher.h")

#endif  // TENSORPLUG_COMPAT_TVM_FFI_EXTRA_CUDA_CUBIN_LAUNCHER_H_
