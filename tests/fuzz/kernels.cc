// The fuzzer's kernel library: one function per parameter kind of the exported signature
// (view, tensor, int, float, bool, str, device, dtype, func, any, handle and their `?`
// optional forms), functions returning every result kind, and hand-made results with the odd but
// legal layouts a plain-C kernel can return (NULL strides, > 64 dims, negative strides,
// zero size, byte offsets, foreign devices and dtypes, a NULL deleter).
//
// Every kernel is honest: it reads only memory its arguments describe, and the tensors it
// makes own real memory for the elements they describe, so any crash is the binding's.
#include <tensorplug/tensorplug.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace tp = tensorplug;

// The object behind the fuzzer's typed handles: a handle of another type reaching
// handle_typed would show as a wrong magic (the process aborts: a crash to report).
namespace fuzz {
struct Box {
  uint64_t magic;
  int64_t value;
};
constexpr uint64_t kBoxMagic = 0x5eed0b0c5eed0b0cull;
}  // namespace fuzz
TENSORPLUG_HANDLE_TYPE(fuzz::Box, "fuzz.Box");

namespace {

bool IsHost(DLDevice d) {
  return d.device_type == kDLCPU || d.device_type == kDLCUDAHost ||
         d.device_type == kDLCUDAManaged || d.device_type == kDLROCMHost;
}

int64_t ElementBytes(DLDataType t) { return (int64_t(t.bits) * int64_t(t.lanes) + 7) / 8; }

// Metadata only: ndim, shape, stride(i) (which also covers NULL strides), dtype, device.
std::string Meta(const tp::TensorView& x) {
  std::ostringstream os;
  os << x.dtype() << ' ' << x.device() << " ndim=" << x.dim() << " ro=" << x.is_read_only()
     << " shape=" << x.shape() << " strides=[";
  for (int32_t i = 0; i < x.dim(); ++i) os << (i ? "," : "") << x.stride(i);
  os << "] off=" << x.dltensor()->byte_offset;
  return os.str();
}

// Reads every element's bytes of a host tensor (any strides): a sanitizer sees any view
// that describes memory it does not own.
int64_t Touch(const tp::TensorView& x) {
  if (!IsHost(x.device()) || x.numel() > (1 << 20)) return -1;
  const int64_t item = ElementBytes(x.dtype());
  if (item <= 0 || item > 64) return -1;
  const unsigned char* base = static_cast<const unsigned char*>(x.data_ptr());
  int64_t sum = 0;
  tp::ForEachOffset(x, [&](int64_t offset) {
    for (int64_t b = 0; b < item; ++b) sum += base[offset * item + b];
  });
  return sum;
}

std::string DescribeAny(const TPAny& v) {
  std::ostringstream os;
  os << tp::detail::TypeIndexName(v);
  switch (v.type_index) {
    case kTPInt: case kTPBool: os << '=' << v.v_int64; break;
    case kTPFloat: os << '=' << v.v_float64; break;
    case kTPRawStr: if (v.v_c_str) os << '=' << std::strlen(v.v_c_str); break;
    case kTPStr: if (v.v_str) os << '=' << v.v_str->size; break;
    case kTPDevice: os << '=' << v.v_device; break;
    case kTPDataType: os << '=' << v.v_dtype; break;
    case kTPDLTensorPtr:
      if (v.v_dltensor) os << ' ' << Meta(tp::TensorView(v.v_dltensor, v.flags & TP_ANY_FLAG_READ_ONLY));
      break;
    case kTPTensor:
      if (v.v_tensor) os << ' ' << Meta(tp::TensorView(&v.v_tensor->dl_tensor, true));
      break;
    case kTPTuple: if (v.v_tuple) os << '[' << v.v_tuple->size << ']'; break;
    default: break;
  }
  return os.str();
}

// ------------------------------------------------------------ one kernel per kind ----
std::string ViewMeta(tp::TensorView x) { return Meta(x); }
int64_t ViewTouch(tp::TensorView x) { return Touch(x); }
// Writes every byte of a written view back unchanged: a write access per element, which
// faults on memory that is not writable (read-only tensors must be refused before the call).
int64_t MViewTouch(tp::MutableView x) {
  if (!IsHost(x.device()) || x.numel() > (1 << 20)) return -1;
  const int64_t item = ElementBytes(x.dtype());
  if (item <= 0 || item > 64) return -1;
  volatile unsigned char* base = static_cast<unsigned char*>(x.data_ptr());
  int64_t sum = 0;
  tp::ForEachOffset(x, [&](int64_t offset) {
    for (int64_t b = 0; b < item; ++b) {
      const unsigned char byte = base[offset * item + b];
      base[offset * item + b] = byte;
      sum += byte;
    }
  });
  return sum;
}
tp::Tensor TensorEcho(tp::Tensor x) { return x; }
std::string TensorMeta(tp::Tensor x) { return Meta(x.view()); }
int64_t IntI64(int64_t v) { return v; }
int64_t IntI8(int8_t v) { return v; }
uint32_t IntU32(uint32_t v) { return v; }
uint64_t IntU64(uint64_t v) { return v; }  // > int64 max must raise OverflowError on return
double FloatF64(double v) { return v; }
float FloatF32(float v) { return v; }
bool BoolB(bool v) { return !v; }
std::string StrS(std::string v) { return v + "!"; }
int64_t StrSv(std::string_view v) { return static_cast<int64_t>(v.size()); }
const char* StrC(const char* v) { return v; }
DLDevice DeviceD(DLDevice d) { return d; }
DLDataType DTypeT(DLDataType t) { return t; }
std::string AnyA(TPAny v) { return DescribeAny(v); }

// Calls f with each argument kind; the callback may raise, return anything, or keep its view.
tp::Any FuncCall(tp::Function f, int64_t which) {
  switch (which % 6) {
    case 0: return f();
    case 1: return f(which);
    case 2: return f(0.5, std::string("s"), true);
    case 3: return f(tp::kCPU, tp::kFloat32);
    case 4: return f(f);
    default: return f(nullptr);
  }
}
tp::Any FuncView(tp::Function f, tp::TensorView x) { return f(x); }
tp::Any FuncTensor(tp::Function f, tp::Tensor x) { return f(x); }

std::string OptAll(std::optional<tp::TensorView> x, std::optional<tp::Tensor> t,
                   std::optional<int64_t> i, std::optional<double> d, std::optional<bool> b,
                   std::optional<std::string> s, std::optional<DLDevice> dev,
                   std::optional<DLDataType> dt, std::optional<tp::Function> f) {
  std::ostringstream os;
  os << (x ? Meta(*x) : "-") << '|' << (t ? Meta(t->view()) : "-") << '|' << (i ? *i : 0) << '|'
     << (d ? *d : 0) << '|' << (b ? *b : 0) << '|' << (s ? s->size() : 0) << '|';
  if (dev) os << *dev;
  if (dt) os << *dt;
  if (f && *f) os << "|f";
  return os.str();
}

// Every kind at once, in an order that mixes lent and owned arguments.
std::tuple<std::string, int64_t, double, bool> Mixed(tp::TensorView a, tp::Tensor b, int64_t n,
                                                     double x, bool flag, std::string s, DLDevice d,
                                                     DLDataType t, TPAny any) {
  return {Meta(a) + Meta(b.view()) + s + DescribeAny(any), n, x, flag && d.device_type == kDLCPU &&
                                                                     t.bits != 0};
}

// ------------------------------------------------------------------- results ----
// out = FromEnvAlloc(shape, dtype, device), then every byte it claims is written (up to a
// bound), so an allocator that hands back less than it promised is caught.
tp::Tensor Alloc(int64_t ndim, int64_t extent, DLDataType dtype, DLDevice device) {
  TENSORPLUG_CHECK(ndim >= 0 && ndim <= 4096, ValueError) << "alloc: ndim " << ndim;
  std::vector<int64_t> shape(static_cast<size_t>(ndim), 1);
  if (ndim > 0) shape[0] = extent;
  tp::Tensor out = tp::Tensor::FromEnvAlloc(shape, dtype, device);
  if (IsHost(out.device())) {
    __int128 bytes = ElementBytes(out.dtype());
    for (int64_t e : out.shape()) bytes *= e;
    const int64_t n = bytes > (int64_t(1) << 26) ? (int64_t(1) << 26) : int64_t(bytes);
    if (n > 0) std::memset(out.mutable_data_ptr(), 0x5a, static_cast<size_t>(n));
  }
  return out;
}

// A hand-made result, as a plain-C kernel builds it. `layout`: 0 NULL strides, 1 compact
// strides, 2 negative strides, 3 zero size, 4 byte offset, 5 read-only, 6 NULL deleter,
// 7 unsupported DLPack major version, 8 stride 0 (broadcast).
struct Block {
  DLManagedTensorVersioned managed;
  std::vector<int64_t> shape, strides;
  std::vector<unsigned char> data;
};

void DeleteBlock(DLManagedTensorVersioned* m) { delete static_cast<Block*>(m->manager_ctx); }

TPAny Raw(int64_t layout, int64_t ndim, DLDataType dtype, DLDevice device) {
  TENSORPLUG_CHECK(ndim >= 0 && ndim <= 4096, ValueError) << "raw: ndim " << ndim;
  auto* b = new Block();
  std::memset(&b->managed, 0, sizeof(b->managed));
  b->shape.assign(static_cast<size_t>(ndim), 1);
  if (ndim > 0) b->shape[0] = layout == 3 ? 0 : 3;
  b->strides.assign(static_cast<size_t>(ndim), 1);
  int64_t item = ElementBytes(dtype);
  if (item < 1) item = 1;
  b->data.assign(static_cast<size_t>(item * 3 + 16), 0);
  DLTensor& t = b->managed.dl_tensor;
  t.data = b->data.data();
  t.device = device;
  t.ndim = static_cast<int32_t>(ndim);
  t.dtype = dtype;
  t.shape = b->shape.data();
  t.strides = layout == 0 ? nullptr : b->strides.data();
  if (layout == 2 && ndim > 0) {
    b->strides[0] = -1;
    t.data = b->data.data() + 2 * item;  // element 0 is the last of the buffer
  }
  if (layout == 4) t.byte_offset = static_cast<uint64_t>(item);  // still in bounds: 3 + 1 items
  if (layout == 8 && ndim > 0) b->strides[0] = 0;
  b->managed.version.major = layout == 7 ? 99 : DLPACK_MAJOR_VERSION;
  b->managed.version.minor = DLPACK_MINOR_VERSION;
  b->managed.flags = layout == 5 ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  b->managed.manager_ctx = b;
  b->managed.deleter = layout == 6 ? nullptr : DeleteBlock;
  TPAny out = tp::detail::MakeNone();
  out.type_index = kTPTensor;
  out.v_tensor = &b->managed;
  return out;  // with a NULL deleter the block leaks, as its producer asked
}

// Every other result kind: `which` picks one.
tp::Any Result(int64_t which, tp::TensorView x) {
  switch (which % 10) {
    case 0: return tp::Any();
    case 1: return tp::Any(Raw(1, 2, tp::kFloat32, tp::kCPU));
    case 2: {
      auto f = tp::Function::FromTyped([](int64_t a) { return a * 2; }, "twice", {"a"});
      TPAny v = tp::detail::MakeNone();
      tp::TypeCaster<tp::Function>::PackResult(f, &v);
      return tp::Any(v);
    }
    case 3: {
      TPAny v = tp::detail::MakeNone();
      tp::TypeCaster<std::tuple<tp::Tensor, std::string, std::optional<int64_t>>>::PackResult(
          {tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device()), "x", std::nullopt}, &v);
      return tp::Any(v);
    }
    case 4: {  // a tuple holding a tuple and a NULL-strides tensor
      TPTuple* outer = TPTupleCreate(2);
      if (!outer) throw std::bad_alloc();
      outer->items[0] = Raw(0, 3, tp::kInt32, tp::kCPU);
      outer->items[1].type_index = kTPTuple;
      outer->items[1].v_tuple = TPTupleCreate(0);
      TPAny v = tp::detail::MakeNone();
      v.type_index = kTPTuple;
      v.v_tuple = outer;
      return tp::Any(v);
    }
    case 5: {
      TPAny v = tp::detail::MakeNone();
      tp::detail::PackString("\xff\xfe not utf-8", 13, &v);
      return tp::Any(v);
    }
    case 6: {
      TPAny v = tp::detail::MakeNone();
      v.type_index = 77;  // no such kind
      return tp::Any(v);
    }
    case 7: {
      TPAny v = tp::detail::MakeNone();
      v.type_index = kTPDataType;
      v.v_dtype = DLDataType{255, 0, 0};
      return tp::Any(v);
    }
    case 8: {
      TPAny v = tp::detail::MakeNone();
      v.type_index = kTPDevice;
      v.v_device = DLDevice{static_cast<DLDeviceType>(12345), -7};
      return tp::Any(v);
    }
    default: return tp::Any(Raw(1, 1, x.dtype(), x.device()));
  }
}

