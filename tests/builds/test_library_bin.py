"""Custom module kinds and the embedded library binary (`__tensorplug__library_bin`): a
host library embeds per-ISA variants of a kernel library (kind `shared_library`, loaded
from memory), a PTX module (kind `ptx`), a cubin (kind `cubin`), or a module of a kind a
runtime registers; its
Module finds the functions of every imported module. Every library is a real build.

Over 500 lines: one feature, the embedded binary, whose kinds share the host builds below."""

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tensorplug
from tensorplug import cpp, library_bin

FUZZ = Path(__file__).parents[1] / "fuzz"

VARIANT = r"""
#include <tensorplug/tensorplug.h>
#include <string>
std::string isa() { return VARIANT_NAME; }
TENSORPLUG_EXPORT(isa, isa);
int64_t add(int64_t a, int64_t b) { return a + b; }
TENSORPLUG_EXPORT(add, add, "a", "b");
"""

INNER = r"""
#include <tensorplug/tensorplug.h>
std::string isa() { return "inner"; }
TENSORPLUG_EXPORT(isa, isa);
int64_t inner_only(int64_t x) { return x * 10; }
TENSORPLUG_EXPORT(inner_only, inner_only, "x");
"""

HOST = r"""
#include <tensorplug/tensorplug.h>
std::string host_hello() { return "host"; }
TENSORPLUG_EXPORT(host_hello, host_hello);
"""

# (ISA variant, compiler flags), most specific first.
VARIANTS = [("avx512f+avx512bw", ["-mavx512f", "-mavx512bw"]), ("avx2+fma", ["-mavx2", "-mfma"]), ("generic", [])]

# One kernel: out[i] = x[i] + 1 for i < n (sm_52 PTX, JIT-compiled by the driver for the GPU).
PTX = r"""
.version 6.0
.target sm_52
.address_size 64
.visible .entry add_one(.param .u64 x, .param .u64 out, .param .u64 n)
{
  .reg .pred %p;
  .reg .b32 %r<4>;
  .reg .b64 %rd<8>;
  .reg .f32 %f<3>;
  ld.param.u64 %rd1, [x];
  ld.param.u64 %rd2, [out];
  ld.param.u64 %rd3, [n];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mad.wide.u32 %rd4, %r1, %r2, 0;
  cvt.u64.u32 %rd5, %r3;
  add.u64 %rd4, %rd4, %rd5;
  setp.ge.u64 %p, %rd4, %rd3;
  @%p bra DONE;
  shl.b64 %rd6, %rd4, 2;
  add.u64 %rd7, %rd1, %rd6;
  ld.global.f32 %f1, [%rd7];
  add.f32 %f2, %f1, 0f3F800000;
  add.u64 %rd7, %rd2, %rd6;
  st.global.f32 [%rd7], %f2;
DONE:
  ret;
}
"""


def _cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def _expected_variant() -> str:
    flags = _cpu_flags()
    for isa, _ in VARIANTS:
        if isa == "generic" or all(f in flags for f in isa.split("+")):
            return isa
    raise AssertionError("unreachable")


