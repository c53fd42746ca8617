/*
 * tensorplug/caster.h -- TypeCaster<T>: how a C++ type crosses the packed calling
 * convention (TPAny, c_api.h). The extension point for new parameter and result types of
 * exported functions: specialize tensorplug::TypeCaster for your type (docs/cpp.md,
 * "Custom parameter and result types").
 *
 * Over 500 lines: one file holds every built-in caster so that the list below, the table a
 * kernel author reads, and the specializations it describes stay side by side.
 *
 * Supported parameter types (by value or const&):
 *   TensorView            kind "view":   a lent tensor the kernel reads (kTPDLTensorPtr; a kTPTensor
 *                                        is viewed too); data_ptr() is const
 *   MutableView           kind "mview":  a lent tensor the kernel writes; a read-only one is refused
 *                                        (ValueError) before the call
 *   Tensor                kind "tensor": an owning tensor (kTPTensor; ownership moves to the callee)
 *   integers              kind "int"     (kTPInt or kTPBool; OverflowError when out of range)
 *   float, double         kind "float"   (kTPFloat or kTPInt)
 *   bool                  kind "bool"    (kTPBool or kTPInt)
 *   std::string, std::string_view, const char*   kind "str" (valid for the call, except std::string)
 *   DLDevice, DLDataType  kinds "device", "dtype"
 *   Function              kind "func"    (function.h)
 *   TPAny                 kind "any": the raw value, lent for the call
 *   TensorViewList, std::vector<TensorView>   kind "views": a lent list of tensors (kTPArray)
 *   MutableViewList, std::vector<MutableView> kind "mviews": a lent list of tensors the kernel writes
 *   IntArrayView, std::vector<int64_t>         kind "ints": an int64 array (kTPIntArray)
 *   std::optional<T>      kind "?<kind of T>": None gives std::nullopt
 *   void*                 kind "handle": the pointer of any handle (kTPOpaquePtr or kTPHandle)
 *   Handle<T>             kind "handle<name>": a handle of T's declared type name (handle.h)
 * The view casters give each view the name of its argument (TensorView::arg()), which the
 * accessors' errors start with; a caster with a second Convert(v, ArgName) overload gets it.
 * Supported result types (kind): void, integers (int), floating point (float), bool,
 * strings (str), DLDevice (device), DLDataType (dtype), Tensor (tensor; an undefined one
 * is None), Function (func), Any and TPAny (any; ownership passes to the caller),
 * std::tuple of these (tuple), std::vector<Tensor> (list), std::vector<int64_t> (ints), std::optional of these (any, since result kinds have no
 * optional marker), void* (handle: a non-owning handle; nullptr is None), Handle<T>
 * (handle<name>; an undefined one is None). The kinds are those of tensorplug/vocabulary.h.
 *
 * Over 500 lines: one specialization per supported type, kept together so that this file
 * is the complete table of what crosses a call.
 */
#ifndef TENSORPLUG_CASTER_H_
#define TENSORPLUG_CASTER_H_

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensorplug/c_api.h"
#include "tensorplug/dtype.h"
#include "tensorplug/error.h"
#include "tensorplug/handle.h"
#include "tensorplug/tensor.h"

