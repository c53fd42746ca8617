"""Wrong but non-crashing behaviours the fuzzer found (issue 9): results, arguments and
callback values that used to be accepted, or refused with an exception naming neither the
function nor the argument.

Cases where a crash is conceivable (a foreign-version tensor handed to a framework) run in
their own interpreter; the rest run in-process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import tensorplug

SOURCE = r"""
#include <atomic>
#include <vector>

namespace tp = tensorplug;

namespace {
std::atomic<int64_t> g_deleted{0};

struct VersionBlock {
  DLManagedTensorVersioned managed;
  int64_t shape[1];
  float data[2];
};
void VersionDelete(DLManagedTensorVersioned* self) {
  g_deleted.fetch_add(1);
  delete reinterpret_cast<VersionBlock*>(self);
}

int64_t Deleted() { return g_deleted.load(); }
int64_t StrLen(std::string s) { return static_cast<int64_t>(s.size()); }
tp::Tensor AllocNd(int64_t ndim) {
  return tp::Tensor::FromEnvAlloc(std::vector<int64_t>(static_cast<size_t>(ndim), 1), tp::kFloat32, tp::kCPU);
}
// The same from inside a call whose tensor argument picks the caller's allocator.
tp::Tensor AllocNdLike(tp::TensorView, int64_t ndim) { return AllocNd(ndim); }
int64_t DeviceId(DLDevice d) { return d.device_id; }
int64_t AddCb(int64_t x, tp::Function f) { return f(x).cast<int64_t>(); }
}  // namespace

TENSORPLUG_EXPORT(deleted, Deleted);
TENSORPLUG_EXPORT(str_len, StrLen, "s");
TENSORPLUG_EXPORT(alloc_nd, AllocNd, "ndim");
TENSORPLUG_EXPORT(alloc_nd_like, AllocNdLike, "x", "ndim");
TENSORPLUG_EXPORT(device_id, DeviceId, "device");
TENSORPLUG_EXPORT(add_cb, AddCb, "x", "f");

// versioned_result(major, as_tuple, *tensors): a float32 CPU tensor [1, 2] whose
// DLManagedTensorVersioned says DLPack version major.0 (alone, or as a 1-tuple). The tensor
// arguments only choose the caller's framework.
extern "C" TP_EXPORT int __tensorplug_versioned_result(void*, const TPAny* args, int32_t nargs, TPAny* result) {
  if (nargs < 2 || args[0].type_index != kTPInt || args[1].type_index != kTPInt) {
    TPErrorSet("TypeError", "versioned_result(major, as_tuple, *tensors)");
    return -1;
  }
  auto* b = new VersionBlock{};
  b->managed.version = {static_cast<uint32_t>(args[0].v_int64), 0};
  b->managed.manager_ctx = b;
  b->managed.deleter = VersionDelete;
  b->shape[0] = 2;
  b->data[0] = 1.0f;
  b->data[1] = 2.0f;
  DLTensor& t = b->managed.dl_tensor;
  t.data = b->data;
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = b->shape;
  t.strides = nullptr;
  TPAny value;
  value.type_index = kTPTensor;
  value.flags = 0;
  value.v_tensor = &b->managed;
  if (args[1].v_int64 == 0) {
    *result = value;
    return 0;
  }
  TPTuple* tuple = TPTupleCreate(1);
  if (!tuple) {
    VersionDelete(&b->managed);
    TPErrorSet("MemoryError", "versioned_result: out of memory");
    return -1;
  }
  tuple->items[0] = value;
  result->type_index = kTPTuple;
  result->flags = 0;
  result->v_tuple = tuple;
  return 0;
}
"""


@pytest.fixture(scope="module")
def lib_path():
    from tensorplug import cpp

    return cpp.load_inline("bad_results", SOURCE).path


@pytest.fixture(scope="module")
def m(lib_path):
    return tensorplug.load_module(str(lib_path))


PRELUDE = """
def check(thunk):
    try:
        print("ok:", thunk())
    except Exception as e:
        print(f"{type(e).__name__}: {e}")
"""


def run_child(lib: str, body: str, timeout: float = 120) -> list[str]:
    """Run `body` in a fresh interpreter with `m` the test library and check() defined."""
    code = "import tensorplug\nm = tensorplug.load_module(%r)\n" % str(lib) + PRELUDE + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"child exited with {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return out.stdout.splitlines()


# ------------------------------------------------------------ 1. DLPack version ----
@pytest.mark.parametrize("framework", ["tensorplug", "numpy", "torch"])
def test_result_of_another_dlpack_major_version_is_refused(lib_path, framework):
    if framework != "tensorplug":
        pytest.importorskip(framework, reason=f"{framework} not installed")
    make = {
        "tensorplug": "args = ()",
        "numpy": "import numpy as np; args = (np.zeros(1, dtype=np.float32),)",
        "torch": "import torch; args = (torch.zeros(1),)",
    }[framework]
    lines = run_child(lib_path, make + """
