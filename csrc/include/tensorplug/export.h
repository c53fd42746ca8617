/*
 * tensorplug/export.h -- TENSORPLUG_EXPORT and TENSORPLUG_REGISTER_GLOBAL: export typed
 * C++ callables from a kernel library in the packed calling convention of c_api.h.
 */
#ifndef TENSORPLUG_EXPORT_H_
#define TENSORPLUG_EXPORT_H_

#include <string>

#include "tensorplug/function.h"

#define TENSORPLUG_PRIVATE_CAT_I(a, b) a##b
#define TENSORPLUG_PRIVATE_CAT(a, b) TENSORPLUG_PRIVATE_CAT_I(a, b)
// EXPAND: MSVC's traditional preprocessor passes __VA_ARGS__ on as a single argument otherwise.
#define TENSORPLUG_PRIVATE_EXPAND(x) x
#define TENSORPLUG_PRIVATE_FIRST(...) TENSORPLUG_PRIVATE_EXPAND(TENSORPLUG_PRIVATE_FIRST_I(__VA_ARGS__))
#define TENSORPLUG_PRIVATE_FIRST_I(first, ...) first
#define TENSORPLUG_PRIVATE_REST(...) TENSORPLUG_PRIVATE_EXPAND(TENSORPLUG_PRIVATE_REST_I(__VA_ARGS__))
#define TENSORPLUG_PRIVATE_REST_I(first, ...) __VA_ARGS__

/*!
 * \brief Export `callable` from this shared library as the packed function `name`:
 *
 *   TENSORPLUG_EXPORT(scale, Scale, "x", "y", "alpha");   // parameter names: all or none
 *   TENSORPLUG_EXPORT(noop, [] {});                       // names default to arg0, arg1, ...
 *
 * Emits `extern "C" int __tensorplug_<name>(void*, const TPAny*, int32_t, TPAny*)`, which
 * checks the argument count and kinds (TypeError "scale() argument 2 'y': expected a
 * tensor, got str"), converts them, calls, packs the result, and turns any exception into
 * TPErrorSet(kind, message) + return -1; and `extern "C" const char*
 * __tensorplugsig_<name>(void)`, returning the signature string ("x:view;y:view;alpha:float->void").
 * `callable` is copied into a static; a callable containing top-level commas (a template
 * argument list, a lambda capture list) must be parenthesized.
 */
#define TENSORPLUG_EXPORT(name, ...)                                                          \
  static auto __tensorplug_fn_##name = (TENSORPLUG_PRIVATE_FIRST(__VA_ARGS__, ~));            \
  static constexpr const char* __tensorplug_names_##name[] = {                               \
      TENSORPLUG_PRIVATE_REST(__VA_ARGS__, nullptr)};                                         \
  extern "C" TP_EXPORT int __tensorplug_##name(void* self, const TPAny* args, int32_t nargs,  \
                                               TPAny* result) {                               \
    (void)self;                                                                               \
    static constexpr ::tensorplug::detail::CallInfo info{                                      \
        #name, ::tensorplug::detail::ParamNames<decltype(__tensorplug_fn_##name)>(              \
                   __tensorplug_names_##name)};                                               \
    return ::tensorplug::detail::Invoke(info, __tensorplug_fn_##name, args, nargs, result);    \
  }                                                                                           \
  extern "C" TP_EXPORT const char* __tensorplugsig_##name(void) {                             \
    try {                                                                                     \
      static const std::string signature = ::tensorplug::detail::ExportedSignature(           \
          __tensorplug_fn_##name, __tensorplug_names_##name);                                 \
      return signature.c_str();                                                               \
    } catch (...) {                                                                           \
      return nullptr;                                                                         \
    }                                                                                         \
  }                                                                                           \
  static_assert(true, "")

/*!
 * \brief Register `callable` as the global function `name_string` when the library is
 * loaded (static initialization), replacing any function of that name:
 *
 *   TENSORPLUG_REGISTER_GLOBAL("mylib.add", [](int64_t a, int64_t b) { return a + b; }, "a", "b");
 *
 * Parameter names as in TENSORPLUG_EXPORT. A failure is reported on stderr.
 */
#define TENSORPLUG_REGISTER_GLOBAL(name_string, ...)                                       \
  TENSORPLUG_PRIVATE_REGISTER_GLOBAL(TENSORPLUG_PRIVATE_CAT(__tensorplug_global_, __COUNTER__), \
                                     name_string, __VA_ARGS__)
#define TENSORPLUG_PRIVATE_REGISTER_GLOBAL(var, name_string, ...)                          \
  [[maybe_unused]] static const bool var = ::tensorplug::detail::RegisterGlobalAtInit(     \
      name_string, TENSORPLUG_PRIVATE_FIRST(__VA_ARGS__, ~),                               \
      {TENSORPLUG_PRIVATE_REST(__VA_ARGS__, nullptr)})

#endif  // TENSORPLUG_EXPORT_H_