namespace tensorplug {

class Any;
class Function;

namespace detail {

inline TPAny MakeNone() noexcept {
  TPAny value;
  value.type_index = kTPNone;
  value.flags = 0;
  value.v_int64 = 0;
  return value;
}

/*! \brief True for the kinds a TPAny owns (released by TPAnyRelease). */
constexpr bool IsOwnedKind(int32_t type_index) noexcept {
  return type_index == kTPTensor || type_index == kTPStr || type_index == kTPTuple ||
         type_index == kTPFunction || type_index == kTPHandle;
}

/*! \brief Python-facing name of a value's kind, for "expected X, got Y" messages. */
inline const char* TypeIndexName(const TPAny& value) noexcept {
  switch (value.type_index) {
    case kTPNone: return "None";
    case kTPInt: return "int";
    case kTPFloat: return "float";
    case kTPBool: return "bool";
    case kTPDevice: return "device";
    case kTPDataType: return "dtype";
    case kTPOpaquePtr: return "pointer";
    case kTPRawStr: return value.v_c_str != nullptr ? "str" : "null str";
    case kTPStr: return value.v_str != nullptr ? "str" : "null str";
    case kTPDLTensorPtr: return value.v_dltensor != nullptr ? "tensor view" : "null tensor";
    case kTPTensor: return value.v_tensor != nullptr ? "tensor" : "null tensor";
    case kTPTuple: return "tuple";
    case kTPFunction: return "function";
    case kTPArray: return "list";
    case kTPIntArray: return "int array";
    case kTPHandle: return value.v_handle != nullptr ? "handle" : "null handle";
    default: return "unknown value";
  }
}

/*! \brief TypeIndexName, with a handle's type: "a handle of type mylib.Plan", "an untyped handle". */
inline std::string DescribeValue(const TPAny& value) {
  if (value.type_index != kTPHandle || value.v_handle == nullptr) return TypeIndexName(value);
  const char* type = TPHandleGetTypeName(value.v_handle);
  return type != nullptr ? std::string("a handle of type ") + type : std::string("an untyped handle");
}


template <class T>
T CheckedIntCast(int64_t value) {
  bool fits = true;
  if constexpr (std::is_unsigned_v<T>) {
    fits = value >= 0;
    if constexpr (sizeof(T) < sizeof(int64_t)) {
      fits = fits && static_cast<uint64_t>(value) <= std::numeric_limits<T>::max();
    }
  } else if constexpr (sizeof(T) < sizeof(int64_t)) {
    fits = value >= std::numeric_limits<T>::min() && value <= std::numeric_limits<T>::max();
  }
  if (!fits) {
    TENSORPLUG_THROW(OverflowError) << "integer " << value << " does not fit in "
                                    << DataTypeToString(DTypeTraits<T>::value);
  }
  return static_cast<T>(value);
}

template <class T>
int64_t ToInt64(T value) {
  if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
    if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      TENSORPLUG_THROW(OverflowError) << "integer " << value << " does not fit in int64";
    }
  }
  return static_cast<int64_t>(value);
}

/*! \brief An owned kTPStr holding a copy of data[0:size]. */
inline void PackString(const char* data, size_t size, TPAny* out) {
  TPString* str = TPStringCreate(data, size);
  if (str == nullptr) throw std::bad_alloc();
  out->v_str = str;
  out->type_index = kTPStr;
}

/*! \brief Shared parts of the string casters. */
struct StringCasterBase {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "str"; }
  static std::string ResultKind() { return "str"; }
  static std::string Expected() { return "a str"; }
  static bool Accepts(const TPAny& v) noexcept {
    return (v.type_index == kTPRawStr && v.v_c_str != nullptr) ||
           (v.type_index == kTPStr && v.v_str != nullptr);
  }
  static std::string_view View(const TPAny& v) noexcept {
    return v.type_index == kTPStr ? std::string_view(v.v_str->data, v.v_str->size)
                                  : std::string_view(v.v_c_str);
  }
};


}  // namespace detail

/*!
 * \brief How the caller of a Function must treat a packed argument afterwards:
 * kBorrowed: nothing to release; kTemporary: release after the call (a string made for it);
 * kMoved: handed to the callee by the call (a kTPTensor), released only if no call happened.
 */
enum class ArgMode : uint8_t { kBorrowed, kTemporary, kMoved };

