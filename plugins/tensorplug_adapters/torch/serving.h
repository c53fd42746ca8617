// tensorplug ops in a C++ process without Python: the registration library of
// serving.cc (built by tensorplug_adapters.torch.serving.build, against the torch the
// process links). docs/compilers.md, "AOTInductor", shows a complete program.
//
//   tensorplug_serving::register_package("model.pt2");          // before loading the package
//   torch::inductor::AOTIModelPackageLoader loader("model.pt2");
//
// Declarations only: the program links the registration library, libtorch and (through the
// registration library) libtensorplug; no libpython.
#ifndef TENSORPLUG_TORCH_SERVING_H_
#define TENSORPLUG_TORCH_SERVING_H_

#include <stddef.h>

#ifdef __cplusplus
#include <string>

namespace tensorplug_serving {

// Registers every tensorplug op recorded in the AOTInductor package at `package_path`
// (tensorplug_adapters.torch.aoti.add_ops's record, version 3): loads each kernel library
// it names through tensorplug's C API, defines each op's schema and overloads, and
// registers its CPU kernel with torch's dispatcher. `library_dir`, when not empty, is where
// the kernel libraries are found (by file name) instead of the paths the record holds.
// Ops this process already has (same name and overload) are left as they are. Returns the
// number of ops registered. Throws c10::Error naming the op and the kernel library when a
// library cannot be loaded, lacks the function, was built for another tensorplug ABI, or
// the function's signature differs from the record, or when the record makes no call plan
// (tensorplug/plan.h, whose TPPlanCreate refuses it); nothing of that op is registered.
int register_package(const std::string& package_path, const std::string& library_dir = "");

}  // namespace tensorplug_serving

extern "C" {
#endif

// The same for C callers: the number of ops registered, or -1 with the message in
// error[0..error_size).
int tp_torch_serving_register(const char* package_path, const char* library_dir, char* error, size_t error_size);

#ifdef __cplusplus
}
#endif

#endif  // TENSORPLUG_TORCH_SERVING_H_
