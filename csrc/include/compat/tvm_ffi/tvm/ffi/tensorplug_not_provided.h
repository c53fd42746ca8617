/*
 * Names of apache tvm-ffi that tensorplug's compatibility layer does not provide
 * (docs/migration.md, "Not supported"). Their headers declare them so that a source which
 * includes such a header without using it compiles unchanged, and a source that uses one
 * stops with a message naming it: a class is instantiated, a function template called or
 * a macro expanded only where it is used, and that instantiation fails a static_assert.
 */
#ifndef TENSORPLUG_COMPAT_TVM_FFI_TENSORPLUG_NOT_PROVIDED_H_
#define TENSORPLUG_COMPAT_TVM_FFI_TENSORPLUG_NOT_PROVIDED_H_

namespace tvm {
namespace ffi {
namespace tensorplug_compat {
template <class...>
constexpr bool kFalse = false;  // dependent: a static_assert on it fires at instantiation only
}  // namespace tensorplug_compat
}  // namespace ffi
}  // namespace tvm

#define TENSORPLUG_COMPAT_NOT_PROVIDED_MESSAGE(what, header)                                        \
  what " (<tvm/ffi/" header ">) is not provided by tensorplug's tvm-ffi compatibility layer; see " \
       "docs/migration.md (Not supported)"

// A class template `name<...>` (Map<K, V>) whose use as a complete type fails.
#define TENSORPLUG_COMPAT_NOT_PROVIDED_TEMPLATE(name, qualified, header)                                   \
  template <class... Args>                                                                                  \
  struct name {                                                                                             \
    static_assert(::tvm::ffi::tensorplug_compat::kFalse<Args...>,                                          \
                  TENSORPLUG_COMPAT_NOT_PROVIDED_MESSAGE(qualified, header));                              \
  }

// A class `name` (ObjectRef) whose use as a complete type fails.
#define TENSORPLUG_COMPAT_NOT_PROVIDED_CLASS(name, qualified, header)                  \
  template <class... Args>                                                              \
  struct tensorplug_not_provided_##name {                                               \
    static_assert(::tvm::ffi::tensorplug_compat::kFalse<Args...>,                      \
                  TENSORPLUG_COMPAT_NOT_PROVIDED_MESSAGE(qualified, header));          \
  };                                                                                    \
  using name = tensorplug_not_provided_##name<>

// A function template `name<T>(...)` (make_object<T>) whose call fails.
#define TENSORPLUG_COMPAT_NOT_PROVIDED_FUNCTION(name, qualified, header)                         \
  template <class... T, class... Args>                                                            \
  void name(Args&&...) {                                                                          \
    static_assert(::tvm::ffi::tensorplug_compat::kFalse<T..., Args...>,                          \
                  TENSORPLUG_COMPAT_NOT_PROVIDED_MESSAGE(qualified, header));                    \
  }

// The expansion of a macro that is not provided (a declaration, valid at namespace and
// class scope).
#define TENSORPLUG_COMPAT_NOT_PROVIDED_MACRO(macro, header) \
  static_assert(false, TENSORPLUG_COMPAT_NOT_PROVIDED_MESSAGE(macro, header))

#endif  // TENSORPLUG_COMPAT_TVM_FFI_TENSORPLUG_NOT_PROVIDED_H_