/*!
 * \brief Conversion between a C++ type and TPAny. A specialization declares
 *   kIsArg / kIsResult / kIsCallArg   what it supports (kernel parameter, kernel result,
 *                                    argument of Function::operator())
 *   kConsumes                        Convert takes ownership of a kTPTensor
 *   ArgKind(), ResultKind()          signature kinds; Expected() for error messages
 *   Accepts(v), Convert(v)           parameter side (v is lent, except kTPTensor); optionally
 *   Convert(v, ArgName)              also this overload: the call's argument, for views' messages
 *   PackResult(value, out)           result side (out owns what it gets)
 *   PackArg(value, out) -> ArgMode   call side
 */
template <class T, class = void>
struct TypeCaster {
  static constexpr bool kIsArg = false, kIsResult = false, kIsCallArg = false, kConsumes = false;
};



template <class T>
struct TypeCaster<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "int"; }
  static std::string ResultKind() { return "int"; }
  static std::string Expected() { return "an int"; }
  static bool Accepts(const TPAny& v) noexcept {
    return v.type_index == kTPInt || v.type_index == kTPBool;
  }
  static T Convert(const TPAny& v) { return detail::CheckedIntCast<T>(v.v_int64); }
  static void PackResult(T value, TPAny* out) {
    out->v_int64 = detail::ToInt64(value);
    out->type_index = kTPInt;
  }
  static ArgMode PackArg(T value, TPAny* out) {
    PackResult(value, out);
    return ArgMode::kBorrowed;
  }
};

template <>
struct TypeCaster<bool> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "bool"; }
  static std::string ResultKind() { return "bool"; }
  static std::string Expected() { return "a bool"; }
  static bool Accepts(const TPAny& v) noexcept {
    return v.type_index == kTPBool || v.type_index == kTPInt;
  }
  static bool Convert(const TPAny& v) noexcept { return v.v_int64 != 0; }
  static void PackResult(bool value, TPAny* out) noexcept {
    out->v_int64 = value ? 1 : 0;
    out->type_index = kTPBool;
  }
  static ArgMode PackArg(bool value, TPAny* out) noexcept {
    PackResult(value, out);
    return ArgMode::kBorrowed;
  }
};

template <class T>
struct TypeCaster<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "float"; }
  static std::string ResultKind() { return "float"; }
  static std::string Expected() { return "a float"; }
  static bool Accepts(const TPAny& v) noexcept {
    return v.type_index == kTPFloat || v.type_index == kTPInt;
  }
  static T Convert(const TPAny& v) noexcept {
    return static_cast<T>(v.type_index == kTPFloat ? v.v_float64 : static_cast<double>(v.v_int64));
  }
  static void PackResult(T value, TPAny* out) noexcept {
    out->v_float64 = static_cast<double>(value);
    out->type_index = kTPFloat;
  }
  static ArgMode PackArg(T value, TPAny* out) noexcept {
    PackResult(value, out);
    return ArgMode::kBorrowed;
  }
};

template <>
struct TypeCaster<std::string> : detail::StringCasterBase {
  static std::string Convert(const TPAny& v) { return std::string(View(v)); }
  static void PackResult(const std::string& value, TPAny* out) {
    detail::PackString(value.data(), value.size(), out);
  }
  static ArgMode PackArg(const std::string& value, TPAny* out) noexcept {
    out->v_c_str = value.c_str();  // the caller's string outlives the call
    out->type_index = kTPRawStr;
    return ArgMode::kBorrowed;
  }
};

template <>
struct TypeCaster<std::string_view> : detail::StringCasterBase {
  static std::string_view Convert(const TPAny& v) noexcept { return View(v); }
  static void PackResult(std::string_view value, TPAny* out) {
    detail::PackString(value.data(), value.size(), out);
  }
  static ArgMode PackArg(std::string_view value, TPAny* out) {
    detail::PackString(value.data(), value.size(), out);  // a view need not be NUL-terminated
    return ArgMode::kTemporary;
  }
};

