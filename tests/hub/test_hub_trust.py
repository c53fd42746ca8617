"""The hub and the build caches as an attacker or an unlucky operator meets them (issue 38):
files swapped between check and load, caches another user can write, servers that redirect,
drip or lie, malformed indexes and locks, concurrent publishers, signed sites and vendoring.
Builds and layouts come from tests/hub/test_hub.py's fixtures; servers listen on 127.0.0.1 only.

Over 500 lines: one feature, what the hub trusts, whose attacks share these fixtures."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from test_hub import NAME, SOURCE, _build, libs, layout, marker, private_cache, serve  # noqa: F401 (fixtures)

from tensorplug import cpp, hub  # noqa: E402
from tensorplug._verified import UnsafeDirectoryError  # noqa: E402
from tensorplug.hub._sources import DirectorySource, HttpSource  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def evil(libs, tmp_path_factory):
    """A valid library of this ABI with the same functions, whose load marks 'evil'."""
    work = Path(libs["base"]).parent.parent
    return _build(work, "evil", "1.0.0", "x86-64")


def _hub_cli(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "tensorplug", "hub", *map(str, argv)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


# ------------------------------------------------------- verify and load in one step ----
def test_a_file_swapped_into_the_cache_while_loading_never_runs(layout, evil, marker, tmp_path):
    # Each attempt loads from a fresh cache path (so the loader's "changed on disk" guard of
    # a path already loaded plays no part) while a thread swaps an evil library and the
    # genuine one at that path as fast as it can. Every load is the genuine build or an
    # IntegrityError; the evil library's constructor never runs.
    chosen = hub.select(NAME, source=layout).chosen
    genuine = hub.fetch(NAME, source=layout, cache=tmp_path / "first")
    outcomes = {"loaded": 0, "refused": 0}
    for attempt in range(60):
        cache = tmp_path / f"cache{attempt}"
        path = hub.fetch(NAME, source=layout, cache=cache)
        stop = threading.Event()

        def swap(path=path, stop=stop):
            spare = path.with_name("spare")
            while not stop.is_set():
                for library in (evil, genuine):
                    shutil.copyfile(library, spare)
                    os.replace(spare, path)

        swapper = threading.Thread(target=swap, daemon=True)
        swapper.start()
        try:
            module = hub.load(NAME, source=layout, cache=cache)
            assert module.isa() == chosen.isa and module.path == str(path)
            outcomes["loaded"] += 1
        except hub.IntegrityError as exc:
            assert "refused, nothing of it was loaded" in str(exc)
            outcomes["refused"] += 1
        finally:
            stop.set()
            swapper.join()
    assert "evil" not in (marker.read_text() if marker.exists() else "")
    assert outcomes["loaded"] > 0, outcomes


def test_a_cache_entry_recreated_with_the_same_bytes_keeps_loading(layout, tmp_path):
    # Four processes doing their first fetch into one cache re-create the entry with the same
    # bytes (a new file each time); a running process keeps loading it. A real change to
    # other bytes is never loaded: the entry is fetched again from its source.
    cache = tmp_path / "cache"
    first = hub.load(NAME, source=layout, cache=cache)
    path = Path(first.path)
    for _ in range(20):
        data = path.read_bytes()
        path.unlink()
        path.write_bytes(data)
        again = hub.load(NAME, source=layout, cache=cache)
        assert again.isa() == first.isa()
    path.unlink()
    path.write_bytes(b"\x7fELF not the build")
    assert hub.load(NAME, source=layout, cache=cache).isa() == first.isa()
    assert path.read_bytes() == data


def test_the_loader_maps_the_descriptor_the_check_read(layout, tmp_path, evil, marker):
    # What the loader opens is the verified descriptor's file: a file renamed over the path
    # right after the check does not change what is loaded.
    import tensorplug
    from tensorplug._verified import open_verified

    build = hub.select(NAME, source=layout).chosen
    path = hub.fetch(NAME, source=layout, cache=tmp_path / "c")
    fd_path = open_verified(path, build.sha256, str(path))
    os.replace(shutil.copyfile(evil, path.with_name("x")), path)
    assert tensorplug.load_module(fd_path).isa() == build.isa
    assert "evil" not in (marker.read_text() if marker.exists() else "")


# ------------------------------------------------------------- caches you own ----
@pytest.mark.parametrize("mode", [0o777, 0o770, 0o757])
def test_a_cache_writable_by_others_is_refused(tmp_path, monkeypatch, mode):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(mode)
    monkeypatch.setenv("TENSORPLUG_CACHE_DIR", str(shared))
    with pytest.raises(UnsafeDirectoryError) as info:
        cpp.cache_dir()
    assert str(info.value).startswith(f"tensorplug cache directory (TENSORPLUG_CACHE_DIR) {shared} has mode "
                                      f"{mode:04o}, writable by ")
    assert f"chmod 700 {shared}" in str(info.value)
    with pytest.raises(PermissionError, match="writable by"):
        cpp.load_inline("never_built", "int64_t one() { return 1; }", functions=["one"])
    assert not any(shared.iterdir())


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_cache_owned_by_another_user_is_refused(tmp_path, monkeypatch, layout):
    other = tmp_path / "other"
    other.mkdir(mode=0o700)
    os.chown(other, 65534, 65534)
    monkeypatch.setenv("TENSORPLUG_CACHE_DIR", str(other))
    with pytest.raises(UnsafeDirectoryError, match=r"is owned by uid 65534, not by this user \(uid 0\)"):
        cpp.cache_dir()
    with pytest.raises(UnsafeDirectoryError, match="hub cache directory .* is owned by uid 65534"):
        hub.fetch(NAME, source=layout, cache=other)


def test_a_new_cache_is_created_private(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORPLUG_CACHE_DIR", str(tmp_path / "new" / "cache"))
    old = os.umask(0o002)  # a permissive umask: the cache is 0700 all the same
    try:
        assert cpp.cache_dir() == tmp_path / "new" / "cache"
    finally:
        os.umask(old)
    assert (tmp_path / "new" / "cache").stat().st_mode & 0o777 == 0o700


def test_a_built_library_that_is_not_the_one_built_is_built_again(tmp_path, evil):
    # A truncated library (a full disk, a killed build) or another library at the path is not
    # the file the stamp recorded: build() builds it again, load() loads the rebuilt one.
    source = tmp_path / "k.cc"
    source.write_text('#include <tensorplug/tensorplug.h>\nint64_t seven() { return 7; }\n'
                      'TENSORPLUG_EXPORT(seven, seven);\n')
    out = tmp_path / "out"
    path = Path(cpp.build("stamped", [source], build_directory=out))
    built = path.stat().st_mtime_ns
    truncated = path.with_name("truncated")
    truncated.write_bytes(path.read_bytes()[:4096])
    os.replace(truncated, path)
    assert cpp.load("stamped", [source], build_directory=out).seven() == 7
    assert path.stat().st_mtime_ns != built
    os.replace(shutil.copyfile(evil, path.with_name("other")), path)  # another valid library
    assert cpp.load("stamped", [source], build_directory=out).seven() == 7
    assert json.loads((out / "stamped.so.stamp").read_text())["library"] == hub_digest(path)


def hub_digest(path) -> str:
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


_BRIDGE_CHECK = """
import logging, torch, tensorplug
from tensorplug_adapters.torch import bridge as torch_bridge
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
kernels = tensorplug.cpp.load_inline("bridged", "tensorplug::Tensor twice(tensorplug::TensorView x) { "
    "auto out = tensorplug::Tensor::FromEnvAlloc(x.shape(), x.dtype(), x.device()); "
    "for (int64_t i = 0; i < x.numel(); ++i) out.mutable_data_ptr<float>()[i] = 2 * x.data_ptr<float>()[i]; "
    "return out; }", functions=["twice"])
