// paddle's custom operators for tensorplug ops, compiled against the installed paddle at
// run time (plugins/tensorplug_adapters/paddle/static.py builds and loads this file, linked
// with libtensorplug).
//
// One generic operator per number of tensors n and of results k, `tensorplug_op<n>_<k>` (at the
// end of this file): its inputs are the op's tensors, its attributes the op's name (`op`) and
// the rest of the call (`call`, JSON written by static.py: scalars, where each tensor
// goes, the kernel library).
//
// Its kernel runs the op's call plan (tensorplug/plan.h) with no Python when the op has one
// (static.py makes it with tensorplug.plans.make): the first run of a node asks Python once
// (Describe: the plan, and the call attribute parsed into scalars and tensor positions),
// and every run after builds the function's arguments from paddle's tensors (DLTensor
// views), evaluates the output rule and calls the function through the plan, with an
// allocator that allocates paddle tensors (Tensor::FromEnvAlloc gives paddle's own), and
// checks its results; errors are the plan's, naming the op. An op without a plan (its
// output rule a Python shape function, a parameter the encoding does not carry, a saved
// program's op the process does not declare) and a GPU call keep the callback into Python
// (tp_paddle_set_callbacks, ctypes callbacks: they take the GIL), which hands paddle's
// tensors over as DLPack and takes the results back as DLPack (zero copy: paddle::from_blob
// with the producer's deleter). The infer-shape/infer-dtype functions call back into Python
// to evaluate the output rule, once per distinct question: paddle's executor asks them on
// every run, and the answers are kept. `tensorplug_op<n>_<k>_grad` is the operator paddle's
// autodiff appends: its kernel calls the op's declared backward in Python (or raises,
// naming the op, when it has none).
//
// Nothing here knows an op: a program saved with these operators runs in a process that
// registers this library and finds the kernels (static.py, docs/compilers.md).
//
// Over 500 lines: one idea, paddle's operator for tensorplug ops -- its kernel (the call plan
// or the callback), its infer functions and its grad operator share the node's attributes,
// the conversions between paddle's tensors and DLPack, and the operator definitions below.

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "paddle/common/enforce.h"
#include "paddle/extension.h"
#include "paddle/phi/api/include/context_pool.h"
#include "paddle/phi/core/dense_tensor.h"
#include "paddle/phi/core/device_context.h"
#include "tensorplug/dlpack.h"
#include "tensorplug/plan.h"

namespace {

constexpr int64_t kMaxRank = 16;
constexpr int64_t kErrorSize = 4096;

// grad: 0 the forward, 1 the backward. ins: n_in DLPack tensors (null for an undefined
// incoming gradient), each owned by the callee once passed (it calls the deleter); outs:
// the callee's results, n_out DLPack tensors whose ownership passes to the caller.
using RunFn = int (*)(int64_t grad, const char* op, const char* call, int64_t n_in, DLManagedTensor** ins,
                      int64_t n_out, DLManagedTensor** outs, char* error, int64_t error_size);
// The output rule: n_in input specs (rank, extents flattened, paddle DataType) in, n_out out.
using InferFn = int (*)(const char* op, const char* call, int64_t n_in, const int64_t* ranks, const int64_t* dims,
                        const int32_t* dtypes, int64_t n_out, int64_t* out_ranks, int64_t* out_dims,
                        int32_t* out_dtypes, char* error, int64_t error_size);

RunFn g_run = nullptr;
InferFn g_infer = nullptr;

struct Holder {
  paddle::Tensor tensor;
  std::vector<int64_t> shape, strides;
  DLManagedTensor managed;
};

void DeleteHolder(DLManagedTensor* self) { delete static_cast<Holder*>(self->manager_ctx); }

DLDataType ToDL(phi::DataType dtype) {
  using D = phi::DataType;
  switch (dtype) {
    case D::BOOL: return {kDLBool, 8, 1};
    case D::UINT8: return {kDLUInt, 8, 1};
    case D::INT8: return {kDLInt, 8, 1};
    case D::UINT16: return {kDLUInt, 16, 1};
    case D::INT16: return {kDLInt, 16, 1};
    case D::UINT32: return {kDLUInt, 32, 1};
    case D::INT32: return {kDLInt, 32, 1};
    case D::UINT64: return {kDLUInt, 64, 1};
    case D::INT64: return {kDLInt, 64, 1};
    case D::FLOAT16: return {kDLFloat, 16, 1};
    case D::BFLOAT16: return {kDLBfloat, 16, 1};
    case D::FLOAT32: return {kDLFloat, 32, 1};
    case D::FLOAT64: return {kDLFloat, 64, 1};
    case D::COMPLEX64: return {kDLComplex, 64, 1};
    case D::COMPLEX128: return {kDLComplex, 128, 1};
    default: PD_THROW("tensorplug: paddle dtype ", static_cast<int>(dtype), " has no DLPack form");
  }
}

phi::DataType FromDL(DLDataType t) {
  using D = phi::DataType;
  if (t.lanes != 1) PD_THROW("tensorplug: a vector dtype (lanes ", t.lanes, ") has no paddle form");
  switch (t.code) {
    case kDLBool: return D::BOOL;
    case kDLUInt: return t.bits == 8 ? D::UINT8 : t.bits == 16 ? D::UINT16 : t.bits == 32 ? D::UINT32 : D::UINT64;
    case kDLInt: return t.bits == 8 ? D::INT8 : t.bits == 16 ? D::INT16 : t.bits == 32 ? D::INT32 : D::INT64;
    case kDLFloat: return t.bits == 16 ? D::FLOAT16 : t.bits == 32 ? D::FLOAT32 : D::FLOAT64;
    case kDLBfloat: return D::BFLOAT16;
    case kDLComplex: return t.bits == 64 ? D::COMPLEX64 : D::COMPLEX128;
    default: PD_THROW("tensorplug: DLPack dtype code ", static_cast<int>(t.code), " has no paddle form");
  }
}

DLManagedTensor* ToDLPack(const paddle::Tensor& tensor) {
  if (!tensor.defined() || !tensor.initialized()) return nullptr;
  auto* holder = new Holder{tensor, {}, {}, {}};
  auto dims = tensor.dims();
  auto strides = tensor.strides();
  for (int i = 0; i < dims.size(); ++i) holder->shape.push_back(dims[i]);
  if (strides.size() == dims.size()) {
    for (int i = 0; i < strides.size(); ++i) holder->strides.push_back(strides[i]);
  } else {  // compact
    holder->strides.assign(dims.size(), 1);
    for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i)
      holder->strides[i] = holder->strides[i + 1] * dims[i + 1];
  }
  DLTensor& t = holder->managed.dl_tensor;
  t.data = const_cast<void*>(tensor.data());
  t.device = tensor.is_gpu() ? DLDevice{kDLCUDA, tensor.place().GetDeviceId()} : DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int32_t>(dims.size());
  t.dtype = ToDL(tensor.dtype());
  t.shape = holder->shape.data();
  t.strides = holder->strides.data();
  t.byte_offset = 0;
  holder->managed.manager_ctx = holder;
  holder->managed.deleter = DeleteHolder;
  return &holder->managed;
}

