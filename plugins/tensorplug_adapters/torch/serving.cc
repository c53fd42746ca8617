// The registration library of tensorplug ops for C++ processes without Python (issue 44):
// it reads the tensorplug record of an AOTInductor package (aoti.add_ops, version 2),
// loads the kernel libraries it names through tensorplug's C API (libtensorplug, no
// Python), and registers each op's schema, overloads and CPU kernel with torch's dispatcher,
// so torch::inductor::AOTIModelPackageLoader finds them. Compiled at run time against the
// headers of the torch in hand and tensorplug's public C headers only
// (tensorplug_adapters.torch.serving.build, cached per torch version).
//
// The kernel here is a narrower plan than the Python process's (kernel.cc, in the plugin's
// Python extension module, which cannot be loaded here): parameters are
// tensors (optional too; a contiguous= one passed as a compact copy where it is not), ints,
// floats and bools; results are new tensors, allocated
// through torch while the call runs; the output rule is checked as far as the record's
// compiled form reaches (aoti._rule_program); the CPU key only (no CUDA stream is
// bound, no Autograd kernel, no fake kernel: a package's proxy executor needs none).
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

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "serving.h"

#define TP_SERVING_EXPORT __attribute__((visibility("default")))

namespace {

constexpr int64_t kRecordVersion = 2;  // aoti.RECORD_VERSION
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
const DtypePair* ByName(const std::string& name) {
  for (const auto& d : kDtypes)
    if (name == d.name) return &d;
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
  char kind;  // t(ensor), i(nt), f(loat), b(ool)
  bool optional;
  bool written;
  bool contiguous;  // declared contiguous=: a non-compact tensor is passed as a compact copy
};

// One output rule in its compiled form (aoti._rule_program).
struct Rule {
  enum ShapeKind { kUnchecked, kLike, kDims } shape_kind = kUnchecked;
  int64_t like = -1;
  std::vector<std::vector<std::vector<Json>>> dims;  // per dimension a postfix program; empty: unchecked
  std::vector<bool> dim_checked;
  enum { kAny, kParam, kFixed, kPrimary } dtype_kind = kAny, device_kind = kAny;
  int64_t dtype_param = -1, device_param = -1;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::DeviceType device = c10::DeviceType::CPU;
};

struct Op {
  std::string name;  // ns::name
  std::string library;
  std::string function;
  TPFunctionHandle fn = nullptr;
  std::vector<Param> params;
  int64_t outputs = 0;
  bool checked = false;  // the record holds an output rule
  std::vector<Rule> rules;
};

std::string Describe(const at::Tensor& t) {
  std::ostringstream s;
  const DtypePair* d = ByTorch(t.scalar_type());
  s << (d ? d->name : c10::toString(t.scalar_type())) << "[";
  for (int64_t k = 0; k < t.dim(); ++k) s << (k ? ", " : "") << t.size(k);
  s << "] on " << t.device();
  return s.str();
}

// Python's floor division and modulo (the rule's meaning).
int64_t FloorDiv(int64_t a, int64_t b, const std::string& op) {
  TORCH_CHECK(b != 0, op, "(): its output rule divides by zero for these arguments");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

class Kernel final : public c10::OperatorKernel {
 public:
  explicit Kernel(std::shared_ptr<const Op> op) : op_(std::move(op)) {}

  void operator()(const c10::OperatorHandle&, c10::DispatchKeySet, torch::jit::Stack* stack) {
    const Op& op = *op_;
    const size_t n = op.params.size();
    TORCH_CHECK(stack->size() >= n, op.name, "(): torch passed ", stack->size(), " arguments, the op takes ", n);
    const c10::IValue* args = stack->data() + (stack->size() - n);
    std::vector<DLTensor> views(n);
    std::vector<TPAny> packed(n);
    std::vector<at::Tensor> copies;  // compact copies of contiguous= arguments, kept for the call
    copies.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const Param& p = op.params[i];
      const c10::IValue& v = args[i];
      TPAny& a = packed[i];
      a.flags = 0;
      if (v.isNone() && p.optional) {
        a.type_index = kTPNone;
        a.v_int64 = 0;
      } else if (p.kind == 't' && v.isTensor()) {
        const at::Tensor& given = v.toTensor();
        const at::Tensor& t = p.contiguous && !given.is_contiguous() ? copies.emplace_back(given.contiguous()) : given;
        const DtypePair* dtype = ByTorch(t.scalar_type());
        TORCH_CHECK(dtype != nullptr, op.name, "() argument '", p.name, "': expected a tensor of a DLPack dtype, got ",
                    t.scalar_type());
        TORCH_CHECK(t.device().is_cpu(), op.name, "() argument '", p.name,
                    "': expected a CPU tensor (the registration library serves the CPU), got one on ", t.device());
        if (p.written && !t.is_inference()) t.unsafeGetTensorImpl()->bump_version();
        DLTensor& d = views[i];
        d.data = t.data_ptr();
        d.device = {kDLCPU, 0};
        d.ndim = static_cast<int32_t>(t.dim());
        d.dtype = dtype->dl;
        d.shape = const_cast<int64_t*>(t.sizes().data());
        d.strides = const_cast<int64_t*>(t.strides().data());
        d.byte_offset = 0;
        a.type_index = kTPDLTensorPtr;
        a.v_dltensor = &d;
      } else if (p.kind == 'i' && v.isInt()) {
        a.type_index = kTPInt;
        a.v_int64 = v.toInt();
      } else if (p.kind == 'f' && v.isDouble()) {
        a.type_index = kTPFloat;
        a.v_float64 = v.toDouble();
      } else if (p.kind == 'b' && v.isBool()) {
        a.type_index = kTPBool;
        a.v_int64 = v.toBool() ? 1 : 0;
      } else {
        TORCH_CHECK(false, op.name, "() argument '", p.name, "': expected ", KindName(p.kind), ", got a ", v.tagKind());
      }
    }
    TPAny result;
    result.type_index = kTPNone;
    result.flags = 0;
    result.v_int64 = 0;
    int rc;
    {
      // Results allocate through torch for the call; the allocator bound before comes back.
      struct Bind {
        DLPackManagedTensorAllocator previous = TPEnvSetAllocator(Allocate);
        ~Bind() { TPEnvSetAllocator(previous); }
      } bind;
      rc = TPFunctionCall(op.fn, packed.data(), static_cast<int32_t>(n), &result);
    }
    if (rc != 0) {
      const char* kind = nullptr;
      const char* message = nullptr;
      std::string text = TPErrorGet(&kind, &message) ? std::string(kind) + ": " + message : "the kernel failed";
      TPErrorClear();
      TORCH_CHECK(false, op.name, "(): ", text);
    }
    std::vector<at::Tensor> outputs = Results(op, &result);
    Check(op, args, outputs);
    torch::jit::drop(*stack, n);
    for (auto& t : outputs) stack->emplace_back(std::move(t));
  }

 private:
  static const char* KindName(char kind) {
    return kind == 't' ? "a Tensor" : kind == 'i' ? "an int" : kind == 'f' ? "a float" : "a bool";
  }

  // The kernel's result (kTPNone, a tensor, or a tuple of tensors) as torch tensors; the
  // TPAny is released.
  static std::vector<at::Tensor> Results(const Op& op, TPAny* result) {
    std::vector<at::Tensor> out;
    std::string error;
    if (result->type_index == kTPTensor) {
      DLManagedTensorVersioned* m = result->v_tensor;
      result->type_index = kTPNone;
      out.push_back(ToTorch(m, op.name));
    } else if (result->type_index == kTPTuple) {
      TPTuple* tuple = result->v_tuple;
      for (int32_t k = 0; k < tuple->size && error.empty(); ++k) {
        TPAny& item = tuple->items[k];
        if (item.type_index != kTPTensor) {
          error = "item " + std::to_string(k) + " of its result is not a tensor";
          break;
        }
        DLManagedTensorVersioned* m = item.v_tensor;
        item.type_index = kTPNone;
        out.push_back(ToTorch(m, op.name));
      }
      TPAnyRelease(result);
    } else if (result->type_index != kTPNone) {
      error = "its result is not a tensor, a tuple of tensors or nothing (type index " +
              std::to_string(result->type_index) + ")";
      TPAnyRelease(result);
    }
    TORCH_CHECK(error.empty(), op.name, "(): ", error);
    TORCH_CHECK(static_cast<int64_t>(out.size()) == op.outputs, "op '", op.name, "' returned ", out.size(),
                " tensors, but its schema declares ", op.outputs);
    return out;
  }

  // Each result against its output rule, as far as the record's compiled form reaches.
  static void Check(const Op& op, const c10::IValue* args, const std::vector<at::Tensor>& outputs) {
    if (!op.checked) return;
    for (size_t k = 0; k < outputs.size() && k < op.rules.size(); ++k) {
      const Rule& r = op.rules[k];
      const at::Tensor& t = outputs[k];
      std::vector<int64_t> shape;
      std::vector<bool> known;
      if (r.shape_kind == Rule::kLike) {
        const at::Tensor& like = args[r.like].toTensor();
        shape.assign(like.sizes().begin(), like.sizes().end());
        known.assign(shape.size(), true);
      } else if (r.shape_kind == Rule::kDims) {
        for (size_t d = 0; d < r.dims.size(); ++d) {
          known.push_back(r.dim_checked[d]);
          shape.push_back(r.dim_checked[d] ? Eval(op, r.dims[d], args) : -1);
        }
      }
      bool ok = r.shape_kind == Rule::kUnchecked || static_cast<int64_t>(shape.size()) == t.dim();
      for (size_t d = 0; ok && d < shape.size(); ++d) ok = !known[d] || shape[d] == t.size(d);
      c10::ScalarType dtype = r.dtype_kind == Rule::kParam ? args[r.dtype_param].toTensor().scalar_type() : r.dtype;
      ok = ok && (r.dtype_kind == Rule::kAny || dtype == t.scalar_type());
      c10::DeviceType device = r.device;  // kFixed's, and kPrimary's: CPU, where every tensor here is
      if (r.device_kind == Rule::kParam) device = args[r.device_param].toTensor().device().type();
      ok = ok && (r.device_kind == Rule::kAny || device == t.device().type());
      if (ok) continue;
      std::ostringstream want;
      const DtypePair* d = r.dtype_kind == Rule::kAny ? nullptr : ByTorch(dtype);
      want << (d ? d->name : "any dtype") << "[";
      if (r.shape_kind == Rule::kUnchecked) want << "...";
      for (size_t i = 0; i < shape.size(); ++i) {
        want << (i ? ", " : "");
        if (known[i]) want << shape[i]; else want << "?";
      }
      want << "] on " << (r.device_kind == Rule::kAny ? std::string("any device") : c10::DeviceTypeName(device, true));
      TORCH_CHECK(false, "op '", op.name, "' returned ", Describe(t), " as result ", k,
                  ", but its output rule declares ", want.str());
    }
  }

  static int64_t Eval(const Op& op, const std::vector<std::vector<Json>>& program, const c10::IValue* args) {
    std::vector<int64_t> st;
    for (const auto& item : program) {
      const std::string& code = item[0].s;
      if (code == "const") {
        st.push_back(item[1].i);
      } else if (code == "int") {
        st.push_back(args[item[1].i].toInt());
      } else if (code == "shape") {
        const at::Tensor& t = args[item[1].i].toTensor();
        int64_t k = item[2].i < 0 ? item[2].i + t.dim() : item[2].i;
        TORCH_CHECK(k >= 0 && k < t.dim(), op.name, "(): its output rule reads dimension ", item[2].i,
                    " of argument '", op.params[item[1].i].name, "', which has ", t.dim());
        st.push_back(t.size(k));
      } else if (code == "neg") {
        st.back() = -st.back();
      } else {
        const int64_t b = st.back();
        st.pop_back();
        int64_t& a = st.back();
        a = code == "+" ? a + b : code == "-" ? a - b : code == "*" ? a * b
            : code == "//" ? FloorDiv(a, b, op.name) : a - FloorDiv(a, b, op.name) * b;
      }
    }
    return st.back();
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

// The kinds a parameter of the record may have here, by the kernel signature's kind.
char ParamKind(const std::string& kind) {
  if (kind == "view" || kind == "mview") return 't';
  if (kind == "int") return 'i';
  if (kind == "float") return 'f';
  if (kind == "bool") return 'b';
  return 0;
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

Rule ReadRule(const Json& rule, const std::string& where) {
  Rule r;
  const Json* program = rule.get("program");
  if (program == nullptr || program->kind != Json::kObject) return r;  // a rule without a compiled form: unchecked
  const Json& shape = program->at("shape", where);
  if (shape.kind == Json::kArray && !shape.items.empty() && shape.items[0].kind == Json::kString) {
    r.shape_kind = Rule::kLike;  // ["like", i]
    r.like = shape.items.at(1).i;
  } else if (shape.kind == Json::kArray) {
    r.shape_kind = Rule::kDims;
    for (const Json& dim : shape.items) {
      r.dim_checked.push_back(dim.kind == Json::kArray);
      std::vector<std::vector<Json>> steps;
      for (const Json& step : dim.items) steps.push_back(step.items);
      r.dims.push_back(std::move(steps));
    }
  }
  const Json& dtype = program->at("dtype", where);
  if (dtype.kind == Json::kArray && dtype.items.at(0).s == "param") {
    r.dtype_kind = Rule::kParam;
    r.dtype_param = dtype.items.at(1).i;
  } else if (dtype.kind == Json::kArray && dtype.items.at(0).s == "fixed") {
    const DtypePair* d = ByName(dtype.items.at(1).s);
    if (d != nullptr) {
      r.dtype_kind = Rule::kFixed;
      r.dtype = d->torch;
    }
  }
  const Json& device = program->at("device", where);
  if (device.kind == Json::kArray) {
    const std::string& how = device.items.at(0).s;
    if (how == "param") {
      r.device_kind = Rule::kParam;
      r.device_param = device.items.at(1).i;
    } else if (how == "primary") {
      r.device_kind = Rule::kPrimary;  // every tensor here is on the CPU, results too
    } else if (how == "fixed") {
      const std::string& name = device.items.at(1).s;
      r.device_kind = Rule::kFixed;
      r.device = name.rfind("cuda", 0) == 0 ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
    }
  }
  return r;
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
  op->outputs = entry.at("outputs", where).i;
  for (const Json& p : entry.at("params", where).items) {
    const Json* contiguous = p.get("contiguous");
    Param param{p.at("name", where).s, ParamKind(p.at("kind", where).s), p.at("optional", where).b,
                p.at("written", where).b, contiguous != nullptr && contiguous->b};
    TORCH_CHECK(param.kind != 0, "op '", op->name, "' (kernel library '", op->library, "'): parameter '", param.name,
                "' is of kind '", p.at("kind", where).s, "', which the registration library does not take (it takes "
                "tensors, ints, floats and bools; a Python process serves the rest)");
    op->params.push_back(std::move(param));
  }
  const Json& returns = entry.at("returns", where);
  if (returns.kind == Json::kObject) {
    op->checked = true;
    for (const Json& rule : returns.at("rules", where).items) op->rules.push_back(ReadRule(rule, where));
  }
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
      same = ParamKind(base) == op->params[i].kind && (kinds[i][0] == '?') == op->params[i].optional;
    }
    TORCH_CHECK(same, "op '", op->name, "': function '", op->function, "' of kernel library '", op->library,
                "' has the signature '", signature, "', which is not the one the record holds; export the package "
                "again with this library");
  }
  return op;
}

int RegisterRecord(const std::string& text, const std::string& record_name, const std::string& library_dir) {
  Json doc = JsonReader(text, record_name).Document();
  const Json* version = doc.get("version");
  TORCH_CHECK(version != nullptr && version->i == kRecordVersion, record_name, ": a tensorplug record of version ",
              version ? std::to_string(version->i) : std::string("1"), "; this registration library reads version ",
              kRecordVersion, " (record the ops again with this tensorplug's aoti.add_ops)");
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
