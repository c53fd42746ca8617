/*
 * <dlpack/dlpack.h> for sources written against apache tvm-ffi: forwards to tensorplug's
 * DLPack 1.3 declarations (DLDevice, DLDataType, DLTensor, DLManagedTensor(Versioned),
 * the flag bits and DLPackExchangeAPI), so both spellings name the same types.
 * Part of tensorplug's tvm-ffi compatibility layer (docs/migration.md).
 */
#ifndef TENSORPLUG_COMPAT_DLPACK_DLPACK_H_
#define TENSORPLUG_COMPAT_DLPACK_DLPACK_H_

#include "tensorplug/dlpack.h"

#endif  // TENSORPLUG_COMPAT_DLPACK_DLPACK_H_
