"""The conformance kit's function checks on a binary of apache tvm-ffi's ABI (issue 42 item 4).

The kit's kernels written in tvm-ffi's source form (core/tensorplug/testing/kernels_tvm_ffi.cc)
are built by the real ``tvm_ffi.cpp.build_inline`` and loaded unchanged by tensorplug; the kit's
function checks (exchange, dtypes, layouts, read-only, stream, allocator, output, errors, mixed,
lists, ints) then run on them over every installed adapter, as they run on kernels.cc in
tests/kit/test_conformance.py. This module's ``tensorplug_kernels`` fixture does what the kit's
option ``--tensorplug-kernels=tvm-ffi`` does, building into a temporary directory. The
capabilities of tensorplug's own declarations (compiler, gradients) stay with kernels.cc.
"""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.tensorplug_kernels("tvm-ffi")  # the capability report's rows say so

pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi not installed (pip install \"tensorplug[tvm-ffi]\")")

from tensorplug.testing import tvm_ffi_kernels  # noqa: E402
from tensorplug.testing.conformance import (TestAllocator, TestDtypes, TestErrors, TestExchange,  # noqa: E402,F401
                                            TestInts, TestLayouts, TestLists, TestMixed, TestOutput, TestReadOnly,
                                            TestStream)


@pytest.fixture(scope="session")
def tensorplug_kernels(tmp_path_factory):
    return tvm_ffi_kernels.load(tmp_path_factory.mktemp("kit_tvm_ffi"))


def test_the_kits_kernels_are_a_tvm_ffi_binary(tensorplug_kernels):
    from tensorplug.tvm_ffi import exported_functions

    library = tensorplug_kernels.module
    tvm, own = exported_functions(library.path)
    assert own == ()
    assert {"identity", "describe", "fill", "add_one", "alloc_like", "pair", "raise_error"} <= set(tvm)
    # signatures from tvm-ffi's metadata; the written parameter declared
    assert tensorplug_kernels.fill.signature_text == "arg0:mview;arg1:float->void"
    assert tensorplug_kernels.identity.signature_text == "arg0:tensor->tensor"
    assert tensorplug_kernels.pair.signature_text == "arg0:view->tuple"


def test_a_kernel_the_library_lacks_skips_naming_why(tensorplug_kernels):
    with pytest.raises(pytest.skip.Exception, match=r"tvm-ffi kernel library has no 'stream_of': tvm-ffi keeps "
                                                    r"no CPU stream"):
        tensorplug_kernels.stream_of
    with pytest.raises(AttributeError):
        tensorplug_kernels.no_such_kernel


def test_the_kit_option_runs_the_checks_on_the_tvm_ffi_library(pytester, monkeypatch, tmp_path):
    """``--tensorplug-kernels=tvm-ffi`` runs the kit itself on the tvm-ffi library (built into
    TVM_FFI_CACHE_DIR, here a temporary directory); the errors capability passes for numpy."""
    monkeypatch.setenv("TVM_FFI_CACHE_DIR", str(tmp_path / "tvm-ffi-cache"))
    result = pytester.runpytest_subprocess("--pyargs", "tensorplug.testing.conformance", "-p", "no:cacheprovider",
                                           "--tensorplug-adapter=numpy", "--tensorplug-kernels=tvm-ffi",
                                           "-k", "TestErrors and own-device or keep_type", "-rs")
    result.assert_outcomes(passed=2)
    # The capability report keeps these rows apart from the adapter's own (kernels.cc's).
    result.stdout.fnmatch_lines(["numpy (the kit's tvm-ffi kernels)", "  errors  * passed *"])
    assert not any(line.strip() == "numpy" for line in result.stdout.lines)
    assert list((tmp_path / "tvm-ffi-cache").glob("tensorplug_conformance_tvm_ffi_kernels_*/*.so"))
    bad = pytester.runpytest_subprocess("--pyargs", "tensorplug.testing.conformance", "--tensorplug-kernels=tvm")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*--tensorplug-kernels: invalid choice: 'tvm' (choose from*tensorplug*tvm-ffi*"])
