"""The ABI guard: every library compiled with c_api.h records the ABI it was built for
(`__tensorplugabi_version`), and the loader refuses another ABI before any of the
library's code runs. Each library here is compiled by a real compiler run."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import tensorplug
from tensorplug import _core, cpp

ROOT = Path(__file__).resolve().parents[2]
ADD_ONE = ROOT / "examples" / "c_kernel" / "add_one.c"
ABI_SYMBOL = "__tensorplugabi_version"


def _compile(sources, out, *flags, includes=None, cxx=False):
    includes = includes or cpp.include_dir()
    cmd = ["c++" if cxx else "cc", "-shared", "-fPIC", "-fvisibility=hidden", f"-I{includes}", *flags,
           *map(str, sources), "-o", str(out), f"-L{cpp.lib_dir()}", "-ltensorplug", f"-Wl,-rpath,{cpp.lib_dir()}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def _abi_symbols(library):
    """(type, binding, visibility) of each `__tensorplugabi_version` entry in the dynamic symbol table."""
    out = subprocess.run(["readelf", "--dyn-syms", "--wide", str(library)], capture_output=True, text=True,
                         check=True).stdout
    return [(f[3], f[4], f[5]) for f in (line.split() for line in out.splitlines()) if f and f[-1] == ABI_SYMBOL]


def _nm_abi_symbols(library):
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                         check=True).stdout
    return [line for line in out.splitlines() if line.endswith(ABI_SYMBOL)]


def test_runtime_abi_matches_the_header():
    header = (Path(cpp.include_dir()) / "tensorplug" / "c_api.h").read_text()
    assert _core.abi_version() == int(re.search(r"#define TENSORPLUG_ABI_VERSION (\d+)", header).group(1)) == 1


def test_library_of_c_and_cxx_units_records_the_abi_once(tmp_path):
    # Three translation units (C and C++, all -fvisibility=hidden) each define the weak
    # record; the linked library exports exactly one.
    (tmp_path / "helper.c").write_text("#include <tensorplug/c_api.h>\nint helper_c(void) { return 1; }\n")
    (tmp_path / "kern.cc").write_text(
        "#include <tensorplug/tensorplug.h>\n"
        "int64_t twice(int64_t x) { return 2 * x; }\n"
        "TENSORPLUG_EXPORT(twice, twice, \"x\");\n")
    objects = []
    for src, compiler, std in [(ADD_ONE, "cc", "-std=c11"), (tmp_path / "helper.c", "cc", "-std=c11"),
                               (tmp_path / "kern.cc", "c++", "-std=c++17")]:
        obj = tmp_path / (src.stem + ".o")
        subprocess.run([compiler, std, "-Wall", "-Wextra", "-fPIC", "-fvisibility=hidden", f"-I{cpp.include_dir()}",
                        "-c", str(src), "-o", str(obj)], check=True)
        objects.append(obj)
    lib = tmp_path / "libmixed.so"
    subprocess.run(["c++", "-shared", *map(str, objects), "-o", str(lib), f"-L{cpp.lib_dir()}", "-ltensorplug",
                    f"-Wl,-rpath,{cpp.lib_dir()}"], check=True)
    assert _abi_symbols(lib) == [("OBJECT", "WEAK", "DEFAULT")]
    m = tensorplug.load_module(lib)
    assert m.functions == ("add_one", "twice")
    assert m.twice(21) == 42


def test_libtensorplug_itself_has_no_record():
    assert _abi_symbols(Path(cpp.lib_dir()) / "libtensorplug.so") == []


@pytest.mark.parametrize("other_abi", [2, 0])
def test_library_built_for_another_abi_is_refused_before_its_code_runs(tmp_path, other_abi):
    # The headers of a (future, 2, or older, 0) tensorplug: the same files, the version macro changed.
    include = tmp_path / "include"
    shutil.copytree(cpp.include_dir(), include)
    header = include / "tensorplug" / "c_api.h"
    text = header.read_text()
    assert "#define TENSORPLUG_ABI_VERSION 1\n" in text
    header.write_text(text.replace("#define TENSORPLUG_ABI_VERSION 1\n", f"#define TENSORPLUG_ABI_VERSION {other_abi}\n"))
    # A static constructor that would leave a marker file if the library's code ever ran.
    marker = tmp_path / "constructor-ran"
    (tmp_path / "ctor.c").write_text(
        "#include <stdio.h>\n"
        "__attribute__((constructor)) static void mark(void) {\n"
        f"  FILE* f = fopen(\"{marker}\", \"w\"); if (f) fclose(f);\n"
        "}\n")
    lib = _compile([ADD_ONE, tmp_path / "ctor.c"], tmp_path / f"libabi{other_abi}.so", "-std=c11", includes=include)
    assert _abi_symbols(lib) == [("OBJECT", "WEAK", "DEFAULT")]
    with pytest.raises(ValueError) as info:
        tensorplug.load_module(lib)
    assert str(info.value) == (
        f"kernel library '{lib}' was built for tensorplug ABI {other_abi}, this runtime is ABI 1: rebuild it against the "
        "headers of the installed tensorplug (tensorplug config --includedir)")
    assert not marker.exists(), "the refused library's constructor ran"
    # The same sources against the installed headers load and run.
    ok = _compile([ADD_ONE, tmp_path / "ctor.c"], tmp_path / "libabi_current.so", "-std=c11")
    assert tensorplug.load_module(ok).functions == ("add_one",)
    assert marker.exists()


# A kernel written without c_api.h: the calling convention declared by hand, as a library
# from before the ABI record (or from another language) would.
HAND_WRITTEN = r"""
#include <stdint.h>
typedef struct { int32_t type_index; uint32_t flags; union { int64_t v_int64; double v_float64; }; } Value;
__attribute__((visibility("default")))
int __tensorplug_answer(void* self, const Value* args, int32_t nargs, Value* result) {
  (void)self; (void)args; (void)nargs;
  result->type_index = 1; /* kTPInt */
  result->flags = 0;
  result->v_int64 = 42;
  return 0;
}
"""


def test_library_without_record_is_taken_as_abi_1(tmp_path):
    (tmp_path / "hand.c").write_text(HAND_WRITTEN)
    lib = tmp_path / "libhand.so"
    subprocess.run(["cc", "-std=c11", "-shared", "-fPIC", str(tmp_path / "hand.c"), "-o", str(lib)], check=True)
    assert _abi_symbols(lib) == []
    # This runtime is ABI 1, the ABI such libraries were written for: it loads.
    m = tensorplug.load_module(lib)
    assert m.answer() == 42


@pytest.mark.parametrize("definition, why", [
    ("const int64_t __tensorplugabi_version = 1;", "8 bytes"),
    ("int32_t __tensorplugabi_version;", "zero-filled (.bss), no value in the file"),
])
def test_malformed_record_is_refused(tmp_path, definition, why):
    (tmp_path / "bad.c").write_text(
        HAND_WRITTEN + f'__attribute__((visibility("default"))) {definition}\n')
    lib = tmp_path / "libbad.so"
    subprocess.run(["cc", "-std=c11", "-fno-common", "-shared", "-fPIC", str(tmp_path / "bad.c"), "-o", str(lib)],
                   check=True)
    assert len(_nm_abi_symbols(lib)) == 1, why
    with pytest.raises(ValueError) as info:
        tensorplug.load_module(lib)
    assert str(info.value) == (f"{lib} is not a loadable shared library: its ABI record {ABI_SYMBOL} is not a "
                               "readable int32")
