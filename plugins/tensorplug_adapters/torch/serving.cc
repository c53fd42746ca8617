// The registration library of tensorplug ops for C++ processes without Python (issue 44):
// it reads the tensorplug record of an AOTInductor package (aoti.add_ops, version 3),
// loads the kernel libraries it names through tensorplug's C API (libtensorplug, no
// Python), and registers each op's schema, overloads and CPU kernel with torch's dispatcher,
// so torch::inductor::AOTIModelPackageLoader finds them. Compiled at run time against the
// headers of the torch in hand and tensorplug's public C headers only
// (tensorplug_adapters.torch.serving.build, cached per torch version).
//
// Each op's kernel runs the op's call plan (tensorplug/plan.h), the one the Python
// process's kernel (kernel.cc, in the plugin's Python extension module, which cannot be
// loaded here) runs too: the record holds the plan's parts as tensorplug.plans.create takes
// them, the output rule in its one compiled form (tensorplug.plans.compile_outputs), and
// the plan checks the written arguments, evaluates the rule and checks the results. What
// is this file's: torch's values read into the plan's arguments -- tensors (optional too;
// a contiguous= one passed as a compact copy where it is not), ints, floats, bools, int
// lists and tensor lists -- and results allocated through torch while the call runs; the
// CPU key only (no CUDA stream is bound, no Autograd kernel, no fake kernel: a package's
// proxy executor needs none).
//
// Over 500 lines: one idea, a package's ops in a process without Python, from the record
// read to the kernels registered; each step checks what the next one relies on.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/library.h>
#include <tensorplug/c_api.h>
#include <tensorplug/dtype.h>
#include <tensorplug/plan.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "serving.h"

#define TP_SERVING_EXPORT __attribute__((visibility("default")))

namespace {

constexpr int64_t kRecordVersion = 3;  // aoti.RECORD_VERSION
const char kRecords[] = "extra/tensorplug_ops_";

// ------------------------------------------------------------------ JSON (the record) ----
// The record is JSON written by Python's json module: objects, arrays, strings, integers,
// true/false/null. This reader takes that much (numbers as int64; a float is refused).

struct Json {
  enum Kind { kNull, kBool, kInt, kString, kArray, kObject } kind = kNull;
  bool b = false;
  int64_t i = 0;
  std::string s;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> fields;

  const Json* get(const std::string& key) const {
    for (const auto& f : fields)
      if (f.first == key) return &f.second;
    return nullptr;
  }
  const Json& at(const std::string& key, const std::string& where) const {
    const Json* v = get(key);
    TORCH_CHECK(v != nullptr, where, ": the record has no '", key, "'");
    return *v;
  }
};

class JsonReader {
 public:
  JsonReader(const std::string& text, std::string where) : p_(text.data()), end_(p_ + text.size()), where_(std::move(where)) {}

  Json Document() {
    Json v = Value();
    Space();
    Check(p_ == end_, "text after the value");
    return v;
  }

