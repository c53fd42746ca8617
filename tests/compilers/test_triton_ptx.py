"""A GPU kernel language for real: a Triton kernel compiled to PTX, embedded in a kernel
library as a `ptx` module (__tensorplug__library_bin) and launched through tensorplug on
torch's current stream. Needs a CUDA device, torch with CUDA and triton."""

import re

import pytest

import tensorplug
from tensorplug import cpp, library_bin


def cuda_torch_or_skip():
    torch = pytest.importorskip("torch", reason="torch not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


def entry_parameter_count(ptx: str, name: str) -> int:
    """The number of .param of the kernel `name`: Triton appends parameters of its own
    (scratch pointers) after the kernel's, which the launch passes as 0."""
    match = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\((.*?)\)", ptx, re.S)
    assert match, f"no .entry {name} in the PTX"
    return match.group(1).count(".param")


def test_a_triton_kernel_launched_from_an_embedded_ptx_module(tmp_path):
    torch = cuda_torch_or_skip()
    triton = pytest.importorskip("triton", reason="triton not installed")
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def add_one(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1.0, mask=mask)

    major, minor = torch.cuda.get_device_capability()
    source = ASTSource(fn=add_one, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i64", "BLOCK": "constexpr"},
                       constexprs={"BLOCK": 256})
    compiled = triton.compile(source, target=GPUTarget("cuda", major * 10 + minor, 32))
    ptx, name = compiled.asm["ptx"], compiled.metadata.name
    blob = library_bin.pack([("ptx", library_bin.ptx_payload(ptx))])
    host_source = tmp_path / "host.c"
    host_source.write_text("#include <tensorplug/c_api.h>\n"
                           "TP_EXPORT const char* __tensorplugsig_ready(void) { return \"->int\"; }\n"
                           "TP_EXPORT int __tensorplug_ready(void* s, const TPAny* a, int32_t n, TPAny* r) {\n"
                           "  (void)s; (void)a; (void)n;\n  r->type_index = kTPInt;\n  r->v_int64 = 1;\n  return 0;\n}\n")
    host = cpp.build("triton_host", [host_source, library_bin.write_assembly(blob, tmp_path / "bin")],
                     build_directory=tmp_path / "build")
    module = tensorplug.load_module(host)
    assert name in module.functions

    n = 1000
    x = torch.arange(n, dtype=torch.float32, device="cuda")
    out = torch.empty_like(x)
    extras = [0] * (entry_parameter_count(ptx, name) - 3)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        module[name]((n + 255) // 256, 1, 1, 32 * compiled.metadata.num_warps, 1, 1, compiled.metadata.shared,
                     x, out, n, *extras)
    stream.synchronize()
    assert torch.equal(out, x + 1)
