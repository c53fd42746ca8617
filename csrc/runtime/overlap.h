// Whether a tensor's elements overlap in memory: a written tensor whose elements share
// memory (a zero stride on an extent > 1, as from torch's expand() or numpy's broadcast_to,
// or strides that fold onto themselves) would make the kernel's result depend on the order
// of its writes, so every path that hands a kernel a written tensor refuses one before the
// call (tensor_arguments.cc for Python calls, plan.cc for every framework's op kernel), as
// torch's own in-place ops refuse it (docs/decisions.md, "Written tensors whose elements
// overlap").
#ifndef TENSORPLUG_RUNTIME_OVERLAP_H_
#define TENSORPLUG_RUNTIME_OVERLAP_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "tensorplug/c_api.h"

namespace tensorplug::runtime {


enum class Overlap { kNone, kShared, kUnproven };

// Layouts proven distinct exactly, by listing the offsets, up to this many elements; a
// larger layout that the sorted-strides rule cannot decide is refused as unproven.
inline constexpr int64_t kExactOverlapLimit = int64_t(1) << 20;

// The layouts the fast path does not settle: empty tensors, zero strides, and strides that
// are not row-major compact.
[[gnu::noinline]] inline Overlap ElementsOverlapSlow(const DLTensor& t) {
  struct Dim {
    uint64_t stride, extent;
  };
  Dim dims[TP_MAX_NDIM];
  int32_t n = 0;
  int64_t numel = 1;
  for (int32_t k = 0; k < t.ndim; ++k) {
    if (t.shape[k] == 0) return Overlap::kNone;  // no elements
    numel *= t.shape[k];                          // the exporter's tensor: its count fits
    if (t.shape[k] == 1) continue;
    if (t.strides[k] == 0) return Overlap::kShared;
    const uint64_t stride = uint64_t(t.strides[k]);
    dims[n++] = {t.strides[k] < 0 ? 0 - stride : stride, uint64_t(t.shape[k])};  // |stride|, INT64_MIN too
  }
  // Sorted by stride, each dimension's stride past the reach of all smaller ones: the
  // offsets are distinct (the rule of every compact, transposed, sliced or flipped view).
  std::sort(dims, dims + n, [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
  unsigned __int128 reach = 0;  // the largest offset the smaller dimensions reach
  bool proven = true;
  for (int32_t k = 0; k < n && proven; ++k) {
    proven = dims[k].stride > reach;
    reach += static_cast<unsigned __int128>(dims[k].stride) * (dims[k].extent - 1);
  }
  if (proven) return Overlap::kNone;
  if (numel > kExactOverlapLimit) return Overlap::kUnproven;
  // Strides that interleave ([3, 2] strides [2, 3] is distinct, [3, 2] strides [1, 2] is
  // not): every offset, sorted, compared with its neighbour.
  std::vector<uint64_t> offsets(1, 0);  // unsigned: wraps (defined) only past any address
  offsets.reserve(size_t(numel));
  for (int32_t k = 0; k < n; ++k) {
    const size_t before = offsets.size();
    for (uint64_t j = 1; j < dims[k].extent; ++j) {
      for (size_t m = 0; m < before; ++m) offsets.push_back(offsets[m] + j * dims[k].stride);
    }
  }
  std::sort(offsets.begin(), offsets.end());
  return std::adjacent_find(offsets.begin(), offsets.end()) == offsets.end() ? Overlap::kNone : Overlap::kShared;
}

// Inline: a written call pays one pass over the strides for the common, compact layout.
inline Overlap ElementsOverlap(const DLTensor& t) {
  if (t.strides == nullptr) return Overlap::kNone;  // compact
  int64_t compact = 1;
  for (int32_t k = t.ndim - 1; k >= 0; --k) {
    const int64_t extent = t.shape[k];
    if (extent != 1 && t.strides[k] != compact) return ElementsOverlapSlow(t);
    compact *= extent;
  }
  return Overlap::kNone;
}

// "expected a tensor whose elements do not overlap (the kernel writes it), got shape [2, 3]
// strides [0, 1]: ..." (the caller puts the function and the argument before it).
[[gnu::noinline]] inline std::string OverlapRefusal(const DLTensor& t, Overlap overlap) {
  std::string layout = "shape [";
  for (int32_t k = 0; k < t.ndim; ++k) layout += (k ? ", " : "") + std::to_string(t.shape[k]);
  layout += "] strides [";
  for (int32_t k = 0; k < t.ndim; ++k) layout += (k ? ", " : "") + std::to_string(t.strides[k]);
  layout += "]";
  const char* why = overlap == Overlap::kShared
                        ? "several elements share memory (as after expand() or broadcast_to); pass a copy"
                        : "its strides interleave and it is too large to prove its elements distinct; pass a copy";
  return "expected a tensor whose elements do not overlap (the kernel writes it), got " + layout + ": " + why;
}

}  // namespace tensorplug::runtime

#endif  // TENSORPLUG_RUNTIME_OVERLAP_H_
