/*
 * <tvm/ffi/error.h> (compatibility layer): tvm::ffi::Error and the throw / check macros
 * of tvm-ffi sources, over tensorplug::Error. The kind is the Python exception the caller
 * sees (ValueError, TypeError, IndexError, ...; InternalError and unknown kinds arrive as
 * RuntimeError). Messages follow tensorplug's form, "MSG (check failed: COND)":
 *
 *   TVM_FFI_THROW(ValueError) << "bad " << x;            -> ValueError: bad 3
 *   TVM_FFI_CHECK(n > 0, ValueError) << "need rows";      -> ValueError: need rows (check failed: n > 0)
 *   TVM_FFI_ICHECK_EQ(x.ndim(), 2) << "x must be 2-D";    -> RuntimeError: x must be 2-D
 *                                   (check failed: x.ndim() == 2, 3 vs. 2, at kernel.cc:12)
 *
 * The binary checks evaluate each operand once and print both (any type with an
 * operator<<: integers, DLDataType, DLDevice, shapes). Every macro is a single statement
 * that is safe inside an unbraced if / else.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_ERROR_H_
#define TENSORPLUG_COMPAT_TVM_FFI_ERROR_H_

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "tensorplug/dtype.h"
#include "tensorplug/error.h"
#include "tvm/ffi/c_api.h"

namespace tvm {
namespace ffi {

/*! \brief The error type kernels throw and catch: tensorplug's (kind(), what()). */
using Error = ::tensorplug::Error;

}  // namespace ffi
}  // namespace tvm

/*! \brief Internals of the compatibility layer; not part of any API. */
namespace tensorplug_compat {

/*! \brief Collects a streamed message; Raise() throws it as tensorplug::Error. */
class MessageBuilder {
 public:
  MessageBuilder(const char* kind, std::string note, bool log = false)
      : kind_(kind), note_(std::move(note)), log_(log) {}

  template <class T>
  MessageBuilder& operator<<(const T& value) {
    using ::tensorplug::operator<<;
    stream_ << value;
    return *this;
  }

  [[noreturn]] void Raise() const {
    std::string message = stream_.str();
    if (!note_.empty()) message = message.empty() ? note_ : message + " (" + note_ + ")";
    if (log_) std::fprintf(stderr, "%s: %s\n", kind_, message.c_str());
    throw ::tensorplug::Error(kind_, std::move(message));
  }

