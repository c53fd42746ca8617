"""CUDA sources through nvcc, and kernels on the caller's CUDA stream (GPU machines only)."""

import shutil

import pytest

import tensorplug
from tensorplug import cpp
from test_gpu import cuda_cupy, cuda_torch

np = pytest.importorskip("numpy")

CUDA_SOURCE = r"""
__global__ void add_one_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}

// Adds one on the caller's current stream; returns that stream so tests can check it.
int64_t add_one_cuda(tensorplug::TensorView x, tensorplug::MutableView y) {
  TENSORPLUG_CHECK(x.device().device_type == kDLCUDA, ValueError) << "x must be a CUDA tensor";
  TENSORPLUG_CHECK(x.numel() == y.numel(), ValueError) << "x and y differ in size";
  tensorplug::CUDADeviceGuard guard(x.device().device_id);
  cudaStream_t stream = tensorplug::GetCurrentCUDAStream(x.device().device_id);
  const int64_t n = x.numel();
  if (n > 0) {
    add_one_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(),
                                                        static_cast<float*>(y.mutable_data_ptr()), n);
    TENSORPLUG_CUDA_CHECK(cudaGetLastError());
  }
  return reinterpret_cast<int64_t>(stream);
}

tensorplug::Tensor plus_one_cuda(tensorplug::TensorView x) {
  auto out = tensorplug::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  add_one_cuda(x, out.mutable_view());
  return out;
}
"""


@pytest.fixture(scope="module")
def cuda_module():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    return cpp.load_inline("cuda_add_one", "", cuda_sources=CUDA_SOURCE, functions=["add_one_cuda", "plus_one_cuda"])


def test_cuda_sources_compile_and_load(cuda_module):
    assert cuda_module.functions == ("add_one_cuda", "plus_one_cuda")
    assert cuda_module.add_one_cuda.signature_text == "x:view;y:mview->int"
    # On the CPU the kernel refuses cleanly instead of launching.
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
        cuda_module.add_one_cuda(np.ones(3, np.float32), np.ones(3, np.float32))


def test_torch_current_stream_is_seen(cuda_module):
    torch = cuda_torch()
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    assert cuda_module.add_one_cuda(x, y) == torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert cuda_module.add_one_cuda(x, y) == side.cuda_stream
        out = cuda_module.plus_one_cuda(x)
    side.synchronize()
    assert type(out) is torch.Tensor and out.device == x.device
    assert torch.equal(y, x + 1) and torch.equal(out, x + 1)
    with tensorplug.use_stream(side):
        assert cuda_module.add_one_cuda(x, y) == side.cuda_stream


def test_torch_tensor_on_another_device(cuda_module):
    torch = cuda_torch()
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    x = torch.ones(10, device="cuda:1")
    y = torch.empty_like(x)
    assert cuda_module.add_one_cuda(x, y) == torch.cuda.current_stream(1).cuda_stream
    torch.cuda.synchronize(1)
    assert torch.equal(y, x + 1)


def test_cupy_current_stream_is_seen(cuda_module):
    cupy = cuda_cupy()
    x = cupy.arange(1000, dtype=cupy.float32)
    y = cupy.empty_like(x)
    with cupy.cuda.Stream() as stream:
        assert cuda_module.add_one_cuda(x, y) == stream.ptr
        out = cuda_module.plus_one_cuda(x)
        stream.synchronize()
    assert type(out) is cupy.ndarray
    assert bool((y == x + 1).all()) and bool((out == x + 1).all())


def test_jax_gpu_arrays(cuda_module):
    jax = pytest.importorskip("jax", reason="jax not installed")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("no CUDA device")
    x = jax.device_put(jax.numpy.arange(1000, dtype=jax.numpy.float32), gpu)
    out = cuda_module.plus_one_cuda(x)  # jax has no current-stream API: the default stream
    assert isinstance(out, jax.Array) and out.devices() == {gpu}
    np.testing.assert_array_equal(np.asarray(out), np.arange(1000, dtype=np.float32) + 1)