 private:
  void Check(bool ok, const char* what) { TORCH_CHECK(ok, where_, ": malformed JSON record: ", what); }
  void Space() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool Word(const char* w) {
    const size_t n = std::strlen(w);
    if (static_cast<size_t>(end_ - p_) >= n && std::memcmp(p_, w, n) == 0) {
      p_ += n;
      return true;
    }
    return false;
  }
  std::string String() {
    Check(p_ < end_ && *p_ == '"', "expected a string");
    ++p_;
    std::string out;
    while (true) {
      Check(p_ < end_, "an unterminated string");
      const char c = *p_++;
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      Check(p_ < end_, "an unterminated escape");
      const char e = *p_++;
      switch (e) {
        case '"': case '\\': case '/': out += e; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'u': {
          Check(end_ - p_ >= 4, "a short \\u escape");
          const unsigned code = std::stoul(std::string(p_, 4), nullptr, 16);
          p_ += 4;
          // Paths and names are ASCII in practice; other code points become UTF-8 (no surrogate pairs).
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code < 0x800) {
            out += static_cast<char>(0xC0 | (code >> 6));
            out += static_cast<char>(0x80 | (code & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (code >> 12));
            out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (code & 0x3F));
          }
          break;
        }
        default: Check(false, "an unknown escape");
      }
    }
  }
  Json Value() {
    Space();
    Check(p_ < end_, "the text ends early");
    Json v;
    if (*p_ == '{') {
      v.kind = Json::kObject;
      ++p_;
      Space();
      if (p_ < end_ && *p_ == '}') return ++p_, v;
      while (true) {
        Space();
        std::string key = String();
        Space();
        Check(p_ < end_ && *p_ == ':', "expected ':'");
        ++p_;
        v.fields.emplace_back(std::move(key), Value());
        Space();
        Check(p_ < end_, "an unterminated object");
        if (*p_ == ',') { ++p_; continue; }
        Check(*p_ == '}', "expected ',' or '}'");
        ++p_;
        return v;
      }
    }
    if (*p_ == '[') {
      v.kind = Json::kArray;
      ++p_;
      Space();
      if (p_ < end_ && *p_ == ']') return ++p_, v;
      while (true) {
        v.items.push_back(Value());
        Space();
        Check(p_ < end_, "an unterminated array");
        if (*p_ == ',') { ++p_; continue; }
        Check(*p_ == ']', "expected ',' or ']'");
        ++p_;
        return v;
      }
    }
    if (*p_ == '"') {
      v.kind = Json::kString;
      v.s = String();
      return v;
    }
    if (Word("true") || Word("false")) {
      v.kind = Json::kBool;
      v.b = p_[-1] == 'e' && p_[-2] == 'u';
      return v;
    }
    if (Word("null")) return v;
    const char* start = p_;
    if (p_ < end_ && *p_ == '-') ++p_;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    Check(p_ > start && (p_ == end_ || (*p_ != '.' && *p_ != 'e' && *p_ != 'E')), "expected an integer");
    v.kind = Json::kInt;
    v.i = std::stoll(std::string(start, p_));
    return v;
  }

  const char* p_;
  const char* end_;
  std::string where_;
};

// --------------------------------------------------------------------- dtypes ----

struct DtypePair {
  const char* name;  // tensorplug's dtype name (tensorplug.shapes.dtype_name)
  c10::ScalarType torch;
  DLDataType dl;
};

const DtypePair kDtypes[] = {
    {"float32", c10::ScalarType::Float, {kDLFloat, 32, 1}},
    {"float64", c10::ScalarType::Double, {kDLFloat, 64, 1}},
    {"float16", c10::ScalarType::Half, {kDLFloat, 16, 1}},
    {"bfloat16", c10::ScalarType::BFloat16, {kDLBfloat, 16, 1}},
    {"int8", c10::ScalarType::Char, {kDLInt, 8, 1}},
    {"int16", c10::ScalarType::Short, {kDLInt, 16, 1}},
    {"int32", c10::ScalarType::Int, {kDLInt, 32, 1}},
    {"int64", c10::ScalarType::Long, {kDLInt, 64, 1}},
    {"uint8", c10::ScalarType::Byte, {kDLUInt, 8, 1}},
    {"bool", c10::ScalarType::Bool, {kDLBool, 8, 1}},
    {"complex64", c10::ScalarType::ComplexFloat, {kDLComplex, 64, 1}},
    {"complex128", c10::ScalarType::ComplexDouble, {kDLComplex, 128, 1}},
};

const DtypePair* ByTorch(c10::ScalarType t) {
  for (const auto& d : kDtypes)
    if (d.torch == t) return &d;
  return nullptr;
}
const DtypePair* ByDL(DLDataType t) {
  for (const auto& d : kDtypes)
    if (d.dl.code == t.code && d.dl.bits == t.bits && d.dl.lanes == t.lanes) return &d;
  return nullptr;
}

// ------------------------------------------------------------------ allocation ----
// The allocator bound while a kernel runs: results are torch's memory, wrapped in a
// DLManagedTensorVersioned that keeps the at::Tensor; the kernel's returned tensor is
// unwrapped back into that at::Tensor (no copy).