void Fail(int64_t kind, std::string message) {
  switch (kind % 4) {
    case 0: TENSORPLUG_THROW(ValueError) << message;
    case 1: throw std::bad_alloc();
    case 2: throw 42;  // not an exception type at all
    default: TPErrorSet("NoSuchKindError", message.c_str()); throw tp::Error("", message);
  }
}

// ------------------------------------------------------------------- handles ----
using BoxHandle = tp::Handle<fuzz::Box>;
int64_t g_static_state = 7;

void DeleteBox(fuzz::Box* box) {
  if (box->magic != fuzz::kBoxMagic) std::abort();  // deleted twice, or not a Box
  box->magic = 0;
  delete box;
}

// `which` picks: a typed owning handle, a void* to static state, an untyped owning handle
// (made through the C ABI), an undefined handle (None), a null void* (None).
tp::Any HandleMake(int64_t which) {
  TPAny v = tp::detail::MakeNone();
  switch (which % 5) {
    case 0:
      tp::TypeCaster<BoxHandle>::PackResult(BoxHandle(new fuzz::Box{fuzz::kBoxMagic, which}, DeleteBox), &v);
      break;
    case 1: tp::TypeCaster<void*>::PackResult(&g_static_state, &v); break;
    case 2: {
      TPHandleRef ref = nullptr;
      if (TPHandleCreate(new int64_t(which), nullptr, [](void* p, void*) { delete static_cast<int64_t*>(p); },
                         nullptr, &ref) != 0) {
        tp::detail::ThrowLastError();
      }
      v.type_index = kTPHandle;
      v.v_handle = ref;
      break;
    }
    case 3: tp::TypeCaster<BoxHandle>::PackResult(BoxHandle(), &v); break;
    default: tp::TypeCaster<void*>::PackResult(nullptr, &v); break;
  }
  return tp::Any(v);
}
int64_t HandleTyped(BoxHandle box) {
  if (box->magic != fuzz::kBoxMagic) std::abort();
  return box->value;
}
int64_t HandleVoid(void* ptr) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(ptr)); }
int64_t HandleOpt(std::optional<BoxHandle> box) { return box ? HandleTyped(*box) : -1; }

