// The XLA FFI handler: runs an exported tensorplug function as an XLA custom call
// (jax.ffi.ffi_call inside jax.jit, vmap, grad).
//
// Each plan (an op, in one call form) has a slot, and each slot its own handler function per
// platform, registered as an XLA FFI target named after the plan: the function XLA calls
// names the plan. The plan (which XLA argument, result or attribute feeds each parameter)
// is defined from Python by xla_ffi_define before the op is traced. Per call the handler
// turns XLA buffers into DLTensor views (no copy), attributes into scalars, binds XLA's
// stream as the env stream and lends XLA's result buffers to the function's
// Tensor::FromEnvAlloc requests in order (an op that declares none binds an allocator that
// refuses them), calls the function through the call plan, and checks what it returned.
// It runs on XLA's threads without the GIL and touches no Python object.
//
// Over 500 lines: the plan registry, the lent results, the per-call conversion and the
// handler's error reporting share the plan's layout and are read together; the XLA types
// are apart in xla_ffi_api.h.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "native.h"
#include "tensorplug/dtype.h"
#include "tensorplug/plan.h"
#include "xla_ffi_api.h"

namespace tensorplug_adapters::jax {

namespace {

using tensorplug::DataTypeToString;
using tensorplug::python::GuardedMethod;
using tensorplug::python::PlanOfCapsule;

// XLA's names (xla_ffi_api.h).
using namespace tensorplug::xla_ffi;
namespace xla_ffi = tensorplug::xla_ffi;
using xla_ffi::Api;
using xla_ffi::Args;
using xla_ffi::Attrs;
using xla_ffi::Buffer;
using xla_ffi::ByteSpan;
using xla_ffi::CallFrame;
using xla_ffi::DataType;
using xla_ffi::Error;
using xla_ffi::Rets;
using xla_ffi::Scalar;

// ------------------------------------------------------------------- plans ----
// Where a parameter's value comes from.
enum class Source : int32_t {
  kInput = 0,   // XLA argument buffer `index`, read-only
  kOutput = 1,  // XLA result buffer `index` (a written parameter: aliased to its input, or a fresh result)
  kAttr = 2,    // attribute `attr` (at `attr_slot` of the call's attributes, which XLA sorts by name)
  kNone = 3,    // always None
  kInputs = 4,  // XLA argument buffers index .. index + count - 1, as one list (views), read-only
};

struct ParamPlan {
  Source source;
  int32_t index;
  int32_t count;      // kInputs: the list's length
  int32_t kind;       // the TPTypeIndex the function takes: view, tensor, int, float, bool, str, dtype, ints, views
  int32_t attr_slot;  // kAttr: the attribute's position among the call's attributes
  // kInput/kOutput views: their TPAny flags. XLA's buffers are dense, as the views made of
  // them say (FillStrides); only inputs are read-only.
  uint32_t view_flags;
  std::string attr;
  std::string name;
};

int RefuseUndeclaredResult(DLTensor*, DLManagedTensorVersioned** out, void* error_ctx,
                           void (*set_error)(void*, const char*, const char*));

// A parameter RunFast passes as a view of one XLA buffer.
struct FastView {
  int32_t param;        // its position among the function's arguments
  int32_t index;        // XLA argument `index`, or result `index` when written
  uint32_t view_flags;  // ParamPlan::view_flags
  bool written;         // Source::kOutput
};

// A parameter RunFast passes as a numeric scalar attribute. The attribute's name is
// recognized by its length and end bytes (XLA sorts names; the plan knows them all).
struct FastAttr {
  int32_t param;  // its position among the function's arguments
  int32_t slot;   // ParamPlan::attr_slot
  int32_t kind;   // kTPFloat, kTPInt or kTPBool
  uint32_t name_size;
  char name_first;
  char name_last;
};

struct OpPlan {
  std::string name;  // the plan's key (its XLA target's name): "ns::op" or "ns::op/without:...", ...
  std::string op;    // the op's name, for messages
  TPPlanHandle plan;  // the call plan: one reference, never released (plans live for the process)
  std::vector<ParamPlan> params;
  int32_t n_inputs;   // XLA arguments
  int32_t n_outputs;  // results that are written parameters (first in XLA's results)
  int32_t n_alloc;    // results the function allocates with FromEnvAlloc (after them)
  int32_t n_rets;     // n_outputs + n_alloc: XLA's results
  int32_t n_strings;  // str and dtype parameters
  int32_t n_attrs;    // attributes of every call: one per kAttr parameter
  int32_t n_items;    // tensors in views lists, all lists together
  int32_t n_params;   // params.size()
  // The fast path (RunFast): every parameter a view of one buffer, a numeric scalar
  // attribute or None, at most kFastParams of them and kFastAlloc allocated results.
  bool fast;
  // RunFast's parameters grouped by source, each group in parameter order: one short loop
  // per group instead of a switch per parameter (the views' loop is the hot one).
  std::vector<FastView> fast_views;
  std::vector<FastAttr> fast_attrs;
  std::vector<int32_t> fast_nones;  // parameter indices
  // What a destination-passing call on the CPU binds: the same every call (no stream).
  TPPlanBinding cpu_destination_binding{{kDLCPU, 0}, nullptr, RefuseUndeclaredResult, nullptr};
};

// Limits of the fast path: its arrays live in the handler's frame at fixed sizes. Calls
// beyond them (or whose buffers exceed kFastRank dimensions) take the general path.
constexpr int32_t kFastParams = 16;
constexpr int32_t kFastAlloc = 4;
constexpr int64_t kFastRank = 8;

// Plans never die: XLA executables compiled against a plan may run until the process ends.
// Redefining a key installs a new plan in the key's slot and keeps the old one. XLA's
// handler signature carries no user data, so every slot has a handler function of its own
// per platform (HandlerAt), and the slot is all the handler needs to find its plan: no
// attribute to decode, no lookup. kMaxPlans bounds the plans one process defines.
constexpr int32_t kMaxPlans = 2048;
std::atomic<const OpPlan*> g_plan_slots[kMaxPlans];

std::mutex g_define_mutex;  // definitions only (from Python): the names below
std::unordered_map<std::string, int32_t>& SlotsByName() {
  static auto* slots = new std::unordered_map<std::string, int32_t>();
  return *slots;
}

// ------------------------------------------------------------------ dtypes ----
// XLA element types that have a DLPack equivalent.
struct DTypeEntry {
  DataType xla;
  DLDataType dl;
};
constexpr DTypeEntry kDTypes[] = {
    {kPred, {kDLBool, 8, 1}},    {kS8, {kDLInt, 8, 1}},        {kS16, {kDLInt, 16, 1}},
    {kS32, {kDLInt, 32, 1}},     {kS64, {kDLInt, 64, 1}},      {kU8, {kDLUInt, 8, 1}},
    {kU16, {kDLUInt, 16, 1}},    {kU32, {kDLUInt, 32, 1}},     {kU64, {kDLUInt, 64, 1}},
    {kF16, {kDLFloat, 16, 1}},   {kF32, {kDLFloat, 32, 1}},    {kF64, {kDLFloat, 64, 1}},
    {kBF16, {kDLBfloat, 16, 1}}, {kC64, {kDLComplex, 64, 1}},  {kC128, {kDLComplex, 128, 1}},
};

// Direct index by XLA's element type code (small numbers), built at compile time: a call
// converts every buffer.
struct DTypeTable {
  const DTypeEntry* by_code[32];
  constexpr DTypeTable() : by_code{} {
    for (const auto& entry : kDTypes) by_code[entry.xla] = &entry;
  }
};
constexpr DTypeTable kByCode{};

inline const DTypeEntry* FromXla(DataType dtype) {
  return static_cast<uint32_t>(dtype) < 32 ? kByCode.by_code[dtype] : nullptr;
}

std::string ShapeText(DLDataType dtype, int64_t ndim, const int64_t* shape) {
  std::string text = DataTypeToString(dtype) + "[";
  for (int64_t i = 0; i < ndim; ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// ------------------------------------------------------------------ errors ----
Error* MakeError(const Api* api, ErrorCode code, const std::string& message) {
  ErrorCreateArgs args{TP_XLA_FFI_END(ErrorCreateArgs, errc), nullptr, message.c_str(), code};
  return api->error_create(&args);
}

ErrorCode CodeForKind(const char* kind) {
  if (!strcmp(kind, "ValueError") || !strcmp(kind, "TypeError") || !strcmp(kind, "IndexError") ||
      !strcmp(kind, "KeyError") || !strcmp(kind, "OverflowError"))
    return kErrorInvalidArgument;
  if (!strcmp(kind, "MemoryError")) return kErrorResourceExhausted;
  if (!strcmp(kind, "NotImplementedError")) return kErrorUnimplemented;
  return kErrorInternal;
}

// ------------------------------------------------------------ lent results ----
// The scratch bytes of one lent result tensor (TPLentTensorDeleter).
struct alignas(void*) LentScratch {
  unsigned char bytes[TENSORPLUG_LENT_SCRATCH_BYTES];
};

// ------------------------------------------------------- the call in flight ----
// One per call of an op that allocates results: the result buffers lent to the kernel's
// FromEnvAlloc requests (TPEnvLend), and what a refusal's message needs.
int RefuseRequest(TPLentTensors* lent, const DLTensor* prototype) noexcept;
struct XlaCall : TPLentTensors {
  const OpPlan* plan = nullptr;
  bool refused = false;  // a request was refused: the kernel's error is that message, reported as is
  XlaCall(const OpPlan* p, DLManagedTensorVersioned* results, int32_t n)
      : TPLentTensors{results, n, 0, RefuseRequest, nullptr, nullptr}, plan(p) {}
};

// The managed tensors FromEnvAlloc hands out inside the handler, one per allocated result,
// filled before the call: they describe XLA's result buffers and are lent (the kernel's
// Tensor keeps its count in the slot's scratch bytes). c_api.h promises that they stay
// allocated: a kernel that keeps a result Tensor past the call (a bug: the buffer is XLA's
// again) must still find memory of ours when it drops it. So they live in blocks that are
// never freed and are reused by later calls: each thread has a list of its own (no lock
// per call; a call inside a call takes another block), and the blocks of threads that
// exited go to a shared list.
struct LentBlock {
  LentBlock* next;  // in the thread's list, or the shared one
  int32_t capacity;
  bool in_use;
  DLManagedTensorVersioned* slots;  // `capacity` of each, never freed
  LentScratch* scratch;
  int64_t* strides;  // TP_MAX_NDIM per slot
  int64_t unit_stride;  // the strides of every slot of at most one dimension
  XlaCall call;         // lending `slots`: a call sets its count, next, plan and refused
};
thread_local LentBlock* tls_lent_blocks __attribute__((tls_model("initial-exec"))) = nullptr;

std::mutex g_lent_mutex;
LentBlock* g_shared_lent_blocks = nullptr;  // of exited threads
std::vector<LentBlock*>& AllLentBlocks() {  // every block ever made (kept reachable: never freed)
  static auto* blocks = new std::vector<LentBlock*>();
  return *blocks;
}

// Hands the thread's blocks to the shared list when the thread exits (none is in use then).
struct ThreadLentBlocks {
  ~ThreadLentBlocks() {
    std::lock_guard<std::mutex> lock(g_lent_mutex);
    while (LentBlock* block = tls_lent_blocks) {
      tls_lent_blocks = block->next;
      block->next = g_shared_lent_blocks;
      g_shared_lent_blocks = block;
    }
  }
};

// A free block of the thread's with at least `n` slots, or one from the shared list or
// made, added to the thread's list (at its head: the next call tries it first).
__attribute__((noinline)) LentBlock* AcquireLentBlockSlow(int32_t n) {
  static thread_local ThreadLentBlocks owner;  // constructed here: registers its destructor
  (void)owner;
  for (LentBlock* block = tls_lent_blocks; block != nullptr; block = block->next) {
    if (!block->in_use && block->capacity >= n) return block;
  }
  LentBlock* block = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_lent_mutex);
    for (LentBlock** link = &g_shared_lent_blocks; *link != nullptr; link = &(*link)->next) {
      if ((*link)->capacity >= n) {
        block = *link;
        *link = block->next;
        break;
      }
    }
    if (block == nullptr) {
      const int32_t capacity = std::max<int32_t>(n, 4);
      block = new LentBlock{nullptr, capacity, false, new DLManagedTensorVersioned[capacity](),
                            new LentScratch[capacity](), new int64_t[size_t(capacity) * TP_MAX_NDIM], 1,
                            XlaCall(nullptr, nullptr, 0)};
      block->call.tensors = block->slots;
      // What every lent tensor of the slot has in common (LendResults fills its dl_tensor).
      for (int32_t k = 0; k < capacity; ++k) {
        DLManagedTensorVersioned& slot = block->slots[k];
        slot.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
        slot.manager_ctx = &block->scratch[k];
        slot.deleter = TPLentTensorDeleter;
        slot.flags = 0;
      }
      AllLentBlocks().push_back(block);
    }
  }
  block->next = tls_lent_blocks;
  tls_lent_blocks = block;
  return block;
}

// The block's call record, set for a call of `plan` (its slots filled: LendResults).
inline XlaCall& CallOf(LentBlock* block, const OpPlan& plan) {
  XlaCall& call = block->call;
  call.count = plan.n_alloc;
  call.next = 0;
  call.plan = &plan;
  call.refused = false;
  return call;
}

// A block of at least `n` slots for one call, free again when the call is over.
struct LentLease {
  LentBlock* block;
  __attribute__((always_inline)) explicit LentLease(int32_t n) {
    block = tls_lent_blocks;
    if (__builtin_expect(block == nullptr || block->in_use || block->capacity < n, 0)) {
      block = AcquireLentBlockSlow(n);
    }
    block->in_use = true;
  }
  ~LentLease() { block->in_use = false; }
  LentLease(const LentLease&) = delete;
  LentLease& operator=(const LentLease&) = delete;
};

// Row-major compact strides, as XLA lays buffers out by default.
inline void FillStrides(int64_t rank, const int64_t* dims, int64_t* strides) {
  int64_t step = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    strides[i] = step;
    step *= dims[i] > 1 ? dims[i] : 1;
  }
}

bool IsCompact(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  int64_t expected = 1;
  for (int32_t i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i] > 0 ? t.shape[i] : 1;
  }
  return true;
}

