// Library A of tests/core/test_handles.py: typed handles ("liba.Plan", "liba.Buffer") whose
// deleters count, untyped pointers, optional handles, and handles crossing callbacks, the
// `any` kind, provider storage and another library's global functions.
#include <tensorplug/tensorplug.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

namespace tp = tensorplug;

namespace liba {
std::atomic<int64_t> g_plans_deleted{0};
std::atomic<int64_t> g_buffers_freed{0};

struct Plan {
  int64_t n;
  ~Plan() {
    ++g_plans_deleted;
    if (std::getenv("TP_TEST_TRACE_DELETES")) {  // the exit tests read this from stdout
      std::printf("deleted plan %lld\n", static_cast<long long>(n));
      std::fflush(stdout);
    }
  }
};

struct Buffer {
  std::vector<float> data;
};
void FreeBuffer(Buffer* buffer) {
  ++g_buffers_freed;
  delete buffer;
}
}  // namespace liba

TENSORPLUG_HANDLE_TYPE(liba::Plan, "liba.Plan");
TENSORPLUG_HANDLE_TYPE(liba::Buffer, "liba.Buffer");

namespace {
using liba::Plan;
using PlanHandle = tp::Handle<Plan>;

// Plans C++ keeps past the call (destroyed at exit with the library's statics).
std::vector<PlanHandle> g_kept;

PlanHandle MakePlan(int64_t n) { return PlanHandle(new Plan{n}); }
int64_t PlanN(PlanHandle plan) { return plan->n; }
PlanHandle Same(PlanHandle plan) { return plan; }
PlanHandle NoPlan() { return {}; }
std::optional<int64_t> MaybeN(std::optional<PlanHandle> plan) {
  if (!plan) return std::nullopt;
  return (*plan)->n;
}
int64_t Address(void* ptr) { return static_cast<int64_t>(reinterpret_cast<intptr_t>(ptr)); }
void* Pointer(PlanHandle plan) { return plan.get(); }
void* NullPointer() { return nullptr; }
bool IsNone(std::optional<void*> ptr) { return !ptr.has_value(); }

// A tensor and a handle in one call: x *= plan.n.
void Scale(tp::MutableView x, PlanHandle plan) {
  float* data = x.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) data[i] *= static_cast<float>(plan->n);
}

void Keep(PlanHandle plan) { g_kept.push_back(plan); }
int64_t DropKept() {
  const auto n = static_cast<int64_t>(g_kept.size());
  g_kept.clear();
  return n;
}
int64_t PlansDeleted() { return liba::g_plans_deleted; }

tp::Handle<liba::Buffer> MakeBuffer(int64_t n) {
  return tp::Handle<liba::Buffer>(new liba::Buffer{std::vector<float>(static_cast<size_t>(n), 1.0f)},
                                  liba::FreeBuffer);
}
int64_t BufferSize(tp::Handle<liba::Buffer> buffer) { return static_cast<int64_t>(buffer->data.size()); }
int64_t BuffersFreed() { return liba::g_buffers_freed; }

int64_t TotalNumel(tp::TensorViewList xs) {
  int64_t n = 0;
  for (tp::TensorView x : xs) n += x.numel();
  return n;
}
void Kinds(double, bool, DLDevice, DLDataType) {}
int64_t Length(std::vector<int64_t> values) { return static_cast<int64_t>(values.size()); }

std::string Describe(TPAny value) { return tp::detail::DescribeValue(value); }

int64_t CallWithPlan(tp::Function f, PlanHandle plan) { return f(plan).cast<int64_t>(); }
int64_t PlanFromCallback(tp::Function f) { return f().cast<PlanHandle>()->n; }
// The callback closes the caller's handle; the pointer must stay valid until the call ends.
int64_t ReadAfterCallback(tp::Function f, void* plan) {
  f();
  return static_cast<Plan*>(plan)->n;
}
// Another library's global function, called from C++ with this library's handle.
double CallGlobal(std::string name, PlanHandle plan) {
  return tp::Function::GetGlobalRequired(name)(plan).cast<double>();
}

void StorePlan(std::string key, PlanHandle plan) { tp::SetStorage(key.c_str(), plan); }
void StorePointer(std::string key, void* ptr) { tp::SetStoragePointer(key.c_str(), ptr, nullptr); }
int64_t StoredN(std::string key) { return tp::GetStorage(key.c_str()).cast<PlanHandle>()->n; }
}  // namespace

TENSORPLUG_EXPORT(make_plan, MakePlan, "n");
TENSORPLUG_EXPORT(plan_n, PlanN, "plan");
TENSORPLUG_EXPORT(same, Same, "plan");
TENSORPLUG_EXPORT(no_plan, NoPlan);
TENSORPLUG_EXPORT(maybe_n, MaybeN, "plan=None");
TENSORPLUG_EXPORT(address, Address, "ptr");
TENSORPLUG_EXPORT(pointer, Pointer, "plan");
TENSORPLUG_EXPORT(null_pointer, NullPointer);
TENSORPLUG_EXPORT(is_none, IsNone, "ptr");
TENSORPLUG_EXPORT(scale, Scale, "x", "plan");
TENSORPLUG_EXPORT(keep, Keep, "plan");
TENSORPLUG_EXPORT(drop_kept, DropKept);
TENSORPLUG_EXPORT(plans_deleted, PlansDeleted);
TENSORPLUG_EXPORT(make_buffer, MakeBuffer, "n");
TENSORPLUG_EXPORT(buffer_size, BufferSize, "buffer");
TENSORPLUG_EXPORT(buffers_freed, BuffersFreed);
TENSORPLUG_EXPORT(describe, Describe, "value");
TENSORPLUG_EXPORT(total_numel, TotalNumel, "xs");
TENSORPLUG_EXPORT(length, Length, "values");
TENSORPLUG_EXPORT(kinds, Kinds, "f", "b", "d", "t");
TENSORPLUG_EXPORT(call_with_plan, CallWithPlan, "f", "plan");
TENSORPLUG_EXPORT(plan_from_callback, PlanFromCallback, "f");
TENSORPLUG_EXPORT(read_after_callback, ReadAfterCallback, "f", "plan");
TENSORPLUG_EXPORT(call_global, CallGlobal, "name", "plan");
TENSORPLUG_EXPORT(store_plan, StorePlan, "key", "plan");
TENSORPLUG_EXPORT(stored_n, StoredN, "key");
TENSORPLUG_EXPORT(store_pointer, StorePointer, "key", "ptr");
