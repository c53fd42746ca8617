"""tensorplug ops in a C++ process without Python: the registration library.

A torch model exported with tensorplug ops and packaged by AOTInductor
(:mod:`tensorplug_adapters.torch.aoti`) calls each op through torch's dispatcher; in a C++
server that loads the package with ``torch::inductor::AOTIModelPackageLoader`` and never
starts Python, ``serving.cc`` registers them: it reads the package's tensorplug
record, loads the kernel libraries through tensorplug's C API (``libtensorplug.so``) and
registers each op's schema, overloads and CPU kernel (``serving.h`` declares its
entry points; docs/compilers.md shows a complete program).

It is compiled against the headers of the torch in hand and tensorplug's public C headers,
as the torch bridge is (:mod:`tensorplug_adapters.torch.bridge`): :func:`build` runs the
system C++ compiler once per torch version and commit (:func:`tensorplug.cpp.build`'s cache,
whose stamp is checked before the path is returned, so a truncated or replaced library is
built again). The deployment ships the file :func:`build` returns together with the
libraries :func:`aoti.native_libraries` lists.
"""

from __future__ import annotations

import os

from . import bridge

_HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(_HERE, "serving.cc")
#: The header a C++ program includes (``-I`` :func:`include_dir`).
HEADER = os.path.join(_HERE, "serving.h")
_LIBRARY = "tensorplug_torch_serving"


def include_dir() -> str:
    """The directory holding ``serving.h``."""
    return _HERE


def build(torch=None) -> str:
    """The path of the registration library for ``torch`` (the imported torch when None),
    compiled now unless :func:`tensorplug.cpp.build`'s cache holds it, checked against the
    digest its build recorded. Raises :class:`tensorplug.cpp.BuildError` when no C++
    compiler is found or the build fails."""
    from tensorplug import cpp

    if torch is None:
        import torch
    options = bridge.build_options(torch)
    return cpp.build(_LIBRARY, [SOURCE], include_dirs=[_HERE], **options)
