/*
 * <tvm/ffi/string.h> (compatibility layer): String, an owned string. As a kernel parameter
 * or result it is a Python str (kind "str"), like native std::string.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_STRING_H_
#define TENSORPLUG_COMPAT_TVM_FFI_STRING_H_

#include <cstring>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace tvm {
namespace ffi {

class String {
 public:
  String() = default;
  String(const char* text) : value_(text != nullptr ? text : "") {}  // NOLINT
  String(const char* data, size_t size) : value_(data, size) {}
  String(std::string text) : value_(std::move(text)) {}          // NOLINT
  String(std::string_view text) : value_(text) {}                 // NOLINT

  const char* c_str() const noexcept { return value_.c_str(); }
  const char* data() const noexcept { return value_.data(); }
  size_t size() const noexcept { return value_.size(); }
  size_t length() const noexcept { return value_.size(); }
  bool empty() const noexcept { return value_.empty(); }
  /*! \brief The std::string inside. */
  const std::string& str() const noexcept { return value_; }
  operator std::string() const { return value_; }                       // NOLINT
  operator std::string_view() const noexcept { return value_; }         // NOLINT

  friend bool operator==(const String& a, const String& b) noexcept { return a.value_ == b.value_; }
  friend bool operator!=(const String& a, const String& b) noexcept { return a.value_ != b.value_; }
  friend bool operator<(const String& a, const String& b) noexcept { return a.value_ < b.value_; }
  friend bool operator==(const String& a, const char* b) noexcept { return a.value_ == b; }
  friend bool operator!=(const String& a, const char* b) noexcept { return a.value_ != b; }
  friend bool operator==(const String& a, const std::string& b) noexcept { return a.value_ == b; }
  friend bool operator!=(const String& a, const std::string& b) noexcept { return a.value_ != b; }
  friend String operator+(const String& a, const String& b) { return String(a.value_ + b.value_); }
  friend std::ostream& operator<<(std::ostream& os, const String& s) { return os << s.value_; }

 private:
  std::string value_;
};

}  // namespace ffi
}  // namespace tvm

template <>
struct std::hash<::tvm::ffi::String> {
  size_t operator()(const ::tvm::ffi::String& s) const noexcept { return std::hash<std::string>()(s.str()); }
};

#endif  // TENSORPLUG_COMPAT_TVM_FFI_STRING_H_