paddle::Tensor FromDLPack(DLManagedTensor* managed) {
  DLTensor& t = managed->dl_tensor;
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  std::vector<int64_t> strides(t.ndim, 1);
  if (t.strides != nullptr) {
    strides.assign(t.strides, t.strides + t.ndim);
  } else {
    for (int i = t.ndim - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  }
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  phi::Place place = t.device.device_type == kDLCUDA ? phi::Place(phi::GPUPlace(t.device.device_id))
                                                     : phi::Place(phi::CPUPlace());
  return paddle::from_blob(data, phi::IntArray(shape), phi::IntArray(strides), FromDL(t.dtype),
                           phi::DataLayout::NCHW, place, [managed](void*) {
                             if (managed->deleter != nullptr) managed->deleter(managed);
                           });
}

// The callbacks write their error as one letter, the Python exception's kind (V ValueError, T
// TypeError, R anything else), then its text: raised as paddle's error of that kind, which
// paddle's Python layer raises as ValueError, TypeError and RuntimeError.
[[noreturn]] void Raise(const char* error) {
  const char kind = error[0];
  const char* text = kind == '\0' ? "tensorplug: the callback failed without a message" : error + 1;
  if (kind == 'V') PADDLE_THROW(common::errors::InvalidArgument("%s", text));
  if (kind == 'T') PADDLE_THROW(common::errors::InvalidType("%s", text));
  PADDLE_THROW(common::errors::PreconditionNotMet("%s", text));
}

std::vector<paddle::Tensor> Run(int64_t grad, const std::string& op, const std::string& call,
                                const std::vector<paddle::Tensor>& inputs, size_t n_out) {
  if (g_run == nullptr) PD_THROW("tensorplug: the paddle operator of ", op, " runs before its callbacks are set");
  std::vector<DLManagedTensor*> ins;
  ins.reserve(inputs.size());
  for (const auto& tensor : inputs) ins.push_back(ToDLPack(tensor));
  std::vector<DLManagedTensor*> outs(n_out, nullptr);
  std::vector<char> error(kErrorSize, 0);
  int status = g_run(grad, op.c_str(), call.c_str(), static_cast<int64_t>(ins.size()), ins.data(),
                     static_cast<int64_t>(n_out), outs.data(), error.data(), kErrorSize);
  if (status != 0) {
    for (auto* out : outs)
      if (out != nullptr && out->deleter != nullptr) out->deleter(out);
    Raise(error.data());
  }
  std::vector<paddle::Tensor> results;
  results.reserve(n_out);
  for (auto* out : outs) results.push_back(FromDLPack(out));
  return results;
}

struct Specs {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<phi::DataType> dtypes;
};

Specs InferCallback(const std::string& op, const std::string& call, const std::vector<std::vector<int64_t>>& shapes,
                    const std::vector<phi::DataType>& dtypes, size_t n_out);
Specs InferMemo(const std::string& op, const std::string& call, const std::vector<std::vector<int64_t>>& shapes,
                const std::vector<phi::DataType>& dtypes, size_t n_out);
std::atomic<uint64_t> g_epoch{0};  // bumped when tp_paddle_forget_nodes forgets the nodes and answers

// The infer functions' answers by op, call and input specs: paddle's executor asks them on
// every run of a node, and the answer is the output rule's, a function of those alone
// (tp_paddle_forget_nodes forgets them with the nodes).
std::mutex g_infer_mutex;
std::unordered_map<std::string, Specs> g_inferred;

Specs Infer(const std::string& op, const std::string& call, const std::vector<std::vector<int64_t>>& shapes,
            const std::vector<phi::DataType>& dtypes, size_t n_out) {
  if (g_infer == nullptr) PD_THROW("tensorplug: the paddle operator of ", op, " is used before its callbacks are set");
  struct Last {  // this thread's last question and answer, checked first (as LastNode)
    uint64_t epoch = ~uint64_t{0};
    std::string op, call;
    std::vector<std::vector<int64_t>> shapes;
    std::vector<phi::DataType> dtypes;
    size_t n_out = 0;
    Specs specs;
  };
  thread_local Last last[2];  // infer-shape's (no dtypes), infer-dtype's
  Last& mine = last[shapes.empty() ? 1 : 0];
  const uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  if (mine.epoch == epoch && mine.n_out == n_out && mine.shapes == shapes && mine.dtypes == dtypes &&
      mine.call == call && mine.op == op)
    return mine.specs;
  Specs specs = InferMemo(op, call, shapes, dtypes, n_out);
  mine.epoch = epoch;
  mine.op = op;
  mine.call = call;
  mine.shapes = shapes;
  mine.dtypes = dtypes;
  mine.n_out = n_out;
  mine.specs = specs;
  return specs;
}

Specs InferMemo(const std::string& op, const std::string& call, const std::vector<std::vector<int64_t>>& shapes,
                const std::vector<phi::DataType>& dtypes, size_t n_out) {
  std::string key;
  key.reserve(op.size() + call.size() + 2 + 8 * (shapes.size() * 4 + dtypes.size() + 2));
  key.append(op).push_back('\n');
  key.append(call).push_back('\n');
  auto put = [&key](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(static_cast<int64_t>(shapes.size()));
  for (const auto& shape : shapes) {
    put(static_cast<int64_t>(shape.size()));
    for (const int64_t d : shape) put(d);
  }
  put(static_cast<int64_t>(dtypes.size()));
  for (const auto dtype : dtypes) put(static_cast<int64_t>(dtype));
  put(static_cast<int64_t>(n_out));
  {
    std::lock_guard<std::mutex> lock(g_infer_mutex);
    auto found = g_inferred.find(key);
    if (found != g_inferred.end()) return found->second;
  }
  Specs specs = InferCallback(op, call, shapes, dtypes, n_out);
  std::lock_guard<std::mutex> lock(g_infer_mutex);
  if (g_inferred.size() > 4096) g_inferred.clear();
  g_inferred.emplace(std::move(key), specs);
  return specs;
}

Specs InferCallback(const std::string& op, const std::string& call, const std::vector<std::vector<int64_t>>& shapes,
                    const std::vector<phi::DataType>& dtypes, size_t n_out) {
  std::vector<int64_t> ranks, dims;
  std::vector<int32_t> codes;
  for (const auto& shape : shapes) {
    ranks.push_back(static_cast<int64_t>(shape.size()));
    dims.insert(dims.end(), shape.begin(), shape.end());
  }
  for (auto dtype : dtypes) codes.push_back(static_cast<int32_t>(dtype));
  if (codes.size() < ranks.size()) codes.resize(ranks.size(), 0);  // infer-shape knows no dtypes: 0
  if (ranks.size() < codes.size()) ranks.resize(codes.size(), -1);  // infer-dtype knows no shapes: -1
  std::vector<int64_t> out_ranks(n_out, 0), out_dims(n_out * kMaxRank, 0);
  std::vector<int32_t> out_dtypes(n_out, 0);
  std::vector<char> error(kErrorSize, 0);
  if (g_infer(op.c_str(), call.c_str(), static_cast<int64_t>(ranks.size()), ranks.data(), dims.data(),
              codes.data(), static_cast<int64_t>(n_out), out_ranks.data(), out_dims.data(), out_dtypes.data(),
              error.data(), kErrorSize) != 0)
    Raise(error.data());
  Specs specs;
  for (size_t k = 0; k < n_out; ++k) {
    specs.shapes.emplace_back(out_dims.begin() + k * kMaxRank, out_dims.begin() + k * kMaxRank + out_ranks[k]);
    specs.dtypes.push_back(static_cast<phi::DataType>(out_dtypes[k]));
  }
  return specs;
}

// ------------------------------------------------------------- the native kernel ----
// A node whose op has a call plan (static.py made it with tensorplug.plans.make) runs it here,
// with no Python: the node's call attribute is described once (Describe, a callback into
// Python that parses its JSON), and each run builds the function's arguments from paddle's
// tensors (DLTensor views) and the described scalars, then TPPlanPrepare evaluates the output
// rule and TPPlanInvoke calls the function with an allocator that allocates paddle tensors,
// and checks its results; they go back to paddle as the tensors the allocator made.

// Describe's words: [0] the plan (a TPPlanHandle, retained here; 0: the node runs the Python
// callback), [1] the op's returned tensors, [2] the number of parameters, [3] the number of
// written tensors, their indices, then per parameter one entry (kDescribe* below): strings go
// to `strings`, NUL-terminated, at the offset their entry gives.
using DescribeFn = int (*)(const char* op, const char* call, int64_t* words, int64_t n_words, char* strings,
                           int64_t n_strings, char* error, int64_t error_size);
DescribeFn g_describe = nullptr;
constexpr int64_t kDescribeWords = 4096;
constexpr int64_t kDescribeStrings = 4096;
constexpr size_t kMaxTensors = 6;    // tensorplug_op<n>_<k>: n tensors at most (below)
constexpr size_t kInlineParams = 16; // parameters passed without a heap allocation
enum : int64_t {
  kDescribeNone = 0,     // []
  kDescribeView = 1,     // [tensor, contiguous]
  kDescribeViews = 2,    // [count, contiguous, tensor...]
  kDescribeInt = 3,      // [value]
  kDescribeFloat = 4,    // [bits]
  kDescribeBool = 5,     // [0 or 1]
  kDescribeStr = 6,      // [offset]
  kDescribeDevice = 7,   // [type, id]
  kDescribeDType = 8,    // [code, bits, lanes]
  kDescribeInts = 9,     // [count, value...]
  kDescribeTensor = 10,  // [tensor, contiguous]: an owning tensor
};

struct Entry {
  int64_t kind = kDescribeNone;
  std::vector<int64_t> tensors;  // views, tensor: the paddle inputs it takes
  bool contiguous = false;
  TPAny value{};                 // scalars
  std::string text;              // str
  std::vector<int64_t> ints;     // ints
  TPIntArray int_array{};
};

struct Node {
  TPPlanHandle plan = nullptr;  // one reference (released with the node); null: the Python callback
  std::string op;
  int64_t n_outputs = 0;
  std::vector<int64_t> written;
  std::vector<Entry> entries;
  ~Node() {
    if (plan != nullptr) TPPlanRelease(plan);
  }
};

std::mutex g_nodes_mutex;
std::unordered_map<std::string, std::shared_ptr<const Node>> g_nodes;  // by op name + '\n' + call

// The last node this thread ran, checked first: a program's nodes of one op often share
// their call attribute (a chain of the same op), and comparing it costs less than hashing it.
struct LastNode {
  uint64_t epoch = ~uint64_t{0};
  std::string op, call;
  std::shared_ptr<const Node> node;
};

std::shared_ptr<const Node> DescribeSlow(const std::string& op, const std::string& call);

std::shared_ptr<const Node> Describe(const std::string& op, const std::string& call) {
  thread_local LastNode last;
  const uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  if (last.epoch == epoch && last.call == call && last.op == op) return last.node;
  std::shared_ptr<const Node> node = DescribeSlow(op, call);
  last.epoch = epoch;
  last.op = op;
  last.call = call;
  last.node = node;
  return node;
}

std::shared_ptr<const Node> DescribeSlow(const std::string& op, const std::string& call) {
  std::string key;
  key.reserve(op.size() + 1 + call.size());
  key.append(op).push_back('\n');
  key.append(call);
  {
    std::lock_guard<std::mutex> lock(g_nodes_mutex);
    auto found = g_nodes.find(key);
    if (found != g_nodes.end()) return found->second;
  }
  auto node = std::make_shared<Node>();
  node->op = op;
  if (g_describe != nullptr) {
    std::vector<int64_t> words(kDescribeWords, 0);
    std::vector<char> strings(kDescribeStrings, 0);
    std::vector<char> error(kErrorSize, 0);
    if (g_describe(op.c_str(), call.c_str(), words.data(), kDescribeWords, strings.data(), kDescribeStrings,
                   error.data(), kErrorSize) != 0)
      Raise(error.data());
    node->plan = reinterpret_cast<TPPlanHandle>(static_cast<uintptr_t>(words[0]));  // retained by Python for now
    if (node->plan != nullptr) {
      TPPlanRetain(node->plan);
      node->n_outputs = words[1];
      const int64_t n_params = words[2], n_written = words[3];
      size_t at = 4;
      node->written.assign(words.begin() + at, words.begin() + at + n_written);
      at += n_written;
      node->entries.resize(n_params);
      for (auto& e : node->entries) {
        e.kind = words[at++];
        switch (e.kind) {
          case kDescribeView:
          case kDescribeTensor:
            e.tensors.push_back(words[at++]);
            e.contiguous = words[at++] != 0;
            break;
          case kDescribeViews: {
            const int64_t count = words[at++];
            e.contiguous = words[at++] != 0;
            e.tensors.assign(words.begin() + at, words.begin() + at + count);
            at += count;
            break;
          }
          case kDescribeInt: e.value.type_index = kTPInt; e.value.v_int64 = words[at++]; break;
          case kDescribeFloat:
            e.value.type_index = kTPFloat;
            std::memcpy(&e.value.v_float64, &words[at++], sizeof(double));
            break;
          case kDescribeBool: e.value.type_index = kTPBool; e.value.v_int64 = words[at++] != 0; break;
          case kDescribeStr: e.text = strings.data() + words[at++]; break;
          case kDescribeDevice:
            e.value.type_index = kTPDevice;
            e.value.v_device = DLDevice{static_cast<DLDeviceType>(words[at]), static_cast<int32_t>(words[at + 1])};
            at += 2;
            break;
          case kDescribeDType:
            e.value.type_index = kTPDataType;
            e.value.v_dtype = DLDataType{static_cast<uint8_t>(words[at]), static_cast<uint8_t>(words[at + 1]),
                                         static_cast<uint16_t>(words[at + 2])};
            at += 3;
            break;
          case kDescribeInts: {
            const int64_t count = words[at++];
            e.ints.assign(words.begin() + at, words.begin() + at + count);
            at += count;
            break;
          }
          default: break;  // None
        }
      }
      for (auto& e : node->entries)  // after the moves above: the array points into the node
        if (e.kind == kDescribeInts) e.int_array = TPIntArray{static_cast<int64_t>(e.ints.size()), e.ints.data()};
    }
  }
  std::lock_guard<std::mutex> lock(g_nodes_mutex);
  if (g_nodes.size() > 4096) g_nodes.clear();
  return g_nodes.emplace(std::move(key), std::move(node)).first->second;
}

// A paddle tensor the function owns or the allocator made, as DLPack.
struct Owned {
  paddle::Tensor tensor;
  int64_t shape[kMaxRank];
  int64_t strides[kMaxRank];
  DLManagedTensorVersioned managed;
};

void DeleteOwned(DLManagedTensorVersioned* self) { delete static_cast<Owned*>(self->manager_ctx); }

DLDevice DeviceOf(const paddle::Tensor& tensor) {
  return tensor.is_gpu() ? DLDevice{kDLCUDA, tensor.place().GetDeviceId()} : DLDevice{kDLCPU, 0};
}

// `tensor` as a view into `shape` and `strides` (kMaxRank each); false past kMaxRank dimensions.
bool View(const paddle::Tensor& tensor, DLTensor* view, int64_t* shape, int64_t* strides) {
  const auto dims = tensor.dims();
  const int ndim = dims.size();
  if (ndim > kMaxRank) return false;
  const auto tensor_strides = tensor.strides();
  for (int i = 0; i < ndim; ++i) shape[i] = dims[i];
  if (tensor_strides.size() == ndim) {
    for (int i = 0; i < ndim; ++i) strides[i] = tensor_strides[i];
  } else {  // compact
    int64_t step = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      strides[i] = step;
      step *= shape[i];
    }
  }
  *view = DLTensor{const_cast<void*>(tensor.data()), DeviceOf(tensor), ndim, ToDL(tensor.dtype()), shape, strides, 0};
  return true;
}

Owned* Own(const paddle::Tensor& tensor) {
  auto* owned = new Owned{tensor, {}, {}, {}};
  View(tensor, &owned->managed.dl_tensor, owned->shape, owned->strides);
  owned->managed.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  owned->managed.manager_ctx = owned;
  owned->managed.deleter = DeleteOwned;
  owned->managed.flags = 0;
  return owned;
}

// The allocator bound while the function runs: Tensor::FromEnvAlloc allocates a paddle tensor.
int PaddleAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                    void (*set_error)(void* error_ctx, const char* kind, const char* message)) noexcept {
  try {
    const int ndim = prototype->ndim;
    if (ndim > kMaxRank) {
      set_error(error_ctx, "ValueError", "paddle's operator allocates at most 16 dimensions");
      return -1;
    }
    if (prototype->strides != nullptr) {  // paddle allocates compact tensors
      int64_t step = 1;
      for (int i = ndim - 1; i >= 0; --i) {
        if (prototype->shape[i] > 1 && prototype->strides[i] != step) {
          set_error(error_ctx, "ValueError", "paddle's operator allocates compact (row-major) tensors only");
          return -1;
        }
        step *= prototype->shape[i];
      }
    }
    const phi::Place place = prototype->device.device_type == kDLCUDA
                                 ? phi::Place(phi::GPUPlace(prototype->device.device_id))
                                 : phi::Place(phi::CPUPlace());
    // A DenseTensor from paddle's allocator directly: paddle::empty would dispatch its kernel
    // by name (the most of a small op's allocation).
    auto dense = std::make_shared<phi::DenseTensor>();
    dense->Resize(common::make_ddim(std::vector<int64_t>(prototype->shape, prototype->shape + ndim)));
    paddle::experimental::DeviceContextPool::Instance().Get(place)->Alloc(dense.get(), FromDL(prototype->dtype));
    *out = &Own(paddle::Tensor(std::move(dense)))->managed;
    return 0;
  } catch (const std::exception& e) {
    set_error(error_ctx, "MemoryError", (std::string("paddle could not allocate the tensor: ") + e.what()).c_str());
    return -1;
  } catch (...) {
    set_error(error_ctx, "MemoryError", "paddle could not allocate the tensor");
    return -1;
  }
}