twice = tensorplug.op("tptrust::twice", kernels.twice, returns=tensorplug.like("x"))
print(twice(torch.arange(3.0)).tolist(), torch_bridge.attached())
"""


def _bridge_run(cache: Path):
    done = subprocess.run([sys.executable, "-c", _BRIDGE_CHECK], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TENSORPLUG_CACHE_DIR": str(cache), "TENSORPLUG_TORCH_BRIDGE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_a_damaged_torch_bridge_is_rebuilt_or_left_never_a_crash(tmp_path, evil):
    pytest.importorskip("torch", reason="torch not installed")
    if shutil.which("c++") is None:
        pytest.skip("no C++ compiler on PATH (c++)")
    cache = tmp_path / "cache"
    built = sorted(cpp.cache_dir().glob("tensorplug_torch_bridge_*"))  # this run's bridge, when built already
    if built:
        cache.mkdir(mode=0o700)
        shutil.copytree(built[-1], cache / built[-1].name)
    else:
        assert _bridge_run(cache).stdout.splitlines() == ["[0.0, 2.0, 4.0] True"]
    [bridge] = cache.glob("tensorplug_torch_bridge_*/tensorplug_torch_bridge.so")
    truncated = bridge.with_name("truncated")
    truncated.write_bytes(bridge.read_bytes()[:10000])
    os.replace(truncated, bridge)  # truncated: SIGBUS at the first op of every process on main
    assert _bridge_run(cache).stdout.splitlines() == ["[0.0, 2.0, 4.0] True"]
    # Some other valid library, which its stamp records as the build (only this user could
    # do it; another library without the stamp is built again, as the test above shows): no
    # tp_torch_bridge_init, so the ops keep the stable kernels and the log says why.
    stamp = bridge.with_name(bridge.name + ".stamp")
    os.replace(shutil.copyfile(evil, bridge.with_name("other")), bridge)
    record = json.loads(stamp.read_text())
    stamp.write_text(json.dumps({**record, "library": hub_digest(bridge)}))
    done = _bridge_run(cache)
    assert done.stdout.splitlines() == ["[0.0, 2.0, 4.0] False"]
    assert "the compiled torch bridge could not be built or loaded" in done.stderr
    assert "tp_torch_bridge_init" in done.stderr


@pytest.mark.parametrize("value, on", [("0", False), ("false", False), ("OFF", False), ("No", False), (" 0", False),
                                       ("1", True), ("TRUE", True), ("on", True), ("yes", True), ("", True)])
def test_the_bridge_switch_reads_every_spelling(monkeypatch, caplog, value, on):
    from tensorplug_adapters.torch import bridge as torch_bridge

    monkeypatch.setenv("TENSORPLUG_TORCH_BRIDGE", value)
    with caplog.at_level(logging.WARNING, logger="tensorplug"):
        assert torch_bridge.wanted() is on
    assert caplog.records == []


def test_an_unknown_bridge_switch_is_refused_with_a_warning(monkeypatch, caplog):
    from tensorplug_adapters.torch import bridge as torch_bridge

    monkeypatch.setenv("TENSORPLUG_TORCH_BRIDGE", "maybe")
    with caplog.at_level(logging.WARNING, logger="tensorplug"):
        assert torch_bridge.wanted() is True
    assert [r.getMessage() for r in caplog.records] == [
        "tensorplug: TENSORPLUG_TORCH_BRIDGE='maybe' is not one of 0/1, false/true, off/on, no/yes; the compiled "
        "torch bridge stays on (the default)"]


# ------------------------------------------------------------------ transport ----
@contextlib.contextmanager
def _raw_server(answer):
    """A TCP server on 127.0.0.1 whose every connection is handed to ``answer(conn)``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    stop = threading.Event()

    def run():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=answer, args=(conn, stop), daemon=True).start()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def _drip(conn, stop):
    with conn:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        for _ in range(200):  # bounded: 200 bytes, one each 0.1 s
            if stop.is_set():
                return
            try:
                conn.sendall(b" ")
            except OSError:
                return
            time.sleep(0.1)


