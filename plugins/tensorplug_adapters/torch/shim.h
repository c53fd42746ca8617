// torch's stable C shim as the native kernel reads it: the shim's functions, resolved at run
// time in the already-loaded libtorch (kernel.cc, load), torch's dtype and device codes in
// DLPack's terms, and torch tensors read as DLTensor views, owned, allocated and handed back.
// The prototypes and encodings are facts from torch's headers (torch/csrc/inductor/aoti_torch/
// c/shim.h, torch/csrc/stable/c/shim.h and stableivalue_conversions.h), declared here: the
// plugin compiles against no torch header, and one build serves every torch >= 2.10.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "tensorplug/c_api.h"

namespace tensorplug_adapters::torch {

// ------------------------------------------------------------- the shim ----
// torch's types as the shim declares them: opaque handles, int32 error codes (0: success).
using StableIValue = uint64_t;

using AtenTensorHandle = void*;
using TorchLibraryHandle = void*;
using StableListHandle = void*;
using StringHandle = void*;
using ShimError = int32_t;
using BoxedKernel = void (*)(StableIValue*, uint64_t, uint64_t);

// The extension build version tensorplug states to torch_library_impl: the stack encoding
// of torch 2.10 (lists as StableListHandle, strings as StringHandle, a device as
// type << 32 | index), which later versions keep for kernels that state it.
constexpr uint64_t kTorch210 = (uint64_t{2} << 56) | (uint64_t{10} << 48);

struct ShimTable {
  // Required (torch >= 2.10).
  ShimError (*library_init_impl)(const char*, const char*, const char*, uint32_t, TorchLibraryHandle*);
  ShimError (*library_impl)(TorchLibraryHandle, const char*, BoxedKernel, uint64_t);
  ShimError (*delete_tensor_object)(AtenTensorHandle);
  ShimError (*get_data_ptr)(AtenTensorHandle, void**);
  ShimError (*get_dim)(AtenTensorHandle, int64_t*);
  ShimError (*get_sizes)(AtenTensorHandle, int64_t**);
  ShimError (*get_strides)(AtenTensorHandle, int64_t**);
  ShimError (*get_dtype)(AtenTensorHandle, int32_t*);
  ShimError (*get_device_type)(AtenTensorHandle, int32_t*);
  ShimError (*get_device_index)(AtenTensorHandle, int32_t*);
  ShimError (*empty_strided)(int64_t, const int64_t*, const int64_t*, int32_t, int32_t, int32_t, AtenTensorHandle*);
  ShimError (*list_size)(StableListHandle, size_t*);
  ShimError (*list_get_item)(StableListHandle, size_t, StableIValue*);
  ShimError (*delete_list)(StableListHandle);
  ShimError (*string_length)(StringHandle, size_t*);
  ShimError (*string_c_str)(StringHandle, const char**);
  ShimError (*delete_string)(StringHandle);
  int32_t (*device_type_cpu)();
  int32_t (*device_type_cuda)();
  int32_t (*layout_strided)();
  // Optional: absent in some versions or builds (nullptr then).
  ShimError (*delete_stable_ivalue)(StableIValue*);  // 2.13; before, an optional's box is freed with delete
  ShimError (*from_blob)(void*, int64_t, const int64_t*, const int64_t*, int64_t, int32_t, int32_t, int32_t,
                         AtenTensorHandle*, int32_t, const uint8_t*, int64_t, void (*)(void*, void*),
                         void*);                                     // 2.11: results not from the allocator
  ShimError (*current_cuda_stream)(int32_t, void**);                // CUDA builds
  // The native Autograd kernel's (RunAutograd); without any of them, none.
  ShimError (*call_dispatcher)(const char*, const char*, StableIValue*, uint64_t);  // 2.10
  bool (*grad_mode_is_enabled)();
  const char* (*exception_what)();  // 2.13; the message of the exception a shim call caught
  // c10::TensorImpl::requires_grad() const, exported by libc10 (mangled, called with the
  // TensorImpl as `this`): the shim has no getter. An AtenTensorHandle points at an
  // at::Tensor, whose one member is its TensorImpl pointer.
  bool (*impl_requires_grad)(const void*);
  // c10::impl::TorchDispatchModeTLS::any_modes_set(bool skip_infra_modes), libc10 (static).
  bool (*any_dispatch_mode)(bool);
  // torch::autograd::impl::bump_version(const at::Tensor&), libtorch_cpu (mangled; an
  // AtenTensorHandle is the at::Tensor): what torch's own in-place ops call on the tensors
  // they write. Throws c10::Error for an inference tensor outside InferenceMode. Without it
  // the op keeps the Python kernel if it writes (native.py).
  void (*bump_version)(AtenTensorHandle);
};

extern ShimTable g_shim;

extern std::atomic<bool> g_shim_ready;

// torch's dtype codes (aoti_torch_dtype_*(), c10::ScalarType values) and their DLPack types.
struct DTypePair {
  int32_t torch;
  DLDataType dl;
};

extern std::vector<DTypePair> g_dtypes;

// The same, indexed by torch's code (read per tensor argument); bits 0: no DLPack type.
constexpr int32_t kDTypeCodes = 64;

extern std::array<DLDataType, kDTypeCodes> g_dl_of_torch_dtype;

// The shim's device type codes of the CPU and CUDA (functions of the shim; read once).
extern int32_t g_torch_cpu, g_torch_cuda;

bool DLFromTorchDType(int32_t code, DLDataType* out);

bool TorchFromDLDType(DLDataType dl, int32_t* out);

// The shim's device type code as DLPack's, and back.
int32_t DLDeviceOf(int32_t torch_type);

int32_t TorchDeviceOf(int32_t dl_type);

std::string DeviceText(DLDevice d);

std::string ShapeText(DLDataType dtype, int64_t ndim, const int64_t* shape);

// A torch tensor as torch reports it, in DLPack's terms (sizes and strides borrowed: they
// live as long as the tensor). The compiled torch bridge (torch_bridge.cc, its TensorFacts)
// fills the same layout, mapping dtypes through g_dl_of_torch_dtype as ReadShim does.
struct TensorFacts {
  DLTensor view;              // data with the storage offset applied, byte_offset 0; dtype.bits 0
                              // where DLPack has no such dtype, device_type 0 for other devices
  int32_t torch_dtype;        // c10::ScalarType, for the message when view.dtype.bits is 0
  int32_t torch_device_type;  // c10::DeviceType, for the message when view.device.device_type is 0
  int32_t readable;           // 0 where torch refused (no storage, symbolic sizes)
};

// The compiled bridge's reader (torch's inline accessors, one call), set when the bridge is
// attached; else ReadShim (the shim's seven calls).
using BridgeRead = void (*)(const void* tensor, TensorFacts* out);

extern std::atomic<BridgeRead> g_bridge_read;

// The facts of `h` through the shim (seven calls; the data pointer includes the storage offset).
void ReadShim(AtenTensorHandle h, TensorFacts* out);

// Whether `facts` describe a tensor tensorplug can pass (FactsError says why not).
inline bool FactsOk(const TensorFacts& facts) {
  return facts.readable && facts.view.dtype.bits != 0 && facts.view.device.device_type != 0 &&
         facts.view.ndim <= TP_MAX_NDIM;
}

std::string FactsError(const TensorFacts& facts);

// Describe torch tensor `h` as `view`. False with *error set for a dtype or device DLPack
// lacks.
bool Describe(AtenTensorHandle h, DLTensor* view, std::string* error);

// A managed tensor owning `h` (moved in); nullptr with *error set (h deleted) on failure.
DLManagedTensorVersioned* Own(AtenTensorHandle h, std::string* error);

// Called from the kernel (C ABI): no C++ exception may leave it.
int TorchAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                   void (*set_error)(void* error_ctx, const char* kind, const char* message)) noexcept;

// A torch tensor for a returned managed tensor (consumed): the allocator's tensor itself,
// else (torch >= 2.11) a torch tensor over its memory that runs its deleter when freed.
AtenTensorHandle ToTorch(DLManagedTensorVersioned* managed, std::string* error);

}  // namespace tensorplug_adapters::torch