struct Allocated {
  DLManagedTensorVersioned managed;
  at::Tensor tensor;
};

void DeleteAllocated(DLManagedTensorVersioned* self) { delete static_cast<Allocated*>(self->manager_ctx); }

int Allocate(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
             void (*set_error)(void* error_ctx, const char* kind, const char* message)) {
  try {
    const DtypePair* dtype = ByDL(prototype->dtype);
    TORCH_CHECK(dtype != nullptr, "no torch dtype for DLPack type code ", int(prototype->dtype.code), " bits ",
                int(prototype->dtype.bits));
    TORCH_CHECK(prototype->device.device_type == kDLCPU, "the registration library allocates on the CPU only, "
                "the kernel asked for device type ", int(prototype->device.device_type));
    const c10::IntArrayRef sizes(prototype->shape, prototype->ndim);
    const auto options = at::TensorOptions().dtype(dtype->torch).device(c10::kCPU);
    auto holder = std::make_unique<Allocated>();
    holder->tensor = prototype->strides == nullptr
                         ? at::empty(sizes, options)
                         : at::empty_strided(sizes, c10::IntArrayRef(prototype->strides, prototype->ndim), options);
    const at::Tensor& t = holder->tensor;
    DLManagedTensorVersioned& m = holder->managed;
    m.version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    m.flags = 0;
    m.deleter = DeleteAllocated;
    m.dl_tensor.data = t.data_ptr();
    m.dl_tensor.device = {kDLCPU, 0};
    m.dl_tensor.ndim = static_cast<int32_t>(t.dim());
    m.dl_tensor.dtype = dtype->dl;
    m.dl_tensor.shape = const_cast<int64_t*>(t.sizes().data());
    m.dl_tensor.strides = const_cast<int64_t*>(t.strides().data());
    m.dl_tensor.byte_offset = 0;
    m.manager_ctx = holder.get();
    *out = &holder.release()->managed;
    return 0;
  } catch (const c10::Error& e) {
    set_error(error_ctx, "RuntimeError", e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    set_error(error_ctx, "MemoryError", "torch could not allocate the result");
  } catch (const std::exception& e) {
    set_error(error_ctx, "RuntimeError", e.what());
  }
  return -1;
}

// A kernel's result as an at::Tensor: ours unwrapped, any other one (a kernel that
// allocated without the env allocator) viewed with its deleter kept.
at::Tensor ToTorch(DLManagedTensorVersioned* m, const std::string& op) {
  if (m->deleter == DeleteAllocated) {
    auto* holder = static_cast<Allocated*>(m->manager_ctx);
    at::Tensor t = std::move(holder->tensor);
    delete holder;
    return t;
  }
  const DLTensor& d = m->dl_tensor;
  const DtypePair* dtype = ByDL(d.dtype);
  if (dtype == nullptr || d.device.device_type != kDLCPU) {
    if (m->deleter) m->deleter(m);
    TORCH_CHECK(false, op, "(): the kernel returned a tensor of a dtype or device torch cannot take here");
  }
  std::vector<int64_t> sizes(d.shape, d.shape + d.ndim);
  auto options = at::TensorOptions().dtype(dtype->torch).device(c10::kCPU);
  void* data = static_cast<char*>(d.data) + d.byte_offset;
  auto deleter = [m](void*) {
    if (m->deleter) m->deleter(m);
  };
  if (d.strides == nullptr) return at::from_blob(data, sizes, deleter, options);
  return at::from_blob(data, sizes, std::vector<int64_t>(d.strides, d.strides + d.ndim), deleter, options);
}

// ------------------------------------------------------------------------ plan ----

struct Param {
  std::string name;
  std::string kind;  // the signature kind ("view", "mview", "int", ...), compared with the function's
  int32_t code;      // its TPParamKind (tensorplug.plans.PARAM_KINDS)
  bool optional;
  bool written;
  bool contiguous;  // declared contiguous=: a non-compact tensor is passed as a compact copy
};

struct Op {
  std::string name;  // ns::name
  std::string library;
  std::string function;
  TPFunctionHandle fn = nullptr;
  std::vector<Param> params;
  int32_t n_outputs = 0;
  TPPlanHandle plan = nullptr;  // one reference, never released: torch may call the kernel until the process ends
};

// The plan's error as a c10::Error: "<op>(): <kind>: <what>" for the plan's "<op>(): <what>"
// (an argument, the rule, the function's own error), its message as it is otherwise ("op
// '<op>' returned ...").
[[noreturn]] void ThrowPlanError(const Op& op) {
  const char* kind = "RuntimeError";
  const char* message = "unknown error";
  TPErrorGet(&kind, &message);
  std::string text = message;
  const std::string prefix = op.name + "(): ";
  if (text.compare(0, prefix.size(), prefix) == 0) text = prefix + kind + ": " + text.substr(prefix.size());
  TPErrorClear();
  TORCH_CHECK(false, text);
}

class Kernel final : public c10::OperatorKernel {
 public:
  explicit Kernel(std::shared_ptr<const Op> op) : op_(std::move(op)) {}

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const Op& op = *op_;
    const size_t n = op.params.size();
    TORCH_CHECK(stack->size() >= n, op.name, "(): torch passed ", stack->size(), " arguments, the op takes ", n);
    const c10::IValue* args = stack->data() + (stack->size() - n);
    // What the arguments borrow for the call: views of the tensors (a list's items after
    // the plain tensors'), the tensors themselves (compact copies of contiguous= ones, a
    // list's items), int lists' values and the lists.
    size_t n_items = 0, n_ints = 0;
    for (size_t i = 0; i < n; ++i) {
      if (args[i].isTensorList()) n_items += args[i].toTensorList().size();
      if (args[i].isIntList()) n_ints += args[i].toIntList().size();
    }
    std::vector<DLTensor> views(n + n_items);
    std::vector<at::Tensor> tensors;
    tensors.reserve(n + n_items);
    std::vector<TPAny> items(n_items);
    std::vector<int64_t> ints(n_ints);
    std::vector<TPArray> arrays(n);
    std::vector<TPIntArray> int_arrays(n);
    std::vector<TPAny> packed(n);
    std::vector<const at::Tensor*> written;  // version counters bumped before the call
    size_t items_used = 0, ints_used = 0;
    for (size_t i = 0; i < n; ++i) {
      const Param& p = op.params[i];
      const c10::IValue& v = args[i];
      TPAny& a = packed[i];
      a = TPAny{};
      a.type_index = kTPNone;
      if (v.isNone() && p.optional) continue;
      if (p.code == kTPParamView && v.isTensor()) {
        const at::Tensor& t = View(op, p, v.toTensor(), "", &views[i], &tensors);
        if (p.written) written.push_back(&t);
        a.type_index = kTPDLTensorPtr;
        a.v_dltensor = &views[i];
      } else if (p.code == kTPParamInt && v.isInt()) {
        a.type_index = kTPInt;
        a.v_int64 = v.toInt();
      } else if (p.code == kTPParamFloat && v.isDouble()) {
        a.type_index = kTPFloat;
        a.v_float64 = v.toDouble();
      } else if (p.code == kTPParamBool && v.isBool()) {
        a.type_index = kTPBool;
        a.v_int64 = v.toBool() ? 1 : 0;
      } else if (p.code == kTPParamInts && v.isIntList()) {
        const c10::List<int64_t> list = v.toIntList();
        int64_t* data = ints.data() + ints_used;
        for (size_t j = 0; j < list.size(); ++j) data[j] = list.get(j);
        ints_used += list.size();
        int_arrays[i] = TPIntArray{static_cast<int64_t>(list.size()), data};
        a.type_index = kTPIntArray;
        a.v_int_array = &int_arrays[i];
      } else if (p.code == kTPParamViews && v.isTensorList()) {
        const c10::List<at::Tensor> list = v.toTensorList();
        TPAny* list_items = items.data() + items_used;
        for (size_t j = 0; j < list.size(); ++j) {
          DLTensor& view = views[n + items_used + j];
          const at::Tensor& t = View(op, p, list.get(j), " item " + std::to_string(j), &view, &tensors);
          if (p.written) written.push_back(&t);
          list_items[j] = TPAny{};
          list_items[j].type_index = kTPDLTensorPtr;
          list_items[j].v_dltensor = &view;
        }
        arrays[i] = TPArray{static_cast<int64_t>(list.size()), list_items};
        items_used += list.size();
        a.type_index = kTPArray;
        a.v_array = &arrays[i];
      } else {
        TORCH_CHECK(false, op.name, "() argument '", p.name, "': expected ", KindName(p.code), ", got a ",
                    v.tagKind());
      }
    }
    // The plan checks the arguments (written ones that overlap) and evaluates the output rule.
    const DLDevice cpu{kDLCPU, 0};
    std::vector<TPTensorSpec> expected(std::max<int32_t>(op.n_outputs, 1));
    if (TPPlanPrepare(op.plan, packed.data(), cpu, expected.data()) != 0) ThrowPlanError(op);
    // Every tensor the kernel writes has its version counter bumped, as torch's own in-place ops do.
    for (const at::Tensor* t : written)
      if (!t->is_inference()) t->unsafeGetTensorImpl()->bump_version();
    // Results allocate through torch for the call; the plan checks them against the rule.
    TPAny result = TPAny{};
    const TPPlanBinding binding{cpu, nullptr, Allocate, nullptr};
    if (TPPlanInvoke(op.plan, packed.data(), &binding, expected.data(), &result) != 0) ThrowPlanError(op);
    std::vector<at::Tensor> outputs = Results(op, &result);
    torch::jit::drop(*stack, n);
    for (auto& t : outputs) stack->emplace_back(std::move(t));
  }

 private:
  static const char* KindName(int32_t code) {
    switch (code) {
      case kTPParamView: return "a Tensor";
      case kTPParamInt: return "an int";
      case kTPParamFloat: return "a float";
      case kTPParamBool: return "a bool";
      case kTPParamInts: return "a list of ints";
      default: return "a list of Tensors";
    }
  }

  // `given` as a DLTensor view at `d` (a compact copy, kept in `tensors`, for a
  // contiguous= parameter); the tensor viewed.
  static const at::Tensor& View(const Op& op, const Param& p, const at::Tensor& given, const std::string& item,
                                DLTensor* d, std::vector<at::Tensor>* tensors) {
    const at::Tensor& t =
        tensors->emplace_back(p.contiguous && !given.is_contiguous() ? given.contiguous() : given);
    const DtypePair* dtype = ByTorch(t.scalar_type());
    TORCH_CHECK(dtype != nullptr, op.name, "() argument '", p.name, "'", item,
                ": expected a tensor of a DLPack dtype, got ", t.scalar_type());
    TORCH_CHECK(t.device().is_cpu(), op.name, "() argument '", p.name, "'", item,
                ": expected a CPU tensor (the registration library serves the CPU), got one on ", t.device());
    d->data = t.data_ptr();
    d->device = {kDLCPU, 0};
    d->ndim = static_cast<int32_t>(t.dim());
    d->dtype = dtype->dl;
    d->shape = const_cast<int64_t*>(t.sizes().data());
    d->strides = const_cast<int64_t*>(t.strides().data());
    d->byte_offset = 0;
    return t;
  }

  // The kernel's result (kTPNone, a tensor, or a tuple of as many tensors as the plan
  // declares: the plan checked it) as torch tensors; the TPAny is released.
  static std::vector<at::Tensor> Results(const Op& op, TPAny* result) {
    std::vector<at::Tensor> out;
    TPAny* results = result->type_index == kTPTuple ? result->v_tuple->items : result;
    try {
      for (int32_t k = 0; k < op.n_outputs; ++k) {
        DLManagedTensorVersioned* m = results[k].v_tensor;
        results[k].type_index = kTPNone;  // consumed by ToTorch
        out.push_back(ToTorch(m, op.name));
      }
    } catch (...) {
      TPAnyRelease(result);
      throw;
    }
    TPAnyRelease(result);
    return out;
  }

  std::shared_ptr<const Op> op_;
};

