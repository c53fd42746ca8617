// A downstream library that defines its own operators for DLDevice and DLDataType, as
// libraries written against dlpack.h (which declares none) do. It must compile next to the
// tensorplug headers, and its own definitions must be the ones used.
#include <tensorplug/tensorplug.h>

#include <sstream>
#include <string>

inline bool operator==(const DLDevice& a, const DLDevice& b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}
inline bool operator!=(const DLDevice& a, const DLDevice& b) { return !(a == b); }
inline std::ostream& operator<<(std::ostream& os, const DLDevice& device) {
  return os << "library-device(" << device.device_type << ", " << device.device_id << ")";
}
inline bool operator==(const DLDataType& a, const DLDataType& b) {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

namespace tp = tensorplug;

std::string Describe(tp::TensorView x, DLDevice expected) {
  std::ostringstream os;
  os << x.device() << (x.device() == expected ? " matches" : " differs")
     << (x.dtype() == tp::kFloat32 ? " float32" : " other");
  return os.str();
}

TENSORPLUG_EXPORT(describe, Describe, "x", "expected");
