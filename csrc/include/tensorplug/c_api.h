/*
 * tensorplug/c_api.h -- the stable C ABI of tensorplug.
 *
 * Pure C (C11 or C++). A kernel library written against this header alone can be
 * loaded by tensorplug and called from every Python array framework. libtensorplug
 * implements it with no Python dependency.
 *
 * Conventions
 * - Functions that can fail return 0 on success and -1 on failure, with the error
 *   recorded for the calling thread (TPErrorSet / TPErrorGet).
 * - Exported kernel functions use the packed signature TPPackedFunc and are exported
 *   from their shared library as `__tensorplug_<name>`. A library may also export the
 *   function `const char* __tensorplugsig_<name>(void)` returning the signature string
 *   (see "Signatures").
 */
#ifndef TENSORPLUG_C_API_H_
#define TENSORPLUG_C_API_H_

#include <stddef.h>
#include <stdint.h>

#include "tensorplug/dlpack.h"

/*
 * Bumped on any incompatible change of this header. Every library compiled with this
 * header records the value in its symbol __tensorplugabi_version (see "ABI record" below),
 * and TPModuleLoad refuses a library recorded for another ABI before running any of its code.
 */
#define TENSORPLUG_ABI_VERSION 1

#if defined(_WIN32)
#define TP_EXPORT __declspec(dllexport)
#else
#define TP_EXPORT __attribute__((visibility("default")))
#endif

#ifdef TENSORPLUG_RUNTIME_BUILD
#define TP_API TP_EXPORT
#else
#define TP_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The ABI version libtensorplug was built with (TENSORPLUG_ABI_VERSION). */
TP_API int32_t TPGetABIVersion(void);

/*
 * ABI record. Every translation unit that includes this header defines the exported,
 * read-only int32 `__tensorplugabi_version` = TENSORPLUG_ABI_VERSION as a weak symbol: a
 * library of many translation units (C, C++ or both) ends up with exactly one, and a library
 * compiled with -fvisibility=hidden still exports it. TPModuleLoad reads it from the file
 * before dlopen. A library without it (written without this header) is taken to be built
 * for ABI 1, the ABI that predates the record. The name has no `__tensorplug_` prefix, so
 * no kernel name can collide with it. libtensorplug itself does not define it.
 */
#if !defined(TENSORPLUG_RUNTIME_BUILD) && !defined(_WIN32)
#ifdef __cplusplus /* a C++ namespace-scope const has internal linkage unless declared extern */
extern
#endif
    __attribute__((weak)) TP_EXPORT const int32_t __tensorplugabi_version = TENSORPLUG_ABI_VERSION;
#endif

/* ------------------------------------------------------------------ values ---- */

/* Kind of value a TPAny holds. */
typedef enum {
  kTPNone = 0,
  kTPInt = 1,       /* v_int64 */
  kTPFloat = 2,     /* v_float64 */
  kTPBool = 3,      /* v_int64 (0 or 1) */
  kTPDevice = 4,    /* v_device */
  kTPDataType = 5,  /* v_dtype */
  kTPOpaquePtr = 6, /* v_ptr, never owned */
  kTPRawStr = 7,    /* v_c_str: borrowed NUL-terminated UTF-8 (arguments only) */
  kTPDLTensorPtr = 8, /* v_dltensor: borrowed view, valid for the call (arguments only) */
  kTPTensor = 9,    /* v_tensor: an owning DLManagedTensorVersioned* */
  kTPStr = 10,      /* v_str: an owned TPString* */
  kTPTuple = 11,    /* v_tuple: an owned TPTuple* */
  kTPFunction = 12, /* v_func: one reference to a function */
  kTPArray = 13,    /* v_array: a borrowed TPArray*, valid for the call (arguments only) */
  kTPIntArray = 14, /* v_int_array: a borrowed TPIntArray*, valid for the call (arguments only) */
  kTPHandle = 15,   /* v_handle: one reference to an opaque handle (see "Handles") */
} TPTypeIndex;

/*
 * The most dimensions a tensor may have anywhere in tensorplug (numpy's limit too).
 * Tensors entering from Python, results leaving a kernel and allocation requests with
 * more are refused with an error, never truncated (docs/calling.md, "Limits").
 */
#define TP_MAX_NDIM 64

