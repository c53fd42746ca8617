"""The installed CMake package: find_package(tensorplug <version> CONFIG) and
tensorplug_add_kernel_library(), with real cmake runs."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tensorplug import cpp

CMAKE = shutil.which("cmake") or shutil.which("cmake", path=str(Path(sys.executable).parent))
pytestmark = pytest.mark.skipif(CMAKE is None, reason="cmake not installed")

KERNEL = textwrap.dedent("""
    #include <tensorplug/tensorplug.h>
    int64_t triple(int64_t x) { return 3 * x; }
    int64_t not_exported_helper() { return 7; }
    TENSORPLUG_EXPORT(triple, triple, "x");
""")


def _project(tmp_path, body, kernel=KERNEL):
    source = tmp_path / "src"
    source.mkdir()
    (source / "kernel.cc").write_text(kernel)
    (source / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(consumer LANGUAGES CXX)\n" + textwrap.dedent(body))
    return source


def _configure(source, build, *extra):
    return subprocess.run([CMAKE, "-S", str(source), "-B", str(build), f"-Dtensorplug_DIR={cpp.cmake_dir()}",
                           *extra], capture_output=True, text=True, timeout=600)


def _ok(proc):
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_version_file_is_installed():
    text = (Path(cpp.cmake_dir()) / "tensorplugConfigVersion.cmake").read_text()
    assert 'set(PACKAGE_VERSION "0.1.0")' in text


@pytest.mark.parametrize("request_", ["", "0.1", "0.1.0 EXACT"])
def test_find_package_accepts_this_version(tmp_path, request_):
    source = _project(tmp_path, f"""
        find_package(tensorplug {request_} CONFIG REQUIRED)
        message(STATUS "found tensorplug ${{tensorplug_VERSION}} ABI ${{tensorplug_ABI_VERSION}}")
        get_target_property(soname tensorplug::tensorplug IMPORTED_SONAME)
        message(STATUS "soname ${{soname}}")
    """)
    out = _ok(_configure(source, tmp_path / "build")).stdout
    assert "found tensorplug 0.1.0 ABI 1" in out
    assert "soname libtensorplug.so" in out


@pytest.mark.parametrize("request_", ["0.2", "1.0", "0.0"])
def test_find_package_refuses_another_minor_version(tmp_path, request_):
    source = _project(tmp_path, f"find_package(tensorplug {request_} CONFIG REQUIRED)\n")
    proc = _configure(source, tmp_path / "build")
    assert proc.returncode != 0
    message = " ".join(proc.stderr.split())
    assert f'Could not find a configuration file for package "tensorplug" that is compatible with requested ' \
           f'version "{request_}"' in message
    assert "0.1.0" in message  # the version that was found


def _readelf_dynamic(library):
    out = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out)
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.+?)\]", out)
    return needed, runpath


def _dynamic_symbols(library):
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                         check=True).stdout
    return sorted(line.split()[-1] for line in out.splitlines())


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A site-packages-like prefix where one CMake project installed two kernel libraries:
    {destination: installed path}."""
    tmp = tmp_path_factory.mktemp("cmake_kernels")
    source = _project(tmp, """
        find_package(tensorplug 0.1 CONFIG REQUIRED)
        tensorplug_add_kernel_library(triple DESTINATION mykernels kernel.cc)
        tensorplug_add_kernel_library(triple_deep DESTINATION vendor/mykernels/lib/ kernel.cc)
    """)
    build, prefix = tmp / "build", tmp / "site"
    _ok(_configure(source, build, "-DCMAKE_BUILD_TYPE=Release"))
    _ok(subprocess.run([CMAKE, "--build", str(build)], capture_output=True, text=True, timeout=600))
    _ok(subprocess.run([CMAKE, "--install", str(build), "--prefix", str(prefix)], capture_output=True, text=True))
    return prefix, {"mykernels": prefix / "mykernels" / "libtriple.so",
                    "vendor/mykernels/lib/": prefix / "vendor" / "mykernels" / "lib" / "libtriple_deep.so"}


@pytest.mark.parametrize("destination, runpath", [
    ("mykernels", "$ORIGIN/../tensorplug/lib"),
    ("vendor/mykernels/lib/", "$ORIGIN/../../../tensorplug/lib"),
])
def test_add_kernel_library_builds_installs_and_sets_the_runpath(installed, destination, runpath):
    import tensorplug

    library = installed[1][destination]
    assert library.is_file()
    needed, paths = _readelf_dynamic(library)
    assert "libtensorplug.so" in needed and not [n for n in needed if "python" in n]
    assert paths == [runpath]
    # Hidden visibility: the kernel, its signature and the ABI record, nothing else of ours.
    ours = [s for s in _dynamic_symbols(library) if not s.startswith(("_init", "_fini"))]
    assert [s for s in ours if "tensorplug" in s or "helper" in s] == [
        "__tensorplug_triple", "__tensorplugabi_version", "__tensorplugsig_triple"]
    m = tensorplug.load_module(library)
    assert m.triple(14) == 42


