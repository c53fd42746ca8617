/*
 * tensorplug/function.h -- values (Any) and functions (Function): calling packed functions
 * from C++ and wrapping typed C++ callables into them (Function::FromTyped). The casters
 * of Any and Function live here; every other type's in caster.h. The export macros are in
 * export.h.
 *
 * Over 500 lines: one idea, a packed function seen from C++ (calling one, making one from a
 * typed callable), whose two directions share the argument casting and are read together.
 */
#ifndef TENSORPLUG_FUNCTION_H_
#define TENSORPLUG_FUNCTION_H_

#include "tensorplug/caster.h"

namespace tensorplug {

/*!
 * \brief An owned TPAny: the result of a Function call. Move-only; releases what it owns
 * on destruction.
 */
class Any {
 public:
  Any() noexcept : value_(detail::MakeNone()) {}
  /*! \brief Take ownership of `value`. */
  explicit Any(TPAny value) noexcept : value_(value) {}
  Any(Any&& other) noexcept : value_(std::exchange(other.value_, detail::MakeNone())) {}
  Any& operator=(Any&& other) noexcept {
    if (this != &other) {
      Reset();
      value_ = std::exchange(other.value_, detail::MakeNone());
    }
    return *this;
  }
  Any(const Any&) = delete;
  Any& operator=(const Any&) = delete;
  ~Any() { Reset(); }

  /*! \brief The TPTypeIndex of the value. */
  int32_t type_index() const noexcept { return value_.type_index; }
  bool is_none() const noexcept { return value_.type_index == kTPNone; }
  /*! \brief The raw value, still owned by this Any. */
  const TPAny& raw() const noexcept { return value_; }
  /*! \brief Give up ownership of the raw value; this Any becomes None. */
  TPAny release() noexcept { return std::exchange(value_, detail::MakeNone()); }

  /*!
   * \brief Convert to T: integers, floating point, bool, std::string, std::string_view,
   * DLDevice, DLDataType, Tensor, TensorView (valid while this Any lives), Function,
   * std::optional<T>, std::tuple<...>. TypeError when the value is of another kind.
   * On an rvalue (`f(x).cast<Tensor>()`), owned payloads are moved out.
   */
  template <class T>
  T cast() const& {
    return detail::AnyCast<T>::Cast(&value_, false);
  }
  template <class T>
  T cast() && {
    return detail::AnyCast<T>::Cast(&value_, true);
  }

 private:
  void Reset() noexcept {
    if (detail::IsOwnedKind(value_.type_index)) TPAnyRelease(&value_);
    value_ = detail::MakeNone();
  }

  // mutable: a const cast<Tensor>() swaps the stored tensor for a re-exported reference.
  mutable TPAny value_;
};

namespace detail {

/*! \brief Packed arguments of one Function call, released as their ArgMode says. */
template <size_t N>
struct CallArgs {
  TPAny items[N == 0 ? 1 : N];
  ArgMode modes[N == 0 ? 1 : N] = {};
  size_t count = 0;
  bool called = false;

