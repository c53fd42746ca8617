"""Errors that say what happened (issue 21, item 6).

Each case used to arrive as another error than the one that happened: a C++ exception not
derived from std::exception as a bare "unknown exception"; a device the framework cannot
allocate on as ValueError with numpy, TypeError with torch and RuntimeError with jax; a
("cuda", 0) pair refused by device parameters although use_raw_stream takes it;
torch.device('meta') as "got torch.device"; an operator declared in torch's own namespace
accepted, then dispatched to torch's operator of that name. (An allocator that raises
RuntimeError: tests/core/test_device_rules.py::test_a_failing_allocator_is_the_kernels_error.)
"""

from __future__ import annotations

import pytest

import tensorplug
from tensorplug import cpp

SOURCE = r"""
namespace tp = tensorplug;

struct NotStd {};  // thrown by value, no message

namespace {
int64_t ThrowNotStd(int64_t n) {
  if (n) throw NotStd{};
  return 0;
}
int64_t ThrowInt(int64_t n) {
  if (n) throw 7;
  return 0;
}
// A float32 tensor of 2 elements on `device`, from the allocator of x's framework.
int64_t AllocOn(tp::TensorView x, DLDevice device) { return tp::Tensor::FromEnvAlloc({2}, tp::kFloat32, device).numel(); }
// device_type * 100 + device_id.
int64_t DeviceCode(DLDevice device) { return device.device_type * 100 + device.device_id; }
}  // namespace

TENSORPLUG_EXPORT(throw_not_std, ThrowNotStd, "n");
TENSORPLUG_EXPORT(throw_int, ThrowInt, "n");
TENSORPLUG_EXPORT(alloc_on, AllocOn, "x", "device");
TENSORPLUG_EXPORT(device_code, DeviceCode, "device");
"""


@pytest.fixture(scope="module")
def m():
    return cpp.load_inline("error_types", SOURCE)


def test_exception_not_derived_from_std_exception_names_the_function_and_type(m):
    with pytest.raises(RuntimeError) as e:
        m.throw_not_std(1)
    assert str(e.value) == "throw_not_std() threw a C++ exception of type NotStd (not derived from std::exception)"
    with pytest.raises(RuntimeError) as e:
        m.throw_int(1)
    assert str(e.value) == "throw_int() threw a C++ exception of type int (not derived from std::exception)"
    assert m.throw_not_std(0) == 0


WRONG_DEVICE = {
    "numpy": ("import numpy as np", "np.zeros(1, np.float32)",
              "cannot allocate 8 bytes (shape [2]) on cuda:0: numpy can only allocate tensors on the cpu"),
    "torch": ("import torch", "torch.zeros(1)",
              "cannot allocate on cuda:0: the allocator refuses this device (even for a one-element float32 tensor): "
              "Could not run 'aten::empty.memory_format' with arguments from the 'CUDA' backend."),
    "paddle": ("import paddle", "paddle.zeros([1])",
               "cannot allocate on cuda:0: the allocator refuses this device (even for a one-element float32 "
               "tensor): (Unimplemented) Unsupported backend `GPU`"),
    "jax": ("import jax.numpy as jnp", "jnp.zeros(1)",
            "cannot allocate 8 bytes (shape [2]) on cuda:0: jax cannot allocate on cuda:0: Unknown backend: 'gpu' "
            "requested, but no platforms that are instances of gpu are present. Platforms present are: cpu"),
}


@pytest.mark.parametrize("framework", sorted(WRONG_DEVICE))
def test_allocation_on_a_device_the_framework_lacks_is_one_value_error(m, framework):
    module = pytest.importorskip(framework)
    if framework == "torch" and module.cuda.is_available():
        pytest.skip("torch has a CUDA device here")
    if framework == "jax" and any(d.platform == "gpu" for d in module.devices()):
        pytest.skip("jax has a GPU here")
    if framework == "paddle" and module.device.is_compiled_with_cuda():
        pytest.skip("paddle is built with CUDA here")
    setup, make, message = WRONG_DEVICE[framework]
    namespace: dict = {}
    exec(setup, namespace)
    x = eval(make, namespace)
    with pytest.raises(ValueError) as e:
        m.alloc_on(x, "cuda:0")
    assert str(e.value).startswith(message)
    assert m.alloc_on(x, "cpu") == 2


