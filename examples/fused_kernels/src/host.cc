// The host library libfused_kernels.so: it embeds the kernels built once per CPU ISA
// (library_bin.S, written by CMake with tensorplug.library_bin) and exports what does not
// depend on the ISA. The loader picks the first variant this CPU runs.
#include <tensorplug/tensorplug.h>

#include <cstdint>

namespace {
// The tensorplug ABI this binary was compiled for.
int64_t BuiltForAbi() { return TENSORPLUG_ABI_VERSION; }
}  // namespace

TENSORPLUG_EXPORT(built_for_abi, BuiltForAbi);