template <>
struct TypeCaster<const char*> : detail::StringCasterBase {
  static const char* Convert(const TPAny& v) noexcept {
    return v.type_index == kTPStr ? v.v_str->data : v.v_c_str;
  }
  static void PackResult(const char* value, TPAny* out) {
    if (value == nullptr) {
      *out = detail::MakeNone();
    } else {
      detail::PackString(value, std::strlen(value), out);
    }
  }
  static ArgMode PackArg(const char* value, TPAny* out) noexcept {
    if (value == nullptr) {
      *out = detail::MakeNone();
    } else {
      out->v_c_str = value;
      out->type_index = kTPRawStr;
    }
    return ArgMode::kBorrowed;
  }
};

template <>
struct TypeCaster<DLDevice> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "device"; }
  static std::string ResultKind() { return "device"; }
  static std::string Expected() { return "a device"; }
  static bool Accepts(const TPAny& v) noexcept { return v.type_index == kTPDevice; }
  static DLDevice Convert(const TPAny& v) noexcept { return v.v_device; }
  static void PackResult(DLDevice value, TPAny* out) noexcept {
    out->v_device = value;
    out->type_index = kTPDevice;
  }
  static ArgMode PackArg(DLDevice value, TPAny* out) noexcept {
    PackResult(value, out);
    return ArgMode::kBorrowed;
  }
};

template <>
struct TypeCaster<DLDataType> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "dtype"; }
  static std::string ResultKind() { return "dtype"; }
  static std::string Expected() { return "a dtype"; }
  static bool Accepts(const TPAny& v) noexcept { return v.type_index == kTPDataType; }
  static DLDataType Convert(const TPAny& v) noexcept { return v.v_dtype; }
  static void PackResult(DLDataType value, TPAny* out) noexcept {
    out->v_dtype = value;
    out->type_index = kTPDataType;
  }
  static ArgMode PackArg(DLDataType value, TPAny* out) noexcept {
    PackResult(value, out);
    return ArgMode::kBorrowed;
  }
};

template <>
struct TypeCaster<TensorView> {
  static constexpr bool kIsArg = true, kIsResult = false, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "view"; }
  static std::string Expected() { return "a tensor"; }
  static bool Accepts(const TPAny& v) noexcept {
    return (v.type_index == kTPDLTensorPtr && v.v_dltensor != nullptr) ||
           (v.type_index == kTPTensor && v.v_tensor != nullptr);
  }
  static TensorView Convert(const TPAny& v, ArgName arg = {}) noexcept {
    if (v.type_index == kTPDLTensorPtr) {
      return TensorView(v.v_dltensor, (v.flags & TP_ANY_FLAG_READ_ONLY) != 0, arg);
    }
    // A moved kTPTensor: the wrapper keeps it alive for the call and releases it after.
    return TensorView(&v.v_tensor->dl_tensor,
                      (v.v_tensor->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0, arg);
  }
  static ArgMode PackArg(const TensorView& value, TPAny* out) noexcept {
    if (!value.defined()) {
      *out = detail::MakeNone();
    } else {
      out->v_dltensor = const_cast<DLTensor*>(value.dltensor());
      out->flags = value.is_read_only() ? TP_ANY_FLAG_READ_ONLY : 0u;
      out->type_index = kTPDLTensorPtr;
    }
    return ArgMode::kBorrowed;
  }
};

// A written tensor (kind "mview"). Callers check read-only before the call (the Python
// binding, naming the framework); Convert checks again for callers that did not (C++
// Function calls, the C ABI): ValueError, which the wrapper prefixes with the argument.
template <>
struct TypeCaster<MutableView> {
  static constexpr bool kIsArg = true, kIsResult = false, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "mview"; }
  static std::string Expected() { return "a writable tensor"; }
  static bool Accepts(const TPAny& v) noexcept { return TypeCaster<TensorView>::Accepts(v); }
  static MutableView Convert(const TPAny& v, ArgName arg = {}) {
    const TensorView view = TypeCaster<TensorView>::Convert(v);
    if (view.is_read_only()) {
      TENSORPLUG_THROW(ValueError) << "expected a writable tensor (the kernel writes it), got a read-only tensor";
    }
    return MutableView(view.dltensor(), arg);
  }
  static ArgMode PackArg(const MutableView& value, TPAny* out) noexcept {
    return TypeCaster<TensorView>::PackArg(TensorView(value.dltensor()), out);
  }
};

