"""Kernel libraries built for apache tvm-ffi, loaded unchanged as tensorplug Modules.

:func:`tensorplug.load_module` comes here for a library whose dynamic symbol table has
tvm-ffi's exported functions (``__tvm_ffi_<name>``) and no tensorplug function: each
``__tvm_ffi_<name>`` becomes a :class:`tensorplug.Function` through the bridge
(``bridge.cc``, compiled once per tvm-ffi and tensorplug install by
:func:`tensorplug.cpp.load_cdll` and cached), so the function is called from every
framework, made a :func:`tensorplug.op`, and so on, as a function of tensorplug's own ABI.

Signatures come from tvm-ffi's metadata (``__tvm_ffi__metadata_<name>``, built with
``TVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1``), or are declared in tensorplug's signature syntax
(``signatures={"scale": "x:view;out:mview;alpha:float->void"}``); a declaration wins. tvm-ffi
does not record which tensors a function writes: ``writes={"scale": ["arg1"]}`` (names or
0-based positions) makes those parameters ``mview``, refused read-only memory as any
``mview`` is. docs/migration.md, "No port needed", is the user's page.

The runtime library ``libtvm_ffi.so`` comes from the installed ``apache-tvm-ffi`` package
(``pip install "tensorplug[tvm-ffi]"``); the ``tvm_ffi`` Python package is not imported.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import mmap
import threading
from pathlib import Path

from .._native import function_from_pointer

__all__ = ["exported_functions", "installed_abi", "is_tvm_ffi_library", "load", "runtime_version",
           "signature_from_metadata"]

INSTALL_HINT = 'pip install "tensorplug[tvm-ffi]"'
_PREFIX = b"__tvm_ffi_"
_METADATA_PREFIX = "__tvm_ffi__metadata_"

_lock = threading.Lock()
_bridge: ctypes.CDLL | None = None


# ------------------------------------------------------------------ detection ----
def exported_functions(path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(tvm-ffi functions, tensorplug functions) the ELF library at ``path`` exports, read
    from its dynamic symbol table without loading it; ((), ()) for a file that is not a
    64-bit ELF library (the loader then says what it is)."""
    from ..hub._elf import read_elf

    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            facts = read_elf(data, str(path))
    except (OSError, ValueError):
        return (), ()
    return facts.tvm_ffi_functions, facts.functions


def is_tvm_ffi_library(path) -> bool:
    """True when the library at ``path`` exports tvm-ffi functions and no tensorplug ones
    (a library of tensorplug's ABI, built through the compatibility headers too, is not)."""
    tvm, own = exported_functions(path)
    return bool(tvm) and not own


# -------------------------------------------------------------------- runtime ----
def _package_dir() -> Path:
    spec = importlib.util.find_spec("tvm_ffi")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"loading a library built for apache tvm-ffi needs its runtime (libtvm_ffi.so): {INSTALL_HINT}",
            name="tvm_ffi")
    return Path(next(iter(spec.submodule_search_locations)))


def _load_bridge() -> ctypes.CDLL:
    """libtvm_ffi.so (global: the kernel libraries link it by name) and the bridge, built
    against the installed tvm-ffi's headers once (tensorplug.cpp's cache keys the build on
    them)."""
    global _bridge
    with _lock:
        if _bridge is not None:
            return _bridge
        from .. import cpp

        package = _package_dir()
        lib_dir = package / "lib"
        runtime = lib_dir / "libtvm_ffi.so"
        if not runtime.is_file():
            raise FileNotFoundError(f"apache-tvm-ffi at {package} has no lib/libtvm_ffi.so; reinstall it: "
                                    f"{INSTALL_HINT}")
        ctypes.CDLL(str(runtime), mode=ctypes.RTLD_GLOBAL)
        bridge = cpp.load_cdll("tensorplug_tvm_ffi_bridge", [Path(__file__).with_name("bridge.cc")],
                               include_dirs=[str(package / "include")],
                               extra_ldflags=[f"-L{lib_dir}", "-ltvm_ffi", f"-Wl,-rpath,{lib_dir}"])
        bridge.TPTvmFfiBind.restype = ctypes.c_void_p
        bridge.TPTvmFfiBind.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
        bridge.TPTvmFfiMetadata.restype = ctypes.c_int64
        bridge.TPTvmFfiMetadata.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64]
        bridge.TPTvmFfiVersion.restype = None
        _bridge = bridge
        return bridge


