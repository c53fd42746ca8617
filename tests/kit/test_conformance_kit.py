"""The conformance kit itself: adapter selection, skip reasons, the capability report, and
that deliberately broken adapters are caught with failures naming the capability."""

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

np = pytest.importorskip("numpy", reason="numpy not installed")

# Three adapters for one tensor type each: a correct one, one that hands kernels C-contiguous
# strides whatever the real ones are, and one whose results are bare numpy arrays.
BROKEN_ADAPTERS = '''
import numpy as np
import tensorplug
from tensorplug.testing import Framework, numpy_view


class Box:
    def __init__(self, array):
        self.array = array


class StridesBox(Box):
    pass


class OutputBox(Box):
    pass


class FrozenBox(Box):
    """Speaks DLPack, as the kit's generic Framework reads tensors back through it."""

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def contiguous_strides_view(box):
    a = box.array
    return np.lib.stride_tricks.as_strided(a, a.shape, np.empty(a.shape, a.dtype).strides)


class Adapter:
    def __init__(self, name, box_type, to_dlpack=lambda box: box.array, wrap=None, framework="numpy",
                 read_only=False):
        self.name, self.box_type, self.framework = name, box_type, framework
        wrap = wrap or box_type
        self.table = tensorplug.ExchangeTable.from_python(
            name, from_dlpack=lambda t: wrap(np.from_dlpack(t)), to_dlpack=to_dlpack,
            allocate=lambda shape, dtype, device: box_type(np.empty(shape, dtype)), read_only=read_only)

    @tensorplug.hookimpl
    def tensorplug_adapter_info(self):
        return tensorplug.AdapterInfo(name=self.name, framework=self.framework, tensor_types=(self.box_type.__name__,),
                                      capabilities=("exchange", "allocator", "output"), fast_path=False)

    @tensorplug.hookimpl
    def tensorplug_exchange_table(self, tensor_type):
        return self.table if tensor_type is self.box_type else None

    @tensorplug.hookimpl
    def tensorplug_output_table(self, framework):
        return self.table if framework == self.name else None


class BoxFramework(Framework):
    module = "numpy"

    def __init__(self, name, box_type):
        self.name, self.box_type = name, box_type

    def from_numpy(self, array, device=None, dtype=None):
        return self.box_type(array.copy())

    def as_strided(self, base, shape, strides, offset):
        return self.box_type(numpy_view(base.array, shape, strides, offset))

    def to_numpy(self, x):
        return np.array(getattr(x, "array", x), copy=True)

    def data_ptr(self, x):
        return getattr(x, "array", x).__array_interface__["data"][0]

    def output_type(self):
        return self.box_type


ADAPTERS = [Adapter("box", Box), Adapter("wrong-strides", StridesBox, to_dlpack=contiguous_strides_view),
            Adapter("wrong-output", OutputBox, wrap=lambda array: array),
            Adapter("ghost", type("GhostTensor", (), {}), framework="ghost_framework"),
            Adapter("frozen", FrozenBox, read_only=True)]  # no Framework: the kit reads the declaration
FRAMEWORKS = {"box": Box, "wrong-strides": StridesBox, "wrong-output": OutputBox}


def pytest_configure(config):
    for adapter in ADAPTERS:
        tensorplug.register_adapter(adapter)


def pytest_tensorplug_framework(name):
    return BoxFramework(name, FRAMEWORKS[name]) if name in FRAMEWORKS else None
'''


def capability_report(stdout: str) -> dict[str, dict[str, str]]:
    """{adapter: {capability: status}} from the report at the end of a run."""
    report, adapter = {}, None
    for line in stdout.split("tensorplug capability report", 1)[1].splitlines()[1:]:
        if line.startswith("="):
            break
        if line and not line.startswith(" "):
            adapter = report.setdefault(line.strip(), {})
        elif line.strip():
            capability, *rest = line.split()
            adapter[capability] = "not provided" if rest[:2] == ["not", "provided"] else rest[0]
    return report


@pytest.fixture
def broken(pytester):
    pytester.makeconftest(BROKEN_ADAPTERS)
    return pytester


