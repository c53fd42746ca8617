"""Functions of a library built for apache tvm-ffi as tensorplug ops (issue 42 item 4).

The library (tests/support/tvm_ffi_kernels.py) is built by tvm-ffi's own ``build_inline`` with its
metadata and loaded unchanged; its functions become ops used inside ``torch.compile(fullgraph=True)``
and ``jax.jit`` (split over 4 CPU devices with no all-gather, in a worker process), and
differentiated in both through a backward that is itself a tvm-ffi function.
"""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy", reason="numpy not installed")
pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi not installed (pip install \"tensorplug[tvm-ffi]\")")

import tvm_ffi_kernels  # noqa: E402
from sharding_procs import run_workers  # noqa: E402


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    return tvm_ffi_kernels.build(tmp_path_factory.mktemp("tvm_ffi_ops"))


@pytest.fixture(scope="module")
def ops(library):
    return tvm_ffi_kernels.declare(library, namespace="tvmffi_ops")


def test_the_ops_carry_tvm_ffis_signatures(ops):
    assert ops["square"].function.signature_text == "arg0:view->tensor"
    assert ops["scale_into"].function.signature_text == "arg0:view;arg1:mview;arg2:float->void"


# ------------------------------------------------------------------------ torch ----
def test_torch_compile_fullgraph_runs_the_op_and_its_tvm_ffi_backward(ops):
    torch = pytest.importorskip("torch", reason="torch not installed")
    square = ops["square"]
    x = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    compiled = torch.compile(lambda x: square(x).sum(), fullgraph=True)  # inductor
    y = compiled(x)
    y.backward()
    assert y.item() == 14.0
    torch.testing.assert_close(x.grad, torch.tensor([2.0, -4.0, 6.0]))
    x.grad = None
    square(x).sum().backward()  # eager: the same backward
    torch.testing.assert_close(x.grad, torch.tensor([2.0, -4.0, 6.0]))


def test_torch_compile_fullgraph_writes_a_declared_output(ops):
    torch = pytest.importorskip("torch", reason="torch not installed")
    scale_into = ops["scale_into"]

    def step(x, out):
        scale_into(x, out, 2.5)
        return out * 2

    out = torch.zeros(4)
    result = torch.compile(step, fullgraph=True, backend="aot_eager")(torch.arange(4.0), out)
    torch.testing.assert_close(out, torch.arange(4.0) * 2.5)
    torch.testing.assert_close(result, torch.arange(4.0) * 5)


def test_torch_ops_registered_under_their_names(ops):
    torch = pytest.importorskip("torch", reason="torch not installed")
    x = torch.tensor([3.0, 4.0])
    ops["square"](x)  # registers torch.ops.<namespace>.<name> on first use with torch tensors
    torch.testing.assert_close(torch.ops.tvmffi_ops.square(x), torch.tensor([9.0, 16.0]))


def test_torch_runs_the_op_through_the_native_kernel(ops):
    # No Python between torch's dispatcher and the tvm-ffi function: tensorplug's compiled
    # kernel calls the bridge's entry, which hands the allocation back as torch's own tensor.
    torch = pytest.importorskip("torch", reason="torch not installed")
    from tensorplug_adapters.torch import native as torch_native

    x = torch.tensor([3.0, 4.0])
    torch.testing.assert_close(ops["square"](x), torch.tensor([9.0, 16.0]))
    assert torch_native.reason(ops["square"]) is None
    kernel = next(line for line in torch._C._dispatch_dump("tvmffi_ops::square").splitlines()
                  if line.startswith("CompositeExplicitAutograd"))
    # registered from compiled code (the compiled torch bridge by default, else the plugin's kernel)
    assert "torch/bridge.cc" in kernel or "torch/kernel.cc" in kernel, kernel


