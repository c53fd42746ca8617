/*
 * <tvm/ffi/container/shape.h> (compatibility layer): ShapeView (non-owning) and Shape
 * (owning) int64 sequences. Both convert to tensorplug::IntArrayView, so a Shape can be
 * passed wherever native tensorplug takes a shape.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_SHAPE_H_
#define TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_SHAPE_H_

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <utility>
#include <vector>

#include "tensorplug/tensor.h"
#include "tvm/ffi/error.h"

namespace tvm {
namespace ffi {

template <class T>
class Array;

/*! \brief A non-owning view of int64 values; valid while its source is. */
class ShapeView {
 public:
  ShapeView() noexcept = default;
  ShapeView(const int64_t* data, size_t size) noexcept : view_(data, size) {}
  ShapeView(::tensorplug::IntArrayView view) noexcept : view_(view) {}  // NOLINT: implicit by design
  ShapeView(const std::vector<int64_t>& values) noexcept : view_(values) {}  // NOLINT
  // The braced list lives until the end of the full expression: long enough for an argument.
  ShapeView(const std::initializer_list<int64_t>& values) noexcept  // NOLINT
      : view_(values.begin(), values.size()) {}

  operator ::tensorplug::IntArrayView() const noexcept { return view_; }  // NOLINT

  const int64_t* data() const noexcept { return view_.data(); }
  size_t size() const noexcept { return view_.size(); }
  bool empty() const noexcept { return view_.empty(); }
  /*! \brief Unchecked element access. */
  int64_t operator[](size_t i) const noexcept { return view_[i]; }
  /*! \brief Checked element access: IndexError when `i` is out of range. */
  int64_t at(size_t i) const {
    if (i >= size()) TVM_FFI_THROW(IndexError) << "index " << i << " out of range for a shape of " << size();
    return view_[i];
  }
  int64_t front() const { return at(0); }
  int64_t back() const { return at(size() - 1); }
  const int64_t* begin() const noexcept { return view_.begin(); }
  const int64_t* end() const noexcept { return view_.end(); }
  /*! \brief The product of the values (1 for an empty shape): an element count. */
  int64_t Product() const noexcept {
    int64_t product = 1;
    for (int64_t v : view_) product *= v;
    return product;
  }

 private:
  ::tensorplug::IntArrayView view_;
};

inline bool operator==(ShapeView a, ShapeView b) noexcept {
  return ::tensorplug::IntArrayView(a) == ::tensorplug::IntArrayView(b);
}
inline bool operator!=(ShapeView a, ShapeView b) noexcept { return !(a == b); }
/*! \brief Prints "[2, 3]". */
inline std::ostream& operator<<(std::ostream& os, ShapeView shape) {
  return ::tensorplug::operator<<(os, ::tensorplug::IntArrayView(shape));
}

/*!
 * \brief An owning, immutable int64 sequence (a shape or strides). Copies are independent
 * values (the other project shares one object; with immutable values the two agree).
 */
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> values) : values_(values) {}  // NOLINT
  Shape(std::vector<int64_t> values) : values_(std::move(values)) {}  // NOLINT
  Shape(ShapeView view) : values_(view.begin(), view.end()) {}        // NOLINT
  Shape(::tensorplug::IntArrayView view) : values_(view.begin(), view.end()) {}  // NOLINT
  template <class Iterator>
  Shape(Iterator first, Iterator last) : values_(first, last) {}
  /*! \brief From an Array<int64_t> (declared in container/array.h). */
  template <class T, class = std::enable_if_t<std::is_integral_v<T>>>
  Shape(const Array<T>& values) : values_(values.begin(), values.end()) {}  // NOLINT

  /*! \brief Row-major compact strides for `shape` (size-0 and size-1 extents count as 1). */
  static Shape StridesFromShape(ShapeView shape) {
    std::vector<int64_t> strides(shape.size());
    int64_t step = 1;
    for (size_t i = shape.size(); i-- > 0;) {
      strides[i] = step;
      step *= shape[i] > 1 ? shape[i] : 1;
    }
    return Shape(std::move(strides));
  }

  operator ShapeView() const noexcept { return ShapeView(values_.data(), values_.size()); }  // NOLINT
  operator ::tensorplug::IntArrayView() const noexcept { return values_; }                   // NOLINT

  const int64_t* data() const noexcept { return values_.data(); }
  size_t size() const noexcept { return values_.size(); }
  bool empty() const noexcept { return values_.empty(); }
  int64_t operator[](size_t i) const noexcept { return values_[i]; }
  int64_t at(size_t i) const { return ShapeView(*this).at(i); }
  int64_t front() const { return at(0); }
  int64_t back() const { return at(size() - 1); }
  const int64_t* begin() const noexcept { return values_.data(); }
  const int64_t* end() const noexcept { return values_.data() + values_.size(); }
  int64_t Product() const noexcept { return ShapeView(*this).Product(); }
  /*! \brief The values as a std::vector. */
  const std::vector<int64_t>& vec() const noexcept { return values_; }

 private:
  std::vector<int64_t> values_;
};

// Shape == Shape and Shape == ShapeView compare through the ShapeView operators.
inline std::ostream& operator<<(std::ostream& os, const Shape& shape) { return os << ShapeView(shape); }

}  // namespace ffi
}  // namespace tvm

#endif  // TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_SHAPE_H_