/* TPAny.flags bits. */
#define TP_ANY_FLAG_READ_ONLY 1u /* kTPDLTensorPtr: the view must not be written */
/* kTPDLTensorPtr: the producer vouches that the view is compact row-major (its strides, or
 * NULL strides, describe the dense layout), so consumers may skip checks that follow from
 * it (a compact view cannot overlap itself). Set only where the producer made or knows the
 * layout; a view without it is checked. */
#define TP_ANY_FLAG_COMPACT 2u

typedef struct TPFunctionObj* TPFunctionHandle;
typedef struct TPString TPString;
typedef struct TPTuple TPTuple;
typedef struct TPArray TPArray;
typedef struct TPIntArray TPIntArray;
typedef struct TPHandleObj* TPHandleRef;

/*
 * The 16-byte tagged value of the calling convention.
 *
 * Ownership: a TPAny *owns* kTPTensor, kTPStr, kTPTuple, kTPFunction and kTPHandle payloads.
 * - Arguments are lent to the callee for the duration of the call, except kTPTensor
 *   arguments, which are moved: the callee takes ownership and eventually calls the
 *   tensor's deleter (also when it fails).
 * - A result is owned by the caller, who releases it with TPAnyRelease.
 */
typedef struct {
  int32_t type_index; /* a TPTypeIndex */
  uint32_t flags;     /* TP_ANY_FLAG_* */
  union {
    int64_t v_int64;
    double v_float64;
    void* v_ptr;
    const char* v_c_str;
    DLDevice v_device;
    DLDataType v_dtype;
    DLTensor* v_dltensor;
    DLManagedTensorVersioned* v_tensor;
    TPString* v_str;
    TPTuple* v_tuple;
    TPFunctionHandle v_func;
    const TPArray* v_array;
    const TPIntArray* v_int_array;
    TPHandleRef v_handle;
  };
} TPAny;

/*
 * A borrowed list of values, lent for the call: a "views" argument (a list of tensors) has
 * kTPDLTensorPtr items (TP_ANY_FLAG_READ_ONLY per item). The caller owns the items.
 */
struct TPArray {
  int64_t size;
  const TPAny* items;
};

/* A borrowed array of int64 (an "ints" argument: a shape, strides, indices), lent for the call. */
struct TPIntArray {
  int64_t size;
  const int64_t* data;
};

/* An immutable UTF-8 string (data is NUL-terminated; size excludes the NUL). */
struct TPString {
  size_t size;
  const char* data;
};

/* A fixed-size sequence of owned values. */
struct TPTuple {
  int32_t size;
  TPAny* items;
};

/* Release whatever `value` owns and reset it to kTPNone. */
TP_API void TPAnyRelease(TPAny* value);
/* A new string holding a copy of data[0:size]; NULL when out of memory. */
TP_API TPString* TPStringCreate(const char* data, size_t size);
/* A new tuple of `size` kTPNone items; NULL when out of memory. */
TP_API TPTuple* TPTupleCreate(int32_t size);

/* ---------------------------------------------------------------- errors ---- */

/*
 * The error kinds every layer maps (X-macro: X(Name)): the C++ Error kinds, the Python
 * exceptions of the same names, the kinds the conformance kit checks end to end. Any other
 * kind reaches Python as RuntimeError("<kind>: <message>").
 */
#define TP_ERROR_KINDS(X) \
  X(ValueError)           \
  X(TypeError)            \
  X(IndexError)           \
  X(KeyError)             \
  X(AttributeError)       \
  X(NotImplementedError)  \
  X(MemoryError)          \
  X(OverflowError)        \
  X(ZeroDivisionError)    \
  X(RuntimeError)         \
  X(FileNotFoundError)    \
  X(BufferError)          \
  X(AssertionError)

/*
 * Record an error for the calling thread. `kind` names the error class; the Python
 * binding maps each kind of TP_ERROR_KINDS to the Python exception of that name; any
 * other kind becomes RuntimeError with the kind and message kept. Both strings are copied.
 */
TP_API void TPErrorSet(const char* kind, const char* message);
/*
 * Read the calling thread's error: returns 1 and points *kind / *message at it when one
 * is recorded (the pointers stay valid until the next TPErrorSet / TPErrorClear on this
 * thread), else returns 0.
 */
TP_API int TPErrorGet(const char** kind, const char** message);
TP_API void TPErrorClear(void);

