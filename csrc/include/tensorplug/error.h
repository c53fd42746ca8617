/*
 * tensorplug/error.h -- the C++ error type and the THROW / CHECK macros.
 *
 * A kernel reports bad input by throwing tensorplug::Error. Its kind names the Python
 * exception the caller sees (ValueError, TypeError, IndexError, ...; see TPErrorSet in
 * c_api.h); the export wrapper turns it into TPErrorSet(kind, message) at the C boundary.
 */
#ifndef TENSORPLUG_ERROR_H_
#define TENSORPLUG_ERROR_H_

#include <cstdlib>
#include <exception>
#include <typeinfo>
#if defined(__GLIBCXX__) || defined(_LIBCPP_VERSION)
#include <cxxabi.h>
#endif
#include <memory>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "tensorplug/c_api.h"

namespace tensorplug {

/*! \brief An error with a kind (a Python exception name such as "ValueError") and a message. */
class Error : public std::exception {
 public:
  Error(std::string kind, std::string message)
      : kind_(std::move(kind)), message_(std::move(message)) {}

  /*! \brief The error kind, e.g. "ValueError"; unknown kinds become RuntimeError in Python. */
  const char* kind() const noexcept { return kind_.c_str(); }
  /*! \brief The message alone (without the kind), as the Python exception will show it. */
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string kind_;
  std::string message_;
};

namespace detail {

/*! \brief Collects a message with operator<<; ErrorThrower throws it (see the macros below). */
class ErrorBuilder {
 public:
  /*! \brief `note` (e.g. "check failed: x > 0") is appended in parentheses when thrown. */
  explicit ErrorBuilder(const char* kind, std::string note = std::string())
      : kind_(kind), note_(std::move(note)) {}

  template <class T>
  ErrorBuilder& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }

  Error Build() const {
    std::string message = stream_.str();
    if (!note_.empty()) message = message.empty() ? note_ : message + " (" + note_ + ")";
    return Error(kind_, std::move(message));
  }

 private:
  const char* kind_;
  std::string note_;
  std::ostringstream stream_;
};

/*
 * `ErrorThrower() & builder << a << b` evaluates the whole stream first (<< binds tighter
 * than &), then throws. operator& is [[noreturn]], so the compiler knows a THROW
 * statement ends the control flow (no "missing return" warnings after it).
 */
struct ErrorThrower {
  [[noreturn]] void operator&(const ErrorBuilder& builder) const { throw builder.Build(); }
};

/*! \brief "check failed: COND" -- so a CHECK message names the failed condition. */
inline std::string CheckNote(const char* condition) {
  return std::string("check failed: ") + condition;
}

/*! \brief The kind of a comparison check: the one given, else "ValueError". */
constexpr const char* CheckKind(const char* given) noexcept { return given[0] != '\0' ? given : "ValueError"; }

/*!
 * \brief Null when `holds`, else the note "check failed: A == B (3 vs. 4)" naming both
 * values (printed with operator<<).
 */
template <class A, class B>
std::unique_ptr<std::string> CheckOpNote(bool holds, const A& a, const B& b, const char* text) {
  if (holds) return nullptr;
  std::ostringstream os;
  os << "check failed: " << text << " (" << a << " vs. " << b << ")";
  return std::make_unique<std::string>(os.str());
}

/*! \brief "internal check failed: COND at FILE:LINE". */
inline std::string InternalCheckNote(const char* condition, const char* file, int line) {
  return std::string("internal check failed: ") + condition + " at " + file + ":" +
         std::to_string(line);
}

/*!
 * \brief Throw the calling thread's recorded C error (TPErrorGet) as tensorplug::Error and
 * clear it. Used after a c_api.h function returned -1.
 */
[[noreturn]] inline void ThrowLastError() {
  const char* kind = nullptr;
  const char* message = nullptr;
  if (TPErrorGet(&kind, &message) != 0) {
    Error error(kind != nullptr ? kind : "RuntimeError", message != nullptr ? message : "");
    TPErrorClear();
    throw error;
  }
  throw Error("RuntimeError", "a tensorplug call failed without recording an error");
}

// The demangled type of the exception being handled ("mylib::Oops"), or "" where the C++
// library cannot say.
inline std::string CurrentExceptionTypeName() {
#if defined(__GLIBCXX__) || defined(_LIBCPP_VERSION)
  const std::type_info* type = abi::__cxa_current_exception_type();
  if (type == nullptr) return "";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(abi::__cxa_demangle(type->name(), nullptr, nullptr, &status),
                                                   std::free);
  return status == 0 && demangled ? demangled.get() : type->name();
#else
  return "";
#endif
}

/*!
 * \brief Record the exception being handled with TPErrorSet; call only inside a catch block.
 * `function` (optional) names the function that threw, for exceptions without a message.
 * Never throws: this is the last step before returning -1 across the C boundary.
 */
inline void SetErrorFromCurrentException(const char* function = nullptr) noexcept {
  try {
    throw;
  } catch (const Error& e) {
    TPErrorSet(e.kind(), e.what());
  } catch (const std::bad_alloc&) {
    TPErrorSet("MemoryError", "out of memory");
  } catch (const std::out_of_range& e) {
    TPErrorSet("IndexError", e.what());
  } catch (const std::invalid_argument& e) {
    TPErrorSet("ValueError", e.what());
  } catch (const std::overflow_error& e) {
    TPErrorSet("OverflowError", e.what());
  } catch (const std::exception& e) {
    TPErrorSet("RuntimeError", e.what());
  } catch (...) {
    // Not a std::exception: no message to carry, so say where and what was thrown.
    try {
      const std::string type = CurrentExceptionTypeName();
      std::string message = function != nullptr ? std::string(function) + "() threw " : std::string("threw ");
      message += type.empty() ? "a C++ exception" : "a C++ exception of type " + type;
      message += " (not derived from std::exception)";
      TPErrorSet("RuntimeError", message.c_str());
    } catch (...) {
      TPErrorSet("RuntimeError", "a C++ exception not derived from std::exception");
    }
  }
}

}  // namespace detail
}  // namespace tensorplug