def test_broken_adapters_are_caught_naming_the_capability(broken):
    # Layouts the wrong-strides adapter can misreport without reading out of bounds.
    result = broken.runpytest_subprocess(
        "--pyargs", "tensorplug.testing.conformance", "-p", "no:cacheprovider",
        "--tensorplug-adapter=box,wrong-strides", "--tensorplug-adapter=wrong-output",
        "-k", "(TestLayouts or TestOutput or TestExchange) and not negative and not reversed and not broadcast")
    stdout = result.stdout.str()
    report = capability_report(stdout)
    assert report["box"] == {"exchange": "passed", "layouts": "passed", "output": "passed"}
    assert report["wrong-strides"]["layouts"] == "FAILED"
    assert report["wrong-output"]["output"] == "FAILED"
    assert report["wrong-output"]["exchange"] == "FAILED"
    result.stdout.fnmatch_lines([
        "*TestLayouts*test_kernel_sees_the_layout*wrong-strides-transposed*",
        "*the kernel sees strides (3, 1), not (1, 4)*",
        "*adapter 'wrong-strides' fails the 'layouts' capability*",
        "*adapter 'wrong-output' fails the 'output' capability*",
        "wrong-strides",
        "  layouts    FAILED   * failed: *",
    ])
    assert any("FAILED" in line and "test_kernel_sees_the_layout[wrong-strides-transposed]" in line
               for line in stdout.split("tensorplug capability report")[1].splitlines())
    failed = [line for line in stdout.splitlines() if line.startswith("FAILED")]
    assert failed and not [line for line in failed if "[box-" in line or "[box]" in line]
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_broken_adapters_fail_the_lists_and_ints_capabilities(broken):
    result = broken.runpytest_subprocess(
        "--pyargs", "tensorplug.testing.conformance", "-p", "no:cacheprovider", "-rfs",
        "--tensorplug-adapter=box,wrong-strides,wrong-output", "-k", "TestLists or TestInts")
    stdout = result.stdout.str()
    report = capability_report(stdout)
    # A Box has no shape of its own: that check is "not provided", which leaves "ints" passed.
    assert report["box"] == {"lists": "passed", "ints": "passed"}, stdout
    result.stdout.fnmatch_lines(["box", "  lists * passed *", "  ints * passed *not provided: box tensors have no shape "
                                 "object of their own*"])
    # Strides misreported: the strided item of a list and a strided int array read wrong.
    assert report["wrong-strides"] == {"lists": "FAILED", "ints": "FAILED"}
    result.stdout.fnmatch_lines(["*item 3: the kernel sees strides (3, 1), not (1, 4)*"])
    # Results that are not the adapter's type: list items too.
    assert report["wrong-output"]["lists"] == "FAILED"
    failed = {line.split("::")[-1].split(" ")[0] for line in stdout.splitlines() if line.startswith("FAILED")}
    assert {"test_list_results_are_the_callers_type[wrong-output]", "test_kernel_sees_every_item[wrong-strides]",
            "test_strided_integer_arrays[wrong-strides-int64]"} <= failed, failed
    assert not [name for name in failed if "[box" in name]
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_adapter_selection_and_skip_reasons(broken):
    result = broken.runpytest_subprocess(
        "--pyargs", "tensorplug.testing.conformance", "-p", "no:cacheprovider", "-k", "TestReadOnly",
        "--tensorplug-adapter=box, ghost")
    stdout = result.stdout.str()
    result.assert_outcomes(passed=1, skipped=3)  # box has no read-only tensors: one skip
    assert "[wrong-strides]" not in stdout and "[numpy]" not in stdout  # only the named adapters
    report = capability_report(stdout)
    assert report["box"] == {"read-only": "partial"}  # a check skipped for a reason other than a missing device
    result.stdout.fnmatch_lines(["box", "  read-only  partial  1 passed, 1 skipped: box has no read-only tensors"])
    assert report["ghost"] == {"all": "skipped"}
    result.stdout.fnmatch_lines(["ghost", "  all * skipped  ghost not installed"])


def test_generic_framework_reads_the_declared_read_only_policy(broken):
    # "frozen" has no Framework in the conftest: the kit's generic one certifies it against
    # what its table declares (read_only=True: every tensor read-only, writes refused).
    result = broken.runpytest_subprocess("--pyargs", "tensorplug.testing.conformance", "-p", "no:cacheprovider",
                                         "--tensorplug-adapter=frozen", "-rs", "-k",
                                         "TestReadOnly or test_identity_returns_the_callers_type_sharing_memory")
    result.assert_outcomes(passed=3)
    assert capability_report(result.stdout.str())["frozen"] == {"exchange": "passed", "read-only": "passed"}