/* -------------------------------------------------------------- functions ---- */

/*
 * The packed calling convention. `self` is the function's closure (NULL for exported
 * `__tensorplug_<name>` symbols). Returns 0 and fills *result (kTPNone for void), or -1
 * with an error recorded.
 */
typedef int (*TPPackedFunc)(void* self, const TPAny* args, int32_t nargs, TPAny* result);

/*
 * Signatures. A signature string describes the parameters and result of a packed
 * function so that callers can check arguments before the call:
 *     "name:kind;name:kind->result"      e.g. "x:view;y:view;alpha:float->tensor"
 * Parameter kinds: view (DLTensor*, passed as kTPDLTensorPtr; the callee reads it), mview
 * (the same, for a tensor the callee writes: callers refuse a read-only tensor for it, and
 * never set TP_ANY_FLAG_READ_ONLY on it), tensor (owning, passed as kTPTensor), int,
 * float, bool, str, device, dtype, func, any, views (a list of tensors, passed as a kTPArray
 * of kTPDLTensorPtr), mviews (the same, for tensors the callee writes), ints (an int64
 * array, passed as a kTPIntArray), handle (an untyped opaque handle, passed as a
 * kTPOpaquePtr: the pointer of any handle) and handle<T> (a handle of type name T, passed
 * as a kTPHandle; T is made of letters, digits, '_', '.' and ':'); a leading '?' marks an
 * optional value that also accepts None. Result kinds: void, int, float, bool, str,
 * device, dtype, tensor, tuple, func, any, list (a kTPTuple of tensors the caller shows as
 * a list), ints (a kTPTuple of kTPInt, shown as a list), handle (a kTPOpaquePtr: a
 * non-owning handle) and handle<T> (a kTPHandle). A function without a signature accepts any
 * arguments (tensors are passed as views).
 * A parameter may carry a default after '=': "alpha:float=1.0", "n:int=3", "flag:bool=True",
 * "mode:str='fast'", "bias:?view=None" (the literal forms: an int, a float, True/False, a
 * single-quoted string without quotes inside, None for an optional kind). Parameters with
 * defaults come last. The Python binding fills omitted arguments from them; a C caller
 * (TPFunctionCall) passes every argument.
 */

/* Make a function from a closure; `deleter(self)` runs when the last reference goes. */
TP_API int TPFunctionCreate(void* self, TPPackedFunc call, void (*deleter)(void* self),
                            const char* signature, TPFunctionHandle* out);
TP_API void TPFunctionRetain(TPFunctionHandle func);
TP_API void TPFunctionRelease(TPFunctionHandle func);
TP_API int TPFunctionCall(TPFunctionHandle func, const TPAny* args, int32_t nargs,
                          TPAny* result);
/* The signature string, or NULL when the function has none. */
TP_API const char* TPFunctionGetSignature(TPFunctionHandle func);
/* The raw entry point and closure, for callers that call in a loop. */
TP_API TPPackedFunc TPFunctionGetEntry(TPFunctionHandle func, void** self);

/* ----------------------------------------------------------------- handles ---- */

/*
 * Handles: an opaque pointer to state a library keeps (a plan, a workspace, a communicator)
 * with an optional type name and deleter, shared by reference count. A kTPHandle TPAny owns
 * one reference; as an argument it is lent for the call (the callee retains it to keep it).
 * The deleter runs once, when the last reference goes, on the thread that drops it; it must
 * not need the Python interpreter. Python shows a handle as a tensorplug.Handle. A kernel
 * that returns a bare pointer returns a kTPOpaquePtr instead: a non-owning handle, valid as
 * long as the library that made it says (static state: for the process).
 */
/* Destroys a handle's object: deleter(ptr, ctx). */
typedef void (*TPHandleDeleter)(void* ptr, void* ctx);
/*
 * A new handle (one reference) for `ptr`. `type_name` (NULL: untyped) is copied; it names
 * the type in signatures and messages ("mylib.Plan"), is made of letters, digits, '_', '.'
 * and ':', and says which handle<T> parameters take the handle. `deleter` (NULL: none, the
 * handle does not own ptr) runs as deleter(ptr, ctx) when the last reference goes. Fails
 * with ValueError for a malformed type name (the deleter is not called) and MemoryError.
 */
