"""The kernel hub (docs/hub.md) with real builds: one library compiled for x86-64 and
x86-64-v3, a copy of it marked as an aarch64 build (its ELF header says so; this machine
cannot run it), and one compiled against the headers of another tensorplug ABI; published to
a temporary directory and served from a loopback HTTP server that each test starts and stops.

Over 500 lines: one feature, the hub, whose builds and server fixtures every test here shares."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import json
import platform
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import tensorplug
from tensorplug import cpp

if platform.machine() != "x86_64":
    pytest.skip(f"the hub tests build x86-64 variants; this machine is {platform.machine()}", allow_module_level=True)
if shutil.which("c++") is None:
    pytest.skip("no C++ compiler on PATH (c++)", allow_module_level=True)

from tensorplug import hub  # noqa: E402

NAME = "tp-tests/axpy"

SOURCE = r"""
#include <tensorplug/tensorplug.h>
#include <cstdio>
#include <cstdlib>
#include <string>

// Appends this build's ISA to the file TP_HUB_TEST_MARKER names when the library is
// loaded: the proof that code of the library ran.
__attribute__((constructor)) static void mark_loaded() {
  if (const char* path = std::getenv("TP_HUB_TEST_MARKER")) {
    if (FILE* f = std::fopen(path, "a")) { std::fputs(ISA "\n", f); std::fclose(f); }
  }
}
std::string isa() { return ISA; }
std::string library_version() { return LIBRARY_VERSION; }
tensorplug::Tensor axpy(double alpha, tensorplug::TensorView x, tensorplug::TensorView y) {
  TENSORPLUG_CHECK(x.sizes() == y.sizes() && x.is_contiguous() && y.is_contiguous(), ValueError)
      << "axpy: x and y must be contiguous and of one shape";
  auto out = tensorplug::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device());
  TENSORPLUG_DISPATCH_FLOATING_TYPES(x, "axpy", [&] {
    const scalar_t* px = x.data_ptr<scalar_t>();
    const scalar_t* py = y.data_ptr<scalar_t>();
    scalar_t* po = out.mutable_data_ptr<scalar_t>();
    for (int64_t i = 0; i < x.numel(); ++i) po[i] = static_cast<scalar_t>(alpha * px[i] + py[i]);
  });
  return out;
}
TENSORPLUG_EXPORT(isa, isa);
TENSORPLUG_EXPORT(library_version, library_version);
TENSORPLUG_EXPORT(axpy, axpy, "alpha", "x", "y");
"""

EM_AARCH64 = 183


def _build(work: Path, isa: str, version: str, march: str) -> str:
    return cpp.build("hubaxpy", [work / "axpy.cc"],
                     extra_cflags=[f"-march={march}", f'-DISA="{isa}"', f'-DLIBRARY_VERSION="{version}"'],
                     build_directory=work / f"{isa}-{version}")


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    """The built files: base, v3 (version 1.0.0), v3_next (1.1.0), foreign, abi2."""
    work = tmp_path_factory.mktemp("hub_builds")
    (work / "axpy.cc").write_text(SOURCE)
    built = {"base": _build(work, "x86-64", "1.0.0", "x86-64"), "v3": _build(work, "x86-64-v3", "1.0.0", "x86-64-v3"),
             "v3_next": _build(work, "x86-64-v3", "1.1.0", "x86-64-v3")}
    # The aarch64 build: the baseline build with the machine field of its ELF header set to
    # EM_AARCH64, as a cross compiler's output reads to the hub (which never runs it here).
    data = bytearray(Path(built["base"]).read_bytes())
    data[18:20] = EM_AARCH64.to_bytes(2, "little")
    (work / "aarch64").mkdir()
    built["foreign"] = str(work / "aarch64" / "hubaxpy.so")
    Path(built["foreign"]).write_bytes(bytes(data))
    # Built against the headers of a tensorplug whose ABI is 2 (the macro changed, as in
    # tests/builds/test_abi_guard.py).
    include = work / "include_abi2"
    shutil.copytree(cpp.include_dir(), include)
    header = include / "tensorplug" / "c_api.h"
    header.write_text(header.read_text().replace("#define TENSORPLUG_ABI_VERSION 1\n",
                                                 "#define TENSORPLUG_ABI_VERSION 2\n"))
    (work / "abi2").mkdir()
    built["abi2"] = str(work / "abi2" / "hubaxpy.so")
    subprocess.run(["c++", f"-I{include}", "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-shared",
                    '-DISA="x86-64 abi2"', '-DLIBRARY_VERSION="2.0.0"', str(work / "axpy.cc"), "-o", built["abi2"],
                    f"-L{cpp.lib_dir()}", "-ltensorplug", f"-Wl,-rpath,{cpp.lib_dir()}"], check=True)
    return built


def _publish(root: Path, libs, *, abi2: bool = False) -> Path:
    hub.publish(root, NAME, "1.0.0", {"x86-64-v3": libs["v3"], "x86-64": libs["base"]})
    hub.publish(root, NAME, "1.0.0", {"armv8-a": libs["foreign"]})
    if abi2:
        hub.publish(root, NAME, "2.0.0", {"x86-64": libs["abi2"]})
    return root


@pytest.fixture
def layout(tmp_path, libs):
    return _publish(tmp_path / "layout", libs)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Every test has its own hub cache (the default one, under TENSORPLUG_CACHE_DIR)."""
    monkeypatch.setenv("TENSORPLUG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "hub"


@pytest.fixture
def marker(tmp_path, monkeypatch):
    path = tmp_path / "loaded"
    monkeypatch.setenv("TP_HUB_TEST_MARKER", str(path))
    return path


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # record the requests instead of printing them
        self.server.requests.append(self.path)


@contextlib.contextmanager
def serve(root: Path):
    """A static file server for ``root`` on 127.0.0.1, an OS-chosen port; yields (url,
    the paths requested) and is stopped on exit."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", server.requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _expected_isa() -> str:
    """The level this CPU runs, told by the compiler's own CPU detection (not the hub's)."""
    probe = cpp.load_inline("hub_cpu_probe", r"""
