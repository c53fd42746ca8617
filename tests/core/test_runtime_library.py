"""Runtime libraries (`tensorplug.load_library`): a library that exports no kernel but
registers global functions and state at static initialization, used from Python and from a
second library's C++ and C code. Every library is compiled by a real compiler run."""

import subprocess
import sys
import textwrap

import pytest

import tensorplug
from tensorplug import cpp

# Library A: the runtime of a made-up language. State lives in the library; its global
# functions are the only way in. The constructor counter shows static init runs once.
RUNTIME = r"""
#include <tensorplug/tensorplug.h>
#include <atomic>
#include <string>
namespace {
std::atomic<int64_t> g_state{100};
std::atomic<int64_t> g_inits{0};
const bool g_counted = (++g_inits, true);
}
TENSORPLUG_REGISTER_GLOBAL("mylang.get_state", [] { return g_state.load(); });
TENSORPLUG_REGISTER_GLOBAL("mylang.add_state", [](int64_t d) { return g_state += d; }, "delta");
TENSORPLUG_REGISTER_GLOBAL("mylang.inits", [] { return g_inits.load(); });
TENSORPLUG_REGISTER_GLOBAL("mylang.describe", [](std::string who) { return "mylang runtime, asked by " + who; },
                           "who");
extern "C" __attribute__((visibility("default"))) int64_t mylang_version(void) { return 7; }
"""

# Library B, C++: a kernel that calls the runtime through the registry.
CXX_KERNEL = r"""
#include <tensorplug/tensorplug.h>
int64_t state_plus(int64_t x) {
  tensorplug::Function get = tensorplug::Function::GetGlobalRequired("mylang.get_state");
  return get().cast<int64_t>() + x;
}
TENSORPLUG_EXPORT(state_plus, state_plus, "x");
"""

# Library B, plain C: TPGlobalFuncGet + TPFunctionCall.
C_KERNEL = r"""
#include <tensorplug/c_api.h>
TP_EXPORT int __tensorplug_c_state_times(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  TPFunctionHandle get = NULL;
  TPAny state;
  int rc;
  (void)self;
  if (nargs != 1 || args[0].type_index != kTPInt) {
    TPErrorSet("TypeError", "c_state_times() takes one int");
    return -1;
  }
  if (TPGlobalFuncGet("mylang.get_state", &get) != 0) return -1;
  if (get == NULL) {
    TPErrorSet("KeyError", "c_state_times: global function 'mylang.get_state' is not registered");
    return -1;
  }
  rc = TPFunctionCall(get, NULL, 0, &state);
  TPFunctionRelease(get);
  if (rc != 0) return -1;
  if (state.type_index != kTPInt) {
    TPAnyRelease(&state);
    TPErrorSet("TypeError", "c_state_times: mylang.get_state did not return an int");
    return -1;
  }
  result->type_index = kTPInt;
  result->flags = 0;
  result->v_int64 = state.v_int64 * args[0].v_int64;
  return 0;
}
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runtime_library")
    return {
        "runtime": cpp.build("mylang_runtime", [_write(tmp, "runtime.cc", RUNTIME)]),
        "cxx": cpp.build("mylang_cxx_kernel", [_write(tmp, "cxx_kernel.cc", CXX_KERNEL)]),
        "c": cpp.build("mylang_c_kernel", [_write(tmp, "c_kernel.c", C_KERNEL)]),
    }


def test_load_module_refuses_a_runtime_library_and_names_load_library(libraries):
    # Subprocess: the refused library must not have run (registered its functions).
    script = textwrap.dedent(f"""
        import tensorplug
        try:
            tensorplug.load_module({libraries['runtime']!r})
        except ValueError as exc:
            print(exc)
        print("mylang.get_state" in tensorplug.list_global_func_names())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"{libraries['runtime']} exports no tensorplug function (no symbol starts with '__tensorplug_'); a runtime "
        "library that only registers global functions loads with tensorplug.load_library",
        "False"]