template <>
struct TypeCaster<TensorViewList> {
  static constexpr bool kIsArg = true, kIsResult = false, kIsCallArg = false, kConsumes = false;
  static std::string ArgKind() { return "views"; }
  static std::string Expected() { return "a list of tensors"; }
  static bool Accepts(const TPAny& v) noexcept { return v.type_index == kTPArray && v.v_array != nullptr; }
  static TensorViewList Convert(const TPAny& v, ArgName arg = {}) noexcept {
    return TensorViewList(v.v_array->items, v.v_array->size, arg.name);
  }
};

// A list of written tensors (kind "mviews"); read-only items are refused as for MutableView.
template <>
struct TypeCaster<MutableViewList> {
  static constexpr bool kIsArg = true, kIsResult = false, kIsCallArg = false, kConsumes = false;
  static std::string ArgKind() { return "mviews"; }
  static std::string Expected() { return "a list of writable tensors"; }
  static bool Accepts(const TPAny& v) noexcept { return TypeCaster<TensorViewList>::Accepts(v); }
  static MutableViewList Convert(const TPAny& v, ArgName arg = {}) {
    const TensorViewList items(v.v_array->items, v.v_array->size);
    for (int64_t i = 0; i < items.size(); ++i) {
      if (items[i].is_read_only()) {
        TENSORPLUG_THROW(ValueError) << "expected writable tensors (the kernel writes them), got a read-only tensor "
                                     << "as item " << i;
      }
    }
    return MutableViewList(v.v_array->items, v.v_array->size, arg.name);
  }
};

// The same lists copied into a vector (one allocation for the vector, none per item).
template <class View>
struct TypeCaster<std::vector<View>, std::enable_if_t<std::is_same_v<View, TensorView> || std::is_same_v<View, MutableView>>> {
  using List = TypeCaster<ViewList<View>>;
  static constexpr bool kIsArg = true, kIsResult = false, kIsCallArg = false, kConsumes = false;
  static std::string ArgKind() { return List::ArgKind(); }
  static std::string Expected() { return List::Expected(); }
  static bool Accepts(const TPAny& v) noexcept { return List::Accepts(v); }
  static std::vector<View> Convert(const TPAny& v, ArgName arg = {}) {
    ViewList<View> list = List::Convert(v, arg);
    return std::vector<View>(list.begin(), list.end());
  }
};

template <>
struct TypeCaster<Tensor> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = true;
  static std::string ArgKind() { return "tensor"; }
  static std::string ResultKind() { return "tensor"; }
  static std::string Expected() { return "an owning tensor"; }
  static bool Accepts(const TPAny& v) noexcept {
    return v.type_index == kTPTensor && v.v_tensor != nullptr;
  }
  static Tensor Convert(const TPAny& v) { return Tensor::FromDLPackVersioned(v.v_tensor); }
  /*! An undefined tensor becomes None. */
  static void PackResult(Tensor value, TPAny* out) {
    if (!value.defined()) {
      *out = detail::MakeNone();
    } else {
      out->v_tensor = value.release();
      out->type_index = kTPTensor;
    }
  }
  static ArgMode PackArg(const Tensor& value, TPAny* out) {
    if (!value.defined()) {
      *out = detail::MakeNone();
      return ArgMode::kBorrowed;
    }
    out->v_tensor = value.ToDLPackVersioned();  // the callee gets a reference of its own
    out->type_index = kTPTensor;
    return ArgMode::kMoved;
  }
  static ArgMode PackArg(Tensor&& value, TPAny* out) {
    PackResult(std::move(value), out);
    return ArgMode::kMoved;
  }
};

