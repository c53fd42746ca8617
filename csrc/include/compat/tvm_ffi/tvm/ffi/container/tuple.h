/*
 * <tvm/ffi/container/tuple.h> (compatibility layer): Tuple<Ts...>, a fixed set of values.
 * As a kernel result it is a Python tuple whose tensors are the caller's framework type
 * (native tensorplug: std::tuple). It is a std::tuple, so std::get and structured
 * bindings work; t.get<I>() reads element I.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_TUPLE_H_
#define TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_TUPLE_H_

#include <cstddef>
#include <tuple>
#include <utility>

namespace tvm {
namespace ffi {

template <class... Ts>
class Tuple : public std::tuple<Ts...> {
 public:
  using std::tuple<Ts...>::tuple;
  Tuple(std::tuple<Ts...> values) : std::tuple<Ts...>(std::move(values)) {}  // NOLINT

  template <size_t I>
  const std::tuple_element_t<I, std::tuple<Ts...>>& get() const& {
    return std::get<I>(static_cast<const std::tuple<Ts...>&>(*this));
  }
  template <size_t I>
  void Set(std::tuple_element_t<I, std::tuple<Ts...>> value) {
    std::get<I>(static_cast<std::tuple<Ts...>&>(*this)) = std::move(value);
  }
};

}  // namespace ffi
}  // namespace tvm

template <class... Ts>
struct std::tuple_size<::tvm::ffi::Tuple<Ts...>> : std::integral_constant<size_t, sizeof...(Ts)> {};
template <size_t I, class... Ts>
struct std::tuple_element<I, ::tvm::ffi::Tuple<Ts...>> : std::tuple_element<I, std::tuple<Ts...>> {};

#endif  // TENSORPLUG_COMPAT_TVM_FFI_CONTAINER_TUPLE_H_
