/*
 * tensorplug/function.h -- values (Any), functions (Function), and the export macros
 * TENSORPLUG_EXPORT / TENSORPLUG_REGISTER_GLOBAL that wrap typed C++ callables into the
 * packed calling convention of c_api.h.
 *
 * Supported parameter types (by value or const&):
 *   TensorView            kind "view":   a lent tensor (kTPDLTensorPtr; a kTPTensor is viewed too)
 *   Tensor                kind "tensor": an owning tensor (kTPTensor; ownership moves to the callee)
 *   integers              kind "int"     (kTPInt or kTPBool; OverflowError when out of range)
 *   float, double         kind "float"   (kTPFloat or kTPInt)
 *   bool                  kind "bool"    (kTPBool or kTPInt)
 *   std::string, std::string_view, const char*   kind "str" (valid for the call, except std::string)
 *   DLDevice, DLDataType  kinds "device", "dtype"
 *   Function              kind "func"
 *   TPAny                 kind "any": the raw value, lent for the call
 *   std::optional<T>      kind "?<kind of T>": None gives std::nullopt
 * Supported result types (kind): void, integers (int), floating point (float), bool,
 * strings (str), DLDevice (device), DLDataType (dtype), Tensor (tensor; an undefined one
 * is None), Function (func), Any and TPAny (any; ownership passes to the caller),
 * std::tuple of these (tuple), std::optional of these (any, since result kinds have no
 * optional marker).
 */
#ifndef TENSORPLUG_FUNCTION_H_
#define TENSORPLUG_FUNCTION_H_

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
         type_index == kTPFunction;
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
    default: return "unknown value";
  }
}

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
 *   Accepts(v), Convert(v)           parameter side (v is lent, except kTPTensor)
 *   PackResult(value, out)           result side (out owns what it gets)
 *   PackArg(value, out) -> ArgMode   call side
 */
template <class T, class = void>
struct TypeCaster {
  static constexpr bool kIsArg = false, kIsResult = false, kIsCallArg = false, kConsumes = false;
};

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

