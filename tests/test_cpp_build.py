"""cpp.build / cpp.load_inline: real compiler runs, caching, compile errors."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tensorplug
from tensorplug import cpp

np = pytest.importorskip("numpy")

ROOT = Path(__file__).resolve().parents[1]

SAXPY = r"""
void saxpy(tensorplug::TensorView x, tensorplug::MutableView y, double a) {
  TENSORPLUG_CHECK(x.numel() == y.numel(), ValueError) << "x and y differ in size";
  const float* px = x.data_ptr<float>();
  float* py = static_cast<float*>(y.mutable_data_ptr());
  for (int64_t i = 0; i < x.numel(); ++i) py[i] += static_cast<float>(a) * px[i];
}
int64_t twice(int64_t v) { return 2 * v; }
"""


@pytest.fixture(scope="module")
def inline_module():
    return cpp.load_inline("inline_saxpy", SAXPY, functions=["saxpy", "twice"])


def test_load_inline_generates_exports_with_parameter_names(inline_module):
    x = np.ones(4, dtype=np.float32)
    y = np.arange(4, dtype=np.float32)
    inline_module.saxpy(x, y, 2.0)
    np.testing.assert_array_equal(y, [2, 3, 4, 5])
    assert inline_module.twice(21) == 42
    assert inline_module.saxpy.signature_text == "x:view;y:mview;a:float->void"
    with pytest.raises(ValueError, match="x and y differ in size"):
        inline_module.saxpy(x, np.ones(2, dtype=np.float32), 1.0)


def test_build_is_cached_by_content(inline_module):
    path = Path(inline_module.path)
    mtime = path.stat().st_mtime_ns
    again = cpp.load_inline("inline_saxpy", SAXPY, functions=["saxpy", "twice"])
    assert Path(again.path) == path and path.stat().st_mtime_ns == mtime
    changed = cpp.load_inline("inline_saxpy", SAXPY + "\n// changed\n", functions=["twice"])
    assert Path(changed.path) != path
    assert changed.functions == ("twice",)


def test_cache_directory_follows_the_environment(tmp_path):
    code = ("import tensorplug; from tensorplug import cpp; "
            "m = cpp.load_inline('envcache', 'int64_t one() { return 1; }', functions=['one']); print(m.path)")
    env = dict(os.environ, TENSORPLUG_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert Path(out.stdout.strip()).is_relative_to(tmp_path)


def test_compile_error_carries_the_compiler_message():
    with pytest.raises(cpp.BuildError, match=r"(?s)compilation failed.*undeclared_thing"):
        cpp.load_inline("broken", "int64_t f() { return undeclared_thing; }", functions=["f"])


def test_bad_build_arguments(tmp_path):
    with pytest.raises(ValueError, match="expected an identifier"):
        cpp.build("bad name", [tmp_path / "x.cc"])
    with pytest.raises(FileNotFoundError, match="source not found"):
        cpp.build("missing", [tmp_path / "nope.cc"])


def test_standalone_cpp_program_uses_the_runtime_without_python(tmp_path):
    exe = tmp_path / "runtime_test"
    subprocess.run(["c++", "-std=c++17", "-O1", f"-I{cpp.include_dir()}", str(ROOT / "tests" / "cpp" / "runtime_test.cc"),
                    "-o", str(exe), f"-L{cpp.lib_dir()}", "-ltensorplug", f"-Wl,-rpath,{cpp.lib_dir()}", "-pthread"],
                   check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "checks passed" in out.stdout
    # It really ran without Python: the binary does not link libpython.
    ldd = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    assert "libpython" not in ldd and "libtensorplug" in ldd


def test_cmake_package_finds_the_library(tmp_path):
    if shutil.which("cmake") is None:
        pytest.skip("cmake not installed")
    (tmp_path / "k.cc").write_text('#include <tensorplug/tensorplug.h>\nint64_t one() { return 1; }\n'
                                   'TENSORPLUG_EXPORT(one, one);\n')
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(k CXX)\nfind_package(tensorplug CONFIG REQUIRED)\n"
        "add_library(k SHARED k.cc)\ntarget_link_libraries(k PRIVATE tensorplug::tensorplug)\n")
    build = tmp_path / "build"
    subprocess.run(["cmake", "-S", str(tmp_path), "-B", str(build), f"-Dtensorplug_DIR={cpp.cmake_dir()}"],
                   check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(build)], check=True, capture_output=True)
    assert tensorplug.load_module(build / "libk.so").one() == 1
