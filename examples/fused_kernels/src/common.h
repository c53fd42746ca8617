// fused_kernels: what every kernel of the library shares.
//
// - Argument checks that raise Python exceptions naming the function and the argument.
// - Rows: a tensor seen as rows of its last dimension, at any strides (a row's start is
//   computed from the leading dimensions; its elements are `col_stride` apart).
// - Loading a row into float32 scratch and storing it back: every kernel computes in
//   float32 and reads/writes float32 or bfloat16 (round to nearest even, as torch does).
// - Exp and friends written so that the compiler vectorizes them (no libm call in loops).
// - A small thread pool: the caller and (cores - 1) workers share a parallel loop.
//
// The kernels are compiled once per CPU ISA (CMakeLists.txt) and the loader picks the
// variant this CPU runs; the code itself is ISA-neutral C++ that auto-vectorizes
// (`#pragma omp simd` under -fopenmp-simd: no OpenMP runtime is linked).
#pragma once

#include <tensorplug/tensorplug.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fused {

namespace tp = tensorplug;

// ------------------------------------------------------------------ checks ----
enum class Elem { kFloat32, kBFloat16 };

inline Elem FloatElem(const tp::TensorView& x, const char* fn, const char* arg) {
  const DLDataType t = x.dtype();
  if (t.code == kDLFloat && t.bits == 32 && t.lanes == 1) return Elem::kFloat32;
  if (t.code == kDLBfloat && t.bits == 16 && t.lanes == 1) return Elem::kBFloat16;
  TENSORPLUG_THROW(TypeError) << fn << "() argument '" << arg << "': expected a float32 or bfloat16 tensor, got "
                              << t;
}

inline void CheckCpu(const tp::TensorView& x, const char* fn, const char* arg) {
  TENSORPLUG_CHECK(x.defined(), ValueError) << fn << "() argument '" << arg << "': expected a tensor, got None";
  TENSORPLUG_CHECK(x.device().device_type == kDLCPU, ValueError)
      << fn << "() argument '" << arg << "': expected a CPU tensor, got one on " << x.device();
}

inline void CheckDtype(const tp::TensorView& x, DLDataType want, const char* fn, const char* arg) {
  const DLDataType t = x.dtype();
  TENSORPLUG_CHECK(t.code == want.code && t.bits == want.bits && t.lanes == want.lanes, TypeError)
      << fn << "() argument '" << arg << "': expected a " << want << " tensor, got " << t;
}

inline void CheckDim(const tp::TensorView& x, int32_t dim, const char* fn, const char* arg) {
  TENSORPLUG_CHECK(x.dim() == dim, ValueError)
      << fn << "() argument '" << arg << "': expected " << dim << " dimensions, got shape " << x.sizes();
}

// ------------------------------------------------------------------- rows ----
// A tensor of shape [..., cols] as `rows` rows of `cols` elements at any strides.
struct Rows {
  int64_t rows = 1;
  int64_t cols = 1;
  int64_t col_stride = 1;
  std::vector<int64_t> lead_sizes, lead_strides;  // the leading dimensions, outermost first
  // When the leading dimensions collapse into one stride (contiguous, or a slice of rows).
  bool uniform = true;
  int64_t row_stride = 0;

  explicit Rows(const tp::TensorView& x) {
    const int32_t nd = x.dim();
    if (nd == 0) return;
    cols = x.size(nd - 1);
    col_stride = x.stride(nd - 1);
    for (int32_t d = 0; d + 1 < nd; ++d) {
      rows *= x.size(d);
      if (x.size(d) != 1) {  // a dimension of one never moves
        lead_sizes.push_back(x.size(d));
        lead_strides.push_back(x.stride(d));
      }
    }
    for (size_t d = 1; d < lead_sizes.size(); ++d) {
      if (lead_strides[d - 1] != lead_strides[d] * lead_sizes[d]) uniform = false;
    }
    row_stride = lead_strides.empty() ? cols : lead_strides.back();
  }

  // Element offset of row r's first element.
  int64_t Offset(int64_t r) const {
    if (uniform) return r * row_stride;
    int64_t off = 0;
    for (size_t d = lead_sizes.size(); d-- > 0;) {
      off += (r % lead_sizes[d]) * lead_strides[d];
      r /= lead_sizes[d];
    }
    return off;
  }
};

// --------------------------------------------------------------- bfloat16 ----
inline float Bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40u;  // quiet NaN
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

// Row r of a float32/bfloat16 tensor as float32: a pointer into the tensor itself when it
// is float32 with unit stride, else `scratch` filled from it.
inline const float* LoadRow(const void* base, Elem e, int64_t offset, int64_t n, int64_t stride, float* scratch) {
  if (e == Elem::kFloat32) {
    const float* p = static_cast<const float*>(base) + offset;
    if (stride == 1) return p;
    for (int64_t i = 0; i < n; ++i) scratch[i] = p[i * stride];
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(base) + offset;
    if (stride == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) scratch[i] = Bf16ToFloat(p[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) scratch[i] = Bf16ToFloat(p[i * stride]);
    }
  }
  return scratch;
}

