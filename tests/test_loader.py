"""Loading kernel libraries, and the errors for everything that is not one."""

import inspect
import subprocess

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