  ~CallArgs() {
    for (size_t i = 0; i < count; ++i) {
      if (modes[i] == ArgMode::kTemporary || (modes[i] == ArgMode::kMoved && !called)) {
        TPAnyRelease(&items[i]);
      }
    }
  }
  template <class T>
  void Push(T&& value) {
    TPAny* slot = &items[count];
    *slot = MakeNone();
    modes[count] = TypeCaster<std::decay_t<T>>::PackArg(std::forward<T>(value), slot);
    ++count;
  }
};

}  // namespace detail

/*!
 * \brief A reference-counted handle to a packed function (TPFunctionHandle): a global
 * function, a module's export, a Python callable passed to a kernel, or a C++ callable.
 */
class Function {
 public:
  Function() noexcept = default;
  Function(const Function& other) noexcept : handle_(other.handle_) {
    if (handle_ != nullptr) TPFunctionRetain(handle_);
  }
  Function(Function&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Function& operator=(const Function& other) noexcept {
    Function(other).swap(*this);
    return *this;
  }
  Function& operator=(Function&& other) noexcept {
    Function(std::move(other)).swap(*this);
    return *this;
  }
  ~Function() {
    if (handle_ != nullptr) TPFunctionRelease(handle_);
  }
  void swap(Function& other) noexcept { std::swap(handle_, other.handle_); }

  /*! \brief Take over one reference to `handle` (no retain). */
  static Function Steal(TPFunctionHandle handle) noexcept { return Function(handle); }
  /*! \brief A new reference to `handle` (retained). */
  static Function Borrow(TPFunctionHandle handle) noexcept {
    if (handle != nullptr) TPFunctionRetain(handle);
    return Function(handle);
  }

  bool defined() const noexcept { return handle_ != nullptr; }
  explicit operator bool() const noexcept { return defined(); }
  TPFunctionHandle handle() const noexcept { return handle_; }
  /*! \brief Give up the reference; the caller must TPFunctionRelease it. */
  TPFunctionHandle release() noexcept { return std::exchange(handle_, nullptr); }
  /*! \brief The signature string, or NULL when the function has none. */
  const char* signature() const noexcept {
    return handle_ != nullptr ? TPFunctionGetSignature(handle_) : nullptr;
  }

  /*!
   * \brief Call with C++ arguments: integers, floating point, bool, strings (lent),
   * DLDevice, DLDataType, TensorView and MutableView (lent as kTPDLTensorPtr; a read-only
   * TensorView passed for a MutableView parameter is refused), Tensor (the callee gets a
   * reference of its own as kTPTensor), Function (lent), Any, TPAny, nullptr /
   * std::nullopt (None), std::optional. Errors of the callee are rethrown as
   * tensorplug::Error with their kind and message.
   */
  template <class... Ts>
  Any operator()(Ts&&... args) const {
    static_assert((TypeCaster<std::decay_t<Ts>>::kIsCallArg && ...),
                  "tensorplug::Function: unsupported argument type");
    if (handle_ == nullptr) TENSORPLUG_THROW(ValueError) << "call of an undefined Function";
    detail::CallArgs<sizeof...(Ts)> packed;
    (packed.Push(std::forward<Ts>(args)), ...);
    TPAny result = detail::MakeNone();
    packed.called = true;  // from here on, moved tensors belong to the callee
    if (TPFunctionCall(handle_, packed.items, static_cast<int32_t>(sizeof...(Ts)), &result) != 0) {
      detail::ThrowLastError();
    }
    return Any(result);
  }

  /*! \brief The global function `name`, or an undefined Function when none is registered. */
  static Function GetGlobal(const std::string& name) {
    TPFunctionHandle handle = nullptr;
    if (TPGlobalFuncGet(name.c_str(), &handle) != 0) detail::ThrowLastError();
    return Function(handle);
  }
  /*! \brief The global function `name`; ValueError "global function 'x' is not registered". */
  static Function GetGlobalRequired(const std::string& name) {
    Function f = GetGlobal(name);
    if (!f) TENSORPLUG_THROW(ValueError) << "global function '" << name << "' is not registered";
    return f;
  }
  /*! \brief Register this function as global `name`; fails if taken unless allow_override. */
  void RegisterGlobal(const std::string& name, bool allow_override = false) const {
    if (handle_ == nullptr) TENSORPLUG_THROW(ValueError) << "cannot register an undefined Function";
    if (TPGlobalFuncRegister(name.c_str(), handle_, allow_override ? 1 : 0) != 0) {
      detail::ThrowLastError();
    }
  }
  /*! \brief Names of all global functions, sorted. */
  static std::vector<std::string> ListGlobalNames() {
    std::vector<std::string> names;
    auto visit = [](void* ctx, const char* name) {
      static_cast<std::vector<std::string>*>(ctx)->emplace_back(name);
    };
    if (TPGlobalFuncListNames(visit, &names) != 0) detail::ThrowLastError();
    return names;
  }

  /*!
   * \brief Wrap a typed C++ callable (function pointer, lambda, functor; see the supported
   * types at the top of this file). `name` and `param_names` (one per parameter, or none
   * for arg0, arg1, ...) appear in error messages and in the signature.
   */
  template <class Fn>
  static Function FromTyped(Fn callable, std::string name = "<lambda>",
                            std::vector<std::string> param_names = {});

 private:
  explicit Function(TPFunctionHandle handle) noexcept : handle_(handle) {}

  TPFunctionHandle handle_ = nullptr;
};

template <>
struct TypeCaster<Function> {
  static constexpr bool kIsArg = true, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ArgKind() { return "func"; }
  static std::string ResultKind() { return "func"; }
  static std::string Expected() { return "a callable"; }
  static bool Accepts(const TPAny& v) noexcept {
    return v.type_index == kTPFunction && v.v_func != nullptr;
  }
  static Function Convert(const TPAny& v) noexcept { return Function::Borrow(v.v_func); }
  static void PackResult(Function value, TPAny* out) noexcept {
    if (!value) {
      *out = detail::MakeNone();
    } else {
      out->v_func = value.release();
      out->type_index = kTPFunction;
    }
  }
  static ArgMode PackArg(const Function& value, TPAny* out) noexcept {
    if (!value) {
      *out = detail::MakeNone();
    } else {
      out->v_func = value.handle();  // lent: the caller's reference outlives the call
      out->type_index = kTPFunction;
    }
    return ArgMode::kBorrowed;
  }
};

template <>
struct TypeCaster<Any> {
  static constexpr bool kIsArg = false, kIsResult = true, kIsCallArg = true, kConsumes = false;
  static std::string ResultKind() { return "any"; }
  static void PackResult(Any value, TPAny* out) noexcept { *out = value.release(); }
  static ArgMode PackArg(const Any& value, TPAny* out) {
    if (value.type_index() == kTPTensor) {  // the callee must get a tensor reference of its own
      return TypeCaster<Tensor>::PackArg(value.cast<Tensor>(), out);
    }
    *out = value.raw();
    return ArgMode::kBorrowed;
  }
};

namespace detail {

/*! \brief Parameter and result types of a callable (function pointer, lambda, functor). */
template <class T>
constexpr bool kAlwaysFalse = false;

template <class F, class = void>
struct FunctionTraits {
  static_assert(kAlwaysFalse<F>,
                "tensorplug: the callable must be a function, a function pointer, or an object "
                "with exactly one non-template operator()");
};
template <class R, class... A>
struct FunctionTraits<R (*)(A...), void> {
  using Pointer = R (*)(A...);  // a tag carrying R and A...
  static constexpr size_t kArity = sizeof...(A);
};
template <class R, class... A>
struct FunctionTraits<R (*)(A...) noexcept, void> : FunctionTraits<R (*)(A...)> {};
template <class C, class R, class... A>
struct FunctionTraits<R (C::*)(A...), void> : FunctionTraits<R (*)(A...)> {};
template <class C, class R, class... A>
struct FunctionTraits<R (C::*)(A...) const, void> : FunctionTraits<R (*)(A...)> {};
template <class C, class R, class... A>
struct FunctionTraits<R (C::*)(A...) noexcept, void> : FunctionTraits<R (*)(A...)> {};
template <class C, class R, class... A>
struct FunctionTraits<R (C::*)(A...) const noexcept, void> : FunctionTraits<R (*)(A...)> {};
template <class F>
struct FunctionTraits<F, std::void_t<decltype(&F::operator())>>
    : FunctionTraits<decltype(&F::operator())> {};

/*! \brief Names for messages: the function's name and its parameter names (NULL: arg0, ...). */
struct CallInfo {
  const char* function;
  const char* const* names;
};

/*!
 * \brief Parameter i's name: names[i] up to an '=' ("alpha=1.0" declares the default 1.0,
 * see TENSORPLUG_EXPORT); arg<i> without names.
 */
inline std::string ParamName(const char* const* names, size_t i) {
  if (names == nullptr) return "arg" + std::to_string(i);
  const char* eq = std::strchr(names[i], '=');
  return eq ? std::string(names[i], eq) : std::string(names[i]);
}

/*! \brief "=1.0" for a parameter declared "alpha=1.0", else "". */
inline std::string ParamDefault(const char* const* names, size_t i) {
  const char* eq = names != nullptr ? std::strchr(names[i], '=') : nullptr;
  return eq ? std::string(eq) : std::string();
}

inline std::string ArgLabel(const CallInfo& info, size_t i) {
  return std::string(info.function) + "() argument " + std::to_string(i + 1) + " '" + ParamName(info.names, i) + "'";
}

// Same wording as the Python-side check: "scale() takes 3 arguments (x, y, alpha), got 2".
[[noreturn]] inline void ThrowArity(const CallInfo& info, size_t expected, int32_t given) {
  std::string names;
  for (size_t i = 0; i < expected; ++i) {
    if (i != 0) names += ", ";
    names += ParamName(info.names, i);
  }
  TENSORPLUG_THROW(TypeError) << info.function << "() takes " << expected
                              << (expected == 1 ? " argument (" : " arguments (") << names
                              << "), got " << given;
}

template <class T>
TENSORPLUG_PRIVATE_COLD_NORETURN void ThrowArgType(const CallInfo& info, size_t i, const TPAny& value) {
  TENSORPLUG_THROW(TypeError) << ArgLabel(info, i) << ": expected " << TypeCaster<T>::Expected() << ", got "
                              << DescribeValue(value);
}

// Inline: one compare per argument on every call; the message is built out of line.
template <class T>
void CheckArg(const CallInfo& info, size_t i, const TPAny& value) {
  if (TENSORPLUG_PRIVATE_UNLIKELY(!TypeCaster<T>::Accepts(value))) ThrowArgType<T>(info, i, value);
}

// Casters with a Convert(v, ArgName) overload returning T (the view casters) get the
// argument's name: views name it in their errors (tensor.h, ArgName).
template <class T, class = void>
constexpr bool kConvertsNamed = false;
template <class T>
constexpr bool kConvertsNamed<
    T, std::enable_if_t<std::is_same_v<decltype(TypeCaster<T>::Convert(std::declval<const TPAny&>(), ArgName{})), T>>> =
    true;

template <class T>
T ConvertArg(const CallInfo& info, size_t i, const TPAny& value, bool* consumed) {
  // Marked before converting: Convert owns a kTPTensor even when it throws.
  if constexpr (TypeCaster<T>::kConsumes) *consumed = value.type_index == kTPTensor;
  try {
    if constexpr (kConvertsNamed<T>) {
      return TypeCaster<T>::Convert(value, ArgName{info.names != nullptr ? info.names[i] : nullptr});
    } else {
      return TypeCaster<T>::Convert(value);
    }
  } catch (const Error& e) {
    throw Error(e.kind(), ArgLabel(info, i) + ": " + e.what());
  }
}

/*!
 * \brief Releases, when the call is over, every kTPTensor argument the callee did not take
 * into a Tensor: the ABI moves them to the callee, also when it fails.
 */
template <size_t N>
struct ArgOwnership {
  const TPAny* args;
  int32_t nargs;
  bool consumed[N + 1] = {};
  bool any_tensor = true;  // whether an argument may be a kTPTensor (known once the count is checked)

