// Which variant of the kernels runs: FUSED_KERNELS_ISA is set per variant by CMakeLists.txt.
#include "common.h"

#include <string>

namespace {
std::string Isa() { return FUSED_KERNELS_ISA; }
int64_t NumThreads() { return fused::ThreadPool::Get().threads(); }
}  // namespace

TENSORPLUG_EXPORT(isa, Isa);
TENSORPLUG_EXPORT(num_threads, NumThreads);