// Why FromEnvAlloc request `prototype` of `call` does not get the next lent result (the
// slow path: messages are built here only). The first message of a call is kept.
int RefuseRequestImpl(XlaCall* call, const DLTensor* prototype) {
  auto fail = [&](const char* kind, const std::string& message) {
    call->refused = true;
    TPErrorSet(kind, message.c_str());
    return -1;
  };
  const OpPlan& plan = *call->plan;
  const int32_t k = call->next;
  const std::string call_text = "op '" + plan.op + "': Tensor::FromEnvAlloc call " + std::to_string(k + 1);
  if (prototype->ndim < 0 || prototype->ndim > TP_MAX_NDIM || (prototype->ndim > 0 && prototype->shape == nullptr)) {
    return fail("ValueError", call_text + " is malformed: " + std::to_string(prototype->ndim) + " dimensions" +
                                  (prototype->shape == nullptr ? " and no shape" : ""));
  }
  const std::string asked = ShapeText(prototype->dtype, prototype->ndim, prototype->shape);
  if (k >= call->count) {
    return fail("ValueError", call_text + " (" + asked + ") is one more than the " + std::to_string(call->count) +
                                  " result(s) its shape rule declares");
  }
  const DLTensor& t = call->tensors[k].dl_tensor;  // XLA's result buffer k, as lent
  bool same = prototype->ndim == t.ndim && prototype->dtype.code == t.dtype.code &&
              prototype->dtype.bits == t.dtype.bits && prototype->dtype.lanes == t.dtype.lanes;
  for (int32_t i = 0; same && i < prototype->ndim; ++i) same = prototype->shape[i] == t.shape[i];
  if (!same) {
    return fail("ValueError", call_text + " asked for " + asked + ", but the op's shape rule declares " +
                                  ShapeText(t.dtype, t.ndim, t.shape) + " for result " + std::to_string(k));
  }
  if (prototype->device.device_type != t.device.device_type || prototype->device.device_id != t.device.device_id) {
    return fail("ValueError", call_text + " asked for device type " + std::to_string(prototype->device.device_type) +
                                  ":" + std::to_string(prototype->device.device_id) + ", but XLA runs it on " +
                                  std::to_string(t.device.device_type) + ":" + std::to_string(t.device.device_id));
  }
  return fail("ValueError", call_text + " asked for non-contiguous strides; XLA results are row-major contiguous");
}