// A result as a paddle tensor: the allocator's own, or any other producer's without a copy.
paddle::Tensor ToPaddle(DLManagedTensorVersioned* managed) {
  if (managed->deleter == DeleteOwned) {
    auto* owned = static_cast<Owned*>(managed->manager_ctx);
    paddle::Tensor tensor = std::move(owned->tensor);
    delete owned;
    return tensor;
  }
  DLTensor& t = managed->dl_tensor;
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  std::vector<int64_t> strides(t.ndim, 1);
  if (t.strides != nullptr) {
    strides.assign(t.strides, t.strides + t.ndim);
  } else {
    for (int i = t.ndim - 2; i >= 0; --i) strides[i] = strides[i + 1] * shape[i + 1];
  }
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  const phi::Place place = t.device.device_type == kDLCUDA ? phi::Place(phi::GPUPlace(t.device.device_id))
                                                           : phi::Place(phi::CPUPlace());
  return paddle::from_blob(data, phi::IntArray(shape), phi::IntArray(strides), FromDL(t.dtype),
                           phi::DataLayout::NCHW, place, [managed](void*) {
                             if (managed->deleter != nullptr) managed->deleter(managed);
                           });
}

// The plan's error (TPErrorGet: a Python exception's name and "<op>(): <what>") raised as paddle's.
[[noreturn]] void RaisePlanError() {
  const char* kind = "RuntimeError";
  const char* message = "unknown error";
  TPErrorGet(&kind, &message);
  std::string text(1, std::strcmp(kind, "ValueError") == 0 ? 'V' : std::strcmp(kind, "TypeError") == 0 ? 'T' : 'R');
  text += std::strcmp(kind, "ValueError") == 0 || std::strcmp(kind, "TypeError") == 0
              ? std::string(message)
              : std::string(kind) + ": " + message;
  TPErrorClear();
  Raise(text.c_str());
}

