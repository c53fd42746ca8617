// A shared utility header in the style kernel libraries keep next to their kernels: an
// owning Shape, the allocation helper over the env allocator, a stream helper.
#pragma once

#include <tvm/ffi/container/shape.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>

#include <cstdint>
#include <vector>

namespace ffi = tvm::ffi;

inline ffi::Tensor alloc_tensor(const ffi::Shape& shape, DLDataType dtype, DLDevice device) {
  return ffi::Tensor::FromEnvAlloc(TVMFFIEnvTensorAlloc, shape, dtype, device);
}

inline void* get_stream(DLDevice device) { return TVMFFIEnvGetStream(device.device_type, device.device_id); }

// The shape of `shape` with dimension `dim` removed (negative counts from the end).
inline ffi::Shape drop_dim(ffi::ShapeView shape, int64_t dim) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  if (dim < 0) dim += ndim;
  TVM_FFI_CHECK(dim >= 0 && dim < ndim, IndexError) << "dim out of range for a " << ndim << "-D tensor";
  std::vector<int64_t> out;
  for (int64_t i = 0; i < ndim; ++i) {
    if (i != dim) out.push_back(shape[i]);
  }
  return ffi::Shape(out);
}

inline int64_t dim_index(ffi::ShapeView shape, int64_t dim) {
  return dim < 0 ? dim + static_cast<int64_t>(shape.size()) : dim;
}
