"""Provider storage (tensorplug.storage, TPEnvStorage*, SetStorage/GetStorage): every value
kind, the atomic get-or-create raced by real threads (C++ and Python), CPU workspaces, and
values destroyed at erase and at process exit (subprocesses), including values whose
deleter lives in a dlopened kernel library and values holding Python objects."""

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import tensorplug
from tensorplug import cpp, storage

# C++: the typed calls, get-or-create raced by std::threads, the workspace.
CXX_STORAGE = r"""
#include <tensorplug/tensorplug.h>
#include <atomic>
#include <cstring>
#include <set>
#include <thread>
#include <vector>
namespace tp = tensorplug;

std::atomic<int64_t> g_creations{0};

// `threads` threads ask for `key` at once; returns (creations, distinct values seen).
std::tuple<int64_t, int64_t> race(std::string key, int64_t threads) {
  g_creations = 0;
  std::atomic<bool> go{false};
  std::vector<int64_t> seen(size_t(threads), -1);
  std::vector<std::thread> pool;
  for (int64_t i = 0; i < threads; ++i) {
    pool.emplace_back([&, i] {
      while (!go) std::this_thread::yield();
      seen[size_t(i)] = tp::GetOrCreateStorage(key.c_str(), [&] {
        int64_t n = ++g_creations;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // widen the race window
        return 1000 + n;
      }).cast<int64_t>();
    });
  }
  go = true;
  for (auto& t : pool) t.join();
  return {g_creations.load(), int64_t(std::set<int64_t>(seen.begin(), seen.end()).size())};
}
TENSORPLUG_EXPORT(race, race, "key", "threads");

void set_int(std::string key, int64_t v) { tp::SetStorage(key.c_str(), v); }
TENSORPLUG_EXPORT(set_int, set_int, "key", "value");
void set_str(std::string key, std::string v) { tp::SetStorage(key.c_str(), v); }
TENSORPLUG_EXPORT(set_str, set_str, "key", "value");
void set_tensor(std::string key, tp::Tensor t) { tp::SetStorage(key.c_str(), std::move(t)); }
TENSORPLUG_EXPORT(set_tensor, set_tensor, "key", "value");
void set_func(std::string key, tp::Function f) { tp::SetStorage(key.c_str(), std::move(f)); }
TENSORPLUG_EXPORT(set_func, set_func, "key", "value");
tp::Any get(std::string key) { return tp::GetStorage(key.c_str()); }
TENSORPLUG_EXPORT(get, get, "key");
bool contains(std::string key) { return tp::StorageContains(key.c_str()); }
TENSORPLUG_EXPORT(contains, contains, "key");
int64_t call_stored(std::string key, int64_t x) {
  return tp::GetStorage(key.c_str()).cast<tp::Function>()(x).cast<int64_t>();
}
TENSORPLUG_EXPORT(call_stored, call_stored, "key", "x");
int64_t recursive(std::string key) {
  return tp::GetOrCreateStorage(key.c_str(), [&] { return tp::GetStorage(key.c_str()).is_none()
      ? tp::GetOrCreateStorage(key.c_str(), [] { return int64_t{1}; }).cast<int64_t>() : int64_t{0}; }).cast<int64_t>();
}
TENSORPLUG_EXPORT(recursive, recursive, "key");

// Workspace: (address, all requested bytes zero); the caller's marks are written after.
std::tuple<int64_t, bool> workspace(int64_t nbytes) {
  auto* p = static_cast<unsigned char*>(tp::GetWorkspace(DLDevice{kDLCPU, 0}, size_t(nbytes)));
  bool zero = true;
  for (int64_t i = 0; i < nbytes; ++i) zero = zero && p[i] == 0;
  std::memset(p, 0xab, size_t(nbytes));  // dirty it: the next request must come back zeroed
  return {int64_t(reinterpret_cast<uintptr_t>(p)), zero};
}
TENSORPLUG_EXPORT(workspace, workspace, "nbytes");
"""