template <class T>
struct TypeCaster<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "int"; }
  static std::string ResultKind() { return "int"; }
  static std::string Expected() { return "an int"; }
  static bool Accepts(const TPAny& v) noexcept {
    return v.type_index == kTPInt || v.type_index == kTPBool;
  }
  static T Convert(const TPAny& v) { return CheckedIntCast<T>(v.v_int64); }
  static void PackResult(T value, TPAny* out) {
    out->v_int64 = ToInt64(value);
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

template <>
struct TypeCaster<std::string> : StringCasterBase {
  static std::string Convert(const TPAny& v) { return std::string(View(v)); }
  static void PackResult(const std::string& value, TPAny* out) {
    PackString(value.data(), value.size(), out);
  }
  static ArgMode PackArg(const std::string& value, TPAny* out) noexcept {
    out->v_c_str = value.c_str();  // the caller's string outlives the call
    out->type_index = kTPRawStr;
    return ArgMode::kBorrowed;
  }
};

template <>
struct TypeCaster<std::string_view> : StringCasterBase {
  static std::string_view Convert(const TPAny& v) noexcept { return View(v); }
  static void PackResult(std::string_view value, TPAny* out) {
    PackString(value.data(), value.size(), out);
  }
  static ArgMode PackArg(std::string_view value, TPAny* out) {
    PackString(value.data(), value.size(), out);  // a view need not be NUL-terminated
    return ArgMode::kTemporary;
  }
};

template <>
struct TypeCaster<const char*> : StringCasterBase {
  static const char* Convert(const TPAny& v) noexcept {
    return v.type_index == kTPStr ? v.v_str->data : v.v_c_str;
  }
  static void PackResult(const char* value, TPAny* out) {
    if (value == nullptr) {
      *out = MakeNone();
    } else {
      PackString(value, std::strlen(value), out);
    }
  }
  static ArgMode PackArg(const char* value, TPAny* out) noexcept {
    if (value == nullptr) {
      *out = MakeNone();
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
  static TensorView Convert(const TPAny& v) noexcept {
    if (v.type_index == kTPDLTensorPtr) {
      return TensorView(v.v_dltensor, (v.flags & TP_ANY_FLAG_READ_ONLY) != 0);
    }
    // A moved kTPTensor: the wrapper keeps it alive for the call and releases it after.
    return TensorView(&v.v_tensor->dl_tensor,
                      (v.v_tensor->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0);
  }
  static ArgMode PackArg(const TensorView& value, TPAny* out) noexcept {
    if (!value.defined()) {
      *out = MakeNone();
    } else {
      out->v_dltensor = const_cast<DLTensor*>(value.dltensor());
      out->flags = value.is_read_only() ? TP_ANY_FLAG_READ_ONLY : 0u;
      out->type_index = kTPDLTensorPtr;
    }
    return ArgMode::kBorrowed;
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
      *out = MakeNone();
    } else {
      out->v_tensor = value.release();
      out->type_index = kTPTensor;
    }
  }
  static ArgMode PackArg(const Tensor& value, TPAny* out) {
    if (!value.defined()) {
      *out = MakeNone();
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
    *out = MakeNone();
    return ArgMode::kBorrowed;
  }
};

template <>
struct TypeCaster<std::nullopt_t> : TypeCaster<std::nullptr_t> {
  static ArgMode PackArg(std::nullopt_t, TPAny* out) noexcept {
    *out = MakeNone();
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
  static void PackResult(std::optional<T> value, TPAny* out) {
    if (!value.has_value()) {
      *out = MakeNone();
    } else {
      Inner::PackResult(std::move(*value), out);
    }
  }
  static ArgMode PackArg(const std::optional<T>& value, TPAny* out) {
    if (!value.has_value()) {
      *out = MakeNone();
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
    TPAny tuple = MakeNone();
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

[[noreturn]] inline void ThrowCastError(const std::string& expected, const TPAny& got) {
  TENSORPLUG_THROW(TypeError) << "Any::cast: expected " << expected << ", got " << TypeIndexName(got);
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

/*!
 * \brief An owned TPAny: the result of a Function call. Move-only; releases what it owns
 * on destruction.
 */
class Any {
 public:
  Any() noexcept : value_(detail::MakeNone()) {}
  /*! \brief Take ownership of `value`. */
  explicit Any(TPAny value) noexcept : value_(value) {}
  Any(Any&& other) noexcept : value_(std::exchange(other.value_, detail::MakeNone())) {}
  Any& operator=(Any&& other) noexcept {
    if (this != &other) {
      Reset();
      value_ = std::exchange(other.value_, detail::MakeNone());
    }
    return *this;
  }
  Any(const Any&) = delete;
  Any& operator=(const Any&) = delete;
  ~Any() { Reset(); }

  /*! \brief The TPTypeIndex of the value. */
  int32_t type_index() const noexcept { return value_.type_index; }
  bool is_none() const noexcept { return value_.type_index == kTPNone; }
  /*! \brief The raw value, still owned by this Any. */
  const TPAny& raw() const noexcept { return value_; }
  /*! \brief Give up ownership of the raw value; this Any becomes None. */
  TPAny release() noexcept { return std::exchange(value_, detail::MakeNone()); }

  /*!
   * \brief Convert to T: integers, floating point, bool, std::string, std::string_view,
   * DLDevice, DLDataType, Tensor, TensorView (valid while this Any lives), Function,
   * std::optional<T>, std::tuple<...>. TypeError when the value is of another kind.
   * On an rvalue (`f(x).cast<Tensor>()`), owned payloads are moved out.
   */
  template <class T>
  T cast() const& {
    return detail::AnyCast<T>::Cast(&value_, false);
  }
  template <class T>
  T cast() && {
    return detail::AnyCast<T>::Cast(&value_, true);
  }

 private:
  void Reset() noexcept {
    if (detail::IsOwnedKind(value_.type_index)) TPAnyRelease(&value_);
    value_ = detail::MakeNone();
  }

  // mutable: a const cast<Tensor>() swaps the stored tensor for a re-exported reference.
  mutable TPAny value_;
};

namespace detail {

/*! \brief Packed arguments of one Function call, released as their ArgMode says. */
template <size_t N>
struct CallArgs {
  TPAny items[N == 0 ? 1 : N];
  ArgMode modes[N == 0 ? 1 : N] = {};
  size_t count = 0;
  bool called = false;

  ~CallArgs() {
    for (size_t i = 0; i < count; ++i) {
      if (modes[i] == ArgMode::kTemporary || (modes[i] == ArgMode::kMoved && !called)) {
        TPAnyRelease(&items[i]);
      }
    }
  }
  template <class T>
  void Push(T&& value) {
    TPAny* slot = &items[count];
    *slot = MakeNone();
    modes[count] = TypeCaster<std::decay_t<T>>::PackArg(std::forward<T>(value), slot);
    ++count;
  }
};

}  // namespace detail

/*!
 * \brief A reference-counted handle to a packed function (TPFunctionHandle): a global
 * function, a module's export, a Python callable passed to a kernel, or a C++ callable.
 */
class Function {
 public:
  Function() noexcept = default;
  Function(const Function& other) noexcept : handle_(other.handle_) {
    if (handle_ != nullptr) TPFunctionRetain(handle_);
  }
  Function(Function&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Function& operator=(const Function& other) noexcept {
    Function(other).swap(*this);
    return *this;
  }
  Function& operator=(Function&& other) noexcept {
    Function(std::move(other)).swap(*this);
    return *this;
  }
  ~Function() {
    if (handle_ != nullptr) TPFunctionRelease(handle_);
  }
  void swap(Function& other) noexcept { std::swap(handle_, other.handle_); }

  /*! \brief Take over one reference to `handle` (no retain). */
  static Function Steal(TPFunctionHandle handle) noexcept { return Function(handle); }
  /*! \brief A new reference to `handle` (retained). */
  static Function Borrow(TPFunctionHandle handle) noexcept {
    if (handle != nullptr) TPFunctionRetain(handle);
    return Function(handle);
  }

  bool defined() const noexcept { return handle_ != nullptr; }
  explicit operator bool() const noexcept { return defined(); }
  TPFunctionHandle handle() const noexcept { return handle_; }
  /*! \brief Give up the reference; the caller must TPFunctionRelease it. */
  TPFunctionHandle release() noexcept { return std::exchange(handle_, nullptr); }
  /*! \brief The signature string, or NULL when the function has none. */
  const char* signature() const noexcept {
    return handle_ != nullptr ? TPFunctionGetSignature(handle_) : nullptr;
  }

  /*!
   * \brief Call with C++ arguments: integers, floating point, bool, strings (lent),
   * DLDevice, DLDataType, TensorView (lent as kTPDLTensorPtr), Tensor (the callee gets a
   * reference of its own as kTPTensor), Function (lent), Any, TPAny, nullptr /
   * std::nullopt (None), std::optional. Errors of the callee are rethrown as
   * tensorplug::Error with their kind and message.
   */
  template <class... Ts>
  Any operator()(Ts&&... args) const {
    static_assert((detail::TypeCaster<std::decay_t<Ts>>::kIsCallArg && ...),
                  "tensorplug::Function: unsupported argument type");
    if (handle_ == nullptr) TENSORPLUG_THROW(ValueError) << "call of an undefined Function";
    detail::CallArgs<sizeof...(Ts)> packed;
    (packed.Push(std::forward<Ts>(args)), ...);
    TPAny result = detail::MakeNone();
    packed.called = true;  // from here on, moved tensors belong to the callee
    if (TPFunctionCall(handle_, packed.items, static_cast<int32_t>(sizeof...(Ts)), &result) != 0) {
      detail::ThrowLastError();
    }
    return Any(result);
  }

  /*! \brief The global function `name`, or an undefined Function when none is registered. */
  static Function GetGlobal(const std::string& name) {
    TPFunctionHandle handle = nullptr;
    if (TPGlobalFuncGet(name.c_str(), &handle) != 0) detail::ThrowLastError();
    return Function(handle);
  }
  /*! \brief The global function `name`; ValueError "global function 'x' is not registered". */
  static Function GetGlobalRequired(const std::string& name) {
    Function f = GetGlobal(name);
    if (!f) TENSORPLUG_THROW(ValueError) << "global function '" << name << "' is not registered";
    return f;
  }
  /*! \brief Register this function as global `name`; fails if taken unless allow_override. */
  void RegisterGlobal(const std::string& name, bool allow_override = false) const {
    if (handle_ == nullptr) TENSORPLUG_THROW(ValueError) << "cannot register an undefined Function";
    if (TPGlobalFuncRegister(name.c_str(), handle_, allow_override ? 1 : 0) != 0) {
      detail::ThrowLastError();
    }
  }
  /*! \brief Names of all global functions, sorted. */
  static std::vector<std::string> ListGlobalNames() {
    std::vector<std::string> names;
    auto visit = [](void* ctx, const char* name) {
      static_cast<std::vector<std::string>*>(ctx)->emplace_back(name);
    };
    if (TPGlobalFuncListNames(visit, &names) != 0) detail::ThrowLastError();
    return names;
  }

  /*!
   * \brief Wrap a typed C++ callable (function pointer, lambda, functor; see the supported
   * types at the top of this file). `name` and `param_names` (one per parameter, or none
   * for arg0, arg1, ...) appear in error messages and in the signature.
   */
  template <class Fn>
  static Function FromTyped(Fn callable, std::string name = "<lambda>",
                            std::vector<std::string> param_names = {});

 private:
  explicit Function(TPFunctionHandle handle) noexcept : handle_(handle) {}

  TPFunctionHandle handle_ = nullptr;
};

namespace detail {

template <>
struct TypeCaster<Function> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "func"; }
  static std::string ResultKind() { return "func"; }
  static std::string Expected() { return "a callable"; }
  static bool Accepts(const TPAny& v) noexcept {
    return v.type_index == kTPFunction && v.v_func != nullptr;
  }
  static Function Convert(const TPAny& v) noexcept { return Function::Borrow(v.v_func); }
  static void PackResult(Function value, TPAny* out) noexcept {
    if (!value) {
      *out = MakeNone();
    } else {
      out->v_func = value.release();
      out->type_index = kTPFunction;
    }
  }
  static ArgMode PackArg(const Function& value, TPAny* out) noexcept {
    if (!value) {
      *out = MakeNone();
    } else {
      out->v_func = value.handle();  // lent: the caller's reference outlives the call
      out->type_index = kTPFunction;
    }
    return ArgMode::kBorrowed;
  }
};

template <>
struct TypeCaster<Any> {
  static constexpr bool kIsArg = false, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ResultKind() { return "any"; }
  static void PackResult(Any value, TPAny* out) noexcept { *out = value.release(); }
  static ArgMode PackArg(const Any& value, TPAny* out) {
    if (value.type_index() == kTPTensor) {  // the callee must get a tensor reference of its own
      return TypeCaster<Tensor>::PackArg(value.cast<Tensor>(), out);
    }
    *out = value.raw();
    return ArgMode::kBorrowed;
  }
};

/*! \brief Parameter and result types of a callable (function pointer, lambda, functor). */
template <class T>
constexpr bool kAlwaysFalse = false;

template <class F, class = void>
struct FunctionTraits {
  static_assert(kAlwaysFalse<F>,
                "tensorplug: the callable must be a function, a function pointer, or an object "
                "with exactly one non-template operator()");
};
template <class R, class... A>
struct FunctionTraits<R (*)(A...), void> {
  using Pointer = R (*)(A...);  // a tag carrying R and A...
  static constexpr size_t kArity = sizeof...(A);
};
template <class R, class... A>
struct FunctionTraits<R (*)(A...) noexcept, void> : FunctionTraits<R (*)(A...)> {};
template <class C, class R, class... A>
struct FunctionTraits<R (C::*)(A...), void> : FunctionTraits<R (*)(A...)> {};
template <class C, class R, class... A>
struct FunctionTraits<R (C::*)(A...) const, void> : FunctionTraits<R (*)(A...)> {};
template <class C, class R, class... A>
struct FunctionTraits<R (C::*)(A...) noexcept, void> : FunctionTraits<R (*)(A...)> {};
template <class C, class R, class... A>
struct FunctionTraits<R (C::*)(A...) const noexcept, void> : FunctionTraits<R (*)(A...)> {};
template <class F>
struct FunctionTraits<F, std::void_t<decltype(&F::operator())>>
    : FunctionTraits<decltype(&F::operator())> {};

/*! \brief Names for messages: the function's name and its parameter names (NULL: arg0, ...). */
struct CallInfo {
  const char* function;
  const char* const* names;
};

inline std::string ArgLabel(const CallInfo& info, size_t i) {
  std::string label = std::string(info.function) + "() argument " + std::to_string(i + 1) + " '";
  label += info.names != nullptr ? std::string(info.names[i]) : "arg" + std::to_string(i);
  return label + "'";
}

// Same wording as the Python-side check: "scale() takes 3 arguments (x, y, alpha), got 2".
[[noreturn]] inline void ThrowArity(const CallInfo& info, size_t expected, int32_t given) {
  std::string names;
  for (size_t i = 0; i < expected; ++i) {
    if (i != 0) names += ", ";
    names += info.names != nullptr ? std::string(info.names[i]) : "arg" + std::to_string(i);
  }
  TENSORPLUG_THROW(TypeError) << info.function << "() takes " << expected
                              << (expected == 1 ? " argument (" : " arguments (") << names
                              << "), got " << given;
}

template <class T>
void CheckArg(const CallInfo& info, size_t i, const TPAny& value) {
  if (!TypeCaster<T>::Accepts(value)) {
    TENSORPLUG_THROW(TypeError) << ArgLabel(info, i) << ": expected " << TypeCaster<T>::Expected()
                                << ", got " << TypeIndexName(value);
  }
}

template <class T>
T ConvertArg(const CallInfo& info, size_t i, const TPAny& value, bool* consumed) {
  // Marked before converting: Convert owns a kTPTensor even when it throws.
  if constexpr (TypeCaster<T>::kConsumes) *consumed = value.type_index == kTPTensor;
  try {
    return TypeCaster<T>::Convert(value);
  } catch (const Error& e) {
    throw Error(e.kind(), ArgLabel(info, i) + ": " + e.what());
  }
}

/*!
 * \brief Releases, when the call is over, every kTPTensor argument the callee did not take
 * into a Tensor: the ABI moves them to the callee, also when it fails.
 */
template <size_t N>
struct ArgOwnership {
  const TPAny* args;
  int32_t nargs;
  bool consumed[N + 1] = {};

  ~ArgOwnership() {
    for (int32_t i = 0; i < nargs; ++i) {
      if (args[i].type_index != kTPTensor || (static_cast<size_t>(i) < N && consumed[i])) continue;
      DLManagedTensorVersioned* tensor = args[i].v_tensor;
      if (tensor != nullptr && tensor->deleter != nullptr) tensor->deleter(tensor);
    }
  }
};

template <class Fn, class R, class... Args, size_t... I>
int InvokeImpl(const CallInfo& info, Fn& fn, const TPAny* args, int32_t nargs, TPAny* result,
               R (*)(Args...), std::index_sequence<I...>) noexcept {
  static_assert((TypeCaster<std::decay_t<Args>>::kIsArg && ...),
                "tensorplug: unsupported parameter type (see tensorplug/function.h)");
  static_assert(std::is_void_v<R> || TypeCaster<std::decay_t<R>>::kIsResult,
                "tensorplug: unsupported result type (see tensorplug/function.h)");
  constexpr size_t kArity = sizeof...(Args);
  *result = MakeNone();
  ArgOwnership<kArity> ownership{args, nargs};
  try {
    if (nargs != static_cast<int32_t>(kArity)) ThrowArity(info, kArity, nargs);
    (CheckArg<std::decay_t<Args>>(info, I, args[I]), ...);
    std::tuple<std::decay_t<Args>...> values{
        ConvertArg<std::decay_t<Args>>(info, I, args[I], &ownership.consumed[I])...};
    (void)values;
    if constexpr (std::is_void_v<R>) {
      fn(std::forward<Args>(std::get<I>(values))...);
    } else {
      TypeCaster<std::decay_t<R>>::PackResult(fn(std::forward<Args>(std::get<I>(values))...),
                                              result);
    }
    return 0;
  } catch (...) {
    SetErrorFromCurrentException();
    return -1;
  }
}

/*! \brief Unpack `args`, call `fn`, pack the result; errors become TPErrorSet + -1. */
template <class Fn>
int Invoke(const CallInfo& info, Fn& fn, const TPAny* args, int32_t nargs, TPAny* result) noexcept {
  using Traits = FunctionTraits<std::decay_t<Fn>>;
  return InvokeImpl(info, fn, args, nargs, result, typename Traits::Pointer{nullptr},
                    std::make_index_sequence<Traits::kArity>{});
}

template <class R>
std::string ResultKindOf() {
  if constexpr (std::is_void_v<R>) {
    return "void";
  } else {
    return TypeCaster<std::decay_t<R>>::ResultKind();
  }
}

template <class R, class... Args>
std::string MakeSignatureImpl(const char* const* names, R (*)(Args...)) {
  std::string signature;
  size_t i = 0;
  auto add = [&](const std::string& kind) {
    if (i != 0) signature += ';';
    signature += names != nullptr ? std::string(names[i]) : "arg" + std::to_string(i);
    signature += ':';
    signature += kind;
    ++i;
  };
  (add(TypeCaster<std::decay_t<Args>>::ArgKind()), ...);
  (void)add;
  return signature + "->" + ResultKindOf<R>();
}

/*! \brief "x:view;alpha:float->void" (see "Signatures" in c_api.h); names NULL: arg0, ... */
template <class Fn>
std::string MakeSignature(const char* const* names) {
  return MakeSignatureImpl(names, typename FunctionTraits<std::decay_t<Fn>>::Pointer{nullptr});
}

/*
 * The export macros pass their names as `{"x", "y", nullptr}` (nullptr alone when no
 * names are given), so the count is checked at compile time.
 */
template <class Fn, size_t K>
constexpr const char* const* ParamNames(const char* const (&names)[K]) {
  static_assert(K == 1 || K - 1 == FunctionTraits<std::decay_t<Fn>>::kArity,
                "tensorplug: give one name per parameter, or none");
  return K == 1 ? nullptr : names;
}

template <class Fn, size_t K>
int InvokeExported(const char* name, Fn& fn, const char* const (&names)[K], const TPAny* args,
                   int32_t nargs, TPAny* result) noexcept {
  return Invoke(CallInfo{name, ParamNames<Fn>(names)}, fn, args, nargs, result);
}

template <class Fn, size_t K>
std::string ExportedSignature(const Fn&, const char* const (&names)[K]) {
  return MakeSignature<Fn>(ParamNames<Fn>(names));
}

/*! \brief The closure behind Function::FromTyped. */
template <class Fn>
struct TypedClosure {
  Fn fn;
  std::string name;
  std::vector<std::string> names;
  std::vector<const char*> name_ptrs;
  std::string signature;

  static int Call(void* self, const TPAny* args, int32_t nargs, TPAny* result) noexcept {
    auto* closure = static_cast<TypedClosure*>(self);
    const CallInfo info{closure->name.c_str(),
                        closure->name_ptrs.empty() ? nullptr : closure->name_ptrs.data()};
    return Invoke(info, closure->fn, args, nargs, result);
  }
  static void Delete(void* self) noexcept { delete static_cast<TypedClosure*>(self); }
};

template <class Fn, size_t K>
bool RegisterGlobalAtInit(const char* name, Fn fn, const char* const (&names)[K]) noexcept {
  const char* const* checked = ParamNames<Fn>(names);
  try {
    std::vector<std::string> param_names;
    for (size_t i = 0; checked != nullptr && i + 1 < K; ++i) param_names.emplace_back(checked[i]);
    Function::FromTyped(std::move(fn), name, std::move(param_names)).RegisterGlobal(name, true);
    return true;
  } catch (const std::exception& e) {
    // Static initialization has no caller to report to.
    std::fprintf(stderr, "tensorplug: registering global function '%s' failed: %s\n", name, e.what());
    return false;
  }
}

}  // namespace detail

template <class Fn>
Function Function::FromTyped(Fn callable, std::string name, std::vector<std::string> param_names) {
  using Closure = detail::TypedClosure<Fn>;
  constexpr size_t kArity = detail::FunctionTraits<Fn>::kArity;
  if (!param_names.empty() && param_names.size() != kArity) {
    TENSORPLUG_THROW(ValueError) << "Function::FromTyped: " << param_names.size()
                                 << " parameter names for " << kArity << " parameters";
  }
  std::unique_ptr<Closure> closure(
      new Closure{std::move(callable), std::move(name), std::move(param_names), {}, {}});
  for (const std::string& n : closure->names) closure->name_ptrs.push_back(n.c_str());
  closure->signature =
      detail::MakeSignature<Fn>(closure->name_ptrs.empty() ? nullptr : closure->name_ptrs.data());
  TPFunctionHandle handle = nullptr;
  if (TPFunctionCreate(closure.get(), &Closure::Call, &Closure::Delete,
                       closure->signature.c_str(), &handle) != 0) {
    detail::ThrowLastError();
  }
  closure.release();  // owned by the function now: Closure::Delete frees it
  return Function(handle);
}

}  // namespace tensorplug

#define TENSORPLUG_PRIVATE_CAT_I(a, b) a##b
#define TENSORPLUG_PRIVATE_CAT(a, b) TENSORPLUG_PRIVATE_CAT_I(a, b)
// EXPAND: MSVC's traditional preprocessor passes __VA_ARGS__ on as a single argument otherwise.
#define TENSORPLUG_PRIVATE_EXPAND(x) x
#define TENSORPLUG_PRIVATE_FIRST(...) TENSORPLUG_PRIVATE_EXPAND(TENSORPLUG_PRIVATE_FIRST_I(__VA_ARGS__))
#define TENSORPLUG_PRIVATE_FIRST_I(first, ...) first
#define TENSORPLUG_PRIVATE_REST(...) TENSORPLUG_PRIVATE_EXPAND(TENSORPLUG_PRIVATE_REST_I(__VA_ARGS__))
#define TENSORPLUG_PRIVATE_REST_I(first, ...) __VA_ARGS__

/*!
 * \brief Export `callable` from this shared library as the packed function `name`:
 *
 *   TENSORPLUG_EXPORT(scale, Scale, "x", "y", "alpha");   // parameter names: all or none
 *   TENSORPLUG_EXPORT(noop, [] {});                       // names default to arg0, arg1, ...
 *
 * Emits `extern "C" int __tensorplug_<name>(void*, const TPAny*, int32_t, TPAny*)`, which
 * checks the argument count and kinds (TypeError "scale() argument 2 'y': expected a
 * tensor, got str"), converts them, calls, packs the result, and turns any exception into
 * TPErrorSet(kind, message) + return -1; and `extern "C" const char*
 * __tensorplugsig_<name>(void)`, returning the signature string ("x:view;y:view;alpha:float->void").
 * `callable` is copied into a static; a callable containing top-level commas (a template
 * argument list, a lambda capture list) must be parenthesized.
 */
#define TENSORPLUG_EXPORT(name, ...)                                                          \
  static auto __tensorplug_fn_##name = (TENSORPLUG_PRIVATE_FIRST(__VA_ARGS__, ~));            \
  static constexpr const char* __tensorplug_names_##name[] = {                               \
      TENSORPLUG_PRIVATE_REST(__VA_ARGS__, nullptr)};                                         \
  extern "C" TP_EXPORT int __tensorplug_##name(void* self, const TPAny* args, int32_t nargs,  \
                                               TPAny* result) {                               \
    (void)self;                                                                               \
    return ::tensorplug::detail::InvokeExported(#name, __tensorplug_fn_##name,                 \
                                                __tensorplug_names_##name, args, nargs,       \
                                                result);                                      \
  }                                                                                           \
  extern "C" TP_EXPORT const char* __tensorplugsig_##name(void) {                             \
    try {                                                                                     \
      static const std::string signature = ::tensorplug::detail::ExportedSignature(           \
          __tensorplug_fn_##name, __tensorplug_names_##name);                                 \
      return signature.c_str();                                                               \
    } catch (...) {                                                                           \
      return nullptr;                                                                         \
    }                                                                                         \
  }                                                                                           \
  static_assert(true, "")

/*!
 * \brief Register `callable` as the global function `name_string` when the library is
 * loaded (static initialization), replacing any function of that name:
 *
 *   TENSORPLUG_REGISTER_GLOBAL("mylib.add", [](int64_t a, int64_t b) { return a + b; }, "a", "b");
 *
 * Parameter names as in TENSORPLUG_EXPORT. A failure is reported on stderr.
 */
#define TENSORPLUG_REGISTER_GLOBAL(name_string, ...)                                       \
  TENSORPLUG_PRIVATE_REGISTER_GLOBAL(TENSORPLUG_PRIVATE_CAT(__tensorplug_global_, __COUNTER__), \
                                     name_string, __VA_ARGS__)
#define TENSORPLUG_PRIVATE_REGISTER_GLOBAL(var, name_string, ...)                          \
  [[maybe_unused]] static const bool var = ::tensorplug::detail::RegisterGlobalAtInit(     \
      name_string, TENSORPLUG_PRIVATE_FIRST(__VA_ARGS__, ~),                               \
      {TENSORPLUG_PRIVATE_REST(__VA_ARGS__, nullptr)})

#endif  // TENSORPLUG_FUNCTION_H_