  ~ArgOwnership() {
    if (!any_tensor) return;
    for (int32_t i = 0; i < nargs; ++i) {
      if (args[i].type_index != kTPTensor || (static_cast<size_t>(i) < N && consumed[i])) continue;
      DLManagedTensorVersioned* tensor = args[i].v_tensor;
      if (tensor != nullptr && tensor->deleter != nullptr) tensor->deleter(tensor);
    }
  }
};

// A call with the wrong number of arguments: the error set, every kTPTensor argument (the
// ABI moved them to the callee) released. Out of line, so that the common path of a kernel
// with few arguments needs no stack frame of its own.
TENSORPLUG_PRIVATE_COLD inline int ArityFailure(const CallInfo& info, size_t expected, const TPAny* args,
                                                int32_t nargs) noexcept {
  ArgOwnership<0> ownership{args, nargs};  // consumed by none: releases every kTPTensor
  try {
    ThrowArity(info, expected, nargs);
  } catch (...) {
    SetErrorFromCurrentException(info.function);
  }
  return -1;
}

template <class Fn, class R, class... Args, size_t... I>
int InvokeImpl(const CallInfo& info, Fn& fn, const TPAny* args, int32_t nargs, TPAny* result,
               R (*)(Args...), std::index_sequence<I...>) noexcept {
  static_assert((TypeCaster<std::decay_t<Args>>::kIsArg && ...),
                "tensorplug: unsupported parameter type (see tensorplug/function.h)");
  static_assert(std::is_void_v<R> || TypeCaster<std::decay_t<R>>::kIsResult,
                "tensorplug: unsupported result type (see tensorplug/function.h)");
  constexpr size_t kArity = sizeof...(Args);
  *result = MakeNone();
  if (TENSORPLUG_PRIVATE_UNLIKELY(nargs != static_cast<int32_t>(kArity))) return ArityFailure(info, kArity, args, nargs);
  ArgOwnership<kArity> ownership{args, nargs};
  try {
    ownership.any_tensor = (false || ... || (args[I].type_index == kTPTensor));
    (CheckArg<std::decay_t<Args>>(info, I, args[I]), ...);
    std::tuple<std::decay_t<Args>...> values{
        ConvertArg<std::decay_t<Args>>(info, I, args[I], &ownership.consumed[I])...};
    (void)values;
    if constexpr (std::is_void_v<R>) {
      fn(std::forward<Args>(std::get<I>(values))...);
    } else {
      TypeCaster<std::decay_t<R>>::PackResult(fn(std::forward<Args>(std::get<I>(values))...),
                                              result);
    }
    return 0;
  } catch (...) {
    SetErrorFromCurrentException(info.function);
    return -1;
  }
}

/*! \brief Unpack `args`, call `fn`, pack the result; errors become TPErrorSet + -1. */
template <class Fn>
int Invoke(const CallInfo& info, Fn& fn, const TPAny* args, int32_t nargs, TPAny* result) noexcept {
  using Traits = FunctionTraits<std::decay_t<Fn>>;
  return InvokeImpl(info, fn, args, nargs, result, typename Traits::Pointer{nullptr},
                    std::make_index_sequence<Traits::kArity>{});
}

template <class R>
std::string ResultKindOf() {
  if constexpr (std::is_void_v<R>) {
    return "void";
  } else {
    return TypeCaster<std::decay_t<R>>::ResultKind();
  }
}

template <class R, class... Args>
std::string MakeSignatureImpl(const char* const* names, R (*)(Args...)) {
  std::string signature;
  size_t i = 0;
  auto add = [&](const std::string& kind) {
    if (i != 0) signature += ';';
    signature += ParamName(names, i);
    signature += ':';
    signature += kind;
    signature += ParamDefault(names, i);  // "alpha:float=1.0"
    ++i;
  };
  (add(TypeCaster<std::decay_t<Args>>::ArgKind()), ...);
  (void)add;
  return signature + "->" + ResultKindOf<R>();
}

/*! \brief "x:view;alpha:float->void" (see "Signatures" in c_api.h); names NULL: arg0, ... */
template <class Fn>
std::string MakeSignature(const char* const* names) {
  return MakeSignatureImpl(names, typename FunctionTraits<std::decay_t<Fn>>::Pointer{nullptr});
}

/*
 * The export macros pass their names as `{"x", "y", nullptr}` (nullptr alone when no
 * names are given), so the count is checked at compile time.
 */
template <class Fn, size_t K>
constexpr const char* const* ParamNames(const char* const (&names)[K]) {
  static_assert(K == 1 || K - 1 == FunctionTraits<std::decay_t<Fn>>::kArity,
                "tensorplug: give one name per parameter, or none");
  return K == 1 ? nullptr : names;
}

template <class Fn, size_t K>
std::string ExportedSignature(const Fn&, const char* const (&names)[K]) {
  return MakeSignature<Fn>(ParamNames<Fn>(names));
}

/*! \brief The closure behind Function::FromTyped. */
template <class Fn>
struct TypedClosure {
  Fn fn;
  std::string name;
  std::vector<std::string> names;
  std::vector<const char*> name_ptrs;
  std::string signature;