template <>
struct TypeCaster<TPAny> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "any"; }
  static std::string ResultKind() { return "any"; }
  static std::string Expected() { return "a value"; }
  static bool Accepts(const TPAny&) noexcept { return true; }
  static TPAny Convert(const TPAny& v) noexcept { return v; }
  /*! The result takes over what `value` owns. */
  static void PackResult(TPAny value, TPAny* out) noexcept { *out = value; }
  /*! Passed as is: the caller keeps ownership, except of a kTPTensor, which the call moves. */
  static ArgMode PackArg(const TPAny& value, TPAny* out) noexcept {
    *out = value;
    return ArgMode::kBorrowed;
  }
};

template <>
struct TypeCaster<std::nullptr_t> {
  static constexpr bool kIsArg = false, kIsResult = false, kIsCallArg = true, kConsumes = false;
  static ArgMode PackArg(std::nullptr_t, TPAny* out) noexcept {
    *out = detail::MakeNone();
    return ArgMode::kBorrowed;
  }
};

template <>
struct TypeCaster<std::nullopt_t> : TypeCaster<std::nullptr_t> {
  static ArgMode PackArg(std::nullopt_t, TPAny* out) noexcept {
    *out = detail::MakeNone();
    return ArgMode::kBorrowed;
  }
};

template <class T>
struct TypeCaster<std::optional<T>> {
  using Inner = TypeCaster<T>;
  static constexpr bool kIsArg = Inner::kIsArg, kIsResult = Inner::kIsResult,
                        kIsCallArg = Inner::kIsCallArg, kConsumes = Inner::kConsumes;
  static std::string ArgKind() { return "?" + Inner::ArgKind(); }
  // Result kinds have no optional marker: an optional result is "any".
  static std::string ResultKind() { return "any"; }
  static std::string Expected() { return Inner::Expected() + " or None"; }
  static bool Accepts(const TPAny& v) noexcept {
    return v.type_index == kTPNone || Inner::Accepts(v);
  }
  static std::optional<T> Convert(const TPAny& v) {
    if (v.type_index == kTPNone) return std::nullopt;
    return Inner::Convert(v);
  }
  template <class I = Inner, class = decltype(I::Convert(std::declval<const TPAny&>(), ArgName{}))>
  static std::optional<T> Convert(const TPAny& v, ArgName arg) {
    if (v.type_index == kTPNone) return std::nullopt;
    return Inner::Convert(v, arg);
  }
  static void PackResult(std::optional<T> value, TPAny* out) {
    if (!value.has_value()) {
      *out = detail::MakeNone();
    } else {
      Inner::PackResult(std::move(*value), out);
    }
  }
  static ArgMode PackArg(const std::optional<T>& value, TPAny* out) {
    if (!value.has_value()) {
      *out = detail::MakeNone();
      return ArgMode::kBorrowed;
    }
    return Inner::PackArg(*value, out);
  }
};

template <class... Ts>
struct TypeCaster<std::tuple<Ts...>> {
  static constexpr bool kIsArg = false, kIsCallArg = false, kConsumes = false;
  static constexpr bool kIsResult = (TypeCaster<std::decay_t<Ts>>::kIsResult && ...);
  static std::string ResultKind() { return "tuple"; }
  static void PackResult(std::tuple<Ts...> value, TPAny* out) {
    TPAny tuple = detail::MakeNone();
    tuple.v_tuple = TPTupleCreate(static_cast<int32_t>(sizeof...(Ts)));
    if (tuple.v_tuple == nullptr) throw std::bad_alloc();
    tuple.type_index = kTPTuple;
    try {
      PackItems(value, tuple.v_tuple->items, std::index_sequence_for<Ts...>{});
    } catch (...) {
      TPAnyRelease(&tuple);  // releases the items packed so far
      throw;
    }
    *out = tuple;
  }

