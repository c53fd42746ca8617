/*
 * <tvm/ffi/optional.h> (compatibility layer): Optional<T>, a value or nothing. As a kernel
 * parameter it accepts None from Python (Optional[...] in inspect.signature), exactly like
 * native tensorplug's std::optional<T>; it converts to and from std::optional<T>.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_OPTIONAL_H_
#define TENSORPLUG_COMPAT_TVM_FFI_OPTIONAL_H_

#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>

#include "tvm/ffi/error.h"

namespace tvm {
namespace ffi {

template <class T>
class Optional {
 public:
  Optional() = default;
  Optional(std::nullopt_t) noexcept {}  // NOLINT
  Optional(std::nullptr_t) noexcept {}  // NOLINT
  Optional(std::optional<T> value) : value_(std::move(value)) {}  // NOLINT
  /*! \brief From anything T is constructible from (a Tensor for an Optional<TensorView>). */
  template <class U, class = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                              !std::is_same_v<std::decay_t<U>, Optional> &&
                                              !std::is_same_v<std::decay_t<U>, std::nullopt_t> &&
                                              !std::is_same_v<std::decay_t<U>, std::nullptr_t>>>
  Optional(U&& value) : value_(T(std::forward<U>(value))) {}  // NOLINT

  Optional& operator=(std::nullopt_t) noexcept {
    value_.reset();
    return *this;
  }

  bool has_value() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return value_.has_value(); }

  /*! \brief The value; ValueError "access of an empty Optional" when there is none. */
  const T& value() const& {
    if (!value_.has_value()) TVM_FFI_THROW(ValueError) << "access of an empty Optional";
    return *value_;
  }
  T&& value() && {
    if (!value_.has_value()) TVM_FFI_THROW(ValueError) << "access of an empty Optional";
    return std::move(*value_);
  }
  template <class U>
  T value_or(U&& fallback) const {
    return value_.has_value() ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }
  /*! \brief Unchecked access, as for std::optional. */
  const T& operator*() const& noexcept { return *value_; }
  T&& operator*() && noexcept { return std::move(*value_); }
  const T* operator->() const noexcept { return &*value_; }

  /*! \brief The std::optional inside. */
  const std::optional<T>& std_optional() const& noexcept { return value_; }
  std::optional<T>&& std_optional() && noexcept { return std::move(value_); }
  operator std::optional<T>() const& { return value_; }  // NOLINT

  friend bool operator==(const Optional& a, std::nullopt_t) noexcept { return !a.has_value(); }
  friend bool operator!=(const Optional& a, std::nullopt_t) noexcept { return a.has_value(); }
  friend bool operator==(const Optional& a, std::nullptr_t) noexcept { return !a.has_value(); }
  friend bool operator!=(const Optional& a, std::nullptr_t) noexcept { return a.has_value(); }

 private:
  std::optional<T> value_;
};

}  // namespace ffi
}  // namespace tvm

#endif  // TENSORPLUG_COMPAT_TVM_FFI_OPTIONAL_H_