# C: the ABI calls themselves, with an opaque pointer whose deleter lives in this library
# and reads the library's state (a static array): it must run while the library is whole.
C_STORAGE = r"""
#define _POSIX_C_SOURCE 200809L
#include <tensorplug/c_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static char g_state[32] = "library state intact";
static void say(const char* what) {
  char line[128];
  int n = snprintf(line, sizeof line, "deleted %s: %s\n", what, g_state);
  if (write(1, line, (size_t)n) < 0) abort();
}
static void delete_at(void* p) { say((const char*)p); free(p); }
/* Python passes str arguments as borrowed C strings (kTPRawStr). */
static const char* str_of(const TPAny* a) {
  return a->type_index == kTPRawStr ? a->v_c_str : a->type_index == kTPStr ? a->v_str->data : NULL;
}
TP_EXPORT int __tensorplug_store_pointer(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  (void)self;
  if (nargs != 2 || !str_of(&args[0]) || !str_of(&args[1])) {
    TPErrorSet("TypeError", "store_pointer(key, label)");
    return -1;
  }
  char* label = strdup(str_of(&args[1]));
  TPAny value;
  value.type_index = kTPOpaquePtr;
  value.flags = 0;
  value.v_ptr = label;
  if (TPEnvStorageSetValue(str_of(&args[0]), &value, delete_at) != 0) return -1;
  result->type_index = kTPNone;
  return 0;
}
static int make_label(void* ctx, TPAny* value, TPStorageDeleter* deleter) {
  value->type_index = kTPRawStr;  /* copied by the storage */
  value->v_c_str = (const char*)ctx;
  *deleter = NULL;
  return 0;
}
TP_EXPORT int __tensorplug_c_get_or_create(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  (void)self;
  if (nargs != 1 || !str_of(&args[0])) {
    TPErrorSet("TypeError", "c_get_or_create(key)");
    return -1;
  }
  return TPEnvStorageGetOrCreate(str_of(&args[0]), make_label, (void*)"made in C", result);
}
TP_EXPORT int __tensorplug_set_refused(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  (void)self;
  (void)args;
  (void)nargs;
  TPAny value;
  value.type_index = kTPInt;
  value.flags = 0;
  value.v_int64 = 1;
  result->type_index = kTPNone;
  return TPEnvStorageSetValue("c.refused", &value, (TPStorageDeleter)free);
}
"""


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("storage")
    (tmp / "cxx_storage.cc").write_text(CXX_STORAGE)
    (tmp / "c_storage.c").write_text(C_STORAGE)
    return {"cxx": cpp.build("storage_cxx", [tmp / "cxx_storage.cc"]),
            "c": cpp.build("storage_c", [tmp / "c_storage.c"])}


@pytest.fixture(autouse=True)
def clean_keys():
    before = set(storage.keys())
    yield
    for key in set(storage.keys()) - before:
        storage.erase(key)


# --------------------------------------------------------------------- values ----
@pytest.mark.parametrize("value", [7, -2**63, 2.5, True, "text é"])
def test_scalars_and_strings_round_trip(value):
    storage.set("test.v", value)
    got = storage.get("test.v")
    assert got == value and type(got) is type(value)
    assert storage.contains("test.v") and "test.v" in storage.keys()
    storage.erase("test.v")
    assert not storage.contains("test.v")
    assert storage.get("test.v", None) is None


def test_missing_key_and_bad_arguments():
    with pytest.raises(KeyError, match=r"tensorplug.storage has no value under 'test.none'"):
        storage.get("test.none")
    with pytest.raises(TypeError, match=r"^storage.set\(\) argument 'key': expected a str, got int$"):
        storage.set(1, 2)
    with pytest.raises(TypeError, match=r"^storage.set\(\) argument 'value': None cannot be stored \(use storage.erase\)$"):
        storage.set("test.k", None)
    with pytest.raises(TypeError, match=r"^storage.get_or_create\(\) argument 'factory': expected a callable, got int$"):
        storage.get_or_create("test.k", 3)
    storage.erase("test.never-stored")  # no error


def test_python_objects_are_stored_as_themselves():
    obj = {"a": [1, 2]}
    storage.set("test.obj", obj)
    assert storage.get("test.obj") is obj
    pair = (1, "two")
    storage.set("test.pair", pair)
    assert storage.get("test.pair") is pair
    before = sys.getrefcount(obj)
    storage.erase("test.obj")
    assert sys.getrefcount(obj) == before - 1  # the storage's reference was released


