"""Make the embedded library binary ``__tensorplug__library_bin`` of a host library
(layout: docs/cpp.md, "Embedded modules").

A host library links one more source, an assembly file that defines the symbol with the
blob's bytes (``.incbin``)::

    blob = library_bin.pack([("shared_library", library_bin.shared_library_payload(
        {"avx512f": "k_avx512.so", "avx2+fma": "k_avx2.so", "generic": "k_generic.so"}))])
    source = library_bin.write_assembly(blob, "build/")   # build/library_bin.S
    cpp.build("host", ["host.cc", source])

From the shell: ``python -m tensorplug.library_bin -o build/ --shared-library
avx2=k_avx2.so --shared-library generic=k.so --ptx kernels.ptx --cubin kernels.cubin``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import struct
from pathlib import Path

MAGIC = b"TPLIBBIN"
FORMAT_VERSION = 1
SYMBOL = "__tensorplug__library_bin"
HOST_KIND = "_lib"


def pack(modules, imports=None) -> bytes:
    """The blob embedding ``modules``, a sequence of ``(kind, payload bytes)``: module 0 is
    the host library itself, these are modules 1, 2, ...

    ``imports`` is the import tree as ``(parent, child)`` index pairs (0: the host); by
    default the host imports every module, in order. The host finds a function in its own
    exports first, then in its imports depth-first in import order. Raises ValueError for
    a kind that is empty or ``"_lib"`` and for pairs that do not form a tree rooted at 0."""
    modules = [(HOST_KIND, b""), *((str(kind), bytes(payload)) for kind, payload in modules)]
    for kind, _ in modules[1:]:
        if not kind or kind == HOST_KIND:
            raise ValueError(f"pack(): a module kind must be a non-empty name other than {HOST_KIND!r}, got {kind!r}")
    count = len(modules)
    if imports is None:
        imports = [(0, i) for i in range(1, count)]
    children: list[list[int]] = [[] for _ in range(count)]
    parent_of: dict[int, int] = {}
    for parent, child in imports:
        if not (0 <= parent < count and 0 < child < count) or child in parent_of:
            raise ValueError(f"pack() argument 'imports': ({parent}, {child}) does not fit a tree of {count} modules "
                             "rooted at the host (0)")
        parent_of[child] = parent
        children[parent].append(child)
    for child in range(1, count):
        seen, node = set(), child
        while node != 0:
            if node not in parent_of or node in seen:
                raise ValueError(f"pack() argument 'imports': module {child} is not reachable from the host (0)")
            seen.add(node)
            node = parent_of[node]
    body = bytearray()
    for kind, payload in modules:
        name = kind.encode()
        body += struct.pack("<I", len(name)) + name + struct.pack("<Q", len(payload)) + payload
    for kids in children:
        body += struct.pack(f"<I{len(kids)}I", len(kids), *kids)
    header_size = 8 + 4 + 4 + 8
    return MAGIC + struct.pack("<IIQ", FORMAT_VERSION, count, header_size + len(body)) + bytes(body)


def shared_library_payload(variants) -> bytes:
    """The payload of a ``shared_library`` module: ``variants`` maps an ISA name to the
    path of a kernel library built for it, most specific first; the loader takes the first
    one this CPU runs (``TENSORPLUG_CPU_VARIANT=<name>`` forces one). A name is
    ``"generic"`` or CPU features joined by ``+`` (``"avx512f+avx512bw"``, ``"avx2+fma"``)."""
    items = list(dict(variants).items())
    if not items:
        raise ValueError("shared_library_payload(): expected at least one variant")
    out = bytearray(struct.pack("<I", len(items)))
    for isa, path in items:
        name = str(isa).encode()
        data = Path(path).read_bytes()
        out += struct.pack("<I", len(name)) + name + struct.pack("<Q", len(data)) + data
    return bytes(out)


def ptx_payload(text: str) -> bytes:
    """The payload of a ``ptx`` module: the PTX text (its ``.entry`` kernels are the
    module's functions)."""
    return text.encode() + b"\0"


def cubin_payload(image: bytes) -> bytes:
    """The payload of a ``cubin`` module: a CUDA ELF image (``nvcc -cubin``); its kernels
    (``__global__`` functions) are the module's functions."""
    image = bytes(image)
    if not image.startswith(b"\x7fELF"):
        raise ValueError(f"cubin_payload() argument 'image': expected a CUDA ELF image (nvcc -cubin), got "
                         f"{len(image)} bytes starting {image[:4]!r}")
    return image


def write_assembly(blob: bytes, directory, name: str = "library_bin") -> Path:
    """Write ``<name>.bin`` (the blob) and ``<name>.S`` (defining the exported symbol
    with ``.incbin``) into ``directory``; returns the ``.S`` path, a source to compile
    into the host library (GCC and Clang; CMake: ``enable_language(ASM)``)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    binary = (directory / f"{name}.bin").resolve()
    binary.write_bytes(blob)
    quoted = str(binary).replace("\\", "\\\\").replace('"', '\\"')
    source = directory / f"{name}.S"
    digest = hashlib.sha256(blob).hexdigest()  # the source changes whenever the blob does (build caches)
    source.write_text(
        f"/* Generated by tensorplug.library_bin: the host library's embedded modules (sha256 {digest}). */\n"
        "\t.section .rodata\n"
        f"\t.globl {SYMBOL}\n"
        f"\t.type {SYMBOL}, @object\n"
        "\t.balign 16\n"
        f"{SYMBOL}:\n"
        f"\t.incbin \"{quoted}\"\n"
        f"\t.size {SYMBOL}, . - {SYMBOL}\n"
        "\t.section .note.GNU-stack,\"\",@progbits\n")
    return source


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tensorplug.library_bin",
                                     description="Write the assembly source embedding modules in a host library.")
    parser.add_argument("-o", "--output", required=True, help="directory for library_bin.S and library_bin.bin")
    parser.add_argument("--shared-library", action="append", default=[], metavar="ISA=PATH[,ISA=PATH...]",
                        help="one shared_library module; its variants, most specific first (repeat for more modules)")
    parser.add_argument("--ptx", action="append", default=[], metavar="PATH", help="one ptx module per file")
    parser.add_argument("--cubin", action="append", default=[], metavar="PATH", help="one cubin module per file")
    args = parser.parse_args(argv)
    modules = []
    for spec in args.shared_library:
        variants = {}
        for item in spec.split(","):
            isa, sep, path = item.partition("=")
            if not sep or not isa or not path:
                parser.error(f"--shared-library: expected ISA=PATH, got {item!r}")
            variants[isa] = path
        modules.append(("shared_library", shared_library_payload(variants)))
    for path in args.ptx:
        modules.append(("ptx", ptx_payload(Path(path).read_text())))
    for path in args.cubin:
        modules.append(("cubin", cubin_payload(Path(path).read_bytes())))
    if not modules:
        parser.error("nothing to embed: give --shared-library, --ptx or --cubin")
    print(os.fspath(write_assembly(pack(modules), args.output)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