def test_two_libraries_share_the_runtime_state(libraries):
    runtime = tensorplug.load_library(libraries["runtime"])
    assert isinstance(runtime, tensorplug.Module) and runtime.functions == ()
    get_state = tensorplug.get_global_func("mylang.get_state")
    base = get_state()
    assert tensorplug.get_global_func("mylang.describe")("python") == "mylang runtime, asked by python"

    cxx = tensorplug.load_module(libraries["cxx"])
    c = tensorplug.load_module(libraries["c"])
    assert cxx.state_plus(1) == base + 1
    assert c.c_state_times(2) == base * 2
    # State changed through the registry is what both kernels see.
    assert tensorplug.get_global_func("mylang.add_state")(5) == base + 5
    assert cxx.state_plus(0) == c.c_state_times(1) == get_state() == base + 5
    tensorplug.get_global_func("mylang.add_state")(-5)

    # Loading again: a new Module, the same library, static initialization not repeated.
    again = tensorplug.load_library(libraries["runtime"])
    assert again is not runtime
    assert tensorplug.get_global_func("mylang.inits")() == 1


def test_c_kernel_reports_a_missing_runtime(libraries):
    # Subprocess: this interpreter may already have the runtime loaded (and registered).
    script = textwrap.dedent(f"""
        import tensorplug
        c = tensorplug.load_module({libraries['c']!r})
        try:
            c.c_state_times(2)
        except KeyError as exc:
            print("KeyError", exc)
        tensorplug.load_library({libraries['runtime']!r})
        print("after load_library", c.c_state_times(2))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "KeyError \"c_state_times: global function 'mylang.get_state' is not registered\"",
        "after load_library 200"]


def test_global_symbols_resolve_references_of_later_libraries(libraries, tmp_path):
    # A kernel calling mylang_version() directly, linked without the runtime (as generated
    # code expecting its runtime in the process would be): dlopen needs the runtime's
    # symbols global. Subprocess: what is global in a process cannot be undone.
    user = tmp_path / "libversion_user.so"
    (tmp_path / "user.c").write_text(
        "#include <tensorplug/c_api.h>\n"
        "long long mylang_version(void);\n"
        "TP_EXPORT int __tensorplug_version(void* s, const TPAny* a, int32_t n, TPAny* r) {\n"
        "  (void)s; (void)a; (void)n;\n"
        "  r->type_index = kTPInt; r->flags = 0; r->v_int64 = mylang_version(); return 0;\n"
        "}\n")
    subprocess.run(["cc", "-std=c11", "-shared", "-fPIC", f"-I{cpp.include_dir()}", str(tmp_path / "user.c"),
                    "-o", str(user), f"-L{cpp.lib_dir()}", "-ltensorplug"], check=True)
    script = textwrap.dedent(f"""
        import tensorplug
        tensorplug.load_library({libraries['runtime']!r})
        try:
            tensorplug.load_module({str(user)!r})
        except ValueError as exc:
            print("local:", "undefined symbol: mylang_version" in str(exc))
        tensorplug.load_library({libraries['runtime']!r}, global_symbols=True)
        print("global:", tensorplug.load_module({str(user)!r}).version())
        print("inits:", tensorplug.get_global_func("mylang.inits")())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["local: True", "global: 7", "inits: 1"]


def test_load_library_checks_like_load_module(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        tensorplug.load_library(tmp_path / "missing.so")
    (tmp_path / "not_elf.so").write_text("hello")
    with pytest.raises(ValueError, match="not a loadable shared library: not a 64-bit ELF shared library"):
        tensorplug.load_library(tmp_path / "not_elf.so")


# The runtime pattern of the kernel-library guides: the runtime keeps its state and hands
# out a `void*` to it through a global function registered at static initialization; other
# libraries' kernels take that pointer back, or fetch it themselves through the registry.
STATE_RUNTIME = r"""
#include <tensorplug/tensorplug.h>
namespace mylang {
struct State {  // the layout the runtime publishes to its kernels
  int64_t value;
  int64_t calls;
};
}  // namespace mylang
static void* GetState() {
  static mylang::State state{100, 0};
  return &state;
}
TENSORPLUG_REGISTER_GLOBAL("mylang.state", GetState);
TENSORPLUG_REGISTER_GLOBAL("mylang.set_value", [](void* state, int64_t value) {
  static_cast<mylang::State*>(state)->value = value;
}, "state", "value");
"""

STATE_KERNELS = r"""
#include <tensorplug/tensorplug.h>
namespace mylang {
struct State {
  int64_t value;
  int64_t calls;
};
}  // namespace mylang
namespace {
mylang::State* AsState(void* state) { return static_cast<mylang::State*>(state); }
// The state handed in by the caller.
int64_t StateValue(void* state) {
  ++AsState(state)->calls;
  return AsState(state)->value;
}
// The state fetched through the registry, in C++.
void* StateFromRegistry() { return tensorplug::Function::GetGlobalRequired("mylang.state")().cast<void*>(); }
int64_t ValueFromRegistry() { return AsState(StateFromRegistry())->value; }
int64_t Calls(void* state) { return AsState(state)->calls; }
}  // namespace
TENSORPLUG_EXPORT(state_value, StateValue, "state");
TENSORPLUG_EXPORT(state_from_registry, StateFromRegistry);
TENSORPLUG_EXPORT(value_from_registry, ValueFromRegistry);
TENSORPLUG_EXPORT(calls, Calls, "state");
"""

# The same from plain C: the global function's result is a kTPOpaquePtr.
STATE_C_KERNEL = r"""
#include <tensorplug/c_api.h>
TP_EXPORT int __tensorplug_c_state_value(void* self, const TPAny* args, int32_t nargs, TPAny* result) {
  TPFunctionHandle get = NULL;
  TPAny state;
  int rc;
  (void)self;
  (void)args;
  (void)nargs;
  if (TPGlobalFuncGet("mylang.state", &get) != 0) return -1;
  if (get == NULL) {
    TPErrorSet("KeyError", "c_state_value: global function 'mylang.state' is not registered");
    return -1;
  }
  rc = TPFunctionCall(get, NULL, 0, &state);
  TPFunctionRelease(get);
  if (rc != 0) return -1;
  if (state.type_index != kTPOpaquePtr) {
    TPAnyRelease(&state);
    TPErrorSet("TypeError", "c_state_value: mylang.state did not return a pointer");
    return -1;
  }
  result->type_index = kTPInt;
  result->flags = 0;
  result->v_int64 = *(const int64_t*)state.v_ptr;  /* State.value comes first */
  return 0;
}
"""


def test_runtime_state_reaches_python_and_other_libraries(tmp_path):
    runtime = cpp.build("mylang_state_runtime", [_write(tmp_path, "state_runtime.cc", STATE_RUNTIME)])
    kernels = cpp.build("mylang_state_kernels", [_write(tmp_path, "state_kernels.cc", STATE_KERNELS)])
    c_kernel = cpp.build("mylang_state_c_kernel", [_write(tmp_path, "state_c_kernel.c", STATE_C_KERNEL)])
    tensorplug.load_library(runtime)
    get_state = tensorplug.get_global_func("mylang.state")
    assert get_state.signature_text == "->handle"

    # Python: a non-owning, untyped handle to the runtime's static state.
    state = get_state()
    assert type(state) is tensorplug.Handle
    assert (state.type_name, state.owning) == (None, False)
    assert repr(state) == f"<tensorplug.Handle void* at {state.address:#x}, non-owning>"
    assert get_state() == state  # the same state each time

    # Passed back into another library's kernel, and into the runtime's own functions.
    mod = tensorplug.load_module(kernels)
    assert mod.state_value(state) == 100
    tensorplug.get_global_func("mylang.set_value")(state, 42)
    assert mod.state_value(state) == 42 and mod.calls(state) == 2

    # From the other library's C++ (and C) code, through the registry.
    assert mod.value_from_registry() == 42
    assert mod.state_from_registry() == state
    assert tensorplug.load_module(c_kernel).c_state_value() == 42
