"""The GPU path on a real device (docs/gpu.md): allocation through the caller's CUDA
allocator, the caller's stream under `use_stream`, and an op inside CUDA graph capture
(`torch.compile(mode="reduce-overhead")`) whose replays run the kernel again. Needs nvcc
and a CUDA device; each test also needs its framework."""

import shutil

import pytest

import tensorplug
from tensorplug import cpp

# plus_one(x) = x + 1 into a tensor from the caller's allocator, on the caller's stream. It
# counts its calls, and those made while its stream was capturing a CUDA graph; last_stream()
# is the stream its last call saw.
SOURCE = r"""
__global__ void plus_one_kernel(const float* x, float* y, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}

static int64_t g_calls = 0, g_captured_calls = 0, g_last_stream = 0;

tensorplug::Tensor plus_one(tensorplug::TensorView x) {
  TENSORPLUG_CHECK(x.device().device_type == kDLCUDA && x.dtype() == tensorplug::kFloat32 && x.is_contiguous(),
                   ValueError) << "plus_one: expected a contiguous float32 CUDA tensor";
  tensorplug::CUDADeviceGuard guard(x.device().device_id);
  cudaStream_t stream = tensorplug::GetCurrentCUDAStream(x.device().device_id);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TENSORPLUG_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  ++g_calls;
  g_captured_calls += capture == cudaStreamCaptureStatusActive;
  g_last_stream = reinterpret_cast<int64_t>(stream);
  auto y = tensorplug::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  const int64_t n = x.numel();
  if (n > 0) {
    plus_one_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), y.mutable_data_ptr<float>(), n);
    TENSORPLUG_CUDA_CHECK(cudaGetLastError());
  }
  return y;
}
int64_t calls() { return g_calls; }
int64_t captured_calls() { return g_captured_calls; }
int64_t last_stream() { return g_last_stream; }
"""


@pytest.fixture(scope="module")
def gpu_module():
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    return cpp.load_inline("test_gpu_plus_one", "", cuda_sources=SOURCE,
                           functions=["plus_one", "calls", "captured_calls", "last_stream"])


def cuda_torch():
    torch = pytest.importorskip("torch", reason="torch not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


def cuda_cupy():
    cupy = pytest.importorskip("cupy", reason="cupy not installed")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA device")
    except cupy.cuda.runtime.CUDARuntimeError:
        pytest.skip("no CUDA device")
    return cupy


def test_the_kernel_refuses_host_memory_by_name(gpu_module):
    np = pytest.importorskip("numpy", reason="numpy not installed")
    with pytest.raises(ValueError, match=r"^plus_one: expected a contiguous float32 CUDA tensor"):
        gpu_module.plus_one(np.zeros(4, np.float32))


def test_torch_results_come_from_torchs_caching_allocator(gpu_module):
    torch = cuda_torch()
    x = torch.arange(4096, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    y = gpu_module.plus_one(x)
    assert type(y) is torch.Tensor and y.device == x.device and y.dtype == torch.float32
    assert torch.cuda.memory_allocated() - before >= 4096 * 4  # counted by torch's allocator
    assert torch.equal(y, x + 1)
    del y
    assert torch.cuda.memory_allocated() == before  # and given back to it


def test_cupy_results_come_from_cupys_memory_pool(gpu_module):
    cupy = cuda_cupy()
    pool = cupy.get_default_memory_pool()
    x = cupy.arange(4096, dtype=cupy.float32)
    before = pool.used_bytes()
    y = gpu_module.plus_one(x)
    assert type(y) is cupy.ndarray and y.device.id == x.device.id
    assert pool.used_bytes() - before >= 4096 * 4
    assert bool((y == x + 1).all())
    del y
    assert pool.used_bytes() == before


def test_cupy_stream_under_use_stream(gpu_module):
    cupy = cuda_cupy()
    x = cupy.arange(1000, dtype=cupy.float32)
    stream = cupy.cuda.Stream(non_blocking=True)
    with tensorplug.use_stream(stream):
        y = gpu_module.plus_one(x)
        assert gpu_module.last_stream() == stream.ptr
    stream.synchronize()
    assert bool((y == x + 1).all())
    gpu_module.plus_one(x)  # the scope ended: cupy's current stream again
    assert gpu_module.last_stream() == cupy.cuda.get_current_stream().ptr


def test_torch_side_stream_orders_after_its_event(gpu_module):
    # The kernel's launch waits for work queued on the stream before it: a copy recorded on
    # the side stream is complete when the kernel reads it.
    torch = cuda_torch()
    side = torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    with torch.cuda.stream(side):
        x.fill_(41.0)  # queued on side, not the default stream
        y = gpu_module.plus_one(x)
        done = torch.cuda.Event()
        done.record(side)
    assert gpu_module.last_stream() == side.cuda_stream
    done.synchronize()
    assert torch.equal(y, torch.full_like(x, 42.0))


def test_op_inside_cuda_graphs_is_captured_and_replayed(gpu_module):
    torch = cuda_torch()
    op = tensorplug.op("tpgpu::plus_one", gpu_module.plus_one, returns=tensorplug.like("x"))

    def f(x):
        return op(x) * 2

    compiled = torch.compile(f, mode="reduce-overhead", fullgraph=True)
    for step in range(4):  # warm-up, capture, replays
        x = torch.full((1024,), float(step), device="cuda")
        torch.testing.assert_close(compiled(x), (x + 1) * 2)
    assert gpu_module.captured_calls() >= 1  # the capture holds the kernel
    calls = gpu_module.calls()
    for value in (10.0, -3.0):
        x = torch.full((1024,), value, device="cuda")
        torch.testing.assert_close(compiled(x), (x + 1) * 2)  # replays compute from the new input
    assert gpu_module.calls() == calls  # without calling the host function: graph replays


def test_cupy_negative_strides_are_refused_not_garbled(gpu_module):
    # cupy's DLPack export divides a negative byte stride by the item size as an unsigned
    # number: the kernel would see 4611686018427387903 for -1 (seen with cupy 14.2).
    cupy = cuda_cupy()
    x = cupy.arange(8, dtype=cupy.float32)[::-1]
    with pytest.raises(ValueError, match=r"^plus_one\(\) argument 1 'x': cupy cannot export a tensor with negative "
                                         r"strides \(stride -1 of dim 0\)"):
        gpu_module.plus_one(x)
    y = gpu_module.plus_one(cupy.ascontiguousarray(x))  # the way out the message names
    assert bool((y == x + 1).all())


def test_the_cupy_export_check_reads_strides_in_elements():
    # The adapter's check reads only `strides` and `itemsize`, which numpy arrays share.
    np = pytest.importorskip("numpy", reason="numpy not installed")
    from tensorplug_adapters.cupy import exported

    fine = np.zeros((3, 4), np.float32)[:, ::2]
    assert exported(fine) is fine
    with pytest.raises(ValueError, match=r"^cupy cannot export a tensor with negative strides \(stride -2 of dim 1\)"):
        exported(np.zeros((3, 4), np.float32)[:, ::-2])
