"""mykernels: a kernel library shipped as a wheel (the example of docs/shipping.md).

The wheel holds ``mykernels/libmykernels.so`` next to this file; tensorplug finds and
loads it, and its functions take tensors of every framework tensorplug has an adapter for.
"""

import tensorplug

_library = tensorplug.load_module_from_package(__name__, "libmykernels.so")

#: ``axpy(alpha, x, y)``: ``alpha * x + y`` as a new tensor of the caller's framework.
axpy = _library.axpy
#: ``built_for_abi()``: the tensorplug ABI the binary was compiled for.
built_for_abi = _library.built_for_abi

__all__ = ["axpy", "built_for_abi"]
