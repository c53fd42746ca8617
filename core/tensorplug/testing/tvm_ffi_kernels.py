"""The conformance kit's kernels as a binary of apache tvm-ffi's ABI.

``kernels_tvm_ffi.cc`` writes the kit's kernels that tvm-ffi can express in tvm-ffi's own
source form; :func:`load` builds it with tvm-ffi's ``tvm_ffi.cpp.build_inline`` (with tvm-ffi's
metadata) and loads the binary, unchanged, through :func:`tensorplug.load_module`. The kit's
function checks then run on it: ``pytest --pyargs tensorplug.testing.conformance
--tensorplug-kernels=tvm-ffi`` (or a test module's own ``tensorplug_kernels`` fixture returning
``load(directory)``). A check that calls a kernel tvm-ffi cannot express skips, naming why
(:data:`LACKS`). Needs the ``apache-tvm-ffi`` package and a C++ compiler; imports no array
framework.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["LACKS", "SOURCE", "WRITES", "KernelLibrary", "build", "load"]

SOURCE = Path(__file__).with_name("kernels_tvm_ffi.cc")

# tvm-ffi does not record which tensors a function writes: declared here, as a user does.
WRITES = {"fill": [0], "list_fill": [0]}

# tvm-ffi's metadata names parameters arg0, arg1, ...; the list and int-array kernels are
# declared with the names kernels.cc gives them, as a user may, so that the kit's checks of
# messages naming the argument ("argument 1 'xs' item 1: ...") hold for both libraries.
SIGNATURES = {
    "list_describe": "xs:views->str", "list_sum": "xs:views->float", "list_add_one": "xs:views->list",
    "list_fill": "xs:views;value:float->void", "add_list": "xs:views;x:view->tensor",
    "list_alloc_last": "xs:views->tuple", "list_arange": "lengths:ints->list", "list_count": "xs:?views->int",
    "vector_count": "xs:?views->int", "echo_ints": "values:ints->ints", "join_ints": "values:?ints->str",
    "join_vector": "values:?ints->str",
}

# The kit's kernels the tvm-ffi library has not, and why.
LACKS = {
    "is_read_only": "tvm-ffi's TensorView has no read-only flag (a written parameter is refused read-only memory by "
                    "tensorplug before the call, which the kit checks through fill)",
    "stream_of": "tvm-ffi keeps no CPU stream: the bridge binds the caller's stream on CUDA-like devices only",
}


class KernelLibrary:
    """The kit's kernels from a library of another ABI: attribute access gives the loaded
    module's functions, and skips the check (naming the reason) for a kernel the library
    lacks. ``form`` names the library ("tvm-ffi"), ``module`` is the tensorplug Module."""

    read_only_flag = False  # describe()'s read-only field carries no information (checks.read_only_flag)

    def __init__(self, module, form: str, lacks: dict[str, str]):
        self.module = module
        self.form = form
        self.lacks = dict(lacks)

    def __getattr__(self, name: str):
        reason = self.lacks.get(name)
        if reason is not None:
            pytest.skip(f"the kit's {self.form} kernel library has no '{name}': {reason}")
        return getattr(self.module, name)

    def __repr__(self) -> str:
        return f"<the conformance kit's {self.form} kernels: {self.module!r}>"


def build(directory=None) -> str:
    """The path of the kit's tvm-ffi library, built by ``tvm_ffi.cpp.build_inline`` into
    ``directory`` (default: tvm-ffi's own build cache). ModuleNotFoundError saying what to
    install without apache-tvm-ffi."""
    try:
        import tvm_ffi.cpp
    except ModuleNotFoundError:
        raise ModuleNotFoundError('the conformance kit\'s tvm-ffi kernels need apache-tvm-ffi: '
                                  'pip install "tensorplug[tvm-ffi]"', name="tvm_ffi") from None
    return tvm_ffi.cpp.build_inline("tensorplug_conformance_tvm_ffi_kernels", cpp_sources=SOURCE.read_text(),
                                    extra_cflags=["-O1", "-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1"],
                                    build_directory=None if directory is None else str(directory))


def load(directory=None) -> KernelLibrary:
    """The kit's tvm-ffi library (see :func:`build`), loaded by tensorplug.load_module."""
    import tensorplug

    module = tensorplug.load_module(build(directory), signatures=SIGNATURES, writes=WRITES)
    return KernelLibrary(module, "tvm-ffi", LACKS)
