"""Generated C on the C ABI: tensorplug/generated.h compiled as C89, C11 and C++, its
checks and messages, the caller's stream and allocator, owning arguments; and
tensorplug.function_from_pointer, which makes an entry point a Function."""

import ctypes
import gc
import subprocess
import sys
import weakref

import pytest

np = pytest.importorskip("numpy")

import tensorplug  # noqa: E402
from tensorplug import _core, cpp  # noqa: E402

SOURCE = r"""
#include <tensorplug/generated.h>

/* scale(x, alpha) -> alpha * x, a new tensor (float32, CPU, contiguous). */
TPGEN_EXPORT const char* __tensorplugsig_scale(void) { return "x:view;alpha:float->tensor"; }
TPGEN_EXPORT int __tensorplug_scale(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  TPGenCall call;
  DLTensor* x;
  double alpha;
  DLManagedTensorVersioned* out;
  const float* in;
  float* po;
  int64_t i, n;
  (void)self;
  TPGenBegin(&call, "scale", args, nargs, result);
  TPGenArity(&call, 2);
  x = TPGenTensor(&call, 0, "x", TPGenDType(kDLFloat, 32), -1, kDLCPU, TPGEN_CONTIGUOUS);
  alpha = TPGenFloat(&call, 1, "alpha");
  out = TPGenAllocLike(&call, x);
  if (call.failed) return TPGenFinish(&call);
  in = (const float*)TPGenData(x);
  po = (float*)TPGenData(&out->dl_tensor);
  n = TPGenNumel(x);
  for (i = 0; i < n; ++i) po[i] = (float)alpha * in[i];
  TPGenReturnTensor(&call, out);
  return TPGenFinish(&call);
}

/* fill(out, value, count) -> the stream of out's device: writes value into out[0:count]
 * (a 1-d int64 tensor), refuses count > len(out). */
TPGEN_EXPORT const char* __tensorplugsig_fill(void) { return "out:mview;value:int;count:int->int"; }
TPGEN_EXPORT int __tensorplug_fill(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  TPGenCall call;
  DLTensor* out;
  int64_t value, count, i;
  int64_t* po;
  (void)self;
  TPGenBegin(&call, "fill", args, nargs, result);
  TPGenArity(&call, 3);
  out = TPGenTensor(&call, 0, "out", TPGenDType(kDLInt, 64), 1, kDLCPU, TPGEN_WRITTEN);
  value = TPGenInt(&call, 1, "value");
  count = TPGenInt(&call, 2, "count");
  if (!call.failed && count > out->shape[0]) TPGenFail(&call, "IndexError", "count is beyond the end of out");
  if (call.failed) return TPGenFinish(&call);
  po = (int64_t*)TPGenData(out);
  for (i = 0; i < count; ++i) po[i * (out->strides ? out->strides[0] : 1)] = value;
  TPGenReturnInt(&call, (int64_t)(intptr_t)TPGenStream(out));
  return TPGenFinish(&call);
}

/* flag(b) -> 2.5 if b else -1.0 */
TPGEN_EXPORT const char* __tensorplugsig_flag(void) { return "b:bool->float"; }
TPGEN_EXPORT int __tensorplug_flag(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  TPGenCall call;
  int b;
  (void)self;
  TPGenBegin(&call, "flag", args, nargs, result);
  TPGenArity(&call, 1);
  b = TPGenBool(&call, 0, "b");
  if (call.failed) return TPGenFinish(&call);
  TPGenReturnFloat(&call, b ? 2.5 : -1.0);
  return TPGenFinish(&call);
}
"""

