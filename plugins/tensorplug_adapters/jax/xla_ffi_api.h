// The part of the XLA FFI C API that tensorplug's XLA handler uses, declared from the XLA FFI
// C API specification (xla/ffi/api/c_api.h, API version 0.1 and later) the way
// tensorplug/dlpack.h declares DLPack: the build needs no jax (docs/decisions.md, "XLA FFI
// types"). Every struct XLA passes starts with its size, so a newer XLA with more fields
// stays compatible; the handler checks each size before reading past the fields declared
// here. tests/test_op_jax.py compiles this header next to jax's own and compares layouts.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tensorplug::xla_ffi {

// The API version the handler reports in the metadata extension (the fields below exist
// since 0.1; XLA accepts handlers built for any supported older minor version).
constexpr int kApiMajor = 0;
constexpr int kApiMinor = 1;

struct Api;
struct Error;             // opaque; owned by whoever receives it
struct ExecutionContext;  // opaque; per call

// Extension chain node: a call frame may carry extensions instead of a call.
enum ExtensionType : int32_t { kExtensionMetadata = 1 };
struct ExtensionBase {
  size_t struct_size;
  ExtensionType type;
  ExtensionBase* next;
};

struct ApiVersion {
  size_t struct_size;
  ExtensionBase* extension_start;
  int major_version;
  int minor_version;
};

// absl status codes.
enum ErrorCode : int32_t {
  kErrorOk = 0,
  kErrorUnknown = 2,
  kErrorInvalidArgument = 3,
  kErrorNotFound = 5,
  kErrorResourceExhausted = 8,
  kErrorFailedPrecondition = 9,
  kErrorUnimplemented = 12,
  kErrorInternal = 13,
};

struct ErrorCreateArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  const char* message;  // copied by XLA
  ErrorCode errc;
};

// xla::PrimitiveType values of the element types tensorplug maps to DLPack.
enum DataType : int32_t {
  kInvalid = 0,
  kPred = 1,
  kS8 = 2,
  kS16 = 3,
  kS32 = 4,
  kS64 = 5,
  kU8 = 6,
  kU16 = 7,
  kU32 = 8,
  kU64 = 9,
  kF16 = 10,
  kF32 = 11,
  kF64 = 12,
  kC64 = 15,
  kBF16 = 16,
  kC128 = 18,
};

// A dense row-major device buffer (arguments and results).
struct Buffer {
  size_t struct_size;
  ExtensionBase* extension_start;
  DataType dtype;
  void* data;
  int64_t rank;
  int64_t* dims;  // rank values
};

enum AttrType : int32_t { kAttrArray = 1, kAttrDictionary = 2, kAttrScalar = 3, kAttrString = 4 };

struct ByteSpan {  // not NUL-terminated
  const char* ptr;
  size_t len;
};

struct Scalar {
  DataType dtype;
  void* value;
};

struct Array {  // a dense array attribute (an i64 array for an "ints" parameter)
  DataType dtype;
  size_t size;
  void* data;
};

enum ExecutionStage : int32_t { kInstantiate = 0, kPrepare = 1, kInitialize = 2, kExecute = 3 };

struct Args {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  int32_t* types;  // ArgType per argument; 1 = buffer
  void** args;     // Buffer* per argument
};

struct Rets {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  int32_t* types;  // RetType per result; 1 = buffer
  void** rets;     // Buffer* per result
};

// Attributes arrive sorted by name.
struct Attrs {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  AttrType* types;
  ByteSpan** names;
  void** attrs;  // Scalar* / ByteSpan* (string) / ... per attribute
};

struct CallFrame {
  size_t struct_size;
  ExtensionBase* extension_start;  // a metadata query when it is kExtensionMetadata
  const Api* api;
  ExecutionContext* ctx;
  ExecutionStage stage;
  Args args;
  Rets rets;
  Attrs attrs;
};

using Handler = Error*(CallFrame* call_frame);

// Handler traits reported in the metadata (none: not capturable into command buffers).
struct Metadata {
  size_t struct_size;
  ApiVersion api_version;
  uint32_t traits;
};

struct MetadataExtension {
  ExtensionBase extension_base;
  Metadata* metadata;
};

struct StreamGetArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  void* stream;  // out: the platform stream (cudaStream_t on CUDA)
};

struct DeviceOrdinalGetArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  ExecutionContext* ctx;
  int32_t device_ordinal;  // out
};

using ErrorCreateFn = Error*(ErrorCreateArgs*);
using StreamGetFn = Error*(StreamGetArgs*);
using DeviceOrdinalGetFn = Error*(DeviceOrdinalGetArgs*);
using AnyFn = void*;  // entries the handler never calls

// The function table XLA passes in every call frame (in this order; later entries exist
// only when struct_size covers them).
struct Api {
  size_t struct_size;
  ExtensionBase* extension_start;
  ApiVersion api_version;
  const void* internal_api;
  ErrorCreateFn* error_create;
  AnyFn error_get_message;
  AnyFn error_destroy;
  AnyFn handler_register;
  StreamGetFn* stream_get;
  AnyFn type_register;
  AnyFn execution_context_get;
  AnyFn state_set;
  AnyFn state_get;
  AnyFn device_memory_allocate;
  AnyFn device_memory_free;
  AnyFn thread_pool_schedule;
  AnyFn thread_pool_num_threads;
  AnyFn future_create;
  AnyFn future_set_available;
  AnyFn future_set_error;
  AnyFn run_id_get;
  DeviceOrdinalGetFn* device_ordinal_get;
};

// The end of a struct's last declared field: a struct_size at least this large has it.
#define TP_XLA_FFI_END(type, field) (offsetof(type, field) + sizeof(((type*)nullptr)->field))

}  // namespace tensorplug::xla_ffi
