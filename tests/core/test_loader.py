"""Loading kernel libraries, and the errors for everything that is not one."""

import inspect
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import tensorplug
from tensorplug import cpp


def test_module_lists_and_exposes_functions(kernels):
    assert {"add_one", "scale", "add", "noop", "fails"} <= set(kernels.functions)
    assert list(kernels.functions) == sorted(kernels.functions)
    assert "scale" in kernels and "nope" not in kernels
    assert kernels["scale"] is kernels.scale
    assert isinstance(kernels.scale, tensorplug.Function)
    assert kernels.scale.__name__ == "scale"


def test_missing_function_lists_the_available_ones(kernels):
    with pytest.raises(AttributeError, match=r"has no function 'nope'; it exports: .*add_one.*scale"):
        kernels.nope
    with pytest.raises(KeyError, match="has no function 'nope'"):
        kernels["nope"]


def test_signature_is_exported(kernels):
    sig = inspect.signature(kernels.scale)
    assert list(sig.parameters) == ["x", "y", "alpha"]
    assert sig.parameters["alpha"].annotation == "float"
    assert kernels.scale.signature_text == "x:view;y:mview;alpha:float->void"


def test_missing_path():
    with pytest.raises(FileNotFoundError, match="no such file: /no/such/lib.so"):
        tensorplug.load_module("/no/such/lib.so")


def test_file_that_is_not_a_shared_library(tmp_path):
    path = tmp_path / "notes.so"
    path.write_text("not an ELF file")
    with pytest.raises(ValueError, match="is not a loadable shared library"):
        tensorplug.load_module(path)


def test_directory_is_not_a_library(tmp_path):
    with pytest.raises(ValueError, match="is not a file"):
        tensorplug.load_module(tmp_path)


def test_shared_library_without_tensorplug_functions(tmp_path):
    src = tmp_path / "plain.c"
    src.write_text("int plain_function(int x) { return x + 1; }\n")
    lib = tmp_path / "libplain.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    with pytest.raises(ValueError, match="exports no tensorplug function"):
        tensorplug.load_module(lib)


def test_library_with_unresolved_symbols(tmp_path):
    src = tmp_path / "broken.c"
    src.write_text("extern int missing_symbol(void);\n"
                   "int __tensorplug_f(void* s, const void* a, int n, void* r) { return missing_symbol(); }\n")
    lib = tmp_path / "libbroken.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    with pytest.raises(ValueError, match="cannot load .*missing_symbol"):
        tensorplug.load_module(lib)


def test_function_objects_survive_their_module(kernels):
    m = tensorplug.load_module(kernels.path)
    noop = m.noop
    del m
    assert noop() is None


# ------------------------------------------------------- which file is loaded ----
def _versioned(directory, value: int, name: str = "versioned"):
    """Build a library whose version() returns `value` into `directory` (kept at one path)."""
    directory.mkdir(parents=True, exist_ok=True)
    src = directory / f"{name}_{value}.cc"
    src.write_text("#include <tensorplug/tensorplug.h>\n"
                   f"int64_t version() {{ return {value}; }}\nTENSORPLUG_EXPORT(version, version);\n")
    return cpp.build(name, [src], build_directory=directory / "build")


def test_a_library_rebuilt_at_a_loaded_path_is_refused(tmp_path):
    first = _versioned(tmp_path, 1)
    assert tensorplug.load_module(first).version() == 1
    second = _versioned(tmp_path, 2)  # the same path, new code
    assert second == first
    with pytest.raises(RuntimeError) as info:
        tensorplug.load_module(second)
    assert str(info.value) == (
        f"kernel library '{second}' changed on disk since this process loaded it: a process runs the build of a "
        "path it loaded first (the dynamic loader returns that one), so load the new build in a new process, or "
        "build it at another path (tensorplug.cpp.build without build_directory puts each build in a directory "
        "named by its contents)")
    code = f"import tensorplug; print(tensorplug.load_module({second!r}).version())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout == "2\n"


def test_an_unchanged_library_loads_again(tmp_path):
    path = _versioned(tmp_path, 5, "unchanged")
    assert tensorplug.load_module(path).version() == 5
    assert tensorplug.load_module(path).version() == 5


def test_relative_paths_and_bare_names_are_files_of_the_working_directory(tmp_path):
    # A bare name is ./name (never searched for on LD_LIBRARY_PATH), and a relative path
    # names the file of the working directory at the call, also after a chdir.
    here, elsewhere, on_search_path = tmp_path / "here", tmp_path / "elsewhere", tmp_path / "search"
    for directory, value in ((here, 1), (elsewhere, 2), (on_search_path, 3)):
        (directory / "sub").mkdir(parents=True)
        built = _versioned(tmp_path / f"build{value}", value)
        shutil.copy(built, directory / "libk.so")
        shutil.copy(built, directory / "sub" / "libk.so")
    script = textwrap.dedent(f"""
        import os, tensorplug
        os.chdir({str(here)!r})
        print(tensorplug.load_module("libk.so").version(), tensorplug.load_module("sub/libk.so").version())
        os.chdir({str(elsewhere)!r})
        print(tensorplug.load_module("libk.so").version(), tensorplug.load_module("sub/libk.so").version())
        os.chdir({str(tmp_path)!r})
        try:
            tensorplug.load_module("libk.so")
        except FileNotFoundError as e:
            print(e)
    """)
    env = dict(os.environ, LD_LIBRARY_PATH=str(on_search_path))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["1 1", "2 2", "no such file: libk.so"]
