"""Compile kernel libraries with the system compiler: ``build`` and ``load_inline``.

Results are cached by a hash of the sources, flags, compiler and tensorplug headers in
``$TENSORPLUG_CACHE_DIR`` (default ``$XDG_CACHE_HOME/tensorplug`` or
``~/.cache/tensorplug``), so a kernel is compiled once per content.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from . import _core
from ._module import Module
from ._verified import IntegrityError, file_digest, load_cdll_verified, load_module_verified, private_directory


class BuildError(RuntimeError):
    """The compiler failed; the message holds the command and the compiler's output."""


def include_dir() -> str:
    """Directory holding ``tensorplug/c_api.h`` and ``tensorplug/tensorplug.h``."""
    return str(Path(_core.__file__).parent / "include")


# compat name -> (its include root under include/compat, what its inline loader includes).
_COMPAT = {
    "tvm_ffi": ("tvm_ffi", ("tvm/ffi/container/tensor.h", "tvm/ffi/dtype.h", "tvm/ffi/error.h",
                            "tvm/ffi/extra/c_env_api.h", "tvm/ffi/function.h")),
}


def compat_include_dir(name: str = "tvm_ffi") -> str:
    """Directory of a compatibility layer's headers: for ``"tvm_ffi"``, ``tvm/ffi/...`` and
    ``dlpack/dlpack.h``, so that sources written for apache tvm-ffi's C++ API compile
    against tensorplug (docs/migration.md). ValueError for an unknown ``name``."""
    if name not in _COMPAT:
        raise ValueError(f"compat_include_dir() argument 'name': expected one of {sorted(_COMPAT)}, got {name!r}")
    return str(Path(include_dir()) / "compat" / _COMPAT[name][0])


# A C++ runtime linked statically (libstdc++.a: some compilers do it by default) stays
# local to the library instead of being exported, where other libraries would bind to it.
_KERNEL_LDFLAGS = ("-Wl,--exclude-libs,ALL",)


def _kernel_version_script() -> str:
    """The linker version script that keeps C++ standard library symbols out of a kernel
    library's dynamic symbol table (cmake/kernel_library.map says why)."""
    return str(Path(cmake_dir()) / "kernel_library.map")


def lib_dir() -> str:
    """Directory holding ``libtensorplug.so``."""
    return str(Path(_core.__file__).parent / "lib")


def cmake_dir() -> str:
    """Directory holding ``tensorplugConfig.cmake``."""
    return str(Path(_core.__file__).parent / "share" / "cmake" / "tensorplug")


def cache_dir() -> Path:
    """Where compiled libraries are cached: ``$TENSORPLUG_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/tensorplug``, else ``~/.cache/tensorplug``; created private (mode
    0700) when missing. Raises PermissionError (``UnsafeDirectoryError``) naming it when
    another user owns it or group or others may write it: they could swap the libraries
    loaded from it (docs/reliability.md, "What is verified")."""
    root = os.environ.get("TENSORPLUG_CACHE_DIR")
    if root:
        return private_directory(root, "tensorplug cache directory (TENSORPLUG_CACHE_DIR)")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return private_directory(Path(base) / "tensorplug", "tensorplug cache directory")


def _compiler(kind: str) -> str:
    env = {"c": "CC", "c++": "CXX", "cuda": "NVCC"}[kind]
    default = {"c": "cc", "c++": "c++", "cuda": "nvcc"}[kind]
    name = os.environ.get(env, default)
    path = shutil.which(name)
    if path is None:
        raise BuildError(f"no {kind} compiler found: '{name}' is not on PATH (set {env})")
    return path


def _compiler_identity(path: str) -> str:
    """The compiler as a build input: its resolved file, size and modification time, so that
    an upgrade behind the same command (``c++`` -> g++-12 -> g++-13) rebuilds. A stat, not
    ``--version`` (a process per build call)."""
    real = Path(path).resolve()
    st = real.stat()
    return f"{path}={real}:{st.st_size}:{st.st_mtime_ns}"