 private:
  template <size_t... I>
  static void PackItems(std::tuple<Ts...>& value, TPAny* items, std::index_sequence<I...>) {
    (TypeCaster<std::decay_t<Ts>>::PackResult(std::move(std::get<I>(value)), &items[I]), ...);
  }
};

// An int64 array (kind "ints"): a shape, strides, indices. The view is valid for the call.
template <>
struct TypeCaster<IntArrayView> {
  static constexpr bool kIsArg = true, kIsResult = false, kIsCallArg = false, kConsumes = false;
  static std::string ArgKind() { return "ints"; }
  static std::string Expected() { return "a list of ints"; }
  static bool Accepts(const TPAny& v) noexcept { return v.type_index == kTPIntArray && v.v_int_array != nullptr; }
  static IntArrayView Convert(const TPAny& v) noexcept {
    return IntArrayView(v.v_int_array->data, static_cast<size_t>(v.v_int_array->size));
  }
};

template <>
struct TypeCaster<std::vector<int64_t>> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = false, kConsumes = false;
  static std::string ArgKind() { return "ints"; }
  static std::string ResultKind() { return "ints"; }
  static std::string Expected() { return "a list of ints"; }
  static bool Accepts(const TPAny& v) noexcept { return TypeCaster<IntArrayView>::Accepts(v); }
  static std::vector<int64_t> Convert(const TPAny& v) {
    IntArrayView a = TypeCaster<IntArrayView>::Convert(v);
    return std::vector<int64_t>(a.begin(), a.end());
  }
  static void PackResult(const std::vector<int64_t>& value, TPAny* out) {
    if (value.size() > size_t(std::numeric_limits<int32_t>::max())) throw std::bad_alloc();
    TPAny tuple = detail::MakeNone();
    tuple.v_tuple = TPTupleCreate(static_cast<int32_t>(value.size()));
    if (tuple.v_tuple == nullptr) throw std::bad_alloc();
    tuple.type_index = kTPTuple;
    for (size_t i = 0; i < value.size(); ++i) {
      tuple.v_tuple->items[i].type_index = kTPInt;
      tuple.v_tuple->items[i].v_int64 = value[i];
    }
    *out = tuple;
  }
};

// A list of tensors as a result (kind "list"): a Python list of the caller's framework type.
template <>
struct TypeCaster<std::vector<Tensor>> {
  static constexpr bool kIsArg = false, kIsResult = true, kIsCallArg = false, kConsumes = false;
  static std::string ResultKind() { return "list"; }
  static void PackResult(std::vector<Tensor> value, TPAny* out) {
    if (value.size() > size_t(std::numeric_limits<int32_t>::max())) throw std::bad_alloc();
    TPAny tuple = detail::MakeNone();
    tuple.v_tuple = TPTupleCreate(static_cast<int32_t>(value.size()));
    if (tuple.v_tuple == nullptr) throw std::bad_alloc();
    tuple.type_index = kTPTuple;
    try {
      for (size_t i = 0; i < value.size(); ++i) TypeCaster<Tensor>::PackResult(std::move(value[i]), &tuple.v_tuple->items[i]);
    } catch (...) {
      TPAnyRelease(&tuple);
      throw;
    }
    *out = tuple;
  }
};

// A bare pointer (kind "handle"): the pointer of any handle. As a result, a non-owning handle
// (kTPOpaquePtr): valid as long as the library says (static state: for the process).
template <>
struct TypeCaster<void*> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "handle"; }
  static std::string ResultKind() { return "handle"; }
  static std::string Expected() { return "a handle"; }
  static bool Accepts(const TPAny& v) noexcept {
    return v.type_index == kTPOpaquePtr || (v.type_index == kTPHandle && v.v_handle != nullptr);
  }
  static void* Convert(const TPAny& v) noexcept {
    return v.type_index == kTPHandle ? TPHandleGetPointer(v.v_handle) : v.v_ptr;
  }
  /*! nullptr becomes None. */
  static void PackResult(void* value, TPAny* out) noexcept {
    if (value == nullptr) {
      *out = detail::MakeNone();
    } else {
      out->v_ptr = value;
      out->type_index = kTPOpaquePtr;
    }
  }
  static ArgMode PackArg(void* value, TPAny* out) noexcept {
    PackResult(value, out);
    return ArgMode::kBorrowed;
  }
};

