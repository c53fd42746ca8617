// A C++ server in miniature (tests/torch/test_torch_serving.py): registers the tensorplug ops of an
// AOTInductor package through the registration library (serving.h), loads the package
// with torch's AOTIModelPackageLoader and runs it on arange(6).reshape(2, 3), all without
// Python: it links libtorch, the registration library and (through it) libtensorplug, and
// checks its own /proc/self/maps for libpython before and after.
//
//   torch_serving_runner register|run <package.pt2> [library_dir]
// Prints "registered <n>", then (run) "values <v0> <v1> ..." per output, and "libpython: none" at the
// end; a c10::Error is printed as "c10::Error: <message>", another exception as
// "std::exception: <message>", with exit status 3.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "serving.h"

static bool LibpythonMapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("libpython") != std::string::npos) return true;
  return false;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s register|run <package.pt2> [library_dir]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1], package = argv[2], library_dir = argc > 3 ? argv[3] : "";
  if (LibpythonMapped()) {
    std::printf("libpython: mapped\n");
    return 4;
  }
  try {
    std::printf("registered %d\n", tensorplug_serving::register_package(package, library_dir));
    if (mode == "run") {
      torch::inductor::AOTIModelPackageLoader loader(package);
      at::Tensor x = at::arange(6, at::kFloat).reshape({2, 3});
      std::vector<at::Tensor> outputs = loader.run({x});
      for (const at::Tensor& output : outputs) {
        at::Tensor y = output.contiguous();
        std::printf("values");
        for (int64_t i = 0; i < y.numel(); ++i) std::printf(" %.9g", y.data_ptr<float>()[i]);
        std::printf("\n");
      }
    }
  } catch (const c10::Error& e) {
    std::printf("c10::Error: %s\n", e.what_without_backtrace());
    return 3;
  } catch (const std::exception& e) {  // AOTInductor's runner rethrows a kernel's error as std::runtime_error
    std::printf("std::exception: %s\n", e.what());
    return 3;
  }
  std::printf("libpython: %s\n", LibpythonMapped() ? "mapped" : "none");
  return 0;
}