  static int Call(void* self, const TPAny* args, int32_t nargs, TPAny* result) noexcept {
    auto* closure = static_cast<TypedClosure*>(self);
    const CallInfo info{closure->name.c_str(),
                        closure->name_ptrs.empty() ? nullptr : closure->name_ptrs.data()};
    return Invoke(info, closure->fn, args, nargs, result);
  }
  static void Delete(void* self) noexcept { delete static_cast<TypedClosure*>(self); }
};

template <class Fn, size_t K>
bool RegisterGlobalAtInit(const char* name, Fn fn, const char* const (&names)[K]) noexcept {
  const char* const* checked = ParamNames<Fn>(names);
  try {
    std::vector<std::string> param_names;
    for (size_t i = 0; checked != nullptr && i + 1 < K; ++i) param_names.emplace_back(checked[i]);
    Function::FromTyped(std::move(fn), name, std::move(param_names)).RegisterGlobal(name, true);
    return true;
  } catch (const std::exception& e) {
    // Static initialization has no caller to report to.
    std::fprintf(stderr, "tensorplug: registering global function '%s' failed: %s\n", name, e.what());
    return false;
  }
}

}  // namespace detail

template <class Fn>
Function Function::FromTyped(Fn callable, std::string name, std::vector<std::string> param_names) {
  using Closure = detail::TypedClosure<Fn>;
  constexpr size_t kArity = detail::FunctionTraits<Fn>::kArity;
  if (!param_names.empty() && param_names.size() != kArity) {
    TENSORPLUG_THROW(ValueError) << "Function::FromTyped: " << param_names.size()
                                 << " parameter names for " << kArity << " parameters";
  }
  std::unique_ptr<Closure> closure(
      new Closure{std::move(callable), std::move(name), std::move(param_names), {}, {}});
  for (const std::string& n : closure->names) closure->name_ptrs.push_back(n.c_str());
  closure->signature =
      detail::MakeSignature<Fn>(closure->name_ptrs.empty() ? nullptr : closure->name_ptrs.data());
  TPFunctionHandle handle = nullptr;
  if (TPFunctionCreate(closure.get(), &Closure::Call, &Closure::Delete,
                       closure->signature.c_str(), &handle) != 0) {
    detail::ThrowLastError();
  }
  closure.release();  // owned by the function now: Closure::Delete frees it
  return Function(handle);
}

}  // namespace tensorplug

#endif  // TENSORPLUG_FUNCTION_H_