// TPLentTensors::refuse: the message, for a request that does not match the result the
// op's shape rule declares (or one request too many). Exceptions (out of memory while
// building it) stop here.
int RefuseRequest(TPLentTensors* lent, const DLTensor* prototype) noexcept {
  try {
    return RefuseRequestImpl(static_cast<XlaCall*>(lent), prototype);
  } catch (...) {
    TPErrorSet("MemoryError", "out of memory");
    return -1;
  }
}

// The allocator bound while an op that declares no result runs (destination passing): XLA
// has no buffer for a Tensor::FromEnvAlloc request, and inside jax.jit there is nothing
// else to give (the plan's error names the op). A plain function, so that the common call
// binds it without a lent list to build.
int RefuseUndeclaredResult(DLTensor*, DLManagedTensorVersioned** out, void* error_ctx,
                           void (*set_error)(void*, const char*, const char*)) {
  *out = nullptr;
  set_error(error_ctx, "ValueError",
            "the op's shape rule declares no result, and inside jax.jit Tensor::FromEnvAlloc "
            "can only hand out XLA's result buffers");
  return -1;
}

// Fill `block`'s slots with the call's allocated results (XLA's result buffers after the
// written parameters'), before the function runs. False when one has an element type
// without a DLPack equivalent or more than `max_rank` dimensions (nothing lent then).
inline __attribute__((always_inline)) bool LendResults(const OpPlan& plan, const Rets& rets, DLDevice device,
                                                       int64_t max_rank, LentBlock* block) {
  auto lend = [&](int32_t k) __attribute__((always_inline)) {
    const Buffer* buffer = static_cast<const Buffer*>(rets.rets[plan.n_outputs + k]);
    const DTypeEntry* entry = FromXla(buffer->dtype);
    const int64_t rank = buffer->rank;
    if (entry == nullptr || static_cast<uint64_t>(rank) > static_cast<uint64_t>(max_rank)) return false;
    int64_t* strides = &block->unit_stride;  // compact with at most one dimension: 1
    if (rank > 1) {
      strides = block->strides + size_t(k) * TP_MAX_NDIM;
      FillStrides(rank, buffer->dims, strides);
    }
    // The rest of the slot was set when the block was made (AcquireLentBlockSlow). Field
    // by field, as RunFast's views: a helper shared by both cost 7 instructions per call.
    DLTensor& t = block->slots[k].dl_tensor;
    t.data = buffer->data;
    t.device = device;
    t.ndim = static_cast<int32_t>(rank);
    t.dtype = entry->dl;
    t.shape = buffer->dims;
    t.strides = strides;
    t.byte_offset = 0;
    return true;
  };
  // One result, the common case, without the loop: its bookkeeping and register pressure cost
  // the handler 29 instructions per call (benchmarks/README.md, issue 41 fourth pass).
  if (plan.n_alloc == 1) return lend(0);
  for (int32_t k = 0; k < plan.n_alloc; ++k) {
    if (!lend(k)) return false;
  }
  return true;
}

using tensorplug::FrameArray;  // plan.h: the per-call arrays of the general path

// The value of a scalar attribute as int64/double; false for non-numeric element types.
bool ScalarValue(const Scalar* s, int64_t* i, double* d, bool* is_float) {
  *is_float = false;
  switch (s->dtype) {
    case kPred: *i = *static_cast<const bool*>(s->value); return true;
    case kS8: *i = *static_cast<const int8_t*>(s->value); return true;
    case kS16: *i = *static_cast<const int16_t*>(s->value); return true;
    case kS32: *i = *static_cast<const int32_t*>(s->value); return true;
    case kS64: *i = *static_cast<const int64_t*>(s->value); return true;
    case kU8: *i = *static_cast<const uint8_t*>(s->value); return true;
    case kU16: *i = *static_cast<const uint16_t*>(s->value); return true;
    case kU32: *i = *static_cast<const uint32_t*>(s->value); return true;
    case kU64: *i = static_cast<int64_t>(*static_cast<const uint64_t*>(s->value)); return true;
    case kF32: *d = *static_cast<const float*>(s->value); *is_float = true; return true;
    case kF64: *d = *static_cast<const double*>(s->value); *is_float = true; return true;
    default: return false;
  }
}

