/*
 * tensorplug/dtype.h -- DLDataType / DLDevice helpers, 16-bit float storage types and the
 * dtype dispatch macros.
 */
#ifndef TENSORPLUG_DTYPE_H_
#define TENSORPLUG_DTYPE_H_

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "tensorplug/dlpack.h"
#include "tensorplug/error.h"
#include "tensorplug/vocabulary.h"

/*
 * Equality and printing of the DLPack C structs. They live in the global namespace, the
 * structs' own, so that argument-dependent lookup finds them from any namespace. They are
 * templates restricted to the one struct: a library that defines its own non-template
 * operator for DLDevice or DLDataType (many do, as dlpack.h declares none) compiles next to
 * these, and overload resolution prefers its definition.
 */
template <class T, std::enable_if_t<std::is_same_v<T, DLDataType>, int> = 0>
inline bool operator==(const T& a, const T& b) noexcept {
  // One 32-bit compare: code, bits and lanes fill the struct's 4 bytes (no padding).
  static_assert(sizeof(DLDataType) == 4, "DLDataType is code, bits, lanes");
  uint32_t x, y;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  return x == y;
}
template <class T, std::enable_if_t<std::is_same_v<T, DLDataType>, int> = 0>
inline bool operator!=(const T& a, const T& b) noexcept {
  return !(a == b);
}
template <class T, std::enable_if_t<std::is_same_v<T, DLDevice>, int> = 0>
inline bool operator==(const T& a, const T& b) noexcept {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}
template <class T, std::enable_if_t<std::is_same_v<T, DLDevice>, int> = 0>
inline bool operator!=(const T& a, const T& b) noexcept {
  return !(a.device_type == b.device_type && a.device_id == b.device_id);
}

