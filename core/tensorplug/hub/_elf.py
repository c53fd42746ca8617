"""What the hub reads from a kernel library's ELF file without loading it: the CPU
architecture, the tensorplug ABI record, the libc it needs and the functions it exports.

The same facts the runtime's loader reads before ``dlopen`` (csrc/runtime/module.cc), read
here in Python so that the hub can describe a build when it is published and check a
downloaded file against its description before the loader ever sees it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

ABI_SYMBOL = b"__tensorplugabi_version"
FUNCTION_PREFIX = b"__tensorplug_"
TVM_FFI_PREFIX = b"__tvm_ffi_"
# A library without the record predates it; the record came with ABI 1 (docs/shipping.md).
ABI_WITHOUT_RECORD = 1

# e_machine values (ELF gABI) of the architectures the hub names.
MACHINES = {62: "x86_64", 183: "aarch64", 243: "riscv64", 21: "ppc64le"}

_SHT_DYNSYM = 11
_SHT_DYNAMIC = 6
_SHT_GNU_VERNEED = 0x6FFFFFFE
_STT_OBJECT = 1
_STT_FUNC = 2
_DT_NEEDED = 1


@dataclass(frozen=True)
class ElfFacts:
    arch: str  # "x86_64", "aarch64", ... or "elf-machine-<n>"
    abi: int  # the ABI record, or ABI_WITHOUT_RECORD
    libc: str | None  # "glibc", "musl", or None when the library needs no libc
    libc_version: str | None  # the newest GLIBC_x.y symbol version it needs
    functions: tuple[str, ...]  # exported kernel functions, sorted
    # apache tvm-ffi's exported functions (__tvm_ffi_<name>; not its __tvm_ffi__<meta> symbols), sorted
    tvm_ffi_functions: tuple[str, ...] = ()


def read_elf(data: bytes, what: str) -> ElfFacts:
    """The facts of the 64-bit little-endian ELF shared library ``data``; ValueError naming
    ``what`` (the file) for anything else."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{what} is not a 64-bit little-endian ELF shared library")
    machine, = struct.unpack_from("<H", data, 18)
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    if shentsize != 64 or shoff + 64 * shnum > len(data):
        raise ValueError(f"{what} has a malformed ELF section table")
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + 64 * i) for i in range(shnum)]

    def section_bytes(index: int) -> bytes:
        if not 0 <= index < shnum:
            raise ValueError(f"{what} has a malformed ELF section link")
        _, _, _, _, offset, size, *_ = sections[index]
        if offset + size > len(data):
            raise ValueError(f"{what} has an ELF section past its end")
        return data[offset:offset + size]

    def string(table: bytes, offset: int) -> bytes:
        return table[offset:table.index(b"\0", offset)] if offset < len(table) else b""

    abi = ABI_WITHOUT_RECORD
    functions: list[str] = []
    tvm_ffi: list[str] = []
    needed: list[bytes] = []
    versions: list[bytes] = []
    for index, (_, kind, _, _, _, _, link, info, _, _) in enumerate(sections):
        if kind == _SHT_DYNSYM:
            strings = section_bytes(link)
            symbols = section_bytes(index)
            for k in range(len(symbols) // 24):
                st_name, st_info, _, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", symbols, 24 * k)
                if st_shndx == 0:
                    continue
                name = string(strings, st_name)
                if st_info & 0xF == _STT_FUNC and name.startswith(FUNCTION_PREFIX):
                    functions.append(name[len(FUNCTION_PREFIX):].decode())
                elif (st_info & 0xF == _STT_FUNC and name.startswith(TVM_FFI_PREFIX)
                      and not name.startswith(TVM_FFI_PREFIX + b"_")):
                    tvm_ffi.append(name[len(TVM_FFI_PREFIX):].decode())
                elif st_info & 0xF == _STT_OBJECT and name == ABI_SYMBOL:
                    abi = _abi_record(data, sections, st_shndx, st_value, st_size, what)
        elif kind == _SHT_DYNAMIC:
            strings = section_bytes(link)
            body = section_bytes(index)
            for k in range(len(body) // 16):
                tag, value = struct.unpack_from("<qQ", body, 16 * k)
                if tag == _DT_NEEDED:
                    needed.append(string(strings, value))
        elif kind == _SHT_GNU_VERNEED:
            strings = section_bytes(link)
            body = section_bytes(index)
            entry = 0
            for _ in range(info):  # Elf64_Verneed entries, each with its Elf64_Vernaux list
                _, count, _, aux, following = struct.unpack_from("<HHIII", body, entry)
                at = entry + aux
                for _ in range(count):
                    _, _, _, name_offset, next_aux = struct.unpack_from("<IHHII", body, at)
                    versions.append(string(strings, name_offset))
                    at += next_aux
                entry += following
                if following == 0:
                    break
    libc: str | None
    libc_version: str | None
    if any(n.startswith(b"libc.musl") or n.startswith(b"ld-musl") for n in needed):
        libc, libc_version = "musl", None
    else:
        glibc = [tuple(int(p) for p in v[6:].split(b".")) for v in versions
                 if v.startswith(b"GLIBC_") and v[6:].replace(b".", b"").isdigit()]
        libc = "glibc" if glibc or b"libc.so.6" in needed else None
        libc_version = ".".join(map(str, max(glibc))) if glibc else None
    return ElfFacts(MACHINES.get(machine, f"elf-machine-{machine}"), abi, libc, libc_version,
                    tuple(sorted(functions)), tuple(sorted(tvm_ffi)))


def _abi_record(data: bytes, sections, index: int, address: int, size: int, what: str) -> int:
    """The int32 the ABI record holds: st_value is an address inside its section."""
    if size == 4 and index < len(sections):
        _, _, _, base, offset, section_size, *_ = sections[index]
        if base <= address and address - base + 4 <= section_size and offset + address - base + 4 <= len(data):
            return struct.unpack_from("<i", data, offset + address - base)[0]
    raise ValueError(f"{what}: its ABI record {ABI_SYMBOL.decode()} is not a readable int32")