// ------------------------------------------------------------------- reading ----

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string TPError() {
  const char* kind = nullptr;
  const char* message = nullptr;
  std::string text = TPErrorGet(&kind, &message) ? std::string(kind) + ": " + message : "no reason recorded";
  TPErrorClear();
  return text;
}

// The parameter kinds this library reads torch's values into (TPParamKind, the record's codes).
bool Served(int32_t code) {
  return code == kTPParamView || code == kTPParamInt || code == kTPParamFloat || code == kTPParamBool ||
         code == kTPParamInts || code == kTPParamViews;
}

// The parameter kinds of a signature string ("x:view;alpha:float=1.0->tensor"), '?' kept.
std::vector<std::string> SignatureKinds(const std::string& signature) {
  std::vector<std::string> kinds;
  const std::string params = signature.substr(0, signature.find("->"));
  size_t start = 0;
  while (start < params.size()) {
    size_t end = params.find(';', start);
    if (end == std::string::npos) end = params.size();
    const std::string item = params.substr(start, end - start);
    const size_t colon = item.find(':');
    if (colon != std::string::npos) kinds.push_back(item.substr(colon + 1, item.find('=') - colon - 1));
    start = end + 1;
  }
  return kinds;
}

int64_t Int(const Json& v, const std::string& where, const char* what) {
  TORCH_CHECK(v.kind == Json::kInt, where, ": ", what, " is not an integer");
  return v.i;
}