// A typed handle (kind "handle<name>", name from TENSORPLUG_HANDLE_TYPE): only handles of
// that type name are accepted; the parameter holds a reference of its own.
template <class T>
struct TypeCaster<Handle<T>> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return std::string("handle<") + Handle<T>::type_name() + ">"; }
  static std::string ResultKind() { return ArgKind(); }
  static std::string Expected() { return std::string("a handle of type ") + Handle<T>::type_name(); }
  static bool Accepts(const TPAny& v) noexcept {
    if (v.type_index != kTPHandle || v.v_handle == nullptr) return false;
    const char* type = TPHandleGetTypeName(v.v_handle);
    return type != nullptr && std::strcmp(type, Handle<T>::type_name()) == 0;
  }
  static Handle<T> Convert(const TPAny& v) noexcept { return Handle<T>::Borrow(v.v_handle); }
  /*! An undefined handle becomes None. */
  static void PackResult(Handle<T> value, TPAny* out) noexcept {
    if (!value) {
      *out = detail::MakeNone();
    } else {
      out->v_handle = value.release();
      out->type_index = kTPHandle;
    }
  }
  static ArgMode PackArg(const Handle<T>& value, TPAny* out) noexcept {
    if (!value) {
      *out = detail::MakeNone();
    } else {
      out->v_handle = value.ref();  // lent: the caller's reference outlives the call
      out->type_index = kTPHandle;
    }
    return ArgMode::kBorrowed;
  }
};

namespace detail {

[[noreturn]] inline void ThrowCastError(const std::string& expected, const TPAny& got) {
  TENSORPLUG_THROW(TypeError) << "Any::cast: expected " << expected << ", got " << DescribeValue(got);
}

/*!
 * \brief Any::cast. `slot` belongs to the Any; with `move`, owned payloads are taken out of
 * it, otherwise the slot keeps a reference of its own (a tensor is re-exported into it).
 */
template <class T>
struct AnyCast {
  static T Cast(TPAny* slot, bool move) {
    using Caster = TypeCaster<T>;
    static_assert(Caster::kIsArg, "Any::cast: unsupported type");
    if (!Caster::Accepts(*slot)) ThrowCastError(Caster::Expected(), *slot);
    if constexpr (Caster::kConsumes) {
      if (slot->type_index == kTPTensor) {
        TPAny taken = std::exchange(*slot, MakeNone());
        T value = Caster::Convert(taken);  // owns the tensor now
        if (!move) Caster::PackArg(value, slot);
        return value;
      }
    }
    (void)move;
    return Caster::Convert(*slot);
  }
};

template <class... Ts>
struct AnyCast<std::tuple<Ts...>> {
  static std::tuple<Ts...> Cast(TPAny* slot, bool move) {
    if (slot->type_index != kTPTuple || slot->v_tuple == nullptr ||
        slot->v_tuple->size != static_cast<int32_t>(sizeof...(Ts))) {
      ThrowCastError("a tuple of " + std::to_string(sizeof...(Ts)) + " items", *slot);
    }
    return CastItems(slot->v_tuple->items, move, std::index_sequence_for<Ts...>{});
  }

 private:
  template <size_t... I>
  static std::tuple<Ts...> CastItems(TPAny* items, bool move, std::index_sequence<I...>) {
    (void)items;
    (void)move;
    return std::tuple<Ts...>{AnyCast<Ts>::Cast(&items[I], move)...};
  }
};


}  // namespace detail

}  // namespace tensorplug

#endif  // TENSORPLUG_CASTER_H_