int64_t level() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("x86-64-v4") ? 4 : __builtin_cpu_supports("x86-64-v3") ? 3
       : __builtin_cpu_supports("x86-64-v2") ? 2 : 1;
}""", functions=["level"])
    return {1: "x86-64", 2: "x86-64-v2", 3: "x86-64-v3", 4: "x86-64-v4"}[probe.level()]


# ------------------------------------------------------------------ layout ----
def test_publish_reads_the_metadata_from_the_files(layout, libs):
    index = json.loads((layout / NAME / "builds.json").read_text())
    assert index["format"] == "tensorplug-hub/1" and index["name"] == NAME
    by_isa = {b["isa"]: b for b in index["builds"]}
    assert sorted(by_isa) == ["armv8-a", "x86-64", "x86-64-v3"]
    v3 = by_isa["x86-64-v3"]
    data = Path(libs["v3"]).read_bytes()
    assert v3["sha256"] == hashlib.sha256(data).hexdigest() and v3["size"] == len(data)
    assert (v3["abi"], v3["os"], v3["arch"], v3["libc"], v3["cuda"], v3["gpu_archs"]) == (1, "linux", "x86_64",
                                                                                         "glibc", None, [])
    assert tuple(int(p) for p in v3["libc_version"].split(".")) >= (2, 2, 5)
    assert v3["functions"] == ["axpy", "isa", "library_version"]
    assert v3["file"] == "1.0.0/x86_64-x86-64-v3/hubaxpy.so"
    assert (layout / NAME / v3["file"]).read_bytes() == data
    assert by_isa["armv8-a"]["arch"] == "aarch64"  # read from the ELF header
    assert json.loads((layout / "tensorplug-hub.json").read_text()) == {"format": "tensorplug-hub/1",
                                                                         "libraries": [NAME]}


def test_publish_refuses_other_bytes_for_a_published_variant(layout, libs):
    hub.publish(layout, NAME, "1.0.0", {"x86-64-v3": libs["v3"]})  # the same file again: nothing changes
    with pytest.raises(ValueError) as info:
        hub.publish(layout, NAME, "1.0.0", {"x86-64-v3": libs["v3_next"]})
    assert str(info.value).startswith(f"publish(): {NAME} 1.0.0 already has a x86_64-x86-64-v3 build (sha256 ")
    assert str(info.value).endswith("differs: publish a new version")


@pytest.mark.parametrize("call, message", [
    (lambda libs, root: hub.publish(root, "axpy", "1.0.0", {"x86-64": libs["base"]}),
     "publish() argument 'name': expected a library name 'org/name' (letters, digits, '.', '_', '-'), got 'axpy'"),
    (lambda libs, root: hub.publish(root, NAME, "v1", {"x86-64": libs["base"]}),
     "publish() argument 'version': expected a version of dot-separated numbers ('1.2.0'), got 'v1'"),
    (lambda libs, root: hub.publish(root, NAME, "1.0.0", {"armv8-a": libs["base"]}),
     "hubaxpy.so is built for x86_64; expected an ISA level of x86_64 (x86-64, x86-64-v2, x86-64-v3, x86-64-v4), "
     "got 'armv8-a'"),
    (lambda libs, root: hub.publish(root, NAME, "1.0.0", {"x86-64": libs["base"]}, cuda="12.4", gpu_archs=["gfx90a"]),
     "publish() argument 'gpu_archs': expected sm_XY or compute_XY names for CUDA code, got 'gfx90a'"),
    (lambda libs, root: hub.publish(root, NAME, "1.0.0", {"x86-64": libs["base"]}, cuda="12.4"),
     "publish(): GPU code needs both a toolkit version (cuda= or rocm=) and gpu_archs"),
    (lambda libs, root: hub.publish(root, NAME, "1.0.0", {"x86-64": __file__}),
     "test_hub.py is not a 64-bit little-endian ELF shared library"),
])
def test_publish_refuses_bad_input(libs, tmp_path, call, message):
    with pytest.raises(ValueError) as info:
        call(libs, tmp_path)
    assert message in str(info.value)


# --------------------------------------------------------------- matching ----
def test_the_cpu_level_agrees_with_the_compiler():
    assert hub.detect_machine().isa == _expected_isa()
    assert hub.detect_machine().arch == "x86_64" and hub.detect_machine().abi == tensorplug._core.abi_version()


def test_select_chooses_the_best_isa_and_explains_every_build(layout):
    selection = hub.select(NAME, source=layout)
    best = "x86-64-v3" if _expected_isa() in ("x86-64-v3", "x86-64-v4") else "x86-64"
    assert selection.chosen.isa == best and selection.chosen.source == str(layout)
    verdicts = {c.build.isa: (c.verdict, c.why) for c in selection.candidates}
    assert verdicts["armv8-a"] == ("rejected", "built for aarch64, this machine is x86_64")
    if best == "x86-64-v3":
        assert verdicts["x86-64-v3"] == ("chosen", "the best build that runs here")
        assert verdicts["x86-64"] == ("runs", "ranked below: ISA x86-64 < x86-64-v3")
    table = selection.table().splitlines()
    assert table[0] == f"{NAME} (newest version) from {layout}"
    assert table[1].startswith(f"this machine: tensorplug ABI 1, linux glibc ")
    assert table[2].split() == ["version", "abi", "platform", "libc", "isa", "gpu", "sha256", "verdict"]
    assert len(table) == 3 + 1 + 3
    assert f" {best} " in table[4] and table[4].endswith("chosen: the best build that runs here")
    assert table[6].endswith("rejected: built for aarch64, this machine is x86_64") and " aarch64 " in table[6]


_GLIBC = (os.confstr("CS_GNU_LIBC_VERSION") or "glibc 2.36").split()[1]


def _machine(**fields) -> hub.Machine:
    # This machine's glibc: the builds were linked here, and a newer glibc's headers make
    # them need its version (Ubuntu 24.04's GCC links __isoc23_strtol, glibc 2.38).
    base = dict(abi=1, os="linux", arch="x86_64", libc="glibc", libc_version=_GLIBC, isa="x86-64-v4",
                gpus_probed=True)
    return hub.Machine(**{**base, **fields})


def test_a_cpu_without_v3_gets_the_baseline(layout):
    selection = hub.select(NAME, source=layout, machine=_machine(isa="x86-64-v2"))
    assert selection.chosen.isa == "x86-64"
    why = {c.build.isa: c.why for c in selection.candidates}
    assert why["x86-64-v3"] == "needs x86-64-v3, this CPU runs up to x86-64-v2"


def test_libc_rules(layout):
    selection = hub.select(NAME, source=layout, machine=_machine(libc_version="2.1"))
    assert selection.chosen is None
    assert all("needs glibc 2." in c.why and "this process has 2.1" in c.why
               for c in selection.candidates if c.build.arch == "x86_64")
    musl = hub.select(NAME, source=layout, machine=_machine(libc="musl", libc_version=None))
    assert {c.why for c in musl.candidates if c.build.arch == "x86_64"} == {"built for glibc, this process uses musl"}


def test_gpu_rules(tmp_path, libs):
    root = tmp_path / "gpu"
    hub.publish(root, NAME, "1.0.0", {"x86-64": libs["base"]})
    hub.publish(root, NAME, "1.0.0", {"x86-64-v3": libs["v3"]}, cuda="12.4", gpu_archs=["sm_80", "sm_90a"])
    cases = [
        (dict(), "holds CUDA 12.4 code (sm_80, sm_90a); no CUDA driver here"),
        (dict(cuda="12.6"), "holds CUDA 12.4 code (sm_80, sm_90a); no CUDA device here"),
        (dict(cuda="12.2", cuda_devices=("sm_80",)), "needs a CUDA 12.4 driver, this one supports 12.2"),
        (dict(cuda="12.6", cuda_devices=("sm_75", "sm_86")),
         "holds CUDA 12.4 code (sm_80, sm_90a); none for device sm_75"),
        (dict(cuda="12.6", cuda_devices=("sm_90", "sm_100", "sm_120")),
         "holds CUDA 12.4 code (sm_80, sm_90a); none for device sm_100, sm_120"),
    ]
    for fields, why in cases:
        selection = hub.select(NAME, source=root, machine=_machine(**fields))
        assert selection.chosen.cuda is None, fields
        assert [c.why for c in selection.candidates if c.build.cuda] == [why]
    # sm_80 machine code runs on 8.x devices; the GPU build wins over the CPU-only one.
    selection = hub.select(NAME, source=root, machine=_machine(cuda="12.4", cuda_devices=("sm_86", "sm_90")))
    assert selection.chosen.cuda == "12.4" and selection.chosen.gpu_archs == ("sm_80", "sm_90a")
    assert selection.candidates[1].why == "ranked below: no GPU code, the chosen build has some"
    # PTX (compute_XY) is compiled by the driver for any later device.
    ptx = tmp_path / "ptx"
    hub.publish(ptx, NAME, "1.0.0", {"x86-64": libs["base"]}, cuda="12.0", gpu_archs=["compute_80"])
    assert hub.select(NAME, source=ptx, machine=_machine(cuda="13.0", cuda_devices=("sm_120",))).chosen.cuda == "12.0"
    assert [c.why for c in hub.select(NAME, source=ptx, machine=_machine(cuda="13.0", cuda_devices=("sm_75",)))
            .candidates] == ["holds CUDA 12.0 code (compute_80); none for device sm_75"]
    hub.publish(root, NAME, "1.0.0", {"x86-64": libs["v3_next"]}, rocm="6.2", gpu_archs=["gfx90a"])
    rocm = hub.select(NAME, source=root, machine=_machine(rocm="6.2", rocm_devices=("gfx942",)))
    assert [c.why for c in rocm.candidates if c.build.rocm] == ["holds ROCm 6.2 code (gfx90a); none for device gfx942"]
    assert hub.select(NAME, source=root, machine=_machine(rocm="6.3", rocm_devices=("gfx90a",))).chosen.rocm == "6.2"


# ------------------------------------------------------- loading and running ----
def test_load_runs_the_chosen_build_from_numpy_torch_and_jax(layout, marker):
    kernels = hub.load(NAME, source=layout)
    best = "x86-64-v3" if _expected_isa() in ("x86-64-v3", "x86-64-v4") else "x86-64"
    assert kernels.isa() == best and marker.read_text() == f"{best}\n"
    assert isinstance(kernels, tensorplug.Module) and kernels.functions == ("axpy", "isa", "library_version")
    np = pytest.importorskip("numpy", reason="numpy not installed")
    x = np.arange(4, dtype=np.float32)
    out = kernels.axpy(2.0, x, x)
    assert type(out) is np.ndarray and out.tolist() == [0.0, 3.0, 6.0, 9.0]
    torch = pytest.importorskip("torch", reason="torch not installed")
    t = torch.arange(4, dtype=torch.float64)
    out = kernels.axpy(0.5, t, t)
    assert type(out) is torch.Tensor and out.tolist() == [0.0, 1.5, 3.0, 4.5]
    jnp = pytest.importorskip("jax.numpy", reason="jax not installed")
    j = jnp.arange(4, dtype=jnp.float32)
    out = kernels.axpy(3.0, j, j)
    import jax

    assert isinstance(out, jax.Array) and out.tolist() == [0.0, 4.0, 8.0, 12.0]


def test_load_explain_prints_the_table(layout, capsys):
    hub.load(NAME, source=layout, explain=True)
    printed = capsys.readouterr().out
    assert printed == hub.select(NAME, source=layout).table() + "\n"
    assert "rejected: built for aarch64, this machine is x86_64" in printed


def test_http_source_downloads_each_file_once(layout, private_cache, marker):
    with serve(layout) as (url, requests):
        assert hub.load(NAME, source=url).isa() in ("x86-64-v3", "x86-64")
        chosen = hub.select(NAME, source=url).chosen
        assert hub.load(NAME, source=url).isa() == chosen.isa
        files = [r for r in requests if r.endswith(".so")]
        assert files == [f"/{NAME}/{chosen.file}"]  # once, and never the aarch64 one
        assert requests.count(f"/{NAME}/builds.json") == 3  # the index is read on every selection
    cached = private_cache / "sha256" / chosen.sha256 / "hubaxpy.so"
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == chosen.sha256
    assert chosen.source == url


def test_a_missing_server_is_an_oserror_naming_the_url(tmp_path):
    with serve(tmp_path) as (url, _):
        pass  # the port is closed again
    with pytest.raises(OSError) as info:
        hub.load(NAME, source=url)
    assert str(info.value).startswith(f"hub source {url}: GET {url}{NAME}/builds.json failed: ")


def test_no_network_and_no_urllib_unless_asked(layout):
    # Modules imported by the hub's local load only: a tool measuring the process (coverage
    # imports socket at start) may have imported some before.
    code = ("import sys, tensorplug\n"
            "assert 'tensorplug.hub' not in sys.modules\n"
            "before = set(sys.modules)\n"
            "from tensorplug import hub\n"
            f"assert hub.load({NAME!r}, source={str(layout)!r}).functions\n"
            "print(sorted(m for m in set(sys.modules) - before if m.startswith(('urllib.request', 'http', 'socket'))))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[]\n"


def test_no_build_runs_here(layout):
    with pytest.raises(hub.NoMatchingBuild) as info:
        hub.load(NAME, "3.0.0", source=layout)
    message = str(info.value)
    assert message.startswith(f"hub: no build of {NAME} runs here:\n{NAME} (version 3.0.0) from {layout}\n")
    assert message.count("rejected: version 1.0.0, asked for 3.0.0") == 3
    assert hub.select("tp-tests/absent", source=layout).table().endswith("no builds of this library in these sources")


# --------------------------------------------------------------- integrity ----
def _tamper(layout: Path, build) -> Path:
    path = layout / NAME / build.file
    path.write_bytes(path.read_bytes() + b"\0")  # still a loadable library: only the digest tells
    return path


def test_a_tampered_file_is_refused_and_none_of_it_runs(layout, private_cache, marker):
    chosen = hub.select(NAME, source=layout).chosen
    tampered = _tamper(layout, chosen)
    with pytest.raises(hub.IntegrityError) as info:
        hub.load(NAME, source=layout)
    assert str(info.value) == (f"hub: {tampered} has more than {chosen.size} bytes, the index of {NAME} 1.0.0 says "
                               f"{chosen.size}: refused, nothing of it was loaded")
    assert not marker.exists() and not any(private_cache.rglob("*.so"))
    # Same size, other bytes: the digest refuses it.
    data = bytearray(tampered.read_bytes()[:-1])
    data[-1] ^= 1
    tampered.write_bytes(bytes(data))
    with pytest.raises(hub.IntegrityError) as info:
        hub.load(NAME, source=layout)
    digest = hashlib.sha256(data).hexdigest()
    assert str(info.value) == (f"hub: {tampered} has sha256 {digest}, the index of {NAME} 1.0.0 says "
                               f"{chosen.sha256}: refused, nothing of it was loaded")
    assert not marker.exists()
    # The check is what stopped it: the tampered file itself loads and runs its code.
    tensorplug.load_module(tampered)
    assert marker.read_text() == f"{chosen.isa}\n"


def test_a_tampered_file_over_http_is_refused(layout, private_cache, marker):
    chosen = hub.select(NAME, source=layout).chosen
    _tamper(layout, chosen)
    with serve(layout) as (url, _):
        with pytest.raises(hub.IntegrityError) as info:
            hub.load(NAME, source=url)
    assert str(info.value).startswith(f"hub: {url}{NAME}/{chosen.file} has more than {chosen.size} bytes")
    assert not marker.exists() and not any(private_cache.rglob("*.so"))


def test_a_corrupted_cache_entry_is_fetched_again(layout, private_cache):
    chosen = hub.select(NAME, source=layout).chosen
    path = hub.fetch(NAME, source=layout)
    assert path == private_cache / "sha256" / chosen.sha256 / "hubaxpy.so"
    path.write_bytes(b"corrupt")
    assert hub.fetch(NAME, source=layout) == path
    assert hashlib.sha256(path.read_bytes()).hexdigest() == chosen.sha256


def test_an_index_pointing_outside_its_directory_is_refused(layout):
    index = layout / NAME / "builds.json"
    data = json.loads(index.read_text())
    data["builds"][0]["file"] = "../../../etc/passwd"
    index.write_text(json.dumps(data))
    with pytest.raises(hub.IntegrityError) as info:
        hub.select(NAME, source=layout)
    assert str(info.value) == f"{index}: build file '../../../etc/passwd' leaves the library's directory"


# ------------------------------------------------------------- another ABI ----
def test_a_build_for_another_abi_is_rejected_by_the_hub_before_the_loader(tmp_path, libs, private_cache, marker):
    layout = _publish(tmp_path / "layout", libs, abi2=True)
    index = json.loads((layout / NAME / "builds.json").read_text())
    assert [b["abi"] for b in index["builds"] if b["version"] == "2.0.0"] == [2]  # read from its ABI record
    selection = hub.select(NAME, source=layout)
    assert selection.chosen.version == "1.0.0"  # the newest version that runs, not the newest
    assert [c.why for c in selection.candidates if c.build.version == "2.0.0"] == [
        "built for tensorplug ABI 2, this runtime is ABI 1"]
    with pytest.raises(hub.NoMatchingBuild) as info:
        hub.load(NAME, "2.0.0", source=layout)
    assert "rejected: built for tensorplug ABI 2, this runtime is ABI 1" in str(info.value)
    assert "rebuild it against the headers" not in str(info.value)  # not the loader's own message
    assert not marker.exists() and not any(private_cache.rglob("*.so"))  # not even fetched
    # An index that claims ABI 1 for it: the file's own record is read after the download,
    # before the loader sees it.
    for entry in index["builds"]:
        if entry["version"] == "2.0.0":
            entry["abi"] = 1
    (layout / NAME / "builds.json").write_text(json.dumps(index))
    with pytest.raises(hub.IntegrityError) as info:
        hub.load(NAME, "2.0.0", source=layout)
    assert str(info.value) == (f"hub: {layout / NAME / '2.0.0/x86_64-x86-64/hubaxpy.so'} records tensorplug ABI 2 "
                               f"for x86_64, the index of {NAME} 2.0.0 says ABI 1 for x86_64: refused, nothing of "
                               "it was loaded")
    assert not marker.exists() and not any(private_cache.rglob("*.so"))


# -------------------------------------------------------------------- locks ----
def test_the_lock_pins_the_build(tmp_path, layout, libs, private_cache, marker):
    lock_file = tmp_path / "hub.lock"
    with serve(layout) as (url, requests):
        locked = hub.lock(lock_file, [NAME], source=url)[NAME]
        assert locked.version == "1.0.0"
        hub.publish(layout, NAME, "1.1.0", {"x86-64-v3": libs["v3_next"], "x86-64": libs["base"]})
        assert hub.load(NAME, source=url).library_version() == "1.1.0"  # unlocked: the newest
        assert hub.load(NAME, lock=lock_file).library_version() == "1.0.0"
        assert hub.select(NAME, lock=lock_file).chosen == locked
    # Cached: the locked build loads with the server gone (no network at all).
    assert hub.load(NAME, lock=lock_file).isa() == locked.isa
    recorded = json.loads(lock_file.read_text())
    assert recorded["format"] == "tensorplug-hub-lock/1"
    assert recorded["libraries"][NAME]["sha256"] == locked.sha256 and recorded["libraries"][NAME]["source"] == url
    with pytest.raises(hub.NoMatchingBuild) as info:
        hub.load(NAME, "1.1.0", lock=lock_file)
    assert str(info.value) == f"hub: lock file {lock_file} locks {NAME} 1.0.0, asked for version 1.1.0"
    with pytest.raises(hub.NoMatchingBuild) as info:
        hub.load("tp-tests/other", lock=lock_file)
    assert str(info.value) == f"hub: lock file {lock_file} has no entry for tp-tests/other (it locks: {NAME})"


def test_a_locked_build_that_changed_at_its_source_fails(tmp_path, layout, private_cache, marker):
    lock_file = tmp_path / "hub.lock"
    locked = hub.lock(lock_file, [NAME], source=layout)[NAME]
    _tamper(layout, locked)  # republished in place under the same name
    with pytest.raises(hub.IntegrityError) as info:
        hub.load(NAME, lock=lock_file)
    assert str(info.value).startswith(f"hub: {layout / NAME / locked.file} has more than {locked.size} bytes")
    assert not marker.exists()


def test_a_locked_build_that_does_not_run_here_fails(tmp_path, layout):
    lock_file = tmp_path / "hub.lock"
    hub.lock(lock_file, [NAME], source=layout)
    data = json.loads(lock_file.read_text())
    data["libraries"][NAME]["arch"] = "aarch64"  # a lock made on another machine
    lock_file.write_text(json.dumps(data))
    with pytest.raises(hub.NoMatchingBuild) as info:
        hub.load(NAME, lock=lock_file)
    assert str(info.value).startswith(f"hub: the build of {NAME} locked in {lock_file} does not run here:\n")
    assert str(info.value).endswith("rejected: built for aarch64, this machine is x86_64")


# ----------------------------------------------------- installed distributions ----
def test_installed_distributions_declare_kernels_by_entry_point(tmp_path, libs, monkeypatch, marker):
    # What pip writes for a kernel wheel: its package (a published layout) and its
    # dist-info declaring the library under the tensorplug.kernels group.
    site = tmp_path / "site"
    package = site / "tp_hub_test_kernels"
    _publish(package, libs)
    (package / "__init__.py").write_text("")
    info = site / "tp_hub_test_kernels-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tp-hub-test-kernels\nVersion: 1.0.0\n")
    (info / "entry_points.txt").write_text(f"[tensorplug.kernels]\n{NAME} = tp_hub_test_kernels\n")
    monkeypatch.syspath_prepend(str(site))
    assert NAME in hub.libraries()
    kernels = hub.load(NAME)  # no source: installed distributions
    assert kernels.isa() == hub.select(NAME).chosen.isa
    assert hub.select(NAME).sources == ("installed",)
    assert "tp_hub_test_kernels" not in sys.modules  # found, not imported


# ---------------------------------------------------------------------- CLI ----
def _cli(capsys, *argv):
    from tensorplug.__main__ import main

    code = main(["hub", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("command", ["", "list", "explain", "fetch", "lock", "publish"])
def test_every_hub_command_has_help(command):
    result = subprocess.run([sys.executable, "-m", "tensorplug", "hub", *command.split(), "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: tensorplug hub {command}".rstrip())


def test_cli_publish_list_explain_lock_fetch(tmp_path, libs, capsys, private_cache):
    root = tmp_path / "layout"
    code, out, _ = _cli(capsys, "publish", root, NAME, "1.0.0", "--build", f"x86-64-v3={libs['v3']}",
                        "--build", f"x86-64={libs['base']}")
    assert code == 0 and len(out.splitlines()) == 2
    assert out.splitlines()[0].startswith(f"published {NAME} 1.0.0 x86_64-x86-64-v3 sha256:")
    code, out, _ = _cli(capsys, "list", "--source", root)
    assert code == 0 and out.splitlines()[0] == f"{NAME}: 2 builds"
    with serve(root) as (url, _):
        code, out, _ = _cli(capsys, "explain", NAME, "--source", url)
        assert code == 0 and out == hub.select(NAME, source=url).table() + "\n"
        code, out, _ = _cli(capsys, "lock", NAME, "--source", url, "-o", tmp_path / "hub.lock")
        locked = hub.read_lock(tmp_path / "hub.lock")[NAME]
        assert code == 0 and out == (f"locked {NAME} 1.0.0 {locked.variant} sha256:{locked.sha256} from {url}\n")
        code, out, _ = _cli(capsys, "fetch", "--lock", tmp_path / "hub.lock", "--cache", tmp_path / "c")
        path = tmp_path / "c" / "sha256" / locked.sha256 / "hubaxpy.so"
        assert code == 0 and out == f"{NAME} 1.0.0 {locked.variant} sha256:{locked.sha256} {path}\n"
    code, out, _ = _cli(capsys, "explain", f"{NAME}==1.0.0", "--lock", tmp_path / "hub.lock")
    assert code == 0 and "chosen: the only build that runs here" in out
    code, out, err = _cli(capsys, "explain", f"{NAME}==9.0", "--source", root)
    assert code == 1 and out.count("rejected: version 1.0.0, asked for 9.0") == 2
    code, out, err = _cli(capsys, "publish", root, NAME, "1.0.0", "--build", "nonsense")
    assert code == 2 and err == "tensorplug hub publish: --build: expected ISA=PATH, got 'nonsense'\n"
    code, out, err = _cli(capsys, "fetch", "tp-tests/none", "--source", root)
    assert code == 1 and err.startswith("tensorplug hub fetch: hub: no build of tp-tests/none runs here:\n")