def installed_abi() -> str | None:
    """The installed apache-tvm-ffi's ABI, ``"major.minor"`` of its version (tvm-ffi keeps its C
    ABI within a minor series; docs/decisions.md), or None when it is not installed. Read
    from the package's metadata: nothing is imported or loaded."""
    from importlib import metadata

    try:
        version = metadata.version("apache-tvm-ffi")
    except metadata.PackageNotFoundError:
        return None
    return ".".join(version.split(".")[:2])


def runtime_version() -> str:
    """The loaded tvm-ffi runtime's version, ``"major.minor.patch"``."""
    out = (ctypes.c_int32 * 3)()
    _load_bridge().TPTvmFfiVersion(out)
    return ".".join(map(str, out))


def _raise_recorded(where: str):
    from .. import _core  # noqa: F401  (libtensorplug is loaded by the extension)

    lib = ctypes.CDLL(str(Path(_core.__file__).parent / "lib" / "libtensorplug.so"))
    kind, message = ctypes.c_char_p(), ctypes.c_char_p()
    lib.TPErrorGet.argtypes = [ctypes.POINTER(ctypes.c_char_p)] * 2
    if lib.TPErrorGet(ctypes.byref(kind), ctypes.byref(message)):
        k, m = kind.value.decode(), message.value.decode(errors="replace")
        raise _exception(k)(f"{where}: {m}")
    raise RuntimeError(f"{where} failed")


def _exception(kind: str) -> type[Exception]:
    import builtins

    found = getattr(builtins, kind, None)
    return found if isinstance(found, type) and issubclass(found, Exception) else RuntimeError


# ------------------------------------------------------------------ signatures ----
# tvm-ffi type keys (its metadata's "type") -> tensorplug parameter kinds.
_PARAM_KINDS = {"DLTensor*": "view", "ffi.Tensor": "tensor", "int": "int", "float": "float", "bool": "bool",
                "ffi.String": "str", "str": "str", "Device": "device", "DataType": "dtype",
                "ffi.Shape": "ints", "void*": "handle", "Any": "any", "AnyView": "any"}
_RESULT_KINDS = {"None": "void", "int": "int", "float": "float", "bool": "bool", "ffi.String": "str", "str": "str",
                 "Device": "device", "DataType": "dtype", "ffi.Tensor": "tensor", "ffi.Shape": "ints",
                 "Any": "any", "Tuple": "tuple", "ffi.Tuple": "tuple"}
_TENSOR_TYPES = {"DLTensor*", "ffi.Tensor"}


def _param_kind(schema: dict) -> str | None:
    kind = schema.get("type")
    args = schema.get("args") or []
    if kind in ("Optional", "ffi.Optional") and len(args) == 1:
        inner = _param_kind(args[0])
        return None if inner is None or inner.startswith("?") else "?" + inner
    if kind in ("ffi.Array", "ffi.List") and len(args) == 1:
        item = args[0].get("type")
        return "ints" if item == "int" else "views" if item in _TENSOR_TYPES else None
    return _PARAM_KINDS.get(kind)


def _result_kind(schema: dict) -> str:
    kind = schema.get("type")
    args = schema.get("args") or []
    if kind in ("ffi.Array", "ffi.List") and len(args) == 1:
        item = args[0].get("type")
        return "ints" if item == "int" else "list" if item in _TENSOR_TYPES else "any"
    return _RESULT_KINDS.get(kind, "any")