// Checks one returned tensor against result buffer `k` of the allocated results: it must be
// that buffer (FromEnvAlloc), or -- on CPU -- a tensor of its shape, copied into it.
bool TakeResult(const OpPlan& plan, Rets* rets, DLDevice device, int32_t k, TPAny* value, std::string* error) {
  if (value->type_index != kTPTensor) {
    *error = "op '" + plan.op + "' returned a non-tensor value where its shape rule declares result " +
             std::to_string(k);
    return false;
  }
  const DLTensor& t = value->v_tensor->dl_tensor;
  const Buffer* buffer = static_cast<const Buffer*>(rets->rets[plan.n_outputs + k]);
  if (t.data == buffer->data && t.byte_offset == 0) return true;
  const DTypeEntry* entry = FromXla(buffer->dtype);
  bool same = entry && t.ndim == buffer->rank && t.dtype.code == entry->dl.code && t.dtype.bits == entry->dl.bits &&
              t.dtype.lanes == 1;
  for (int32_t i = 0; same && i < t.ndim; ++i) same = t.shape[i] == buffer->dims[i];
  if (!same) {
    *error = "op '" + plan.op + "' returned " + ShapeText(t.dtype, t.ndim, t.shape) + " as result " +
             std::to_string(k) + ", but its shape rule declares " +
             (entry ? ShapeText(entry->dl, buffer->rank, buffer->dims) : std::string("?"));
    return false;
  }
  if (device.device_type != kDLCPU || t.device.device_type != kDLCPU || !IsCompact(t)) {
    *error = "op '" + plan.op + "' returned result " + std::to_string(k) +
             " in memory XLA does not own; allocate results with Tensor::FromEnvAlloc";
    return false;
  }
  int64_t numel = 1;
  for (int32_t i = 0; i < t.ndim; ++i) numel *= t.shape[i];
  std::memcpy(buffer->data, static_cast<const char*>(t.data) + t.byte_offset,
              static_cast<size_t>(numel) * ((t.dtype.bits + 7) / 8));
  return true;
}

// The error for an XLA call whose buffers or attributes do not match the plan.
Error* MismatchError(const Api* api, const OpPlan& plan, const CallFrame* frame) {
  if (frame->args.size != plan.n_inputs || frame->rets.size != plan.n_rets) {
    return MakeError(api, kErrorInvalidArgument,
                     "op '" + plan.op + "': XLA passed " + std::to_string(frame->args.size) + " argument(s) and " +
                         std::to_string(frame->rets.size) + " result(s), expected " + std::to_string(plan.n_inputs) +
                         " and " + std::to_string(plan.n_rets));
  }
  return MakeError(api, kErrorInvalidArgument,
                   "op '" + plan.op + "': XLA passed " + std::to_string(frame->attrs.size) +
                       " attribute(s), its plan expects " + std::to_string(plan.n_attrs) +
                       " (one per non-None scalar or int list argument)");
}

// After the function ran: its error, or its results checked against XLA's result buffers
// (the function's tensors must be those buffers, in order).
Error* FinishCall(const Api* api, const OpPlan& plan, CallFrame* frame, DLDevice device, int rc, bool refused,
                  TPAny* result_ptr) {
  TPAny& result = *result_ptr;
  if (rc != 0) {
    const char* kind = "RuntimeError";
    const char* message = "unknown error";
    TPErrorGet(&kind, &message);
    // The plan's message names the op: "<op>(): <what>" (shown with the kind after the op,
    // or alone for a refused allocation, whose message names the op itself), or
    // "op '<op>' returned ..." (a result that breaks the declaration).
    const std::string prefix = plan.op + "(): ";
    std::string text = message;
    const bool prefixed = text.compare(0, prefix.size(), prefix) == 0;
    if (prefixed) text = refused ? text.substr(prefix.size()) : prefix + kind + ": " + text.substr(prefix.size());
    if (refused) {
      Error* error = MakeError(api, kErrorInvalidArgument, text);
      TPErrorClear();
      return error;
    }
    ErrorCode code = CodeForKind(kind);
    TPErrorClear();
    return MakeError(api, code, text);
  }

  // Results: the function's tensors must be XLA's result buffers, in order (released
  // below: a lent slot's deleter frees nothing).
  if (result.type_index == kTPNone) {
    if (plan.n_alloc == 0) return nullptr;  // destination passing: nothing to check or release
    return MakeError(api, kErrorInvalidArgument,
                     "op '" + plan.op + "' returned 0 tensor(s), but its shape rule declares " +
                         std::to_string(plan.n_alloc));
  }
  std::string error;
  int32_t returned = 0;
  bool ok = true;
  if (result.type_index == kTPTuple) {
    returned = result.v_tuple->size;
    for (int32_t k = 0; ok && k < returned && k < plan.n_alloc; ++k)
      ok = TakeResult(plan, &frame->rets, device, k, &result.v_tuple->items[k], &error);
  } else {
    returned = 1;
    // The common case inline: the kernel returned XLA's buffer, as FromEnvAlloc made it.
    const bool is_buffer = plan.n_alloc >= 1 && result.type_index == kTPTensor &&
                           result.v_tensor->dl_tensor.data == static_cast<const Buffer*>(frame->rets.rets[plan.n_outputs])->data &&
                           result.v_tensor->dl_tensor.byte_offset == 0;
    if (plan.n_alloc >= 1 && !is_buffer) ok = TakeResult(plan, &frame->rets, device, 0, &result, &error);
  }
  TPAnyRelease(&result);
  if (!ok) return MakeError(api, kErrorInvalidArgument, error);
  if (returned != plan.n_alloc) {
    return MakeError(api, kErrorInvalidArgument,
                     "op '" + plan.op + "' returned " + std::to_string(returned) +
                         " tensor(s), but its shape rule declares " + std::to_string(plan.n_alloc));
  }
  return nullptr;
}