STRICT = ["-Wall", "-Wextra", "-Werror", "-Wdeclaration-after-statement"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    work = tmp_path_factory.mktemp("generated")
    (work / "generated.c").write_text(SOURCE)
    return tensorplug.load_module(cpp.build("generated_c89", [work / "generated.c"],
                                            extra_cflags=["-std=c89", *STRICT], build_directory=work))


@pytest.mark.parametrize("flags, suffix", [(["-std=c99", *STRICT], "c"), (["-std=c11", "-pedantic", *STRICT], "c"),
                                           (["-std=c++17", "-Wall", "-Wextra", "-Werror"], "cc")])
def test_the_header_builds_in_every_dialect(tmp_path, flags, suffix):
    source = tmp_path / f"generated.{suffix}"
    source.write_text(SOURCE)
    module = tensorplug.load_module(cpp.build(f"generated_{flags[0][5:].replace('+', 'p')}", [source],
                                              extra_cflags=flags, build_directory=tmp_path))
    assert module.flag(True) == 2.5


def test_values_and_allocations_from_the_callers_framework(generated):
    x = np.arange(4, dtype=np.float32)
    y = generated.scale(x, 2.0)
    assert type(y) is np.ndarray and y.tolist() == [0, 2, 4, 6]
    assert generated.scale(np.zeros((0, 3), np.float32), 2.0).shape == (0, 3)
    torch = pytest.importorskip("torch", reason="torch not installed")
    t = generated.scale(torch.arange(4, dtype=torch.float32).reshape(2, 2), 0.5)
    assert isinstance(t, torch.Tensor) and t.tolist() == [[0, 0.5], [1, 1.5]]
    assert generated.flag(False) == -1.0


def test_strided_writes_and_the_stream(generated):
    out = np.zeros(6, np.int64)
    assert generated.fill(out[::2], 7, 3) == 0  # no stream set: the default (NULL)
    assert out.tolist() == [7, 0, 7, 0, 7, 0]
    with tensorplug.use_raw_stream("cpu", 0x5150):
        assert generated.fill(out, 1, 1) == 0x5150


@pytest.mark.parametrize("call, error, message", [
    (lambda g: g.scale(np.zeros(3), 1.0), TypeError, "scale() argument 1 'x': expected a float32 tensor, got float64"),
    (lambda g: g.scale(np.zeros(3, np.int8), 1.0), TypeError,
     "scale() argument 1 'x': expected a float32 tensor, got int8"),
    (lambda g: g.scale(np.zeros((3, 4), np.float32).T, 1.0), ValueError,
     "scale() argument 1 'x': expected a contiguous (row-major compact) tensor, got a strided one"),
    (lambda g: g.fill(np.zeros((2, 2), np.int64), 1, 1), ValueError,
     "fill() argument 1 'out': expected a tensor of 1 dimension, got 2"),
    (lambda g: g.fill(np.zeros(2, np.int64), 1, 3), IndexError, "fill(): count is beyond the end of out"),
])
def test_errors_name_the_function_and_the_argument(generated, call, error, message):
    with pytest.raises(error) as info:
        call(generated)
    assert str(info.value) == message
    assert _core.bound_allocator() == 0


def test_the_entry_checks_what_a_caller_without_the_signature_passes(generated):
    library = ctypes.CDLL(generated.path)

    def unchecked(name, signature):
        address = ctypes.cast(library[f"__tensorplug_{name}"], ctypes.c_void_p).value
        return tensorplug.function_from_pointer(address, signature, name=name, owner=library)

    # Kind "any" everywhere: the binding converts each value and leaves all checks to the entry.
    fill = unchecked("fill", "out:any;value:any;count:any->int")
    with pytest.raises(TypeError, match=r"^fill\(\) argument 2 'value': expected an int, got float$"):
        fill(np.zeros(2, np.int64), 1.5, 1)
    with pytest.raises(TypeError, match=r"^fill\(\) argument 1 'out': expected a tensor, got str$"):
        fill("out", 1, 1)
    read_only = np.zeros(2, np.int64)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match=r"^fill\(\) argument 1 'out': expected a writable tensor \(the function "
                                         r"writes it\), got a read-only one$"):
        fill(read_only, 1, 1)
    flag = unchecked("flag", "b:any->float")
    with pytest.raises(TypeError, match=r"^flag\(\) argument 1 'b': expected a bool, got int$"):
        flag(1)
    variadic = unchecked("flag", "b:any;c:any->float")
    with pytest.raises(TypeError, match=r"^flag\(\) takes 1 argument, got 2$"):
        variadic(True, False)