struct Results {
  TPAny value{};
  ~Results() { TPAnyRelease(&value); }
};

// Runs `node`'s plan on paddle's tensors; false (nothing run) where the call must take the
// Python callback: a GPU tensor (this build binds no paddle stream).
bool RunNative(const Node& node, std::vector<paddle::Tensor> inputs, size_t n_out,
               std::vector<paddle::Tensor>* results) {
  const size_t n_in = inputs.size();
  DLDevice primary{kDLCPU, 0};
  for (const auto& tensor : inputs) {
    if (!tensor.defined() || !tensor.initialized())
      PD_THROW("tensorplug: op '", node.op, "': paddle passed an undefined tensor to its operator");
    if (tensor.is_gpu()) return false;
  }
  if (static_cast<size_t>(node.n_outputs) + node.written.size() != n_out)
    PD_THROW("tensorplug: op '", node.op, "' returns ", node.n_outputs, " tensor(s) and writes ", node.written.size(),
             "; paddle's operator has ", n_out, " result(s)");
  for (const int64_t i : node.written)  // the program's value stays; the function writes a copy, the op's result
    inputs[i] = inputs[i].copy_to(inputs[i].place(), true);
  for (const auto& e : node.entries)  // the layout contract: compact copies
    if (e.contiguous)
      for (const int64_t i : e.tensors)
        if (!inputs[i].is_contiguous()) inputs[i] = inputs[i].contiguous();

  const size_t n = node.entries.size();
  if (n_in > kMaxTensors) PD_THROW("tensorplug: op '", node.op, "': ", n_in, " tensors; the operator takes ", kMaxTensors);
  DLTensor views[kMaxTensors];
  int64_t dims[2 * kMaxRank * kMaxTensors];
  TPAny items[kMaxTensors];
  tensorplug::FrameArray<TPArray, kInlineParams> arrays_frame(n);
  tensorplug::FrameArray<TPAny, kInlineParams> args_frame(n);
  TPArray* arrays = arrays_frame.data;
  TPAny* args = args_frame.data;
  size_t items_used = 0;
  auto view = [&](int64_t i, size_t param) -> DLTensor* {
    if (!View(inputs[i], &views[i], &dims[2 * kMaxRank * i], &dims[2 * kMaxRank * i + kMaxRank]))
      PD_THROW("tensorplug: ", node.op, "(): argument ", param, " has more than 16 dimensions");
    return &views[i];
  };
  for (size_t p = 0; p < n; ++p) {
    const Entry& e = node.entries[p];
    TPAny& a = args[p];
    a = TPAny{};
    switch (e.kind) {
      case kDescribeView:
        a.type_index = kTPDLTensorPtr;
        a.v_dltensor = view(e.tensors[0], p);
        break;
      case kDescribeTensor:  // below, once every view is read: nothing owned leaks if one fails
        if (inputs[e.tensors[0]].dims().size() > kMaxRank)
          PD_THROW("tensorplug: ", node.op, "(): argument ", p, " has more than 16 dimensions");
        break;
      case kDescribeViews: {
        TPAny* list = items + items_used;
        for (size_t j = 0; j < e.tensors.size(); ++j) {
          list[j] = TPAny{};
          list[j].type_index = kTPDLTensorPtr;
          list[j].v_dltensor = view(e.tensors[j], p);
        }
        items_used += e.tensors.size();
        arrays[p] = TPArray{static_cast<int64_t>(e.tensors.size()), list};
        a.type_index = kTPArray;
        a.v_array = &arrays[p];
        break;
      }
      case kDescribeStr:
        a.type_index = kTPRawStr;
        a.v_c_str = e.text.c_str();
        break;
      case kDescribeInts:
        a.type_index = kTPIntArray;
        a.v_int_array = &e.int_array;
        break;
      default: a = e.value; break;  // scalars; None is kTPNone
    }
  }
  for (size_t p = 0; p < n; ++p) {
    if (node.entries[p].kind != kDescribeTensor) continue;
    args[p].type_index = kTPTensor;
    args[p].v_tensor = &Own(inputs[node.entries[p].tensors[0]])->managed;
  }
  TPTensorSpec inline_specs[4];
  std::vector<TPTensorSpec> many;
  TPTensorSpec* expected = inline_specs;
  if (node.n_outputs > 4) expected = (many.resize(node.n_outputs), many.data());
  auto release_owned = [&] {
    for (size_t p = 0; p < n; ++p)
      if (args[p].type_index == kTPTensor) TPAnyRelease(&args[p]);
  };
  if (TPPlanPrepare(node.plan, args, primary, expected) != 0) {
    release_owned();
    RaisePlanError();
  }
  Results result;
  const TPPlanBinding binding{primary, nullptr, PaddleAllocator, nullptr};
  if (TPPlanInvoke(node.plan, args, &binding, expected, &result.value) != 0) RaisePlanError();
  results->reserve(n_out);
  if (node.n_outputs == 1) {
    DLManagedTensorVersioned* managed = result.value.v_tensor;
    result.value = TPAny{};
    results->push_back(ToPaddle(managed));
  } else if (node.n_outputs > 1) {
    TPAny* items_out = result.value.v_tuple->items;
    for (int64_t k = 0; k < node.n_outputs; ++k) {
      DLManagedTensorVersioned* managed = items_out[k].v_tensor;
      items_out[k] = TPAny{};
      results->push_back(ToPaddle(managed));
    }
  }
  for (const int64_t i : node.written) results->push_back(inputs[i]);
  return true;
}