// The fast path for plans whose parameters are all buffer views, numeric scalar attributes
// or None (RunOp checked the call's sizes against the plan): fixed arrays in the frame, one
// loop per kind of parameter (OpPlan::fast_views), no strings. Returns false, having called nothing, when the call
// needs the general path (an element type without a DLPack equivalent, a buffer of more
// than kFastRank dimensions, an attribute of another type): that path reports the error.
inline __attribute__((always_inline)) bool RunFast(CallFrame* frame, const OpPlan& plan, DLDevice device,
                                                   void* stream, Error** error) {
  TPAny args[kFastParams];
  DLTensor views[kFastParams];
  int64_t strides[kFastParams * kFastRank];
  int64_t* next_strides = strides;
  int64_t unit_stride = 1;
  // Indexed by FastView::written: a load where a branch would pick the array.
  void* const* const buffers[2] = {frame->args.args, frame->rets.rets};
  DLTensor* view = views;
  for (const FastView& v : plan.fast_views) {
    const Buffer* buffer = static_cast<const Buffer*>(buffers[v.written][v.index]);
    const DTypeEntry* entry = FromXla(buffer->dtype);
    const int64_t rank = buffer->rank;
    if (entry == nullptr || static_cast<uint64_t>(rank) > static_cast<uint64_t>(kFastRank)) return false;
    // One dimension: its compact stride is 1 whatever its extent (one shared entry).
    int64_t* view_strides = &unit_stride;
    if (rank > 1) {
      view_strides = next_strides;
      FillStrides(rank, buffer->dims, view_strides);
      next_strides += rank;
    }
    view->data = buffer->data;
    view->device = device;
    view->ndim = static_cast<int32_t>(rank);
    view->dtype = entry->dl;
    view->shape = buffer->dims;
    view->strides = view_strides;
    view->byte_offset = 0;
    TPAny& a = args[v.param];
    a.type_index = kTPDLTensorPtr;
    a.flags = v.view_flags;
    a.v_dltensor = view;
    ++view;
  }
  for (const FastAttr& p : plan.fast_attrs) {
    TPAny& a = args[p.param];
    const int32_t slot = p.slot;
    const ByteSpan* attr_name = frame->attrs.names[slot];
    if (frame->attrs.types[slot] != kAttrScalar || attr_name->len != p.name_size ||
        attr_name->ptr[0] != p.name_first || attr_name->ptr[attr_name->len - 1] != p.name_last) {
      return false;
    }
    const auto* scalar = static_cast<const Scalar*>(frame->attrs.attrs[slot]);
    a.flags = 0;
    if (p.kind == kTPFloat && scalar->dtype == kF64) {  // what jax passes for a Python float
      a.type_index = kTPFloat;
      a.v_float64 = *static_cast<const double*>(scalar->value);
      continue;
    }
    int64_t iv = 0;
    double dv = 0;
    bool is_float = false;
    if (!ScalarValue(scalar, &iv, &dv, &is_float) || (is_float && p.kind != kTPFloat)) return false;
    if (p.kind == kTPFloat) {
      a.type_index = kTPFloat;
      a.v_float64 = is_float ? dv : static_cast<double>(iv);
    } else {
      a.type_index = p.kind == kTPBool ? kTPBool : kTPInt;
      a.v_int64 = p.kind == kTPBool ? (iv != 0) : iv;
    }
  }
  for (const int32_t i : plan.fast_nones) args[i] = TPAny{};
  TPAny result;  // TPPlanInvoke sets it first
  int rc;
  if (plan.n_alloc == 0) {
    const TPPlanBinding binding{device, stream, RefuseUndeclaredResult, nullptr};
    // Run<kDevice> inlines this: the CPU's test folds away, and its call stores no binding.
    rc = TPPlanInvoke(plan.plan, args, device.device_type == kDLCPU ? &plan.cpu_destination_binding : &binding,
                      nullptr, &result);
    // Destination passing, the common case: nothing returned, nothing to check.
    *error = rc == 0 && result.type_index == kTPNone ? nullptr
                                                      : FinishCall(frame->api, plan, frame, device, rc, false, &result);
    return true;
  }
  LentLease lease(plan.n_alloc);
  if (!LendResults(plan, frame->rets, device, kFastRank, lease.block)) return false;
  XlaCall& call = CallOf(lease.block, plan);
  const TPPlanBinding binding{device, stream, nullptr, &call};
  rc = TPPlanInvoke(plan.plan, args, &binding, nullptr, &result);
  // One allocated result, the common case: the function returned the slot FromEnvAlloc
  // lent it (lent: nothing to release).
  *error = rc == 0 && result.type_index == kTPTensor && plan.n_alloc == 1 && result.v_tensor == &lease.block->slots[0]
               ? nullptr
               : FinishCall(frame->api, plan, frame, device, rc, call.refused, &result);
  return true;
}

Error* RunGeneral(CallFrame* frame, const OpPlan& plan, DLDevice device, void* stream);

inline __attribute__((always_inline)) Error* RunOp(CallFrame* frame, DLDeviceType device_type, int32_t slot) {
  const Api* api = frame->api;
  if (frame->extension_start != nullptr && frame->extension_start->type == kExtensionMetadata) {
    // XLA asks which API version the handler was built for.
    auto* extension = reinterpret_cast<MetadataExtension*>(frame->extension_start);
    Metadata* metadata = extension->metadata;
    metadata->api_version = ApiVersion{TP_XLA_FFI_END(ApiVersion, minor_version), nullptr, kApiMajor, kApiMinor};
    metadata->traits = 0;
    return nullptr;
  }
  if (frame->struct_size < TP_XLA_FFI_END(CallFrame, attrs)) {
    return MakeError(api, kErrorFailedPrecondition, "tensorplug: XLA call frame is older than XLA FFI 0.1");
  }
  if (frame->stage != kExecute) return nullptr;

  const OpPlan* plan_ptr = g_plan_slots[slot].load(std::memory_order_acquire);
  if (plan_ptr == nullptr) {  // a handler capsule registered by hand, before its plan was defined
    return MakeError(api, kErrorNotFound,
                     "tensorplug XLA handler " + std::to_string(slot) + " has no plan (define the op with "
                     "tensorplug.op and call it before running the computation)");
  }
  const OpPlan& plan = *plan_ptr;
  if (frame->args.size != plan.n_inputs || frame->rets.size != plan.n_rets || frame->attrs.size != plan.n_attrs) {
    return MismatchError(api, plan, frame);
  }

  DLDevice device{device_type, 0};
  void* stream = nullptr;
  if (device_type != kDLCPU) {
    if (api->struct_size >= TP_XLA_FFI_END(Api, device_ordinal_get)) {
      DeviceOrdinalGetArgs args{TP_XLA_FFI_END(DeviceOrdinalGetArgs, device_ordinal), nullptr, frame->ctx, 0};
      if (Error* error = api->device_ordinal_get(&args)) return error;
      device.device_id = args.device_ordinal;
    }
    StreamGetArgs args{TP_XLA_FFI_END(StreamGetArgs, stream), nullptr, frame->ctx, nullptr};
    if (Error* error = api->stream_get(&args)) return error;
    stream = args.stream;
  }

  if (plan.fast) {
    Error* error = nullptr;
    if (RunFast(frame, plan, device, stream, &error)) return error;
  }
  return RunGeneral(frame, plan, device, stream);
}

