// paddle's custom operators for tensorplug ops, compiled against the installed paddle at
// run time (plugins/tensorplug_adapters/paddle/static.py builds and loads this file).
//
// One generic operator per number of tensors n and of results k, `tensorplug_op<n>_<k>` (at the
// end of this file): its inputs are the op's tensors, its attributes the op's name (`op`) and
// the rest of the call (`call`, JSON written by static.py: scalars, where each tensor
// goes, the kernel library). Its kernel and its infer-shape/infer-dtype functions call back into
// Python (set by tp_paddle_set_callbacks, ctypes callbacks: they take the GIL), where the
// declaration lives: the kernel hands paddle's tensors over as DLPack and takes the
// results back as DLPack (zero copy: paddle::from_blob with the producer's deleter), the
// infer functions evaluate the op's output rule. `tensorplug_op<n>_<k>_grad` is the operator
// paddle's autodiff appends: its kernel calls the op's declared backward (or raises, naming
// the op, when it has none).
//
// Nothing here knows an op: a program saved with these operators runs in a process that
// registers this library and finds the kernels (static.py, docs/compilers.md).

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "paddle/common/enforce.h"
#include "paddle/extension.h"
#include "tensorplug/dlpack.h"

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

Specs Infer(const std::string& op, const std::string& call, const std::vector<std::vector<int64_t>>& shapes,
            const std::vector<phi::DataType>& dtypes, size_t n_out) {
  if (g_infer == nullptr) PD_THROW("tensorplug: the paddle operator of ", op, " is used before its callbacks are set");
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

}  // namespace

extern "C" __attribute__((visibility("default"))) int tp_paddle_set_callbacks(RunFn run, InferFn infer) {
  g_run = run;
  g_infer = infer;
  return 1;  // the interface version static.py expects
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
    return Run(0, op, call, {TP_L##N}, K);                                                                 \
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