 private:
  const char* kind_;
  std::string note_;
  bool log_;
  std::ostringstream stream_;
};

/*! \brief `Thrower() & builder << a << b`: the whole message is streamed first (<< binds tighter). */
struct Thrower {
  [[noreturn]] void operator&(const MessageBuilder& builder) const { builder.Raise(); }
};

inline std::string Where(const char* file, int line) {
  return std::string(", at ") + file + ":" + std::to_string(line);
}

inline std::string CondNote(const char* cond, const char* file, int line) {
  return std::string("check failed: ") + cond + (file != nullptr ? Where(file, line) : std::string());
}

template <class T>
void PrintOperand(std::ostream& os, const T& value) {
  using ::tensorplug::operator<<;
  if constexpr (std::is_same_v<T, char> || std::is_same_v<T, signed char> ||
                std::is_same_v<T, unsigned char>) {
    os << static_cast<int>(value);  // a byte is a number here, not a character
  } else {
    os << value;
  }
}

/*!
 * \brief NULL when `passed`, else the note "check failed: X OP Y, x vs. y[, at FILE:LINE]"
 * (a pointer, so the check macro can test and use it in one if-statement).
 */
template <class X, class Y>
std::unique_ptr<std::string> BinaryNote(bool passed, const X& x, const Y& y, const char* text, const char* file,
                                        int line) {
  if (passed) return nullptr;
  std::ostringstream os;
  os << "check failed: " << text << ", ";
  PrintOperand(os, x);
  os << " vs. ";
  PrintOperand(os, y);
  if (file != nullptr) os << Where(file, line);
  return std::make_unique<std::string>(os.str());
}

// The comparisons live in functions so that mixed-sign operands (int vs. size_t, common in
// shape checks) compare as the source wrote them without a warning at every use.
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#endif
template <class X, class Y>
std::unique_ptr<std::string> CheckEQ(const X& x, const Y& y, const char* t, const char* f, int l) {
  return BinaryNote(x == y, x, y, t, f, l);
}
template <class X, class Y>
std::unique_ptr<std::string> CheckNE(const X& x, const Y& y, const char* t, const char* f, int l) {
  return BinaryNote(x != y, x, y, t, f, l);
}
template <class X, class Y>
std::unique_ptr<std::string> CheckLT(const X& x, const Y& y, const char* t, const char* f, int l) {
  return BinaryNote(x < y, x, y, t, f, l);
}
template <class X, class Y>
std::unique_ptr<std::string> CheckLE(const X& x, const Y& y, const char* t, const char* f, int l) {
  return BinaryNote(x <= y, x, y, t, f, l);
}
template <class X, class Y>
std::unique_ptr<std::string> CheckGT(const X& x, const Y& y, const char* t, const char* f, int l) {
  return BinaryNote(x > y, x, y, t, f, l);
}
template <class X, class Y>
std::unique_ptr<std::string> CheckGE(const X& x, const Y& y, const char* t, const char* f, int l) {
  return BinaryNote(x >= y, x, y, t, f, l);
}
#if defined(__GNUC__) || defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace tensorplug_compat

/*! \brief Throw an error of kind ErrorKind: `TVM_FFI_THROW(ValueError) << "msg";` */
#define TVM_FFI_THROW(ErrorKind) \
  ::tensorplug_compat::Thrower() & ::tensorplug_compat::MessageBuilder(#ErrorKind, std::string())

/*! \brief As TVM_FFI_THROW, and also print "Kind: message" on stderr first (for startup code). */
#define TVM_FFI_LOG_AND_THROW(ErrorKind) \
  ::tensorplug_compat::Thrower() & ::tensorplug_compat::MessageBuilder(#ErrorKind, std::string(), true)

#define TVM_FFI_PRIVATE_CHECK(cond, ErrorKind, file, line)                 \
  (cond) ? static_cast<void>(0)                                            \
         : ::tensorplug_compat::Thrower() &                                \
               ::tensorplug_compat::MessageBuilder(                        \
                   #ErrorKind, ::tensorplug_compat::CondNote(#cond, file, line))

// if-with-initializer: each operand is evaluated once, and the built-in else keeps a
// caller's `if (a) TVM_FFI_ICHECK_EQ(x, y); else ...` bound to the caller's if.
#define TVM_FFI_PRIVATE_CHECK_OP(Op, op, x, y, ErrorKind, file, line)                          \
  if (auto tvm_ffi_compat_note_ = ::tensorplug_compat::Check##Op((x), (y), #x " " #op " " #y, \
                                                                 file, line);                  \
      tvm_ffi_compat_note_ == nullptr) {                                                       \
  } else                                                                                       \
    ::tensorplug_compat::Thrower() &                                                           \
        ::tensorplug_compat::MessageBuilder(#ErrorKind, std::move(*tvm_ffi_compat_note_))

/*! \brief Throw ErrorKind when `cond` is false: `TVM_FFI_CHECK(x.ndim() == 2, ValueError) << "...";` */
#define TVM_FFI_CHECK(cond, ErrorKind) TVM_FFI_PRIVATE_CHECK(cond, ErrorKind, nullptr, 0)
/*! \brief Comparison checks printing both operands: "check failed: a == b, 3 vs. 4". */
#define TVM_FFI_CHECK_EQ(x, y, ErrorKind) TVM_FFI_PRIVATE_CHECK_OP(EQ, ==, x, y, ErrorKind, nullptr, 0)
#define TVM_FFI_CHECK_NE(x, y, ErrorKind) TVM_FFI_PRIVATE_CHECK_OP(NE, !=, x, y, ErrorKind, nullptr, 0)
#define TVM_FFI_CHECK_LT(x, y, ErrorKind) TVM_FFI_PRIVATE_CHECK_OP(LT, <, x, y, ErrorKind, nullptr, 0)
#define TVM_FFI_CHECK_LE(x, y, ErrorKind) TVM_FFI_PRIVATE_CHECK_OP(LE, <=, x, y, ErrorKind, nullptr, 0)
#define TVM_FFI_CHECK_GT(x, y, ErrorKind) TVM_FFI_PRIVATE_CHECK_OP(GT, >, x, y, ErrorKind, nullptr, 0)
#define TVM_FFI_CHECK_GE(x, y, ErrorKind) TVM_FFI_PRIVATE_CHECK_OP(GE, >=, x, y, ErrorKind, nullptr, 0)
/*! \brief Throw "check not null: x" when the pointer `x` is NULL; otherwise the value of x. */
#define TVM_FFI_CHECK_NOTNULL(x, ErrorKind)                                                      \
  ((x) == nullptr ? (::tensorplug_compat::Thrower() &                                            \
                     ::tensorplug_compat::MessageBuilder(#ErrorKind, "check not null: " #x)), \
   (x) : (x))

/*
 * Internal invariants (kernel bugs, not bad input): kind InternalError, which Python sees
 * as RuntimeError; the note names the file and line.
 */
#define TVM_FFI_ICHECK(x) TVM_FFI_PRIVATE_CHECK(x, InternalError, __FILE__, __LINE__)
#define TVM_FFI_ICHECK_EQ(x, y) TVM_FFI_PRIVATE_CHECK_OP(EQ, ==, x, y, InternalError, __FILE__, __LINE__)
#define TVM_FFI_ICHECK_NE(x, y) TVM_FFI_PRIVATE_CHECK_OP(NE, !=, x, y, InternalError, __FILE__, __LINE__)
#define TVM_FFI_ICHECK_LT(x, y) TVM_FFI_PRIVATE_CHECK_OP(LT, <, x, y, InternalError, __FILE__, __LINE__)
#define TVM_FFI_ICHECK_LE(x, y) TVM_FFI_PRIVATE_CHECK_OP(LE, <=, x, y, InternalError, __FILE__, __LINE__)
#define TVM_FFI_ICHECK_GT(x, y) TVM_FFI_PRIVATE_CHECK_OP(GT, >, x, y, InternalError, __FILE__, __LINE__)
#define TVM_FFI_ICHECK_GE(x, y) TVM_FFI_PRIVATE_CHECK_OP(GE, >=, x, y, InternalError, __FILE__, __LINE__)
#define TVM_FFI_ICHECK_NOTNULL(x) TVM_FFI_CHECK_NOTNULL(x, InternalError)

#endif  // TENSORPLUG_COMPAT_TVM_FFI_ERROR_H_