// Any plan (RunOp checked the call's sizes against it), and the calls RunFast declined:
// arrays sized per call, every parameter source, every error reported.
__attribute__((noinline)) // A managed tensor over XLA's buffer for a "tensor" parameter (which the function owns and
// releases): one allocation holds it, its shape and strides; releasing it frees that alone.
DLManagedTensorVersioned* Unowned(const DLTensor& view, uint64_t flags) {
  const size_t dims = sizeof(int64_t) * static_cast<size_t>(view.ndim);
  auto* managed = static_cast<DLManagedTensorVersioned*>(std::malloc(sizeof(DLManagedTensorVersioned) + 2 * dims));
  if (managed == nullptr) return nullptr;
  auto* shape = reinterpret_cast<int64_t*>(managed + 1);
  int64_t* strides = shape + view.ndim;
  if (view.ndim > 0) {
    std::memcpy(shape, view.shape, dims);
    std::memcpy(strides, view.strides, dims);
  }
  managed->version = {DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
  managed->manager_ctx = nullptr;
  managed->deleter = [](DLManagedTensorVersioned* self) { std::free(self); };
  managed->flags = flags;
  managed->dl_tensor = view;
  managed->dl_tensor.shape = shape;
  managed->dl_tensor.strides = strides;
  return managed;
}

Error* RunGeneral(CallFrame* frame, const OpPlan& plan, DLDevice device, void* stream) {
  const Api* api = frame->api;
  // Every buffer's rank, checked once; their sum sizes the strides below.
  uint64_t total_rank = 0;
  bool ranks_ok = true;
  for (int64_t i = 0; i < frame->args.size; ++i) {
    const uint64_t rank = static_cast<uint64_t>(static_cast<const Buffer*>(frame->args.args[i])->rank);
    ranks_ok &= rank <= TP_MAX_NDIM;
    total_rank += rank;
  }
  for (int64_t i = 0; i < frame->rets.size; ++i) {
    const uint64_t rank = static_cast<uint64_t>(static_cast<const Buffer*>(frame->rets.rets[i])->rank);
    ranks_ok &= rank <= TP_MAX_NDIM;
    total_rank += rank;
  }
  if (!ranks_ok) {
    for (int64_t i = 0; i < frame->args.size + frame->rets.size; ++i) {
      const auto* buffer = static_cast<const Buffer*>(i < frame->args.size ? frame->args.args[i]
                                                                           : frame->rets.rets[i - frame->args.size]);
      if (buffer->rank < 0 || buffer->rank > TP_MAX_NDIM) {
        return MakeError(api, kErrorInvalidArgument,
                         "op '" + plan.op + "': an XLA buffer has " + std::to_string(buffer->rank) +
                             " dimensions; tensorplug takes at most " + std::to_string(TP_MAX_NDIM));
      }
    }
  }

  // Arguments: views of XLA's buffers (written parameters writable), attribute values. Each
  // parameter's TPAny is written exactly once below, so none is cleared ahead.
  const size_t n = plan.params.size();
  FrameArray<TPAny, 16> args(n);
  FrameArray<DLTensor, 16> views(n + static_cast<size_t>(plan.n_items));  // one per tensor, then list items
  FrameArray<TPAny, 16> items(static_cast<size_t>(plan.n_items));         // views lists' items
  FrameArray<int64_t, 64> strides(total_rank + 1);  // views (at most every buffer)
  FrameArray<TPArray, 16> lists(n);        // views arguments (by parameter)
  FrameArray<TPIntArray, 16> int_arrays(n);  // ints arguments (by parameter)
  std::vector<std::string> strings;  // str and dtype attributes, NUL-terminated (stable: reserved)
  if (plan.n_strings > 0) strings.reserve(plan.n_strings);
  size_t strides_used = 0;
  size_t items_used = 0;
  size_t done = 0;  // parameters converted so far (the ones an error releases)
  auto arg_error = [&](const ParamPlan& p, const std::string& what) {
    for (size_t i = 0; i < done; ++i) TPAnyRelease(&args.data[i]);
    return MakeError(api, kErrorInvalidArgument, plan.op + "() argument '" + p.name + "': " + what);
  };
  auto view_of = [&](const ParamPlan& p, const Buffer* buffer, DLTensor* view) -> bool {
    const DTypeEntry* entry = FromXla(buffer->dtype);
    if (entry == nullptr) return false;
    int64_t* s = strides.data + strides_used;
    FillStrides(buffer->rank, buffer->dims, s);
    strides_used += static_cast<size_t>(buffer->rank);
    *view = DLTensor{buffer->data, device, static_cast<int32_t>(buffer->rank), entry->dl, buffer->dims, s, 0};
    return true;
  };
  for (; done < n; ++done) {
    const ParamPlan& p = plan.params[done];
    TPAny& a = args.data[done];
    a = TPAny{};  // kTPNone until a case below says otherwise
    switch (p.source) {
      case Source::kInput:
      case Source::kOutput: {
        const bool written = p.source == Source::kOutput;
        const Buffer* buffer = static_cast<const Buffer*>(written ? frame->rets.rets[p.index] : frame->args.args[p.index]);
        DLTensor& view = views.data[done];
        if (!view_of(p, buffer, &view)) {
          return arg_error(p, "XLA element type " + std::to_string(buffer->dtype) + " has no DLPack equivalent");
        }
        if (p.kind == kTPTensor) {
          DLManagedTensorVersioned* managed = Unowned(view, written ? 0 : DLPACK_FLAG_BITMASK_READ_ONLY);
          if (managed == nullptr) return arg_error(p, "out of memory");
          a.type_index = kTPTensor;
          a.v_tensor = managed;
        } else {
          a.type_index = kTPDLTensorPtr;
          a.flags = p.view_flags;
          a.v_dltensor = &view;
        }
        break;
      }
      case Source::kInputs: {
        TPAny* list = items.data + items_used;
        for (int32_t j = 0; j < p.count; ++j) {
          const Buffer* buffer = static_cast<const Buffer*>(frame->args.args[p.index + j]);
          DLTensor& view = views.data[n + items_used + j];
          if (!view_of(p, buffer, &view)) {
            return arg_error(p, "item " + std::to_string(j) + ": XLA element type " + std::to_string(buffer->dtype) +
                                    " has no DLPack equivalent");
          }
          list[j].type_index = kTPDLTensorPtr;
          list[j].flags = TP_ANY_FLAG_READ_ONLY | TP_ANY_FLAG_COMPACT;
          list[j].v_dltensor = &view;
        }
        items_used += static_cast<size_t>(p.count);
        lists.data[done] = TPArray{p.count, list};
        a.type_index = kTPArray;
        a.v_array = &lists.data[done];
        break;
      }
      case Source::kAttr: {
        // XLA sorts attributes by name: the plan knows where each one is. Its name is
        // checked by length, first and last byte (the call has exactly the plan's number of
        // attributes, and the handler XLA called named the plan; a full compare would cost a
        // memcmp call).
        const int32_t slot = p.attr_slot;
        const ByteSpan* attr_name = frame->attrs.names[slot];
        if (attr_name->len != p.attr.size() || attr_name->ptr[0] != p.attr.front() ||
            attr_name->ptr[attr_name->len - 1] != p.attr.back()) {
          return arg_error(p, "XLA passed no attribute '" + p.attr + "' where the op's plan expects it");
        }
        const AttrType type = frame->attrs.types[slot];
        const void* value = frame->attrs.attrs[slot];
        if (p.kind == kTPRawStr || p.kind == kTPDataType) {
          if (type != kAttrString) return arg_error(p, "expected a string attribute");
          const auto* span = static_cast<const ByteSpan*>(value);
          std::string& text = strings.emplace_back(span->ptr, span->len);
          if (p.kind == kTPDataType) {
            a.type_index = kTPDataType;
            if (!tensorplug::DataTypeFromString(text, &a.v_dtype)) return arg_error(p, "unknown dtype '" + text + "'");
          } else {
            a.type_index = kTPRawStr;
            a.v_c_str = text.c_str();
          }
          break;
        }
        if (p.kind == kTPIntArray) {
          const auto* array = static_cast<const Array*>(value);
          if (type != kAttrArray || array->dtype != kS64) return arg_error(p, "expected an int64 array attribute");
          int_arrays.data[done] = TPIntArray{static_cast<int64_t>(array->size), static_cast<const int64_t*>(array->data)};
          a.type_index = kTPIntArray;
          a.v_int_array = &int_arrays.data[done];
          break;
        }
        int64_t iv = 0;
        double dv = 0;
        bool is_float = false;
        if (type != kAttrScalar || !ScalarValue(static_cast<const Scalar*>(value), &iv, &dv, &is_float)) {
          return arg_error(p, "expected a numeric scalar attribute");
        }
        if (p.kind == kTPFloat) {
          a.type_index = kTPFloat;
          a.v_float64 = is_float ? dv : static_cast<double>(iv);
        } else if (is_float) {
          return arg_error(p, "expected an integer attribute, got a float");
        } else {
          a.type_index = p.kind == kTPBool ? kTPBool : kTPInt;
          a.v_int64 = p.kind == kTPBool ? (iv != 0) : iv;
        }
        break;
      }
      case Source::kNone:
        break;
    }
  }

  TPAny result;
  result.type_index = kTPNone;
  if (plan.n_alloc == 0) {  // destination passing: nothing to lend (RunFast's comment)
    const TPPlanBinding binding{device, stream, RefuseUndeclaredResult, nullptr};
    const int rc = TPPlanInvoke(plan.plan, args.data, &binding, nullptr, &result);
    return FinishCall(api, plan, frame, device, rc, false, &result);
  }
  LentLease lease(plan.n_alloc);
  if (!LendResults(plan, frame->rets, device, TP_MAX_NDIM, lease.block)) {
    for (size_t i = 0; i < n; ++i) TPAnyRelease(&args.data[i]);
    for (int32_t k = 0; k < plan.n_alloc; ++k) {
      const auto* buffer = static_cast<const Buffer*>(frame->rets.rets[plan.n_outputs + k]);
      if (FromXla(buffer->dtype) == nullptr) {
        return MakeError(api, kErrorInvalidArgument,
                         "op '" + plan.op + "': result " + std::to_string(k) + " has XLA element type " +
                             std::to_string(buffer->dtype) + ", which has no DLPack equivalent");
      }
    }
    return MakeError(api, kErrorInternal, "op '" + plan.op + "': its results could not be lent");
  }
  XlaCall& call = CallOf(lease.block, plan);
  const TPPlanBinding binding{device, stream, nullptr, &call};
  const int rc = TPPlanInvoke(plan.plan, args.data, &binding, nullptr, &result);
  // kTPTensor arguments were moved into the callee; views own nothing.
  return FinishCall(api, plan, frame, device, rc, call.refused, &result);
}

// The handlers XLA calls: no C++ exception may cross into XLA.
template <DLDeviceType kDevice>
__attribute__((noinline)) Error* Run(CallFrame* frame, int32_t slot) noexcept {
  try {
    return RunOp(frame, kDevice, slot);
  } catch (const std::bad_alloc&) {
    return MakeError(frame->api, kErrorResourceExhausted, "tensorplug XLA handler: out of memory");
  } catch (const std::exception& e) {
    return MakeError(frame->api, kErrorInternal, std::string("tensorplug XLA handler: ") + e.what());
  } catch (...) {
    return MakeError(frame->api, kErrorInternal, "tensorplug XLA handler: unknown C++ exception");
  }
}

// The handler of plan slot kSlot on one platform: the slot is the only thing it adds.
template <DLDeviceType kDevice, int32_t kSlot>
Error* HandlerAt(CallFrame* frame) noexcept {
  return Run<kDevice>(frame, kSlot);
}

template <DLDeviceType kDevice, size_t... kSlots>
constexpr std::array<Handler*, sizeof...(kSlots)> MakeHandlers(std::index_sequence<kSlots...>) {
  return {&HandlerAt<kDevice, static_cast<int32_t>(kSlots)>...};
}
constexpr auto kCpuHandlers = MakeHandlers<kDLCPU>(std::make_index_sequence<kMaxPlans>{});
constexpr auto kCudaHandlers = MakeHandlers<kDLCUDA>(std::make_index_sequence<kMaxPlans>{});

// ------------------------------------------------------------------ Python ----
// xla_ffi_handler(platform, slot) -> capsule of the handler of plan slot `slot` (what
// xla_ffi_define returned) for "cpu" or "cuda".
PyObject* HandlerPy(PyObject*, PyObject* args) {
  const char* name;
  int slot;
  if (!PyArg_ParseTuple(args, "si:xla_ffi_handler", &name, &slot)) return nullptr;
  if (slot < 0 || slot >= kMaxPlans) {
    PyErr_Format(PyExc_ValueError, "xla_ffi_handler(): slot must be in [0, %d), got %d", kMaxPlans, slot);
    return nullptr;
  }
  Handler* handler = nullptr;
  if (!strcmp(name, "cpu")) handler = kCpuHandlers[slot];
  if (!strcmp(name, "cuda")) handler = kCudaHandlers[slot];
  if (handler == nullptr) {
    PyErr_Format(PyExc_ValueError, "xla_ffi_handler(): platform must be 'cpu' or 'cuda', got '%s'", name);
    return nullptr;
  }
  return PyCapsule_New(reinterpret_cast<void*>(handler), "xla._CUSTOM_CALL_TARGET", nullptr);
}

// xla_ffi_define(name, plan, params, n_inputs, n_outputs, n_alloc) -> the plan's slot
// (for xla_ffi_handler; a name defined again keeps its slot): `plan` a call plan capsule
// (tensorplug.plans.make: the function, its parameters and result count); params is a sequence
// of (parameter name, source, index, attribute name, kind[, count]) with source 0..4 (Source),
// kind one of view, tensor, int, float, bool, str, dtype, ints, views, and count the length
// of a views list (source 4). Every call of the plan passes exactly its kAttr attributes.
PyObject* DefinePy(PyObject*, PyObject* args) {
  const char* name;
  PyObject* capsule;
  PyObject* params;
  int n_inputs, n_outputs, n_alloc;
  if (!PyArg_ParseTuple(args, "sOOiii:xla_ffi_define", &name, &capsule, &params, &n_inputs, &n_outputs, &n_alloc))
    return nullptr;
  auto* handle = PlanOfCapsule(capsule, "xla_ffi_define");
  if (handle == nullptr) return nullptr;
  int32_t n_plan_params = 0;
  TPPlanGetParams(handle, &n_plan_params);
  if (TPPlanGetNumOutputs(handle) != n_alloc) {
    PyErr_Format(PyExc_ValueError, "xla_ffi_define(): the plan of '%s' returns %d tensor(s), the call form allocates %d",
                 name, TPPlanGetNumOutputs(handle), n_alloc);
    return nullptr;
  }
  auto plan = std::make_unique<OpPlan>();
  plan->name = name;
  plan->op = plan->name.substr(0, plan->name.find('/'));
  plan->n_inputs = n_inputs;
  plan->n_outputs = n_outputs;
  plan->n_alloc = n_alloc;
  plan->n_rets = n_outputs + n_alloc;
  plan->n_strings = 0;
  plan->n_items = 0;
  PyObject* seq = PySequence_Fast(params, "xla_ffi_define(): params must be a sequence");
  if (seq == nullptr) return nullptr;
  std::vector<std::string> attr_names;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); ++i) {
    const char *pname, *attr, *kind;
    int source, index, count = 1;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(seq, i), "siiss|i", &pname, &source, &index, &attr, &kind,
                          &count)) {
      Py_DECREF(seq);
      return nullptr;
    }
    static const std::pair<const char*, int32_t> kKinds[] = {
        {"view", kTPDLTensorPtr}, {"tensor", kTPTensor}, {"int", kTPInt},        {"float", kTPFloat},
        {"bool", kTPBool},        {"str", kTPRawStr},    {"dtype", kTPDataType}, {"ints", kTPIntArray},
        {"views", kTPArray}};
    int32_t code = -1;
    for (const auto& [text, value] : kKinds)
      if (!strcmp(text, kind)) code = value;
    const auto src = static_cast<Source>(source);
    const bool bad_index = (src == Source::kInput && (index < 0 || index >= n_inputs)) ||
                           (src == Source::kOutput && (index < 0 || index >= n_outputs)) ||
                           (src == Source::kInputs && (index < 0 || count < 0 || index + count > n_inputs)) ||
                           (src == Source::kAttr && attr[0] == '\0');
    const bool bad_kind = (src == Source::kInputs) != (code == kTPArray) && src != Source::kNone;
    if (code < 0 || source < 0 || source > 4 || bad_index || bad_kind) {
      PyErr_Format(PyExc_ValueError, "xla_ffi_define(): bad plan for parameter '%s' (source %d, index %d, kind '%s')",
                   pname, source, index, kind);
      Py_DECREF(seq);
      return nullptr;
    }
    const uint32_t view_flags = src == Source::kOutput ? TP_ANY_FLAG_COMPACT : TP_ANY_FLAG_READ_ONLY | TP_ANY_FLAG_COMPACT;
    plan->params.push_back(
        ParamPlan{src, index, src == Source::kInputs ? count : 1, code, -1, view_flags, attr, pname});
    if (src == Source::kAttr) attr_names.emplace_back(attr);
    if (src == Source::kInputs) plan->n_items += count;
    if (src == Source::kAttr && (code == kTPRawStr || code == kTPDataType)) plan->n_strings++;
  }
  Py_DECREF(seq);
  // Where each attribute is in a call: XLA passes them sorted by name (byte order).
  std::vector<std::string> sorted = attr_names;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    PyErr_Format(PyExc_ValueError, "xla_ffi_define(): attribute names repeat");
    return nullptr;
  }
  auto slot_of = [&](const std::string& attr) {
    return static_cast<int32_t>(std::lower_bound(sorted.begin(), sorted.end(), attr) - sorted.begin());
  };
  plan->n_attrs = static_cast<int32_t>(sorted.size());
  for (ParamPlan& p : plan->params)
    if (p.source == Source::kAttr) p.attr_slot = slot_of(p.attr);
  plan->n_params = static_cast<int32_t>(plan->params.size());
  plan->fast = plan->params.size() <= static_cast<size_t>(kFastParams) && n_alloc <= kFastAlloc;
  for (int32_t i = 0; i < plan->n_params; ++i) {
    const ParamPlan& p = plan->params[i];
    const bool view = (p.source == Source::kInput || p.source == Source::kOutput) && p.kind == kTPDLTensorPtr;
    const bool scalar = p.source == Source::kAttr && (p.kind == kTPFloat || p.kind == kTPInt || p.kind == kTPBool);
    plan->fast = plan->fast && (view || scalar || p.source == Source::kNone);
    if (view) plan->fast_views.push_back(FastView{i, p.index, p.view_flags, p.source == Source::kOutput});
    if (scalar) {
      plan->fast_attrs.push_back(FastAttr{i, p.attr_slot, p.kind, static_cast<uint32_t>(p.attr.size()),
                                          p.attr.front(), p.attr.back()});
    }
    if (p.source == Source::kNone) plan->fast_nones.push_back(i);
  }
  if (n_plan_params != plan->n_params) {
    PyErr_Format(PyExc_ValueError, "xla_ffi_define(): the plan of '%s' has %d parameters, the call form %d", name,
                 n_plan_params, plan->n_params);
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(g_define_mutex);
  auto [it, added] = SlotsByName().try_emplace(plan->name, static_cast<int32_t>(SlotsByName().size()));
  if (it->second >= kMaxPlans) {
    SlotsByName().erase(it);
    PyErr_Format(PyExc_RuntimeError,
                 "tensorplug: at most %d op call forms can run inside XLA in one process (each op, and each "
                 "combination of None arguments and list lengths it is called with, is one); '%s' is one more",
                 kMaxPlans, name);
    return nullptr;
  }
  (void)added;
  TPPlanRetain(handle);
  plan->plan = handle;
  // A previous plan of the key stays alive (see g_plan_slots).
  g_plan_slots[it->second].store(plan.release(), std::memory_order_release);
  return PyLong_FromLong(it->second);
}

PyMethodDef kXlaFfiMethods[] = {
    {"xla_ffi_handler", GuardedMethod<HandlerPy>(), METH_VARARGS,
     "xla_ffi_handler(platform, slot) -> XLA FFI handler capsule of a plan ('cpu' or 'cuda')"},
    {"xla_ffi_define", GuardedMethod<DefinePy>(), METH_VARARGS,
     "xla_ffi_define(name, plan, params, n_inputs, n_outputs, n_alloc) -> slot: the plan of an op's XLA calls"},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool InitXlaFfi(PyObject* module) { return PyModule_AddFunctions(module, kXlaFfiMethods) == 0; }

}  // namespace tensorplug_adapters::jax