def test_a_misspelled_adapter_is_one_usage_error(broken):
    result = broken.runpytest_subprocess("--pyargs", "tensorplug.testing.conformance", "-p", "no:cacheprovider",
                                         "--tensorplug-adapter=box,nmupy", "--tensorplug-adapter=nope")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if "tensorplug-adapter" in line]
    assert len(errors) == 1, result.stderr.str()
    import tensorplug

    # The installed adapters, then the conftest's (in their registration order), then tensorplug.Tensor.
    known = [r.name for r in tensorplug.adapters()] + ["box", "frozen", "ghost", "wrong-output", "wrong-strides",
                                                       "tensorplug"]
    assert errors[0] == f"ERROR: --tensorplug-adapter: no adapter named 'nmupy', 'nope' (adapters: {', '.join(known)})"
    assert "passed" not in result.stdout.str() and "error" not in result.stdout.str().lower()


def test_pairs_cover_every_ordered_pair_with_a_selected_adapter(broken):
    result = broken.runpytest_subprocess("--pyargs", "tensorplug.testing.conformance", "--collect-only", "-q",
                                         "-p", "no:cacheprovider", "--tensorplug-adapter=box",
                                         "-k", "test_first_tensor_decides_the_result_type")
    ids = {line.rpartition("[")[2].rstrip("]") for line in result.stdout.lines if "::" in line}
    partners = {i.removeprefix("box-") for i in ids if i.startswith("box-")}
    assert partners >= {"numpy", "torch", "jax", "paddle", "cupy", "dlpack", "tensorplug", "wrong-strides",
                        "wrong-output", "ghost", "frozen"}
    assert ids == {f"box-{p}" for p in partners} | {f"{p}-box" for p in partners}