def _host(tmp, name, blob, source=HOST):
    (tmp / f"{name}.cc").write_text(source)
    asm = library_bin.write_assembly(blob, tmp / f"{name}_bin")
    return cpp.build(name, [tmp / f"{name}.cc", asm], build_directory=tmp / f"{name}_build")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not sys.platform.startswith("linux"):
        pytest.skip("memfd_create is Linux-only")
    tmp = tmp_path_factory.mktemp("library_bin")
    (tmp / "variant.cc").write_text(VARIANT)
    (tmp / "inner.cc").write_text(INNER)
    variants = {}
    for isa, flags in VARIANTS:
        ident = isa.replace("+", "_")
        variants[isa] = cpp.build(f"variant_{ident}", [tmp / "variant.cc"],
                                  extra_cflags=(*flags, f'-DVARIANT_NAME="{isa}"'),
                                  build_directory=tmp / f"variant_{ident}")
    inner = cpp.build("inner", [tmp / "inner.cc"], build_directory=tmp / "inner")
    payload = library_bin.shared_library_payload(variants)
    inner_payload = library_bin.shared_library_payload({"generic": inner})
    return {
        "tmp": tmp,
        "variants": variants,
        "host": _host(tmp, "host", library_bin.pack([("shared_library", payload)])),
        # host -> variants -> inner: the inner module is imported by the variants module.
        "tree": _host(tmp, "tree", library_bin.pack([("shared_library", payload), ("shared_library", inner_payload)],
                                                     imports=[(0, 1), (1, 2)])),
        # host -> inner, host -> variants: import order decides which `isa` is found.
        "inner_first": _host(tmp, "inner_first", library_bin.pack([("shared_library", payload),
                                                                    ("shared_library", inner_payload)],
                                                                   imports=[(0, 2), (0, 1)])),
        "ptx": _host(tmp, "ptxhost", library_bin.pack([("ptx", library_bin.ptx_payload(PTX))])),
    }


def test_the_variant_this_cpu_runs_is_loaded_from_memory(built):
    m = tensorplug.load_module(built["host"])
    assert m.functions == ("add", "host_hello", "isa")
    assert (m.host_hello(), m.isa(), m.add(2, 3)) == ("host", _expected_variant(), 5)
    maps = open("/proc/self/maps").read()
    assert f"memfd:tensorplug:host.so:{_expected_variant()}" in maps  # no file on disk
    # Loading the host again shares its embedded library.
    again = tensorplug.load_module(built["host"])
    assert again.isa() == m.isa()
    assert maps.count("memfd:tensorplug:host.so:") == open("/proc/self/maps").read().count("memfd:tensorplug:host.so:")


@pytest.mark.parametrize("forced", ["generic", "avx2+fma"])
def test_a_variant_can_be_forced(built, forced):
    if forced != "generic" and not {"avx2", "fma"} <= _cpu_flags():
        pytest.skip("this CPU has no avx2+fma")
    script = f"import tensorplug; print(tensorplug.load_module({built['host']!r}).isa())"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TENSORPLUG_CPU_VARIANT": forced})
    assert (proc.returncode, proc.stdout) == (0, forced + "\n"), proc.stderr


def test_forcing_a_missing_variant_names_the_ones_there(built):
    script = f"import tensorplug\ntry: tensorplug.load_module({built['host']!r})\nexcept ValueError as e: print(e)"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TENSORPLUG_CPU_VARIANT": "sse9"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (f"kernel library '{built['host']}': loading its embedded module 1 (kind 'shared_library') "
                           "failed: TENSORPLUG_CPU_VARIANT=sse9 names no variant (it has: avx512f+avx512bw, "
                           "avx2+fma, generic)\n")


def test_functions_of_nested_imports_are_found_through_the_host(built):
    tree = tensorplug.load_module(built["tree"])
    assert tree.functions == ("add", "host_hello", "inner_only", "isa")
    assert tree.inner_only(4) == 40
    assert tree.isa() == _expected_variant()  # module 1 comes before its import
    inner_first = tensorplug.load_module(built["inner_first"])
    assert inner_first.isa() == "inner"


def test_a_kind_registered_by_a_runtime(built):
    # The runtime here is Python code; a C++ runtime registers load_from_bytes.<kind> the same way.
    seen = []

    def load_greetings(data, size, host_path):
        text = ctypes.string_at(data, size).decode()
        seen.append(host_path)
        table = dict(line.split("=", 1) for line in text.splitlines())

        def lookup(*name):
            if not name:
                return tuple(table)
            if name[0] in table:
                reply = table[name[0]]
                return lambda: reply
            return None

        return lookup

    tensorplug.register_global_func("load_from_bytes.greetings", load_greetings)
    try:
        path = _host(built["tmp"], "greeter",
                     library_bin.pack([("greetings", b"hello=world\nbye=moon")]))
        m = tensorplug.load_module(path)
        assert m.functions == ("bye", "hello", "host_hello")
        assert (m.hello(), m.bye(), seen) == ("world", "moon", [path])
    finally:
        tensorplug.remove_global_func("load_from_bytes.greetings")


