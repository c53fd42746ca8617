/*
 * <tvm/ffi/container/tensor.h> (compatibility layer): TensorView and Tensor with the
 * accessors tvm-ffi sources call, GetDataSize and IsContiguous.
 *
 * tvm::ffi::TensorView derives from tensorplug::TensorView and tvm::ffi::Tensor from
 * tensorplug::Tensor, so each converts to the native type (mixing compat and native code
 * in one library works). The accessors keep the other project's meaning where it differs
 * from tensorplug's native one (docs/migration.md):
 *   data_ptr()   DLTensor::data, WITHOUT byte_offset (native data_ptr() adds it); sources
 *                written for the other project add byte_offset() themselves where needed
 *   shape(), strides()   ShapeView; strides() of a tensor whose producer left strides NULL
 *                throws ValueError (native: empty) -- stride(i) works in every case
 *   IsContiguous(), IsAligned(n), GetDLTensorPtr(), operator->()
 * Inherited unchanged: ndim()/dim(), size(i), stride(i), numel(), dtype(), device(),
 * byte_offset(), is_contiguous(), defined().
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_TENSOR_H_
#define TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "tensorplug/tensor.h"
#include "tvm/ffi/c_api.h"
#include "tvm/ffi/container/shape.h"
#include "tvm/ffi/dtype.h"
#include "tvm/ffi/error.h"

namespace tvm {
namespace ffi {

/*! \brief Bytes of `numel` elements of `dtype` (sub-byte types rounded up to whole bytes). */
inline size_t GetDataSize(size_t numel, DLDataType dtype) {
  return (numel * dtype.bits * dtype.lanes + 7) / 8;
}

/*! \brief Bytes of the tensor's elements (the product of its shape). */
inline size_t GetDataSize(const DLTensor& tensor) {
  return GetDataSize(static_cast<size_t>(ShapeView(tensor.shape, static_cast<size_t>(tensor.ndim)).Product()),
                     tensor.dtype);
}

/*! \brief Row-major compact: NULL strides, or strides matching the shape (size-1 extents ignored). */
inline bool IsContiguous(const DLTensor& tensor) {
  if (tensor.strides == nullptr) return true;
  // An empty tensor has no layout to get wrong, whichever dimension is 0 (as native is_contiguous()).
  for (int32_t i = 0; i < tensor.ndim; ++i) {
    if (tensor.shape[i] == 0) return true;
  }
  int64_t expected = 1;
  for (int32_t i = tensor.ndim - 1; i >= 0; --i) {
    if (tensor.shape[i] == 1) continue;
    if (tensor.strides[i] != expected) return false;
    expected *= tensor.shape[i];
  }
  return true;
}

/*! \brief True when element 0 (data + byte_offset) is aligned to `alignment` bytes. */
inline bool IsAligned(const DLTensor& tensor, size_t alignment) {
  const auto address = reinterpret_cast<uintptr_t>(tensor.data) + tensor.byte_offset;
  return alignment == 0 || address % alignment == 0;
}

namespace compat_detail {

/*! \brief The accessors whose meaning follows the other project (see the file comment). */
template <class Derived>
class TensorAccessors {
 public:
  /*! \brief DLTensor::data (byte_offset not added). */
  void* data_ptr() const { return dl().data; }
  ShapeView shape() const { return ShapeView(dl().shape, static_cast<size_t>(dl().ndim)); }
  ShapeView sizes() const { return shape(); }
  /*! \brief ValueError when the producer left strides NULL: use stride(i) there. */
  ShapeView strides() const {
    const DLTensor& t = dl();
    if (t.strides == nullptr && t.ndim > 0) {
      TVM_FFI_THROW(ValueError) << "strides() of a tensor with NULL strides (a compact tensor from a legacy "
                                   "producer): use stride(i), or IsContiguous()";
    }
    return ShapeView(t.strides, static_cast<size_t>(t.ndim));
  }
  bool IsContiguous() const { return ::tvm::ffi::IsContiguous(dl()); }
  bool IsAligned(size_t alignment) const { return ::tvm::ffi::IsAligned(dl(), alignment); }
  const DLTensor* GetDLTensorPtr() const { return &dl(); }
  const DLTensor* operator->() const { return &dl(); }

 protected:
  ~TensorAccessors() = default;

 private:
  const DLTensor& dl() const {
    const DLTensor* t = static_cast<const Derived*>(this)->dltensor();
    if (t == nullptr) TVM_FFI_THROW(ValueError) << "use of an undefined tensor";
    return *t;
  }
};

/*! \brief Throw the error a c_api.h call recorded (TPErrorGet), then clear it. */
[[noreturn]] inline void ThrowRecordedError(const char* where) {
  const char* kind = nullptr;
  const char* message = nullptr;
  if (TPErrorGet(&kind, &message) == 0) {
    TVM_FFI_THROW(RuntimeError) << where << ": the allocator failed without recording an error";
  }
  ::tensorplug::Error error(kind != nullptr ? kind : "RuntimeError", message != nullptr ? message : "");
  TPErrorClear();
  throw error;
}

}  // namespace compat_detail

class Tensor;

/*! \brief A non-owning tensor (see the file comment); valid while the viewed tensor is. */
class TensorView : public ::tensorplug::TensorView, public compat_detail::TensorAccessors<TensorView> {
  using Accessors = compat_detail::TensorAccessors<TensorView>;

 public:
  TensorView() noexcept = default;
  TensorView(const DLTensor* tensor) noexcept : ::tensorplug::TensorView(tensor) {}  // NOLINT
  TensorView(const ::tensorplug::TensorView& view) noexcept : ::tensorplug::TensorView(view) {}  // NOLINT
  TensorView(const ::tensorplug::Tensor& tensor) noexcept : ::tensorplug::TensorView(tensor.view()) {}  // NOLINT
  /*! A view of a temporary would dangle. */
  TensorView(::tensorplug::Tensor&& tensor) = delete;

