/*
 * tensorplug/env.h -- the calling environment: current streams and the shared storage.
 *
 * During a call from Python, tensorplug sets the calling thread's current stream of each
 * device to the calling framework's current stream (and binds its allocator, used by
 * Tensor::FromEnvAlloc), then restores both after the call.
 */
#ifndef TENSORPLUG_ENV_H_
#define TENSORPLUG_ENV_H_

#include "tensorplug/c_api.h"
#include "tensorplug/error.h"

namespace tensorplug {

/*! \brief The calling thread's current stream of `device` (NULL: the device's default stream). */
inline void* GetCurrentStream(DLDevice device) noexcept {
  return TPEnvGetStream(device.device_type, device.device_id);
}

/*! \brief Set the calling thread's current stream of `device`; returns the previous one. */
inline void* SetCurrentStream(DLDevice device, void* stream) noexcept {
  return TPEnvSetStream(device.device_type, device.device_id, stream);
}

/*!
 * \brief Process-wide key -> value storage shared by kernel providers (a library handle, a
 * workspace). Values are raw pointers; the optional deleter runs when a value is replaced
 * or erased. Prefix keys with your library's name.
 */
class Storage {
 public:
  Storage() = delete;

  /*! \brief Store `value` under `key`, destroying (with its deleter) any value stored before. */
  static void Set(const char* key, void* value, void (*deleter)(void* value) = nullptr) {
    if (TPEnvStorageSet(key, value, deleter) != 0) detail::ThrowLastError();
  }
  /*! \brief The value under `key`, or NULL. */
  static void* Get(const char* key) noexcept { return TPEnvStorageGet(key); }
  /*! \brief Remove and destroy the value under `key` (nothing happens when there is none). */
  static void Erase(const char* key) {
    if (TPEnvStorageErase(key) != 0) detail::ThrowLastError();
  }
};

}  // namespace tensorplug

#endif  // TENSORPLUG_ENV_H_
