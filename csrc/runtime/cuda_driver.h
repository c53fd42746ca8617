// The CUDA driver API, opened at run time (dlopen libcuda.so.1): libtensorplug has no link
// dependency on CUDA, and a machine without a driver only fails the calls that need one.
#pragma once
#include <cstddef>
#include <string>

namespace tensorplug::runtime {

using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUdeviceptr = unsigned long long;

struct CudaDriver {
  CUresult (*cuInit)(unsigned int);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext*);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
};

// The driver, opened and initialised once; nullptr with *error set when there is none
// ("no CUDA device": no libcuda.so.1, or cuInit failed, or no device).
const CudaDriver* GetCudaDriver(std::string* error);
// "cuMemAlloc failed: out of memory (2)" for error messages.
std::string CudaErrorText(const CudaDriver* driver, const char* call, CUresult rc);

// Makes the primary context of `device_id` current for the scope (the runtime API's
// context, so memory and modules are shared with frameworks); ok() false with *error set.
class CudaContextScope {
 public:
  CudaContextScope(const CudaDriver* driver, int device_id, std::string* error);
  ~CudaContextScope();
  bool ok() const { return pushed_; }

 private:
  const CudaDriver* driver_;
  bool pushed_ = false;
};

}  // namespace tensorplug::runtime