std::vector<paddle::Tensor> Forward(const std::string& op, const std::string& call,
                                    const std::vector<paddle::Tensor>& inputs, size_t n_out) {
  const std::shared_ptr<const Node> node = Describe(op, call);
  std::vector<paddle::Tensor> results;
  if (node->plan != nullptr && RunNative(*node, inputs, n_out, &results)) return results;
  return Run(0, op, call, inputs, n_out);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int tp_paddle_set_callbacks(RunFn run, InferFn infer,
                                                                             DescribeFn describe) {
  g_run = run;
  g_infer = infer;
  g_describe = describe;
  return 2;  // the interface version static.py expects
}

// Forgets every node's description (static.py calls it when an op is declared again under a
// name a node may have described).
extern "C" __attribute__((visibility("default"))) void tp_paddle_forget_nodes() {
  {
    std::lock_guard<std::mutex> lock(g_nodes_mutex);
    g_nodes.clear();
  }
  {
    std::lock_guard<std::mutex> lock(g_infer_mutex);
    g_inferred.clear();
  }
  g_epoch.fetch_add(1, std::memory_order_acq_rel);
}

// The operators, one per number of tensors (n, at most 6) and of results (k, at most 4):
// tensorplug_op<n>_<k> takes X0..X<n-1> and gives Out0..Out<k-1>; its grad operator takes those and
// Out<j>@GRAD and gives X<i>@GRAD. paddle's PIR autodiff refuses a list (paddle::Vec) output of a grad
// operator, so the tensors are separate inputs.
#define TP_T1 const paddle::Tensor& x0
#define TP_S1 const std::vector<int64_t>& x0
#define TP_D1 const paddle::DataType& x0
#define TP_L1 x0
#define TP_IN1 "X0"
#define TP_GIN1 paddle::Grad("X0")
#define TP_T2 const paddle::Tensor& x0, const paddle::Tensor& x1
#define TP_S2 const std::vector<int64_t>& x0, const std::vector<int64_t>& x1
#define TP_D2 const paddle::DataType& x0, const paddle::DataType& x1
#define TP_L2 x0, x1
#define TP_IN2 "X0", "X1"
#define TP_GIN2 paddle::Grad("X0"), paddle::Grad("X1")
#define TP_T3 const paddle::Tensor& x0, const paddle::Tensor& x1, const paddle::Tensor& x2
#define TP_S3 const std::vector<int64_t>& x0, const std::vector<int64_t>& x1, const std::vector<int64_t>& x2
#define TP_D3 const paddle::DataType& x0, const paddle::DataType& x1, const paddle::DataType& x2
#define TP_L3 x0, x1, x2
#define TP_IN3 "X0", "X1", "X2"
#define TP_GIN3 paddle::Grad("X0"), paddle::Grad("X1"), paddle::Grad("X2")
#define TP_T4 const paddle::Tensor& x0, const paddle::Tensor& x1, const paddle::Tensor& x2, const paddle::Tensor& x3
#define TP_S4 const std::vector<int64_t>& x0, const std::vector<int64_t>& x1, const std::vector<int64_t>& x2, const std::vector<int64_t>& x3
#define TP_D4 const paddle::DataType& x0, const paddle::DataType& x1, const paddle::DataType& x2, const paddle::DataType& x3
#define TP_L4 x0, x1, x2, x3
#define TP_IN4 "X0", "X1", "X2", "X3"
#define TP_GIN4 paddle::Grad("X0"), paddle::Grad("X1"), paddle::Grad("X2"), paddle::Grad("X3")
#define TP_T5 const paddle::Tensor& x0, const paddle::Tensor& x1, const paddle::Tensor& x2, const paddle::Tensor& x3, const paddle::Tensor& x4
#define TP_S5 const std::vector<int64_t>& x0, const std::vector<int64_t>& x1, const std::vector<int64_t>& x2, const std::vector<int64_t>& x3, const std::vector<int64_t>& x4
#define TP_D5 const paddle::DataType& x0, const paddle::DataType& x1, const paddle::DataType& x2, const paddle::DataType& x3, const paddle::DataType& x4
#define TP_L5 x0, x1, x2, x3, x4
#define TP_IN5 "X0", "X1", "X2", "X3", "X4"
#define TP_GIN5 paddle::Grad("X0"), paddle::Grad("X1"), paddle::Grad("X2"), paddle::Grad("X3"), paddle::Grad("X4")
#define TP_T6 const paddle::Tensor& x0, const paddle::Tensor& x1, const paddle::Tensor& x2, const paddle::Tensor& x3, const paddle::Tensor& x4, const paddle::Tensor& x5
#define TP_S6 const std::vector<int64_t>& x0, const std::vector<int64_t>& x1, const std::vector<int64_t>& x2, const std::vector<int64_t>& x3, const std::vector<int64_t>& x4, const std::vector<int64_t>& x5
#define TP_D6 const paddle::DataType& x0, const paddle::DataType& x1, const paddle::DataType& x2, const paddle::DataType& x3, const paddle::DataType& x4, const paddle::DataType& x5
#define TP_L6 x0, x1, x2, x3, x4, x5
#define TP_IN6 "X0", "X1", "X2", "X3", "X4", "X5"
#define TP_GIN6 paddle::Grad("X0"), paddle::Grad("X1"), paddle::Grad("X2"), paddle::Grad("X3"), paddle::Grad("X4"), paddle::Grad("X5")
#define TP_OT1 const paddle::Tensor& o0, const paddle::Tensor& g0
#define TP_OS1 const std::vector<int64_t>& o0, const std::vector<int64_t>& g0
#define TP_OD1 const paddle::DataType& o0, const paddle::DataType& g0
#define TP_OL1 o0, g0
#define TP_OUT1 "Out0"
#define TP_GOUT1 paddle::Grad("Out0")
#define TP_OT2 const paddle::Tensor& o0, const paddle::Tensor& o1, const paddle::Tensor& g0, const paddle::Tensor& g1
#define TP_OS2 const std::vector<int64_t>& o0, const std::vector<int64_t>& o1, const std::vector<int64_t>& g0, const std::vector<int64_t>& g1
#define TP_OD2 const paddle::DataType& o0, const paddle::DataType& o1, const paddle::DataType& g0, const paddle::DataType& g1
#define TP_OL2 o0, o1, g0, g1
#define TP_OUT2 "Out0", "Out1"
#define TP_GOUT2 paddle::Grad("Out0"), paddle::Grad("Out1")
#define TP_OT3 const paddle::Tensor& o0, const paddle::Tensor& o1, const paddle::Tensor& o2, const paddle::Tensor& g0, const paddle::Tensor& g1, const paddle::Tensor& g2
#define TP_OS3 const std::vector<int64_t>& o0, const std::vector<int64_t>& o1, const std::vector<int64_t>& o2, const std::vector<int64_t>& g0, const std::vector<int64_t>& g1, const std::vector<int64_t>& g2
#define TP_OD3 const paddle::DataType& o0, const paddle::DataType& o1, const paddle::DataType& o2, const paddle::DataType& g0, const paddle::DataType& g1, const paddle::DataType& g2
#define TP_OL3 o0, o1, o2, g0, g1, g2
#define TP_OUT3 "Out0", "Out1", "Out2"
#define TP_GOUT3 paddle::Grad("Out0"), paddle::Grad("Out1"), paddle::Grad("Out2")
#define TP_OT4 const paddle::Tensor& o0, const paddle::Tensor& o1, const paddle::Tensor& o2, const paddle::Tensor& o3, const paddle::Tensor& g0, const paddle::Tensor& g1, const paddle::Tensor& g2, const paddle::Tensor& g3
#define TP_OS4 const std::vector<int64_t>& o0, const std::vector<int64_t>& o1, const std::vector<int64_t>& o2, const std::vector<int64_t>& o3, const std::vector<int64_t>& g0, const std::vector<int64_t>& g1, const std::vector<int64_t>& g2, const std::vector<int64_t>& g3
#define TP_OD4 const paddle::DataType& o0, const paddle::DataType& o1, const paddle::DataType& o2, const paddle::DataType& o3, const paddle::DataType& g0, const paddle::DataType& g1, const paddle::DataType& g2, const paddle::DataType& g3
#define TP_OL4 o0, o1, o2, o3, g0, g1, g2, g3
#define TP_OUT4 "Out0", "Out1", "Out2", "Out3"
#define TP_GOUT4 paddle::Grad("Out0"), paddle::Grad("Out1"), paddle::Grad("Out2"), paddle::Grad("Out3")

#define TP_DEFINE_OP(N, K)                                                                                 \
  namespace {                                                                                              \
  std::vector<paddle::Tensor> Forward##N##_##K(TP_T##N, const std::string& op, const std::string& call) {  \
    return Forward(op, call, {TP_L##N}, K);                                                                \
  }                                                                                                        \
  std::vector<std::vector<int64_t>> ForwardShape##N##_##K(TP_S##N, const std::string& op,                  \
                                                          const std::string& call) {                       \
    return Infer(op, call, {TP_L##N}, {}, K).shapes;                                                       \
  }                                                                                                        \
  std::vector<paddle::DataType> ForwardDtype##N##_##K(TP_D##N, const std::string& op,                      \
                                                      const std::string& call) {                           \
    return Infer(op, call, {}, {TP_L##N}, K).dtypes;                                                       \
  }                                                                                                        \
  std::vector<paddle::Tensor> Backward##N##_##K(TP_T##N, TP_OT##K, const std::string& op,                  \
                                                const std::string& call) {                                 \
    return Run(1, op, call, {TP_L##N, TP_OL##K}, N);                                                       \
  }                                                                                                        \
  std::vector<std::vector<int64_t>> BackwardShape##N##_##K(TP_S##N, TP_OS##K) { return {TP_L##N}; }       \
  std::vector<paddle::DataType> BackwardDtype##N##_##K(TP_D##N, TP_OD##K) { return {TP_L##N}; }           \
  }                                                                                                        \
  PD_BUILD_OP(tensorplug_op##N##_##K)                                                                      \
      .Inputs({TP_IN##N})                                                                                  \
      .Outputs({TP_OUT##K})                                                                                \
      .Attrs({"op: std::string", "call: std::string"})                                                     \
      .SetKernelFn(PD_KERNEL(Forward##N##_##K))                                                            \
      .SetInferShapeFn(PD_INFER_SHAPE(ForwardShape##N##_##K))                                              \
      .SetInferDtypeFn(PD_INFER_DTYPE(ForwardDtype##N##_##K));                                             \
  PD_BUILD_GRAD_OP(tensorplug_op##N##_##K)                                                                 \
      .Inputs({TP_IN##N, TP_OUT##K, TP_GOUT##K})                                                           \
      .Outputs({TP_GIN##N})                                                                                \
      .Attrs({"op: std::string", "call: std::string"})                                                     \
      .SetKernelFn(PD_KERNEL(Backward##N##_##K))                                                           \
      .SetInferShapeFn(PD_INFER_SHAPE(BackwardShape##N##_##K))                                             \
      .SetInferDtypeFn(PD_INFER_DTYPE(BackwardDtype##N##_##K));

TP_DEFINE_OP(1, 1) TP_DEFINE_OP(1, 2) TP_DEFINE_OP(1, 3) TP_DEFINE_OP(1, 4)
TP_DEFINE_OP(2, 1) TP_DEFINE_OP(2, 2) TP_DEFINE_OP(2, 3) TP_DEFINE_OP(2, 4)
TP_DEFINE_OP(3, 1) TP_DEFINE_OP(3, 2) TP_DEFINE_OP(3, 3) TP_DEFINE_OP(3, 4)
TP_DEFINE_OP(4, 1) TP_DEFINE_OP(4, 2) TP_DEFINE_OP(4, 3) TP_DEFINE_OP(4, 4)
TP_DEFINE_OP(5, 1) TP_DEFINE_OP(5, 2) TP_DEFINE_OP(5, 3) TP_DEFINE_OP(5, 4)
TP_DEFINE_OP(6, 1) TP_DEFINE_OP(6, 2) TP_DEFINE_OP(6, 3) TP_DEFINE_OP(6, 4)
