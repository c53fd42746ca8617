/*
 * tensorplug/tensor.h -- IntArrayView, TensorView and MutableView (non-owning: read and
 * written parameters) and Tensor (owning).
 * Over 500 lines: the three tensor classes share one accessor base and its checks,
 * documented once here where kernel authors read them.
 */
#ifndef TENSORPLUG_TENSOR_H_
#define TENSORPLUG_TENSOR_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <new>
#include <ostream>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensorplug/c_api.h"
#include "tensorplug/dtype.h"
#include "tensorplug/error.h"

// Branch hints for the accessors' checks: the throw paths are out of line.
#if defined(__GNUC__) || defined(__clang__)
#define TENSORPLUG_PRIVATE_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TENSORPLUG_PRIVATE_COLD_NORETURN [[noreturn]] __attribute__((noinline, cold))
#define TENSORPLUG_PRIVATE_COLD __attribute__((noinline, cold))
#else
#define TENSORPLUG_PRIVATE_UNLIKELY(x) (x)
#define TENSORPLUG_PRIVATE_COLD_NORETURN [[noreturn]]
#define TENSORPLUG_PRIVATE_COLD
#endif

namespace tensorplug {

/*!
 * \brief A non-owning view of int64 values (a shape or strides): size(), operator[],
 * begin()/end(). Converts implicitly from std::vector<int64_t>, std::array and braced
 * lists, so `Tensor::FromEnvAlloc({2, 3}, ...)` works; it must not outlive its source.
 */
class IntArrayView {
 public:
  constexpr IntArrayView() noexcept = default;
  constexpr IntArrayView(const int64_t* data, size_t size) noexcept : data_(data), size_(size) {}
  IntArrayView(const std::vector<int64_t>& values) noexcept  // NOLINT: implicit by design
      : data_(values.data()), size_(values.size()) {}
// The braced list lives until the end of the full expression: long enough for an argument.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime"
#endif
  constexpr IntArrayView(std::initializer_list<int64_t> values) noexcept  // NOLINT
      : data_(values.begin()), size_(values.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  template <size_t N>
  constexpr IntArrayView(const std::array<int64_t, N>& values) noexcept  // NOLINT
      : data_(values.data()), size_(N) {}

  constexpr const int64_t* data() const noexcept { return data_; }
  constexpr size_t size() const noexcept { return size_; }
  constexpr bool empty() const noexcept { return size_ == 0; }
  /*! \brief Unchecked element access. */
  constexpr const int64_t& operator[](size_t i) const noexcept { return data_[i]; }
  constexpr const int64_t* begin() const noexcept { return data_; }
  constexpr const int64_t* end() const noexcept { return data_ + size_; }
  /*! \brief A copy as a std::vector. */
  std::vector<int64_t> vec() const { return std::vector<int64_t>(begin(), end()); }

 private:
  const int64_t* data_ = nullptr;
  size_t size_ = 0;
};

inline bool operator==(IntArrayView a, IntArrayView b) noexcept {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}
inline bool operator!=(IntArrayView a, IntArrayView b) noexcept { return !(a == b); }

/*! \brief Prints "[2, 3]". */
inline std::ostream& operator<<(std::ostream& os, IntArrayView values) {
  os << '[';
  for (size_t i = 0; i < values.size(); ++i) os << (i == 0 ? "" : ", ") << values[i];
  return os << ']';
}

/*!
 * \brief The argument a view was lent as, for messages (`view.arg()`): `name` points into
 * the exported function's parameter names, valid while the function is (it ends at the
 * first '=', ':', ';' or NUL: "alpha=1.0" names "alpha"); `item` >= 0 for an item of a list
 * argument. `name` is NULL for views made elsewhere, and for functions exported without
 * parameter names. Streamed, it prints the prefix of the accessors' own errors,
 * "argument 'x': " ("argument 'xs' item 3: "), or nothing without a name:
 *   TENSORPLUG_CHECK(x.dim() == 2, ValueError) << x.arg() << "expected a matrix";
 */
struct ArgName {
  const char* name = nullptr;
  int32_t item = -1;
};

/*! \brief "argument 'x': " or "argument 'xs' item 3: " (nothing when the view has no name). */
inline std::ostream& operator<<(std::ostream& os, ArgName arg) {
  if (arg.name == nullptr) return os;
  os << "argument '";
  for (const char* c = arg.name; *c != '\0' && *c != '=' && *c != ':' && *c != ';'; ++c) os << *c;
  os << '\'';
  if (arg.item >= 0) os << " item " << arg.item;
  return os << ": ";
}

namespace detail {

/*!
 * \brief The one contiguous-strides rule of tensorplug (the runtime's allocator, the
 * binding's NULL-strides fill and TensorView all use it): row-major compact strides in
 * elements, where size-0 and size-1 dims count as 1, so every stride is >= 1 and the
 * strides of an empty tensor are those of the same shape with its 0s replaced by 1s
 * (numpy's and torch's choice). IsContiguous accepts what this produces: it ignores the
 * strides of size-1 dims and calls every empty tensor contiguous.
 */
inline void FillContiguousStrides(int32_t ndim, const int64_t* shape, int64_t* strides) noexcept {
  // Unsigned: for a shape whose element count overflows (which every allocation refuses,
  // after its strides may be filled) the product wraps, defined, instead of overflowing.
  uint64_t step = 1;
  for (int32_t i = ndim - 1; i >= 0; --i) {
    strides[i] = static_cast<int64_t>(step);
    step *= shape[i] > 1 ? static_cast<uint64_t>(shape[i]) : 1;
  }
}

inline int64_t Numel(const DLTensor& t) noexcept {
  int64_t n = 1;
  for (int32_t i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}

/*! \brief Row-major compact, ignoring the strides of size-1 dims (as frameworks do). */
inline bool IsContiguous(const DLTensor& t) noexcept {
  if (t.strides == nullptr || Numel(t) == 0) return true;
  int64_t expected = 1;
  for (int32_t i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

inline int32_t WrapDim(const DLTensor& t, int64_t dim, ArgName arg = {}) {
  const int64_t n = t.ndim;
  if (dim < -n || dim >= n) {
    TENSORPLUG_THROW(IndexError) << arg << "dimension " << dim << " is out of range for a tensor with "
                                 << n << (n == 1 ? " dimension" : " dimensions");
  }
  return static_cast<int32_t>(dim < 0 ? dim + n : dim);
}

/*!
 * \brief Shared accessors of TensorView, MutableView and Tensor. Derived provides dltensor(),
 * is_read_only(), arg() (ArgName) and kWritable: whether data_ptr() hands out `void*`
 * (MutableView, Tensor) or `const void*` (TensorView).
 */
template <class Derived>
class TensorAccessors {
 public:
  /*! \brief Number of dimensions (0 for a scalar). */
  int32_t dim() const { return dl().ndim; }
  /*! \brief Same as dim(). */
  int32_t ndim() const { return dl().ndim; }
  /*! \brief The extents; valid while the tensor is. */
  IntArrayView sizes() const { return IntArrayView(dl().shape, static_cast<size_t>(dl().ndim)); }
  /*! \brief Same as sizes(). */
  IntArrayView shape() const { return sizes(); }
  /*! \brief Extent of dimension `i`; negative `i` counts from the end. IndexError when out of range. */
  int64_t size(int64_t i) const { return dl().shape[WrapDim(dl(), i, ArgOf())]; }
  /*!
   * \brief Strides in elements. Always filled for a Tensor; for a TensorView whose producer
   * left strides NULL (a legacy compact tensor) this is empty -- stride(i) works in every case.
   */
  IntArrayView strides() const {
    const DLTensor& t = dl();
    return t.strides != nullptr ? IntArrayView(t.strides, static_cast<size_t>(t.ndim)) : IntArrayView();
  }
  /*! \brief Stride of dimension `i` in elements; negative `i` counts from the end. */
  int64_t stride(int64_t i) const {
    const DLTensor& t = dl();
    const int32_t d = WrapDim(t, i, ArgOf());
    if (t.strides != nullptr) return t.strides[d];
    int64_t step = 1;
    for (int32_t j = t.ndim - 1; j > d; --j) step *= t.shape[j] > 1 ? t.shape[j] : 1;
    return step;
  }
  /*! \brief Number of elements (1 for a scalar). */
  int64_t numel() const { return Numel(dl()); }
  /*! \brief Bytes per element. */
  int64_t element_size() const { return DataTypeBytes(dl().dtype); }
  /*!
   * \brief Address of element 0 (data + byte_offset): `const void*` for a TensorView (a
   * kernel only reads the tensors it is lent as views), `void*` for a MutableView and a
   * Tensor. Does not check read-only (a read-only tensor never reaches a MutableView).
   */
  auto data_ptr() const {
    const DLTensor& t = dl();
    void* address = static_cast<char*>(t.data) + t.byte_offset;
    if constexpr (Derived::kWritable) {
      return address;
    } else {
      return static_cast<const void*>(address);
    }
  }
  /*!
   * \brief data_ptr() as `T*` (`const T*` for a TensorView). TypeError when T has a DLPack
   * dtype (bool, integers, float, double, Half, BFloat16) that differs from the tensor's:
   * "argument 'x': data_ptr<float32>() called on a tensor of dtype float64".
   */
  template <class T>
  auto data_ptr() const {
    CheckElementType<std::remove_cv_t<T>>("data_ptr");
    if constexpr (Derived::kWritable) {
      return static_cast<T*>(data_ptr());
    } else {
      return static_cast<const T*>(data_ptr());
    }
  }
  /*!
   * \brief data_ptr() for writing. ValueError "tensor is read-only" on a read-only Tensor; a
   * MutableView is never read-only. A TensorView has none (a compile error): declare the
   * parameter `tensorplug::MutableView` to write it.
   */
  template <class D = Derived, std::enable_if_t<std::is_same_v<D, Derived>, int> = 0>
  void* mutable_data_ptr() const {
    static_assert(D::kWritable,
                  "a TensorView is read-only: declare the parameter tensorplug::MutableView to write it");
    return WritableAddress();
  }
  /*! \brief mutable_data_ptr() as T*, with data_ptr<T>()'s dtype check. */
  template <class T, class D = Derived>
  T* mutable_data_ptr() const {
    static_assert(D::kWritable,
                  "a TensorView is read-only: declare the parameter tensorplug::MutableView to write it");
    CheckElementType<std::remove_cv_t<T>>("mutable_data_ptr");
    return static_cast<T*>(WritableAddress());
  }
  DLDevice device() const { return dl().device; }
  DLDataType dtype() const { return dl().dtype; }
  /*! \brief Offset of element 0 from the allocation start, in bytes. */
  uint64_t byte_offset() const { return dl().byte_offset; }
  /*! \brief Row-major compact (strides of size-1 dims ignored; empty tensors are contiguous). */
  bool is_contiguous() const { return IsContiguous(dl()); }

 protected:
  ~TensorAccessors() = default;

 private:
  // The checks run inline on every accessor call; their throws are out of line (cold), so
  // that the accessors inline into the kernel as a compare and a branch.
  ArgName ArgOf() const noexcept { return static_cast<const Derived*>(this)->arg(); }
  void* WritableAddress() const {
    if (TENSORPLUG_PRIVATE_UNLIKELY(static_cast<const Derived*>(this)->is_read_only())) ThrowReadOnly();
    const DLTensor& t = dl();
    return static_cast<char*>(t.data) + t.byte_offset;
  }
  const DLTensor& dl() const {
    const DLTensor* t = static_cast<const Derived*>(this)->dltensor();
    if (TENSORPLUG_PRIVATE_UNLIKELY(t == nullptr)) ThrowUndefined();
    return *t;
  }
  template <class T>
  void CheckElementType(const char* accessor) const {
    if constexpr (DTypeTraits<T>::known) {
      if (TENSORPLUG_PRIVATE_UNLIKELY(dl().dtype != DTypeTraits<T>::value)) {
        ThrowElementType(accessor, DTypeTraits<T>::value);
      }
    } else {
      (void)accessor;
    }
  }
  TENSORPLUG_PRIVATE_COLD_NORETURN void ThrowReadOnly() const {
    TENSORPLUG_THROW(ValueError) << ArgOf() << "tensor is read-only";
  }
  TENSORPLUG_PRIVATE_COLD_NORETURN void ThrowUndefined() const {
    TENSORPLUG_THROW(ValueError) << ArgOf() << "use of an undefined tensor";
  }
  TENSORPLUG_PRIVATE_COLD_NORETURN void ThrowElementType(const char* accessor, DLDataType asked) const {
    TENSORPLUG_THROW(TypeError) << ArgOf() << accessor << "<" << asked << ">() called on a tensor of dtype "
                                << dl().dtype;
  }
};

}  // namespace detail

/*!
 * \brief A non-owning tensor the kernel reads (signature kind "view"): a `const DLTensor*`,
 * a read-only flag and the argument it was lent as. data_ptr() is `const`: writing needs a
 * MutableView parameter. Cheap to copy; valid only while the tensor it views is (for a
 * kernel argument: during the call).
 */
class TensorView : public detail::TensorAccessors<TensorView> {
 public:
  static constexpr bool kWritable = false;
  TensorView() noexcept = default;
  explicit TensorView(const DLTensor* tensor, bool read_only = false) noexcept
      : tensor_(tensor), read_only_(read_only) {}
  /*! \brief A view of argument `arg` of a call (named in its error messages). */
  TensorView(const DLTensor* tensor, bool read_only, ArgName arg) noexcept
      : tensor_(tensor), arg_name_(arg.name), arg_item_(arg.item), read_only_(read_only) {}

  /*! \brief The viewed DLTensor (NULL when undefined). */
  const DLTensor* dltensor() const noexcept { return tensor_; }
  /*!
   * \brief True when the caller lent the tensor read-only (a jax array, a numpy array
   * without WRITEABLE); such a tensor is refused for a MutableView parameter.
   */
  bool is_read_only() const noexcept { return read_only_; }
  bool defined() const noexcept { return tensor_ != nullptr; }
  /*! \brief The argument this view was lent as (name NULL for views made elsewhere). */
  ArgName arg() const noexcept { return ArgName{arg_name_, arg_item_}; }

 private:
  // ArgName's fields kept apart so that the flag shares their padding: 24 bytes in all.
  const DLTensor* tensor_ = nullptr;
  const char* arg_name_ = nullptr;
  int32_t arg_item_ = -1;
  bool read_only_ = false;
};

/*!
 * \brief A non-owning tensor the kernel writes (signature kind "mview"): data_ptr() and
 * mutable_data_ptr() are `void*`. The caller refuses a read-only tensor for it before the
 * call (Python: ValueError "axpy() argument 3 'out': expected a writable tensor (the kernel
 * writes it), got a read-only numpy array"), so it never views read-only memory. Converts
 * to a TensorView for code that only reads (ForEachOffset, helpers).
 */
class MutableView : public detail::TensorAccessors<MutableView> {
 public:
  static constexpr bool kWritable = true;
  MutableView() noexcept = default;
  explicit MutableView(const DLTensor* tensor, ArgName arg = {}) noexcept : tensor_(tensor), arg_(arg) {}

  /*! \brief The viewed DLTensor (NULL when undefined). */
  const DLTensor* dltensor() const noexcept { return tensor_; }
  /*! \brief Always false: read-only tensors are refused for a MutableView. */
  bool is_read_only() const noexcept { return false; }
  bool defined() const noexcept { return tensor_ != nullptr; }
  /*! \brief The argument this view was lent as (name NULL for views made elsewhere). */
  ArgName arg() const noexcept { return arg_; }
  /*! \brief The same tensor as a TensorView (for code that reads it). */
  operator TensorView() const noexcept { return TensorView(tensor_, false, arg_); }  // NOLINT: implicit by design

 private:
  const DLTensor* tensor_ = nullptr;
  ArgName arg_;
};

static_assert(sizeof(TensorView) <= 3 * sizeof(void*) && sizeof(MutableView) <= 3 * sizeof(void*),
              "views stay three words: they are passed by value to every kernel");

/*!
 * \brief Bytes spanned by a compact tensor's elements: the element count times the bytes
 * per element (all lanes, sub-byte types rounded up), as in DLPack's GetDataSize. What a
 * custom allocator must provide for `tensor`.
 */
inline size_t GetDataSize(const DLTensor& tensor) noexcept {
  return static_cast<size_t>(detail::Numel(tensor)) * ((size_t(tensor.dtype.bits) * tensor.dtype.lanes + 7) / 8);
}

/*!
 * \brief A lent list of tensors (Python: a list or tuple of tensors of any frameworks):
 * TensorViewList (signature kind "views", items read) and MutableViewList (kind "mviews",
 * items written; a read-only item is refused before the call). Item i is a view valid for
 * the call, named "argument 'xs' item i" in its errors; nothing is copied or allocated to
 * pass it.
 */
template <class View>
class ViewList {
 public:
  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = View;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = View;
    iterator(const ViewList* list, int64_t i) noexcept : list_(list), i_(i) {}
    View operator*() const noexcept { return (*list_)[i_]; }
    iterator& operator++() noexcept { return ++i_, *this; }
    bool operator==(const iterator& o) const noexcept { return i_ == o.i_; }
    bool operator!=(const iterator& o) const noexcept { return i_ != o.i_; }

   private:
    const ViewList* list_;
    int64_t i_;
  };

  ViewList() noexcept = default;
  ViewList(const TPAny* items, int64_t size, const char* arg_name = nullptr) noexcept
      : items_(items), size_(size), name_(arg_name) {}
  int64_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  /*! \brief Item i (0 <= i < size(), unchecked). */
  View operator[](int64_t i) const noexcept {
    const TPAny& v = items_[i];
    const ArgName arg{name_, static_cast<int32_t>(i)};
    const bool tensor = v.type_index == kTPTensor;
    const DLTensor* dl = tensor ? &v.v_tensor->dl_tensor : v.v_dltensor;
    if constexpr (View::kWritable) {
      return View(dl, arg);  // read-only items were refused by the caster
    } else {
      const bool read_only = tensor ? (v.v_tensor->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0
                                    : (v.flags & TP_ANY_FLAG_READ_ONLY) != 0;
      return View(dl, read_only, arg);
    }
  }
  iterator begin() const noexcept { return iterator(this, 0); }
  iterator end() const noexcept { return iterator(this, size_); }

 private:
  const TPAny* items_ = nullptr;
  int64_t size_ = 0;
  const char* name_ = nullptr;
};

using TensorViewList = ViewList<TensorView>;
using MutableViewList = ViewList<MutableView>;

namespace detail {

/*! \brief The shared state behind Tensor: a reference count and the owned managed tensor. */
struct TensorObj {
  std::atomic<int32_t> ref_count{1};
  DLManagedTensorVersioned* managed = nullptr;
  /*! True when this object lives inside managed's own allocation (freed by its deleter). */
  bool embedded = false;
};

inline void DestroyTensorObj(TensorObj* obj) noexcept {
  DLManagedTensorVersioned* managed = obj->managed;
  if (!obj->embedded) delete obj;
  if (managed->deleter != nullptr) managed->deleter(managed);
}
inline void IncRef(TensorObj* obj) noexcept { obj->ref_count.fetch_add(1, std::memory_order_relaxed); }
inline void DecRef(TensorObj* obj) noexcept {
  if (obj->ref_count.fetch_sub(1, std::memory_order_acq_rel) == 1) DestroyTensorObj(obj);
}

/*!
 * \brief One allocation for a managed tensor made by tensorplug: its TensorObj, the
 * DLManagedTensorVersioned (manager_ctx points back here), a payload that owns the data,
 * and `ndim` shape then `ndim` stride entries right behind the struct.
 */
template <class Payload>
struct ManagedBlock {
  TensorObj obj;
  DLManagedTensorVersioned managed{};
  Payload payload;

  int64_t* dims() noexcept { return reinterpret_cast<int64_t*>(this + 1); }

  static ManagedBlock* New(int32_t ndim, Payload payload) {
    static_assert(alignof(ManagedBlock) >= alignof(int64_t), "trailing dims must be aligned");
    static_assert(alignof(ManagedBlock) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "over-aligned payload");
    void* memory = ::operator new(sizeof(ManagedBlock) + 2 * sizeof(int64_t) * static_cast<size_t>(ndim));
    return new (memory) ManagedBlock(std::move(payload));
  }
  /*! \brief Free the block without releasing what the payload owns. */
  static void Discard(ManagedBlock* block) noexcept {
    block->~ManagedBlock();
    ::operator delete(block);
  }
  /*! \brief The DLPack deleter: release the payload, then free the block. */
  static void Deleter(DLManagedTensorVersioned* managed) noexcept {
    auto* block = static_cast<ManagedBlock*>(managed->manager_ctx);
    block->payload.Release(&managed->dl_tensor);
    Discard(block);
  }

  /*!
   * \brief Fill the managed tensor from `like` (data, device, dtype, byte_offset), copying
   * `shape` and `strides` into the trailing storage (strides computed when NULL).
   */
  void Init(const DLTensor& like, const int64_t* shape, const int64_t* strides, uint64_t flags) noexcept {
    obj.managed = &managed;
    obj.embedded = true;
    managed.version = DLPackVersion{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
    managed.manager_ctx = this;
    managed.deleter = &ManagedBlock::Deleter;
    managed.flags = flags;
    managed.dl_tensor = like;
    const int32_t n = like.ndim;
    int64_t* storage = dims();
    for (int32_t i = 0; i < n; ++i) storage[i] = shape[i];
    if (strides != nullptr) {
      for (int32_t i = 0; i < n; ++i) storage[n + i] = strides[i];
    } else {
      FillContiguousStrides(n, storage, storage + n);
    }
    managed.dl_tensor.shape = storage;
    managed.dl_tensor.strides = storage + n;
  }

 private:
  explicit ManagedBlock(Payload p) : payload(std::move(p)) {}
};

/*! \brief Payload of a wrapped DLManagedTensorVersioned (one whose strides were NULL). */
struct VersionedPayload {
  DLManagedTensorVersioned* inner;
  void Release(DLTensor*) noexcept {
    if (inner->deleter != nullptr) inner->deleter(inner);
  }
};
/*! \brief Payload of a wrapped legacy DLManagedTensor. */
struct LegacyPayload {
  DLManagedTensor* inner;
  void Release(DLTensor*) noexcept {
    if (inner->deleter != nullptr) inner->deleter(inner);
  }
};
/*! \brief Payload of ToDLPackVersioned(): one reference to the exported tensor. */
struct ExportPayload {
  TensorObj* source;
  void Release(DLTensor*) noexcept { DecRef(source); }
};
/*! \brief Payload of FromNDAlloc: the allocator object, asked to free the data on release. */
template <class Alloc>
struct NDAllocPayload {
  Alloc alloc;
  void Release(DLTensor* tensor) noexcept {
    try {
      alloc.FreeData(tensor);
    } catch (...) {  // a deleter cannot report errors; dropping is all that is left
    }
  }
};

TENSORPLUG_PRIVATE_COLD_NORETURN inline void ThrowBadShape(IntArrayView shape, const char* where) {
  if (shape.size() > TP_MAX_NDIM) {
    TENSORPLUG_THROW(ValueError) << where << ": " << shape.size() << " dimensions; tensorplug supports at most "
                                 << TP_MAX_NDIM;
  }
  for (int64_t extent : shape) {
    if (extent < 0) TENSORPLUG_THROW(ValueError) << where << ": negative extent in shape " << shape;
  }
  TENSORPLUG_THROW(MemoryError) << where << ": shape " << shape
                                << " has more than 2^63 - 1 elements (element counts and strides are int64)";
}

// A failed env allocation of `shape`: a negative extent is named as the kernel API names
// it (TPEnvAllocTensor refused it too), anything else is rethrown as recorded.
TENSORPLUG_PRIVATE_COLD_NORETURN inline void ThrowAllocFailure(IntArrayView shape, const char* where) {
  for (int64_t extent : shape) {
    if (extent < 0) {
      TPErrorClear();
      ThrowBadShape(shape, where);
    }
  }
  ThrowLastError();
}

// Inline (every allocation checks its shape); the message is built out of line.
// A non-empty shape of more than 2^63 - 1 elements is refused before the allocator sees it:
// 2^32 x 2^32 elements wrap to 0 in 64 bits, and an allocator sizing from it would return
// an empty block.
inline int32_t CheckShape(IntArrayView shape, const char* where) {
  bool ok = shape.size() <= TP_MAX_NDIM;
  bool empty = false, overflow = false;
  uint64_t numel = 1;
  for (int64_t extent : shape) {
    ok &= extent >= 0;
    empty |= extent == 0;
    overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(extent), &numel);
  }
  ok &= empty || (!overflow && numel <= static_cast<uint64_t>(INT64_MAX));
  if (TENSORPLUG_PRIVATE_UNLIKELY(!ok)) ThrowBadShape(shape, where);
  return static_cast<int32_t>(shape.size());
}

}  // namespace detail

/*!
 * \brief An owning, reference-counted tensor. Copies share the tensor (an atomic reference
 * count); the producer's DLPack deleter runs when the last copy goes. strides() is always
 * filled (computed for producers that gave NULL).
 */
class Tensor : public detail::TensorAccessors<Tensor> {
 public:
  /*! data_ptr() is writable: kernels fill the tensors they allocate. A Tensor of read-only
   * data (an owning parameter lent a jax array) keeps the flag; mutable_data_ptr() checks it. */
  static constexpr bool kWritable = true;
  Tensor() noexcept = default;
  Tensor(const Tensor& other) noexcept : obj_(other.obj_) {
    if (obj_ != nullptr) detail::IncRef(obj_);
  }
  Tensor(Tensor&& other) noexcept : obj_(std::exchange(other.obj_, nullptr)) {}
  Tensor& operator=(const Tensor& other) noexcept {
    Tensor(other).swap(*this);
    return *this;
  }
  Tensor& operator=(Tensor&& other) noexcept {
    Tensor(std::move(other)).swap(*this);
    return *this;
  }
  ~Tensor() {
    if (obj_ != nullptr) detail::DecRef(obj_);
  }
  void swap(Tensor& other) noexcept { std::swap(obj_, other.obj_); }

  bool defined() const noexcept { return obj_ != nullptr; }
  /*! \brief The DLTensor (NULL when undefined). */
  const DLTensor* dltensor() const noexcept {
    return obj_ != nullptr ? &obj_->managed->dl_tensor : nullptr;
  }
  /*! \brief The producer's DLPACK_FLAG_BITMASK_READ_ONLY flag. */
  bool is_read_only() const noexcept {
    return obj_ != nullptr && (obj_->managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  }
  /*! \brief No name: an owning tensor may outlive the call (and the library) it came from. */
  ArgName arg() const noexcept { return {}; }
  /*! \brief How many Tensor objects share this tensor (0 when undefined). */
  int32_t use_count() const noexcept {
    return obj_ != nullptr ? obj_->ref_count.load(std::memory_order_acquire) : 0;
  }
  /*! \brief A non-owning view, valid while this tensor lives. */
  TensorView view() const noexcept { return TensorView(dltensor(), is_read_only()); }
  /*!
   * \brief A non-owning view for writing (to pass a tensor a kernel allocated to a function
   * taking a MutableView), valid while this tensor lives; ValueError "tensor is read-only"
   * for read-only data.
   */
  MutableView mutable_view() const {
    if (is_read_only()) TENSORPLUG_THROW(ValueError) << "tensor is read-only";
    return MutableView(dltensor());
  }
  operator TensorView() const noexcept { return view(); }  // NOLINT: a Tensor is usable as a view

  /*!
   * \brief Allocate a row-major compact tensor through the calling thread's env allocator
   * (the calling framework's allocator during a call from Python; the default CPU
   * allocator otherwise). Errors of the allocator are rethrown with their kind.
   */
  static Tensor FromEnvAlloc(IntArrayView shape, DLDataType dtype, DLDevice device) {
    return EnvAlloc(shape, nullptr, dtype, device);  // TPEnvAllocTensor checks the result (c_api.h)
  }
  /*!
   * \brief Allocate with explicit strides (in elements). ValueError when the allocator
   * cannot honour them (strides of size-1 dims are not compared).
   */
  static Tensor FromEnvAlloc(IntArrayView shape, IntArrayView strides, DLDataType dtype,
                             DLDevice device) {
    if (strides.size() != shape.size()) {
      TENSORPLUG_THROW(ValueError) << "FromEnvAlloc: " << strides.size() << " strides for "
                                   << shape.size() << " dimensions";
    }
    Tensor result = EnvAlloc(shape, strides.data(), dtype, device);
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] > 1 && result.strides()[i] != strides[i]) {
        TENSORPLUG_THROW(ValueError) << "FromEnvAlloc: the allocator could not honour strides "
                                     << strides << " for shape " << shape << " (it returned "
                                     << result.strides() << ")";
      }
    }
    return result;
  }

  /*!
   * \brief Make a row-major compact tensor whose data comes from `alloc`, an object with
   *   void AllocData(DLTensor* t, ExtraArgs...);  // sets t->data (shape, strides, dtype, device are set)
   *   void FreeData(DLTensor* t);                 // called once, when the last reference goes
   * The allocator is moved into the tensor's single allocation with its shape and strides.
   * MemoryError when AllocData leaves data NULL for a non-empty tensor.
   */
  template <class Alloc, class... ExtraArgs>
  static Tensor FromNDAlloc(Alloc alloc, IntArrayView shape, DLDataType dtype, DLDevice device,
                            ExtraArgs&&... extra_args) {
    using Block = detail::ManagedBlock<detail::NDAllocPayload<Alloc>>;
    const int32_t ndim = detail::CheckShape(shape, "FromNDAlloc");
    Block* block = Block::New(ndim, detail::NDAllocPayload<Alloc>{std::move(alloc)});
    block->Init(DLTensor{nullptr, device, ndim, dtype, nullptr, nullptr, 0}, shape.data(), nullptr, 0);
    DLTensor* tensor = &block->managed.dl_tensor;
    try {
      block->payload.alloc.AllocData(tensor, std::forward<ExtraArgs>(extra_args)...);
    } catch (...) {
      Block::Discard(block);
      throw;
    }
    if (tensor->data == nullptr && detail::Numel(*tensor) != 0) {
      Block::Discard(block);
      TENSORPLUG_THROW(MemoryError) << "FromNDAlloc: the allocator returned no data";
    }
    return Tensor(&block->obj);
  }

  /*!
   * \brief Take ownership of a legacy (pre-1.0) DLPack tensor; its deleter runs when the
   * last reference goes (also when this call throws).
   */
  static Tensor FromDLPack(DLManagedTensor* tensor) {
    if (tensor == nullptr) TENSORPLUG_THROW(ValueError) << "FromDLPack: null tensor";
    return Wrap(detail::LegacyPayload{tensor}, tensor->dl_tensor, 0);
  }
  /*!
   * \brief Take ownership of a versioned DLPack tensor; its deleter runs when the last
   * reference goes (also when this call throws, e.g. for an unsupported major version).
   */
  static Tensor FromDLPackVersioned(DLManagedTensorVersioned* tensor) {
    if (tensor == nullptr) TENSORPLUG_THROW(ValueError) << "FromDLPackVersioned: null tensor";
    if (tensor->version.major != DLPACK_MAJOR_VERSION) {
      const DLPackVersion version = tensor->version;
      if (tensor->deleter != nullptr) tensor->deleter(tensor);
      TENSORPLUG_THROW(ValueError) << "FromDLPackVersioned: unsupported DLPack version "
                                   << version.major << "." << version.minor;
    }
    if (tensor->dl_tensor.strides == nullptr && tensor->dl_tensor.ndim > 0) {
      return Wrap(detail::VersionedPayload{tensor}, tensor->dl_tensor, tensor->flags);
    }
    detail::TensorObj* obj = new (std::nothrow) detail::TensorObj();
    if (obj == nullptr) {
      if (tensor->deleter != nullptr) tensor->deleter(tensor);
      throw std::bad_alloc();
    }
    obj->managed = tensor;
    return Tensor(obj);
  }
  /*!
   * \brief A new DLManagedTensorVersioned holding one reference to this tensor (its deleter
   * drops it); flags carry read-only. The receiver owns it.
   */
  DLManagedTensorVersioned* ToDLPackVersioned() const {
    using Block = detail::ManagedBlock<detail::ExportPayload>;
    if (obj_ == nullptr) TENSORPLUG_THROW(ValueError) << "ToDLPackVersioned: undefined tensor";
    const DLManagedTensorVersioned& source = *obj_->managed;
    Block* block = Block::New(0, detail::ExportPayload{obj_});
    block->Init(DLTensor{}, nullptr, nullptr, source.flags);
    block->managed.dl_tensor = source.dl_tensor;  // shape/strides stay the source's: it is kept alive
    detail::IncRef(obj_);
    return &block->managed;
  }
  /*!
   * \brief Give up this reference as a DLManagedTensorVersioned the caller owns; the Tensor
   * becomes undefined. When this is the only reference, the managed tensor itself is
   * handed over (no allocation); otherwise as ToDLPackVersioned(). NULL when undefined.
   */
  DLManagedTensorVersioned* release() {
    if (obj_ == nullptr) return nullptr;
    if (obj_->ref_count.load(std::memory_order_acquire) == 1) {
      detail::TensorObj* obj = std::exchange(obj_, nullptr);
      DLManagedTensorVersioned* managed = obj->managed;
      if (!obj->embedded) delete obj;
      return managed;
    }
    DLManagedTensorVersioned* exported = ToDLPackVersioned();
    detail::DecRef(std::exchange(obj_, nullptr));
    return exported;
  }

 private:
  explicit Tensor(detail::TensorObj* obj) noexcept : obj_(obj) {}

  // Wrap a foreign managed tensor into a block with shape/strides of our own; on failure
  // the wrapped tensor is released (ownership was taken).
  template <class Payload>
  static Tensor Wrap(Payload payload, const DLTensor& tensor, uint64_t flags) {
    using Block = detail::ManagedBlock<Payload>;
    Block* block = nullptr;
    try {
      block = Block::New(tensor.ndim, payload);
    } catch (...) {
      payload.Release(nullptr);
      throw;
    }
    block->Init(tensor, tensor.shape, tensor.strides, flags);
    return Tensor(&block->obj);
  }

  static Tensor EnvAlloc(IntArrayView shape, const int64_t* strides, DLDataType dtype,
                         DLDevice device) {
    if (TENSORPLUG_PRIVATE_UNLIKELY(shape.size() > TP_MAX_NDIM)) detail::ThrowBadShape(shape, "FromEnvAlloc");
    DLTensor prototype{nullptr, device, static_cast<int32_t>(shape.size()), dtype,
                       const_cast<int64_t*>(shape.data()), const_cast<int64_t*>(strides), 0};
    DLManagedTensorVersioned* out = nullptr;
    // TPEnvAllocTensor checks the request, and returns the dtype, device and shape asked
    // for, compact when no strides were given, or fails (c_api.h): nothing to check here.
    if (TENSORPLUG_PRIVATE_UNLIKELY(TPEnvAllocTensor(&prototype, &out) != 0)) {
      detail::ThrowAllocFailure(shape, "FromEnvAlloc");
    }
    return out->deleter == &TPLentTensorDeleter ? Lent(out) : FromDLPackVersioned(out);
  }
  // A tensor lent for the call (TPLentTensorDeleter): its reference count lives in the
  // scratch bytes the lender provides (c_api.h), so no allocation is made for it.
  static Tensor Lent(DLManagedTensorVersioned* managed) noexcept {
    static_assert(sizeof(detail::TensorObj) <= TENSORPLUG_LENT_SCRATCH_BYTES &&
                      alignof(detail::TensorObj) <= alignof(void*),
                  "TensorObj must fit the lender's scratch bytes");
    auto* obj = new (managed->manager_ctx) detail::TensorObj();
    obj->managed = managed;
    obj->embedded = true;  // nothing to free: the lender owns the storage
    return Tensor(obj);
  }

  detail::TensorObj* obj_ = nullptr;
};

/*!
 * \brief Call `f(offset)` for every element of `x`, in row-major order; `offset` counts
 * elements from `data_ptr()` and follows the strides (negative and zero ones included), so
 * a kernel handles any view: `ForEachOffset(x, [&](int64_t o) { sum += p[o]; });`
 */
template <class F>
void ForEachOffset(const TensorView& x, F&& f) {
  if (x.numel() == 0) return;
  const int32_t ndim = x.dim();
  std::vector<int64_t> index(static_cast<size_t>(ndim), 0);
  int64_t offset = 0;
  while (true) {
    f(offset);
    int32_t d = ndim - 1;
    for (; d >= 0; --d) {  // odometer increment of the multi-index
      const size_t i = static_cast<size_t>(d);
      if (++index[i] < x.size(d)) {
        offset += x.stride(d);
        break;
      }
      offset -= x.stride(d) * (index[i] - 1);
      index[i] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace tensorplug

#endif  // TENSORPLUG_TENSOR_H_
