/*
 * <tvm/ffi/container/array.h> (compatibility layer): Array<T>, a sequence of values
 * (tensors, integers, floats, strings). It is a value type over std::vector<T>: a copy is
 * a copy (the other project shares one copy-on-write object; a kernel sees no
 * difference unless it relies on two Arrays aliasing).
 *
 * Across the calling convention (see tvm/ffi/tensorplug_casters.h), on tensorplug's list
 * kinds through the native casters of std::vector (ListCaster below):
 *   parameter   Array<Tensor> a list of tensors ("views": lent, so the items are valid for
 *               the call, like TensorView), Array<int64_t> and Shape an integer array ("ints");
 *   result      Array<Tensor> a Python list of the caller's framework type ("list"),
 *               Array<int64_t> and Shape a list of ints ("ints"); other items a tuple.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_ARRAY_H_
#define TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_ARRAY_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensorplug/function.h"
#include "tvm/ffi/container/shape.h"
#include "tvm/ffi/error.h"
#include "tvm/ffi/tensorplug_casters.h"

namespace tvm {
namespace ffi {

template <class T>
class Array {
 public:
  using value_type = T;
  using iterator = typename std::vector<T>::const_iterator;

  Array() = default;
  Array(std::initializer_list<T> items) : items_(items) {}  // NOLINT
  Array(std::vector<T> items) : items_(std::move(items)) {}  // NOLINT
  template <class Iterator>
  Array(Iterator first, Iterator last) : items_(first, last) {}
  Array(size_t n, const T& value) : items_(n, value) {}

  size_t size() const noexcept { return items_.size(); }
  bool empty() const noexcept { return items_.empty(); }
  /*! \brief Element `i`; IndexError when out of range (the other project checks too). */
  const T& operator[](size_t i) const { return at(i); }
  const T& at(size_t i) const {
    if (i >= items_.size()) {
      TVM_FFI_THROW(IndexError) << "Array index " << i << " out of range for an Array of " << items_.size();
    }
    return items_[i];
  }
  const T& front() const { return at(0); }
  const T& back() const { return at(items_.size() - 1); }
  iterator begin() const noexcept { return items_.begin(); }
  iterator end() const noexcept { return items_.end(); }

  void push_back(T item) { items_.push_back(std::move(item)); }
  template <class... Args>
  void emplace_back(Args&&... args) {
    items_.emplace_back(std::forward<Args>(args)...);
  }
  void pop_back() {
    if (items_.empty()) TVM_FFI_THROW(IndexError) << "pop_back() on an empty Array";
    items_.pop_back();
  }
  void Set(size_t i, T item) {
    (void)at(i);
    items_[i] = std::move(item);
  }
  void insert(iterator position, T item) { items_.insert(position, std::move(item)); }
  void erase(iterator position) { items_.erase(position); }
  void clear() noexcept { items_.clear(); }
  void resize(size_t n) { items_.resize(n); }
  void reserve(size_t n) { items_.reserve(n); }

  /*! \brief The items as a std::vector. */
  const std::vector<T>& vec() const& noexcept { return items_; }
  std::vector<T>&& vec() && noexcept { return std::move(items_); }

 private:
  std::vector<T> items_;
};

}  // namespace ffi
}  // namespace tvm