def test_a_tensor_is_shared_and_outlives_its_erase(libs):
    array = np.arange(4.0)
    storage.set("test.t", array)
    tensor = storage.get("test.t")
    assert isinstance(tensor, tensorplug.Tensor)
    view = np.from_dlpack(tensor)
    array[0] = 42.0
    assert view[0] == 42.0  # the same memory
    storage.erase("test.t")
    del array
    assert view.tolist() == [42.0, 1.0, 2.0, 3.0]  # the reader keeps it alive


def test_cxx_typed_calls(libs):
    m = tensorplug.load_module(libs["cxx"])
    m.set_int("test.i", 11)
    m.set_str("test.s", "from C++")
    m.set_tensor("test.t", np.ones(3, dtype=np.float32))
    m.set_func("test.f", lambda x: x * 3)
    assert (storage.get("test.i"), storage.get("test.s")) == (11, "from C++")
    assert np.from_dlpack(storage.get("test.t")).tolist() == [1.0, 1.0, 1.0]
    assert m.call_stored("test.f", 5) == 15
    storage.set("test.py", 99)
    assert m.get("test.py") == 99 and m.contains("test.py") and not m.contains("test.none")
    assert m.get("test.none") is None


def test_c_abi_calls_and_refusals(libs):
    m = tensorplug.load_module(libs["c"])
    assert m.c_get_or_create("test.c") == "made in C"
    assert storage.get("test.c") == "made in C"
    with pytest.raises(TypeError, match=r"^TPEnvStorageSetValue: a deleter is only for an opaque pointer"):
        m.set_refused()
    assert not storage.contains("c.refused")


# -------------------------------------------------------------- get-or-create ----
def test_cxx_threads_racing_create_once(libs):
    m = tensorplug.load_module(libs["cxx"])
    assert m.race("test.race", 16) == (1, 1)
    assert storage.get("test.race") == 1001


def test_python_threads_racing_create_once():
    created = []

    def factory():
        created.append(threading.get_ident())
        time.sleep(0.05)  # the others arrive while this one creates
        return object()

    results = [None] * 12
    barrier = threading.Barrier(len(results))

    def worker(i):
        barrier.wait()
        results[i] = storage.get_or_create("test.pyrace", factory)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(created) == 1
    assert all(r is results[0] for r in results) and results[0] is storage.get("test.pyrace")


def test_a_failing_factory_stores_nothing_and_the_next_call_creates():
    class Boom(Exception):
        pass

    def fail():
        raise Boom("factory failed")

    with pytest.raises(Boom, match="^factory failed$"):
        storage.get_or_create("test.fail", fail)
    assert not storage.contains("test.fail")
    assert storage.get_or_create("test.fail", lambda: 5) == 5


def test_create_asking_for_its_own_key_fails(libs):
    m = tensorplug.load_module(libs["cxx"])
    with pytest.raises(RuntimeError, match=r"the value of 'test.self' is being created by this thread"):
        m.recursive("test.self")
    assert not storage.contains("test.self")


# ----------------------------------------------------------------- workspace ----
def test_cpu_workspace_is_zeroed_reused_while_it_fits_and_replaced(libs):
    m = tensorplug.load_module(libs["cxx"])
    address, zero = m.workspace(1000)
    assert zero
    again, zero = m.workspace(500)  # fits: the same buffer, zeroed again after the dirtying write
    assert again == address and zero
    bigger, zero = m.workspace(1 << 20)
    assert zero and bigger != 0
    assert m.workspace(1 << 20)[0] == bigger  # the bigger one is kept


def test_workspace_is_per_thread_on_the_cpu():
    here = tensorplug._core.workspace(1, 0, 64)
    there = []
    t = threading.Thread(target=lambda: there.append(tensorplug._core.workspace(1, 0, 64)))
    t.start()
    t.join()
    assert here != there[0]


def test_workspace_errors():
    with pytest.raises(ValueError, match=r"^TPEnvWorkspace: device type 7 has no workspace \(cpu and cuda do\)$"):
        tensorplug._core.workspace(7, 0, 16)
    with pytest.raises(MemoryError, match=r"^TPEnvWorkspace: cannot allocate 18446744073709551615 bytes on cpu$"):
        tensorplug._core.workspace(1, 0, 2**64 - 1)