check(lambda: m.versioned_result(99, 0, *args))
check(lambda: m.deleted())
check(lambda: m.versioned_result(0, 1, *args))
check(lambda: m.deleted())
r = m.versioned_result(1, 0, *args)
print(type(r).__module__.split(".")[0], tuple(r.shape))
del r
import gc; gc.collect()
check(lambda: m.deleted())
""")
    module = framework
    assert lines == [
        "ValueError: versioned_result() returned a tensor of DLPack version 99.0; tensorplug supports DLPack 1.x",
        "ok: 1",
        "ValueError: versioned_result() returned a tensor of DLPack version 0.0; tensorplug supports DLPack 1.x",
        "ok: 2",
        f"{module} (2,)",
        "ok: 3",
    ]


# ------------------------------------------------- 2. errors that need more arguments ----
def test_unencodable_str_argument_keeps_its_message(m):
    with pytest.raises(UnicodeError) as info:
        m.str_len("\ud800")
    assert type(info.value) is UnicodeError  # UnicodeEncodeError cannot be built from a message
    assert isinstance(info.value, ValueError)
    assert str(info.value) == ("str_len() argument 1 's': 'utf-8' codec can't encode character '\\ud800' in "
                               "position 0: surrogates not allowed")
    assert type(info.value.__cause__) is UnicodeEncodeError  # the original, with its object and range
    assert m.str_len("héllo") == 6


def test_unencodable_str_returned_by_a_callback_keeps_its_message(m):
    with pytest.raises(UnicodeError) as info:
        m.add_cb(1, lambda v: "\udcff")
    assert type(info.value) is UnicodeError
    assert str(info.value) == ("add_cb() argument 2 'f': 'utf-8' codec can't encode character '\\udcff' in "
                               "position 0: surrogates not allowed")


# ------------------------------------------------------- 3. ndim limit in allocations ----
def test_numpy_allocation_past_the_ndim_limit(m):
    np = pytest.importorskip("numpy", reason="numpy not installed")
    limit = tensorplug._core.MAX_NDIM
    message = (f"FromEnvAlloc: {limit + 1} dimensions; tensorplug supports at most {limit}")
    with tensorplug.output_framework("numpy"):
        with pytest.raises(ValueError) as info:
            m.alloc_nd(limit + 1)
        assert str(info.value) == message
        assert m.alloc_nd(limit).shape == (1,) * limit
    x = np.zeros(1, dtype=np.float32)
    with pytest.raises(ValueError) as info:
        m.alloc_nd_like(x, limit + 1)
    assert str(info.value) == message
    assert type(m.alloc_nd_like(x, limit)) is np.ndarray
    with pytest.raises(ValueError) as info:
        m.alloc_nd(limit + 1)
    assert str(info.value) == message
    assert isinstance(m.alloc_nd(3), tensorplug.Tensor)


# -------------------------------------------------------------------- 4. devices ----
@pytest.mark.parametrize(
    ("device", "message"),
    [
        ((-1, -1), "device type -1 of (-1, -1) is not a DLPack device type tensorplug knows"),
        ((1, -1), "device id -1 of (1, -1) is negative"),
        ((2, -5), "device id -5 of (2, -5) is negative"),
        ((0, 0), "device type 0 of (0, 0) is not a DLPack device type tensorplug knows"),
        ((1000, 0), "device type 1000 of (1000, 0) is not a DLPack device type tensorplug knows"),
        ("cuda:-1", "device index -1 of 'cuda:-1' is negative"),
        ("cpu:-3", "device index -3 of 'cpu:-3' is negative"),
    ],
)
def test_negative_or_unknown_devices_are_refused(m, device, message):
    with pytest.raises(ValueError) as info:
        m.device_id(device)
    assert str(info.value) == "device_id() argument 1 'device': " + message


def test_valid_devices_still_pass(m):
    assert m.device_id((1, 0)) == 0
    assert m.device_id((2, 3)) == 3
    assert m.device_id("cuda:7") == 7
    assert m.device_id(tensorplug.Device("cuda", 2)) == 2  # a (name, index) named tuple
    with pytest.raises(TypeError) as info:
        m.device_id("cuda:x")
    assert str(info.value) == ("device_id() argument 1 'device': expected a device such as 'cpu', 'cuda:0' or "
                               "(device_type, device_id), got 'cuda:x' (str)")


# ------------------------------------------------------- 5. callback return values ----
def test_callback_result_too_big_for_int64_names_the_kernel_argument(m):
    with pytest.raises(OverflowError) as info:
        m.add_cb(1, lambda v: 2**70)
    assert str(info.value) == ("add_cb() argument 2 'f': a Python callback returned 1180591620717411303424, "
                               "which does not fit int64")
    with pytest.raises(OverflowError) as info:
        m.add_cb(1, lambda v: -(2**63) - 1)
    assert str(info.value) == ("add_cb() argument 2 'f': a Python callback returned -9223372036854775809, "
                               "which does not fit int64")
    with pytest.raises(OverflowError) as info:
        m.add_cb(1, lambda v: 10**5000)  # past the int-to-str digit limit
    assert str(info.value) == ("add_cb() argument 2 'f': a Python callback returned an int too long to print, "
                               "which does not fit int64")
    assert m.add_cb(1, lambda v: v + 2**62) == 1 + 2**62


def test_callback_own_exception_is_unchanged(m):
    def fails(v):
        raise KeyError("inside")

    with pytest.raises(KeyError) as info:
        m.add_cb(1, fails)
    assert str(info.value) == "'inside'"