/*!
 * \brief Throw tensorplug::Error of the given kind: `TENSORPLUG_THROW(ValueError) << "bad " << x;`
 * Kind is an identifier (ValueError, TypeError, IndexError, KeyError, NotImplementedError,
 * MemoryError, OverflowError, RuntimeError, or a custom name).
 */
#define TENSORPLUG_THROW(Kind) \
  ::tensorplug::detail::ErrorThrower() & ::tensorplug::detail::ErrorBuilder(#Kind)

/*!
 * \brief Throw tensorplug::Error of kind Kind when `cond` is false:
 * `TENSORPLUG_CHECK(x.dim() == 2, ValueError) << "x must be 2-D";`
 * The message is "MSG (check failed: COND)", or "check failed: COND" when nothing is streamed.
 */
#define TENSORPLUG_CHECK(cond, Kind)                      \
  (cond) ? static_cast<void>(0)                           \
         : ::tensorplug::detail::ErrorThrower() &         \
               ::tensorplug::detail::ErrorBuilder(        \
                   #Kind, ::tensorplug::detail::CheckNote(#cond))

/*!
 * \brief Comparison checks naming both values: `TENSORPLUG_CHECK_EQ(x.ndim(), 2) << "x must
 * be 2-D";` throws ValueError "x must be 2-D (check failed: x.ndim() == 2 (3 vs. 2))" when
 * x has 3 dims. An optional third argument gives the kind (`TENSORPLUG_CHECK_LT(i, n,
 * IndexError)`). Each operand is evaluated once; both must be printable with operator<<.
 * EQ ==, NE !=, LT <, LE <=, GT >, GE >=.
 */
#define TENSORPLUG_PRIVATE_CHECK_OP(op, a, b, ...)                                                    \
  if (auto tensorplug_check_note_ = [&](const auto& tp_a_, const auto& tp_b_) {                     \
        return ::tensorplug::detail::CheckOpNote(tp_a_ op tp_b_, tp_a_, tp_b_, #a " " #op " " #b);  \
      }((a), (b));                                                                                  \
      !tensorplug_check_note_) {                                                                    \
  } else                                                                                            \
    ::tensorplug::detail::ErrorThrower() &                                                          \
        ::tensorplug::detail::ErrorBuilder(::tensorplug::detail::CheckKind(#__VA_ARGS__),           \
                                           std::move(*tensorplug_check_note_))
#define TENSORPLUG_CHECK_EQ(a, b, ...) TENSORPLUG_PRIVATE_CHECK_OP(==, a, b, __VA_ARGS__)
#define TENSORPLUG_CHECK_NE(a, b, ...) TENSORPLUG_PRIVATE_CHECK_OP(!=, a, b, __VA_ARGS__)
#define TENSORPLUG_CHECK_LT(a, b, ...) TENSORPLUG_PRIVATE_CHECK_OP(<, a, b, __VA_ARGS__)
#define TENSORPLUG_CHECK_LE(a, b, ...) TENSORPLUG_PRIVATE_CHECK_OP(<=, a, b, __VA_ARGS__)
#define TENSORPLUG_CHECK_GT(a, b, ...) TENSORPLUG_PRIVATE_CHECK_OP(>, a, b, __VA_ARGS__)
#define TENSORPLUG_CHECK_GE(a, b, ...) TENSORPLUG_PRIVATE_CHECK_OP(>=, a, b, __VA_ARGS__)

/*!
 * \brief An internal invariant: throws kind "InternalError" naming the condition, file and
 * line when `cond` is false. For bugs in the kernel, not for bad user input.
 */
#define TENSORPLUG_ICHECK(cond)                                                   \
  (cond) ? static_cast<void>(0)                                                   \
         : ::tensorplug::detail::ErrorThrower() &                                 \
               ::tensorplug::detail::ErrorBuilder(                                \
                   "InternalError",                                               \
                   ::tensorplug::detail::InternalCheckNote(#cond, __FILE__, __LINE__))

#endif  // TENSORPLUG_ERROR_H_
