/*
 * tensorplug/storage.h -- provider storage in C++: typed values under string keys, an
 * atomic get-or-create, and per-device workspaces (the TPEnvStorage* / TPEnvWorkspace
 * calls of c_api.h). Values are destroyed when replaced, erased, or at process exit.
 *
 *   namespace tp = tensorplug;
 *   tp::SetStorage("mylib.scale", int64_t{3});
 *   int64_t scale = tp::GetStorage("mylib.scale").cast<int64_t>();
 *   tp::Tensor table = tp::GetOrCreateStorage("mylib.table", [] { return MakeTable(); }).cast<tp::Tensor>();
 *   void* scratch = tp::GetWorkspace(x.device(), 1 << 20);
 */
#ifndef TENSORPLUG_STORAGE_H_
#define TENSORPLUG_STORAGE_H_

#include <type_traits>
#include <utility>

#include "tensorplug/c_api.h"
#include "tensorplug/caster.h"
#include "tensorplug/error.h"
#include "tensorplug/function.h"

namespace tensorplug {

/*!
 * \brief Store `value` under `key`, replacing (and destroying) any value stored before.
 * T is a value kind a function can return: Tensor, Function, std::string (or
 * std::string_view, const char*), an integer, a floating-point number, bool, DLDevice,
 * DLDataType, a Handle<T> (the storage keeps a reference), or Any. TypeError for None and tuples.
 */
template <class T>
void SetStorage(const char* key, T&& value) {
  TPAny any = detail::MakeNone();
  TypeCaster<std::decay_t<T>>::PackResult(std::forward<T>(value), &any);
  if (TPEnvStorageSetValue(key, &any, nullptr) != 0) detail::ThrowLastError();
}

/*! \brief Store the opaque pointer `ptr` under `key`; `deleter` (may be NULL) destroys it. */
inline void SetStoragePointer(const char* key, void* ptr, TPStorageDeleter deleter) {
  TPAny any = detail::MakeNone();
  any.type_index = kTPOpaquePtr;
  any.v_ptr = ptr;
  if (TPEnvStorageSetValue(key, &any, deleter) != 0) detail::ThrowLastError();
}

/*!
 * \brief The value under `key` (an Any that is None when there is none): cast it with
 * `.cast<T>()`. A tensor shares the stored tensor's memory; an opaque pointer is borrowed.
 */
inline Any GetStorage(const char* key) {
  TPAny out = detail::MakeNone();
  if (TPEnvStorageGetValue(key, &out, nullptr) != 0) detail::ThrowLastError();
  return Any(out);
}

/*!
 * \brief The value under `key`, made by `factory()` first when there is none. Atomic:
 * however many threads race, `factory` runs once while it succeeds (the others wait). It
 * returns any kind SetStorage takes; an exception it throws reaches the caller as an
 * Error (nothing is stored).
 */
template <class F>
Any GetOrCreateStorage(const char* key, F&& factory) {
  using R = std::decay_t<decltype(factory())>;
  auto create = [](void* ctx, TPAny* value, TPStorageDeleter*) -> int {
    try {
      TypeCaster<R>::PackResult((*static_cast<std::remove_reference_t<F>*>(ctx))(), value);
      return 0;
    } catch (...) {
      detail::SetErrorFromCurrentException();
      return -1;
    }
  };
  TPAny out = detail::MakeNone();
  if (TPEnvStorageGetOrCreate(key, create, const_cast<void*>(static_cast<const void*>(&factory)), &out) != 0) {
    detail::ThrowLastError();
  }
  return Any(out);
}

/*! \brief Whether a value is stored under `key`. */
inline bool StorageContains(const char* key) noexcept { return TPEnvStorageContains(key) != 0; }

/*! \brief Remove and destroy the value under `key` (nothing happens when there is none). */
inline void EraseStorage(const char* key) {
  if (TPEnvStorageErase(key) != 0) detail::ThrowLastError();
}

/*!
 * \brief A buffer of at least `nbytes` bytes on `device` whose first `nbytes` bytes are
 * zero (CUDA: zeroed on the thread's current stream), valid until the next request of the
 * same workspace: per thread on the CPU, per device and stream on CUDA. Reused while
 * requests fit, replaced when one does not.
 */
inline void* GetWorkspace(DLDevice device, size_t nbytes) {
  void* out = nullptr;
  if (TPEnvWorkspace(device.device_type, device.device_id, nbytes, &out) != 0) detail::ThrowLastError();
  return out;
}

}  // namespace tensorplug

#endif  // TENSORPLUG_STORAGE_H_