TP_API int TPHandleCreate(void* ptr, const char* type_name, TPHandleDeleter deleter, void* ctx,
                          TPHandleRef* out);
TP_API void TPHandleRetain(TPHandleRef handle);
/* Drop one reference; the last one runs the deleter. */
TP_API void TPHandleRelease(TPHandleRef handle);
/* The pointer (valid while a reference is held, for an owning handle). */
TP_API void* TPHandleGetPointer(TPHandleRef handle);
/* The type name, or NULL for an untyped handle; valid while a reference is held. */
TP_API const char* TPHandleGetTypeName(TPHandleRef handle);
/* 1 when the handle has a deleter (owns its pointer), else 0. */
TP_API int TPHandleIsOwning(TPHandleRef handle);

/* --------------------------------------------------------- global registry ---- */

/* Register `func` under `name` (a new reference is kept). Fails if the name is taken
 * and allow_override is 0. */
TP_API int TPGlobalFuncRegister(const char* name, TPFunctionHandle func, int allow_override);
/* Look `name` up: *out is a new reference, or NULL when nothing is registered. */
TP_API int TPGlobalFuncGet(const char* name, TPFunctionHandle* out);
/* Remove `name`; returns 0 whether or not it was registered. */
TP_API int TPGlobalFuncRemove(const char* name);
/* Call visit(ctx, name) for every registered name, in sorted order. */
TP_API int TPGlobalFuncListNames(void (*visit)(void* ctx, const char* name), void* ctx);

/* --------------------------------------------------------------------- env ---- */

/*
 * Current stream of a device for the calling thread (NULL: the device's default
 * stream). During a call from Python, tensorplug sets it to the calling framework's
 * current stream.
 */
TP_API void* TPEnvGetStream(int32_t device_type, int32_t device_id);
/* Set the calling thread's current stream of a device; returns the previous one. */
TP_API void* TPEnvSetStream(int32_t device_type, int32_t device_id, void* stream);

/*
 * The allocator bound for the calling thread (NULL: the default CPU allocator).
 * During a call from Python it is the calling framework's allocator.
 */
TP_API DLPackManagedTensorAllocator TPEnvGetAllocator(void);
/* Bind an allocator for the calling thread; returns the previous one. */
TP_API DLPackManagedTensorAllocator TPEnvSetAllocator(DLPackManagedTensorAllocator alloc);
/*
 * The calling thread's allocator binding itself: the slot TPEnvGetAllocator reads and
 * TPEnvSetAllocator writes. For a binding layer that sets and restores the allocator around
 * every call: it looks the slot up once per thread, then reads and writes it directly.
 * Valid while the calling thread lives, for that thread only.
 */
TP_API DLPackManagedTensorAllocator* TPEnvAllocatorSlot(void);
/*
 * Allocate a tensor shaped like `prototype` through the bound allocator (or the default
 * CPU allocator, which serves kDLCPU only). On success the tensor has the prototype's
 * dtype, device and shape, and is row-major compact when the prototype has no strides
 * (NULL strides count as compact; strides of extent-1 dimensions and of empty tensors are
 * free): an allocator that returns anything else has its tensor released and the call
 * fails with a "RuntimeError" naming both. With strides, the result's strides are the
 * allocator's. On failure returns -1 with an error recorded (kind "MemoryError" when
 * memory ran out, or for a request of more than 2^63 - 1 bytes, refused before any
 * allocator sees it).
 */
TP_API int TPEnvAllocTensor(DLTensor* prototype, DLManagedTensorVersioned** out);
/*
 * Lent tensors: results fixed before a kernel runs (XLA's result buffers inside jax.jit),
 * handed to its TPEnvAllocTensor requests in order instead of allocating. Each tensor's
 * deleter is TPLentTensorDeleter (it frees nothing), its strides are filled, and its
 * manager_ctx points to TENSORPLUG_LENT_SCRATCH_BYTES bytes (aligned for pointers) that
 * the consumer may use while it holds the tensor: tensorplug's Tensor keeps its reference
 * count there instead of allocating one. The lender keeps the managed tensors and their
 * scratch bytes allocated for the life of the process (reusing them for later calls), so
 * a reference kept past the call is safe to drop, though its data is gone.
 */