def _source_kind(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".c":
        return "c"
    if suffix == ".cu":
        return "cuda"
    return "c++"


def _headers_digest() -> str:
    h = hashlib.sha256()
    for header in sorted(Path(include_dir()).rglob("*.h")):
        h.update(header.read_bytes())
    return h.hexdigest()


def _run(cmd: list[str], verbose: bool, log_dir: Path | None = None) -> None:
    """Run a compiler command; BuildError when it fails, the compiler's first error line
    first (a typo in a template-heavy source otherwise hides under pages of notes), then
    the command and the whole output, which is also written to ``log_dir/build.log``."""
    if verbose:
        print(" ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        output = proc.stderr.strip() or proc.stdout.strip()
        first = next((line for line in output.splitlines() if re.search(r"\b(fatal )?error\b", line)), None)
        log = ""
        if log_dir is not None:
            path = Path(log_dir) / "build.log"
            path.write_text(f"$ {' '.join(cmd)}\n{output}\n")
            log = f" (full log: {path})"
        raise BuildError(f"compilation failed (exit {proc.returncode}){log}:\n"
                         + (f"{first.strip()}\n\n" if first else "") + f"$ {' '.join(cmd)}\n{output}")


def build(name: str, sources, *, extra_cflags=(), extra_cuda_cflags=(), extra_ldflags=(),
          include_dirs=(), build_directory=None, verbose: bool = False, stub=None,
          export_tvm_ffi: bool = False) -> str:
    """Compile ``sources`` (C ``.c``, C++ ``.cc/.cpp``, CUDA ``.cu`` paths) into the shared
    library ``<name>.so`` linked against libtensorplug; returns its path.

    C++ is compiled with ``$CXX`` (default ``c++``) as C++17, C with ``$CC`` (default
    ``cc``) as C11, CUDA with ``$NVCC`` (default ``nvcc``), all with ``-O2``.
    ``extra_cflags`` / ``extra_cuda_cflags`` are added to the C/C++ and CUDA compile
    commands, ``extra_ldflags`` to the link, ``include_dirs`` after the tensorplug headers.
    The library goes to ``build_directory``, by default a directory under
    :func:`cache_dir` named by a hash of the sources, flags, compilers and tensorplug
    headers. It is rebuilt when the sources' contents, the flags, the compilers (their
    files), the tensorplug headers or a header the sources include (system headers aside)
    changed since it was built, as ``<name>.so.stamp`` beside it records; otherwise the
    library there is used as it is. ``verbose`` prints the commands.
    ``stub``, a path such as ``"mykernels/__init__.pyi"``, also writes the library's type
    stub there (:func:`tensorplug.stubs.write_stub`: the library is loaded to read its
    signatures; the file is rewritten only when its text changes).
    ``export_tvm_ffi=True`` also exports each function in apache tvm-ffi's calling convention
    (``__tvm_ffi_<name>``), so that ``tvm_ffi.load_module(path)`` calls the library
    (``tensorplug.tvm_ffi.export``; neither tvm-ffi's headers nor its runtime are needed to
    build it).

    The library is checked against the digest its stamp recorded when it was built, and
    built again when it differs; :func:`load` (and :func:`load_inline`) also load it
    through the file that check read, so nothing swapped in after the check runs.

    Raises ValueError when ``name`` is not an identifier, FileNotFoundError for a missing
    source, :class:`BuildError` when no compiler is found or compilation fails, and
    PermissionError when the cache or ``build_directory`` is not private (:func:`cache_dir`)."""
    path, _ = _build(name, sources, extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
                     extra_ldflags=extra_ldflags, include_dirs=include_dirs, build_directory=build_directory,
                     verbose=verbose, export_tvm_ffi=export_tvm_ffi)
    if stub is not None:
        from .stubs import write_stub

        write_stub(path, stub)
    return path


def load(name: str, sources, *, release_gil: bool = True, **build_options) -> Module:
    """:func:`build` the library and load it as a :class:`tensorplug.Module`, verified in
    the same step: the loaded file is the one whose digest the build recorded (a file
    swapped in at its path is refused with IntegrityError, a ValueError). ``build_options``
    are :func:`build`'s keywords but ``stub``; ``release_gil`` is :func:`tensorplug.load_module`'s."""
    if "stub" in build_options:
        raise TypeError("load() got an unexpected keyword argument 'stub' (build() writes stubs)")
    path, library = _build(name, sources, **build_options)
    return load_module_verified(path, library, path, release_gil=release_gil)


def load_cdll(name: str, sources, **build_options):
    """:func:`build` a plain shared library (one that need not export tensorplug functions,
    such as a framework's glue compiled at run time) and open it with ``ctypes.CDLL``,
    verified in the same step as :func:`load` verifies. ``build_options`` are
    :func:`build`'s keywords but ``stub``. The library's ``loaded_from`` is the name the
    loader opened (``/proc/self/fd/N`` of the verified file), for a framework that opens it
    again by name."""
    if "stub" in build_options:
        raise TypeError("load_cdll() got an unexpected keyword argument 'stub'")
    path, library = _build(name, sources, **build_options)
    return load_cdll_verified(path, library, path)


def _build(name: str, sources, *, extra_cflags=(), extra_cuda_cflags=(), extra_ldflags=(), include_dirs=(),
           build_directory=None, verbose: bool = False, export_tvm_ffi: bool = False) -> tuple[str, str]:
    """:func:`build`'s work: the library's path and the sha256 its stamp records."""
    if export_tvm_ffi:
        from .tvm_ffi.export import build_with_exports

        def write_shim(text: str) -> Path:  # the generated exports, in the cache by their content
            digest = hashlib.sha256(text.encode()).hexdigest()[:16]
            directory = cache_dir() / "sources" / f"{name}_tvm_ffi_exports_{digest}"
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"{name}_tvm_ffi_exports.cc"
            _write_if_changed(path, text)
            return path

        return build_with_exports(sources, lambda with_exports: _build(
            name, with_exports, extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
            extra_ldflags=extra_ldflags, include_dirs=include_dirs, build_directory=build_directory,
            verbose=verbose), write_shim)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"build() argument 'name': expected an identifier, got {name!r}")
    sources = [Path(s) for s in ([sources] if isinstance(sources, (str, os.PathLike)) else sources)]
    if not sources:
        raise ValueError("build() argument 'sources': expected at least one source file")
    for src in sources:
        if not src.is_file():
            raise FileNotFoundError(f"build() source not found: {src}")
    kinds = [_source_kind(s) for s in sources]
    compilers = {kind: _compiler(kind) for kind in set(kinds)}
    linker = compilers.get("c++") or _compiler("c++")  # C++ links C sources too
    includes = [include_dir(), *map(str, include_dirs)]

    # Every input by name, so that a flag moved from one list to another is another build.
    inputs = {"name": name, "headers": _headers_digest(), "abi": _core.abi_version(),
              "version_script": file_digest(_kernel_version_script()),
              "compilers": sorted(map(_compiler_identity, {*compilers.values(), linker})),
              "kernel_ldflags": _KERNEL_LDFLAGS,
              "cflags": list(extra_cflags), "cuda_cflags": list(extra_cuda_cflags), "ldflags": list(extra_ldflags),
              "includes": includes, "sources": [[src.name, file_digest(src)] for src in sources]}
    digest = hashlib.sha256(json.dumps(inputs).encode()).hexdigest()
    out_dir = (private_directory(build_directory, "build() argument 'build_directory'") if build_directory
               else cache_dir() / f"{name}_{digest[:16]}")
    target = out_dir / f"{name}.so"
    # The stamp next to `target` records the digest of the build that made it, of every
    # header its sources included (the compiler's dependency list, system headers aside) and
    # of the library it made: a build_directory's path does not change with the sources, so
    # the stamp says whether the library is current, and a library that is not the one built
    # (truncated by a full disk, replaced) is built again.
    stamp = out_dir / f"{name}.so.stamp"
    # One builder at a time per target (processes of one job build the same kernel at once:
    # ranks of a training run, test workers): the others wait and find it current, where a
    # second build would replace the file under a process that loaded the first.
    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(out_dir / f"{name}.so.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        library = _stamp_current(stamp, digest, target)
        if library is None:
            headers = _compile(name, sources, kinds, compilers, linker, includes, out_dir, target, extra_cflags,
                               extra_cuda_cflags, extra_ldflags, verbose)
            library = file_digest(target)
            _write_if_changed(stamp, json.dumps({"digest": digest, "headers": _file_digests(headers),
                                                 "library": library}, indent=1))
    return str(target), library


def _file_digests(paths) -> dict[str, str]:
    return {str(p): file_digest(p) for p in sorted(set(paths))}


def _stamp_current(stamp: Path, digest: str, target: Path) -> str | None:
    """The digest of ``target`` when ``stamp`` records the build ``digest``, headers
    unchanged since, and ``target`` as the library that build made; otherwise None."""
    try:
        record = json.loads(stamp.read_text())
        current = record["digest"] == digest and _file_digests(record["headers"]) == record["headers"]
        return record["library"] if current and file_digest(target) == record["library"] else None
    except (OSError, ValueError, KeyError, TypeError):  # no stamp or library, a header gone, another format
        return None


def _dependencies(depfile: str, source: Path) -> list[str]:
    """The headers listed in a make-style dependency file (``-MMD -MF``)."""
    text = Path(depfile).read_text().replace("\\\n", " ")
    _, _, deps = text.partition(": ")
    paths = [d.replace("\\ ", " ") for d in re.split(r"(?<!\\)\s+", deps.strip()) if d]
    return [str(Path(d).resolve()) for d in paths if Path(d).resolve() != source.resolve()]


def _compile(name, sources, kinds, compilers, linker, includes, out_dir, target, extra_cflags, extra_cuda_cflags,
             extra_ldflags, verbose) -> list[str]:
    """Compile and link ``sources`` into ``target`` (build()'s work when the cache misses);
    returns the headers the sources included."""
    out_dir.mkdir(parents=True, exist_ok=True)

    inc_flags = [f"-I{d}" for d in includes]
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        objects, headers = [], []
        for i, (src, kind) in enumerate(zip(sources, kinds)):
            obj = os.path.join(tmp, f"{i}_{src.stem}.o")
            if kind == "cuda":
                cmd = [compilers[kind], "-std=c++17", "-O2", "-Xcompiler", "-fPIC", "-DTENSORPLUG_WITH_CUDA",
                       *inc_flags, *extra_cuda_cflags, "-c", str(src), "-o", obj]
            elif kind == "c":
                cmd = [compilers[kind], "-std=c11", "-O2", "-fPIC", "-fvisibility=hidden", *inc_flags,
                       *extra_cflags, "-c", str(src), "-o", obj]
            else:
                cmd = [compilers[kind], "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden",
                       "-fvisibility-inlines-hidden", *inc_flags, *extra_cflags, "-c", str(src), "-o", obj]
            depfile = obj + ".d"
            cmd[-4:-4] = ["-MMD", "-MF", depfile]  # before `-c src -o obj`
            _run(cmd, verbose, out_dir)
            headers += _dependencies(depfile, src)
            objects.append(obj)
        ldflags = [f"-L{lib_dir()}", "-ltensorplug", f"-Wl,-rpath,{lib_dir()}", *_KERNEL_LDFLAGS,
                   f"-Wl,--version-script={_kernel_version_script()}"]
        if "cuda" in kinds:
            cuda_lib = _cuda_lib_dir(compilers["cuda"])
            ldflags += [f"-L{cuda_lib}", "-lcudart", f"-Wl,-rpath,{cuda_lib}"]
        tmp_target = os.path.join(tmp, f"{name}.so")
        _run([linker, "-shared", "-o", tmp_target, *objects, *ldflags, *extra_ldflags], verbose, out_dir)
        os.replace(tmp_target, target)  # atomic: concurrent builders see a whole file
    return headers


def _cuda_lib_dir(nvcc: str) -> str:
    """The directory holding libcudart.so for this nvcc."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), str(Path(nvcc).resolve().parent.parent)]
    try:  # nvcc is sometimes a wrapper script: `exec /usr/local/cuda-X/bin/nvcc "$@"`
        text = Path(nvcc).read_text(errors="ignore")[:4096]
        roots += [m.group(1) for m in re.finditer(r"(/\S+)/bin/nvcc", text)]
    except OSError:
        pass
    roots.append("/usr/local/cuda")
    for root in filter(None, roots):
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib"):
            if (Path(root) / sub / "libcudart.so").exists():
                return str(Path(root) / sub)
    raise BuildError(f"cannot find libcudart.so for {nvcc}: set CUDA_HOME")


_PARAM_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:\[\s*\])?\s*(?:=.*)?$")


def _parameter_names(source: str, func: str) -> list[str] | None:
    """Parameter names of the C++ function ``func`` defined in ``source`` (best effort)."""
    match = re.search(rf"\b{re.escape(func)}\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*(?:const\s*)?(?:noexcept\s*)?\{{",
                      source)
    if not match:
        return None
    text = match.group(1).strip()
    if not text or text == "void":
        return []
    names, depth, current = [], 0, ""
    for ch in text + ",":
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            m = _PARAM_NAME.search(current.strip())
            if not m:
                return None
            names.append(m.group(1))
            current = ""
        else:
            current += ch
    return names


def load_inline(name: str, cpp_sources, functions=None, *, cuda_sources=None, extra_cflags=(),
                extra_cuda_cflags=(), extra_ldflags=(), include_dirs=(), build_directory=None,
                verbose: bool = False, release_gil: bool = True, compat: str | None = None,
                export_tvm_ffi: bool = False) -> Module:
    """Compile C++ source text (and optional CUDA source text) and load it as a
    :class:`tensorplug.Module`.

    ``cpp_sources`` and ``cuda_sources`` are strings or lists of strings;
    ``tensorplug/tensorplug.h`` is included for you. With ``functions`` (names of C++
    functions defined in the sources), ``TENSORPLUG_EXPORT`` wrappers are generated for
    them, with parameter names read from their definitions; without it the sources
    export their functions themselves. The sources are written under :func:`cache_dir`
    and compiled by :func:`build` (the other keyword arguments are its), so unchanged
    sources load without compiling. ``release_gil`` is passed to
    :func:`tensorplug.load_module`.

    ``compat="tvm_ffi"`` compiles sources written for apache tvm-ffi's ``load_inline``
    unchanged: the compatibility headers are on the include path, the sources get the
    includes that loader adds (tvm/ffi tensor, dtype, error, env and function headers),
    and ``functions`` may also be a mapping of names to docstrings (docstrings ignored).

    ``export_tvm_ffi=True`` also exports the functions in apache tvm-ffi's calling convention
    (:func:`build`); ``Module.path`` is then the library ``tvm_ffi.load_module`` opens.
    """
    if compat is not None and compat not in _COMPAT:
        raise ValueError(f"load_inline() argument 'compat': expected one of {sorted(_COMPAT)} or None, got {compat!r}")
    prelude = "#include <tensorplug/tensorplug.h>\n"
    if compat is not None:
        prelude += "".join(f"#include <{h}>\n" for h in _COMPAT[compat][1])
        include_dirs = [compat_include_dir(compat), *include_dirs]
        if isinstance(functions, dict):
            functions = list(functions)
    if isinstance(cpp_sources, str):
        cpp_sources = [cpp_sources]
    if isinstance(cuda_sources, str):
        cuda_sources = [cuda_sources]
    cpp_text = prelude + "\n".join(cpp_sources or [])
    cuda_text = "\n".join(cuda_sources or [])
    if functions:
        if isinstance(functions, str):
            functions = [functions]
        exports = []
        for func in functions:
            names = _parameter_names(cpp_text, func)
            if names is None and cuda_text:
                names = _parameter_names(cuda_text, func)
            quoted = "".join(f', "{n}"' for n in (names or []))
            exports.append(f"TENSORPLUG_EXPORT({func}, {func}{quoted});")
        if cuda_text and not all(_parameter_names(cpp_text, f) is not None for f in functions):
            # Functions defined in CUDA sources are exported from there.
            cuda_text += "\n" + "\n".join(exports)
        else:
            cpp_text += "\n" + "\n".join(exports) + "\n"
    h = hashlib.sha256((cpp_text + "\0" + cuda_text).encode()).hexdigest()[:16]
    src_dir = cache_dir() / "sources" / f"{name}_{h}"
    src_dir.mkdir(parents=True, exist_ok=True)
    paths = [src_dir / f"{name}.cc"]
    _write_if_changed(paths[0], cpp_text)
    if cuda_text:
        cu = src_dir / f"{name}_cuda.cu"
        _write_if_changed(cu, prelude + cuda_text)
        paths.append(cu)
    return load(name, paths, extra_cflags=extra_cflags, extra_cuda_cflags=extra_cuda_cflags,
                extra_ldflags=extra_ldflags, include_dirs=include_dirs, build_directory=build_directory,
                verbose=verbose, release_gil=release_gil, export_tvm_ffi=export_tvm_ffi)


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(path.suffix + f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


__all__ = ["BuildError", "build", "load", "load_cdll", "load_inline", "include_dir",
           "compat_include_dir", "lib_dir", "cmake_dir", "cache_dir"]