def test_owning_tensor_arguments_are_released_by_the_entry(generated):
    # Kind "tensor" moves an owning tensor into the call: TPGenFinish releases it, on success
    # and on failure (the sanitizer run of this file checks that nothing leaks).
    library = ctypes.CDLL(generated.path)
    address = ctypes.cast(library["__tensorplug_scale"], ctypes.c_void_p).value
    scale = tensorplug.function_from_pointer(address, "x:tensor;alpha:float->tensor", name="scale", owner=library)
    x = np.arange(3, dtype=np.float32)
    assert scale(x, 3.0).tolist() == [0, 3, 6]
    with pytest.raises(TypeError, match="expected a float32 tensor, got float64"):
        scale(x.astype(np.float64), 3.0)
    assert x.tolist() == [0, 1, 2]


class Owner:
    """Stands for the object that owns generated code (a JIT's module)."""


def test_function_from_pointer_keeps_its_owner_alive_and_works_as_an_op(generated):
    library = ctypes.CDLL(generated.path)
    address = ctypes.cast(library["__tensorplug_scale"], ctypes.c_void_p).value
    owner = Owner()
    alive = weakref.ref(owner)
    f = tensorplug.function_from_pointer(address, "x:view;alpha:float->tensor", name="scaled", owner=owner)
    del owner
    assert f.__name__ == "scaled" and f.signature_text == "x:view;alpha:float->tensor"
    tensorplug.register_global_func("test_generated_c.scaled", f, override=True)
    del f
    gc.collect()
    assert alive() is not None  # the global registry holds the function, the function its owner
    relay = tensorplug.get_global_func("test_generated_c.scaled")
    assert relay(np.ones(2, np.float32), 4.0).tolist() == [4, 4]
    tensorplug.remove_global_func("test_generated_c.scaled")
    del relay
    gc.collect()
    assert alive() is None  # the last reference went: so did the owner

    op = tensorplug.op("test_generated_c::scale",
                       tensorplug.function_from_pointer(address, "x:view;alpha:float->tensor", name="scale",
                                                        owner=library),
                       returns=tensorplug.like("x"))
    jax = pytest.importorskip("jax", reason="jax not installed")
    jnp = jax.numpy
    # Inside jax.jit TPGenAllocLike gets XLA's result buffer (a lent tensor).
    assert jax.jit(lambda v: op(v, 2.0) + 1)(jnp.arange(3, dtype=jnp.float32)).tolist() == [1, 3, 5]


@pytest.mark.parametrize("args, kwargs, error, message", [
    (("12", "x:view->void"), {"name": "f"}, TypeError,
     r"^function_from_pointer\(\) argument 'pointer': expected the function's address \(int\), got str$"),
    ((True, "x:view->void"), {"name": "f"}, TypeError, r"argument 'pointer': expected the function's address"),
    ((0, "x:view->void"), {"name": "f"}, ValueError, r"^function_from_pointer\(\) argument 'pointer': the address of "
                                                     r"f is 0$"),
    ((16, "x:nosuch->void"), {"name": "f"}, ValueError, r"^function_from_pointer\(\) argument 'signature': malformed "
                                                        r"signature 'x:nosuch->void' for f"),
    ((16, None), {"name": "f"}, TypeError, r"argument 'signature': expected a signature string"),
    ((16, "x:view->void"), {"name": ""}, TypeError, r"argument 'name': expected a non-empty str, got ''"),
])
def test_function_from_pointer_refuses_what_is_no_function(args, kwargs, error, message):
    owner = Owner()
    alive = weakref.ref(owner)
    with pytest.raises(error, match=message):
        tensorplug.function_from_pointer(*args, owner=owner, **kwargs)
    del owner
    gc.collect()
    assert alive() is None  # a refused call keeps no reference


def test_import_tensorplug_imports_no_compiler():
    code = ("import sys, tensorplug; "
            "print(sorted(m for m in ('numba', 'llvmlite', 'halide') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