typedef struct TPLentTensors {
  DLManagedTensorVersioned* tensors; /* `count` of them */
  int32_t count;
  int32_t next; /* the one the next request gets */
  /* Called for a request that does not match tensors[next] (dtype, device, shape, and no
   * strides or row-major compact ones), or past the last one: records the error
   * (TPErrorSet), returns -1. */
  int (*refuse)(struct TPLentTensors* self, const DLTensor* request);
  /* What was bound before: set by TPEnvLend, restored by TPEnvUnlend. */
  DLPackManagedTensorAllocator previous_allocator;
  struct TPLentTensors* previous;
} TPLentTensors;
TP_API void TPLentTensorDeleter(DLManagedTensorVersioned* self);
#define TENSORPLUG_LENT_SCRATCH_BYTES 32
/*
 * Serve the calling thread's TPEnvAllocTensor requests from `lent` until TPEnvUnlend(lent):
 * binds `lent` and TPLentAllocator as the thread's allocator, keeping what was bound
 * before in lent->previous_allocator and lent->previous. Code that binds an allocator
 * meanwhile (a framework call inside the kernel) and restores it keeps this working.
 */
TP_API void TPEnvLend(TPLentTensors* lent);
/* Restore what TPEnvLend(lent) replaced. Lends nest: unlend in reverse order. `lent` is
 * never NULL for either (they sit on the handler's path: no check). */
TP_API void TPEnvUnlend(TPLentTensors* lent);
/*
 * The allocator bound while tensors are lent (TPEnvLend): it hands out the next lent
 * tensor. TPEnvAllocTensor does so directly when it is bound, without the checks a
 * framework's allocator needs (the match with the lent tensor is the check).
 */
TP_API int TPLentAllocator(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                           void (*set_error)(void* error_ctx, const char* kind, const char* message));

/*
 * Provider storage: process-wide key -> value storage that kernel providers share (a
 * handle, a cache, a compiled kernel). A value is a tensor, a function, a string, an int,
 * a float, a bool, a device, a dtype, a handle (kTPHandle: the storage keeps a reference),
 * or an opaque pointer with an optional deleter. It
 * is destroyed when replaced, when erased, and at process exit (before the static
 * destructors of every library loaded before it was stored). All calls are thread-safe.
 * Prefix keys with your library's name ("mylib.handle").
 */
/* Destroys an opaque pointer value. */
typedef void (*TPStorageDeleter)(void* ptr);
/*
 * Store `value` under `key`, replacing (and destroying) any value stored before. The value
 * is moved in: what it owns (kTPTensor, kTPStr, kTPFunction, kTPHandle) belongs to the storage on
 * success and is released on failure, and *value is reset to kTPNone either way. A
 * kTPRawStr is copied. `deleter` (NULL: none) is allowed with kTPOpaquePtr only. Fails
 * (TypeError) for kTPNone, kTPTuple and kTPDLTensorPtr values.
 */
TP_API int TPEnvStorageSetValue(const char* key, TPAny* value, TPStorageDeleter deleter);
/*
 * Read the value under `key` into *out, which the caller owns and releases with
 * TPAnyRelease: a function or handle is a new reference, a string a new copy, a tensor a new managed
 * tensor sharing the stored one's memory (it stays valid after an erase). An opaque
 * pointer is borrowed: it stays owned by the storage. *out is kTPNone when nothing is
 * stored. `deleter` may be NULL; else it receives an opaque pointer's deleter (or NULL).
 */
TP_API int TPEnvStorageGetValue(const char* key, TPAny* out, TPStorageDeleter* deleter);
/*
 * Makes a value for TPEnvStorageGetOrCreate: fills *value (moved into the storage, as for
 * TPEnvStorageSetValue) and, for an opaque pointer, *deleter; returns 0, or -1 with an
 * error recorded.
 */
typedef int (*TPStorageCreate)(void* ctx, TPAny* value, TPStorageDeleter* deleter);
/*
 * Atomic get-or-create: *out receives the value under `key` (as TPEnvStorageGetValue
 * gives it); when there is none, create(ctx, ...) makes it first. However many threads
 * race, create runs once per key while it succeeds: the others wait for it (create runs
 * without the storage locked, so it may use other keys; asking for its own key fails with
 * RuntimeError). When create fails its error is returned and a waiting thread tries again.
 */