# -------------------------------------------------------------------------- jax ----
def test_jax_jit_and_grad(ops):
    jax = pytest.importorskip("jax", reason="jax not installed")
    jnp = jax.numpy
    square = ops["square"]
    x = jnp.asarray([1.0, -2.0, 3.0], dtype=jnp.float32)
    np.testing.assert_array_equal(jax.jit(square)(x), [1.0, 4.0, 9.0])
    np.testing.assert_array_equal(jax.jit(jax.grad(lambda x: square(x).sum()))(x), [2.0, -4.0, 6.0])
    np.testing.assert_array_equal(jax.grad(lambda x: square(x).sum())(x), [2.0, -4.0, 6.0])
    # Destination passing inside jit: the written argument is the op's result.
    np.testing.assert_array_equal(jax.jit(lambda x: ops["scale_into"](x, jnp.zeros(3, jnp.float32), 3.0))(x),
                                  [3.0, -6.0, 9.0])


def test_jax_jit_refuses_a_wrong_dtype_with_the_kernels_error(ops):
    jax = pytest.importorskip("jax", reason="jax not installed")
    with pytest.raises(Exception, match=r"square: float32 only") as info:
        jax.block_until_ready(jax.jit(ops["square"])(jax.numpy.asarray([1, 2], dtype=jax.numpy.int32)))
    # XlaRuntimeError is the same error's name before jax renamed it (0.6.2, Python 3.10's jax)
    assert type(info.value).__name__ in ("JaxRuntimeError", "XlaRuntimeError", "TypeError")


def test_jax_jit_sharded_over_4_devices_without_all_gather(library, tmp_path):
    pytest.importorskip("jax", reason="jax not installed")
    record = run_workers("tvm_ffi_sharding_worker.py", [[library]], tmp_path)[0]
    assert record["devices"] == 4
    forward = record["forward"]
    assert forward["all_gather"] == 0 and forward["all_to_all"] == 0
    assert forward["call_operands"] == [["f32[2,4]"]]  # each device squares its 2 of 8 rows
    assert forward["sharded_like"] and forward["shard_shapes"] == [[2, 4]] and forward["equal"]
    grad = record["grad"]  # the tvm-ffi backward is split the same way
    assert grad["all_gather"] == 0 and grad["all_to_all"] == 0
    assert grad["call_operands"] == [["f32[2,4]", "f32[2,4]"]] and grad["close"]


# -------------------------------------------------------------------------- hub ----
def test_the_hub_publishes_and_selects_on_tvm_ffis_abi(library, tmp_path):
    import json
    import platform

    from tensorplug import hub
    from tensorplug.tvm_ffi import installed_abi

    if platform.machine() != "x86_64":
        pytest.skip("the layout below publishes an x86-64 build")
    installed = installed_abi()
    assert installed == ".".join(tvm_ffi_version().split(".")[:2])
    root = tmp_path / "site"
    (build,) = hub.publish(root, "tvmffi/square", "1.0.0", {"x86-64": library})
    assert build.tvm_ffi == installed and build.functions == ("scale_into", "square", "square_backward")
    # A newer version built against another tvm-ffi ABI: listed, never chosen here.
    hub.publish(root, "tvmffi/square", "2.0.0", {"x86-64": library}, tvm_ffi="0.0")
    entries = json.loads((root / "tvmffi" / "square" / "builds.json").read_text())["builds"]
    assert sorted(e["tvm_ffi"] for e in entries) == sorted(["0.0", installed])

    selection = hub.select("tvmffi/square", source=root)
    assert selection.chosen.version == "1.0.0"
    rejected = [c for c in selection.candidates if c.verdict == "rejected"]
    assert [c.build.version for c in rejected] == ["2.0.0"]
    assert rejected[0].why == f"built for apache tvm-ffi ABI 0.0, the installed one is ABI {installed}"

    mod = hub.load("tvmffi/square", source=root, cache=tmp_path / "cache")
    np.testing.assert_array_equal(mod.square(np.asarray([1.5, -2.0], np.float32)), [2.25, 4.0])
    assert mod.path.startswith(str(tmp_path / "cache"))


def test_a_tensorplug_build_description_has_no_tvm_ffi_field():
    from tensorplug.hub._layout import Build

    build = Build(name="a/b", version="1.0", file="1.0/x/k.so", sha256="0" * 64, size=1, abi=1, os="linux",
                  arch="x86_64", libc="glibc", libc_version="2.17", isa="x86-64")
    assert "tvm_ffi" not in build.to_json() and Build.from_json(build.to_json(), "test") == build


def tvm_ffi_version() -> str:
    from importlib import metadata

    return metadata.version("apache-tvm-ffi")