  using ::tensorplug::TensorView::dltensor;
  using Accessors::data_ptr;
  using Accessors::GetDLTensorPtr;
  using Accessors::IsAligned;
  using Accessors::IsContiguous;
  using Accessors::shape;
  using Accessors::sizes;
  using Accessors::strides;
  using Accessors::operator->;
};

/*! \brief An owning, reference-counted tensor (see the file comment). */
class Tensor : public ::tensorplug::Tensor, public compat_detail::TensorAccessors<Tensor> {
  using Accessors = compat_detail::TensorAccessors<Tensor>;
  using Base = ::tensorplug::Tensor;

 public:
  Tensor() noexcept = default;
  Tensor(::tensorplug::Tensor tensor) noexcept : Base(std::move(tensor)) {}  // NOLINT

  using Base::dltensor;
  using Accessors::data_ptr;
  using Accessors::GetDLTensorPtr;
  using Accessors::IsAligned;
  using Accessors::IsContiguous;
  using Accessors::shape;
  using Accessors::sizes;
  using Accessors::strides;
  using Accessors::operator->;

  /*!
   * \brief Allocate a row-major compact tensor with `env_alloc`, normally TVMFFIEnvTensorAlloc
   * (the calling framework's allocator during a call from Python: numpy, torch, jax,
   * paddle alike). Any function of that signature whose handle is a
   * DLManagedTensorVersioned* works. Native tensorplug spells this
   * `Tensor::FromEnvAlloc(shape, dtype, device)`, without the allocator.
   */
  static Tensor FromEnvAlloc(int (*env_alloc)(DLTensor*, TVMFFIObjectHandle*), ShapeView shape,
                             DLDataType dtype, DLDevice device) {
    if (env_alloc == nullptr) TVM_FFI_THROW(ValueError) << "FromEnvAlloc: the allocator is NULL";
    if (shape.size() > TP_MAX_NDIM) {
      TVM_FFI_THROW(ValueError) << "FromEnvAlloc: " << shape.size() << " dimensions; at most " << TP_MAX_NDIM;
    }
    for (int64_t extent : shape) {
      if (extent < 0) TVM_FFI_THROW(ValueError) << "FromEnvAlloc: negative extent in shape " << shape;
    }
    DLTensor prototype{nullptr, device, static_cast<int32_t>(shape.size()), dtype,
                       const_cast<int64_t*>(shape.data()), nullptr, 0};
    TVMFFIObjectHandle handle = nullptr;
    if (env_alloc(&prototype, &handle) != 0) compat_detail::ThrowRecordedError("FromEnvAlloc");
    if (handle == nullptr) TVM_FFI_THROW(RuntimeError) << "FromEnvAlloc: the allocator returned no tensor";
    Tensor result(Base::FromDLPackVersioned(static_cast<DLManagedTensorVersioned*>(handle)));
    if (result.shape() != shape || result.dtype() != dtype) {
      TVM_FFI_THROW(RuntimeError) << "FromEnvAlloc: asked for " << dtype << shape
                                  << ", the allocator returned " << result.dtype() << result.shape();
    }
    if (result.device().device_type != device.device_type || result.device().device_id != device.device_id ||
        !result.IsContiguous()) {
      TVM_FFI_THROW(RuntimeError) << "FromEnvAlloc: the allocator returned a tensor on another device "
                                     "or not row-major compact";
    }
    return result;
  }

  /*!
   * \brief A row-major compact tensor whose data `alloc` provides: an object with
   * `void AllocData(DLTensor*, ExtraArgs...)` and `void FreeData(DLTensor*)`.
   */
  template <class Alloc, class... ExtraArgs>
  static Tensor FromNDAlloc(Alloc alloc, ShapeView shape, DLDataType dtype, DLDevice device,
                            ExtraArgs&&... extra_args) {
    return Tensor(Base::FromNDAlloc(std::move(alloc), shape, dtype, device,
                                    std::forward<ExtraArgs>(extra_args)...));
  }

  /*! \brief Own a legacy DLPack tensor; ValueError when it is not aligned / compact as required. */
  static Tensor FromDLPack(DLManagedTensor* tensor, size_t require_alignment = 0, bool require_contiguous = false) {
    return Checked(Tensor(Base::FromDLPack(tensor)), require_alignment, require_contiguous, "FromDLPack");
  }
  /*! \brief Own a versioned DLPack tensor; ValueError when it is not aligned / compact as required. */
  static Tensor FromDLPackVersioned(DLManagedTensorVersioned* tensor, size_t require_alignment = 0,
                                    bool require_contiguous = false) {
    return Checked(Tensor(Base::FromDLPackVersioned(tensor)), require_alignment, require_contiguous,
                   "FromDLPackVersioned");
  }

 private:
  static Tensor Checked(Tensor tensor, size_t alignment, bool contiguous, const char* where) {
    if (!tensor.IsAligned(alignment)) {
      TVM_FFI_THROW(ValueError) << where << ": data is not aligned to " << alignment << " bytes";
    }
    if (contiguous && !tensor.IsContiguous()) TVM_FFI_THROW(ValueError) << where << ": tensor is not contiguous";
    return tensor;
  }
};

inline size_t GetDataSize(const TensorView& tensor) {
  return GetDataSize(static_cast<size_t>(tensor.numel()), tensor.dtype());
}
inline size_t GetDataSize(const Tensor& tensor) {
  return GetDataSize(static_cast<size_t>(tensor.numel()), tensor.dtype());
}

}  // namespace ffi
}  // namespace tvm

#endif  // TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_TENSOR_H_
