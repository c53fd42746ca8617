// The same collision through the compatibility layer: a source written for the other
// project (which declares operator== for DLDataType but none for DLDevice) defines its own.
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/function.h>

#include <sstream>

inline bool operator==(const DLDevice& a, const DLDevice& b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}
inline std::ostream& operator<<(std::ostream& os, const DLDevice& device) {
  return os << "library-device(" << device.device_type << ", " << device.device_id << ")";
}

tvm::ffi::String Describe(tvm::ffi::TensorView x, DLDevice expected) {
  std::ostringstream os;
  os << x.device() << (x.device() == expected ? " matches" : " differs")
     << (x.dtype() == DLDataType{kDLFloat, 32, 1} ? " float32" : " other");
  return os.str();
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(describe, Describe);
