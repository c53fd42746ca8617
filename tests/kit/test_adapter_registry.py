"""The adapter hub: entry-point discovery, precedence, the per-type cache, load errors."""

import subprocess
import sys
import textwrap

import pytest

import tensorplug

np = pytest.importorskip("numpy")

from tensorplug_adapters.jax import _native as jax_native  # noqa: E402  (C capsules: numpy's C API only)
from tensorplug_adapters.numpy import _exchange as numpy_exchange  # noqa: E402


class Box:
    """A tensor type no adapter knows: it only wraps a numpy array."""

    def __init__(self, array):
        self.array = array


class Named:
    """An in-process adapter: register_adapter names it by the AdapterInfo it returns."""

    name = "named"

    @tensorplug.hookimpl
    def tensorplug_adapter_info(self):
        return tensorplug.AdapterInfo(name=self.name, framework="numpy", tensor_types=("Box",),
                                      capabilities=("exchange",), fast_path=False)


class CountingAdapter(Named):
    """Claims Box through Python callables and counts the hook calls."""

    def __init__(self, name="box"):
        self.name = name
        self.calls = 0
        self.table = tensorplug.ExchangeTable.from_python(
            name, from_dlpack=lambda t: Box(np.from_dlpack(t)), to_dlpack=lambda box: box.array,
            allocate=lambda shape, dtype, device: Box(np.empty(shape, dtype)))

    @tensorplug.hookimpl
    def tensorplug_exchange_table(self, tensor_type):
        if tensor_type is Box:
            self.calls += 1
            return self.table
        return None


@pytest.fixture
def counting():
    adapter = CountingAdapter()
    tensorplug.register_adapter(adapter)
    yield adapter
    tensorplug.unregister_adapter(adapter)


def test_first_party_adapters_come_from_entry_points():
    rows = {r.name: r for r in tensorplug.adapters()}
    for name in ("numpy", "torch", "jax", "paddle", "cupy", "dlpack"):
        assert rows[name].distribution == "tensorplug", rows[name]
        assert rows[name].distribution_version == tensorplug.__version__
    assert rows["numpy"].fast_path is True and rows["numpy"].framework_installed
    assert rows["dlpack"].fast_path is False


def test_hook_runs_once_per_type(kernels, counting):
    box = Box(np.arange(4, dtype=np.float32))
    assert kernels.sum(box) == 6.0
    assert counting.calls == 1
    assert kernels.sum(box) == 6.0
    assert kernels.numel(Box(np.zeros(9, dtype=np.float32))) == 9
    assert counting.calls == 1  # no hook call after the first argument of the type


def test_cache_invalidated_on_register_and_unregister(kernels, counting):
    box = Box(np.ones(2, dtype=np.float32))
    kernels.sum(box)
    other = CountingAdapter("box2")
    tensorplug.register_adapter(other)
    try:
        kernels.sum(box)
        assert other.calls == 1 and counting.calls == 1  # the later registration wins
        result = kernels.add(box, box)
        assert type(result) is Box
    finally:
        tensorplug.unregister_adapter(other)
    kernels.sum(box)
    assert counting.calls == 2  # asked again once the override is gone


def test_python_adapter_results_and_allocation(kernels, counting):
    box = Box(np.arange(3, dtype=np.float32))
    out = kernels.add(box, box)
    assert type(out) is Box
    np.testing.assert_array_equal(out.array, [0, 2, 4])


def test_later_registration_overrides_a_builtin(kernels):
    seen = []

    class NumpyAsTensor(Named):
        name = "numpy-override"

        @tensorplug.hookimpl
        def tensorplug_exchange_table(self, tensor_type):
            if tensor_type is np.ndarray:
                seen.append(tensor_type)
                return tensorplug.ExchangeTable.from_python("override", from_dlpack=lambda t: t)
            return None

    plugin = NumpyAsTensor()
    assert tensorplug.register_adapter(plugin) == "numpy-override"
    try:
        x = np.ones(3, dtype=np.float32)
        r = kernels.identity(x)
        assert type(r) is tensorplug.Tensor and seen == [np.ndarray]
    finally:
        tensorplug.unregister_adapter("numpy-override")
    assert type(kernels.identity(np.ones(3, dtype=np.float32))) is np.ndarray


def test_register_errors():
    adapter = CountingAdapter()
    assert tensorplug.register_adapter(adapter) == "box"
    try:
        assert "box" in [r.name for r in tensorplug.adapters()]
        with pytest.raises(ValueError, match="is already registered"):
            tensorplug.register_adapter(adapter)
        with pytest.raises(ValueError, match="an adapter named 'box' is already registered; unregister it first"):
            tensorplug.register_adapter(CountingAdapter("box"))
    finally:
        tensorplug.unregister_adapter("box")

    class Nameless:
        @tensorplug.hookimpl
        def tensorplug_exchange_table(self, tensor_type):
            return None

    with pytest.raises(TypeError, match="has no tensorplug_adapter_info hook: an adapter is named by the "
                                        "AdapterInfo it returns"):
        tensorplug.register_adapter(Nameless())
    with pytest.raises(ValueError, match="is not registered"):
        tensorplug.unregister_adapter(adapter)
    with pytest.raises(ValueError, match="no adapter named 'nope'"):
        tensorplug.unregister_adapter("nope")


