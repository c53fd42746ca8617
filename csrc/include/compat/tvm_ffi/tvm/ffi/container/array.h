/*
 * <tvm/ffi/container/array.h> (compatibility layer): Array<T>, a sequence of values
 * (tensors, integers, floats, strings). It is a value type over std::vector<T>: a copy is
 * a copy (the other project shares one copy-on-write object; a kernel sees no
 * difference unless it relies on two Arrays aliasing).
 *
 * Across the calling convention (see tvm/ffi/tensorplug_casters.h):
 *   result      a Python tuple of the items (tensors as the caller's framework type);
 *   parameter   tensorplug's list kinds (a list of tensors, an integer array), through the
 *               native casters of std::vector<T> when this tensorplug has them; a
 *               tensorplug without them refuses an Array parameter at compile time.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_ARRAY_H_
#define TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_ARRAY_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
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

/*! \brief Result side of Array and Shape: a tuple of the items, each packed by its caster. */
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

/*!
 * \brief The parameter side, when tensorplug has a caster for std::vector<Native> (the list
 * and integer-array kinds); otherwise kIsArg stays false and the export's static_assert
 * names the parameter type as unsupported.
 */
template <class Compat, class Native, class = void>
struct ListArg {
  static constexpr bool kIsArg = false, kIsCallArg = false, kConsumes = false;
};
template <class Compat, class Native>
struct ListArg<Compat, Native, std::enable_if_t<::tensorplug::TypeCaster<std::vector<Native>>::kIsArg>>
    : ::tensorplug::TypeCaster<std::vector<Native>> {
  using List = ::tensorplug::TypeCaster<std::vector<Native>>;
  static Compat Convert(const TPAny& v) {
    auto items = List::Convert(v);
    return Compat(items.begin(), items.end());
  }
  static ::tensorplug::ArgMode PackArg(const Compat& value, TPAny* out) {
    return List::PackArg(std::vector<Native>(value.begin(), value.end()), out);
  }
};

}  // namespace tensorplug_compat

namespace tensorplug {

template <class T>
struct TypeCaster<::tvm::ffi::Array<T>> : ::tensorplug_compat::ListArg<::tvm::ffi::Array<T>, T> {
  static constexpr bool kIsResult = TypeCaster<T>::kIsResult;
  static std::string ResultKind() { return "tuple"; }
  static void PackResult(const ::tvm::ffi::Array<T>& value, TPAny* out) {
    ::tensorplug_compat::PackItemsAsTuple<T>(value, out);
  }
};

template <>
struct TypeCaster<::tvm::ffi::Shape> : ::tensorplug_compat::ListArg<::tvm::ffi::Shape, int64_t> {
  static constexpr bool kIsResult = true;
  static std::string ResultKind() { return "tuple"; }
  static void PackResult(const ::tvm::ffi::Shape& value, TPAny* out) {
    ::tensorplug_compat::PackItemsAsTuple<int64_t>(value, out);
  }
};

}  // namespace tensorplug

#endif  // TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_ARRAY_H_
