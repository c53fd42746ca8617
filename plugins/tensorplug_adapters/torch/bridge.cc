// The compiled torch bridge: the dispatcher kernels of tensorplug ops, compiled at run time
// against the headers of the torch in hand (bridge.py builds it, cached per torch).
//
// tensorplug's own build knows no torch header: its kernels reach torch through the stable
// C shim (kernel.cc), where torch boxes every tensor argument into a heap
// handle and back and each tensor is read through seven shim calls. This file takes the
// dispatcher's IValue stack itself: a tensor argument is passed on as the address of the
// at::Tensor the stack already holds (borrowed, nothing allocated), a scalar as its bits,
// and tensors are read through torch's inline accessors into DLTensors. The call itself,
// the op's plan, its rules, the env binding and the checks, stays tensorplug's
// (kernel.cc's BridgeRun, reached through the `run` pointer given at init). An op
// whose parameters are all tensors, ints, floats and bools, none optional, can take this
// kernel; the others keep the stable one. When the Autograd kernel passes a call on (to `<op>.nograd` or
// `<op>.grad`), this file calls that overload on its own stack.
//
// The interface to tensorplug is plain C, its version checked at init.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>
#include <tensorplug/dlpack.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#define TP_BRIDGE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr int32_t kInterfaceVersion = 2;
constexpr size_t kMaxParams = 32;

// A tensor as torch reports it, in DLPack's terms: kernel.cc's TensorFacts, the same
// layout.
struct TensorFacts {
  DLTensor view;              // data with the storage offset applied, byte_offset 0; dtype.bits 0
                              // where DLPack has no such dtype, device_type 0 for other devices
  int32_t torch_dtype;        // c10::ScalarType
  int32_t torch_device_type;  // c10::DeviceType
  int32_t readable;           // 0 where torch refused (no storage, symbolic sizes)
};

// The DLPack type of each torch dtype code (kernel.cc's table, given at init).
const DLDataType* g_dtypes = nullptr;
int32_t g_num_dtypes = 0;

// What kernel.cc's Describe reads of a tensor, through torch's inline accessors
// (inlined into the kernel's loop: it runs for every tensor argument).
__attribute__((always_inline)) inline void Read(const at::Tensor& t, TensorFacts* out) noexcept {
  try {
    const int32_t dtype = static_cast<int32_t>(t.scalar_type());
    const c10::Device device = t.device();
    out->torch_dtype = dtype;
    out->torch_device_type = static_cast<int32_t>(device.type());
    out->view.data = t.data_ptr();
    out->view.ndim = static_cast<int32_t>(t.dim());
    out->view.shape = const_cast<int64_t*>(t.sizes().data());
    out->view.strides = const_cast<int64_t*>(t.strides().data());
    out->view.byte_offset = 0;
    out->view.dtype = dtype >= 0 && dtype < g_num_dtypes ? g_dtypes[dtype] : DLDataType{0, 0, 0};
    out->view.device = device.is_cpu()    ? DLDevice{kDLCPU, 0}
                       : device.is_cuda() ? DLDevice{kDLCUDA, device.index()}
                                          : DLDevice{static_cast<DLDeviceType>(0), 0};
    out->readable = 1;
  } catch (...) {
    out->readable = 0;
  }
}

// kernel.cc's side: runs plan `slot` on `values` (0: ran, results in values[0..n);
// 1: the Autograd kernel passes the call on to the overload in *hop; -1: failed, the
// message in error_text()). `facts[i]`: tensor argument i, read.
using Run = int (*)(int32_t slot, int32_t autograd, uint64_t* values, TensorFacts* facts, uint64_t num_args,
                    uint64_t num_outputs, const char** hop);
using ErrorText = const char* (*)();
Run g_run = nullptr;
ErrorText g_error_text = nullptr;

class Kernel final : public c10::OperatorKernel {
 public:
  Kernel(int32_t slot, bool autograd, std::string kinds)
      : slot_(slot), autograd_(autograd), kinds_(std::move(kinds)) {}