def signature_from_metadata(name: str, metadata: str) -> tuple[str, str]:
    """(tensorplug signature, parameter hints) of tvm-ffi metadata JSON ``metadata`` of
    function ``name``; parameters are named ``arg0``, ``arg1``, ... (tvm-ffi records no
    names). ValueError naming the function and the parameter for a type tensorplug has no
    kind for."""
    try:
        schema = json.loads(json.loads(metadata)["type_schema"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"tvm-ffi function '{name}': unreadable metadata {metadata[:200]!r} ({exc})") from None
    if "named_args" in schema:
        result = (schema["named_args"].get("return") or [{"type": "None"}])[0]
        params = schema["named_args"].get("params") or []
    else:  # {"type": "ffi.Function", "args": [return, param, ...]}
        args = schema.get("args") or [{"type": "None"}]
        result, params = args[0], args[1:]
    kinds, hints = [], []
    for i, param in enumerate(params):
        kind = _param_kind(param)
        if kind is None:
            raise ValueError(f"tvm-ffi function '{name}' parameter {i + 1}: tensorplug has no argument kind for "
                             f"{json.dumps(param)}; declare the function's signature yourself (load_module(path, "
                             f"signatures={{'{name}': '...'}}))")
        kinds.append(f"arg{i}:{kind}")
        hints.append({"ffi.Shape": "s", "ffi.Tensor": "t"}.get(param.get("type"), "."))
    return ";".join(kinds) + "->" + _result_kind(result), "".join(hints)


def _apply_writes(name: str, signature: str, written) -> str:
    """``signature`` with the parameters ``written`` (names or 0-based positions) made
    mview / mviews."""
    params_text, _, result = signature.partition("->")
    params = [p for p in params_text.split(";") if p]
    names = [p.split(":", 1)[0] for p in params]
    if isinstance(written, (str, int)):
        written = [written]
    for w in written:
        index = w if isinstance(w, int) and not isinstance(w, bool) else names.index(w) if w in names else None
        if index is None or not 0 <= index < len(params):
            raise ValueError(f"load_module() argument 'writes': tvm-ffi function '{name}' has no parameter {w!r}; "
                             f"its parameters: {', '.join(names) or '(none)'}")
        pname, _, kind = params[index].partition(":")
        optional = kind.startswith("?")
        base = kind.lstrip("?").split("=", 1)[0]
        default = kind[len(kind.split("=", 1)[0]):]
        if base in ("view", "tensor"):
            base = "mview"
        elif base == "views":
            base = "mviews"
        elif base not in ("mview", "mviews"):
            raise ValueError(f"load_module() argument 'writes': parameter {pname!r} of tvm-ffi function '{name}' "
                             f"is a {base}, not a tensor")
        params[index] = f"{pname}:{'?' if optional else ''}{base}{default}"
    return ";".join(params) + "->" + result


def _metadata(bridge, entry: int, name: str) -> str:
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        n = bridge.TPTvmFfiMetadata(entry, buf, size)
        if n < 0:
            _raise_recorded(f"tvm-ffi function '{name}': reading its metadata")
        if n < size:
            return buf.value.decode()
        size = n + 1


# ----------------------------------------------------------------------- load ----
def load(path, shown: str, functions, *, signatures=None, writes=None, release_gil: bool = True):
    """{name: Function} and the library handle for the tvm-ffi library at ``path`` (shown as
    ``shown`` in messages) exporting ``functions``; see the module docstring."""
    signatures = dict(signatures or {})
    writes = dict(writes or {})
    for what, table in (("signatures", signatures), ("writes", writes)):
        unknown = sorted(set(table) - set(functions))
        if unknown:
            raise ValueError(f"load_module() argument '{what}': kernel library '{shown}' has no function "
                             f"{', '.join(map(repr, unknown))}; it exports: {', '.join(functions)}")
    bridge = _load_bridge()
    try:
        library = ctypes.CDLL(str(path))
    except OSError as exc:
        raise ValueError(f"kernel library '{shown}' (built for tvm-ffi) cannot be loaded: {exc}") from None
    made, missing = {}, []
    for name in functions:
        entry = ctypes.cast(getattr(library, f"__tvm_ffi_{name}"), ctypes.c_void_p).value
        try:
            meta_entry = ctypes.cast(getattr(library, _METADATA_PREFIX + name), ctypes.c_void_p).value
        except AttributeError:
            meta_entry = None
        hints = ""
        if meta_entry:
            from_metadata, hints = signature_from_metadata(name, _metadata(bridge, meta_entry, name))
        signature = signatures.get(name) or (from_metadata if meta_entry else None)
        if signature is None:
            missing.append(name)
            continue
        if name in writes:
            signature = _apply_writes(name, signature, writes[name])
        address = bridge.TPTvmFfiBind(entry, name.encode(), hints.encode())
        if not address:
            _raise_recorded(f"kernel library '{shown}'")
        made[name] = function_from_pointer(address, signature, name=name, owner=library, release_gil=release_gil)
    if missing:
        example = ", ".join(f"'{n}': 'x:view;out:mview->void'" for n in missing[:2])
        raise ValueError(
            f"kernel library '{shown}' (built for tvm-ffi) has no signature for {', '.join(missing)}: it carries no "
            f"tvm-ffi metadata for them and none was declared. Either rebuild it with "
            f"-DTVM_FFI_DLL_EXPORT_INCLUDE_METADATA=1, or declare them: load_module(path, signatures={{{example}}})")
    return made, library