namespace tensorplug {

/* Common dtypes. DLPack's bool is one byte (bits == 8). */
inline constexpr DLDataType kBool{kDLBool, 8, 1};
inline constexpr DLDataType kInt8{kDLInt, 8, 1};
inline constexpr DLDataType kInt16{kDLInt, 16, 1};
inline constexpr DLDataType kInt32{kDLInt, 32, 1};
inline constexpr DLDataType kInt64{kDLInt, 64, 1};
inline constexpr DLDataType kUInt8{kDLUInt, 8, 1};
inline constexpr DLDataType kUInt16{kDLUInt, 16, 1};
inline constexpr DLDataType kUInt32{kDLUInt, 32, 1};
inline constexpr DLDataType kUInt64{kDLUInt, 64, 1};
inline constexpr DLDataType kFloat16{kDLFloat, 16, 1};
inline constexpr DLDataType kBFloat16{kDLBfloat, 16, 1};
inline constexpr DLDataType kFloat32{kDLFloat, 32, 1};
inline constexpr DLDataType kFloat64{kDLFloat, 64, 1};
inline constexpr DLDataType kComplex64{kDLComplex, 64, 1};
inline constexpr DLDataType kComplex128{kDLComplex, 128, 1};

/*! \brief The CPU device. */
inline constexpr DLDevice kCPU{kDLCPU, 0};
/*! \brief CUDA device `id`. */
constexpr DLDevice CUDADevice(int32_t id = 0) noexcept { return DLDevice{kDLCUDA, id}; }

/*! \brief Bytes per element (all lanes), rounded up for sub-byte types. */
constexpr int64_t DataTypeBytes(DLDataType dtype) noexcept {
  return (static_cast<int64_t>(dtype.bits) * dtype.lanes + 7) / 8;
}

/*! \brief "float32", "int64", "bool", "bfloat16", "float8_e4m3fn"; "float32x4" for lanes > 1. */
inline std::string DataTypeToString(DLDataType dtype) {
  std::string base;
  const std::string bits = std::to_string(dtype.bits);
  switch (dtype.code) {
#define TP_X(code, stem, sized) \
  case code: base = (sized) ? stem + bits : std::string(stem); break;
    TP_DTYPE_CODES(TP_X)
#undef TP_X
    default: base = "dtype(code=" + std::to_string(dtype.code) + ",bits=" + bits + ")"; break;
  }
  if (dtype.lanes != 1) base += "x" + std::to_string(dtype.lanes);
  return base;
}

/*! \brief "cpu:0", "cuda:1", "cuda_host:0", ... (the device type's name, ':', its id). */
inline std::string DeviceToString(DLDevice device) {
  const char* name = nullptr;
  switch (device.device_type) {
#define TP_X(type, type_name) \
  case type: name = type_name; break;
    TP_DEVICE_TYPES(TP_X)
#undef TP_X
  }
  std::string out = name != nullptr
                        ? std::string(name)
                        : "device" + std::to_string(static_cast<int32_t>(device.device_type));
  return out + ":" + std::to_string(device.device_id);
}

/*!
 * \brief The dtype named `text` (false when none is): a name of TP_DTYPES or
 * TP_DTYPE_ALIASES ("float32", "half"), a framework dtype's str() ending in one
 * ("torch.float32", "dtype('float32')"), and vector types ("float32x4").
 */
inline bool DataTypeFromString(std::string name, DLDataType* out) {
  if (name.rfind("dtype('", 0) == 0) name = name.substr(7);
  if (size_t dot = name.rfind('.'); dot != std::string::npos) name = name.substr(dot + 1);
  if (!name.empty() && name.back() == ')') name.pop_back();
  if (!name.empty() && name.back() == '\'') name.pop_back();
  auto lookup = [](const std::string& n, DLDataType* dtype) {
#define TP_X(entry, code, bits)                 \
  if (n == entry) {                             \
    *dtype = DLDataType{code, bits, 1};         \
    return true;                                \
  }
    TP_DTYPES(TP_X)
    TP_DTYPE_ALIASES(TP_X)
#undef TP_X
    return false;
  };
  if (lookup(name, out)) return true;
  // Vector types: "float32x4" (the part before the last 'x' must itself be a dtype, so that
  // "complex64" is not read as 64 lanes of "comple").
  const size_t x = name.rfind('x');
  if (x == std::string::npos || x + 1 >= name.size() || x + 6 < name.size() ||
      name.find_first_not_of("0123456789", x + 1) != std::string::npos || !lookup(name.substr(0, x), out)) {
    return false;
  }
  int lanes = 0;  // at most 5 digits (checked above)
  for (size_t k = x + 1; k < name.size(); ++k) lanes = lanes * 10 + (name[k] - '0');
  if (lanes < 1 || lanes > 65535) return false;
  out->lanes = static_cast<uint16_t>(lanes);
  return true;
}

namespace detail {
template <class To, class From>
inline To BitCast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From), "BitCast needs equal sizes");
  To to;
  std::memcpy(&to, &from, sizeof(To));
  return to;
}
}  // namespace detail

/*!
 * \brief IEEE binary16 storage type (dtype float16). Converts to and from float (rounding to
 * nearest even); do arithmetic in float.
 */
struct Half {
  uint16_t bits;

  Half() = default;
  /*! \brief Round `value` to the nearest half (ties to even); overflow gives infinity. */
  Half(float value) : bits(FromFloat(value)) {}  // NOLINT: implicit, like a built-in float
  operator float() const noexcept { return ToFloat(bits); }
  static Half FromBits(uint16_t raw) noexcept {
    Half h;
    h.bits = raw;
    return h;
  }