# A C++ runtime defining the kind `consts`: payload lines "name=value", each a function
# returning its int. Registered at static initialization, as a DSL runtime would.
CONSTS_RUNTIME = r"""
#include <tensorplug/tensorplug.h>
#include <map>
#include <memory>
#include <sstream>
#include <string>
namespace tp = tensorplug;
namespace {
using Table = std::map<std::string, int64_t>;
int Lookup(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  const Table& table = *static_cast<Table*>(self);
  if (nargs == 0) {
    TPTuple* names = TPTupleCreate(int32_t(table.size()));
    int32_t i = 0;
    for (const auto& item : table) {
      names->items[i].type_index = kTPStr;
      names->items[i++].v_str = TPStringCreate(item.first.data(), item.first.size());
    }
    result->type_index = kTPTuple;
    result->v_tuple = names;
    return 0;
  }
  auto it = table.find(args[0].type_index == kTPRawStr ? args[0].v_c_str : args[0].v_str->data);
  if (it == table.end()) return 0;  // None: not this module's
  int64_t value = it->second;
  result->type_index = kTPFunction;
  result->v_func = tp::Function::FromTyped([value] { return value; }, it->first).release();
  return 0;
}
int LoadConsts(void*, const TPAny* args, int32_t, TPAny* result) {
  std::istringstream lines(std::string(static_cast<const char*>(args[0].v_ptr), size_t(args[1].v_int64)));
  auto* table = new Table;
  for (std::string line; std::getline(lines, line);) {
    auto eq = line.find('=');
    (*table)[line.substr(0, eq)] = std::stoll(line.substr(eq + 1));
  }
  TPFunctionHandle lookup = nullptr;
  if (TPFunctionCreate(table, Lookup, [](void* t) { delete static_cast<Table*>(t); }, nullptr, &lookup) != 0) return -1;
  result->type_index = kTPFunction;
  result->v_func = lookup;
  return 0;
}
const bool registered = [] {
  TPFunctionHandle f = nullptr;
  TPFunctionCreate(nullptr, LoadConsts, nullptr, nullptr, &f);
  TPGlobalFuncRegister("load_from_bytes.consts", f, 1);
  TPFunctionRelease(f);
  return true;
}();
}  // namespace
"""