def _docs_grid_adapter() -> str:
    """The pure-Python adapter of docs/adapters.md, as the page shows it (the block defining
    GridAdapter)."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "adapters.md").read_text()
    blocks = [block.split("```", 1)[0] for block in page.split("```python\n")[1:]]
    [block] = [b for b in blocks if "class GridAdapter" in b]
    return block


def test_the_pure_python_adapter_of_the_docs_passes_the_kit(pytester):
    # Certified as docs/adapters.md says: registered by a conftest, the kit run over it.
    pytester.makeconftest(_docs_grid_adapter() + "\n\ndef pytest_configure(config):\n"
                          "    tensorplug.register_adapter(GridAdapter())\n")
    result = pytester.runpytest_subprocess("--pyargs", "tensorplug.testing.conformance", "-p", "no:cacheprovider",
                                           "--tensorplug-adapter=grid")
    stdout = result.stdout.str()
    report = capability_report(stdout)["grid"]
    assert "FAILED" not in report.values(), stdout
    assert report["output"] == report["exchange"] == report["layouts"] == "passed", stdout
    assert report["compiler"] == "not provided"
    assert result.ret == pytest.ExitCode.OK, stdout
    # The kit's output carries no paddle build warning (the kit's paddle pairs run here).
    assert "ccache" not in stdout + result.stderr.str()


# Frameworks that copy what they import (as MLX does): the exchange check asserts the copy
# when the Framework declares it, and fails an undeclared copy or a declared one that is not.
COPYING_ADAPTERS = BROKEN_ADAPTERS + '''

class CopyBox(Box):
    pass


class UndeclaredCopyBox(Box):
    pass


class SharingBox(Box):
    pass


class CopyingFramework(BoxFramework):
    copies_on_import = True


ADAPTERS += [Adapter("copying", CopyBox, wrap=lambda array: CopyBox(array.copy())),
             Adapter("copying-undeclared", UndeclaredCopyBox, wrap=lambda array: UndeclaredCopyBox(array.copy())),
             Adapter("sharing-declared-copying", SharingBox)]
COPYING = {"copying": CopyingFramework("copying", CopyBox),
           "copying-undeclared": BoxFramework("copying-undeclared", UndeclaredCopyBox),
           "sharing-declared-copying": CopyingFramework("sharing-declared-copying", SharingBox)}
box_frameworks = pytest_tensorplug_framework


def pytest_tensorplug_framework(name):
    return COPYING.get(name) or box_frameworks(name)
'''


def test_a_framework_declared_to_copy_on_import_is_checked_for_the_copy(pytester):
    pytester.makeconftest(COPYING_ADAPTERS)
    result = pytester.runpytest_subprocess(
        "--pyargs", "tensorplug.testing.conformance", "-p", "no:cacheprovider",
        "--tensorplug-adapter=copying,copying-undeclared,sharing-declared-copying", "-k", "TestExchange")
    stdout = result.stdout.str()
    report = capability_report(stdout)
    assert report["copying"] == {"exchange": "passed"}, stdout
    assert report["copying-undeclared"] == {"exchange": "FAILED"}, stdout
    assert report["sharing-declared-copying"] == {"exchange": "FAILED"}, stdout
    failed = {line.split("::")[-1].split(" ")[0] for line in stdout.splitlines() if line.startswith("FAILED")}
    assert failed == {"test_identity_returns_the_callers_type_sharing_memory[copying-undeclared]",
                      "test_identity_returns_the_callers_type_sharing_memory[sharing-declared-copying]"}, stdout
    result.stdout.fnmatch_lines([
        "*identity(x) is a copy of x (a framework that copies every tensor it imports declares "
        "Framework.copies_on_import)*",
        "*sharing-declared-copying declares that it copies the tensors it imports (Framework.copies_on_import), "
        "but identity(x) shares x's memory*"])


def test_plugin_registers_hook_option_and_fixtures(pytester):
    pytester.makepyfile(test_fixtures='''
        import tensorplug
        from tensorplug.testing import Framework

        def test_adapter(tensorplug_adapter, tensorplug_kernels):
            assert isinstance(tensorplug_adapter, Framework)
            assert tensorplug_adapter.name == "numpy"
            x, expected = __import__("tensorplug.testing").testing.make_tensor(tensorplug_adapter, (2, 2))
            assert tensorplug_kernels.strided_sum(x) == expected.sum()
    ''')
    result = pytester.runpytest_subprocess("--tensorplug-adapter=numpy", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.no_fnmatch_line("*capability report*")  # no report without capability tests


def test_pytest_runs_with_the_kit_disabled(pytester):
    # The first-party Framework plugins implement the kit's hook; without the kit pytest
    # still runs (their hookimpls are optional).
    pytester.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = pytester.runpytest_subprocess("-p", "no:tensorplug", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


# Adapters refusing negative strides on output conversion (as torch's and paddle's do), with
# and without a declaration, and Frameworks declaring what may not be declared.
REFUSING_ADAPTERS = BROKEN_ADAPTERS.replace("read_only=False):", "read_only=False, negative_strides=True):").replace(
    "read_only=read_only)", "read_only=read_only, negative_strides=negative_strides)") + '''

from tensorplug.testing import NEGATIVE_STRIDES, Refusal


class StrictBox(Box):
    pass


class Declared(BoxFramework):
    def refusals(self):
        return dict.fromkeys(NEGATIVE_STRIDES, Refusal(ValueError, "cannot import a tensor with negative strides"))


class WrongType(BoxFramework):
    def refusals(self):
        return dict.fromkeys(NEGATIVE_STRIDES, Refusal(TypeError, "cannot import"))


class Contiguous(BoxFramework):
    def refusals(self):
        return {"contiguous": Refusal(ValueError, "")}


STRICT = {"undeclared": BoxFramework, "declared": Declared, "wrong-type": WrongType, "contiguous": Contiguous}
ADAPTERS += [Adapter(name, type(f"{name}Box", (StrictBox,), {}), negative_strides=False) for name in STRICT]
ADAPTERS += [Adapter("claims-refusal", type("ClaimsBox", (Box,), {}))]
FRAMEWORKS.update({a.name: a.box_type for a in ADAPTERS[-5:]})
FRAMEWORK_TYPES = dict(STRICT, **{"claims-refusal": Declared})


def pytest_tensorplug_framework(name):
    if name in FRAMEWORK_TYPES:
        return FRAMEWORK_TYPES[name](name, FRAMEWORKS[name])
    return BoxFramework(name, FRAMEWORKS[name]) if name in FRAMEWORKS else None
'''


def test_refusals_are_asserted_exactly_as_declared(pytester):
    pytester.makeconftest(REFUSING_ADAPTERS)
    result = pytester.runpytest_subprocess(
        "--pyargs", "tensorplug.testing.conformance", "-p", "no:cacheprovider", "-k", "TestLayouts",
        "--tensorplug-adapter=undeclared,declared,wrong-type,contiguous,claims-refusal")
    stdout = result.stdout.str()
    report = capability_report(stdout)
    # Declared: the refusal is checked (type and message) and the capability passes, no skips.
    assert report["declared"] == {"layouts": "passed"}
    assert "[declared-" not in "".join(line for line in stdout.splitlines() if line.startswith(("FAILED", "SKIPPED")))
    # An undeclared refusal fails; so does one with another error type than declared.
    assert report["undeclared"] == {"layouts": "FAILED"}
    result.stdout.fnmatch_lines([
        "*undeclared refused negative tensors with ValueError: undeclared cannot import a tensor with negative "
        "strides (stride -4 of dim 0)*(an undeclared refusal: fix the adapter, or declare it in its Framework's "
        "refusals())*"])
    assert report["wrong-type"] == {"layouts": "FAILED"}
    result.stdout.fnmatch_lines(["*wrong-type refused negative tensors with ValueError: *; it declares TypeError*"])
    # Contiguous (and 0-d) tensors may never be refused, nor declared so.
    assert report["contiguous"] == {"layouts": "FAILED"}
    result.stdout.fnmatch_lines(["*contiguous declares refusals of 'contiguous'; an adapter may refuse only "
                                 "zero-size, transposed, *, read-only (never contiguous or 0-d tensors)*"])
    # A declared refusal that does not happen fails.
    assert report["claims-refusal"] == {"layouts": "FAILED"}
    result.stdout.fnmatch_lines(["*claims-refusal declares it refuses negative tensors, but converted one*"])
    failed = {line.split("[", 1)[1].split("]")[0] for line in stdout.splitlines() if line.startswith("FAILED")}
    assert {f for f in failed if f.startswith("undeclared-")} == {"undeclared-negative", "undeclared-reversed"}
    assert {f for f in failed if f.startswith("claims-refusal-")} == {"claims-refusal-negative",
                                                                      "claims-refusal-reversed"}
    assert result.ret == pytest.ExitCode.TESTS_FAILED


# The fake-GPU adapter of tests/support/fake_device.py, certified by the kit: its CUDA checks
# (stream, allocator, restore after failing calls, the primary argument) run on any machine.
FAKE_DEVICE = f'''
import sys
sys.path.insert(0, {str(__import__("pathlib").Path(__file__).parents[1] / "support")!r})
import tensorplug
from fake_device import FakeDeviceAdapter, FakeDeviceFramework

ADAPTER = FakeDeviceAdapter("fakegpu")


def pytest_configure(config):
    tensorplug.register_adapter(ADAPTER)


def pytest_tensorplug_framework(name):
    return FakeDeviceFramework(ADAPTER) if name == "fakegpu" else None
'''


def test_the_kit_checks_device_rules_with_the_fake_gpu(pytester):
    pytester.makeconftest(FAKE_DEVICE)
    result = pytester.runpytest_subprocess(
        "--pyargs", "tensorplug.testing.conformance", "-p", "no:cacheprovider", "-rs", "-v",
        "--tensorplug-adapter=fakegpu",
        "-k", "not TestMixed or fakegpu-numpy or numpy-fakegpu")
    stdout = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, stdout
    report = capability_report(stdout)
    assert report["fakegpu"] == {**dict.fromkeys(["exchange", "dtypes", "layouts", "read-only", "stream", "allocator",
                                                  "output", "errors", "mixed", "lists", "ints"], "passed"),
                                 "compiler": "not provided", "gradients": "not provided"}
    for check in ("test_cuda_tensors_are_exchanged_in_place_on_cuda[fakegpu]",
                  "test_kernels_see_the_frameworks_stream_on_cuda[fakegpu]",
                  "test_stream_and_allocator_state_survive_every_call[fakegpu-cuda]",
                  "test_first_cuda_tensor_is_primary_on_cuda[numpy-fakegpu]",
                  "test_first_cuda_item_is_primary_on_cuda[fakegpu]",
                  "test_int_arrays_on_cuda_are_refused[fakegpu]"):
        assert any(check in line and "PASSED" in line for line in stdout.splitlines()), check
    # The skips: numpy (the second tensor of numpy-fakegpu's "first CUDA tensor" check) has no
    # CUDA, and the fake adapter implements no compiler hook (the compiler's two checks and
    # the gradients' three, all skipped by checks.needs_ops: one line of -rs).
    skips = sorted(line.split(": ", 1)[1] for line in stdout.splitlines() if line.startswith("SKIPPED"))
    assert skips == ["no CUDA device", "not provided"], skips
    not_provided = sorted(line.split(" ", 2)[1] for line in stdout.splitlines()
                          if line.startswith("SKIPPED") and line.endswith("not provided"))
    assert not_provided == ["[5]"], not_provided
