"""cpp.build / cpp.load_inline: real compiler runs, caching, compile errors."""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tensorplug
from tensorplug import cpp

np = pytest.importorskip("numpy")

ROOT = Path(__file__).resolve().parents[2]

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


# ------------------------------------------------------- never stale code ----
def _version_source(value: int, header: str = "") -> str:
    return (f"#include <tensorplug/tensorplug.h>\n{header}\n"
            f"int64_t version() {{ return {value}; }}\nTENSORPLUG_EXPORT(version, version);\n")


def _version_of(path: str) -> int:
    # A new process: this one keeps the first build of a path (test_loader.py).
    code = f"import tensorplug; print(tensorplug.load_module({path!r}).version())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


def test_build_directory_rebuilds_when_sources_flags_or_headers_change(tmp_path):
    src, header, out = tmp_path / "v.cc", tmp_path / "inc" / "value.h", tmp_path / "out"
    header.parent.mkdir()
    header.write_text("#define EXTRA 0\n")
    src.write_text(_version_source(1))
    path = cpp.build("versioned", [src], build_directory=out)
    assert _version_of(path) == 1
    mtime = Path(path).stat().st_mtime_ns
    assert cpp.build("versioned", [src], build_directory=out) == path
    assert Path(path).stat().st_mtime_ns == mtime  # unchanged inputs: not compiled again

    src.write_text(_version_source(2))  # an edited source
    assert _version_of(cpp.build("versioned", [src], build_directory=out)) == 2
    # A flag change.
    src.write_text(_version_source("VALUE"))
    assert _version_of(cpp.build("versioned", [src], extra_cflags=["-DVALUE=3"], build_directory=out)) == 3
    assert _version_of(cpp.build("versioned", [src], extra_cflags=["-DVALUE=4"], build_directory=out)) == 4
    # A header the source includes, from include_dirs.
    src.write_text(_version_source("40 + EXTRA", '#include "value.h"'))
    flags = {"include_dirs": [header.parent], "build_directory": out}
    assert _version_of(cpp.build("versioned", [src], **flags)) == 40
    header.write_text("#define EXTRA 2\n")
    assert _version_of(cpp.build("versioned", [src], **flags)) == 42


def test_build_directory_rebuilds_when_the_compiler_changes(tmp_path, monkeypatch):
    # Another compiler file behind $CXX: a wrapper script that defines a macro, as a
    # different compiler version would compile differently.
    src = tmp_path / "v.cc"
    src.write_text(_version_source("COMPILER_VALUE"))
    wrapper = tmp_path / "bin" / "cxx-wrapper"
    wrapper.parent.mkdir()
    real = shutil.which("c++")
    wrapper.write_text(f'#!/bin/sh\nexec {real} -DCOMPILER_VALUE=1 "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", str(wrapper))
    path = cpp.build("by_compiler", [src], build_directory=tmp_path / "out")
    assert _version_of(path) == 1
    wrapper.write_text(f'#!/bin/sh\nexec {real} -DCOMPILER_VALUE=2 "$@"\n')  # the same path, another compiler
    assert _version_of(cpp.build("by_compiler", [src], build_directory=tmp_path / "out")) == 2


# A kernel using std containers, strings, shared_ptr, function and algorithms: each leaves
# std:: template instantiations in the object file.
STD_HEAVY = r"""
#include <tensorplug/tensorplug.h>
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>
static std::map<std::string, int>& Registry() { static std::map<std::string, int> r; return r; }
int64_t count(tensorplug::TensorView x, std::string key) {
  std::vector<int64_t> v(size_t(x.numel()));
  std::sort(v.begin(), v.end());
  std::unordered_map<std::string, std::shared_ptr<int>> u;
  u[key] = std::make_shared<int>(3);
  std::function<int(int)> f = [](int a) { return a + 1; };
  Registry()[key] += f(1);
  return int64_t(v.size()) + Registry()[key] + *u[key];
}
TENSORPLUG_EXPORT(count, count, "x", "key");
"""
EXPORTED = {"__tensorplug_count", "__tensorplugsig_count", "__tensorplugabi_version"}


def dynamic_symbols(path) -> set[str]:
    """The defined symbols of a library's dynamic symbol table (`nm -D`)."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) not installed")
def test_build_exports_only_the_functions_and_the_abi_record(tmp_path):
    (tmp_path / "std_heavy.cc").write_text(STD_HEAVY)
    path = cpp.build("std_heavy", [tmp_path / "std_heavy.cc"], build_directory=tmp_path / "out")
    assert dynamic_symbols(path) == EXPORTED
    m = tensorplug.load_module(path)
    assert m.count(np.zeros(3), "a") == 8 and m.count(np.zeros(3), "a") == 10


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) not installed")
def test_config_flags_export_only_the_functions_and_the_abi_record(tmp_path):
    # By hand, as a Makefile does; a TP_EXPORT function of another name stays exported.
    (tmp_path / "std_heavy.cc").write_text(STD_HEAVY + 'extern "C" TP_EXPORT int helper_for_others(int x) { return x; }\n')
    flags = subprocess.run([sys.executable, "-m", "tensorplug", "config", "--cxxflags", "--ldflags", "--libs"],
                           capture_output=True, text=True, check=True).stdout.split()
    cxxflags = [f for f in flags if not f.startswith(("-L", "-Wl", "-l"))]
    ldflags = [f for f in flags if f.startswith(("-L", "-Wl", "-l"))]
    lib = tmp_path / "libstd_heavy.so"
    subprocess.run(["c++", *cxxflags, "-O2", "-shared", "-o", str(lib), str(tmp_path / "std_heavy.cc"), *ldflags],
                   check=True, capture_output=True, text=True)
    assert dynamic_symbols(lib) == EXPORTED | {"helper_for_others"}
    assert tensorplug.load_module(lib).count(np.zeros(2), "b") == 7


def static_runtime_compiler(directory: Path) -> str:
    """A `c++` that links the C++ runtime statically, as some compilers do by default (the
    GPU machine's GCC did): a wrapper script adding -static-libstdc++ to every link."""
    wrapper = directory / "static-c++"
    wrapper.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -c ] && exec c++ "$@"; done\n'
                       'exec c++ "$@" -static-libstdc++\n')
    wrapper.chmod(0o755)
    probe = subprocess.run([str(wrapper), "-x", "c++", "-shared", "-fPIC", "-o", str(directory / "probe.so"), "-"],
                           input="#include <string>\nstd::string probe() { return \"x\"; }\n", capture_output=True,
                           text=True)
    if probe.returncode != 0:
        pytest.skip(f"c++ cannot link libstdc++ statically (libstdc++.a not installed): {probe.stderr[-300:]}")
    return str(wrapper)