def test_hook_returning_the_wrong_type_is_a_clear_error(kernels):
    class Wrong(Named):
        @tensorplug.hookimpl
        def tensorplug_exchange_table(self, tensor_type):
            return "not a table" if tensor_type is Box else None

    plugin = Wrong()
    tensorplug.register_adapter(plugin)
    try:
        with pytest.raises(TypeError, match="must return an ExchangeTable or None, got str for Box"):
            kernels.sum(Box(np.ones(1, dtype=np.float32)))
    finally:
        tensorplug.unregister_adapter(plugin)


def test_bad_exchange_table_arguments():
    with pytest.raises(TypeError, match="argument 'read_only': expected True or False, got 'numpy'"):
        tensorplug.ExchangeTable.from_python("x", from_dlpack=lambda t: t, read_only="numpy")
    with pytest.raises(TypeError, match="argument 'read_only': expected True, False or a "
                                        "'tensorplug.read_only_probe' capsule, got 'always'"):
        tensorplug.ExchangeTable.from_capsule(numpy_exchange.exchange_api(), "x", read_only="always")
    with pytest.raises(TypeError, match="argument 'read_only': expected True, False or a "
                                        "'tensorplug.read_only_probe' capsule, got <capsule .*tensorplug.importer"):
        tensorplug.ExchangeTable.from_capsule(numpy_exchange.exchange_api(), "x",
                                              read_only=jax_native.importer())
    with pytest.raises(TypeError, match="argument 'importer': expected None or a 'tensorplug.importer' capsule, "
                                        "got 'jax'"):
        tensorplug.ExchangeTable.from_python("x", from_dlpack=lambda t: t, importer="jax")
    with pytest.raises(TypeError, match="argument 'importer': expected None or a 'tensorplug.importer' capsule, "
                                        "got <capsule .*tensorplug.read_only_probe"):
        tensorplug.ExchangeTable.from_python("x", from_dlpack=lambda t: t,
                                             importer=numpy_exchange.read_only_probe())
    with pytest.raises(TypeError, match="from_dlpack must be callable, got int"):
        tensorplug.ExchangeTable.from_python("x", from_dlpack=1)
    with pytest.raises(ValueError, match="PyCapsule_GetPointer called with incorrect name|incorrect name"):
        tensorplug.ExchangeTable.from_capsule(numpy_exchange.read_only_probe(), "wrong-capsule")


def test_read_only_declarations(kernels):
    # The probe reads each numpy array's WRITEABLE flag; True marks every tensor read-only.
    probed = tensorplug.ExchangeTable.from_capsule(numpy_exchange.exchange_api(), "probed",
                                                   read_only=numpy_exchange.read_only_probe())
    immutable = tensorplug.ExchangeTable.from_capsule(numpy_exchange.exchange_api(), "immutable",
                                                      read_only=True)
    assert probed.read_only is not True and immutable.read_only is True
    frozen = np.ones(3, dtype=np.float32)
    frozen.flags.writeable = False
    writable = np.ones(3, dtype=np.float32)

    def refuses_writes(x):
        try:
            kernels.fill(x, 2.0)
        except ValueError as exc:
            assert "read-only" in str(exc)
            return True
        return False
    for table, expected in ((probed, (True, False)), (immutable, (True, True))):
        class Claim(Named):
            name = table.adapter

            @tensorplug.hookimpl(tryfirst=True)
            def tensorplug_exchange_table(self, tensor_type):
                return table if tensor_type is np.ndarray else None

        plugin = Claim()
        tensorplug.register_adapter(plugin)
        try:
            assert (refuses_writes(frozen), refuses_writes(writable)) == expected, table
        finally:
            tensorplug.unregister_adapter(plugin)
    assert (refuses_writes(frozen), refuses_writes(writable)) == (True, False)  # numpy's own table
    np.testing.assert_array_equal(frozen, [1, 1, 1])


def test_output_table_and_to_framework():
    table = tensorplug.output_table("numpy")
    assert isinstance(table, tensorplug.ExchangeTable) and table.adapter == "numpy"
    source = np.arange(4, dtype=np.float32)
    x = table.to_framework(tensorplug.from_dlpack(source))
    assert type(x) is np.ndarray and x.__array_interface__["data"][0] == source.__array_interface__["data"][0]
    with pytest.raises(ValueError, match="output_table: no adapter named 'nope' \\(adapters: .*numpy"):
        tensorplug.output_table("nope")