 private:
  static uint16_t FromFloat(float value) noexcept {
    uint32_t f = detail::BitCast<uint32_t>(value);
    const uint32_t sign = (f >> 16) & 0x8000u;
    f &= 0x7fffffffu;
    if (f >= 0x7f800000u) {  // inf or NaN (keep NaN quiet and non-zero)
      return static_cast<uint16_t>(sign | 0x7c00u | (f > 0x7f800000u ? 0x200u | ((f >> 13) & 0x3ffu) : 0u));
    }
    if (f >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
    if (f < 0x38800000u) {
      // Below the smallest normal half: adding 0.5f aligns the value so that the FPU's own
      // round-to-nearest-even produces the subnormal mantissa in the low bits.
      const float aligned = detail::BitCast<float>(f) + 0.5f;
      return static_cast<uint16_t>(sign | (detail::BitCast<uint32_t>(aligned) - 0x3f000000u));
    }
    const uint32_t odd = (f >> 13) & 1u;
    f += 0xc8000fffu + odd;  // rebias the exponent (127 -> 15), then round to nearest even
    return static_cast<uint16_t>(sign | (f >> 13));
  }
  static float ToFloat(uint16_t h) noexcept {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    const uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
      const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;
      return detail::BitCast<float>(sign | detail::BitCast<uint32_t>(magnitude));
    }
    if (exponent == 31) return detail::BitCast<float>(sign | 0x7f800000u | (mantissa << 13));
    return detail::BitCast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
};

/*!
 * \brief bfloat16 storage type (the upper half of a float). Converts to and from float
 * (rounding to nearest even); do arithmetic in float.
 */
struct BFloat16 {
  uint16_t bits;

  BFloat16() = default;
  BFloat16(float value) : bits(FromFloat(value)) {}  // NOLINT: implicit, like a built-in float
  operator float() const noexcept { return detail::BitCast<float>(static_cast<uint32_t>(bits) << 16); }
  static BFloat16 FromBits(uint16_t raw) noexcept {
    BFloat16 b;
    b.bits = raw;
    return b;
  }

 private:
  static uint16_t FromFloat(float value) noexcept {
    const uint32_t f = detail::BitCast<uint32_t>(value);
    if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40u);  // quiet NaN
    return static_cast<uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2, "16-bit storage types");
static_assert(sizeof(bool) == 1, "DLPack bool is one byte");

namespace detail {
/*! \brief DLDataType of a C++ element type; `known` is false for types without one. */
template <class T, class = void>
struct DTypeTraits {
  static constexpr bool known = false;
};
template <>
struct DTypeTraits<bool> {
  static constexpr bool known = true;
  static constexpr DLDataType value = kBool;
};
template <class T>
struct DTypeTraits<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static constexpr bool known = true;
  static constexpr DLDataType value{static_cast<uint8_t>(std::is_signed_v<T> ? kDLInt : kDLUInt),
                                    static_cast<uint8_t>(sizeof(T) * 8), 1};
};
template <>
struct DTypeTraits<float> {
  static constexpr bool known = true;
  static constexpr DLDataType value = kFloat32;
};
template <>
struct DTypeTraits<double> {
  static constexpr bool known = true;
  static constexpr DLDataType value = kFloat64;
};
template <>
struct DTypeTraits<Half> {
  static constexpr bool known = true;
  static constexpr DLDataType value = kFloat16;
};
template <>
struct DTypeTraits<BFloat16> {
  static constexpr bool known = true;
  static constexpr DLDataType value = kBFloat16;
};

/*! \brief A switchable key for scalar dtypes (lanes == 1); vector dtypes get a key no case uses. */
constexpr uint32_t DispatchKey(DLDataType dtype) noexcept {
  return dtype.lanes == 1 ? (static_cast<uint32_t>(dtype.code) << 8 | dtype.bits) : 0xffffffffu;
}

[[noreturn]] inline void ThrowUnsupportedDType(DLDataType dtype, const char* name) {
  TENSORPLUG_THROW(TypeError) << "unsupported dtype " << DataTypeToString(dtype) << " for "
                              << name;
}

// A dispatch macro switches on a DLDataType, or on a tensor's dtype: then its error names
// the argument the tensor was lent as ("argument 'x': unsupported dtype int32 for add").
constexpr DLDataType DispatchDType(DLDataType dtype) noexcept { return dtype; }
template <class T, class = decltype(std::declval<const T&>().arg())>
DLDataType DispatchDType(const T& tensor) {
  return tensor.dtype();
}
template <class T, class = decltype(std::declval<const T&>().arg())>
[[noreturn]] void ThrowUnsupportedDType(const T& tensor, const char* name) {
  TENSORPLUG_THROW(TypeError) << tensor.arg() << "unsupported dtype " << DataTypeToString(tensor.dtype())
                              << " for " << name;
}
}  // namespace detail