def test_device_parameters_take_the_pairs_use_raw_stream_takes(m):
    assert m.device_code(("cuda", 1)) == 201
    assert m.device_code(("cpu", 0)) == 100
    assert m.device_code(("cpu", None)) == 100  # None is index 0, as tensorplug.Device reads it
    assert m.device_code(tensorplug.Device("cuda", 1)) == 201
    assert m.device_code((2, 1)) == 201
    with tensorplug.use_raw_stream(("cuda", 1), 0):  # the same pair, accepted there too
        pass
    with pytest.raises(ValueError) as e:
        m.device_code(("nowhere", 0))
    assert str(e.value) == ("device_code() argument 1 'device': tuple 'nowhere:0' is a device tensorplug cannot "
                            "pass: 'nowhere' is not a DLPack device type")


def test_torch_meta_device_is_refused_by_name(m):
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError) as e:
        m.device_code(torch.device("meta"))
    assert str(e.value) == ("device_code() argument 1 'device': torch.device 'meta' is a device tensorplug cannot "
                            "pass: 'meta' is not a DLPack device type")
    assert m.device_code(torch.device("cpu")) == 100


@pytest.mark.parametrize("namespace", ["aten", "prim", "prims"])
def test_op_in_a_frameworks_own_namespace_is_refused_at_declaration(m, namespace):
    with pytest.raises(ValueError) as e:
        tensorplug.op(f"{namespace}::add", m.alloc_on)
    assert str(e.value) == (f"tensorplug.op() argument 'name': the namespace {namespace!r} of '{namespace}::add' "
                            f"belongs to torch's own operators (which would run instead); choose a namespace of your "
                            f"library's own")


def test_jitted_op_errors_carry_one_message_on_both_jax_paths(tmp_path):
    # jax decides the exception type of an error in a jitted call, not the handler (which
    # returns an XLA status): jax 0.10 raises JaxRuntimeError from its Python dispatch (the
    # first call of a jitted function) and ValueError from its C++ fast path (later calls),
    # for every status code. The message is the same on both (docs/decisions.md).
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    mod = cpp.load_inline("error_types_jax", r"""
namespace tp = tensorplug;
tp::Tensor Checked(tp::TensorView x) {
  TENSORPLUG_CHECK(x.data_ptr<float>()[0] >= 0, ValueError) << "negative first element";
  tp::Tensor y = tp::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  for (int64_t i = 0; i < x.numel(); ++i) y.data_ptr<float>()[i] = x.data_ptr<float>()[i];
  return y;
}
TENSORPLUG_EXPORT(checked, Checked, "x");
""")
    op = tensorplug.op("errortypes::checked", mod.checked, returns=tensorplug.like("x"))
    message = ("INVALID_ARGUMENT: errortypes::checked(): ValueError: negative first element (check failed: "
               "x.data_ptr<float>()[0] >= 0)")
    first = jax.jit(lambda x: op(x))
    with pytest.raises(jax.errors.JaxRuntimeError) as e:
        first(jnp.full(3, -1.0, jnp.float32))
    assert str(e.value) == message
    warm = jax.jit(lambda x: op(x) + 0)
    assert warm(jnp.ones(3, jnp.float32)).tolist() == [1, 1, 1]
    with pytest.raises(ValueError) as e:
        warm(jnp.full(3, -1.0, jnp.float32))
    assert str(e.value) == message
    assert isinstance(e.value, ValueError) and not isinstance(e.value, RuntimeError)