ERROR_WITH_NUMBERS = r"""
#include <tensorplug/tensorplug.h>
#include <sstream>
void refuse(tensorplug::TensorView x) {
  TENSORPLUG_CHECK(x.numel() == 0, ValueError) << "refuse: got " << x.numel() << " elements, " << 2.5 << " too many";
}
TENSORPLUG_EXPORT(refuse, refuse, "x");
"""


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) not installed")
def test_a_statically_linked_cpp_runtime_stays_inside_the_kernel_library(tmp_path, monkeypatch):
    # Exported, its std:: symbols would be bound by the next library loaded globally, which
    # then mixes two copies of the runtime's state (a crash on the first `<< 3`).
    monkeypatch.setenv("CXX", static_runtime_compiler(tmp_path))
    (tmp_path / "refuse.cc").write_text(ERROR_WITH_NUMBERS)
    path = cpp.build("refuse_static", [tmp_path / "refuse.cc"], build_directory=tmp_path / "out")
    assert dynamic_symbols(path) == {"__tensorplug_refuse", "__tensorplugsig_refuse", "__tensorplugabi_version"}
    with pytest.raises(ValueError, match=r"^refuse: got 3 elements, 2.5 too many \(check failed"):
        tensorplug.load_module(path).refuse(np.zeros(3))


def test_processes_building_one_kernel_at_once_build_it_once(tmp_path):
    # Ranks of a job (or test workers) call build() together: one builds, the others wait and
    # find it current. A second build would replace the file under a process that loaded the
    # first, whose next load_module of the path is then refused.
    (tmp_path / "once.cc").write_text(STD_HEAVY)
    start = time.time() + 3.0  # the processes start their builds together
    script = (f"import os, time\nfrom tensorplug import cpp\nwhile time.time() < {start}: pass\n"
              f"path = cpp.build('std_heavy', [{str(tmp_path / 'once.cc')!r}], "
              f"build_directory={str(tmp_path / 'out')!r})\nprint(os.stat(path).st_ino)\n")
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    inodes = {out.strip() for out, _ in outs}
    assert len(inodes) == 1, inodes  # one file: built once, never replaced


def test_a_build_error_shows_the_compilers_first_error_line_first(tmp_path, monkeypatch):
    # A misspelled name inside a TENSORPLUG_EXPORT'ed function: the compiler's notes about
    # templates run to pages; the message starts with the line that says what is wrong.
    monkeypatch.setenv("TENSORPLUG_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(cpp.BuildError) as info:
        cpp.load_inline("typo", "int64_t twice(int64_t x) { return 2 * xx; }", functions=["twice"])
    message = str(info.value)
    head, first_error = message.splitlines()[:2]
    assert head.startswith("compilation failed (exit 1) (full log: ") and head.endswith("build.log):")
    assert re.search(r"typo\.cc:2:\d+: error: .xx. was not declared", first_error), message
    log = Path(head.split("(full log: ", 1)[1].rstrip("):"))
    assert re.search(r"error: .xx. was not declared", log.read_text())