/*! \brief The DLDataType of C++ element type T (bool, integers, float, double, Half, BFloat16). */
template <class T>
constexpr DLDataType DataTypeOf() noexcept {
  static_assert(detail::DTypeTraits<T>::known, "no DLDataType for this C++ type");
  return detail::DTypeTraits<T>::value;
}

}  // namespace tensorplug

template <class T, std::enable_if_t<std::is_same_v<T, DLDataType>, int> = 0>
inline std::ostream& operator<<(std::ostream& os, const T& dtype) {
  return os << tensorplug::DataTypeToString(dtype);
}
template <class T, std::enable_if_t<std::is_same_v<T, DLDevice>, int> = 0>
inline std::ostream& operator<<(std::ostream& os, const T& device) {
  return os << tensorplug::DeviceToString(device);
}

/*
 * Dtype dispatch. The body is a lambda taking no arguments; inside it `scalar_t` names
 * the C++ element type of DTYPE. The macro's value is the lambda's result; an unlisted
 * dtype throws TypeError "unsupported dtype X for NAME". DTYPE is a DLDataType or a tensor
 * (TensorView, MutableView, Tensor): given the tensor, the error names its argument,
 * "argument 'x': unsupported dtype int32 for scale".
 *
 *   TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "scale", [&] {
 *     const scalar_t* in = x.data_ptr<scalar_t>();
 *     ...
 *   });
 *
 * FLOATING_TYPES: float32, float64.        FLOATING_TYPES_AND_HALF: + float16, bfloat16.
 * INTEGRAL_TYPES: int8/16/32/64, uint8.    NUMERIC_TYPES: integral + float32/64.
 * ALL_TYPES: numeric + bool.               ALL_TYPES_AND_HALF: all + float16, bfloat16.
 * float16 and bfloat16 dispatch to tensorplug::Half / tensorplug::BFloat16.
 */
#define TENSORPLUG_PRIVATE_DISPATCH_CASE(DTYPE_CONST, TYPE, ...)                 \
  case ::tensorplug::detail::DispatchKey(::tensorplug::DTYPE_CONST): {           \
    using scalar_t = TYPE;                                                       \
    return __VA_ARGS__();                                                        \
  }

#define TENSORPLUG_PRIVATE_DISPATCH(DTYPE, NAME, CASES, ...)                     \
  [&] {                                                                          \
    const auto& tensorplug_dispatch_on_ = (DTYPE);                               \
    switch (::tensorplug::detail::DispatchKey(                                   \
        ::tensorplug::detail::DispatchDType(tensorplug_dispatch_on_))) {         \
      CASES(__VA_ARGS__)                                                         \
      default:                                                                   \
        ::tensorplug::detail::ThrowUnsupportedDType(tensorplug_dispatch_on_, NAME); \
    }                                                                            \
  }()

#define TENSORPLUG_PRIVATE_CASES_FLOATING(...)                                   \
  TENSORPLUG_PRIVATE_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)                 \
  TENSORPLUG_PRIVATE_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)
#define TENSORPLUG_PRIVATE_CASES_HALF(...)                                       \
  TENSORPLUG_PRIVATE_DISPATCH_CASE(kFloat16, ::tensorplug::Half, __VA_ARGS__)    \
  TENSORPLUG_PRIVATE_DISPATCH_CASE(kBFloat16, ::tensorplug::BFloat16, __VA_ARGS__)
