// torch's stable C shim (shim.h): its table, dtype and device codes, and torch tensors as
// DLTensor views, owned tensors, allocations through torch and results handed back.
#include "shim.h"

#include <malloc.h>

#include <cstring>
#include <string>

#include "tensorplug/dtype.h"

namespace tensorplug_adapters::torch {

using tensorplug::DataTypeToString;

ShimTable g_shim{};
std::atomic<bool> g_shim_ready{false};
std::vector<DTypePair> g_dtypes;
std::array<DLDataType, kDTypeCodes> g_dl_of_torch_dtype{};
int32_t g_torch_cpu = -1, g_torch_cuda = -1;

bool DLFromTorchDType(int32_t code, DLDataType* out) {
  if (code < 0 || code >= kDTypeCodes || g_dl_of_torch_dtype[code].bits == 0) return false;
  *out = g_dl_of_torch_dtype[code];
  return true;
}

bool TorchFromDLDType(DLDataType dl, int32_t* out) {
  for (const DTypePair& p : g_dtypes) {
    if (p.dl.code == dl.code && p.dl.bits == dl.bits && p.dl.lanes == dl.lanes) {
      *out = p.torch;
      return true;
    }
  }
  return false;
}

int32_t DLDeviceOf(int32_t torch_type) {
  if (torch_type == g_torch_cpu) return kDLCPU;
  if (torch_type == g_torch_cuda) return kDLCUDA;
  return -1;
}

int32_t TorchDeviceOf(int32_t dl_type) {
  if (dl_type == kDLCPU) return g_torch_cpu;
  if (dl_type == kDLCUDA || dl_type == kDLCUDAManaged) return g_torch_cuda;
  return -1;
}

std::string DeviceText(DLDevice d) {
  const char* name = d.device_type == kDLCPU ? "cpu" : d.device_type == kDLCUDA ? "cuda" : nullptr;
  return (name ? std::string(name) : "device type " + std::to_string(d.device_type)) + ":" +
         std::to_string(d.device_id);
}

std::string ShapeText(DLDataType dtype, int64_t ndim, const int64_t* shape) {
  std::string text = DataTypeToString(dtype) + "[";
  for (int64_t i = 0; i < ndim; ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// ------------------------------------------------------------ tensors ----
// Owns one AtenTensorHandle (deleted with the handle when its deleter runs).
namespace {
struct TorchOwned {
  DLManagedTensorVersioned managed;
  AtenTensorHandle handle;
};
}  // namespace

static void TorchOwnedDeleter(DLManagedTensorVersioned* self) {
  auto* owned = reinterpret_cast<TorchOwned*>(self);
  g_shim.delete_tensor_object(owned->handle);
  delete owned;
}

std::atomic<BridgeRead> g_bridge_read{nullptr};

void ReadShim(AtenTensorHandle h, TensorFacts* out) {
  int64_t ndim = 0;
  int64_t* sizes = nullptr;
  int64_t* strides = nullptr;
  void* data = nullptr;
  int32_t device_index = -1;  // a CPU tensor's is -1 (DLPack's 0): asked of the other devices only
  out->torch_dtype = out->torch_device_type = -1;
  out->readable = !(g_shim.get_dim(h, &ndim) || g_shim.get_sizes(h, &sizes) || g_shim.get_strides(h, &strides) ||
                    g_shim.get_dtype(h, &out->torch_dtype) || g_shim.get_device_type(h, &out->torch_device_type) ||
                    g_shim.get_data_ptr(h, &data) ||
                    (out->torch_device_type != g_torch_cpu && g_shim.get_device_index(h, &device_index)));
  DLDataType dl{0, 0, 0};
  DLFromTorchDType(out->torch_dtype, &dl);
  const int32_t dl_device = DLDeviceOf(out->torch_device_type);
  const DLDevice device{static_cast<DLDeviceType>(dl_device < 0 ? 0 : dl_device), device_index < 0 ? 0 : device_index};
  out->view = DLTensor{data, device, static_cast<int32_t>(ndim), dl, sizes, strides, 0};
}

std::string FactsError(const TensorFacts& facts) {
  if (!facts.readable) return "torch could not describe the tensor";
  if (facts.view.dtype.bits == 0) return "torch dtype code " + std::to_string(facts.torch_dtype) + " has no DLPack equivalent";
  if (facts.view.device.device_type == 0) {
    return "tensors on torch device type " + std::to_string(facts.torch_device_type) + " are not supported";
  }
  return std::to_string(facts.view.ndim) + " dimensions; tensorplug takes at most " + std::to_string(TP_MAX_NDIM);
}

bool Describe(AtenTensorHandle h, DLTensor* view, std::string* error) {
  TensorFacts facts;
  if (BridgeRead read = g_bridge_read.load(std::memory_order_relaxed)) {
    read(h, &facts);
  } else {
    ReadShim(h, &facts);
  }
  if (!FactsOk(facts)) {
    *error = FactsError(facts);
    return false;
  }
  *view = facts.view;
  return true;
}

DLManagedTensorVersioned* Own(AtenTensorHandle h, std::string* error) {
  auto* owned = new (std::nothrow) TorchOwned{};
  if (owned == nullptr) {
    g_shim.delete_tensor_object(h);
    *error = "out of memory";
    return nullptr;
  }
  owned->handle = h;
  if (!Describe(h, &owned->managed.dl_tensor, error)) {
    g_shim.delete_tensor_object(h);
    delete owned;
    return nullptr;
  }
  owned->managed.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  owned->managed.manager_ctx = owned;
  owned->managed.deleter = TorchOwnedDeleter;
  owned->managed.flags = 0;
  return &owned->managed;
}

// The allocator bound while the kernel runs: Tensor::FromEnvAlloc allocates through torch.
static int TorchAllocatorImpl(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                   void (*set_error)(void* error_ctx, const char* kind, const char* message)) {
  int32_t dtype = 0;
  const int32_t device_type = TorchDeviceOf(prototype->device.device_type);
  if (!TorchFromDLDType(prototype->dtype, &dtype) || device_type < 0) {
    const std::string message = "torch cannot allocate " + DataTypeToString(prototype->dtype) + " on " +
                                DeviceText(prototype->device);
    set_error(error_ctx, "TypeError", message.c_str());
    return -1;
  }
  int64_t compact[TP_MAX_NDIM];
  const int64_t* strides = prototype->strides;
  if (strides == nullptr) {
    int64_t step = 1;
    for (int32_t i = prototype->ndim - 1; i >= 0; --i) {
      compact[i] = step;
      step *= prototype->shape[i] > 1 ? prototype->shape[i] : 1;
    }
    strides = compact;
  }
  AtenTensorHandle h = nullptr;
  if (g_shim.empty_strided(prototype->ndim, prototype->shape, strides, dtype, device_type,
                           prototype->device.device_id, &h) != 0) {
    set_error(error_ctx, "MemoryError", ("torch could not allocate " + ShapeText(prototype->dtype, prototype->ndim,
                                                                                    prototype->shape)).c_str());
    return -1;
  }
  // The new tensor is what was asked for: only its memory and torch's shape and stride
  // arrays (borrowed, alive with the tensor) are read back.
  void* data = nullptr;
  int64_t* sizes = nullptr;
  int64_t* tensor_strides = nullptr;
  if (g_shim.get_data_ptr(h, &data) || g_shim.get_sizes(h, &sizes) || g_shim.get_strides(h, &tensor_strides)) {
    g_shim.delete_tensor_object(h);
    set_error(error_ctx, "RuntimeError", "torch could not describe the tensor it allocated");
    return -1;
  }
  auto* owned = new (std::nothrow) TorchOwned{};
  if (owned == nullptr) {
    g_shim.delete_tensor_object(h);
    set_error(error_ctx, "MemoryError", "out of memory");
    return -1;
  }
  owned->handle = h;
  owned->managed.dl_tensor = DLTensor{data, prototype->device, prototype->ndim, prototype->dtype, sizes, tensor_strides, 0};
  owned->managed.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  owned->managed.manager_ctx = owned;
  owned->managed.deleter = TorchOwnedDeleter;
  owned->managed.flags = 0;
  *out = &owned->managed;
  return 0;
}

int TorchAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                   void (*set_error)(void* error_ctx, const char* kind, const char* message)) noexcept {
  try {
    return TorchAllocatorImpl(prototype, out, error_ctx, set_error);
  } catch (...) {
    set_error(error_ctx, "MemoryError", "out of memory");
    return -1;
  }
}

AtenTensorHandle ToTorch(DLManagedTensorVersioned* managed, std::string* error) {
  if (managed->deleter == TorchOwnedDeleter) {
    auto* owned = reinterpret_cast<TorchOwned*>(managed);
    AtenTensorHandle h = owned->handle;
    delete owned;
    return h;
  }
  const DLTensor& t = managed->dl_tensor;
  int32_t dtype = 0;
  const int32_t device_type = TorchDeviceOf(t.device.device_type);
  if (g_shim.from_blob == nullptr || !TorchFromDLDType(t.dtype, &dtype) || device_type < 0) {
    *error = g_shim.from_blob == nullptr ? "returned a tensor it did not allocate with Tensor::FromEnvAlloc (torch "
                                           "before 2.11 cannot take it)"
                                         : "returned a " + DataTypeToString(t.dtype) + " tensor on " +
                                               DeviceText(t.device) + ", which torch has no type for";
    if (managed->deleter) managed->deleter(managed);
    return nullptr;
  }
  int64_t compact[TP_MAX_NDIM];
  const int64_t* strides = t.strides;
  if (strides == nullptr) {
    int64_t step = 1;
    for (int32_t i = t.ndim - 1; i >= 0; --i) {
      compact[i] = step;
      step *= t.shape[i] > 1 ? t.shape[i] : 1;
    }
    strides = compact;
  }
  AtenTensorHandle h = nullptr;
  auto release = [](void*, void* ctx) {
    auto* m = static_cast<DLManagedTensorVersioned*>(ctx);
    if (m->deleter) m->deleter(m);
  };
  if (g_shim.from_blob(static_cast<char*>(t.data) + t.byte_offset, t.ndim, t.shape, strides, 0, dtype, device_type,
                       t.device.device_id, &h, g_shim.layout_strided(), nullptr, 0, release, managed) != 0) {
    *error = "torch could not wrap the returned tensor";
    if (managed->deleter) managed->deleter(managed);
    return nullptr;
  }
  return h;
}

}  // namespace tensorplug_adapters::torch
