"""Default values declared with TENSORPLUG_EXPORT ("alpha=1.0"): omitted arguments, inspect.signature,
the signature string, and refusals of malformed defaults."""

import inspect

import pytest

import tensorplug

np = pytest.importorskip("numpy")


def test_signature_string_carries_defaults(args_kernels):
    assert args_kernels.affine.signature_text == (
        "x:float;alpha:float=1.0;shift:int=0;negate:bool=False;mode:str='plain'->float")
    assert args_kernels.count_or.signature_text == "x:?view=None;fallback:int=-1->int"


def test_inspect_signature_shows_defaults(args_kernels):
    sig = inspect.signature(args_kernels.affine)
    assert [(p.name, p.default) for p in sig.parameters.values()] == [
        ("x", inspect.Parameter.empty), ("alpha", 1.0), ("shift", 0), ("negate", False), ("mode", "plain")]
    assert type(sig.parameters["alpha"].default) is float and type(sig.parameters["shift"].default) is int
    assert str(inspect.signature(args_kernels.count_or)) == (
        "(x: 'Optional[Tensor]' = None, fallback: 'int' = -1) -> 'int'")


def test_omitted_arguments_take_their_defaults(args_kernels):
    assert args_kernels.affine(2.0) == 2.0
    assert args_kernels.affine(2.0, 3.0) == 6.0
    assert args_kernels.affine(2.0, 3.0, 1) == 7.0
    assert args_kernels.affine(2.0, 3.0, 1, True) == -7.0
    assert args_kernels.affine(2.0, 3.0, 1, True, "twice") == -14.0
    assert args_kernels.affine(2.0, mode="twice") == 4.0
    assert args_kernels.affine(x=2.0, negate=True) == -2.0
    assert args_kernels.count_or() == -1
    assert args_kernels.count_or(np.zeros(5)) == 5
    assert args_kernels.count_or(fallback=7) == 7
    assert args_kernels.count_or(None, 3) == 3


def test_missing_and_extra_arguments_name_the_parameters(args_kernels):
    with pytest.raises(TypeError, match=r"^affine\(\) takes 1 to 5 arguments \(x, alpha=1.0, shift=0, "
                                        r"negate=False, mode='plain'\), got 0$"):
        args_kernels.affine()
    with pytest.raises(TypeError, match=r"^affine\(\) takes 1 to 5 arguments .*, got 6$"):
        args_kernels.affine(1.0, 1.0, 0, False, "plain", 1)
    with pytest.raises(TypeError, match=r"^affine\(\) missing argument 1 'x'$"):
        args_kernels.affine(alpha=2.0)
    with pytest.raises(TypeError, match=r"^affine\(\) argument 2 'alpha': expected a float, got str$"):
        args_kernels.affine(1.0, "2")


@pytest.mark.parametrize("names, why", [
    ('"n=1.5"', "float literal for an int"),
    ('"n=None"', "None for a non-optional kind"),
    ('"n=\'a\'"', "string for an int"),
])
def test_malformed_defaults_are_refused_at_load(tmp_path, names, why):
    from tensorplug import cpp

    src = tmp_path / "bad_default.cc"
    src.write_text('#include "tensorplug/tensorplug.h"\n'
                   'int64_t Id(int64_t n) { return n; }\n'
                   f"TENSORPLUG_EXPORT(ident, Id, {names});\n")
    lib = cpp.build(f"bad_default_{abs(hash(names))}", [src])
    with pytest.raises(ValueError, match=r"exports a malformed signature: 'n:int=.*->int'"):
        tensorplug.load_module(lib).ident


def test_defaults_must_come_last(tmp_path):
    from tensorplug import cpp

    src = tmp_path / "bad_order.cc"
    src.write_text('#include "tensorplug/tensorplug.h"\n'
                   'int64_t Sub(int64_t a, int64_t b) { return a - b; }\n'
                   'TENSORPLUG_EXPORT(sub, Sub, "a=1", "b");\n')
    with pytest.raises(ValueError, match=r"exports a malformed signature: 'a:int=1;b:int->int'"):
        tensorplug.load_module(cpp.build("bad_default_order", [src])).sub

