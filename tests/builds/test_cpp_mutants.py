"""tensorplug.cpp at the inputs that tell a right build step from a slip (issue 40: the
survivors of cosmic-ray on core/tensorplug/cpp.py, docs/testing.md "Mutation testing with a
tool"). Each test asserts what the module's docstrings say: where the default cache and the
compatibility headers are, that build's options are keywords, that load releases the GIL by
default, that a C++-only load_inline never needs a CUDA compiler, and how the CUDA runtime's
directory is found for an nvcc (without one: a stand-in file). The tests after
``test_a_cpp_function_keeps_its_parameter_names_beside_cuda_sources`` came from the run's
remaining mutants (2026-11-29): nothing printed unless ``verbose``, parameter names read
whatever the types are called and past defaults with brackets, ``compat`` with one name or
none, a header anywhere on the include path as a build input, every suffix but ``.c`` and
``.cu`` compiled as C++, and ``load_cdll``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tensorplug import cpp


def test_the_default_cache_is_tensorplug_under_the_xdg_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("TENSORPLUG_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cpp.cache_dir() == tmp_path / "tensorplug"
    assert (tmp_path / "tensorplug").is_dir()


def test_compat_headers_are_under_include_compat():
    assert cpp.compat_include_dir() == str(Path(cpp.include_dir()) / "compat" / "tvm_ffi")
    assert (Path(cpp.compat_include_dir("tvm_ffi")) / "tvm" / "ffi" / "function.h").is_file()


def test_compat_load_inline_includes_the_tvm_ffi_headers():
    # no #include in the source: the tvm-ffi headers that apache tvm-ffi's loader adds come with compat=
    m = cpp.load_inline("compat_prelude", "int64_t has_ffi() { return sizeof(tvm::ffi::Function) > 0; }",
                        functions=["has_ffi"], compat="tvm_ffi")
    assert m.has_ffi() == 1


def test_build_options_are_keywords_and_name_and_sources_may_be_keywords(tmp_path):
    with pytest.raises(TypeError):
        cpp.build("kw_only", [tmp_path / "nope.cc"], ["-DX"])  # extra_cflags by position
    with pytest.raises(FileNotFoundError, match="source not found"):
        cpp.build(name="kw_names", sources=[tmp_path / "nope.cc"])


def test_load_releases_the_gil_by_default(tmp_path):
    src = tmp_path / "gil_default.cc"
    src.write_text("#include <tensorplug/tensorplug.h>\n"
                   "int64_t one() { return 1; }\nTENSORPLUG_EXPORT(one, one);\n")
    assert cpp.load("gil_default", [src]).one.releases_gil is True
    assert cpp.load("gil_default", [src], release_gil=False).one.releases_gil is False


def test_load_inline_releases_the_gil_by_default():
    m = cpp.load_inline("gil_inline", "int64_t one() { return 1; }", functions=["one"])
    assert m.one.releases_gil is True
    assert cpp.load_inline("gil_inline", "int64_t one() { return 1; }", functions=["one"],
                           release_gil=False).one.releases_gil is False


def test_a_cpp_only_load_inline_needs_no_cuda_compiler(monkeypatch):
    # `one`'s definition is one the parameter reader does not match (noexcept(true)):
    # its export, without names, still goes with the C++ source
    monkeypatch.setenv("NVCC", "/nonexistent/nvcc")
    m = cpp.load_inline("unparsed_def", "int64_t one() noexcept(true) { return 1; }", functions=["one"])
    assert m.one() == 1


def _cuda_root(root: Path, sub: str = "lib64") -> Path:
    (root / sub).mkdir(parents=True)
    (root / sub / "libcudart.so").write_bytes(b"")
    return root / sub


def test_the_cuda_runtime_is_found_under_cuda_home(tmp_path, monkeypatch):
    lib = _cuda_root(tmp_path / "cuda", "lib")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    # an nvcc path that cannot be read (a missing wrapper) is not an error
    assert cpp._cuda_lib_dir(str(tmp_path / "missing" / "bin" / "nvcc")) == str(lib)


def test_the_cuda_runtime_is_found_through_an_nvcc_wrapper(tmp_path, monkeypatch):
    lib = _cuda_root(tmp_path / "cuda-12")
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {tmp_path}/cuda-12/bin/nvcc "$@"\n')
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert cpp._cuda_lib_dir(str(wrapper)) == str(lib)


def test_a_replaced_library_is_built_again_whatever_its_digest(tmp_path):
    # the stamp's library digest is compared for equality: a file whose digest sorts before
    # or after the recorded one is not the library that build made
    import hashlib
    import json

    src = tmp_path / "stamped.cc"
    src.write_text("#include <tensorplug/tensorplug.h>\nint64_t one() { return 1; }\nTENSORPLUG_EXPORT(one, one);\n")
    out = tmp_path / "out"
    path = Path(cpp.build("stamped", [src], build_directory=out))
    recorded = json.loads(path.with_name("stamped.so.stamp").read_text())["library"]
    for after in (True, False):
        junk = next(data for data in (f"not a library {n}".encode() for n in range(1000))
                    if (hashlib.sha256(data).hexdigest() > recorded) == after)
        path.write_bytes(junk)
        assert Path(cpp.build("stamped", [src], build_directory=out)) == path
        assert path.read_bytes() != junk
        assert hashlib.sha256(path.read_bytes()).hexdigest() == \
            json.loads(path.with_name("stamped.so.stamp").read_text())["library"]


def test_a_compiler_killed_by_a_signal_is_a_build_error():
    with pytest.raises(cpp.BuildError, match=r"compilation failed \(exit -9\)"):
        cpp._run(["sh", "-c", "kill -9 $$"], False)


def test_cpp_is_compiled_as_cpp17_and_c_as_c11(tmp_path, capsys):
    cc = tmp_path / "plain.c"
    cc.write_text("int plain_c(void) { return 1; }\n")
    cxx = tmp_path / "plain.cc"
    cxx.write_text("int plain_cxx() { return 1; }\n")
    for src, std, other in ((cc, "-std=c11", "-std=c++17"), (cxx, "-std=c++17", "-std=c11")):
        cpp.build(f"std_{src.stem}_{src.suffix[1:]}", [src], build_directory=tmp_path / src.suffix[1:], verbose=True)
        compile_line = next(line for line in capsys.readouterr().out.splitlines() if str(src) in line)
        assert std in compile_line.split() and other not in compile_line.split()


def test_a_function_declared_with_void_parameters_takes_none():
    m = cpp.load_inline("void_params", "int64_t one(void) { return 1; }", functions=["one"])
    assert m.one() == 1


def test_a_build_directory_in_the_cache_is_private(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORPLUG_CACHE_DIR", str(tmp_path / "cache"))
    src = tmp_path / "private_dir.cc"
    src.write_text("#include <tensorplug/tensorplug.h>\nint64_t one() { return 1; }\nTENSORPLUG_EXPORT(one, one);\n")
    out = Path(cpp.build("private_dir", [src])).parent
    assert out.parent == tmp_path / "cache" and out.stat().st_mode & 0o777 == 0o700


def test_a_cpp_function_keeps_its_parameter_names_beside_cuda_sources(tmp_path, tmp_cache):
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    # compiled in a new build directory every time: a library from the cache would not show
    # the CUDA source compiled with the C++ command (nvcc refuses its `-fPIC`)
    m = cpp.load_inline("mixed_sources", "int64_t same(int64_t n) { return n; }",
                        cuda_sources="__global__ void unused_kernel() {}", functions=["same"],
                        build_directory=tmp_path / "out")
    assert m.same.signature_text == "n:int->int" and m.same(n=3) == 3


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """load_inline writes its sources under the cache: a new one per test, inside tmp_path."""
    monkeypatch.setenv("TENSORPLUG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _one_source(path: Path, name: str) -> Path:
    path.write_text(f"#include <tensorplug/tensorplug.h>\nint64_t {name}() {{ return 1; }}\nTENSORPLUG_EXPORT({name}, {name});\n")
    return path


def test_nothing_is_printed_unless_verbose(tmp_path, capsys, tmp_cache):
    # build(), load() and load_inline() each compile here (new build directories): "verbose prints the commands"
    cpp.build("quiet_build", [_one_source(tmp_path / "quiet_build.cc", "one")], build_directory=tmp_path / "b")
    assert cpp.load("quiet_load", [_one_source(tmp_path / "quiet_load.cc", "one")],
                    build_directory=tmp_path / "l").one() == 1
    assert cpp.load_inline("quiet_inline", "int64_t one() { return 1; }", functions=["one"],
                           build_directory=tmp_path / "i").one() == 1
    assert capsys.readouterr().out == ""
    cpp.build("loud_build", [_one_source(tmp_path / "loud_build.cc", "one")], build_directory=tmp_path / "v",
              verbose=True)
    assert "loud_build.cc" in capsys.readouterr().out


def test_parameter_names_are_read_whatever_the_types_are_called(tmp_cache):
    # a type whose name sorts after "void" (the empty-parameter-list check compares the text with it)
    m = cpp.load_inline("zint_params", "using zint = int64_t;\nint64_t same(zint n, zint w) { return n - w; }",
                        functions=["same"])
    assert m.same.signature_text == "n:int;w:int->int" and m.same(w=1, n=3) == 2


def test_parameter_names_are_read_past_defaults_with_brackets_and_commas(tmp_cache):
    # load_inline passes the names only: a C++ default stays C++'s, the binding's signature has none
    source = ("constexpr int64_t add(int64_t a, int64_t b) { return a + b; }\n"
              "int64_t pick(int64_t n = add(1, 2), int64_t k = sizeof(int[2]), int64_t t = static_cast<int64_t>(4))"
              " { return 100 * n + 10 * k + t; }")
    m = cpp.load_inline("default_params", source, functions=["pick"])
    assert m.pick.signature_text == "n:int;k:int;t:int->int"
    assert m.pick(t=3, k=2, n=1) == 123


def test_compat_load_inline_takes_one_function_name_or_none(tmp_cache):
    one = cpp.load_inline("compat_one_name", "int64_t answer() { return 42; }", functions="answer", compat="tvm_ffi")
    assert one.functions == ("answer",) and one.answer() == 42
    # without functions the sources export their functions themselves
    none = cpp.load_inline("compat_no_names", "int64_t answer() { return 42; }\nTENSORPLUG_EXPORT(answer, answer);",
                           compat="tvm_ffi")
    assert none.functions == ("answer",) and none.answer() == 42


def test_a_header_anywhere_on_the_include_path_is_an_input(tmp_path):
    # headers whose paths sort before and after the source's: each change rebuilds
    for first, second in (("a_inc", "z_src"), ("z_inc", "a_src")):
        inc, srcdir = tmp_path / first, tmp_path / second
        inc.mkdir(), srcdir.mkdir()
        header = inc / "value.h"
        header.write_text("#define VALUE 1\n")
        src = srcdir / "valued.c"
        src.write_text('#include "value.h"\nint valued(void) { return VALUE; }\n')
        out = tmp_path / f"out_{first}"
        path = cpp.build("valued", [src], include_dirs=[inc], build_directory=out)
        before = Path(path).stat()
        assert cpp.build("valued", [src], include_dirs=[inc], build_directory=out) == path
        assert Path(path).stat().st_mtime_ns == before.st_mtime_ns  # nothing changed: not rebuilt
        header.write_text("#define VALUE 2\n")
        cpp.build("valued", [src], include_dirs=[inc], build_directory=out)
        after = Path(path).stat()
        assert (after.st_ino, after.st_mtime_ns) != (before.st_ino, before.st_mtime_ns), f"header in {first}"


def test_every_suffix_but_c_and_cu_is_compiled_as_cpp(tmp_path, monkeypatch, capsys):
    # "C ``.c``, C++ ``.cc/.cpp``, CUDA ``.cu``": no CUDA compiler is looked for a .cxx or .cpp
    monkeypatch.setenv("NVCC", "/nonexistent/nvcc")
    for suffix in (".cxx", ".cpp", ".cc"):
        src = tmp_path / f"kind{suffix}"
        src.write_text("template <typename T> T twice(T v) { return 2 * v; }\nint kind_value() { return twice(1); }\n")
        cpp.build(f"kind_{suffix[1:]}", [src], build_directory=tmp_path / suffix[1:], verbose=True)
        compile_line = next(line for line in capsys.readouterr().out.splitlines() if str(src) in line).split()
        assert "-std=c++17" in compile_line and "-std=c11" not in compile_line, suffix


def test_load_cdll_opens_a_plain_library_verified(tmp_path):
    src = tmp_path / "plain_cdll.c"
    src.write_text("__attribute__((visibility(\"default\"))) int plain_answer(void) { return 42; }\n")
    with pytest.raises(TypeError, match="load_cdll.. got an unexpected keyword argument 'stub'"):
        cpp.load_cdll("plain_cdll", [src], stub=tmp_path / "x.pyi")
    lib = cpp.load_cdll("plain_cdll", [src], build_directory=tmp_path / "out")
    assert lib.plain_answer() == 42
    assert lib.loaded_from.startswith("/proc/self/fd/")
    with pytest.raises(TypeError, match="load.. got an unexpected keyword argument 'stub'"):
        cpp.load("plain_cdll", [src], stub=tmp_path / "x.pyi")


def test_load_options_are_keywords_and_name_and_sources_may_be_keywords(tmp_path, tmp_cache):
    src = _one_source(tmp_path / "kw_load.cc", "one")
    assert cpp.load(name="kw_load", sources=[src], build_directory=tmp_path / "out").one() == 1
    with pytest.raises(TypeError):
        cpp.load("kw_load", [src], False)  # release_gil by position
    assert cpp.load_inline(name="kw_inline", cpp_sources="int64_t one() { return 1; }", functions=["one"]).one() == 1
    with pytest.raises(TypeError):
        cpp.load_inline("kw_inline", "int64_t one() { return 1; }", ["one"], None)  # cuda_sources by position


def test_tvm_ffi_functions_are_exported_only_when_asked(tmp_path, tmp_cache):
    # export_tvm_ffi defaults to False in build() and load_inline(); read from the symbol table
    from tensorplug.tvm_ffi import exported_functions

    plain = cpp.build("tvm_ffi_plain", [_one_source(tmp_path / "tvm_ffi_plain.cc", "one")],
                      build_directory=tmp_path / "plain")
    assert exported_functions(plain) == ((), ("one",))
    inline = cpp.load_inline("tvm_ffi_inline", "int64_t one() { return 1; }", functions=["one"],
                             build_directory=tmp_path / "inline")
    assert exported_functions(inline.path) == ((), ("one",))
    asked = cpp.load_inline("tvm_ffi_asked", "int64_t one() { return 1; }", functions=["one"],
                            build_directory=tmp_path / "asked", export_tvm_ffi=True)
    assert exported_functions(asked.path) == (("one",), ("one",)) and asked.one() == 1
