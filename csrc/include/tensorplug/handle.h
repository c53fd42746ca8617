/*
 * tensorplug/handle.h -- Handle<T>: a typed, reference-counted opaque handle to state a
 * kernel library keeps (a plan, a workspace, a communicator), returned to Python as a
 * tensorplug.Handle and taken back by later calls (c_api.h, "Handles").
 *
 *   struct Plan { ... };
 *   TENSORPLUG_HANDLE_TYPE(Plan, "mylib.Plan");   // at global scope
 *
 *   tensorplug::Handle<Plan> MakePlan(int64_t n) { return tensorplug::Handle<Plan>(new Plan{n}); }
 *   int64_t RunPlan(tensorplug::Handle<Plan> plan) { return plan->n; }
 *
 * A parameter of type Handle<Plan> (signature kind "handle<mylib.Plan>") takes only handles
 * of that type name; a `void*` parameter (kind "handle") takes the pointer of any handle.
 */
#ifndef TENSORPLUG_HANDLE_H_
#define TENSORPLUG_HANDLE_H_

#include <memory>
#include <type_traits>
#include <utility>

#include "tensorplug/c_api.h"
#include "tensorplug/error.h"

namespace tensorplug {

/*!
 * \brief The type name of handles to T: specialized by TENSORPLUG_HANDLE_TYPE. The name is
 * the type's identity across libraries: two libraries that name their handle types alike
 * accept each other's handles, so prefix it with the library's name ("mylib.Plan").
 */
template <class T>
struct HandleTypeName;

/*!
 * \brief Declare the type name of Handle<T> (letters, digits, '_', '.', ':'); at global scope:
 *   TENSORPLUG_HANDLE_TYPE(mylib::Plan, "mylib.Plan");
 */
#define TENSORPLUG_HANDLE_TYPE(type, name)     \
  template <>                                  \
  struct tensorplug::HandleTypeName<type> {    \
    static constexpr const char* value = name; \
  }

namespace detail {
template <class T, class = void>
struct HasHandleTypeName : std::false_type {};
template <class T>
struct HasHandleTypeName<T, std::void_t<decltype(HandleTypeName<T>::value)>> : std::true_type {};
}  // namespace detail

/*!
 * \brief One reference to a handle owning a T (or an undefined handle). Copies share the
 * object; the deleter runs once, when the last reference goes, wherever it is held (C++,
 * Python, provider storage). The deleter must not throw.
 */
template <class T>
class Handle {
  static_assert(detail::HasHandleTypeName<T>::value,
                "tensorplug::Handle<T>: declare the type's name with TENSORPLUG_HANDLE_TYPE(T, \"mylib.T\")");

 public:
  /*! \brief An undefined handle (None in Python). */
  Handle() noexcept = default;
  /*! \brief Own `ptr`: `delete ptr` when the last reference goes (nullptr: undefined). */
  explicit Handle(T* ptr) : Handle(ptr, std::default_delete<T>()) {}
  /*!
   * \brief Own `ptr` with `deleter(ptr)` (a function, or a callable moved into the handle)
   * run when the last reference goes (nullptr: undefined, the deleter is not called). If
   * the handle cannot be made, `deleter(ptr)` runs before the error is thrown.
   */
  template <class D>
  Handle(T* ptr, D deleter) {
    if (ptr == nullptr) return;
    D* box = nullptr;
    try {
      box = new D(std::move(deleter));
    } catch (...) {
      deleter(ptr);  // owned from the start: destroyed when the handle cannot be made
      throw;
    }
    if (TPHandleCreate(ptr, type_name(), &DeleteWith<D>, box, &ref_) != 0) {
      DeleteWith<D>(ptr, box);
      detail::ThrowLastError();
    }
  }
  Handle(const Handle& other) noexcept : ref_(other.ref_) {
    if (ref_ != nullptr) TPHandleRetain(ref_);
  }
  Handle(Handle&& other) noexcept : ref_(std::exchange(other.ref_, nullptr)) {}
  Handle& operator=(const Handle& other) noexcept {
    Handle(other).swap(*this);
    return *this;
  }
  Handle& operator=(Handle&& other) noexcept {
    Handle(std::move(other)).swap(*this);
    return *this;
  }
  ~Handle() {
    if (ref_ != nullptr) TPHandleRelease(ref_);
  }
  void swap(Handle& other) noexcept { std::swap(ref_, other.ref_); }

  /*! \brief A new reference to `ref` (retained); the caller checks its type name. */
  static Handle Borrow(TPHandleRef ref) noexcept {
    if (ref != nullptr) TPHandleRetain(ref);
    return Handle(ref);
  }
  /*! \brief Take over one reference to `ref` (no retain). */
  static Handle Steal(TPHandleRef ref) noexcept { return Handle(ref); }
  /*! \brief The declared type name ("mylib.Plan"). */
  static const char* type_name() noexcept { return HandleTypeName<T>::value; }

  T* get() const noexcept { return ref_ != nullptr ? static_cast<T*>(TPHandleGetPointer(ref_)) : nullptr; }
  T* operator->() const noexcept { return get(); }
  T& operator*() const noexcept { return *get(); }
  bool defined() const noexcept { return ref_ != nullptr; }
  explicit operator bool() const noexcept { return defined(); }
  /*! \brief The C reference (still owned by this Handle). */
  TPHandleRef ref() const noexcept { return ref_; }
  /*! \brief Give up the reference; the caller must TPHandleRelease it. */
  TPHandleRef release() noexcept { return std::exchange(ref_, nullptr); }

 private:
  explicit Handle(TPHandleRef ref) noexcept : ref_(ref) {}

  template <class D>
  static void DeleteWith(void* ptr, void* ctx) noexcept {
    std::unique_ptr<D> deleter(static_cast<D*>(ctx));
    (*deleter)(static_cast<T*>(ptr));
  }

  TPHandleRef ref_ = nullptr;
};

}  // namespace tensorplug

#endif  // TENSORPLUG_HANDLE_H_
