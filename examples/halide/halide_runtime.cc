// The Halide runtime for tensorplug: a runtime library (tensorplug.load_library) that
//
// - holds Halide's runtime (linked in: the object hl.compile_standalone_runtime writes) and
//   with it Halide's state: its thread pool, its error handler;
// - registers the module kind `halide` (the global function `load_from_bytes.halide`): a
//   kernel library embeds its Halide pipelines as one such module (`__tensorplug__library_bin`),
//   and loading the library loads them through this function;
// - registers `halide.set_num_threads(n) -> previous`, the one piece of runtime state a
//   caller may want to set.
//
// A `halide` payload: the pipeline names joined by ',' and a '\n', then a shared object
// built from the pipelines' objects (compiled with the target feature no_runtime: their
// references to the runtime resolve against this library, which is loaded with global
// symbols). Each pipeline `<name>` is called through `<name>_argv` and described by
// `<name>_metadata`, from which its signature comes: input buffers are `view`, output
// buffers `mview` (destination passing), scalars `int`, `float` or `bool`.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <HalideRuntime.h>
#include <tensorplug/generated.h>

namespace {

constexpr int kMaxArguments = 16;
constexpr int kMaxDimensions = 8;

// The message of the last Halide error on this thread (Halide reports through a handler).
thread_local std::string t_halide_error;

void KeepHalideError(void*, const char* message) { t_halide_error = message; }

struct Pipeline {
  std::string name;
  int (*argv)(void**);
  const halide_filter_metadata_t* metadata;
};

bool IsBuffer(const halide_filter_argument_t& a) { return a.kind != halide_argument_kind_input_scalar; }

// Halide's uint1 is a bool; its other types have DLPack's codes (int, uint, float).
DLDataType DLTypeOf(halide_type_t t) {
  return t.code == halide_type_uint && t.bits == 1 ? TPGenDType(kDLBool, 8) : TPGenDType(uint8_t(t.code), t.bits);
}

// A halide error code whose cause is the arguments (ValueError), not the pipeline.
bool IsArgumentError(int code) {
  switch (code) {
    case halide_error_code_bad_type:
    case halide_error_code_access_out_of_bounds:
    case halide_error_code_constraint_violated:
    case halide_error_code_param_too_small:
    case halide_error_code_param_too_large:
    case halide_error_code_buffer_argument_is_null:
    case halide_error_code_unaligned_host_ptr:
    case halide_error_code_buffer_extents_negative:
    case halide_error_code_bad_dimensions:
      return true;
    default:
      return false;
  }
}

int CallPipeline(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  const auto* p = static_cast<const Pipeline*>(self);
  const halide_filter_metadata_t* md = p->metadata;
  halide_buffer_t buffers[kMaxArguments];
  halide_dimension_t dims[kMaxArguments][kMaxDimensions];
  union Scalar {
    int8_t i8; int16_t i16; int32_t i32; int64_t i64;
    uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
    float f32; double f64; bool b;
  } scalars[kMaxArguments];
  void* argv[kMaxArguments];
  TPGenCall call;
  TPGenBegin(&call, p->name.c_str(), args, nargs, result);
  TPGenArity(&call, md->num_arguments);
  for (int32_t i = 0; i < md->num_arguments && !call.failed; ++i) {
    const halide_filter_argument_t& a = md->arguments[i];
    if (IsBuffer(a)) {
      unsigned flags = a.kind == halide_argument_kind_output_buffer ? TPGEN_WRITTEN : 0u;
      DLTensor* t = TPGenTensor(&call, i, a.name, DLTypeOf(a.type), a.dimensions, kDLCPU, flags);
      if (t == nullptr) break;
      halide_buffer_t& b = buffers[i];
      std::memset(&b, 0, sizeof b);
      b.host = static_cast<uint8_t*>(TPGenData(t));
      b.type = a.type;
      b.dimensions = t->ndim;
      b.dim = dims[i];
      int64_t step = 1;
      for (int32_t d = 0; d < t->ndim; ++d) {  // Halide's dimension 0 is the innermost
        int32_t axis = t->ndim - 1 - d;
        int64_t extent = t->shape[axis];
        int64_t stride = t->strides ? t->strides[axis] : step;
        step *= extent;
        if (extent > INT32_MAX || stride > INT32_MAX || stride < INT32_MIN) {
          char message[160];
          std::snprintf(message, sizeof message, "argument '%s': dimension %d (%lld elements, stride %lld) is beyond "
                        "Halide's 32-bit extents and strides", a.name, int(axis), (long long)extent, (long long)stride);
          TPGenFail(&call, "ValueError", message);
          break;
        }
        dims[i][d] = halide_dimension_t{0, int32_t(extent), int32_t(stride), 0};
      }
      argv[i] = &b;
      continue;
    }
    Scalar& s = scalars[i];
    if (a.type.code == halide_type_float) {
      double v = TPGenFloat(&call, i, a.name);
      if (a.type.bits == 32) s.f32 = float(v); else s.f64 = v;
    } else if (a.type.code == halide_type_uint && a.type.bits == 1) {
      s.b = TPGenBool(&call, i, a.name) != 0;
    } else {
      int64_t v = TPGenInt(&call, i, a.name);
      bool is_signed = a.type.code == halide_type_int;
      if (!call.failed && a.type.bits < 64) {  // refuse what the parameter's type cannot hold
        int64_t low = is_signed ? -(int64_t(1) << (a.type.bits - 1)) : 0;
        int64_t high = is_signed ? (int64_t(1) << (a.type.bits - 1)) - 1 : (int64_t(1) << a.type.bits) - 1;
        if (v < low || v > high) {
          char message[160];
          std::snprintf(message, sizeof message, "argument '%s': %lld is out of range for %s%d", a.name, (long long)v,
                        is_signed ? "int" : "uint", int(a.type.bits));
          TPGenFail(&call, "OverflowError", message);
          break;
        }
      }
      switch (a.type.bits) {
        case 8: if (is_signed) s.i8 = int8_t(v); else s.u8 = uint8_t(v); break;
        case 16: if (is_signed) s.i16 = int16_t(v); else s.u16 = uint16_t(v); break;
        case 32: if (is_signed) s.i32 = int32_t(v); else s.u32 = uint32_t(v); break;
        default: if (is_signed) s.i64 = v; else s.u64 = uint64_t(v);
      }
    }
    argv[i] = &s;
  }
  if (call.failed) return TPGenFinish(&call);
  t_halide_error.clear();
  int code = p->argv(argv);
  if (code != 0) {
    std::string message = "Halide error " + std::to_string(code) + ": " + t_halide_error;
    while (!message.empty() && message.back() == '\n') message.pop_back();
    TPGenFail(&call, IsArgumentError(code) ? "ValueError" : "RuntimeError", message.c_str());
  }
  return TPGenFinish(&call);
}

std::string SignatureOf(const halide_filter_metadata_t* md) {
  std::string text;
  for (int32_t i = 0; i < md->num_arguments; ++i) {
    const halide_filter_argument_t& a = md->arguments[i];
    const char* kind = a.kind == halide_argument_kind_output_buffer ? "mview"
                       : a.kind == halide_argument_kind_input_buffer ? "view"
                       : a.type.code == halide_type_float ? "float"
                       : a.type.code == halide_type_uint && a.type.bits == 1 ? "bool" : "int";
    text += (i ? ";" : "") + std::string(a.name) + ":" + kind;
  }
  return text + "->void";
}

// A loaded payload: its pipelines by name (one reference each). Kept for the process.
struct HalideModule {
  std::map<std::string, TPFunctionHandle> functions;
};

// lookup(name) -> the function or None; lookup() -> the tuple of names.
int Lookup(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  const auto* module = static_cast<const HalideModule*>(self);
  result->type_index = kTPNone;
  if (nargs == 0) {
    TPTuple* names = TPTupleCreate(int32_t(module->functions.size()));
    if (names == nullptr) return TPErrorSet("MemoryError", "halide lookup: out of memory"), -1;
    int32_t i = 0;
    for (const auto& entry : module->functions) {
      names->items[i].type_index = kTPStr;
      names->items[i++].v_str = TPStringCreate(entry.first.data(), entry.first.size());
    }
    result->type_index = kTPTuple;
    result->v_tuple = names;
    return 0;
  }
  const char* name = nargs == 1 && args[0].type_index == kTPRawStr ? args[0].v_c_str
                     : nargs == 1 && args[0].type_index == kTPStr ? args[0].v_str->data : nullptr;
  if (name == nullptr) {
    TPErrorSet("TypeError", "halide lookup: takes a function name (str), or nothing to list the names");
    return -1;
  }
  auto found = module->functions.find(name);
  if (found != module->functions.end()) {
    TPFunctionRetain(found->second);
    result->type_index = kTPFunction;
    result->v_func = found->second;
  }
  return 0;
}

int Fail(const std::string& message) {
  TPErrorSet("ValueError", ("load_from_bytes.halide: " + message).c_str());
  return -1;
}

// Payloads already loaded, by address: a library loaded twice maps its pipelines once.
std::mutex g_mutex;
std::map<const void*, HalideModule*> g_loaded;

// load_from_bytes.halide(data, size, host_path) -> lookup function
int LoadFromBytes(void*, const TPAny* args, int32_t nargs, TPAny* result) {
  result->type_index = kTPNone;
  if (nargs != 3 || args[0].type_index != kTPOpaquePtr || args[1].type_index != kTPInt) {
    TPErrorSet("TypeError", "load_from_bytes.halide(data, size, host_path): expected a pointer, a size and a str");
    return -1;
  }
  const char* data = static_cast<const char*>(args[0].v_ptr);
  size_t size = size_t(args[1].v_int64);
  std::lock_guard<std::mutex> lock(g_mutex);
  HalideModule*& module = g_loaded[data];
  if (module == nullptr) {
    const char* newline = static_cast<const char*>(std::memchr(data, '\n', size));
    if (newline == nullptr) return g_loaded.erase(data), Fail("the payload has no line of pipeline names");
    std::string names(data, newline);
    const char* so = newline + 1;
    size_t so_size = size - size_t(so - data);
    // The shared object is opened from memory: nothing is written to disk; the descriptor
    // stays open for the life of the process, as the mapping does.
    int fd = memfd_create("tensorplug-halide", MFD_CLOEXEC);
    if (fd < 0 || write(fd, so, so_size) != ssize_t(so_size)) {
      if (fd >= 0) close(fd);
      g_loaded.erase(data);
      return Fail("cannot write the pipelines to a memory file");
    }
    std::string path = "/proc/self/fd/" + std::to_string(fd);
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      std::string why = dlerror();
      close(fd);
      g_loaded.erase(data);
      return Fail("cannot load the pipelines (is the Halide runtime library loaded with global symbols?): " + why);
    }
    auto* made = new HalideModule;
    size_t start = 0;
    while (start < names.size()) {
      size_t end = names.find(',', start);
      if (end == std::string::npos) end = names.size();
      std::string name = names.substr(start, end - start);
      start = end + 1;
      auto argv = reinterpret_cast<int (*)(void**)>(dlsym(library, (name + "_argv").c_str()));
      auto meta = reinterpret_cast<const halide_filter_metadata_t* (*)()>(dlsym(library, (name + "_metadata").c_str()));
      if (argv == nullptr || meta == nullptr) {
        g_loaded.erase(data);
        return Fail("the pipelines have no '" + name + "_argv' or '" + name + "_metadata'");
      }
      const halide_filter_metadata_t* md = meta();
      for (int32_t i = 0; i < md->num_arguments; ++i) {
        if (md->arguments[i].dimensions > kMaxDimensions || md->num_arguments > kMaxArguments) {
          g_loaded.erase(data);
          return Fail("pipeline '" + name + "' has more than 16 arguments or 8 dimensions");
        }
      }
      TPFunctionHandle f = nullptr;
      if (TPFunctionCreate(new Pipeline{name, argv, md}, CallPipeline, nullptr, SignatureOf(md).c_str(), &f) != 0) {
        g_loaded.erase(data);
        return -1;
      }
      made->functions[name] = f;
    }
    module = made;
  }
  TPFunctionHandle lookup = nullptr;
  if (TPFunctionCreate(module, Lookup, nullptr, nullptr, &lookup) != 0) return -1;
  result->type_index = kTPFunction;
  result->v_func = lookup;
  return 0;
}

// halide.set_num_threads(n) -> the previous number of threads of Halide's thread pool.
int SetNumThreads(void*, const TPAny* args, int32_t nargs, TPAny* result) {
  if (nargs != 1 || args[0].type_index != kTPInt || args[0].v_int64 < 0 || args[0].v_int64 > 4096) {
    TPErrorSet("ValueError", "halide.set_num_threads(n): expected a number of threads from 0 (Halide's default) "
                             "to 4096");
    return -1;
  }
  result->type_index = kTPInt;
  result->v_int64 = halide_set_num_threads(int(args[0].v_int64));
  return 0;
}

bool Register(const char* name, TPPackedFunc call, const char* signature) {
  TPFunctionHandle f = nullptr;
  if (TPFunctionCreate(nullptr, call, nullptr, signature, &f) != 0) return false;
  int rc = TPGlobalFuncRegister(name, f, 1);
  TPFunctionRelease(f);
  return rc == 0;
}

const bool g_registered = (halide_set_error_handler(KeepHalideError),
                           Register("load_from_bytes.halide", LoadFromBytes, nullptr),
                           Register("halide.set_num_threads", SetNumThreads, "n:int->int"));

}  // namespace