// The output rules of the record (aoti.add_ops's "outputs", tensorplug.plans.compile_outputs's
// encoding) as the plan's TPOutputRule, whose arrays `steps` and `dim_steps` hold.
struct Rules {
  std::vector<TPOutputRule> rules;
  std::vector<std::vector<int32_t>> dim_steps;
  std::vector<std::vector<TPRuleStep>> steps;
};

void ReadOutputs(const Json& outputs, const std::string& where, Rules* out) {
  TORCH_CHECK(outputs.kind == Json::kArray, where, ": 'outputs' is not a list of output rules");
  const size_t n = outputs.items.size();
  out->rules.resize(n);
  out->dim_steps.resize(n);
  out->steps.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const Json& rule = outputs.items[k];
    const std::string at = where + ", output rule " + std::to_string(k);
    TORCH_CHECK(rule.kind == Json::kArray && rule.items.size() == 10, at, ": expected (shape_from, shape_param, "
                "dims, dtype_from, dtype_param, dtype, device_from, device_param, device_type, device_id)");
    const std::vector<Json>& f = rule.items;
    TPOutputRule& r = out->rules[k];
    r = TPOutputRule{};
    r.shape_from = static_cast<int32_t>(Int(f[0], at, "shape_from"));
    r.shape_param = static_cast<int32_t>(Int(f[1], at, "shape_param"));
    TORCH_CHECK(f[2].kind == Json::kArray, at, ": dims is not a list of programs");
    for (const Json& program : f[2].items) {
      TORCH_CHECK(program.kind == Json::kArray, at, ": a dimension's program is not a list of steps");
      out->dim_steps[k].push_back(static_cast<int32_t>(program.items.size()));
      for (const Json& step : program.items) {
        TORCH_CHECK(step.kind == Json::kArray && !step.items.empty() && step.items.size() <= 4, at,
                    ": a step is not (op, a, b, c)");
        int64_t v[4] = {0, 0, 0, 0};
        for (size_t j = 0; j < step.items.size(); ++j) v[j] = Int(step.items[j], at, "a step's operand");
        out->steps[k].push_back(TPRuleStep{static_cast<int32_t>(v[0]), 0, v[1], v[2], v[3]});
      }
    }
    r.ndim = static_cast<int32_t>(out->dim_steps[k].size());
    r.dim_steps = out->dim_steps[k].data();
    r.steps = out->steps[k].data();
    r.dtype_from = static_cast<int32_t>(Int(f[3], at, "dtype_from"));
    r.dtype_param = static_cast<int32_t>(Int(f[4], at, "dtype_param"));
    TORCH_CHECK(f[5].kind == Json::kString, at, ": the dtype is not a string");
    if (r.dtype_from == kTPFromFixed) {
      TORCH_CHECK(tensorplug::DataTypeFromString(f[5].s, &r.dtype), at, ": '", f[5].s, "' is not a dtype's name");
    }
    r.device_from = static_cast<int32_t>(Int(f[6], at, "device_from"));
    r.device_param = static_cast<int32_t>(Int(f[7], at, "device_param"));
    r.device = DLDevice{static_cast<DLDeviceType>(Int(f[8], at, "device_type")),
                        static_cast<int32_t>(Int(f[9], at, "device_id"))};
  }
}