def test_installed_runpath_finds_libtensorplug_without_importing_tensorplug(installed, tmp_path):
    # The prefix holds the kernel and (a link to) the tensorplug package: a process that
    # never imports tensorplug opens the kernel, and the runpath finds libtensorplug.so.
    # Subprocess: a failure here is a failed dlopen, not a crash of the test process.
    prefix, libraries = installed
    link = prefix / "tensorplug"
    if not link.exists():
        link.symlink_to(Path(cpp.lib_dir()).parent, target_is_directory=True)
    script = textwrap.dedent(f"""
        import ctypes, json, sys
        for path in {[str(p) for p in libraries.values()]!r}:
            ctypes.CDLL(path)
        assert "tensorplug" not in sys.modules
        maps = open("/proc/self/maps").read()
        print(json.dumps(sorted({{l.split()[-1] for l in maps.splitlines() if l.endswith("libtensorplug.so")}})))
    """)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = _ok(subprocess.run([sys.executable, "-S", "-c", script], capture_output=True, text=True, env=env))
    (loaded,) = json.loads(proc.stdout)
    assert Path(loaded).resolve() == (Path(cpp.lib_dir()) / "libtensorplug.so").resolve()


@pytest.mark.parametrize("destination", ["../outside", "/abs/path", "a/./b"])
def test_add_kernel_library_refuses_a_destination_outside_the_prefix(tmp_path, destination):
    source = _project(tmp_path, f"""
        find_package(tensorplug 0.1 CONFIG REQUIRED)
        tensorplug_add_kernel_library(triple DESTINATION {destination} kernel.cc)
    """)
    proc = _configure(source, tmp_path / "build")
    assert proc.returncode != 0
    assert ("tensorplug_add_kernel_library(triple): DESTINATION must be a relative directory inside the install "
            f"prefix without . or .. components, got '{destination}'") in " ".join(proc.stderr.split())


def test_add_kernel_library_without_sources_fails(tmp_path):
    source = _project(tmp_path, """
        find_package(tensorplug 0.1 CONFIG REQUIRED)
        tensorplug_add_kernel_library(triple DESTINATION mykernels)
    """)
    proc = _configure(source, tmp_path / "build")
    assert proc.returncode != 0
    assert "tensorplug_add_kernel_library(triple): no source files given" in proc.stderr


def test_a_python_api_call_fails_the_link_not_the_load(tmp_path):
    # --no-undefined: a kernel library that calls into Python without linking libpython
    # would load only inside some interpreters; the helper makes it a link error.
    kernel = KERNEL + 'extern "C" void* PyLong_FromLong(long);\nvoid* boxed() { return PyLong_FromLong(1); }\n'
    source = _project(tmp_path, """
        find_package(tensorplug 0.1 CONFIG REQUIRED)
        tensorplug_add_kernel_library(triple DESTINATION mykernels kernel.cc)
    """, kernel=kernel)
    build = tmp_path / "build"
    _ok(_configure(source, build))
    proc = subprocess.run([CMAKE, "--build", str(build)], capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "undefined reference to `PyLong_FromLong'" in proc.stdout + proc.stderr


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) not installed")
def test_kernel_library_exports_only_its_functions_and_the_abi_record(tmp_path):
    # std:: template instantiations escape -fvisibility=hidden (libstdc++ declares namespace
    # std with default visibility); the helper's version script keeps them local.
    from test_cpp_build import EXPORTED, STD_HEAVY, dynamic_symbols

    source = _project(tmp_path, """
        find_package(tensorplug CONFIG REQUIRED)
        tensorplug_add_kernel_library(std_heavy kernel.cc)
    """, kernel=STD_HEAVY)
    build = tmp_path / "build"
    _ok(_configure(source, build))
    _ok(subprocess.run([CMAKE, "--build", str(build)], capture_output=True, text=True, timeout=600))
    assert dynamic_symbols(build / "libstd_heavy.so") == EXPORTED


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm (binutils) not installed")
def test_the_runtime_exports_its_c_abi_and_no_cpp_runtime(tmp_path):
    """libtensorplug built by a compiler that links libstdc++ statically (the GPU machine's
    GCC did) exports the C ABI alone: exported, its copy of the C++ runtime was bound by
    kernel libraries built against the shared one, and the first `<< 3` of an error message
    crashed (two copies of the runtime's locale state)."""
    from test_cpp_build import static_runtime_compiler

    root = Path(__file__).resolve().parents[2]
    build = tmp_path / "build"
    _ok(subprocess.run([CMAKE, "-S", str(root), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
                        f"-DCMAKE_CXX_COMPILER={static_runtime_compiler(tmp_path)}"],
                       capture_output=True, text=True, timeout=600))
    _ok(subprocess.run([CMAKE, "--build", str(build), "--target", "tensorplug", "-j", str(os.cpu_count() or 2)],
                       capture_output=True, text=True, timeout=900))
    library = build / "libtensorplug.so"
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}
    assert "TPFunctionCall" in exported
    assert {name for name in exported if not name.startswith(("TP", "_ZN10tensorplug"))} == set()
