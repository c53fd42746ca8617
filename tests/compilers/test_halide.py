"""Halide, an ahead-of-time generator, for real (examples/halide): pipelines compiled by
Halide's Python package to objects, embedded in a kernel library as a module of kind
`halide`, their runtime in a runtime library reached through global functions; called from
numpy, torch, jax and paddle, and as ops inside torch.compile and jax.jit."""

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("halide", reason="halide not installed (pip install '.[test]')")

import tensorplug  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _example():
    spec = importlib.util.spec_from_file_location("halide_example_build", ROOT / "examples" / "halide" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    work = tmp_path_factory.mktemp("halide")
    runtime, kernels = _example().build(work)
    (work / "pipelines.so").unlink()  # the kernel library carries them: nothing else is needed
    return runtime, kernels


@pytest.fixture(scope="module")
def halide_kernels(built):
    runtime, kernels = built
    tensorplug.load_library(runtime, global_symbols=True)
    return tensorplug.load_module(kernels)


def blur3_reference(image):
    padded = np.pad(image, ((0, 0), (1, 1)), mode="edge")
    return (padded[:, :-2] + padded[:, 1:-1] + padded[:, 2:]) / np.float32(3)


def test_the_embedded_pipelines_are_the_librarys_functions(halide_kernels):
    assert halide_kernels.functions == ("blur3", "brighten", "offset", "pipelines")
    assert halide_kernels.pipelines() == "brighten,blur3,offset"
    # Signatures come from Halide's metadata: inputs view, outputs mview, scalars by type.
    assert halide_kernels.brighten.signature_text == "input:view;alpha:float;brightened:mview->void"
    assert halide_kernels.blur3.signature_text == "image:view;blurred:mview->void"
    assert halide_kernels.offset.signature_text == "values:view;n:int;offsets:mview->void"


def test_numpy_values_and_strides(halide_kernels):
    x = np.arange(10, dtype=np.float32)
    out = np.empty_like(x)
    halide_kernels.brighten(x, 2.0, out)
    assert out.tolist() == (2 * x + 1).tolist()
    image = np.random.default_rng(0).standard_normal((5, 19)).astype(np.float32)
    for view in (image, image.T, image[:, ::-2], image[::2, 3:]):
        out = np.empty(view.shape, np.float32)
        halide_kernels.blur3(view, out)
        np.testing.assert_allclose(out, blur3_reference(view), rtol=1e-6)
    wide = np.zeros(10, np.float32)
    halide_kernels.brighten(x[:5], 1.0, wide[::2])  # a strided output
    assert wide.tolist() == [1, 0, 2, 0, 3, 0, 4, 0, 5, 0]


def test_integer_scalars_are_checked_against_the_pipelines_type(halide_kernels):
    out = np.zeros(3, np.int32)
    halide_kernels.offset(np.arange(3, dtype=np.int32), -128, out)
    assert out.tolist() == [-128, -127, -126]
    with pytest.raises(OverflowError, match=r"^offset\(\): argument 'n': 300 is out of range for int8$"):
        halide_kernels.offset(np.arange(3, dtype=np.int32), 300, out)
    assert out.tolist() == [-128, -127, -126]


def test_torch_and_paddle_tensors(halide_kernels):
    torch = pytest.importorskip("torch", reason="torch not installed")
    paddle = pytest.importorskip("paddle", reason="paddle not installed")
    out = torch.empty(4)
    halide_kernels.brighten(torch.arange(4.0), 3.0, out)
    assert out.tolist() == [1, 4, 7, 10]
    image = torch.arange(12.0).reshape(3, 4)
    blurred = torch.empty(4, 3)
    halide_kernels.blur3(image.t(), blurred)
    np.testing.assert_allclose(blurred.numpy(), blur3_reference(image.t().numpy()), rtol=1e-6)
    p = paddle.zeros([4])
    halide_kernels.brighten(paddle.arange(4, dtype="float32"), 2.0, p)
    assert p.numpy().tolist() == [1, 3, 5, 7]


def test_ops_inside_torch_compile_and_jax_jit(halide_kernels):
    torch = pytest.importorskip("torch", reason="torch not installed")
    jax = pytest.importorskip("jax", reason="jax not installed")
    jnp = jax.numpy
    brighten = tensorplug.op("test_halide::brighten", halide_kernels.brighten)
    blur3 = tensorplug.op("test_halide::blur3", halide_kernels.blur3)

    def step(image):
        out = torch.empty_like(image)
        blur3(image, out)
        flat = out.reshape(-1)
        result = torch.empty_like(flat)
        brighten(flat, 2.0, result)
        return result

    image = torch.arange(12.0).reshape(3, 4)
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    expected = 2 * blur3_reference(image.numpy()).reshape(-1) + 1
    np.testing.assert_allclose(compiled(image).numpy(), expected, rtol=1e-6)

    @jax.jit
    def step_jax(image):
        out = blur3(image, jnp.zeros_like(image))
        return brighten(out.reshape(-1), 2.0, jnp.zeros(out.size, jnp.float32))

    np.testing.assert_allclose(np.asarray(step_jax(jnp.asarray(image.numpy()))), expected, rtol=1e-6)


def test_bad_arguments(halide_kernels):
    x = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match=r"^blur3\(\) argument 1 'image': expected a tensor of 2 dimensions, got 1$"):
        halide_kernels.blur3(x, x)
    with pytest.raises(TypeError, match=r"^brighten\(\) argument 1 'input': expected a float32 tensor, got float64$"):
        halide_kernels.brighten(x.astype(np.float64), 1.0, x)
    # Halide's own checks: out needs input[0:5], which has 3 elements.
    with pytest.raises(ValueError, match=r"^brighten\(\): Halide error -4: Input buffer input is accessed at 4, which "
                                         r"is beyond the max \(2\) in dimension 0$"):
        halide_kernels.brighten(x, 1.0, np.zeros(5, np.float32))


def test_the_runtime_state_is_reached_through_a_global_function(halide_kernels):
    set_num_threads = tensorplug.get_global_func("halide.set_num_threads")
    previous = set_num_threads(2)
    try:
        assert set_num_threads(3) == 2
        image = np.ones((64, 64), np.float32)
        out = np.empty_like(image)
        halide_kernels.blur3(image, out)  # blur3 runs its rows on Halide's thread pool
        assert out.min() == out.max() == 1.0
    finally:
        set_num_threads(previous)
    with pytest.raises(ValueError, match=r"halide.set_num_threads\(n\): expected a number of threads from 0"):
        set_num_threads(-1)


def test_without_the_runtime_the_kernel_library_names_the_missing_kind(built):
    _, kernels = built
    code = textwrap.dedent(f"""
        import tensorplug
        try:
            tensorplug.load_module({str(kernels)!r})
        except ValueError as e:
            print(e)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "load_from_bytes.halide" in result.stdout, result.stdout + result.stderr
