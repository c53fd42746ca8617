/*
 * <tvm/ffi/dtype.h> (compatibility layer): DLDataType helpers under tvm-ffi's names.
 * DLDataType literals (`DLDataType{kDLFloat, 32, 1}`) and the global operator== / != / <<
 * for DLDataType come from tensorplug/dtype.h, with the same meaning.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_DTYPE_H_
#define TENSORPLUG_COMPAT_TVM_FFI_DTYPE_H_

#include <cctype>
#include <cstdlib>
#include <string>

#include "tensorplug/dtype.h"
#include "tensorplug/vocabulary.h"
#include "tvm/ffi/error.h"

namespace tvm {
namespace ffi {

/*! \brief "float32", "int64", "bool", "bfloat16", "float32x4" (tensorplug::DataTypeToString). */
inline std::string DLDataTypeToString(DLDataType dtype) { return ::tensorplug::DataTypeToString(dtype); }

/*!
 * \brief Parse a dtype name as DLDataTypeToString writes it ("float16", "uint8", "bool",
 * "float8_e4m3fn", an "xN" lanes suffix). ValueError naming the string otherwise.
 */
inline DLDataType StringToDLDataType(const std::string& text) {
  std::string base = text;
  uint16_t lanes = 1;
  const size_t x = text.rfind('x');
  if (x != std::string::npos && x + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[x + 1]))) {
    base = text.substr(0, x);
    lanes = static_cast<uint16_t>(std::strtoul(text.c_str() + x + 1, nullptr, 10));
  }
  if (base == "bool") return DLDataType{kDLBool, 8, lanes};
  // Every dtype code of tensorplug's vocabulary at the bit widths DLPack uses; the printer
  // (DataTypeToString, generated from the same table) is the one source of names.
#define TVM_FFI_COMPAT_CODE(code, stem, sized) static_cast<uint8_t>(code),
  static const uint8_t kCodes[] = {TP_DTYPE_CODES(TVM_FFI_COMPAT_CODE)};
#undef TVM_FFI_COMPAT_CODE
  static const uint8_t kBits[] = {1, 4, 6, 8, 16, 32, 64, 128};
  for (uint8_t code : kCodes) {
    for (uint8_t bits : kBits) {
      const DLDataType candidate{code, bits, 1};
      if (::tensorplug::DataTypeToString(candidate) == base) return DLDataType{code, bits, lanes};
    }
  }
  TVM_FFI_THROW(ValueError) << "unknown dtype '" << text << "'";
}

}  // namespace ffi
}  // namespace tvm

#endif  // TENSORPLUG_COMPAT_TVM_FFI_DTYPE_H_