// A static keeps what it is given until exit: deleters then run during finalization.
TPAny g_kept = tp::detail::MakeNone();
void Keep(TPAny v) {
  if (v.type_index == kTPFunction) {
    TPFunctionRetain(v.v_func);
    TPAnyRelease(&g_kept);
    g_kept = v;
  } else if (v.type_index == kTPHandle) {
    TPHandleRetain(v.v_handle);
    TPAnyRelease(&g_kept);
    g_kept = v;
  }
}
struct ReleaseAtExit {
  ~ReleaseAtExit() { TPAnyRelease(&g_kept); }
} g_release_at_exit;

}  // namespace

TENSORPLUG_EXPORT(view_meta, ViewMeta, "x");
TENSORPLUG_EXPORT(view_touch, ViewTouch, "x");
TENSORPLUG_EXPORT(mview_touch, MViewTouch, "x");
TENSORPLUG_EXPORT(tensor_echo, TensorEcho, "x");
TENSORPLUG_EXPORT(tensor_meta, TensorMeta, "x");
TENSORPLUG_EXPORT(int_i64, IntI64, "v");
TENSORPLUG_EXPORT(int_i8, IntI8, "v");
TENSORPLUG_EXPORT(int_u32, IntU32, "v");
TENSORPLUG_EXPORT(int_u64, IntU64, "v");
TENSORPLUG_EXPORT(float_f64, FloatF64, "v");
TENSORPLUG_EXPORT(float_f32, FloatF32, "v");
TENSORPLUG_EXPORT(bool_b, BoolB, "v");
TENSORPLUG_EXPORT(str_s, StrS, "v");
TENSORPLUG_EXPORT(str_sv, StrSv, "v");
TENSORPLUG_EXPORT(str_c, StrC, "v");
TENSORPLUG_EXPORT(device_d, DeviceD, "v");
TENSORPLUG_EXPORT(dtype_t, DTypeT, "v");
TENSORPLUG_EXPORT(any_a, AnyA, "v");
TENSORPLUG_EXPORT(func_call, FuncCall, "f", "which");
TENSORPLUG_EXPORT(func_view, FuncView, "f", "x");
TENSORPLUG_EXPORT(func_tensor, FuncTensor, "f", "x");
TENSORPLUG_EXPORT(opt_all, OptAll, "x", "t", "i", "d", "b", "s", "dev", "dt", "f");
TENSORPLUG_EXPORT(mixed, Mixed, "a", "b", "n", "x", "flag", "s", "d", "t", "any");
TENSORPLUG_EXPORT(alloc, Alloc, "ndim", "extent", "dtype", "device");
TENSORPLUG_EXPORT(raw, Raw, "layout", "ndim", "dtype", "device");
TENSORPLUG_EXPORT(result, Result, "which", "x");
TENSORPLUG_EXPORT(fail, Fail, "kind", "message");
TENSORPLUG_EXPORT(keep, Keep, "v");
TENSORPLUG_EXPORT(handle_make, HandleMake, "which");
TENSORPLUG_EXPORT(handle_typed, HandleTyped, "box");
TENSORPLUG_EXPORT(handle_void, HandleVoid, "ptr");
TENSORPLUG_EXPORT(handle_opt, HandleOpt, "box");

// A function with no signature: every argument comes as its raw value (tensors as views).
extern "C" TP_EXPORT int __tensorplug_nosig(void*, const TPAny* args, int32_t nargs, TPAny* result) {
  int64_t n = 0;
  for (int32_t i = 0; i < nargs; ++i) n += static_cast<int64_t>(DescribeAny(args[i]).size());
  for (int32_t i = 0; i < nargs; ++i) {  // owning tensors are moved to the callee
    if (args[i].type_index == kTPTensor && args[i].v_tensor && args[i].v_tensor->deleter) {
      args[i].v_tensor->deleter(args[i].v_tensor);
    }
  }
  result->type_index = kTPInt;
  result->flags = 0;
  result->v_int64 = n;
  return 0;
}

// A C kernel that fails without recording an error.
extern "C" TP_EXPORT int __tensorplug_silent_failure(void*, const TPAny*, int32_t, TPAny* result) {
  result->type_index = kTPNone;
  return -1;
}
extern "C" TP_EXPORT const char* __tensorplugsig_silent_failure(void) { return "->void"; }
