"""`tensorplug config --cflags/--cxxflags/--ldflags/--libs`: a Makefile builds kernel
libraries with exactly those flags (real make + compiler runs)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tensorplug
from tensorplug import cpp

ROOT = Path(__file__).resolve().parents[2]
TENSORPLUG = [sys.executable, "-m", "tensorplug"]


def config(*flags):
    proc = subprocess.run([*TENSORPLUG, "config", *flags], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_flags_name_this_installation():
    include, lib = cpp.include_dir(), cpp.lib_dir()
    script = Path(cpp.cmake_dir()) / "kernel_library.map"
    assert script.is_file()
    assert config("--cflags") == f"-I{include} -fPIC -fvisibility=hidden\n"
    assert config("--cxxflags") == f"-I{include} -std=c++17 -fPIC -fvisibility=hidden -fvisibility-inlines-hidden\n"
    assert config("--ldflags") == f"-L{lib} -Wl,-rpath,{lib} -Wl,--exclude-libs,ALL -Wl,--version-script={script}\n"
    assert config("--libs") == "-ltensorplug\n"
    # Several on one line, in a fixed order, whatever order they were asked in.
    assert config("--libs", "--ldflags", "--cxxflags") == (
        f"-I{include} -std=c++17 -fPIC -fvisibility=hidden -fvisibility-inlines-hidden -L{lib} -Wl,-rpath,{lib} "
        f"-Wl,--exclude-libs,ALL -Wl,--version-script={script} -ltensorplug\n")


MAKEFILE = """\
TENSORPLUG ?= tensorplug
CXXFLAGS := $(shell $(TENSORPLUG) config --cxxflags) -O2
CFLAGS := $(shell $(TENSORPLUG) config --cflags) -std=c11 -O2
LDFLAGS := $(shell $(TENSORPLUG) config --ldflags)
LDLIBS := $(shell $(TENSORPLUG) config --libs)

all: libtriple.so libadd_one.so

libtriple.so: triple.cc
\t$(CXX) $(CXXFLAGS) -shared -o $@ $< $(LDFLAGS) $(LDLIBS)

libadd_one.so: add_one.c
\t$(CC) $(CFLAGS) -shared -o $@ $< $(LDFLAGS) $(LDLIBS)
"""


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_makefile_builds_c_and_cxx_kernel_libraries(tmp_path):
    np = pytest.importorskip("numpy", reason="numpy not installed")
    (tmp_path / "Makefile").write_text(MAKEFILE)
    (tmp_path / "triple.cc").write_text(
        "#include <tensorplug/tensorplug.h>\n"
        "int64_t triple(int64_t x) { return 3 * x; }\n"
        "int64_t hidden_helper() { return 1; }\n"
        "TENSORPLUG_EXPORT(triple, triple, \"x\");\n")
    shutil.copy(ROOT / "examples" / "c_kernel" / "add_one.c", tmp_path)
    tensorplug_cmd = " ".join(TENSORPLUG)
    proc = subprocess.run(["make", f"TENSORPLUG={tensorplug_cmd}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"-I{cpp.include_dir()} -std=c++17 -fPIC -fvisibility=hidden -fvisibility-inlines-hidden -O2 -shared" \
        in proc.stdout

    triple = tensorplug.load_module(tmp_path / "libtriple.so")
    assert triple.functions == ("triple",)
    assert triple.triple(14) == 42
    exported = subprocess.run(["nm", "-D", "--defined-only", str(tmp_path / "libtriple.so")], capture_output=True,
                              text=True, check=True).stdout
    assert "hidden_helper" not in exported and "__tensorplugabi_version" in exported

    add_one = tensorplug.load_module(tmp_path / "libadd_one.so")
    x = np.arange(4, dtype=np.float32)
    out = np.zeros_like(x)
    add_one.add_one(x, out)
    np.testing.assert_array_equal(out, x + 1)