def test_a_dripping_server_cannot_stretch_a_request_past_its_deadline():
    with _raw_server(_drip) as url:
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"took longer than its 1 s deadline"):
            hub.select(NAME, source=url, timeout=1)
        assert time.monotonic() - start < 3
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"one request to hub source .* took longer than its 1\.5 s"):
            hub.select(NAME, source=HttpSource(url, timeout=1.5))
        assert time.monotonic() - start < 3.5


def _tls_files(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def test_an_https_source_is_never_redirected_to_http(tmp_path, layout, monkeypatch):
    import http.server
    import ssl

    pytest.importorskip("cryptography", reason="cryptography not installed")
    cert, key = _tls_files(tmp_path)
    with serve(layout) as (plain_url, plain_requests):
        class Redirect(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(301)
                self.send_header("Location", plain_url + self.path.lstrip("/"))
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts this test's certificate
        url = f"https://127.0.0.1:{server.server_address[1]}/"
        try:
            with pytest.raises(OSError, match=r"redirected to http://127\.0\.0\.1:\d+/.*which would leave https: "
                                              r"refused"):
                hub.load(NAME, source=url)
        finally:
            server.shutdown()
            server.server_close()
        assert plain_requests == []


def test_a_huge_index_is_refused_without_being_read_whole(tmp_path):
    root = tmp_path / "site"
    (root / NAME).mkdir(parents=True)
    (root / NAME / "builds.json").write_bytes(b" " * ((16 << 20) + 10))
    with pytest.raises(hub.IntegrityError, match=r"builds.json is larger than 16777216 bytes"):
        hub.select(NAME, source=root)


# ------------------------------------------------------- malformed indexes and locks ----
def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_a_deeply_nested_index_is_the_hubs_own_error(tmp_path):
    root = tmp_path / "site"
    (root / NAME).mkdir(parents=True)
    (root / NAME / "builds.json").write_text(_nested(200_000))
    (root / "tensorplug-hub.json").write_text(_nested(200_000))
    with pytest.raises(hub.IntegrityError, match="builds.json is not JSON: nested too deeply"):
        hub.select(NAME, source=root)
    with pytest.raises(hub.IntegrityError, match="tensorplug-hub.json is not JSON: nested too deeply"):
        hub.libraries(root)
    lock = tmp_path / "deep.lock"
    lock.write_text(_nested(200_000))
    with pytest.raises(hub.IntegrityError, match="deep.lock is not JSON: nested too deeply"):
        hub.read_lock(lock)
    for argv in (["list", "--source", root], ["explain", NAME, "--source", root], ["fetch", "--lock", lock]):
        done = _hub_cli(*argv)
        assert done.returncode == 1 and "nested too deeply" in done.stderr
        assert "Traceback" not in done.stderr


def test_a_lock_entry_must_lock_the_library_its_key_names(tmp_path, layout):
    hub.lock(tmp_path / "k.lock", [NAME], source=layout)
    data = json.loads((tmp_path / "k.lock").read_text())
    entry = data["libraries"][NAME]
    data["libraries"] = {"tp-tests/other": entry}
    (tmp_path / "bad.lock").write_text(json.dumps(data))
    with pytest.raises(hub.IntegrityError, match=r"the entry of 'tp-tests/other' locks a build of 'tp-tests/axpy'"):
        hub.load("tp-tests/other", lock=tmp_path / "bad.lock")
    for bad in ("../..", "/abs/name", "tp-tests/../../etc"):
        data["libraries"] = {bad: {**entry, "name": bad}}
        (tmp_path / "bad.lock").write_text(json.dumps(data))
        with pytest.raises(hub.IntegrityError):
            hub.read_lock(tmp_path / "bad.lock")


@pytest.mark.parametrize("bad", ["../..", "/abs/lib", "a/../../b", "..", "org/name/extra"])
def test_a_library_name_in_a_directory_listing_never_leaves_the_root(tmp_path, bad):
    root = tmp_path / "site"
    root.mkdir()
    (root / "tensorplug-hub.json").write_text(json.dumps({"format": "tensorplug-hub/1", "libraries": [bad]}))
    # What a path leaving the root would find: an index outside it.
    (tmp_path / "builds.json").write_text("{}")
    with pytest.raises(hub.IntegrityError, match=r"expected library names 'org/name', got"):
        hub.libraries(root)
    with pytest.raises(ValueError, match="expected a library name 'org/name'"):
        DirectorySource(root).builds(bad)


def test_every_malformed_lock_is_an_integrity_error(tmp_path):
    cases = ["not json", "[]", '{"format": "tensorplug-hub-lock/1"}', '{"format": "tensorplug-hub-lock/1", '
             '"libraries": {"a/b": 3}}', '{"format": "tensorplug-hub-lock/1", "libraries": {"a/b": {"source": "x"}}}']
    for i, text in enumerate(cases):
        path = tmp_path / f"{i}.lock"
        path.write_text(text)
        with pytest.raises(hub.IntegrityError):
            hub.read_lock(path)


# ------------------------------------------------------------------ concurrency ----
_PUBLISH = """
import sys
from tensorplug import hub
hub.publish(sys.argv[1], sys.argv[2], sys.argv[3], {"x86-64": sys.argv[4]})
"""


def test_eight_concurrent_publishers_lose_nothing(tmp_path, libs):
    root = tmp_path / "site"
    procs = [subprocess.Popen([sys.executable, "-c", _PUBLISH, str(root), NAME, f"1.0.{i}", libs["base"]],
                              stderr=subprocess.PIPE, text=True) for i in range(8)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    versions = sorted(b.version for b in hub.libraries(root)[NAME])
    assert versions == [f"1.0.{i}" for i in range(8)]


# ------------------------------------------------------------------ selection ----
def test_one_file_published_as_a_cpu_and_a_cuda_build_keeps_both(tmp_path, libs):
    root = tmp_path / "site"
    hub.publish(root, NAME, "1.0.0", {"x86-64-v3": libs["v3"], "x86-64": libs["base"]})
    hub.publish(root, NAME, "1.0.0", {"x86-64-v3": libs["v3"]}, cuda="12.4", gpu_archs=["sm_90"])
    builds = hub.libraries(root)[NAME]
    assert sorted(b.variant for b in builds) == ["x86_64-x86-64", "x86_64-x86-64-v3", "x86_64-x86-64-v3-cuda12.4"]
    base = hub.detect_machine(gpus=False)
    cpu_v3 = hub.Machine(**{**base.__dict__, "isa": "x86-64-v3", "cuda": None, "cuda_devices": ()})
    selection = hub.select(NAME, source=root, machine=cpu_v3)
    assert selection.chosen.variant == "x86_64-x86-64-v3"
    assert len(selection.candidates) == 3
    gpu = hub.Machine(**{**cpu_v3.__dict__, "cuda": "12.8", "cuda_devices": ("sm_90",)})
    assert hub.select(NAME, source=root, machine=gpu).chosen.variant == "x86_64-x86-64-v3-cuda12.4"


# --------------------------------------------------------------- signed sites ----
@pytest.fixture
def keys(tmp_path):
    pytest.importorskip("cryptography", reason="cryptography not installed (extra tensorplug[hub])")
    publisher = hub.generate_key(tmp_path / "publisher.key")
    stranger = hub.generate_key(tmp_path / "stranger.key")
    return {"publisher": publisher, "stranger": stranger, "key": tmp_path / "publisher.key",
            "stranger_key": tmp_path / "stranger.key"}


def test_keygen_writes_a_private_key_only_its_owner_reads(keys, tmp_path):
    assert (tmp_path / "publisher.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "publisher.key.pub").read_text().strip() == keys["publisher"]
    assert keys["publisher"].startswith("ed25519:") and keys["publisher"] != keys["stranger"]
    with pytest.raises(FileExistsError):
        hub.generate_key(tmp_path / "publisher.key")


def test_a_signed_site_loads_with_its_key_and_nothing_else_does(tmp_path, libs, keys, marker):
    signed, unsigned = tmp_path / "signed", tmp_path / "unsigned"
    hub.publish(signed, NAME, "1.0.0", {"x86-64": libs["base"]}, signing_key=keys["key"])
    hub.publish(unsigned, NAME, "1.0.0", {"x86-64": libs["base"]})
    assert hub.load(NAME, source=signed, trusted_keys=[keys["publisher"]]).isa() == "x86-64"
    assert hub.load(NAME, source=signed, trusted_keys=tmp_path / "publisher.key.pub").isa() == "x86-64"
    marker.unlink()
    with serve(unsigned) as (url, requests):
        with pytest.raises(hub.IntegrityError, match=r"builds.json is not signed .*refused before anything it "
                                                     r"lists is fetched"):
            hub.load(NAME, source=url, trusted_keys=[keys["publisher"]])
        assert not any(r.endswith(".so") for r in requests)
    with pytest.raises(hub.IntegrityError, match=r"is signed by ed25519:\S+, which is not a trusted key"):
        hub.load(NAME, source=signed, trusted_keys=[keys["stranger"]])
    index = signed / NAME / "builds.json"
    index.write_text(index.read_text().replace('"x86-64"', '"x86-64" '))  # changed after signing
    with pytest.raises(hub.IntegrityError, match="does not verify"):
        hub.load(NAME, source=signed, trusted_keys=[keys["publisher"]])
    assert not marker.exists()


def test_trusted_keys_come_from_the_environment(tmp_path, libs, keys, monkeypatch):
    unsigned = tmp_path / "unsigned"
    hub.publish(unsigned, NAME, "1.0.0", {"x86-64": libs["base"]})
    monkeypatch.setenv("TENSORPLUG_HUB_TRUSTED_KEYS", f"{keys['stranger']}, {tmp_path / 'publisher.key.pub'}")
    assert hub.trusted_keys() == (keys["stranger"], keys["publisher"])
    with pytest.raises(hub.IntegrityError, match="is not signed"):
        hub.select(NAME, source=unsigned)
    monkeypatch.setenv("TENSORPLUG_HUB_TRUSTED_KEYS", "ed25519:nonsense")
    with pytest.raises(ValueError, match="TENSORPLUG_HUB_TRUSTED_KEYS: expected a public key"):
        hub.select(NAME, source=unsigned)


def test_verify_and_vendor_a_signed_site_for_offline_use(tmp_path, libs, keys, marker):
    site = tmp_path / "site"
    hub.publish(site, NAME, "1.0.0", {"x86-64-v3": libs["v3"], "x86-64": libs["base"]}, signing_key=keys["key"])
    key_file = tmp_path / "publisher.key.pub"
    done = _hub_cli("verify", "--source", site, "--key", key_file, "--cache", tmp_path / "c")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 2 and all(line.startswith(f"ok {NAME} 1.0.0 ")
                                                       for line in done.stdout.splitlines())
    done = _hub_cli("verify", "--source", site, "--key", keys["stranger"], "--cache", tmp_path / "c")
    assert done.returncode == 1 and "which is not a trusted key" in done.stderr and "Traceback" not in done.stderr
    done = _hub_cli("verify", "--source", site, "--cache", tmp_path / "c", env={"TENSORPLUG_HUB_TRUSTED_KEYS": ""})
    assert done.returncode == 1 and "no trusted keys" in done.stderr
    with serve(site) as (url, _):
        hub.lock(tmp_path / "k.lock", [NAME], source=url, trusted_keys=[keys["publisher"]])
        done = _hub_cli("verify", "--lock", tmp_path / "k.lock", "--key", key_file, "--cache", tmp_path / "c")
        assert done.returncode == 0 and done.stdout.startswith(f"ok {NAME} 1.0.0"), done.stderr
        done = _hub_cli("vendor", tmp_path / "k.lock", tmp_path / "vendored", "--cache", tmp_path / "c2")
        assert done.returncode == 0, done.stderr
    # The server is gone: the vendored directory loads the locked build, its signature intact.
    locked = hub.read_lock(tmp_path / "k.lock")[NAME]
    assert sorted(p.name for p in (tmp_path / "vendored" / NAME).rglob("*") if p.is_file()) == \
        ["builds.json", "builds.json.sig", "hubaxpy.so"]
    module = hub.load(NAME, lock=tmp_path / "k.lock", source=tmp_path / "vendored", cache=tmp_path / "c3")
    assert module.isa() == locked.isa
    assert hub.select(NAME, source=tmp_path / "vendored", trusted_keys=[keys["publisher"]]).chosen is not None
    # A locked build its signed index does not list is refused by verify.
    other = tmp_path / "other"
    hub.publish(other, NAME, "1.0.0", {"x86-64": libs["v3_next"]}, signing_key=keys["key"])
    data = json.loads((tmp_path / "k.lock").read_text())
    data["libraries"][NAME]["source"] = str(other)
    (tmp_path / "moved.lock").write_text(json.dumps(data))
    with pytest.raises(hub.IntegrityError, match="is not in the signed index of"):
        hub.verify_source(lock=tmp_path / "moved.lock", trusted_keys=[keys["publisher"]], cache=tmp_path / "c4")