def test_an_adapter_without_an_output_table_is_named_as_such():
    class NoOutput:
        @tensorplug.hookimpl
        def tensorplug_adapter_info(self):
            return tensorplug.AdapterInfo(name="no-output", framework="numpy", tensor_types=(),
                                          capabilities=("exchange",), fast_path=False)

    plugin = NoOutput()
    tensorplug.register_adapter(plugin)
    try:
        for call, caller in ((tensorplug.output_table, "output_table"),
                             (tensorplug.output_framework, "output_framework")):
            with pytest.raises(ValueError) as info:
                call("no-output")
            assert str(info.value) == (f"{caller}: adapter 'no-output' has no output table: no "
                                       "tensorplug_output_table(framework) hook answers 'no-output' (docs/adapters.md)")
    finally:
        tensorplug.unregister_adapter(plugin)


def test_empty_is_a_cpu_tensor_of_the_dtype_asked_for():
    t = tensorplug.empty((2, 3), "float32")
    assert type(t) is tensorplug.Tensor and t.shape == (2, 3) and str(t.dtype) == "float32"
    assert str(t.device) == "cpu:0"
    assert str(tensorplug.empty([4], np.dtype("int16")).dtype) == "int16"
    with pytest.raises(TypeError, match="empty\\(\\) argument 'dtype': expected a dtype: bool, int8/16/32/64, .*"
                                        "got 'floaty'"):
        tensorplug.empty((2,), "floaty")


def test_dtype_names_of_any_framework_module_are_read():
    # "<module>.<name>" is read as <name>, whichever module prints it.
    assert str(tensorplug.empty((1,), "torch.bfloat16").dtype) == "bfloat16"
    assert str(tensorplug.empty((1,), "someframework.int8").dtype) == "int8"
    assert str(tensorplug.empty((1,), "dtype('float64')").dtype) == "float64"


def test_output_framework_unknown_name():
    with pytest.raises(ValueError, match="output_framework: no adapter named 'nope' \\(adapters: .*numpy"):
        tensorplug.output_framework("nope")


def test_broken_plugin_warns_and_others_keep_working(tmp_path, kernels):
    # A real installed distribution (a .dist-info on sys.path) whose plugin fails to import.
    dist = tmp_path / "broken_adapter-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-adapter\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[tensorplug.adapters]\nbroken = broken_adapter_mod\n")
    (tmp_path / "broken_adapter_mod.py").write_text("raise ImportError('this plugin is broken on purpose')\n")
    code = textwrap.dedent(f"""
        import sys, warnings
        sys.path.insert(0, {str(tmp_path)!r})
        import numpy as np, tensorplug
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            rows = tensorplug.adapters()
        print([str(w.message) for w in caught])
        print([(r.name, r.error) for r in rows if r.error])
        m = tensorplug.load_module({kernels.path!r})
        print(m.sum(np.ones(3, dtype=np.float32)))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    warnings_line, errors_line, result = out.stdout.strip().splitlines()
    assert ("adapter plugin 'broken' from distribution 'broken-adapter' failed to load: "
            "ImportError: this plugin is broken on purpose") in warnings_line
    assert "('broken', 'ImportError: this plugin is broken on purpose')" in errors_line
    assert result == "3.0"


def test_table_refusing_negative_strides(kernels):
    # What the torch and paddle adapters do: torch aborts on such imports, paddle misreads them.
    class NoNegativeStrides(Named):
        table = tensorplug.ExchangeTable.from_python("strict", from_dlpack=lambda t: Box(np.from_dlpack(t)),
                                                     to_dlpack=lambda box: box.array, negative_strides=False)

        @tensorplug.hookimpl
        def tensorplug_exchange_table(self, tensor_type):
            return self.table if tensor_type is Box else None

    plugin = NoNegativeStrides()
    tensorplug.register_adapter(plugin)
    try:
        flipped = Box(np.arange(4, dtype=np.float32)[::-1])
        assert kernels.strided_sum(flipped) == 6.0  # taking it in is fine
        with pytest.raises(ValueError, match=r"strict cannot import a tensor with negative strides \(stride -1 of dim 0\)"):
            kernels.identity(flipped)  # handing it back is refused, not an abort
        assert type(kernels.identity(Box(np.arange(4, dtype=np.float32)))) is Box
    finally:
        tensorplug.unregister_adapter(plugin)


def test_tryfirst_wins_over_a_later_registration(kernels):
    class Claim(Named):
        def __init__(self, name):
            self.name = name
            self.table = tensorplug.ExchangeTable.from_python(name, from_dlpack=lambda t: Box(np.from_dlpack(t)),
                                                              to_dlpack=lambda box: box.array)

    class First(Claim):
        @tensorplug.hookimpl(tryfirst=True)
        def tensorplug_exchange_table(self, tensor_type):
            return self.table if tensor_type is Box else None

    class Later(Claim):
        @tensorplug.hookimpl
        def tensorplug_exchange_table(self, tensor_type):
            raise AssertionError("asked although a tryfirst adapter claimed the type")

    first, later = First("first"), Later("later")
    tensorplug.register_adapter(first)
    tensorplug.register_adapter(later)
    try:
        assert kernels.sum(Box(np.ones(4, dtype=np.float32))) == 4.0
    finally:
        tensorplug.unregister_adapter(later)
        tensorplug.unregister_adapter(first)