  void operator()(const c10::OperatorHandle& handle, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const size_t n = kinds_.size();
    const size_t num_outputs = handle.schema().returns().size();
    uint64_t values[kMaxParams];  // the arguments, then the results
    TensorFacts facts[kMaxParams];
    if (stack->size() < n || num_outputs > kMaxParams) {
      throw std::runtime_error(handle.operator_name().name + "(): the bridge takes " + std::to_string(n) +
                               " arguments and at most 32 results");
    }
    const c10::IValue* args = stack->data() + (stack->size() - n);
    for (size_t i = 0; i < n; ++i) {
      const c10::IValue& v = args[i];
      const char kind = kinds_[i];
      if (kind == 't' && v.isTensor()) {
        const at::Tensor& t = v.toTensor();
        values[i] = reinterpret_cast<uintptr_t>(&t);
        Read(t, &facts[i]);
      } else if (kind == 'i' && v.isInt()) {
        values[i] = static_cast<uint64_t>(v.toInt());
      } else if (kind == 'f' && v.isDouble()) {
        const double d = v.toDouble();
        std::memcpy(&values[i], &d, sizeof d);
      } else if (kind == 'b' && v.isBool()) {
        values[i] = v.toBool() ? 1 : 0;
      } else {
        throw std::runtime_error(handle.operator_name().name + "(): TypeError: argument " + std::to_string(i) + ": torch passed a " +
                                 v.tagKind() + " where the op takes " + KindName(kind));
      }
    }
    const char* hop = nullptr;
    const int rc = g_run(slot_, autograd_ ? 1 : 0, values, facts, n, num_outputs, &hop);
    if (rc < 0) throw std::runtime_error(g_error_text());
    if (rc == 1) {
      HopTo(handle, hop).callBoxed(stack);
      return;
    }
    torch::jit::drop(*stack, n);
    for (size_t k = 0; k < num_outputs; ++k) {  // handles made by kernel.cc's ToTorch, moved here
      auto* result = reinterpret_cast<at::Tensor*>(static_cast<uintptr_t>(values[k]));
      stack->emplace_back(std::move(*result));
      delete result;
    }
  }

 private:
  static const char* KindName(char kind) {
    return kind == 't' ? "a Tensor" : kind == 'i' ? "an int" : kind == 'f' ? "a float" : "a bool";
  }

  // Overload `hop` of the operator of `handle` (looked up once).
  const c10::OperatorHandle& HopTo(const c10::OperatorHandle& handle, const char* hop) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = hops_.find(hop);
    if (it == hops_.end()) {
      const std::string& name = handle.operator_name().name;
      it = hops_.emplace(hop, c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), hop)).first;
    }
    return it->second;
  }

  const int32_t slot_;
  const bool autograd_;
  const std::string kinds_;  // one letter per parameter: t(ensor), i(nt), f(loat), b(ool)
  std::mutex mutex_;
  std::map<std::string, c10::OperatorHandle> hops_;
};

}  // namespace

// `dtypes[c]`: the DLPack type of torch dtype code c < num_dtypes (bits 0: none).
TP_BRIDGE_EXPORT int32_t tp_torch_bridge_init(int32_t interface_version, Run run, ErrorText error_text,
                                              const DLDataType* dtypes, int32_t num_dtypes) {
  if (interface_version != kInterfaceVersion) return kInterfaceVersion;
  g_run = run;
  g_error_text = error_text;
  g_dtypes = dtypes;
  g_num_dtypes = num_dtypes;
  return 0;
}

// Registers plan `slot` as the `key` kernel ("CPU", "CUDA", "Autograd") of operator
// `ns::name` (name may be "name.overload"); `kinds` one letter per parameter. 0 on success,
// else 1 with the reason in error[0..error_size).
TP_BRIDGE_EXPORT int32_t tp_torch_bridge_register(const char* ns, const char* key, const char* name, int32_t slot,
                                                  const char* kinds, char* error, size_t error_size) {
  try {
    if (std::strlen(kinds) > kMaxParams) throw std::runtime_error("more than 32 parameters");
    const c10::DispatchKey dispatch_key = c10::parseDispatchKey(key);
    // One library per namespace and key, kept for the process (deleting it would remove the
    // kernels registered through it).
    static std::mutex mutex;
    static auto* libraries = new std::map<std::string, std::unique_ptr<torch::Library>>();
    std::lock_guard<std::mutex> lock(mutex);
    auto& lib = (*libraries)[std::string(ns) + "/" + key];
    if (!lib) lib = std::make_unique<torch::Library>(torch::Library::IMPL, ns, dispatch_key, __FILE__, __LINE__);
    const bool autograd = dispatch_key == c10::DispatchKey::Autograd;
    lib->impl(name, torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Kernel>(slot, autograd, kinds)));
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
    return 1;
  }
}

// kernel.cc's Describe of a tensor of any op (`tensor` an at::Tensor*).
TP_BRIDGE_EXPORT void tp_torch_bridge_read(const void* tensor, TensorFacts* out) {
  Read(*static_cast<const at::Tensor*>(tensor), out);
}