namespace tensorplug_compat {

/*!
 * \brief The native element type a compatibility element crosses the call as: a Tensor
 * item of an Array parameter is passed as a view (kind "views") and returned as a
 * tensorplug::Tensor (kind "list"); other items as themselves.
 */
template <class T>
struct NativeItem {
  using Arg = T;
  using Result = T;
};
template <>
struct NativeItem<::tvm::ffi::Tensor> {
  using Arg = ::tensorplug::TensorView;
  using Result = ::tensorplug::Tensor;
};
template <>
struct NativeItem<::tvm::ffi::TensorView> {
  using Arg = ::tensorplug::TensorView;
  using Result = ::tensorplug::TensorView;
};

/*!
 * \brief An owning-typed Tensor over a lent view, for the items of an Array<Tensor>
 * parameter: it holds the caller's tensor without a reference, so, like a TensorView, it
 * is valid for the call (one small allocation per item).
 */
inline ::tvm::ffi::Tensor BorrowForCall(const ::tensorplug::TensorView& view) {
  auto* managed = new DLManagedTensorVersioned{};
  managed->version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  managed->dl_tensor = *view.dltensor();
  managed->flags = view.is_read_only() ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  managed->deleter = [](DLManagedTensorVersioned* self) { delete self; };
  return ::tvm::ffi::Tensor(::tensorplug::Tensor::FromDLPackVersioned(managed));
}

template <class T, class Native>
T FromNativeArg(const Native& item) {
  if constexpr (std::is_same_v<T, ::tvm::ffi::Tensor>) {
    return BorrowForCall(item);
  } else {
    return T(item);
  }
}

/*! \brief Result side without a native list kind: a tuple of the items, each packed by its caster. */
template <class T, class Items>
void PackItemsAsTuple(const Items& items, TPAny* out) {
  if (items.size() > static_cast<size_t>(INT32_MAX)) {
    TVM_FFI_THROW(OverflowError) << "a result of " << items.size() << " items; at most " << INT32_MAX;
  }
  TPAny tuple{};
  tuple.v_tuple = TPTupleCreate(static_cast<int32_t>(items.size()));
  if (tuple.v_tuple == nullptr) throw std::bad_alloc();
  tuple.type_index = kTPTuple;
  try {
    int32_t i = 0;
    for (const auto& item : items) ::tensorplug::TypeCaster<T>::PackResult(T(item), &tuple.v_tuple->items[i++]);
  } catch (...) {
    TPAnyRelease(&tuple);  // releases the items packed so far
    throw;
  }
  *out = tuple;
}

template <class T, class = void>
struct HasNativeListResult : std::false_type {};
template <class T>
struct HasNativeListResult<
    T, std::enable_if_t<::tensorplug::TypeCaster<std::vector<typename NativeItem<T>::Result>>::kIsResult>>
    : std::true_type {};

/*!
 * \brief The caster of Array<T> (and of Shape, T = int64_t). Parameters: tensorplug's list
 * kinds ("views" for tensors, "ints" for integers) through the native casters of
 * std::vector, when this tensorplug has them; without them kIsArg stays false and the
 * export's static_assert names the parameter type. Results: the native list kinds when
 * present, else a tuple.
 */
template <class Compat, class T, class = void>
struct ListCaster {
  static constexpr bool kIsArg = false, kIsCallArg = false, kConsumes = false;
};
template <class Compat, class T>
struct ListCaster<Compat, T,
                  std::enable_if_t<::tensorplug::TypeCaster<std::vector<typename NativeItem<T>::Arg>>::kIsArg>>
    : ::tensorplug::TypeCaster<std::vector<typename NativeItem<T>::Arg>> {
  using List = ::tensorplug::TypeCaster<std::vector<typename NativeItem<T>::Arg>>;
  static constexpr bool kIsCallArg = false;
  static Compat Convert(const TPAny& v) {
    auto items = List::Convert(v);
    std::vector<T> out;
    out.reserve(items.size());
    for (const auto& item : items) out.push_back(FromNativeArg<T>(item));
    return Compat(std::move(out));
  }
};

template <class Compat, class T>
struct ListResultCaster : ListCaster<Compat, T> {
  static constexpr bool kIsResult =
      HasNativeListResult<T>::value || ::tensorplug::TypeCaster<typename NativeItem<T>::Result>::kIsResult;
  static std::string ResultKind() {
    if constexpr (HasNativeListResult<T>::value) {
      return ::tensorplug::TypeCaster<std::vector<typename NativeItem<T>::Result>>::ResultKind();
    } else {
      return "tuple";
    }
  }
  static void PackResult(const Compat& value, TPAny* out) {
    using Native = typename NativeItem<T>::Result;
    if constexpr (HasNativeListResult<T>::value) {
      ::tensorplug::TypeCaster<std::vector<Native>>::PackResult(std::vector<Native>(value.begin(), value.end()), out);
    } else {
      PackItemsAsTuple<Native>(value, out);
    }
  }
};

}  // namespace tensorplug_compat

namespace tensorplug {

template <class T>
struct TypeCaster<::tvm::ffi::Array<T>> : ::tensorplug_compat::ListResultCaster<::tvm::ffi::Array<T>, T> {};

template <>
struct TypeCaster<::tvm::ffi::Shape> : ::tensorplug_compat::ListResultCaster<::tvm::ffi::Shape, int64_t> {};

}  // namespace tensorplug

#endif  // TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_ARRAY_H_
