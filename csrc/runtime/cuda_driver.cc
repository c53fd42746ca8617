// The CUDA driver API through dlopen (see cuda_driver.h).
#include "cuda_driver.h"

#include <dlfcn.h>

#include <mutex>

namespace tensorplug::runtime {

namespace {
template <class F>
bool Bind(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}
}  // namespace

const CudaDriver* GetCudaDriver(std::string* error) {
  static CudaDriver driver;
  static std::string failure;
  static std::once_flag once;
  static bool ok = false;
  std::call_once(once, [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!lib) {
      failure = "no CUDA device: the CUDA driver (libcuda.so.1) cannot be loaded";
      return;
    }
    bool bound = Bind(lib, "cuInit", &driver.cuInit) && Bind(lib, "cuDeviceGetCount", &driver.cuDeviceGetCount) &&
                 Bind(lib, "cuDeviceGet", &driver.cuDeviceGet) &&
                 Bind(lib, "cuDevicePrimaryCtxRetain", &driver.cuDevicePrimaryCtxRetain) &&
                 Bind(lib, "cuCtxPushCurrent_v2", &driver.cuCtxPushCurrent) &&
                 Bind(lib, "cuCtxPopCurrent_v2", &driver.cuCtxPopCurrent) &&
                 Bind(lib, "cuMemAlloc_v2", &driver.cuMemAlloc) && Bind(lib, "cuMemFree_v2", &driver.cuMemFree) &&
                 Bind(lib, "cuMemsetD8Async", &driver.cuMemsetD8Async) &&
                 Bind(lib, "cuModuleLoadData", &driver.cuModuleLoadData) &&
                 Bind(lib, "cuModuleGetFunction", &driver.cuModuleGetFunction) &&
                 Bind(lib, "cuLaunchKernel", &driver.cuLaunchKernel) &&
                 Bind(lib, "cuGetErrorString", &driver.cuGetErrorString);
    if (!bound) {
      failure = "no CUDA device: libcuda.so.1 lacks a driver API function tensorplug needs";
      return;
    }
    int count = 0;
    if (driver.cuInit(0) != 0 || driver.cuDeviceGetCount(&count) != 0 || count == 0) {
      failure = "no CUDA device: the CUDA driver reports none";
      return;
    }
    ok = true;
  });
  if (!ok) {
    *error = failure;
    return nullptr;
  }
  return &driver;
}

std::string CudaErrorText(const CudaDriver* driver, const char* call, CUresult rc) {
  const char* text = nullptr;
  if (driver->cuGetErrorString(rc, &text) != 0 || !text) text = "unknown error";
  return std::string(call) + " failed: " + text + " (" + std::to_string(rc) + ")";
}

CudaContextScope::CudaContextScope(const CudaDriver* driver, int device_id, std::string* error) : driver_(driver) {
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUresult rc = driver->cuDeviceGet(&device, device_id);
  if (rc != 0) {
    *error = CudaErrorText(driver, "cuDeviceGet", rc);
    return;
  }
  rc = driver->cuDevicePrimaryCtxRetain(&context, device);  // kept for the process, like the runtime API
  if (rc == 0) rc = driver->cuCtxPushCurrent(context);
  if (rc != 0) {
    *error = CudaErrorText(driver, "cuCtxPushCurrent", rc);
    return;
  }
  pushed_ = true;
}

CudaContextScope::~CudaContextScope() {
  if (!pushed_) return;
  CUcontext popped = nullptr;
  driver_->cuCtxPopCurrent(&popped);
}

}  // namespace tensorplug::runtime