TP_API int TPEnvStorageGetOrCreate(const char* key, TPStorageCreate create, void* ctx, TPAny* out);
/* 1 when a value is stored under `key`, else 0. */
TP_API int TPEnvStorageContains(const char* key);
/* Call visit(ctx, key) for every key, in sorted order (visit may use the storage). */
TP_API int TPEnvStorageListKeys(void (*visit)(void* ctx, const char* key), void* ctx);
/* Remove and destroy the value under `key`; returns 0 whether or not it existed. */
TP_API int TPEnvStorageErase(const char* key);
/*
 * The opaque-pointer form of the same storage: TPEnvStorageSet(k, p, d) stores the
 * kTPOpaquePtr p with deleter d (NULL: none); TPEnvStorageGet returns the pointer stored
 * under `key`, or NULL when there is none or the value is not an opaque pointer.
 */
TP_API int TPEnvStorageSet(const char* key, void* value, void (*deleter)(void* value));
TP_API void* TPEnvStorageGet(const char* key);
/*
 * Workspace: *out points at a buffer of at least `nbytes` bytes on the device whose first
 * `nbytes` bytes are zero (kDLCPU: zeroed before returning; kDLCUDA: zeroed by a memset
 * queued on the thread's current stream of the device). The buffer is reused while
 * requests fit and replaced by a bigger one when one does not; it stays valid until the
 * next request of the same workspace. CPU workspaces are per thread, CUDA ones per device
 * and stream. The storage owns it. Fails with MemoryError when memory runs out,
 * RuntimeError "no CUDA device" without a CUDA driver or device, ValueError for other
 * device types.
 */
TP_API int TPEnvWorkspace(int32_t device_type, int32_t device_id, size_t nbytes, void** out);

/* ----------------------------------------------------------------- modules ---- */

typedef struct TPModuleObj* TPModuleHandle;

/*
 * Load a kernel library. Fails when the path does not exist, is not a loadable shared
 * library, records another ABI than TENSORPLUG_ABI_VERSION (checked before dlopen, so none
 * of its code runs; see "ABI record"), or exports no `__tensorplug_` function. Libraries
 * stay mapped for the life of the process once loaded (tensors they made may outlive the
 * module object).
 */
TP_API int TPModuleLoad(const char* path, TPModuleHandle* out);

/* TPModuleLoadEx flags. */
#define TP_MODULE_LOAD_RUNTIME 1u /* a runtime library: exporting no function is fine */
#define TP_MODULE_LOAD_GLOBAL 2u  /* dlopen RTLD_GLOBAL: its symbols resolve references of
                                     libraries loaded later (a library loaded before without
                                     it is promoted) */
/*
 * TPModuleLoad with flags (TPModuleLoad(p, o) is TPModuleLoadEx(p, 0, o)). A runtime
 * library registers global functions and state at static initialization (a DSL's
 * runtime, say) and may export no `__tensorplug_` function; the same checks apply
 * otherwise (ABI record included). Static initializers run once per process, however
 * often the library is loaded.
 */
TP_API int TPModuleLoadEx(const char* path, uint32_t flags, TPModuleHandle* out);
/*
 * Embedded modules. A library may export the read-only data symbol
 * `__tensorplug__library_bin`: a blob (magic "TPLIBBIN", layout in docs/cpp.md) of modules
 * by kind and their import tree. TPModuleLoadEx reads it after dlopen and loads each module
 * with the global function `load_from_bytes.<kind>(data, size, host_path)`, which a runtime
 * registers and which returns a lookup function (lookup(name) -> function or None,
 * lookup() -> tuple of names). libtensorplug registers the kinds `shared_library` (a
 * kernel library loaded from memory, the first of its per-ISA variants this CPU runs, or
 * the one the environment variable TENSORPLUG_CPU_VARIANT names) and `ptx` (CUDA kernels).
 * TPModuleGetFunction and TPModuleListFunctions then see the functions of every module.
 */
TP_API void TPModuleRelease(TPModuleHandle module);
/* The exported function `name` (its signature attached); *out NULL when missing. */
TP_API int TPModuleGetFunction(TPModuleHandle module, const char* name, TPFunctionHandle* out);
/* Call visit(ctx, name) for every exported function name, in sorted order. */
TP_API int TPModuleListFunctions(TPModuleHandle module,
                                 void (*visit)(void* ctx, const char* name), void* ctx);

#ifdef __cplusplus
}
#endif

#endif /* TENSORPLUG_C_API_H_ */
