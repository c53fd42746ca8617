/*
 * tensorplug/python.h -- what a framework adapter's compiled Python module hands tensorplug.
 *
 * An adapter (a first-party plugin or a third party's) makes its framework's tensors fast to
 * exchange by handing tensorplug's core C functions in capsules: a DLPack exchange API
 * (DLPackExchangeAPI, "dlpack_exchange_api"), and the capsules declared here, passed to
 * tensorplug.ExchangeTable (docs/adapters.md, "C capsules"). The C++ part below is the
 * exception barrier and the shutdown check every such module needs; the first-party
 * plugins' modules (plugins/tensorplug_adapters/<framework>/) use it as a third party would.
 *
 * Include <Python.h> first (this header needs PyObject).
 */
#ifndef TENSORPLUG_PYTHON_H_
#define TENSORPLUG_PYTHON_H_

#include <Python.h>

#include "tensorplug/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "tensorplug.read_only_probe": asked per argument whether a tensor must not be written
 * (ExchangeTable.from_capsule(read_only=probe)). */
#define TP_READ_ONLY_PROBE_CAPSULE "tensorplug.read_only_probe"
typedef struct {
  int (*is_read_only)(PyObject* obj); /* 1: read-only, 0: writable; raises nothing */
} TPReadOnlyProbe;

/* "tensorplug.importer": C functions reading the adapter's tensors directly instead of
 * through __dlpack__ (ExchangeTable.from_python(importer=...)). `obj` is a PyObject*. */
#define TP_IMPORTER_CAPSULE "tensorplug.importer"
typedef struct {
  int (*managed)(void* obj, DLManagedTensorVersioned** out); /* owning import */
  int (*view)(void* obj, DLTensor* out);                     /* non-owning view */
} TPImporter;

/* "tensorplug.lazy_view_probe": asked per tensor whether its memory holds its values
 * (ExchangeTable.from_capsule(lazy_views=probe)). */
#define TP_LAZY_VIEW_PROBE_CAPSULE "tensorplug.lazy_view_probe"
/* How the core refuses such a tensor: this text, then the probe's `what`. */
#define TP_LAZY_VIEW_EXPECTED \
  "expected a tensor whose memory holds its values (DLPack has no conjugate or negative bit), got "
typedef struct {
  /* 0: it does; 1: it does not, *what says why and what to do (static storage); -1: a
   * Python error is set. */
  int (*is_lazy)(PyObject* obj, const char** what);
} TPLazyViewProbe;

/* "tensorplug.write_hook": told of each tensor a call will write
 * (ExchangeTable.from_capsule(write_hook=hook)). A hook with state embeds the struct as its
 * first member (`hook` is the struct itself). */
#define TP_WRITE_HOOK_CAPSULE "tensorplug.write_hook"
typedef struct TPWriteHook {
  /* 0: go on; -1: refuse the call, with a Python error set (the caller names the argument). */
  int (*will_write)(const struct TPWriteHook* hook, PyObject* obj);
} TPWriteHook;

/* "tensorplug.call_scratch" (tensorplug.call_scratch()): storage for an exchange
 * function's views that must outlive the function but not the call, such as element
 * strides converted from a framework's byte strides. `alloc` returns `count` int64 values
 * that live until the current tensorplug call returns (NULL past 4096 values); with the GIL. */
#define TP_CALL_SCRATCH_CAPSULE "tensorplug.call_scratch"
typedef struct {
  int64_t* (*alloc)(int32_t count);
} TPCallScratch;

/* The capsule of a call plan (tensorplug.plans.make); its pointer is a TPPlanHandle. */
#define TP_PLAN_CAPSULE "tensorplug.TPPlanHandle"

#ifdef __cplusplus
} /* extern "C" */

#include <new>
#include <stdexcept>
#include <type_traits>

namespace tensorplug::python {

/*!
 * \brief Whether a deleter may take the GIL and touch Python objects. After Py_Finalize
 * (C++ statics destroyed at exit, other threads still running) it may not: such a deleter
 * releases nothing Python owns (a leak at exit instead of a crash).
 */
inline bool PythonUsable() {
  if (!Py_IsInitialized()) return false;
#if PY_VERSION_HEX >= 0x030D0000
  if (Py_IsFinalizing()) return PyGILState_Check() != 0;
#else
  if (_Py_IsFinalizing()) return PyGILState_Check() != 0;
#endif
  return true;
}

/*! \brief Inside a catch block: the exception as a Python error (MemoryError, RuntimeError). */
inline void SetErrorFromCxxException() noexcept {
  // Called from C code (exchange tables, deleters' callers) too: only with the GIL.
  if (!PythonUsable() || !PyGILState_Check()) return;
  try {
    throw;
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_Format(PyExc_RuntimeError, "tensorplug internal error (C++ exception): %s", e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "tensorplug internal error: unknown C++ exception");
  }
}

namespace detail {
template <class R>
inline R GuardFailure() noexcept {
  if constexpr (std::is_pointer_v<R>) {
    return nullptr;
  } else if constexpr (std::is_same_v<R, bool>) {
    return false;
  } else if constexpr (!std::is_void_v<R>) {
    return R(-1);
  }
}
template <auto F>
struct GuardOf;
template <class R, class... A, R (*F)(A...)>
struct GuardOf<F> {
  static R Call(A... args) noexcept {
    try {
      return F(args...);
    } catch (...) {
      if constexpr (!std::is_void_v<R>) {
        SetErrorFromCxxException();
        return GuardFailure<R>();
      }
    }
  }
};
}  // namespace detail

/*!
 * \brief The exception barrier: F with F's own signature, catching every C++ exception (no
 * exception may cross into CPython or into C code calling an exchange table). A failure
 * returns nullptr, false or -1 with a Python error set; a void function reports nothing.
 */
template <auto F>
constexpr auto Guarded = &detail::GuardOf<F>::Call;
/*! \brief Guarded<F> as a type slot's void*. */
template <auto F>
inline void* GuardedSlot() { return reinterpret_cast<void*>(Guarded<F>); }
/*! \brief Guarded<F> as a PyMethodDef's PyCFunction. */
template <auto F>
inline PyCFunction GuardedMethod() {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Guarded<F>));
}

/*! \brief The plan of a call plan capsule (borrowed); nullptr with a TypeError naming `caller`. */
inline TPPlanHandle PlanOfCapsule(PyObject* obj, const char* caller) {
  if (!PyCapsule_IsValid(obj, TP_PLAN_CAPSULE)) {
    PyErr_Format(PyExc_TypeError, "%s(): expected a call plan (tensorplug.plans.make), got %s", caller,
                 Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  return static_cast<TPPlanHandle>(PyCapsule_GetPointer(obj, TP_PLAN_CAPSULE));
}

}  // namespace tensorplug::python

#endif /* __cplusplus */

#endif /* TENSORPLUG_PYTHON_H_ */