struct Registry {
  std::mutex mutex;
  std::map<std::string, TPModuleHandle> modules;                // kernel libraries by path, kept for the process
  std::vector<std::unique_ptr<torch::Library>> libraries;       // kept: dropping one removes its ops
};

Registry& TheRegistry() {
  static auto* registry = new Registry();  // never destroyed: the dispatcher keeps its kernels
  return *registry;
}

std::shared_ptr<Op> ReadOp(const Json& entry, const std::string& library_dir, Registry& registry) {
  auto op = std::make_shared<Op>();
  op->name = entry.at("name", "tensorplug record").s;
  const std::string where = "tensorplug record of op '" + op->name + "'";
  op->library = entry.at("library", where).s;
  if (!library_dir.empty()) op->library = library_dir + "/" + Basename(op->library);
  op->function = entry.at("function", where).s;
  op->n_outputs = static_cast<int32_t>(Int(entry.at("n_outputs", where), where, "'n_outputs'"));
  for (const Json& p : entry.at("params", where).items) {
    const Json* contiguous = p.get("contiguous");
    const Json& code = p.at("code", where);
    Param param{p.at("name", where).s, p.at("kind", where).s,
                code.kind == Json::kInt ? static_cast<int32_t>(code.i) : -1, p.at("optional", where).b, p.at("written", where).b, contiguous != nullptr && contiguous->b};
    TORCH_CHECK(Served(param.code), "op '", op->name, "' (kernel library '", op->library, "'): parameter '",
                param.name, "' is of kind '", param.kind, "', which the registration library does not take (it takes "
                "tensors, ints, floats, bools, int lists and tensor lists; a Python process serves the rest)");
    op->params.push_back(std::move(param));
  }
  Rules rules;
  ReadOutputs(entry.at("outputs", where), where, &rules);
  // The kernel library and its function, through tensorplug's C API: the ABI record is
  // checked before the library's code runs.
  TPModuleHandle module = nullptr;
  auto found = registry.modules.find(op->library);
  if (found != registry.modules.end()) {
    module = found->second;
  } else {
    TORCH_CHECK(TPModuleLoad(op->library.c_str(), &module) == 0, "op '", op->name, "': kernel library '",
                op->library, "' could not be loaded: ", TPError());
    registry.modules.emplace(op->library, module);
  }
  TPFunctionHandle fn = nullptr;
  TORCH_CHECK(TPModuleGetFunction(module, op->function.c_str(), &fn) == 0, "op '", op->name, "': kernel library '",
              op->library, "': ", TPError());
  TORCH_CHECK(fn != nullptr, "op '", op->name, "': kernel library '", op->library, "' has no function '",
              op->function, "' (the record names it; was the library rebuilt without it?)");
  op->fn = fn;
  if (const char* signature = TPFunctionGetSignature(fn)) {
    const std::vector<std::string> kinds = SignatureKinds(signature);
    bool same = kinds.size() == op->params.size();
    for (size_t i = 0; same && i < kinds.size(); ++i) {
      const std::string base = kinds[i][0] == '?' ? kinds[i].substr(1) : kinds[i];
      same = base == op->params[i].kind && (kinds[i][0] == '?') == op->params[i].optional;
    }
    TORCH_CHECK(same, "op '", op->name, "': function '", op->function, "' of kernel library '", op->library,
                "' has the signature '", signature, "', which is not the one the record holds; export the package "
                "again with this library");
  }
  // The op's call plan, kept for the process (torch may call the kernel until it ends).
  std::vector<TPPlanParam> params;
  for (const Param& p : op->params) {
    TPPlanParam param{};
    param.name = p.name.c_str();
    param.kind = p.code;
    param.optional = p.optional;
    param.written = p.written;
    params.push_back(param);
  }
  TPPlanSpec spec{};
  spec.op = op->name.c_str();
  spec.function = fn;
  spec.num_params = static_cast<int32_t>(params.size());
  spec.params = params.data();
  spec.num_outputs = op->n_outputs;
  spec.outputs = rules.rules.data();
  TORCH_CHECK(static_cast<int32_t>(rules.rules.size()) == op->n_outputs, where, ": ", rules.rules.size(),
              " output rules for ", op->n_outputs, " results");
  TORCH_CHECK(TPPlanCreate(&spec, &op->plan) == 0, "op '", op->name, "' (kernel library '", op->library,
              "'): its record makes no call plan: ", TPError());
  return op;
}