inline void StoreRow(const float* src, void* base, Elem e, int64_t offset, int64_t n, int64_t stride) {
  if (e == Elem::kFloat32) {
    float* p = static_cast<float*>(base) + offset;
    if (stride == 1) {
      if (p != src) std::memcpy(p, src, static_cast<size_t>(n) * 4);
    } else {
      for (int64_t i = 0; i < n; ++i) p[i * stride] = src[i];
    }
  } else {
    uint16_t* p = static_cast<uint16_t*>(base) + offset;
    if (stride == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) p[i] = FloatToBf16(src[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) p[i * stride] = FloatToBf16(src[i]);
    }
  }
}

// Per-thread float scratch of at least n floats (grows, never shrinks).
inline float* Scratch(int slot, int64_t n) {
  thread_local std::vector<float> buffers[4];
  std::vector<float>& b = buffers[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return b.data();
}

// ---------------------------------------------------------------- math ----
// e^x for float32, vectorizable: x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6
// Taylor polynomial (error < 2 ulp), 2^n built in the exponent bits. Inputs below -87
// give ~0 (1e-38), above 88 are clamped (the callers never go there: softmax subtracts
// the maximum, sigmoid passes -|x|).
inline float Exp(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = (x - n * 0.693145751953125f) - n * 1.42860682030941723e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// sigmoid(x) = 1 / (1 + e^-x), from e^-|x| so that the exponential never overflows.
inline float Sigmoid(float x) {
  const float e = Exp(-std::fabs(x));
  const float s = 1.0f / (1.0f + e);
  return x >= 0 ? s : 1.0f - s;
}

// ------------------------------------------------------------ thread pool ----
// One pool per library: the calling thread and (threads - 1) workers take chunks of a
// loop from a shared counter. Threads: FUSED_KERNELS_NUM_THREADS, else the number of
// cores. A call that finds the pool busy (another thread's kernel, or a nested loop) runs
// its loop alone rather than wait. The pool is never destroyed: the library stays mapped
// for the life of the process (tensorplug never unloads one), and joining workers in a
// static destructor at exit can deadlock.
class ThreadPool {
 public:
  static ThreadPool& Get() {
    static ThreadPool* pool = new ThreadPool();
    return *pool;
  }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // fn(begin, end) over [0, n) in chunks of at least `grain` items.
  template <class F>
  void ParallelFor(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    const int64_t max_tasks = std::max<int64_t>(1, n / std::max<int64_t>(grain, 1));
    const int64_t tasks = std::min<int64_t>(max_tasks, threads());
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (tasks <= 1 || !busy.owns_lock()) {
      fn(int64_t{0}, n);
      return;
    }
    const int64_t chunk = (n + tasks - 1) / tasks;
    std::function<void(int64_t)> task = [&](int64_t t) {
      const int64_t b = t * chunk, e = std::min(n, b + chunk);
      if (b < e) fn(b, e);
    };
    Run(task, tasks);
  }

 private:
  ThreadPool() {
    int n = static_cast<int>(std::thread::hardware_concurrency());
    if (const char* env = std::getenv("FUSED_KERNELS_NUM_THREADS")) n = std::atoi(env);
    n = std::max(1, std::min(n, 256));
    for (int i = 1; i < n; ++i) workers_.emplace_back([this] { Work(); });
    for (std::thread& t : workers_) t.detach();
  }

  void Run(std::function<void(int64_t)>& task, int64_t tasks) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      task_ = &task;
      tasks_ = tasks;
      next_.store(0);
      done_ = 0;
      ++generation_;
    }
    wake_.notify_all();
    RunTasks(false);
    std::unique_lock<std::mutex> lock(mu_);
    // Every task done and no worker still inside this loop: none straddles two loops.
    finished_.wait(lock, [&] { return done_ == tasks_ && active_ == 0; });
    task_ = nullptr;
  }

  // Take tasks until none is left; count each done.
  void RunTasks(bool worker) {
    int64_t ran = 0;
    for (int64_t t; (t = next_.fetch_add(1)) < tasks_;) {
      (*task_)(t);
      ++ran;
    }
    std::lock_guard<std::mutex> lock(mu_);
    done_ += ran;
    if (worker) --active_;
    if (done_ == tasks_ && active_ == 0) finished_.notify_all();
  }

  void Work() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (task_ == nullptr) continue;  // woke after that loop ended
        ++active_;
      }
      RunTasks(true);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex busy_;  // one parallel loop at a time
  std::mutex mu_;
  std::condition_variable wake_, finished_;
  std::function<void(int64_t)>* task_ = nullptr;
  int64_t tasks_ = 0;
  int64_t done_ = 0;
  int active_ = 0;  // workers inside the current loop
  std::atomic<int64_t> next_{0};
  uint64_t generation_ = 0;
};

// Run fn(begin, end) over rows, in parallel when the work (rows * cost per row) pays for
// waking the workers (about 20 us; below 64K element-operations one thread is faster).
template <class F>
void ForRows(int64_t rows, int64_t cost_per_row, F&& fn) {
  constexpr int64_t kParallelWork = 1 << 16;
  const int64_t grain = std::max<int64_t>(1, kParallelWork / std::max<int64_t>(cost_per_row, 1));
  ThreadPool::Get().ParallelFor(rows, grain, fn);
}

}  // namespace fused