def test_a_kind_registered_by_a_cxx_runtime(built):
    tmp = built["tmp"]
    (tmp / "consts_runtime.cc").write_text(CONSTS_RUNTIME)
    runtime = cpp.build("consts_runtime", [tmp / "consts_runtime.cc"], build_directory=tmp / "consts_runtime")
    path = _host(tmp, "consts_host", library_bin.pack([("consts", b"answer=42\nyear=2026")]))
    script = textwrap.dedent(f"""
        import tensorplug
        try:
            tensorplug.load_module({path!r})
        except ValueError as exc:
            print("before the runtime:", "load_from_bytes.consts" in str(exc))
        tensorplug.load_library({runtime!r})
        m = tensorplug.load_module({path!r})
        print(m.functions, m.answer(), m.year())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["before the runtime: True", "('answer', 'host_hello', 'year') 42 2026"]


def test_a_kind_nobody_registered(built):
    path = _host(built["tmp"], "unknown_kind", library_bin.pack([("nosuchkind", b"")]))
    with pytest.raises(ValueError) as info:
        tensorplug.load_module(path)
    assert str(info.value) == (f"kernel library '{path}' embeds a module of kind 'nosuchkind', and no runtime "
                               "registered the global function 'load_from_bytes.nosuchkind' that loads it (load that "
                               "runtime first, e.g. with tensorplug.load_library)")


@pytest.mark.parametrize("blob, why", [
    (b"NOTMAGIC" + bytes(16), "bad magic (expected TPLIBBIN)"),
    (library_bin.MAGIC + (2).to_bytes(4, "little") + bytes(12), "format version 2, this runtime reads version 1"),
    (library_bin.pack([("shared_library", b"x")])[:-17], "module 1 is truncated"),
])
def test_a_malformed_blob_is_refused(built, blob, why):
    if why == "module 1 is truncated":  # keep the declared size consistent with the cut
        blob = blob[:16] + len(blob).to_bytes(8, "little") + blob[24:]
    path = _host(built["tmp"], f"bad{abs(hash(why)) % 1000}", blob)
    with pytest.raises(ValueError) as info:
        tensorplug.load_module(path)
    assert str(info.value) == f"kernel library '{path}' has a malformed __tensorplug__library_bin: {why}"


def test_pack_refuses_what_is_not_a_tree():
    with pytest.raises(ValueError, match=r"^pack\(\) argument 'imports': \(0, 5\) does not fit a tree of 2 modules"):
        library_bin.pack([("k", b"")], imports=[(0, 5)])
    with pytest.raises(ValueError, match=r"^pack\(\) argument 'imports': module 2 is not reachable from the host"):
        library_bin.pack([("k", b""), ("k", b"")], imports=[(0, 1)])
    with pytest.raises(ValueError, match=r"^pack\(\): a module kind must be a non-empty name other than '_lib'"):
        library_bin.pack([("_lib", b"")])


def test_the_command_line_tool(built, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "tensorplug.library_bin", "-o", str(tmp_path),
                           "--shared-library", f"generic={built['variants']['generic']}"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{tmp_path / 'library_bin.S'}\n"
    (tmp_path / "host.cc").write_text(HOST)
    m = tensorplug.load_module(cpp.build("cli_host", [tmp_path / "host.cc", tmp_path / "library_bin.S"],
                                         build_directory=tmp_path / "build"))
    assert m.isa() == "generic"


# ------------------------------------------------------------------------ PTX ----
def _cuda_available() -> bool:
    try:
        tensorplug._core.workspace(2, 0, 1)
        return True
    except RuntimeError:
        return False


def _cuda_torch():
    """torch, where both the CUDA driver (for the launch) and torch's CUDA build (for the
    tensors) are there; else the test skips saying which is missing."""
    if not _cuda_available():
        pytest.skip("no CUDA device")
    torch = pytest.importorskip("torch", reason="torch not installed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch has no CUDA build)")
    return torch


def test_a_ptx_module_lists_its_kernels_on_any_machine(built):
    m = tensorplug.load_module(built["ptx"])
    assert m.functions == ("add_one", "host_hello")
    if _cuda_available():
        return
    with pytest.raises(RuntimeError, match=r"^add_one\(\): no CUDA device"):
        m.add_one(1, 1, 1, 32, 1, 1, 0, 0, 0, 0)


def test_a_ptx_kernel_runs_on_the_gpu(built):
    torch = _cuda_torch()
    m = tensorplug.load_module(built["ptx"])
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    out = torch.empty_like(x)
    m.add_one(4, 1, 1, 256, 1, 1, 0, x, out, x.numel())
    torch.cuda.synchronize()
    assert torch.equal(out, x + 1)


# ------------------------------------------------------ modules on their edges ----
def _python_kind(kind, listing, owned=None, refuse_others=False):
    """Register `load_from_bytes.<kind>` (Python): its lookup() returns `listing`, or raises
    it when it is an exception; lookup(name) returns a function for the names in `owned`,
    and for other names None or, with `refuse_others`, raises KeyError."""
    def load(data, size, host_path):
        def lookup(*name):
            if not name:
                if isinstance(listing, Exception):
                    raise listing
                return listing
            if owned and name[0] in owned:
                value = owned[name[0]]
                return lambda: value
            if refuse_others:
                raise KeyError(f"{kind} has no {name[0]}")
            return None
        return lookup

    tensorplug.register_global_func(f"load_from_bytes.{kind}", load, override=True)


@pytest.fixture
def kinds():
    registered = []

    def register(kind, *args, **kwargs):
        _python_kind(kind, *args, **kwargs)
        registered.append(kind)

    yield register
    for kind in registered:
        tensorplug.remove_global_func(f"load_from_bytes.{kind}")


@pytest.mark.parametrize("listing, error, message", [
    (ValueError("the table is gone"), ValueError, "its listing lookup() failed: the table is gone"),
    (["a", "b"], TypeError,
     "its listing lookup() failed: a Python callback returned list, which has no tensorplug value kind"),
    ("a", TypeError, "its listing lookup() returned str, expected a tuple of str"),
    (("a", 3), TypeError, "its listing lookup() returned a tuple whose item 1 is int, expected str"),
])
def test_a_listing_that_fails_fails_the_load(built, kinds, listing, error, message):
    kinds("badlist", listing)
    path = _host(built["tmp"], f"badlist{abs(hash(message)) % 1000}", library_bin.pack([("badlist", b"")]))
    with pytest.raises(error) as info:
        tensorplug.load_module(path)
    assert str(info.value) == f"kernel library '{path}': its embedded module 1 (kind 'badlist'): {message}"


def test_a_lookup_is_asked_only_for_the_names_its_module_lists(built, kinds):
    # The first module refuses names it does not own (KeyError), as a dict-backed lookup does.
    kinds("strict", ("alpha",), owned={"alpha": 1}, refuse_others=True)
    kinds("lenient", ("beta",), owned={"beta": 2})
    path = _host(built["tmp"], "strict_first", library_bin.pack([("strict", b""), ("lenient", b"")]))
    m = tensorplug.load_module(path)
    assert m.functions == ("alpha", "beta", "host_hello")
    assert (m.alpha(), m.beta(), m.host_hello()) == (1, 2, "host")
    assert "gamma" not in m


def test_a_listed_name_the_lookup_cannot_resolve_names_the_library_and_kind(built, kinds):
    kinds("ghosts", ("ghost", "real"), owned={"real": 7})
    path = _host(built["tmp"], "ghost_host", library_bin.pack([("ghosts", b"")]))
    with pytest.raises(ValueError) as info:
        tensorplug.load_module(path)
    assert str(info.value) == (f"kernel library '{path}': its embedded module 1 (kind 'ghosts') lists the function "
                               "'ghost', and its lookup returns no function for that name")


def test_a_lookup_that_fails_for_a_name_it_lists_names_the_library_and_kind(built, kinds):
    kinds("flaky", ("listed",), refuse_others=True)  # lists 'listed', then refuses it
    path = _host(built["tmp"], "flaky_host", library_bin.pack([("flaky", b"")]))
    with pytest.raises(KeyError) as info:
        tensorplug.load_module(path)
    assert info.value.args[0] == (f"kernel library '{path}': its embedded module 1 (kind 'flaky'): looking up its "
                                  "function 'listed' failed: 'flaky has no listed'")


def test_a_broken_variant_is_named_by_its_isa(built):
    tmp = built["tmp"]
    (tmp / "unresolved.cc").write_text('#include <tensorplug/tensorplug.h>\nextern "C" int no_such_symbol_here();\n'
                                       "int64_t f() { return no_such_symbol_here(); }\nTENSORPLUG_EXPORT(f, f);\n")
    broken = cpp.build("unresolved", [tmp / "unresolved.cc"], build_directory=tmp / "unresolved")
    path = _host(tmp, "broken_variant", library_bin.pack([("shared_library",
                                                           library_bin.shared_library_payload({"generic": broken}))]))
    with pytest.raises(ValueError) as info:
        tensorplug.load_module(path)
    message = str(info.value)
    assert message.startswith(f"kernel library '{path}': loading its embedded module 1 (kind 'shared_library') "
                              f"failed: cannot load {path} (embedded variant 'generic'): {path} (embedded variant "
                              "'generic'): undefined symbol: no_such_symbol_here"), message
    assert "/proc/self/fd" not in message


def test_stubgen_preloads_the_runtime_of_an_embedded_kind(built, tmp_path):
    tmp = built["tmp"]
    (tmp / "consts_runtime.cc").write_text(CONSTS_RUNTIME)
    runtime = cpp.build("consts_runtime", [tmp / "consts_runtime.cc"], build_directory=tmp / "consts_runtime")
    host = _host(tmp, "consts_stub_host", library_bin.pack([("consts", b"answer=42")]))
    stubgen = [sys.executable, "-m", "tensorplug", "stubgen", host]
    proc = subprocess.run(stubgen, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == (f"tensorplug stubgen: kernel library '{host}' embeds a module of kind 'consts', and no "
                           "runtime registered the global function 'load_from_bytes.consts' that loads it (load that "
                           "runtime first, e.g. with tensorplug.load_library); pass that runtime library with "
                           "--preload\n")
    proc = subprocess.run([*stubgen, "--preload", runtime], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "def answer() -> int: ..." in proc.stdout and "def host_hello() -> str: ..." in proc.stdout
    proc = subprocess.run([*stubgen, "--preload", str(tmp_path / "nope.so")], capture_output=True, text=True,
                          timeout=120)
    assert (proc.returncode, proc.stderr) == (2, f"tensorplug stubgen: --preload: no such file: {tmp_path / 'nope.so'}\n")


# ---------------------------------------------------------------------- cubin ----
# Two kernels and a __device__ function that is not one: nvcc -cubin marks the __global__
# functions as entries, and only those become the module's functions.
CUBIN_SOURCE = r"""
__device__ __noinline__ float plus_one(float x) { return x + 1.0f; }
extern "C" __global__ void add_one(const float* x, float* out, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = plus_one(x[i]);
}
extern "C" __global__ void zero(float* out, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = 0.0f;
}
"""


def _cubin(tmp, arch="sm_80") -> bytes:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found")
    (tmp / "kernels.cu").write_text(CUBIN_SOURCE)
    out = tmp / f"kernels_{arch}.cubin"
    subprocess.run([nvcc, "-cubin", f"-arch={arch}", "-o", str(out), str(tmp / "kernels.cu")], check=True,
                   capture_output=True, text=True, timeout=300)
    return out.read_bytes()


def test_a_cubin_module_lists_its_kernels_on_any_machine(built):
    path = _host(built["tmp"], "cubinhost", library_bin.pack([("cubin", library_bin.cubin_payload(
        _cubin(built["tmp"])))]))
    m = tensorplug.load_module(path)
    assert sorted(m.functions) == ["add_one", "host_hello", "zero"]  # not the __device__ plus_one
    if _cuda_available():
        return
    with pytest.raises(RuntimeError, match=r"^zero\(\): no CUDA device"):
        m.zero(1, 1, 1, 32, 1, 1, 0, 0, 0)


def test_a_cubin_kernel_runs_on_the_gpu(built):
    torch = _cuda_torch()
    major, minor = torch.cuda.get_device_capability()
    cubin = _cubin(built["tmp"], f"sm_{major}{minor}")
    m = tensorplug.load_module(_host(built["tmp"], "cubinhost_gpu", library_bin.pack([("cubin", cubin)])))
    x = torch.arange(1000, dtype=torch.float32, device="cuda")
    out = torch.empty_like(x)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        m.add_one(4, 1, 1, 256, 1, 1, 0, x, out, x.numel())
    stream.synchronize()
    assert torch.equal(out, x + 1)


def test_cubin_payload_refuses_what_is_not_an_elf_image():
    with pytest.raises(ValueError, match=r"^cubin_payload\(\) argument 'image': expected a CUDA ELF image \(nvcc "
                                         r"-cubin\), got 3 bytes starting b'PTX'"):
        library_bin.cubin_payload(b"PTX")


@pytest.mark.parametrize("damage, why", [
    ("host", "ELF machine 62, not CUDA (190)"),          # an x86-64 library, not a cubin
    ("header", "truncated ELF header"),
    ("sections", "section table out of bounds"),
    ("no kernels", "no kernel (no FUNC symbol marked as an entry)"),
    ("32-bit", "not a 64-bit little-endian ELF image"),
])
def test_a_broken_cubin_fails_the_load_naming_why(built, damage, why):
    image = _cubin(built["tmp"])
    if damage == "host":
        image = open(built["variants"]["generic"], "rb").read()
    elif damage == "header":
        image = image[:40]
    elif damage == "sections":  # e_shoff past the end of the image
        image = image[:40] + (len(image) - 32).to_bytes(8, "little") + image[48:]
    elif damage == "no kernels":
        image = bytearray(image)
        shoff, shnum = int.from_bytes(image[40:48], "little"), int.from_bytes(image[60:62], "little")
        for i in range(shnum):  # clear st_other of every symbol: no entry left
            entry = image[shoff + 64 * i: shoff + 64 * (i + 1)]
            if int.from_bytes(entry[4:8], "little") == 2:  # SHT_SYMTAB
                offset, size = int.from_bytes(entry[24:32], "little"), int.from_bytes(entry[32:40], "little")
                for at in range(offset, offset + size, 24):
                    image[at + 5] = 0
        image = bytes(image)
    elif damage == "32-bit":
        image = image[:4] + b"\x01" + image[5:]
    name = "broken_" + damage.replace(" ", "_").replace("-", "_")
    path = _host(built["tmp"], name, library_bin.pack([("cubin", image)]))
    with pytest.raises(ValueError) as info:
        tensorplug.load_module(path)
    assert str(info.value) == f"kernel library '{path}': loading its embedded module 1 (kind 'cubin') failed: " \
                              f"cubin payload: {why}"


def test_mutated_cubins_are_loaded_or_refused_never_crash(built, tmp_path):
    # tests/fuzz/module_payloads.c: cut and flipped copies of a real cubin through the
    # loader; 20,000 cases ran clean, 2,000 of them under valgrind (docs/reliability.md).
    cubin = tmp_path / "seed.cubin"
    cubin.write_bytes(_cubin(built["tmp"]))
    harness = tmp_path / "module_payloads"
    subprocess.run(["cc", "-std=c11", "-O1", f"-I{cpp.include_dir()}", str(FUZZ / "module_payloads.c"),
                    f"-L{cpp.lib_dir()}", "-ltensorplug", f"-Wl,-rpath,{cpp.lib_dir()}", "-o", str(harness)],
                   check=True, capture_output=True, text=True, timeout=300)
    done = subprocess.run([str(harness), "cubin", str(cubin), "2000", "1"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    counts = [int(word) for word in done.stdout.replace(",", " ").split() if word.isdigit()]
    assert counts[0] == 2000 and counts[1] + counts[2] == 2000 and counts[1] > 0 and counts[2] > 0, done.stdout


def test_a_launch_refuses_tensors_off_its_device_before_the_driver(built):
    # Item 3 of the GPU issue on every machine: the fake GPU's tensors report cuda:0 and
    # cuda:1 (tests/support/fake_device.py); the launch names the argument on the other device, and
    # a host tensor, before it asks for a driver.
    np = pytest.importorskip("numpy", reason="numpy not installed")
    from fake_device import CUDA, FakeDeviceAdapter, FakeDeviceTensor, registered

    m = tensorplug.load_module(built["ptx"])
    x = FakeDeviceTensor(np.zeros(4, np.float32), device=(CUDA, 0))
    with registered(FakeDeviceAdapter("fakegpu_launch")):
        with pytest.raises(ValueError, match=r"^add_one\(\) argument 9: expected a tensor on the launch's CUDA "
                                             r"device$"):
            m.add_one(1, 1, 1, 32, 1, 1, 0, x, FakeDeviceTensor(np.zeros(4, np.float32), device=(CUDA, 1)), 4)
        with pytest.raises(ValueError, match=r"^add_one\(\) argument 8: expected a tensor on the launch's CUDA "
                                             r"device$"):
            m.add_one(1, 1, 1, 32, 1, 1, 0, np.zeros(4, np.float32), x, 4)
