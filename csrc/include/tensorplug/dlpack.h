/*
 * tensorplug/dlpack.h -- DLPack 1.3 types, declared from the DLPack specification.
 *
 * DLPack is the common in-memory tensor description shared by array frameworks.
 * The include guard is the specification's own, so that a translation unit which also
 * includes a framework's copy of the header sees one definition (the layouts are
 * identical by specification).
 */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the DLPack ABI a producer speaks: consumers check `major` before use. */
typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

/* Where the data lives. Values are fixed by the specification. */
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3, /* pinned host memory */
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
  kDLMAIA = 17,
  kDLTrn = 18,
} DLDeviceType;

/* A device: its type and its ordinal within that type (0 for the CPU). */
typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

/* Type code of DLDataType.code. */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U, /* bits counts both parts: complex64 has bits == 64 */
  kDLBool = 6U,    /* bits == 8 */
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  kDLFloat6_e2m3fn = 15U,
  kDLFloat6_e3m2fn = 16U,
  kDLFloat4_e2m1fn = 17U,
} DLDataTypeCode;

/* Element type: code, bits per lane, lanes (1 for scalars, >1 for vector types). */
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/*
 * A plain tensor description; owns nothing.
 * - data: start of the allocation (add byte_offset to reach element 0).
 * - shape: ndim extents.
 * - strides: ndim strides in elements (not bytes). Since DLPack 1.2 this must not be
 *   NULL unless ndim == 0.
 */
typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;

/* Pre-1.0 owning tensor, still exchanged by older producers ("dltensor" capsules). */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

/* Bits of DLManagedTensorVersioned.flags. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

/*
 * Owning tensor ("dltensor_versioned" capsules). Whoever holds it calls `deleter`
 * exactly once (deleter may be NULL when nothing needs freeing).
 */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* ---- The C exchange API (DLPack 1.3): `type(x).__dlpack_c_exchange_api__` ---- */

/*
 * Allocate a new tensor like `prototype` (its shape, dtype, device; strides ignored
 * unless the producer honours them). On failure returns -1 and reports through
 * SetError(error_ctx, kind, message).
 */
typedef int (*DLPackManagedTensorAllocator)(
    DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
    void (*SetError)(void* error_ctx, const char* kind, const char* message));

/* Owning export of a Python tensor; no stream synchronisation. -1 with a Python error set. */
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void* py_object,
                                                      DLManagedTensorVersioned** out);

/*
 * Non-owning export into a caller-provided DLTensor (usually on the stack). Valid only
 * until control returns to the producer's framework. -1 with a Python error set.
 */
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void* py_object, DLTensor* out);

/* The framework's current work stream for a device (NULL for the CPU). */
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id,
                                       void** out_current_stream);

/* Wrap an owning tensor (ownership is taken) into the framework's Python tensor type. */
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned* tensor,
                                                   void** out_py_object);

/* Stable header: check version.major; walk prev_api for an older supported table. */
typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  struct DLPackExchangeAPIHeader* prev_api;
} DLPackExchangeAPIHeader;

/* The table; the PyCapsule holding it is named "dlpack_exchange_api". */
typedef struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  DLPackManagedTensorAllocator managed_tensor_allocator;
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
  DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;

#ifdef __cplusplus
}
#endif

#endif /* DLPACK_DLPACK_H_ */