def _has_cuda():
    try:
        tensorplug._core.workspace(2, 0, 16)
        return True
    except RuntimeError as exc:
        assert "no CUDA device" in str(exc)
        return False


def test_cuda_workspace():
    if not _has_cuda():
        pytest.skip("no CUDA device")
    first = tensorplug._core.workspace(2, 0, 4096)
    assert tensorplug._core.workspace(2, 0, 100) == first
    assert tensorplug._core.workspace(2, 0, 1 << 24) != 0


# ------------------------------------------------------------------ lifetime ----
def test_values_are_destroyed_at_erase_and_at_exit_without_crashing(libs):
    # A deleter in a dlopened library runs at erase and at exit, while the library's state
    # is intact; Python objects, tensors and functions still stored when the interpreter
    # finalizes are not touched after it (the process exits 0, silently).
    script = textwrap.dedent(f"""
        import numpy as np, tensorplug
        from tensorplug import storage
        m = tensorplug.load_module({libs['c']!r})
        m.store_pointer("lib.erased", "at erase")
        storage.erase("lib.erased")
        m.store_pointer("lib.kept", "at exit")
        storage.set("py.obj", {{"payload": [1, 2, 3]}})
        storage.set("py.tensor", np.arange(1000.0))
        storage.set("py.func", lambda x: x)
        cxx = tensorplug.load_module({libs['cxx']!r})
        cxx.set_tensor("cxx.tensor", np.ones(8))
        cxx.set_func("cxx.func", lambda x: x + 1)
        print("end of script", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["deleted at erase: library state intact", "end of script",
                                        "deleted at exit: library state intact"]
    assert proc.stderr == ""


def test_storage_used_by_a_thread_still_running_at_exit():
    # A daemon thread keeps storing while the interpreter shuts down.
    script = textwrap.dedent("""
        import threading
        from tensorplug import storage
        def spin():
            i = 0
            while True:
                storage.set("spin", i)
                i += 1
        threading.Thread(target=spin, daemon=True).start()
        import time; time.sleep(0.05)
        print("exiting", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (0, "exiting\n"), proc.stderr


# A deleter that unregisters from a registry with a real destructor: a function-local
# std::map, constructed after the value is stored (at the first track() call, and after the
# store of the library's static initializer), so its destructor was registered after the
# store's C exit handler and runs before it.
REGISTRY_LIBRARY = r"""
#include <tensorplug/tensorplug.h>
#include <cstdio>
#include <map>
#include <string>
namespace {
std::map<std::string, std::string>& Registry() {
  static std::map<std::string, std::string> registry;
  return registry;
}
void Unregister(void* p) {
  auto* key = static_cast<std::string*>(p);
  Registry().erase(*key);
  std::printf("unregistered %s, %zu left\n", key->c_str(), Registry().size());
  std::fflush(stdout);
  delete key;
}
// Stored while the library loads, before Registry() exists.
const bool stored_at_load = [] {
  TPEnvStorageSet("registry.at_load", new std::string("at_load"), Unregister);
  return true;
}();
}  // namespace
void track(std::string key) {
  TPEnvStorageSet(("registry." + key).c_str(), new std::string(key), Unregister);
  Registry()[key] = "tracked";  // first use: after the store
  Registry()["at_load"] = "tracked";
}
TENSORPLUG_EXPORT(track, track, "key");
"""


def test_deleters_run_before_the_static_destructors_they_use(tmp_path):
    (tmp_path / "registry.cc").write_text(REGISTRY_LIBRARY)
    path = cpp.build("registry_lib", [tmp_path / "registry.cc"], build_directory=tmp_path / "build")
    script = textwrap.dedent(f"""
        import tensorplug
        m = tensorplug.load_module({path!r})
        m.track("first")
        print("end of script", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (0, "")
    # Destroyed in key order, each while the registry is whole.
    assert proc.stdout.splitlines() == ["end of script", "unregistered at_load, 1 left", "unregistered first, 0 left"]
