"""tensorplug.cpp at the inputs that tell a right build step from a slip (issue 40: the
survivors of cosmic-ray on core/tensorplug/cpp.py, docs/testing.md "Mutation testing with a
tool"). Each test asserts what the module's docstrings say: where the default cache and the
compatibility headers are, that build's options are keywords, that load releases the GIL by
default, that a C++-only load_inline never needs a CUDA compiler, and how the CUDA runtime's
directory is found for an nvcc (without one: a stand-in file)."""

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


def test_a_cpp_function_keeps_its_parameter_names_beside_cuda_sources():
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    m = cpp.load_inline("mixed_sources", "int64_t same(int64_t n) { return n; }",
                        cuda_sources="__global__ void unused_kernel() {}", functions=["same"])
    assert m.same.signature_text == "n:int->int" and m.same(n=3) == 3