int RegisterRecord(const std::string& text, const std::string& record_name, const std::string& library_dir) {
  Json doc = JsonReader(text, record_name).Document();
  const Json* version = doc.get("version");
  TORCH_CHECK(version != nullptr && version->i == kRecordVersion, record_name, ": a tensorplug record of version ",
              version ? std::to_string(version->i) : std::string("1"), "; this registration library reads version ",
              kRecordVersion, " only (record the ops again with this tensorplug's aoti.add_ops)");
  Registry& registry = TheRegistry();
  std::lock_guard<std::mutex> lock(registry.mutex);
  int registered = 0;
  for (const Json& entry : doc.at("ops", record_name).items) {
    const std::string& name = entry.at("name", record_name).s;
    const size_t sep = name.find("::");
    TORCH_CHECK(sep != std::string::npos, record_name, ": op name '", name, "' is not 'namespace::name'");
    const std::string ns = name.substr(0, sep), opname = name.substr(sep + 2);
    if (c10::Dispatcher::singleton().findSchema({name, ""}).has_value()) continue;  // this process has it
    std::shared_ptr<const Op> op = ReadOp(entry, library_dir, registry);
    const std::string schema = entry.at("schema", record_name).s;
    auto lib = std::make_unique<torch::Library>(torch::Library::FRAGMENT, ns, std::nullopt, __FILE__, __LINE__);
    for (const Json& overload : entry.at("overloads", record_name).items) {
      const std::string full = overload.s.empty() ? opname : opname + "." + overload.s;
      lib->def((full + schema).c_str());
      lib->impl(full.c_str(), torch::dispatch(c10::DispatchKey::CPU,
                                              torch::CppFunction::makeFromBoxedFunctor(std::make_unique<Kernel>(op))));
    }
    registry.libraries.push_back(std::move(lib));
    ++registered;
  }
  return registered;
}

}  // namespace

namespace tensorplug_serving {

TP_SERVING_EXPORT int register_package(const std::string& package_path, const std::string& library_dir) {
  caffe2::serialize::PyTorchStreamReader reader(package_path);
  int registered = 0;
  std::vector<std::string> names;
  for (const std::string& name : reader.getAllRecords())
    if (name.rfind(kRecords, 0) == 0) names.push_back(name);
  // add_ops numbers its records 0, 1, ...: read them in that order.
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  for (const std::string& name : names) {
    auto [data, size] = reader.getRecord(name);
    registered += RegisterRecord(std::string(static_cast<const char*>(data.get()), size),
                                 package_path + ":" + name, library_dir);
  }
  return registered;
}

}  // namespace tensorplug_serving

extern "C" TP_SERVING_EXPORT int tp_torch_serving_register(const char* package_path, const char* library_dir,
                                                            char* error, size_t error_size) {
  try {
    return tensorplug_serving::register_package(package_path, library_dir ? library_dir : "");
  } catch (const c10::Error& e) {
    std::snprintf(error, error_size, "%s", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::snprintf(error, error_size, "%s", e.what());
  }
  return -1;
}