#define TENSORPLUG_PRIVATE_CASES_INTEGRAL(...)                                   \
  TENSORPLUG_PRIVATE_DISPATCH_CASE(kInt8, int8_t, __VA_ARGS__)                   \
  TENSORPLUG_PRIVATE_DISPATCH_CASE(kInt16, int16_t, __VA_ARGS__)                 \
  TENSORPLUG_PRIVATE_DISPATCH_CASE(kInt32, int32_t, __VA_ARGS__)                 \
  TENSORPLUG_PRIVATE_DISPATCH_CASE(kInt64, int64_t, __VA_ARGS__)                 \
  TENSORPLUG_PRIVATE_DISPATCH_CASE(kUInt8, uint8_t, __VA_ARGS__)
#define TENSORPLUG_PRIVATE_CASES_NUMERIC(...)                                    \
  TENSORPLUG_PRIVATE_CASES_INTEGRAL(__VA_ARGS__)                                 \
  TENSORPLUG_PRIVATE_CASES_FLOATING(__VA_ARGS__)
#define TENSORPLUG_PRIVATE_CASES_ALL(...)                                        \
  TENSORPLUG_PRIVATE_CASES_NUMERIC(__VA_ARGS__)                                  \
  TENSORPLUG_PRIVATE_DISPATCH_CASE(kBool, bool, __VA_ARGS__)
#define TENSORPLUG_PRIVATE_CASES_FLOATING_AND_HALF(...)                          \
  TENSORPLUG_PRIVATE_CASES_FLOATING(__VA_ARGS__)                                 \
  TENSORPLUG_PRIVATE_CASES_HALF(__VA_ARGS__)
#define TENSORPLUG_PRIVATE_CASES_ALL_AND_HALF(...)                               \
  TENSORPLUG_PRIVATE_CASES_ALL(__VA_ARGS__)                                      \
  TENSORPLUG_PRIVATE_CASES_HALF(__VA_ARGS__)

#define TENSORPLUG_DISPATCH_FLOATING_TYPES(DTYPE, NAME, ...) \
  TENSORPLUG_PRIVATE_DISPATCH(DTYPE, NAME, TENSORPLUG_PRIVATE_CASES_FLOATING, __VA_ARGS__)
#define TENSORPLUG_DISPATCH_FLOATING_TYPES_AND_HALF(DTYPE, NAME, ...) \
  TENSORPLUG_PRIVATE_DISPATCH(DTYPE, NAME, TENSORPLUG_PRIVATE_CASES_FLOATING_AND_HALF, __VA_ARGS__)
#define TENSORPLUG_DISPATCH_INTEGRAL_TYPES(DTYPE, NAME, ...) \
  TENSORPLUG_PRIVATE_DISPATCH(DTYPE, NAME, TENSORPLUG_PRIVATE_CASES_INTEGRAL, __VA_ARGS__)
#define TENSORPLUG_DISPATCH_NUMERIC_TYPES(DTYPE, NAME, ...) \
  TENSORPLUG_PRIVATE_DISPATCH(DTYPE, NAME, TENSORPLUG_PRIVATE_CASES_NUMERIC, __VA_ARGS__)
#define TENSORPLUG_DISPATCH_ALL_TYPES(DTYPE, NAME, ...) \
  TENSORPLUG_PRIVATE_DISPATCH(DTYPE, NAME, TENSORPLUG_PRIVATE_CASES_ALL, __VA_ARGS__)
#define TENSORPLUG_DISPATCH_ALL_TYPES_AND_HALF(DTYPE, NAME, ...) \
  TENSORPLUG_PRIVATE_DISPATCH(DTYPE, NAME, TENSORPLUG_PRIVATE_CASES_ALL_AND_HALF, __VA_ARGS__)

#endif  // TENSORPLUG_DTYPE_H_
