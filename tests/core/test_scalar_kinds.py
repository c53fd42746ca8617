"""Scalar types an adapter declares bools (the tensorplug_scalar_kind hook): the core names
no framework's scalar type; numpy's bool_ is declared by the numpy plugin, as a third
party's bool type would be by its own."""

import pytest

import tensorplug
from tensorplug import cpp

SOURCE = """
bool negate(bool b) { return !b; }
int64_t plus_one(int64_t x) { return x + 1; }
double half(double x) { return x / 2; }
"""


@pytest.fixture(scope="module")
def mod():
    return cpp.load_inline("scalar_kinds", SOURCE, functions=["negate", "plus_one", "half"])


class Flag:
    """A framework's bool scalar: truthy, not an int, not a numbers.Number."""

    def __init__(self, value):
        self.value = value

    def __bool__(self):
        return self.value


class Unclaimed(Flag):
    """The same, with no adapter claiming it."""


class FlagAdapter:
    @tensorplug.hookimpl
    def tensorplug_adapter_info(self):
        return tensorplug.AdapterInfo(name="flag-scalars", framework="flags", tensor_types=())

    @tensorplug.hookimpl
    def tensorplug_scalar_kind(self, scalar_type):
        return "bool" if scalar_type is Flag else None


@pytest.fixture(scope="module")
def flag_adapter():
    adapter = FlagAdapter()
    tensorplug.register_adapter(adapter)
    yield
    tensorplug.unregister_adapter(adapter)


def test_a_declared_bool_type_is_a_bool(mod, flag_adapter):
    assert mod.negate(Flag(True)) is False
    assert mod.negate(Flag(False)) is True
    # As Python's bool: not an int, not a float.
    with pytest.raises(TypeError, match=r"^plus_one\(\) argument 1 'x': expected an int, got .*Flag"):
        mod.plus_one(Flag(True))
    with pytest.raises(TypeError, match=r"^half\(\) argument 1 'x': expected a float, got .*Flag"):
        mod.half(Flag(True))


def test_an_undeclared_type_is_not_a_bool(mod, flag_adapter):
    with pytest.raises(TypeError, match=r"^negate\(\) argument 1 'b': expected a bool, got .*Unclaimed"):
        mod.negate(Unclaimed(True))


def test_numpy_bool_is_declared_by_the_numpy_plugin(mod):
    np = pytest.importorskip("numpy", reason="numpy not installed")
    assert mod.negate(np.bool_(True)) is False
    with pytest.raises(TypeError, match=r"^plus_one\(\) argument 1 'x': expected an int, got numpy.bool"):
        mod.plus_one(np.bool_(True))
    assert mod.plus_one(np.int64(3)) == 4  # numpy's integers stay ints (numbers.Integral)


def test_a_hook_answering_something_else_is_refused():
    from tensorplug._registry import registry

    class Wrong:
        @tensorplug.hookimpl
        def tensorplug_adapter_info(self):
            return tensorplug.AdapterInfo(name="wrong-scalars", framework="wrongs", tensor_types=())

        @tensorplug.hookimpl
        def tensorplug_scalar_kind(self, scalar_type):
            return "int" if scalar_type is Unclaimed else None

    adapter = Wrong()
    tensorplug.register_adapter(adapter)
    try:
        with pytest.raises(TypeError, match=r"tensorplug_scalar_kind must return 'bool' or None, got 'int'"):
            registry.scalar_kind(Unclaimed)
    finally:
        tensorplug.unregister_adapter(adapter)
